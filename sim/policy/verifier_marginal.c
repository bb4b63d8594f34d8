/* marginal and marginal-depth (docs/design.md §6): AcceptMoE's expected
 * displacement, spent where it buys the most time.
 *   1. S_A = acceptmoe (steps 1–6).
 *   2. Reach π_root = 1, π_t = min(π_parent, p̂_{d_t} · e^{s_t} / m̄_{d_t})
 *      (marginal-depth: π_t = min(π_parent, p̂_{d_t}), the ablation that
 *      ignores the draft's scores).
 *   3. Path mass v_e = Σ_{t: e ∈ K_t} π_t · r_t,e; budget
 *      D = share · Σ_{e ∈ U \ S_A} v_e (U: the natural union).
 *   4. From S = U ∪ S_A, visit members by ascending v_e / c_e (ties: higher
 *      id first) and drop each while |S| > k and v_e fits the budget left
 *      (one that does not fit is kept and the visit goes on). c_e: the
 *      expert's marginal time by the one cost function (§9) at its token
 *      count, with its fetch when not resident; on several GPUs its HBM
 *      part is weighted by its group's expert time over the busiest
 *      group's (§16).
 *   5. share = 1: if S predicts a slower layer than S_A, S_A.
 * At batch > 1 an expert the pass's other requests execute is never
 * dropped: its bytes are read anyway (§17). */
#include <math.h>
#include <string.h>

#include "cost.h"
#include "layout.h"
#include "policy.h"
#include "sort.h"

/* parameter slots, in the rows' order (policy.c) */
enum { BETA = 0, SHARE = 1 };

/* ascending v/c, ties: higher id first */
static int cheaper_mass(const void *a, const void *b, const void *key) {
  const double *r = key;
  const int x = *(const int *)a, y = *(const int *)b;
  return r[x] < r[y] || (r[x] == r[y] && x > y);
}

