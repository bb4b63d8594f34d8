#include "block.h"
#include "clones.h"
#include "model.h"
#include "sort.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

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

void amoe_block_sort_pairs(amoe_block *b, int l, int t) {
  uint16_t *id = b->ids + ((size_t)l * b->n + t) * b->m;
  amoe_f16 *z = b->logits + ((size_t)l * b->n + t) * b->m;
  uint32_t k[AMOE_MAX_EXPERTS];
  for (int i = 0; i < b->m; i++) k[i] = pair_key(z[i], id[i]);
  /* imported pairs may repeat one (the check names it): qsort, which needs
   * no distinct keys */
  qsort(k, (size_t)b->m, 4, key_desc);
  for (int i = 0; i < b->m; i++) {
    id[i] = key_id(k[i]);
    z[i] = key_logit(k[i]);
  }
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

#ifdef AMOE_X86_PATHS
#include <cpuid.h>

static int g_avx2_f16c;

__attribute__((constructor)) static void set_full_init(void) {
  for (int mask = 0; mask < 256; mask++) {
    uint32_t v = 0;
    int c = 0;
    for (int i = 0; i < 8; i++)
      if (mask >> i & 1) v |= (uint32_t)i << (3 * c++);
    amoe_pack_table[mask] = v | (uint32_t)c << 24;
  }
  __builtin_cpu_init();
  unsigned a, b, c, d; /* F16C: CPUID leaf 1, ecx bit 29 (not every compiler's builtin knows it) */
  g_avx2_f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("popcnt") &&
                __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
  const char *off = getenv("ACCEPTMOE_NO_AVX2"); /* tests compare both paths in one build */
  if (off && *off && strcmp(off, "0") != 0) g_avx2_f16c = 0;
}

__attribute__((target("avx2"))) static inline int hsum_epi16(__m256i v) {
  __m256i s = _mm256_madd_epi16(v, _mm256_set1_epi16(1));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
  return _mm_cvtsi128_si32(t);
}
__attribute__((target("avx2"))) static inline int hsum_epi32(__m256i v) {
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
  return _mm_cvtsi128_si32(t);
}

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

/* set_full_net compiled for the usual shapes with E and m constant (the
 * groups unroll and stay in registers: ~10% fewer instructions than the
 * general loop), and once for any other. */
__attribute__((target("avx2,f16c"))) static void set_full_net_any(uint16_t *id, amoe_f16 *z, int E, int m,
                                                                  const float *zfull) {
  if (m == 32 && E == 128)
    set_full_net(id, z, 128, 32, zfull);
  else if (m == 32 && E == 256)
    set_full_net(id, z, 256, 32, zfull);
  else if (m == 32 && E == 64)
    set_full_net(id, z, 64, 32, zfull);
  else
    set_full_net(id, z, E, m, zfull);
}

/* The same top m with AVX2 and F16C, for E a multiple of 16 and m <= 64
 * (where the network above does not apply):
 * 16 logits rounded per instruction (canonicalised as amoe_f16_from_f32
 * does: -0 to +0, NaN to sign|0x7e00), keys biased so signed compares order
 * them, the threshold search on 16 keys per compare, the keys above it
 * left-packed 8 at a time, and ranks counted 8 at a time. The output is the
 * plain version's to the bit (test_block compares both with a ranking). */
__attribute__((target("avx2,f16c,popcnt"))) static void set_full_avx2(uint16_t *id, amoe_f16 *z, int E, int m,
                                                              const float *zfull) {
  int16_t kb[AMOE_MAX_EXPERTS]; /* key ^ 0x8000: signed order = logit order */
  int32_t sel[AMOE_MAX_EXPERTS + 8], sorted[AMOE_MAX_EXPERTS];
  __m256i vmin = _mm256_set1_epi16(0x7fff), vmax = _mm256_set1_epi16((short)0x8000);
  for (int e = 0; e < E; e += 16) {
    const __m256i k = f16_keys16(zfull + e);
    _mm256_storeu_si256((__m256i *)(void *)(kb + e), k);
    vmin = _mm256_min_epi16(vmin, k);
    vmax = _mm256_max_epi16(vmax, k);
  }
  int16_t mn[16], mx[16];
  _mm256_storeu_si256((__m256i *)(void *)mn, vmin);
  _mm256_storeu_si256((__m256i *)(void *)mx, vmax);
  int lo = 32767, hi = -32768;
  for (int i = 0; i < 16; i++) {
    lo = mn[i] < lo ? mn[i] : lo;
    hi = mx[i] > hi ? mx[i] : hi;
  }
  /* the largest T with #{key >= T} >= m (m <= 32 takes the network above
   * wherever E allows) */
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    const __m256i below = _mm256_set1_epi16((short)(mid - 1));
    __m256i acc = _mm256_setzero_si256();
    for (int e = 0; e < E; e += 16)
      acc = _mm256_sub_epi16(acc, _mm256_cmpgt_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(kb + e)), below));
    if (hsum_epi16(acc) >= m)
      lo = mid;
    else
      hi = mid - 1;
  }
  /* pair keys (key16 << 16 | 0xffff - e, biased) at or above T, packed in
   * id order */
  const __m256i below = _mm256_set1_epi32(lo - 1), step = _mm256_set1_epi32(8);
  __m256i ids = _mm256_setr_epi32(0xffff, 0xfffe, 0xfffd, 0xfffc, 0xfffb, 0xfffa, 0xfff9, 0xfff8);
  int c = 0;
  for (int e = 0; e < E; e += 8) {
    const __m256i k32 = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(kb + e)));
    const __m256i pk = _mm256_or_si256(_mm256_slli_epi32(k32, 16), ids);
    c += amoe_left_pack(sel + c, pk, _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k32, below))));
    ids = _mm256_sub_epi32(ids, step);
  }
  if (c > m) { /* more ties at T than places: keep the lowest ids, drop from the end */
    int keep = c;
    for (int i = c - 1; i >= 0 && keep > m; i--)
      if (sel[i] >> 16 == lo) {
        memmove(sel + i, sel + i + 1, (size_t)(keep - i - 1) * sizeof *sel);
        keep--;
      }
    c = keep;
  }
  const int mp = (m + 7) & ~7;
  for (int i = m; i < mp; i++) sel[i] = INT32_MIN; /* below every real key */
  if (mp == 32) { /* the usual m: all 32 keys in four registers, a sorting network */
    __m256i v[4];
    for (int r = 0; r < 4; r++) v[r] = _mm256_loadu_si256((const __m256i *)(const void *)(sel + 8 * r));
    sort32_desc(v);
    for (int r = 0; r < 4; r++) _mm256_storeu_si256((__m256i *)(void *)(sorted + 8 * r), v[r]);
  } else
    for (int i = 0; i < m; i++) {
      const __m256i v = _mm256_set1_epi32(sel[i]);
      __m256i acc = _mm256_setzero_si256();
      for (int j = 0; j < mp; j += 8)
        acc = _mm256_sub_epi32(acc, _mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(sel + j)), v));
      sorted[hsum_epi32(acc)] = sel[i];
    }
  for (int i = 0; i < m; i++) {
    const uint32_t key = (uint32_t)sorted[i] ^ 0x80000000u;
    id[i] = key_id(key);
    z[i] = key_logit(key);
  }
}
#endif

