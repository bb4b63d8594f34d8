/* The spec loader's diagnostics and its key table: every stable key with
 * its type, range and what its default depends on; setting one from text. */
#include "spec_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ diagnostics */

void amoe_diag_add(amoe_diag *d, const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (d->n == d->cap) {
    int nc = d->cap ? 2 * d->cap : 16;
    char **nm = realloc(d->msgs, (size_t)nc * sizeof *nm);
    if (!nm) return;
    d->msgs = nm;
    d->cap = nc;
  }
  d->msgs[d->n] = strdup(buf);
  if (d->msgs[d->n]) d->n++;
}

void amoe_diag_print(const amoe_diag *d, FILE *f) {
  for (int i = 0; i < d->n; i++) fprintf(f, "%s\n", d->msgs[i]);
}

void amoe_diag_free(amoe_diag *d) {
  for (int i = 0; i < d->n; i++) free(d->msgs[i]);
  free(d->msgs);
  memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------ key table */

/* model.routing.* and workload.routing.*: one set of fields and ranges, two
 * homes (a workload's override is nullable: null keeps the model's) */
#define ROUTING_KEYS(P, R, NULLABLE, SKEW_AUTO)                                             \
  {P "locality", T_DBL, F(R.locality), 0, 0.999, NULL, NULLABLE, 0, 0, "token-to-token locality ρ at its profile's peak (docs/generator.md)"},                         \
      {P "locality_first", T_DBL, F(R.locality_first), 0, 0.999, NULL, NULLABLE, 0, 0, "ρ at the first MoE layer"},         \
      {P "locality_last", T_DBL, F(R.locality_last), 0, 0.999, NULL, NULLABLE, 0, 0, "ρ at the last MoE layer"},           \
      {P "locality_peak", T_DBL, F(R.locality_peak), 0, 1, NULL, NULLABLE, 0, 0, "where ρ peaks, as a share of the MoE layers (0..1)"},               \
      {P "request_bias", T_DBL, F(R.request_bias), 0, 100, NULL, NULLABLE, 0, 0, "sd of a per-request expert bias (concentrates a request's tokens)"},               \
      {P "noise", T_DBL, F(R.noise), 0, 100, NULL, NULLABLE, 0, 0, "the token-specific share of each logit"},                             \
      {P "drift_tokens", T_DBL, F(R.drift_tokens), 0, 1e9, NULL, NULLABLE, 0, 0, "the request bias's time constant, committed tokens (0: fixed)"},               \
      {P "temperature", T_DBL, F(R.temperature), 1e-3, 1e3, NULL, NULLABLE, 0, 0, "the router's temperature"},              \
      {P "layer_correlation", T_DBL, F(R.layer_correlation), 0, 0.999, NULL, NULLABLE, 0, 0, "how much of a token's state carries from one MoE layer to the next"},   \
      {P "skew", T_DVEC, F(R.skew), 0, 100, NULL, 1, 0, SKEW_AUTO, "the popularity bias per layer (null: by the expert count)"},                          \
      {P "score_scale", T_DVEC, F(R.score_scale), 1e-3, 1e3, NULL, 1, 0, 0, "every stored logit times it after top-k is drawn (null: 1)"},                 \
      {P "tree_sibling", T_DVEC, F(R.tree_sibling), 0, 0.99, NULL, 1, 0, 0, "the share of a node's fresh normals common to its siblings (0..0.99)"},                 \
  {                                                                                          \
    P "tree_repeat", T_DVEC, F(R.tree_repeat), 0, 1, NULL, 1, 0, 0, "the probability a node routes as the first node of its depth and rank"                           \
  }
/* The stable keys of docs/design.md §13, in the order spec.resolved.yaml lists them. */
const krow KEYS[] = {
    {"name", T_STR, F(name), 0, 0, NULL, 0, 0, 0, "the spec's name, in results and meta.json"},
    {"baseline", T_BOOL, F(baseline), 0, 0, NULL, 0, 0, 0, "false: run only the listed rows (no implicit natural row)"},
    {"model.name", T_STR, F(model.name), 0, 0, NULL, 0, 0, 0, "the model's name (a preset's, or your own)"},
    {"model.layers", T_INT, F(model.layers), 1, AMOE_MAX_LAYERS, NULL, 0, 0, 0, "decoder layers"},
    {"model.moe_layers", T_INT, F(model.moe_layers), 0, AMOE_MAX_LAYERS, NULL, 0, 0, 0, "decoder layers with routed experts (the rest dense)"},
    {"model.experts", T_INT, F(model.experts), 2, AMOE_MAX_EXPERTS, NULL, 0, 0, 0, "routed experts per MoE layer"},
    {"model.top_k", T_INT, F(model.top_k), 1, AMOE_MAX_TOPK, NULL, 0, 0, 0, "experts each token routes to"},
    {"model.shared_experts", T_INT, F(model.shared_experts), 0, 64, NULL, 0, 0, 0, "always-on experts per MoE layer"},
    {"model.hidden", T_INT, F(model.hidden), 1, 1 << 20, NULL, 0, 0, 0, "hidden size d"},
    {"model.moe_intermediate", T_INT, F(model.moe_intermediate), 1, 1 << 20, NULL, 0, 0, 0, "an expert's intermediate size f"},
    {"model.dense_intermediate", T_INT, F(model.dense_intermediate), 0, 1 << 22, NULL, 0, 0, 0, "a dense layer's intermediate size (0: none)"},
    {"model.router", T_ENUM, F(model.router), 0, 0, amoe_router_names, 0, 0, 0, "the router's kind (docs/design.md §5)"},
    {"model.weight_format", T_ENUM, F(model.weight_format), 0, 0, amoe_weight_fmt_names, 0, 0, 0, "the experts' weight format (bytes per weight with scales)"},
    {"model.expert_bytes", T_DBL, F(model.expert_bytes), 0, BIG, NULL, 0, 0, 0, "one expert's bytes (0: from d, f and the format)"},
    {"model.attn_bytes_per_layer", T_DBL, F(model.attn_bytes_per_layer), 0, BIG, NULL, 0, 0, 0, "attention weights per layer, bytes"},
    {"model.kv_bytes_per_token_layer", T_DBL, F(model.kv_bytes_per_token_layer), 0, BIG, NULL, 0, 0, 0, "KV cache bytes per token and layer"},
    {"model.kv_heads", T_INT, F(model.kv_heads), 0, 4096, NULL, 0, 0, 0, "GQA KV heads a token's KV splits over (0: MLA's latent, whole on every rank)"},
    {"model.vocab", T_INT, F(model.vocab), 0, 1 << 24, NULL, 0, 0, 0, "vocabulary size"},
    {"model.attn_flops_per_key", T_DBL, F(model.attn_flops_per_key), 0, BIG, NULL, 0, 0, 0, "attention FLOPs per query-key pair and layer, every head's QK and PV (0: 4 x hidden)"},
    {"model.dense_format", T_ENUM, F(model.dense_format), 0, 0, amoe_dense_fmt_names, 0, 0, 0, "the dense weights' format (attention, shared experts): attn_bytes_per_layer's bytes per parameter and the GEMM table hardware.kernels takes (auto: fp8 beside fp8-block128 experts, else bf16)"},
    {"model.kernels_per_layer", T_DBL, F(model.kernels_per_layer), 0, 1e4, NULL, 0, 0, 0, "kernels an eager decoder layer of this model launches (0: the engine's kernels_per_layer)"},
    {"model.lm_head_bytes", T_DBL, F(model.lm_head_bytes), 0, BIG, NULL, 0, 0, 0, "the LM head's bytes"},
    {"model.draft_head_bytes", T_DBL, F(model.draft_head_bytes), 0, BIG, NULL, 0, 0, 0, "the draft head's bytes (EAGLE/MTP), read each draft step"},
    ROUTING_KEYS("model.routing.", model.routing, 0, AUTO_BY_MODEL),
    {"hardware.name", T_STR, F(hw.name), 0, 0, NULL, 0, 0, 0, "the hardware's name (a preset's, or your own)"},
    {"hardware.hbm_bw", T_DBL, F(hw.hbm_bw), 1e6, BIG, NULL, 0, 0, 0, "device memory bandwidth, B/s (the measured copy rate)"},
    {"hardware.h2d_bw", T_DBL, F(hw.h2d_bw), 1e6, BIG, NULL, 0, 0, 0, "pinned host-to-device bandwidth, B/s (offload)"},
    {"hardware.peak_flops", T_DBL, F(hw.peak_flops), 1e6, BIG, NULL, 0, 0, 0, "dense bf16 FLOP/s"},
    {"hardware.peak_flops_fp8", T_DBL, F(hw.peak_flops_fp8), 0, BIG, NULL, 0, 0, 0, "dense fp8 FLOP/s (0: the next wider format's)"},
    {"hardware.peak_flops_fp4", T_DBL, F(hw.peak_flops_fp4), 0, BIG, NULL, 0, 0, 0, "dense fp4 FLOP/s (0: the next wider format's)"},
    {"hardware.moe_flops", T_DBL, F(hw.moe_flops), 0, BIG, NULL, 0, 0, 0, "FLOP/s a routed expert's tokens compute at (0: the format's peak)"},
    {"hardware.moe_flops_tokens", T_DBL, F(hw.moe_flops_tokens), 0, 1e6, NULL, 0, 0, 0, "tokens per expert moe_flops holds for; beyond them, the peak (0: all)"},
    {"hardware.moe_peak_share", T_DBL, F(hw.moe_peak_share), 0, 1, NULL, 0, 0, 0, "share of the format's peak an expert's tokens past moe_flops_tokens reach (0: 1)"},
    {"hardware.launch_s", T_DBL, F(hw.launch_s), 0, 1, NULL, 0, 0, 0, "host time per kernel launch, s"},
    {"hardware.memory_bytes", T_DBL, F(hw.memory_bytes), 0, BIG, NULL, 0, 0, 0, "device memory per GPU, bytes (KV capacity)"},
    {"hardware.step_s", T_DBL, F(hw.step_s), 0, 1, NULL, 0, 0, 0, "sampling, scheduling and tree masks per forward pass, s"},
    {"hardware.layer_fixed_s", T_DBL, F(hw.layer_fixed_s), 0, 1, NULL, 0, 0, 0, "a decoder layer's small dense kernels, s"},
    {"hardware.moe_t0_s", T_DBL, F(hw.moe_t0_s), 0, 1, NULL, 0, 0, 0, "fixed cost of one fused-MoE call, s"},
    {"hardware.moe_eta", T_DBL, F(hw.moe_eta), 0.01, 2, NULL, 0, 0, 0, "an expert's streaming rate as a share of hbm_bw"},
    {"hardware.kernels", T_STR, F(hw.kernels), 0, 0, NULL, 1, 0, 0, "a measured kernel table for the MoE terms, aic:GPU:ENGINE:VERSION (docs/design.md §20; null: the analytic terms)"},
    {"hardware.kernel_ops", T_ENUM, F(hw.kernel_ops), 0, 0, amoe_kernel_ops_names, 0, 0, 0, "what hardware.kernels replaces: moe (the experts' terms), gemm (the dense projections and head), or moe+gemm"},
    {"hardware.moe_expert_s", T_DBL, F(hw.moe_expert_s), 0, 1, NULL, 0, 0, 0, "an expert's time at few tokens, s (hardware.kernels sets it; 0: bytes over moe_eta · hbm_bw)"},
    {"hardware.moe_token_s", T_DBL, F(hw.moe_token_s), 0, 1, NULL, 0, 0, 0, "an expert's time per token it serves, s (hardware.kernels sets it; 0: its FLOPs at moe_flops)"},
    {"hardware.draft_step_fixed_s", T_DBL, F(hw.draft_step_fixed_s), 0, 1, NULL, 0, 0, 0, "fixed cost per draft forward, s"},
    {"hardware.copy_latency_s", T_DBL, F(hw.copy_latency_s), 0, 1, NULL, 0, 0, 0, "latency per expert copy under offload, s"},
    {"hardware.readback_s", T_DBL, F(hw.readback_s), 0, 1, NULL, 0, 0, 0, "the routing's read-back and sync per MoE layer under offload, s"},
    {"hardware.step_host_s", T_DBL, F(hw.step_host_s), 0, 1, NULL, 0, 0, 0, "the step's host work when no overlap scheduler hides it, s"},
    {"hardware.cuda_graphs", T_BOOL, F(hw.cuda_graphs), 0, 0, NULL, 0, 0, 0, "the engine mode's default: CUDA graphs on"},
    {"hardware.gpus", T_INT, F(hw.gpus), 1, AMOE_MAX_GPUS, NULL, 0, 0, 0, "GPUs in the node"},
    {"hardware.interconnect.name", T_STR, F(hw.ic.name), 0, 0, NULL, 1, 0, 0, "the interconnect preset (workloads/interconnect/)"},
    {"hardware.interconnect.allreduce_latency_s", T_DBL, F(hw.ic.allreduce_latency_s), 0, 1, NULL, 0, 0, 0, "an all-reduce's latency, s"},
    {"hardware.interconnect.allreduce_bw", T_DBL, F(hw.ic.allreduce_bw), 0, BIG, NULL, 0, 0, 0, "an all-reduce's bus bandwidth, B/s"},
    {"hardware.interconnect.dispatch_s", T_DBL, F(hw.ic.dispatch_s), 0, 1, NULL, 0, 0, 0, "expert-parallel dispatch per layer, s"},
    {"hardware.interconnect.combine_s", T_DBL, F(hw.ic.combine_s), 0, 1, NULL, 0, 0, 0, "expert-parallel combine per layer, s"},
    {"hardware.interconnect.layer_sync_per_peer_s", T_DBL, F(hw.ic.layer_sync_per_peer_s), 0, 1, NULL, 0, 0, 0, "per decoder layer and GPU beyond the first, the collectives' wait, s"},
    {"hardware.interconnect.hop_latency_s", T_DBL, F(hw.ic.hop_latency_s), 0, 1, NULL, 0, 0, 0, "a pipeline hop's latency, s"},
    {"hardware.interconnect.hop_bw", T_DBL, F(hw.ic.hop_bw), 0, BIG, NULL, 0, 0, 0, "a pipeline hop's bandwidth, B/s"},
    {"hardware.overlap_scheduler", T_BOOL, F(hw.overlap_scheduler), 0, 0, NULL, 0, 0, 0, "the engine mode's default: the overlap scheduler on"},
    {"experts", T_STR, F(experts), 0, 0, NULL, 0, 0, 0, "where the routed experts live: gpu, cpu, cpu:SHARE:STRATEGY (random, uniform, front, frequency) or cpu-layers:N (docs/design.md §21)"},
    {"host.name", T_STR, F(host.name), 0, 0, NULL, 0, 0, 0, "the host's name (a preset of workloads/hosts/, or your own)"},
    {"host.cores", T_INT, F(host.cores), 0, 4096, NULL, 0, 0, 0, "a socket's cores"},
    {"host.isa", T_ENUM, F(host.isa), 0, 0, amoe_host_isa_names, 0, 0, 0, "the widest vector ISA the expert kernels use"},
    {"host.sockets", T_INT, F(host.sockets), 1, 16, NULL, 0, 0, 0, "CPU sockets"},
    {"host.channels", T_INT, F(host.channels), 0, 64, NULL, 0, 0, 0, "DRAM channels a socket"},
    {"host.mts", T_DBL, F(host.mts), 0, 1e5, NULL, 0, 0, 0, "the DRAM's millions of transfers a second (DDR5-4800: 4800)"},
    {"host.bw_share", T_DBL, F(host.bw_share), 0, 1, NULL, 0, 0, 0, "the share of the channels' peak an expert kernel's reads reach"},
    {"host.flops", T_DBL, F(host.flops), 0, BIG, NULL, 0, 0, 0, "a socket's expert FLOP/s at 16-bit weights"},
    {"host.flops_int8", T_DBL, F(host.flops_int8), 0, BIG, NULL, 0, 0, 0, "a socket's expert ops/s at 8-bit and narrower weights (0: host.flops)"},
    {"host.flops_vector", T_DBL, F(host.flops_vector), 0, BIG, NULL, 0, 0, 0, "a socket's expert FLOP/s in vector kernels, for formats the matrix units' kernels do not take (q4_k_m; 0: host.flops)"},
    {"host.expert_fixed_s", T_DBL, F(host.expert_fixed_s), 0, 1, NULL, 0, 0, 0, "fixed cost per expert a pass computes on the host, s"},
    {"host.socket_gain", T_DBL, F(host.socket_gain), 0, 1, NULL, 0, 0, 0, "what a second socket adds, as a share of one socket's rates"},
    {"parallel.attention_tp", T_INT, F(parallel.attention_tp), 0, AMOE_MAX_GPUS, NULL, 0, 0, AUTO_BY_LAYOUT, "attention tensor-parallel ranks (0: from hardware.gpus)"},
    {"parallel.moe_ep", T_INT, F(parallel.moe_ep), 0, AMOE_MAX_GPUS, NULL, 0, 0, AUTO_BY_LAYOUT, "expert-parallel groups (0: from the layout)"},
    {"parallel.moe_tp", T_INT, F(parallel.moe_tp), 0, AMOE_MAX_GPUS, NULL, 0, 0, AUTO_BY_LAYOUT, "expert tensor-parallel ranks (0: from the layout)"},
    {"parallel.placement", T_ENUM, F(parallel.placement), 0, 0, amoe_placement_names, 0, 0, 0, "how experts are laid over the EP groups"},
    {"parallel.placement_file", T_STR, F(parallel.placement_file), 0, 0, NULL, 1, 0, 0, "placement: file: the layout's file"},
    {"parallel.redundant", T_INT, F(parallel.redundant), 0, AMOE_MAX_EXPERTS, NULL, 0, 0, 0, "placement: balanced: extra expert copies per layer"},
    {"parallel.moe_comm", T_ENUM, F(parallel.moe_comm), 0, 0, amoe_moe_comm_names, 0, 0, 0, "the MoE layer's collective"},
    {"parallel.attention_dp", T_INT, F(parallel.attention_dp), 0, AMOE_MAX_GPUS, NULL, 0, 0, 0, "data-parallel attention copies, each running its own requests (0: 1; SGLang's DP attention)"},
    {"parallel.pipeline", T_INT, F(parallel.pipeline), 0, AMOE_MAX_GPUS, NULL, 0, 0, 0, "pipeline stages, one GPU each (needs hop_latency_s and hop_bw)"},
    {"engine.cuda_graphs", T_BOOL, F(engine.cuda_graphs), 0, 0, NULL, 0, 0, AUTO_BY_HW, "CUDA graphs on (unset: the hardware preset's)"},
    {"engine.overlap_scheduler", T_BOOL, F(engine.overlap_scheduler), 0, 0, NULL, 0, 0, AUTO_BY_HW, "the overlap scheduler on (unset: the hardware preset's)"},
    {"engine.name", T_STR, F(engine.name), 0, 0, NULL, 1, 0, 0, "the engine preset (workloads/engines/)"},
    {"engine.moe_kernels", T_ENUM, F(engine.moe_kernels), 0, 0, amoe_moe_kernels_names, 0, 0, 0, "fused: one call per wave; per-expert; loop: a host loop over experts"},
    {"engine.kernels_per_layer", T_DBL, F(engine.kernels_per_layer), 0, 1e4, NULL, 0, 0, 0, "kernels an eager engine launches per decoder layer"},
    {"engine.kernels_per_expert", T_DBL, F(engine.kernels_per_expert), 0, 1e4, NULL, 0, 0, 0, "per-expert kernels: launches per executed expert"},
    {"engine.visits", T_ENUM, F(engine.visits), 0, 0, amoe_visits_names, 0, 0, 0, "loop: which experts it visits, and whether it runs the empty ones"},
    {"engine.expert_host_s", T_DBL, F(engine.expert_host_s), 0, 1, NULL, 0, 0, 0, "loop: host time of an executed expert, s"},
    {"engine.visit_host_s", T_DBL, F(engine.visit_host_s), 0, 1, NULL, 0, 0, 0, "loop: host time of a visited expert that runs nothing, s"},
    {"engine.host_overlap", T_BOOL, F(engine.host_overlap), 0, 0, NULL, 0, 0, 0, "a sync-free layer takes max(host, device), not their sum"},
    {"engine.launch_s", T_DBL, F(engine.launch_s), 0, 1, NULL, 0, 0, 0, "the engine's host time per launch, s (0: the hardware's)"},
    {"engine.moe_call_host_s", T_DBL, F(engine.moe_call_host_s), 0, 1, NULL, 0, 0, 0, "eager: host time of one fused-MoE call from Python, s (0: one launch)"},
    {"engine.request_s", T_DBL, F(engine.request_s), 0, 1, NULL, 0, 0, 0, "per request beyond the first, the engine's own work, s"},
    {"engine.request_per", T_ENUM, F(engine.request_per), 0, 0, amoe_request_per_names, 0, 0, 0, "request_s charged per committed token or per pass"},
    {"engine.step_host_s", T_DBL, F(engine.step_host_s), 0, 1, NULL, 0, 0, 0, "the engine's step host work, s (0: the hardware's)"},
    {"engine.draft_step_s", T_DBL, F(engine.draft_step_s), 0, 1, NULL, 0, 0, 0, "per draft forward, s (0: hardware.draft_step_fixed_s)"},
    {"engine.draft_token_s", T_DBL, F(engine.draft_token_s), 0, 1, NULL, 0, 0, 0, "per token a draft forward runs over, s"},
    {"engine.draft_extend_s", T_DBL, F(engine.draft_extend_s), 0, 1, NULL, 0, 0, 0, "the extend pass's own work, s"},
    {"engine.tree_node_s", T_DBL, F(engine.tree_node_s), 0, 1, NULL, 0, 0, 0, "per verified node and decoder layer, s"},
    {"engine.sample_s", T_DBL, F(engine.sample_s), 0, 1, NULL, 0, 0, 0, "verification sampling per cycle, s"},
    {"engine.cycle_host_s", T_DBL, F(engine.cycle_host_s), 0, 1, NULL, 0, 0, 0, "host work per speculative cycle, s"},
    {"engine.graph_capture_max_tokens", T_INT, F(engine.graph_capture_max_tokens), 0, 1 << 20, NULL, 0, 0, 0, "the largest captured step, tokens (0: no limit); past it a step runs eager"},
    {"engine.graph_capture_sizes", T_DLIST, F(engine.graph_capture_sizes), 1, 1 << 20, NULL, 1, 0, 0, "the captured step sizes (unset: vLLM's rule)"},
    {"engine.graph_capture_max_requests", T_INT, F(engine.graph_capture_max_requests), 0, 1 << 20, NULL, 0, 0, 0, "SGLang's capture: decode and verify steps captured per request up to this many (0: by tokens); a step with prompt tokens runs eager"},
    {"engine.sizing", T_ENUM, F(engine.sizing), 0, 0, amoe_sizing_names, 0, 0, 0, "fixed, or vllm's or sglang's start-up rules for what is unset: chunk budget, captured steps, KV share"},
    {"engine.max_running", T_INT, F(engine.max_running), 0, 4096, NULL, 0, 0, 0, "running requests where the workload sets no max_running"},
    {"engine.prefill_apart", T_BOOL, F(engine.prefill_apart), 0, 0, NULL, 0, 0, 0, "prompt chunks in steps of their own ahead of the decodes (SGLang), not beside them (vLLM)"},
    {"engine.max_batched_tokens", T_INT, F(engine.max_batched_tokens), 0, 1 << 24, NULL, 0, 0, 0, "a step's token budget under chunked prefill (0: none)"},
    {"engine.gpu_memory_utilization", T_DBL, F(engine.gpu_memory_utilization), 0, 1, NULL, 0, 0, 0, "the share of GPU memory the engine takes (KV gets the rest after weights)"},
    {"engine.memory_reserve_bytes", T_DBL, F(engine.memory_reserve_bytes), 0, BIG, NULL, 0, 0, 0, "memory kept back from KV: activations and graphs, bytes"},
    {"engine.draft_reserve_bytes", T_DBL, F(engine.draft_reserve_bytes), 0, BIG, NULL, 0, 0, 0, "memory kept back from KV besides when the row speculates (the draft's graphs), bytes"},
    {"engine.kv_allocation", T_ENUM, F(engine.kv_allocation), 0, 0, amoe_kv_allocation_names, 0, 0, 0, "reserve: a request's prompt and output KV from admission; incremental: as written, the newest preempted"},
    {"engine.efficiency", T_DBL, F(engine.efficiency), 0, 20, NULL, 0, 0, 0, "the share of the modelled device speed the engine reaches (0: 1); a calibrated deployment's"},
    {"engine.layer_sync_per_peer_s", T_DBL, F(engine.layer_sync_per_peer_s), 0, 1, NULL, 0, 0, 0, "the engine's own TP wait per layer and peer, s (0: the interconnect's)"},
    {"workload.source", T_ENUM, F(workload.source), 0, 0, amoe_source_kind_names, 0, 0, 0, "where blocks come from: the generator, a trace or a routing capture"},
    {"workload.path", T_STR, F(workload.path), 0, 0, NULL, 1, 0, 0, "the trace or capture file"},
    {"workload.window", T_INT, F(workload.window), 1, AMOE_MAX_NODES, NULL, 0, 0, 0, "routing captures: tokens per chain block"},
    {"workload.routing_blocks", T_ENUM, F(workload.routing_blocks), 0, 0, amoe_routing_blocks_names, 0, 0, 0, "routing captures: chain (real tokens) or hybrid (generated siblings)"},
    {"workload.blocks", T_INT, F(workload.blocks), 0, 2e9, NULL, 0, 0, 0, "blocks to run (closed process)"},
    {"workload.tokens_per_request", T_INT, F(workload.tokens_per_request), 1, 1e9, NULL, 0, 0, 0, "a request's output tokens (open arrivals: the mean)"},
    {"workload.prompt_tokens", T_INT, F(workload.prompt_tokens), 0, 1e6, NULL, 0, 0, 0, "a request's prompt tokens (0: no prefill)"},
    {"workload.prefill_sample", T_INT, F(workload.prefill_sample), 0, 1e6, NULL, 0, 0, 0, "routed tokens, evenly spread, of a longer prompt chunk"},
    {"workload.route_hold", T_INT, F(workload.route_hold), 0, 1024, NULL, 0, 0, 0, "a request routes every Nth block afresh and repeats its routes between (0, 1: every block)"},
    {"workload.batch", T_INT, F(workload.batch), 1, 4096, NULL, 0, 0, 0, "requests decoding at once (continuous batching)"},
    {"workload.prefill_schedule", T_ENUM, F(workload.prefill_schedule), 0, 0, amoe_prefill_schedule_names, 0, 0, 0, "separate: a prompt is its own pass; chunked: its chunks join decode passes"},
    {"workload.chunk_tokens", T_INT, F(workload.chunk_tokens), 1, 1e6, NULL, 0, 0, 0, "chunked prefill: tokens per chunk"},
    {"workload.arrival.process", T_ENUM, F(workload.arrival), 0, 0, amoe_arrival_names, 0, 0, 0, "closed (full slots), poisson, gamma, trace, constant or concurrency"},
    {"workload.arrival.rate", T_DBL, F(workload.rate), 1e-9, 1e9, NULL, 0, 0, 0, "requests per second"},
    {"workload.arrival.cv", T_DBL, F(workload.cv), 0.01, 100, NULL, 0, 0, 0, "gamma: the gaps' coefficient of variation"},
    {"workload.arrival.path", T_STR, F(workload.arrival_path), 0, 0, NULL, 1, 0, 0, "trace: the arrival CSV"},
    {"workload.arrival.range_ratio", T_DBL, F(workload.range_ratio), 0, 0.99, NULL, 0, 0, 0, "uniform lengths in [n(1 - r), n(1 + r)]"},
    {"workload.arrival.concurrency", T_INT, F(workload.concurrency), 1, 4096, NULL, 0, 0, 0, "concurrency: clients in the closed loop"},
    {"workload.arrival.lengths", T_ENUM, F(workload.lengths), 0, 0, amoe_lengths_names, 0, 0, 0, "uniform (with range_ratio) or normal"},
    {"workload.arrival.prompt_sd", T_DBL, F(workload.prompt_sd), 0, 1e6, NULL, 0, 0, 0, "normal: the prompts' deviation"},
    {"workload.arrival.output_sd", T_DBL, F(workload.output_sd), 0, 1e6, NULL, 0, 0, 0, "normal: the outputs' deviation"},
    {"workload.arrival.prompt_min", T_INT, F(workload.prompt_min), 0, 1e6, NULL, 0, 0, 0, "normal: the shortest prompt"},
    {"workload.arrival.prompt_max", T_INT, F(workload.prompt_max), 0, 1e6, NULL, 0, 0, 0, "normal: the longest prompt (0: no clip)"},
    {"workload.arrival.output_min", T_INT, F(workload.output_min), 1, 1e9, NULL, 0, 0, 0, "normal: the shortest output"},
    {"workload.arrival.output_max", T_INT, F(workload.output_max), 0, 1e9, NULL, 0, 0, 0, "normal: the longest output (0: no clip)"},
    {"workload.requests", T_INT, F(workload.requests), 1, 1e8, NULL, 0, 0, 0, "open arrivals: requests to run"},
    {"workload.max_running", T_INT, F(workload.max_running), 0, 4096, NULL, 0, 0, 0, "open arrivals: running requests at most (0: workload.batch)"},
    {"workload.context_tokens", T_INT, F(workload.context_tokens), 0, 1e8, NULL, 0, 0, 0, "KV context a pass's attention reads at batch 1, and before each request without a prompt at batch > 1, tokens"},
    {"workload.seed", T_U64, F(workload.seed), 0, 0, NULL, 0, 0, 0, "the generator's seed"},
    {"workload.top_m", T_INT, F(workload.top_m), 0, AMOE_MAX_EXPERTS, NULL, 0, 0, AUTO_BY_MODEL, "logits stored per node (0: max(4·top_k, 32), at most the experts)"},
    {"workload.tree.depth", T_INT, F(workload.depth), 1, 16, NULL, 0, 0, 0, "the draft tree's depth"},
    {"workload.tree.top_k", T_INT, F(workload.top_k), 1, AMOE_MAX_TOPK, NULL, 0, 0, 0, "children per node the draft proposes"},
    {"workload.tree.nodes", T_INT, F(workload.nodes), 1, AMOE_MAX_NODES, NULL, 0, 0, 0, "nodes verified per pass (the root included)"},
    {"workload.tree.candidates", T_INT, F(workload.candidates), 0, AMOE_MAX_NODES, NULL, 0, 0, AUTO_BY_NODES, "draft candidates a block holds (0: from tree.nodes)"},
    {"workload.acceptance.tau", T_DBL, F(workload.tau), 1, 64, NULL, 0, 0, 0, "mean committed tokens per block under natural routing"},
    {"workload.acceptance.replay", T_STR, F(workload.replay), 0, 0, NULL, 1, 0, 0, "a CSV of accept lengths to replay"},
    {"workload.acceptance.al", T_DLIST, F(workload.al), 1, 64, NULL, 1, 0, 0, "a chain's AL at k = 1..n, or one AL pinned at the run's k"},
    {"workload.tree.draft_passes", T_INT, F(workload.draft_passes), 0, 16, NULL, 0, 0, 0, "draft forwards per block (0: one per level; 1: a block draft)"},
    ROUTING_KEYS("workload.routing.", workload.routing, 1, AUTO_NONE),
    {"commitment.calibrate.blocks", T_INT, F(commitment.blocks), 1, 1e8, NULL, 0, 0, 0, "blocks the commitment table is calibrated on"},
    {"commitment.calibrate.seed", T_U64, F(commitment.seed), 0, 0, NULL, 0, 0, 0, "their seed (kept apart from the run's)"},
    {"commitment.file", T_STR, F(commitment.file), 0, 0, NULL, 1, 0, 0, "a commitment table written by acceptmoe calibrate"},
    {"offload.slots_per_layer", T_INT, F(offload.slots_per_layer), 1, AMOE_MAX_EXPERTS, NULL, 0, 0, 0, "experts the GPU holds per layer"},
    {"offload.policy", T_ENUM, F(offload.policy), 0, 0, amoe_cache_policy_names, 0, 0, 0, "the expert cache's replacement policy"},
    {"offload.order", T_ENUM, F(offload.order), 0, 0, amoe_cache_order_names, 0, 0, 0, "hits-first (as engines run a pass) or ascending (the naive engine)"},
    {"offload.overflow", T_ENUM, F(offload.overflow), 0, 0, amoe_cache_overflow_names, 0, 0, 0, "an executed set larger than the slots: evict or bypass"},
    {"offload.reset", T_ENUM, F(offload.reset), 0, 0, amoe_cache_reset_names, 0, 0, 0, "run: caches persist across requests; request: empty at each"},
    {"offload.overlap", T_BOOL, F(offload.overlap), 0, 0, NULL, 0, 0, 0, "copies hide behind the layer's dense part"},
    {"offload.prefill", T_ENUM, F(offload.prefill), 0, 0, amoe_prefill_names, 0, 0, 0, "a prefill pass goes through the caches, or streams past them"},
    {"offload.host_overhead_per_layer_s", T_DBL, F(hw.readback_s), 0, 1, NULL, 0, 1, 0, "older name of hardware.readback_s"}, /* now hardware.readback_s */
    {"slo.ttft_s", T_DBL, F(slo.ttft_s), 0, 1e6, NULL, 0, 0, 0, "the time-to-first-token bound goodput counts against, s"},
    {"slo.tpot_s", T_DBL, F(slo.tpot_s), 0, 1e6, NULL, 0, 0, 0, "the time-per-output-token bound goodput counts against, s"},
    {"acceptance_model.kappa", T_DBL, F(kappa), 0, 1e6, NULL, 0, 0, 0, "κ: how strongly a displaced weight share flips a token (§7)"},
    {"acceptance_model.margin_min", T_DBL, F(margin_min), 0, 100, NULL, 0, 0, 0, "the smallest logit margin a node is given, nats (§7)"},
    {"output.dir", T_STR, F(output.dir), 0, 0, NULL, 1, 0, 0, "where results go (--out)"},
    {"output.blocks_csv", T_BOOL, F(output.blocks_csv), 0, 0, NULL, 0, 0, 0, "write blocks.csv (one row per block and row)"},
    {"output.requests_csv", T_BOOL, F(output.requests_csv), 0, 0, NULL, 0, 0, 0, "write requests.csv (each request's times)"},
    {"output.dump_selection", T_STR, F(output.dump_selection), 0, 0, NULL, 1, 0, 0, "write each pass's selected sets to this file"},
};
const int NKEYS = (int)(sizeof KEYS / sizeof KEYS[0]);
_Static_assert(sizeof KEYS / sizeof KEYS[0] <= AMOE_SPEC_KEYS_MAX, "amoe_experiment.key_at holds every key");

/* A key's type and range in words: "int 1..64", "one of lru, lfu", ... */
static void key_kind(const krow *k, char *buf, size_t n) {
  static const char *const T[] = {"int", "uint64", "number", "text", "bool", "", "number or per-layer list", "list"};
  if (k->type == T_ENUM) {
    snprintf(buf, n, "one of ");
    for (int i = 0; k->names[i]; i++)
      snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? ", " : "", k->names[i]);
  } else if (k->type == T_STR || k->type == T_BOOL || k->type == T_U64 || k->lo >= k->hi) {
    snprintf(buf, n, "%s", T[k->type]);
  } else if (k->hi >= BIG) {
    snprintf(buf, n, "%s ≥ %.15g", T[k->type], k->lo);
  } else {
    snprintf(buf, n, "%s %.15g..%.15g", T[k->type], k->lo, k->hi);
  }
  if (k->nullable) snprintf(buf + strlen(buf), n - strlen(buf), "%s", k->type == T_STR ? " or null" : ", or null");
}

