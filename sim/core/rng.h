/* Deterministic random numbers. Two kinds:
 *  - a stream (xoshiro256**), seeded by hashing a tuple of integers, so a
 *    request's blocks depend only on (seed, request index);
 *  - a counter-based coin amoe_rng_coin(seed, a, b): the same draw for every
 *    policy that asks about the same (block, node) (docs/design.md §7). */
#ifndef AMOE_RNG_H
#define AMOE_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
  uint64_t s[4];
  double spare;
  int has_spare;
} amoe_rng;

static inline uint64_t amoe_rng_mix(uint64_t x) { /* splitmix64 finaliser */
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static inline uint64_t amoe_rng_hash3(uint64_t a, uint64_t b, uint64_t c) {
  return amoe_rng_mix(amoe_rng_mix(amoe_rng_mix(a) ^ b) ^ c);
}

static inline void amoe_rng_seed(amoe_rng *r, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = amoe_rng_hash3(a, b, c);
  for (int i = 0; i < 4; i++) r->s[i] = x = amoe_rng_mix(x + (uint64_t)i);
  r->has_spare = 0;
}

static inline uint64_t amoe_rng_next(amoe_rng *r) {
  uint64_t *s = r->s;
  uint64_t res = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return res;
}

/* Uniform in [0, 1) with 53 bits. */
static inline double amoe_rng_unif(amoe_rng *r) {
  return (double)(amoe_rng_next(r) >> 11) * 0x1.0p-53;
}

static inline double amoe_rng_normal(amoe_rng *r) {
  if (r->has_spare) {
    r->has_spare = 0;
    return r->spare;
  }
  double u, v, s;
  do {
    u = 2.0 * amoe_rng_unif(r) - 1.0;
    v = 2.0 * amoe_rng_unif(r) - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  double m = sqrt(-2.0 * log(s) / s);
  r->spare = v * m;
  r->has_spare = 1;
  return u * m;
}

/* Uniform in [0, 1) from a counter: same (seed, a, b) → same value. */
static inline double amoe_rng_coin(uint64_t seed, uint64_t a, uint64_t b) {
  return (double)(amoe_rng_hash3(seed ^ 0xc01dc0ffeeULL, a, b) >> 11) * 0x1.0p-53;
}

#endif
