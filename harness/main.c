/* acceptmoe: a cost simulator for MoE speculative decoding.
 *   build:  cmake -B build && cmake --build build -j
 *   run:    build/acceptmoe run workloads/specs/quickstart.yaml
 * Commands return statuses; only main() turns them into exit codes:
 * 0 ok, 1 runtime error, 2 bad spec or usage, 130 interrupted. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cells.h"
#include "exec.h"
#include "fit.h"
#include "merge.h"
#include "inspect.h"
#include "moe.h"
#include "jsonl.h"
#include "policy.h"
#include "profile.h"
#include "results.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"
#include "trace.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

static const char USAGE_HEAD[] =
    "usage: acceptmoe COMMAND [options]\n"
    "\n"
    "Simulates what a Mixture-of-Experts model pays to verify speculative draft\n"
    "trees under different expert-selection and draft policies.\n"
    "\n"
    "commands:\n";
static const char USAGE_TAIL[] =
    "\n"
    "--threads N sets the generator threads (default: the processors, at most 8);\n"
    "results do not depend on it.\n"
    "\n"
    "Keys for --set are the spec's dotted keys, e.g. --set model.top_k=4,\n"
    "--set offload.slots_per_layer=32, --set workload.blocks=200. See docs/spec.md.\n";
static void usage(FILE *f);

/* The command being run: the options it takes (parse_opts refuses the rest). */
static const char *g_command, *g_options;

static int usage_error(const char *fmt, const char *arg) {
  if (g_command) fprintf(stderr, "acceptmoe %s: ", g_command);
  else fprintf(stderr, "acceptmoe: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see acceptmoe --help)\n");
  return EXIT_USAGE;
}

/* SIGINT and SIGTERM only raise amoe_interrupt (err.h): every long loop
 * polls it, stops, removes its temporary files and leaves what was there
 * before; main then exits 130 (128 + SIGINT). */
static void on_signal(int sig) { amoe_interrupt = sig; }
static int interrupted(void *ctx) {
  (void)ctx;
  return amoe_interrupt != 0;
}

static int report(amoe_status st, const amoe_err *e) {
  if (st == AMOE_OK) return 0;
  if (st == AMOE_EINTR) {
    fprintf(stderr, "acceptmoe: interrupted; no results were written (earlier ones are left as they were)\n");
    return 130;
  }
  fprintf(stderr, "acceptmoe: %s\n", e->msg);
  /* bad input (a value, a file's contents) exits 2; everything else 1 */
  return st == AMOE_EINVAL || st == AMOE_EFORMAT ? EXIT_USAGE : EXIT_RUNTIME;
}

/* ------------------------------------------------------------ options */

/* Generator threads: --threads, else the online processors (at most 8).
 * Results do not depend on it. */
static int g_threads;

typedef struct {
  const char *out, *dump, *format, *model, *input, *backend, *compute, *target, *trace, *only, *csv, *curves;
  char *sets[64];
  int nset, blocks_csv, quiet, json, markdown, window, repeats, profile, cold, threads, hybrid, blocks, keep_drift, keep_noise;
  int shard_i, shard_n; /* run --shard I/N: the sweep points p with p mod N = I */
} opts;

/* Whether the running command's row lists option `a`. */
static int option_allowed(const char *a) {
  if (!g_options) return 1;
  const size_t n = strlen(a);
  for (const char *p = g_options; (p = strstr(p, a)); p += n)
    if ((p == g_options || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
  return 0;
}

static int parse_opts(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->shard_n = 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : NULL)
    if (a[0] == '-' && a[1] && !option_allowed(strncmp(a, "--set=", 6) ? a : "--set"))
      return usage_error("%s is not an option of this command", a);
    if (!strcmp(a, "--set")) {
      const char *v = NEXT();
      if (!v) return usage_error("--set needs KEY=VALUE%s", "");
      if (o->nset == 64) return usage_error("too many --set options%s", "");
      o->sets[o->nset++] = (char *)v;
    } else if (!strncmp(a, "--set=", 6)) {
      if (o->nset == 64) return usage_error("too many --set options%s", "");
      o->sets[o->nset++] = (char *)a + 6;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
      if (!(o->out = NEXT())) return usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--dump-selection")) {
      if (!(o->dump = NEXT())) return usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--format")) {
      if (!(o->format = NEXT())) return usage_error("%s needs a name", a);
    } else if (!strcmp(a, "--model")) {
      if (!(o->model = NEXT())) return usage_error("%s needs a preset name", a);
    } else if (!strcmp(a, "--window")) {
      const char *v = NEXT();
      if (!v || (o->window = atoi(v)) < 1) return usage_error("--window needs a positive integer%s", "");
    } else if (!strcmp(a, "--backend")) {
      if (!(o->backend = NEXT())) return usage_error("%s needs a name (cpu, cublas-loop, cublas-grouped, skinny)", a);
    } else if (!strcmp(a, "--compute-backend")) {
      if (!(o->compute = NEXT())) return usage_error("%s needs a name (cublas-loop, cublas-grouped, skinny)", a);
    } else if (!strcmp(a, "--repeats")) {
      const char *v = NEXT();
      if (!v || (o->repeats = atoi(v)) < 1) return usage_error("--repeats needs a positive integer%s", "");
    } else if (!strcmp(a, "--threads")) {
      const char *v = NEXT();
      if (!v || (o->threads = atoi(v)) < 1 || o->threads > 256)
        return usage_error("--threads needs an integer in 1..256%s", "");
    } else if (!strcmp(a, "--target")) {
      if (!(o->target = NEXT())) return usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--only")) {
      if (!(o->only = NEXT())) return usage_error("%s needs ID,ID,...", a);
    } else if (!strcmp(a, "--csv")) {
      if (!(o->csv = NEXT())) return usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--curves")) {
      if (!(o->curves = NEXT())) return usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--trace")) {
      if (!(o->trace = NEXT())) return usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--shard")) {
      const char *v = NEXT();
      char tail = 0;
      if (!v || sscanf(v, "%d/%d%c", &o->shard_i, &o->shard_n, &tail) != 2 || o->shard_n < 1 ||
          o->shard_n > 100000 || o->shard_i < 0 || o->shard_i >= o->shard_n)
        return usage_error("--shard needs I/N with 0 <= I < N%s", "");
    } else if (!strcmp(a, "--blocks")) {
      const char *v = NEXT();
      if (!v || (o->blocks = atoi(v)) < 10 || o->blocks > 1000000)
        return usage_error("--blocks needs an integer in 10..1000000%s", "");
    } else if (!strcmp(a, "--hybrid")) {
      o->hybrid = 1;
    } else if (!strcmp(a, "--keep-drift")) {
      o->keep_drift = 1;
    } else if (!strcmp(a, "--keep-noise")) {
      o->keep_noise = 1;
    } else if (!strcmp(a, "--cold")) {
      o->cold = 1;
    } else if (!strcmp(a, "--profile")) {
      o->profile = 1;
    } else if (!strcmp(a, "--blocks-csv")) {
      o->blocks_csv = 1;
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      o->quiet = 1;
    } else if (!strcmp(a, "--markdown")) {
      o->markdown = 1;
    } else if (!strcmp(a, "--json")) {
      o->json = 1;
    } else if (a[0] == '-' && a[1]) {
      return usage_error("unknown option '%s'", a);
    } else if (!o->input) {
      o->input = a;
    } else {
      return usage_error("unexpected argument '%s'", a);
    }
#undef NEXT
  }
  g_threads = o->threads;
  return 0;
}