void amoe_spec_list_keys(FILE *f, int markdown) {
  if (markdown) fprintf(f, "| key | type | what it is |\n|---|---|---|\n");
  for (int i = 0; i < NKEYS; i++) {
    const krow *k = &KEYS[i];
    if (k->alias) continue; /* an older name: read, never listed */
    char kind[512];
    key_kind(k, kind, sizeof kind);
    if (markdown) fprintf(f, "| `%s` | %s | %s |\n", k->path, kind, k->help);
    else fprintf(f, "%-44s %-30s %s\n", k->path, kind, k->help);
  }
}

/* An auto-resolved key (krow.autos) is unset: an int 0, a bool -1, a layer
 * list empty. */
int spec_auto_is_unset(const amoe_spec *s, const krow *k) {
  const char *p = (const char *)s + k->off;
  if (SPEC_IS_LIST(k->type)) return ((const amoe_layer_values *)(const void *)p)->n == 0;
  int v;
  memcpy(&v, p, sizeof v);
  return k->type == T_BOOL ? v < 0 : v == 0;
}
/* k's bit in amoe_experiment.auto_unset: its place among the auto rows. */
int spec_auto_bit(const krow *k) {
  int bit = 0;
  for (const krow *r = KEYS; r < k; r++) bit += r->autos != AUTO_NONE;
  return bit;
}
int amoe_experiment_auto(const amoe_experiment *x, const char *key) {
  for (int i = 0; i < NKEYS; i++)
    if (KEYS[i].autos && !strcmp(KEYS[i].path, key)) return (int)(x->auto_unset >> spec_auto_bit(&KEYS[i]) & 1);
  return 0;
}
void spec_auto_unset(amoe_spec *s, const krow *k) {
  char *p = (char *)s + k->off;
  if (SPEC_IS_LIST(k->type)) {
    ((amoe_layer_values *)(void *)p)->n = 0;
    return;
  }
  const int v = k->type == T_BOOL ? -1 : 0;
  memcpy(p, &v, sizeof v);
}

