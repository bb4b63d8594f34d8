#include "fit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "gen.h"
#include "source.h"

void amoe_fit_targets_init(amoe_fit_targets *t) {
  memset(t, 0, sizeof *t);
  t->overlap = t->top16 = t->tree_union = t->tree_tau = NAN;
  t->reuse_within_8 = t->reuse_within_1 = t->reuse_median = NAN;
  for (int i = 0; i < AMOE_INSPECT_NW; i++) t->window_union[i] = NAN;
}

/* ------------------------------------------------------------ targets file */

typedef struct {
  yaml_document_t doc;
  const char *path;
  amoe_diag *d;
} tdoc;

static void where(const tdoc *y, const yaml_node_t *n, char *buf, size_t len) {
  snprintf(buf, len, "%s:%zu:%zu", y->path, n->start_mark.line + 1, n->start_mark.column + 1);
}

static const char *text(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static int number(const tdoc *y, const yaml_node_t *n, const char *key, double lo, double hi, double *out) {
  char w[AMOE_PATH_MAX + 64];
  where(y, n, w, sizeof w);
  char *end = NULL;
  double v = n->type == YAML_SCALAR_NODE ? strtod(text(n), &end) : NAN;
  if (n->type != YAML_SCALAR_NODE || !end || *end || !(v >= lo && v <= hi)) {
    amoe_diag_add(y->d, "%s: %s must be a number in [%g, %g]", w, key, lo, hi);
    return 0;
  }
  *out = v;
  return 1;
}

/* {KEY: value, ...} with integer keys in [lo, hi]: calls back per pair. */
static void int_map(const tdoc *y, yaml_node_t *m, const char *key, int lo, int hi, double vlo, double vhi,
                    void (*put)(amoe_fit_targets *, int, double, const tdoc *, yaml_node_t *), amoe_fit_targets *t) {
  char w[AMOE_PATH_MAX + 64];
  where(y, m, w, sizeof w);
  if (m->type != YAML_MAPPING_NODE) {
    amoe_diag_add(y->d, "%s: %s must be a mapping {integer: number}", w, key);
    return;
  }
  for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node((yaml_document_t *)&y->doc, p->key);
    yaml_node_t *v = yaml_document_get_node((yaml_document_t *)&y->doc, p->value);
    double kv, vv;
    if (number(y, k, key, lo, hi, &kv) && number(y, v, key, vlo, vhi, &vv)) {
      if (kv != floor(kv)) {
        where(y, k, w, sizeof w);
        amoe_diag_add(y->d, "%s: %s keys must be integers", w, key);
      } else {
        put(t, (int)kv, vv, y, k);
      }
    }
  }
}

/* [n numbers] in [lo, hi], one per MoE layer (checked against the model by the fit). */
static void number_list(const tdoc *y, yaml_node_t *v, const char *key, double lo, double hi, double *out, int *n) {
  char w[AMOE_PATH_MAX + 64];
  where(y, v, w, sizeof w);
  if (v->type != YAML_SEQUENCE_NODE) {
    amoe_diag_add(y->d, "%s: %s must be a list of numbers, one per MoE layer", w, key);
    return;
  }
  int c = 0, ok = 1;
  for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
    if (c == AMOE_MAX_LAYERS) {
      amoe_diag_add(y->d, "%s: %s: at most %d values", w, key, AMOE_MAX_LAYERS);
      return;
    }
    ok &= number(y, yaml_document_get_node((yaml_document_t *)&y->doc, *it), key, lo, hi, &out[c++]);
  }
  if (ok) *n = c;
}

static void put_anchor(amoe_fit_targets *t, int layer, double v, const tdoc *y, yaml_node_t *k) {
  if (t->nanchor == AMOE_FIT_MAX_ANCHORS) {
    char w[AMOE_PATH_MAX + 64];
    where(y, k, w, sizeof w);
    amoe_diag_add(y->d, "%s: overlap_layers: at most %d layers", w, AMOE_FIT_MAX_ANCHORS);
    return;
  }
  t->anchor_layer[t->nanchor] = layer;
  t->anchor_value[t->nanchor++] = v;
}

static void put_window(amoe_fit_targets *t, int W, double v, const tdoc *y, yaml_node_t *k) {
  for (int i = 0; i < AMOE_INSPECT_NW; i++)
    if (amoe_inspect_windows[i] == W) {
      t->window_union[i] = v;
      return;
    }
  char w[AMOE_PATH_MAX + 64];
  where(y, k, w, sizeof w);
  amoe_diag_add(y->d, "%s: window_union: W must be 1, 2, 4, 8 or 16", w);
}

