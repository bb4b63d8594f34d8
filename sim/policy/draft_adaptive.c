/* adaptive: verification that sizes itself per step (docs/design.md §18),
 * as D-Cut (AngelSlim; vLLM's adaptive verification follows it) allocates
 * a step's verified tokens over the batch: every request keeps its root;
 * each further node of a request's EAGLE order gains its chance of being
 * committed (its draft path probability exp(score), × p̂_d / m̄_d where
 * the calibration has them: evict's estimate), made non-increasing along
 * the order so that a request's chosen nodes are a prefix; the pass's
 * candidates are taken best first, and the step keeps the K of them that
 * maximises
 *   (requests + Σ gains of the K) / T(K),
 * the expected committed tokens per second. T is where the two rows part:
 *   cost tokens:  the profiled table of the step's time by batch and
 *                 verified tokens per request (amoe_step_table, as the
 *                 engines ship theirs: a function of batch × tokens);
 *   cost experts: the one cost function (§9) over what those nodes touch:
 *                 per MoE layer the union of their natural routes and each
 *                 expert's tokens, the fetches of the experts the cache
 *                 does not hold, the busiest GPU's share (each expert on
 *                 its first copy's GPU), over the routes `routes` names:
 *                   oracle     the draft tokens' true routes (no engine has
 *                              them before the pass: the upper end);
 *                   predictor  EcoSpec's lightweight predictor: each of a
 *                              token's k experts right with probability
 *                              `accuracy`, else an expert drawn from the
 *                              layer's popularity (counter-based coins
 *                              keyed by block, node, layer and slot);
 *                   previous   every draft token routes as the committed
 *                              token before the block (an engine has that
 *                              route from the last pass; a request's first
 *                              block: popular);
 *                   popular    each layer's k most popular experts.
 *                 Popularity is the calibration workload's natural token
 *                 counts (amoe_offline.popularity). Sizing reads only these
 *                 routes; the pass then charges the true ones.
 * The experts row's prediction of a step is its time before acceptance:
 * each request's context at workload.context_tokens, the extend over one
 * token per request and the engine's host work per committed token
 * (engine.request_s) at one token per request, lower bounds of what the
 * pass is charged; so with natural verification and one copy per expert it
 * never predicts a step slower than it is charged. Its decision adds that
 * host work at the expected committed tokens.
 * Verification stays natural: lossless. Per step, once for the pass
 * (AMOE_BATCH_PASS); at batch 1 the same rule over one request. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "layout.h"
#include "policy.h"
#include "rng.h"
#include "tables.h"

const char *const amoe_adaptive_cost_names[] = {"tokens", "experts", NULL};
const char *const amoe_adaptive_routes_names[] = {"oracle", "predictor", "previous", "popular", NULL};

/* the row's parameters, in its table row's order (policy.c) */
enum { P_COST = 0, P_ROUTES = 1, P_ACCURACY = 2 };
enum { ROUTES_ORACLE = 0, ROUTES_PREDICTOR = 1, ROUTES_PREVIOUS = 2, ROUTES_POPULAR = 3 };

int amoe_draft_adaptive_reads_popularity(const amoe_policy_row *row) {
  return row->dparam[P_COST] >= 0.5 && row->dparam[P_ROUTES] >= 0.5;
}

double amoe_step_table_at(const amoe_step_table *t, double batch, double tokens) {
  if (!t || t->nb < 1 || t->nt < 1) return 0;
  /* per axis: the cell [i, i + 1] and the weight of i + 1 (linear beyond the last) */
  int bi = 0, ti = 0;
  while (bi + 2 < t->nb && batch > t->batch[bi + 1]) bi++;
  while (ti + 2 < t->nt && tokens > t->tokens[ti + 1]) ti++;
  const int b1 = t->nb > 1 ? bi + 1 : bi, t1 = t->nt > 1 ? ti + 1 : ti;
  const double wb = b1 > bi ? fmax(0, (batch - t->batch[bi]) / (t->batch[b1] - t->batch[bi])) : 0;
  const double wt = t1 > ti ? fmax(0, (tokens - t->tokens[ti]) / (t->tokens[t1] - t->tokens[ti])) : 0;
  const double a = t->step_s[bi][ti] + wt * (t->step_s[bi][t1] - t->step_s[bi][ti]);
  const double b = t->step_s[b1][ti] + wt * (t->step_s[b1][t1] - t->step_s[b1][ti]);
  return a + wb * (b - a);
}

