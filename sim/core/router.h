/* Router weights from a block's stored logits (docs/design.md §5: the
 * preset's router kind), the one function every consumer of router
 * probabilities reads (AcceptMoE's utility, MoE-Spec's and marginal's
 * mass, the displaced share, the recorded routes). Per stored entry j of
 * a node-layer (sorted by logit, the first k the natural top-k):
 *   softmax             e^z_j / Σ over the stored m (OLMoE: no renormalisation)
 *   softmax-normalized  e^z_j / Σ_{i<k} e^z_i (Qwen3, Mixtral: softmax, top-k, renormalised)
 *   softmax-topk        e^z_j / Σ_{i<k} e^z_i (GPT-OSS: softmax over the top-k logits)
 *   sigmoid-normalized  σ(z_j) / Σ_{i<k} σ(z_i) (DeepSeek-V3)
 * so under the normalising kinds the natural top-k weigh 1 together and an
 * entry beyond them gets the weight it has relative to them. The
 * arithmetic is plain float in a fixed order (own e^x, four fixed partial
 * sums), so every host and every code path gives the same bits; the AVX2
 * paths are tested against plain scalar code. */
#ifndef AMOE_ROUTER_H
#define AMOE_ROUTER_H

#include "block.h"

/* Router probabilities of node t's stored entries at layer l, out[m]: needs
 * all m logits (b->lm == m, AMOE_LOGITS_ALL from a trace). */
void amoe_router_probs(const amoe_block *b, int l, int t, int router, int k, float *out);
/* The first k of those (the natural top-k), out[k]: the same values. With
 * a normalising kind, or the block's stored softmax normalisers (traces
 * carry them), only the top-k logits are read and only k exponentials
 * computed. */
void amoe_router_probs_top(const amoe_block *b, int l, int t, int router, int k, float *out);
/* amoe_router_probs_top at layer l for the n listed nodes (NULL: nodes
 * 0..n-1): node t's at out[t·k .. t·k + k). */
void amoe_router_probs_nodes(const amoe_block *b, int l, const int *nodes, int n, int router, int k, float *out);
/* amoe_router_probs and amoe_router_probs_nodes without the vector paths:
 * their plain twins, which tests compare them with (bit for bit). */
void amoe_router_probs_generic(const amoe_block *b, int l, int t, int router, int k, float *out);
void amoe_router_probs_nodes_generic(const amoe_block *b, int l, const int *nodes, int n, int router, int k,
                                     float *out);
/* The softmax normaliser of m stored logits z (z[0] the largest):
 * 1 / Σ_j e^(z_j − z_0), exactly as amoe_router_probs computes it. */
float amoe_router_softmax_inv(const amoe_f16 *z, int m);
/* The entropy (nats) of the softmax over z[0..n), computed from
 * z − zmax (zmax: their maximum); *norm gets Σ e^(z − zmax), by which a
 * caller turns e^(z_j − zmax) into probabilities (inspect's score shape,
 * a capture's full logits). */
double amoe_router_entropy(const double *z, int n, double zmax, double *norm);
/* AMOE_OK when the block carries no normalisers or each equals its
 * recomputation (bit for bit); else names the first that does not. */
amoe_status amoe_router_check_inv(const amoe_block *b, amoe_err *e);

#endif
