/* evict: the prefix n of the EAGLE order that maximises expected committed
 * tokens / predicted block time. E[τ](n) = 1 + Σ exp(score) over the prefix
 * (the draft's own path probabilities); the block time comes from the cost
 * model with the calibration workload's union-vs-n table (the null model
 * E·(1 - (1 - k/E)^n) where the table has no entry), priced by the shared
 * cost function. Under offload, a fraction 1 - slots/E of the union is
 * predicted to be fetched. Lossless. */
#include <math.h>

#include "cost.h"
#include "policy.h"
#include "run.h"

static double union_at(const amoe_dctx *c, int n) {
  const amoe_model *M = &c->spec->model;
  if (c->offline && n <= c->offline->union_n && c->offline->unions[n] > 0) return c->offline->unions[n];
  return M->experts * (1 - pow(1 - (double)M->top_k / M->experts, n));
}

/* evict's prediction of a pass over the first n nodes of the EAGLE order
 * (maxd: their depth), by the shared cost function (§9). */
double amoe_draft_evict_predict(const amoe_dctx *c, int n, int maxd) {
  const amoe_spec *s = c->spec;
  const amoe_model *M = &s->model;
  const int off = s->offload.enabled;
  amoe_cost_pass_ctx pc;
  amoe_cost_pass_init(&pc, M, &s->hw, &s->engine, off, s->offload.overlap, n, maxd, s->workload.context_tokens);
  const double miss = off ? 1 - fmin(1.0, (double)s->offload.slots_per_layer / M->experts) : 0;
  const double u = union_at(c, n);
  const int per = (int)ceil(n * (double)M->top_k / (u > 0 ? u : 1));
  const int waves = off ? (int)ceil(u / s->offload.slots_per_layer) : 1;
  amoe_layer_counts lc = {u, u * miss, waves > 1 ? waves : 1, u * amoe_cost_expert_at(pc.ec, per)};
  amoe_pass_time t = amoe_cost_pass(&pc, NULL, 0);
  return t.total + M->moe_layers * amoe_cost_layer(&pc, &lc).total;
}

int amoe_draft_evict(const amoe_dctx *c, int *out) {
  const amoe_block *b = c->b;
  int *order = c->scratch;
  int n = amoe_draft_rank(b, order);
  int limit = n < c->nodes ? n : c->nodes;
  double etau = 1, best = -1;
  int best_n = 1, maxd = 0;
  for (int i = 1; i <= limit; i++) {
    if (i > 1) {
      etau += exp(b->score[order[i - 1]]);
      if (b->depth[order[i - 1]] > maxd) maxd = b->depth[order[i - 1]];
    }
    double v = etau / amoe_draft_evict_predict(c, i, maxd);
    if (v > best) {
      best = v;
      best_n = i;
    }
  }
  return amoe_nodes_ascending(b, order, best_n, (uint8_t *)(order + b->n), out);
}
