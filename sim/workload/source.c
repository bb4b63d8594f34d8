#include "source.h"
#include "grow.h"

#include <errno.h>
#include <limits.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "genpool.h"
#include "jsonl.h"
#include "safetensors.h"
#include "trace.h"

const char *const amoe_source_kind_names[] = {"synthetic", "trace", "blocks-jsonl", "routing-jsonl",
                                              "routing-safetensors", NULL};
const char *const amoe_routing_blocks_names[] = {"chain", "hybrid", NULL};
const char *const amoe_prefill_names[] = {"through", "bypass", NULL};
const char *const amoe_prefill_schedule_names[] = {"separate", "chunked", NULL};

/* The generator's per-layer parameters, which its amoe_gen_params point into. */
typedef struct {
  double locality[AMOE_MAX_LAYERS], request_bias[AMOE_MAX_LAYERS], skew[AMOE_MAX_LAYERS], score_scale[AMOE_MAX_LAYERS];
  double tree_sibling[AMOE_MAX_LAYERS], tree_repeat[AMOE_MAX_LAYERS];
} gen_layers;

struct amoe_source {
  int kind;
  amoe_workload_spec w;
  amoe_model model;
  amoe_gen *gen;
  amoe_genpool *pool; /* instead of gen when generating on several threads */
  amoe_trace_reader *trace;
  amoe_jsonl_reader *jsonl;
  uint16_t *replay;
  int replay_n;
  int m;
  uint64_t produced;
  uint32_t request;
  int in_request;
  /* hybrid routing-jsonl: the real token at the next block's root */
  int hybrid, prob, tok;
  uint32_t step;
  char *prov;
  gen_layers layers;   /* the generator's per-layer parameters */
  amoe_gen_params gp;  /* the synthetic generator's parameters (prefill) */
  amoe_gen *prefill;   /* a generator of its own for prefills, opened on first use */
  /* a slot's reader at batch > 1 (amoe_source_slot): one request at
   * a time, slot_blocks blocks from block index slot_first */
  int slot, slot_blocks, slot_done;
  uint64_t slot_first;
  amoe_logits want; /* what a trace's blocks carry (amoe_source_want_logits) */
  amoe_source **slots; /* the slots' readers, opened on first use and kept (their buffers with them) */
  int nslots;
};

int amoe_source_score_shape(const amoe_source *s, double *entropy, double *topk_mass) {
  return s->jsonl && amoe_jsonl_score_shape(s->jsonl, entropy, topk_mass);
}

int amoe_default_top_m(int experts, int top_k) {
  int m = 4 * top_k > 32 ? 4 * top_k : 32;
  return m < experts ? m : experts;
}

amoe_status amoe_replay_load(const char *path, uint16_t **out, int *n, amoe_err *e) {
  *out = NULL;
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return amoe_fail(e, AMOE_EIO, "%s: cannot open: %s", path, strerror(errno));
  uint16_t *v = NULL;
  int cnt = 0;
  size_t cap = 0;
  char *line = NULL;
  size_t lcap = 0;
  long ln = 0;
  amoe_status st = AMOE_OK;
  while (st == AMOE_OK && getline(&line, &lcap, f) >= 0) {
    ln++;
    const char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '\n' || *p == 0 || *p == '#') continue;
    long vals[4096];
    int nv = 0;
    if (*p == '{') { /* Spec-Bench answer record */
      json_error_t je;
      json_t *o = json_loads(line, 0, &je);
      json_t *al = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "accept_lengths");
      if (!o || !json_is_array(al)) {
        st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: expected choices[0].accept_lengths", path, ln);
      } else {
        for (size_t i = 0; i < json_array_size(al) && nv < 4096; i++)
          vals[nv++] = (long)json_number_value(json_array_get(al, i));
      }
      json_decref(o);
    } else {
      char *end;
      while (*p && *p != '\n' && nv < 4096) {
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p) {
          st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld:%ld: expected an integer accept length", path, ln,
                         (long)(p - line) + 1);
          break;
        }
        vals[nv++] = x;
        p = end;
        while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\r') p++;
      }
    }
    for (int i = 0; i < nv && st == AMOE_OK; i++) {
      if (vals[i] < 1 || vals[i] > 1000) {
        st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: accept length %ld out of range 1..1000", path, ln, vals[i]);
        break;
      }
      uint16_t *nv2 = amoe_grow(v, &cap, (size_t)cnt + 1, sizeof *v, 4096);
      if (!nv2) {
        st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
        break;
      }
      v = nv2;
      v[cnt++] = (uint16_t)vals[i];
    }
  }
  free(line);
  fclose(f);
  if (st == AMOE_OK && cnt == 0) st = amoe_fail(e, AMOE_EFORMAT, "%s: no accept lengths found", path);
  if (st != AMOE_OK) {
    free(v);
    return st;
  }
  *out = v;
  *n = cnt;
  return AMOE_OK;
}

