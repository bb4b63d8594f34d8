/* Seeded synthetic workload generator (docs/design.md §5).
 *
 * Tree: EAGLE-2/3 dynamic expansion. The root proposes top_k children; each
 * further step expands the top_k frontier nodes (by cumulative score) by
 * top_k children each and keeps the best top_k as the next frontier; the
 * block keeps the best `candidates - 1` of everything proposed (a connected
 * tree, since a child never outscores its parent and ties go to the earlier
 * node).
 *
 * Acceptance: walking down from the root, the target's argmax equals child c
 * with probability h·p_c (p_c the draft probability; scaled down if the sum
 * exceeds 1). h is found by bisection so that the mean accept length of the
 * EAGLE-verified tree (best nodes-1) equals `tau`. In replay mode the accept
 * length of each block is read from a real run instead.
 *
 * Routing: a latent-factor model. Node t at MoE layer l has a state
 *   g[t,l] = c·g[t,l-1] + sqrt(1-c²)·ξ         (token part; c = layer_correlation)
 *   s[t,l] = ρ_l·s[parent,l] + sqrt(1-ρ_l²)·g[t,l]  (ρ_l = the layer's locality)
 * and logits z[t,l,e] = (<s[t,l], w[l,e]> + σ·ε) / temperature + skew·b[l,e]
 * + request_bias·c[r,l,e], with fixed expert embeddings w, popularity biases
 * b, per-logit noise ε and (off by default) a bias c drawn per request, which
 * concentrates one request's tokens on a subset of experts, and which with
 * drift_tokens evolves from block to block as an autoregressive process. ξ and ε are
 * normals (amoe_gen_normal of 16-bit pieces of a stream seeded per block);
 * a block is generated layer by layer. A logit is computed as nine
 * fused multiply-adds on stored w/T and skew·b (fmaf: the same bits on
 * every path).
 * The tree (off unless tree_sibling or tree_repeat is set at some layer):
 * at layer l a node's fresh normals ξ and ε become
 *   √(1−a_l)·own + √a_l·shared[its parent]      (a_l = tree_sibling[l]),
 * so siblings, alternatives at one position, route alike as their shared
 * context outweighs their tokens; and with probability q_l = tree_repeat[l]
 * (one uniform per node and block, so the layers it repeats at are nested)
 * a node carries the token of its twin, the first node with its depth and
 * sibling rank, at that layer: its token part g and noise ε are the twin's,
 * so it differs from the twin only through its parent's state (at a layer
 * of locality 0, not at all). Every root-to-leaf path keeps the chain's
 * distribution (the shared draws are keyed by parent, and a twin is off
 * the path), so no sequence statistic moves.
 * The root's parent is the last committed token of the previous block.
 * A request (tokens_per_request committed tokens) depends only on
 * (seed, request index). See docs/generator.md for the fit to real data. */
#ifndef AMOE_GEN_H
#define AMOE_GEN_H

#include <stdint.h>

#include "block.h"
#include "err.h"
#include "model.h"
#include "rng.h"

#define AMOE_GEN_DIM 8
#define AMOE_GEN_MAX_CHAIN 16 /* workload.tree.depth at most */

/* The standard normal the generator draws for a 16-bit piece u of its
 * random stream: an approximation of the normal quantile at (u + 1/2)/65536
 * (scripts/fit_noise.py; tests/test_gen.c checks its distribution). */
float amoe_gen_normal(uint16_t u);

/* Popularity skew: 0.6 fits Mixtral's 8 experts (the window-union curve),
 * 0.45 fits OLMoE's 64 (busiest/quietest/effective experts on c4); between
 * them linear in log2(E), beyond 64 held at 0.45 (no data). */
#define AMOE_FIT_SKEW_FEW 0.6
#define AMOE_FIT_SKEW_MANY 0.45
/* (AMOE_FIT_LOCALITY, _NOISE, _TEMPERATURE and _LAYER_CORRELATION, the
 * model's routing defaults, are in model.h) */