int amoe_fit_targets_load(amoe_fit_targets *t, const char *path, amoe_diag *d) {
  amoe_fit_targets_init(t);
  int before = d->n;
  FILE *f = fopen(path, "rb");
  if (!f) {
    amoe_diag_add(d, "%s: cannot read the targets file", path);
    return 0;
  }
  yaml_parser_t parser;
  tdoc y = {.path = path, .d = d};
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_file(&parser, f);
  if (!yaml_parser_load(&parser, &y.doc)) {
    amoe_diag_add(d, "%s:%zu:%zu: %s", path, parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                  parser.problem ? parser.problem : "YAML error");
    yaml_parser_delete(&parser);
    fclose(f);
    return 0;
  }
  yaml_parser_delete(&parser);
  fclose(f);
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  if (!root || root->type != YAML_MAPPING_NODE) {
    amoe_diag_add(d, "%s: the targets file must be a mapping (docs/validation.md)", path);
    yaml_document_delete(&y.doc);
    return 0;
  }
  char w[AMOE_PATH_MAX + 64];
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y.doc, p->key), *v = yaml_document_get_node(&y.doc, p->value);
    where(&y, k, w, sizeof w);
    const char *key = k->type == YAML_SCALAR_NODE ? text(k) : "";
    double x;
    if (!strcmp(key, "source")) {
      if (v->type == YAML_SCALAR_NODE) snprintf(t->source, sizeof t->source, "%s", text(v));
      else amoe_diag_add(d, "%s: source must be text", w);
    } else if (!strcmp(key, "adjacent_overlap")) {
      number(&y, v, key, 0, 1, &t->overlap);
    } else if (!strcmp(key, "overlap_layers")) {
      int_map(&y, v, key, 0, AMOE_MAX_LAYERS - 1, 0, 1, put_anchor, t);
    } else if (!strcmp(key, "top16_share")) {
      number(&y, v, key, 0, 1, &t->top16);
    } else if (!strcmp(key, "top16_tokens")) {
      if (number(&y, v, key, 2, 1e6, &x)) t->top16_tokens = (int)x;
    } else if (!strcmp(key, "tree_union")) {
      number(&y, v, key, 1, AMOE_MAX_EXPERTS, &t->tree_union);
    } else if (!strcmp(key, "tree_union_layers")) {
      number_list(&y, v, key, 1, AMOE_MAX_EXPERTS, t->tree_union_layer, &t->ntree_layers);
    } else if (!strcmp(key, "tree_tau")) {
      number(&y, v, key, 1, 64, &t->tree_tau);
    } else if (!strcmp(key, "tree_nodes")) {
      if (number(&y, v, key, 2, AMOE_MAX_NODES, &x)) t->tree_nodes = (int)x;
    } else if (!strcmp(key, "tree_depth")) {
      if (number(&y, v, key, 1, 16, &x)) t->tree_depth = (int)x;
    } else if (!strcmp(key, "tree_top_k")) {
      if (number(&y, v, key, 1, AMOE_MAX_TOPK, &x)) t->tree_top_k = (int)x;
    } else if (!strcmp(key, "reuse_within_8")) {
      number(&y, v, key, 0, 1, &t->reuse_within_8);
    } else if (!strcmp(key, "reuse_within_1")) {
      number(&y, v, key, 0, 1, &t->reuse_within_1);
    } else if (!strcmp(key, "reuse_median")) {
      number(&y, v, key, 1, 1e6, &t->reuse_median);
    } else if (!strcmp(key, "entropy_layers")) {
      number_list(&y, v, key, 0, 20, t->entropy, &t->nentropy);
    } else if (!strcmp(key, "popularity_layers")) {
      number_list(&y, v, key, 1, AMOE_MAX_EXPERTS, t->popularity, &t->npopularity);
    } else if (!strcmp(key, "popularity_prompts")) {
      if (number(&y, v, key, 1, 1e5, &x)) t->popularity_prompts = (int)x;
    } else if (!strcmp(key, "popularity_prompt_tokens")) {
      if (number(&y, v, key, 1, 1e5, &x)) t->popularity_prompt_tokens = (int)x;
    } else if (!strcmp(key, "window_union")) {
      int_map(&y, v, key, 1, 16, 1, AMOE_MAX_EXPERTS, put_window, t);
    } else {
      amoe_diag_add(d,
                    "%s: unknown key '%s' (source, adjacent_overlap, overlap_layers, top16_share, top16_tokens, "
                    "tree_union, tree_union_layers, tree_nodes, tree_depth, tree_top_k, tree_tau, window_union, reuse_within_1, reuse_within_8, reuse_median, "
                    "entropy_layers, popularity_layers, popularity_prompts, popularity_prompt_tokens)",
                    w, key);
    }
  }
  if (d->n == before && t->npopularity && !(t->popularity_prompts && t->popularity_prompt_tokens))
    amoe_diag_add(d, "%s: popularity_layers needs popularity_prompts and popularity_prompt_tokens (what it was measured over)",
                  path);
  if (d->n == before && (!isnan(t->tree_union) || t->ntree_layers) && !t->tree_nodes)
    amoe_diag_add(d, "%s: tree_union%s needs tree_nodes (the tree it was measured on)", path,
                  t->ntree_layers ? "_layers" : "");
  yaml_document_delete(&y.doc);
  return d->n == before;
}

