#include "block.h"
#include "clones.h"
#include "model.h"
#include "sort.h"
#include "fast.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void amoe_block_init(amoe_block *b, int layers, int experts, int m) {
  memset(b, 0, sizeof *b);
  b->layers = layers;
  b->experts = experts;
  b->m = m;
  b->lm = m;
  b->owns = 1;
}

void amoe_block_free(amoe_block *b) {
  if (b->owns) free(b->mem);
  free(b->depth_mem);
  b->mem = NULL;
  b->depth_mem = NULL;
  b->cap_n = 0;
}

void amoe_block_borrow(amoe_block *b, int layers, int experts, int m, int n) {
  amoe_block_free(b);
  b->owns = 0;
  b->layers = layers;
  b->experts = experts;
  b->m = m;
  b->n = n;
}

amoe_status amoe_block_reserve(amoe_block *b, int n, amoe_err *e) {
  if (n < 1 || n > AMOE_MAX_NODES)
    return amoe_fail(e, AMOE_EINVAL, "block has %d nodes (allowed 1..%d)", n, AMOE_MAX_NODES);
  b->softmax_inv = NULL; /* the logits are about to be rewritten */
  if (!b->owns) { /* detach from a reader's buffer */
    b->mem = NULL;
    b->cap_n = 0;
    b->owns = 1;
  }
  if (n > b->cap_n) {
    size_t lm = (size_t)b->layers * b->m;
    size_t bytes = (size_t)n * (4 + 4 + 4 + 1) + (size_t)n * lm * (2 + 2) + 16;
    void *mem = malloc(bytes);
    uint8_t *dm = malloc((size_t)n);
    if (!mem || !dm) {
      free(mem);
      free(dm);
      return amoe_fail(e, AMOE_ENOMEM, "out of memory for a block of %d nodes", n);
    }
    free(b->mem);
    free(b->depth_mem);
    b->mem = mem;
    b->depth_mem = dm;
    b->cap_n = n;
  }
  size_t lm = (size_t)b->layers * b->m;
  char *p = b->mem;
  b->parent = (int32_t *)p;  p += (size_t)b->cap_n * 4;
  b->logp = (float *)p;      p += (size_t)b->cap_n * 4;
  b->score = (float *)p;     p += (size_t)b->cap_n * 4;
  b->logits = (amoe_f16 *)p; p += (size_t)b->cap_n * lm * 2;
  b->ids = (uint16_t *)p;    p += (size_t)b->cap_n * lm * 2;
  b->accepted = (uint8_t *)p;
  b->depth = b->depth_mem;
  b->n = n;
  b->lm = b->m;
  return AMOE_OK;
}

/* An order-preserving pair key: higher key = higher logit, then lower id. */
static inline uint32_t pair_key(amoe_f16 z, int id) {
  return amoe_f16_key(z) << 16 | (uint32_t)(0xffff - id);
}
static inline amoe_f16 key_logit(uint32_t k) { return amoe_f16_of_key(k >> 16); }
static inline uint16_t key_id(uint32_t k) { return (uint16_t)(0xffff - (k & 0xffff)); }

static int key_desc(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x < y) - (x > y);
}

/* The portable top-m: rounds to f16 and keeps the top m by (logit desc, id
 * asc), sorted. The m-th best logit is found by a binary search over the
 * 16-bit logit keys, each step a vectorised count; the keys above it are all
 * kept, and the ties at it go to the lower ids. */
