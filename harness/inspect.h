/* `acceptmoe inspect`: what a workload looks like. Window-union curves over
 * the committed token stream (mean distinct experts per layer over W
 * consecutive committed tokens of a request), the accept-length histogram,
 * the mean renormalised top-1 weight, the score shape (router entropy
 * per layer, top-k mass), expert popularity, the adjacent-token
 * overlap per layer and the per-request top-16 share. It also checks
 * every stored pair of every block (order, distinct ids, usable logits),
 * which trace replay leaves to the writer and the checksum. */
#ifndef AMOE_INSPECT_H
#define AMOE_INSPECT_H

#include <stdio.h>

#include "source.h"

#define AMOE_INSPECT_NW 5
#define AMOE_INSPECT_NOVELTY_W 8
#define AMOE_INSPECT_DEPTHS 64 /* α_d by depth; deeper nodes share the last */
extern const int amoe_inspect_windows[AMOE_INSPECT_NW]; /* 1, 2, 4, 8, 16 */

typedef struct {
  long blocks, requests, tokens;
  double nodes_mean, tau_mean;
  long tau_hist[65];
  double window_union[AMOE_INSPECT_NW];
  double tree_union_mean; /* mean over blocks and layers of the union of every node's top-k */
  /* pass to pass (docs/metrics.md, "Passes"): per MoE layer the union of
   * every node's top-k over the blocks, its mean, 90th and 99th
   * percentile; the accepted path's union (mean over blocks and layers);
   * the novelty of a pass, the share of its union that the request's last
   * AMOE_INSPECT_NOVELTY_W committed tokens never used at the layer (over
   * blocks with that many before them; NaN without) */
  double union_layer[AMOE_MAX_LAYERS], union_p90_layer[AMOE_MAX_LAYERS], union_p99_layer[AMOE_MAX_LAYERS];
  double path_union_mean, novelty_mean;
  int tree_depth_max, tree_branch_max; /* the deepest node and the most children of one node */
  double top1_weight_mean;
  /* score shape (docs/design.md §5), over the committed tokens: per MoE
   * layer the mean per-token entropy (nats) of the softmax over the
   * stored logits, which is the full softmax's when every expert's logit
   * is stored (entropy_full; with m < E a lower bound), their mean over
   * the layers, and the mean share of that softmax in the natural top-k */
  double entropy_layer[AMOE_MAX_LAYERS], entropy_mean, topk_mass_mean;
  int entropy_full;
  double pop_max_over_mean, pop_min_over_mean, pop_effective; /* averaged over layers */
  double pop_effective_layer[AMOE_MAX_LAYERS]; /* exp(entropy) of each layer's selection shares */
  /* locality: the share of a committed token's k experts that the previous
   * committed token of its request also used, overall and per MoE layer */
  double adjacent_overlap, uniform_overlap; /* (uniform routing: k/E) */
  double overlap_layer[AMOE_MAX_LAYERS];
  int layers;
  /* concentration: per request and layer, the share of the request's
   * expert selections taken by its 16 most selected experts; the mean */
  double top16_share;
  /* reuse distance: over (committed token, layer, expert) uses with at
   * least 8 tokens after them in their request, the share whose expert
   * the same layer uses again at the next token, within 8 tokens, and the
   * median distance (tokens; uses never repeated count as beyond every
   * distance) */
  double reuse_within_1, reuse_within_8, reuse_median;
  /* block-to-block stability: per layer, the 32 experts of most router
   * mass over all the block's nodes, and the share of them the previous
   * block of the request also had among its 32 (fewer experts: E/2) */
  double block_top32_overlap;
  /* the same by AcceptMoE's utility: each node's router probabilities
   * weighted by α_d, the share of the nodes at its depth that the blocks
   * commit (its commitment table, measured on the same blocks in a first
   * pass) */
  double block_top32_utility_overlap;
} amoe_inspect_stats;

/* router (amoe_router) weights the top-1 statistic: softmax over the top-k,
 * or sigmoid scores renormalised over them. */
amoe_status amoe_inspect(amoe_source *src, int layers, int experts, int top_k, int router, amoe_inspect_stats *out,
                         amoe_err *e);
/* The same; blocks 0 leaves out block_top32_overlap (NaN), which reads
 * every node's router probabilities (the fit's many evaluations need only
 * the committed chain). */
amoe_status amoe_inspect_chain(amoe_source *src, int layers, int experts, int top_k, int router, int blocks,
                               amoe_inspect_stats *out, amoe_err *e);
void amoe_inspect_print(FILE *f, const amoe_inspect_stats *s, const char *what, int json);

#endif
