#!/usr/bin/env bash
# The docs' generated blocks, written between their
# "<!-- BEGIN generated: NAME -->" and "<!-- END generated: NAME -->"
# markers so that they cannot drift from what they are made of. From the code:
#   policies  README.md, docs/spec.md   `acceptmoe policies --markdown` (sim/policy/policy.c)
#   keys      docs/spec.md              `acceptmoe keys --markdown` (harness/spec_keys.c)
#   resolved  docs/spec.md              the quickstart spec's spec.resolved.yaml
# From the committed reference results (RESULTS, default results/reference,
# which scripts/reproduce.sh writes and then runs this):
#   papers    README.md, docs/outcomes.md   scripts/papers-table.sh
#   reference, decompose-MODEL, marginal      docs/outcomes.md
#   kappa, batch-MODEL, cells-mape, cells-ratios   docs/validation.md
# A block whose results are not there is left as it is (said on stderr).
# Run it after changing a policy row, a key or a reference result; --check
# only says whether they match (tests/cli.sh runs it).
#   scripts/docs-generated.sh [--check]   (ACCEPTMOE: the binary, default build/acceptmoe)
set -euo pipefail
cd "$(dirname "$0")/.."
A=${ACCEPTMOE:-build/acceptmoe}
res=${RESULTS:-results/reference}
check=0
[ "${1:-}" = --check ] && check=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
status=0

splice() { # splice FILE NAME: the block between NAME's markers from $T/NAME
  local f=$1 name=$2
  grep -q "<!-- BEGIN generated: $name -->" "$f" || { echo "docs-generated: $f has no $name markers" >&2; exit 2; }
  awk -v src="$T/$name" -v b="<!-- BEGIN generated: $name -->" -v e="<!-- END generated: $name -->" '
    $0 == b { print; while ((getline l < src) > 0) print l; skip = 1; next }
    $0 == e { skip = 0 } !skip' "$f" >"$f.tmp"
  if [ "$check" = 1 ]; then
    cmp -s "$f" "$f.tmp" || { echo "docs-generated: $f's $name block differs from what makes it (run scripts/docs-generated.sh)" >&2; status=1; }
    rm -f "$f.tmp"
  else
    mv "$f.tmp" "$f"
  fi
}
have() { # have FILE...: whether every input of a block is there (else said, and the block left)
  local f
  for f in "$@"; do
    [ -e "$f" ] || { echo "docs-generated: no $f: its block left as it is" >&2; return 1; }
  done
}

# --- from the code
"$A" policies --markdown >"$T/policies"
"$A" keys --markdown >"$T/keys"
"$A" run workloads/specs/quickstart.yaml --out "$T/qs" --quiet >/dev/null
{ echo '```yaml'; cat "$T/qs/spec.resolved.yaml"; echo '```'; } >"$T/resolved"
splice README.md policies
splice docs/spec.md policies
splice docs/spec.md keys
splice docs/spec.md resolved

# --- from the reference results
if have "$res/acceptmoe-resident-qwen3/summary.csv" "$res/ecospec-deepseek-v3/summary.csv"; then
  scripts/papers-table.sh "$res" >"$T/papers"
  splice README.md papers
  splice docs/outcomes.md papers
  { echo "| run | policy | tau | executed | speedup | H2D MB/token | hit |"; echo "|---|---|---|---|---|---|---|"
    for d in "$res"/acceptmoe-* "$res"/ecospec-*; do
      awk -F, -v run="$(basename "$d")" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $1 == 0 { printf "| %s | %s | %.3f | %.2f | %.3f | %.1f | %.3f |\n", run, $c["policy"], $c["tau_mean"],
                  $c["executed_mean"], $c["speedup_vs_natural"], $c["h2d_bytes_per_token"] / 1e6, $c["cache_hit_rate"] }' "$d/summary.csv"
    done; } >"$T/reference"
  splice docs/outcomes.md reference
  # the acceptance model's κ sensitivity on the resident arm
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { k = $c["acceptance_model.kappa"]; if (!(k in seen)) { seen[k] = 1; ks[++n] = k }
      tau[k, $c["policy"]] = $c["tau_mean"]; sp[k, $c["policy"]] = $c["speedup_vs_natural"] }
    END { print "| κ | acceptmoe τ / speedup | acceptmoe-fix B=32 τ / speedup | moe-spec B=32 τ / speedup |"
      print "|---|---|---|---|"
      split("acceptmoe acceptmoe-fix/B=32 moe-spec/B=32", r, " ")
      for (i = 1; i <= n; i++) { k = ks[i]; printf "| %s |", (k == 0.14 ? "**0.14**" : k)
        for (j = 1; j <= 3; j++) printf " %.3f / %.3f× |", tau[k, r[j]], sp[k, r[j]]; print "" } }' \
    "$res/acceptmoe-resident-qwen3/summary.csv" >"$T/kappa"
  splice docs/validation.md kappa
