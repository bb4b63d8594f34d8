/* eagle: verify the root and the best nodes-1 candidates by cumulative draft
 * score (ties: the earlier node). autoregressive: the tokens the eagle row
 * commits (its tree's natural accepted path), decoded one per pass. */
#include <stdlib.h>

#include "policy.h"

int amoe_draft_autoregressive(const amoe_dctx *c, int *out) {
  const amoe_block *b = c->b;
  int n = amoe_draft_eagle(c, out), m = 0;
  /* ascending ids with parent[t] < t: the path's nodes come in path order */
  for (int i = 0; i < n; i++) {
    const int t = out[i];
    if (t == 0 || (m > 0 && b->accepted[t] && b->parent[t] == out[m - 1])) out[m++] = t;
  }
  return m;
}

/* A child never outscores its parent and ties go to the earlier node, so
 * every prefix of this order is closed under parents. */
int amoe_draft_rank(const amoe_block *b, int *order) {
  order[0] = 0;
  int cnt = 0;
  for (int t = 1; t < b->n; t++) { /* insertion: stable on ties */
    float s = b->score[t];
    int j = cnt++;
    while (j > 0 && s > b->score[order[j]]) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = t;
  }
  return b->n;
}

/* Writes order[0..n) ascending into out. */
static int ascending(const amoe_block *b, const int *order, int n, uint8_t *keep, int *out) {
  for (int t = 0; t < b->n; t++) keep[t] = 0;
  for (int i = 0; i < n; i++) keep[order[i]] = 1;
  int m = 0;
  for (int t = 0; t < b->n; t++)
    if (keep[t]) out[m++] = t;
  return m;
}

int amoe_draft_eagle(const amoe_dctx *c, int *out) {
  const amoe_block *b = c->b;
  if (b->n <= c->nodes) {
    for (int t = 0; t < b->n; t++) out[t] = t;
    return b->n;
  }
  int *order = c->scratch;
  amoe_draft_rank(b, order);
  return ascending(b, order, c->nodes, (uint8_t *)(order + b->n), out);
}

/* evict: the prefix n of the EAGLE order that maximises expected committed
 * tokens / predicted block time. E[τ](n) = 1 + Σ exp(score) over the prefix
 * (the draft's own path probabilities); the block time comes from the cost
 * model with the calibration workload's union-vs-n table (the null model
 * E·(1 - (1 - k/E)^n) where the table has no entry). Under offload, a
 * fraction 1 - slots/E of the union is predicted to be fetched. Lossless. */
#include <math.h>

#include "cost.h"
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
  return ascending(b, order, best_n, (uint8_t *)(order + b->n), out);
}
