/* The generator's two hot loops (workload/gen.c: normals16, and
 * node_logits = normals16 then layer_logits) with AVX2 and FMA: the same
 * fused operations in the same order, so the same bits (tests/cli.sh
 * generates with ACCEPTMOE_NO_AVX2=0 and 1 at 8, 60 and 5 experts and
 * compares the bytes). */
#include "gen_rng.h"
#include "x86.h"

#ifdef AMOE_X86_PATHS
/* gen_normal of the low halves of a step's eight 32-bit lanes (lo) and of
 * their high halves (hi). */
__attribute__((target("avx2,fma"), always_inline)) static inline void normals16_avx2(gen_v4u x, __m256 *lo,
                                                                                    __m256 *hi) {
  const __m256i w = (__m256i)x;
  const __m256 sc = _mm256_set1_ps(0x1p-16f), off = _mm256_set1_ps(-0.5f + 0x1p-17f), one = _mm256_set1_ps(1.0f);
  const __m256 p0 = _mm256_set1_ps(GEN_P0), p1 = _mm256_set1_ps(GEN_P1), p2 = _mm256_set1_ps(GEN_P2);
  const __m256 q0 = _mm256_set1_ps(GEN_Q0), q1 = _mm256_set1_ps(GEN_Q1), q2 = _mm256_set1_ps(GEN_Q2);
  const __m256 v0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(0xffff))), sc, off);
  const __m256 v1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 16)), sc, off);
  const __m256 r0 = _mm256_mul_ps(v0, v0), r1 = _mm256_mul_ps(v1, v1);
  const __m256 n0 = _mm256_fmadd_ps(_mm256_fmadd_ps(p2, r0, p1), r0, p0);
  const __m256 n1 = _mm256_fmadd_ps(_mm256_fmadd_ps(p2, r1, p1), r1, p0);
  const __m256 d0 = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_fmadd_ps(q2, r0, q1), r0, q0), r0, one);
  const __m256 d1 = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_fmadd_ps(q2, r1, q1), r1, q0), r1, one);
  *lo = _mm256_div_ps(_mm256_mul_ps(v0, n0), d0);
  *hi = _mm256_div_ps(_mm256_mul_ps(v1, n1), d1);
}

__attribute__((target("avx2,fma"))) void amoe_x86_normals16(gen_rng4 *r, float *out, int n) {
  for (int i = 0; i < n; i += 16) {
    gen_v4u x;
    __m256 lo, hi;
    rng4_next(r, &x);
    normals16_avx2(x, &lo, &hi);
    _mm256_storeu_ps(out + i, lo);
    _mm256_storeu_ps(out + i + 8, hi);
  }
}

/* Experts x0..x0+8 of layer_logits, e their noise; with `mask`, only its
 * lanes are read and written (the experts left past the last whole eight). */
__attribute__((target("avx2,fma"), always_inline)) static inline void logits8(
    const __m256 sv[AMOE_GEN_DIM], const float *restrict w, const float *restrict bias,
    const float *restrict req_bias, int E, int x0, __m256 sig, __m256 e, const __m256i *mask, float *restrict zf) {
#define LOAD(p) (mask ? _mm256_maskload_ps((p), *mask) : _mm256_loadu_ps(p))
  __m256 a = LOAD(bias + x0);
  for (int i = 0; i < AMOE_GEN_DIM; i++) a = _mm256_fmadd_ps(sv[i], LOAD(w + (size_t)i * E + x0), a);
  a = _mm256_fmadd_ps(sig, e, a);
  if (req_bias) a = _mm256_add_ps(a, LOAD(req_bias + x0));
#undef LOAD
  if (mask)
    _mm256_maskstore_ps(zf + x0, *mask, a);
  else
    _mm256_storeu_ps(zf + x0, a);
}

/* layer_logits with its noise drawn inside (normals16 of E, then
 * layer_logits, to the bit): sixteen experts a step, the last step's
 * pieces past E unused as normals16 leaves them, without a pass of its own
 * over the noise. */
