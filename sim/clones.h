/* AMOE_CLONES: compile a hot function twice, for AVX2 and for baseline
 * x86-64, and pick one when the program loads. Both run the same operations
 * in the same order per element (AVX2 does not bring FMA contraction), so
 * results are bit-identical whichever runs; only the vector width differs.
 * Elsewhere it expands to nothing. */
#ifndef AMOE_CLONES_H
#define AMOE_CLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && !defined(AMOE_NO_CLONES)
#define AMOE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define AMOE_CLONES
#endif

#endif