static amoe_status check_sig(const char *path, int L, int E, int k, const amoe_model *m, amoe_err *e) {
  if (L != m->moe_layers || E != m->experts || k != m->top_k)
    return amoe_fail(e, AMOE_EINVAL,
                     "%s: trace is for %d MoE layers x %d experts, top-%d; the model %s has %d x %d, top-%d",
                     path, L, E, k, m->name, m->moe_layers, m->experts, m->top_k);
  return AMOE_OK;
}

/* The generator's parameters from a workload spec (m: the default): the
 * model's routing with the spec's workload.routing overrides in place
 * (amoe_routing_resolve), its per-layer values in lay. */
static amoe_gen_params gen_params(const amoe_workload_spec *w, const amoe_model *model, gen_layers *lay) {
  amoe_gen_params p = {0};
  amoe_routing_fit r;
  amoe_routing_resolve(&model->routing, &w->routing, &r);
  amoe_model m = *model;
  m.routing = r;
  const int L = model->moe_layers < AMOE_MAX_LAYERS ? model->moe_layers : AMOE_MAX_LAYERS;
  p.seed = w->seed;
  p.layers = model->moe_layers;
  p.experts = model->experts;
  p.top_k = model->top_k;
  p.m = w->top_m > 0 ? w->top_m : amoe_default_top_m(model->experts, model->top_k);
  p.depth = w->depth;
  p.branch = w->top_k;
  p.nodes = w->nodes;
  p.candidates = w->candidates > w->nodes ? w->candidates : w->nodes;
  p.tau = w->tau;
  p.temperature = r.temperature;
  p.locality = r.locality;
  for (int l = 0; l < L; l++) lay->locality[l] = amoe_model_locality_at(&m, l, model->moe_layers);
  p.locality_layers = lay->locality;
  p.layer_correlation = r.layer_correlation;
  const double skew0 = amoe_gen_default_skew(model->experts);
  p.skew = amoe_layer_value(&r.skew, 0, skew0);
  if (r.skew.n > 1) {
    for (int l = 0; l < L; l++) lay->skew[l] = amoe_layer_value(&r.skew, l, skew0);
    p.skew_layers = lay->skew;
  }
  int scaled = 0;
  for (int l = 0; l < L; l++) scaled |= (lay->score_scale[l] = amoe_layer_value(&r.score_scale, l, 1.0)) != 1.0;
  p.score_scale_layers = scaled ? lay->score_scale : NULL;
  p.noise = r.noise;
  int tree = 0; /* the tree mechanism, only where some layer has it */
  for (int l = 0; l < L; l++) {
    tree |= (lay->tree_sibling[l] = amoe_layer_value(&r.tree_sibling, l, 0)) > 0;
    tree |= (lay->tree_repeat[l] = amoe_layer_value(&r.tree_repeat, l, 0)) > 0;
  }
  p.tree_sibling_layers = tree ? lay->tree_sibling : NULL;
  p.tree_repeat_layers = tree ? lay->tree_repeat : NULL;
  p.request_bias = r.request_bias;
  if (p.request_bias > 0) {
    /* a request's topic reaches the router through the context, as
     * locality does: its concentration follows the locality profile (none
     * where the router sees the token alone), request_bias at the peak */
    double mx = 0;
    for (int l = 0; l < L; l++) mx = lay->locality[l] > mx ? lay->locality[l] : mx;
    for (int l = 0; l < L; l++) lay->request_bias[l] = mx > 0 ? p.request_bias * lay->locality[l] / mx : p.request_bias;
    p.request_bias_layers = lay->request_bias;
  }
  p.drift_tokens = r.drift_tokens;
  p.tokens_per_request = w->tokens_per_request;
  p.prefill_sample = w->prefill_sample;
  p.route_hold = w->route_hold;
  amoe_err ignored; /* (the spec loader checked the curve against the chain) */
  if (w->al.n > 0 && amoe_gen_chain_accept(w->al.v, w->al.n, w->depth, p.chain_accept, &ignored) == AMOE_OK)
    p.chain_accept_n = w->depth;
  return p;
}

