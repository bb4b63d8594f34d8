#include "jsonl.h"
#include "routing_records.h"
#include "grow.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "router.h"
#include "sort.h"


/* Adds one record's full logits lg[experts] (its top-k: ids) to the score shape. */
int amoe_routing_shape_add(amoe_jsonl_reader *r, int layer, const float *lg, const uint16_t *ids, int k) {
  if (!r->shape_n) {
    r->shape_h = calloc((size_t)r->layers, sizeof *r->shape_h);
    r->shape_k = calloc((size_t)r->layers, sizeof *r->shape_k);
    r->shape_n = calloc((size_t)r->layers, sizeof *r->shape_n);
    if (!r->shape_h || !r->shape_k || !r->shape_n) return 0;
  }
  double z[AMOE_MAX_EXPERTS], mx = lg[0], sum, top = 0;
  for (int x = 0; x < r->experts; x++) {
    z[x] = lg[x];
    mx = lg[x] > mx ? lg[x] : mx;
  }
  r->shape_h[layer] += amoe_router_entropy(z, r->experts, mx, &sum);
  for (int j = 0; j < k; j++) top += exp(lg[ids[j]] - mx);
  r->shape_k[layer] += top / sum;
  r->shape_n[layer]++;
  return 1;
}

int amoe_jsonl_score_shape(const amoe_jsonl_reader *r, double *entropy, double *topk_mass) {
  if (!r->shape_n) return 0;
  double kn = 0, k = 0;
  for (int l = 0; l < r->layers; l++) {
    if (!r->shape_n[l]) return 0;
    entropy[l] = r->shape_h[l] / r->shape_n[l];
    k += r->shape_k[l];
    kn += r->shape_n[l];
  }
  *topk_mass = k / kn;
  return 1;
}

static void jerr(amoe_err *e, const char *path, long line, const json_error_t *je) {
  amoe_fail(e, AMOE_EFORMAT, "%s:%ld:%d: %s", path, line, je->column, je->text);
}

static amoe_status reader_new(amoe_jsonl_reader **out, const char *path, amoe_err *e) {
  amoe_jsonl_reader *r = calloc(1, sizeof *r);
  if (!r || !(r->path = strdup(path))) {
    free(r);
    return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  }
  *out = r;
  return AMOE_OK;
}

/* ------------------------------------------------------------ blocks-jsonl */

/* Reads the next non-blank line into r->line; 0 at end. */
static int next_line(amoe_jsonl_reader *r) {
  for (;;) {
    ssize_t got = getline(&r->line, &r->line_cap, r->f);
    if (got < 0) return 0;
    r->lineno++;
    for (ssize_t i = 0; i < got; i++)
      if (r->line[i] != ' ' && r->line[i] != '\t' && r->line[i] != '\n' && r->line[i] != '\r') return 1;
  }
}

amoe_status amoe_blocks_jsonl_open(amoe_jsonl_reader **out, const char *path, int layers, int experts,
                                   amoe_err *e) {
  amoe_jsonl_reader *r = NULL;
  AMOE_TRY(reader_new(&r, path, e));
  r->layers = layers;
  r->experts = experts;
  r->f = fopen(path, "rb");
  if (!r->f) {
    amoe_status st = amoe_fail(e, AMOE_EIO, "%s: cannot open: %s", path, strerror(errno));
    amoe_jsonl_close(r);
    return st;
  }
  /* The first block fixes m: E for full vectors, else its pair count. */
  r->m = experts;
  if (next_line(r)) {
    json_error_t je;
    json_t *o = json_loads(r->line, 0, &je);
    if (o) {
      json_t *tk = json_object_get(o, "topk");
      json_t *a = json_array_get(json_array_get(tk, 0), 0);
      if (json_is_array(a) && json_array_size(a) > 0 && (int)json_array_size(a) <= experts)
        r->m = (int)json_array_size(a);
      json_decref(o);
    }
  }
  amoe_status st = amoe_jsonl_rewind(r, e);
  if (st != AMOE_OK) {
    amoe_jsonl_close(r);
    return st;
  }
  *out = r;
  return AMOE_OK;
}

