/* The score shape's rescaling of one node-layer's stored logits
 * (core/block.c, amoe_block_scale_logits_generic) with F16C: sixteen
 * logits widened, multiplied and rounded a step, each checked against its
 * neighbour in registers; only a row where rounding merged two needs the
 * plain order fix, which the caller runs (this file calls no plain code). Tested against the plain version by tests/test_block.c. */
#include "x86.h"

#ifdef AMOE_X86_PATHS
#include <string.h>

/* Signed-comparable keys of sixteen binary16 lanes: a > b as numbers iff
 * key(a) > key(b) (amoe_f16_key, less its top bit). */
__attribute__((target("avx2"))) static inline __m256i skey16(__m256i h) {
  return _mm256_xor_si256(h, _mm256_and_si256(_mm256_srai_epi16(h, 15), _mm256_set1_epi16(0x7fff)));
}

/* v's sixteen lanes one lane on, lane 0 taking lane 15 of p: the previous
 * entry of each, across the 128-bit halves. */
__attribute__((target("avx2"))) static inline __m256i prev16(__m256i v, __m256i p) {
  return _mm256_alignr_epi8(v, _mm256_permute2x128_si256(p, v, 0x21), 14);
}

__attribute__((target("avx2,f16c"))) int amoe_x86_scale_logits(amoe_f16 *z, amoe_f16 *old, const uint16_t *id, int m,
                                                                 float scale) {
  /* old: for the caller's order fix, or to put back at a NaN */
  const __m256 s = _mm256_set1_ps(scale);
  enum { R = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }; /* an immediate: clang wants a constant */
  __m256i pn = _mm256_setzero_si256(), po = pn, pi = pn, bad = pn, ok = _mm256_set1_epi16(-1);
  for (int c = 0; c < m / 16; c++) {
    const __m256i o = _mm256_loadu_si256((const __m256i *)(const void *)(z + 16 * c));
    const __m256i ids = _mm256_loadu_si256((const __m256i *)(const void *)(id + 16 * c));
    __m256i n = _mm256_set_m128i(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(o, 1)), s), R),
                                 _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(o)), s), R));
    n = _mm256_andnot_si256(_mm256_cmpeq_epi16(n, _mm256_set1_epi16((short)0x8000)), n); /* -0 is stored as +0 */
    /* a NaN in: the plain store's canonical NaN and its compares decide */
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi16(_mm256_and_si256(o, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7c00)));
    /* Each lane must already be in the stored order: strictly below the
     * previous entry, or tied with it where the old logits tied too and
     * the ids run up (a tie the plain store keeps). Anything else it would
     * bump. */
    const __m256i vn = prev16(n, pn), vo = prev16(o, po), vi = prev16(ids, pi);
    const __m256i below = _mm256_cmpgt_epi16(skey16(vn), skey16(n));
    const __m256i tie = _mm256_and_si256(_mm256_and_si256(_mm256_cmpeq_epi16(n, vn), _mm256_cmpeq_epi16(o, vo)),
                                         _mm256_cmpgt_epi16(ids, vi));
    __m256i lane = _mm256_or_si256(below, tie);
    if (c == 0) lane = _mm256_or_si256(lane, _mm256_setr_epi16(-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
    ok = _mm256_and_si256(ok, lane);
    _mm256_storeu_si256((__m256i *)(void *)(z + 16 * c), n);
    _mm256_storeu_si256((__m256i *)(void *)(old + 16 * c), o);
    pn = n, po = o, pi = ids;
  }
  if (!_mm256_testz_si256(bad, bad)) {
    memcpy(z, old, (size_t)m * sizeof *z);
    return 0;
  }
  return _mm256_movemask_epi8(ok) != -1 ? 2 : 1; /* 2: the plain order fix is the caller's */
}

#endif
