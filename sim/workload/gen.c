#include "gen.h"
#include "clones.h"
#include "sort.h"
#include "fast.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gen_rng.h"

float amoe_gen_normal(uint16_t u) { return gen_normal(u); }

/* Fills out[0..n rounded up to 16) with standard normals: per step, the
 * pieces in its eight 32-bit lanes' low halves, then in their high halves
 * (the order the vector version takes them in). */
static void normals16(gen_rng4 *r, float *out, int n) {
  if (amoe_fast.normals16) {
    amoe_fast.normals16(r, out, n);
    return;
  }
  amoe_gen_normals16_generic(r, out, n);
}

void amoe_gen_normals16_generic(gen_rng4 *r, float *out, int n) {
  for (int i = 0; i < n; i += 16) {
    gen_v4u x;
    rng4_next(r, &x);
    uint32_t w[8];
    memcpy(w, &x, sizeof w);
    for (int j = 0; j < 8; j++) {
      out[i + j] = gen_normal(w[j] & 0xffff);
      out[i + 8 + j] = gen_normal(w[j] >> 16);
    }
  }
}

typedef struct {
  int parent;
  float logp, score;
} pool_node;

/* The model's routing structure, read only once made: shared by the
 * generators of one workload's slots (amoe_gen_open_sibling), so that one
 * copy stays in the cache however many requests run. */
typedef struct {
  int refs;
  float *w;    /* [layer][DIM][expert] embeddings / temperature */
  float *bias; /* [layer][expert] popularity biases · skew */
} gen_tables;

struct amoe_gen {
  amoe_gen_params p;
  double h; /* acceptance scale */
  gen_tables *tab;
  const float *w, *bias; /* tab's */
  float *rho, *crho; /* [layer] locality ρ_l and sqrt(1 - ρ_l²) */
  float *req_scale;  /* [layer] request_bias of the layer */
  float *score_scale; /* [layer] the score shape's factor, or NULL (1 everywhere) */
  /* per request */
  amoe_rng rng;
  uint32_t request, step;
  int committed;
  uint32_t replay_start;
  float *s_last; /* [layer][DIM] state of the last committed token */
  float *req_bias; /* [layer][expert] request_bias · c[r], or NULL when off */
  float *drift;    /* [layer][expert] the drift's fresh normals (drift_tokens > 0) */
  /* scratch */
  int pool_cap;
  pool_node *pool;
  int *order, *kept, *remap, *frontier, *next_frontier;
  int *child_start, *child_list, *subdepth;
  uint64_t *sort_keys; /* 2 · pool_cap */
  uint8_t *verified;
  float *state; /* [layer][node][DIM] */
  float *tok;   /* [node][DIM] token part of the current layer */
  /* the tree mechanism (tree_sibling / tree_repeat set), per block: */
  float *tree_a, *tree_q; /* [layer] sibling share and repeat probability, or NULL: off */
  float *sib_xi, *sib_eps; /* [parent][DIM] and [parent][E16]: the normals siblings share */
  float *eps_all;          /* [node][E16]: every node's noise of the layer */
  float *repeat_u;         /* [node] the uniform that decides the layers it repeats its twin at */
  int *twin;               /* [node] the first node with its depth and sibling rank, or -1 */
  int *rank;     /* [node] rank among its siblings (draft probability desc); then [node] depth */
  float *xi;    /* [node][DIM] its fresh normals */
  float *zfull, *eps;
  /* route_hold > 1: the routes of the request's last routed block, as
   * [layer][node][m] of its held_n nodes, and its parents */
  uint16_t *held_ids;
  amoe_f16 *held_z;
  int *held_parent;
  int held_n;
};

/* Sorts pool indices by (score desc, index asc): each as one 64-bit key
 * (the score's bits made to order as unsigned, inverted, above the index),
 * merge-sorted with a branch-free merge step (a comparator called through
 * qsort cost ~3% of a block). tmp: room for n keys twice. */
static void sort_by_score(int *idx, int n, const pool_node *pool, uint64_t *tmp) {
  uint64_t *a = tmp, *b = tmp + n;
  for (int i = 0; i < n; i++) {
    const float sc = pool[idx[i]].score + 0.0f; /* -0 -> +0: equal scores tie, as floats do */
    uint32_t u;
    memcpy(&u, &sc, 4);
    u ^= (u >> 31) ? 0xffffffffu : 0x80000000u; /* ascending in the score */
    a[i] = (uint64_t)~u << 32 | (uint32_t)idx[i];
  }
  for (int w = 1; w < n; w *= 2) {
    for (int lo = 0; lo < n; lo += 2 * w) {
      const int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        const int c = a[j] < a[i];
        b[k++] = c ? a[j] : a[i];
        j += c;
        i += !c;
      }
      while (i < mid) b[k++] = a[i++];
      while (j < hi) b[k++] = a[j++];
    }
    uint64_t *t = a;
    a = b;
    b = t;
  }
  for (int i = 0; i < n; i++) idx[i] = (int)(uint32_t)a[i];
}

static int greater_double(const void *a, const void *b, const void *ctx) {
  (void)ctx;
  return *(const double *)a > *(const double *)b;
}

/* Appends the K draft children of node `par` to the pool. */
static void expand(amoe_gen *g, amoe_rng *r, int par, int *np) {
  int K = g->p.branch;
  double s = 0.5 + 2.5 * amoe_rng_unif(r); /* how peaked the draft is here */
  double lg[AMOE_MAX_TOPK + 1], mx = -1e300, sum = 0;
  for (int i = 0; i < K; i++) {
    lg[i] = -s * i + 0.3 * amoe_rng_normal(r);
    if (lg[i] > mx) mx = lg[i];
  }
  lg[K] = log(0.05 + 2.0 * amoe_rng_unif(r)); /* the rest of the vocabulary */
  if (lg[K] > mx) mx = lg[K];
  for (int i = 0; i <= K; i++) sum += exp(lg[i] - mx);
  for (int i = 0; i < K; i++) lg[i] = lg[i] - mx - log(sum);
  amoe_sort(lg, K, sizeof *lg, greater_double, NULL); /* the draft's top-1 first */
  for (int i = 0; i < K; i++) {
    pool_node *c = &g->pool[(*np)++];
    c->parent = par;
    c->logp = (float)lg[i];
    c->score = g->pool[par].score + c->logp;
  }
}