static int load_spec(const opts *o, amoe_experiment *x) {
  if (!o->input) return usage_error("this command needs a spec file%s", "");
  amoe_diag d = {0};
  int ok = amoe_experiment_load(x, o->input, o->sets, o->nset, &d) == AMOE_OK;
  amoe_diag_print(&d, stderr);
  amoe_diag_free(&d);
  return ok ? 0 : EXIT_USAGE;
}

static int spec_point(const amoe_experiment *x, int i, amoe_spec *s) {
  amoe_diag d = {0};
  int ok = amoe_experiment_point(x, i, s, &d) == AMOE_OK;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  s->workload.threads = g_threads ? g_threads : (int)(n < 1 ? 1 : n > 8 ? 8 : n);
  amoe_diag_print(&d, stderr);
  amoe_diag_free(&d);
  return ok ? 0 : EXIT_USAGE;
}

/* What the commands that read a spec start with: the options, the
 * experiment and one resolved point (point < 0: none yet), allocated and
 * checked; and end with (command_end). Returns an exit status, 0 to go on. */
typedef struct {
  opts o;
  amoe_experiment *x;
  amoe_spec *s;
} command;
static int command_begin(command *c, int argc, char **argv, int point) {
  memset(c, 0, sizeof *c);
  int rc = parse_opts(argc, argv, &c->o);
  if (rc) return rc;
  c->x = calloc(1, sizeof *c->x);
  c->s = calloc(1, sizeof *c->s);
  if (!c->x || !c->s) {
    amoe_err e;
    return report(amoe_fail(&e, AMOE_ENOMEM, "out of memory for the spec"), &e);
  }
  if (point < 0) return 0;
  if ((rc = load_spec(&c->o, c->x))) return rc;
  return spec_point(c->x, point, c->s);
}
static void command_end(command *c) {
  free(c->x);
  free(c->s);
}

/* ------------------------------------------------------------ run */

/* A run is, per sweep point: the offline tables its policies read, the
 * workload, (optionally) a backend, the run loop (sim/engine/run.c: route,
 * select, constrain, cache, cost, accept per block), and the point's rows
 * in the results (harness/results.c). */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One progress line on a terminal (stderr), at most five times a second,
 * after the first second; nothing when stderr is not a terminal or with
 * --quiet. */
typedef struct {
  int on;
  double t0, last;
} progress;
static progress progress_start(int quiet) {
  progress p = {!quiet && isatty(2), now_s(), 0};
  return p;
}
/* 1 when a line is due (then *rate is blocks per second so far). */
static int progress_due(progress *p, double blocks, double *rate) {
  if (!p->on) return 0;
  double t = now_s();
  if (t - p->t0 < 1.0 || t - p->last < 0.2) return 0;
  p->last = t;
  *rate = blocks / (t - p->t0);
  return 1;
}
static void progress_blocks(progress *p, long blocks, const char *what) {
  double rate;
  if (progress_due(p, (double)blocks, &rate)) fprintf(stderr, "\r%s: %ld blocks, %.0f blocks/s   ", what, blocks, rate);
}
static void progress_end(progress *p) {
  if (p->on && p->last > 0) fputc('\n', stderr);
}

typedef struct {
  amoe_results *res;
  amoe_exec *ex;
  const amoe_spec *s;
  int point, npoints;
  progress pg;
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
  if (!progress_due(&c->pg, (double)blocks, &rate)) return;
  if (c->s->workload.blocks > 0 && c->s->workload.arrival == AMOE_ARRIVAL_CLOSED) /* (open runs go by requests) */
    fprintf(stderr, "\r[point %d/%d] %llu/%d blocks, %.0f blocks/s   ", c->point + 1, c->npoints,
            (unsigned long long)blocks, c->s->workload.blocks, rate);
  else /* the whole trace */
    fprintf(stderr, "\r[point %d/%d] %llu blocks, %.0f blocks/s   ", c->point + 1, c->npoints,
            (unsigned long long)blocks, rate);
}

/* Offline tables for a spec: p̂ (calibrated on another workload, an inline
 * table, or a file) and, when `unions` is set, the union-vs-n table, which
 * always comes from the calibration workload. */
/* The calibration workload: the spec's with the commitment's seed and blocks. */
static amoe_workload_spec calibration_workload(const amoe_spec *s) {
  amoe_workload_spec w = s->workload;
  w.seed = s->commitment.seed;
  w.blocks = s->commitment.blocks;
  return w;
}

static amoe_status commitment_for(const amoe_spec *s, int unions, amoe_offline *offline, char *how, size_t hn,
                                  amoe_err *e) {
  memset(offline, 0, sizeof *offline);
  if (s->commitment.mode == AMOE_COMMIT_CALIBRATE || unions) {
    const amoe_workload_spec w = calibration_workload(s);
    amoe_source *src;
    AMOE_TRY(amoe_source_open(&src, &w, &s->model, e));
    amoe_status st = amoe_offline_estimate(src, s->workload.nodes, s->model.top_k, offline, e);
    amoe_source_close(src);
    AMOE_TRY(st);
    if (w.source == AMOE_SRC_SYNTHETIC)
      snprintf(how, hn, "calibrated on %d blocks of the workload with seed %llu", w.blocks,
               (unsigned long long)w.seed);
    else /* a file has no other seed: say so rather than pretend */
      snprintf(how, hn, "calibrated on the first %d blocks of the evaluation trace itself (a file source has no "
               "other seed; give commitment.table or commitment.file for an independent estimate)", w.blocks);
  }
  if (s->commitment.mode == AMOE_COMMIT_TABLE) {
    memcpy(offline->p, s->commitment.table, sizeof(double) * (size_t)s->commitment.table_n);
    offline->n = s->commitment.table_n;
    memcpy(offline->mass, s->commitment.mass, sizeof(double) * (size_t)s->commitment.mass_n);
    snprintf(how, hn, "table in the spec");
  } else if (s->commitment.mode == AMOE_COMMIT_FILE) {
    amoe_diag d = {0};
    int ok = amoe_commitment_file_load(s->commitment.file, offline->p, &offline->n, offline->mass, &d) == AMOE_OK;
    amoe_status st = ok ? AMOE_OK : amoe_fail(e, AMOE_EINVAL, "%s", d.n ? d.msgs[0] : "bad commitment file");
    amoe_diag_free(&d);
    snprintf(how, hn, "file %s", s->commitment.file);
    return st;
  }
  return AMOE_OK;
}

