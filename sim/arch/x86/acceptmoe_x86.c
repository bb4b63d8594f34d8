/* policy/verifier_acceptmoe.c's utility loop (u_e += α_t · r_t,e over each
 * node's top-8) with the products formed eight at a time: the same
 * products, added in the same order, so the same bits (tests/test_policy.c,
 * acceptmoe_top8: against the plain steps, and every verifier with the
 * vector paths on and off). */
#include "x86.h"

#ifdef AMOE_X86_PATHS
/* The node loop for top-8 (most presets): per node the eight products as
 * the scalar loop forms them (float widened, times alpha) in two
 * registers, the adds in the same order. */
__attribute__((target("avx2"))) void amoe_x86_acceptmoe_scatter8(double *u, const uint16_t *ids, int m, const float *prob,
                                                                  const int *nodes, int nn, const uint8_t *depth,
                                                                  const double *alpha_d, int nd) {
  for (int i = 0; i < nn; i++) {
    const int t = nodes[i], d = depth[t];
    const double alpha = d < nd ? alpha_d[d] : 0;
    if (alpha <= 0) continue;
    const uint16_t *id = ids + (size_t)t * m;
    const __m256 pv = _mm256_loadu_ps(prob + (size_t)t * 8);
    const __m256d a = _mm256_set1_pd(alpha);
    double w[8];
    _mm256_storeu_pd(w, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(pv)), a));
    _mm256_storeu_pd(w + 4, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(pv, 1)), a));
    for (int j = 0; j < 8; j++) u[id[j]] += w[j];
  }
}
#endif
