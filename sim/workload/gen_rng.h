/* The generator's random stream and its normal (workload/gen.c), shared
 * with the vector path (arch/x86/gen_x86.c): inside the library only. */
#ifndef AMOE_GEN_RNG_H
#define AMOE_GEN_RNG_H

#include <math.h>
#include <stdint.h>

#include "gen.h"
#include "rng.h"

/* The routing's random stream: four xoshiro256** in lockstep (one 256-bit
 * step gives sixteen normals), seeded per block (and per request for
 * the prompt's state). Plain vector code, so every build draws the same
 * numbers. */
typedef uint64_t gen_v4u __attribute__((vector_size(32)));
typedef float gen_v8f __attribute__((vector_size(32))); /* a node-layer's latent state */
_Static_assert(AMOE_GEN_DIM == 8, "the state update handles D as one vector of eight");
struct gen_rng4 {
  gen_v4u s0, s1, s2, s3;
};
typedef struct gen_rng4 gen_rng4;

static inline void rng4_seed(gen_rng4 *r, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = amoe_rng_hash3(a, b, c), w[16];
  for (int i = 0; i < 16; i++) w[i] = x = amoe_rng_mix(x + (uint64_t)i);
  for (int j = 0; j < 4; j++) {
    r->s0[j] = w[j];
    r->s1[j] = w[4 + j];
    r->s2[j] = w[8 + j];
    r->s3[j] = w[12 + j];
  }
}

static inline void rng4_next(gen_rng4 *r, gen_v4u *out) { /* (out: a vector return value would tie the ABI to AVX) */
  const gen_v4u x = r->s1 + (r->s1 << 2); /* ·5 and ·9 as shifts: AVX2 has no 64-bit multiply */
  const gen_v4u y = x << 7 | x >> 57;
  const gen_v4u res = y + (y << 3), t = r->s1 << 17;
  r->s2 ^= r->s0;
  r->s3 ^= r->s1;
  r->s1 ^= r->s2;
  r->s0 ^= r->s3;
  r->s2 ^= t;
  r->s3 = r->s3 << 45 | r->s3 >> 19;
  *out = res;
}

/* The normal for a 16-bit piece u of a step: the normal quantile at
 * (u + 1/2)/65536 as an odd (3,3) rational in v = (u + 1/2)/65536 - 1/2
 * (scripts/fit_noise.py: KS distance 1.6e-4 from the normal, variance
 * 0.9997, ±3.60 at the ends). v is exact and each operation rounds once
 * (fmaf, ×, ÷), so the vector version gives the same bits. */
#define GEN_P0 2.50145102f
#define GEN_P1 -17.6695881f
#define GEN_P2 30.7450409f
#define GEN_Q0 -8.1730938f
#define GEN_Q1 19.3245029f
#define GEN_Q2 -10.4786415f
static inline float gen_normal(uint32_t u) {
  const float v = fmaf((float)u, 0x1p-16f, -0.5f + 0x1p-17f), r = v * v;
  const float p = fmaf(fmaf(GEN_P2, r, GEN_P1), r, GEN_P0);
  const float q = fmaf(fmaf(fmaf(GEN_Q2, r, GEN_Q1), r, GEN_Q0), r, 1.0f);
  return v * p / q;
}

/* The generator's vector paths' plain twins (gen.c), which tests compare
 * them with bit for bit: normals of 16-bit pieces of r's stream into
 * out[0..n rounded up to 16), and one node-layer's E logits
 * (z = <s, w> + bias + σ·ε, + req_bias when given) with ε drawn from r
 * into eps. The dispatching versions are amoe_gen_normals16 and
 * amoe_gen_node_logits. */
void amoe_gen_normals16_generic(gen_rng4 *r, float *out, int n);
void amoe_gen_node_logits_generic(gen_rng4 *r, float *eps, const float *w, const float *s, const float *bias,
                                  const float *req_bias, int E, float sig, float *zf);
/* layer_logits with the noise given (the tree mechanism's path): eo, or
 * with es the mix own·eo + shr·es */
void amoe_gen_layer_logits_generic(const float *w, const float *s, const float *eo, const float *es, float own,
                                   float shr, const float *bias, const float *req_bias, int E, float sig, float *zf);
void amoe_gen_layer_logits(const float *w, const float *s, const float *eo, const float *es, float own, float shr,
                           const float *bias, const float *req_bias, int E, float sig, float *zf);
void amoe_gen_normals16(gen_rng4 *r, float *out, int n);
void amoe_gen_node_logits(gen_rng4 *r, float *eps, const float *w, const float *s, const float *bias,
                          const float *req_bias, int E, float sig, float *zf);
#endif