typedef struct {
  uint64_t seed;
  int layers, experts, top_k; /* the model's MoE shape */
  int m;                      /* logits stored per node-layer */
  int depth, branch, nodes, candidates; /* tree: depth, top_k, nodes, candidate pool */
  double tau;                 /* target mean accept length (used when no replay) */
  const uint16_t *replay;     /* per-step accept lengths to replay, or NULL */
  int replay_n;
  double temperature, locality, layer_correlation, skew, noise;
  /* popularity skew of each MoE layer ([layers]), or NULL: `skew` at every layer */
  const double *skew_layers;
  /* score shape: each MoE layer's stored logits times this after the top-k
   * sets are chosen ([layers]), or NULL: 1 at every layer (the logits as
   * generated, byte for byte) */
  const double *score_scale_layers;
  /* locality of each MoE layer ([layers]), or NULL: `locality` at every
   * layer (real models differ by 8x between layers) */
  const double *locality_layers;
  /* request_bias of each MoE layer ([layers]), or NULL: `request_bias` at
   * every layer */
  const double *request_bias_layers;
  /* the tree mechanism per layer ([layers] each), or both NULL: off (the
   * blocks as without it, byte for byte) */
  const double *tree_sibling_layers, *tree_repeat_layers;
  double request_bias; /* std of a per-request expert bias (0: none; not fitted) */
  /* the request bias's time constant in committed tokens: after a block
   * that commits n tokens, c ← a·c + √(1−a²)·η with a = exp(−n/drift_tokens)
   * and fresh normals η (a request's favoured experts drift as its text
   * moves on); 0: the bias is fixed for the whole request */
  double drift_tokens;
  int tokens_per_request;
  double accept_scale; /* > 0: use this acceptance scale instead of calibrating */
  /* acceptance given as engines give it (§19; n = 0: tau's calibration): a
   * chain's acceptance at each position, conditional on the one before it
   * (amoe_gen_chain_accept) */
  double chain_accept[AMOE_GEN_MAX_CHAIN];
  int chain_accept_n;
  /* a prefill chunk longer than this routes this many of its tokens,
   * spread evenly, each standing for its share of the chunk (0: every
   * token; amoe_gen_prefill) */
  int prefill_sample;
  /* a request routes every route_hold-th of its blocks afresh (staggered
   * by request) and between them repeats the last routed block's routes,
   * its routing state waiting (0 or 1: every block; amoe_gen_next) */
  int route_hold;
} amoe_gen_params;

/* A chain of k draft tokens whose mean accept length (committed tokens per
 * step, the bonus token included) is the curve's AL at k: al[0..n) gives AL
 * at k = 1..n (n = 1: one AL pinned at the run's k, every position then
 * accepted alike). The curve's steps AL(i) − AL(i−1) are the chances of
 * reaching position i; made non-increasing (a chain cannot reach a position
 * more often than the one before it) and scaled as one so that they add to
 * AL(k) − 1 exactly, so a curve that saturates or falls comes out as given
 * at k. Writes the conditional acceptance of positions 1..k into a[0..k). */
amoe_status amoe_gen_chain_accept(const double *al, int n, int k, double *a, amoe_err *e);

typedef struct amoe_gen amoe_gen;

/* The fitted default popularity skew for a model with E experts. */
double amoe_gen_default_skew(int experts);

/* Creates a generator; calibrates the acceptance scale (a few ms). */
amoe_status amoe_gen_open(amoe_gen **g, const amoe_gen_params *p, amoe_err *e);
/* The same, sharing like's routing structure (the model's expert
 * embeddings and biases, read only) where like is not NULL: like's params
 * must give the same structure (its model shape, temperature and skew);
 * the last of them to close frees it. The blocks are those amoe_gen_open
 * would make, byte for byte. */
amoe_status amoe_gen_open_sibling(amoe_gen **g, const amoe_gen_params *p, amoe_gen *like, amoe_err *e);
void amoe_gen_close(amoe_gen *g);
/* The tokens the requests begun after this decode (tokens_per_request). */
void amoe_gen_set_tokens(amoe_gen *g, int tokens);
/* Starts request r (resets the request's random stream and state). */
void amoe_gen_begin_request(amoe_gen *g, uint32_t r);
/* Generates the next block of the current request: AMOE_OK with a block,
 * AMOE_END when the request already has tokens_per_request committed
 * tokens, else the error (e says what). */
amoe_status amoe_gen_next(amoe_gen *g, amoe_block *b, amoe_err *e);
/* The prefill of request r: `tokens` prompt tokens routed as a chain (the
 * decode tokens' locality, the request's bias as it starts), on a stream
 * of their own (the request's blocks do not depend on it). Adds each
 * token's natural top-k to counts[chunk][layer][expert] (zeroed first),
 * token t in chunk t / chunk (chunk 0: one chunk of every token). A chunk
 * longer than prefill_sample tokens routes that many of them, spread
 * evenly, each counted for the tokens it stands for: at a few hundred
 * tokens a chunk's union is already nearly every expert, and the counts'
 * shares are what its cost reads. */
amoe_status amoe_gen_prefill(amoe_gen *g, uint32_t r, int tokens, int chunk, uint16_t *counts, amoe_err *e);
/* How many blocks request r has (at most limit): its trees and accepted
 * paths drawn as amoe_gen_next draws them, without their routing. Leaves
 * g between requests (amoe_gen_begin_request before the next block). */
amoe_status amoe_gen_count_blocks(amoe_gen *g, uint32_t r, int limit, int *blocks, amoe_err *e);
/* The k largest of z[0..E) (ties to the lower id; -INFINITY and NaN never)
 * into top[], by value descending: the set a repeated argmax gives, in one
 * pass that keeps them sorted. Returns how many (k, unless fewer are
 * finite). The prefill's top-k; arch/x86 has a fast path of it. */
int amoe_gen_top_k_generic(const float *z, int E, int k, int *top);
/* The acceptance scale h found by calibration. */
double amoe_gen_accept_scale(const amoe_gen *g);

#endif