#define LBAD(...) amoe_fail(e, AMOE_EFORMAT, __VA_ARGS__)

static amoe_status num_array(json_t *a, int n, const char *what, const char *path, long ln, amoe_err *e) {
  if (!json_is_array(a) || (int)json_array_size(a) != n)
    return LBAD("%s:%ld: \"%s\" must be an array of %d numbers", path, ln, what, n);
  for (int i = 0; i < n; i++)
    if (!json_is_number(json_array_get(a, (size_t)i)))
      return LBAD("%s:%ld: \"%s\"[%d] is not a number", path, ln, what, i);
  return AMOE_OK;
}

static amoe_status parse_block(amoe_jsonl_reader *r, json_t *o, amoe_block *b, amoe_err *e) {
  const char *P = r->path;
  long ln = r->lineno;
  if (!json_is_object(o)) return LBAD("%s:%ld: a block must be a JSON object", P, ln);
  json_t *par = json_object_get(o, "parent");
  if (!json_is_array(par) || json_array_size(par) < 1)
    return LBAD("%s:%ld: \"parent\" must be a non-empty array", P, ln);
  int n = (int)json_array_size(par);
  if (n > AMOE_MAX_NODES) return LBAD("%s:%ld: %d nodes (at most %d)", P, ln, n, AMOE_MAX_NODES);
  AMOE_TRY(amoe_block_reserve(b, n, e));
  json_t *lp = json_object_get(o, "logp"), *acc = json_object_get(o, "accepted");
  json_t *sc = json_object_get(o, "score");
  amoe_status rc;
  if ((rc = num_array(par, n, "parent", P, ln, e)) || (rc = num_array(lp, n, "logp", P, ln, e)) ||
      (rc = num_array(acc, n, "accepted", P, ln, e)) || (sc && (rc = num_array(sc, n, "score", P, ln, e))))
    return rc;
  for (int t = 0; t < n; t++) {
    b->parent[t] = (int32_t)json_integer_value(json_array_get(par, (size_t)t));
    if (!json_is_integer(json_array_get(par, (size_t)t)))
      return LBAD("%s:%ld: \"parent\"[%d] must be an integer", P, ln, t);
    b->logp[t] = (float)json_number_value(json_array_get(lp, (size_t)t));
    b->accepted[t] = (uint8_t)(json_number_value(json_array_get(acc, (size_t)t)) != 0);
  }
  for (int t = 0; t < n; t++) {
    int p = b->parent[t];
    if (t > 0 && (p < 0 || p >= t))
      return LBAD("%s:%ld: node %d: parent %d must be in 0..%d", P, ln, t, p, t - 1);
    b->score[t] = sc ? (float)json_number_value(json_array_get(sc, (size_t)t))
                     : (t ? b->score[p] + b->logp[t] : 0.0f);
  }
  json_t *lg = json_object_get(o, "logits"), *tk = json_object_get(o, "topk");
  if (!!lg == !!tk) return LBAD("%s:%ld: give exactly one of \"logits\" and \"topk\"", P, ln);
  json_t *arr = lg ? lg : tk;
  if (!json_is_array(arr) || (int)json_array_size(arr) != r->layers)
    return LBAD("%s:%ld: \"%s\" must have one entry per MoE layer (%d)", P, ln, lg ? "logits" : "topk",
                r->layers);
  float *zfull = malloc((size_t)r->experts * sizeof *zfull);
  if (!zfull) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  amoe_status bad = AMOE_OK;
  for (int l = 0; l < r->layers && !bad; l++) {
    json_t *lay = json_array_get(arr, (size_t)l);
    if (!json_is_array(lay) || (int)json_array_size(lay) != n) {
      bad = LBAD("%s:%ld: layer %d must have one entry per node (%d)", P, ln, l, n);
      break;
    }
    for (int t = 0; t < n && !bad; t++) {
      json_t *v = json_array_get(lay, (size_t)t);
      if (lg) {
        if (!json_is_array(v) || (int)json_array_size(v) != r->experts) {
          bad = LBAD("%s:%ld: logits[%d][%d] must have %d numbers", P, ln, l, t, r->experts);
          break;
        }
        for (int x = 0; x < r->experts; x++) {
          json_t *z = json_array_get(v, (size_t)x);
          if (!json_is_number(z)) {
            bad = LBAD("%s:%ld: logits[%d][%d][%d] is not a number", P, ln, l, t, x);
            break;
          }
          zfull[x] = (float)json_number_value(z);
          if (zfull[x] > AMOE_F16_MAX) {
            bad = LBAD("%s:%ld: logits[%d][%d][%d] = %g is beyond the binary16 range of stored logits (%g)", P,
                       ln, l, t, x, zfull[x], AMOE_F16_MAX);
            break;
          }
        }
        if (!bad) amoe_block_set_exact(b, l, t, zfull); /* the file's own top-m, near-ties included */
      } else {
        if (!json_is_array(v) || (int)json_array_size(v) != r->m) {
          bad = LBAD("%s:%ld: topk[%d][%d] must have %d [expert, logit] pairs (as the first block)", P, ln,
                     l, t, r->m);
          break;
        }
        uint16_t id[AMOE_MAX_EXPERTS];
        float zz[AMOE_MAX_EXPERTS];
        for (int j = 0; j < r->m; j++) {
          json_t *pr = json_array_get(v, (size_t)j);
          json_t *pe = json_array_get(pr, 0), *pz = json_array_get(pr, 1);
          if (!json_is_array(pr) || json_array_size(pr) != 2 || !json_is_integer(pe) || !json_is_number(pz) ||
              json_integer_value(pe) < 0 || json_integer_value(pe) >= r->experts) {
            bad = LBAD("%s:%ld: topk[%d][%d][%d] must be [expert id in 0..%d, logit]", P, ln, l, t, j,
                       r->experts - 1);
            break;
          }
          id[j] = (uint16_t)json_integer_value(pe);
          double zv = json_number_value(pz);
          if (zv > AMOE_F16_MAX) {
            bad = LBAD("%s:%ld: topk[%d][%d][%d] logit %g is beyond the binary16 range of stored logits (%g)",
                       P, ln, l, t, j, zv, AMOE_F16_MAX);
            break;
          }
          zz[j] = (float)zv; /* far below -65504: -inf, a masked expert */
        }
        if (!bad) amoe_block_set_pairs_exact(b, l, t, id, zz);
      }
    }
  }
  free(zfull);
  if (bad) return bad;
  json_t *rq = json_object_get(o, "request"), *st = json_object_get(o, "step");
  b->index = r->count;
  b->request = json_is_integer(rq) ? (uint32_t)json_integer_value(rq) : 0;
  b->step = json_is_integer(st) ? (uint32_t)json_integer_value(st) : (uint32_t)r->count;
  if (amoe_block_finish(b, AMOE_CHECK_ALL, e) != AMOE_OK) {
    amoe_err_prefix(e, "%s:%ld", P, ln);
    return AMOE_EFORMAT;
  }
  r->count++;
  return AMOE_OK;
}

