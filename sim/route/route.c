#include "route.h"
#include "clones.h"

/* The first `need` of a node's stored entries id[k..m) inside S; returns
 * how many (< need only when they run out). */
static inline int route_scan(const uint16_t *id, int k, int m, const uint8_t *S, int need, uint16_t *out) {
  int c = 0;
  for (int j = k; j < m && c < need; j++) /* one stored entry per displaced one: a short scan */
    if (S[id[j]]) out[c++] = id[j];
  return c;
}

/* S as bits, 64 experts a word, for route_unstored (once per layer). */
#define ROUTE_WORDS (AMOE_MAX_EXPERTS / 64)
static void route_s_bits(const uint8_t *S, int E, uint64_t *w) {
  for (int i = 0; i < (E + 63) / 64; i++) {
    uint64_t x = 0;
    const int e0 = 64 * i, n = E - e0 < 64 ? E - e0 : 64;
    for (int j = 0; j < n; j++) x |= (uint64_t)(S[e0 + j] != 0) << j;
    w[i] = x;
  }
}

/* Then, the rest of S being -inf, the lowest ids of S that node t does not
 * store, at most `need`; returns how many. S's bits less the stored ids',
 * lowest first: with a small S (moe-spec, oracle) many nodes come here,
 * and an expert-by-expert scan with a search of the stored ids for each
 * member of S took most of those rows' time. */
static int route_unstored(const amoe_block *b, int l, int t, const uint64_t *sbits, int need, uint16_t *out) {
  const uint16_t *id = amoe_block_ids(b, l, t);
  const int nw = (b->experts + 63) / 64;
  uint64_t st[ROUTE_WORDS];
  for (int i = 0; i < nw; i++) st[i] = 0;
  for (int q = 0; q < b->m; q++) st[id[q] >> 6] |= (uint64_t)1 << (id[q] & 63);
  int c = 0;
  for (int i = 0; i < nw && c < need; i++)
    for (uint64_t x = sbits[i] & ~st[i]; x && c < need; x &= x - 1) out[c++] = (uint16_t)(64 * i + __builtin_ctzll(x));
  return c;
}

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
  c += route_scan(id, k, b->m, S, k - c, out + c);
  if (c == k) return c;
  uint64_t sbits[ROUTE_WORDS];
  route_s_bits(S, b->experts, sbits);
  return c + route_unstored(b, l, t, sbits, k - c, out + c);
}

void amoe_route_natural(const amoe_block *b, int l, int k, const int *restrict nodes, int nn, uint8_t *restrict U,
                        int *restrict cnt) {
  const uint16_t *ids = amoe_block_ids(b, l, 0); /* (a byte store may alias *b: read it once) */
  const size_t m = (size_t)b->m;
  if (k == 8 && U) /* eight fixed statements per node: see route.h */
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
  int got = route_scan(id, k, b->m, S, ng, o->route);
  if (got < ng) got += route_unstored(b, l, t, sbits, ng - got, o->route + got); /* past the stored m */
  if (o->cnt)
    for (int j = 0; j < got; j++) o->rcnt[o->route[j]]++;
  else
    for (int j = 0; j < got; j++) o->R[o->route[j]] = 1;
}

AMOE_CLONES int amoe_route_layer_portable(const amoe_block *b, int l, int k, const int *nodes, int nn,
                                          const uint8_t *S, const amoe_route_sums *o) {
  uint64_t sbits[ROUTE_WORDS];
  int have_bits = 0; /* (built when a node first needs them) */
  int displaced = 0;
  for (int i = 0; i < nn; i++) {
    const int t = nodes[i];
    const uint16_t *restrict id = amoe_block_ids(b, l, t);
    /* a natural top-k entry stays exactly when its expert is in S (fewer
     * than k entries of S precede it) */
    int ng;
    if (k == 8) /* (a constant: unrolled) */
      ng = o->cnt ? mark_node(id, 8, S, o->U, o->cnt) : mark_node(id, 8, S, o->U, NULL);
    else
      ng = o->cnt ? mark_node(id, k, S, o->U, o->cnt) : mark_node(id, k, S, o->U, NULL);
    displaced += ng;
    if (ng && !have_bits) {
      route_s_bits(S, b->experts, sbits);
      have_bits = 1;
    }
    if (ng) replace(b, l, t, id, k, S, sbits, ng, o);
  }
  return displaced;
}

#ifdef AMOE_X86_PATHS
/* S as a 256-bit mask (bit e of word e / 32), for E <= 256. */
__attribute__((target("avx2"))) static __m256i s_mask256(const uint8_t *S, int E) {
  uint32_t wd[8] = {0};
  int e = 0;
  for (; e + 32 <= E; e += 32) /* 32 bytes per compare: a set bit where S[e] != 0 */
    wd[e >> 5] = ~(uint32_t)_mm256_movemask_epi8(
        _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(const void *)(S + e)), _mm256_setzero_si256()));
  for (; e < E; e++) wd[e >> 5] |= (uint32_t)(S[e] != 0) << (e & 31);
  return _mm256_loadu_si256((const __m256i *)(const void *)wd);
}
/* Bit j set when expert id[j] (j < 8) is in S: vpermd picks each id's word
 * of the mask, a variable shift its bit. */
