#include "cost.h"

static double mx(double a, double b) { return a > b ? a : b; }

double amoe_cost_dense(const amoe_model *m, const amoe_hw *hw, int n, int context, int is_moe) {
  double w = m->attn_bytes_per_layer;
  if (is_moe)
    w += m->shared_experts * amoe_model_shared_expert_bytes(m);
  else
    w += 3.0 * m->hidden * (double)m->dense_intermediate * 2.0;
  double kv = m->kv_bytes_per_token_layer * (double)context;
  /* bf16 weights: 2 FLOPs per parameter per token; attention ~4·ctx·d per token */
  double flops = (double)n * (w + 4.0 * context * (double)m->hidden);
  return mx((w + kv) / hw->hbm_bw, flops / hw->peak_flops) + hw->layer_fixed_s;
}

double amoe_cost_fetch(const amoe_model *m, const amoe_hw *hw, int fetched) {
  return fetched * (amoe_model_expert_bytes(m) / hw->h2d_bw + hw->copy_latency_s);
}

double amoe_cost_head(const amoe_model *m, const amoe_hw *hw, int n) {
  double flops = 2.0 * n * (double)m->vocab * m->hidden;
  return mx(m->lm_head_bytes / hw->hbm_bw, flops / hw->peak_flops) + hw->launch_s;
}

double amoe_cost_draft(const amoe_model *m, const amoe_hw *hw, int steps) {
  return steps * (m->draft_head_bytes / hw->hbm_bw + hw->draft_step_fixed_s);
}

double amoe_cost_fit_copy_latency(double bytes, double small_bw, double large_bw) {
  if (!(small_bw > 0) || !(large_bw > 0)) return 0;
  return mx(bytes / small_bw - bytes / large_bw, 0);
}
