/* A run's sweep points into its results (cli.h): per point 1 the offline
 * preparation, 2 the workload, 3 the backend (if any), 4 the run loop
 * (sim/engine/run.c), 5 the results (harness/results.c; docs/design.md §2). */
#include "cli.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "moe.h"
#include "prepare.h"
#include "run.h"
#include "source.h"

typedef struct {
  amoe_results *res;
  amoe_exec *ex;
  const amoe_spec *s;
  int point, npoints;
  cli_progress pg;
} run_ctx;


static amoe_status on_block(void *vc, int row, const amoe_block_stats *b, amoe_err *e) {
  return amoe_results_block(((run_ctx *)vc)->res, row, b, e);
}

static amoe_status on_select(void *vc, int row, uint64_t block, int layer, const uint8_t *U, const uint8_t *S,
                             const uint8_t *X, const uint8_t *F, int E, amoe_err *e) {
  return amoe_results_select(((run_ctx *)vc)->res, row, block, layer, U, S, X, F, E, e);
}

static amoe_status on_route(void *vc, int row, uint64_t block, int layer, int nodes, int k, const int32_t *route,
                            const float *weight, double predicted_s, int fetched, double predicted_fetch_s,
                            const amoe_placement *placement, amoe_err *e) {
  run_ctx *c = vc;
  return amoe_exec_route(c->ex, row, block, layer, nodes, k, route, weight, predicted_s, fetched, predicted_fetch_s,
                         placement, e);
}

static void on_progress(void *vc, uint64_t blocks) {
  run_ctx *c = vc;
  double rate;
  if (!cli_progress_due(&c->pg, (double)blocks, &rate)) return;
  if (c->s->workload.blocks > 0 && c->s->workload.arrival == AMOE_ARRIVAL_CLOSED) /* (open runs go by requests) */
    fprintf(stderr, "\r[point %d/%d] %llu/%d blocks, %.0f blocks/s   ", c->point + 1, c->npoints,
            (unsigned long long)blocks, c->s->workload.blocks, rate);
  else /* the whole trace */
    fprintf(stderr, "\r[point %d/%d] %llu blocks, %.0f blocks/s   ", c->point + 1, c->npoints,
            (unsigned long long)blocks, rate);
}

/* The run's backend (o->backend set), said on stderr unless quiet. */
static amoe_status open_backend(const cli_opts *o, const amoe_spec *s, amoe_exec **ex, amoe_err *e) {
  *ex = NULL;
  if (!o->backend) return AMOE_OK;
  if (s->workload.batch > 1)
    return amoe_fail(e, AMOE_EINVAL, "--backend: the backends execute one block's pass; workload.batch is %d",
                     s->workload.batch);
  if (s->workload.arrival != AMOE_ARRIVAL_CLOSED)
    return amoe_fail(e, AMOE_EINVAL, "--backend: the backends execute one block's pass; workload.arrival.process is %s",
                     amoe_arrival_names[s->workload.arrival]);
  const amoe_moe_backend_info *bi = amoe_moe_backend_find(o->backend); /* (NULL: open names the choices) */
  const int reps = o->profile ? 1 : o->repeats ? o->repeats : bi ? bi->repeats : 1;
  AMOE_TRY(amoe_exec_open(ex, o->backend, s, reps, o->cold, e));
  if (!o->quiet) {
    char line[512];
    amoe_exec_describe(*ex, line, sizeof line);
    fprintf(stderr, "%s\n", line);
  }
  return AMOE_OK;
}

/* Stage 5: the point's rows (and a backend's measurements) into the results. */
static amoe_status point_results(const amoe_spec *s, int p, amoe_results *res, amoe_row_result *rows, amoe_source *src,
                                 amoe_exec *ex, const char *how, const amoe_offline *offline, amoe_err *e) {
  amoe_exec_row measured[AMOE_MAX_POLICIES];
  double *mlayers = NULL;
  if (ex) {
    const int L = s->model.moe_layers;
    if (!(mlayers = calloc((size_t)s->npolicies * L, sizeof *mlayers))) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
    for (int i = 0; i < s->npolicies; i++) {
      amoe_exec_row_of(ex, i, rows[i].tot.blocks, &measured[i]);
      for (int l = 0; l < L; l++) mlayers[(size_t)i * L + l] = amoe_exec_layer(ex, i, l, rows[i].tot.blocks);
    }
  }
  const amoe_point_result pr = {p, s, rows, amoe_source_provenance(src), how, offline, ex ? measured : NULL, mlayers};
  json_t *pj = amoe_results_point(res, &pr, e);
  if (pj && ex) amoe_exec_meta(ex, pj);
  free(mlayers);
  return pj ? AMOE_OK : AMOE_EIO;
}

/* One sweep point: 1 the offline tables, 2 the workload, 3 the backend (if
 * any), 4 the run loop, 5 the results (docs/design.md §2). One unwind: each
 * stage runs only when the ones before it succeeded. */
static amoe_status run_point(const cli_opts *o, const amoe_spec *s, int p, int npoints, amoe_results *res, amoe_err *e) {
  amoe_run_prep prep;
  AMOE_TRY(amoe_run_prepare(s, &prep, e)); /* 1 */
  if (!o->quiet && prep.self_calibrated) fprintf(stderr, "acceptmoe: warning: p_d %s\n", prep.how);
  amoe_source *src = NULL;
  amoe_exec *ex = NULL;
  amoe_status st = amoe_source_open(&src, &s->workload, &s->model, e); /* 2 */
  if (!st) st = open_backend(o, s, &ex, e);                             /* 3 */
  if (!st) {                                                            /* 4 */
    amoe_results_begin_point(res, p, s);
    run_ctx c = {res, ex, s, p, npoints, cli_progress_start(o->quiet)};
    amoe_run_hooks h = {&c, amoe_results_wants_blocks(res) ? on_block : NULL,
                        amoe_results_wants_selection(res) ? on_select : NULL, ex ? on_route : NULL, on_progress,
                        cli_interrupted};
    amoe_row_result rows[AMOE_MAX_POLICIES];
    if (o->profile) amoe_moe_profiler(1); /* one pass between cudaProfilerStart/Stop */
    st = amoe_run(s, &prep.offline, src, &h, rows, e);
    if (o->profile) amoe_moe_profiler(0);
    cli_progress_end(&c.pg);
    if (!st) { /* 5 */
      st = point_results(s, p, res, rows, src, ex, prep.how, prep.reads_commitment ? &prep.offline : NULL, e);
      for (int i = 0; i < s->npolicies; i++) amoe_row_result_free(&rows[i]);
    }
  }
  amoe_exec_close(ex);
  amoe_source_close(src);
  amoe_run_prep_free(&prep);
  return st;
}

/* Every sweep point of x this shard runs, into the results ro opens
 * (committed when all ran). *rc: a spec point's exit status (its messages
 * printed), 0 if every point resolved. */
amoe_status cli_run_points(const cli_opts *o, const amoe_experiment *x, amoe_spec *s, const amoe_results_opts *ro,
                              int *rc, amoe_err *e) {
  amoe_results *res = NULL;
  amoe_status st = amoe_results_open(&res, ro, e);
  const int npoints = amoe_experiment_points(x);
  for (int p = 0; p < npoints && !st && !*rc; p++) {
    if (p % o->shard_n != o->shard_i) continue;
    if ((*rc = cli_spec_point(x, p, s))) break;
    st = run_point(o, s, p, npoints, res, e);
  }
  if (!st && !*rc) st = amoe_results_commit(res, e);
  amoe_results_close(res);
  return st;
}