static AMOE_CLONES void set_full_plain(uint16_t *id, amoe_f16 *z, int E, int m, const float *zfull) {
  uint16_t k16[AMOE_MAX_EXPERTS];
  /* pair keys with the top bit flipped: signed compares order them, so the
   * loops below need no per-element bias */
  int32_t kk[AMOE_MAX_EXPERTS], sel[AMOE_MAX_EXPERTS], sorted[AMOE_MAX_EXPERTS];
  uint16_t kmin = 0xffff, kmax = 0;
  for (int e = 0; e < E; e++) {
    const uint16_t v = (uint16_t)amoe_f16_key(amoe_f16_from_f32(zfull[e]));
    k16[e] = v;
    kk[e] = (int32_t)(((uint32_t)v << 16 | (uint32_t)(0xffff - e)) ^ 0x80000000u);
    kmin = v < kmin ? v : kmin;
    kmax = v > kmax ? v : kmax;
  }
  /* the largest T with #{key >= T} >= m (then fewer than m lie above T) */
  uint16_t lo = kmin, hi = kmax;
  while (lo < hi) {
    const uint16_t mid = (uint16_t)(((uint32_t)lo + hi + 1) >> 1);
    uint16_t c = 0; /* 16-bit lanes: eight keys per compare */
    for (int e = 0; e < E; e++) c = (uint16_t)(c + (k16[e] >= mid));
    if (c >= m)
      lo = mid;
    else
      hi = (uint16_t)(mid - 1);
  }
  int c = 0;
  for (int e = 0; e < E; e++) { /* every key above T, then the ties at T by id */
    sel[c] = kk[e];
    c += k16[e] > lo;
  }
  for (int e = 0; c < m; e++)
    if (k16[e] == lo) sel[c++] = kk[e];
  if (m > 64) { /* rank counting is quadratic: sort a long list by qsort */
    uint32_t *u = (uint32_t *)sorted;
    for (int i = 0; i < m; i++) u[i] = (uint32_t)sel[i] ^ 0x80000000u;
    qsort(u, (size_t)m, 4, key_desc);
    for (int i = 0; i < m; i++) sorted[i] = (int32_t)(u[i] ^ 0x80000000u);
  } else /* keys are distinct: a key's rank is how many exceed it */
    for (int i = 0; i < m; i++) {
      const int32_t v = sel[i];
      int r = 0;
      for (int j = 0; j < m; j++) r += sel[j] > v;
      sorted[r] = v;
    }
  for (int i = 0; i < m; i++) {
    const uint32_t key = (uint32_t)sorted[i] ^ 0x80000000u;
    id[i] = key_id(key);
    z[i] = key_logit(key);
  }
}

void amoe_block_set_full_generic(amoe_block *b, int l, int t, const float *zfull) {
  set_full_plain(b->ids + ((size_t)l * b->n + t) * b->m, b->logits + ((size_t)l * b->n + t) * b->m, b->experts,
                 b->m, zfull);
}

void amoe_block_set_full(amoe_block *b, int l, int t, const float *zfull) {
  uint16_t *id = b->ids + ((size_t)l * b->n + t) * b->m;
  amoe_f16 *z = b->logits + ((size_t)l * b->n + t) * b->m;
  if (amoe_fast.set_full && b->experts % 32 == 0 && b->m <= 32) { /* every many-expert preset */
    amoe_fast.set_full(id, z, b->experts, b->m, zfull);
    return;
  }
  set_full_plain(id, z, b->experts, b->m, zfull);
}

/* Names the first bad pair of node t at layer l, or AMOE_OK if it has none
 * (the slow path of finish). */
static amoe_status block_pair_error(const amoe_block *b, int l, int t, amoe_err *e) {
  const uint16_t *id = amoe_block_ids(b, l, t);
  const amoe_f16 *z = amoe_block_logits(b, l, t);
  for (int j = 0; j < b->m; j++) {
    if (id[j] >= b->experts)
      return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: expert id %d out of range 0..%d", l, t, id[j],
                       b->experts - 1);
    for (int i = 0; i < j; i++)
      if (id[i] == id[j])
        return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: expert %d stored twice", l, t, id[j]);
    if (amoe_f16_bad(z[j]))
      return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: logit of expert %d is not a number (f16 0x%04x)",
                       l, t, id[j], z[j]);
    if (j > 0 && pair_key(z[j - 1], id[j - 1]) <= pair_key(z[j], id[j]))
      return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: stored logits are not in order", l, t);
  }
  return AMOE_OK;
}

/* A signed 16-bit key of an f16: s(a) > s(b) iff a > b (no NaN, no -0). */
static inline int16_t skey16(int16_t h) { return (int16_t)(h ^ ((h >> 15) & 0x7fff)); }