amoe_status amoe_jsonl_next(amoe_jsonl_reader *r, amoe_block *b, amoe_err *e) {
  if (r->routing) {
    while (r->cur_prob < r->nprob && r->cur_tok >= r->probs[r->cur_prob].tokens) {
      r->cur_prob++;
      r->cur_tok = 0;
      r->cur_step = 0;
    }
    if (r->cur_prob >= r->nprob) return AMOE_END;
    rproblem *p = &r->probs[r->cur_prob];
    int n = p->tokens - r->cur_tok < r->window ? p->tokens - r->cur_tok : r->window;
    AMOE_TRY(amoe_block_reserve(b, n, e));
    for (int t = 0; t < n; t++) {
      b->parent[t] = t - 1;
      b->logp[t] = 0;
      b->score[t] = 0;
      b->accepted[t] = 1;
      for (int l = 0; l < r->layers; l++) {
        const rrec *rec = &p->layer[l][r->cur_tok + t];
        memcpy((uint16_t *)amoe_block_ids(b, l, t), rec->ids, (size_t)r->m * 2);
        memcpy((amoe_f16 *)amoe_block_logits(b, l, t), rec->z, (size_t)r->m * 2);
      }
    }
    b->index = r->count++;
    b->request = (uint32_t)r->cur_prob;
    b->step = (uint32_t)r->cur_step++;
    r->cur_tok += n;
    return amoe_block_finish(b, AMOE_CHECK_ALL, e);
  }
  if (!next_line(r)) return AMOE_END;
  json_error_t je;
  json_t *o = json_loads(r->line, 0, &je);
  if (!o) {
    jerr(e, r->path, r->lineno, &je);
    return AMOE_EFORMAT;
  }
  const amoe_status rc = parse_block(r, o, b, e);
  json_decref(o);
  return rc;
}