typedef struct {
  double gain;
  int q, i; /* request, place in its order */
} cand;

static int by_gain(const void *x, const void *y) {
  const cand *a = x, *b = y;
  if (a->gain != b->gain) return a->gain < b->gain ? 1 : -1;
  if (a->q != b->q) return a->q - b->q;
  return a->i - b->i;
}

/* The experts row's running state: per MoE layer each expert's tokens,
 * the union, the fetches and the expert time (per group on several GPUs). */
typedef struct {
  const amoe_spec *s;
  const amoe_layout *layout;
  int routes;              /* ROUTES_* */
  double accuracy;         /* the predictor's */
  const double *share;     /* [L][E] each expert's share of its layer's popularity */
  uint16_t *top;           /* [L][k] each layer's most popular experts */
  const uint8_t *const *resident;
  amoe_expert_coef ec;
  int L, E, k, G, moe_tp;
  int *count;     /* [L][E] */
  double *u, *f;  /* [L] */
  double *work;   /* [L][G] expert time per group (G = 1: the layer's) */
  double kv, attn; /* the pass's KV tokens, and Σ over its nodes of their request's context */
} expert_state;

/* The predictor's k experts for node t at layer l: each slot's true
 * expert with probability `accuracy`, else one drawn from the layer's
 * popularity among the experts not yet taken (a true expert already taken
 * is drawn for too): the k distinct. */
/* 1 when expert y is among out[0..j) */
static int taken(const uint16_t *out, int j, int y) {
  for (int q = 0; q < j; q++)
    if (out[q] == y) return 1;
  return 0;
}

static void predict(const expert_state *x, const amoe_block *b, int t, int l, uint16_t *out) {
  const uint16_t *truth = amoe_block_ids(b, l, t);
  const double *share = x->share + (size_t)l * x->E;
  const uint64_t seed = x->s->workload.seed ^ 0x9e0d1c7ULL;
  for (int j = 0; j < x->k; j++) {
    const uint64_t n = ((uint64_t)t * x->L + l) * x->k + j;
    int e = truth[j];
    if (taken(out, j, e) || amoe_rng_coin(seed, b->index, 2 * n) >= x->accuracy) { /* confused: a popular expert instead */
      double left = 1;
      for (int q = 0; q < j; q++) left -= share[out[q]];
      const double u = amoe_rng_coin(seed, b->index, 2 * n + 1) * left;
      double run = 0;
      e = -1;
      for (int y = 0; y < x->E && e < 0; y++)
        if (!taken(out, j, y) && (run += share[y]) > u) e = y;
      for (int y = 0; y < x->E && e < 0; y++) /* no mass left: the lowest unused id */
        if (!taken(out, j, y)) e = y;
    }
    out[j] = (uint16_t)e;
  }
}

/* The experts node t of request q's block is taken to route to at layer
 * l, by the row's routes (buf: k ids of scratch). */
static const uint16_t *routes_of(const expert_state *x, const amoe_dctx *c, int t, int l, uint16_t *buf) {
  switch (x->routes) {
  case ROUTES_PREDICTOR: predict(x, c->b, t, l, buf); return buf;
  case ROUTES_PREVIOUS: if (c->previous) return c->previous + (size_t)l * x->k; /* fall through */
  case ROUTES_POPULAR: return x->top + (size_t)l * x->k;
  default: return amoe_block_ids(c->b, l, t);
  }
}

static void add_node(expert_state *x, const amoe_dctx *c, int t) {
  uint16_t buf[AMOE_MAX_TOPK];
  for (int l = 0; l < x->L; l++) {
    const uint16_t *id = routes_of(x, c, t, l, buf);
    for (int j = 0; j < x->k; j++) {
      const int e = id[j];
      if (e >= x->E) continue;
      int *c = &x->count[(size_t)l * x->E + e];
      if (*c == 0) {
        x->u[l] += 1;
        if (x->resident && !x->resident[l][e]) x->f[l] += 1;
      }
      int g = 0;
      if (x->layout) amoe_layout_copies(x->layout, l, e, &g);
      const double before = *c ? amoe_cost_expert_at(x->ec, *c) : 0;
      *c += 1;
      /* (one GPU: the cost function splits the layer over moe_tp itself) */
      x->work[(size_t)l * x->G + g] += (amoe_cost_expert_at(x->ec, *c) - before) / (x->layout ? x->moe_tp : 1);
    }
  }
}

