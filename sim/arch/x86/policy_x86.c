/* policy/policy.c's amoe_top_by_value with AVX2: the top `count` experts by
 * value (ties: lower id) by radix narrowing and a vector quickselect. The
 * same set as amoe_top_by_value_generic (tests/test_policy.c). */
#include "sort.h"
#include "x86.h"

#ifdef AMOE_X86_PATHS
#include <string.h>

/* The same selection with AVX2: the count-th largest value key T, first
 * narrowed by one radix digit (radix_narrow), then by quickselect on the
 * 64-bit keys left, each pass splitting four keys per compare into those
 * above and below the pivot (left-packed; the ones equal to it are only
 * counted); then every candidate above T, and the ties at T by lowest id.
 * Exactly the portable result (test_policy compares them). */
#if !defined(__clang__) /* GCC cannot see that every key read below was written first */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/* The want-th largest of k[0..len) (1 <= want <= len <= 16) without a
 * branch: every key's count of greater keys, sixteen at a time (the padding
 * is below every key, so it is never counted and never chosen), then the
 * least key with fewer than `want` above it. */
__attribute__((target("avx2"))) static int64_t small_kth(const int64_t *k, int len, int want) {
  int64_t x[16];
  for (int i = 0; i < 16; i++) x[i] = i < len ? k[i] : INT64_MIN;
  __m256i K[4], gt[4];
  for (int q = 0; q < 4; q++) {
    K[q] = _mm256_loadu_si256((const __m256i *)(const void *)(x + 4 * q));
    gt[q] = _mm256_setzero_si256();
  }
  for (int j = 0; j < 16; j++) {
    const __m256i kj = _mm256_set1_epi64x(x[j]);
    for (int q = 0; q < 4; q++) gt[q] = _mm256_sub_epi64(gt[q], _mm256_cmpgt_epi64(kj, K[q]));
  }
  const __m256i w = _mm256_set1_epi64x(want), top = _mm256_set1_epi64x(INT64_MAX);
  __m256i best = top;
  for (int q = 0; q < 4; q++) {
    const __m256i c = _mm256_blendv_epi8(top, K[q], _mm256_cmpgt_epi64(w, gt[q])); /* fewer than want above */
    best = _mm256_blendv_epi8(best, c, _mm256_cmpgt_epi64(best, c));
  }
  int64_t b[4];
  _mm256_storeu_si256((__m256i *)(void *)b, best);
  const int64_t b01 = b[0] < b[1] ? b[0] : b[1], b23 = b[2] < b[3] ? b[2] : b[3];
  return b01 < b23 ? b01 : b23;
}

/* One radix pass: the keys k[0..n) (not all equal) whose 6-bit digit just
 * below their common prefix is that of the want-th largest, into out;
 * returns how many, and *want becomes that key's rank among them. The sign
 * bit flipped, the keys order as unsigned numbers, so the digit orders them
 * too. The digit is found by a binary search, each step counting the
 * digits (bytes, 32 per compare) at or above it: no histogram, whose
 * increments wait on each other. On acceptmoe's utilities (~108 keys, the
 * top ~73 wanted) ~8 keys stay, where a quickselect's first partition
 * keeps half. */
__attribute__((target("avx2"))) static int radix_narrow(const int64_t *k, int n, uint64_t diff, int *want,
                                                        int64_t *out) {
  const uint64_t sign = 0x8000000000000000ULL;
  const int hb = 63 - __builtin_clzll(diff), sh = hb >= 5 ? hb - 5 : 0;
  const int nv = (n + 31) / 32;
  int8_t dg[AMOE_MAX_EXPERTS + 32];
  for (int i = 0; i < n; i++) dg[i] = (int8_t)((((uint64_t)k[i] ^ sign) >> sh) & 63);
  for (int i = n; i < nv * 32; i++) dg[i] = -1; /* below every digit: never counted */
  /* the largest digit b with #{digit >= b} >= want (b = 0 always qualifies) */
  int lo = 0, hi = 63;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    const __m256i below = _mm256_set1_epi8((char)(mid - 1));
    __m256i c = _mm256_setzero_si256();
    for (int v = 0; v < nv; v++) /* (each byte lane counts at most nv <= 32) */
      c = _mm256_sub_epi8(c, _mm256_cmpgt_epi8(_mm256_loadu_si256((const __m256i *)(const void *)(dg + 32 * v)), below));
    const __m256i s4 = _mm256_sad_epu8(c, _mm256_setzero_si256());
    const int cnt = _mm256_extract_epi32(s4, 0) + _mm256_extract_epi32(s4, 2) + _mm256_extract_epi32(s4, 4) +
                    _mm256_extract_epi32(s4, 6);
    if (cnt >= *want)
      lo = mid;
    else
      hi = mid - 1;
  }
  /* the keys of digit lo, in order; those above it counted */
  const __m256i bv = _mm256_set1_epi8((char)lo);
  int f = 0, above = 0;
  for (int v = 0; v < nv; v++) {
    const __m256i d = _mm256_loadu_si256((const __m256i *)(const void *)(dg + 32 * v));
    above += __builtin_popcount((unsigned)_mm256_movemask_epi8(_mm256_cmpgt_epi8(d, bv)));
    for (unsigned bits = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(d, bv)); bits; bits &= bits - 1)
      out[f++] = k[32 * v + __builtin_ctz(bits)];
  }
  *want -= above;
  return f;
}

