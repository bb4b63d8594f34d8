#!/usr/bin/env bash
# Which term of the score shape (docs/design.md §5) moves AcceptMoE's
# numbers: runs the offload arm (workloads/specs/acceptmoe-offload-qwen3.yaml,
# LRU) and the resident arm (acceptmoe-resident-qwen3.yaml, κ 0.14) with the
# router terms switched on one at a time, from the model as it was before
# them (softmax weights over the stored logits, Mixtral's temperature for the
# shape) to the preset as it is, and prints AcceptMoE's set size and executed experts, hit rate, H2D
# per token and speedup beside the papers' (never fitted to).
#   scripts/decompose-shape.sh [BLOCKS]      (default 1000; ACCEPTMOE: the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
A=${ACCEPTMOE:-build/acceptmoe}
blocks=${1:-1000}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
# the score shape before it was fitted: the logits as generated
before=(--set model.routing.score_scale=null)
steps=(
  "before: softmax over the stored logits, Mixtral's temperature for the shape|--set model.router=softmax ${before[*]}"
  "+ the router's kind (softmax, top-k renormalised)|${before[*]}"
  "+ score shape fitted to the real entropy per layer: the preset|"
)
for arm in offload resident; do
  spec=workloads/specs/acceptmoe-$arm-qwen3.yaml
  extra=(--set workload.blocks="$blocks")
  [ $arm = offload ] && extra+=(--set offload.policy=lru)
  [ $arm = resident ] && extra+=(--set acceptance_model.kappa=0.14)
  echo
  echo "$arm ($spec)"
  echo
  echo "| model | acceptmoe \|S\| | executed natural → acceptmoe | top-1 weight | hit natural → acceptmoe | H2D per token vs natural | speedup | deviated |"
  echo "|---|---|---|---|---|---|---|---|"
  i=0
  for st in "${steps[@]}"; do
    name=${st%%|*}
    read -r -a args <<<"${st#*|}"
    "$A" run "$spec" "${extra[@]}" ${args[@]+"${args[@]}"} --out "$T/$arm$i" --quiet >/dev/null
    w=$("$A" inspect "$spec" --set workload.blocks=200 ${args[@]+"${args[@]}"} 2>/dev/null |
      sed -n 's/.*renormalised top-1 weight: \([0-9.]*\).*/\1/p')
    awk -F, -v name="$name" -v w="$w" 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}
      $c["point"]!=0{next}
      $c["policy"]=="natural"{nx=$c["executed_mean"];nh=$c["h2d_bytes_per_token"];nc=$c["cache_hit_rate"]}
      $c["policy"]=="acceptmoe"{s=$c["eligible_mean"];ax=$c["executed_mean"];a=$c["speedup_vs_natural"];ah=$c["h2d_bytes_per_token"];ac=$c["cache_hit_rate"];d=$c["deviated_token_rate"]}
      END{printf "| %s | %.1f | %.1f → %.1f | %s | %.1f%% → %.1f%% | %s | %.3f× | %.4f |\n", name, s, nx, ax, w, 100*nc, 100*ac,
          (nh>0?sprintf("%+.1f%%",100*(ah/nh-1)):"(resident)"), a, d}' "$T/$arm$i/summary.csv"
    i=$((i + 1))
  done
done
echo
echo "papers (never fitted to): offload 2.06×, H2D −73.6% to −77.1%, hit +10.8 to +14.2 points; resident 1.290× (1.217–1.339×)"
