#include "route.h"
#include "clones.h"
#include "fast.h"

int amoe_route_constrained(const amoe_block *b, int l, int t, int k, const uint8_t *S, uint16_t *out) {
  const uint16_t *id = amoe_block_ids(b, l, t);
  int c = 0;
  /* the natural top-k inside S, without branches (whether an expert is in
   * S is a coin flip to the predictor; c <= j < k, so every write is below
   * k), then their replacements */
  for (int j = 0; j < k && j < b->m; j++) {
    out[c] = id[j];
    c += S[id[j]] != 0;
  }
  c += amoe_route_scan(id, k, b->m, S, k - c, out + c);
  if (c == k) return c;
  uint64_t sbits[AMOE_ROUTE_WORDS];
  amoe_route_s_bits(S, b->experts, sbits);
  return c + amoe_route_unstored(b, l, t, sbits, k - c, out + c);
}

void amoe_route_natural_generic(const amoe_block *b, int l, int k, const int *nodes, int nn, uint8_t *U, int *cnt) {
  for (int i = 0; i < nn; i++) {
    const uint16_t *id = amoe_block_ids(b, l, nodes[i]);
    for (int j = 0; j < k; j++) {
      if (U) U[id[j]] = 1;
      else cnt[id[j]]++;
    }
  }
}

/* One loop per case, so no branch is left in the inner loop and top-8
 * (every Qwen3, OLMoE-sized and DeepSeek router) is eight fixed stores per
 * node; the ids base is read once, since a byte store through U may alias
 * *b. Natural replay spends about half its time here: this form is 1.3x
 * the generic one's (perf samples on a 400-block Qwen3 trace). */
void amoe_route_natural(const amoe_block *b, int l, int k, const int *restrict nodes, int nn, uint8_t *restrict U,
                        int *restrict cnt) {
  const uint16_t *ids = amoe_block_ids(b, l, 0);
  const size_t m = (size_t)b->m;
  if (k == 8 && U)
    for (int i = 0; i < nn; i++) {
      const uint16_t *id = ids + (size_t)nodes[i] * m;
      for (int j = 0; j < 8; j++) U[id[j]] = 1;
    }
  else if (k == 8)
    for (int i = 0; i < nn; i++) {
      const uint16_t *id = ids + (size_t)nodes[i] * m;
      for (int j = 0; j < 8; j++) cnt[id[j]]++;
    }
  else if (U)
    for (int i = 0; i < nn; i++)
      for (int j = 0; j < k; j++) U[ids[(size_t)nodes[i] * m + j]] = 1;
  else
    for (int i = 0; i < nn; i++)
      for (int j = 0; j < k; j++) cnt[ids[(size_t)nodes[i] * m + j]]++;
}

int amoe_route_union_add(const amoe_block *b, int l, int k, int t, uint8_t *U) {
  const uint16_t *id = amoe_block_ids(b, l, t);
  int added = 0;
  for (int j = 0; j < k && j < b->m; j++) {
    added += !U[id[j]];
    U[id[j]] = 1;
  }
  return added;
}

/* One node's natural entries: marks the union (and, with cnt, counts
 * them); returns how many leave S. */
static inline int mark_node(const uint16_t *restrict id, int k, const uint8_t *restrict S, uint8_t *restrict U,
                            int *restrict cnt) {
  int n = 0;
  for (int j = 0; j < k; j++) {
    U[id[j]] = 1;
    if (cnt) cnt[id[j]]++;
    n += !S[id[j]];
  }
  return n;
}

/* One replacement per displaced entry (always inside S). */
static inline void replace(const amoe_block *b, int l, int t, const uint16_t *id, int k, const uint8_t *S,
                           const uint64_t *sbits, int ng, const amoe_route_sums *o) {
  int got = amoe_route_scan(id, k, b->m, S, ng, o->route);
  if (got < ng) got += amoe_route_unstored(b, l, t, sbits, ng - got, o->route + got); /* past the stored m */
  if (o->cnt)
    for (int j = 0; j < got; j++) o->rcnt[o->route[j]]++;
  else
    for (int j = 0; j < got; j++) o->R[o->route[j]] = 1;
}

AMOE_CLONES int amoe_route_layer_generic(const amoe_block *b, int l, int k, const int *nodes, int nn,
                                          const uint8_t *S, const amoe_route_sums *o) {
  uint64_t sbits[AMOE_ROUTE_WORDS];
  int have_bits = 0; /* (built when a node first needs them) */
  int displaced = 0;
  for (int i = 0; i < nn; i++) {
    const int t = nodes[i];
    const uint16_t *restrict id = amoe_block_ids(b, l, t);
    /* a natural top-k entry stays exactly when its expert is in S (fewer
     * than k entries of S precede it) */
    const int ng = mark_node(id, k, S, o->U, o->cnt);
    displaced += ng;
    if (ng && !have_bits) {
      amoe_route_s_bits(S, b->experts, sbits);
      have_bits = 1;
    }
    if (ng) replace(b, l, t, id, k, S, sbits, ng, o);
  }
  return displaced;
}

int amoe_route_layer(const amoe_block *b, int l, int k, const int *nodes, int nn, const uint8_t *S,
                     const amoe_route_sums *o) {
  if (amoe_fast.route_layer8 && k == 8 && b->experts <= 256 && b->m >= 8)
    return amoe_fast.route_layer8(b, l, nodes, nn, S, o);
  return amoe_route_layer_generic(b, l, k, nodes, nn, S, o);
}

void amoe_route_natural_counts2(const amoe_block *b, int l, int k, const int *restrict nodes, int nn, int *restrict a,
                                int *restrict c) {
  const uint16_t *ids = amoe_block_ids(b, l, 0);
  const size_t m = (size_t)b->m;
  int i = 0;
  if (k == 8)
    for (; i + 1 < nn; i += 2) {
      const uint16_t *x = ids + (size_t)nodes[i] * m, *y = ids + (size_t)nodes[i + 1] * m;
      for (int j = 0; j < 8; j++) {
        a[x[j]]++;
        c[y[j]]++;
      }
    }
  for (; i < nn; i++) { /* (and every node but at k = 8) */
    const uint16_t *x = ids + (size_t)nodes[i] * m;
    for (int j = 0; j < k; j++) a[x[j]]++;
  }
}
