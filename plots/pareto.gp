# Speedup against the deviated-token rate (the cost of constrained routing
# in quality, §7), a point per policy and kappa, from a summary.csv swept
# over acceptance_model.kappa. Usage (scripts/reproduce.sh):
#   gnuplot -e "in='results/reference/figure-pareto/summary.csv'; out='pareto.png'" plots/pareto.gp
if (!exists("in")) in = 'results/reference/figure-pareto/summary.csv'
if (!exists("out")) out = 'pareto.png'
if (strstrt(out, ".svg") > 0) { set terminal svg size 900,560 font ",11" } else { set terminal pngcairo size 900,560 font ",10" }
set output out
set datafile separator comma
set xlabel "deviated-token rate (committed tokens whose output constrained routing changed)"
set ylabel "speedup over natural routing (tokens/s ratio)"
set key top right inside noenhanced opaque box
set grid
set xrange [-0.02:*]
set title "Resident Qwen3-30B-A3B, RTX PRO 6000 presets: speed against deviation" noenhanced
col = "NR == 1 { for (i = 1; i <= NF; i++) { if ($i == \"verifier_policy\") v = i; if ($i == \"draft_policy\") d = i } }"
fam(name) = sprintf("< awk -F, '%s NR == 1 || ($v \"+\" $d) ~ /^%s/' '%s'", col, name, in)
plot fam("acceptmoe[+]eagle") using (column("deviated_token_rate")):(column("speedup_vs_natural")) with points pt 7 ps 1.6 lc 1 title "acceptmoe (adaptive set), kappa 0.05 / 0.17 / 0.3", \
     fam("acceptmoe-fix") using (column("deviated_token_rate")):(column("speedup_vs_natural")) with points pt 5 ps 1.4 lc 2 title "acceptmoe-fix, B = 16 / 24 / 32 / 48", \
     fam("moe-spec") using (column("deviated_token_rate")):(column("speedup_vs_natural")) with points pt 9 ps 1.4 lc 3 title "moe-spec, B = 16 / 24 / 32 / 48", \
     fam("natural[+]ecospec") using (column("deviated_token_rate")):(column("speedup_vs_natural")) with points pt 11 ps 1.6 lc 4 title "ecospec (lossless)", \
     fam("oracle") using (column("deviated_token_rate")):(column("speedup_vs_natural")) with points pt 13 ps 1.6 lc 7 title "oracle (bound)", \
     1 with lines dt 2 lc rgb "gray" title "natural"