void amoe_fit_targets_from_stats(amoe_fit_targets *t, const amoe_inspect_stats *st, int top_k, int tokens_per_request,
                                 const char *source) {
  amoe_fit_targets_init(t);
  snprintf(t->source, sizeof t->source, "%s", source);
  t->overlap = st->adjacent_overlap;
  /* the first, the highest and the last layer */
  int L = st->layers, peak = 0;
  for (int l = 1; l < L; l++)
    if (st->overlap_layer[l] > st->overlap_layer[peak]) peak = l;
  const int at[3] = {0, peak, L - 1};
  for (int i = 0; i < 3 && L > 1; i++)
    if (i == 0 || at[i] != at[i - 1]) {
      t->anchor_layer[t->nanchor] = at[i];
      t->anchor_value[t->nanchor++] = st->overlap_layer[at[i]];
    }
  t->top16 = st->top16_share;
  t->top16_tokens = tokens_per_request;
  for (int i = 0; i < AMOE_INSPECT_NW; i++) t->window_union[i] = st->window_union[i];
  t->reuse_within_8 = st->reuse_within_8;
  t->reuse_within_1 = st->reuse_within_1;
  t->reuse_median = st->reuse_median;
  /* draft trees (a capture's verification passes, or hybrid blocks): their
   * union per layer, at their shape and accept length. Chains of real
   * tokens (a decode capture read in windows) branch nowhere and accept
   * every token: they are the window statistics above, not a draft tree,
   * and their "accept length" is the window's, not the spec's tau */
  if (st->nodes_mean >= 2 && st->tree_depth_max > 0 && st->tree_branch_max > 1) {
    t->ntree_layers = L;
    for (int l = 0; l < L; l++) t->tree_union_layer[l] = st->union_layer[l];
    t->tree_nodes = (int)lround(st->nodes_mean);
    t->tree_depth = st->tree_depth_max;
    t->tree_top_k = st->tree_branch_max;
    t->tree_tau = st->tau_mean;
  }
  if (st->entropy_full && !isnan(st->entropy_mean)) { /* a capture with every logit: its score shape */
    t->nentropy = L;
    for (int l = 0; l < L; l++) t->entropy[l] = st->entropy_layer[l];
  }
  (void)top_k;
}

/* ------------------------------------------------------------ fitting */

/* The chain statistics of s's workload (every default of the routing
 * taken from s->model.routing). */
static amoe_status eval_chain(const amoe_spec *s, int blocks, int tokens, amoe_inspect_stats *st, amoe_err *e) {
  amoe_workload_spec w = s->workload;
  w.blocks = blocks;
  if (tokens > 0) w.tokens_per_request = tokens;
  amoe_source *src = NULL;
  AMOE_TRY(amoe_source_open(&src, &w, &s->model, e));
  amoe_status r =
      amoe_inspect_chain(src, s->model.moe_layers, s->model.experts, s->model.top_k, s->model.router, 0, st, e);
  amoe_source_close(src);
  return r;
}

#define TREE_BLOCKS 200

/* The union of s's draft tree at t's shape (and accept length), per layer
 * (u[l]) and over the layers (the return through *mean). */
static amoe_status eval_tree(const amoe_spec *s, const amoe_fit_targets *t, double *u, double *mean,
                             amoe_inspect_stats *all, amoe_err *e) {
  amoe_workload_spec w = s->workload;
  w.blocks = TREE_BLOCKS;
  w.nodes = w.candidates = t->tree_nodes;
  if (t->tree_depth) w.depth = t->tree_depth;
  if (t->tree_top_k) w.top_k = t->tree_top_k;
  if (!isnan(t->tree_tau)) w.tau = t->tree_tau, w.replay[0] = 0;
  amoe_source *src = NULL;
  AMOE_TRY(amoe_source_open(&src, &w, &s->model, e));
  amoe_inspect_stats st;
  amoe_status r = amoe_inspect_chain(src, s->model.moe_layers, s->model.experts, s->model.top_k, s->model.router,
                                     all != NULL, &st, e); /* (the block-to-block overlaps only for the report) */
  amoe_source_close(src);
  *mean = st.tree_union_mean;
  if (u) memcpy(u, st.union_layer, (size_t)s->model.moe_layers * sizeof *u);
  if (all) *all = st;
  return r;
}

/* Each layer's effective experts over t's prompts, routed as prefills of
 * s's workload (request r's prompt for r = 0..prompts−1). */
static amoe_status eval_popularity(const amoe_spec *s, const amoe_fit_targets *t, double *eff, amoe_err *e) {
  const int L = s->model.moe_layers, E = s->model.experts;
  amoe_workload_spec w = s->workload;
  w.blocks = 1;
  amoe_source *src = NULL;
  AMOE_TRY(amoe_source_open(&src, &w, &s->model, e));
  uint16_t *counts = malloc((size_t)L * E * sizeof *counts);
  double *pop = calloc((size_t)L * E, sizeof *pop);
  amoe_status st = counts && pop ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  for (int r = 0; st == AMOE_OK && r < t->popularity_prompts; r++) {
    int made = 0;
    st = amoe_source_prefill(src, (uint32_t)r, t->popularity_prompt_tokens, 0, counts, &made, e);
    for (size_t i = 0; st == AMOE_OK && i < (size_t)L * E; i++) pop[i] += counts[i];
  }
  for (int l = 0; st == AMOE_OK && l < L; l++) {
    double tot = 0, H = 0;
    for (int x = 0; x < E; x++) tot += pop[(size_t)l * E + x];
    for (int x = 0; x < E; x++) {
      const double q = tot > 0 ? pop[(size_t)l * E + x] / tot : 0;
      if (q > 0) H -= q * log(q);
    }
    eff[l] = exp(H);
  }
  free(counts);
  free(pop);
  amoe_source_close(src);
  return st;
}

/* The overlap a window union at W = 2 implies: 2 − U₂/k. */
static double overlap_target(const amoe_fit_targets *t, int k) {
  if (!isnan(t->overlap)) return t->overlap;
  return isnan(t->window_union[1]) ? NAN : 2.0 - t->window_union[1] / k;
}

#define BISECT_STEPS 12