__attribute__((target("avx2,fma"))) void amoe_x86_node_logits(const float *restrict w, const float *restrict s,
                                                              gen_rng4 *r, const float *restrict bias,
                                                              const float *restrict req_bias, int E, float sig,
                                                              float *restrict zf) {
  const __m256 vsig = _mm256_set1_ps(sig);
  __m256 sv[AMOE_GEN_DIM];
  for (int i = 0; i < AMOE_GEN_DIM; i++) sv[i] = _mm256_set1_ps(s[i]);
  int x0 = 0;
  gen_v4u x;
  __m256 e0, e1;
  for (; x0 + 16 <= E; x0 += 16) {
    rng4_next(r, &x);
    normals16_avx2(x, &e0, &e1);
    logits8(sv, w, bias, req_bias, E, x0, vsig, e0, NULL, zf);
    logits8(sv, w, bias, req_bias, E, x0 + 8, vsig, e1, NULL, zf);
  }
  if (x0 == E) return;
  rng4_next(r, &x); /* 1..15 experts left: one more step */
  normals16_avx2(x, &e0, &e1);
  if (x0 + 8 <= E) {
    logits8(sv, w, bias, req_bias, E, x0, vsig, e0, NULL, zf);
    x0 += 8;
    e0 = e1;
  }
  if (x0 < E) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(E - x0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    logits8(sv, w, bias, req_bias, E, x0, vsig, e0, &m, zf);
  }
}
/* layer_logits with its noise given (eo, or own·eo + shr·es: the products
 * rounded, then their sum, as the plain loop), eight experts a step. */
__attribute__((target("avx2,fma"))) void amoe_x86_layer_logits(const float *restrict w, const float *restrict s,
                                                               const float *restrict eo, const float *restrict es,
                                                               float own, float shr, const float *restrict bias,
                                                               const float *restrict req_bias, int E, float sig,
                                                               float *restrict zf) {
  const __m256 vsig = _mm256_set1_ps(sig), vo = _mm256_set1_ps(own), vs = _mm256_set1_ps(shr);
  __m256 sv[AMOE_GEN_DIM];
  for (int i = 0; i < AMOE_GEN_DIM; i++) sv[i] = _mm256_set1_ps(s[i]);
  for (int x0 = 0; x0 < E; x0 += 8) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(E - x0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const int whole = x0 + 8 <= E;
    __m256 e = whole ? _mm256_loadu_ps(eo + x0) : _mm256_maskload_ps(eo + x0, m);
    if (es)
      e = _mm256_add_ps(_mm256_mul_ps(vo, e),
                        _mm256_mul_ps(vs, whole ? _mm256_loadu_ps(es + x0) : _mm256_maskload_ps(es + x0, m)));
    logits8(sv, w, bias, req_bias, E, x0, vsig, e, whole ? NULL : &m, zf);
  }
}
/* amoe_gen_top_k_generic, eight logits a step: a step none of whose
 * logits beats the k-th best so far (all of them, until k are kept) is
 * skipped whole; the rest go through the same sorted insertion. */
__attribute__((target("avx2"))) int amoe_x86_top_k(const float *z, int E, int k, int *top) {
  float v[AMOE_MAX_TOPK];
  int n = 0;
  for (int x0 = 0; x0 < E; x0 += 8) {
    const __m256 th = _mm256_set1_ps(n == k ? v[k - 1] : -INFINITY);
    int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(z + x0), th, _CMP_GT_OQ));
    while (mask) {
      const int x = x0 + __builtin_ctz((unsigned)mask);
      mask &= mask - 1;
      const float zx = z[x];
      if (n == k && !(zx > v[k - 1])) continue; /* (the k-th best rose within the step) */
      int i = n < k ? n++ : k - 1;
      for (; i > 0 && zx > v[i - 1]; i--) {
        v[i] = v[i - 1];
        top[i] = top[i - 1];
      }
      v[i] = zx;
      top[i] = x;
    }
  }
  return n;
}
#endif
