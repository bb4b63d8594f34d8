/* AMOE_CLONES: compile a hot function twice, for AVX2 and for baseline
 * x86-64, and pick one when the program loads. Both run the same operations
 * in the same order per element (AVX2 does not bring FMA contraction), so
 * results are bit-identical whichever runs; only the vector width differs.
 * Elsewhere (and with clang) it expands to nothing. */
#ifndef AMOE_CLONES_H
#define AMOE_CLONES_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && \
    !defined(AMOE_NO_CLONES) /* clang 14's target_clones drops external symbols */
#define AMOE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define AMOE_CLONES
#endif

/* A stage of a hot AMOE_CLONES function, written apart for the reader but
 * compiled into each clone (a call would run the baseline build). */
#if defined(__GNUC__)
#define AMOE_STAGE static inline __attribute__((always_inline))
#else
#define AMOE_STAGE static inline
#endif

/* 1 when this CPU runs AVX2, F16C and FMA (x86-64 builds with GCC or
 * Clang; elsewhere 0), and ACCEPTMOE_NO_AVX2 is unset or 0. Hand-written
 * vector paths check it and fall back to the portable code, which they are
 * tested against bit for bit. */
int amoe_cpu_avx2_f16c(void);
/* The left-pack table of those paths: for an 8-bit lane mask, the set
 * lanes in order as eight 3-bit indices, and their count in bits 24..27
 * (all zero where there is no such path). */
extern uint32_t amoe_pack_table[256];

/* Hand-written x86 vector paths (GCC or Clang, x86-64). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(AMOE_NO_CLONES)
#include <immintrin.h>
#define AMOE_X86_PATHS 1

/* Stores the 32-bit lanes of v set in `mask` (8 bits, one per lane), in
 * order, at out (room for 8 lanes), and returns how many it stored. */
__attribute__((target("avx2"))) static inline int amoe_left_pack(void *out, __m256i v, int mask) {
  const uint32_t t = amoe_pack_table[mask];
  const __m256i idx = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32((int)t), _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21)),
      _mm256_set1_epi32(7));
  _mm256_storeu_si256((__m256i *)out, _mm256_permutevar8x32_epi32(v, idx));
  return (int)(t >> 24);
}
#endif

#endif