/* Locality: each anchor (or the one overall value) by bisection in [0, 0.99]. */
static amoe_status fit_locality(amoe_spec *s, const amoe_fit_targets *t, int blocks, amoe_fit_result *r,
                                amoe_err *e) {
  const int L = s->model.moe_layers;
  amoe_routing_fit *rt = &s->model.routing;
  if (t->nanchor > 0) {
    /* first = lowest layer, last = highest, peak = the highest value */
    int lo = 0, hi = 0, pk = 0;
    for (int i = 1; i < t->nanchor; i++) {
      if (t->anchor_layer[i] < t->anchor_layer[lo]) lo = i;
      if (t->anchor_layer[i] > t->anchor_layer[hi]) hi = i;
      if (t->anchor_value[i] > t->anchor_value[pk]) pk = i;
    }
    const int which[3] = {lo, pk, hi};
    int layer[3];
    for (int j = 0; j < 3; j++) {
      layer[j] = t->anchor_layer[which[j]];
      if (layer[j] >= L) return amoe_fail(e, AMOE_EINVAL, "fit: overlap_layers names layer %d of a %d-layer model",
                                          layer[j], L);
    }
    /* the anchors stand at the profile's ends and peak */
    rt->locality_peak = L > 1 ? (double)layer[1] / (L - 1) : 0;
    double a[3] = {0, 0, 0}, b[3] = {0.99, 0.99, 0.99};
    for (int step = 0; step < BISECT_STEPS; step++) {
      rt->locality_first = 0.5 * (a[0] + b[0]);
      rt->locality = 0.5 * (a[1] + b[1]);
      rt->locality_last = 0.5 * (a[2] + b[2]);
      AMOE_TRY(eval_chain(s, blocks, t->top16_tokens, &r->chain, e));
      r->evaluations++;
      const double *mid[3] = {&rt->locality_first, &rt->locality, &rt->locality_last};
      for (int j = 0; j < 3; j++) {
        /* a layer's overlap is its profile value's; between the anchors
         * the profile is linear */
        if (r->chain.overlap_layer[layer[j]] < t->anchor_value[which[j]]) a[j] = *mid[j];
        else b[j] = *mid[j];
      }
    }
    rt->locality_first = 0.5 * (a[0] + b[0]);
    rt->locality = 0.5 * (a[1] + b[1]);
    rt->locality_last = 0.5 * (a[2] + b[2]);
    return AMOE_OK;
  }
  const double target = overlap_target(t, s->model.top_k);
  if (isnan(target)) return AMOE_OK;
  double a = 0, b = 0.99;
  rt->locality_peak = 0;
  for (int step = 0; step < BISECT_STEPS; step++) {
    rt->locality = rt->locality_first = rt->locality_last = 0.5 * (a + b);
    AMOE_TRY(eval_chain(s, blocks, t->top16_tokens, &r->chain, e));
    r->evaluations++;
    if (r->chain.adjacent_overlap < target) a = rt->locality;
    else b = rt->locality;
  }
  rt->locality = rt->locality_first = rt->locality_last = 0.5 * (a + b);
  return AMOE_OK;
}

/* The noise: the largest value up to Mixtral's fit (1) at which the most
 * local anchor can be reached with locality 0.95 (noise caps how alike
 * adjacent tokens route, whatever their states share). */
static amoe_status fit_noise(amoe_spec *s, const amoe_fit_targets *t, int blocks, amoe_fit_result *r, amoe_err *e) {
  double target = NAN;
  int layer = -1;
  for (int i = 0; i < t->nanchor; i++)
    if (isnan(target) || t->anchor_value[i] > target) target = t->anchor_value[i], layer = t->anchor_layer[i];
  if (isnan(target)) target = overlap_target(t, s->model.top_k);
  if (isnan(target)) return AMOE_OK;
  amoe_routing_fit keep = s->model.routing;
  s->model.routing.locality = s->model.routing.locality_first = s->model.routing.locality_last = 0.95;
  s->model.routing.noise = AMOE_FIT_NOISE;
  AMOE_TRY(eval_chain(s, blocks, t->top16_tokens, &r->chain, e));
  r->evaluations++;
  double got = layer >= 0 ? r->chain.overlap_layer[layer] : r->chain.adjacent_overlap;
  if (got < target) { /* not reachable at Mixtral's noise: the largest noise that reaches it */
    double a = 0.02, b = AMOE_FIT_NOISE;
    for (int step = 0; step < BISECT_STEPS; step++) {
      s->model.routing.noise = 0.5 * (a + b);
      AMOE_TRY(eval_chain(s, blocks, t->top16_tokens, &r->chain, e));
      r->evaluations++;
      got = layer >= 0 ? r->chain.overlap_layer[layer] : r->chain.adjacent_overlap;
      if (got < target) b = s->model.routing.noise;
      else a = s->model.routing.noise;
    }
    keep.noise = a;
  } else {
    keep.noise = AMOE_FIT_NOISE;
  }
  s->model.routing = keep;
  return AMOE_OK;
}

/* request_bias in [0, 12] from the top-16 share (a fast drift needs a strong bias). */
static amoe_status fit_bias(amoe_spec *s, const amoe_fit_targets *t, int blocks, amoe_fit_result *r, amoe_err *e) {
  if (isnan(t->top16)) return AMOE_OK;
  double a = 0, b = 12;
  for (int step = 0; step < BISECT_STEPS; step++) {
    s->model.routing.request_bias = 0.5 * (a + b);
    AMOE_TRY(eval_chain(s, blocks, t->top16_tokens, &r->chain, e));
    r->evaluations++;
    if (r->chain.top16_share < t->top16) a = s->model.routing.request_bias;
    else b = s->model.routing.request_bias;
  }
  s->model.routing.request_bias = 0.5 * (a + b);
  return AMOE_OK;
}