fi
if have "$res/decompose-ecospec.md"; then # what moves EcoSpec's result, one switch at a time, per model
  for m in qwen3-235b-a22b gpt-oss-120b deepseek-v3; do
    awk -v m="$m" '$0 == "### " m " " || index($0, "### " m " (") == 1 { on = 1; next } on && /^\|/ { print; got = 1; next }
      on && got { exit }' "$res/decompose-ecospec.md" >"$T/decompose-$m"
    splice docs/outcomes.md "decompose-$m"
  done
fi
if have "$res/marginal/pooled.csv"; then
  { echo "Nothing tuned: marginal at its default share 1. Mean ± standard deviation over seeds 201–204; predicted: the deviated-token rate the row's sizing predicted (AcceptMoE's: the prediction marginal made for its sets on the same passes); the last column is the speed over AcceptMoE's on the same seed, mean (min–max). Speed under load is the wall rate."
    echo
    echo "| setting | policy | tokens/s | speedup | deviated tokens | predicted | H2D MB/token | executed | over AcceptMoE |"
    echo "|---|---|---|---|---|---|---|---|---|"
    awk -F, 'NR == 1 { next }
      $2 == "natural" || $2 == "acceptmoe" || $2 == "oracle" || $2 == "marginal" || $2 == "marginal-depth" {
        printf "| %s | %s | %.1f ± %.1f | %.3f | %.4f ± %.4f | %s | %.1f | %.2f | %.3f (%.3f–%.3f) |\n", $1, $2, $6, $7, $8, $10,
               $11, $2 == "acceptmoe" || $3 ~ /^marginal/ ? sprintf("%.4f", $12) : "", $13, $14, $15, $16, $17 }' "$res/marginal/pooled.csv"
  } >"$T/marginal"
  splice docs/outcomes.md marginal
fi
for m in "qwen3:128" "deepseek:256"; do # the batch figure's tables: speed over plain decoding, executed experts
  f="$res/figure-batch-${m%%:*}/summary.csv"
  have "$f" || continue
  awk -F, -v E="${m#*:}" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { b = $c["workload.batch"]; p = $c["policy"]; if (!(b in seen)) { seen[b] = 1; bs[++nb] = b }
      if (!(p in known)) { known[p] = 1; pol[++np] = p }
      tps[b, p] = $c["tokens_per_s"]; ex[b, p] = $c["executed_mean"] }
    END { printf "| row |"; for (i = 1; i <= nb; i++) printf " B = %s |", bs[i]; print ""
      printf "|---|"; for (i = 1; i <= nb; i++) printf "---|"; print ""
      for (j = 1; j <= np; j++) if (pol[j] != "autoregressive") { printf "| %s |", pol[j]
        for (i = 1; i <= nb; i++) printf " %.2f |", tps[bs[i], pol[j]] / tps[bs[i], "autoregressive"]; print "" }
      printf "| plain decoding, tok/s |"; for (i = 1; i <= nb; i++) printf " %.0f |", tps[bs[i], "autoregressive"]; print ""
      split("natural acceptmoe acceptmoe-pass", xr, " ")
      for (j = 1; j <= 3; j++) { printf "| %s: executed%s |", xr[j], j == 1 ? " of " E : ""
        for (i = 1; i <= nb; i++) printf " %.0f |", ex[bs[i], xr[j]]; print "" } }' "$f" >"$T/batch-${m%%:*}"
  splice docs/validation.md "batch-${m%%:*}"
done
if have "$res/cells/matrix.md"; then # the error matrix's MAPE and on/off ratio tables as printed
  awk '$0 ~ /^\| by \|/ { on = 1 } on && !/^\|/ { if (seen) exit } on { print; seen = 1 }' "$res/cells/matrix.md" >"$T/cells-mape"
  splice docs/validation.md cells-mape
  { awk '$0 ~ /^\| on \| off \|/ { on = 1 } on && !/^\|/ { if (seen) exit } on { print; seen = 1 }' "$res/cells/matrix.md"
    echo; grep '^Ratio MAPE' "$res/cells/matrix.md" || true; } >"$T/cells-ratios"
  splice docs/validation.md cells-ratios
fi
exit $status
