# H2D bytes per committed token per policy (offload runs), first sweep point.
#   gnuplot -e "in='results/reference/acceptmoe-offload-qwen3/summary.csv'; out='h2d.png'" plots/h2d.gp
if (!exists("in")) in = 'results/reference/acceptmoe-offload-qwen3/summary.csv'
if (!exists("out")) out = 'h2d.png'
set terminal pngcairo size 900,500 font ",10"
set output out
set datafile separator comma
set style data histograms
set style fill solid 0.8 border -1
set ylabel "H2D MB per committed token"
set yrange [0:*]
set grid ytics
set xtics rotate by -30 noenhanced
set title sprintf("%s", in) noenhanced
rows = sprintf("< awk -F, 'NR == 1 || $1 == 0' '%s'", in)  # the first sweep point
plot rows using (column("h2d_bytes_per_token")/1e6):xtic(stringcolumn("policy")) notitle