/* Builds the candidate tree into the pool; kept[0..cand) are pool indices in
 * creation order (root first). Returns the candidate count. */
static int build_tree(amoe_gen *g, amoe_rng *r) {
  int K = g->p.branch, np = 1, nf = 0;
  g->pool[0] = (pool_node){-1, 0.0f, 0.0f};
  expand(g, r, 0, &np);
  for (int i = 0; i < K; i++) g->frontier[nf++] = 1 + i;
  for (int d = 2; d <= g->p.depth; d++) {
    int first = np;
    for (int i = 0; i < nf; i++) expand(g, r, g->frontier[i], &np);
    int nn = np - first;
    for (int i = 0; i < nn; i++) g->next_frontier[i] = first + i;
    sort_by_score(g->next_frontier, nn, g->pool, g->sort_keys);
    nf = nn < K ? nn : K;
    memcpy(g->frontier, g->next_frontier, (size_t)nf * sizeof(int));
  }
  for (int i = 0; i < np - 1; i++) g->order[i] = 1 + i;
  sort_by_score(g->order, np - 1, g->pool, g->sort_keys);
  int cand = g->p.candidates < np ? g->p.candidates : np;
  memset(g->remap, 0xff, (size_t)np * sizeof(int));
  g->remap[0] = 0;
  for (int i = 0; i < cand - 1; i++) g->remap[g->order[i]] = 1;
  int n = 0;
  for (int i = 0; i < np; i++)
    if (g->remap[i] >= 0) {
      g->remap[i] = n;
      g->kept[n++] = i;
    }
  return n;
}

/* Children lists of the kept tree, and which nodes EAGLE would verify. */
static void tree_index(amoe_gen *g, int n) {
  memset(g->child_start, 0, (size_t)(n + 1) * sizeof(int));
  for (int t = 1; t < n; t++) g->child_start[g->remap[g->pool[g->kept[t]].parent] + 1]++;
  for (int t = 0; t < n; t++) g->child_start[t + 1] += g->child_start[t];
  int *fill = g->next_frontier;
  memcpy(fill, g->child_start, (size_t)n * sizeof(int));
  for (int t = 1; t < n; t++) g->child_list[fill[g->remap[g->pool[g->kept[t]].parent]]++] = t;
  /* verified under eagle: root + best nodes-1 by score among the kept */
  for (int i = 0; i < n - 1; i++) g->order[i] = g->kept[i + 1];
  sort_by_score(g->order, n - 1, g->pool, g->sort_keys);
  memset(g->verified, 0, (size_t)n);
  g->verified[0] = 1;
  for (int i = 0; i < n - 1 && i < g->p.nodes - 1; i++) g->verified[g->remap[g->order[i]]] = 1;
  /* depth of the deepest verified descendant chain below each node */
  for (int t = n - 1; t >= 0; t--) {
    int best = 0;
    for (int j = g->child_start[t]; j < g->child_start[t + 1]; j++) {
      int c = g->child_list[j];
      if (g->verified[c] && g->subdepth[c] + 1 > best) best = g->subdepth[c] + 1;
    }
    g->subdepth[t] = best;
  }
}

/* Match probabilities of t's children at scale h, written to pi[]. */
static int child_probs(const amoe_gen *g, int t, double h, double *pi) {
  int cnt = 0;
  double sum = 0;
  for (int j = g->child_start[t]; j < g->child_start[t + 1]; j++) {
    pi[cnt] = h * exp(g->pool[g->kept[g->child_list[j]]].logp);
    sum += pi[cnt++];
  }
  if (sum > 1)
    for (int i = 0; i < cnt; i++) pi[i] /= sum;
  return cnt;
}

#define CALIB_TREES 400

/* The calibration trees, built once: per node its draft probability, whether
 * EAGLE verifies it, and its children (local indices). */
typedef struct {
  int *start, *list; /* per tree: n + 1 starts, then children */
  double *p;
  uint8_t *ver;
  int *tree_n, *tree_off, *tree_coff;
} calib_set;

/* Mean over the set of E[τ] at scale h: E[τ](t) = 1 + Σ over verified
 * children c of π_c · E[τ](c), bottom-up. */
static double calib_mean(const calib_set *c, double *expect, double h) {
  double acc = 0, pi[AMOE_MAX_NODES];
  for (int i = 0; i < CALIB_TREES; i++) {
    int n = c->tree_n[i];
    const int *st = c->start + c->tree_off[i] + i, *li = c->list + c->tree_coff[i];
    const double *p = c->p + c->tree_off[i];
    const uint8_t *ver = c->ver + c->tree_off[i];
    for (int t = n - 1; t >= 0; t--) {
      int cnt = 0;
      double sum = 0;
      for (int j = st[t]; j < st[t + 1]; j++) sum += pi[cnt++] = h * p[li[j]];
      if (sum > 1)
        for (int q = 0; q < cnt; q++) pi[q] /= sum;
      double v = 1;
      for (int q = 0; q < cnt; q++) {
        int ch = li[st[t] + q];
        if (ver[ch]) v += pi[q] * expect[ch];
      }
      expect[t] = v;
    }
    acc += expect[0];
  }
  return acc / CALIB_TREES;
}

