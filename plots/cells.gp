# Serving cells (docs/design.md §19): each predicted row's prediction against its
# measurement, log-log, one marker per source; the diagonal is agreement and the
# dashed lines +-25%.
# Usage (scripts/reproduce.sh runs it, from `acceptmoe cells --csv` joined with the
# cell file's sources: columns id,source,metric,measured,predicted):
#   gnuplot -e "in='results/reference/cells/points.csv'; out='cells.png'" plots/cells.gp
if (!exists("in")) in = 'results/reference/cells/points.csv'
if (!exists("out")) out = 'cells.png'
if (strstrt(out, ".svg") > 0) { set terminal svg size 900,800 font ",11" } else { set terminal pngcairo size 900,800 font ",10" }
set output out
set datafile separator comma
set key top left noenhanced opaque box
set grid
set logscale xy
set xlabel "measured (each row's own metric and unit)"
set ylabel "predicted"
set title "Serving cells: predicted against measured (engines' published cells)" noenhanced
sources = system(sprintf("awk -F, 'NR > 1 && !s[$2]++ { print $2 }' '%s' | tr ' ' '_'", in))
sel(s) = sprintf("< awk -F, 'NR == 1 { print; next } { t = $2; gsub(/ /, \"_\", t) } t == \"%s\"' '%s'", s, in)
plot for [s in sources] sel(s) using (column("measured")):(column("predicted")) with points ps 1.5 title s, \
     x with lines lc rgb "black" title "agreement", 1.25 * x with lines dt 2 lc rgb "gray" notitle, \
     0.8 * x with lines dt 2 lc rgb "gray" notitle
