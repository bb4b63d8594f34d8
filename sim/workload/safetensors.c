/* routing-safetensors (docs/design.md §5, docs/capture.md): the records of
 * routing-jsonl in bulk, every length and offset checked against the file,
 * errors naming the tensor and byte offset; then the same problems and
 * blocks as routing-jsonl (routing_records.h). */
#include "safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "routing_records.h"

typedef struct {
  const char *name;
  int dtype; /* 0 absent, else one of ST_* */
  int rank;
  uint64_t shape[4];
  uint64_t begin, end; /* absolute file offsets */
} st_tensor;

enum { ST_I16 = 1, ST_I32, ST_I64, ST_F16, ST_BF16, ST_F32 };

static int st_dtype(const char *s) {
  static const char *const names[] = {"", "I16", "I32", "I64", "F16", "BF16", "F32"};
  for (int i = 1; i <= ST_F32; i++)
    if (!strcmp(s, names[i])) return i;
  return 0;
}
static int st_size(int d) { return d == ST_I64 ? 8 : d == ST_I32 || d == ST_F32 ? 4 : 2; }

/* Reads the tensor's entry from the header: dtype, shape and data offsets,
 * checked against the data's size and the dtypes it may have. */
static amoe_status st_entry(json_t *hdr, st_tensor *t, const char *allowed, uint64_t data_at, uint64_t data_len,
                            const char *path, amoe_err *e) {
  json_t *o = json_object_get(hdr, t->name);
  if (!o) return AMOE_OK;
  json_t *dt = json_object_get(o, "dtype"), *sh = json_object_get(o, "shape"), *of = json_object_get(o, "data_offsets");
  if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(of) || json_array_size(of) != 2 ||
      json_array_size(sh) < 1 || json_array_size(sh) > 4)
    return amoe_fail(e, AMOE_EFORMAT, "%s: tensor '%s': needs dtype, shape (1 to 4 dimensions) and data_offsets",
                     path, t->name);
  t->dtype = st_dtype(json_string_value(dt));
  char want[32];
  snprintf(want, sizeof want, ",%s,", json_string_value(dt));
  if (!t->dtype || !strstr(allowed, want))
    return amoe_fail(e, AMOE_EFORMAT, "%s: tensor '%s': dtype %s (allowed: %.*s)", path, t->name,
                     json_string_value(dt), (int)strlen(allowed) - 2, allowed + 1);
  t->rank = (int)json_array_size(sh);
  uint64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    json_t *d = json_array_get(sh, (size_t)i);
    if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > (json_int_t)1 << 40)
      return amoe_fail(e, AMOE_EFORMAT, "%s: tensor '%s': shape[%d] is not a size", path, t->name, i);
    t->shape[i] = (uint64_t)json_integer_value(d);
    n = t->shape[i] && n > UINT64_MAX / 8 / t->shape[i] ? UINT64_MAX : n * t->shape[i];
  }
  json_t *b = json_array_get(of, 0), *en = json_array_get(of, 1);
  if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
      json_integer_value(en) < json_integer_value(b) || (uint64_t)json_integer_value(en) > data_len)
    return amoe_fail(e, AMOE_EFORMAT, "%s: tensor '%s': data_offsets do not fit the %llu data bytes", path, t->name,
                     (unsigned long long)data_len);
  t->begin = data_at + (uint64_t)json_integer_value(b);
  t->end = data_at + (uint64_t)json_integer_value(en);
  if (n == UINT64_MAX || t->end - t->begin != n * (uint64_t)st_size(t->dtype))
    return amoe_fail(e, AMOE_EFORMAT, "%s: tensor '%s' at byte offset %llu: %llu bytes, its shape needs %llu", path,
                     t->name, (unsigned long long)t->begin, (unsigned long long)(t->end - t->begin),
                     (unsigned long long)(n * (uint64_t)st_size(t->dtype)));
  return AMOE_OK;
}

static amoe_status st_read(FILE *f, uint64_t at, void *buf, size_t n, const char *path, const char *name,
                           amoe_err *e) {
  if (fseeko(f, (off_t)at, SEEK_SET) != 0 || fread(buf, 1, n, f) != n)
    return amoe_fail(e, AMOE_EFORMAT, "%s: tensor '%s': cannot read %zu bytes at byte offset %llu", path, name, n,
                     (unsigned long long)at);
  return AMOE_OK;
}

static double st_value(const uint8_t *p, int dtype) {
  switch (dtype) {
  case ST_I16: { int16_t v; memcpy(&v, p, 2); return v; }
  case ST_I32: { int32_t v; memcpy(&v, p, 4); return v; }
  case ST_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
  case ST_F16: { amoe_f16 h; memcpy(&h, p, 2); return amoe_f16_to_f32(h); }
  case ST_BF16: { uint16_t h; memcpy(&h, p, 2); uint32_t u = (uint32_t)h << 16; float x; memcpy(&x, &u, 4); return x; }
  default: { float x; memcpy(&x, p, 4); return x; }
  }
}

