#include "cost.h"
#include "sizing.h"

static double mx(double a, double b) { return a > b ? a : b; }

/* A decoder layer's dense weights: attention, and the shared experts of a
 * MoE layer or the dense MLP of a dense one. */
static double dense_weights(const amoe_model *m, int is_moe) {
  const double w = m->attn_bytes_per_layer;
  return w + (is_moe ? m->shared_experts * amoe_model_shared_expert_bytes(m)
                     : 3.0 * m->hidden * (double)m->dense_intermediate * 2.0);
}

/* FLOPs of one query against one key of KV in one layer */
static double key_flops(const amoe_model *m) {
  return m->attn_flops_per_key > 0 ? m->attn_flops_per_key : 4.0 * m->hidden;
}

/* A baked GEMM curve of hw (hardware.kernels' gemm) at n tokens: piecewise
 * linear over the measured token counts, in proportion past the largest. */
static double gemm_curve(const amoe_hw *hw, const double *t, double n) {
  const int c = hw->gemm_points;
  const double *x = hw->gemm_m;
  if (n <= x[0]) return t[0];
  if (n >= x[c - 1]) return t[c - 1] * n / x[c - 1];
  int lo = 0, hi = c - 1; /* x[lo] < n <= x[hi] */
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x[mid] < n) lo = mid;
    else hi = mid;
  }
  return t[lo] + (t[hi] - t[lo]) * (n - x[lo]) / (x[hi] - x[lo]);
}

static int gemm_baked(const amoe_hw *hw, int tp) { return hw->gemm_points > 0 && tp == hw->gemm_tp; }

/* With the measured GEMMs (hardware.kernels' gemm), a decoder layer's
 * dense side is their time plus the attention's own roofline of its KV
 * read and FLOPs. */
static double dense_gemm(const amoe_hw *hw, int n, double kv, double attn_flops, int is_moe, int tp) {
  return gemm_curve(hw, is_moe ? hw->gemm_moe_layer : hw->gemm_dense_layer, n) +
         mx(kv / tp / hw->hbm_bw, attn_flops / tp / hw->peak_flops) + hw->layer_fixed_s;
}

double amoe_cost_dense(const amoe_model *m, const amoe_hw *hw, int n, int context, int is_moe, int tp) {
  const double w = dense_weights(m, is_moe);
  double kv = m->kv_bytes_per_token_layer * (double)context;
  if (gemm_baked(hw, tp)) return dense_gemm(hw, n, kv, (double)n * context * key_flops(m), is_moe, tp);
  /* bf16 weights: 2 FLOPs per parameter per token; attention per key read */
  double flops = (double)n * (w + context * key_flops(m));
  return mx((w + kv) / tp / hw->hbm_bw, flops / tp / hw->peak_flops) + hw->layer_fixed_s;
}

double amoe_cost_dense_batch(const amoe_model *m, const amoe_hw *hw, int n, double kv_tokens, double attn_tokens,
                             int is_moe, int tp) {
  const double w = dense_weights(m, is_moe);
  const double kv = m->kv_bytes_per_token_layer * kv_tokens; /* each request's own KV */
  if (gemm_baked(hw, tp)) return dense_gemm(hw, n, kv, attn_tokens * key_flops(m), is_moe, tp);
  const double flops = (double)n * w + attn_tokens * key_flops(m);
  return mx((w + kv) / tp / hw->hbm_bw, flops / tp / hw->peak_flops) + hw->layer_fixed_s;
}

double amoe_cost_allreduce(const amoe_model *m, const amoe_hw *hw, int n) {
  return hw->ic.allreduce_latency_s + (hw->ic.allreduce_bw > 0 ? n * (double)m->hidden * 2.0 / hw->ic.allreduce_bw : 0);
}

double amoe_cost_hop(const amoe_model *m, const amoe_hw *hw, int n) {
  return hw->ic.hop_latency_s + (hw->ic.hop_bw > 0 ? n * (double)m->hidden * 2.0 / hw->ic.hop_bw : 0);
}

double amoe_cost_fetch(const amoe_model *m, const amoe_hw *hw, double fetched) {
  return fetched * (amoe_model_expert_bytes(m) / hw->h2d_bw + hw->copy_latency_s);
}