/* Stage 1: the offline tables the spec's policies read (policy table flags). */
static amoe_status offline_tables(const amoe_spec *s, int quiet, amoe_offline *offline, int *reads_commitment, char *how,
                                  size_t hn, amoe_err *e) {
  int unions = 0;
  *reads_commitment = 0;
  for (int i = 0; i < s->npolicies; i++) {
    *reads_commitment |= amoe_verifier_table[s->policies[i].verifier].reads_commitment;
    unions |= amoe_draft_table[s->policies[i].draft].reads_union_table;
  }
  memset(offline, 0, sizeof *offline);
  if (!*reads_commitment && !unions) {
    snprintf(how, hn, "not needed by these policies");
    return AMOE_OK;
  }
  AMOE_TRY(commitment_for(s, unions, offline, how, hn, e));
  for (int i = 0; i < s->npolicies; i++) { /* a verifier that weighs nodes by their draft mass needs m̄_d */
    const amoe_verifier_def *v = &amoe_verifier_table[s->policies[i].verifier];
    for (int d = 1; v->reads_mass && d < offline->n; d++)
      if (offline->p[d] > 0 && !(offline->mass[d] > 0))
        return amoe_fail(e, AMOE_EINVAL,
                         "verifier %s needs the draft mass per depth (m_d) beside p_d, and the commitment %s has "
                         "none at depth %d: calibrate it (commitment: {calibrate: ...}), or give commitment.mass "
                         "beside commitment.table (acceptmoe calibrate writes both)",
                         v->name, how, d);
  }
  if (!quiet && strstr(how, "trace itself")) fprintf(stderr, "acceptmoe: warning: p_d %s\n", how);
  return AMOE_OK;
}

/* A balanced placement's long-run load per (layer, expert), from the
 * calibration workload (*load NULL when the layout needs none). */
static amoe_status placement_load(const amoe_spec *s, double **load, amoe_err *e) {
  *load = NULL;
  if (!amoe_parallel_has_groups(&s->parallel, s->hw.gpus) || s->parallel.placement != AMOE_PLACE_BALANCED)
    return AMOE_OK;
  double *l = malloc((size_t)s->model.moe_layers * s->model.experts * sizeof *l);
  if (!l) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  const amoe_workload_spec w = calibration_workload(s);
  amoe_source *cal = NULL;
  amoe_status st = amoe_source_open(&cal, &w, &s->model, e);
  if (!st)
    st = amoe_expert_load_estimate(cal, s->workload.nodes, s->model.top_k, s->model.moe_layers, s->model.experts, l, e);
  amoe_source_close(cal);
  if (st) free(l);
  else *load = l;
  return st;
}

/* The profiled step-time table (§18) over the calibration workload, as
 * an engine profiles it at start-up: batch up to the run's slots. */
enum { STEP_SAMPLES = 8 };
static amoe_status step_table_for(const amoe_spec *s, const double *load, amoe_step_table *t, amoe_err *e) {
  const amoe_workload_spec w = calibration_workload(s);
  amoe_source *cal = NULL;
  amoe_status st = amoe_source_open(&cal, &w, &s->model, e);
  if (!st) st = amoe_step_table_profile(s, cal, load, amoe_workload_slots(&s->workload), STEP_SAMPLES, t, e);
  amoe_source_close(cal);
  return st;
}

/* The step table when a row reads it (*t NULL otherwise; the caller frees). */
static amoe_status step_table_if_read(const amoe_spec *s, const double *load, amoe_step_table **t, amoe_err *e) {
  *t = NULL;
  int reads = 0;
  for (int i = 0; i < s->npolicies; i++) reads |= amoe_draft_table[s->policies[i].draft].reads_step_table;
  if (!reads) return AMOE_OK;
  if (!(*t = malloc(sizeof **t))) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  const amoe_status st = step_table_for(s, load, *t, e);
  if (st) {
    free(*t);
    *t = NULL;
  }
  return st;
}

