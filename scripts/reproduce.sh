#!/usr/bin/env bash
# One command from a clone to every reference result and figure:
#   1. runs every spec that mirrors a paper (workloads/specs/acceptmoe-*,
#      ecospec-*) or draws a figure (figure-*) into results/reference/;
#   2. renders the figures with gnuplot to results/figures/*.png and .svg;
#   3. rewrites results/README.md (each figure, a caption, its command) and,
#      through scripts/docs-generated.sh, every generated block of the docs
#      (docs/validation.md and docs/outcomes.md: the fits, the published outcomes beside ours).
# --quick: 40 blocks per point, everything under results/quick/ (CI runs it;
# nothing committed changes). Same inputs, same bytes (figures aside).
#   scripts/reproduce.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = --quick ] && quick=1
A=${ACCEPTMOE:-build/acceptmoe} # the binary
[ -x "$A" ] || [ -n "${ACCEPTMOE:-}" ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j"$(nproc)"; }
command -v gnuplot >/dev/null || { echo "reproduce.sh: needs gnuplot (Debian package gnuplot-nox)" >&2; exit 2; }
if [ $quick = 1 ]; then res=results/quick/reference figs=results/quick/figures readme=results/quick/README.md set=(--set workload.blocks=40 --set workload.requests=12)
else res=results/reference figs=results/figures readme=results/README.md set=(); fi
mkdir -p "$res" "$figs"
for s in workloads/specs/acceptmoe-*.yaml workloads/specs/ecospec-*.yaml workloads/specs/figure-*.yaml; do
  n=$(basename "$s" .yaml)
  echo "== $n"
  "$A" run "$s" "${set[@]}" --out "$res/$n" --quiet >/dev/null
done
plot() { # NAME SCRIPT ARGS
  local name=$1 script=$2 args=$3
  for ext in png svg; do gnuplot -e "$args; out='$figs/$name.$ext'" "plots/$script.gp"; done
}
plot union union "in='$res/figure-union/summary.csv'"
for m in speedup_vs_natural:speedup h2d_bytes_per_token:h2d cache_hit_rate:hit; do
  plot "slots-${m#*:}" slots "in='$res/figure-offload-slots/summary.csv'; metric='${m%%:*}'"
done
plot pareto pareto "in='$res/figure-pareto/summary.csv'"
plot batch batch "qwen='$res/figure-batch-qwen3/summary.csv'; deepseek='$res/figure-batch-deepseek/summary.csv'"
plot load load "qwen='$res/figure-load-qwen3/summary.csv'; deepseek='$res/figure-load-deepseek/summary.csv'"
# serving cells (§19): the error matrix against engines' published cells, where the shared
# data is there (not in --quick: about 3 minutes on two cores, most of it the DeepSeek-V4-Pro rows)
cells_in=${CELLS:-../shared/real-data/serving/cells.csv}
have_cells=0
if [ $quick = 0 ] && [ -f "$cells_in" ]; then
  have_cells=1
  # the measured kernel tables the hardware presets name, beside the binary (docs/design.md §20)
  [ -f "$(dirname "$A")/kernels/meta.json" ] || scripts/kernel-tables.sh "$(dirname "$A")/kernels" >/dev/null
  mkdir -p "$res/cells"
  echo "== cells"
  "$A" cells "$cells_in" --csv "$res/cells/cells.csv" --quiet >"$res/cells/matrix.md"
  awk -F, 'NR == FNR { if (FNR > 1) { src[$1] = $2; met[$1] = $19 } next }
    FNR == 1 { print "id,source,metric,measured,predicted"; next }
    $5 == "ok" { print $1 "," src[$1] "," met[$1] "," $3 "," $2 }' "$cells_in" "$res/cells/cells.csv" >"$res/cells/points.csv"
  plot cells cells "in='$res/cells/points.csv'"
  # the headline: speculation on over off per (deployment, load), from the matrix's ratio table
  awk -F, 'NR == FNR { if (FNR > 1) src[$1] = $2; next }
    FNR == 1 { print "on,off,source,metric,measured,predicted" }
    /^\| on \| off \|/ { t = 1; next } t && /^\|---/ { next } t && /^\|/ {
      n = split($0, f, "|"); for (i = 2; i < n; i++) gsub(/^ +| +$/, "", f[i])
      print f[2] "," f[3] "," src[f[2]] "," f[4] "," f[5] "," f[6]; next } t { t = 0 }' \
    "$cells_in" FS='|' "$res/cells/matrix.md" >"$res/cells/ratios.csv"
  plot cells-ratio cells-ratio "in='$res/cells/ratios.csv'"
  # each deployment calibrated to its speculation-off rows, every row predicted again (§20)
  echo "== cells --calibrated"
  "$A" cells "$cells_in" --calibrated --quiet >"$res/cells/calibrated.md"