amoe_status amoe_jsonl_rewind(amoe_jsonl_reader *r, amoe_err *e) {
  r->count = 0;
  if (r->routing) {
    r->cur_prob = r->cur_tok = r->cur_step = 0;
    return AMOE_OK;
  }
  if (fseek(r->f, 0, SEEK_SET) != 0) return amoe_fail(e, AMOE_EIO, "%s: seek failed", r->path);
  r->lineno = 0;
  return AMOE_OK;
}

int amoe_routing_problems(const amoe_jsonl_reader *r) { return r->nprob; }
int amoe_routing_tokens(const amoe_jsonl_reader *r, int problem) { return r->probs[problem].tokens; }
void amoe_routing_token(const amoe_jsonl_reader *r, int problem, int layer, int token, const uint16_t **ids,
                        const amoe_f16 **logits) {
  const rrec *rec = &r->probs[problem].layer[layer][token];
  *ids = rec->ids;
  *logits = rec->z;
}

int amoe_jsonl_m(const amoe_jsonl_reader *r) { return r->m; }
const char *amoe_jsonl_note(const amoe_jsonl_reader *r) { return r->note; }

void amoe_jsonl_close(amoe_jsonl_reader *r) {
  if (!r) return;
  if (r->f) fclose(r->f);
  free(r->line);
  for (int i = 0; i < r->nprob; i++) {
    for (int l = 0; l < r->layers; l++) free(r->probs[i].layer[l]);
    free(r->probs[i].layer);
  }
  free(r->probs);
  free(r->path);
  free(r->shape_h);
  free(r->shape_k);
  free(r->shape_n);
  free(r);
}

/* ------------------------------------------------------------ routing-jsonl */


static int cmp_rrow(const void *a, const void *b) {
  const rrow *x = a, *y = b;
  if (x->problem != y->problem) return x->problem < y->problem ? -1 : 1;
  if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
  return (x->rec.token > y->rec.token) - (x->rec.token < y->rec.token);
}

/* A routing reader for `layers` x `experts`, top-k, chain blocks of `window`. */
amoe_status amoe_routing_reader_new(amoe_jsonl_reader **out, const char *path, int layers, int experts, int top_k,
                                      int window, amoe_err *e) {
  if (window < 1) return amoe_fail(e, AMOE_EINVAL, "workload.window must be >= 1");
  AMOE_TRY(reader_new(out, path, e));
  amoe_jsonl_reader *r = *out;
  r->routing = 1;
  r->layers = layers;
  r->experts = experts;
  r->top_k = top_k;
  r->m = top_k;
  r->window = window;
  return AMOE_OK;
}

typedef struct {
  float z;
  uint16_t id;
} fid;
static int higher_logit(const void *a, const void *b, const void *ctx) {
  (void)ctx;
  return ((const fid *)a)->z > ((const fid *)b)->z;
}

/* A record's k experts with their float logits zf: ordered by logit desc
 * (equal ones keep the file's order) and stored so exactly (block.h);
 * returns the first expert listed twice, or -1. */