double amoe_cost_head(const amoe_model *m, const amoe_hw *hw, int n, int tp) {
  if (gemm_baked(hw, tp) && hw->gemm_head[0] > 0) return gemm_curve(hw, hw->gemm_head, n) + hw->launch_s;
  double flops = 2.0 * n * (double)m->vocab * m->hidden;
  return mx(m->lm_head_bytes / tp / hw->hbm_bw, flops / tp / hw->peak_flops) + hw->launch_s;
}

double amoe_cost_draft(const amoe_model *m, const amoe_hw *hw, const amoe_engine *eng, double tokens, int tp) {
  return m->draft_head_bytes / tp / hw->hbm_bw + amoe_engine_draft_step_s(eng, hw) + eng->draft_token_s * tokens;
}

double amoe_cost_dense_model(const amoe_hw *hw, double params, int n) {
  if (!(params > 0)) return 0;
  return mx(2.0 * params / hw->hbm_bw, 2.0 * params * n / hw->peak_flops) + hw->draft_step_fixed_s;
}

double amoe_cost_kv_tokens(const amoe_model *m, const amoe_hw *hw, const amoe_engine *eng, const amoe_parallel *par,
                           int drafted) {
  if (!(eng->gpu_memory_utilization > 0)) return 0;
  const int gpus = hw->gpus > 0 ? hw->gpus : 1, tp = par && par->attention_tp > 1 ? par->attention_tp : 1;
  const double weights = m->moe_layers * ((double)m->experts * amoe_model_expert_bytes(m) + dense_weights(m, 1)) +
                         (m->layers - m->moe_layers) * dense_weights(m, 0) + 2 * m->lm_head_bytes;
  /* a speculating row's draft head is one decoder layer (EAGLE's, an MTP
   * module) whose KV the engine keeps in the same pool, per token */
  const int kv_layers = m->layers + (drafted && m->draft_head_bytes > 0);
  const double per_token = m->kv_bytes_per_token_layer * kv_layers / (m->kv_heads > 0 ? (tp < m->kv_heads ? tp : m->kv_heads) : 1);
  /* DP attention: each copy of tp GPUs holds the dense weights whole (a
   * GPU 1/tp of them) beside 1/gpus of the experts, and its own requests'
   * KV: dp pools */
  const int dp = par && par->attention_dp > 1 ? par->attention_dp : 1;
  const double experts = m->moe_layers * (double)m->experts * amoe_model_expert_bytes(m);
  const double held = dp > 1 ? experts / gpus + (weights - experts) / tp : weights / gpus;
  const double free = hw->memory_bytes * eng->gpu_memory_utilization - held -
                      (drafted ? m->draft_head_bytes + eng->draft_reserve_bytes : 0) - eng->memory_reserve_bytes;
  if (!(per_token > 0)) return 0;
  return free > 0 ? dp * floor(free / per_token) : -1;
}

double amoe_cost_fit_copy_latency(double bytes, double small_bw, double large_bw) {
  if (!(small_bw > 0) || !(large_bw > 0)) return 0;
  return mx(bytes / small_bw - bytes / large_bw, 0);
}

/* The smallest of the engine's listed capture sizes that holds n, at most
 * max; 0 where none does. */
static int listed_size(const amoe_engine *eng, int n, int max) {
  const amoe_layer_values *v = &eng->graph_capture_sizes;
  double best = 0;
  for (int i = 0; i < v->n; i++)
    if (v->v[i] >= n && v->v[i] <= max && (best == 0 || v->v[i] < best)) best = v->v[i];
  return (int)best;
}

int amoe_cost_captured_tokens(const amoe_engine *eng, int tokens) {
  const int max = eng->graph_capture_max_tokens;
  if (!eng->cuda_graphs || max <= 0) return tokens;
  if (tokens > max) return 0;
  if (eng->graph_capture_sizes.n > 0) return listed_size(eng, tokens, max);
  if (tokens <= 2) return tokens < 1 ? 1 : tokens; /* 1, 2, 4, then multiples of 8 below 256, then of 16 */
  if (tokens <= 4) return 4;
  const int step = tokens <= 256 ? 8 : 16;
  const int size = (tokens + step - 1) / step * step;
  return size <= max ? size : 0;
}

