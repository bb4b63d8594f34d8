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

void amoe_block_set_full(amoe_block *b, int l, int t, const float *zfull) {
  uint16_t *id = b->ids + ((size_t)l * b->n + t) * b->m;
  float *z = b->logits + ((size_t)l * b->n + t) * b->m;
  int m = b->m, cnt = 0;
  /* Keep a sorted top-m list; experts arrive in id order so ties keep the lower id. */
  for (int e = 0; e < b->experts; e++) {
    float v = zfull[e];
    if (cnt == m && !pair_before(v, e, z[m - 1], id[m - 1])) continue;
    int j = cnt < m ? cnt++ : m - 1;
    while (j > 0 && pair_before(v, e, z[j - 1], id[j - 1])) {
      z[j] = z[j - 1];
      id[j] = id[j - 1];
      j--;
    }
    z[j] = v;
    id[j] = (uint16_t)e;
  }
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
  uint8_t seen[AMOE_MAX_EXPERTS / 8 + 1];
  for (int l = 0; l < b->layers; l++)
    for (int t = 0; t < b->n; t++) {
      const uint16_t *id = amoe_block_ids(b, l, t);
      const float *z = amoe_block_logits(b, l, t);
      memset(seen, 0, sizeof seen);
      for (int j = 0; j < b->m; j++) {
        if (id[j] >= b->experts)
          return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: expert id %d out of range 0..%d", l, t,
                           id[j], b->experts - 1);
        if (seen[id[j] >> 3] & (1u << (id[j] & 7)))
          return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: expert %d stored twice", l, t, id[j]);
        seen[id[j] >> 3] |= (uint8_t)(1u << (id[j] & 7));
        if (isnan(z[j]) || (isinf(z[j]) && z[j] > 0))
          return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: logit of expert %d is not a number", l,
                           t, id[j]);
        if (j > 0 && !pair_before(z[j - 1], id[j - 1], z[j], id[j]))
          return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: stored logits are not in order", l, t);
      }
    }
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
