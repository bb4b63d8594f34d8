/* What the plain constrained routing (route.c) and its vector path
 * (arch/x86/route_x86.c) share, below both so that neither calls the other
 * back: what a layer's routing adds up to, and the two scans that find a
 * node's replacements: the first `need` of its stored entries id[k..m)
 * inside S, returning how many (< need only when they run out); then, the
 * rest of S being -inf, the lowest ids of S (sbits: S as bits) that node t
 * does not store, at most `need`, returning how many. */
#ifndef AMOE_ROUTE_SCAN_H
#define AMOE_ROUTE_SCAN_H

#include <stdint.h>

#include "block.h"

#define AMOE_ROUTE_WORDS (AMOE_MAX_EXPERTS / 64)

/* What routing a layer's verified nodes under S adds up to. The caller
 * zeroes U, cnt, rcnt and R (all E + 1 of the last two). The last slot of
 * rcnt and R is a spare, written to instead of branching; what it holds
 * means nothing. */
typedef struct amoe_route_sums {
  uint8_t *U;      /* [E] 1 where a natural top-k entry points (the union) */
  int *cnt;        /* [E] or NULL: natural entries per expert */
  int *rcnt;       /* [E + 1] with cnt: replacements per expert */
  uint8_t *R;      /* [E + 1] without cnt: 1 where a replacement goes */
  uint16_t *route; /* scratch: k entries */
} amoe_route_sums;

static inline int amoe_route_scan(const uint16_t *id, int k, int m, const uint8_t *S, int need, uint16_t *out) {
  int c = 0;
  for (int j = k; j < m && c < need; j++) /* one stored entry per displaced one: a short scan */
    if (S[id[j]]) out[c++] = id[j];
  return c;
}

/* S as bits, 64 experts a word, for route_unstored (once per layer). */
static inline void amoe_route_s_bits(const uint8_t *S, int E, uint64_t *w) {
  for (int i = 0; i < (E + 63) / 64; i++) {
    uint64_t x = 0;
    const int e0 = 64 * i, n = E - e0 < 64 ? E - e0 : 64;
    for (int j = 0; j < n; j++) x |= (uint64_t)(S[e0 + j] != 0) << j;
    w[i] = x;
  }
}

/* S's bits less the stored ids', lowest first: with a small S (moe-spec,
 * oracle) many nodes come here, and an expert-by-expert scan with a search
 * of the stored ids for each member of S took most of those rows' time. */
static inline int amoe_route_unstored(const amoe_block *b, int l, int t, const uint64_t *sbits, int need, uint16_t *out) {
  const uint16_t *id = amoe_block_ids(b, l, t);
  const int nw = (b->experts + 63) / 64;
  uint64_t st[AMOE_ROUTE_WORDS];
  for (int i = 0; i < nw; i++) st[i] = 0;
  for (int q = 0; q < b->m; q++) st[id[q] >> 6] |= (uint64_t)1 << (id[q] & 63);
  int c = 0;
  for (int i = 0; i < nw && c < need; i++)
    for (uint64_t x = sbits[i] & ~st[i]; x && c < need; x &= x - 1) out[c++] = (uint16_t)(64 * i + __builtin_ctzll(x));
  return c;
}

#endif
