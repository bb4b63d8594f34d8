#!/usr/bin/env bash
# The measured kernel tables the hardware presets name (hardware.kernels,
# docs/design.md §20), and any more given as GPU/ENGINE/VERSION, imported from AIConfigurator's package in .venv
# (scripts/install-deps.sh) and fitted, into build/kernels (or DIR), where
# acceptmoe looks beside its binary. Without the package it says so and
# leaves nothing: the presets then run on their analytic MoE terms, and
# each run's meta.json says so.
#   scripts/kernel-tables.sh [DIR [GPU/ENGINE/VERSION ...]]   e.g. build/kernels h200_sxm/vllm/0.24.0
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/kernels}
[ $# -gt 0 ] && shift
py=.venv/bin/python
tables=$({ sed -n 's/^kernels: *"\{0,1\}aic:\([^:]*\):\([^:]*\):\([^"]*\)"\{0,1\}.*/\1\/\2\/\3/p' workloads/hw/*.yaml
  printf '%s\n' "$@"; } | sed '/^$/d' | sort -u | paste -sd, -)
[ -n "$tables" ] || { echo "kernel-tables: no hardware preset names a table"; exit 0; }
if ! [ -x $py ] || ! $py -c "import aiconfigurator_core, pyarrow, numpy" 2>/dev/null; then
  echo "kernel-tables: no aiconfigurator-core in .venv (scripts/install-deps.sh): the presets keep their analytic MoE terms" >&2
  exit 0
fi
gpus=$(echo "$tables" | tr , '\n' | cut -d/ -f1 | sort -u | paste -sd, -)
$py scripts/aic-import.py -o "$out" --gpus "$gpus" --ops moe,gemm
$py scripts/fit_aic_moe.py "$out" --tables "$tables"
