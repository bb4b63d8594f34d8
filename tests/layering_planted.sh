#!/usr/bin/env bash
# The layering check fails where it should: on a copy of the tree, a core
# file that includes a later stage's header (an arrow up), and two harness
# modules that include each other (a circle), each named.
# usage: layering_planted.sh SOURCE_DIR
set -u
src=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
plant() { # plant NAME FILE LINE WANT: the copy with LINE on top of FILE must fail naming WANT
  rm -rf "$T/tree" && mkdir "$T/tree" && cp -r "$src/sim" "$src/harness" "$src/tests" "$T/tree/"
  sed -i "1i $3" "$T/tree/$2"
  local out
  if out=$(bash "$src/tests/layering.sh" "$T/tree" 2>&1); then echo "FAIL: $1: the check passed"; fail=1
  elif ! grep -q -- "$4" <<<"$out"; then echo "FAIL: $1: no '$4' in: $out"; fail=1; fi
}
plant "an arrow up" sim/core/err.c '#include "cost.h"' 'core/err.c (0 core) includes cost.h of a later stage (cost)'
plant "a circle" harness/exec.h '#include "results.h"' 'harness/ modules include one another in a circle: '
[ $fail = 0 ] && echo "layering_planted: an arrow up and a circle each fail the check"
exit $fail