/* Token t's layer l from its rows of the tensors (row: experts, wrow:
 * weights, lrow: logits, each NULL where absent) into w->rec: its ids and
 * logits (from the logits, else the weights as the router's scores, else
 * equal). *none: the layer computed nothing (ids -1, a prefix-cache hit). */
static amoe_status st_token_layer(const st_tensor *tx, const st_tensor *tw, const st_tensor *tl, const uint8_t *row,
                                  const uint8_t *wrow, const uint8_t *lrow, int64_t t, int l, int top_k, int experts,
                                  int router, const char *path, rrow *w, int *none, amoe_err *e) {
  const size_t xsz = (size_t)(tx->shape[1] * tx->shape[2]) * st_size(tx->dtype);
  float zf[AMOE_MAX_TOPK];
  *none = 0;
  for (int j = 0; j < top_k; j++) {
    const size_t at = (size_t)l * top_k + (size_t)j;
    const double id = st_value(row + at * st_size(tx->dtype), tx->dtype);
    if (id == -1) { /* nothing computed here (a prefix-cache hit) */
      *none = 1;
      return AMOE_OK;
    }
    if (!(id >= 0 && id < experts))
      return amoe_fail(e, AMOE_EFORMAT, "%s: tensor 'experts' at byte offset %llu: expert id %g out of 0..%d", path,
                       (unsigned long long)(tx->begin + (uint64_t)t * xsz + at * st_size(tx->dtype)), id, experts - 1);
    w->rec.ids[j] = (uint16_t)id;
    double p = wrow ? st_value(wrow + at * st_size(tw->dtype), tw->dtype) : 1.0 / top_k;
    if (!(p > 0 && p <= 1)) p = 1e-6; /* a zero or odd weight: least likely */
    const double z = router == AMOE_ROUTER_SIGMOID_NORM ? (p < 1 ? log(p / (1 - p)) : 30.0) : log(p);
    zf[j] = lrow ? (float)st_value(lrow + ((size_t)l * experts + w->rec.ids[j]) * st_size(tl->dtype), tl->dtype)
                 : (float)(z < 30.0 ? z : 30.0);
    if (!(fabsf(zf[j]) <= AMOE_F16_MAX))
      return amoe_fail(e, AMOE_EFORMAT, "%s: tensor 'logits': token %lld layer %d: not a usable logit", path,
                       (long long)t, l);
  }
  const int twice = amoe_routing_rec_store(&w->rec, zf, top_k);
  if (twice >= 0)
    return amoe_fail(e, AMOE_EFORMAT, "%s: tensor 'experts': token %lld layer %d lists expert %d twice", path,
                     (long long)t, l, twice);
  return AMOE_OK;
}

/* The file's header (f open, NULL: it could not be): its 8-byte length,
 * the JSON object after it into *hdr (its text in *htxt, freed by the
 * caller), and where the data after it starts and how long it is. */
static amoe_status st_header(FILE *f, const char *path, json_t **hdr, char **htxt, uint64_t *data_at,
                             uint64_t *data_len, amoe_err *e) {
  uint64_t file_len = 0, hlen = 0;
  if (!f) return amoe_fail(e, AMOE_EIO, "%s: cannot open: %s", path, strerror(errno));
  if (fseeko(f, 0, SEEK_END) != 0 || (file_len = (uint64_t)ftello(f)) < 8 || fseeko(f, 0, SEEK_SET) != 0)
    return amoe_fail(e, AMOE_EFORMAT, "%s: not a safetensors file (shorter than its 8-byte header length)", path);
  uint8_t lb[8];
  if (fread(lb, 1, 8, f) != 8) return amoe_fail(e, AMOE_EFORMAT, "%s: truncated at byte offset 0", path);
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lb[i];
  if (hlen < 2 || hlen > file_len - 8 || hlen > (64u << 20))
    return amoe_fail(e, AMOE_EFORMAT, "%s: byte offset 0: header length %llu does not fit the file (%llu bytes)", path,
                     (unsigned long long)hlen, (unsigned long long)file_len);
  if (!(*htxt = malloc(hlen + 1))) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  if (fread(*htxt, 1, hlen, f) != hlen) return amoe_fail(e, AMOE_EFORMAT, "%s: truncated header", path);
  (*htxt)[hlen] = 0;
  json_error_t je;
  *hdr = json_loads(*htxt, 0, &je);
  if (!json_is_object(*hdr))
    return amoe_fail(e, AMOE_EFORMAT, "%s: byte offset %d: the header is not a JSON object (%s)", path, 8 + je.position,
                     je.text);
  *data_at = 8 + hlen;
  *data_len = file_len - 8 - hlen;
  return AMOE_OK;
}

