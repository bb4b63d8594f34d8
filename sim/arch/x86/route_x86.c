/* route/route.c's amoe_route_layer for top-8 routing over at most 256
 * experts (every top-8 preset): S as a 256-bit mask, membership of eight
 * stored entries per instruction, the usual node's replacements without a
 * branch. The same sets and counts as amoe_route_layer_generic
 * (tests/test_route.c compares them on random layers). */
#include "route_scan.h"
#include "x86.h"

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
  uint64_t sbits[AMOE_ROUTE_WORDS]; /* the same bits as 64-bit words (E <= 256) */
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
      int c = amoe_route_scan(id, 8, m, S, ng, route);
      if (c < ng) c += amoe_route_unstored(b, l, t, sbits, ng - c, route + c);
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

__attribute__((target("avx2,bmi,popcnt"))) int amoe_x86_route_layer8(const amoe_block *b, int l, const int *nodes,
                                                                      int nn, const uint8_t *S,
                                                                      const amoe_route_sums *o) {
  if (b->m >= 16)
    return o->cnt ? route8(b, l, nodes, nn, S, o, 1, 1) : route8(b, l, nodes, nn, S, o, 0, 1);
  return o->cnt ? route8(b, l, nodes, nn, S, o, 1, 0) : route8(b, l, nodes, nn, S, o, 0, 0);
}
#endif