__attribute__((target("avx2"))) static inline unsigned in_s8(const uint16_t *id, __m256i smask) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)id));
  const __m256i bit = _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(smask, _mm256_srli_epi32(v, 5)),
                                        _mm256_and_si256(v, _mm256_set1_epi32(31)));
  return (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(bit, 31)));
}

/* Top-8 routing, at most 256 experts, m >= 8. No branch for the usual node
 * (at most two displaced entries, replaced from stored entries 8..15): the
 * first two replacements are plain stores, to the spare slot when there is
 * none. A third displaced entry, or a scan past entry 15 or past the stored
 * m, takes a branch that is rarely taken. Compiled once per (counts or
 * marks, m >= 16 or not), so that the loop holds no test of either. */
__attribute__((target("avx2,bmi,popcnt"), always_inline)) static inline int
route8(const amoe_block *b, int l, const int *nodes, int nn, const uint8_t *S, const amoe_route_sums *o,
       const int with_cnt, const int m16) {
  const __m256i smask = s_mask256(S, b->experts);
  uint64_t sbits[ROUTE_WORDS]; /* the same bits as 64-bit words (E <= 256) */
  _mm256_storeu_si256((__m256i *)(void *)sbits, smask);
  const int m = b->m;
  const unsigned E = (unsigned)b->experts;
  uint8_t *restrict U = o->U, *restrict R = o->R;
  int *restrict cnt = o->cnt, *restrict rcnt = o->rcnt;
  const uint16_t *const ids = amoe_block_ids(b, l, 0); /* (byte stores may alias *b: read it once) */
  int displaced = 0;
  for (int i = 0; i < nn; i++) {
    const int t = nodes[i];
    const uint16_t *id = ids + (size_t)t * m;
    for (int j = 0; j < 8; j++) U[id[j]] = 1;
    if (with_cnt)
      for (int j = 0; j < 8; j++) cnt[id[j]]++;
    const int ng = __builtin_popcount(0xffu & ~in_s8(id, smask)); /* entries leaving S */
    displaced += ng;
    /* stored entries 8..15 inside S, a bit each (past them in 0.2% of
     * the nodes of a qwen3 trace) */
    const unsigned f = m16 ? in_s8(id + 8, smask) : 0;
    /* the first two replacements' experts, or the spare slot E (tzcnt of
     * 0 is 32; the mask keeps the index inside the row) */
    const unsigned f1 = f & (f - 1);
    const unsigned a1 = (ng >= 1) & (f != 0), a2 = (ng >= 2) & (f1 != 0), m1 = 0u - a1, m2 = 0u - a2;
    const unsigned x1 = (id[(8 + _tzcnt_u32(f)) & m1] & m1) | (E & ~m1);
    const unsigned x2 = (id[(8 + _tzcnt_u32(f1)) & m2] & m2) | (E & ~m2);
    if (with_cnt) {
      rcnt[x1]++;
      rcnt[x2]++;
    } else {
      R[x1] = 1;
      R[x2] = 1;
    }
    const int got = (int)(a1 + a2);
    if (got < ng) { /* rare: a third displaced entry, or 8..15 ran out: the plain scan, past the two marked */
      uint16_t *route = o->route;
      int c = route_scan(id, 8, m, S, ng, route);
      if (c < ng) c += route_unstored(b, l, t, sbits, ng - c, route + c);
      for (int j = got; j < c; j++) {
        if (with_cnt)
          rcnt[route[j]]++;
        else
          R[route[j]] = 1;
      }
    }
  }
  return displaced;
}

__attribute__((target("avx2,bmi,popcnt"))) static int route_layer8_avx2(const amoe_block *b, int l,
                                                                         const int *nodes, int nn,
                                                                         const uint8_t *S,
                                                                         const amoe_route_sums *o) {
  if (b->m >= 16)
    return o->cnt ? route8(b, l, nodes, nn, S, o, 1, 1) : route8(b, l, nodes, nn, S, o, 0, 1);
  return o->cnt ? route8(b, l, nodes, nn, S, o, 1, 0) : route8(b, l, nodes, nn, S, o, 0, 0);
}
#endif

int amoe_route_layer(const amoe_block *b, int l, int k, const int *nodes, int nn, const uint8_t *S,
                     const amoe_route_sums *o) {
#ifdef AMOE_X86_PATHS
  if (k == 8 && b->experts <= 256 && b->m >= 8 && amoe_cpu_avx2_f16c())
    return route_layer8_avx2(b, l, nodes, nn, S, o);
#endif
  return amoe_route_layer_portable(b, l, k, nodes, nn, S, o);
}
