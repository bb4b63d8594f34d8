#!/usr/bin/env bash
# The docs' generated blocks, written from the code between their
# "<!-- BEGIN generated: NAME -->" and "<!-- END generated: NAME -->"
# markers, so that they cannot drift from it:
#   policies  README.md, docs/spec.md   `acceptmoe policies --markdown` (sim/policy/policy.c)
#   keys      docs/spec.md              `acceptmoe keys --markdown` (harness/spec_keys.c)
#   resolved  docs/spec.md              the quickstart spec's spec.resolved.yaml
# Run it after changing a policy row or a key; --check only says whether
# they match (tests/cli.sh runs it).
#   scripts/docs-generated.sh [--check]   (ACCEPTMOE: the binary, default build/acceptmoe)
set -euo pipefail
cd "$(dirname "$0")/.."
A=${ACCEPTMOE:-build/acceptmoe}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$A" policies --markdown >"$T/policies"
"$A" keys --markdown >"$T/keys"
"$A" run workloads/specs/quickstart.yaml --out "$T/qs" --quiet >/dev/null
{ echo '```yaml'; cat "$T/qs/spec.resolved.yaml"; echo '```'; } >"$T/resolved"
status=0
splice() { # splice FILE NAME: the block between NAME's markers from $T/NAME
  local f=$1 name=$2
  grep -q "<!-- BEGIN generated: $name -->" "$f" || { echo "docs-generated: $f has no $name markers" >&2; exit 2; }
  awk -v src="$T/$name" -v b="<!-- BEGIN generated: $name -->" -v e="<!-- END generated: $name -->" '
    $0 == b { print; while ((getline l < src) > 0) print l; skip = 1; next }
    $0 == e { skip = 0 } !skip' "$f" >"$f.tmp"
  if [ "$check" = 1 ]; then
    cmp -s "$f" "$f.tmp" || { echo "docs-generated: $f's $name block differs from the code's (run scripts/docs-generated.sh)" >&2; status=1; }
    rm -f "$f.tmp"
  else
    mv "$f.tmp" "$f"
  fi
}
check=0
[ "${1:-}" = --check ] && check=1
splice README.md policies
splice docs/spec.md policies
splice docs/spec.md keys
splice docs/spec.md resolved
exit $status
