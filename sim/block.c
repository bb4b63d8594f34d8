#include "block.h"
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void amoe_block_init(amoe_block *b, int layers, int experts, int m) {
  memset(b, 0, sizeof *b);
  b->layers = layers;
  b->experts = experts;
  b->m = m;
  b->owns = 1;
}

void amoe_block_free(amoe_block *b) {
  if (b->owns) free(b->mem);
  free(b->depth_mem);
  b->mem = NULL;
  b->depth_mem = NULL;
  b->cap_n = 0;
}

amoe_status amoe_block_reserve(amoe_block *b, int n, amoe_err *e) {
  if (n < 1 || n > AMOE_MAX_NODES)
    return amoe_fail(e, AMOE_EINVAL, "block has %d nodes (allowed 1..%d)", n, AMOE_MAX_NODES);
  if (!b->owns) { /* detach from a reader's buffer */
    b->mem = NULL;
    b->cap_n = 0;
    b->owns = 1;
  }
  if (n > b->cap_n) {
    size_t lm = (size_t)b->layers * b->m;
    size_t bytes = (size_t)n * (4 + 4 + 4 + 1) + 8 + (size_t)n * lm * (2 + 4) + 16;
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
  b->logits = (float *)p;   p += (size_t)b->cap_n * lm * 4;
  b->parent = (int32_t *)p; p += (size_t)b->cap_n * 4;
  b->logp = (float *)p;     p += (size_t)b->cap_n * 4;
  b->score = (float *)p;    p += (size_t)b->cap_n * 4;
  b->ids = (uint16_t *)p;   p += (size_t)b->cap_n * lm * 2;
  b->accepted = (uint8_t *)p;
  b->depth = b->depth_mem;
  b->n = n;
  return AMOE_OK;
}

static int pair_before(float za, int ia, float zb, int ib) {
  return za > zb || (za == zb && ia < ib);
}

void amoe_block_sort_pairs(amoe_block *b, int l, int t) {
  uint16_t *id = b->ids + ((size_t)l * b->n + t) * b->m;
  float *z = b->logits + ((size_t)l * b->n + t) * b->m;
  for (int i = 1; i < b->m; i++) { /* insertion sort: m is small */
    float zv = z[i];
    uint16_t iv = id[i];
    int j = i - 1;
    while (j >= 0 && pair_before(zv, iv, z[j], id[j])) {
      z[j + 1] = z[j];
      id[j + 1] = id[j];
      j--;
    }
    z[j + 1] = zv;
    id[j + 1] = iv;
  }
}

/* An order-preserving integer key: higher key = higher logit, then lower id. */
static inline uint64_t pair_key(float z, int id) {
  uint32_t u;
  memcpy(&u, &z, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (uint64_t)u << 16 | (uint64_t)(0xffff - id);
}

/* Selects the top m of E by a branch-free quickselect on integer keys, then
 * sorts those m (logit desc, id asc). */
void amoe_block_set_full(amoe_block *b, int l, int t, const float *zfull) {
  uint16_t *id = b->ids + ((size_t)l * b->n + t) * b->m;
  float *z = b->logits + ((size_t)l * b->n + t) * b->m;
  const int E = b->experts, m = b->m;
  uint64_t k[AMOE_MAX_EXPERTS], tmp[AMOE_MAX_EXPERTS];
  for (int e = 0; e < E; e++) k[e] = pair_key(zfull[e], e);
  int lo = 0, hi = E; /* the m best lie in k[0..m) once lo..hi brackets m */
  while (m < E && hi - lo > 1) {
    uint64_t piv = k[lo + ((hi - lo) >> 1)];
    int nb = 0, na = 0; /* greater-than-pivot first, then the rest */
    for (int i = lo; i < hi; i++) {
      uint64_t v = k[i];
      int big = v > piv;
      tmp[nb] = v;
      nb += big;
      k[lo + na] = v;
      na += !big;
    }
    /* k[lo..lo+na) holds the not-bigger; move them after the bigger */
    for (int i = na - 1; i >= 0; i--) k[lo + nb + i] = k[lo + i];
    for (int i = 0; i < nb; i++) k[lo + i] = tmp[i];
    int cut = lo + nb; /* k[lo..cut) > piv >= k[cut..hi) */
    if (cut == m) break;
    if (cut > m)
      hi = cut;
    else if (cut == lo) { /* the pivot is the largest here: it is in place */
      for (int i = lo + 1; i < hi; i++)
        if (k[i] == piv) {
          k[i] = k[lo];
          k[lo] = piv;
        }
      lo++;
    } else
      lo = cut;
  }
  /* bitonic sort of the m best (padded to a power of two with zero keys,
   * which sort last): branch-free, so random logits cost no mispredictions */
  int n2 = 1;
  while (n2 < m) n2 <<= 1;
  for (int i = m; i < n2; i++) k[i] = 0;
  for (int kk = 2; kk <= n2; kk <<= 1)
    for (int j = kk >> 1; j > 0; j >>= 1)
      for (int i = 0; i < n2; i++) {
        int p = i ^ j;
        if (p <= i) continue;
        uint64_t x = k[i], y = k[p];
        uint64_t mx = x > y ? x : y, mn = x > y ? y : x;
        int desc = (i & kk) == 0;
        k[i] = desc ? mx : mn;
        k[p] = desc ? mn : mx;
      }
  for (int i = 0; i < m; i++) {
    int e = 0xffff - (int)(k[i] & 0xffff);
    id[i] = (uint16_t)e;
    z[i] = zfull[e];
  }
}

/* Names the first bad pair of node t at layer l, or AMOE_OK if it has none
 * (the slow path of finish). */
static amoe_status block_pair_error(const amoe_block *b, int l, int t, amoe_err *e) {
  const uint16_t *id = amoe_block_ids(b, l, t);
  const float *z = amoe_block_logits(b, l, t);
  for (int j = 0; j < b->m; j++) {
    if (id[j] >= b->experts)
      return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: expert id %d out of range 0..%d", l, t, id[j],
                       b->experts - 1);
    for (int i = 0; i < j; i++)
      if (id[i] == id[j])
        return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: expert %d stored twice", l, t, id[j]);
    if (isnan(z[j]) || (isinf(z[j]) && z[j] > 0))
      return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: logit of expert %d is not a number", l, t, id[j]);
    if (j > 0 && !pair_before(z[j - 1], id[j - 1], z[j], id[j]))
      return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: stored logits are not in order", l, t);
  }
  return AMOE_OK;
}

amoe_status amoe_block_finish(amoe_block *b, amoe_err *e) {
  if (b->n < 1) return amoe_fail(e, AMOE_EFORMAT, "empty block");
  if (b->parent[0] != -1) return amoe_fail(e, AMOE_EFORMAT, "node 0 must be the root (parent -1)");
  if (!b->accepted[0]) return amoe_fail(e, AMOE_EFORMAT, "the root must be accepted");
  b->depth[0] = 0;
  uint8_t *acc_child = calloc((size_t)b->n, 1);
  if (!acc_child) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  amoe_status st = AMOE_OK;
  for (int t = 1; t < b->n && st == AMOE_OK; t++) {
    int p = b->parent[t];
    if (p < 0 || p >= t)
      st = amoe_fail(e, AMOE_EFORMAT, "node %d: parent %d must be in 0..%d", t, p, t - 1);
    else if (b->depth[p] >= 255)
      st = amoe_fail(e, AMOE_EFORMAT, "node %d: tree deeper than 255", t);
    else if (b->accepted[t] > 1)
      st = amoe_fail(e, AMOE_EFORMAT, "node %d: accepted must be 0 or 1", t);
    else if (b->accepted[t] && !b->accepted[p])
      st = amoe_fail(e, AMOE_EFORMAT, "node %d is accepted but its parent %d is not", t, p);
    else if (b->accepted[t] && acc_child[p]++)
      st = amoe_fail(e, AMOE_EFORMAT, "node %d: parent %d has two accepted children", t, p);
    else if (!isfinite(b->logp[t]) || !isfinite(b->score[t]))
      st = amoe_fail(e, AMOE_EFORMAT, "node %d: logp and score must be finite", t);
    else
      b->depth[t] = (uint8_t)(b->depth[p] + 1);
  }
  free(acc_child);
  if (st != AMOE_OK) return st;
  /* Every stored pair: id in range, logit not NaN or +inf, in order, ids
   * unique. Separate flat passes the compiler vectorises (a trace of 590 KB
   * blocks spends its time here); the slow path names the first bad pair. */
  const size_t groups = (size_t)b->layers * b->n, total = groups * (size_t)b->m;
  const int m = b->m;
  const uint16_t E = (uint16_t)b->experts;
  unsigned bad = 0;
  for (size_t i = 0; i < total; i++) bad |= b->ids[i] >= E;
  for (size_t i = 0; i < total; i++) bad |= !(b->logits[i] <= 3.4e38f);
  uint32_t seen[AMOE_MAX_EXPERTS] = {0}; /* seen[id] == g + 1: id already in group g */
  for (size_t g = 0; g < groups && !bad; g++) {
    const float *z = b->logits + g * m;
    const uint16_t *id = b->ids + g * m;
    for (int j = 1; j < m; j++) bad |= !(z[j - 1] > z[j] || (z[j - 1] == z[j] && id[j - 1] < id[j]));
    const uint32_t stamp = (uint32_t)g + 1;
    for (int j = 0; j < m; j++) {
      bad |= seen[id[j]] == stamp;
      seen[id[j]] = stamp;
    }
  }
  for (int l = 0; l < b->layers && bad; l++)
    for (int t = 0; t < b->n; t++) AMOE_TRY(block_pair_error(b, l, t, e));
  return AMOE_OK;
}

int amoe_block_accepted_count(const amoe_block *b) {
  int c = 0;
  for (int t = 0; t < b->n; t++) c += b->accepted[t];
  return c;
}

amoe_status amoe_block_copy(amoe_block *dst, const amoe_block *src, amoe_err *e) {
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
  memcpy(dst->ids, src->ids, n * lm * 2);
  memcpy(dst->logits, src->logits, n * lm * 4);
  return AMOE_OK;
}