int amoe_routing_rec_store(rrec *rec, float *zf, int k) {
  fid e[AMOE_MAX_TOPK];
  for (int j = 0; j < k; j++) e[j] = (fid){zf[j], rec->ids[j]};
  amoe_sort(e, k, sizeof *e, higher_logit, NULL);
  for (int j = 0; j < k; j++) zf[j] = e[j].z, rec->ids[j] = e[j].id;
  for (int i = 1; i < k; i++) /* every pair: the sort need not make them adjacent */
    for (int j = 0; j < i; j++)
      if (rec->ids[i] == rec->ids[j]) return rec->ids[i];
  amoe_f16_store_ordered(zf, rec->ids, k, rec->z);
  return -1;
}

/* Groups token-layer rows into problems (request order), cuts ragged layers
 * to the shortest and says in the reader's note what was dropped. */
amoe_status amoe_routing_group(amoe_jsonl_reader *r, rrow *rows, size_t nrows, long prompt_rows, long ids_only,
                                 long with_logits, amoe_err *e) {
  amoe_status st = AMOE_OK;
  const int layers = r->layers;
  {
    qsort(rows, nrows, sizeof *rows, cmp_rrow);
    long dropped_tok = 0;
    int dropped_prob = 0;
    for (size_t i = 0; i < nrows && st == AMOE_OK;) {
      size_t j = i;
      int cnt[AMOE_MAX_LAYERS] = {0};
      while (j < nrows && rows[j].problem == rows[i].problem) cnt[rows[j++].layer]++;
      int tmin = cnt[0];
      for (int l = 0; l < layers; l++) tmin = cnt[l] < tmin ? cnt[l] : tmin;
      long total = (long)(j - i);
      if (tmin == 0) {
        dropped_prob++;
        dropped_tok += total;
        i = j;
        continue;
      }
      rproblem *np = realloc(r->probs, (size_t)(r->nprob + 1) * sizeof *np);
      if (!np) {
        st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
        break;
      }
      r->probs = np;
      rproblem *p = &r->probs[r->nprob++];
      p->problem = rows[i].problem;
      p->tokens = tmin;
      p->layer = calloc((size_t)layers, sizeof *p->layer);
      if (!p->layer) {
        r->nprob--;
        st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
        break;
      }
      size_t at = i;
      for (int l = 0; l < layers; l++) {
        p->layer[l] = malloc((size_t)tmin * sizeof(rrec));
        if (!p->layer[l]) {
          st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
          break;
        }
        for (int t = 0; t < tmin; t++) p->layer[l][t] = rows[at + (size_t)t].rec;
        at += (size_t)cnt[l];
      }
      dropped_tok += total - (long)tmin * layers;
      i = j;
    }
    int at = snprintf(r->note, sizeof r->note,
                      "%d problems kept (ragged layers cut to the shortest: %ld token-layer records dropped; "
                      "%d problems missing a layer dropped)",
                      r->nprob, dropped_tok, dropped_prob);
    if (prompt_rows && at > 0 && at < (int)sizeof r->note)
      at += snprintf(r->note + at, sizeof r->note - (size_t)at, "; %ld prompt records left out", prompt_rows);
    if (ids_only && at > 0 && at < (int)sizeof r->note)
      at += snprintf(r->note + at, sizeof r->note - (size_t)at,
                     "; %ld records carry expert ids only: their ranks and weights are unknown (equal weights, "
                     "the file's order)",
                     ids_only);
    if (with_logits && at > 0 && at < (int)sizeof r->note)
      snprintf(r->note + at, sizeof r->note - (size_t)at, "; %ld records with their router logits", with_logits);
  }
  return st;
}

