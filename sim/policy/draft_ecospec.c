/* ecospec: cost-aware greedy draft selection (docs/design.md §6). Starting from the
 * root, repeatedly add the frontier node with the highest
 *   score = accept_likelihood(t) - λ · Σ_l Σ_{e ∈ P_t,l \ C_l} c_l,e / Σ_l k·c_l
 * where accept_likelihood = exp(cumulative draft score), P the predicted route
 * (the natural route with each expert replaced, with probability
 * 1 - predictor_accuracy, by the most popular expert so far that is not in it),
 * C_l the covered experts (the root's predicted route, and the resident set
 * under offload) and c the per-expert cost (HBM, or PCIe when not resident).
 * On several GPUs an uncovered expert costs what it adds to the busiest
 * group of its layer: HBM times the rise of the largest group's count (a
 * replicated expert on its least loaded copy's group), so experts on idle
 * groups are free. Stops at the node budget. Verification stays natural:
 * lossless. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "layout.h"
#include "policy.h"
#include "rng.h"

typedef struct {
  double v;
  int id;
} pop_pair;

static int pop_cmp(const void *a, const void *b) {
  const pop_pair *x = a, *y = b;
  if (x->v != y->v) return x->v > y->v ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* The state: [layer][E] how often this row has executed each expert so
 * far (the predictor's popularity). */
size_t amoe_draft_ecospec_state_bytes(int layers, int experts) { return (size_t)layers * experts * sizeof(uint32_t); }

void amoe_draft_ecospec_observe(void *state, int layer, const uint8_t *X, int experts) {
  uint32_t *pop = (uint32_t *)state + (size_t)layer * experts;
  for (int x = 0; x < experts; x++) pop[x] += X[x];
}