static amoe_status calibrate(amoe_gen *g, amoe_err *e) {
  /* Mean of E[τ] over a fixed set of trees is monotone in h: bisect. */
  calib_set c;
  size_t cap = (size_t)CALIB_TREES * g->p.candidates;
  c.start = malloc((cap + CALIB_TREES) * sizeof(int));
  c.list = malloc(cap * sizeof(int));
  c.p = malloc(cap * sizeof(double));
  c.ver = malloc(cap);
  c.tree_n = malloc(CALIB_TREES * sizeof(int));
  c.tree_off = malloc(CALIB_TREES * sizeof(int));
  c.tree_coff = malloc(CALIB_TREES * sizeof(int));
  double *expect = malloc((size_t)g->p.candidates * sizeof(double));
  amoe_status st = AMOE_OK;
  if (!c.start || !c.list || !c.p || !c.ver || !c.tree_n || !c.tree_off || !c.tree_coff || !expect)
    st = amoe_fail(e, AMOE_ENOMEM, "out of memory calibrating acceptance");
  amoe_rng r;
  amoe_rng_seed(&r, g->p.seed, 0xca11bULL, 0);
  int off = 0, coff = 0;
  for (int i = 0; i < CALIB_TREES && st == AMOE_OK; i++) {
    int n = build_tree(g, &r);
    tree_index(g, n);
    c.tree_n[i] = n;
    c.tree_off[i] = off;
    c.tree_coff[i] = coff;
    for (int t = 0; t <= n; t++) c.start[off + i + t] = g->child_start[t];
    for (int j = 0; j < g->child_start[n]; j++) c.list[coff + j] = g->child_list[j];
    for (int t = 0; t < n; t++) {
      c.p[off + t] = exp(g->pool[g->kept[t]].logp);
      c.ver[off + t] = g->verified[t];
    }
    off += n;
    coff += g->child_start[n];
  }
  double lo = 0, hi = 1, target = g->p.tau, mean_hi = 0;
  if (st == AMOE_OK) {
    for (;;) { /* grow hi until the target is bracketed */
      mean_hi = calib_mean(&c, expect, hi);
      if (mean_hi >= target || hi > 1e6) break;
      lo = hi;
      hi *= 2;
    }
    if (mean_hi < target - 1e-9)
      st = amoe_fail(e, AMOE_EINVAL, "workload.acceptance.tau %.3g is more than these trees allow (at most %.3g)",
                     target, mean_hi);
  }
  for (int it = 0; it < 40 && st == AMOE_OK; it++) {
    double mid = 0.5 * (lo + hi);
    if (calib_mean(&c, expect, mid) < target)
      lo = mid;
    else
      hi = mid;
  }
  g->h = 0.5 * (lo + hi);
  free(c.start);
  free(c.list);
  free(c.p);
  free(c.ver);
  free(c.tree_n);
  free(c.tree_off);
  free(c.tree_coff);
  free(expect);
  return st;
}

#define TREE_ON(p) ((p)->tree_sibling_layers != NULL || (p)->tree_repeat_layers != NULL)

/* Every buffer of a generator once: (member, element type, count, whether
 * it is there), counts in the pool's nodes P, the candidates c, L layers
 * and E experts (ints: the limits keep them far from overflow); + 16 where
 * normals16 fills whole steps. amoe_gen_open allocates them (zeroed) and
 * amoe_gen_close frees them, from this list. */
#define GEN_BUFFERS(BUF) \
  BUF(pool, pool_node, P, 1) \
  BUF(order, int, P, 1) \
  BUF(kept, int, P, 1) \
  BUF(remap, int, P, 1) \
  BUF(frontier, int, P, 1) \
  BUF(next_frontier, int, P + 1, 1) \
  BUF(child_start, int, P + 1, 1) \
  BUF(child_list, int, P, 1) \
  BUF(subdepth, int, P, 1) \
  BUF(verified, uint8_t, P, 1) \
  BUF(sort_keys, uint64_t, 2 * P, 1) \
  BUF(rho, float, L, 1) \
  BUF(req_scale, float, L, 1) \
  BUF(crho, float, L, 1) \
  BUF(s_last, float, L * AMOE_GEN_DIM + 16, 1) \
  BUF(req_bias, float, L * E + 16, p->request_bias > 0) \
  BUF(drift, float, L * E + 16, p->request_bias > 0 && p->drift_tokens > 0) \
  BUF(state, float, c * L * AMOE_GEN_DIM, 1) \
  BUF(tok, float, c * AMOE_GEN_DIM, 1) \
  BUF(tree_a, float, L, TREE_ON(p)) \
  BUF(tree_q, float, L, TREE_ON(p)) \
  BUF(sib_xi, float, c * AMOE_GEN_DIM + 16, TREE_ON(p)) \
  BUF(sib_eps, float, c * E16, TREE_ON(p)) \
  BUF(eps_all, float, c * E16, TREE_ON(p)) \
  BUF(repeat_u, float, c, TREE_ON(p)) \
  BUF(twin, int, c + (p->depth + 2) * (p->branch + 1), TREE_ON(p)) /* twins, then the first of each key */ \
  BUF(rank, int, 2 * c, TREE_ON(p)) /* ranks, then depths */ \
  BUF(xi, float, c * AMOE_GEN_DIM + 16, 1) \
  BUF(zfull, float, E, 1) \
  BUF(eps, float, E + 16, 1) \
  BUF(held_ids, uint16_t, c * L * p->m, p->route_hold > 1) \
  BUF(held_z, amoe_f16, c * L * p->m, p->route_hold > 1) \
  BUF(held_parent, int, c, p->route_hold > 1)

/* The routing structure of p's model: the same for every seed (another
 * seed is another set of prompts on the same model). Stored
 * [layer][dim][expert] so the logit loop runs over experts, and scaled
 * once here (w by 1/T, b by skew) so that a logit is nine fused
 * multiply-adds. */
static gen_tables *tables_make(const amoe_gen_params *p) {
  const int L = p->layers, E = p->experts;
  gen_tables *t = calloc(1, sizeof *t);
  float *w = malloc((size_t)L * E * AMOE_GEN_DIM * sizeof *w), *bias = malloc((size_t)L * E * sizeof *bias);
  if (!t || !w || !bias) {
    free(t), free(w), free(bias);
    return NULL;
  }
  amoe_rng r;
  amoe_rng_seed(&r, 0x6d6f64656cULL, (uint64_t)L << 32 | (uint64_t)E, (uint64_t)p->top_k);
  const double ws = 1.0 / sqrt((double)AMOE_GEN_DIM) / p->temperature;
  for (int l = 0; l < L; l++)
    for (int x = 0; x < E; x++)
      for (int i = 0; i < AMOE_GEN_DIM; i++) w[((size_t)l * AMOE_GEN_DIM + i) * E + x] = (float)(amoe_rng_normal(&r) * ws);
  for (size_t i = 0; i < (size_t)L * E; i++)
    bias[i] = (float)(amoe_rng_normal(&r) * (p->skew_layers ? p->skew_layers[i / E] : p->skew));
  t->refs = 1;
  t->w = w;
  t->bias = bias;
  return t;
}

static void tables_drop(gen_tables *t) {
  if (!t || --t->refs > 0) return;
  free(t->w);
  free(t->bias);
  free(t);
}