/* The run's backend (o->backend set), said on stderr unless quiet. */
static amoe_status open_backend(const opts *o, const amoe_spec *s, amoe_exec **ex, amoe_err *e) {
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
static amoe_status run_point(const opts *o, const amoe_spec *s, int p, int npoints, amoe_results *res, amoe_err *e) {
  amoe_offline offline;
  int reads_commitment;
  char how[AMOE_PATH_MAX + 128];
  AMOE_TRY(offline_tables(s, o->quiet, &offline, &reads_commitment, how, sizeof how, e)); /* 1 */
  double *load = NULL;
  amoe_source *src = NULL;
  amoe_exec *ex = NULL;
  amoe_step_table *steps = NULL;
  amoe_status st = placement_load(s, &load, e);
  offline.load = load;
  if (!st) st = step_table_if_read(s, load, &steps, e);
  offline.steps = steps;
  if (!st) st = amoe_source_open(&src, &s->workload, &s->model, e); /* 2 */
  if (!st) st = open_backend(o, s, &ex, e);                          /* 3 */
  if (!st) {                                                         /* 4 */
    amoe_results_begin_point(res, p, s);
    run_ctx c = {res, ex, s, p, npoints, progress_start(o->quiet)};
    amoe_run_hooks h = {&c, amoe_results_wants_blocks(res) ? on_block : NULL,
                        amoe_results_wants_selection(res) ? on_select : NULL, ex ? on_route : NULL, on_progress,
                        interrupted};
    amoe_row_result rows[AMOE_MAX_POLICIES];
    if (o->profile) amoe_moe_profiler(1); /* one pass between cudaProfilerStart/Stop */
    st = amoe_run(s, &offline, src, &h, rows, e);
    if (o->profile) amoe_moe_profiler(0);
    progress_end(&c.pg);
    if (!st) { /* 5 */
      st = point_results(s, p, res, rows, src, ex, how, reads_commitment ? &offline : NULL, e);
      for (int i = 0; i < s->npolicies; i++) amoe_row_result_free(&rows[i]);
    }
  }
  amoe_exec_close(ex);
  amoe_source_close(src);
  free(load);
  free(steps);
  return st;
}

/* Every sweep point of x this shard runs, into the results ro opens
 * (committed when all ran). *rc: a spec point's exit status (its messages
 * printed), 0 if every point resolved. */
static amoe_status run_points(const opts *o, const amoe_experiment *x, amoe_spec *s, const amoe_results_opts *ro,
                              int *rc, amoe_err *e) {
  amoe_results *res = NULL;
  amoe_status st = amoe_results_open(&res, ro, e);
  const int npoints = amoe_experiment_points(x);
  for (int p = 0; p < npoints && !st && !*rc; p++) {
    if (p % o->shard_n != o->shard_i) continue;
    if ((*rc = spec_point(x, p, s))) break;
    st = run_point(o, s, p, npoints, res, e);
  }
  if (!st && !*rc) st = amoe_results_commit(res, e);
  amoe_results_close(res);
  return st;
}

static int cmd_run(int argc, char **argv) {
  command c;
  int rc = command_begin(&c, argc, argv, -1);
  const opts o = c.o;
  amoe_experiment *x = c.x;
  amoe_spec *s = c.s;
  if (rc || (rc = load_spec(&o, x))) goto out;
  if (o.blocks_csv) x->base.output.blocks_csv = 1; /* the resolved spec says so too */
  if (o.dump) snprintf(x->base.output.dump_selection, sizeof x->base.output.dump_selection, "%s", o.dump);
  char dir[AMOE_PATH_MAX];
  if (o.out)
    snprintf(dir, sizeof dir, "%s", o.out);
  else if (x->base.output.dir[0])
    snprintf(dir, sizeof dir, "%s", x->base.output.dir);
  else
    snprintf(dir, sizeof dir, "results/%s", x->base.name);
  const amoe_results_opts ro = {dir, x, o.input, o.backend, x->base.output.blocks_csv,
                                x->base.output.dump_selection[0] ? x->base.output.dump_selection : NULL,
                                o.shard_i, o.shard_n, stdout};
  amoe_err e = {{0}};
  const amoe_status st = run_points(&o, x, s, &ro, &rc, &e);
  if (!st && !rc && !o.quiet) fprintf(stderr, "results in %s/\n", dir);
  if (!rc) rc = report(st, &e);
out:
  command_end(&c);
  return rc;
}

/* ------------------------------------------------------------ cells */

/* One run of a cell's spec: a plain `run` of it into out_dir, quietly. */
static amoe_status cells_run(void *ctx, const char *spec, char *const *sets, int nset, const char *out_dir, amoe_err *e) {
  (void)ctx;
  amoe_experiment *x = calloc(1, sizeof *x);
  amoe_spec *s = calloc(1, sizeof *s);
  amoe_diag d = {0};
  amoe_status st = x && s ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory for the spec");
  if (!st && amoe_experiment_load(x, spec, sets, nset, &d) != AMOE_OK)
    st = amoe_fail(e, AMOE_EINVAL, "%s", d.n ? d.msgs[0] : "the spec");
  amoe_diag_free(&d);
  if (!st) {
    opts o;
    memset(&o, 0, sizeof o);
    o.quiet = 1;
    o.shard_n = 1;
    const amoe_results_opts ro = {out_dir, x, spec, NULL, 0, NULL, 0, 1, NULL};
    int rc = 0;
    st = run_points(&o, x, s, &ro, &rc, e);
    if (!st && rc) st = amoe_fail(e, AMOE_EINVAL, "%s: the spec's point does not resolve (its errors above)", spec);
  }
  free(x);
  free(s);
  return st;
}

static int cmd_cells(int argc, char **argv) {
  opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc;
  if (!o.input) return usage_error("cells needs a cell file (CSV; docs/spec.md \"Serving cells\")%s", "");
  const amoe_cells_opts co = {o.input, o.only, o.csv, o.curves, o.out, o.quiet, stdout, cells_run, NULL};
  amoe_err e = {{0}};
  return report(amoe_cells(&co, &e), &e);
}

/* ------------------------------------------------------------ gen, import */

static amoe_status write_source(amoe_source *src, const amoe_model *m, const char *out, int quiet, amoe_err *e) {
  progress pg = progress_start(quiet);
  size_t n = strlen(out);
  int jsonl = n > 6 && !strcmp(out + n - 6, ".jsonl");
  amoe_block b;
  amoe_block_init(&b, m->moe_layers, m->experts, amoe_source_m(src));
  amoe_status st = AMOE_OK, rc;
  long count = 0;
  if (jsonl) {
    amoe_afile a;
    st = amoe_afile_open(&a, out, e);
    while (!st && (rc = amoe_source_next(src, &b, e)) != AMOE_END) {
      if (rc) st = rc;
      else st = amoe_blocks_jsonl_write(a.f, &b, e), count++;
      if (!st && amoe_interrupt) st = AMOE_EINTR;
      progress_blocks(&pg, count, out);
    }
    if (!st) st = amoe_afile_commit(&a, e);
    amoe_afile_abort(&a);
  } else {
    amoe_trace_writer *w;
    st = amoe_trace_create(&w, out, m->moe_layers, m->experts, m->top_k, amoe_source_m(src),
                           amoe_source_provenance(src), e);
    while (!st && (rc = amoe_source_next(src, &b, e)) != AMOE_END) {
      if (rc) st = rc;
      else st = amoe_trace_write(w, &b, e), count++;
      if (!st && amoe_interrupt) st = AMOE_EINTR;
      progress_blocks(&pg, count, out);
    }
    if (!st) st = amoe_trace_close(w, e);
    else if (w) amoe_trace_abort(w);
  }
  amoe_block_free(&b);
  progress_end(&pg);
  if (!st && !quiet) fprintf(stderr, "wrote %ld blocks to %s\n", count, out);
  return st;
}

static int cmd_gen(int argc, char **argv) {
  command c;
  int rc = command_begin(&c, argc, argv, -1);
  if (!rc && !c.o.out) rc = usage_error("gen needs -o FILE.amt%s", "");
  if (!rc && !(rc = load_spec(&c.o, c.x)) && !(rc = spec_point(c.x, 0, c.s))) {
    amoe_err e = {{0}};
    amoe_source *src;
    amoe_status st = amoe_source_open(&src, &c.s->workload, &c.s->model, &e);
    if (!st) st = write_source(src, &c.s->model, c.o.out, c.o.quiet, &e);
    amoe_source_close(st ? NULL : src);
    rc = report(st, &e);
  }
  command_end(&c);
  return rc;
}

/* The source a --format names, or -1. */
static int source_of_format(const char *format) {
  static const int files[] = {AMOE_SRC_BLOCKS_JSONL, AMOE_SRC_ROUTING_JSONL, AMOE_SRC_ROUTING_SAFETENSORS};
  for (size_t i = 0; format && i < sizeof files / sizeof files[0]; i++)
    if (!strcmp(format, amoe_source_kind_names[files[i]])) return files[i];
  return -1;
}

/* A workload spec for a file given on the command line. */
static int file_source(const opts *o, amoe_spec *s, amoe_source **src, amoe_err *e) {
  amoe_spec_defaults(s);
  s->workload.blocks = 0; /* the whole file */
  snprintf(s->workload.path, sizeof s->workload.path, "%s", o->input);
  if (o->window) s->workload.window = o->window;
  if (o->hybrid) s->workload.routing_blocks = AMOE_ROUTING_HYBRID;
  if (amoe_trace_sniff(o->input)) {
    amoe_trace_reader *r;
    amoe_status st = amoe_trace_open(&r, o->input, e);
    if (st) return report(st, e);
    const amoe_trace_info *ti = amoe_trace_info_of(r);
    snprintf(s->model.name, sizeof s->model.name, "trace");
    s->model.layers = s->model.moe_layers = ti->layers;
    s->model.experts = ti->experts;
    s->model.top_k = ti->top_k;
    amoe_trace_close_reader(r);
    s->workload.source = AMOE_SRC_TRACE;
  } else {
    if (!o->format || !o->model)
      return usage_error("%s is not an .amt trace: give --format blocks-jsonl|routing-jsonl|routing-safetensors and --model PRESET",
                         o->input);
    const int src_kind = source_of_format(o->format);
    if (src_kind < 0) return usage_error("unknown --format '%s' (blocks-jsonl, routing-jsonl, routing-safetensors)", o->format);
    s->workload.source = src_kind;
    if (o->hybrid && s->workload.source != AMOE_SRC_ROUTING_JSONL && s->workload.source != AMOE_SRC_ROUTING_SAFETENSORS)
      return usage_error("--hybrid applies to --format routing-jsonl%s", "");
    amoe_diag d = {0};
    int ok = amoe_spec_load_preset(s, 0, o->model, "--model", &d) == AMOE_OK;
    amoe_diag_print(&d, stderr);
    amoe_diag_free(&d);
    if (!ok) return EXIT_USAGE;
  }
  amoe_status st = amoe_source_open(src, &s->workload, &s->model, e);
  return st ? report(st, e) : 0;
}

static int cmd_import(int argc, char **argv) {
  command c;
  int rc = command_begin(&c, argc, argv, -1);
  const opts o = c.o;
  if (!rc && (!o.input || !o.out || !o.format))
    rc = usage_error("import needs --format F IN --model PRESET -o OUT%s", "");
  amoe_source *src = NULL;
  amoe_err e = {{0}};
  if (!rc && !(rc = file_source(&o, c.s, &src, &e))) {
    fprintf(stderr, "%s\n", amoe_source_provenance(src));
    rc = report(write_source(src, &c.s->model, o.out, o.quiet, &e), &e);
    amoe_source_close(src);
  }
  command_end(&c);
  return rc;
}

static int cmd_inspect(int argc, char **argv) {
  command c;
  int rc = command_begin(&c, argc, argv, -1);
  const opts o = c.o;
  amoe_spec *s = c.s;
  amoe_experiment *x = c.x;
  if (!rc && !o.input) rc = usage_error("inspect needs a file%s", "");
  if (rc) {
    command_end(&c);
    return rc;
  }
  amoe_source *src = NULL;
  amoe_err e = {{0}};
  size_t n = strlen(o.input);
  int is_spec = (n > 5 && !strcmp(o.input + n - 5, ".yaml")) || (n > 4 && !strcmp(o.input + n - 4, ".yml"));
  if (is_spec) {
    if (!(rc = load_spec(&o, x)) && !(rc = spec_point(x, 0, s))) {
      /* a generated workload stores every logit here, so that the score
       * shape is the full softmax's (no selection depends on m) */
      if (s->workload.source == AMOE_SRC_SYNTHETIC && amoe_experiment_auto(x, "workload.top_m")) s->workload.top_m = s->model.experts;
      amoe_status st = amoe_source_open(&src, &s->workload, &s->model, &e);
      rc = report(st, &e);
    }
  } else {
    rc = file_source(&o, s, &src, &e);
    if (!rc && !o.json) fprintf(stderr, "%s\n", amoe_source_provenance(src)); /* says what a reader dropped */
  }
  if (!rc) {
    amoe_inspect_stats st;
    amoe_status r = amoe_inspect(src, s->model.moe_layers, s->model.experts, s->model.top_k, s->model.router, &st, &e);
    if (!r) amoe_inspect_print(stdout, &st, o.input, o.json);
    rc = report(r, &e);
  }
  amoe_source_close(src);
  command_end(&c);
  return rc;
}

static int cmd_merge(int argc, char **argv) {
  char *dirs[4096];
  int n = 0;
  const char *out = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--out") || !strcmp(argv[i], "-o")) {
      if (i + 1 >= argc) return usage_error("%s needs a directory", argv[i]);
      out = argv[++i];
    } else if (argv[i][0] == '-') {
      return usage_error("unknown option '%s'", argv[i]);
    } else if (n < 4096) {
      dirs[n++] = argv[i];
    } else {
      return usage_error("at most 4096 partial results%s", "");
    }
  }
  if (!out || n < 1) return usage_error("merge needs DIR... --out DIR%s", "");
  amoe_err e = {{0}};
  return report(amoe_merge(dirs, n, out, &e), &e);
}