int amoe_cost_captured(const amoe_engine *eng, int tokens, int requests, int prompt, int speculating) {
  const int max = eng->graph_capture_max_requests;
  if (max <= 0) return amoe_cost_captured_tokens(eng, tokens);
  if (!eng->cuda_graphs) return tokens;
  if (prompt > 0) return 0; /* SGLang captures decode and verify steps; an extend runs eager */
  const int r = requests > 0 ? requests : 1;
  const int bs = eng->graph_capture_sizes.n > 0 ? listed_size(eng, r, max) /* (the listed sizes, in requests) */
                                                : amoe_sizing_sglang_bs(r, max, speculating);
  return bs > 0 ? (int)ceil((double)tokens * bs / r) : 0;
}

/* The pass's collectives into p->comm (one MoE layer's) and p->rest_comm
 * (the dense-only layers' and draft steps'), over `tokens` tokens a GPU
 * group runs: tensor-parallel all-reduces, or with DP attention the MoE
 * layer's dispatch and combine. */
static void pass_comm(amoe_cost_pass_ctx *p, const amoe_pass_shape *sh, int tokens, int tp, int dp, int dense_layers,
                      int steps) {
  const amoe_model *m = sh->model;
  const amoe_hw *hw = sh->hw;
  const amoe_engine *eng = sh->engine;
  const amoe_parallel *par = sh->parallel;
  p->comm = p->rest_comm = 0;
  if (dp > 1) {
    /* the MoE layer's dispatch and combine (DeepEP's all-to-all) of every
     * copy's tokens, which every GPU waits for; within a copy of tp GPUs,
     * attention's all-reduce (and the dense layers' and draft steps') */
    const int gpus = hw->gpus > 1 ? hw->gpus : tp * dp;
    const double ar = amoe_cost_allreduce(m, hw, tokens), peer = amoe_engine_layer_sync_s(eng, hw);
    p->comm = (tp > 1 ? ar : 0) + hw->ic.dispatch_s + hw->ic.combine_s + peer * (gpus - 1);
    p->rest_comm = tp > 1 ? dense_layers * (2 * ar + peer * (tp - 1)) +
                                steps * (2 * amoe_cost_allreduce(m, hw, 1) + peer * (tp - 1))
                          : 0;
  } else if (tp > 1) { /* after attention and after the MLP or MoE; a draft step is one layer */
    /* the sync grows with the GPUs a collective waits for: TP2 and TP4 on one
     * engine fit one coefficient per peer (docs/validation.md) */
    const double ar = amoe_cost_allreduce(m, hw, tokens), sync = amoe_engine_layer_sync_s(eng, hw) * (tp - 1);
    p->comm = (par->moe_comm == AMOE_COMM_ALL_TO_ALL ? ar + hw->ic.dispatch_s + hw->ic.combine_s : 2 * ar) + sync;
    p->rest_comm = dense_layers * (2 * ar + sync) + steps * (2 * amoe_cost_allreduce(m, hw, 1) + sync);
  }
}

