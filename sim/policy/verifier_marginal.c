/* marginal and marginal-depth (docs/design.md §6): AcceptMoE's expected
 * deviated tokens (§7), spent where they buy the most time.
 *   1. S_A = acceptmoe (steps 1–6).
 *   2. Reach π_root = 1, π_t = min(π_parent, p̂_{d_t} · e^{s_t} / m̄_{d_t})
 *      (marginal-depth: π_t = min(π_parent, p̂_{d_t}), the ablation that
 *      ignores the draft's scores).
 *   3. Each verified node's flip probability by §7, in expectation over
 *      the token the target takes after it (the outcome is not read): the
 *      draft's probability q_c of each child c at its margin, the rest off
 *      the tree at margin_min,
 *        F_t(s) = Σ_c w_c·erfc(m_c / (κ s √2)) + W_t·erfc(m_min / (κ s √2)),
 *      w_c = q_c / max(1, Σ q), W_t = 1 − Σ w over the children whose
 *      margin is above m_min.
 *   4. The prediction runs over the block's layers as the pass does (§7
 *      adds layers in quadrature): node t's displacement so far, σ²_t =
 *      Σ of ρ² over the earlier layers, kept per set in amoe_vctx.deviation,
 *      and D(S) = Σ_t π_t · F_t(√(σ²_t + ρ_t(S)²)), ρ_t(S) the share of t's
 *      top-k weight outside S at this layer. AcceptMoE's D_A runs on S_A's
 *      own σ². Budget B = share · D_A through this layer, so that after the
 *      last layer marginal's prediction for the block is within share × 
 *      AcceptMoE's. (A context without that state: σ² = 0, this layer alone.)
 *   5. From S = U ∪ S_A (D = its earlier layers'; U the natural union),
 *      visit members by ascending δ_e / c_e (δ_e: what dropping e alone
 *      adds to D; ties: higher id first) and drop each while |S| > k and D
 *      stays within B (one that does not fit is kept and the visit goes
 *      on). share = 0: natural routing.
 *      c_e: the expert's marginal time by the one cost function (§9) at
 *      its token count, with its fetch when not resident; on several GPUs
 *      its HBM part is weighted by its group's expert time over the
 *      busiest group's (§16).
 *   6. share = 1: if S predicts a slower layer than S_A, S_A, where S_A
 *      on marginal's earlier layers keeps D within B too.
 * At batch > 1 an expert the pass's other requests execute is never
 * dropped: its bytes are read anyway (§17). */
#include <math.h>
#include <string.h>

#include "cost.h"
#include "fast.h"
#include "layout.h"
#include "policy.h"
#include "sort.h"

/* parameter slots, in the rows' order (policy.c) */
enum { BETA = 0, SHARE = 1 };

