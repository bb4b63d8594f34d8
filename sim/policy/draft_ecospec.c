/* ecospec: EcoSpec's draft selection as its paper builds it (docs/design.md
 * §6). A predictor gives each candidate node's experts per layer, P_t,l:
 * the natural route with each expert replaced, with probability
 * 1 - predictor_accuracy, by the most popular expert so far that is not in
 * it (counter-based coins, the same for every row). A buffer B_l holds the
 * experts the verification set already covers, first the root's. The tree
 * grows from the root: of the frontier (children of chosen nodes) it takes
 * the candidate of highest
 *   S(t) = P(t) / (ΔCost(t) + ε),
 * P(t) = exp(cumulative draft score) (its path probability), ΔCost(t) the
 * predicted marginal expert time of its experts not in the buffer, by the
 * one cost function: an expert's device time, its launches, a fetch when it
 * is not resident, or on several GPUs what it adds to its layer's busiest
 * group; 0 for an expert already covered. ε = epsilon × one expert's
 * device time. The chosen node's experts join the buffer.
 * ecospec-global (the ablation) ranks by the whole predicted cost of the
 * candidate's experts, covered or not.
 * Stop: at the node budget, or when the best candidate would lower the
 * predicted rate, P(t) / ΔCost(t) < E[τ] / T with E[τ] = 1 + Σ P over the
 * chosen nodes and T the predicted pass (the budget's fixed parts, the
 * root's experts, and every ΔCost taken so far); ΔCost here is the
 * marginal one for both rows, as the pass pays it. Verification stays
 * natural: lossless. The predictor's forward is a draft-side cost
 * (amoe_draft_ecospec_cost). */
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

/* The row's parameters, in its table row's order (policy.c). */
enum { P_ACCURACY = 0, P_PREDICTOR_B = 1, P_EPSILON = 2 };

double amoe_draft_ecospec_cost(const amoe_policy_row *row, const amoe_spec *s, int candidates) {
  return amoe_cost_dense_model(&s->hw, row->dparam[P_PREDICTOR_B] * 1e9, candidates);
}

/* The group a new expert x of layer l lands on: its copy on the least
 * loaded group (cnt: the layer's experts per group so far). */
static int group_of(const struct amoe_layout *lay, int l, int x, const int *cnt) {
  int cg[AMOE_MAX_GPUS];
  const int nc = amoe_layout_copies(lay, l, x, cg);
  int g = cg[0];
  for (int q = 1; q < nc; q++) g = cnt[cg[q]] < cnt[g] ? cg[q] : g;
  return g;
}

/* ecospec and ecospec-global: global 1 ranks by a candidate's whole
 * predicted expert cost. */
