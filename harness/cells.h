/* `acceptmoe cells` (docs/design.md §19): measured serving cells in the
 * format of docs/spec.md "Serving cells" run through the simulator, one run
 * per deployment, load and draft, and an error matrix of prediction against
 * measurement; the ratio of speculation on to off per cell is its headline. */
#ifndef AMOE_CELLS_H
#define AMOE_CELLS_H

#include <stdio.h>

#include "err.h"

/* One run of a spec the matrix wrote (its path), with `nset` KEY=VALUE
 * overrides, its results into out_dir (summary.csv, requests.csv). */
typedef amoe_status (*amoe_cells_run_fn)(void *ctx, const char *spec, char *const *sets, int nset, const char *out_dir,
                                         amoe_err *e);

typedef struct {
  const char *path;     /* the cells CSV */
  const char *only;     /* comma-separated ids to run (NULL: every row) */
  const char *csv_out;  /* id,predicted,measured,error,status per input row (NULL: none) */
  const char *curves;   /* acceptance curves CSV (NULL: acceptance_curves.csv beside path, if there) */
  const char *work_dir; /* where each run's spec and results go (NULL: a temporary folder, removed) */
  int quiet;
  int calibrated;       /* also each deployment calibrated to its speculation-off rows first */
  FILE *out;            /* the report (markdown) */
  amoe_cells_run_fn run;
  void *ctx;
} amoe_cells_opts;

amoe_status amoe_cells(const amoe_cells_opts *o, amoe_err *e);

/* `acceptmoe fit --cells` (docs/design.md §20): each deployment among the
 * rows (o->only) fitted to its speculation-off rows alone: per-pass host
 * time (hardware.step_s), per-request scheduler cost (engine.request_s)
 * and one device efficiency (engine.efficiency), each drawn weakly to its
 * preset's value; a deployment preset per deployment into out_dir
 * (spec key `deployment:`), the fit's table on o->out. */
amoe_status amoe_cells_fit(const amoe_cells_opts *o, const char *out_dir, amoe_err *e);

/* The parser alone, for the fuzz target and tests: reads the cell file at
 * path; on error e names file:line:column (byte offset). *rows: how many. */
amoe_status amoe_cells_parse(const char *path, int *rows, amoe_err *e);

#endif
