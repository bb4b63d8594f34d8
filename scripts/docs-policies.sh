#!/usr/bin/env bash
# The policy table of README.md and docs/spec.md, written from the registry
# (`acceptmoe policies --markdown`) between their "generated: policies"
# markers, so the lists cannot drift from sim/policy/policy.c. Run it after
# adding or changing a policy row; --check only says whether they match
# (tests/cli.sh runs it).
#   scripts/docs-policies.sh [--check]   (ACCEPTMOE: the binary, default build/acceptmoe)
set -euo pipefail
cd "$(dirname "$0")/.."
A=${ACCEPTMOE:-build/acceptmoe}
table=$("$A" policies --markdown)
status=0
for f in README.md docs/spec.md; do
  grep -q '<!-- BEGIN generated: policies -->' "$f" || { echo "docs-policies: $f has no policies markers" >&2; exit 2; }
  awk -v t="$table" '/<!-- BEGIN generated: policies -->/ { print; print t; skip = 1; next }
    /<!-- END generated: policies -->/ { skip = 0 } !skip' "$f" >"$f.tmp"
  if [ "${1:-}" = --check ]; then
    cmp -s "$f" "$f.tmp" || { echo "docs-policies: $f's policy table differs from \`acceptmoe policies --markdown\` (run scripts/docs-policies.sh)" >&2; status=1; }
    rm -f "$f.tmp"
  else
    mv "$f.tmp" "$f"
  fi
done
exit $status