/* What a generated workload was made from (provenance JSON). */
static json_t *gen_provenance(const amoe_source *s, const amoe_gen_params *p) {
  const amoe_workload_spec *w = &s->w;
  json_t *o = json_pack("{s:s, s:I, s:s, s:i, s:i, s:i, s:i, s:i}", "source", "synthetic", "seed",
                        (json_int_t)w->seed, "model", s->model.name, "m", p->m, "depth", p->depth, "top_k",
                        p->branch, "nodes", p->nodes, "candidates", p->candidates);
  json_object_set_new(o, "routing",
                      json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "temperature", p->temperature, "locality",
                                p->locality, "layer_correlation", p->layer_correlation, "skew", p->skew, "noise",
                                p->noise, "request_bias", p->request_bias));
  if (p->drift_tokens > 0 && p->request_bias > 0)
    json_object_set_new(json_object_get(o, "routing"), "drift_tokens", json_real(p->drift_tokens));
  amoe_routing_fit r;
  amoe_routing_resolve(&s->model.routing, &w->routing, &r);
  json_t *ro = json_object_get(o, "routing");
  if (r.locality_first != r.locality || r.locality_last != r.locality) /* a profile over the layers */
    json_object_set_new(ro, "locality_profile",
                        json_pack("{s:f, s:f, s:f, s:f}", "first", r.locality_first, "peak", r.locality, "peak_at",
                                  r.locality_peak, "last", r.locality_last));
  { /* per-layer values, only when they are there */
    const double *vals[4] = {p->skew_layers, p->score_scale_layers, p->tree_sibling_layers, p->tree_repeat_layers};
    const char *names[4] = {"skew_layers", "score_scale", "tree_sibling", "tree_repeat"};
    for (int which = 0; which < 4; which++) {
      if (!vals[which]) continue;
      json_t *a = json_array();
      for (int l = 0; l < p->layers; l++) json_array_append_new(a, json_real(vals[which][l]));
      json_object_set_new(ro, names[which], a);
    }
  }
  if (w->al.n > 0) {
    json_object_set_new(o, "acceptance", json_string("al"));
    json_t *a = json_array();
    for (int i = 0; i < w->al.n; i++) json_array_append_new(a, json_real(w->al.v[i]));
    json_object_set_new(o, "al", a);
  } else if (w->replay[0]) {
    json_object_set_new(o, "acceptance", json_string("replay"));
    json_object_set_new(o, "replay_steps", json_integer(s->replay_n));
  } else {
    json_object_set_new(o, "acceptance", json_string("tau"));
    json_object_set_new(o, "tau", json_real(w->tau));
    json_object_set_new(o, "accept_scale", json_real(amoe_source_accept_scale(s)));
  }
  return o;
}

/* The generator (on `threads` threads), with the spec's replayed accept
 * lengths if it names them. */
static amoe_status open_generator(amoe_source *s, amoe_gen_params *p, int threads, amoe_err *e) {
  if (s->w.replay[0]) {
    AMOE_TRY(amoe_replay_load(s->w.replay, &s->replay, &s->replay_n, e));
    p->replay = s->replay;
    p->replay_n = s->replay_n;
  }
  return threads > 1 ? amoe_genpool_open(&s->pool, p, threads, e) : amoe_gen_open(&s->gen, p, e);
}

/* o as compact JSON text in buf; frees o. */
static void json_text(char *buf, size_t n, json_t *o) {
  char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
  snprintf(buf, n, "%s", txt ? txt : "{}");
  free(txt);
  json_decref(o);
}

