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

#endif
