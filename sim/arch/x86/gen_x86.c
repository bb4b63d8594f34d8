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
__attribute__((target("avx2"))) static int top_k_scan(const float *z, int E, int k, int *top) {
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

/* The few logits that can be among the top k <= 8, without the scan's
 * branches. Sixteen lanes (experts j, j + 16, ... and j + 8, j + 24, ...)
 * each have a largest logit, its own expert, so if t is the eighth
 * largest of those sixteen, at least eight logits reach t and the top k
 * are among the logits >= t (about 12 of 256 logits drawn alike). They
 * are packed in id order and each one's place is counted: the logits
 * above it, and the equal ones before it (ties keep the lower id first,
 * as the scan). Fewer than eight lanes with a logit above -inf, or more
 * than 32 candidates (many ties), go to the scan. */
#define TOPK_FEW 32
__attribute__((target("avx2,popcnt"))) int amoe_x86_top_k(const float *z, int E, int k, int *top) {
  if (k > 8 || E > AMOE_MAX_EXPERTS) return top_k_scan(z, E, k, top);
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 m0 = ninf, m1 = ninf;
  int x0 = 0;
  for (; x0 + 16 <= E; x0 += 16) { /* (a NaN: the maximum kept) */
    m0 = _mm256_max_ps(_mm256_loadu_ps(z + x0), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(z + x0 + 8), m1);
  }
  if (x0 < E) m0 = _mm256_max_ps(_mm256_loadu_ps(z + x0), m0);
  const __m256 mx[2] = {m0, m1};
  float lm[16];
  _mm256_storeu_ps(lm, mx[0]);
  _mm256_storeu_ps(lm + 8, mx[1]);
  __m256 reach[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}; /* −(the maxima >= each) */
  for (int j = 0; j < 16; j++) {
    const __m256 b = _mm256_set1_ps(lm[j]);
    for (int h = 0; h < 2; h++)
      reach[h] = _mm256_castsi256_ps(
          _mm256_add_epi32(_mm256_castps_si256(reach[h]), _mm256_castps_si256(_mm256_cmp_ps(b, mx[h], _CMP_GE_OQ))));
  }
  __m256 tm = ninf;
  for (int h = 0; h < 2; h++)
    tm = _mm256_max_ps(tm, _mm256_blendv_ps(ninf, mx[h],
                                            _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                                _mm256_set1_epi32(-7), _mm256_castps_si256(reach[h])))));
  float lane[8];
  _mm256_storeu_ps(lane, tm);
  float t = lane[0];
  for (int j = 1; j < 8; j++) t = lane[j] > t ? lane[j] : t;
  if (!(t > -INFINITY)) return top_k_scan(z, E, k, top);
  float cv[AMOE_MAX_EXPERTS + 8];
  int ci[AMOE_MAX_EXPERTS + 8], c = 0;
  const __m256 tv = _mm256_set1_ps(t), iota = _mm256_castsi256_ps(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (x0 = 0; x0 < E; x0 += 8) {
    const __m256 v = _mm256_loadu_ps(z + x0);
    int n;
    const __m256i idx = amoe_left_pack_index(_mm256_movemask_ps(_mm256_cmp_ps(v, tv, _CMP_GE_OQ)), &n);
    _mm256_storeu_ps(cv + c, _mm256_permutevar8x32_ps(v, idx));
    _mm256_storeu_si256((__m256i *)(ci + c), _mm256_add_epi32(idx, _mm256_set1_epi32(x0)));
    c += n;
  }
  if (c > TOPK_FEW) return top_k_scan(z, E, k, top);
  _mm256_storeu_ps(cv + c, _mm256_set1_ps(-INFINITY)); /* (below every candidate: never counted) */
  int place[TOPK_FEW];
  for (int i = 0; i < c; i++) {
    const __m256 b = _mm256_set1_ps(cv[i]);
    const __m256i before_i = _mm256_set1_epi32(i);
    int r = 0;
    for (int j0 = 0; j0 < c; j0 += 8) {
      const __m256 a = _mm256_loadu_ps(cv + j0);
      const __m256 before = _mm256_castsi256_ps(
          _mm256_cmpgt_epi32(before_i, _mm256_add_epi32(_mm256_castps_si256(iota), _mm256_set1_epi32(j0))));
      const __m256 beats = _mm256_blendv_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ), _mm256_cmp_ps(a, b, _CMP_GE_OQ), before);
      r += __builtin_popcount((unsigned)_mm256_movemask_ps(beats));
    }
    place[r] = ci[i]; /* (the places are 0..c-1, each once) */
  }
  for (int j = 0; j < k; j++) top[j] = place[j];
  return k;
}
#endif
