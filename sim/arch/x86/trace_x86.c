/* workload/trace.c's checksum stripes (a trace file's and a spec's
 * checksum) four lanes per register: the same sums (tests/cli.sh reads the
 * same traces with ACCEPTMOE_NO_AVX2=0 and 1). */
#include "x86.h"

#ifdef AMOE_X86_PATHS
/* The stripes of amoe_trace_checksum four lanes per register: the same
 * sums. Returns the words done. */
__attribute__((target("avx2"))) size_t amoe_x86_checksum_stripes(const unsigned char *p, size_t words, uint64_t *acc,
                                                                const uint64_t *key) {
  __m256i A0 = _mm256_loadu_si256((const __m256i *)(const void *)acc),
          A1 = _mm256_loadu_si256((const __m256i *)(const void *)(acc + 4)),
          K0 = _mm256_loadu_si256((const __m256i *)(const void *)key),
          K1 = _mm256_loadu_si256((const __m256i *)(const void *)(key + 4));
  const __m256i step = _mm256_set1_epi64x((long long)0x9e3779b97f4a7c15ULL);
  size_t i = 0;
  for (; i + 8 <= words; i += 8) {
    const __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)(p + 8 * i)),
                  v1 = _mm256_loadu_si256((const __m256i *)(const void *)(p + 8 * i + 32));
    const __m256i x0 = _mm256_xor_si256(v0, K0), x1 = _mm256_xor_si256(v1, K1);
    A0 = _mm256_add_epi64(A0, _mm256_add_epi64(_mm256_mul_epu32(x0, _mm256_srli_epi64(x0, 32)), v0));
    A1 = _mm256_add_epi64(A1, _mm256_add_epi64(_mm256_mul_epu32(x1, _mm256_srli_epi64(x1, 32)), v1));
    K0 = _mm256_add_epi64(K0, step);
    K1 = _mm256_add_epi64(K1, step);
  }
  _mm256_storeu_si256((__m256i *)(void *)acc, A0);
  _mm256_storeu_si256((__m256i *)(void *)(acc + 4), A1);
  return i;
}
#endif