static int cmd_fit(int argc, char **argv) {
  command c;
  int rc = command_begin(&c, argc, argv, -1);
  const opts o = c.o;
  amoe_experiment *x = c.x;
  amoe_spec *s = c.s;
  if (!rc && !o.target == !o.trace) rc = usage_error("fit needs one of --target TARGETS.yaml or --trace FILE%s", "");
  amoe_fit_targets *t = calloc(1, sizeof *t);
  amoe_inspect_stats *ts = calloc(1, sizeof *ts);
  amoe_err e = {{0}};
  char how[AMOE_PATH_MAX + 64];
  if (!rc && (!t || !ts)) rc = report(amoe_fail(&e, AMOE_ENOMEM, "out of memory"), &e);
  if (!rc && !(rc = load_spec(&o, x)) && !(rc = spec_point(x, 0, s))) {
    if (o.target) {
      amoe_diag d = {0};
      if (!amoe_fit_targets_load(t, o.target, &d)) rc = EXIT_USAGE;
      amoe_diag_print(&d, stderr);
      amoe_diag_free(&d);
      snprintf(how, sizeof how, "--target %s", o.target);
    } else { /* the trace's own statistics, read as the spec's model */
      amoe_workload_spec w = s->workload;
      snprintf(w.path, sizeof w.path, "%s", o.trace);
      w.blocks = 0;
      if (o.window) w.window = o.window;
      const int kind = source_of_format(o.format);
      if (amoe_trace_sniff(o.trace)) w.source = AMOE_SRC_TRACE;
      else if (kind >= 0) w.source = kind;
      else
        rc = usage_error("%s is not an .amt trace: give --format blocks-jsonl|routing-jsonl|routing-safetensors", o.trace);
      amoe_source *src = NULL;
      amoe_status st = rc ? AMOE_OK : amoe_source_open(&src, &w, &s->model, &e);
      if (!rc && !st)
        st = amoe_inspect(src, s->model.moe_layers, s->model.experts, s->model.top_k, s->model.router, ts, &e);
      amoe_source_close(src);
      if (!rc) rc = report(st, &e);
      if (!rc) {
        const int per = ts->requests > 0 ? (int)(ts->tokens / ts->requests) : 0;
        amoe_fit_targets_from_stats(t, ts, s->model.top_k, per > 1 ? per : 0, o.trace);
      }
      snprintf(how, sizeof how, "--trace %s", o.trace);
    }
  }
  for (int i = 0; i < 2 && !rc; i++)
    if (i ? o.keep_noise : o.keep_drift) {
      const size_t n = strlen(how);
      snprintf(how + n, sizeof how - n, i ? " --keep-noise" : " --keep-drift");
    }
  if (!rc) {
    const int blocks = o.blocks ? o.blocks : 400;
    amoe_fit_result r;
    const unsigned keep = (o.keep_drift ? AMOE_FIT_KEEP_DRIFT : 0) | (o.keep_noise ? AMOE_FIT_KEEP_NOISE : 0);
    amoe_status st = amoe_fit_routing(s, t, blocks, keep, o.quiet || !isatty(2) ? NULL : stderr, &r, &e);
    amoe_afile a = {0};
    FILE *f = stdout;
    if (!st && o.out) {
      st = amoe_afile_open(&a, o.out, &e);
      f = a.f;
    }
    if (!st) {
      amoe_fit_write(f, s, t, &r, blocks, how);
      if (o.out) st = amoe_afile_commit(&a, &e);
    }
    amoe_afile_abort(&a);
    rc = report(st, &e);
  }
  free(ts);
  free(t);
  command_end(&c);
  return rc;
}

