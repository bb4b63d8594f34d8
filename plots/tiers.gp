# Experts where users keep them (docs/design.md §21): output tokens per second against the
# GPU's share of the routed experts, one colour per placement strategy; measured points
# (SGLang + kt-kernel's Qwen3-Next-80B-A3B placement sweep, 4x RTX 4090 and one Xeon Gold
# 6454S) beside the simulator's prediction as a line.
# Usage (scripts/reproduce.sh runs it, from `acceptmoe cells --csv` over the tier cells:
# columns strategy,share,measured,predicted):
#   gnuplot -e "in='results/reference/tiers/sweep.csv'; out='tiers.png'" plots/tiers.gp
if (!exists("in")) in = 'results/reference/tiers/sweep.csv'
if (!exists("out")) out = 'tiers.png'
if (strstrt(out, ".svg") > 0) { set terminal svg size 900,600 font ",11" } else { set terminal pngcairo size 900,600 font ",10" }
set output out
set datafile separator comma
set key top left noenhanced opaque box
set grid
set xlabel "GPU's share of the routed experts (%)"
set ylabel "output tokens/s (one stream)"
set title "Qwen3-Next-80B-A3B, 4x RTX 4090 + Xeon Gold 6454S: measured (points) and predicted (lines)" noenhanced
strategies = "random uniform front"
sel(s) = sprintf("< awk -F, 'NR == 1 || $1 == \"%s\"' '%s'", s, in)
plot for [i = 1:3] sel(word(strategies, i)) using (column("share")):(column("measured")) with points pt 7 ps 1.3 lc i title word(strategies, i) . " measured", \
     for [i = 1:3] sel(word(strategies, i)) using (column("share")):(column("predicted")) with lines lw 2 lc i title word(strategies, i) . " predicted"
