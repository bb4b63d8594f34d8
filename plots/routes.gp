# What {draft: adaptive, cost: experts} keeps when it sizes by routes an engine can
# predict: each kind of routes' tokens/s over cost: tokens' (the profiled table), in
# percent, per setting; the oracle's bar is the gain there is to keep. Usage
# (scripts/routes-eval.sh):
#   gnuplot -e "in='results/reference/routes/gain.csv'; out='routes.png'" plots/routes.gp
if (!exists("in")) in = 'results/reference/routes/gain.csv'
if (!exists("out")) out = 'routes.png'
if (strstrt(out, ".svg") > 0) { set terminal svg size 900,480 font ",11" } else { set terminal pngcairo size 900,480 font ",10" }
set output out
set datafile separator comma
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set key top left noenhanced
set ylabel "tokens/s over cost: tokens (%)"
set title "Qwen3-30B-A3B, 4xH100 TP4: cost: experts sized by each kind of routes" noenhanced
set xzeroaxis lt -1
plot in every ::1 using 2:xtic(1) title "oracle (true routes)" lc 7, '' every ::1 using 3 title "predictor, accuracy 0.8" lc 1, \
     '' every ::1 using 4 title "previous committed token" lc 2, '' every ::1 using 5 title "layer popularity" lc 3
