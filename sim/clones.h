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

/* 1 when this CPU runs AVX2 and F16C (x86-64 builds with GCC or Clang;
 * elsewhere 0). Hand-written vector paths check it and fall back to the
 * portable code, which they are tested against bit for bit. */
int amoe_cpu_avx2_f16c(void);
/* The left-pack table of those paths: for an 8-bit lane mask, the set
 * lanes in order as eight 3-bit indices, and their count in bits 24..27
 * (all zero where there is no such path). */
extern uint32_t amoe_pack_table[256];

#endif
