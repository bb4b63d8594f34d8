/* `acceptmoe fit` (docs/design.md §5, §14): fits a model preset's routing
 * structure (model.routing: the locality profile over the layers and the
 * per-request concentration) to target statistics of real routing, by
 * bisection on generated workloads with common random numbers (the same
 * seed at every step, so each statistic is a deterministic function of the
 * parameters).
 *
 * Which parameter answers to which statistic:
 *   locality_first / locality (at locality_peak) / locality_last
 *       the adjacent-token overlap at the first, the highest and the last
 *       named layer (a layer's overlap depends on its own locality alone);
 *   locality (one value for every layer)
 *       the overall adjacent overlap, when no layers are named (or the
 *       window union at W = 2: overlap = 2 − U₂/k);
 *   request_bias
 *       the per-request top-16 share;
 *   drift_tokens (the request bias's time constant)
 *       the share of expert uses repeated within 8 tokens (reuse_within_8),
 *       with request_bias refitted to the top-16 share at every trial: a
 *       faster drift needs a stronger bias for the same top-16 share over a
 *       request, which concentrates short spans more; 0 (a fixed bias) when
 *       that already reaches the target;
 *   tree_repeat, then tree_sibling (each per layer, all layers at once),
 *       after every sequence parameter (neither moves a root-to-leaf path,
 *       so no sequence statistic): one union per layer cannot tell the two
 *       apart, so the rule is repeats first (each layer's union, no sibling
 *       share), then the sibling share for what repeats alone cannot reach;
 *       with one union for every layer (tree_union), one sibling share;
 *   skew (per layer: the std of each expert's fixed popularity bias)
 *       the effective number of experts (exp of the entropy of the
 *       selection shares) of each layer over popularity_prompts prompts of
 *       popularity_prompt_tokens tokens, routed as prefills (as the real
 *       shares were measured);
 *   score_scale (per layer, fitted last: it moves no top-k set, so no other
 *       statistic)
 *       each layer's mean per-token entropy of the softmax over all its
 *       experts (measured with every logit stored);
 *   noise (the token-specific share of each logit)
 *       the largest value up to Mixtral's fit (1) at which the most local
 *       anchor can be reached with locality 0.95: noise caps how alike
 *       adjacent tokens route, and the data do not separate the two further.
 * They are fitted in turn, in rounds, until none moves by 0.01 (at most
 * 16), since concentration raises overlap too; from the second round on
 * each round goes halfway to what it fitted, since the request bias and
 * the skew each overshoot the other's target. */
#ifndef AMOE_FIT_H
#define AMOE_FIT_H

#include <stdio.h>

#include "inspect.h"
#include "spec.h"
#include "spec_load.h"

#define AMOE_FIT_MAX_ANCHORS 8

typedef struct {
  char source[512];          /* provenance of the numbers */
  double overlap;            /* adjacent overlap over every layer, or NaN */
  int nanchor;               /* adjacent overlap at named layers */
  int anchor_layer[AMOE_FIT_MAX_ANCHORS];
  double anchor_value[AMOE_FIT_MAX_ANCHORS];
  double top16;              /* per-request top-16 share, or NaN */
  int top16_tokens;          /* committed tokens per request it was measured on (0: the spec's) */
  double tree_union;         /* experts per layer in one draft tree, or NaN */
  int ntree_layers;          /* the same per MoE layer, or 0 */
  double tree_union_layer[AMOE_MAX_LAYERS];
  int tree_nodes, tree_depth, tree_top_k;
  double tree_tau;           /* the accept length it was measured at, or NaN (the spec's) */
  double window_union[AMOE_INSPECT_NW]; /* W = 1, 2, 4, 8, 16; NaN where absent */
  double reuse_within_8;     /* share of uses repeated within 8 tokens, or NaN */
  double reuse_within_1, reuse_median; /* reported beside the fit, not fitted (NaN: absent) */
  int nentropy;              /* per-layer router entropy (nats), one per MoE layer, or 0 */
  double entropy[AMOE_MAX_LAYERS];
  int npopularity;           /* per-layer effective experts of the selection shares, or 0 */
  double popularity[AMOE_MAX_LAYERS];
  int popularity_prompts, popularity_prompt_tokens; /* what they were measured over */
} amoe_fit_targets;

void amoe_fit_targets_init(amoe_fit_targets *t);
/* Reads a targets YAML file (docs/validation.md shows one); errors go to d
 * as file:line:column: message. */
int amoe_fit_targets_load(amoe_fit_targets *t, const char *path, amoe_diag *d);
/* Targets from measured statistics (a real trace through `inspect`). */
void amoe_fit_targets_from_stats(amoe_fit_targets *t, const amoe_inspect_stats *st, int top_k, int tokens_per_request,
                                 const char *source);

typedef struct {
  amoe_inspect_stats chain; /* of the fitted chain workload (every logit stored when entropy was a target) */
  double popularity[AMOE_MAX_LAYERS]; /* effective experts per layer over the prompts (when a target) */
  double tree_union;        /* of the fitted tree workload (NaN if not asked) */
  double tree_union_layer[AMOE_MAX_LAYERS];
  amoe_inspect_stats tree; /* the fitted tree workload's statistics (when tree_nodes is a target) */
  int evaluations;
} amoe_fit_result;

/* What a fit leaves as the model has it (amoe_fit_routing's keep). */
enum {
  AMOE_FIT_KEEP_DRIFT = 1, /* drift_tokens (reuse_within_8 is then reported, not fitted) */
  AMOE_FIT_KEEP_NOISE = 2  /* noise (instead of its rule): the churn band holds it at a value */
};
/* Fits s->model.routing to t on `blocks` generated blocks of s's workload
 * (its seed); s->workload.locality and request_bias are reset to follow
 * the model. keep: AMOE_FIT_KEEP_* flags. progress, if set, gets a line
 * per round. */
amoe_status amoe_fit_routing(amoe_spec *s, const amoe_fit_targets *t, int blocks, unsigned keep, FILE *progress,
                             amoe_fit_result *r, amoe_err *e);
/* Writes the fitted routing section with provenance and achieved vs target. */
void amoe_fit_write(FILE *f, const amoe_spec *s, const amoe_fit_targets *t, const amoe_fit_result *r, int blocks,
                    const char *how);

#endif