const krow *spec_find_key(const char *path) {
  for (int i = 0; i < NKEYS; i++)
    if (!strcmp(KEYS[i].path, path)) return &KEYS[i];
  return NULL;
}

int spec_is_prefix_of_key(const char *path) {
  size_t n = strlen(path);
  for (int i = 0; i < NKEYS; i++)
    if (!strncmp(KEYS[i].path, path, n) && KEYS[i].path[n] == '.') return 1;
  return 0;
}

/* Edit distance of a and b (short strings: keys), capped at 99. */
static int edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 60 || lb > 60) return 99;
  int d[61][61];
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
      d[i][j] = c;
    }
  return d[la][lb];
}

/* " (did you mean 'K'?)" for the nearest known key within a few edits, or "". */
const char *spec_did_you_mean(const char *path) {
  static char buf[200];
  int best = 99;
  const char *bk = NULL;
  for (int i = 0; i < NKEYS; i++) {
    const int dd = edit_distance(path, KEYS[i].path);
    if (dd < best) best = dd, bk = KEYS[i].path;
  }
  const int lim = (int)strlen(path) / 4 > 2 ? (int)strlen(path) / 4 : 2;
  if (!bk || best > lim) return "";
  snprintf(buf, sizeof buf, " (did you mean '%s'?)", bk);
  return buf;
}

