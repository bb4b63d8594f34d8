/* policy/verifier_marginal.c's erfc over a node's terms, four lanes at a
 * time by glibc's vector math library (libmvec, _ZGVdN4v_erfc: AVX2, within
 * 4 ulp of libm's erfc, which the plain code calls one value at a time).
 * marginal's prediction is a sum of such terms, so it moves in its last
 * bits; test_marginal holds the two within 1e-14 and whole runs within
 * 1e-9 of each other. */
#include "x86.h"

#ifdef AMOE_X86_PATHS
/* (libmvec: no header declares its vector entry points; the AVX2 variant,
 * declared as such so that its vector argument has AVX2's ABI) */
__attribute__((target("avx2"))) __m256d _ZGVdN4v_erfc(__m256d x);

__attribute__((target("avx2,fma"))) void amoe_x86_erfc_n(const double *x, double *y, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, _ZGVdN4v_erfc(_mm256_loadu_pd(x + i)));
  if (i < n) { /* the last one to three in a padded group */
    double a[4] = {0, 0, 0, 0}, b[4];
    for (int j = 0; i + j < n; j++) a[j] = x[i + j];
    _mm256_storeu_pd(b, _ZGVdN4v_erfc(_mm256_loadu_pd(a)));
    for (int j = 0; i + j < n; j++) y[i + j] = b[j];
  }
}
#endif
