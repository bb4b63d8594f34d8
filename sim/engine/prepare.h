/* A run's offline preparation (docs/design.md §2, stage 1): what its rows
 * and layout read before the first block, built from the spec alone, as an
 * engine measures at start-up. Never from the evaluation workload itself,
 * except where a file source has no other seed (then said). `acceptmoe run`
 * and `acceptmoe cells` take it whole; `calibrate` and `costtable` take
 * their parts. */
#ifndef AMOE_PREPARE_H
#define AMOE_PREPARE_H

#include "err.h"
#include "spec.h"
#include "tables.h"

/* The workload the tables are estimated on: the spec's, with the
 * commitment's seed and blocks. */
amoe_workload_spec amoe_calibration_workload(const amoe_spec *s);

/* p̂_d and m̄_d of the spec's commitment into o (zeroed first): calibrated
 * on the calibration workload, the spec's table, or its file's (read into
 * the spec's table when the spec resolved); unions: the union table too,
 * always from the calibration workload. how: where p̂ came from, in words. */
amoe_status amoe_commitment_estimate(const amoe_spec *s, int unions, amoe_offline *o, char *how, size_t hn,
                                     amoe_err *e);

/* The profiled step-time table (§18) over the calibration workload, batch
 * up to the run's slots, on the layout the run charges (a balanced one's
 * load from the same workload): what `acceptmoe costtable` writes. */
amoe_status amoe_step_table_build(const amoe_spec *s, amoe_step_table *t, amoe_err *e);

/* Everything a run reads before its first block. */
typedef struct {
  amoe_offline offline;   /* p̂, m̄ and unions where a row reads them; .load, .steps and .popularity are those below */
  int reads_commitment;   /* a row reads p̂ (meta.json records it then) */
  int self_calibrated;    /* p̂ came from the first blocks of the evaluation trace (a file source) */
  char how[AMOE_PATH_MAX + 200]; /* where p̂ came from, in words */
  double *load;           /* a balanced layout's expert load per (layer, expert), or NULL */
  amoe_step_table *steps; /* the step table where a row reads it, or NULL */
  double *popularity;     /* the natural token counts per (layer, expert) where a row's route predictor reads them, or NULL */
} amoe_run_prep;

amoe_status amoe_run_prepare(const amoe_spec *s, amoe_run_prep *p, amoe_err *e);
void amoe_run_prep_free(amoe_run_prep *p);

#endif
