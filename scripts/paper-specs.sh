#!/usr/bin/env bash
# Runs the specs that mirror the AcceptMoE and EcoSpec setups and stores
# their results in results/reference/<name>/ (docs/validation.md).
set -euo pipefail
cd "$(dirname "$0")/.."
for s in workloads/specs/acceptmoe-*.yaml workloads/specs/ecospec-*.yaml; do
  n=$(basename "$s" .yaml)
  echo "== $n"
  "${ACCEPTMOE:-build/acceptmoe}" run "$s" --out "results/reference/$n" --quiet
done