amoe_status amoe_gen_open(amoe_gen **out, const amoe_gen_params *p, amoe_err *e) {
  return amoe_gen_open_sibling(out, p, NULL, e);
}

amoe_status amoe_gen_open_sibling(amoe_gen **out, const amoe_gen_params *p, amoe_gen *like, amoe_err *e) {
  *out = NULL;
  if (like && (like->p.layers != p->layers || like->p.experts != p->experts || like->p.top_k != p->top_k))
    return amoe_fail(e, AMOE_EINVAL, "a sibling generator needs its model's shape (%dx%d top-%d, not %dx%d top-%d)",
                     like->p.layers, like->p.experts, like->p.top_k, p->layers, p->experts, p->top_k);
  if (p->branch < 1 || p->branch > AMOE_MAX_TOPK)
    return amoe_fail(e, AMOE_EINVAL, "workload.tree.top_k must be in 1..%d", AMOE_MAX_TOPK);
  if (p->depth < 1 || p->depth > 16)
    return amoe_fail(e, AMOE_EINVAL, "workload.tree.depth must be in 1..16");
  if (p->nodes < 1 || p->candidates < p->nodes || p->candidates > AMOE_MAX_NODES)
    return amoe_fail(e, AMOE_EINVAL, "workload.tree: need 1 <= nodes <= candidates <= %d",
                     AMOE_MAX_NODES);
  if (p->chain_accept_n > 0 && (p->branch != 1 || p->chain_accept_n != p->depth))
    return amoe_fail(e, AMOE_EINVAL, "workload.acceptance.al sets a chain's acceptance: workload.tree.top_k 1 (not %d)",
                     p->branch);
  if (!p->replay && p->tau < 1)
    return amoe_fail(e, AMOE_EINVAL, "workload.acceptance.tau must be >= 1");
  amoe_gen *g = calloc(1, sizeof *g);
  if (!g) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  g->p = *p;
  int K = p->branch;
  g->pool_cap = 1 + K + (p->depth - 1) * K * K;
  const int L = p->layers, E = p->experts, c = p->candidates, P = g->pool_cap, E16 = (E + 15) / 16 * 16;
  int ok = 1;
#define GEN_ALLOC(f, T, cnt, when) \
  if (when) ok &= (g->f = calloc((size_t)(cnt), sizeof(T))) != NULL;
  GEN_BUFFERS(GEN_ALLOC)
#undef GEN_ALLOC
  if (like) like->tab->refs++;
  g->tab = like ? like->tab : tables_make(p);
  if (!ok || !g->tab) {
    amoe_gen_close(g);
    return amoe_fail(e, AMOE_ENOMEM, "out of memory for the generator");
  }
  g->w = g->tab->w;
  g->bias = g->tab->bias;
  if (p->score_scale_layers) {
    g->score_scale = malloc((size_t)L * sizeof *g->score_scale);
    if (!g->score_scale) {
      amoe_gen_close(g);
      return amoe_fail(e, AMOE_ENOMEM, "out of memory for the generator");
    }
    for (int l = 0; l < L; l++) g->score_scale[l] = (float)p->score_scale_layers[l];
  }
  for (int l = 0; l < L; l++) {
    const double rl = p->locality_layers ? p->locality_layers[l] : p->locality;
    g->rho[l] = (float)rl;
    g->crho[l] = (float)sqrt(1 - rl * rl);
  }
  for (int l = 0; l < L; l++)
    g->req_scale[l] = (float)(p->request_bias_layers ? p->request_bias_layers[l] : p->request_bias);
  if (TREE_ON(p))
    for (int l = 0; l < L; l++) {
      g->tree_a[l] = (float)(p->tree_sibling_layers ? p->tree_sibling_layers[l] : 0);
      g->tree_q[l] = (float)(p->tree_repeat_layers ? p->tree_repeat_layers[l] : 0);
    }
  /* (copied: the caller's arrays need not outlive the generator) */
  g->p.locality_layers = g->p.request_bias_layers = g->p.skew_layers = g->p.score_scale_layers = NULL;
  g->p.tree_sibling_layers = g->p.tree_repeat_layers = NULL;
  if (p->chain_accept_n > 0) {
    g->h = 1; /* (unused: the chain's positions accept as given) */
  } else if (!p->replay && p->accept_scale > 0) {
    g->h = p->accept_scale;
  } else if (!p->replay) {
    amoe_status st = calibrate(g, e);
    if (st != AMOE_OK) {
      amoe_gen_close(g);
      return st;
    }
  }
  *out = g;
  return AMOE_OK;
}

void amoe_gen_close(amoe_gen *g) {
  if (!g) return;
#define GEN_FREE(f, T, cnt, when) free(g->f);
  GEN_BUFFERS(GEN_FREE)
#undef GEN_FREE
  tables_drop(g->tab);
  free(g->score_scale);
  free(g);
}

double amoe_gen_accept_scale(const amoe_gen *g) { return g->h; }

/* Reach of positions 1..k under scale x: each step of the curve times x,
 * at most the reach before it. Their sum grows with x. */
static double chain_reach(const double *c, int k, double x, double *r) {
  double prev = 1, sum = 0;
  for (int i = 0; i < k; i++) {
    r[i] = c[i] * x < prev ? c[i] * x : prev;
    prev = r[i];
    sum += r[i];
  }
  return sum;
}

