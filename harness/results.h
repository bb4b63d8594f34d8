/* Results (docs/design.md §10): tidy CSVs, meta.json, spec.resolved.yaml, the
 * selection dump. Every file is written under a temporary name and renamed
 * into place, so an interrupted run never leaves a half-written file. */
#ifndef AMOE_RESULTS_H
#define AMOE_RESULTS_H

#include <jansson.h>
#include <stdio.h>

#include "afile.h"
#include "err.h"
#include "run.h"
#include "spec_load.h"

/* Derived per-run metrics (docs/design.md §10, docs/metrics.md): a row's totals made per token, per pass and per layer. */
typedef struct {
  double tau_mean, verified_nodes_mean, union_mean, eligible_mean, executed_mean;
  double hbm_expert_bytes_per_token, h2d_bytes_per_token, cache_hit_rate, fetch_wait_share;
  double time_per_token_s, tokens_per_s, displaced_assignment_rate, deviated_token_rate, perturbation_mean;
  double step_s_per_token, draft_s_per_token, dense_s_per_token, moe_s_per_token, fetch_s_per_token, host_s_per_token;
  double extend_s_per_token, tree_s_per_token, sample_s_per_token, cycle_host_s_per_token, selection_s_per_token;
  double assignment_hit_rate, prefill_s_per_request, prefill_h2d_bytes_per_request, executed_overlap;
  double h2d_bytes_per_token_with_prefill, nonfetch_over_fetch;
  double predicted_tau_ratio, predicted_time_ratio; /* a draft's predictions over what was charged (0: none) */
  /* a verifier's predicted deviated tokens per committed token, its own set's
   * and AcceptMoE's on the same passes (marginal; 0: none) */
  double predicted_deviated_token_rate, acceptmoe_predicted_deviated_token_rate;
  double busiest_group_executed_mean, group_executed_mean, comm_share, comm_s_per_token; /* several GPUs (§16) */
} amoe_summary;
void amoe_summarize(const amoe_totals *t, int offload, amoe_summary *out);

/* ------------------------------------------------------------ a run's files */

/* summary.csv, layers.csv, meta.json, spec.resolved.yaml in `dir`, and on
 * request blocks.csv and the selection dump; every column of a CSV is one
 * row of a column table in results.c, read by the header and the rows alike
 * (docs/metrics.md defines them). */
typedef struct amoe_results amoe_results;

typedef struct {
  const char *dir;
  const amoe_experiment *x;
  const char *spec_path;   /* as given on the command line, for meta.json */
  const char *backend;     /* NULL: no measured columns */
  int blocks_csv;
  const char *dump;        /* the selection dump's path, or NULL */
  int shard_i, shard_n;    /* shard_n > 1: a partial result (meta.json says so) */
  FILE *table;             /* the markdown table of each point, or NULL */
} amoe_results_opts;

amoe_status amoe_results_open(amoe_results **r, const amoe_results_opts *o, amoe_err *e);

/* One sweep point, in the order of the run. */
typedef struct {
  int point;
  const amoe_spec *s;
  const amoe_row_result *rows;        /* [s->npolicies] */
  const char *workload;               /* the source's provenance (JSON text) */
  const char *commitment;             /* where p̂ came from */
  const amoe_offline *offline;     /* written into meta.json, or NULL when no row reads it */
  const struct amoe_exec_row *measured; /* [npolicies] (exec.h), or NULL without a backend */
  const double *measured_layers;      /* [npolicies][moe_layers], or NULL */
} amoe_point_result;

/* Before a point runs: its sweep values, for the rows the hooks write. */
void amoe_results_begin_point(amoe_results *r, int point, const amoe_spec *s);
/* The run loop's per-block and per-layer hooks (run.h), into blocks.csv and
 * the dump; nothing when those were not asked for. */
amoe_status amoe_results_block(amoe_results *r, int row, const amoe_block_stats *b, amoe_err *e);
amoe_status amoe_results_select(amoe_results *r, int row, uint64_t block, int layer, const uint8_t *uni,
                                const uint8_t *eligible, const uint8_t *executed, const uint8_t *fetched, int experts,
                                amoe_err *e);
int amoe_results_wants_blocks(const amoe_results *r);
int amoe_results_wants_selection(const amoe_results *r);
/* The point's rows into summary.csv and layers.csv and the markdown table,
 * and its entry in meta.json (returned, borrowed, for a backend to add to;
 * NULL on a write error). */
json_t *amoe_results_point(amoe_results *r, const amoe_point_result *pt, amoe_err *e);
/* Writes spec.resolved.yaml and meta.json, then renames every file into place. */
amoe_status amoe_results_commit(amoe_results *r, amoe_err *e);
/* Removes what was not committed; frees. */
void amoe_results_close(amoe_results *r);

/* calibrate: p̂_d and m̄_d of o as the commitment file a spec reads
 * (commitment.file), with where they came from (how); out NULL: stdout. */
amoe_status amoe_results_commitment(const char *out, const amoe_spec *s, const char *how, const amoe_offline *o,
                                    amoe_err *e);
/* costtable: the step table t as JSON an engine's scheduler can load
 * (docs/spec.md), naming the spec; out NULL: stdout. */
amoe_status amoe_results_costtable(const char *out, const char *spec_path, const amoe_spec *s,
                                   const amoe_step_table *t, amoe_err *e);

#endif
