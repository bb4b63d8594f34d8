/* The cost model (DESIGN §9). Every coefficient comes from the model and
 * hardware presets (or a calibration file); none lives here. */
#ifndef AMOE_COST_H
#define AMOE_COST_H

#include "model.h"

/* Attention, norms, router, shared experts (and the dense MLP of a dense
 * layer) for n tokens reading `context` tokens of KV: max(bytes/BW, FLOPs/peak)
 * plus one launch. */
double amoe_cost_dense(const amoe_model *m, const amoe_hw *hw, int n, int context, int is_moe);
/* One routed expert serving n tokens: max(bytes/BW, 2·3·d·f·n/peak).
 * Inline: the run loop calls it for every executed expert of every layer. */
static inline double amoe_cost_expert(const amoe_model *m, const amoe_hw *hw, int n) {
  double flops = 2.0 * 3.0 * m->hidden * (double)m->moe_intermediate * n;
  double mem = amoe_model_expert_bytes(m) / hw->hbm_bw, comp = flops / hw->peak_flops;
  return mem > comp ? mem : comp;
}
/* H2D transfer of `fetched` experts. */
double amoe_cost_fetch(const amoe_model *m, const amoe_hw *hw, int fetched);
/* LM head over n tokens. */
double amoe_cost_head(const amoe_model *m, const amoe_hw *hw, int n);
/* Draft: `steps` passes of the draft head. */
double amoe_cost_draft(const amoe_model *m, const amoe_hw *hw, int steps);

#endif
