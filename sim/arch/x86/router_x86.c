/* The router's exponentials (core/router.c: router_exp, softmax_exps,
 * sigmoid_scores, the top-8 softmax) eight lanes at a time: the same float
 * operations in the same order, so the same bits (tests/test_route.c). */
#include "x86.h"

#ifdef AMOE_X86_PATHS
/* router_exp on eight lanes: the same float operations in the same order
 * (min/max operands placed so a NaN passes through as in the scalar). */
__attribute__((target("avx2,f16c"))) static inline __m256 router_exp8(__m256 x0) {
  const __m256 x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-86.0f), x0));
  const __m256 shift = _mm256_set1_ps(12582912.0f);
  const __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), shift), shift);
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693145752f))),
                                 _mm256_mul_ps(n, _mm256_set1_ps(1.42860677e-06f)));
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 120));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 24));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 6));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0.5f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_cvttps_epi32(n), 23);
  p = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
  return _mm256_andnot_ps(_mm256_cmp_ps(x0, _mm256_set1_ps(-86.0f), _CMP_LT_OQ), p);
}

/* e^(z_j − z_0) for j < m (m a multiple of 8) into out; returns the
 * softmax's 1/Σ over them: the four partial sums of the scalar code, as
 * four lanes. */
__attribute__((target("avx2,f16c"))) float amoe_x86_softmax_exps(const amoe_f16 *z, int m, float *out) {
  const __m256 z0 = _mm256_set1_ps(amoe_f16_to_f32(z[0]));
  __m128 s = _mm_setzero_ps();
  for (int j = 0; j < m; j += 8) {
    const __m256 zf = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(z + j)));
    const __m256 ex = router_exp8(_mm256_sub_ps(zf, z0));
    _mm256_storeu_ps(out + j, ex);
    s = _mm_add_ps(s, _mm256_castps256_ps128(ex));
    s = _mm_add_ps(s, _mm256_extractf128_ps(ex, 1));
  }
  float q[4];
  _mm_storeu_ps(q, s);
  return 1.0f / ((q[0] + q[1]) + (q[2] + q[3]));
}

/* Sigmoid scores of m entries (m a multiple of 8). */
__attribute__((target("avx2,f16c"))) void amoe_x86_sigmoid(const amoe_f16 *z, int m, float *out) {
  for (int j = 0; j < m; j += 8) {
    const __m256 zf = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(z + j)));
    const __m256 ex = router_exp8(_mm256_xor_ps(zf, _mm256_set1_ps(-0.0f))); /* −z, as the scalar negates */
    _mm256_storeu_ps(out + j, _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), ex)));
  }
}

/* The top-8 probabilities from a known normaliser: one register. */
__attribute__((target("avx2,f16c"))) void amoe_x86_softmax_top8(const amoe_f16 *z, float inv,
                                                                          float *out) {
  const __m256 zf = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)z));
  const __m256 z0 = _mm256_broadcastss_ps(_mm256_castps256_ps128(zf)); /* lane 0 is z[0], exactly */
  _mm256_storeu_ps(out, _mm256_mul_ps(router_exp8(_mm256_sub_ps(zf, z0)), _mm256_set1_ps(inv)));
}

/* 1 / Σ_j x_q[j] for eight nodes' top-8 (core/router.c's topk_inv: j
 * summed in order, 0 where the sum is not positive), one lane a node: the
 * 8×8 block transposed so that each addition serves the eight at once. */
__attribute__((target("avx2"))) static inline __m256 topk_inv8(const __m256 x[8]) {
  __m256 t[8], u[8];
  for (int q = 0; q < 8; q += 2) {
    t[q] = _mm256_unpacklo_ps(x[q], x[q + 1]);
    t[q + 1] = _mm256_unpackhi_ps(x[q], x[q + 1]);
  }
  for (int q = 0; q < 8; q += 4) { /* u[q + j]: entry j of nodes q..q+3 (low half), entry j + 4 (high) */
    u[q] = _mm256_shuffle_ps(t[q], t[q + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  __m256 s = _mm256_setzero_ps();
  for (int j = 0; j < 4; j++) s = _mm256_add_ps(s, _mm256_permute2f128_ps(u[j], u[j + 4], 0x20));
  for (int j = 0; j < 4; j++) s = _mm256_add_ps(s, _mm256_permute2f128_ps(u[j], u[j + 4], 0x31));
  return _mm256_and_ps(_mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_div_ps(_mm256_set1_ps(1.0f), s));
}

/* node t's eight exponentials, less z_0 (lane 0 is z[0], exactly) */
__attribute__((target("avx2,f16c"))) static inline __m256 node_diffs(const amoe_f16 *z) {
  const __m256 zf = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)z));
  return _mm256_sub_ps(zf, _mm256_broadcastss_ps(_mm256_castps256_ps128(zf)));
}

/* The listed nodes of a layer (m logits apart), node t's at out[t·8]:
 * four nodes a step, so that four exponentials' chains (each ~25
 * dependent operations) are in flight together. inv NULL: each node's
 * eight renormalised over themselves (the normalising router kinds), for
 * n a multiple of 8; core/router.c does the rest. */
__attribute__((target("avx2,f16c"))) void amoe_x86_softmax_top8_nodes(const amoe_f16 *z, const int *nodes, int n,
                                                                         int m, const float *inv, float *out) {
  int i = 0;
  for (; !inv && i + 8 <= n; i += 8) { /* renormalised: eight nodes a step, their sums in one register */
    int t[8];
    __m256 x[8];
    for (int h = 0; h < 8; h += 4) {
      for (int q = h; q < h + 4; q++) {
        t[q] = nodes ? nodes[i + q] : i + q;
        x[q] = node_diffs(z + (size_t)t[q] * m);
      }
      for (int q = h; q < h + 4; q++) x[q] = router_exp8(x[q]);
    }
    const __m256 r = topk_inv8(x);
    for (int q = 0; q < 8; q++)
      _mm256_storeu_ps(out + (size_t)t[q] * 8, _mm256_mul_ps(x[q], _mm256_permutevar8x32_ps(r, _mm256_set1_epi32(q))));
  }
  for (; inv && i + 4 <= n; i += 4) {
    int t[4];
    __m256 x[4];
    for (int q = 0; q < 4; q++) {
      t[q] = nodes ? nodes[i + q] : i + q;
      x[q] = node_diffs(z + (size_t)t[q] * m);
    }
    for (int q = 0; q < 4; q++) x[q] = router_exp8(x[q]);
    for (int q = 0; q < 4; q++)
      _mm256_storeu_ps(out + (size_t)t[q] * 8, _mm256_mul_ps(x[q], _mm256_set1_ps(inv[t[q]])));
  }
  for (; inv && i < n; i++) {
    const int t = nodes ? nodes[i] : i;
    amoe_x86_softmax_top8(z + (size_t)t * m, inv[t], out + (size_t)t * 8);
  }
}
#endif
