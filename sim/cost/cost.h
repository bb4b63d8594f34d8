/* The cost model (docs/design.md §9). Every coefficient comes from the model,
 * hardware and engine presets (or a calibration file); none lives here. A
 * speculative cycle whose target pass runs n tokens costs
 *   T = t_step + T_draft + T_extend + T_tree + T_sample + T_cycle_host + T_select
 *     + Σ_layers (t_dense + t_moe + t_fetch + t_host + t_comm) + t_head;
 * plain decoding (no draft) pays none of the cycle's terms. */
#ifndef AMOE_COST_H
#define AMOE_COST_H

#include <math.h>

#include "model.h"
#include "spec.h"

/* Attention, norms, router, shared experts (and the dense MLP of a dense
 * layer) for n tokens reading `context` tokens of KV, split over tp GPUs:
 * max(bytes/tp/BW, FLOPs/tp/peak) plus the layer's fixed kernel cost. */
double amoe_cost_dense(const amoe_model *m, const amoe_hw *hw, int n, int context, int is_moe, int tp);
/* The same for a pass of several requests (§17): the weights read once,
 * each request's own KV (kv_tokens: Σ_j context_j) and attention work
 * (attn_tokens: Σ_j n_j·context_j). */
double amoe_cost_dense_batch(const amoe_model *m, const amoe_hw *hw, int n, double kv_tokens, double attn_tokens,
                             int is_moe, int tp);
/* One all-reduce of n tokens' hidden states (bf16) over the interconnect. */
double amoe_cost_allreduce(const amoe_model *m, const amoe_hw *hw, int n);
/* One routed expert serving n tokens: max(bytes/(η·BW), n · 2·3·d·f/moe_flops)
 * (moe_flops: the hardware's, else its peak_flops).
 * The run loop prices every expert of every layer, so the two coefficients
 * are computed once (amoe_cost_expert_coef) and applied inline. */
typedef struct {
  double mem_s;       /* bytes / (η·BW) */
  double per_token_s; /* 2·3·d·f / moe_flops (its fitted rate; else the format's peak) */
  /* hardware.moe_flops_tokens: the tokens per expert moe_flops was fitted
   * over (0: every token at it); each token beyond them at peak_token_s,
   * 2·3·d·f / (the format's peak × hardware.moe_peak_share) (a grouped
   * GEMM's tiles fill) */
  double sat_tokens, peak_token_s;
} amoe_expert_coef;
/* The dense FLOP/s an expert in the model's weight format computes at
 * (the hardware's peak for the format; the next wider format's where the
 * preset gives none). */
static inline double amoe_cost_format_flops(const amoe_model *m, const amoe_hw *hw) {
  const double fp8 = hw->peak_flops_fp8 > 0 ? hw->peak_flops_fp8 : hw->peak_flops;
  if (m->weight_format == AMOE_FMT_FP8_BLOCK128 || m->weight_format == AMOE_FMT_INT8) return fp8;
  if (m->weight_format == AMOE_FMT_MXFP4 || m->weight_format == AMOE_FMT_NVFP4)
    return hw->peak_flops_fp4 > 0 ? hw->peak_flops_fp4 : fp8;
  return hw->peak_flops;
}
static inline amoe_expert_coef amoe_cost_expert_coef(const amoe_model *m, const amoe_hw *hw) {
  const double flop = 2.0 * 3.0 * m->hidden * (double)m->moe_intermediate,
               peak = amoe_cost_format_flops(m, hw) * (hw->moe_peak_share > 0 ? hw->moe_peak_share : 1);
  amoe_expert_coef c = {amoe_model_expert_bytes(m) / (hw->moe_eta * hw->hbm_bw),
                        flop / (hw->moe_flops > 0 ? hw->moe_flops : peak),
                        hw->moe_flops > 0 ? hw->moe_flops_tokens : 0, flop / peak};
  if (hw->moe_expert_s > 0) c.mem_s = hw->moe_expert_s; /* a measured table's terms (§20): one slope */
  if (hw->moe_token_s > 0) c.per_token_s = hw->moe_token_s, c.sat_tokens = 0;
  return c;
}
static inline double amoe_cost_expert_at(amoe_expert_coef c, int n) {
  const double comp = c.sat_tokens > 0 && n > c.sat_tokens ? c.per_token_s * c.sat_tokens + c.peak_token_s * (n - c.sat_tokens)
                                                           : c.per_token_s * n;
  return c.mem_s > comp ? c.mem_s : comp;
}
static inline double amoe_cost_expert(const amoe_model *m, const amoe_hw *hw, int n) {
  return amoe_cost_expert_at(amoe_cost_expert_coef(m, hw), n);
}
/* Fixed part of a MoE layer run in `waves` fused-MoE calls. */
static inline double amoe_cost_moe_fixed(const amoe_hw *hw, int waves) { return waves * hw->moe_t0_s; }
/* parallel.pipeline: n tokens' hidden states (bf16) copied from one stage's GPU to the next. */
double amoe_cost_hop(const amoe_model *m, const amoe_hw *hw, int n);
/* H2D transfer of `fetched` experts, each a copy of its own. */
double amoe_cost_fetch(const amoe_model *m, const amoe_hw *hw, double fetched);
/* copy_latency_s from measurement (calibrate-hw): a copy of `bytes` ran at
 * small_bw, large copies at large_bw, so each copy costs bytes/small_bw −
 * bytes/large_bw beyond its bytes (at least 0). */
