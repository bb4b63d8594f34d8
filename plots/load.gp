# Load (docs/design.md §18): p99 time per output token and goodput against the
# offered arrival rate, one line per policy row, for two runs side by side.
# Usage (scripts/reproduce.sh runs it):
#   gnuplot -e "qwen='results/reference/figure-load-qwen3/summary.csv'; \
#               deepseek='results/reference/figure-load-deepseek/summary.csv'; out='load.png'" plots/load.gp
if (!exists("qwen")) qwen = 'results/reference/figure-load-qwen3/summary.csv'
if (!exists("deepseek")) deepseek = 'results/reference/figure-load-deepseek/summary.csv'
if (!exists("out")) out = 'load.png'
if (strstrt(out, ".svg") > 0) { set terminal svg size 1200,900 font ",11" } else { set terminal pngcairo size 1200,900 font ",10" }
set output out
set datafile separator comma
set key top left noenhanced opaque box
set grid
rows(f) = system(sprintf("awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } !s[$c[\"policy\"]]++ { print $c[\"policy\"] }' '%s'", f))
sel(f, p) = sprintf("< awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; print; next } $c[\"policy\"] == \"%s\"' '%s'", p, f)
set multiplot layout 2,2
set xlabel "arrival rate (requests/s, Poisson)"
set yrange [0:*]
set ylabel "p99 time per output token (ms)"
set title "Qwen3-30B-A3B, 4x H100 TP4, up to 64 running" noenhanced
plot for [p in rows(qwen)] sel(qwen, p) using (column("workload.arrival.rate")):(1000 * column("tpot_p99_s")) with linespoints lw 2 title p
set title "DeepSeek-V3 (FP8), 8x H200 TP8, up to 64 running" noenhanced
plot for [p in rows(deepseek)] sel(deepseek, p) using (column("workload.arrival.rate")):(1000 * column("tpot_p99_s")) with linespoints lw 2 title p
set ylabel "goodput (requests/s within TTFT 2 s, TPOT 50 ms)"
set title "Qwen3-30B-A3B: goodput" noenhanced
plot for [p in rows(qwen)] sel(qwen, p) using (column("workload.arrival.rate")):(column("goodput")) with linespoints lw 2 title p, \
     x with lines dt 2 lc rgb "black" title "offered"
set title "DeepSeek-V3: goodput" noenhanced
plot for [p in rows(deepseek)] sel(deepseek, p) using (column("workload.arrival.rate")):(column("goodput")) with linespoints lw 2 title p, \
     x with lines dt 2 lc rgb "black" title "offered"
unset multiplot
