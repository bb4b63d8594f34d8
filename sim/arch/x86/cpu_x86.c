/* What this CPU runs, read once at load: AVX2 with FMA, POPCNT and F16C,
 * unless ACCEPTMOE_NO_AVX2 is set (tests compare both paths in one build).
 * Where it does, this file lends the hand-written paths of this folder to
 * the plain code through the table of sim/arch/fast.h; elsewhere the table
 * stays empty and the plain C runs, bit for bit the same. */
#include "fast.h"
#include "x86.h"

#include <stdlib.h>
#include <string.h>

uint32_t amoe_pack_table[256];
amoe_fast_paths amoe_fast;

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
  amoe_fast.stream_copy = amoe_x86_stream_copy; /* SSE2: every x86-64 */
  if (!amoe_x86_avx2) return;
  amoe_fast.on = 1;
  amoe_fast.set_full = amoe_x86_set_full;
  amoe_fast.scale_logits = amoe_x86_scale_logits;
  amoe_fast.softmax_exps = amoe_x86_softmax_exps;
  amoe_fast.sigmoid = amoe_x86_sigmoid;
  amoe_fast.softmax_top8 = amoe_x86_softmax_top8;
  amoe_fast.softmax_top8_nodes = amoe_x86_softmax_top8_nodes;
  amoe_fast.normals16 = amoe_x86_normals16;
  amoe_fast.top_k = amoe_x86_top_k;
  amoe_fast.node_logits = amoe_x86_node_logits;
  amoe_fast.layer_logits = amoe_x86_layer_logits;
  amoe_fast.checksum_stripes = amoe_x86_checksum_stripes;
  amoe_fast.route_layer8 = amoe_x86_route_layer8;
  amoe_fast.top_by_value = amoe_x86_top_by_value;
  amoe_fast.acceptmoe_scatter8 = amoe_x86_acceptmoe_scatter8;
  amoe_fast.erfc_n = amoe_x86_erfc_n;
}

int amoe_cpu_avx2_f16c(void) { return amoe_x86_avx2; }
#else
#if defined(__x86_64__)
__attribute__((constructor)) static void x86_init(void) { amoe_fast.stream_copy = amoe_x86_stream_copy; }
#endif
int amoe_cpu_avx2_f16c(void) { return 0; }
#endif
