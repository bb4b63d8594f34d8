#!/usr/bin/env bash
# The library's folders are the pipeline's stages (docs/design.md §3): each
# includes headers of its own folder and the folders before it only, and
# the x86 fast paths include no header of the plain code they sit beside
# beyond the shared ones below both; the plain code reaches them only through
# core/fast.h's table, and they call none of its functions. The command's
# modules (harness/: a file's name up to its first '_', so spec_yaml.c and
# spec_internal.h are spec's) include one another without a circle. Fails
# naming every include, call or circle that breaks it.
# usage: layering.sh SOURCE_DIR
set -u
cd "$1/sim" || exit 1
order=(core workload route cost policy engine)
declare -A stage
for i in "${!order[@]}"; do
  for h in "${order[$i]}"/*.h; do stage[$(basename "$h")]=$i; done
done
bad=0
for i in "${!order[@]}"; do
  for f in "${order[$i]}"/*.[ch]; do
    for h in $(grep -ho '^#include "[a-z_0-9]*\.h"' "$f" | cut -d'"' -f2); do
      [ "$h" = x86.h ] && { echo "layering: $f includes x86.h: the plain code reaches a fast path through core/fast.h only"; bad=1; continue; }
      s=${stage[$h]:-}
      if [ -z "$s" ]; then echo "layering: $f includes $h, which no stage holds"; bad=1
      elif [ "$s" -gt "$i" ]; then echo "layering: $f ($i ${order[$i]}) includes $h of a later stage (${order[$s]})"; bad=1; fi
    done
  done
done
# the fast paths: the shared headers below both sides, never the generic ones they speed up
for f in arch/x86/*.[ch]; do
  for h in $(grep -ho '^#include "[a-z_0-9]*\.h"' "$f" | cut -d'"' -f2); do
    case $h in x86.h | fast.h | block.h | clones.h | f16.h | model.h | err.h | sort.h | rng.h | route_scan.h | gen_rng.h) ;;
    *) echo "layering: $f includes $h: a fast path may include only the headers below both sides"; bad=1 ;;
    esac
  done
done
# dispatch goes one way (core/fast.h): no plain file names an x86 function, and no x86
# file calls a function the plain code defines (its headers' inline helpers aside)
for i in "${!order[@]}"; do
  for f in "${order[$i]}"/*.[ch]; do
    grep -n 'amoe_x86_[a-z_0-9]*' "$f" | sed "s|^|layering: $f names an x86 function: |" | grep . && bad=1
  done
done
plain=$(for d in "${order[@]}"; do cat "$d"/*.c; done | grep -o '^[a-z][a-z_0-9 *]* \*\?\(amoe_[a-z_0-9]*\)(' | grep -o 'amoe_[a-z_0-9]*(' | sort -u)
for f in arch/x86/*.c; do
  for fn in $plain; do
    grep -q "[^a-z_0-9]${fn//(/\(}" "$f" && { echo "layering: $f calls ${fn%(} of the plain code"; bad=1; }
  done
done
# the command's modules: no circle among their includes (tsort names one)
cd ../harness || exit 1
edges=$(for f in *.[ch]; do
  m=${f%.*}; m=${m%%_*}
  for h in $(grep -ho '^#include "[a-z_0-9]*\.h"' "$f" | cut -d'"' -f2); do
    [ -f "$h" ] || continue # (the library's, below every module)
    t=${h%.h}; t=${t%%_*}
    [ "$t" != "$m" ] && echo "$m $t"
  done
done | sort -u)
loop=$(tsort <<<"$edges" 2>&1 >/dev/null | sed -n 's/^tsort: \([a-z0-9]*\)$/\1/p' | tr '\n' ' ')
if [ -n "$loop" ] || ! tsort <<<"$edges" >/dev/null 2>&1; then
  echo "layering: harness/ modules include one another in a circle: ${loop% }"; bad=1
fi
[ $bad = 0 ] && echo "layering: every include goes down the pipeline; dispatch goes one way; harness/ has no circle"
exit $bad