int spec_is_null_text(const char *v) { return !strcmp(v, "null") || !strcmp(v, "~") || !v[0]; }

/* Sets one table key from scalar text. quoted: the YAML scalar was quoted. */
int spec_set_value(amoe_spec *s, const krow *k, const char *v, int quoted, const char *where,
                     amoe_diag *d) {
  char *p = (char *)s + k->off, *end;
  if (!quoted && spec_is_null_text(v) && k->nullable && (k->type == T_DBL || SPEC_IS_LIST(k->type))) { /* unset */
    if (k->type == T_DBL) *(double *)(void *)p = NAN;
    else ((amoe_layer_values *)(void *)p)->n = 0;
    return 1;
  }
  if (!quoted && spec_is_null_text(v) && k->type != T_STR) {
    amoe_diag_add(d, "%s: %s needs a value", where, k->path);
    return 0;
  }
  switch (k->type) {
  case T_STR:
    if (!quoted && spec_is_null_text(v)) v = "";
    if (!k->nullable && !v[0]) {
      amoe_diag_add(d, "%s: %s must not be empty", where, k->path);
      return 0;
    }
    if (strlen(v) >= k->size) {
      amoe_diag_add(d, "%s: %s is longer than %zu characters", where, k->path, k->size - 1);
      return 0;
    }
    memcpy(p, v, strlen(v) + 1);
    return 1;
  case T_BOOL: {
    int b = -1;
    if (!quoted) {
      if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) b = 1;
      if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) b = 0;
    }
    if (b < 0) {
      amoe_diag_add(d, "%s: %s must be true or false, not '%s'", where, k->path, v);
      return 0;
    }
    *(int *)p = b;
    return 1;
  }
  case T_ENUM:
    for (int i = 0; k->names[i]; i++)
      if (!strcmp(k->names[i], v)) {
        *(int *)p = i;
        return 1;
      }
    {
      char list[256] = "";
      for (int i = 0; k->names[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", k->names[i]);
      amoe_diag_add(d, "%s: %s must be one of %s, not '%s'", where, k->path, list, v);
    }
    return 0;
  case T_INT:
  case T_U64: {
    errno = 0;
    if (quoted) goto bad_int;
    if (k->type == T_U64) {
      if (v[0] == '-') goto bad_int;
      unsigned long long x = strtoull(v, &end, 10);
      if (errno || *end || end == v) goto bad_int;
      *(uint64_t *)p = (uint64_t)x;
      return 1;
    }
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v) goto bad_int;
    if ((double)x < k->lo || (double)x > k->hi) {
      amoe_diag_add(d, "%s: %s = %lld is out of range %.0f..%.0f", where, k->path, x, k->lo, k->hi);
      return 0;
    }
    *(int *)p = (int)x;
    return 1;
  bad_int:
    amoe_diag_add(d, "%s: %s must be an integer, not '%s'", where, k->path, v);
    return 0;
  }
  case T_DLIST:
  case T_DVEC: /* one number: every layer (a list comes through set_list) */
  case T_DBL: {
    errno = 0;
    double x = quoted ? NAN : strtod(v, &end);
    if (quoted || errno || *end || end == v || !isfinite(x)) {
      amoe_diag_add(d, "%s: %s must be a number, not '%s'", where, k->path, v);
      return 0;
    }
    if (x < k->lo || x > k->hi) {
      amoe_diag_add(d, "%s: %s = %g is out of range %g..%g", where, k->path, x, k->lo, k->hi);
      return 0;
    }
    if (SPEC_IS_LIST(k->type)) {
      amoe_layer_values *lv = (amoe_layer_values *)(void *)p;
      lv->n = 1;
      lv->v[0] = x;
    } else
      *(double *)p = x;
    return 1;
  }
  }
  return 0;
}