#define TREE_SIBLING_MAX 0.99

/* One sibling share at every layer, by bisection on the union over the
 * layers, which falls as it grows; unset when the union is already at or
 * under the target without it. */
static amoe_status bisect_tree(amoe_spec *s, const amoe_fit_targets *t, amoe_fit_result *r, amoe_err *e) {
  amoe_layer_values *v = &s->model.routing.tree_sibling;
  double a = 0, b = TREE_SIBLING_MAX, mean;
  v->n = 0;
  AMOE_TRY(eval_tree(s, t, r->tree_union_layer, &mean, NULL, e));
  r->evaluations++;
  if (mean <= t->tree_union) return AMOE_OK;
  v->n = 1;
  for (int step = 0; step < BISECT_STEPS; step++) {
    v->v[0] = 0.5 * (a + b);
    AMOE_TRY(eval_tree(s, t, r->tree_union_layer, &mean, NULL, e));
    r->evaluations++;
    if (mean > t->tree_union) a = v->v[0];
    else b = v->v[0];
  }
  v->v[0] = 0.5 * (a + b);
  return AMOE_OK;
}

/* A value per layer, all layers at once, by bisection in [0, hi] on each
 * layer's union, which falls as its value grows (a layer's union answers
 * mostly to its own value: the token part carries layer_correlation of the
 * last layer's); a second, narrower pass takes up what the earlier layers'
 * moves did to the later ones. 0 where the union is already at or under
 * the target without it. */
static amoe_status bisect_tree_layers(amoe_spec *s, const amoe_fit_targets *t, amoe_layer_values *v, double hi,
                                      amoe_fit_result *r, amoe_err *e) {
  const int L = s->model.moe_layers;
  double a[AMOE_MAX_LAYERS], b[AMOE_MAX_LAYERS], mean;
  v->n = L;
  for (int l = 0; l < L; l++) a[l] = 0, b[l] = hi;
  for (int pass = 0; pass < 2; pass++) {
    for (int step = 0; step < BISECT_STEPS; step++) {
      for (int l = 0; l < L; l++) v->v[l] = 0.5 * (a[l] + b[l]);
      AMOE_TRY(eval_tree(s, t, r->tree_union_layer, &mean, NULL, e));
      r->evaluations++;
      for (int l = 0; l < L; l++)
        if (r->tree_union_layer[l] > t->tree_union_layer[l]) a[l] = v->v[l];
        else b[l] = v->v[l];
    }
    for (int l = 0; l < L; l++) {
      v->v[l] = 0.5 * (a[l] + b[l]);
      a[l] = fmax(0, v->v[l] - 0.1 * hi), b[l] = fmin(hi, v->v[l] + 0.1 * hi);
    }
  }
  for (int l = 0; l < L; l++) /* what the bisection leaves of a zero value is its last step's width */
    if (v->v[l] < 1e-3 * hi) v->v[l] = 0;
  return AMOE_OK;
}

/* The tree mechanism (fit.h): after the sequence parameters, which it
 * leaves alone. */
static amoe_status fit_tree(amoe_spec *s, const amoe_fit_targets *t, amoe_fit_result *r, amoe_err *e) {
  amoe_routing_fit *rt = &s->model.routing;
  rt->tree_sibling.n = rt->tree_repeat.n = 0;
  if (!t->ntree_layers) {
    return isnan(t->tree_union) ? AMOE_OK : bisect_tree(s, t, r, e);
  }
  /* One union per layer cannot separate the two parts; the rule: repeats
   * first, siblings for what repeats cannot reach (fit.h). */
  AMOE_TRY(bisect_tree_layers(s, t, &rt->tree_repeat, 1, r, e));
  return bisect_tree_layers(s, t, &rt->tree_sibling, TREE_SIBLING_MAX, r, e);
}

/* The largest change of a per-layer value between two fits. */
static double skew_moved(const amoe_layer_values *a, const amoe_layer_values *b) {
  double m = 0;
  for (int l = 0; l < AMOE_MAX_LAYERS && l < (a->n > b->n ? a->n : b->n); l++)
    m = fmax(m, fabs(amoe_layer_value(a, l, 0) - amoe_layer_value(b, l, 0)));
  return a->n && b->n ? m : (a->n != b->n ? 1.0 : 0.0);
}

/* skew per layer, all layers at once (a layer's popularity answers to its
 * own skew), by bisection in [0, 3]: popularity falls as skew grows. */
static amoe_status fit_skew(amoe_spec *s, const amoe_fit_targets *t, amoe_fit_result *r, amoe_err *e) {
  if (!t->npopularity) return AMOE_OK;
  const int L = s->model.moe_layers;
  double a[AMOE_MAX_LAYERS], b[AMOE_MAX_LAYERS];
  amoe_layer_values *sk = &s->model.routing.skew;
  for (int l = 0; l < L; l++) a[l] = 0, b[l] = 4;
  sk->n = L;
  for (int step = 0; step < BISECT_STEPS; step++) {
    for (int l = 0; l < L; l++) sk->v[l] = 0.5 * (a[l] + b[l]);
    AMOE_TRY(eval_popularity(s, t, r->popularity, e));
    r->evaluations++;
    for (int l = 0; l < L; l++)
      if (r->popularity[l] > t->popularity[l]) a[l] = sk->v[l];
      else b[l] = sk->v[l];
  }
  for (int l = 0; l < L; l++) sk->v[l] = 0.5 * (a[l] + b[l]);
  return AMOE_OK;
}

