/* The run loop (docs/design.md §2): each block is produced once and handed to every
 * policy row; each row keeps its own cache and totals. Per block and row:
 * draft policy → per MoE layer (verifier policy → constrained routing →
 * cache → cost) → acceptance under constrained routing (§7). */
#ifndef AMOE_RUN_H
#define AMOE_RUN_H

#include <stdint.h>

#include "err.h"
#include "source.h"
#include "spec.h"

/* §7: a node's output flips with probability 2Φ(−m / (κ s)), s = √(Σ_l ρ_l²)
 * its displaced weight shares in quadrature, m its margin. κ is calibrated
 * by scripts/calibrate-kappa.sh (docs/validation.md); margin_min is the
 * floor of a margin taken from the draft's confidence, in nats. */
#define AMOE_DEFAULT_KAPPA 0.16
#define AMOE_DEFAULT_MARGIN_MIN 0.25

typedef struct {
  double blocks, passes, committed, verified, layer_blocks; /* passes: target forward passes */
  double union_sum, eligible_sum, executed_sum;
  double hbm_expert_bytes, h2d_bytes, hits, requests;
  double t_fetch, t_total;
  /* T's parts (§9): t_step + t_draft + t_dense (attention, norms, shared
   * experts, dense layers, head) + t_moe + t_fetch + t_host = t_total */
  double t_step, t_draft, t_dense, t_moe, t_host;
  double displaced, assignments, delta_sum, delta_n, deviated;
  double busiest_sum, t_comm; /* several GPUs: experts on the busiest group per layer; collectives' time */
  double groups;              /* expert groups of the layout (1: one GPU) */
  double assignments_served, assignment_hits; /* offload: (token, expert) assignments and those that hit */
  double prefills, t_prefill, prefill_h2d_bytes; /* requests' prefill passes, apart from the decode figures */
  double executed_overlap_sum, executed_overlap_n; /* per layer: |X ∩ previous pass's X| / |X| */
  double predicted_tau, predicted_s, predictions; /* a draft's own predictions for its passes (evict) */
} amoe_totals;

typedef struct {
  double union_sum, eligible_sum, executed_sum, hits, requests, fetched, t_moe, t_fetch;
} amoe_layer_totals;

typedef struct {
  amoe_totals tot;
  amoe_layer_totals *layers; /* [moe_layers], owned */
} amoe_row_result;

typedef struct {
  uint64_t block;
  uint32_t request, step;
  int passes, verified, tau, deviated; /* passes: forward passes (autoregressive: one per token) */
  double union_mean, eligible_mean, executed_mean, fetched, delta_mean, time_s;
} amoe_block_stats;

/* Where the offload cache placed a layer's executed experts (cache.h,
 * amoe_cache_pass_placed): E entries each; handed to on_route under offload
 * (NULL when resident, or in the naive order, which places nothing). */
typedef struct amoe_placement {
  const uint8_t *fetched; /* copied in by this pass */
  const int16_t *slot;    /* the slot its weights occupy when its wave runs, or -1 (streamed) */
  const uint16_t *wave;   /* the wave that computes it */
  int waves;
} amoe_placement;

typedef struct {
  void *ctx;
  /* Optional: per (row, block). */
  amoe_status (*on_block)(void *ctx, int row, const amoe_block_stats *s, amoe_err *e);
  /* Optional: per (row, block, layer): E-flag sets. */
  amoe_status (*on_select)(void *ctx, int row, uint64_t block, int layer, const uint8_t *uni,
                           const uint8_t *eligible, const uint8_t *executed, const uint8_t *fetched,
                           int experts, amoe_err *e);
  /* Optional: per (row, block, layer), the executed routing: k expert ids
   * (or -1) and renormalised weights per verified node, the cost model's
   * t_moe for it, and (offload) how many experts the cache fetched and the
   * predicted fetch wait. The GPU harness runs and times exactly this. */
  amoe_status (*on_route)(void *ctx, int row, uint64_t block, int layer, int nodes, int k, const int32_t *route,
                          const float *weight, double predicted_s, int fetched, double predicted_fetch_s,
                          const struct amoe_placement *placement, amoe_err *e);
  /* Optional: after each block. */
  void (*on_progress)(void *ctx, uint64_t blocks);
  /* Optional: polled after each block; nonzero stops the run with
   * AMOE_EINTR (an interrupt: the caller discards what it wrote). */
  int (*stop)(void *ctx);
} amoe_run_hooks;

#define AMOE_MAX_UNION_N 1024

/* Offline tables from a calibration workload: the commitment p̂_d used by
 * acceptmoe, and the mean union of natural routes per layer when the first n
 * nodes in EAGLE order are verified (used by evict; 0 = not measured). */
typedef struct amoe_commitment {
  double p[AMOE_MAX_DEPTH];
  int n;
  /* m̄_d: the mean over calibration blocks of the draft's path
   * probabilities exp(score) summed over the verified nodes at depth d
   * (0 where unmeasured): p̂_d / m̄_d turns a node's draft path
   * probability into its chance of being committed */
  double mass[AMOE_MAX_DEPTH];
  double unions[AMOE_MAX_UNION_N + 1];
  int union_n;
  /* [layer][expert] token counts of the natural routes of the verified
   * nodes (parallel.placement: balanced), or NULL; owned by the caller */
  const double *load;
} amoe_commitment;

/* Runs every policy row of s over the source. rows[i].layers is allocated. */
amoe_status amoe_run(const amoe_spec *s, const amoe_commitment *phat, amoe_source *src,
                     const amoe_run_hooks *hooks, amoe_row_result *rows, amoe_err *e);
void amoe_row_result_free(amoe_row_result *r);

/* The per-layer expert load of a calibration workload for a balanced
 * placement: natural top-k counts of the first `nodes` nodes of each block
 * in EAGLE order, into load[layers][experts] (zeroed first). */
amoe_status amoe_expert_load_estimate(amoe_source *src, int nodes, int top_k, int layers, int experts, double *load,
                                      amoe_err *e);

/* p̂_d: the fraction of blocks whose natural accepted prefix, within the
 * EAGLE-verified tree of `nodes` nodes, reaches depth d; and the union table. */
amoe_status amoe_commitment_estimate(amoe_source *src, int nodes, int top_k, amoe_commitment *out, amoe_err *e);


/* Derived per-run metrics (docs/design.md §10). */
typedef struct {
  double tau_mean, verified_nodes_mean, union_mean, eligible_mean, executed_mean;
  double hbm_expert_bytes_per_token, h2d_bytes_per_token, cache_hit_rate, fetch_wait_share;
  double time_per_token_s, tokens_per_s, displaced_assignment_rate, deviated_token_rate, delta_mean;
  double step_s_per_token, draft_s_per_token, dense_s_per_token, moe_s_per_token, fetch_s_per_token, host_s_per_token;
  double assignment_hit_rate, prefill_s_per_request, prefill_h2d_bytes_per_request, executed_overlap;
  double predicted_tau_ratio, predicted_time_ratio; /* a draft's predictions over what was charged (0: none) */
  double busiest_group_executed_mean, group_executed_mean, comm_share, comm_s_per_token; /* several GPUs (§16) */
} amoe_summary;
void amoe_summarize(const amoe_totals *t, int offload, amoe_summary *out);

#endif
