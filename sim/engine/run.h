/* The run loop (docs/design.md §2): each block is produced once and handed to every
 * policy row; each row keeps its own cache and totals. Per block and row:
 * draft policy → per MoE layer (verifier policy → constrained routing →
 * cache → cost) → acceptance under constrained routing (§7). At
 * workload.batch > 1 (§17) a pass holds a block of each running request:
 * the requests' stages run one after another per layer and their sets and
 * counts are merged before execute, cache, place and cost, once. */
#ifndef AMOE_RUN_H
#define AMOE_RUN_H

#include "layout.h"
#include <stdint.h>

#include "err.h"
#include "source.h"
#include "offline.h"
#include "spec.h"

#define AMOE_MAX_BATCH 4096 /* workload.batch: requests in one pass */


typedef struct {
  double blocks, passes, committed, verified, layer_blocks; /* passes: target forward passes */
  double union_sum, eligible_sum, executed_sum;
  double hbm_expert_bytes, h2d_bytes, hits, requests;
  double t_fetch, t_total;
  /* T's parts (§9): t_step + t_draft + t_extend + t_tree + t_sample +
   * t_cycle_host + t_select + t_dense (attention, norms, shared experts,
   * dense layers, head) + t_moe + t_fetch + t_host + t_comm = t_total */
  double t_step, t_draft, t_dense, t_moe, t_host;
  double t_extend, t_tree, t_sample, t_cycle_host, t_select;
  double displaced, assignments, perturbation_sum, perturbation_n, deviated;
  double busiest_sum, t_comm; /* several GPUs: experts on the busiest group per layer; collectives' time */
  double groups;              /* expert groups of the layout (1: one GPU) */
  double assignments_served, assignment_hits; /* offload: (token, expert) assignments and those that hit */
  double prefills, t_prefill, prefill_h2d_bytes; /* requests' prefill passes, apart from the decode figures */
  double executed_overlap_sum, executed_overlap_n; /* per layer: |X ∩ previous pass's X| / |X| */
  double predicted_tau, predicted_s, predictions; /* a draft's own predictions for its passes (evict) */
  double predicted_over; /* passes it predicted slower than they were charged */
  /* a verifier that predicts deviation (marginal, §6): Σ over passes of
   * its predicted deviated tokens, and of AcceptMoE's on the same blocks */
  double deviation_predicted, deviation_budget;
  /* batch > 1 (§17): Σ over passes of the requests in each (0 at batch 1,
   * where every pass holds one) */
  double request_passes;
  /* open arrivals (§18): time no request was running, waiting for the next
   * to arrive (in the run's duration, in no pass) */
  double t_idle;
  /* open arrivals: the requests' first tokens their prefills gave (output
   * tokens beside the committed decode tokens) */
  double first_tokens;
} amoe_totals;

typedef struct {
  double union_sum, eligible_sum, executed_sum, hits, requests, fetched, t_moe, t_fetch;
  double busiest_sum; /* executed experts on the group the layer waits for (one GPU: executed_sum) */
} amoe_layer_totals;

/* One request of a row: its output tokens, and its time per output
 * token. Open arrivals: as engines report it, from its first token to its
 * last over its output tokens after the first; its output tokens count the
 * first token its prefill gave (first_tokens: 1) beside its committed ones.
 * Closed batches: its committed tokens, and the clock from its first
 * decode pass to its last (prefills of other requests in between
 * included) over them. */
typedef struct {
  double tokens, tpot;
  double first_tokens; /* open arrivals: 1 where its prefill gave its first token, else 0 */
  /* open arrivals (§18), in seconds from the run's start: when it arrived,
   * took a slot, had its first token (the end of its prefill, or of its
   * first decode pass without a prompt) and finished; its index and prompt */
  double arrival_s, admitted_s, first_s, finish_s;
  double request, prompt_tokens;
  double preemptions; /* engine.kv_allocation incremental: times its KV was taken back */
} amoe_request_stat;

typedef struct {
  amoe_totals tot;
  amoe_layer_totals *layers; /* [moe_layers], owned */
  amoe_request_stat *reqs; /* each request as it finished, owned */
  int nreqs;
  size_t reqs_cap;
} amoe_row_result;

typedef struct {
  uint64_t block;
  uint32_t request, step;
  int passes, verified, tau, deviated; /* passes: forward passes (autoregressive: one per token) */
  double union_mean, eligible_mean, executed_mean, fetched, perturbation_mean, time_s;
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

/* Runs every policy row of s over the source. rows[i].layers is allocated. */
/* The expert layout a run of s charges on (§16; *out NULL: one GPU, or a
 * dense model): the spec's placement, balanced by `load` ([layer][expert],
 * a calibration workload's; needed only there). The run and the profiled
 * step table (profile.h) both build theirs here. */
amoe_status amoe_run_layout(const amoe_spec *s, const double *load, amoe_layout **out, amoe_err *e);

amoe_status amoe_run(const amoe_spec *s, const amoe_offline *offline, amoe_source *src,
                     const amoe_run_hooks *hooks, amoe_row_result *rows, amoe_err *e);
void amoe_row_result_free(amoe_row_result *r);


#endif