double amoe_cost_fit_copy_latency(double bytes, double small_bw, double large_bw);
/* LM head over n tokens, vocabulary split over tp GPUs. */
double amoe_cost_head(const amoe_model *m, const amoe_hw *hw, int n, int tp);
/* One forward of the draft head over `tokens` tokens, split over tp GPUs:
 * its bytes, the engine's fixed cost per draft forward (engine.draft_step_s,
 * else the hardware's draft_step_fixed_s) and engine.draft_token_s per token. */
double amoe_cost_draft(const amoe_model *m, const amoe_hw *hw, const amoe_engine *eng, double tokens, int tp);
/* Draft forwards of a tree of depth `depth` (0: no draft): the draft's
 * extend pass over the tokens the last cycle committed yields the first
 * level, and each further level is one draft step (SGLang's and vLLM's
 * EAGLE workers; `speculative-num-steps` = depth = forwards). */
static inline int amoe_cost_draft_forwards(int depth) { return depth > 0 ? depth : 0; }

/* The tokens a step of `tokens` tokens runs as under the engine's CUDA
 * graphs (§19): the smallest captured size at or above it, or 0 when it is
 * above the largest and runs eager. An eager engine, or one whose every step
 * is captured (graph_capture_max_tokens 0), runs it as it is. */
int amoe_cost_captured_tokens(const amoe_engine *eng, int tokens);
/* The same for a step of `requests` requests (a DP copy's), `prompt`
 * of its tokens a prompt's: with engine.graph_capture_max_requests,
 * SGLang's capture per request (the speculative ladder when `speculating`)
 * and an extend eager; else amoe_cost_captured_tokens. */
int amoe_cost_captured(const amoe_engine *eng, int tokens, int requests, int prompt, int speculating);

/* KV capacity (§19): the tokens of KV one GPU of the layout holds, when
 * the engine sets gpu_memory_utilization:
 *   (memory · utilisation − weights / GPUs − draft − reserve) / KV bytes per token,
 * the weights (every expert, shared expert, dense layer, attention, head and
 * embedding) split evenly over the GPUs, the draft head whole on each
 * (drafted: a row that speculates; plain decoding loads no draft), and a
 * token's KV over min(attention ranks, kv_heads) (MLA's latent: on each),
 * in every layer and, drafted, the draft head's one layer as well. With DP
 * attention (parallel.attention_dp copies of tp GPUs) each GPU holds
 * 1/tp of the dense weights and 1/GPUs of the experts, and each copy its
 * own requests' KV: dp pools of that. 0: no limit; a negative number: the
 * weights alone do not fit. */
double amoe_cost_kv_tokens(const amoe_model *m, const amoe_hw *hw, const amoe_engine *eng, const amoe_parallel *par,
                           int drafted);