amoe_status amoe_gen_chain_accept(const double *al, int n, int k, double *a, amoe_err *e) {
  if (k < 1 || k > AMOE_GEN_MAX_CHAIN)
    return amoe_fail(e, AMOE_EINVAL, "workload.tree.depth %d: a chain of 1..%d draft tokens", k, AMOE_GEN_MAX_CHAIN);
  if (n != 1 && n < k)
    return amoe_fail(e, AMOE_EINVAL, "workload.acceptance.al gives AL at k = 1..%d, but the chain drafts %d tokens", n, k);
  const double target = (n == 1 ? al[0] : al[k - 1]) - 1;
  if (!(target >= 0) || target > k)
    return amoe_fail(e, AMOE_EINVAL, "workload.acceptance.al %g at k = %d: must be in 1..%d", target + 1, k, k + 1);
  double c[AMOE_GEN_MAX_CHAIN], r[AMOE_GEN_MAX_CHAIN];
  for (int i = 0; i < k; i++) { /* one pinned AL: every position alike; a curve: its steps */
    const double step = n == 1 ? 1 : al[i] - (i ? al[i - 1] : 1);
    c[i] = step > 0 ? step : 0;
  }
  double lo = 0, hi = 1;
  while (chain_reach(c, k, hi, r) < target && hi < 1e12) hi *= 2;
  for (int it = 0; it < 200; it++) { /* (n = 1: the constant a with a + ... + a^k = target) */
    const double mid = 0.5 * (lo + hi);
    if (n == 1) {
      double sum = 0, pw = 1;
      for (int i = 0; i < k; i++) sum += pw *= mid;
      if (sum < target) lo = mid;
      else hi = mid;
    } else if (chain_reach(c, k, mid, r) < target) lo = mid;
    else hi = mid;
  }
  if (n == 1) {
    for (int i = 0; i < k; i++) a[i] = 0.5 * (lo + hi);
    return AMOE_OK;
  }
  chain_reach(c, k, 0.5 * (lo + hi), r);
  for (int i = 0; i < k; i++) {
    const double before = i ? r[i - 1] : 1;
    a[i] = before > 0 ? r[i] / before : 0;
  }
  return AMOE_OK;
}

double amoe_gen_default_skew(int experts) {
  if (experts <= 8) return AMOE_FIT_SKEW_FEW;
  if (experts >= 64) return AMOE_FIT_SKEW_MANY;
  double f = (log2((double)experts) - 3.0) / 3.0; /* 0 at 8 experts, 1 at 64 */
  return AMOE_FIT_SKEW_FEW + f * (AMOE_FIT_SKEW_MANY - AMOE_FIT_SKEW_FEW);
}

static void request_bias_start(const amoe_gen *g, uint32_t req, float *out);
static void node_logits(gen_rng4 *r, float *eps, const float *w, const float *s, const float *bias,
                        const float *req_bias, int E, float sig, float *zf);

void amoe_gen_set_tokens(amoe_gen *g, int tokens) { g->p.tokens_per_request = tokens; }

void amoe_gen_begin_request(amoe_gen *g, uint32_t req) {
  amoe_rng_seed(&g->rng, g->p.seed, 0x72657175ULL, req);
  g->request = req;
  g->step = 0;
  g->committed = 0;
  g->held_n = 0;
  g->replay_start = g->p.replay ? (uint32_t)(amoe_rng_hash3(g->p.seed, req, 7) % (uint64_t)g->p.replay_n) : 0;
  gen_rng4 r4; /* the prompt's last token */
  rng4_seed(&r4, g->p.seed ^ 0x70726f6d7074ULL, req, 0);
  normals16(&r4, g->s_last, g->p.layers * AMOE_GEN_DIM);
  if (g->req_bias) request_bias_start(g, req, g->req_bias);
}

/* Request r's bias as it starts, [layer][expert] (room for L·E + 16). */
static void request_bias_start(const amoe_gen *g, uint32_t req, float *out) {
  gen_rng4 r4; /* its own stream: results without it stay as they were */
  rng4_seed(&r4, g->p.seed, 0x6269617351ULL, req);
  int n = g->p.layers * g->p.experts;
  normals16(&r4, out, n);
  for (int i = 0; i < n; i++) out[i] *= g->req_scale[i / g->p.experts];
}

int amoe_gen_top_k_generic(const float *z, int E, int k, int *top) {
  float v[AMOE_MAX_TOPK];
  int n = 0;
  for (int x = 0; x < E; x++) {
    const float zx = z[x];
    if (!(zx > -INFINITY) || (n == k && !(zx > v[k - 1]))) continue;
    int i = n < k ? n++ : k - 1; /* (full: the last one leaves) */
    for (; i > 0 && zx > v[i - 1]; i--) { /* after any equal one: ties keep the lower id first */
      v[i] = v[i - 1];
      top[i] = top[i - 1];
    }
    v[i] = zx;
    top[i] = x;
  }
  return n;
}

static int top_k_of(const float *z, int E, int k, int *top) {
  if (amoe_fast.top_k && E % 8 == 0) return amoe_fast.top_k(z, E, k, top);
  return amoe_gen_top_k_generic(z, E, k, top);
}

amoe_status amoe_gen_prefill(amoe_gen *g, uint32_t req, int tokens, int chunk, uint16_t *counts, amoe_err *e) {
  const int L = g->p.layers, E = g->p.experts, D = AMOE_GEN_DIM, k = g->p.top_k;
  if (chunk <= 0 || chunk > tokens) chunk = tokens > 0 ? tokens : 1;
  memset(counts, 0, (size_t)((tokens + chunk - 1) / chunk) * L * E * sizeof *counts);
  if (tokens <= 0) return AMOE_OK;
  /* the routed tokens: every token, or in a chunk longer than
   * prefill_sample tokens that many spread evenly over it, each counting
   * for the tokens up to the next (their weights add to the chunk's) */
  const int S = g->p.prefill_sample;
  int m = 0;
  for (int c0 = 0; c0 < tokens; c0 += chunk) {
    const int n = tokens - c0 < chunk ? tokens - c0 : chunk;
    m += S > 0 && n > S ? S : n;
  }
  float *rb = g->req_bias ? malloc(((size_t)L * E + 16) * sizeof(float)) : NULL;
  float *tok = malloc(((size_t)m * D + 16) * sizeof(float)), *xi = malloc(((size_t)m * D + 16) * sizeof(float));
  float *eps = malloc(((size_t)E + 16) * sizeof(float)), *zf = malloc((size_t)E * sizeof(float));
  int *wt = malloc((size_t)m * 2 * sizeof *wt), *ck = wt ? wt + m : NULL;
  if ((g->req_bias && !rb) || !tok || !xi || !eps || !zf || !wt) {
    free(rb), free(tok), free(xi), free(eps), free(zf), free(wt);
    return amoe_fail(e, AMOE_ENOMEM, "out of memory for a prefill");
  }
  for (int c0 = 0, j = 0; c0 < tokens; c0 += chunk) {
    const int n = tokens - c0 < chunk ? tokens - c0 : chunk, mc = S > 0 && n > S ? S : n;
    for (int i = 0; i < mc; i++, j++) {
      wt[j] = (int)((int64_t)(i + 1) * n / mc - (int64_t)i * n / mc);
      ck[j] = c0 / chunk;
    }
  }
  if (rb) request_bias_start(g, req, rb);
  const float lc = (float)g->p.layer_correlation, clc = (float)sqrt(1 - lc * (double)lc);
  const float sig = (float)(g->p.noise / g->p.temperature);
  gen_rng4 r4;
  rng4_seed(&r4, g->p.seed ^ 0x707265666c6cULL, req, 0);
  for (int l = 0; l < L; l++) {
    const float *wl = g->w + (size_t)l * E * D, *bl = g->bias + (size_t)l * E;
    const float rho = g->rho[l], crho = g->crho[l];
    normals16(&r4, xi, m * D);
    float prev[AMOE_GEN_DIM] = {0}, st[AMOE_GEN_DIM];
    for (int t = 0; t < m; t++) {
      float *tk = tok + (size_t)t * D;
      for (int i = 0; i < D; i++) {
        tk[i] = l ? lc * tk[i] + clc * xi[(size_t)t * D + i] : xi[(size_t)t * D + i];
        st[i] = t ? rho * prev[i] + crho * tk[i] : tk[i];
        prev[i] = st[i];
      }
      node_logits(&r4, eps, wl, st, bl, rb ? rb + (size_t)l * E : NULL, E, sig, zf);
      int top[AMOE_MAX_TOPK], nt = top_k_of(zf, E, k, top);
      for (int j = 0; j < nt; j++) counts[((size_t)ck[t] * L + l) * E + top[j]] += (uint16_t)wt[t];
    }
  }
  free(rb), free(tok), free(xi), free(eps), free(zf), free(wt);
  return AMOE_OK;
}

