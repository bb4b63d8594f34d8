#!/usr/bin/env bash
# The marginal verifier against AcceptMoE on workloads nothing was tuned on (design §6,
# docs/outcomes.md "Beyond both papers"). marginal sizes itself: it spends AcceptMoE's
# predicted deviated tokens (share 1, its default); the share grid below 1 and the
# depth-only ablation are points of the figure. Five settings, seeds 201-204 each:
# Qwen3-30B-A3B resident, offloaded, at batch 8 and under load (12 requests/s), and
# DeepSeek-V3 on 8 GPUs (EP8).
#   1. runs workloads/specs/marginal-*.yaml as written;
#   2. pools each row over the seeds: mean and standard deviation of its speed (tokens/s;
#      under load the wall rate, waits for arrivals included) and of its speedup over
#      natural on the same seed, its deviated-token rate beside the rate it predicted
#      (AcceptMoE's prediction is the one marginal's self-sized row makes for it on the
#      same passes), and its speed over AcceptMoE's on the same seed (mean, min, max);
#   3. writes OUT/pooled.csv, the figure (speed against deviation, plots/marginal.gp)
#      and, unless --quick, the generated table of docs/outcomes.md.
#   scripts/marginal-eval.sh [--quick] [OUT]   (default results/reference/marginal)
# --quick: 40 blocks (30 requests) per run (CI); nothing committed changes.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = --quick ] && { quick=1; shift; }
A=${ACCEPTMOE:-build/acceptmoe}
[ -x "$A" ] || { echo "marginal-eval.sh: no binary at $A (build first, or set ACCEPTMOE)" >&2; exit 2; }
out=${1:-$([ $quick = 1 ] && echo results/quick/reference/marginal || echo results/reference/marginal)}
figs=$([ $quick = 1 ] && echo results/quick/figures || echo results/figures)
specs=(marginal-resident-qwen3 marginal-offload-qwen3 marginal-batch-qwen3 marginal-load-qwen3 marginal-ep-deepseek-v3)
mkdir -p "$out" "$figs"
for s in "${specs[@]}"; do
  set=()
  if [ $quick = 1 ]; then
    set=(--set commitment.calibrate.blocks=40)
    if [ $s = marginal-load-qwen3 ]; then set+=(--set workload.requests=30); else set+=(--set workload.blocks=40); fi
  fi
  echo "== $s (seeds 201-204)"
  "$A" run "workloads/specs/$s.yaml" "${set[@]}" --out "$out/$s" --quiet >/dev/null
done

for s in "${specs[@]}"; do
  awk -F, -v run="$s" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { seed = $c["workload.seed"]; p = $c["policy"]; seeds[seed] = 1; if (!(p in pol)) order[++np] = p; pol[p] = 1
      tps[p, seed] = ("arrival_rate" in c) ? $c["wall_tokens_per_s"] : $c["tokens_per_s"]
      dv[p, seed] = $c["deviated_token_rate"]; pd[p, seed] = $c["predicted_deviated_token_rate"]
      pa[seed] = p == "marginal" ? $c["acceptmoe_predicted_deviated_token_rate"] : pa[seed]
      h2d[p, seed] = $c["h2d_bytes_per_token"]; ex[p, seed] = $c["executed_mean"] }
    function stats(a, p,   s, n, m, v) { n = 0; m = 0; for (s in seeds) { m += a[p, s]; n++ } m /= n
      v = 0; for (s in seeds) v += (a[p, s] - m) ^ 2; sd = n > 1 ? sqrt(v / (n - 1)) : 0; return m }
    END {
      for (s in seeds) { pd["acceptmoe", s] = pa[s]; for (q = 1; q <= np; q++) sp[order[q], s] = tps[order[q], s] / tps["natural", s] }
      for (q = 1; q <= np; q++) {
        p = order[q]; family = p; sub(/\/.*/, "", family); sh = p ~ /share=/ ? p : (family ~ /^marginal/ ? 1 : ""); sub(/.*share=/, "", sh)
        n = 0; rmin = 1e9; rmax = -1e9; rm = 0
        for (s in seeds) { r = tps[p, s] / tps["acceptmoe", s]; rm += r; n++; rmin = r < rmin ? r : rmin; rmax = r > rmax ? r : rmax }
        mt = stats(tps, p); st = sd; ms = stats(sp, p); ss = sd; md = stats(dv, p); sdd = sd; mp = stats(pd, p)
        mh = stats(h2d, p); mx = stats(ex, p)
        printf "%s,%s,%s,%s,%d,%.4f,%.4f,%.5f,%.5f,%.6f,%.6f,%.6f,%.2f,%.3f,%.5f,%.5f,%.5f\n", run, p, family, sh, n, mt, st,
               ms, ss, md, sdd, mp, mh / 1e6, mx, rm / n, rmin, rmax
      }
    }' "$out/$s/summary.csv"
done >"$out/pooled.tmp"
{
  echo "setting,policy,family,share,seeds,tokens_per_s,tokens_per_s_sd,speedup_vs_natural,speedup_sd,deviated_token_rate,deviated_sd,predicted_deviated_token_rate,h2d_mb_per_token,executed_mean,over_acceptmoe,over_acceptmoe_min,over_acceptmoe_max"
  cat "$out/pooled.tmp"
} >"$out/pooled.csv" && rm "$out/pooled.tmp"

for ext in png svg; do gnuplot -e "in='$out/pooled.csv'; out='$figs/marginal.$ext'" plots/marginal.gp; done
[ $quick = 1 ] || RESULTS=$(dirname "$out") scripts/docs-generated.sh # (its table in docs/outcomes.md)
echo "$out/pooled.csv, $figs/marginal.png"