int amoe_draft_ecospec(const amoe_dctx *c, int *out) {
  const amoe_block *b = c->b;
  const amoe_spec *s = c->spec;
  const int n = b->n, L = b->layers, E = b->experts, k = s->model.top_k;
  if (n <= c->nodes) {
    for (int t = 0; t < n; t++) out[t] = t;
    return n;
  }
  /* scratch layout */
  char *p = c->scratch;
  uint16_t *pred = (uint16_t *)p;  p += (size_t)n * L * k * sizeof(uint16_t);
  uint16_t *rank = (uint16_t *)p;  p += (size_t)L * E * sizeof(uint16_t);
  uint8_t *cov = (uint8_t *)p;     p += (size_t)L * E;
  uint8_t *state = (uint8_t *)p;   p += (size_t)n; /* 0 out, 1 frontier, 2 chosen */
  const int G = c->layout ? amoe_layout_groups(c->layout) : 0;
  int gcnt[AMOE_MAX_LAYERS][64], gmax[AMOE_MAX_LAYERS], tmp[64], cg[64]; /* covered experts per (layer, group) */
  /* popularity ranking per layer (requests so far; ties: lower id) */
  pop_pair pp[AMOE_MAX_EXPERTS];
  for (int l = 0; l < L; l++) {
    const uint32_t *pop = c->state ? (const uint32_t *)c->state + (size_t)l * E : NULL;
    for (int x = 0; x < E; x++) pp[x] = (pop_pair){pop ? pop[x] : 0, x};
    qsort(pp, (size_t)E, sizeof *pp, pop_cmp);
    for (int x = 0; x < E; x++) rank[(size_t)l * E + x] = (uint16_t)pp[x].id;
  }
  /* predicted routes, with counter-based coins (same for every row) */
  double acc = c->row->dparam[1]; /* predictor_accuracy */
  for (int t = 0; t < n; t++)
    for (int l = 0; l < L; l++) {
      const uint16_t *nat = amoe_block_ids(b, l, t);
      uint16_t *pr = pred + ((size_t)t * L + l) * k;
      for (int j = 0; j < k; j++) pr[j] = nat[j];
      for (int j = 0; j < k; j++) {
        if (amoe_rng_coin(s->workload.seed ^ 0xec05ecULL, b->index, ((uint64_t)t * L + l) * k + j) < acc)
          continue;
        for (int r = 0; r < E; r++) { /* most popular not already predicted or natural */
          int cand = rank[(size_t)l * E + r], used = 0;
          for (int q = 0; q < k && !used; q++) used = nat[q] == cand || pr[q] == cand;
          if (!used) {
            pr[j] = (uint16_t)cand;
            break;
          }
        }
      }
    }
  /* costs: what one more expert for one token adds to a layer of a pass
   * of the budget's nodes, by the shared cost function (§9) */
  amoe_cost_pass_ctx pc;
  amoe_cost_pass_init(&pc, &s->model, &s->hw, &s->engine, &s->parallel, c->resident != NULL, s->offload.overlap, c->nodes,
                      s->workload.depth, s->workload.context_tokens);
  const amoe_layer_counts base = {k, 0, 1, k * amoe_cost_expert_at(pc.ec, 1)};
  double c_hbm = amoe_cost_expert_marginal(&pc, &base, 1, 0);
  double c_pcie = amoe_cost_expert_marginal(&pc, &base, 1, 1);
  double norm = (double)L * k * c_hbm;
  memset(cov, 0, (size_t)L * E);
  for (int l = 0; l < L; l++) {
    if (c->resident)
      for (int x = 0; x < E; x++) cov[(size_t)l * E + x] = c->resident[l][x];
    for (int j = 0; j < k; j++) cov[(size_t)l * E + pred[(size_t)l * k + j]] = 1; /* the root's */
  }
  if (G) /* the covered experts on their groups */
    for (int l = 0; l < L; l++) {
      for (int g = 0; g < G; g++) gcnt[l][g] = 0;
      gmax[l] = 0;
      for (int x = 0; x < E; x++)
        if (cov[(size_t)l * E + x]) {
          const int nc = amoe_layout_copies(c->layout, l, x, cg);
          int g = cg[0];
          for (int q = 1; q < nc; q++) g = gcnt[l][cg[q]] < gcnt[l][g] ? cg[q] : g;
          if (++gcnt[l][g] > gmax[l]) gmax[l] = gcnt[l][g];
        }
    }
  memset(state, 0, (size_t)n);
  state[0] = 2;
  for (int t = 1; t < n; t++)
    if (b->parent[t] == 0) state[t] = 1;
  double lambda = c->row->dparam[0]; /* lambda */
  for (int chosen = 1; chosen < c->nodes; chosen++) {
    int best = -1;
    double bs = -INFINITY;
    for (int t = 1; t < n; t++) {
      if (state[t] != 1) continue;
      double pen = 0;
      for (int l = 0; l < L; l++) {
        const uint16_t *pr = pred + ((size_t)t * L + l) * k;
        if (G) { /* what its uncovered experts add to the busiest group */
          int mx = gmax[l];
          for (int g = 0; g < G; g++) tmp[g] = gcnt[l][g];
          for (int j = 0; j < k; j++)
            if (!cov[(size_t)l * E + pr[j]]) {
              const int nc = amoe_layout_copies(c->layout, l, pr[j], cg);
              int g = cg[0];
              for (int q = 1; q < nc; q++) g = tmp[cg[q]] < tmp[g] ? cg[q] : g;
              if (++tmp[g] > mx) mx = tmp[g];
            }
          pen += (mx - gmax[l]) * c_hbm;
          continue;
        }
        for (int j = 0; j < k; j++)
          if (!cov[(size_t)l * E + pr[j]])
            pen += c->resident && !c->resident[l][pr[j]] ? c_pcie : c_hbm;
      }
      double sc = exp(b->score[t]) - lambda * pen / norm;
      if (sc > bs) { /* strict: ties keep the earlier node */
        bs = sc;
        best = t;
      }
    }
    if (best < 0) break;
    state[best] = 2;
    for (int l = 0; l < L; l++) {
      const uint16_t *pr = pred + ((size_t)best * L + l) * k;
      for (int j = 0; j < k; j++) {
        const size_t ix = (size_t)l * E + pr[j];
        if (G && !cov[ix]) {
          const int nc = amoe_layout_copies(c->layout, l, pr[j], cg);
          int g = cg[0];
          for (int q = 1; q < nc; q++) g = gcnt[l][cg[q]] < gcnt[l][g] ? cg[q] : g;
          if (++gcnt[l][g] > gmax[l]) gmax[l] = gcnt[l][g];
        }
        cov[ix] = 1;
      }
    }
    for (int t = best + 1; t < n; t++)
      if (b->parent[t] == best) state[t] = 1;
  }
  int m = 0;
  for (int t = 0; t < n; t++)
    if (state[t] == 2) out[m++] = t;
  return m;
}
