#!/usr/bin/env bash
# What {draft: adaptive, cost: experts} keeps of its gain when it sizes by routes an engine
# can have (docs/design.md §18, docs/outcomes.md "Routes an engine can predict"): runs
# workloads/specs/routes-batch-qwen3.yaml (batch 1, 8, 64) and routes-load-qwen3.yaml
# (12 requests/s) on seeds 201 and 202, and prints per setting each sizing row's tokens/s
# (pooled over the seeds: the mean) and the share of the oracle's gain over cost: tokens
# it keeps, (row - tokens) / (oracle - tokens), into OUT/kept.csv; OUT/gain.csv and the
# figure FIGS/routes.png hold each row's gain over cost: tokens in percent. Nothing is tuned.
#   scripts/routes-eval.sh [OUT [FIGS]]   (default results/reference/routes, results/figures;
#   ACCEPTMOE: the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
A=${ACCEPTMOE:-build/acceptmoe}
[ -x "$A" ] || { echo "routes-eval.sh: no binary at $A (build first, or set ACCEPTMOE)" >&2; exit 2; }
out=${1:-results/reference/routes}
figs=${2:-results/figures}
mkdir -p "$out" "$figs"
for seed in 201 202; do
  for s in routes-batch-qwen3 routes-load-qwen3; do
    echo "== $s, seed $seed" >&2
    "$A" run "workloads/specs/$s.yaml" --set workload.seed=$seed --out "$out/$s-$seed" --quiet >/dev/null
  done
done
# per setting (batch N, or the load point) and row: mean tokens/s over the seeds (the
# wall rate under load: its duration includes waiting for arrivals)
for s in routes-batch-qwen3 routes-load-qwen3; do
  for seed in 201 202; do
    awk -F, -v load=$([ $s = routes-load-qwen3 ] && echo 1 || echo 0) 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      { set = load ? "12 req/s" : "batch " $c["batch"]
        print set "," $c["policy"] "," (load ? $c["wall_tokens_per_s"] : $c["tokens_per_s"]) "," $c["verified_nodes_mean"] }' \
      "$out/$s-$seed/summary.csv"
  done
done | awk -F, '{ k = $1 SUBSEP $2; tps[k] += $3; ver[k] += $4; n[k]++; if (!(k in seen)) { seen[k] = 1; keys[++m] = k } }
  END {
    print "setting,policy,tokens_per_s,verified,kept_of_oracle_gain"
    for (j = 1; j <= m; j++) { split(keys[j], p, SUBSEP); t[p[1], p[2]] = tps[keys[j]] / n[keys[j]] }
    for (j = 1; j <= m; j++) {
      split(keys[j], p, SUBSEP); s = p[1]
      tok = t[s, "adaptive/cost=tokens"]; orc = t[s, "adaptive/cost=experts"]; v = t[s, p[2]]
      kept = (p[2] ~ /cost=experts/ && orc != tok) ? sprintf("%.2f", (v - tok) / (orc - tok)) : ""
      printf "%s,%s,%.1f,%.1f,%s\n", s, p[2], v, ver[keys[j]] / n[keys[j]], kept } }' | tee "$out/kept.csv"
# per setting, each sizing row's tokens/s over cost: tokens', in percent (the figure)
awk -F, 'NR == 1 { next } { if (!($1 in seen)) { seen[$1] = 1; set[++n] = $1 } t[$1, $2] = $3 }
  END { print "setting,oracle,predictor,previous,popular"
    for (i = 1; i <= n; i++) { s = set[i]; b = t[s, "adaptive/cost=tokens"]; printf "%s", s
      split("adaptive/cost=experts adaptive/cost=experts/routes=predictor adaptive/cost=experts/routes=previous adaptive/cost=experts/routes=popular", r, " ")
      for (j = 1; j <= 4; j++) printf ",%.3f", 100 * (t[s, r[j]] / b - 1); print "" } }' "$out/kept.csv" >"$out/gain.csv"
for ext in png svg; do gnuplot -e "in='$out/gain.csv'; out='$figs/routes.$ext'" plots/routes.gp; done
echo "$out/kept.csv, $out/gain.csv, $figs/routes.png" >&2
