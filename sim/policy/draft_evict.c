/* evict: the prefix n of the EAGLE order that maximises expected committed
 * tokens / predicted block time. E[τ](n) = 1 + Σ exp(score) over the prefix
 * (the draft's own path probabilities); the block time comes from the cost
 * model with the calibration workload's union-vs-n table (the null model
 * E·(1 - (1 - k/E)^n) where the table has no entry). Under offload, a
 * fraction 1 - slots/E of the union is predicted to be fetched. Lossless. */
#include <math.h>

#include "cost.h"
#include "policy.h"
#include "run.h"

static double union_at(const amoe_dctx *c, int n) {
  const amoe_model *M = &c->spec->model;
  if (c->offline && n <= c->offline->union_n && c->offline->unions[n] > 0) return c->offline->unions[n];
  return M->experts * (1 - pow(1 - (double)M->top_k / M->experts, n));
}

int amoe_draft_evict(const amoe_dctx *c, int *out) {
  const amoe_block *b = c->b;
  const amoe_spec *s = c->spec;
  const amoe_model *M = &s->model;
  const amoe_hw *HW = &s->hw;
  int *order = c->scratch;
  int n = amoe_draft_rank(b, order);
  int limit = n < c->nodes ? n : c->nodes;
  double etau = 1, best = -1;
  int best_n = 1, maxd = 0;
  double miss = s->offload.enabled ? 1 - fmin(1.0, (double)s->offload.slots_per_layer / M->experts) : 0;
  for (int i = 1; i <= limit; i++) {
    if (i > 1) {
      etau += exp(b->score[order[i - 1]]);
      if (b->depth[order[i - 1]] > maxd) maxd = b->depth[order[i - 1]];
    }
    double u = union_at(c, i);
    int per = (int)ceil(i * (double)M->top_k / (u > 0 ? u : 1));
    double layer = amoe_cost_dense(M, HW, i, s->workload.context_tokens, 1) + amoe_cost_moe_fixed(HW, 1) +
                   u * amoe_cost_expert(M, HW, per) + u * miss * amoe_cost_fetch(M, HW, 1) +
                   (s->offload.enabled ? s->offload.host_overhead_per_layer_s : 0);
    double T = HW->step_s + amoe_cost_draft(M, HW, amoe_cost_draft_steps(maxd)) + amoe_cost_head(M, HW, i) +
               (M->layers - M->moe_layers) * amoe_cost_dense(M, HW, i, s->workload.context_tokens, 0) +
               M->moe_layers * layer;
    double v = etau / T;
    if (v > best) {
      best = v;
      best_n = i;
    }
  }
  return amoe_nodes_ascending(b, order, best_n, (uint8_t *)(order + b->n), out);
}