/* The routing tensors from the header (experts, weights, logits,
 * req_offsets, prompt_len; weights, logits and prompt_len optional), each
 * checked against the model's shape, and the header's metadata against
 * it; *tokens and *requests from them. */
static amoe_status st_tensors(json_t *hdr, uint64_t data_at, uint64_t data_len, int layers, int experts, int top_k,
                              const char *path, st_tensor *tx, st_tensor *tw, st_tensor *tl, st_tensor *tr,
                              st_tensor *tp, uint64_t *tokens, uint64_t *requests, amoe_err *e) {
  amoe_status st = AMOE_OK;
  if (!st) st = st_entry(hdr, tx, ",I16,I32,", data_at, data_len, path, e);
  if (!st) st = st_entry(hdr, tw, ",F16,F32,", data_at, data_len, path, e);
  if (!st) st = st_entry(hdr, tl, ",F16,BF16,F32,", data_at, data_len, path, e);
  if (!st) st = st_entry(hdr, tr, ",I64,", data_at, data_len, path, e);
  if (!st) st = st_entry(hdr, tp, ",I32,", data_at, data_len, path, e);
  if (!st && (!tx->dtype || !tr->dtype))
    st = amoe_fail(e, AMOE_EFORMAT, "%s: needs the tensors 'experts' [tokens, moe_layers, k] and 'req_offsets' [R+1]",
                   path);
  const uint64_t T = tx->shape[0];
  if (!st && (tx->rank != 3 || tx->shape[1] != (uint64_t)layers || tx->shape[2] != (uint64_t)top_k))
    st = amoe_fail(e, AMOE_EFORMAT, "%s: tensor 'experts' has shape [%llu, %llu, %llu]; the model needs [tokens, %d, %d]",
                   path, (unsigned long long)tx->shape[0], (unsigned long long)tx->shape[1],
                   (unsigned long long)tx->shape[2], layers, top_k);
  if (!st && tw->dtype && (tw->rank != 3 || tw->shape[0] != T || tw->shape[1] != tx->shape[1] || tw->shape[2] != tx->shape[2]))
    st = amoe_fail(e, AMOE_EFORMAT, "%s: tensor 'weights' must have the shape of 'experts'", path);
  if (!st && tl->dtype && (tl->rank != 3 || tl->shape[0] != T || tl->shape[1] != tx->shape[1] || tl->shape[2] != (uint64_t)experts))
    st = amoe_fail(e, AMOE_EFORMAT, "%s: tensor 'logits' must have shape [tokens, %d, %d]", path, layers, experts);
  if (!st && (tr->rank != 1 || tr->shape[0] < 2 || tr->shape[0] > (1u << 24)))
    st = amoe_fail(e, AMOE_EFORMAT, "%s: tensor 'req_offsets' must have shape [R+1], R >= 1", path);
  const uint64_t R = st ? 0 : tr->shape[0] - 1;
  *tokens = T, *requests = R;
  if (!st && tp->dtype && (tp->rank != 1 || tp->shape[0] != R))
    st = amoe_fail(e, AMOE_EFORMAT, "%s: tensor 'prompt_len' must have shape [%llu]", path, (unsigned long long)R);
  json_t *meta = hdr ? json_object_get(hdr, "__metadata__") : NULL;
  for (const char *k = "num_experts"; !st && meta && k; k = !strcmp(k, "num_experts") ? "top_k" : NULL) {
    json_t *v = json_object_get(meta, k); /* safetensors metadata values are strings */
    const long want = !strcmp(k, "num_experts") ? experts : top_k;
    if (v && (!json_is_string(v) || atol(json_string_value(v)) != want))
      st = amoe_fail(e, AMOE_EFORMAT, "%s: __metadata__.%s does not match the model (%ld)", path, k, want);
  }
  return st;
}

