/* The fast paths an architecture lends the plain code, as one table
 * (docs/design.md §3). Dispatch goes one way, as ggml's arch-fallback.h:
 * the plain code calls an entry where it is set and the shape fits, and
 * otherwise runs itself; an architecture fills the table once at load
 * (sim/arch/x86/cpu_x86.c) and calls nothing of the plain code. No plain
 * file names an architecture's function. Every entry returns exactly what
 * the plain function it names returns, and a test compares the two
 * (ACCEPTMOE_NO_AVX2=1 leaves the table empty), but one: erfc_n, within
 * 4 ulp of libm's erfc (test_marginal holds it there). */
#ifndef AMOE_FAST_H
#define AMOE_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "block.h"
#include "f16.h"

/* the later stages' types an entry takes (workload/gen_rng.h, route/route_scan.h) */
typedef struct gen_rng4 gen_rng4;
typedef struct amoe_route_sums amoe_route_sums;

typedef struct {
  /* 1 when the entries below are set (the vector paths run here) */
  int on;
  /* core/block.c: the top-m of E logits (E % 32 == 0, m <= 32), sorted */
  void (*set_full)(uint16_t *id, amoe_f16 *z, int E, int m, const float *zfull);
  /* core/block.c's score-shape rescaling for m % 16 == 0: 0 at a NaN (z
   * untouched: the plain version decides), 1 stored in order, 2 stored
   * where rounding merged two entries (old holds the logits before: the
   * caller runs the plain order fix) */
  int (*scale_logits)(amoe_f16 *z, amoe_f16 *old, const uint16_t *id, int m, float scale);
  /* core/block.c's copy of a stashed block: non-temporal stores (NULL: memcpy) */
  void *(*stream_copy)(void *dst, const void *src, size_t bytes);
  /* core/router.c: softmax_exps for m % 8 == 0 (e^(z_j − z_0) into out,
   * returns 1/Σ); sigmoid_scores for n % 8 == 0; the top-8 probabilities
   * of one node from its 1/Σ; the same for listed nodes (m logits apart;
   * nodes NULL: 0..n-1), node t's at out[t·8], inv NULL: renormalised over
   * the eight, n a multiple of 8 */
  float (*softmax_exps)(const amoe_f16 *z, int m, float *out);
  void (*sigmoid)(const amoe_f16 *z, int n, float *out);
  void (*softmax_top8)(const amoe_f16 *z, float inv, float *out);
  void (*softmax_top8_nodes)(const amoe_f16 *z, const int *nodes, int n, int m, const float *inv, float *out);
  /* workload/gen.c: normals16, the prefill's top-k (E % 8 == 0), node_logits
   * and layer_logits with the noise given */
  void (*normals16)(gen_rng4 *r, float *out, int n);
  int (*top_k)(const float *z, int E, int k, int *top);
  void (*node_logits)(const float *w, const float *s, gen_rng4 *r, const float *bias, const float *req_bias, int E,
                      float sig, float *zf);
  void (*layer_logits)(const float *w, const float *s, const float *eo, const float *es, float own, float shr,
                       const float *bias, const float *req_bias, int E, float sig, float *zf);
  /* workload/trace.c's checksum stripes; returns the words done */
  size_t (*checksum_stripes)(const unsigned char *p, size_t words, uint64_t *acc, const uint64_t *key);
  /* route/route.c's amoe_route_layer for k == 8, E <= 256, m >= 8 */
  int (*route_layer8)(const amoe_block *b, int l, const int *nodes, int nn, const uint8_t *S, const amoe_route_sums *o);
  /* policy/policy.c's amoe_top_by_value */
  void (*top_by_value)(const double *value, const uint8_t *cand, int experts, int count, uint8_t *S);
  /* policy/verifier_marginal.c: y[i] = erfc(x[i]) for x >= 0 (glibc's
   * vector erfc, within 4 ulp of its scalar one; the only inexact entry) */
  void (*erfc_n)(const double *x, double *y, int n);
  /* policy/verifier_acceptmoe.c's utility loop for top-8 */
  void (*acceptmoe_scatter8)(double *u, const uint16_t *ids, int m, const float *prob, const int *nodes, int nn,
                             const uint8_t *depth, const double *alpha_d, int nd);
} amoe_fast_paths;

/* The table (its entries NULL where this machine has no fast path). */
extern amoe_fast_paths amoe_fast;

#endif
