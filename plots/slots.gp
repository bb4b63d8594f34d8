# One metric per policy against the expert slots per layer (offload), from a
# summary.csv swept over offload.slots_per_layer. Usage (scripts/reproduce.sh):
#   gnuplot -e "in='results/reference/figure-offload-slots/summary.csv'; metric='speedup_vs_natural'; out='slots-speedup.png'" plots/slots.gp
# metric: speedup_vs_natural | h2d_bytes_per_token | cache_hit_rate
if (!exists("in")) in = 'results/reference/figure-offload-slots/summary.csv'
if (!exists("metric")) metric = 'speedup_vs_natural'
if (!exists("out")) out = 'slots.png'
if (strstrt(out, ".svg") > 0) { set terminal svg size 900,540 font ",11" } else { set terminal pngcairo size 900,540 font ",10" }
set output out
set datafile separator comma
set xlabel "expert slots per layer (of 128 experts)"
scale = (metric eq "h2d_bytes_per_token") ? 1e-9 : 1
set ylabel (metric eq "speedup_vs_natural") ? "speedup over natural routing (tokens/s ratio)" : \
           (metric eq "h2d_bytes_per_token") ? "host-to-device GB per committed token" : "cache hit rate (share of executed experts)"
if (metric eq "h2d_bytes_per_token") set logscale y
set key outside right noenhanced
set grid
set xtics (16, 24, 32, 48, 64, 96)
set title "Qwen3-30B-A3B, expert offload on RTX 5090 presets (LRU, hits first)" noenhanced
# rows of one policy (the column is found by its header)
col = "NR == 1 { for (i = 1; i <= NF; i++) if ($i == \"policy\") c = i }"
pols = system(sprintf("awk -F, '%s NR > 1 { print $c }' '%s' | awk '!seen[$0]++' | tr '\\n' ' '", col, in))
p(name) = sprintf("< awk -F, '%s NR == 1 || $c == \"%s\"' '%s'", col, name, in)
plot for [name in pols] p(name) using (column("offload.slots_per_layer")):(column(metric) * scale) with linespoints lw 2 title name
