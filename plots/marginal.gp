# Speed against deviation for the marginal verifier (self-sized at share 1, and its share
# grid below), its depth-only ablation, AcceptMoE and the oracle, one panel per setting,
# each point the mean over seeds 201-204 (bars: one standard deviation). Usage
# (scripts/marginal-eval.sh):
#   gnuplot -e "in='results/reference/marginal/pooled.csv'; out='marginal.png'" plots/marginal.gp
if (!exists("in")) in = 'results/reference/marginal/pooled.csv'
if (!exists("out")) out = 'marginal.png'
if (strstrt(out, ".svg") > 0) { set terminal svg size 1500,900 font ",11" } else { set terminal pngcairo size 1500,900 font ",10" }
set output out
set datafile separator comma
set grid
set key bottom right inside noenhanced opaque box
set xlabel "deviated-token rate"
set ylabel "speedup over natural routing"
sel(run, f) = sprintf("< awk -F, '$1 == \"%s\" && $3 == \"%s\"' '%s'", run, f, in)
pick(run, p) = sprintf("< awk -F, '$1 == \"%s\" && $2 == \"%s\"' '%s'", run, p, in)
runs = "marginal-resident-qwen3 marginal-offload-qwen3 marginal-batch-qwen3 marginal-load-qwen3 marginal-ep-deepseek-v3"
set multiplot layout 2,3
do for [i = 1:5] {
  run = word(runs, i)
  ttl = i == 1 ? "Qwen3-30B-A3B resident (RTX PRO 6000)" : i == 2 ? "Qwen3-30B-A3B offload, 48 slots LRU (RTX 5090)" : \
        i == 3 ? "Qwen3-30B-A3B batch 8, 4xH100 TP4" : i == 4 ? "Qwen3-30B-A3B at 12 req/s, 4xH100 TP4" : "DeepSeek-V3, 8xH200 EP8"
  set title ttl noenhanced
  plot sel(run, "marginal") using 10:8 with linespoints pt 7 lc 1 title "marginal, share 0.25 ... 1", \
       sel(run, "marginal-depth") using 10:8:11:9 with xyerrorbars pt 6 ps 1.6 lc 3 title "marginal-depth (ablation)", \
       pick(run, "marginal") using 10:8:11:9 with xyerrorbars pt 7 ps 2 lc 1 title "marginal, self-sized (share 1)", \
       pick(run, "acceptmoe") using 10:8:11:9 with xyerrorbars pt 5 ps 1.6 lc 2 title "acceptmoe", \
       pick(run, "oracle") using 10:8 with points pt 13 ps 1.6 lc 7 title "oracle (lossless bound)", \
       1 with lines dt 2 lc rgb "gray" title "natural"
}
unset multiplot
