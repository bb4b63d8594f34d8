# Speedup over natural routing per policy, from a run's summary.csv (first
# sweep point). Usage:
#   gnuplot -e "in='results/reference/acceptmoe-offload-qwen3/summary.csv'; out='speedup.png'" plots/speedup.gp
if (!exists("in")) in = 'results/quickstart/summary.csv'
if (!exists("out")) out = 'speedup.png'
set terminal pngcairo size 900,500 font ",10"
set output out
set datafile separator comma
set key autotitle columnhead noenhanced
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set ylabel "speedup vs natural (tokens/s ratio)"
set yrange [0:*]
set grid ytics
set xtics rotate by -30 noenhanced
set title sprintf("%s", in) noenhanced
rows = sprintf("< awk -F, 'NR == 1 || $1 == 0' '%s'", in)  # the first sweep point
plot rows using (column("speedup_vs_natural")):xtic(stringcolumn("policy")) notitle
