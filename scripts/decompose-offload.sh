#!/usr/bin/env bash
# Which term moves each number of AcceptMoE's offload arm: runs
# workloads/specs/acceptmoe-offload-qwen3.yaml (LRU) with the engine and
# request terms of docs/design.md §8-§9 switched on one at a time, from the
# model as it was before them (CUDA graphs, no prefill, a fixed request
# bias) to the paper's settings, and prints speedup, H2D reduction, hit
# points and natural's fetch-wait share beside the paper's (never fitted to);
# then single changes to the paper's settings that the paper does not pin.
#   scripts/decompose-offload.sh [BLOCKS]      (default 1000; ACCEPTMOE: the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
A=${ACCEPTMOE:-build/acceptmoe}
blocks=${1:-1000}
spec=workloads/specs/acceptmoe-offload-qwen3.yaml
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
# the routing fitted before the reuse-distance target: a fixed request bias
fixed=(--set model.routing.locality=0.9493 --set model.routing.locality_first=0.0001 --set model.routing.locality_last=0.3093
  --set model.routing.locality_peak=0.1489 --set model.routing.request_bias=2.2144 --set model.routing.noise=0.7773
  --set model.routing.tree_sibling=null --set model.routing.tree_repeat=null --set model.routing.drift_tokens=0)
# the engine as a C++ engine's launches (the hardware's launch_s, 15 kernels a layer, added to
# the device time) and no speculative cycle beyond the draft's forwards: the model before
# the cycle fit (which also charged one draft forward more)
cpp=(--set engine.launch_s=0 --set engine.host_overlap=false --set engine.kernels_per_layer=15
  --set engine.moe_call_host_s=0 --set engine.draft_step_s=0 --set engine.tree_node_s=0 --set engine.cycle_host_s=0)
cycle=(--set engine.draft_step_s=0 --set engine.tree_node_s=0 --set engine.cycle_host_s=0)
steps=(
  "graphs on, no prefill, fixed request bias|--set engine.cuda_graphs=true --set engine.overlap_scheduler=true --set workload.prompt_tokens=0 ${fixed[*]} ${cpp[*]}"
  "+ eager launches (CUDA graphs off)|--set engine.cuda_graphs=false --set engine.overlap_scheduler=true --set workload.prompt_tokens=0 ${fixed[*]} ${cpp[*]}"
  "+ overlap scheduler off|--set workload.prompt_tokens=0 ${fixed[*]} ${cpp[*]}"
  "+ prefill through the caches|${fixed[*]} ${cpp[*]}"
  "+ request drift (fitted to reuse distance too), no tree mechanism|--set model.routing.tree_sibling=null --set model.routing.tree_repeat=null ${cpp[*]}"
  "+ the tree mechanism (the preset, fitted to a real tree's union)|${cpp[*]}"
  "+ SGLang's eager host (sglang-eager: Python launches, 232 µs per fused-MoE call)|${cycle[*]}"
  "+ the speculative cycle (draft step, tree nodes, 8.87 ms host per cycle): the paper's settings|"
  "sensitivity: 512-token prompts|--set workload.prompt_tokens=512"
  "sensitivity: prefill bypasses the caches|--set offload.prefill=bypass"
  "sensitivity: caches emptied at each request|--set offload.reset=request"
  "sensitivity: the MIN cache (optimal replacement with bypass)|--set offload.policy=min"
)
echo "| model | natural tok/s | acceptmoe speedup | H2D per token, acceptmoe vs natural | hit natural → acceptmoe | natural fetch-wait share |"
echo "|---|---|---|---|---|---|"
i=0
for st in "${steps[@]}"; do
  name=${st%%|*}
  read -r -a args <<<"${st#*|}"
  "$A" run "$spec" --set workload.blocks="$blocks" --set offload.policy=lru ${args[@]+"${args[@]}"} --out "$T/$i" --quiet >/dev/null
  awk -F, -v name="$name" 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}
    $c["policy"]=="natural"{n=$c["tokens_per_s"];nh=$c["h2d_bytes_per_token"];nc=$c["cache_hit_rate"];nw=$c["fetch_wait_share"]}
    $c["policy"]=="acceptmoe"{a=$c["speedup_vs_natural"];ah=$c["h2d_bytes_per_token"];ac=$c["cache_hit_rate"]}
    END{printf "| %s | %.1f | %.2f× | %+.1f%% | %.1f%% → %.1f%% (%+.1f) | %.1f%% |\n", name, n, a, 100*(ah/nh-1), 100*nc, 100*ac, 100*(ac-nc), 100*nw}' \
    "$T/$i/summary.csv"
  i=$((i + 1))
done
echo "| paper (RTX 5090, SGLang; never fitted to) | | 2.06× | −73.6% to −77.1% | +10.8 to +14.2 | 65–78% |"
