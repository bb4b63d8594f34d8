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

#include <stddef.h>
#include <stdint.h>

#include "block.h"
#include "clones.h"
#include "f16.h"
#include "route.h"

#ifdef AMOE_X86_PATHS
/* 1 when this CPU runs the paths (cpu_x86.c) */
extern int amoe_x86_avx2;

/* core/block.c's top-m of E logits (E % 32 == 0, m <= 32), sorted (topm_x86.c) */
void amoe_x86_set_full(uint16_t *id, amoe_f16 *z, int E, int m, const float *zfull);

/* route/router.c's softmax_exps for m % 8 == 0: e^(z_j − z_0) into out,
 * returns 1/Σ (router_x86.c) */
float amoe_x86_softmax_exps(const amoe_f16 *z, int m, float *out);
/* its sigmoid_scores for n % 8 == 0 */
void amoe_x86_sigmoid(const amoe_f16 *z, int n, float *out);
/* the top-8 softmax probabilities of one node from its stored 1/Σ */
void amoe_x86_softmax_top8(const amoe_f16 *z, float inv, float *out);
/* the same for the listed nodes of a layer (m logits apart; nodes NULL:
 * 0..n-1), node t's at out[t·8], four nodes a step */
void amoe_x86_softmax_top8_nodes(const amoe_f16 *z, const int *nodes, int n, int m, const float *inv, float *out);

/* policy/verifier_acceptmoe.c's utility loop for top-8 (acceptmoe_x86.c) */
void amoe_x86_acceptmoe_scatter8(double *u, const uint16_t *ids, int m, const float *prob, const int *nodes, int nn,
                                 const uint8_t *depth, const double *alpha_d, int nd);
/* policy/policy.c's amoe_top_by_value (policy_x86.c) */
void amoe_x86_top_by_value(const double *value, const uint8_t *cand, int experts, int count, uint8_t *S);
/* workload/gen.c's normals16 and node_logits (gen_x86.c) */
typedef struct gen_rng4 gen_rng4;
void amoe_x86_normals16(gen_rng4 *r, float *out, int n);
void amoe_x86_node_logits(const float *w, const float *s, gen_rng4 *r, const float *bias, const float *req_bias, int E,
                          float sig, float *zf);
/* workload/trace.c's checksum stripes; returns the words done (trace_x86.c) */
size_t amoe_x86_checksum_stripes(const unsigned char *p, size_t words, uint64_t *acc, const uint64_t *key);
/* route/route.c's amoe_route_layer for k == 8, E <= 256, m >= 8 (route_x86.c) */
int amoe_x86_route_layer8(const amoe_block *b, int l, const int *nodes, int nn, const uint8_t *S,
                          const amoe_route_sums *o);
#endif

#endif
