#include "cost.h"

static double mx(double a, double b) { return a > b ? a : b; }

double amoe_cost_dense(const amoe_model *m, const amoe_hw *hw, int n, int context, int is_moe, int tp) {
  double w = m->attn_bytes_per_layer;
  if (is_moe)
    w += m->shared_experts * amoe_model_shared_expert_bytes(m);
  else
    w += 3.0 * m->hidden * (double)m->dense_intermediate * 2.0;
  double kv = m->kv_bytes_per_token_layer * (double)context;
  /* bf16 weights: 2 FLOPs per parameter per token; attention ~4·ctx·d per token */
  double flops = (double)n * (w + 4.0 * context * (double)m->hidden);
  return mx((w + kv) / tp / hw->hbm_bw, flops / tp / hw->peak_flops) + hw->layer_fixed_s;
}

double amoe_cost_allreduce(const amoe_model *m, const amoe_hw *hw, int n) {
  return hw->ic.allreduce_latency_s + (hw->ic.allreduce_bw > 0 ? n * (double)m->hidden * 2.0 / hw->ic.allreduce_bw : 0);
}

double amoe_cost_fetch(const amoe_model *m, const amoe_hw *hw, double fetched) {
  return fetched * (amoe_model_expert_bytes(m) / hw->h2d_bw + hw->copy_latency_s);
}

double amoe_cost_head(const amoe_model *m, const amoe_hw *hw, int n, int tp) {
  double flops = 2.0 * n * (double)m->vocab * m->hidden;
  return mx(m->lm_head_bytes / tp / hw->hbm_bw, flops / tp / hw->peak_flops) + hw->launch_s;
}

double amoe_cost_draft(const amoe_model *m, const amoe_hw *hw, int steps, int tp) {
  return steps * (m->draft_head_bytes / tp / hw->hbm_bw + hw->draft_step_fixed_s);
}

double amoe_cost_dense_model(const amoe_hw *hw, double params, int n) {
  if (!(params > 0)) return 0;
  return mx(2.0 * params / hw->hbm_bw, 2.0 * params * n / hw->peak_flops) + hw->draft_step_fixed_s;
}

double amoe_cost_fit_copy_latency(double bytes, double small_bw, double large_bw) {
  if (!(small_bw > 0) || !(large_bw > 0)) return 0;
  return mx(bytes / small_bw - bytes / large_bw, 0);
}

void amoe_cost_pass_init(amoe_cost_pass_ctx *p, const amoe_model *m, const amoe_hw *hw, const amoe_engine *eng,
                         const amoe_parallel *par, int offload, int fetch_overlap, int tokens, int depth, int context) {
  const int tp = par && par->attention_tp > 1 ? par->attention_tp : 1;
  p->m = m;
  p->hw = hw;
  p->eng = eng;
  p->ec = amoe_cost_expert_coef(m, hw);
  p->tokens = tokens;
  p->offload = offload;
  p->fetch_overlap = fetch_overlap;
  p->eager = !eng->cuda_graphs;
  p->moe_tp = par && par->moe_tp > 1 ? par->moe_tp : 1;
  p->dense = amoe_cost_dense(m, hw, tokens, context, 1, tp);
  const int steps = amoe_cost_draft_steps(depth), dense_layers = m->layers - m->moe_layers;
  p->step = hw->step_s;
  p->draft = amoe_cost_draft(m, hw, steps, tp);
  p->rest = amoe_cost_head(m, hw, tokens, tp) + dense_layers * amoe_cost_dense(m, hw, tokens, context, 0, tp);
  p->comm = p->rest_comm = 0;
  if (tp > 1) { /* after attention and after the MLP or MoE; a draft step is one layer */
    const double ar = amoe_cost_allreduce(m, hw, tokens), sync = hw->ic.layer_sync_s;
    p->comm = (par->moe_comm == AMOE_COMM_ALL_TO_ALL ? ar + hw->ic.dispatch_s + hw->ic.combine_s : 2 * ar) + sync;
    p->rest_comm = dense_layers * (2 * ar + sync) + steps * (2 * amoe_cost_allreduce(m, hw, 1) + sync);
  }
  p->dense_host = 0;
  p->host = 0;
  if (p->eager) {
    /* a decoder layer's kernels (the dense MLP one more), the head's one
     * already in rest, each draft step a one-layer model with its head */
    p->dense_host = eng->kernels_per_layer * hw->launch_s;
    p->host = (dense_layers * (eng->kernels_per_layer + 1) + steps * (eng->kernels_per_layer + 1)) * hw->launch_s;
  }
  if (!eng->overlap_scheduler) p->host += hw->step_host_s;
}

amoe_layer_time amoe_cost_layer(const amoe_cost_pass_ctx *p, const amoe_layer_counts *c) {
  amoe_layer_time t;
  t.dense = p->dense;
  t.moe = c->expert_s + amoe_cost_moe_fixed(p->hw, c->waves);
  t.fetch = 0;
  if (p->offload) {
    const double copies = amoe_cost_fetch(p->m, p->hw, c->fetched);
    t.fetch = (p->fetch_overlap ? (copies > p->dense ? copies - p->dense : 0) : copies) + p->hw->readback_s;
  }
  t.comm = p->comm;
  t.host = 0;
  if (p->eager) {
    const double moe_kernels =
        p->eng->moe_kernels == AMOE_MOE_PER_EXPERT ? c->executed * p->eng->kernels_per_expert : (double)c->waves;
    t.host = p->dense_host + (moe_kernels + c->fetched) * p->hw->launch_s;
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