/* ascending δ/c, ties: higher id first */
static int cheaper_damage(const void *a, const void *b, const void *key) {
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

/* The flip model of the verified nodes (step 3): per node its reach π,
 * the weight W at margin_min and a list of children with their own
 * margin; per candidate its weight and margin over κ√2. */
typedef struct {
  int nn;
  double a_min;       /* m_min / (κ√2); INFINITY: no flips (κ = 0) */
  const double *pi;   /* [nn] */
  double *w_min;      /* [nn] W_t */
  int *first;         /* [nn] the first child with its own margin, -1: none */
  int *next;          /* [candidate] the next one of the same node */
  double *w, *a;      /* [candidate] w_c, m_c / (κ√2) */
} flip_model;

/* scratch: w_min (nn), w and a (n each) doubles; first (nn), next and pos
 * (n each) ints */
static void flip_model_of(const amoe_vctx *c, const double *pi, double *dsc, int *isc, flip_model *f) {
  const amoe_block *b = c->b;
  const int nn = c->nn, n = b->n;
  const double k2 = c->kappa * sqrt(2.0);
  f->nn = nn;
  f->a_min = c->kappa > 0 ? c->margin_min / k2 : INFINITY;
  f->pi = pi;
  f->w_min = dsc, f->w = dsc + nn, f->a = dsc + nn + n;
  f->first = isc, f->next = isc + nn;
  int *pos = isc + nn + n;
  for (int t = 0; t < n; t++) pos[t] = -1;
  for (int i = 0; i < nn; i++) {
    pos[c->nodes[i]] = i;
    f->w_min[i] = 0; /* Σ q over its children, first */
    f->first[i] = -1;
  }
  for (int t = 1; t < n; t++) {
    const int i = b->parent[t] >= 0 ? pos[b->parent[t]] : -1;
    if (i < 0) continue;
    const double q = exp((double)b->logp[t]);
    f->w_min[i] += q;
    f->w[t] = q;
    const double m = q >= 1 ? INFINITY : log(q / (1 - q));
    if (m > c->margin_min) {
      f->a[t] = c->kappa > 0 ? m / k2 : INFINITY;
      f->next[t] = f->first[i];
      f->first[i] = t;
    }
  }
  for (int i = 0; i < nn; i++) {
    const double norm = f->w_min[i] > 1 ? f->w_min[i] : 1;
    double rest = 1;
    for (int t = f->first[i]; t >= 0; t = f->next[t]) {
      f->w[t] /= norm;
      rest -= f->w[t];
    }
    f->w_min[i] = rest > 0 ? rest : 0;
  }
}

/* erfc of n values: the architecture's vector path where it has one
 * (within 4 ulp of libm's; fast.h), else libm's, one at a time. */
static void erfc_of(const double *x, double *y, int n) {
  if (amoe_fast.erfc_n) amoe_fast.erfc_n(x, y, n);
  else
    for (int i = 0; i < n; i++) y[i] = erfc(x[i]);
}

/* π_i · F_i(√s2[j]) into out[j]: node i's expected flips at n
 * perturbations s² at once, term by term (its rest off the tree, then each
 * child, in list order), each term's n erfc in one call. Every prediction
 * of the verifier comes from here, so the same perturbation gives the same
 * damage wherever it is asked for. */
static void node_damages(const flip_model *f, int i, const double *s2, int n, double *out) {
  if (!(f->pi[i] > 0)) { /* (a node the block cannot reach flips nothing) */
    for (int j = 0; j < n; j++) out[j] = 0;
    return;
  }
  double x[AMOE_MAX_TOPK], arg[AMOE_MAX_TOPK], e[AMOE_MAX_TOPK];
  for (int j0 = 0; j0 < n; j0 += AMOE_MAX_TOPK) {
    const int m = n - j0 < AMOE_MAX_TOPK ? n - j0 : AMOE_MAX_TOPK;
    for (int j = 0; j < m; j++) {
      x[j] = s2[j0 + j] > 0 ? 1 / sqrt(s2[j0 + j]) : 0;
      out[j0 + j] = 0;
    }
    if (f->w_min[i] > 0) {
      for (int j = 0; j < m; j++) arg[j] = f->a_min * x[j];
      erfc_of(arg, e, m);
      for (int j = 0; j < m; j++) out[j0 + j] = f->w_min[i] * e[j];
    }
    for (int t = f->first[i]; t >= 0; t = f->next[t]) {
      for (int j = 0; j < m; j++) arg[j] = f->a[t] * x[j];
      erfc_of(arg, e, m);
      for (int j = 0; j < m; j++) out[j0 + j] += f->w[t] * e[j];
    }
    for (int j = 0; j < m; j++) out[j0 + j] = s2[j0 + j] > 0 ? f->pi[i] * out[j0 + j] : 0;
  }
}

/* π_i · F_i(√s2): node i's expected flips at perturbation s² = s2. */
static double node_damage(const flip_model *f, int i, double s2) {
  double d;
  node_damages(f, i, &s2, 1, &d);
  return d;
}

/* Node i's share of its top-k weight outside S. */
static double displaced_share(const amoe_vctx *c, int i, const uint8_t *S) {
  const uint16_t *id = amoe_block_ids(c->b, c->layer, c->nodes[i]);
  const float *r = c->prob + (size_t)c->nodes[i] * c->k;
  double mass = 0, out = 0;
  for (int j = 0; j < c->k; j++) {
    mass += r[j];
    out += S[id[j]] ? 0 : r[j];
  }
  return mass > 0 ? out / mass : 0;
}

double amoe_marginal_expected_deviation(const amoe_vctx *c, const double *pi, const uint8_t *S, double *scratch,
                                        int *iscratch) {
  flip_model f;
  flip_model_of(c, pi, scratch, iscratch, &f);
  const double *before = c->deviation ? c->deviation + 2 : NULL;
  double d = 0;
  for (int i = 0; i < c->nn; i++) {
    const double rho = displaced_share(c, i, S);
    d += node_damage(&f, i, (before ? before[i] : 0) + rho * rho);
  }
  return d;
}

/* The predicted time of a layer that executes X (counts: natural tokens
 * per expert), by the cost function; 0 without one. An expert the pass's
 * other requests execute (covered) costs this request nothing. */
static double layer_time(const amoe_vctx *c, const uint8_t *X, const int *count, uint8_t *own) {
  const amoe_cost_pass_ctx *p = c->cost;
  if (!p) return 0;
  amoe_layer_counts lc = {0, 0, 1, 0};
  if (c->covered) {
    for (int e = 0; e < c->experts; e++) own[e] = X[e] && !c->covered[e];
    X = own;
  }
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
  /* scratch (doubles): key (E), U and S_A (E bytes each), then per
   * verified node π, ρ, its damage so far, 1 / its top-k mass, then the
   * flip model's (nn + 2n), then per (node i, its j-th expert) at i·k + j
   * what dropping that expert alone adds (nn·k), then per entry of one candidate the damage its node
   * would reach (nn); iscratch: the visit order, token counts (E each), the
   * inverted index (E + 1 offsets, nn·k entries), then the flip model's
   * (nn + 2n) */
  double *key = c->scratch;
  uint8_t *U = (uint8_t *)(key + E), *SA = U + E;
  double *pi = key + E + (2 * E + 7) / 8, *rho = pi + nn, *dmg = rho + nn, *inv_mass = dmg + nn;
  int *order = c->iscratch, *count = order + E, *off = count + E, *inv = off + E + 1;
  amoe_verifier_acceptmoe(c, S);
  memcpy(SA, S, (size_t)E);
  amoe_marginal_reach(c, by_scores, pi);
  double *alone = inv_mass + 2 * nn + 2 * c->b->n, *reached = alone + nn * k;
  flip_model f;
  flip_model_of(c, pi, inv_mass + nn, inv + nn * k, &f);
  /* the block's layers so far (step 4): σ² per node, marginal's and S_A's */
  double *run = c->deviation, *sm = run ? run + 2 : NULL, *sa = run ? run + 2 + nn : NULL;
  memset(U, 0, (size_t)E);
  memset(count, 0, (size_t)E * sizeof *count);
  double predicted_a = 0, spent = 0;
  for (int i = 0; i < nn; i++) {
    const uint16_t *id = amoe_block_ids(c->b, c->layer, c->nodes[i]);
    const float *r = c->prob + (size_t)c->nodes[i] * k;
    double mass = 0;
    for (int j = 0; j < k; j++) {
      mass += r[j];
      U[id[j]] = 1;
      count[id[j]] += 1;
    }
    inv_mass[i] = mass > 0 ? 1 / mass : 0;
    const double ra = displaced_share(c, i, SA);
    double s2[2] = {(sa ? sa[i] : 0) + ra * ra, sm ? sm[i] : 0}, got[2];
    node_damages(&f, i, s2, 2, got);
    predicted_a += got[0];
    rho[i] = 0;
    dmg[i] = got[1];
    spent += dmg[i];
  }
  const double budget = predicted_a * c->row->vparam[SHARE];
  int size = 0;
  for (int e = 0; e < E; e++) {
    S[e] = U[e] | SA[e];
    size += S[e];
  }
  if (budget > spent) {
    /* who routes to e: entries i·k + j, grouped by expert */
    off[0] = 0;
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + count[e];
    for (int e = 0; e < E; e++) order[e] = off[e]; /* (fill cursors) */
    for (int i = 0; i < nn; i++) {
      const uint16_t *id = amoe_block_ids(c->b, c->layer, c->nodes[i]);
      for (int j = 0; j < k; j++) inv[order[id[j]]++] = i * k + j;
    }
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
    /* what each entry (node i, its j-th expert) adds dropped alone, a
     * node's k at once (every entry's expert is in S: U is) */
    for (int i = 0; i < nn; i++) {
      double s2[AMOE_MAX_TOPK], got[AMOE_MAX_TOPK];
      for (int j = 0; j < k; j++) {
        const double r = c->prob[(size_t)c->nodes[i] * k + j] * inv_mass[i];
        s2[j] = (sm ? sm[i] : 0) + r * r;
      }
      node_damages(&f, i, s2, k, got);
      for (int j = 0; j < k; j++) alone[i * k + j] = got[j] - dmg[i];
    }
    int m = 0;
    for (int e = 0; e < E; e++) {
      if (!S[e]) continue;
      double ce = 1; /* no cost function (a bare test context): by damage alone */
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
      double delta = 0; /* dropping e alone */
      for (int x = off[e]; x < off[e + 1]; x++) delta += alone[inv[x]];
      key[e] = delta / ce;
      order[m++] = e;
    }
    amoe_sort(order, m, sizeof *order, cheaper_damage, key);
    for (int v = 0; v < m && size > k; v++) {
      const int e = order[v];
      if (c->covered && c->covered[e]) continue; /* (a covered expert saves nothing) */
      /* What dropping e adds, node by node (one a node nothing displaced
       * yet at this layer adds what it adds alone). Every term is >= 0 (F
       * rises with s), so the sum can only grow: stop once it is over. */
      double add = 0;
      int x = off[e];
      for (; x < off[e + 1] && !(spent + add > budget); x++) {
        const int i = inv[x] / k, j = inv[x] % k;
        const double r = rho[i] + c->prob[(size_t)c->nodes[i] * k + j] * inv_mass[i];
        reached[x - off[e]] = rho[i] > 0 ? node_damage(&f, i, (sm ? sm[i] : 0) + r * r) : dmg[i] + alone[inv[x]];
        add += rho[i] > 0 ? reached[x - off[e]] - dmg[i] : alone[inv[x]];
      }
      if (spent + add > budget) continue;
      for (x = off[e]; x < off[e + 1]; x++) {
        const int i = inv[x] / k, j = inv[x] % k;
        dmg[i] = reached[x - off[e]];
        rho[i] += c->prob[(size_t)c->nodes[i] * k + j] * inv_mass[i];
      }
      spent += add;
      S[e] = 0;
      size--;
    }
  }
  uint8_t *own = (uint8_t *)key; /* (free again: E bytes for layer_time) */
  int to_sa = c->row->vparam[SHARE] >= 1 && layer_time(c, S, count, own) > layer_time(c, SA, count, own);
  if (to_sa && sm) { /* S_A on marginal's earlier layers must fit the budget too */
    double d = 0;
    for (int i = 0; i < nn; i++) {
      const double ra = displaced_share(c, i, SA);
      d += node_damage(&f, i, sm[i] + ra * ra);
    }
    to_sa = d <= budget;
  }
  if (to_sa) memcpy(S, SA, (size_t)E);
  if (!run) return;
  spent = 0;
  for (int i = 0; i < nn; i++) {
    const double ra = displaced_share(c, i, SA), rm = to_sa ? ra : rho[i];
    sm[i] += rm * rm;
    sa[i] += ra * ra;
    spent += to_sa ? node_damage(&f, i, sm[i]) : dmg[i];
  }
  run[0] = spent;
  run[1] = predicted_a;
}

void amoe_verifier_marginal(const amoe_vctx *c, uint8_t *S) { marginal(c, S, 1); }
void amoe_verifier_marginal_depth(const amoe_vctx *c, uint8_t *S) { marginal(c, S, 0); }
