/* The step-time table an engine profiles at start-up (docs/design.md §18):
 * the expected time of a verification step over (batch, verified tokens
 * per request), by the one cost function over a calibration workload's
 * blocks, as the run would charge those passes. {draft: adaptive, cost:
 * tokens} reads it; `acceptmoe costtable` writes it. */
#ifndef AMOE_PROFILE_H
#define AMOE_PROFILE_H

#include "err.h"
#include "source.h"
#include "spec.h"
#include "tables.h"

/* The grid: batch 1, 2, 4, ... up to max_batch (and max_batch itself);
 * tokens 1, 2, 3, 4, 6, 8, 12, ... up to workload.tree.nodes (and nodes
 * itself). Each entry is the mean of `samples` passes, pass j of batch b
 * taking blocks j·b .. j·b + b − 1 of src (over again from its start when
 * it has fewer), each verifying its first n nodes in EAGLE order with
 * natural routing: resident, or under offload a steady miss share
 * 1 − slots/experts of the union fetched; on several GPUs the layout the
 * run charges (amoe_run_layout; balanced by `load`, the run's). */
amoe_status amoe_step_table_profile(const amoe_spec *s, amoe_source *src, const double *load, int max_batch, int samples,
                                    amoe_step_table *t, amoe_err *e);

#endif
