# Speedup over plain decoding at the same batch against the batch, one line per
# policy row, for two runs side by side (docs/design.md §17). Usage
# (scripts/reproduce.sh runs it):
#   gnuplot -e "qwen='results/reference/figure-batch-qwen3/summary.csv'; \
#               deepseek='results/reference/figure-batch-deepseek/summary.csv'; out='batch.png'" plots/batch.gp
if (!exists("qwen")) qwen = 'results/reference/figure-batch-qwen3/summary.csv'
if (!exists("deepseek")) deepseek = 'results/reference/figure-batch-deepseek/summary.csv'
if (!exists("out")) out = 'batch.png'
if (strstrt(out, ".svg") > 0) { set terminal svg size 1200,520 font ",11" } else { set terminal pngcairo size 1200,520 font ",10" }
set output out
set datafile separator comma
set logscale x 2
set xlabel "requests per pass (workload.batch)"
set ylabel "speedup over plain decoding at the same batch"
set key bottom left noenhanced opaque box
set grid
# the rows in the file's order; the autoregressive row is 1 by definition
rows(f) = system(sprintf("awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } !s[$c[\"policy\"]]++ && $c[\"policy\"] != \"autoregressive\" { print $c[\"policy\"] }' '%s'", f))
sel(f, p) = sprintf("< awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; print; next } $c[\"policy\"] == \"%s\"' '%s'", p, f)
set multiplot layout 1,2
set title "Qwen3-30B-A3B, 4x H100 TP4, resident (SGLang fit)" noenhanced
set yrange [0:*]
plot for [p in rows(qwen)] sel(qwen, p) using (column("workload.batch")):(column("speedup_vs_autoregressive")) with linespoints lw 2 title p, \
     1 with lines dt 2 lc rgb "black" title "plain decoding"
set title "DeepSeek-V3 (FP8), 8x H200 TP8 (SGLang fit)" noenhanced
plot for [p in rows(deepseek)] sel(deepseek, p) using (column("workload.batch")):(column("speedup_vs_autoregressive")) with linespoints lw 2 title p, \
     1 with lines dt 2 lc rgb "black" title "plain decoding"
unset multiplot
