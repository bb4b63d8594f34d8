/* The offline tables a policy reads (evict, acceptmoe, marginal, a
 * balanced placement): estimated from a calibration workload before a run
 * by engine/offline.c, never from the evaluation workload itself. Here,
 * below the policies, so that a policy reads them without the engine. */
#ifndef AMOE_TABLES_H
#define AMOE_TABLES_H

#include "spec.h"

#define AMOE_MAX_UNION_N 1024

/* The step-time table an engine profiles at start-up (§18): the expected
 * time of a verification step of `batch` requests each verifying its
 * first `tokens` nodes in EAGLE order (tokens 1: a plain decoding step),
 * by the one cost function over the calibration workload's routing
 * (engine/profile.c); what {draft: adaptive, cost: tokens} prices a step
 * by, and what `acceptmoe costtable` writes. */
#define AMOE_STEP_GRID 24
typedef struct amoe_step_table {
  int nb, nt;
  int batch[AMOE_STEP_GRID];  /* ascending, from 1 */
  int tokens[AMOE_STEP_GRID]; /* verified tokens per request, ascending, from 1 */
  double step_s[AMOE_STEP_GRID][AMOE_STEP_GRID]; /* [batch][tokens] */
  int samples;                /* passes averaged per entry */
} amoe_step_table;

/* Offline tables from a calibration workload: the commitment p̂_d used by
 * acceptmoe, and the mean union of natural routes per layer when the first n
 * nodes in EAGLE order are verified (used by evict; 0 = not measured). */
typedef struct amoe_offline {
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
  /* the profiled step-time table (a draft with reads_step_table), or NULL;
   * owned by the caller */
  const amoe_step_table *steps;
  /* [layer][expert] the calibration workload's natural token counts, the
   * popularity a route predictor knows (a draft whose row reads it), or
   * NULL; owned by the caller */
  const double *popularity;
} amoe_offline;

#endif