void amoe_cost_pass_init(amoe_cost_pass_ctx *p, const amoe_pass_shape *sh) {
  const amoe_model *m = sh->model;
  const amoe_hw *hw = sh->hw;
  const amoe_engine *eng = sh->engine;
  const amoe_parallel *par = sh->parallel;
  const int depth = sh->depth, context = sh->context;
  /* under CUDA graphs the dense side runs the step's captured size (the
   * routed experts see only the real tokens); past the largest, eager */
  const int tp = par && par->attention_tp > 1 ? par->attention_tp : 1;
  const int batch = sh->kv_tokens > 0; /* several requests, each over its own context */
  /* DP attention (§16): each copy runs its own requests' attention, dense
   * layers and head over an even share of the step, the busiest copy's
   * ⌈tokens / dp⌉ (one request at batch 1 lives on one copy); the experts
   * see every copy's tokens */
  const int dp = batch && par && par->attention_dp > 1 ? par->attention_dp : 1;
  const int real = dp > 1 ? (sh->tokens + dp - 1) / dp : sh->tokens;
  const double kv_tokens = dp > 1 ? sh->kv_tokens / dp : sh->kv_tokens, attn_tokens = dp > 1 ? sh->attn_tokens / dp : sh->attn_tokens;
  const int copy_requests = dp > 1 ? (sh->requests + dp - 1) / dp : sh->requests;
  const int captured = amoe_cost_captured(eng, real, copy_requests, sh->prompt_tokens, depth > 0 || sh->draft_priced);
  const int tokens = captured > real ? captured : real;
  p->m = m;
  p->hw = hw;
  p->eng = eng;
  p->ec = amoe_cost_expert_coef(m, hw);
  p->tokens = sh->tokens;
  p->padded = tokens;
  p->offload = sh->offload;
  p->fetch_overlap = sh->fetch_overlap;
  p->eager = !eng->cuda_graphs || captured == 0;
  p->moe_tp = par && par->moe_tp > 1 ? par->moe_tp : 1;
  p->dense = batch ? amoe_cost_dense_batch(m, hw, tokens, kv_tokens, attn_tokens, 1, tp)
                   : amoe_cost_dense(m, hw, tokens, context, 1, tp);
  const int levels = amoe_cost_draft_forwards(depth), dense_layers = m->layers - m->moe_layers;
  const int steps = sh->draft_passes > 0 && sh->draft_passes < levels ? sh->draft_passes : levels;
  const int beyond = eng->request_per == AMOE_REQUEST_PER_PASS && sh->requests > 1 ? sh->requests - 1 : 0;
  p->step = hw->step_s + eng->request_s * beyond; /* (per token: amoe_cost_request_tokens) */
  /* the speculative cycle: the extend (the first forward), then steps − 1
   * draft steps over `branch` tokens each, and what the engine adds */
  const int cycle = steps > 0 || sh->draft_priced;
  const double branch = sh->branch > 0 ? sh->branch : 1, accepted = sh->accepted > 0 ? sh->accepted : 1;
  /* the levels a forward short of one per level folds into the extend's */
  const double folded = steps < levels ? (double)(levels - steps + 1) * branch : 0;
  p->extend = steps > 0 ? amoe_cost_draft(m, hw, eng, accepted + folded + sh->draft_prompt, tp) + eng->draft_extend_s
              : sh->draft_prompt > 0 ? amoe_cost_draft(m, hw, eng, sh->draft_prompt, tp)
                                     : 0;
  p->draft = steps > 1 ? (steps - 1) * amoe_cost_draft(m, hw, eng, branch, tp) : 0;
  /* the tree mask every layer's attention reads, per node of one request's
   * tree: fitted at batch 1 only, where the kernel is latency-bound; at
   * batch the requests' masks are read side by side, so a pass pays one
   * tree's (docs/validation.md, "Batches") */
  const double tree_nodes = sh->requests > 1 ? (double)sh->tokens / sh->requests : sh->tokens;
  p->tree = cycle ? eng->tree_node_s * tree_nodes * m->layers : 0;
  p->sample = cycle ? eng->sample_s : 0;
  p->cycle_host = cycle ? eng->cycle_host_s : 0;
  p->select = 0;
  const double dense_only =
      dense_layers * (batch ? amoe_cost_dense_batch(m, hw, tokens, kv_tokens, attn_tokens, 0, tp)
                            : amoe_cost_dense(m, hw, tokens, context, 0, tp));
  p->rest = amoe_cost_head(m, hw, tokens, tp) + dense_only;
  pass_comm(p, sh, tokens, tp, dp, dense_layers, steps);
  if (par && par->pipeline > 1) /* a hidden-state copy from each stage to the next; no collectives */
    p->rest_comm += (par->pipeline - 1) * amoe_cost_hop(m, hw, tokens);
  /* a calibrated engine's efficiency over the target's device terms (× 1
   * unset: the same bytes); the draft's forwards keep their own fitted
   * terms (draft_step_s, draft_token_s), which calibration does not see */
  p->slow = eng->efficiency > 0 ? 1 / eng->efficiency : 1;
  p->dense *= p->slow, p->rest *= p->slow, p->comm *= p->slow, p->rest_comm *= p->slow;
  p->dense_host = 0;
  p->host = 0;
  const double launch = amoe_engine_launch_s(eng, hw);
  if (p->eager) {
    /* a decoder layer's kernels (the dense MLP one more), the head's one
     * already in rest, each draft step a one-layer model with its head */
    const double kernels = m->kernels_per_layer > 0 ? m->kernels_per_layer : eng->kernels_per_layer;
    p->dense_host = kernels * launch;
    const double fixed_host = (dense_layers * (kernels + 1) + steps * (kernels + 1)) * launch;
    if (eng->host_overlap) { /* the dense-only layers and draft steps run under their launches */
      const double dev = dense_only + p->draft + p->extend;
      p->host = fixed_host > dev ? fixed_host - dev : 0;
    } else {
      p->host = fixed_host;
    }
  }
  if (!eng->overlap_scheduler) p->host += amoe_engine_step_host_s(eng, hw);
}

