#!/usr/bin/env bash
# Runs a spec's sweep in N shards on this machine with GNU parallel (Debian
# package `parallel`), then merges them: OUT ends up byte for byte what
# `acceptmoe run SPEC --out OUT` writes.
#   scripts/sweep-parallel.sh SPEC N [OUT] [-- RUN OPTIONS...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/sweep-parallel.sh SPEC N [OUT] [-- RUN OPTIONS...]" >&2; exit 2; }
spec=$1 n=$2; shift 2
out="results/$(basename "$spec" .yaml)"
if [ $# -gt 0 ] && [ "$1" != -- ]; then out=$1; shift; fi
[ "${1:-}" = -- ] && shift
command -v parallel >/dev/null || { echo "sweep-parallel.sh: needs GNU parallel (Debian package parallel)" >&2; exit 2; }
A=${ACCEPTMOE:-build/acceptmoe} # the binary (tests pass the one under test)
[ -x "$A" ] || { echo "sweep-parallel.sh: no $A: build first (scripts/test.sh) or set ACCEPTMOE" >&2; exit 2; }
parts=$(mktemp -d); trap 'rm -rf "$parts"' EXIT
# one generator thread per shard: the shards are the parallelism
seq 0 $((n - 1)) | parallel --will-cite --halt now,fail=1 -j "$n" \
  "$A" run "$spec" --shard {}/"$n" --threads 1 --out "$parts/{}" --quiet "$@" ">" /dev/null
"$A" merge "$parts"/* --out "$out"
echo "merged $n shards into $out/"