/* score_scale per layer, all layers at once, by bisection on its logarithm
 * in [1/64, 8]: a layer's entropy rises as its scale falls, and nothing
 * else moves (the top-k sets are the same at every scale). */
static amoe_status fit_scale(amoe_spec *s, const amoe_fit_targets *t, int blocks, amoe_fit_result *r, amoe_err *e) {
  if (!t->nentropy) return AMOE_OK;
  const int L = s->model.moe_layers;
  double a[AMOE_MAX_LAYERS], b[AMOE_MAX_LAYERS];
  amoe_layer_values *sc = &s->model.routing.score_scale;
  for (int l = 0; l < L; l++) a[l] = log(1.0 / 64), b[l] = log(8.0);
  sc->n = L;
  for (int step = 0; step < 2 * BISECT_STEPS; step++) {
    for (int l = 0; l < L; l++) sc->v[l] = exp(0.5 * (a[l] + b[l]));
    AMOE_TRY(eval_chain(s, blocks, t->top16_tokens, &r->chain, e));
    r->evaluations++;
    for (int l = 0; l < L; l++)
      if (r->chain.entropy_layer[l] > t->entropy[l]) a[l] = log(sc->v[l]);
      else b[l] = log(sc->v[l]);
  }
  for (int l = 0; l < L; l++) sc->v[l] = exp(0.5 * (a[l] + b[l]));
  return AMOE_OK;
}

/* Halfway from a round's start to what it fitted: the request bias
 * flattens a task's popularity and the skew concentrates a request, so
 * fitted in turn, each overshoots the other's target and the rounds
 * oscillate (with the popularity targets the locality peak went 0.20, 0,
 * 0.95, 0.35, 0.77, 0.46, 0.62 in eight rounds); a relaxed step settles.
 * The noise is not bisected but set by its rule each round, and stays. */
static void relax(amoe_routing_fit *a, const amoe_routing_fit *before) {
  a->locality = 0.5 * (a->locality + before->locality);
  a->locality_first = 0.5 * (a->locality_first + before->locality_first);
  a->locality_last = 0.5 * (a->locality_last + before->locality_last);
  a->request_bias = 0.5 * (a->request_bias + before->request_bias);
  if (a->skew.n == before->skew.n)
    for (int l = 0; l < a->skew.n; l++) a->skew.v[l] = 0.5 * (a->skew.v[l] + before->skew.v[l]);
}

#define FIT_ROUNDS 16

/* Every parameter but drift_tokens, in rounds until none moves by 0.01;
 * from the second round on each step is relaxed (relax). */
static amoe_status fit_rounds(amoe_spec *s, const amoe_fit_targets *t, int blocks, unsigned keep, FILE *progress,
                              amoe_fit_result *r, amoe_err *e) {
  for (int round = 0; round < FIT_ROUNDS; round++) { /* until no parameter moves by 0.01 */
    const amoe_routing_fit before = s->model.routing;
    if (!(keep & AMOE_FIT_KEEP_NOISE)) AMOE_TRY(fit_noise(s, t, blocks, r, e));
    AMOE_TRY(fit_locality(s, t, blocks, r, e));
    AMOE_TRY(fit_bias(s, t, blocks, r, e));
    /* popularity last: a task's mix of requests is flattened by the request
     * bias (each request concentrates on its own experts, following the
     * locality profile), so the skew answers to what the others just set */
    AMOE_TRY(fit_skew(s, t, r, e));
    if (round > 0) relax(&s->model.routing, &before);
    if (progress)
      fprintf(progress,
              "fit round %d: locality %.3f / %.3f / %.3f (peak at %.2f of the depth), request_bias %.3f, noise %.3f, "
              "drift_tokens %.1f\n",
              round + 1, s->model.routing.locality_first, s->model.routing.locality, s->model.routing.locality_last,
              s->model.routing.locality_peak, s->model.routing.request_bias, s->model.routing.noise,
              s->model.routing.drift_tokens);
    const amoe_routing_fit *a = &s->model.routing;
    if (round > 0 && fabs(a->locality - before.locality) < 0.01 && fabs(a->locality_first - before.locality_first) < 0.01 &&
        fabs(a->locality_last - before.locality_last) < 0.01 && fabs(a->request_bias - before.request_bias) < 0.01 &&
        fabs(a->noise - before.noise) < 0.01 &&
        skew_moved(&a->skew, &before.skew) < 0.01)
      break;
  }
  return AMOE_OK;
}

/* The reuse within 8 tokens of s's workload. */
static amoe_status eval_reuse(amoe_spec *s, const amoe_fit_targets *t, int blocks, amoe_fit_result *r, double *w8,
                              amoe_err *e) {
  AMOE_TRY(eval_chain(s, blocks, t->top16_tokens, &r->chain, e));
  r->evaluations++;
  *w8 = r->chain.reuse_within_8;
  return AMOE_OK;
}

#define DRIFT_TOLERANCE 0.01
#define DRIFT_MIN 4.0
#define DRIFT_MAX 4096.0

/* drift_tokens: the fixed bias first; if that repeats experts within 8
 * tokens less often than the target (by more than 0.01), the drift whose
 * refitted bias reaches it, by bisection on its logarithm (reuse falls as drift_tokens grows). */
