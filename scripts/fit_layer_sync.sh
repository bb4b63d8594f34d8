#!/usr/bin/env bash
# Fits the sglang engine preset's layer_sync_per_peer_s to the two Qwen3-30B-A3B H100
# layouts whose plain decoding is measured at batch 1 (real-data
# batch/decode_vs_batch.csv: TP4 218.89 tok/s, TP2 222.47 tok/s, SGLang through
# bench_eagle3). The simulator's autoregressive row is linear in it: a pass on g GPUs
# pays (g − 1) · c per decoder layer, so one run at 0 per layout gives
#   t(c) = t(0) + layers · (g − 1) · c.
# Prints each layout's own c and the one c that fits both (least squares on the time
# per token), with its residuals: two layouts and one coefficient leave one degree
# of freedom, which is the test of the form. The measured throughput includes each
# request's prefill, so the values are upper bounds.
#   scripts/fit_layer_sync.sh          (ACCEPTMOE: the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
A=${ACCEPTMOE:-build/acceptmoe}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
for row in "4:218.89" "2:222.47"; do
  g=${row%%:*} measured=${row#*:}
  "$A" run workloads/specs/eagle3-vs-ar-qwen3-h100.yaml --set hardware.gpus="$g" --set parallel.attention_tp="$g" \
    --set parallel.moe_tp="$g" --set engine.layer_sync_per_peer_s=0 --set hardware.interconnect.layer_sync_per_peer_s=0 --set workload.blocks=200 \
    --out "$T/tp$g" --quiet >/dev/null
  awk -F, -v g="$g" -v m="$measured" 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}
    $c["policy"]=="autoregressive"{printf "%s %s %.9g\n", g, m, $c["time_per_token_s"]}' "$T/tp$g/summary.csv"
done | awk -v layers=48 '{g[NR]=$1; m[NR]=$2; t0[NR]=$3; n=NR}
  END {
    print "layout,measured_tok_s,simulated_tok_s_at_0,own_per_peer_s,joint_per_peer_s,simulated_tok_s_joint,residual"
    for (i = 1; i <= n; i++) { x = layers * (g[i] - 1); y = 1 / m[i] - t0[i]; sxy += x * y; sxx += x * x }
    c = sxy / sxx
    for (i = 1; i <= n; i++) {
      x = layers * (g[i] - 1); own = (1 / m[i] - t0[i]) / x; t = t0[i] + x * c
      printf "tp%d,%.2f,%.2f,%.3g,%.3g,%.2f,%+.1f%%\n", g[i], m[i], 1 / t0[i], own, c, 1 / t, 100 * (1 / t - m[i]) / m[i]
    }
  }'
