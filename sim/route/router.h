/* Router probabilities from a block's stored logits (docs/design.md §4: the
 * preset's router function). Softmax runs over the stored top-m logits of
 * a node-layer; sigmoid-normalized routers score each entry alone. The
 * arithmetic is plain float in a fixed order (own e^x, four fixed partial
 * sums), so every host and every code path gives the same bits; the AVX2
 * paths are tested against plain scalar code. */
#ifndef AMOE_ROUTER_H
#define AMOE_ROUTER_H

#include "block.h"

/* Router probabilities of node t's stored entries at layer l, out[m]: needs
 * all m logits (b->lm == m, AMOE_LOGITS_ALL from a trace). */
void amoe_router_probs(const amoe_block *b, int l, int t, int router, float *out);
/* The first k of those (the natural top-k), out[k]: the same values. With
 * the block's stored softmax normalisers (traces carry them), or a
 * sigmoid-normalized router, only the top-k logits are read and only k
 * exponentials computed. */
void amoe_router_probs_top(const amoe_block *b, int l, int t, int router, int k, float *out);
/* amoe_router_probs_top at layer l for the n listed nodes (NULL: nodes
 * 0..n-1): node t's at out[t·k .. t·k + k). */
void amoe_router_probs_nodes(const amoe_block *b, int l, const int *nodes, int n, int router, int k, float *out);
/* amoe_router_probs and amoe_router_probs_nodes without the vector paths:
 * their plain twins, which tests compare them with (bit for bit). */
void amoe_router_probs_generic(const amoe_block *b, int l, int t, int router, float *out);
void amoe_router_probs_nodes_generic(const amoe_block *b, int l, const int *nodes, int n, int router, int k,
                                     float *out);
/* The softmax normaliser of m stored logits z (z[0] the largest):
 * 1 / Σ_j e^(z_j − z_0), exactly as amoe_router_probs computes it. */
float amoe_router_softmax_inv(const amoe_f16 *z, int m);
/* AMOE_OK when the block carries no normalisers or each equals its
 * recomputation (bit for bit); else names the first that does not. */
amoe_status amoe_router_check_inv(const amoe_block *b, amoe_err *e);

#endif
