# Union of the verified nodes' experts per layer vs nodes verified, per
# model, with independent uniform routing's E(1 - (1 - k/E)^n) and the real
# anchors. Usage (scripts/reproduce.sh runs it):
#   gnuplot -e "in='results/reference/figure-union/summary.csv'; out='union.png'" plots/union.gp
if (!exists("in")) in = 'results/reference/figure-union/summary.csv'
if (!exists("out")) out = 'union.png'
if (strstrt(out, ".svg") > 0) { set terminal svg size 900,560 font ",11" } else { set terminal pngcairo size 900,560 font ",10" }
set output out
set datafile separator comma
set logscale x 2
set xlabel "draft nodes verified per block (n)"
set ylabel "experts per MoE layer in the union"
set key top left noenhanced opaque box
set grid
set title "Natural routing: the union of a draft tree's experts (synthetic, fitted routing)" noenhanced
m(name) = sprintf("< awk -F, 'NR == 1 || $2 == \"%s\"' '%s'", name, in)
null(E, k, n) = E * (1 - (1 - k * 1.0 / E) ** n)
set xrange [1:128]
set yrange [0:130]
set samples 200
plot m("qwen3-30b-a3b") using (column("verified_nodes_mean")):(column("union_mean")) with linespoints lw 2 pt 7 lc 1 title "Qwen3-30B-A3B (128 experts, top-8)", \
     null(128, 8, x) with lines dt 2 lc 1 title "  uniform routing, 128 / top-8", \
     m("olmoe-1b-7b") using (column("verified_nodes_mean")):(column("union_mean")) with linespoints lw 2 pt 5 lc 2 title "OLMoE-1B-7B (64 experts, top-8)", \
     null(64, 8, x) with lines dt 2 lc 2 title "  uniform routing, 64 / top-8", \
     m("mixtral-8x7b") using (column("verified_nodes_mean")):(column("union_mean")) with linespoints lw 2 pt 9 lc 3 title "Mixtral-8x7B (8 experts, top-2)", \
     "-" using 1:2 with points pt 6 ps 2.5 lw 2 lc 2 title "real: 127-token OLMoE tree, 54 (MoE-Spec; fitted)", \
     "-" using 1:2 with points pt 8 ps 2.5 lw 2 lc 1 title "real: AcceptMoE's bytes imply <= ~76 at 64 (validation)"
127,54
e
64,76
e
