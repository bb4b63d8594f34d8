#!/usr/bin/env bash
# Fits hardware.interconnect.layer_sync_s for the two Qwen3-30B-A3B H100 layouts
# whose plain decoding is measured at batch 1 (real-data batch/decode_vs_batch.csv:
# TP4 218.89 tok/s, TP2 222.47 tok/s, SGLang through bench_eagle3): the
# simulator's autoregressive row is linear in it (one charge per decoder layer
# and pass), so one run at 0 gives the value that reproduces the measurement:
#   layer_sync = (1 / measured − t(0)) / layers.
# The measured throughput includes each request's prefill, so the value is an
# upper bound; one point per layout pins one number per layout, not a form.
#   scripts/fit_layer_sync.sh          (ACCEPTMOE: the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
A=${ACCEPTMOE:-build/acceptmoe}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
echo "layout,measured_tok_s,simulated_tok_s_at_0,layer_sync_s"
for row in "4:218.89" "2:222.47"; do
  g=${row%%:*} measured=${row#*:}
  "$A" run workloads/specs/eagle3-vs-ar-qwen3-h100.yaml --set hardware.gpus="$g" --set parallel.attention_tp="$g" \
    --set parallel.moe_tp="$g" --set hardware.interconnect.layer_sync_s=0 --set workload.blocks=200 \
    --out "$T/tp$g" --quiet >/dev/null
  awk -F, -v g="$g" -v m="$measured" 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}
    $c["policy"]=="autoregressive"{t=$c["time_per_token_s"]; printf "tp%s,%s,%.2f,%.3g\n", g, m, 1/t, (1/m - t)/48}' \
    "$T/tp$g/summary.csv"
done