/* The position of node t among the verified nodes (ascending), or -1. */
static int position(const int *nodes, int nn, int t) {
  int lo = 0, hi = nn - 1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (nodes[mid] == t) return mid;
    if (nodes[mid] < t) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

void amoe_marginal_reach(const amoe_vctx *c, int by_scores, double *pi) {
  const amoe_block *b = c->b;
  for (int i = 0; i < c->nn; i++) {
    const int t = c->nodes[i], d = b->depth[t];
    if (i == 0 || t == 0) {
      pi[i] = 1;
      continue;
    }
    const int pp = position(c->nodes, i, b->parent[t]);
    const double parent = pp >= 0 ? pi[pp] : 1;
    const double pd = d < c->commitment_n ? c->commitment[d] : 0;
    double r = pd;
    if (by_scores) {
      const double md = c->mass && d < AMOE_MAX_DEPTH ? c->mass[d] : 0;
      r = md > 0 ? pd * exp((double)b->score[t]) / md : 0;
    }
    pi[i] = r < parent ? r : parent;
  }
}

/* The predicted time of a layer that executes X (counts: natural tokens
 * per expert), by the cost function; 0 without one. */
static double layer_time(const amoe_vctx *c, const uint8_t *X, const int *count) {
  const amoe_cost_pass_ctx *p = c->cost;
  if (!p) return 0;
  amoe_layer_counts lc = {0, 0, 1, 0};
  for (int e = 0; e < c->experts; e++)
    if (X[e]) {
      lc.executed += 1;
      lc.fetched += c->resident && !c->resident[e];
      lc.expert_s += amoe_cost_expert_at(p->ec, count[e]);
    }
  if (c->layout) {
    int busiest;
    lc.expert_s = amoe_layout_layer(c->layout, c->layer, X, count, p->ec, p->moe_tp, &busiest);
  }
  return amoe_cost_layer(p, &lc).total;
}

static void marginal(const amoe_vctx *c, uint8_t *S, int by_scores) {
  const int E = c->experts, k = c->k, nn = c->nn;
  /* scratch (doubles): v, cost, key, U (E bytes), S_A (E bytes), π (nn);
   * iscratch: the visit order, then token counts */
  double *v = c->scratch, *cost = v + E, *key = cost + E;
  uint8_t *U = (uint8_t *)(key + E), *SA = U + E;
  double *pi = c->scratch + 4 * E + (E + 7) / 8;
  int *order = c->iscratch, *count = c->iscratch + E;
  amoe_verifier_acceptmoe(c, S);
  memcpy(SA, S, (size_t)E);
  amoe_marginal_reach(c, by_scores, pi);
  memset(v, 0, (size_t)E * sizeof *v);
  memset(U, 0, (size_t)E);
  memset(count, 0, (size_t)E * sizeof *count);
  for (int i = 0; i < nn; i++) {
    const int t = c->nodes[i];
    const uint16_t *id = amoe_block_ids(c->b, c->layer, t);
    const float *r = c->prob + (size_t)t * k;
    for (int j = 0; j < k; j++) {
      v[id[j]] += pi[i] * r[j];
      U[id[j]] = 1;
      count[id[j]] += 1;
    }
  }
  double budget = 0;
  int size = 0;
  for (int e = 0; e < E; e++) {
    if (U[e] && !SA[e]) budget += v[e];
    S[e] = U[e] | SA[e];
    size += S[e];
  }
  budget *= c->row->vparam[SHARE];
  /* c_e at S's counts: what e adds to the layer S executes */
  const amoe_cost_pass_ctx *p = c->cost;
  amoe_layer_counts base = {0, 0, 1, 0};
  double gwork[64] = {0}, gmax = 0;
  int gn[64], copies[64];
  if (p) {
    for (int e = 0; e < E; e++)
      if (S[e]) {
        base.executed += 1;
        base.fetched += c->resident && !c->resident[e];
        base.expert_s += amoe_cost_expert_at(p->ec, count[e]);
      }
    if (c->layout) {
      amoe_layout_layer_groups(c->layout, c->layer, S, count, p->ec, p->moe_tp, gwork, gn);
      for (int g = 0; g < amoe_layout_groups(c->layout); g++) gmax = gwork[g] > gmax ? gwork[g] : gmax;
    }
  }
  int m = 0;
  for (int e = 0; e < E; e++) {
    if (!S[e]) continue;
    double ce = 1; /* no cost function (a bare test context): by mass alone */
    if (p) {
      const double hbm = amoe_cost_expert_at(p->ec, count[e]);
      ce = amoe_cost_expert_marginal(p, &base, count[e], c->resident && !c->resident[e]);
      if (c->layout && gmax > 0) { /* its group's share of the busiest group's time */
        const int nc = amoe_layout_copies(c->layout, c->layer, e, copies);
        double gw = gwork[copies[0]];
        for (int q = 1; q < nc; q++) gw = gwork[copies[q]] < gw ? gwork[copies[q]] : gw;
        ce += hbm * (gw / gmax / p->moe_tp - 1);
      }
    }
    cost[e] = ce;
    key[e] = v[e] / ce;
    order[m++] = e;
  }
  amoe_sort(order, m, sizeof *order, cheaper_mass, key);
  double left = budget;
  for (int i = 0; i < m && size > k; i++) {
    const int e = order[i];
    if (v[e] > left || (c->covered && c->covered[e])) continue; /* (a covered expert saves nothing) */
    left -= v[e];
    S[e] = 0;
    size--;
  }
  if (c->row->vparam[SHARE] >= 1 && layer_time(c, S, count) > layer_time(c, SA, count)) memcpy(S, SA, (size_t)E);
}

void amoe_verifier_marginal(const amoe_vctx *c, uint8_t *S) { marginal(c, S, 1); }
void amoe_verifier_marginal_depth(const amoe_vctx *c, uint8_t *S) { marginal(c, S, 0); }