amoe_status amoe_source_open(amoe_source **out, const amoe_workload_spec *w, const amoe_model *model,
                             amoe_err *e) {
  *out = NULL;
  amoe_source *s = calloc(1, sizeof *s);
  if (!s) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  s->kind = w->source;
  s->want = AMOE_LOGITS_ALL;
  s->w = *w;
  s->model = *model;
  amoe_status st = AMOE_OK;
  char buf[2048];
  if (w->source == AMOE_SRC_SYNTHETIC) {
    amoe_gen_params p = gen_params(w, model, &s->layers);
    st = open_generator(s, &p, w->threads, e);
    s->m = p.m;
    s->gp = p;
    json_text(buf, sizeof buf, gen_provenance(s, &p));
  } else if (w->source == AMOE_SRC_TRACE) {
    st = amoe_trace_open(&s->trace, w->path, e);
    if (st == AMOE_OK) {
      const amoe_trace_info *ti = amoe_trace_info_of(s->trace);
      st = check_sig(w->path, ti->layers, ti->experts, ti->top_k, model, e);
      s->m = ti->m;
      snprintf(buf, sizeof buf, "{\"source\":\"trace\",\"blocks\":%llu,\"provenance\":%s}",
               (unsigned long long)ti->blocks, ti->provenance[0] ? ti->provenance : "{}");
    }
  } else {
    if (w->source == AMOE_SRC_BLOCKS_JSONL)
      st = amoe_blocks_jsonl_open(&s->jsonl, w->path, model->moe_layers, model->experts, e);
    else
      st = (w->source == AMOE_SRC_ROUTING_SAFETENSORS ? amoe_routing_safetensors_open : amoe_routing_jsonl_open)(
          &s->jsonl, w->path, model->moe_layers, model->experts, model->top_k, model->router, w->window, e);
    if (st == AMOE_OK) s->m = amoe_jsonl_m(s->jsonl);
    if (st == AMOE_OK && w->source != AMOE_SRC_BLOCKS_JSONL && w->routing_blocks == AMOE_ROUTING_HYBRID) {
      /* generated trees (the spec's tree, acceptance and routing), storing
       * the top-k as the real tokens do; a problem is one request, which
       * ends with its tokens, not at tokens_per_request */
      amoe_gen_params p = gen_params(w, model, &s->layers);
      p.m = s->m;
      p.tokens_per_request = INT_MAX;
      st = open_generator(s, &p, 1, e);
      if (st == AMOE_OK) {
        s->hybrid = 1;
        json_t *o = json_pack("{s:s, s:s, s:i, s:s}", "source", amoe_source_kind_names[AMOE_SRC_ROUTING_JSONL], "blocks",
                              amoe_routing_blocks_names[AMOE_ROUTING_HYBRID], "m", s->m,
                              "note", amoe_jsonl_note(s->jsonl));
        json_object_set_new(o, "siblings", gen_provenance(s, &p));
        json_text(buf, sizeof buf, o);
      }
    } else if (st == AMOE_OK) {
      snprintf(buf, sizeof buf, "{\"source\":\"%s\",\"m\":%d,\"window\":%d,\"note\":\"%s\"}",
               amoe_source_kind_names[w->source == AMOE_SRC_BLOCKS_JSONL ? AMOE_SRC_BLOCKS_JSONL : AMOE_SRC_ROUTING_JSONL],
               s->m, w->window,
               amoe_jsonl_note(s->jsonl));
    }
  }
  if (st == AMOE_OK && !(s->prov = strdup(buf))) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  if (st != AMOE_OK) {
    amoe_source_close(s);
    return st;
  }
  *out = s;
  return AMOE_OK;
}

/* A hybrid block: a generated tree for the current problem whose natural
 * accepted path (root first) takes the routes of the next real tokens, as
 * many as it has; the last block of a problem accepts no more than the
 * tokens left. */