amoe_status amoe_routing_safetensors_open(amoe_jsonl_reader **out, const char *path, int layers, int experts,
                                          int top_k, int router, int window, amoe_err *e) {
  amoe_jsonl_reader *r = NULL;
  AMOE_TRY(amoe_routing_reader_new(&r, path, layers, experts, top_k, window, e));
  amoe_status st = AMOE_OK;
  FILE *f = fopen(path, "rb");
  json_t *hdr = NULL;
  char *htxt = NULL;
  rrow *rows = NULL;
  int64_t *off = NULL;
  int32_t *plen = NULL;
  uint8_t *row = NULL, *wrow = NULL, *lrow = NULL;
  float lgv[AMOE_MAX_EXPERTS];
  uint64_t data_at = 0, data_len = 0;
  st = st_header(f, path, &hdr, &htxt, &data_at, &data_len, e);
  st_tensor tx = {"experts", 0, 0, {0}, 0, 0}, tw = {"weights", 0, 0, {0}, 0, 0}, tl = {"logits", 0, 0, {0}, 0, 0},
            tr = {"req_offsets", 0, 0, {0}, 0, 0}, tp = {"prompt_len", 0, 0, {0}, 0, 0};
  uint64_t T = 0, R = 0;
  if (!st) st = st_tensors(hdr, data_at, data_len, layers, experts, top_k, path, &tx, &tw, &tl, &tr, &tp, &T, &R, e);
  if (!st) {
    off = malloc((size_t)(R + 1) * sizeof *off);
    plen = calloc((size_t)R, sizeof *plen);
    if (!off || !plen) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  }
  if (!st) st = st_read(f, tr.begin, off, (size_t)(R + 1) * 8, path, "req_offsets", e);
  if (!st && tp.dtype) st = st_read(f, tp.begin, plen, (size_t)R * 4, path, "prompt_len", e);
  for (uint64_t i = 0; !st && i < R; i++)
    if (off[0] != 0 || off[i + 1] < off[i] || (uint64_t)off[R] != T)
      st = amoe_fail(e, AMOE_EFORMAT, "%s: tensor 'req_offsets' must rise from 0 to the %llu tokens (entry %llu)", path,
                     (unsigned long long)T, (unsigned long long)i);
  const size_t xsz = (size_t)layers * top_k * st_size(tx.dtype);
  const size_t wsz = tw.dtype ? (size_t)layers * top_k * st_size(tw.dtype) : 0;
  const size_t lsz = tl.dtype ? (size_t)layers * experts * st_size(tl.dtype) : 0;
  if (!st && (!(row = malloc(xsz)) || (wsz && !(wrow = malloc(wsz))) || (lsz && !(lrow = malloc(lsz)))))
    st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  size_t nrows = 0, cap = 0;
  long prompt_rows = 0, ids_only = 0, with_logits = 0, empty = 0;
  for (uint64_t q = 0; !st && q < R; q++)
    for (int64_t t = off[q]; !st && t < off[q + 1]; t++) {
      st = st_read(f, tx.begin + (uint64_t)t * xsz, row, xsz, path, "experts", e);
      if (!st && wsz) st = st_read(f, tw.begin + (uint64_t)t * wsz, wrow, wsz, path, "weights", e);
      if (!st && lsz) st = st_read(f, tl.begin + (uint64_t)t * lsz, lrow, lsz, path, "logits", e);
      if (st) break;
      if (t - off[q] < plen[q]) { /* the prompt's rows: decode statistics only */
        prompt_rows += layers;
        continue;
      }
      for (int l = 0; l < layers && !st; l++) {
        {
          rrow *nr = amoe_grow(rows, &cap, nrows + 1, sizeof *rows, 4096);
          if (!nr) {
            st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
            break;
          }
          rows = nr;
        }
        rrow *w = &rows[nrows];
        w->problem = (int)q;
        w->layer = l;
        w->rec.token = (int)(t - off[q]);
        int none;
        st = st_token_layer(&tx, &tw, &tl, row, wsz ? wrow : NULL, lsz ? lrow : NULL, t, l, top_k, experts, router,
                            path, w, &none, e);
        if (st) break;
        if (none) {
          empty++;
          continue;
        }
        if (lsz) { /* every expert's logit: the score shape */
          for (int x = 0; x < experts; x++)
            lgv[x] = (float)st_value(lrow + ((size_t)l * experts + x) * st_size(tl.dtype), tl.dtype);
          if (!amoe_routing_shape_add(r, l, lgv, w->rec.ids, top_k)) {
            st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
            break;
          }
        }
        ids_only += !wsz && !lsz;
        with_logits += lsz > 0;
        nrows++;
      }
    }
  if (!st && nrows == 0) st = amoe_fail(e, AMOE_EFORMAT, "%s: no decode rows", path);
  if (!st) st = amoe_routing_group(r, rows, nrows, prompt_rows, ids_only, with_logits, e);
  if (!st && empty) {
    size_t at = strlen(r->note);
    snprintf(r->note + at, sizeof r->note - at, "; %ld token-layer rows without experts (-1) left out", empty);
  }
  free(rows), free(off), free(plen), free(row), free(wrow), free(lrow), free(htxt);
  json_decref(hdr);
  if (f) fclose(f);
  if (st) {
    amoe_jsonl_close(r);
    return st;
  }
  *out = r;
  return AMOE_OK;
}