typedef struct {
  double v;
  int id;
} pop_rank;

static int by_popularity(const void *a, const void *b) { /* more popular first; ties: lower id */
  const pop_rank *x = a, *y = b;
  if (x->v != y->v) return x->v > y->v ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* From the layers' popularity (NULL: uniform): each expert's share and
 * each layer's k most popular experts. 0: out of memory. */
static int popularity_tables(expert_state *x, const double *pop) {
  double *share = malloc((size_t)x->L * x->E * sizeof *share);
  pop_rank *r = malloc((size_t)x->E * sizeof *r);
  x->top = malloc((size_t)x->L * x->k * sizeof *x->top);
  x->share = share;
  if (!share || !r || !x->top) {
    free(r);
    return 0;
  }
  for (int l = 0; l < x->L; l++) {
    const double *p = pop ? pop + (size_t)l * x->E : NULL;
    double sum = 0;
    for (int e = 0; e < x->E; e++) sum += p ? p[e] : 1;
    for (int e = 0; e < x->E; e++) {
      r[e] = (pop_rank){p ? p[e] : 1, e};
      share[(size_t)l * x->E + e] = sum > 0 ? (p ? p[e] : 1) / sum : 1.0 / x->E;
    }
    qsort(r, (size_t)x->E, sizeof *r, by_popularity);
    for (int j = 0; j < x->k; j++) x->top[(size_t)l * x->k + j] = (uint16_t)r[j < x->E ? j : 0].id;
  }
  free(r);
  return 1;
}

/* A request's context: its own (c->context), else workload.context_tokens. */
static double context_of(const amoe_dctx *c) {
  return c->context > 0 ? c->context : c->spec->workload.context_tokens;
}

/* The pass's shape for `requests` requests verifying `tokens` nodes, the
 * deepest at depth maxd, its attention reading kv tokens of KV (over the
 * requests) and attn (over the nodes), as the run charges it. */
static amoe_pass_shape shape_of(const amoe_spec *s, int requests, int tokens, int maxd, double kv, double attn) {
  amoe_pass_shape sh = amoe_spec_pass_shape(s, tokens, maxd);
  sh.branch = s->workload.top_k * requests, sh.accepted = requests;
  sh.kv_tokens = kv, sh.attn_tokens = attn, sh.requests = requests;
  return sh;
}

static double experts_time(const expert_state *x, int requests, int tokens, int maxd) {
  amoe_cost_pass_ctx pc;
  amoe_pass_shape sh = shape_of(x->s, requests, tokens, maxd, x->kv, x->attn);
  amoe_cost_pass_init(&pc, &sh);
  amoe_pass_time pt = amoe_cost_pass_begin(&pc);
  const int slots = x->s->offload.slots_per_layer;
  for (int l = 0; l < x->L; l++) {
    double busiest = 0;
    for (int g = 0; g < x->G; g++) busiest = fmax(busiest, x->work[(size_t)l * x->G + g]);
    const int waves = x->s->offload.enabled ? amoe_cost_waves(x->u[l], slots) : 1;
    const amoe_layer_counts lc = {x->u[l], x->f[l], waves, busiest};
    const amoe_layer_time lt = amoe_cost_layer(&pc, &lc);
    amoe_cost_pass_add(&pt, &lt);
  }
  return pt.total;
}

int amoe_draft_adaptive_pass(const amoe_dctx *c, int R, int *const *out, int *count) {
  const amoe_spec *s = c[0].spec;
  const int by_experts = c[0].row->dparam[P_COST] >= 0.5;
  int total = 0, verified = 0;
  int *take = calloc((size_t)R, sizeof *take);
  for (int q = 0; q < R; q++) { /* each request's EAGLE order in its scratch */
    int *order = c[q].scratch;
    const int n = amoe_draft_rank(c[q].b, order);
    count[q] = n < c[q].nodes ? n : c[q].nodes;
    total += count[q] - 1;
  }
  cand *cv = malloc((size_t)(total > 0 ? total : 1) * sizeof *cv);
  expert_state x = {0};
  int ok = take && cv;
  if (ok && by_experts) {
    x.s = s;
    x.layout = c[0].layout;
    x.resident = c[0].resident;
    x.ec = amoe_cost_expert_coef(&s->model, &s->hw);
    x.L = s->model.moe_layers;
    x.E = s->model.experts;
    x.k = s->model.top_k;
    x.G = x.layout ? amoe_layout_groups(x.layout) : 1;
    amoe_cost_pass_ctx pc;
    amoe_pass_shape sh = shape_of(s, 1, 1, 0, 0, 0);
    amoe_cost_pass_init(&pc, &sh);
    x.moe_tp = pc.moe_tp > 0 ? pc.moe_tp : 1;
    x.count = calloc((size_t)x.L * x.E, sizeof *x.count);
    x.u = calloc((size_t)x.L * 2, sizeof *x.u);
    x.work = calloc((size_t)x.L * x.G, sizeof *x.work);
    ok = x.count && x.u && x.work;
    x.f = x.u ? x.u + x.L : NULL;
    x.routes = (int)c[0].row->dparam[P_ROUTES];
    x.accuracy = c[0].row->dparam[P_ACCURACY];
    if (ok && x.routes != ROUTES_ORACLE) ok = popularity_tables(&x, c[0].offline ? c[0].offline->popularity : NULL);
  }
  if (ok) {
    int m = 0;
    for (int q = 0; q < R; q++) {
      const int *order = c[q].scratch;
      double run = 1;
      for (int i = 1; i < count[q]; i++) {
        const double g = amoe_commit_chance(c[q].offline, c[q].b, order[i]);
        run = g < run ? g : run;
        cv[m++] = (cand){run, q, i};
      }
      if (by_experts) add_node(&x, &c[q], order[0]);
      x.kv += context_of(&c[q]);
      x.attn += context_of(&c[q]);
    }
    qsort(cv, (size_t)total, sizeof *cv, by_gain);
    /* K = 0: the roots alone; then one candidate more at a time */
    double gain = 0, best = -1, best_gain = 0, best_t = 0;
    int best_k = 0, maxd = 0;
    for (int K = 0; K <= total; K++) {
      if (K > 0) {
        const cand *a = &cv[K - 1];
        const int t = ((const int *)c[a->q].scratch)[a->i];
        gain += a->gain;
        maxd = c[a->q].b->depth[t] > maxd ? c[a->q].b->depth[t] : maxd;
        if (by_experts) add_node(&x, &c[a->q], t);
        x.attn += context_of(&c[a->q]);
      }
      /* experts: the pass as the cost function prices it before acceptance
       * (the prediction), and for the decision the engine's host work per
       * committed token of every request beyond the first, at the
       * expected tokens (the table has it in its entries) */
      const double T = by_experts ? experts_time(&x, R, R + K, maxd)
                                  : amoe_step_table_at(c[0].offline ? c[0].offline->steps : NULL, R,
                                                       (double)(R + K) / R);
      const double per_token = s->engine.request_per == AMOE_REQUEST_PER_TOKEN ? s->engine.request_s : 0;
      const double Td = by_experts ? T + per_token * (R + gain) * (R - 1) / R : T;
      const double v = Td > 0 ? (R + gain) / Td : 0;
      if (v > best) best = v, best_k = K, best_gain = gain, best_t = by_experts ? T + per_token * (R - 1) : T;
    }
    for (int q = 0; q < R; q++) take[q] = 1;
    for (int K = 0; K < best_k; K++) take[cv[K].q]++; /* (best first: a prefix of each request's order) */
    for (int q = 0; q < R; q++) {
      int *order = c[q].scratch;
      count[q] = amoe_nodes_ascending(c[q].b, order, take[q], (uint8_t *)(order + c[q].b->n), out[q]);
      verified += count[q];
    }
    if (c[0].predicted) *c[0].predicted = (amoe_draft_prediction){R + best_gain, best_t};
  } else { /* out of memory: every request's root, and no prediction */
    for (int q = 0; q < R; q++) {
      out[q][0] = 0;
      count[q] = 1;
    }
    verified = R;
  }
  free(x.count);
  free(x.u);
  free(x.work);
  free((void *)x.share);
  free(x.top);
  free(cv);
  free(take);
  return verified;
}

int amoe_draft_adaptive(const amoe_dctx *c, int *out) {
  int n = 0;
  int *const outs[1] = {out};
  amoe_draft_adaptive_pass(c, 1, outs, &n);
  return n;
}