fi
# tiers (§21): experts on the host, against the engines' published tier cells where the shared
# data is there (seconds): the error matrix, and the placement sweep's figure
tiers_in=${TIERS:-../shared/real-data/tiers/cells.csv}
have_tiers=0
if [ $quick = 0 ] && [ -f "$tiers_in" ]; then
  have_tiers=1
  mkdir -p "$res/tiers"
  echo "== tiers"
  "$A" cells "$tiers_in" --csv "$res/tiers/cells.csv" --quiet >"$res/tiers/matrix.md"
  awk -F, 'NR == 1 { print "strategy,share,measured,predicted"; next }
    $1 ~ /^kt-qwen3next-/ && $5 == "ok" { n = split($1, f, "-"); print f[n - 1] "," f[n] + 0 "," $3 "," $2 }' \
    "$res/tiers/cells.csv" >"$res/tiers/sweep.csv"
  plot tiers tiers "in='$res/tiers/sweep.csv'"
fi
# under load: each row's output throughput over plain decoding's at the same rate, and its p99 TPOT
load_table() { # SUMMARY
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { r = $c["workload.arrival.rate"]; p = $c["policy"]; if (!(r in seen)) { seen[r] = 1; rates[++nr] = r }
      if (!(p in known)) { known[p] = 1; pol[++np] = p }
      tps[r, p] = $c["wall_tokens_per_s"]; tpot[r, p] = $c["tpot_p99_s"]; gp[r, p] = $c["goodput"] }
    END { printf "| rate (req/s) |"; for (j = 1; j <= np; j++) printf " %s |", pol[j]; print ""
      printf "|---|"; for (j = 1; j <= np; j++) printf "---|"; print ""
      for (i = 1; i <= nr; i++) { r = rates[i]; printf "| %s |", r
        for (j = 1; j <= np; j++) { p = pol[j]; a = tps[r, "autoregressive"]
          printf " %.2f× · %.1f ms · %.1f/s |", (a > 0 ? tps[r, p] / a : 0), 1000 * tpot[r, p], gp[r, p] }
        print "" } }' "$1"
}
# against batch: each row's tokens per second over plain decoding's at the same batch, plain
# decoding's own, and the experts per layer three rows execute
ACCEPTMOE=$A scripts/marginal-eval.sh $([ $quick = 1 ] && echo --quick) "$res/marginal" # (its figure, its table)
[ $quick = 1 ] || ACCEPTMOE=$A scripts/routes-eval.sh "$res/routes" "$figs" >/dev/null # (its figure)
plot breakdown-offload breakdown "in='$res/acceptmoe-offload-qwen3/summary.csv'; ttl='Qwen3-30B-A3B, offload on RTX 5090 presets (48 slots, LRU)'"
plot breakdown-resident breakdown "in='$res/acceptmoe-resident-qwen3/summary.csv'; ttl='Qwen3-30B-A3B, resident on RTX PRO 6000 presets'"
{
  echo "# Figures"
  echo
  echo "Generated by \`scripts/reproduce.sh$([ $quick = 1 ] && echo ' --quick')\` from the summary.csv files in \`$res/\`."
  echo "Simulator outputs on hardware presets, not measurements (docs/validation.md)."
  echo
  cap() { echo "## $1"; echo; echo "![$1](figures/$2.png)"; echo; echo "$3"; echo; echo "    $4"; echo; }
  cap "Union of a draft tree's experts" union \
    "Experts per MoE layer that natural routing executes against the nodes verified, per model, beside uniform routing's union and the real anchors (54 for a 127-token OLMoE tree, which the routing is fitted to; AcceptMoE's byte counts imply at most ~76 for 64 Qwen3 nodes)." \
    "build/acceptmoe run workloads/specs/figure-union.yaml"
  cap "Speedup against expert slots (offload)" slots-speedup \
    "Tokens per second over natural routing's, per policy, Qwen3-30B-A3B on RTX 5090 presets, LRU cache served hits first." \
    "build/acceptmoe run workloads/specs/figure-offload-slots.yaml"
  cap "Host-to-device bytes per token against expert slots" slots-h2d "The same runs: PCIe bytes per committed token (log scale)." \
    "build/acceptmoe run workloads/specs/figure-offload-slots.yaml"
  cap "Cache hit rate against expert slots" slots-hit "The same runs: the share of executed experts found in the cache." \
    "build/acceptmoe run workloads/specs/figure-offload-slots.yaml"
  cap "Speed against deviation" pareto \
    "Speedup against the share of committed tokens whose output constrained routing changed (the acceptance model, kappa 0.05 / 0.14 / 0.3), for AcceptMoE's adaptive set, fixed budgets and the lossless EcoSpec, resident on RTX PRO 6000 presets." \
    "build/acceptmoe run workloads/specs/figure-pareto.yaml"
  cap "Where speculation stops paying: batch" batch \
    "Tokens per second over plain decoding's at the same batch (requests per pass, continuous batching), per policy row: Qwen3-30B-A3B on 4 H100s (TP4) and DeepSeek-V3 in FP8 on 8 H200s (TP8), under the sglang engine preset alone, whose per-request cost is fitted to SGLang's measured plain decoding against batch (scripts/fit_batch.py, docs/validation.md); the speculative rows at batch > 1 are predictions, fitted to nothing." \
    "build/acceptmoe run workloads/specs/figure-batch-qwen3.yaml; build/acceptmoe run workloads/specs/figure-batch-deepseek.yaml"
  cap "Under load: p99 TPOT and goodput against the arrival rate" load \
    "Requests of 64 output tokens arriving as a Poisson process, up to 64 running, per policy row: fixed-length speculation (natural: the whole EAGLE tree; evict; AcceptMoE; EcoSpec), plain decoding (autoregressive), and verification sized per step by D-Cut's rule priced by a batch x tokens table (adaptive/cost=tokens) or by the experts the step touches (adaptive/cost=experts). Goodput counts requests within TTFT 2 s and TPOT 50 ms. The layouts and per-request costs of the batch figure; predictions: nothing is fitted to a measured speculative outcome under load." \
    "build/acceptmoe run workloads/specs/figure-load-qwen3.yaml; build/acceptmoe run workloads/specs/figure-load-deepseek.yaml"
  echo "Each cell: output tokens per second over plain decoding's at the same rate, p99 TPOT, goodput (predictions)."
  echo
  echo "Qwen3-30B-A3B, 4x H100 TP4:"
  echo
  load_table "$res/figure-load-qwen3/summary.csv"
  echo
  echo "DeepSeek-V3 (FP8), 8x H200 TP8:"
  echo
  load_table "$res/figure-load-deepseek/summary.csv"
  echo
  if [ $have_tiers = 1 ]; then
    ran=$(awk -F, 'NR > 1 { n++; ok += $5 == "ok" } END { print ok " of " n }' "$res/tiers/cells.csv")
    echo "## Experts where users keep them: the GPU's share"; echo
    echo "![Output tokens/s against the GPU's share of the experts](figures/tiers.png)"; echo
    echo "SGLang + kt-kernel's Qwen3-Next-80B-A3B placement sweep (4x RTX 4090, one Xeon Gold 6454S, kt-kernel FP8 experts on the host): output tokens per second of one stream against the GPU's share of each layer's routed experts, measured (points) and predicted (lines) per strategy. The host's rates are published (kt-kernel's AMX) or leads (its bandwidth share), the RTX 4090 and PCIe 4 leads: nothing is fitted to the sweep. Every tier row the simulator runs ($ran) and the reasons for the rest: $res/tiers/matrix.md (docs/validation.md, \"Tiers\")."; echo
    echo "    build/acceptmoe cells ../shared/real-data/tiers/cells.csv --csv cells.csv"; echo
  fi
  if [ $have_cells = 1 ]; then
    ran=$(awk -F, 'NR > 1 { n++; ok += $5 == "ok" } END { print ok " of " n }' "$res/cells/cells.csv")
    echo "## Serving cells: predicted against measured"; echo
    echo "![Serving cells: predicted against measured](figures/cells.png)"; echo
    echo "Every row of the shared file of engines' published serving cells (real-data serving/cells.csv) that the simulator can run ($ran), its prediction against its measurement, one marker per source; the rows it cannot run (an engine no preset fits, an unstated layout) are listed in $res/cells/matrix.md with the reason. The B300 preset's fixed time per layer and rate past 12 tokens per expert are fitted to vLLM's profiled step table (the GB300 takes the fixed time), their other hardware numbers and every MI3x5X number are datasheet leads: nothing in this matrix is fitted to it (docs/validation.md, \"Serving cells\")."; echo
    echo "![Serving cells: the on/off ratio](figures/cells-ratio.png)"; echo
    echo "The headline: for each deployment and load with speculation both off and on, the predicted ratio of on to off against the measured ($res/cells/ratios.csv; docs/validation.md, \"Serving cells\", says which term moves it)."; echo
    echo "    build/acceptmoe cells ../shared/real-data/serving/cells.csv --csv cells.csv"; echo
    echo "Each deployment calibrated to its speculation-off rows alone (per-pass host time, per-request scheduler cost, device efficiency), then every row predicted again, with the on/off ratios both ways: $res/cells/calibrated.md (docs/validation.md, \"Calibrated deployments\")."; echo
    echo "    build/acceptmoe cells ../shared/real-data/serving/cells.csv --calibrated"; echo
  fi
  cap "Beyond both papers: the marginal verifier" marginal \
    "Speedup against the deviated-token rate for marginal, self-sized (share 1) and its share grid, and its depth-only ablation, beside AcceptMoE and the oracle, in five settings; each point the mean over seeds 201-204, nothing tuned (docs/outcomes.md)." \
    "scripts/marginal-eval.sh"
  if [ $quick = 0 ]; then
    cap "Routes an engine can predict" routes \
      "What {draft: adaptive, cost: experts} keeps of its gain over cost: tokens (the profiled table) when it sizes each step by routes an engine can have rather than the draft tokens' true ones: tokens/s over cost: tokens', in percent, Qwen3-30B-A3B on 4 H100s (TP4), batch 1, 8 and 64 and 12 requests/s, the mean of seeds 201-202; the kept shares are in $res/routes/kept.csv and docs/outcomes.md." \
      "scripts/routes-eval.sh"
  fi
  cap "Where the time goes: offload" breakdown-offload \
    "Milliseconds per committed token per policy: step, draft, dense part, routed experts and the wait on expert fetches (the cost model's parts, §9)." \
    "build/acceptmoe run workloads/specs/acceptmoe-offload-qwen3.yaml"
  cap "Where the time goes: resident" breakdown-resident "The same, every expert resident." \
    "build/acceptmoe run workloads/specs/acceptmoe-resident-qwen3.yaml"
} >"$readme.tmp" && mv "$readme.tmp" "$readme"
if [ $quick = 0 ]; then # what moves EcoSpec's result, one switch at a time (docs/validation.md's tables)
  ACCEPTMOE=$A scripts/decompose-ecospec.sh 100 >"$res/decompose-ecospec.md"
  # every generated block of the docs from these results
  RESULTS=$res ACCEPTMOE=$A scripts/docs-generated.sh
fi
echo "results in $res/, figures in $figs/, $readme"
