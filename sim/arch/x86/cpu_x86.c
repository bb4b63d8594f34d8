/* What this CPU runs, read once at load: AVX2 with FMA, POPCNT and F16C,
 * unless ACCEPTMOE_NO_AVX2 is set (tests compare both paths in one build).
 * The hand-written paths in this folder run only where it is 1; elsewhere
 * the plain C beside each caller does, bit for bit the same. */
#include "x86.h"

#include <stdlib.h>
#include <string.h>

uint32_t amoe_pack_table[256];

#ifdef AMOE_X86_PATHS
#include <cpuid.h>

int amoe_x86_avx2;

__attribute__((constructor)) static void x86_init(void) {
  for (int mask = 0; mask < 256; mask++) {
    uint32_t v = 0;
    int c = 0;
    for (int i = 0; i < 8; i++)
      if (mask >> i & 1) v |= (uint32_t)i << (3 * c++);
    amoe_pack_table[mask] = v | (uint32_t)c << 24;
  }
  __builtin_cpu_init();
  unsigned a, b, c, d; /* F16C: CPUID leaf 1, ecx bit 29 (not every compiler's builtin knows it) */
  amoe_x86_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("popcnt") && __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
  const char *off = getenv("ACCEPTMOE_NO_AVX2"); /* tests compare both paths in one build */
  if (off && *off && strcmp(off, "0") != 0) amoe_x86_avx2 = 0;
}

int amoe_cpu_avx2_f16c(void) { return amoe_x86_avx2; }
#else
int amoe_cpu_avx2_f16c(void) { return 0; }
#endif
