#!/usr/bin/env bash
# A revision's simulator against the working tree's, in one process,
# alternating: the way to tell a change of a few percent on this noisy
# machine (separate invocations swing by ±30%). Builds REV's libamoe_sim in
# a temporary worktree and this tree's in build/, prefixes their public
# names, links both into harness/bench/ab_driver.c and runs it.
#   scripts/ab.sh REV replay [POLICY [ROUNDS]]   (default acceptmoe, 12:
#                                                   a 400-block qwen3 trace each)
#   scripts/ab.sh REV generate [ROUNDS]          (default 40, 10 qwen3 blocks each)
# Each comparison runs twice, with the old code placed first in the program
# and then second. Exits 3 when the two give different results (a change
# of the model: both placements are still timed).
# Needs binutils (nm, objcopy; they come with gcc).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: scripts/ab.sh REV replay [POLICY [ROUNDS]] | scripts/ab.sh REV generate [ROUNDS]" >&2; exit 2; }
(( $# >= 2 )) || usage
rev=$1 mode=$2
case $mode in
  replay) policy=${3:-acceptmoe} rounds=${4:-12} ;;
  generate) rounds=${3:-40} ;;
  *) usage ;;
esac
git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "scripts/ab.sh: no revision '$rev'" >&2; exit 2; }
# the driver hands structs from this tree's headers to both copies
if ! git diff --quiet "$rev" -- sim/core/spec.h sim/engine/run.h sim/core/block.h sim/core/model.h; then
  echo "scripts/ab.sh: warning: $rev's struct headers differ from this tree's; the comparison may be invalid" >&2
fi
# amoe_source_next returned 1 for a block before it returned an amoe_status
old_block=0
git show "$rev:sim/workload/source.h" | grep -q '^int amoe_source_next' && old_block=1
tmp=$(mktemp -d)
cleanup() {
  git worktree remove --force "$tmp/old" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
git worktree add -q --detach "$tmp/old" "$rev"
echo "building $rev and the working tree..." >&2
cmake -S "$tmp/old" -B "$tmp/old/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/old/build" -j"$(nproc)" --target amoe_sim >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target amoe_sim amoe_harness acceptmoe >/dev/null
for v in b n; do
  lib=$tmp/old/build/sim/libamoe_sim.a
  [[ $v == n ]] && lib=$PWD/build/sim/libamoe_sim.a
  mkdir "$tmp/$v"
  (cd "$tmp/$v" && ar x "$lib")
  nm -g --defined-only "$tmp/$v"/*.o | awk -v p="$v" 'NF == 3 && $3 ~ /^amoe_/ {print $3, p "_" $3}' | sort -u >"$tmp/$v.syms"
  for f in "$tmp/$v"/*.o; do objcopy --redefine-syms="$tmp/$v.syms" "$f"; done
done
# Two programs, the old code placed first in one and second in the other:
# where a hot loop lands can matter by 30% (see docs/performance.md), and a
# difference that flips with the order is the placement, not the change.
# (A third, unprefixed copy serves the spec loader.)
for order in bn nb; do
  objs=("$tmp"/b/*.o "$tmp"/n/*.o)
  [[ $order == nb ]] && objs=("$tmp"/n/*.o "$tmp"/b/*.o)
  # shellcheck disable=SC2046 # (the linker flags split into words)
  cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -DAB_OLD_BLOCK="$old_block" -Isim/core -Isim/workload -Isim/route -Isim/policy -Isim/cost -Isim/arch -Isim/engine -Iharness harness/bench/ab_driver.c "${objs[@]}" \
    build/harness/libamoe_harness.a build/sim/libamoe_sim.a $(pkg-config --libs yaml-0.1 jansson) -lpthread -lm \
    -o "$tmp/ab_$order"
done
echo "old = $(git rev-parse --short=12 "$rev"), new = the working tree; old code placed first, then second" >&2
if [[ $mode == replay ]]; then
  cat >"$tmp/trace.yaml" <<'EOF'
name: ab
model: qwen3-30b-a3b
hardware: h200
workload: {source: synthetic, blocks: 400, seed: 1}
policies: [natural]
EOF
  build/acceptmoe gen "$tmp/trace.yaml" -o "$tmp/trace.amt" >"$tmp/gen.log" 2>&1 || { cat "$tmp/gen.log" >&2; exit 1; }
fi
rc=0
for order in bn nb; do
  if [[ $mode == replay ]]; then
    "$tmp/ab_$order" replay "$tmp/trace.amt" "$policy" "$rounds" || rc=$?
  else
    "$tmp/ab_$order" generate "$rounds" || rc=$?
  fi
  (( rc == 0 || rc == 3 )) || exit "$rc"
done
exit "$rc"