/* 1 when pair (z1, i1) is unusable or may not follow (z0, i0): id out of
 * range, NaN/+inf/-0 logit, or not after (z0, i0) in (logit desc, id asc).
 * 16-bit lanes throughout, so the loops below vectorise 8 pairs wide. */
static inline uint16_t pair_flaw(int16_t z0, int16_t i0, int16_t z1, int16_t i1, int16_t emax) {
  const int16_t s0 = skey16(z0), s1 = skey16(z1), a = (int16_t)(z1 & 0x7fff);
  return (uint16_t)((s1 > s0) | ((s0 == s1) & (i0 >= i1)) | (i1 > emax) | (i1 < 0) | (a > 0x7c00) |
                    (z1 == 0x7c00) | (z1 == (int16_t)0x8000));
}

AMOE_CLONES amoe_status amoe_block_check_pairs(const amoe_block *b, int unique, amoe_err *e) {
  /* One pass over every pair; a flaw is OR-ed into its position's slot, and
   * the first pair of every group only compares against a sentinel (the
   * pair before it belongs to another group). The slow path names the first
   * bad pair. Trace replay spends much of its time here. */
  if (!b->logits || b->lm != b->m)
    return amoe_fail(e, AMOE_EINVAL, "block %llu was read without all its logits", (unsigned long long)b->index);
  const size_t groups = (size_t)b->layers * b->n;
  const int m = b->m;
  const int16_t emax = (int16_t)(b->experts - 1);
  const int16_t *z = (const int16_t *)b->logits, *id = (const int16_t *)b->ids;
  uint16_t acc[AMOE_MAX_EXPERTS] = {0};
  unsigned bad = pair_flaw(0x7bff, -1, z[0], id[0], emax); /* 0x7bff: the largest finite f16 */
  for (int j = 1; j < m; j++) acc[j] |= pair_flaw(z[j - 1], id[j - 1], z[j], id[j], emax);
  for (size_t g = 1; g < groups; g++) {
    const int16_t *zg = z + g * m, *ig = id + g * m;
    for (int j = 0; j < m; j++) acc[j] |= pair_flaw(zg[j - 1], ig[j - 1], zg[j], ig[j], emax);
  }
  /* position 0 compared across groups: recheck it alone against the sentinel */
  for (size_t g = 1; g < groups; g++) bad |= pair_flaw(0x7bff, -1, z[g * m], id[g * m], emax);
  for (int j = 1; j < m; j++) bad |= acc[j];
  if (unique && !bad) {
    uint32_t seen[AMOE_MAX_EXPERTS] = {0}; /* seen[id] == g + 1: id already in group g */
    for (size_t g = 0; g < groups; g++) {
      const uint16_t *ids = b->ids + g * m;
      const uint32_t stamp = (uint32_t)g + 1;
      for (int j = 0; j < m; j++) {
        bad |= seen[ids[j]] == stamp;
        seen[ids[j]] = stamp;
      }
    }
  }
  for (int l = 0; l < b->layers && bad; l++)
    for (int t = 0; t < b->n; t++) AMOE_TRY(block_pair_error(b, l, t, e));
  return AMOE_OK;
}