static amoe_status fit_drift(amoe_spec *s, const amoe_fit_targets *t, int blocks, unsigned keep, FILE *progress,
                             amoe_fit_result *r, amoe_err *e) {
  s->model.routing.drift_tokens = 0;
  AMOE_TRY(fit_rounds(s, t, blocks, keep, progress, r, e));
  double w8;
  AMOE_TRY(eval_reuse(s, t, blocks, r, &w8, e));
  if (progress) fprintf(progress, "fit drift: fixed bias, reuse within 8 %.4f (target %.4f)\n", w8, t->reuse_within_8);
  /* within the statistic's precision of the target: the data ask for no drift */
  if (isnan(t->reuse_within_8) || isnan(t->top16) || w8 >= t->reuse_within_8 - DRIFT_TOLERANCE) return AMOE_OK;
  double a = log(DRIFT_MIN), b = log(DRIFT_MAX); /* reuse at a: highest */
  amoe_routing_fit best = s->model.routing;
  double best_gap = fabs(w8 - t->reuse_within_8);
  for (int step = 0; step < 8; step++) {
    s->model.routing.drift_tokens = exp(0.5 * (a + b));
    AMOE_TRY(fit_rounds(s, t, blocks, keep, progress, r, e));
    AMOE_TRY(eval_reuse(s, t, blocks, r, &w8, e));
    if (progress)
      fprintf(progress, "fit drift: drift_tokens %.1f, reuse within 8 %.4f (target %.4f)\n",
              s->model.routing.drift_tokens, w8, t->reuse_within_8);
    if (fabs(w8 - t->reuse_within_8) < best_gap) best_gap = fabs(w8 - t->reuse_within_8), best = s->model.routing;
    if (w8 < t->reuse_within_8) b = log(s->model.routing.drift_tokens);
    else a = log(s->model.routing.drift_tokens);
  }
  s->model.routing = best;
  return AMOE_OK;
}

amoe_status amoe_fit_routing(amoe_spec *s, const amoe_fit_targets *t, int blocks, unsigned keep, FILE *progress,
                             amoe_fit_result *r, amoe_err *e) {
  memset(r, 0, sizeof *r);
  r->tree_union = NAN;
  /* the model's routing, which is what is fitted: a workload override
   * would hide it */
  amoe_routing_resolve(&s->model.routing, &s->workload.routing, &s->model.routing);
  amoe_routing_unset(&s->workload.routing);
  if (s->workload.source != AMOE_SRC_SYNTHETIC) return amoe_fail(e, AMOE_EINVAL, "fit: the spec's workload must be synthetic");
  const int L = s->model.moe_layers;
  if ((t->nentropy && t->nentropy != L) || (t->npopularity && t->npopularity != L) ||
      (t->ntree_layers && t->ntree_layers != L))
    return amoe_fail(e, AMOE_EINVAL,
                     "fit: entropy_layers, popularity_layers and tree_union_layers need one value per MoE layer (%d), not %d",
                     L, t->nentropy && t->nentropy != L ? t->nentropy
                        : t->npopularity && t->npopularity != L ? t->npopularity : t->ntree_layers);
  if (t->nentropy) s->model.routing.score_scale.n = 0; /* the rounds fit the selection, which no scale moves */
  if (!isnan(t->reuse_within_8) && !(keep & AMOE_FIT_KEEP_DRIFT)) AMOE_TRY(fit_drift(s, t, blocks, keep, progress, r, e));
  else AMOE_TRY(fit_rounds(s, t, blocks, keep, progress, r, e));
  AMOE_TRY(fit_tree(s, t, r, e));
  if (progress && (t->ntree_layers || !isnan(t->tree_union)))
    fprintf(progress, "fit tree: tree_repeat %.3f, tree_sibling %s\n", amoe_layer_value(&s->model.routing.tree_repeat, 0, 0),
            s->model.routing.tree_sibling.n > 1 ? "per layer" : "one value");
  if (t->nentropy) s->workload.top_m = s->model.experts; /* the entropy is the full softmax's: every logit stored */
  AMOE_TRY(fit_scale(s, t, blocks, r, e));
  if (progress && t->nentropy) fprintf(progress, "fit score_scale: %d layers\n", L);
  if (t->npopularity) {
    AMOE_TRY(eval_popularity(s, t, r->popularity, e));
    r->evaluations++;
  }
  AMOE_TRY(eval_chain(s, blocks, t->top16_tokens, &r->chain, e));
  r->evaluations++;
  if (t->tree_nodes) {
    AMOE_TRY(eval_tree(s, t, r->tree_union_layer, &r->tree_union, &r->tree, e));
    r->evaluations++;
  }
  return AMOE_OK;
}

static void row(FILE *f, const char *what, double achieved, double target) {
  if (isnan(target)) fprintf(f, "#   %-34s %8.4f\n", what, achieved);
  else
    fprintf(f, "#   %-34s %8.4f  (target %.4f, %+.1f%%)\n", what, achieved, target,
            100 * (achieved - target) / target);
}