static int choose(const amoe_dctx *c, int *out, int global) {
  const amoe_block *b = c->b;
  const amoe_spec *s = c->spec;
  const int n = b->n, L = b->layers, E = b->experts, k = s->model.top_k;
  /* scratch layout */
  char *p = c->scratch;
  uint16_t *pred = (uint16_t *)p;  p += (size_t)n * L * k * sizeof(uint16_t);
  uint16_t *rank = (uint16_t *)p;  p += (size_t)L * E * sizeof(uint16_t);
  uint8_t *cov = (uint8_t *)p;     p += (size_t)L * E;
  uint8_t *state = (uint8_t *)p;   p += (size_t)n; /* 0 out, 1 frontier, 2 chosen */
  const int G = c->layout ? amoe_layout_groups(c->layout) : 0;
  int gcnt[AMOE_MAX_LAYERS][AMOE_MAX_GPUS], gmax[AMOE_MAX_LAYERS], tmp[AMOE_MAX_GPUS]; /* covered experts per (layer, group) */
  /* popularity ranking per layer (requests so far; ties: lower id) */
  pop_pair pp[AMOE_MAX_EXPERTS];
  for (int l = 0; l < L; l++) {
    const uint32_t *pop = c->state ? (const uint32_t *)c->state + (size_t)l * E : NULL;
    for (int x = 0; x < E; x++) pp[x] = (pop_pair){pop ? pop[x] : 0, x};
    qsort(pp, (size_t)E, sizeof *pp, pop_cmp);
    for (int x = 0; x < E; x++) rank[(size_t)l * E + x] = (uint16_t)pp[x].id;
  }
  /* predicted routes, with counter-based coins (same for every row) */
  const double acc = c->row->dparam[P_ACCURACY];
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
  amoe_pass_shape sh = amoe_spec_pass_shape(s, c->nodes, s->workload.depth);
  sh.offload = c->resident != NULL;
  amoe_cost_pass_init(&pc, &sh);
  const amoe_layer_counts base = {k, 0, 1, k * amoe_cost_expert_at(pc.ec, 1)};
  const double c_hbm = amoe_cost_expert_marginal(&pc, &base, 1, 0), c_pcie = amoe_cost_expert_marginal(&pc, &base, 1, 1);
  /* ε in one expert's device time: never 0, even where an engine's host
   * loop makes an executed expert cost no more than a visited one */
  const double eps = c->row->dparam[P_EPSILON] * pc.ec.mem_s;
  /* the buffer: the root's predicted experts; T: the predicted pass */
  memset(cov, 0, (size_t)L * E);
  if (c->covered) /* at batch: what the pass's other requests route to is in the buffer already */
    for (int l = 0; l < L; l++)
      for (int x = 0; x < E; x++) cov[(size_t)l * E + x] = c->covered[l][x];
  double T = amoe_cost_pass_begin(&pc).total;
  for (int l = 0; l < L; l++) {
    amoe_layer_counts lc = base;
    for (int j = 0; j < k; j++) {
      const int x = pred[(size_t)l * k + j];
      if (!cov[(size_t)l * E + x] && c->resident && !c->resident[l][x]) lc.fetched += 1;
      cov[(size_t)l * E + x] = 1;
    }
    if (G) { /* the root's experts on their groups */
      for (int g = 0; g < G; g++) gcnt[l][g] = 0;
      gmax[l] = 0;
      for (int x = 0; x < E; x++)
        if (cov[(size_t)l * E + x]) {
          const int g = group_of(c->layout, l, x, gcnt[l]);
          if (++gcnt[l][g] > gmax[l]) gmax[l] = gcnt[l][g];
        }
      lc.expert_s = gmax[l] * amoe_cost_expert_at(pc.ec, 1) / pc.moe_tp;
    }
    T += amoe_cost_layer(&pc, &lc).total;
  }
  memset(state, 0, (size_t)n);
  state[0] = 2;
  for (int t = 1; t < n; t++)
    if (b->parent[t] == 0) state[t] = 1;
  double etau = 1;
  for (int chosen = 1; chosen < c->nodes; chosen++) {
    int best = -1;
    double bs = -INFINITY, best_d = 0;
    for (int t = 1; t < n; t++) {
      if (state[t] != 1) continue;
      double d = 0, whole = 0; /* its marginal and its whole predicted cost */
      for (int l = 0; l < L; l++) {
        const uint16_t *pr = pred + ((size_t)t * L + l) * k;
        if (G) { /* what its uncovered experts add to the busiest group */
          int mx = gmax[l];
          for (int g = 0; g < G; g++) tmp[g] = gcnt[l][g];
          for (int j = 0; j < k; j++)
            if (!cov[(size_t)l * E + pr[j]]) {
              const int g = group_of(c->layout, l, pr[j], tmp);
              if (++tmp[g] > mx) mx = tmp[g];
            }
          d += (mx - gmax[l]) * c_hbm;
          whole += k * c_hbm / G; /* an even spread */
          continue;
        }
        for (int j = 0; j < k; j++) {
          const double ce = c->resident && !c->resident[l][pr[j]] ? c_pcie : c_hbm;
          whole += ce;
          if (!cov[(size_t)l * E + pr[j]]) d += ce;
        }
      }
      const double P = exp(b->score[t]), sc = P / ((global ? whole : d) + eps);
      if (sc > bs) { /* strict: ties keep the earlier node */
        bs = sc;
        best = t;
        best_d = d;
      }
    }
    if (best < 0) break;
    const double P = exp(b->score[best]);
    if (P * T < best_d * etau) break; /* it would lower E[τ] / T */
    etau += P;
    T += best_d;
    state[best] = 2;
    for (int l = 0; l < L; l++) {
      const uint16_t *pr = pred + ((size_t)best * L + l) * k;
      for (int j = 0; j < k; j++) {
        const size_t ix = (size_t)l * E + pr[j];
        if (G && !cov[ix]) {
          const int g = group_of(c->layout, l, pr[j], gcnt[l]);
          if (++gcnt[l][g] > gmax[l]) gmax[l] = gcnt[l][g];
        }
        cov[ix] = 1;
      }
    }
    for (int t = best + 1; t < n; t++)
      if (b->parent[t] == best) state[t] = 1;
  }
  if (c->predicted) *c->predicted = (amoe_draft_prediction){etau, T};
  int m = 0;
  for (int t = 0; t < n; t++)
    if (state[t] == 2) out[m++] = t;
  return m;
}

int amoe_draft_ecospec(const amoe_dctx *c, int *out) { return choose(c, out, 0); }
int amoe_draft_ecospec_global(const amoe_dctx *c, int *out) { return choose(c, out, 1); }
