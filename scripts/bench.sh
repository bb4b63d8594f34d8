#!/usr/bin/env bash
# The simulator's speed as docs/performance.md reports it: the Google Benchmark suite
# run RUNS times in a row (default 3), each with 5 repetitions; per benchmark
# the middle of the runs' medians (the lower middle for an even count) and
# their range. Shared machines are noisy: compare numbers only within one
# invocation.
#   scripts/bench.sh [RUNS] [--benchmark_filter=REGEX]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
  runs=$1
  shift
fi
(( runs >= 1 )) || { echo "usage: scripts/bench.sh [RUNS >= 1] [benchmark flags]" >&2; exit 2; }
bench=build/harness/bench/amoe_bench
[[ -x $bench ]] || { echo "no $bench: build first (scripts/test.sh)" >&2; exit 2; }
for ((i = 0; i < runs; i++)); do
  "$bench" --benchmark_min_time=1 --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    --benchmark_color=false "$@" 2>/dev/null | grep '_median '
done | awk '
  # BM_x_median  <real> <unit>  <cpu> <unit>  <iterations>  [counter=<value>[k|M]/s]
  function num(x,   v) { v = x; sub(/\/s$/, "", v); sub(/.*=/, "", v)
    if (v ~ /k$/) return (v + 0) * 1e3; if (v ~ /M$/) return (v + 0) * 1e6; return v + 0 }
  { name = $1; sub(/_median$/, "", name)
    n[name]++; t[name, n[name]] = $2; u[name] = $3; r[name, n[name]] = $NF ~ /=/ ? num($NF) : ""
    if (!(name in seen)) { seen[name] = 1; names[++k] = name } }
  function mid(a, name, c,   i, j, v, x) {
    for (i = 1; i <= c; i++) v[i] = a[name, i] + 0
    for (i = 2; i <= c; i++) for (j = i; j > 1 && v[j] < v[j - 1]; j--) { x = v[j]; v[j] = v[j - 1]; v[j - 1] = x }
    lo = v[1]; hi = v[c]; return v[int((c + 1) / 2)] }
  END {
    printf "%-24s %10s %-3s %-22s %12s\n", "benchmark", "time", "", "(range)", "rate /s"
    for (q = 1; q <= k; q++) {
      s = names[q]; c = n[s]
      tm = mid(t, s, c); tl = lo; th = hi
      rt = r[s, 1] != "" ? sprintf("%.0f", mid(r, s, c)) : ""
      printf "%-24s %10.4g %-3s %-22s %12s\n", s, tm, u[s], sprintf("(%.4g-%.4g, %d runs)", tl, th, c), rt
    } }'
