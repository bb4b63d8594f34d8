/* Executing the simulator's decisions on a real backend (docs/design.md §11): every
 * (policy row, block, layer) the run loop routes is run on the backend, with
 * the offload fetches the cache decided on, and timed (median of repeats
 * after a warm-up) beside the cost model's prediction. Also calibrate-hw. */
#ifndef AMOE_EXEC_H
#define AMOE_EXEC_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"
#include "run.h"
#include "spec.h"

typedef struct amoe_exec amoe_exec;

/* Opens the backend at the spec's model shape and checks it against the CPU
 * reference before anything is timed. */
amoe_status amoe_exec_open(amoe_exec **x, const char *backend, const amoe_spec *s, int repeats, int cold,
                           amoe_err *e);
void amoe_exec_close(amoe_exec *x);
/* One line for stderr: what is held, how it is timed, the check's error. */
void amoe_exec_describe(const amoe_exec *x, char *buf, size_t n);
/* The run loop's on_route: fetch, run, time. */
amoe_status amoe_exec_route(amoe_exec *x, int row, uint64_t block, int layer, int nodes, int k, const int32_t *route,
                            const float *weight, double predicted_s, int fetched, double predicted_fetch_s,
                            const amoe_placement *placement, amoe_err *e);

/* Per row, divided by `blocks`. */
typedef struct amoe_exec_row {
  double predicted_moe_s, measured_moe_s, measured_over_predicted;
  double predicted_fetch_s, measured_fetch_s, h2d_bytes_per_s;
} amoe_exec_row;
void amoe_exec_row_of(const amoe_exec *x, int row, double blocks, amoe_exec_row *out);
/* Measured expert time of one layer per block. */
double amoe_exec_layer(const amoe_exec *x, int row, int layer, double blocks);
void amoe_exec_meta(const amoe_exec *x, json_t *point);

/* calibrate-hw: measure copy and pinned H2D bandwidth and per-expert time at
 * the spec's shape, cold: streaming (moe_eta, moe_t0_s, launch_s) by
 * `backend`, the compute peak by `compute` (tensor cores: a cuBLAS
 * backend); write them to path (atomically). */
amoe_status amoe_exec_calibrate_hw(const amoe_spec *s, const char *backend, const char *compute, const char *path,
                                   amoe_err *e);

#endif