static amoe_status hybrid_next(amoe_source *s, amoe_block *b, amoe_err *e) {
  while (s->prob < amoe_routing_problems(s->jsonl) && s->tok >= amoe_routing_tokens(s->jsonl, s->prob)) {
    s->prob++;
    s->tok = 0;
    s->step = 0;
  }
  if (s->prob >= amoe_routing_problems(s->jsonl)) return AMOE_END;
  if (s->step == 0) amoe_gen_begin_request(s->gen, (uint32_t)s->prob);
  const amoe_status grc = amoe_gen_next(s->gen, b, e);
  if (grc == AMOE_END)
    return amoe_fail(e, AMOE_EINVAL, "problem %d: the generated request ended before its real tokens did", s->prob);
  AMOE_TRY(grc);
  const int left = amoe_routing_tokens(s->jsonl, s->prob) - s->tok, k = s->m;
  int q = 0;
  for (int t = 0; t >= 0; q++) { /* down the accepted path */
    if (q >= left) { /* out of real tokens: the path ends before t */
      for (int u = t; u < b->n; u++) b->accepted[u] = 0;
      break;
    }
    for (int l = 0; l < b->layers; l++) {
      const uint16_t *id;
      const amoe_f16 *z;
      amoe_routing_token(s->jsonl, s->prob, l, s->tok + q, &id, &z);
      memcpy((uint16_t *)amoe_block_ids(b, l, t), id, (size_t)k * sizeof *id);
      memcpy((amoe_f16 *)amoe_block_logits(b, l, t), z, (size_t)k * sizeof *z);
    }
    const int par = t;
    t = -1;
    for (int u = par + 1; u < b->n && t < 0; u++)
      if (b->parent[u] == par && b->accepted[u]) t = u;
  }
  b->softmax_inv = NULL; /* the real nodes' normalisers differ from the generated ones */
  b->request = (uint32_t)s->prob;
  b->step = s->step++;
  s->tok += q;
  return amoe_block_finish(b, AMOE_CHECK_ALL, e);
}

/* b as a block of the source's shape that owns its arrays (what the
 * generators write into). */
static void own_block(const amoe_source *s, amoe_block *b) {
  if (b->layers != s->model.moe_layers || b->m != s->m || b->experts != s->model.experts || !b->owns) {
    amoe_block_free(b);
    amoe_block_init(b, s->model.moe_layers, s->model.experts, s->m);
  }
}

amoe_status amoe_source_next(amoe_source *s, amoe_block *b, amoe_err *e) {
  if (s->slot) {
    if (s->slot_done >= s->slot_blocks) return AMOE_END;
    if (amoe_interrupt) return amoe_fail(e, AMOE_EINTR, "interrupted");
    amoe_status rc;
    if (s->trace) {
      rc = amoe_trace_next(s->trace, b, e);
    } else {
      own_block(s, b);
      rc = amoe_gen_next(s->gen, b, e);
      if (rc == AMOE_END) /* (the count said it has more) */
        return amoe_fail(e, AMOE_EINVAL, "request %llu ended after %d of its %d blocks",
                         (unsigned long long)s->request, s->slot_done, s->slot_blocks);
      if (rc == AMOE_OK) b->index = s->slot_first + (uint64_t)s->slot_done;
    }
    if (rc == AMOE_OK) s->slot_done++;
    return rc;
  }
  if (s->w.blocks > 0 && s->produced >= (uint64_t)s->w.blocks) return AMOE_END;
  if (amoe_interrupt) return amoe_fail(e, AMOE_EINTR, "interrupted");
  amoe_status rc;
  if (s->hybrid) {
    own_block(s, b);
    rc = hybrid_next(s, b, e);
    if (rc == AMOE_OK) b->index = s->produced;
  } else if (s->pool) {
    rc = amoe_genpool_next(s->pool, b, e);
    if (rc == AMOE_OK) b->index = s->produced;
  } else if (s->gen) {
    own_block(s, b);
    for (;;) {
      if (!s->in_request) {
        amoe_gen_begin_request(s->gen, s->request);
        s->in_request = 1;
      }
      rc = amoe_gen_next(s->gen, b, e);
      if (rc != AMOE_END) break;
      s->in_request = 0;
      s->request++;
    }
    if (rc == AMOE_OK) b->index = s->produced;
  } else if (s->trace) {
    rc = amoe_trace_next(s->trace, b, e);
  } else {
    if (b->layers != s->model.moe_layers || b->m != s->m || b->experts != s->model.experts) {
      amoe_block_free(b);
      amoe_block_init(b, s->model.moe_layers, s->model.experts, s->m);
    }
    rc = amoe_jsonl_next(s->jsonl, b, e);
  }
  if (rc == AMOE_OK) s->produced++;
  return rc;
}

amoe_status amoe_source_rewind(amoe_source *s, amoe_err *e) {
  s->produced = 0;
  s->request = 0;
  s->in_request = 0;
  s->prob = s->tok = 0;
  s->step = 0;
  if (s->pool) return amoe_genpool_rewind(s->pool, e);
  if (s->trace) return amoe_trace_rewind(s->trace, e);
  if (s->jsonl) return amoe_jsonl_rewind(s->jsonl, e);
  return AMOE_OK;
}

