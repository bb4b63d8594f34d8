#include "router.h"
#include "clones.h"
#include "fast.h"

#include <math.h>
#include <string.h>

/* e^x for the router: Cody-Waite reduction to r in [-ln2/2, ln2/2], a
 * degree-6 Taylor polynomial (relative error < 2e-7), then 2^n by exponent
 * arithmetic. Plain float operations: the same bits on every IEEE host, and
 * the loops that call it vectorise (libm's expf does neither). */
static inline float router_exp(float x0) {
  float x = x0 < -86.0f ? -86.0f : (x0 > 88.0f ? 88.0f : x0); /* keeps 2^n a normal float */
  const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  float n = (x * 1.44269504f + shift) - shift;
  float r = (x - n * 0.693145752f) - n * 1.42860677e-06f; /* ln 2 split in two */
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  /* 2^n into the exponent, in unsigned arithmetic (defined wrap); a NaN
   * converts as the vector code's cvttps does, to INT32_MIN, which adds 0 */
  const int32_t ni = n == n ? (int32_t)n : INT32_MIN;
  uint32_t bits;
  memcpy(&bits, &p, 4);
  bits += (uint32_t)ni << 23;
  memcpy(&p, &bits, 4);
  return x0 < -86.0f ? 0.0f : p; /* below e^-86 (and -inf, a masked expert): 0 */
}

/* e^(z_j − z_0) for j < m into out; returns the softmax's 1/Σ over them,
 * summed in four fixed partial sums (arch/x86/router_x86.c: eight lanes at a
 * time, the same bits). */
static AMOE_CLONES float softmax_exps(const amoe_f16 *z, int m, float *out, int vec) {
  if (vec && m % 8 == 0) return amoe_fast.softmax_exps(z, m, out);
  const float z0 = amoe_f16_to_f32(z[0]);
  for (int j = 0; j < m; j++) out[j] = router_exp(amoe_f16_to_f32(z[j]) - z0);
  float s[4] = {0, 0, 0, 0}; /* four fixed partial sums: a defined order, no serial chain */
  int j = 0;
  for (; j + 4 <= m; j += 4)
    for (int q = 0; q < 4; q++) s[q] += out[j + q];
  for (; j < m; j++) s[0] += out[j];
  return 1.0f / ((s[0] + s[1]) + (s[2] + s[3]));
}

/* The vector paths where this CPU runs them (vec below: the table's entries are set). */
static int vec_paths(void) { return amoe_fast.on; }

float amoe_router_softmax_inv(const amoe_f16 *z, int m) {
  float ex[AMOE_MAX_EXPERTS];
  return softmax_exps(z, m, ex, vec_paths());
}

double amoe_router_entropy(const double *z, int n, double zmax, double *norm) {
  double sum = 0, zsum = 0;
  for (int j = 0; j < n; j++) {
    const double d = z[j] - zmax, w = exp(d);
    sum += w;
    zsum += d * w;
  }
  *norm = sum;
  return log(sum) - zsum / sum; /* −Σ p ln p with p = e^d / sum */
}

/* Sigmoid scores of n entries, each on its own (so any n of them give the
 * same values). */
static AMOE_CLONES void sigmoid_scores(const amoe_f16 *z, int n, float *out, int vec) {
  if (vec && n % 8 == 0) {
    amoe_fast.sigmoid(z, n, out);
    return;
  }
  for (int j = 0; j < n; j++) out[j] = 1.0f / (1.0f + router_exp(-amoe_f16_to_f32(z[j])));
}

/* 1 / Σ_{j<k} x_j, summed in order: the renormalisation over the top-k
 * that every normalising router kind applies, the same bits on every path. */
static inline float topk_inv(const float *x, int k) {
  float s = 0;
  for (int j = 0; j < k; j++) s += x[j];
  return s > 0 ? 1.0f / s : 0.0f;
}

static inline int renormalises(int router) {
  return router == AMOE_ROUTER_SOFTMAX_NORM || router == AMOE_ROUTER_SOFTMAX_TOPK ||
         router == AMOE_ROUTER_SIGMOID_NORM;
}