__attribute__((target("avx2"))) void amoe_x86_top_by_value(const double *value, const uint8_t *cand,
                                                              int experts, int count, uint8_t *S) {
  int64_t buf[3][AMOE_MAX_EXPERTS + 4], key[AMOE_MAX_EXPERTS + 4];
  int n = 0;
  for (int e = 0; e < experts; e++) key[e] = amoe_order_key64(value[e]); /* vectorised */
  const int64_t *all = key; /* the candidates' keys */
  if (cand) {
    for (int e = 0; e < experts; e++) {
      buf[0][n] = key[e];
      n += cand[e] != 0;
    }
    all = buf[0];
  } else
    n = experts;
  if (count >= n) {
    for (int e = 0; e < experts; e++) S[e] |= (uint8_t)(!cand || cand[e]);
    return;
  }
  uint64_t diff = 0;
  for (int i = 0; i < n; i++) diff |= (uint64_t)(all[i] ^ all[0]);
  int64_t T;
  int want = count;
  if (!diff)
    T = all[0];
  else { /* a radix pass, then quickselect on the few left */
    int64_t *k = buf[1], *hi = buf[0], *lo = buf[2];
    int len = radix_narrow(all, n, diff, &want, k);
    for (;;) {
      if (len <= 16) { /* a few left: T = the least key with fewer than `want` keys above it */
        T = small_kth(k, len, want);
        break;
      }
      const int64_t a = k[0], c = k[len >> 1], d = k[len - 1];
      const int64_t piv = a > c ? (c > d ? c : (a > d ? d : a)) : (a > d ? a : (c > d ? d : c));
      const __m256i pv = _mm256_set1_epi64x(piv);
      int f = 0, b = 0, i = 0;
      for (; i + 4 <= len; i += 4) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(k + i));
        /* two 32-bit lanes per key */
        f += amoe_left_pack(hi + f, v, _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi64(v, pv)))) / 2;
        b += amoe_left_pack(lo + b, v, _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi64(pv, v)))) / 2;
      }
      for (; i < len; i++) {
        hi[f] = k[i];
        f += k[i] > piv;
        lo[b] = k[i];
        b += k[i] < piv;
      }
      const int eq = len - f - b;
      int64_t *spare = k;
      if (want <= f) {
        k = hi;
        hi = spare;
        len = f;
      } else if (want <= f + eq) {
        T = piv;
        break;
      } else {
        want -= f + eq;
        k = lo;
        lo = spare;
        len = b;
      }
    }
  }
  int c = 0;
  for (int e = 0; e < experts; e++) {
    const int take = (!cand || cand[e]) && key[e] > T;
    S[e] |= (uint8_t)take;
    c += take;
  }
  /* the ties at T, lowest ids first: four keys per compare to find them */
  const __m256i tv = _mm256_set1_epi64x(T);
  for (int e = experts; e < experts + 4; e++) key[e] = ~T; /* lanes past the end never match */
  for (int e = 0; e < experts && c < count; e += 4) {
    int msk = _mm256_movemask_pd(
        _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_loadu_si256((const __m256i *)(const void *)(key + e)), tv)));
    while (msk && c < count) {
      const int x = e + __builtin_ctz((unsigned)msk);
      msk &= msk - 1;
      if (x < experts && (!cand || cand[x])) S[x] = 1, c++;
    }
  }
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
