# Where a committed token's time goes, per policy (first sweep point): the
# step, the draft, the dense part (attention, norms, dense layers, head), the
# routed experts and the waits on expert fetches (§9). Usage:
#   gnuplot -e "in='results/reference/acceptmoe-offload-qwen3/summary.csv'; out='breakdown.png'" plots/breakdown.gp
if (!exists("in")) in = 'results/reference/acceptmoe-offload-qwen3/summary.csv'
if (!exists("out")) out = 'breakdown.png'
if (!exists("ttl")) ttl = in
if (strstrt(out, ".svg") > 0) { set terminal svg size 900,540 font ",11" } else { set terminal pngcairo size 900,540 font ",10" }
set output out
set datafile separator comma
set datafile columnheaders
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.7
set ylabel "milliseconds per committed token"
set yrange [0:*]
set grid ytics
set key outside right noenhanced
set xtics rotate by -30 noenhanced
set title ttl noenhanced
rows = sprintf("< awk -F, 'NR == 1 || $1 == 0' '%s'", in)
ms(c) = column(c) * 1e3
plot rows using (ms("step_s_per_token")):xtic(stringcolumn("policy")) title "step", \
     '' using (ms("draft_s_per_token")) title "draft", \
     '' using (ms("dense_s_per_token")) title "dense (attention, dense layers, head)", \
     '' using (ms("moe_s_per_token")) title "routed experts", \
     '' using (ms("fetch_s_per_token")) title "expert fetches (wait)"