static int cmd_calibrate(int argc, char **argv) {
  command c;
  int rc = command_begin(&c, argc, argv, 0);
  const opts o = c.o;
  amoe_spec *s = c.s;
  if (!rc) {
    amoe_err e = {{0}};
    amoe_offline offline;
    char how[AMOE_PATH_MAX + 128];
    s->commitment.mode = AMOE_COMMIT_CALIBRATE;
    amoe_status st = commitment_for(s, 0, &offline, how, sizeof how, &e);
    if (!st) {
      amoe_afile a = {0};
      FILE *f = stdout;
      if (o.out) {
        st = amoe_afile_open(&a, o.out, &e);
        f = a.f;
      }
      if (!st) {
        fprintf(f, "# commitment p_d: fraction of blocks whose natural accepted prefix reaches depth d\n");
        fprintf(f, "# model %s, %s, eagle tree of %d nodes\n", s->model.name, how, s->workload.nodes);
        fprintf(f, "table: [");
        for (int d = 0; d < offline.n; d++) fprintf(f, "%s%.6f", d ? ", " : "", offline.p[d]);
        fprintf(f, "]\n");
        fprintf(f, "# draft mass m_d: mean over blocks of exp(score) summed over the verified nodes at depth d\n");
        fprintf(f, "mass: [");
        for (int d = 0; d < offline.n; d++) fprintf(f, "%s%.6f", d ? ", " : "", offline.mass[d]);
        fprintf(f, "]\n");
        if (o.out) st = amoe_afile_commit(&a, &e);
      }
      amoe_afile_abort(&a);
    }
    rc = report(st, &e);
  }
  command_end(&c);
  return rc;
}

/* costtable: the profiled step-time table (§18) as plain JSON, for an
 * engine's scheduler to load beside its own (docs/spec.md). */
static int cmd_costtable(int argc, char **argv) {
  command c;
  int rc = command_begin(&c, argc, argv, 0);
  const opts o = c.o;
  amoe_spec *s = c.s;
  if (rc) {
    command_end(&c);
    return rc;
  }
  amoe_err e = {{0}};
  amoe_step_table *t = malloc(sizeof *t);
  double *load = NULL; /* (balanced: the layout the run charges, from the same load) */
  amoe_status st = t ? placement_load(s, &load, &e) : amoe_fail(&e, AMOE_ENOMEM, "out of memory");
  if (!st) st = step_table_for(s, load, t, &e);
  free(load);
  if (!st) {
    json_t *root = json_object(), *bs = json_array(), *ns = json_array(), *grid = json_array(), *flat = json_array();
    for (int i = 0; i < t->nb; i++) json_array_append_new(bs, json_integer(t->batch[i]));
    for (int j = 0; j < t->nt; j++) json_array_append_new(ns, json_integer(t->tokens[j]));
    for (int i = 0; i < t->nb; i++) {
      json_t *row = json_array();
      for (int j = 0; j < t->nt; j++) {
        json_array_append_new(row, json_real(t->step_s[i][j]));
        json_array_append_new(flat, json_pack("{s:i,s:i,s:f}", "batch", t->batch[i], "total_tokens",
                                              t->batch[i] * t->tokens[j], "step_s", t->step_s[i][j]));
      }
      json_array_append_new(grid, row);
    }
    json_object_set_new(root, "tool", json_string("acceptmoe"));
    json_object_set_new(root, "version", json_string(AMOE_VERSION));
    json_object_set_new(root, "spec", json_string(o.input));
    json_object_set_new(root, "model", json_string(s->model.name));
    json_object_set_new(root, "hardware", json_string(s->hw.name));
    json_object_set_new(root, "engine", json_string(s->engine.name[0] ? s->engine.name : "spec"));
    json_object_set_new(root, "offload", json_boolean(s->offload.enabled));
    json_object_set_new(root, "samples", json_integer(t->samples));
    json_object_set_new(root, "batch", bs);
    json_object_set_new(root, "tokens_per_request", ns);
    json_object_set_new(root, "step_s", grid);
    json_object_set_new(root, "by_total_tokens", flat);
    char *txt = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!txt) st = amoe_fail(&e, AMOE_ENOMEM, "out of memory");
    amoe_afile a = {0};
    FILE *f = stdout;
    if (!st && o.out && !(st = amoe_afile_open(&a, o.out, &e))) f = a.f;
    if (!st) {
      fputs(txt, f);
      fputc('\n', f);
      if (o.out) st = amoe_afile_commit(&a, &e);
    }
    amoe_afile_abort(&a);
    free(txt);
  }
  free(t);
  rc = report(st, &e);
  command_end(&c);
  return rc;
}