/* ---- The one cost function of a forward pass (docs/design.md §9) ----
 * Everything that prices a pass (the run loop, the policies that predict a
 * cost, calibrate-hw) goes through amoe_cost_pass_init + amoe_cost_layer /
 * amoe_cost_pass, so a predicted and a charged time cannot drift apart. */

/* What does not depend on a layer's experts, set once per pass. */
typedef struct amoe_cost_pass_ctx {
  const amoe_model *m;
  const amoe_hw *hw;
  const amoe_engine *eng;
  amoe_expert_coef ec;
  int tokens, offload, fetch_overlap, eager;
  int padded;         /* the tokens the dense side runs: `tokens` up to its captured size (§19) */
  int moe_tp;         /* each expert split over this many GPUs */
  double dense;       /* one MoE layer's attention, norms, shared experts (device) */
  double comm;        /* several GPUs: one MoE layer's collectives (two all-reduces, or one and a dispatch + combine) */
  double dense_host;  /* eager: its launches */
  double step, draft, rest, host; /* the pass's fixed parts: rest = head + dense-only layers; host = eager launches + step host work */
  /* the speculative cycle around the pass (0 without a draft): the draft's
   * extend pass, tree building and masks, verification sampling, the
   * engine's host work per cycle, and the verifier's own selection (a row's
   * selection_s, set by the caller) */
  double extend, tree, sample, cycle_host, select;
  double rest_comm;   /* the dense-only layers' and draft steps' collectives */
  double slow;        /* 1 / engine.efficiency (1 unset): the device times' factor */
} amoe_cost_pass_ctx;

/* One MoE layer's counts: experts executed and fetched, waves, and the
 * executed experts' own device time (Σ amoe_cost_expert_at over their
 * token counts; ec.mem_s · executed when every expert is memory-bound). */
/* The waves of a layer that executes `executed` experts through `slots`
 * cache slots (a prediction: the cache's own count is what a pass pays). */
static inline int amoe_cost_waves(double executed, int slots) {
  return slots > 0 && executed > slots ? (int)ceil(executed / slots) : 1;
}

typedef struct {
  double executed, fetched; /* (a policy's prediction may be a mean) */
  int waves;
  double expert_s;
} amoe_layer_counts;

/* A layer's or a pass's time in its parts; total is their sum. fetch: the
 * copies' wait not hidden plus the routing read-back; host: eager launches
 * (and, per pass, the step's host work without an overlap scheduler);
 * comm: collectives between GPUs (the dense layers' and draft steps' in
 * the pass's). With several GPUs, expert_s of the counts is the busiest
 * group's (amoe_layout_layer). */
typedef struct {
  double dense, moe, fetch, host, comm, total;
} amoe_layer_time;
typedef struct {
  double step, draft, extend, tree, sample, cycle_host, select, dense, moe, fetch, host, comm, total;
} amoe_pass_time;

/* What a pass is: the model on its hardware under the engine (resolved:
 * cuda_graphs and overlap_scheduler 0 or 1) and the layout over hw->gpus
 * GPUs (parallel NULL: one GPU; a pipeline of P stages runs its layers one
 * stage after another, so its pass is one GPU's plus P − 1 hops, in comm);
 * `tokens` tokens after a draft tree of depth `depth` (0: none), reading
 * `context` tokens of KV; offload: expert caches (fetches and the
 * per-layer read-back); fetch_overlap: copies hide behind the layer's
 * dense part. */
