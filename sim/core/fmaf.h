/* Fused multiply-add for portable code that must give the bits a vector
 * FMA gives: fmaf, or where the compiler has no fused multiply-add to inline
 * (x86-64 without -mfma) the same correctly rounded result computed in
 * double, because glibc's fmaf is a routine many times slower on CPUs
 * without FMA. For finite operands and result. */
#ifndef AMOE_FMAF_H
#define AMOE_FMAF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The product of two floats is exact in double and the sum's rounding
 * error exact by TwoSum; from the two the sum is rounded to odd, and
 * rounding to odd in 53 bits, then to nearest in 24, is rounding to nearest
 * once (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums:
 * proved algorithms using rounding to odd", 2008). */
static inline float amoe_fmaf_odd(float a, float b, float c) {
  const double p = (double)a * b, s = p + c, t = s - p, err = (p - (s - t)) + (c - t);
  uint64_t u;
  memcpy(&u, &s, sizeof u);
  if (err != 0 && !(u & 1)) u += (err > 0) == (s > 0) ? 1 : UINT64_MAX; /* the odd neighbour toward the sum */
  double r;
  memcpy(&r, &u, sizeof r);
  return (float)r;
}

static inline float amoe_fmaf(float a, float b, float c) {
#ifdef __FP_FAST_FMAF
  return fmaf(a, b, c);
#else
  return amoe_fmaf_odd(a, b, c);
#endif
}

#endif