amoe_status amoe_block_finish(amoe_block *b, amoe_block_check check, amoe_err *e) {
  if (b->n < 1) return amoe_fail(e, AMOE_EFORMAT, "empty block");
  if (b->parent[0] != -1) return amoe_fail(e, AMOE_EFORMAT, "node 0 must be the root (parent -1)");
  if (!b->accepted[0]) return amoe_fail(e, AMOE_EFORMAT, "the root must be accepted");
  b->depth[0] = 0;
  uint8_t acc_child[AMOE_MAX_NODES];
  memset(acc_child, 0, (size_t)b->n);
  for (int t = 1; t < b->n; t++) {
    int p = b->parent[t];
    if (p < 0 || p >= t) return amoe_fail(e, AMOE_EFORMAT, "node %d: parent %d must be in 0..%d", t, p, t - 1);
    if (b->depth[p] >= 255) return amoe_fail(e, AMOE_EFORMAT, "node %d: tree deeper than 255", t);
    if (b->accepted[t] > 1) return amoe_fail(e, AMOE_EFORMAT, "node %d: accepted must be 0 or 1", t);
    if (b->accepted[t] && !b->accepted[p])
      return amoe_fail(e, AMOE_EFORMAT, "node %d is accepted but its parent %d is not", t, p);
    if (b->accepted[t] && acc_child[p]++)
      return amoe_fail(e, AMOE_EFORMAT, "node %d: parent %d has two accepted children", t, p);
    if (!isfinite(b->logp[t]) || !isfinite(b->score[t]))
      return amoe_fail(e, AMOE_EFORMAT, "node %d: logp and score must be finite", t);
    b->depth[t] = (uint8_t)(b->depth[p] + 1);
  }
  return check == AMOE_CHECK_ALL ? amoe_block_check_pairs(b, 1, e) : AMOE_OK;
}

int amoe_block_accepted_count(const amoe_block *b) {
  int c = 0;
  for (int t = 0; t < b->n; t++) c += b->accepted[t];
  return c;
}


static amoe_status block_copy(amoe_block *dst, const amoe_block *src, amoe_err *e,
                              void *(*big)(void *, const void *, size_t)) {
  if (!src->logits || src->lm != src->m)
    return amoe_fail(e, AMOE_EINVAL, "block %llu was read without all its logits", (unsigned long long)src->index);
  if (dst->layers != src->layers || dst->m != src->m || dst->experts != src->experts) {
    amoe_block_free(dst);
    amoe_block_init(dst, src->layers, src->experts, src->m);
  }
  AMOE_TRY(amoe_block_reserve(dst, src->n, e));
  size_t n = (size_t)src->n, lm = (size_t)src->layers * src->m;
  dst->index = src->index;
  dst->request = src->request;
  dst->step = src->step;
  memcpy(dst->parent, src->parent, n * 4);
  memcpy(dst->logp, src->logp, n * 4);
  memcpy(dst->score, src->score, n * 4);
  memcpy(dst->accepted, src->accepted, n);
  memcpy(dst->depth, src->depth, n);
  big(dst->ids, src->ids, n * lm * 2);
  big(dst->logits, src->logits, n * lm * 2);
  return AMOE_OK;
}

amoe_status amoe_block_copy(amoe_block *dst, const amoe_block *src, amoe_err *e) {
  return block_copy(dst, src, e, memcpy);
}

amoe_status amoe_block_stash(amoe_block *dst, const amoe_block *src, amoe_err *e) {
  return block_copy(dst, src, e, amoe_fast.stream_copy ? amoe_fast.stream_copy : memcpy);
}

/* Entry h after p (the stored entry before it) in the stored order: p when
 * p is -inf (below -inf there is nothing: masked experts tie); else, where
 * h would rise above p, or tie it though the order is strict, one binary16
 * step below p (or p itself for a tie the order allows), skipping -0. */
static inline amoe_f16 after(amoe_f16 p, amoe_f16 h, int strict) {
  const uint32_t kp = amoe_f16_key(p), kh = amoe_f16_key(h);
  if (p == 0xfc00) return 0xfc00;
  if (kh > kp || (strict && kh == kp)) {
    const uint32_t k = strict ? kp - 1 : kp;
    h = amoe_f16_of_key(k);
    if (h == 0x8000) h = amoe_f16_of_key(k - 1);
  }
  return h;
}

void amoe_f16_store_ordered(const float *zf, const uint16_t *ids, int n, amoe_f16 *out) {
  for (int j = 0; j < n; j++) {
    amoe_f16 h = amoe_f16_from_f32(zf[j]);
    if (h == 0x8000) h = 0; /* -0 is not a stored logit */
    /* equal floats keep a tie only where the id rule orders them as given */
    out[j] = j > 0 ? after(out[j - 1], h, zf[j] < zf[j - 1] || ids[j] < ids[j - 1]) : h;
  }
}

