/* The cost model (docs/design.md §9). Every coefficient comes from the model and
 * hardware presets (or a calibration file); none lives here. A forward
 * pass over n tokens costs
 *   T = t_step + T_draft + Σ_layers (t_dense + t_moe + t_fetch) + t_head. */
#ifndef AMOE_COST_H
#define AMOE_COST_H

#include "model.h"

/* Attention, norms, router, shared experts (and the dense MLP of a dense
 * layer) for n tokens reading `context` tokens of KV: max(bytes/BW, FLOPs/peak)
 * plus the layer's fixed kernel cost. */
double amoe_cost_dense(const amoe_model *m, const amoe_hw *hw, int n, int context, int is_moe);
/* One routed expert serving n tokens: max(bytes/(η·BW), n · 2·3·d·f/peak).
 * The run loop prices every expert of every layer, so the two coefficients
 * are computed once (amoe_cost_expert_coef) and applied inline. */
typedef struct {
  double mem_s;       /* bytes / (η·BW) */
  double per_token_s; /* 2·3·d·f / peak */
} amoe_expert_coef;
static inline amoe_expert_coef amoe_cost_expert_coef(const amoe_model *m, const amoe_hw *hw) {
  amoe_expert_coef c = {amoe_model_expert_bytes(m) / (hw->moe_eta * hw->hbm_bw),
                        2.0 * 3.0 * m->hidden * (double)m->moe_intermediate / hw->peak_flops};
  return c;
}
static inline double amoe_cost_expert_at(amoe_expert_coef c, int n) {
  double comp = c.per_token_s * n;
  return c.mem_s > comp ? c.mem_s : comp;
}
static inline double amoe_cost_expert(const amoe_model *m, const amoe_hw *hw, int n) {
  return amoe_cost_expert_at(amoe_cost_expert_coef(m, hw), n);
}
/* Fixed part of a MoE layer run in `waves` fused-MoE calls. */
static inline double amoe_cost_moe_fixed(const amoe_hw *hw, int waves) { return waves * hw->moe_t0_s; }
/* H2D transfer of `fetched` experts, each a copy of its own. */
double amoe_cost_fetch(const amoe_model *m, const amoe_hw *hw, int fetched);
/* copy_latency_s from measurement (calibrate-hw): a copy of `bytes` ran at
 * small_bw, large copies at large_bw, so each copy costs bytes/small_bw −
 * bytes/large_bw beyond its bytes (at least 0). */
double amoe_cost_fit_copy_latency(double bytes, double small_bw, double large_bw);
/* LM head over n tokens. */
double amoe_cost_head(const amoe_model *m, const amoe_hw *hw, int n);
/* Draft: `steps` forward passes of the draft head (a tree of depth D takes
 * D steps plus one draft-extend pass over the committed tokens). */
double amoe_cost_draft(const amoe_model *m, const amoe_hw *hw, int steps);
/* Draft steps of a tree of depth `depth` (0: no draft). */
static inline int amoe_cost_draft_steps(int depth) { return depth > 0 ? depth + 1 : 0; }

#endif
