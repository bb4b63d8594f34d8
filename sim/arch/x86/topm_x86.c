/* The generator's top-m of a node-layer's logits (core/block.c,
 * set_full_plain) with AVX2 and F16C: pair keys sorted by bitonic networks,
 * or for m <= 8 the few keys at or above sixteen lanes' eighth largest maximum.
 * Tested against the plain version by tests/test_block.c. */
#include "x86.h"

#ifdef AMOE_X86_PATHS
#include <stdint.h>

/* Bitonic networks on 32 int32 keys in four registers (key 8r + lane),
 * written out (generated: pair (i, i ^ j) within blocks of
 * k, the lower index takes the larger key where i & k is 0, the smaller
 * elsewhere). I: partners in the same register, lanes taking the max set
 * in the mask; X: partners in two registers, same lane. */
#define I(v, j, ...)                                                                                        \
  _mm256_blend_epi32(_mm256_min_epi32(v, PERM(v, j)), _mm256_max_epi32(v, PERM(v, j)), IMM8(__VA_ARGS__))
#define IMM8(a, b, c, d, e, f, g, h) /* lanes set to -1 take the max: an immediate blend, no mask register */   \
  (((a)&1) | ((b)&1) << 1 | ((c)&1) << 2 | ((d)&1) << 3 | ((e)&1) << 4 | ((f)&1) << 5 | ((g)&1) << 6 | ((h)&1) << 7)
#define PERM(v, j)                                                                                          \
  ((j) == 4   ? _mm256_permute2x128_si256(v, v, 1)                                                          \
   : (j) == 2 ? _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2))                                           \
              : _mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)))
