/* Hand-written x86 vector paths (AVX2, F16C, FMA), one file per reference
 * function they speed up; each returns exactly what the plain C version it
 * sits beside returns (the one a reader checks against docs/design.md), and
 * a test compares the two; erfc_x86.c alone is within 4 ulp, not exact. The plain code never names them: cpu_x86.c lends
 * them through the table of sim/arch/fast.h, and none of them calls plain
 * code. Only this folder and the tests include this header.
 * docs/performance.md says what each earns (scripts/ab.sh). */
#ifndef AMOE_X86_H
#define AMOE_X86_H

#include <stddef.h>
#include <stdint.h>

#include "block.h"
#include "clones.h"
#include "f16.h"
#include "route_scan.h"

/* Hand-written x86 vector paths: GCC or Clang on x86-64. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(AMOE_NO_CLONES)
#include <immintrin.h>
#define AMOE_X86_PATHS 1
#endif

/* 1 when this CPU runs AVX2, F16C and FMA (x86-64 builds with GCC or
 * Clang; elsewhere 0), and ACCEPTMOE_NO_AVX2 is unset or 0. */
int amoe_cpu_avx2_f16c(void);
/* The left-pack table: for an 8-bit lane mask, the set lanes in order as
 * eight 3-bit indices, and their count in bits 24..27. */
extern uint32_t amoe_pack_table[256];

#if defined(__x86_64__)
/* memcpy with non-temporal stores (copy_x86.c; SSE2: every x86-64) */
void *amoe_x86_stream_copy(void *dst, const void *src, size_t bytes);
#endif

#ifdef AMOE_X86_PATHS
/* 1 when this CPU runs the paths (cpu_x86.c) */
extern int amoe_x86_avx2;

/* The permutation that packs the lanes set in `mask` (8 bits, one per
 * lane) to the front, in order; *n: how many they are. */
__attribute__((target("avx2"))) static inline __m256i amoe_left_pack_index(int mask, int *n) {
  const uint32_t t = amoe_pack_table[mask];
  *n = (int)(t >> 24);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)t), _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21)),
                          _mm256_set1_epi32(7));
}
/* Stores the 32-bit lanes of v set in `mask`, in order, at out (room for
 * 8 lanes), and returns how many it stored. */
__attribute__((target("avx2"))) static inline int amoe_left_pack(void *out, __m256i v, int mask) {
  int n;
  _mm256_storeu_si256((__m256i *)out, _mm256_permutevar8x32_epi32(v, amoe_left_pack_index(mask, &n)));
  return n;
}

/* core/block.c's top-m of E logits (E % 32 == 0, m <= 32), sorted (topm_x86.c) */
void amoe_x86_set_full(uint16_t *id, amoe_f16 *z, int E, int m, const float *zfull);

/* core/block.c's score-shape rescaling for m % 16 == 0 (scale_x86.c; the
 * return as fast.h's scale_logits) */
int amoe_x86_scale_logits(amoe_f16 *z, amoe_f16 *old, const uint16_t *id, int m, float scale);

/* core/router.c's softmax_exps for m % 8 == 0: e^(z_j − z_0) into out,
 * returns 1/Σ (router_x86.c) */
float amoe_x86_softmax_exps(const amoe_f16 *z, int m, float *out);
/* its sigmoid_scores for n % 8 == 0 */
void amoe_x86_sigmoid(const amoe_f16 *z, int n, float *out);
/* the top-8 softmax probabilities of one node from its stored 1/Σ */
void amoe_x86_softmax_top8(const amoe_f16 *z, float inv, float *out);
/* the same for the listed nodes of a layer (m logits apart; nodes NULL:
 * 0..n-1), node t's at out[t·8], four nodes a step; inv NULL: the eight
 * renormalised over themselves (core/router.c's topk_inv), eight a step,
 * n a multiple of 8 */
void amoe_x86_softmax_top8_nodes(const amoe_f16 *z, const int *nodes, int n, int m, const float *inv, float *out);

/* policy/verifier_acceptmoe.c's utility loop for top-8 (acceptmoe_x86.c) */
void amoe_x86_acceptmoe_scatter8(double *u, const uint16_t *ids, int m, const float *prob, const int *nodes, int nn,
                                 const uint8_t *depth, const double *alpha_d, int nd);
/* policy/policy.c's amoe_top_by_value (policy_x86.c) */
void amoe_x86_top_by_value(const double *value, const uint8_t *cand, int experts, int count, uint8_t *S);
/* erfc of n doubles, four at a time by glibc's libmvec (within 4 ulp of
 * libm's erfc: the one path here that is not bit for bit; erfc_x86.c) */
void amoe_x86_erfc_n(const double *x, double *y, int n);
/* workload/gen.c's normals16 and node_logits (gen_x86.c) */
typedef struct gen_rng4 gen_rng4;
void amoe_x86_normals16(gen_rng4 *r, float *out, int n);
/* workload/gen.c's top-k of a prefill token's logits (E % 8 == 0): for
 * k <= 8 the few logits at or above the lanes' smallest maximum, each
 * placed by counting; otherwise eight logits a step against the k-th best
 * so far (gen_x86.c) */
int amoe_x86_top_k(const float *z, int E, int k, int *top);
void amoe_x86_node_logits(const float *w, const float *s, gen_rng4 *r, const float *bias, const float *req_bias, int E,
                          float sig, float *zf);
/* layer_logits with the noise given, or mixed from two (gen.c's tree path) */
void amoe_x86_layer_logits(const float *w, const float *s, const float *eo, const float *es, float own, float shr,
                           const float *bias, const float *req_bias, int E, float sig, float *zf);
/* workload/trace.c's checksum stripes; returns the words done (trace_x86.c) */
size_t amoe_x86_checksum_stripes(const unsigned char *p, size_t words, uint64_t *acc, const uint64_t *key);
/* route/route.c's amoe_route_layer for k == 8, E <= 256, m >= 8 (route_x86.c) */
int amoe_x86_route_layer8(const amoe_block *b, int l, const int *nodes, int nn, const uint8_t *S,
                          const amoe_route_sums *o);
#endif

#endif