/* Draws the natural accepted path; marks accepted[]; returns its last node. */
static int draw_accepted(amoe_gen *g, int n, uint8_t *accepted) {
  memset(accepted, 0, (size_t)n);
  accepted[0] = 1;
  int t = 0;
  if (g->p.replay) {
    int want = g->p.replay[(g->replay_start + g->step) % (uint32_t)g->p.replay_n];
    if (want > g->p.depth + 1) want = g->p.depth + 1;
    for (int need = want - 1; need > 0; need--) {
      /* among verified children deep enough, draw by draft probability;
       * if none is deep enough, the deepest (lowest index on ties) */
      double tot = 0;
      int deepest = -1;
      for (int j = g->child_start[t]; j < g->child_start[t + 1]; j++) {
        int c = g->child_list[j];
        if (!g->verified[c]) continue;
        if (g->subdepth[c] + 1 >= need) tot += exp(g->pool[g->kept[c]].logp);
        if (deepest < 0 || g->subdepth[c] > g->subdepth[deepest]) deepest = c;
      }
      if (deepest < 0) break;
      int pick = deepest;
      if (tot > 0) {
        double u = amoe_rng_unif(&g->rng) * tot;
        for (int j = g->child_start[t]; j < g->child_start[t + 1]; j++) {
          int c = g->child_list[j];
          if (!g->verified[c] || g->subdepth[c] + 1 < need) continue;
          pick = c;
          u -= exp(g->pool[g->kept[c]].logp);
          if (u < 0) break;
        }
      }
      t = pick;
      accepted[t] = 1;
    }
    return t;
  }
  if (g->p.chain_accept_n > 0) { /* position d accepted with its own chance, given d − 1 was */
    for (int d = 0; d < g->p.chain_accept_n; d++) {
      int next = -1;
      for (int j = g->child_start[t]; j < g->child_start[t + 1] && next < 0; j++)
        if (g->verified[g->child_list[j]]) next = g->child_list[j];
      if (next < 0 || !(amoe_rng_unif(&g->rng) < g->p.chain_accept[d])) break;
      t = next;
      accepted[t] = 1;
    }
    return t;
  }
  double pi[AMOE_MAX_NODES];
  for (;;) {
    int cnt = child_probs(g, t, g->h, pi);
    double u = amoe_rng_unif(&g->rng);
    int next = -1;
    for (int i = 0; i < cnt; i++) {
      if (u < pi[i]) {
        next = g->child_list[g->child_start[t] + i];
        break;
      }
      u -= pi[i];
    }
    if (next < 0) return t;
    t = next;
    accepted[t] = 1;
  }
}

/* One node-layer's logits over E experts, each as
 *   z = fma(σ', ε, fma(s7, w7, ... fma(s0, w0, b)))  (+ the request's bias when on)
 * with w and b already scaled (w/T, skew·b) and σ' = σ/T: the model's
 * (<s, w> + σ·ε)/T + skew·b in nine roundings. ε is eo, or with es (the
 * tree mechanism's siblings) own·eo + shr·es, each product rounded, then
 * their sum. A fused multiply-add rounds once wherever it runs (fmaf), so
 * this portable loop and the vector paths (arch/x86/gen_x86.c) give the
 * same bits. */
static void layer_logits(const float *restrict w, const float *restrict s, const float *restrict eo,
                         const float *restrict es, float own, float shr, const float *restrict bias,
                         const float *restrict req_bias, int E, float sig, float *restrict zf) {
  for (int x = 0; x < E; x++) {
    const float ep = es ? own * eo[x] + shr * es[x] : eo[x];
    float a = bias[x];
    for (int i = 0; i < AMOE_GEN_DIM; i++) a = fmaf(s[i], w[(size_t)i * E + x], a);
    a = fmaf(sig, ep, a);
    zf[x] = req_bias ? a + req_bias[x] : a;
  }
}

/* One node-layer's logits with their noise drawn from r. */
static void node_logits(gen_rng4 *r, float *eps, const float *w, const float *s, const float *bias,
                        const float *req_bias, int E, float sig, float *zf) {
  if (amoe_fast.node_logits) {
    amoe_fast.node_logits(w, s, r, bias, req_bias, E, sig, zf);
    return;
  }
  amoe_gen_node_logits_generic(r, eps, w, s, bias, req_bias, E, sig, zf);
}

void amoe_gen_node_logits_generic(gen_rng4 *r, float *eps, const float *w, const float *s, const float *bias,
                                  const float *req_bias, int E, float sig, float *zf) {
  amoe_gen_normals16_generic(r, eps, E);
  layer_logits(w, s, eps, NULL, 1, 0, bias, req_bias, E, sig, zf);
}