amoe_status amoe_source_prefill(amoe_source *s, uint32_t request, int tokens, int chunk, uint16_t *counts, int *made,
                                amoe_err *e) {
  *made = 0;
  if (s->kind != AMOE_SRC_SYNTHETIC || tokens <= 0) return AMOE_OK;
  if (!s->prefill) {
    amoe_gen_params p = s->gp;
    p.accept_scale = amoe_source_accept_scale(s); /* (no calibration: prefills draw no tree) */
    if (!(p.accept_scale > 0)) p.accept_scale = 1;
    AMOE_TRY(amoe_gen_open(&s->prefill, &p, e));
  }
  AMOE_TRY(amoe_gen_prefill(s->prefill, request, tokens, chunk, counts, e));
  *made = 1;
  return AMOE_OK;
}

/* The parameters of another generator of s's workload: calibrated once
 * (s's acceptance scale; gp borrows s's replayed accept lengths). */
static amoe_gen_params sibling_params(const amoe_source *s) {
  amoe_gen_params p = s->gp;
  p.accept_scale = amoe_source_accept_scale(s);
  return p;
}

/* A batch's slots seek to requests: a generator's or a trace's. */
static amoe_status batch_source(const amoe_source *s, amoe_err *e) {
  if (s->kind == AMOE_SRC_SYNTHETIC || s->kind == AMOE_SRC_TRACE) return AMOE_OK;
  return amoe_fail(e, AMOE_EINVAL, "a batch reads requests from a synthetic workload or a trace, not %s",
                   amoe_source_kind_names[s->kind]);
}

/* One more request into the list. */
static amoe_status add_request(amoe_source_request **v, size_t *cap, int *n, uint32_t id, uint64_t first, int blocks,
                               amoe_err *e) {
  amoe_source_request *nv = amoe_grow(*v, cap, (size_t)*n + 1, sizeof **v, 64);
  if (!nv) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  *v = nv;
  nv[(*n)++] = (amoe_source_request){id, first, blocks, 0};
  return AMOE_OK;
}

amoe_status amoe_source_requests(amoe_source *s, amoe_source_request **out, int *n, amoe_err *e) {
  *out = NULL;
  *n = 0;
  amoe_source_request *v = NULL;
  size_t cap = 0;
  amoe_status st = AMOE_OK;
  const uint64_t limit = s->w.blocks > 0 ? (uint64_t)s->w.blocks : UINT64_MAX;
  if (s->kind == AMOE_SRC_SYNTHETIC) {
    if (s->w.blocks <= 0)
      return amoe_fail(e, AMOE_EINVAL, "workload.blocks: a batch of generated requests needs a number of blocks");
    const amoe_gen_params p = sibling_params(s);
    amoe_gen *g = NULL;
    st = amoe_gen_open(&g, &p, e);
    uint64_t at = 0;
    for (uint32_t r = 0; st == AMOE_OK && at < limit; r++) {
      int nb = 0;
      st = amoe_gen_count_blocks(g, r, (int)(limit - at < INT_MAX ? limit - at : INT_MAX), &nb, e);
      if (st == AMOE_OK) st = add_request(&v, &cap, n, r, at, nb, e);
      at += (uint64_t)nb;
    }
    amoe_gen_close(g);
  } else if (s->kind == AMOE_SRC_TRACE) {
    const uint64_t blocks = amoe_trace_info_of(s->trace)->blocks;
    for (uint64_t at = 0; st == AMOE_OK && at < limit && at < blocks; at++) {
      uint32_t rq = 0;
      st = amoe_trace_block_request(s->trace, at, &rq, e);
      if (st != AMOE_OK) break;
      if (*n > 0 && v[*n - 1].id == rq) v[*n - 1].blocks++;
      else st = add_request(&v, &cap, n, rq, at, 1, e);
    }
  } else {
    st = batch_source(s, e);
  }
  if (st != AMOE_OK) {
    free(v);
    *n = 0;
    return st;
  }
  *out = v;
  return AMOE_OK;
}