/* calibrate-hw: measure, fit the cost model's coefficients, write them. */
static int cmd_calibrate_hw(int argc, char **argv) {
  setenv("ACCEPTMOE_CALIBRATION", "off", 1); /* fit from the preset, not from an earlier fit */
  command c;
  int rc = command_begin(&c, argc, argv, 0);
  const opts o = c.o;
  amoe_spec *s = c.s;
  if (!rc) {
    char path[AMOE_PATH_MAX + 64];
    amoe_err e = {{0}};
    amoe_status st = AMOE_OK;
    if (o.out) {
      snprintf(path, sizeof path, "%s", o.out);
    } else {
      snprintf(path, sizeof path, "results/calibration/%s.yaml", s->hw.name);
      st = amoe_mkdirs("results/calibration", &e);
    }
    if (!st)
      st = amoe_exec_calibrate_hw(s, o.backend ? o.backend : amoe_moe_backend_for(AMOE_MOE_STREAMING),
                                  o.compute ? o.compute : amoe_moe_backend_for(AMOE_MOE_COMPUTE), path, &e);
    rc = report(st, &e);
  }
  command_end(&c);
  return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int cmd_presets(int argc, char **argv) {
  (void)argc, (void)argv;
  const char *kinds[4] = {"models", "hw", "interconnect", "engines"};
  for (int k = 0; k < 4; k++) {
    char dir[AMOE_PATH_MAX];
    amoe_presets_dir(dir, sizeof dir, kinds[k], NULL);
    printf("%s (%s):\n", kinds[k], dir);
    DIR *d = opendir(dir);
    if (!d) {
      fprintf(stderr, "acceptmoe: %s: %s\n", dir, strerror(errno));
      return EXIT_RUNTIME;
    }
    char *names[256];
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) && n < 256;) {
      size_t len = strlen(de->d_name);
      if (len > 5 && !strcmp(de->d_name + len - 5, ".yaml") && (names[n] = strndup(de->d_name, len - 5))) n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
      printf("  %s\n", names[i]);
      free(names[i]);
    }
  }
  return 0;
}

/* A row's parameters in one line: "budget (required, e.g. 32), beta = 0.5". */
static void param_line(const amoe_param_def *pd, char *out, size_t n) {
  out[0] = 0;
  for (int j = 0; j < AMOE_MAX_PARAMS && pd[j].key; j++) {
    const size_t u = strlen(out);
    if (pd[j].names) {
      snprintf(out + u, n - u, "%s`%s` = %s (", j ? ", " : "", pd[j].key, pd[j].names[(int)pd[j].def]);
      for (int c = 0; pd[j].names[c]; c++)
        snprintf(out + strlen(out), n - strlen(out), "%s%s", c ? " or " : "", pd[j].names[c]);
      snprintf(out + strlen(out), n - strlen(out), ")");
    } else if (isnan(pd[j].def))
      snprintf(out + u, n - u, "%s`%s` (required, e.g. %g)", j ? ", " : "", pd[j].key, pd[j].example);
    else snprintf(out + u, n - u, "%s`%s` = %g", j ? ", " : "", pd[j].key, pd[j].def);
  }
}

/* Every draft and verifier row with its parameters and what it does
 * (sim/policy/policy.c: the rows are the registry); --markdown: the table
 * README.md and docs/spec.md carry (scripts/docs-policies.sh). */
static int cmd_policies(int argc, char **argv) {
  opts o;
  if (parse_opts(argc, argv, &o)) return EXIT_USAGE;
  if (o.markdown) {
    puts("| row | side | parameters | what it does |");
    puts("|---|---|---|---|");
  }
  for (int w = 0; w < 2; w++) {
    if (!o.markdown)
      printf("%s (`{%s: NAME, ...}` in a spec's policies):\n", w ? "verifiers" : "drafts", w ? "verifier" : "draft");
    const int n = w ? amoe_verifier_rows() : amoe_draft_rows();
    for (int i = 0; i < n; i++) {
      const char *name = w ? amoe_verifier_table[i].name : amoe_draft_table[i].name;
      const char *what = w ? amoe_verifier_table[i].description : amoe_draft_table[i].description;
      const amoe_param_def *pd = w ? amoe_verifier_table[i].params : amoe_draft_table[i].params;
      const int batch = w ? amoe_verifier_table[i].batch : amoe_draft_table[i].batch;
      if (o.markdown) {
        char pl[512];
        param_line(pd, pl, sizeof pl);
        printf("| `%s` | %s | %s | %s; at batch > 1, %s |\n", name, w ? "verifier" : "draft", pl[0] ? pl : "",
               what ? what : "", amoe_batch_kind_names[batch]);
        continue;
      }
      printf("  %-15s %s\n", name, what ? what : "");
      printf("  %-15s   at batch > 1: %s\n", "", amoe_batch_kind_names[batch]);
      for (int j = 0; j < AMOE_MAX_PARAMS && pd[j].key; j++) {
        if (pd[j].names) {
          printf("  %-15s   %s: default %s, one of", "", pd[j].key, pd[j].names[(int)pd[j].def]);
          for (int c = 0; pd[j].names[c]; c++) printf(" %s", pd[j].names[c]);
          putchar('\n');
        } else if (isnan(pd[j].def))
          printf("  %-15s   %s: required (e.g. %g), %g..%g%s\n", "", pd[j].key, pd[j].example, pd[j].min, pd[j].max,
                 pd[j].expert_count ? " (experts per layer)" : "");
        else printf("  %-15s   %s: default %g, %g..%g\n", "", pd[j].key, pd[j].def, pd[j].min, pd[j].max);
      }
    }
  }
  return 0;
}

/* The commands: one row each, with its synopsis, what it does and the
 * options it takes (the usage text is written from these rows). */