/* layer_logits with its noise given (the tree mechanism's path). */
static void layer_logits_eps(const float *w, const float *s, const float *eo, const float *es, float own, float shr,
                             const float *bias, const float *req_bias, int E, float sig, float *zf) {
  if (amoe_fast.layer_logits) {
    amoe_fast.layer_logits(w, s, eo, es, own, shr, bias, req_bias, E, sig, zf);
    return;
  }
  layer_logits(w, s, eo, es, own, shr, bias, req_bias, E, sig, zf);
}

void amoe_gen_layer_logits_generic(const float *w, const float *s, const float *eo, const float *es, float own,
                                   float shr, const float *bias, const float *req_bias, int E, float sig, float *zf) {
  layer_logits(w, s, eo, es, own, shr, bias, req_bias, E, sig, zf);
}

/* The tree mechanism's per-block part: each node's twin (the first node
 * with its depth and rank among its siblings, by draft probability; -1 for
 * that first one) and the uniform that decides the layers it repeats it at,
 * on a stream of its own. */
static void tree_twins(amoe_gen *g, const amoe_block *b, int n) {
  const int keys = (g->p.depth + 2) * (g->p.branch + 1), c = g->p.candidates;
  int *rank = g->rank, *depth = g->rank + c, *first = g->twin + c;
  for (int i = 0; i < keys; i++) first[i] = -1;
  amoe_rng r;
  amoe_rng_seed(&r, g->p.seed ^ 0x7265706561ULL, g->request, g->step);
  for (int t = 0; t < n; t++) {
    int rk = 0; /* draft probability desc, ties to the earlier node */
    for (int s = 1; s < n; s++)
      rk += s != t && b->parent[s] == b->parent[t] && (b->logp[s] > b->logp[t] || (b->logp[s] == b->logp[t] && s < t));
    rank[t] = t ? rk : 0;
    depth[t] = t ? depth[b->parent[t]] + 1 : 0; /* parent[t] < t */
    const int key = (depth[t] <= g->p.depth + 1 ? depth[t] : g->p.depth + 1) * (g->p.branch + 1) +
                    (rank[t] < g->p.branch ? rank[t] : g->p.branch);
    g->twin[t] = t ? first[key] : -1;
    if (t && first[key] < 0) first[key] = t;
    g->repeat_u[t] = (float)amoe_rng_unif(&r);
  }
}

/* The tree mechanism's per-layer part: every node's noise drawn from r (as
 * node_logits would draw it, node by node); where the layer shares, the
 * siblings' shared normals (a stream per block and layer; noise for parents
 * only, from tree_index's children lists, which number nodes as the block
 * does), and every node's fresh token normals but the root's mixed with its
 * siblings' (its noise is mixed as its logits are computed). */
static void tree_noise(amoe_gen *g, gen_rng4 *r, const amoe_block *b, int n, int l) {
  const int E = g->p.experts, E16 = (E + 15) / 16 * 16, D = AMOE_GEN_DIM;
  for (int t = 0; t < n; t++) normals16(r, g->eps_all + (size_t)t * E16, E);
  const float a = g->tree_a[l];
  if (!(a > 0)) return;
  gen_rng4 rs;
  rng4_seed(&rs, g->p.seed ^ 0x7369626cULL ^ (uint64_t)l << 40, g->request, g->step);
  normals16(&rs, g->sib_xi, n * D);
  for (int p = 0; p < n; p++)
    if (g->child_start[p + 1] > g->child_start[p]) normals16(&rs, g->sib_eps + (size_t)p * E16, E);
  const float own = sqrtf(1 - a), shr = sqrtf(a);
  for (int t = 1; t < n; t++)
    for (int i = 0; i < D; i++)
      g->xi[(size_t)t * D + i] = own * g->xi[(size_t)t * D + i] + shr * g->sib_xi[(size_t)b->parent[t] * D + i];
}

/* route_hold: block b's n nodes take the routes of the request's last
 * routed block when this step is not one it routes afresh (every
 * route_hold-th, staggered by request so that each step routes a share of
 * the requests) and that block's first n nodes have b's parents. Returns
 * 1 when they did. */
static int routes_held(amoe_gen *g, amoe_block *b, int n) {
  const int H = g->p.route_hold;
  if (H <= 1 || n > g->held_n || (g->step + g->request) % (uint32_t)H == 0) return 0;
  for (int t = 0; t < n; t++)
    if (b->parent[t] != g->held_parent[t]) return 0;
  const size_t m = (size_t)g->p.m;
  for (int l = 0; l < g->p.layers; l++) {
    memcpy(b->ids + (size_t)l * n * m, g->held_ids + (size_t)l * g->held_n * m, n * m * sizeof *b->ids);
    memcpy(b->logits + (size_t)l * n * m, g->held_z + (size_t)l * g->held_n * m, n * m * sizeof *b->logits);
  }
  return 1;
}

/* Keeps routed block b's routes for the steps that hold them. */
static void routes_keep(amoe_gen *g, const amoe_block *b, int n) {
  const size_t m = (size_t)g->p.m, all = (size_t)g->p.layers * n * m;
  memcpy(g->held_ids, b->ids, all * sizeof *b->ids);
  memcpy(g->held_z, b->logits, all * sizeof *b->logits);
  memcpy(g->held_parent, b->parent, (size_t)n * sizeof *b->parent);
  g->held_n = n;
}

