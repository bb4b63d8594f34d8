/* evict: the prefix n of the EAGLE order that maximises expected committed
 * tokens / predicted block time. E[τ](n) = 1 + Σ over the prefix of each
 * node's draft path probability exp(score), calibrated per depth by the
 * commitment table (× p̂_d / m̄_d: what the calibration blocks committed at
 * that depth over the draft mass they put there); the block time comes from the cost
 * model with the calibration workload's union-vs-n table (the null model
 * E·(1 - (1 - k/E)^n) where the table has no entry), priced by the shared
 * cost function. Under offload, a fraction 1 - slots/E of the union is
 * predicted to be fetched; on several GPUs the busiest group is predicted to
 * hold ⌈union / groups⌉ of its experts (an even spread: a lower bound).
 * At batch > 1 the share of experts the pass's other requests already
 * route to is taken off the union (§17). Lossless. */
#include <math.h>

#include "cost.h"
#include "layout.h"
#include "policy.h"
#include "tables.h"

static double union_at(const amoe_dctx *c, int n) {
  const amoe_model *M = &c->spec->model;
  if (c->offline && n <= c->offline->union_n && c->offline->unions[n] > 0) return c->offline->unions[n];
  return M->experts * (1 - pow(1 - (double)M->top_k / M->experts, n));
}

/* The share of experts the pass's other requests already route to (at
 * batch; 0 without them). */
static double covered_share(const amoe_dctx *c) {
  const amoe_model *M = &c->spec->model;
  double cover = 0;
  if (c->covered) {
    for (int l = 0; l < M->moe_layers; l++)
      for (int x = 0; x < M->experts; x++) cover += c->covered[l][x];
    cover /= (double)M->moe_layers * M->experts;
  }
  return cover;
}

/* The prediction with that share of the union free. */
static double predict(const amoe_dctx *c, int n, int maxd, double cover) {
  const amoe_spec *s = c->spec;
  const amoe_model *M = &s->model;
  const int off = s->offload.enabled;
  amoe_cost_pass_ctx pc;
  const amoe_pass_shape sh = amoe_spec_pass_shape(s, n, maxd);
  amoe_cost_pass_init(&pc, &sh);
  const double miss = off ? 1 - fmin(1.0, (double)s->offload.slots_per_layer / M->experts) : 0;
  double u = union_at(c, n);
  const int per = (int)ceil(n * (double)M->top_k / (u > 0 ? u : 1));
  const int waves = off ? amoe_cost_waves(u, s->offload.slots_per_layer) : 1;
  u *= 1 - cover; /* (the tree's experts as independent of the others') */
  amoe_layer_counts lc = {u, u * miss, waves, u * amoe_cost_expert_at(pc.ec, per)};
  if (c->layout) { /* several GPUs: the union spread evenly over the groups, each expert split moe_tp ways */
    const int G = amoe_layout_groups(c->layout);
    lc.expert_s = ceil(u / G) * amoe_cost_expert_at(pc.ec, per) / pc.moe_tp;
  }
  return amoe_cost_pass_begin(&pc).total + M->moe_layers * amoe_cost_layer(&pc, &lc).total;
}

double amoe_draft_evict_predict(const amoe_dctx *c, int n, int maxd) { return predict(c, n, maxd, covered_share(c)); }

/* A node's chance of being committed: its draft path probability, scaled
 * at its depth by p̂_d / m̄_d (the calibration's reach over its draft mass)
 * when the table has them, at most 1. */
double amoe_commit_chance(const struct amoe_offline *o, const amoe_block *b, int t) {
  double q = exp(b->score[t]);
  const int d = b->depth[t];
  if (o && d < o->n && o->mass[d] > 0) q *= o->p[d] / o->mass[d];
  return q < 1 ? q : 1;
}

int amoe_draft_evict(const amoe_dctx *c, int *out) {
  const amoe_block *b = c->b;
  int *order = c->scratch;
  int n = amoe_draft_rank(b, order);
  int limit = n < c->nodes ? n : c->nodes;
  const double cover = covered_share(c);
  double etau = 1, best = -1, best_tau = 1, best_t = 0;
  int best_n = 1, maxd = 0;
  for (int i = 1; i <= limit; i++) {
    if (i > 1) {
      etau += amoe_commit_chance(c->offline, b, order[i - 1]);
      if (b->depth[order[i - 1]] > maxd) maxd = b->depth[order[i - 1]];
    }
    const double T = predict(c, i, maxd, cover), v = etau / T;
    if (v > best) {
      best = v;
      best_n = i;
      best_tau = etau;
      best_t = T;
    }
  }
  if (c->predicted) *c->predicted = (amoe_draft_prediction){best_tau, best_t};
  return amoe_nodes_ascending(b, order, best_n, (uint8_t *)(order + b->n), out);
}