static AMOE_CLONES void probs(const amoe_block *b, int l, int t, int router, int k, float *out, int vec) {
  const amoe_f16 *z = amoe_block_logits(b, l, t);
  const int m = b->m;
  float inv;
  if (router == AMOE_ROUTER_SIGMOID_NORM)
    sigmoid_scores(z, m, out, vec);
  inv = router == AMOE_ROUTER_SIGMOID_NORM ? 1.0f : softmax_exps(z, m, out, vec);
  if (renormalises(router)) inv = topk_inv(out, k < m ? k : m);
  for (int j = 0; j < m; j++) out[j] *= inv;
}

static void probs_top(const amoe_block *b, int l, int t, int router, int k, float *out, int vec) {
  const amoe_f16 *z = amoe_block_logits(b, l, t);
  if (router == AMOE_ROUTER_SIGMOID_NORM) { /* entry by entry: the top-k alone suffice */
    sigmoid_scores(z, k, out, vec);
    const float inv = topk_inv(out, k);
    for (int j = 0; j < k; j++) out[j] *= inv;
    return;
  }
  if (renormalises(router) || b->softmax_inv) { /* k exponentials, times 1/Σ of them or the stored 1/Σ */
    const float inv = renormalises(router) ? 1.0f : b->softmax_inv[(size_t)l * b->n + t];
    if (vec && k == 8)
      amoe_fast.softmax_top8(z, inv, out);
    else {
      const float z0 = amoe_f16_to_f32(z[0]);
      for (int j = 0; j < k; j++) out[j] = router_exp(amoe_f16_to_f32(z[j]) - z0) * inv;
    }
    if (renormalises(router)) {
      const float r = topk_inv(out, k);
      for (int j = 0; j < k; j++) out[j] *= r;
    }
    return;
  }
  float all[AMOE_MAX_EXPERTS];
  probs(b, l, t, router, k, all, vec);
  memcpy(out, all, (size_t)k * sizeof *out);
}

static void probs_nodes(const amoe_block *b, int l, const int *nodes, int n, int router, int k, float *out, int vec) {
  int i = 0;
  if (vec && k == 8 && b->lm >= 8) {
    if (renormalises(router) && router != AMOE_ROUTER_SIGMOID_NORM) { /* eight nodes a step; the rest below */
      i = n - n % 8;
      amoe_fast.softmax_top8_nodes(amoe_block_logits(b, l, 0), nodes, i, b->lm, NULL, out);
    } else if (router == AMOE_ROUTER_SOFTMAX && b->softmax_inv) {
      amoe_fast.softmax_top8_nodes(amoe_block_logits(b, l, 0), nodes, n, b->lm, b->softmax_inv + (size_t)l * b->n, out);
      return;
    }
  }
  for (; i < n; i++) {
    const int t = nodes ? nodes[i] : i;
    probs_top(b, l, t, router, k, out + (size_t)t * k, vec);
  }
}

void amoe_router_probs(const amoe_block *b, int l, int t, int router, int k, float *out) {
  probs(b, l, t, router, k, out, vec_paths());
}
void amoe_router_probs_top(const amoe_block *b, int l, int t, int router, int k, float *out) {
  probs_top(b, l, t, router, k, out, vec_paths());
}
void amoe_router_probs_nodes(const amoe_block *b, int l, const int *nodes, int n, int router, int k, float *out) {
  probs_nodes(b, l, nodes, n, router, k, out, vec_paths());
}
void amoe_router_probs_generic(const amoe_block *b, int l, int t, int router, int k, float *out) {
  probs(b, l, t, router, k, out, 0);
}
void amoe_router_probs_nodes_generic(const amoe_block *b, int l, const int *nodes, int n, int router, int k,
                                     float *out) {
  probs_nodes(b, l, nodes, n, router, k, out, 0);
}

amoe_status amoe_router_check_inv(const amoe_block *b, amoe_err *e) {
  if (!b->softmax_inv || !b->logits) return AMOE_OK;
  if (b->lm != b->m) return amoe_fail(e, AMOE_EINVAL, "block %llu was read without all its logits",
                                      (unsigned long long)b->index);
  for (int l = 0; l < b->layers; l++)
    for (int t = 0; t < b->n; t++) {
      const float want = amoe_router_softmax_inv(amoe_block_logits(b, l, t), b->m),
                  got = b->softmax_inv[(size_t)l * b->n + t];
      if (memcmp(&want, &got, sizeof want))
        return amoe_fail(e, AMOE_EFORMAT, "layer %d node %d: stored softmax normaliser %.9g, the logits give %.9g",
                         l, t, (double)got, (double)want);
    }
  return AMOE_OK;
}