typedef struct {
  const amoe_model *model;
  const amoe_hw *hw;
  const amoe_engine *engine;
  const amoe_parallel *parallel;
  int tokens, depth, context;
  /* the draft (depth > 0 or draft_priced): tokens per draft step after
   * the extend (the tree's top_k; 0: 1), the tokens the extend runs over
   * (the last cycle's committed; 0: 1); draft_priced: the caller prices
   * the draft's forwards itself (MTP) and the cycle's other terms apply */
  int branch;
  double accepted;
  int draft_priced;
  int offload, fetch_overlap;
  /* several requests (§17): Σ_j context_j and Σ_j n_j·context_j over the
   * pass's requests (context unused); 0: one request, `context` */
  double kv_tokens, attn_tokens;
  int requests; /* the pass's requests (engine.request_s for each beyond the first); 0: one */
  /* draft forwards per step (§19; 0: one per tree level, EAGLE's): fewer
   * forwards each run over more positions (1: a block draft, DSpark's, all
   * `depth` positions in the one forward beside the committed tokens) */
  int draft_passes;
  /* prompt tokens the draft runs over beside the target in this pass (a
   * speculating row's prefill, whole or chunked: vLLM's proposer drafts
   * over every scheduled token, v1/spec_decode/eagle.py; SGLang's EAGLE
   * worker runs a draft extend over the prompt, speculative/eagle_worker.py):
   * joined to the extend's forward, or a forward of their own */
  int draft_prompt;
  int prompt_tokens; /* of the pass's tokens, a prompt's (prefill chunks; an extend under SGLang's capture) */
} amoe_pass_shape;
/* The one constructor of a spec's pass: its model, hardware, engine,
 * layout, offload, attention context and draft forwards, `tokens` tokens
 * after a draft of depth `depth`. Callers set what their pass adds (its
 * requests and their contexts, the draft's branch and extend). */
static inline amoe_pass_shape amoe_spec_pass_shape(const amoe_spec *s, int tokens, int depth) {
  return (amoe_pass_shape){.model = &s->model, .hw = &s->hw, .engine = &s->engine, .parallel = &s->parallel,
                           .tokens = tokens, .depth = depth, .context = s->workload.context_tokens,
                           .offload = s->offload.enabled, .fetch_overlap = s->offload.overlap,
                           .draft_passes = s->workload.draft_passes};
}
void amoe_cost_pass_init(amoe_cost_pass_ctx *p, const amoe_pass_shape *sh);
amoe_layer_time amoe_cost_layer(const amoe_cost_pass_ctx *p, const amoe_layer_counts *c);
/* The pass: its fixed parts (amoe_cost_pass_begin) plus each of the n MoE
 * layers (amoe_cost_pass_add of its amoe_cost_layer); the run loop makes
 * the same calls layer by layer. */
amoe_pass_time amoe_cost_pass(const amoe_cost_pass_ctx *p, const amoe_layer_counts *layers, int n);
static inline amoe_pass_time amoe_cost_pass_begin(const amoe_cost_pass_ctx *p) {
  amoe_pass_time t = {p->step, p->draft, p->extend, p->tree, p->sample, p->cycle_host, p->select, p->rest, 0, 0,
                      p->host, p->rest_comm,
                      p->step + p->draft + p->extend + p->tree + p->sample + p->cycle_host + p->select + p->rest +
                          p->host + p->rest_comm};
  return t;
}
static inline void amoe_cost_pass_add(amoe_pass_time *t, const amoe_layer_time *lt) {
  t->dense += lt->dense;
  t->moe += lt->moe;
  t->fetch += lt->fetch;
  t->host += lt->host;
  t->comm += lt->comm;
  t->total += lt->total;
}
/* engine.request_s per token: what a pass whose requests commit tokens[0..n)
 * adds for every request beyond the first (0 when charged per pass). */
static inline double amoe_cost_request_tokens(const amoe_engine *eng, const double *tokens, int n) {
  double t = 0;
  if (eng->request_per == AMOE_REQUEST_PER_TOKEN)
    for (int i = 1; i < n; i++) t += eng->request_s * tokens[i];
  return t;
}
/* What one more executed expert serving `tokens` tokens adds to a layer
 * that already runs `c` (fetched: it is not resident). */
double amoe_cost_expert_marginal(const amoe_cost_pass_ctx *p, const amoe_layer_counts *c, int tokens, int fetched);
/* One forward of a dense model of `params` bf16 parameters over n tokens
 * (a predictor beside the draft): its weights read once, 2 FLOPs per
 * parameter per token, and the fixed cost of a small model's step. */
double amoe_cost_dense_model(const amoe_hw *hw, double params, int n);

#endif