uint32_t amoe_pack_table[256];

int amoe_cpu_avx2_f16c(void) {
#ifdef AMOE_X86_PATHS
  return g_avx2_f16c;
#else
  return 0;
#endif
}

void amoe_block_set_full_portable(amoe_block *b, int l, int t, const float *zfull) {
  set_full_plain(b->ids + ((size_t)l * b->n + t) * b->m, b->logits + ((size_t)l * b->n + t) * b->m, b->experts,
                 b->m, zfull);
}

void amoe_block_set_full(amoe_block *b, int l, int t, const float *zfull) {
  uint16_t *id = b->ids + ((size_t)l * b->n + t) * b->m;
  amoe_f16 *z = b->logits + ((size_t)l * b->n + t) * b->m;
#ifdef AMOE_X86_PATHS
  if (g_avx2_f16c && b->experts % 32 == 0 && b->m <= 32) {
    set_full_net_any(id, z, b->experts, b->m, zfull);
    return;
  }
  if (g_avx2_f16c && b->experts % 16 == 0 && b->m <= 64) {
    set_full_avx2(id, z, b->experts, b->m, zfull);
    return;
  }
#endif
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

/* Copies bytes with non-temporal stores where the CPU has them. */
static void *stream_copy(void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
  unsigned char *d = dst;
  const unsigned char *s = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15;
  if (head > bytes) head = bytes;
  memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 16; d += 16, s += 16, bytes -= 16)
    _mm_stream_si128((__m128i *)(void *)d, _mm_loadu_si128((const __m128i *)(const void *)s));
  memcpy(d, s, bytes);
  _mm_sfence();
  return dst;
#else
  return memcpy(dst, src, bytes);
#endif
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
  return block_copy(dst, src, e, stream_copy);
}

void amoe_f16_store_ordered(const float *zf, const uint16_t *ids, int n, amoe_f16 *out) {
  for (int j = 0; j < n; j++) {
    amoe_f16 h = amoe_f16_from_f32(zf[j]);
    if (h == 0x8000) h = 0; /* -0 is not a stored logit */
    if (j > 0) {
      const amoe_f16 p = out[j - 1];
      /* equal floats keep a tie only where the id rule orders them as given */
      const int strict = zf[j] < zf[j - 1] || ids[j] < ids[j - 1];
      const uint32_t kp = amoe_f16_key(p), kh = amoe_f16_key(h);
      if (p == 0xfc00) {
        h = 0xfc00; /* below -inf there is nothing: masked experts tie */
      } else if (kh > kp || (strict && kh == kp)) {
        uint32_t k = strict ? kp - 1 : kp;
        h = amoe_f16_of_key(k);
        if (h == 0x8000) h = amoe_f16_of_key(k - 1); /* skip -0 */
      }
    }
    out[j] = h;
  }
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