amoe_status amoe_routing_jsonl_open(amoe_jsonl_reader **out, const char *path, int layers, int experts,
                                    int top_k, int router, int window, amoe_err *e) {
  amoe_jsonl_reader *r = NULL;
  AMOE_TRY(amoe_routing_reader_new(&r, path, layers, experts, top_k, window, e));
  r->f = fopen(path, "rb");
  amoe_status st = AMOE_OK;
  rrow *rows = NULL;
  size_t nrows = 0, cap = 0;
  long ids_only = 0, prompt_rows = 0, with_logits = 0;
  float *lg = malloc((size_t)experts * sizeof *lg);
  if (!lg) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  if (!r->f) st = amoe_fail(e, AMOE_EIO, "%s: cannot open: %s", path, strerror(errno));
  while (st == AMOE_OK && next_line(r)) {
    json_error_t je;
    json_t *o = json_loads(r->line, 0, &je);
    if (!o) {
      jerr(e, path, r->lineno, &je);
      st = AMOE_EFORMAT;
      break;
    }
    json_t *pi = json_object_get(o, "problem_id"), *la = json_object_get(o, "layer");
    json_t *ti = json_object_get(o, "token_idx"), *ex = json_object_get(o, "experts");
    /* optional: gating_probs (vLLM and SGLang return ids only), phase,
     * logits (E floats) */
    json_t *gp = json_object_get(o, "gating_probs"), *ph = json_object_get(o, "phase");
    json_t *lz = json_object_get(o, "logits");
    if (!json_is_integer(pi) || !json_is_integer(la) || !json_is_integer(ti) || !json_is_array(ex) ||
        (gp && !json_is_array(gp)))
      st = amoe_fail(e, AMOE_EFORMAT,
                     "%s:%ld: need integer problem_id, layer, token_idx and an array experts (gating_probs, if "
                     "given, an array too)",
                     path, r->lineno);
    else if ((int)json_array_size(ex) != top_k || (gp && json_array_size(gp) != json_array_size(ex)))
      st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: experts and gating_probs must have top_k = %d entries", path,
                     r->lineno, top_k);
    else if (ph && !(json_is_string(ph) && (!strcmp(json_string_value(ph), "prompt") ||
                                             !strcmp(json_string_value(ph), "decode"))))
      st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: phase must be \"prompt\" or \"decode\"", path, r->lineno);
    else if (lz && (!json_is_array(lz) || (int)json_array_size(lz) != experts))
      st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: logits must have %d numbers (one per expert)", path, r->lineno,
                     experts);
    else if (json_integer_value(la) < 0 || json_integer_value(la) >= layers)
      st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: layer %lld out of range 0..%d", path, r->lineno,
                     (long long)json_integer_value(la), layers - 1);
    if (st == AMOE_OK && ph && !strcmp(json_string_value(ph), "prompt")) { /* decode statistics only */
      prompt_rows++;
      json_decref(o);
      continue;
    }
    for (int x = 0; lz && st == AMOE_OK && x < experts; x++) {
      json_t *v = json_array_get(lz, (size_t)x);
      lg[x] = json_is_number(v) ? (float)json_number_value(v) : NAN;
      if (!(fabsf(lg[x]) <= AMOE_F16_MAX))
        st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: logits[%d] must be a finite number within +-%g", path, r->lineno,
                       x, AMOE_F16_MAX);
    }
    if (st == AMOE_OK) {
      rrow *nr = amoe_grow(rows, &cap, nrows + 1, sizeof *rows, 4096);
      if (!nr)
        st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
      else
        rows = nr;
    }
    if (st == AMOE_OK) {
      rrow *w = &rows[nrows];
      w->problem = (int)json_integer_value(pi);
      w->layer = (int)json_integer_value(la);
      w->rec.token = (int)json_integer_value(ti);
      float zf[AMOE_MAX_TOPK];
      for (int j = 0; j < top_k && st == AMOE_OK; j++) {
        json_t *xe = json_array_get(ex, (size_t)j), *xp = gp ? json_array_get(gp, (size_t)j) : NULL;
        /* ids only: equal weights, the file's order kept as the rank */
        double p = gp ? json_number_value(xp) : 1.0 / top_k;
        if (!json_is_integer(xe) || json_integer_value(xe) < 0 || json_integer_value(xe) >= experts)
          st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: experts[%d] must be an id in 0..%d", path, r->lineno, j,
                         experts - 1);
        else if (gp && (!json_is_number(xp) || !(p > 0) || p > 1))
          st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: gating_probs[%d] must be in (0, 1]", path, r->lineno, j);
        else {
          w->rec.ids[j] = (uint16_t)json_integer_value(xe);
          const double z = router == AMOE_ROUTER_SIGMOID_NORM ? (p < 1 ? log(p / (1 - p)) : 30.0) : log(p);
          /* the record's own logits where it has them, else from the weights */
          zf[j] = lz ? lg[w->rec.ids[j]] : (float)(z < 30.0 ? z : 30.0); /* the router maps it back (jsonl.h) */
        }
      }
      /* by weight desc; equal weights keep the file's (the engine's) order,
       * and the binary16 store keeps that order exactly */
      const int twice = st == AMOE_OK ? amoe_routing_rec_store(&w->rec, zf, top_k) : -1;
      if (twice >= 0) st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: expert %d is listed twice", path, r->lineno, twice);
      if (st == AMOE_OK && lz && !amoe_routing_shape_add(r, w->layer, lg, w->rec.ids, top_k))
        st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
      ids_only += !gp && !lz;
      with_logits += lz != NULL;
      nrows++;
    }
    json_decref(o);
  }
  if (st == AMOE_OK && nrows == 0) st = amoe_fail(e, AMOE_EFORMAT, "%s: no records", path);
  if (st == AMOE_OK) st = amoe_routing_group(r, rows, nrows, prompt_rows, ids_only, with_logits, e);
  free(rows);
  free(lg);
  if (r->f) {
    fclose(r->f);
    r->f = NULL;
  }
  if (st != AMOE_OK) {
    amoe_jsonl_close(r);
    return st;
  }
  *out = r;
  return AMOE_OK;
}

