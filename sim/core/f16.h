/* IEEE binary16 (f16) router logits (docs/design.md §5).
 *
 * Blocks keep router logits at half precision: the modelled routers compute
 * in bf16, whose values inside ±65504 are exactly representable in f16, so
 * nothing the model had is lost, and a 64-node qwen3 block shrinks from
 * 590 KB to about 300 KB on disk (that size is what bounds trace replay).
 * Conversions are integer/float bit operations with round-to-nearest-even,
 * identical on every IEEE host, and simple enough for the compiler to
 * vectorise. Stored logits are never -0 (it would tie +0 out of id order). */
#ifndef AMOE_F16_H
#define AMOE_F16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t amoe_f16;

#define AMOE_F16_POS_INF 0x7c00u
#define AMOE_F16_NEG_INF 0xfc00u
#define AMOE_F16_MAX 65504.0f

/* Rounds to nearest even; beyond ±65520 gives ±inf, NaN stays NaN, -0 → +0.
 * Every case is computed and one selected, without branches: the sign and
 * magnitude of random logits would defeat a branch predictor. */
static inline amoe_f16 amoe_f16_from_f32(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  /* normal: rebias the exponent, round the dropped 13 bits to even */
  const uint32_t nrm = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13;
  /* subnormal: adding 0.5 lets the FPU round at 2^-24 */
  float a;
  memcpy(&a, &ax, 4);
  a += 0.5f;
  uint32_t sub;
  memcpy(&sub, &a, 4);
  sub -= 0x3f000000u;
  uint32_t h = ax < 0x38800000u ? sub : nrm;
  h = ax >= 0x477ff000u ? 0x7c00u : h; /* rounds past 65504, or inf */
  h = ax > 0x7f800000u ? 0x7e00u : h;  /* NaN */
  return (amoe_f16)(h ? (sign | h) : 0);
}

static inline float amoe_f16_to_f32(amoe_f16 h) {
  uint32_t em = h & 0x7fffu, u = em << 13;
  float f;
  memcpy(&f, &u, 4);
  f *= 0x1p112f; /* exact for normals and subnormals alike */
  memcpy(&u, &f, 4);
  if (em >= 0x7c00u) u = (em << 13) | 0x7f800000u;
  u |= (uint32_t)(h & 0x8000u) << 16;
  memcpy(&f, &u, 4);
  return f;
}

/* An order-preserving 16-bit key: a > b as numbers iff key(a) > key(b)
 * (for non-NaN values without -0). */
static inline uint32_t amoe_f16_key(amoe_f16 h) {
  return (uint32_t)h ^ (0x8000u | ((0u - ((uint32_t)h >> 15)) & 0x7fffu)); /* flip the sign, or all bits */
}
/* The inverse of amoe_f16_key. */
static inline amoe_f16 amoe_f16_of_key(uint32_t k) {
  return (amoe_f16)(k ^ (0x8000u | ((0u - (((k >> 15) & 1u) ^ 1u)) & 0x7fffu)));
}

/* Not a usable logit: NaN or +inf (-inf is allowed: a masked expert), or -0. */
static inline int amoe_f16_bad(amoe_f16 h) {
  return ((h & 0x7fffu) >= 0x7c00u && h != AMOE_F16_NEG_INF) | (h == 0x8000u);
}

#endif