amoe_status amoe_source_requests_planned(amoe_source *s, const amoe_arrival *plan, int n, amoe_source_request **out,
                                         amoe_err *e) {
  *out = NULL;
  if (s->kind != AMOE_SRC_SYNTHETIC)
    return amoe_fail(e, AMOE_EINVAL, "open arrivals (workload.arrival) read generated requests, not %s",
                     amoe_source_kind_names[s->kind]);
  amoe_source_request *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  if (!v) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  const amoe_gen_params p = sibling_params(s);
  amoe_gen *g = NULL;
  amoe_status st = amoe_gen_open(&g, &p, e);
  uint64_t at = 0;
  for (int r = 0; st == AMOE_OK && r < n; r++) {
    int nb = 0;
    amoe_gen_set_tokens(g, plan[r].output_tokens);
    st = amoe_gen_count_blocks(g, (uint32_t)r, INT_MAX, &nb, e);
    v[r] = (amoe_source_request){(uint32_t)r, at, nb, plan[r].output_tokens};
    at += (uint64_t)nb;
  }
  amoe_gen_close(g);
  if (st != AMOE_OK) {
    free(v);
    return st;
  }
  *out = v;
  return AMOE_OK;
}

static amoe_status open_slot(amoe_source **out, amoe_source *s, amoe_err *e) {
  *out = NULL;
  AMOE_TRY(batch_source(s, e));
  amoe_source *c = calloc(1, sizeof *c);
  if (!c) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  c->kind = s->kind;
  c->w = s->w;
  c->model = s->model;
  c->m = s->m;
  c->slot = 1;
  c->gp = s->gp;
  amoe_status st = AMOE_OK;
  if (s->kind == AMOE_SRC_TRACE) {
    st = amoe_trace_open(&c->trace, s->w.path, e);
    if (st == AMOE_OK) amoe_source_want_logits(c, s->want);
  } else {
    const amoe_gen_params p = sibling_params(s); /* (the parent outlives its slots) */
    amoe_gen *like = s->gen; /* one routing structure for every slot: it stays in the cache */
    for (int i = 0; !like && i < s->nslots; i++) like = s->slots[i] ? s->slots[i]->gen : NULL;
    st = amoe_gen_open_sibling(&c->gen, &p, like, e);
  }
  if (st == AMOE_OK && !(c->prov = strdup(s->prov ? s->prov : "{}"))) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  if (st != AMOE_OK) {
    amoe_source_close(c);
    return st;
  }
  *out = c;
  return AMOE_OK;
}

amoe_status amoe_source_slot(amoe_source *s, int i, amoe_source **out, amoe_err *e) {
  *out = NULL;
  if (i >= s->nslots) {
    amoe_source **v = realloc(s->slots, (size_t)(i + 1) * sizeof *v);
    if (!v) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
    for (int j = s->nslots; j <= i; j++) v[j] = NULL;
    s->slots = v;
    s->nslots = i + 1;
  }
  if (!s->slots[i]) AMOE_TRY(open_slot(&s->slots[i], s, e));
  amoe_source_want_logits(s->slots[i], s->want);
  *out = s->slots[i];
  return AMOE_OK;
}

amoe_status amoe_source_seek(amoe_source *s, const amoe_source_request *rq, amoe_err *e) {
  s->slot_first = rq->first;
  s->slot_blocks = rq->blocks;
  s->slot_done = 0;
  s->request = rq->id;
  if (s->trace) return amoe_trace_seek(s->trace, rq->first, e);
  amoe_gen_set_tokens(s->gen, rq->tokens > 0 ? rq->tokens : s->gp.tokens_per_request);
  amoe_gen_begin_request(s->gen, rq->id);
  return AMOE_OK;
}

void amoe_source_close(amoe_source *s) {
  if (!s) return;
  for (int i = 0; i < s->nslots; i++) amoe_source_close(s->slots[i]);
  free(s->slots);
  amoe_gen_close(s->prefill);
  amoe_gen_close(s->gen);
  amoe_genpool_close(s->pool);
  amoe_trace_close_reader(s->trace);
  amoe_jsonl_close(s->jsonl);
  free(s->replay);
  free(s->prov);
  free(s);
}

const char *amoe_source_provenance(const amoe_source *s) { return s->prov; }
int amoe_source_m(const amoe_source *s) { return s->m; }
void amoe_source_want_logits(amoe_source *s, amoe_logits want) {
  s->want = want;
  if (s->trace) amoe_trace_want_logits(s->trace, want);
}
double amoe_source_accept_scale(const amoe_source *s) {
  return s->pool ? amoe_genpool_accept_scale(s->pool) : s->gen ? amoe_gen_accept_scale(s->gen) : 0;
}
