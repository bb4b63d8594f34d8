/* The deterministic random weights every backend uses, as one function that
 * compiles for the host (C) and the device (CUDA): the CPU reference and the
 * GPU see the same bf16 bits without copying 58 GB around. */
#ifndef AMOE_MOE_WEIGHTS_H
#define AMOE_MOE_WEIGHTS_H

#include <stdint.h>

#ifdef __CUDACC__
#define AMOE_HD __host__ __device__ __forceinline__
#else
#define AMOE_HD static inline
#endif

AMOE_HD uint64_t amoe_w_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Bytes of `layers` layers of bf16 expert weights (gate, up, down). */
AMOE_HD double amoe_w_bytes(int experts, int hidden, int inter, int layers) {
  return (double)layers * experts * 3.0 * hidden * inter * 2.0;
}

/* Element i of a weight matrix, uniform in ±scale (scale = 1/sqrt(fan-in),
 * computed once by the caller), as bf16 bits. */
AMOE_HD uint16_t amoe_w_value(uint64_t seed, int layer, int expert, int down, uint64_t i, float scale) {
  uint64_t h = amoe_w_mix(amoe_w_mix(seed ^ ((uint64_t)layer << 40 | (uint64_t)expert << 1 | (uint64_t)down)) ^ i);
  float u = (float)(h >> 40) * (1.0f / 16777216.0f); /* [0, 1) with 24 bits */
  float v = (2.0f * u - 1.0f) * scale;
  union {
    float f;
    uint32_t b;
  } c;
  c.f = v;
  uint32_t rnd = 0x7fffu + ((c.b >> 16) & 1u);
  return (uint16_t)((c.b + rnd) >> 16);
}

#endif