/* the order key of a stored logit, -0 as +0 */
static inline uint32_t stored_key(amoe_f16 z) { return amoe_f16_key(z == 0x8000 ? 0 : z); }

void amoe_f16_fix_order(amoe_f16 *h, const amoe_f16 *old, const uint16_t *ids, int n) {
  for (int j = 1; j < n; j++) /* a tie stays only where the old logits tied and the id rule orders them as given */
    h[j] = after(h[j - 1], h[j], stored_key(old[j]) < stored_key(old[j - 1]) || ids[j] < ids[j - 1]);
}

void amoe_block_scale_logits_generic(amoe_block *b, int l, int t, float scale) {
  const size_t at = ((size_t)l * b->n + t) * b->m;
  amoe_f16 *z = b->logits + at, old[AMOE_MAX_EXPERTS];
  memcpy(old, z, (size_t)b->m * sizeof *z);
  for (int j = 0; j < b->m; j++) z[j] = amoe_f16_from_f32(amoe_f16_to_f32(old[j]) * scale); /* never -0 */
  amoe_f16_fix_order(z, old, b->ids + at, b->m);
}

void amoe_block_scale_logits(amoe_block *b, int l, int t, float scale) {
  if (amoe_fast.scale_logits && b->m % 16 == 0) {
    const size_t at = ((size_t)l * b->n + t) * b->m;
    amoe_f16 old[AMOE_MAX_EXPERTS];
    const int r = amoe_fast.scale_logits(b->logits + at, old, b->ids + at, b->m, scale);
    if (r == 2) amoe_f16_fix_order(b->logits + at, old, b->ids + at, b->m);
    if (r) return;
  }
  amoe_block_scale_logits_generic(b, l, t, scale);
}

/* (float desc, id asc) */
typedef struct {
  float z;
  uint16_t id;
} fpair;
static int fpair_desc(const void *a, const void *b) {
  const fpair *x = a, *y = b;
  if (x->z != y->z) return x->z > y->z ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* a stored logit and its expert: -inf ones order by id among themselves */
typedef struct {
  uint16_t z, id;
} zid;
static int masked_lower_id(const void *a, const void *b, const void *ctx) {
  (void)ctx;
  const zid *x = a, *y = b;
  return x->z == 0xfc00 && y->z == 0xfc00 && x->id < y->id;
}

static void store_pairs(amoe_block *b, int l, int t, fpair *p, int n) {
  qsort(p, (size_t)n, sizeof *p, fpair_desc);
  uint16_t *id = b->ids + ((size_t)l * b->n + t) * b->m;
  amoe_f16 *z = b->logits + ((size_t)l * b->n + t) * b->m;
  float zf[AMOE_MAX_EXPERTS] = {0};
  for (int j = 0; j < b->m; j++) {
    id[j] = p[j].id;
    zf[j] = p[j].z;
  }
  amoe_f16_store_ordered(zf, id, b->m, z);
  /* masked experts (-inf) after the first are ordered by id, as stored ties must be */
  zid e[AMOE_MAX_EXPERTS];
  for (int j = 0; j < b->m; j++) e[j] = (zid){z[j], id[j]};
  amoe_sort(e, b->m, sizeof *e, masked_lower_id, NULL);
  for (int j = 0; j < b->m; j++) id[j] = e[j].id;
}

void amoe_block_set_exact(amoe_block *b, int l, int t, const float *zfull) {
  fpair p[AMOE_MAX_EXPERTS];
  for (int e = 0; e < b->experts; e++) p[e] = (fpair){zfull[e], (uint16_t)e};
  store_pairs(b, l, t, p, b->experts);
}

void amoe_block_set_pairs_exact(amoe_block *b, int l, int t, const uint16_t *ids, const float *z) {
  fpair p[AMOE_MAX_EXPERTS];
  for (int j = 0; j < b->m; j++) p[j] = (fpair){z[j], ids[j]};
  store_pairs(b, l, t, p, b->m);
}
