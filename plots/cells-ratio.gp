# Serving cells, the headline (docs/design.md §19): for each (deployment, load) with
# speculation both off and on, the predicted ratio of on to off against the measured,
# one marker per source; the diagonal is agreement, the dashed lines +-25%, and the
# dotted line a ratio of 1 (speculation pays nothing).
# Usage (scripts/reproduce.sh runs it, from the ratio table of `acceptmoe cells`
# joined with the cell file's sources: columns on,off,source,metric,measured,predicted):
#   gnuplot -e "in='results/reference/cells/ratios.csv'; out='cells-ratio.png'" plots/cells-ratio.gp
if (!exists("in")) in = 'results/reference/cells/ratios.csv'
if (!exists("out")) out = 'cells-ratio.png'
if (strstrt(out, ".svg") > 0) { set terminal svg size 900,800 font ",11" } else { set terminal pngcairo size 900,800 font ",10" }
set output out
set datafile separator comma
set key bottom right noenhanced opaque box font ",9"
set grid
set xlabel "measured speculation-on / off"
set ylabel "predicted speculation-on / off"
set title "Serving cells: the on/off ratio, predicted against measured" noenhanced
set xrange [0.5:3.5]
set yrange [0.5:3.5]
set arrow from first 1, graph 0 to first 1, graph 1 nohead dt 3 lc rgb "gray"
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 3 lc rgb "gray"
sources = system(sprintf("awk -F, 'NR > 1 && !s[$3]++ { print $3 }' '%s' | tr ' ' '_'", in))
sel(s) = sprintf("< awk -F, 'NR == 1 { print; next } { t = $3; gsub(/ /, \"_\", t) } t == \"%s\"' '%s'", s, in)
plot for [s in sources] sel(s) using (column("measured")):(column("predicted")) with points ps 1.5 title s, \
     x with lines lc rgb "black" title "agreement", 1.25 * x with lines dt 2 lc rgb "gray" notitle, \
     0.8 * x with lines dt 2 lc rgb "gray" notitle
