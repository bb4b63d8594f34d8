/* Hand-written x86 vector paths (AVX2, F16C, FMA), one file per reference
 * function they speed up; each returns exactly what the plain C version it
 * sits beside returns (the one a reader checks against docs/design.md), and
 * a test compares the two. Callers dispatch on amoe_x86_avx2:
 *   #ifdef AMOE_X86_PATHS
 *     if (amoe_x86_avx2 && <shape fits>) return amoe_x86_...(...);
 *   #endif
 *   <the plain version>
 * docs/performance.md says what each earns (scripts/ab.sh). */
#ifndef AMOE_X86_H
#define AMOE_X86_H

#include <stdint.h>

#include "clones.h"
#include "f16.h"

#ifdef AMOE_X86_PATHS
/* 1 when this CPU runs the paths (cpu.c) */
extern int amoe_x86_avx2;

/* core/block.c's top-m of E logits (E % 32 == 0, m <= 32), sorted (topm.c) */
void amoe_x86_set_full(uint16_t *id, amoe_f16 *z, int E, int m, const float *zfull);
#endif

#endif