void amoe_fit_write(FILE *f, const amoe_spec *s, const amoe_fit_targets *t, const amoe_fit_result *r, int blocks,
                    const char *how) {
  const amoe_routing_fit *rt = &s->model.routing;
  fprintf(f, "# Routing of %s fitted by `acceptmoe fit` (%s) on %d generated blocks, seed %llu,\n", s->model.name,
          how, blocks, (unsigned long long)s->workload.seed);
  fprintf(f, "# to: %s\n", t->source[0] ? t->source : "(no source given)");
  fprintf(f, "# achieved (target):\n");
  row(f, "adjacent overlap, all layers", r->chain.adjacent_overlap, overlap_target(t, s->model.top_k));
  for (int i = 0; i < t->nanchor; i++) {
    char w[64];
    snprintf(w, sizeof w, "adjacent overlap, layer %d", t->anchor_layer[i]);
    row(f, w, r->chain.overlap_layer[t->anchor_layer[i]], t->anchor_value[i]);
  }
  row(f, "top-16 share per request", r->chain.top16_share, t->top16);
  for (int i = 1; i < AMOE_INSPECT_NW; i++) {
    char w[64];
    snprintf(w, sizeof w, "window union, W = %d", amoe_inspect_windows[i]);
    row(f, w, r->chain.window_union[i], t->window_union[i]);
  }
  row(f, "reuse within 1 token", r->chain.reuse_within_1, t->reuse_within_1);
  row(f, "reuse within 8 tokens", r->chain.reuse_within_8, t->reuse_within_8);
  row(f, "reuse distance, median (tokens)", r->chain.reuse_median, t->reuse_median);
  if (!isnan(r->tree_union)) {
    char w[64];
    double want = t->tree_union;
    if (t->ntree_layers) {
      want = 0;
      for (int l = 0; l < t->ntree_layers; l++) want += t->tree_union_layer[l] / t->ntree_layers;
    }
    snprintf(w, sizeof w, "tree union, %d nodes", t->tree_nodes);
    row(f, w, r->tree_union, want);
    if (t->ntree_layers) {
      double worst = 0;
      int at = 0;
      for (int l = 0; l < t->ntree_layers; l++)
        if (fabs(r->tree_union_layer[l] - t->tree_union_layer[l]) > worst)
          worst = fabs(r->tree_union_layer[l] - t->tree_union_layer[l]), at = l;
      row(f, "  tree union, layer 0", r->tree_union_layer[0], t->tree_union_layer[0]);
      fprintf(f, "#   %-34s %8.4f  (layer %d)\n", "  worst layer's |error| (experts)", worst, at);
    }
    double p90 = 0, p99 = 0; /* what the union per layer does not say (docs/metrics.md, "Passes") */
    for (int l = 0; l < r->tree.layers; l++)
      p90 += r->tree.union_p90_layer[l] / r->tree.layers, p99 += r->tree.union_p99_layer[l] / r->tree.layers;
    fprintf(f, "#   %-34s %8.4f / %.4f\n", "  tree union p90 / p99, layer mean", p90, p99);
    row(f, "  accepted path's union", r->tree.path_union_mean, NAN);
    row(f, "  novelty against the last 8 tokens", r->tree.novelty_mean, NAN);
    fprintf(f, "#   %-34s %8.4f / %.4f\n", "  top-32 pass overlap, mass/utility", r->tree.block_top32_overlap,
            r->tree.block_top32_utility_overlap);
  }
  if (t->nentropy) {
    double got = 0, want = 0, worst = 0;
    for (int l = 0; l < t->nentropy; l++) {
      got += r->chain.entropy_layer[l] / t->nentropy, want += t->entropy[l] / t->nentropy;
      worst = fmax(worst, fabs(r->chain.entropy_layer[l] - t->entropy[l]));
    }
    row(f, "router entropy (nats), layer mean", got, want);
    fprintf(f, "#   %-34s %8.4f\n", "  worst layer's |error| (nats)", worst);
    row(f, "top-k mass of the softmax", r->chain.topk_mass_mean, NAN);
    row(f, "renormalised top-1 weight", r->chain.top1_weight_mean, NAN);
  }
  if (t->npopularity) {
    double got = 0, want = 0, worst = 0;
    for (int l = 0; l < t->npopularity; l++) {
      got += r->popularity[l] / t->npopularity, want += t->popularity[l] / t->npopularity;
      worst = fmax(worst, fabs(r->popularity[l] - t->popularity[l]) / t->popularity[l]);
    }
    row(f, "effective experts over prompts", got, want);
    fprintf(f, "#   %-34s %8.4f\n", "  worst layer's relative error", worst);
  }
  fprintf(f, "routing:\n  locality: %.4f\n  locality_first: %.4f\n  locality_last: %.4f\n  locality_peak: %.4f\n"
             "  request_bias: %.4f\n  noise: %.4f\n  drift_tokens: %.1f\n",
          rt->locality, rt->locality_first, rt->locality_last, rt->locality_peak, rt->request_bias, rt->noise,
          rt->drift_tokens);
  const amoe_layer_values *lists[4] = {&rt->skew, &rt->score_scale, &rt->tree_sibling, &rt->tree_repeat};
  const char *names[4] = {"skew", "score_scale", "tree_sibling", "tree_repeat"};
  for (int i = 2; i < 4; i++) /* the tree's single values */
    if (lists[i]->n == 1) fprintf(f, "  %s: %.4f\n", names[i], lists[i]->v[0]);
  for (int i = 0; i < 4; i++) /* fitted per layer: one value each */
    if (lists[i]->n > 1) {
      fprintf(f, "  %s: [", names[i]);
      for (int l = 0; l < lists[i]->n; l++) fprintf(f, "%s%.4f", l ? (l % 12 ? ", " : ",\n    ") : "", lists[i]->v[l]);
      fputs("]\n", f);
    }
}