amoe_layer_time amoe_cost_layer(const amoe_cost_pass_ctx *p, const amoe_layer_counts *c) {
  amoe_layer_time t;
  t.dense = p->dense;
  t.moe = (c->expert_s + amoe_cost_moe_fixed(p->hw, c->waves)) * p->slow;
  t.fetch = 0;
  if (p->offload) {
    const double copies = amoe_cost_fetch(p->m, p->hw, c->fetched);
    t.fetch = (p->fetch_overlap ? (copies > p->dense ? copies - p->dense : 0) : copies) + p->hw->readback_s;
  }
  t.comm = p->comm;
  t.host = 0;
  if (p->eng->moe_kernels == AMOE_MOE_LOOP) {
    /* one synchronisation per visited expert serialises the experts: an
     * executed one takes its host issue or its device time, whichever is
     * longer; a visited empty one its own host time; no fused call */
    const amoe_engine *e = p->eng;
    const double empty = e->visits == AMOE_VISIT_HIT ? 0 : p->m->experts - c->executed;
    const double issue = c->executed * e->expert_host_s;
    t.moe = c->expert_s * p->slow;
    t.host = (issue > c->expert_s ? issue - c->expert_s : 0) +
             empty * (e->visits == AMOE_VISIT_ALL ? e->expert_host_s : e->visit_host_s);
  }
  if (p->eager) {
    const amoe_moe_kernels mk = (amoe_moe_kernels)p->eng->moe_kernels;
    const double moe_kernels =
        mk == AMOE_MOE_PER_EXPERT ? c->executed * p->eng->kernels_per_expert : mk == AMOE_MOE_LOOP ? 0 : (double)c->waves;
    const double launch = amoe_engine_launch_s(p->eng, p->hw);
    /* a fused call issued from Python (its wrapper, alignment and Triton
     * launches) costs the engine's moe_call_host_s where it sets one */
    const double moe_host = mk == AMOE_MOE_FUSED && p->eng->moe_call_host_s > 0 ? c->waves * p->eng->moe_call_host_s
                                                                               : moe_kernels * launch;
    const double launches = p->dense_host + moe_host + c->fetched * launch;
    if (p->eng->host_overlap) { /* the layer's dense part runs under its launches */
      t.host += launches > t.dense ? launches - t.dense : 0;
    } else {
      t.host += launches;
    }
  }
  t.total = t.dense + t.moe + t.fetch + t.host + t.comm;
  return t;
}

amoe_pass_time amoe_cost_pass(const amoe_cost_pass_ctx *p, const amoe_layer_counts *layers, int n) {
  amoe_pass_time t = amoe_cost_pass_begin(p);
  for (int l = 0; l < n; l++) {
    const amoe_layer_time lt = amoe_cost_layer(p, &layers[l]);
    amoe_cost_pass_add(&t, &lt);
  }
  return t;
}

double amoe_cost_expert_marginal(const amoe_cost_pass_ctx *p, const amoe_layer_counts *c, int tokens, int fetched) {
  amoe_layer_counts more = *c;
  more.executed += 1;
  more.fetched += fetched;
  more.expert_s += amoe_cost_expert_at(p->ec, tokens);
  if (more.waves < 1) more.waves = 1;
  return amoe_cost_layer(p, &more).total - amoe_cost_layer(p, c).total;
}