amoe_status amoe_gen_next(amoe_gen *g, amoe_block *b, amoe_err *e) {
  if (g->committed >= g->p.tokens_per_request) return AMOE_END;
  int n = build_tree(g, &g->rng);
  tree_index(g, n);
  AMOE_TRY(amoe_block_reserve(b, n, e));
  b->request = g->request;
  b->step = g->step;
  for (int t = 0; t < n; t++) {
    const pool_node *pn = &g->pool[g->kept[t]];
    b->parent[t] = t ? g->remap[pn->parent] : -1;
    b->logp[t] = pn->logp;
    b->score[t] = pn->score;
  }
  int last = draw_accepted(g, n, b->accepted);
  if (routes_held(g, b, n)) { /* (its routing state waits for its next routed block) */
    g->committed += amoe_block_accepted_count(b);
    g->step++;
    return amoe_block_finish(b, AMOE_CHECK_TREE, e);
  }
  /* routing */
  const int L = g->p.layers, E = g->p.experts, D = AMOE_GEN_DIM;
  const float lc = (float)g->p.layer_correlation, clc = (float)sqrt(1 - lc * (double)lc);
  const float sig = (float)(g->p.noise / g->p.temperature); /* (w and b were scaled at open) */
  const int E16 = (E + 15) / 16 * 16;
  float *tok = g->tok;
  gen_rng4 r4;
  rng4_seed(&r4, g->p.seed ^ 0x726f757465ULL, g->request, g->step);
  if (g->tree_a) tree_twins(g, b, n);
  /* layer by layer, so that a layer's embeddings (E·D floats) stay in L1
   * for every node; tok carries each node's token part to the next layer */
  for (int l = 0; l < L; l++) {
    const float *wl = g->w + (size_t)l * E * D, *bl = g->bias + (size_t)l * E;
    const float *rbl = g->req_bias ? g->req_bias + (size_t)l * E : NULL;
    const float rho = g->rho[l], crho = g->crho[l];
    float *sl = g->state + (size_t)l * g->p.candidates * D;
    normals16(&r4, g->xi, n * D); /* every node's token part, then node by node the logits' noise */
    if (g->tree_a) tree_noise(g, &r4, b, n, l);
    const float own_l = g->tree_a ? sqrtf(1 - g->tree_a[l]) : 1, shr_l = g->tree_a ? sqrtf(g->tree_a[l]) : 0;
    for (int t = 0; t < n; t++) {
      const float *ps = t ? sl + (size_t)b->parent[t] * D : g->s_last + (size_t)l * D;
      float *st = sl + (size_t)t * D, *tk = tok + (size_t)t * D;
      const int tw = g->tree_a && g->twin[t] >= 0 && g->repeat_u[t] < g->tree_q[l] ? g->twin[t] : -1;
      gen_v8f x, k, p; /* the D = 8 dimensions as one vector */
      memcpy(&x, g->xi + (size_t)t * D, sizeof x);
      memcpy(&k, tw >= 0 ? tok + (size_t)tw * D : tk, sizeof k);
      memcpy(&p, ps, sizeof p);
      if (tw < 0) k = l ? lc * k + clc * x : x; /* (a repeat carries its twin's token part as it is) */
      const gen_v8f sv = rho * p + crho * k;
      memcpy(tk, &k, sizeof k);
      memcpy(st, &sv, sizeof sv);
      if (g->tree_a) { /* a repeat takes its twin's noise, mixed with the twin's siblings' */
        const int u = tw >= 0 ? tw : t;
        const float *es = u && g->tree_a[l] > 0 ? g->sib_eps + (size_t)b->parent[u] * E16 : NULL;
        layer_logits_eps(wl, st, g->eps_all + (size_t)u * E16, es, own_l, shr_l, bl, rbl, E, sig, g->zfull);
      } else
        node_logits(&r4, g->eps, wl, st, bl, rbl, E, sig, g->zfull);
      amoe_block_set_full(b, l, t, g->zfull);
      if (g->score_scale && g->score_scale[l] != 1.0f) amoe_block_scale_logits(b, l, t, g->score_scale[l]);
    }
  }
  for (int l = 0; l < L; l++)
    memcpy(g->s_last + (size_t)l * D, g->state + ((size_t)l * g->p.candidates + last) * D, D * sizeof(float));
  if (g->p.route_hold > 1) routes_keep(g, b, n);
  const int acc = amoe_block_accepted_count(b);
  g->committed += acc;
  if (g->req_bias && g->p.drift_tokens > 0) { /* its own stream: without drift the blocks stay as they were */
    const float a = (float)exp(-acc / g->p.drift_tokens), ca = (float)sqrt(1 - (double)a * a);
    gen_rng4 rd;
    rng4_seed(&rd, g->p.seed ^ 0x6472696674ULL, g->request, g->step);
    const int nb = L * E;
    normals16(&rd, g->drift, nb);
    for (int l = 0; l < L; l++) { /* (layer by layer: an index divided by E per expert was a third of a V4 decode) */
      float *rb = g->req_bias + (size_t)l * E;
      const float *dr = g->drift + (size_t)l * E, cs = ca * g->req_scale[l];
      for (int x = 0; x < E; x++) rb[x] = a * rb[x] + cs * dr[x];
    }
  }
  g->step++;
  return amoe_block_finish(b, AMOE_CHECK_TREE, e);
}

void amoe_gen_normals16(gen_rng4 *r, float *out, int n) { normals16(r, out, n); }
void amoe_gen_layer_logits(const float *w, const float *s, const float *eo, const float *es, float own, float shr,
                           const float *bias, const float *req_bias, int E, float sig, float *zf) {
  layer_logits_eps(w, s, eo, es, own, shr, bias, req_bias, E, sig, zf);
}
void amoe_gen_node_logits(gen_rng4 *r, float *eps, const float *w, const float *s, const float *bias,
                          const float *req_bias, int E, float sig, float *zf) {
  node_logits(r, eps, w, s, bias, req_bias, E, sig, zf);
}

amoe_status amoe_gen_count_blocks(amoe_gen *g, uint32_t req, int limit, int *blocks, amoe_err *e) {
  (void)e;
  /* the tree and the acceptance draw from g->rng alone (routing has
   * streams of its own), so they come out as amoe_gen_next draws them */
  amoe_rng_seed(&g->rng, g->p.seed, 0x72657175ULL, req);
  g->request = req;
  g->step = 0;
  g->committed = 0;
  g->replay_start = g->p.replay ? (uint32_t)(amoe_rng_hash3(g->p.seed, req, 7) % (uint64_t)g->p.replay_n) : 0;
  uint8_t acc[AMOE_MAX_NODES];
  int nb = 0;
  while (g->committed < g->p.tokens_per_request && nb < limit) {
    const int n = build_tree(g, &g->rng);
    tree_index(g, n);
    draw_accepted(g, n, acc);
    for (int t = 0; t < n; t++) g->committed += acc[t];
    g->step++;
    nb++;
  }
  *blocks = nb;
  return AMOE_OK;
}
