#!/usr/bin/env bash
# Calibrates κ of the acceptance model (docs/design.md §7): the largest κ on a grid
# at which AcceptMoE's resident arm keeps τ within 0.5% of natural routing
# (the AcceptMoE paper saw τ ≈ 4.39 in both arms). Runs on a calibration
# workload (Qwen3-30B-A3B, RTX PRO 6000 presets, seed 11: not the evaluation
# workloads' seeds) and prints the τ ratio at each κ, then the pick.
# usage: scripts/calibrate-kappa.sh [BLOCKS]   (default 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
blocks=${1:-2000}
grid="0.05, 0.1, 0.12, 0.14, 0.15, 0.16, 0.17, 0.18, 0.19, 0.2, 0.3, 0.5, 1"
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
cat >"$t/kappa.yaml" <<YAML
name: calibrate-kappa
model: qwen3-30b-a3b
hardware: rtx-pro-6000
workload: {blocks: $blocks, seed: 11, tree: {depth: 5, top_k: 8, nodes: 64}, acceptance: {tau: 4.39}}
commitment: {calibrate: {blocks: 500, seed: 12}}
policies: [natural, {verifier: acceptmoe}]
sweep: {acceptance_model.kappa: [$grid]}
YAML
"${ACCEPTMOE:-build/acceptmoe}" run "$t/kappa.yaml" --out "$t/out" --quiet >/dev/null
awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}
  {k=$c["acceptance_model.kappa"]; tau[$c["policy"],k]=$c["tau_mean"]; if(!(k in seen)){seen[k]=1;ks[++n]=k}}
  END{print "kappa,tau_natural,tau_acceptmoe,ratio"; best="none";
      for(i=1;i<=n;i++){k=ks[i]; r=tau["acceptmoe",k]/tau["natural",k];
        printf "%s,%.4f,%.4f,%.4f\n",k,tau["natural",k],tau["acceptmoe",k],r; if(r>=0.995)best=k}
      print "kappa (largest with ratio >= 0.995): " best}' "$t/out/summary.csv"