#define X(a, b, desc)                                                                                       \
  do {                                                                                                      \
    const __m256i hi_ = _mm256_max_epi32(v##a, v##b), lo_ = _mm256_min_epi32(v##a, v##b);                  \
    v##a = (desc) ? hi_ : lo_;                                                                              \
    v##b = (desc) ? lo_ : hi_;                                                                              \
  } while (0)
/* The network's k = 32 stage: sorts a bitonic sequence of 32 keys in
 * v[0..4) descending. */
__attribute__((target("avx2"), always_inline)) static inline void bitonic32_desc(__m256i v[4]) {
  __m256i v0 = v[0], v1 = v[1], v2 = v[2], v3 = v[3];
  X(0, 2, 1);
  X(1, 3, 1);
  X(0, 1, 1);
  X(2, 3, 1);
  v0 = I(v0, 4, -1, -1, -1, -1, 0, 0, 0, 0);
  v1 = I(v1, 4, -1, -1, -1, -1, 0, 0, 0, 0);
  v2 = I(v2, 4, -1, -1, -1, -1, 0, 0, 0, 0);
  v3 = I(v3, 4, -1, -1, -1, -1, 0, 0, 0, 0);
  v0 = I(v0, 2, -1, -1, 0, 0, -1, -1, 0, 0);
  v1 = I(v1, 2, -1, -1, 0, 0, -1, -1, 0, 0);
  v2 = I(v2, 2, -1, -1, 0, 0, -1, -1, 0, 0);
  v3 = I(v3, 2, -1, -1, 0, 0, -1, -1, 0, 0);
  v0 = I(v0, 1, -1, 0, -1, 0, -1, 0, -1, 0);
  v1 = I(v1, 1, -1, 0, -1, 0, -1, 0, -1, 0);
  v2 = I(v2, 1, -1, 0, -1, 0, -1, 0, -1, 0);
  v3 = I(v3, 1, -1, 0, -1, 0, -1, 0, -1, 0);
  v[0] = v0, v[1] = v1, v[2] = v2, v[3] = v3;
}
/* Sorts 32 keys descending. */
__attribute__((target("avx2"), always_inline)) static inline void sort32_desc(__m256i v[4]) {
  __m256i v0 = v[0], v1 = v[1], v2 = v[2], v3 = v[3];
  v0 = I(v0, 1, -1, 0, 0, -1, -1, 0, 0, -1); /* k=2 j=1 */
  v1 = I(v1, 1, -1, 0, 0, -1, -1, 0, 0, -1); /* k=2 j=1 */
  v2 = I(v2, 1, -1, 0, 0, -1, -1, 0, 0, -1); /* k=2 j=1 */
  v3 = I(v3, 1, -1, 0, 0, -1, -1, 0, 0, -1); /* k=2 j=1 */
  v0 = I(v0, 2, -1, -1, 0, 0, 0, 0, -1, -1); /* k=4 j=2 */
  v1 = I(v1, 2, -1, -1, 0, 0, 0, 0, -1, -1); /* k=4 j=2 */
  v2 = I(v2, 2, -1, -1, 0, 0, 0, 0, -1, -1); /* k=4 j=2 */
  v3 = I(v3, 2, -1, -1, 0, 0, 0, 0, -1, -1); /* k=4 j=2 */
  v0 = I(v0, 1, -1, 0, -1, 0, 0, -1, 0, -1); /* k=4 j=1 */
  v1 = I(v1, 1, -1, 0, -1, 0, 0, -1, 0, -1); /* k=4 j=1 */
  v2 = I(v2, 1, -1, 0, -1, 0, 0, -1, 0, -1); /* k=4 j=1 */
  v3 = I(v3, 1, -1, 0, -1, 0, 0, -1, 0, -1); /* k=4 j=1 */
  v0 = I(v0, 4, -1, -1, -1, -1, 0, 0, 0, 0); /* k=8 j=4 */
  v1 = I(v1, 4, 0, 0, 0, 0, -1, -1, -1, -1); /* k=8 j=4 */
  v2 = I(v2, 4, -1, -1, -1, -1, 0, 0, 0, 0); /* k=8 j=4 */
  v3 = I(v3, 4, 0, 0, 0, 0, -1, -1, -1, -1); /* k=8 j=4 */
  v0 = I(v0, 2, -1, -1, 0, 0, -1, -1, 0, 0); /* k=8 j=2 */
  v1 = I(v1, 2, 0, 0, -1, -1, 0, 0, -1, -1); /* k=8 j=2 */
  v2 = I(v2, 2, -1, -1, 0, 0, -1, -1, 0, 0); /* k=8 j=2 */
  v3 = I(v3, 2, 0, 0, -1, -1, 0, 0, -1, -1); /* k=8 j=2 */
  v0 = I(v0, 1, -1, 0, -1, 0, -1, 0, -1, 0); /* k=8 j=1 */
  v1 = I(v1, 1, 0, -1, 0, -1, 0, -1, 0, -1); /* k=8 j=1 */
  v2 = I(v2, 1, -1, 0, -1, 0, -1, 0, -1, 0); /* k=8 j=1 */
  v3 = I(v3, 1, 0, -1, 0, -1, 0, -1, 0, -1); /* k=8 j=1 */
  X(0, 1, 1); /* k=16 j=8 */
  X(2, 3, 0); /* k=16 j=8 */
  v0 = I(v0, 4, -1, -1, -1, -1, 0, 0, 0, 0); /* k=16 j=4 */
  v1 = I(v1, 4, -1, -1, -1, -1, 0, 0, 0, 0); /* k=16 j=4 */
  v2 = I(v2, 4, 0, 0, 0, 0, -1, -1, -1, -1); /* k=16 j=4 */
  v3 = I(v3, 4, 0, 0, 0, 0, -1, -1, -1, -1); /* k=16 j=4 */
  v0 = I(v0, 2, -1, -1, 0, 0, -1, -1, 0, 0); /* k=16 j=2 */
  v1 = I(v1, 2, -1, -1, 0, 0, -1, -1, 0, 0); /* k=16 j=2 */
  v2 = I(v2, 2, 0, 0, -1, -1, 0, 0, -1, -1); /* k=16 j=2 */
  v3 = I(v3, 2, 0, 0, -1, -1, 0, 0, -1, -1); /* k=16 j=2 */
  v0 = I(v0, 1, -1, 0, -1, 0, -1, 0, -1, 0); /* k=16 j=1 */
  v1 = I(v1, 1, -1, 0, -1, 0, -1, 0, -1, 0); /* k=16 j=1 */
  v2 = I(v2, 1, 0, -1, 0, -1, 0, -1, 0, -1); /* k=16 j=1 */
  v3 = I(v3, 1, 0, -1, 0, -1, 0, -1, 0, -1); /* k=16 j=1 */
  v[0] = v0, v[1] = v1, v[2] = v2, v[3] = v3;
  bitonic32_desc(v); /* k=32 */
}
/* a and b each hold 32 keys sorted descending; a becomes the top 32 of
 * both, sorted descending: a[i] vs b[31-i] keeps the larger half (a bitonic
 * sequence), which the k = 32 stage of the network above sorts. */
__attribute__((target("avx2"), always_inline)) static inline void merge_top32(__m256i a[4], const __m256i b[4]) {
  const __m256i rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  for (int r = 0; r < 4; r++) a[r] = _mm256_max_epi32(a[r], _mm256_permutevar8x32_epi32(b[3 - r], rev));
  bitonic32_desc(a);
}
/* The network above from its k = 16 stage, for v0, v2 sorted descending
 * and v1, v3 ascending (what its first stages leave). */
__attribute__((target("avx2"), always_inline)) static inline void sort32_from8(__m256i v[4]) {
  __m256i v0 = v[0], v1 = v[1], v2 = v[2], v3 = v[3];
  X(0, 1, 1);
  X(2, 3, 0);
  v0 = I(v0, 4, -1, -1, -1, -1, 0, 0, 0, 0);
  v1 = I(v1, 4, -1, -1, -1, -1, 0, 0, 0, 0);
  v2 = I(v2, 4, 0, 0, 0, 0, -1, -1, -1, -1);
  v3 = I(v3, 4, 0, 0, 0, 0, -1, -1, -1, -1);
  v0 = I(v0, 2, -1, -1, 0, 0, -1, -1, 0, 0);
  v1 = I(v1, 2, -1, -1, 0, 0, -1, -1, 0, 0);
  v2 = I(v2, 2, 0, 0, -1, -1, 0, 0, -1, -1);
  v3 = I(v3, 2, 0, 0, -1, -1, 0, 0, -1, -1);
  v0 = I(v0, 1, -1, 0, -1, 0, -1, 0, -1, 0);
  v1 = I(v1, 1, -1, 0, -1, 0, -1, 0, -1, 0);
  v2 = I(v2, 1, 0, -1, 0, -1, 0, -1, 0, -1);
  v3 = I(v3, 1, 0, -1, 0, -1, 0, -1, 0, -1);
  v[0] = v0, v[1] = v1, v[2] = v2, v[3] = v3;
  bitonic32_desc(v);
}

/* Eight registers of keys: each register sorted descending, by an 8-input
 * network across registers (two instructions per comparator for eight
 * columns at once) and an 8x8 transpose; cheaper than the in-register
 * stages. Which keys share a register changes, which the top-32 does not
 * care about. */
#define C(a, b)                                                                                             \
  do {                                                                                                      \
    const __m256i hi_ = _mm256_max_epi32(r##a, r##b);                                                       \
    r##b = _mm256_min_epi32(r##a, r##b);                                                                    \
    r##a = hi_;                                                                                             \
  } while (0)
__attribute__((target("avx2"), always_inline)) static inline void sort8x8(__m256i v[8]) {
  __m256i r0 = v[0], r1 = v[1], r2 = v[2], r3 = v[3], r4 = v[4], r5 = v[5], r6 = v[6], r7 = v[7];
  C(0, 2); C(1, 3); C(4, 6); C(5, 7); /* 19 comparators, depth 6 */
  C(0, 4); C(1, 5); C(2, 6); C(3, 7);
  C(0, 1); C(2, 3); C(4, 5); C(6, 7);
  C(2, 4); C(3, 5);
  C(1, 4); C(3, 6);
  C(1, 2); C(3, 4); C(5, 6);
  const __m256 t0 = _mm256_castsi256_ps(r0), t1 = _mm256_castsi256_ps(r1), t2 = _mm256_castsi256_ps(r2),
               t3 = _mm256_castsi256_ps(r3), t4 = _mm256_castsi256_ps(r4), t5 = _mm256_castsi256_ps(r5),
               t6 = _mm256_castsi256_ps(r6), t7 = _mm256_castsi256_ps(r7);
  const __m256 u0 = _mm256_unpacklo_ps(t0, t1), u1 = _mm256_unpackhi_ps(t0, t1), u2 = _mm256_unpacklo_ps(t2, t3),
               u3 = _mm256_unpackhi_ps(t2, t3), u4 = _mm256_unpacklo_ps(t4, t5), u5 = _mm256_unpackhi_ps(t4, t5),
               u6 = _mm256_unpacklo_ps(t6, t7), u7 = _mm256_unpackhi_ps(t6, t7);
  const __m256 w0 = _mm256_shuffle_ps(u0, u2, 0x44), w1 = _mm256_shuffle_ps(u0, u2, 0xee),
               w2 = _mm256_shuffle_ps(u1, u3, 0x44), w3 = _mm256_shuffle_ps(u1, u3, 0xee),
               w4 = _mm256_shuffle_ps(u4, u6, 0x44), w5 = _mm256_shuffle_ps(u4, u6, 0xee),
               w6 = _mm256_shuffle_ps(u5, u7, 0x44), w7 = _mm256_shuffle_ps(u5, u7, 0xee);
  v[0] = _mm256_castps_si256(_mm256_permute2f128_ps(w0, w4, 0x20));
  v[1] = _mm256_castps_si256(_mm256_permute2f128_ps(w1, w5, 0x20));
  v[2] = _mm256_castps_si256(_mm256_permute2f128_ps(w2, w6, 0x20));
  v[3] = _mm256_castps_si256(_mm256_permute2f128_ps(w3, w7, 0x20));
  v[4] = _mm256_castps_si256(_mm256_permute2f128_ps(w0, w4, 0x31));
  v[5] = _mm256_castps_si256(_mm256_permute2f128_ps(w1, w5, 0x31));
  v[6] = _mm256_castps_si256(_mm256_permute2f128_ps(w2, w6, 0x31));
  v[7] = _mm256_castps_si256(_mm256_permute2f128_ps(w3, w7, 0x31));
}
#undef C

#undef I
#undef IMM8
#undef PERM
#undef X

/* Sixteen logits rounded to f16 (canonicalised as amoe_f16_from_f32 does:
 * -0 to +0, NaN to sign|0x7e00) and turned into keys ^ 0x8000, so signed
 * 16-bit compares order them as logits. */
__attribute__((target("avx2,f16c"), always_inline)) static inline __m256i f16_keys16(const float *zf) {
  const __m256i c8000 = _mm256_set1_epi16((short)0x8000), c7fff = _mm256_set1_epi16(0x7fff),
                c7c00 = _mm256_set1_epi16(0x7c00), c7e00 = _mm256_set1_epi16(0x7e00);
  const __m128i ha = _mm256_cvtps_ph(_mm256_loadu_ps(zf), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m128i hb = _mm256_cvtps_ph(_mm256_loadu_ps(zf + 8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(ha), hb, 1);
  h = _mm256_andnot_si256(_mm256_cmpeq_epi16(h, c8000), h);                  /* -0 -> +0 */
  const __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(h, c7fff), c7c00); /* NaN lanes */
  h = _mm256_blendv_epi8(h, _mm256_or_si256(_mm256_and_si256(h, c8000), c7e00), nan);
  return _mm256_xor_si256(h, _mm256_and_si256(_mm256_srai_epi16(h, 15), c7fff));
}

/* Stores the first m (<= 32) of 32 sorted pair keys as ids and f16 logits,
 * eight of each per instruction. */
__attribute__((target("avx2"), always_inline)) static inline void store_pairs32(uint16_t *id, amoe_f16 *z,
                                                                                 int m, const __m256i g[4]) {
  const __m256i lo16 = _mm256_set1_epi32(0xffff), c7fff = _mm256_set1_epi16(0x7fff);
  uint16_t ib[32];
  amoe_f16 zb[32];
  const int direct = m == 32;
  uint16_t *io = direct ? id : ib;
  amoe_f16 *zo = direct ? z : zb;
  for (int r = 0; r < 4; r += 2) { /* id = 0xffff - low half; logit = the key's inverse of the high half */
    __m256i i2 = _mm256_packus_epi32(_mm256_andnot_si256(g[r], lo16), _mm256_andnot_si256(g[r + 1], lo16));
    __m256i k2 = _mm256_packs_epi32(_mm256_srai_epi32(g[r], 16), _mm256_srai_epi32(g[r + 1], 16));
    i2 = _mm256_permute4x64_epi64(i2, 0xd8);
    k2 = _mm256_permute4x64_epi64(k2, 0xd8);
    k2 = _mm256_xor_si256(k2, _mm256_and_si256(_mm256_srai_epi16(k2, 15), c7fff));
    _mm256_storeu_si256((__m256i *)(void *)(io + 8 * r), i2);
    _mm256_storeu_si256((__m256i *)(void *)(zo + 8 * r), k2);
  }
  if (!direct) {
    memcpy(id, ib, (size_t)m * sizeof *id);
    memcpy(z, zb, (size_t)m * sizeof *z);
  }
}

/* Group e/32's pair keys (key16 << 16 | 0xffff - expert) in g[0..4): each
 * 16 keys interleaved with their ids, so a register holds experts 0-3 and
 * 8-11 of the 16, the next 4-7 and 12-15 (the networks do not care which
 * keys share a register). */
__attribute__((target("avx2,f16c"), always_inline)) static inline void pair_keys32(const float *zfull, int e,
                                                                                    __m256i g[4]) {
  const __m256i lane = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int h = 0; h < 2; h++) {
    const __m256i k = f16_keys16(zfull + e + 16 * h);
    const __m256i id = _mm256_sub_epi16(_mm256_set1_epi16((short)(0xffff - e - 16 * h)), lane);
    g[2 * h] = _mm256_unpacklo_epi16(id, k);
    g[2 * h + 1] = _mm256_unpackhi_epi16(id, k);
  }
}

/* Keys e..e+64 as the top 32 of them, sorted, in g[0..4). */
__attribute__((target("avx2,f16c"), always_inline)) static inline void top32_of64(const float *zfull, int e,
                                                                                   __m256i g[8]) {
  const __m256i rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  pair_keys32(zfull, e, g);
  pair_keys32(zfull, e + 32, g + 4);
  sort8x8(g);
  for (int q = 1; q < 8; q += 2) g[q] = _mm256_permutevar8x32_epi32(g[q], rev); /* alternate directions */
  sort32_from8(g);
  sort32_from8(g + 4);
  merge_top32(g, g + 4);
}

/* Keys e..e+128 as the top 32 of them, sorted, in a[0..4): the two
 * halves' stages alternate, so that more independent work is in flight
 * (~0.93x the time of the halves one after the other: median of
 * alternating runs on real qwen3 logits). */
__attribute__((target("avx2,f16c"), always_inline)) static inline void top32_of128(const float *zfull, int e,
                                                                                    __m256i a[8]) {
  const __m256i rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  __m256i b[8];
  pair_keys32(zfull, e, a);
  pair_keys32(zfull, e + 64, b);
  pair_keys32(zfull, e + 32, a + 4);
  pair_keys32(zfull, e + 96, b + 4);
  sort8x8(a);
  sort8x8(b);
  for (int q = 1; q < 8; q += 2) { /* alternate directions */
    a[q] = _mm256_permutevar8x32_epi32(a[q], rev);
    b[q] = _mm256_permutevar8x32_epi32(b[q], rev);
  }
  sort32_from8(a);
  sort32_from8(b);
  sort32_from8(a + 4);
  sort32_from8(b + 4);
  merge_top32(a, a + 4);
  merge_top32(b, b + 4);
  merge_top32(a, b);
}

/* The top m <= 32 for E a multiple of 32 (every many-expert preset): each
 * 64 pair keys cut to their top 32 by networks (two such at a time where E
 * allows), then folded into the top 32 by merges. No data-dependent
 * branch; on 200,000 node-layers of real qwen3 logits (128 experts)
 * 0.55-0.6x the time of the threshold search below. */
__attribute__((target("avx2,f16c"), always_inline)) static inline void set_full_net(uint16_t *id, amoe_f16 *z,
                                                                                     int E, int m,
                                                                                     const float *zfull) {
  __m256i acc[8], g[8];
  int e;
  if (E >= 128) {
    top32_of128(zfull, 0, acc);
    e = 128;
  } else if (E >= 64) {
    top32_of64(zfull, 0, acc);
    e = 64;
  } else {
    pair_keys32(zfull, 0, acc);
    sort32_desc(acc);
    e = 32;
  }
  for (; e + 128 <= E; e += 128) {
    top32_of128(zfull, e, g);
    merge_top32(acc, g);
  }
  if (e + 64 <= E) {
    top32_of64(zfull, e, g);
    merge_top32(acc, g);
    e += 64;
  }
  if (e < E) { /* a last group of 32 */
    pair_keys32(zfull, e, g);
    sort32_desc(g);
    merge_top32(acc, g);
  }
  store_pairs32(id, z, m, acc);
}

/* The top m <= 8 without the networks: the pair keys are distinct, and
 * each of sixteen lanes' largest key (registers alternating) is its own
 * expert's, so the top m are among the keys at or above the eighth largest
 * of those sixteen (about 12 of 384 keys drawn alike). They are packed,
 * each placed by the keys above it, and the first m stored. More than 32
 * of them: the networks. Returns 0 there, having stored nothing. */
#define FEW 32
__attribute__((target("avx2,f16c,popcnt"), always_inline)) static inline int set_few(uint16_t *id, amoe_f16 *z,
                                                                                   int E, int m,
                                                                                   const float *zfull) {
  int32_t keys[AMOE_MAX_EXPERTS];
  __m256i m0 = _mm256_set1_epi32(INT32_MIN), m1 = m0;
  for (int e = 0; e < E; e += 32) {
    __m256i g[4];
    pair_keys32(zfull, e, g);
    m0 = _mm256_max_epi32(m0, _mm256_max_epi32(g[0], g[2]));
    m1 = _mm256_max_epi32(m1, _mm256_max_epi32(g[1], g[3]));
    for (int r = 0; r < 4; r++) _mm256_storeu_si256((__m256i *)(void *)(keys + e + 8 * r), g[r]);
  }
  int32_t lm[16];
  _mm256_storeu_si256((__m256i *)(void *)lm, m0);
  _mm256_storeu_si256((__m256i *)(void *)(lm + 8), m1);
  __m256i reach0 = _mm256_setzero_si256(), reach1 = reach0; /* −(the maxima at or above each) */
  for (int j = 0; j < 16; j++) {
    const __m256i b = _mm256_set1_epi32(lm[j]);
    reach0 = _mm256_sub_epi32(reach0, _mm256_andnot_si256(_mm256_cmpgt_epi32(m0, b), _mm256_set1_epi32(1)));
    reach1 = _mm256_sub_epi32(reach1, _mm256_andnot_si256(_mm256_cmpgt_epi32(m1, b), _mm256_set1_epi32(1)));
  }
  /* the eighth largest has eight maxima at or above it (itself among them) */
  const __m256i eight = _mm256_set1_epi32(-8), none = _mm256_set1_epi32(INT32_MIN);
  const __m256i t8 = _mm256_max_epi32(_mm256_blendv_epi8(none, m0, _mm256_cmpeq_epi32(reach0, eight)),
                                      _mm256_blendv_epi8(none, m1, _mm256_cmpeq_epi32(reach1, eight)));
  int32_t tl[8];
  _mm256_storeu_si256((__m256i *)(void *)tl, t8);
  int32_t t = tl[0];
  for (int j = 1; j < 8; j++) t = tl[j] > t ? tl[j] : t;
  int32_t cand[AMOE_MAX_EXPERTS + 8];
  int c = 0;
  const __m256i tv = _mm256_set1_epi32(t - 1); /* (keys > t − 1: at or above t; t is a key, above INT32_MIN) */
  for (int e = 0; e < E; e += 8) {
    const __m256i k = _mm256_loadu_si256((const __m256i *)(const void *)(keys + e));
    c += amoe_left_pack(cand + c, k, _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k, tv))));
  }
  if (c > FEW) return 0;
  for (int j = c; j < c + 8; j++) cand[j] = INT32_MIN; /* (below every key: never counted) */
  int32_t placed[FEW];
  for (int i = 0; i < c; i++) {
    const __m256i b = _mm256_set1_epi32(cand[i]);
    int r = 0;
    for (int j = 0; j < c; j += 8)
      r += __builtin_popcount((unsigned)_mm256_movemask_ps(
          _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(cand + j)), b))));
    placed[r] = cand[i];
  }
  for (int i = 0; i < m; i++) { /* id = 0xffff − the low half; the logit, the key's inverse of the high half */
    const int16_t kh = (int16_t)(placed[i] >> 16);
    id[i] = (uint16_t)(~(uint32_t)placed[i] & 0xffff);
    z[i] = (amoe_f16)(uint16_t)(kh ^ ((kh >> 15) & 0x7fff));
  }
  return 1;
}

/* The top m <= 32 of E (a multiple of 32) by (f16 logit desc, id asc),
 * sorted: amoe_block_set_full's plain version (core/block.c) to the bit. */
__attribute__((target("avx2,f16c,popcnt"))) void amoe_x86_set_full(uint16_t *id, amoe_f16 *z, int E, int m,
                                                                         const float *zfull) {
  if (m <= 8 && set_few(id, z, E, m, zfull)) return;
  set_full_net(id, z, E, m, zfull);
}
#endif