static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *synopsis, *help, *options;
} COMMANDS[] = {
    {"run", cmd_run,
     "SPEC.yaml [--set KEY=VALUE]... [--out DIR] [--blocks-csv] [--dump-selection FILE] [--quiet] [--shard I/N]\n"
     "               [--backend cpu|cublas-loop|cublas-grouped|skinny] [--repeats N] [--cold] [--profile] [--threads N]",
     "run every policy of the spec (and every sweep point); write\n"
     "results/<name>/{summary.csv,layers.csv,meta.json,spec.resolved.yaml}.\n"
     "--backend also executes every block's MoE layers with real kernels\n"
     "and adds measured beside predicted expert time per block\n"
     "(--cold flushes the L2 before each timed run; the CUDA backends are\n"
     "loaded then, from this build's cuda/libamoe_moe_cuda.so or\n"
     "ACCEPTMOE_CUDA_MODULE)\n"
     "--shard I/N runs only the sweep points p with p mod N = I (a partial\n"
     "result for `merge`; scripts/sweep-parallel.sh, scripts/sweep-slurm.sh)",
     "--set --out -o --blocks-csv --dump-selection --quiet -q --shard --backend --repeats --cold --profile --threads"},
    {"merge", cmd_merge, "DIR... --out DIR", "join the partial results of a sharded run, byte for byte as one run",
     "--out -o"},
    {"gen", cmd_gen, "SPEC.yaml [--set KEY=VALUE]... [--threads N] [--quiet] -o FILE.amt|FILE.jsonl",
     "write the spec's workload as a trace (.amt) or blocks-jsonl", "--set --out -o --threads --quiet -q"},
    {"import", cmd_import,
     "--format blocks-jsonl|routing-jsonl|routing-safetensors IN --model PRESET [--window W | --hybrid] [--quiet]\n"
     "               -o FILE.amt",
     "convert an interchange file or a real routing trace to .amt: a real\n"
     "trace as chain blocks of W tokens (default 8), or with --hybrid as\n"
     "generated draft trees whose accepted path carries the real routes",
     "--format --model --window --hybrid --out -o --quiet -q --threads"},
    {"inspect", cmd_inspect,
     "FILE [--format blocks-jsonl|routing-jsonl|routing-safetensors --model PRESET] [--window W | --hybrid] [--json]\n"
     "               [--quiet]",
     "FILE is an .amt trace, a JSONL file or a spec; prints window-union\n"
     "curves, the accept-length histogram, expert popularity, reuse\n"
     "distance and how stable a block's top experts are from block to block",
     "--format --model --window --hybrid --json --set --threads --quiet -q"},
    {"fit", cmd_fit,
     "SPEC.yaml (--target TARGETS.yaml | --trace FILE [--format blocks-jsonl|routing-jsonl|...] [--window W])\n"
     "               [--blocks N] [--keep-drift] [--keep-noise] [--set KEY=VALUE]... [-o FILE]",
     "fit the spec's model's routing structure (locality per layer, request\n"
     "concentration and its drift, popularity, score shape, the draft tree's own\n"
     "concentration) to target statistics or to a real trace's; prints achieved vs\n"
     "target and the `routing:` section for the model preset.\n"
     "--keep-drift keeps the model's drift_tokens instead of fitting it to\n"
     "reuse_within_8 (which reruns every round at each of 8 drift trials);\n"
     "--keep-noise keeps its noise instead of setting it by its rule",
     "--target --trace --format --window --blocks --keep-drift --keep-noise --set --out -o --quiet -q --threads"},
    {"calibrate", cmd_calibrate, "SPEC.yaml [--set KEY=VALUE]... [--quiet] [-o FILE]",
     "estimate the commitment table p_d on the spec's calibration workload", "--set --out -o --threads --quiet -q"},
    {"costtable", cmd_costtable, "SPEC.yaml [--set KEY=VALUE]... [--quiet] [-o FILE]",
     "the expected verification step time over (batch, verified tokens per\n"
     "request) by the one cost function over the spec's calibration workload,\n"
     "as JSON an engine's scheduler can load (docs/spec.md); batch up to\n"
     "workload.batch (max_running with open arrivals), tokens up to tree.nodes",
     "--set --out -o --threads --quiet -q"},
    {"calibrate-hw", cmd_calibrate_hw,
     "SPEC.yaml [--set KEY=VALUE]... [--backend skinny|cublas-loop|cublas-grouped] [--compute-backend B] [-o FILE]",
     "on a GPU: measure copy and pinned H2D bandwidth and per-expert time at\n"
     "the spec's model shape, cold; fit hbm_bw, h2d_bw, moe_t0_s and moe_eta\n"
     "from --backend (default skinny) and peak_flops from --compute-backend\n"
     "(default cublas-loop: tensor cores); write results/calibration/<hw>.yaml\n"
     "(used by later runs; ACCEPTMOE_CALIBRATION=off ignores it)",
     "--set --backend --compute-backend --out -o"},
    {"cells", cmd_cells, "CELLS.csv [--only ID,...] [--csv OUT.csv] [--curves CURVES.csv] [--out DIR] [--quiet]",
     "run every serving cell of the file (docs/spec.md \"Serving cells\") once\n"
     "per deployment, load and draft, and print each row's prediction, its\n"
     "measurement and the signed error, the MAPE per metric and per source,\n"
     "and for each deployment and load with speculation off and on the\n"
     "measured and predicted ratio of on to off. A row that cannot run is\n"
     "listed with its reason. --csv writes id,predicted,measured,error,status;\n"
     "--curves: acceptance curves for rows without an al (default: the\n"
     "acceptance_curves.csv beside the file); --out keeps each run's files",
     "--only --csv --curves --out -o --quiet -q"},
    {"presets", cmd_presets, "", "list model, hardware, interconnect and engine presets", ""},
    {"policies", cmd_policies, "[--markdown]", "list every draft and verifier policy with its parameters (--markdown: as\n"
     "the table README.md and docs/spec.md carry)", "--markdown"},
};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
  fputs(USAGE_HEAD, f);
  for (size_t i = 0; i < NCOMMANDS; i++) {
    fprintf(f, "  %s%s%s\n", COMMANDS[i].name, COMMANDS[i].synopsis[0] ? " " : "", COMMANDS[i].synopsis);
    for (const char *h = COMMANDS[i].help; *h;) { /* each line of the help indented */
      const size_t n = strcspn(h, "\n");
      fprintf(f, "      %.*s\n", (int)n, h);
      h += n + (h[n] == '\n');
    }
  }
  fputs(USAGE_TAIL, f);
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("acceptmoe %s (%s)\n", AMOE_VERSION, AMOE_GIT);
    return 0;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  const char *c = argv[1];
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    }
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (!strcmp(c, COMMANDS[i].name)) {
      g_command = c, g_options = COMMANDS[i].options;
      if (!g_options[0] && argc > 2) return usage_error("takes no arguments ('%s')", argv[2]);
      return COMMANDS[i].run(argc - 2, argv + 2);
    }
  return usage_error("unknown command '%s'", c);
}