/* ------------------------------------------------------------ writer */

amoe_status amoe_blocks_jsonl_write(FILE *f, const amoe_block *b, amoe_err *e) {
  json_t *o = json_object(), *par = json_array(), *lp = json_array(), *sc = json_array(),
         *acc = json_array(), *lay = json_array();
  int full = b->m == b->experts;
  json_object_set_new(o, "block", json_integer((json_int_t)b->index));
  json_object_set_new(o, "request", json_integer(b->request));
  json_object_set_new(o, "step", json_integer(b->step));
  for (int t = 0; t < b->n; t++) {
    json_array_append_new(par, json_integer(b->parent[t]));
    json_array_append_new(lp, json_real(b->logp[t]));
    json_array_append_new(sc, json_real(b->score[t]));
    json_array_append_new(acc, json_integer(b->accepted[t]));
  }
  for (int l = 0; l < b->layers; l++) {
    json_t *nodes = json_array();
    for (int t = 0; t < b->n; t++) {
      const uint16_t *id = amoe_block_ids(b, l, t);
      const amoe_f16 *z = amoe_block_logits(b, l, t);
      json_t *v = json_array();
      if (full) {
        double *vals = malloc((size_t)b->experts * sizeof *vals);
        if (!vals) {
          json_decref(v);
          json_decref(nodes);
          json_decref(o);
          return amoe_fail(e, AMOE_ENOMEM, "out of memory");
        }
        for (int j = 0; j < b->m; j++) vals[id[j]] = amoe_f16_to_f32(z[j]);
        for (int x = 0; x < b->experts; x++) json_array_append_new(v, json_real(isinf(vals[x]) ? -1e30 : vals[x]));
        free(vals);
      } else {
        for (int j = 0; j < b->m; j++) {
          json_t *pr = json_array();
          json_array_append_new(pr, json_integer(id[j]));
          const float zj = amoe_f16_to_f32(z[j]);
          json_array_append_new(pr, isinf(zj) ? json_real(-1e30) : json_real(zj));
          json_array_append_new(v, pr);
        }
      }
      json_array_append_new(nodes, v);
    }
    json_array_append_new(lay, nodes);
  }
  json_object_set_new(o, "parent", par);
  json_object_set_new(o, "logp", lp);
  json_object_set_new(o, "score", sc);
  json_object_set_new(o, "accepted", acc);
  json_object_set_new(o, full ? "logits" : "topk", lay);
  int rc = json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
  json_decref(o);
  if (rc != 0 || fputc('\n', f) == EOF) return amoe_fail(e, AMOE_EIO, "write failed: %s", strerror(errno));
  return AMOE_OK;
}
