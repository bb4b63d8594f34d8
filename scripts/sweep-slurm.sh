#!/usr/bin/env bash
# Runs a spec's sweep on a Slurm cluster: an `sbatch --array=0-(N-1)` job
# whose task I runs `acceptmoe run SPEC --shard I/N`, and a merge job that
# starts when every task has succeeded (afterok). Run it from a checkout that
# every node sees (a shared filesystem) with build/acceptmoe built (or the
# binary in ACCEPTMOE, an absolute path every node sees).
#   scripts/sweep-slurm.sh SPEC N [OUT] [-- SBATCH OPTIONS...]
# prints the two job ids; docs/sweeps.md says how it was tested.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/sweep-slurm.sh SPEC N [OUT] [-- SBATCH OPTIONS...]" >&2; exit 2; }
spec=$1 n=$2; shift 2
out="results/$(basename "$spec" .yaml)"
if [ $# -gt 0 ] && [ "$1" != -- ]; then out=$1; shift; fi
[ "${1:-}" = -- ] && shift
command -v sbatch >/dev/null || { echo "sweep-slurm.sh: needs Slurm's sbatch" >&2; exit 2; }
root=$(pwd) parts="$out.shards"
A=${ACCEPTMOE:-build/acceptmoe}
case $A in /*) ;; *) A="$root/$A" ;; esac
mkdir -p "$parts"
array=$(sbatch --parsable --array=0-$((n - 1)) --job-name=acceptmoe-shard --output="$parts/slurm-%a.log" "$@" \
  --wrap="cd '$root' && '$A' run '$spec' --shard \$SLURM_ARRAY_TASK_ID/$n --threads \${SLURM_CPUS_PER_TASK:-1} --out '$parts/'\$SLURM_ARRAY_TASK_ID --quiet")
merge=$(sbatch --parsable --dependency=afterok:"$array" --job-name=acceptmoe-merge --output="$parts/slurm-merge.log" "$@" \
  --wrap="cd '$root' && '$A' merge \$(seq -f '$parts/%g' 0 $((n - 1))) --out '$out'")
echo "array job $array ($n shards), merge job $merge -> $out/"
