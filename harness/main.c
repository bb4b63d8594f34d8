/* acceptmoe: a cost simulator for MoE speculative decoding.
 *   build:  cmake -B build && cmake --build build -j
 *   run:    build/acceptmoe run workloads/specs/quickstart.yaml
 * Commands return statuses; only main() turns them into exit codes:
 * 0 ok, 1 runtime error, 2 bad spec or usage. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "inspect.h"
#include "moe.h"
#include "nvtx.h"
#include "jsonl.h"
#include "policy.h"
#include "results.h"
#include "rng.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"
#include "trace.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

static const char USAGE[] =
    "usage: acceptmoe COMMAND [options]\n"
    "\n"
    "Simulates what a Mixture-of-Experts model pays to verify speculative draft\n"
    "trees under different expert-selection and draft policies.\n"
    "\n"
    "commands:\n"
    "  run SPEC.yaml [--set KEY=VALUE]... [--out DIR] [--blocks-csv] [--dump-selection FILE] [--quiet]\n"
    "               [--backend cpu|cublas-loop|cublas-grouped|skinny] [--repeats N] [--profile]\n"
    "      run every policy of the spec (and every sweep point); write\n"
    "      results/<name>/{summary.csv,layers.csv,meta.json,spec.resolved.yaml}.\n"
    "      --backend also executes every block's MoE layers with real kernels\n"
    "      and adds measured beside predicted expert time per block\n"
    "  gen SPEC.yaml [--set KEY=VALUE]... -o FILE.amt|FILE.jsonl\n"
    "      write the spec's workload as a trace (.amt) or blocks-jsonl\n"
    "  import --format blocks-jsonl|routing-jsonl IN --model PRESET [--window W] -o FILE.amt\n"
    "      convert an interchange file or a real routing trace to .amt\n"
    "  inspect FILE [--format blocks-jsonl|routing-jsonl --model PRESET] [--window W] [--json]\n"
    "      FILE is an .amt trace, a JSONL file or a spec; prints window-union\n"
    "      curves, the accept-length histogram and expert popularity\n"
    "  calibrate SPEC.yaml [--set KEY=VALUE]... [-o FILE]\n"
    "      estimate the commitment table p_d on the spec's calibration workload\n"
    "  calibrate-hw SPEC.yaml [--backend skinny|cublas-loop|cublas-grouped] [-o FILE]\n"
    "      on a GPU: measure copy and pinned H2D bandwidth and per-expert GEMM\n"
    "      time at the spec's model shape, fit hbm_bw, h2d_bw, peak_flops and\n"
    "      launch_s, write results/calibration/<hw>.yaml (used by later runs;\n"
    "      ACCEPTMOE_CALIBRATION=off ignores it)\n"
    "  presets\n"
    "      list model and hardware presets\n"
    "\n"
    "Keys for --set are the spec's dotted keys, e.g. --set model.top_k=4,\n"
    "--set offload.slots_per_layer=32, --set workload.blocks=200. See docs/spec.md.\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "acceptmoe: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see acceptmoe --help)\n");
  return EXIT_USAGE;
}

static int report(amoe_status st, const amoe_err *e) {
  if (st == AMOE_OK) return 0;
  fprintf(stderr, "acceptmoe: %s\n", e->msg);
  return st == AMOE_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
}

/* ------------------------------------------------------------ options */

typedef struct {
  const char *spec, *out, *dump, *format, *model, *input, *backend;
  char *sets[64];
  int nset, blocks_csv, quiet, json, window, repeats, profile;
} opts;

static int parse_opts(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : NULL)
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
    } else if (!strcmp(a, "--repeats")) {
      const char *v = NEXT();
      if (!v || (o->repeats = atoi(v)) < 1) return usage_error("--repeats needs a positive integer%s", "");
    } else if (!strcmp(a, "--profile")) {
      o->profile = 1;
    } else if (!strcmp(a, "--blocks-csv")) {
      o->blocks_csv = 1;
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      o->quiet = 1;
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
  o->spec = o->input;
  return 0;
}

static int load_spec(const opts *o, amoe_experiment *x) {
  if (!o->spec) return usage_error("this command needs a spec file%s", "");
  amoe_diag d = {0};
  int ok = amoe_experiment_load(x, o->spec, o->sets, o->nset, &d);
  amoe_diag_print(&d, stderr);
  amoe_diag_free(&d);
  return ok ? 0 : EXIT_USAGE;
}

static int spec_point(const amoe_experiment *x, int i, amoe_spec *s) {
  amoe_diag d = {0};
  int ok = amoe_experiment_point(x, i, s, &d);
  amoe_diag_print(&d, stderr);
  amoe_diag_free(&d);
  return ok ? 0 : EXIT_USAGE;
}

/* ------------------------------------------------------------ run */

/* Executing the simulator's decisions on a real backend (DESIGN §11). */
typedef struct {
  amoe_moe_backend *be;
  int repeats;
  uint16_t *x;      /* activations of the block's verified nodes */
  float *y;
  int cap;
  uint64_t x_block; /* block the activations belong to */
  double *measured, *predicted;            /* [row] sums over blocks and layers */
  double *fetch_measured, *fetch_predicted, *fetch_bytes; /* [row], offload only */
  int slots;                               /* offload slots per layer, 0 = resident */
  double *layer_measured;                  /* [row][layer] */
  double samples[64];
} exec_ctx;

typedef struct {
  FILE *blocks, *dump;
  exec_ctx *ex;
  const amoe_spec *s;
  int point, npoints;
  const char *sweepvals;
  double t0;
  int tty, quiet;
  double last_print;
} run_ctx;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static amoe_status on_block(void *vc, int row, const amoe_block_stats *b, amoe_err *e) {
  run_ctx *c = vc;
  if (!c->blocks) return AMOE_OK;
  int n = fprintf(c->blocks, "%d%s,%s,%llu,%u,%u,%d,%d,%d,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g\n", c->point,
                  c->sweepvals, c->s->policies[row].label, (unsigned long long)b->block, b->request, b->step,
                  b->verified, b->tau, b->deviated, b->union_mean, b->eligible_mean, b->executed_mean, b->fetched,
                  b->delta_mean, b->time_s);
  return n < 0 ? amoe_fail(e, AMOE_EIO, "blocks.csv: write failed") : AMOE_OK;
}

static void ids_json(FILE *f, const char *key, const uint8_t *flags, int E) {
  fprintf(f, ",\"%s\":[", key);
  int first = 1;
  for (int x = 0; x < E; x++)
    if (flags[x]) {
      fprintf(f, first ? "%d" : ",%d", x);
      first = 0;
    }
  fputc(']', f);
}

static amoe_status on_select(void *vc, int row, uint64_t block, int layer, const uint8_t *U, const uint8_t *S,
                             const uint8_t *X, const uint8_t *F, int E, amoe_err *e) {
  run_ctx *c = vc;
  if (!c->dump) return AMOE_OK;
  fprintf(c->dump, "{\"point\":%d,\"block\":%llu,\"layer\":%d,\"policy\":\"%s\"", c->point,
          (unsigned long long)block, layer, c->s->policies[row].label);
  ids_json(c->dump, "union", U, E);
  ids_json(c->dump, "eligible", S, E);
  ids_json(c->dump, "executed", X, E);
  ids_json(c->dump, "fetched", F, E);
  if (fputs("}\n", c->dump) == EOF) return amoe_fail(e, AMOE_EIO, "selection dump: write failed");
  return AMOE_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static amoe_status on_route(void *vc, int row, uint64_t block, int layer, int nodes, int k, const int32_t *route,
                            const float *weight, double predicted_s, int fetched, double predicted_fetch_s,
                            amoe_err *e) {
  run_ctx *c = vc;
  exec_ctx *x = c->ex;
  const int d = c->s->model.hidden;
  if (nodes > x->cap) {
    free(x->x);
    free(x->y);
    x->x = malloc((size_t)nodes * d * sizeof *x->x);
    x->y = malloc((size_t)nodes * d * sizeof *x->y);
    if (!x->x || !x->y) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
    x->cap = nodes;
    x->x_block = UINT64_MAX;
  }
  if (x->x_block != block) { /* deterministic activations per block */
    amoe_rng r;
    amoe_rng_seed(&r, 0xac7ULL, block, 0);
    for (size_t i = 0; i < (size_t)nodes * d; i++) x->x[i] = amoe_f32_to_bf16((float)amoe_rng_normal(&r));
    x->x_block = block;
  }
  if (x->slots && fetched > 0) { /* the copies the cache decided on, then the layer */
    double ft = 0;
    AMOE_TRY(amoe_moe_fetch(x->be, fetched, x->slots, &ft, e));
    x->fetch_measured[row] += ft;
    x->fetch_bytes[row] += fetched * 3.0 * c->s->model.hidden * c->s->model.moe_intermediate * 2.0;
  }
  if (x->slots) x->fetch_predicted[row] += predicted_fetch_s;
  amoe_moe_batch batch = {nodes, k, x->x, route, weight};
  char name[32];
  snprintf(name, sizeof name, "layer/%d", layer);
  AMOE_NVTX_PUSH(name);
  double t;
  amoe_status st = amoe_moe_run(x->be, layer, &batch, x->y, &t, e); /* warm-up */
  int n = 0;
  for (; st == AMOE_OK && n < x->repeats && n < 64; n++) st = amoe_moe_run(x->be, layer, &batch, x->y, &x->samples[n], e);
  AMOE_NVTX_POP();
  AMOE_TRY(st);
  qsort(x->samples, (size_t)n, sizeof(double), cmp_double);
  double med = n % 2 ? x->samples[n / 2] : 0.5 * (x->samples[n / 2 - 1] + x->samples[n / 2]);
  x->measured[row] += med;
  x->predicted[row] += predicted_s;
  x->layer_measured[(size_t)row * c->s->model.moe_layers + layer] += med;
  return AMOE_OK;
}

static void on_progress(void *vc, uint64_t blocks) {
  run_ctx *c = vc;
  if (c->quiet || !c->tty) return;
  double t = now_s();
  if (t - c->t0 < 1.0 || t - c->last_print < 0.2) return;
  c->last_print = t;
  fprintf(stderr, "\r[point %d/%d] %llu/%d blocks, %.0f blocks/s   ", c->point + 1, c->npoints,
          (unsigned long long)blocks, c->s->workload.blocks, blocks / (t - c->t0));
}

/* Offline tables for a spec: p̂ (calibrated on another workload, an inline
 * table, or a file) and, when `unions` is set, the union-vs-n table, which
 * always comes from the calibration workload. */
static amoe_status commitment_for(const amoe_spec *s, int unions, amoe_commitment *ph, char *how, size_t hn,
                                  amoe_err *e) {
  memset(ph, 0, sizeof *ph);
  if (s->commitment.mode == AMOE_COMMIT_CALIBRATE || unions) {
    amoe_workload_spec w = s->workload;
    w.seed = s->commitment.seed;
    w.blocks = s->commitment.blocks;
    amoe_source *src;
    AMOE_TRY(amoe_source_open(&src, &w, &s->model, e));
    amoe_status st = amoe_commitment_estimate(src, s->workload.nodes, s->model.top_k, ph, e);
    amoe_source_close(src);
    AMOE_TRY(st);
    snprintf(how, hn, "calibrated on %d blocks of the workload with seed %llu", w.blocks,
             (unsigned long long)w.seed);
  }
  if (s->commitment.mode == AMOE_COMMIT_TABLE) {
    memcpy(ph->p, s->commitment.table, sizeof(double) * (size_t)s->commitment.table_n);
    ph->n = s->commitment.table_n;
    snprintf(how, hn, "table in the spec");
  } else if (s->commitment.mode == AMOE_COMMIT_FILE) {
    amoe_diag d = {0};
    int ok = amoe_commitment_file_load(s->commitment.file, ph->p, &ph->n, &d);
    amoe_status st = ok ? AMOE_OK : amoe_fail(e, AMOE_EINVAL, "%s", d.n ? d.msgs[0] : "bad commitment file");
    amoe_diag_free(&d);
    snprintf(how, hn, "file %s", s->commitment.file);
    return st;
  }
  return AMOE_OK;
}

static const char *SUMMARY_COLS =
    "model,hw,policy,draft_policy,verifier_policy,budget,blocks,committed_tokens,tau_mean,verified_nodes_mean,"
    "union_mean,eligible_mean,executed_mean,hbm_expert_bytes_per_token,h2d_bytes_per_token,cache_hit_rate,"
    "fetch_wait_share,time_per_token_s,tokens_per_s,speedup_vs_natural,displaced_assignment_rate,"
    "displaced_mass_mean,deviated_token_rate";

static void sweep_header(FILE *f, const amoe_experiment *x) {
  fputs("point", f);
  for (int i = 0; i < x->nsweep; i++) fprintf(f, ",%s", x->sweep[i].key);
}

static void sweep_values(char *buf, size_t n, const amoe_experiment *x, int point) {
  buf[0] = 0;
  int idx = point;
  char vals[AMOE_MAX_SWEEP_KEYS][128];
  for (int i = x->nsweep - 1; i >= 0; i--) {
    snprintf(vals[i], sizeof vals[i], "%s", x->sweep[i].values[idx % x->sweep[i].nvalues]);
    idx /= x->sweep[i].nvalues;
  }
  for (int i = 0; i < x->nsweep; i++) snprintf(buf + strlen(buf), n - strlen(buf), ",%s", vals[i]);
}

static int cmd_run(int argc, char **argv) {
  opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc;
  amoe_experiment *x = calloc(1, sizeof *x);
  amoe_spec *s = calloc(1, sizeof *s);
  if (!x || !s) return EXIT_RUNTIME;
  if ((rc = load_spec(&o, x))) goto out;
  if (o.blocks_csv) x->base.output.blocks_csv = 1;
  if (o.dump) snprintf(x->base.output.dump_selection, sizeof x->base.output.dump_selection, "%s", o.dump);
  char dir[AMOE_PATH_MAX];
  if (o.out)
    snprintf(dir, sizeof dir, "%s", o.out);
  else if (x->base.output.dir[0])
    snprintf(dir, sizeof dir, "%s", x->base.output.dir);
  else
    snprintf(dir, sizeof dir, "results/%s", x->base.name);
  amoe_err e = {{0}};
  amoe_status st = amoe_mkdirs(dir, &e);
  if (st) {
    rc = report(st, &e);
    goto out;
  }
  char path[AMOE_PATH_MAX + 64];
  amoe_afile fs, fl, fb = {0}, fd = {0}, fm, fy;
  memset(&fs, 0, sizeof fs);
  memset(&fl, 0, sizeof fl);
  memset(&fm, 0, sizeof fm);
  memset(&fy, 0, sizeof fy);
  snprintf(path, sizeof path, "%s/summary.csv", dir);
  st = amoe_afile_open(&fs, path, &e);
  snprintf(path, sizeof path, "%s/layers.csv", dir);
  if (!st) st = amoe_afile_open(&fl, path, &e);
  snprintf(path, sizeof path, "%s/blocks.csv", dir);
  if (!st && x->base.output.blocks_csv) st = amoe_afile_open(&fb, path, &e);
  if (!st && x->base.output.dump_selection[0]) st = amoe_afile_open(&fd, x->base.output.dump_selection, &e);
  snprintf(path, sizeof path, "%s/meta.json", dir);
  if (!st) st = amoe_afile_open(&fm, path, &e);
  snprintf(path, sizeof path, "%s/spec.resolved.yaml", dir);
  if (!st) st = amoe_afile_open(&fy, path, &e);
  sweep_header(fs.f ? fs.f : stderr, x);
  if (fs.f)
    fprintf(fs.f, ",%s%s\n", SUMMARY_COLS,
            o.backend ? ",backend,predicted_moe_time_per_block_s,measured_moe_time_per_block_s,measured_over_predicted,"
                        "predicted_fetch_time_per_block_s,measured_fetch_time_per_block_s,measured_h2d_bytes_per_s"
                      : "");
  if (fl.f) {
    sweep_header(fl.f, x);
    fputs(",policy,layer,union_mean,eligible_mean,executed_mean,cache_hit_rate,fetched_per_block,"
          "h2d_bytes_per_block,t_moe_s_per_block,t_fetch_s_per_block\n",
          fl.f);
  }
  if (fb.f) {
    sweep_header(fb.f, x);
    fputs(",policy,block,request,step,verified_nodes,tau,deviated,union_mean,eligible_mean,executed_mean,"
          "fetched_experts,displaced_mass_mean,time_s\n",
          fb.f);
  }
  json_t *meta = json_object(), *points = json_array();
  json_object_set_new(meta, "tool", json_string("acceptmoe"));
  json_object_set_new(meta, "version", json_string(AMOE_VERSION));
  json_object_set_new(meta, "git_commit", json_string(AMOE_GIT));
  json_object_set_new(meta, "spec", json_string(o.spec));
  int npoints = amoe_experiment_points(x);
  /* markdown table on stdout */
  if (!st) {
    printf("| point | policy | tau | verified | union | executed | h2d MB/tok | hit | tok/s | speedup | deviated |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (int p = 0; p < npoints && !st; p++) {
    if ((rc = spec_point(x, p, s))) break;
    char how[AMOE_PATH_MAX + 128], sv[1024];
    sweep_values(sv, sizeof sv, x, p);
    amoe_commitment ph;
    int needs_phat = 0, needs_unions = 0;
    for (int i = 0; i < s->npolicies; i++) {
      needs_phat |= !strncmp(amoe_verifier_table[s->policies[i].verifier].name, "acceptmoe", 9);
      needs_unions |= !strcmp(amoe_draft_table[s->policies[i].draft].name, "evict");
    }
    if (needs_phat || needs_unions)
      st = commitment_for(s, needs_unions, &ph, how, sizeof how, &e);
    else {
      memset(&ph, 0, sizeof ph);
      snprintf(how, sizeof how, "not needed by these policies");
    }
    amoe_source *src = NULL;
    if (!st) st = amoe_source_open(&src, &s->workload, &s->model, &e);
    if (st) break;
    exec_ctx ex;
    memset(&ex, 0, sizeof ex);
    if (o.backend) {
      amoe_moe_shape shape = {s->model.hidden, s->model.moe_intermediate, s->model.experts};
      st = amoe_moe_open(&ex.be, o.backend, shape, s->model.moe_layers, 1, &e);
      ex.repeats = o.profile ? 1 : o.repeats ? o.repeats : (strcmp(o.backend, "cpu") ? 5 : 1);
      ex.measured = calloc((size_t)s->npolicies, sizeof(double));
      ex.predicted = calloc((size_t)s->npolicies, sizeof(double));
      ex.layer_measured = calloc((size_t)s->npolicies * s->model.moe_layers, sizeof(double));
      ex.fetch_measured = calloc((size_t)s->npolicies, sizeof(double));
      ex.fetch_predicted = calloc((size_t)s->npolicies, sizeof(double));
      ex.fetch_bytes = calloc((size_t)s->npolicies, sizeof(double));
      ex.slots = s->offload.enabled ? s->offload.slots_per_layer : 0;
      if (!st && (!ex.measured || !ex.predicted || !ex.layer_measured || !ex.fetch_measured || !ex.fetch_predicted ||
                  !ex.fetch_bytes))
        st = amoe_fail(&e, AMOE_ENOMEM, "out of memory");
      double check_err = 0;
      if (!st) st = amoe_moe_selfcheck(ex.be, &check_err, &e); /* checked before anything is timed */
      if (st) {
        amoe_moe_close(ex.be);
        amoe_source_close(src);
        break;
      }
      if (!o.quiet)
        fprintf(stderr,
                "backend %s: %d of %d layers' weights held (bf16, d=%d f=%d E=%d), median of %d repeats, "
                "vs CPU reference rel L2 %.2g\n",
                o.backend, amoe_moe_layers_held(ex.be), s->model.moe_layers, shape.hidden, shape.inter,
                shape.experts, ex.repeats, check_err);
    }
    run_ctx c = {fb.f, fd.f, o.backend ? &ex : NULL, s, p, npoints, sv, now_s(), isatty(2), o.quiet, 0};
    amoe_run_hooks h = {&c, fb.f ? on_block : NULL, fd.f ? on_select : NULL, o.backend ? on_route : NULL,
                        on_progress};
    amoe_row_result rows[AMOE_MAX_POLICIES];
    if (o.profile) amoe_moe_profiler(1); /* one pass between cudaProfilerStart/Stop */
    st = amoe_run(s, &ph, src, &h, rows, &e);
    if (o.profile) amoe_moe_profiler(0);
    if (c.tty && !o.quiet && now_s() - c.t0 >= 1.0) fprintf(stderr, "\n");
    if (!st) {
      json_t *pt = json_object();
      json_object_set_new(pt, "point", json_integer(p));
      json_error_t je;
      json_t *prov = json_loads(amoe_source_provenance(src), 0, &je);
      json_object_set_new(pt, "workload", prov ? prov : json_string(amoe_source_provenance(src)));
      json_object_set_new(pt, "workload_seed", json_integer((json_int_t)s->workload.seed));
      json_object_set_new(pt, "acceptance_seed", json_integer((json_int_t)s->workload.seed));
      json_object_set_new(pt, "commitment", json_string(how));
      if (needs_phat) {
        json_t *tab = json_array();
        for (int d = 0; d < ph.n; d++) json_array_append_new(tab, json_real(ph.p[d]));
        json_object_set_new(pt, "commitment_table", tab);
      }
      json_object_set_new(pt, "hw_calibration",
                          json_string(s->hw_calibration[0] ? s->hw_calibration : "preset (no calibration file applied)"));
      json_array_append_new(points, pt);
      amoe_summary nat;
      memset(&nat, 0, sizeof nat);
      for (int i = 0; i < s->npolicies; i++)
        if (!strcmp(s->policies[i].label, "natural")) amoe_summarize(&rows[i].tot, s->offload.enabled, &nat);
      for (int i = 0; i < s->npolicies; i++) {
        const amoe_policy_row *r = &s->policies[i];
        amoe_summary m;
        amoe_summarize(&rows[i].tot, s->offload.enabled, &m);
        double sp = nat.tokens_per_s > 0 ? m.tokens_per_s / nat.tokens_per_s : 0;
        fprintf(fs.f,
                "%d%s,%s,%s,%s,%s,%s,%d,%.0f,%.0f,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,"
                "%.17g,%.17g,%.17g,%.17g,%.17g,%.17g",
                p, sv, s->model.name, s->hw.name, r->label, amoe_draft_table[r->draft].name,
                amoe_verifier_table[r->verifier].name, r->budget, rows[i].tot.blocks, rows[i].tot.committed,
                m.tau_mean, m.verified_nodes_mean, m.union_mean, m.eligible_mean, m.executed_mean,
                m.hbm_expert_bytes_per_token, m.h2d_bytes_per_token, m.cache_hit_rate, m.fetch_wait_share,
                m.time_per_token_s, m.tokens_per_s, sp, m.displaced_assignment_rate, m.delta_mean,
                m.deviated_token_rate);
        if (o.backend) {
          double B = rows[i].tot.blocks > 0 ? rows[i].tot.blocks : 1;
          fprintf(fs.f, ",%s,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g", o.backend, ex.predicted[i] / B,
                  ex.measured[i] / B, ex.predicted[i] > 0 ? ex.measured[i] / ex.predicted[i] : 0,
                  ex.fetch_predicted[i] / B, ex.fetch_measured[i] / B,
                  ex.fetch_measured[i] > 0 ? ex.fetch_bytes[i] / ex.fetch_measured[i] : 0);
        }
        fputc('\n', fs.f);
        printf("| %d | %s | %.3f | %.1f | %.2f | %.2f | %.2f | %.3f | %.1f | %.3f | %.4f |\n", p, r->label,
               m.tau_mean, m.verified_nodes_mean, m.union_mean, m.executed_mean, m.h2d_bytes_per_token / 1e6,
               m.cache_hit_rate, m.tokens_per_s, sp, m.deviated_token_rate);
        double B = rows[i].tot.blocks > 0 ? rows[i].tot.blocks : 1;
        for (int l = 0; l < s->model.moe_layers; l++) {
          const amoe_layer_totals *lt = &rows[i].layers[l];
          fprintf(fl.f, "%d%s,%s,%d,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g\n", p, sv, r->label, l,
                  lt->union_sum / B, lt->eligible_sum / B, lt->executed_sum / B,
                  s->offload.enabled ? (lt->requests > 0 ? lt->hits / lt->requests : 0) : 1.0, lt->fetched / B,
                  lt->fetched * amoe_model_expert_bytes(&s->model) / B, lt->t_moe / B, lt->t_fetch / B);
        }
        amoe_row_result_free(&rows[i]);
      }
      if (o.backend) {
        json_object_set_new(pt, "backend", json_string(o.backend));
        json_object_set_new(pt, "backend_layers_held", json_integer(amoe_moe_layers_held(ex.be)));
        json_object_set_new(pt, "backend_repeats", json_integer(ex.repeats));
        json_object_set_new(pt, "backend_note", json_string("bf16 expert weights at (hidden, moe_intermediate) "
                                                            "whatever the preset's weight format; measured = "
                                                            "median over repeats of the expert part of each layer"));
      }
    }
    amoe_moe_close(ex.be);
    free(ex.x);
    free(ex.y);
    free(ex.measured);
    free(ex.predicted);
    free(ex.layer_measured);
    free(ex.fetch_measured);
    free(ex.fetch_predicted);
    free(ex.fetch_bytes);
    amoe_source_close(src);
  }
  json_object_set_new(meta, "points", points);
  if (!st && !rc) {
    char *ytxt = NULL;
    size_t ylen = 0;
    FILE *mem = open_memstream(&ytxt, &ylen);
    if (mem) {
      amoe_spec_write_yaml(mem, x);
      fclose(mem);
      fwrite(ytxt, 1, ylen, fy.f);
      char hash[32];
      snprintf(hash, sizeof hash, "%016llx", (unsigned long long)amoe_trace_checksum(ytxt, ylen));
      json_object_set_new(meta, "spec_hash", json_string(hash)); /* of spec.resolved.yaml */
      free(ytxt);
    }
    char *txt = json_dumps(meta, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (txt) {
      fputs(txt, fm.f);
      fputc('\n', fm.f);
      free(txt);
    }
    st = amoe_afile_commit(&fs, &e);
    if (!st) st = amoe_afile_commit(&fl, &e);
    if (!st) st = amoe_afile_commit(&fb, &e);
    if (!st) st = amoe_afile_commit(&fd, &e);
    if (!st) st = amoe_afile_commit(&fy, &e);
    if (!st) st = amoe_afile_commit(&fm, &e);
    if (!st && !o.quiet) fprintf(stderr, "results in %s/\n", dir);
  }
  json_decref(meta);
  amoe_afile_abort(&fs);
  amoe_afile_abort(&fl);
  amoe_afile_abort(&fb);
  amoe_afile_abort(&fd);
  amoe_afile_abort(&fm);
  amoe_afile_abort(&fy);
  if (!rc) rc = report(st, &e);
out:
  free(x);
  free(s);
  return rc;
}

/* ------------------------------------------------------------ gen, import */

static amoe_status write_source(amoe_source *src, const amoe_model *m, const char *out, amoe_err *e) {
  size_t n = strlen(out);
  int jsonl = n > 6 && !strcmp(out + n - 6, ".jsonl");
  amoe_block b;
  amoe_block_init(&b, m->moe_layers, m->experts, amoe_source_m(src));
  amoe_status st = AMOE_OK;
  int rc;
  long count = 0;
  if (jsonl) {
    amoe_afile a;
    st = amoe_afile_open(&a, out, e);
    while (!st && (rc = amoe_source_next(src, &b, e)) != 0) {
      if (rc < 0) st = (amoe_status)-rc;
      else st = amoe_blocks_jsonl_write(a.f, &b, e), count++;
    }
    if (!st) st = amoe_afile_commit(&a, e);
    amoe_afile_abort(&a);
  } else {
    amoe_trace_writer *w;
    st = amoe_trace_create(&w, out, m->moe_layers, m->experts, m->top_k, amoe_source_m(src),
                           amoe_source_provenance(src), e);
    while (!st && (rc = amoe_source_next(src, &b, e)) != 0) {
      if (rc < 0) st = (amoe_status)-rc;
      else st = amoe_trace_write(w, &b, e), count++;
    }
    if (!st) st = amoe_trace_close(w, e);
    else if (w) amoe_trace_abort(w);
  }
  amoe_block_free(&b);
  if (!st) fprintf(stderr, "wrote %ld blocks to %s\n", count, out);
  return st;
}

static int cmd_gen(int argc, char **argv) {
  opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc;
  if (!o.out) return usage_error("gen needs -o FILE.amt%s", "");
  amoe_experiment *x = calloc(1, sizeof *x);
  amoe_spec *s = calloc(1, sizeof *s);
  if (!(rc = load_spec(&o, x)) && !(rc = spec_point(x, 0, s))) {
    amoe_err e = {{0}};
    amoe_source *src;
    amoe_status st = amoe_source_open(&src, &s->workload, &s->model, &e);
    if (!st) st = write_source(src, &s->model, o.out, &e);
    amoe_source_close(st ? NULL : src);
    rc = report(st, &e);
  }
  free(x);
  free(s);
  return rc;
}

/* A workload spec for a file given on the command line. */
static int file_source(const opts *o, amoe_spec *s, amoe_source **src, amoe_err *e) {
  amoe_spec_defaults(s);
  s->workload.blocks = 0; /* the whole file */
  snprintf(s->workload.path, sizeof s->workload.path, "%s", o->input);
  if (o->window) s->workload.window = o->window;
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
      return usage_error("%s is not an .amt trace: give --format blocks-jsonl|routing-jsonl and --model PRESET",
                         o->input);
    if (!strcmp(o->format, "blocks-jsonl")) s->workload.source = AMOE_SRC_BLOCKS_JSONL;
    else if (!strcmp(o->format, "routing-jsonl")) s->workload.source = AMOE_SRC_ROUTING_JSONL;
    else return usage_error("unknown --format '%s' (blocks-jsonl, routing-jsonl)", o->format);
    amoe_diag d = {0};
    int ok = amoe_spec_load_preset(s, 0, o->model, "--model", &d);
    amoe_diag_print(&d, stderr);
    amoe_diag_free(&d);
    if (!ok) return EXIT_USAGE;
  }
  amoe_status st = amoe_source_open(src, &s->workload, &s->model, e);
  return st ? report(st, e) : 0;
}

static int cmd_import(int argc, char **argv) {
  opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc;
  if (!o.input || !o.out || !o.format) return usage_error("import needs --format F IN --model PRESET -o OUT%s", "");
  amoe_spec *s = calloc(1, sizeof *s);
  amoe_source *src = NULL;
  amoe_err e = {{0}};
  if (!(rc = file_source(&o, s, &src, &e))) {
    fprintf(stderr, "%s\n", amoe_source_provenance(src));
    rc = report(write_source(src, &s->model, o.out, &e), &e);
    amoe_source_close(src);
  }
  free(s);
  return rc;
}

static int cmd_inspect(int argc, char **argv) {
  opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc;
  if (!o.input) return usage_error("inspect needs a file%s", "");
  amoe_spec *s = calloc(1, sizeof *s);
  amoe_experiment *x = calloc(1, sizeof *x);
  amoe_source *src = NULL;
  amoe_err e = {{0}};
  size_t n = strlen(o.input);
  int is_spec = (n > 5 && !strcmp(o.input + n - 5, ".yaml")) || (n > 4 && !strcmp(o.input + n - 4, ".yml"));
  if (is_spec) {
    if (!(rc = load_spec(&o, x)) && !(rc = spec_point(x, 0, s))) {
      amoe_status st = amoe_source_open(&src, &s->workload, &s->model, &e);
      rc = report(st, &e);
    }
  } else {
    rc = file_source(&o, s, &src, &e);
  }
  if (!rc) {
    amoe_inspect_stats st;
    amoe_status r = amoe_inspect(src, s->model.moe_layers, s->model.experts, s->model.top_k, &st, &e);
    if (!r) amoe_inspect_print(stdout, &st, o.input, o.json);
    rc = report(r, &e);
  }
  amoe_source_close(src);
  free(s);
  free(x);
  return rc;
}

static int cmd_calibrate(int argc, char **argv) {
  opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc;
  amoe_experiment *x = calloc(1, sizeof *x);
  amoe_spec *s = calloc(1, sizeof *s);
  if (!(rc = load_spec(&o, x)) && !(rc = spec_point(x, 0, s))) {
    amoe_err e = {{0}};
    amoe_commitment ph;
    char how[AMOE_PATH_MAX + 128];
    s->commitment.mode = AMOE_COMMIT_CALIBRATE;
    amoe_status st = commitment_for(s, 0, &ph, how, sizeof how, &e);
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
        for (int d = 0; d < ph.n; d++) fprintf(f, "%s%.6f", d ? ", " : "", ph.p[d]);
        fprintf(f, "]\n");
        if (o.out) st = amoe_afile_commit(&a, &e);
      }
      amoe_afile_abort(&a);
    }
    rc = report(st, &e);
  }
  free(x);
  free(s);
  return rc;
}

/* One expert-GEMM timing: X experts with n tokens each (one assignment per
 * token), median of `reps` runs after a warm-up. */
static amoe_status time_experts(amoe_moe_backend *be, int d, int X, int n, int reps, double *out, amoe_err *e) {
  int T = X * n;
  uint16_t *x = malloc((size_t)T * d * sizeof *x);
  int32_t *route = malloc((size_t)T * sizeof *route);
  float *w = malloc((size_t)T * sizeof *w), *y = malloc((size_t)T * d * sizeof *y);
  double t[32];
  amoe_status st = x && route && w && y ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  if (!st) {
    amoe_rng r;
    amoe_rng_seed(&r, 3, (uint64_t)X, (uint64_t)n);
    for (size_t i = 0; i < (size_t)T * d; i++) x[i] = amoe_f32_to_bf16((float)amoe_rng_normal(&r));
    for (int i = 0; i < T; i++) {
      route[i] = i % X;
      w[i] = 1;
    }
    amoe_moe_batch b = {T, 1, x, route, w};
    st = amoe_moe_run(be, 0, &b, y, &t[0], e);
    for (int i = 0; i < reps && !st; i++) st = amoe_moe_run(be, 0, &b, y, &t[i], e);
    if (!st) {
      qsort(t, (size_t)reps, sizeof(double), cmp_double);
      *out = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    }
  }
  free(x);
  free(route);
  free(w);
  free(y);
  return st;
}

/* calibrate-hw: measure, fit the cost model's coefficients, write them. */
static int cmd_calibrate_hw(int argc, char **argv) {
  opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc;
  amoe_experiment *x = calloc(1, sizeof *x);
  amoe_spec *s = calloc(1, sizeof *s);
  setenv("ACCEPTMOE_CALIBRATION", "off", 1); /* fit from the preset, not from an earlier fit */
  if ((rc = load_spec(&o, x)) || (rc = spec_point(x, 0, s))) goto out;
  amoe_err e = {{0}};
  double d2d = 0, h2d = 0;
  char gpu[256] = "";
  amoe_status st = amoe_moe_measure_copy(1 << 30, 5, &d2d, &h2d, gpu, sizeof gpu, &e);
  amoe_moe_backend *be = NULL;
  const char *bname = o.backend ? o.backend : "skinny";
  amoe_moe_shape shape = {s->model.hidden, s->model.moe_intermediate, s->model.experts};
  if (!st) st = amoe_moe_open(&be, bname, shape, 1, 1, &e);
  const int ns[] = {1, 2, 4, 8, 16, 32, 64}, NN = 7, X = shape.experts < 32 ? shape.experts : 32;
  double t1[7], tx[7], per[7];
  for (int i = 0; i < NN && !st; i++) {
    st = time_experts(be, shape.hidden, 1, ns[i], 9, &t1[i], &e);
    if (!st) st = time_experts(be, shape.hidden, X, ns[i], 9, &tx[i], &e);
  }
  amoe_moe_close(be);
  if (st) {
    rc = report(st, &e);
    goto out;
  }
  /* t(X, n) = launch + X·c(n): c from the slope, launch from the intercept */
  double bytes = 3.0 * shape.hidden * shape.inter * 2.0, launch[7], peak = 0;
  for (int i = 0; i < NN; i++) {
    per[i] = (tx[i] - t1[i]) / (X - 1);
    launch[i] = t1[i] - per[i];
    double fl = 6.0 * shape.hidden * shape.inter * ns[i] / per[i];
    if (fl > peak) peak = fl;
  }
  qsort(launch, NN, sizeof(double), cmp_double);
  double hbm = bytes / per[0];
  char path[AMOE_PATH_MAX + 64];
  if (o.out) snprintf(path, sizeof path, "%s", o.out);
  else snprintf(path, sizeof path, "results/calibration/%s.yaml", s->hw.name);
  amoe_err me;
  if (!o.out) amoe_mkdirs("results/calibration", &me);
  amoe_afile a;
  st = amoe_afile_open(&a, path, &e);
  if (!st) {
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    fprintf(a.f, "# Measured by `acceptmoe calibrate-hw` on %s, %s, backend %s,\n", gpu, date, bname);
    fprintf(a.f, "# expert shape d=%d f=%d (model %s). Overrides workloads/hw/%s.yaml.\n", shape.hidden, shape.inter,
            s->model.name, s->hw.name);
    fprintf(a.f, "# hbm_bw: bytes of one expert / its marginal time at 1 token (what the cost model charges);\n");
    fprintf(a.f, "# peak_flops: best 6·d·f·n / marginal time over n; launch_s: median intercept.\n");
    fprintf(a.f, "hbm_bw: %.6g\nh2d_bw: %.6g\npeak_flops: %.6g\nlaunch_s: %.6g\n", hbm, h2d, peak, launch[NN / 2]);
    fprintf(a.f, "measured:\n  gpu: \"%s\"\n  date: \"%s\"\n  device_copy_bw: %.6g\n  pinned_h2d_bw: %.6g\n", gpu, date, d2d,
            h2d);
    fprintf(a.f, "  expert_time_s:  # tokens per expert: [1 expert, %d experts]\n", X);
    for (int i = 0; i < NN; i++) fprintf(a.f, "    %d: [%.6g, %.6g]\n", ns[i], t1[i], tx[i]);
    st = amoe_afile_commit(&a, &e);
  }
  amoe_afile_abort(&a);
  if (!st)
    fprintf(stderr, "%s: device copy %.3g B/s, pinned H2D %.3g B/s, expert streaming %.3g B/s (%.0f%% of copy), "
                    "peak %.3g FLOP/s, launch %.3g s -> %s\n",
            gpu, d2d, h2d, hbm, 100 * hbm / d2d, peak, launch[NN / 2], path);
  rc = report(st, &e);
out:
  free(x);
  free(s);
  return rc;
}

static int cmd_presets(void) {
  const char *kinds[2] = {"models", "hw"};
  for (int k = 0; k < 2; k++) {
    char dir[AMOE_PATH_MAX], cmd[AMOE_PATH_MAX + 64];
    amoe_presets_dir(dir, sizeof dir, kinds[k], NULL);
    printf("%s (%s):\n", kinds[k], dir);
    snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null | sed -n 's/\\.yaml$//p' | sed 's/^/  /'", dir);
    fflush(stdout);
    if (system(cmd) != 0) return EXIT_RUNTIME;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    fputs(USAGE, argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("acceptmoe %s (%s)\n", AMOE_VERSION, AMOE_GIT);
    return 0;
  }
  const char *c = argv[1];
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(USAGE, stdout);
      return 0;
    }
  if (!strcmp(c, "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(c, "gen")) return cmd_gen(argc - 2, argv + 2);
  if (!strcmp(c, "import")) return cmd_import(argc - 2, argv + 2);
  if (!strcmp(c, "inspect")) return cmd_inspect(argc - 2, argv + 2);
  if (!strcmp(c, "calibrate")) return cmd_calibrate(argc - 2, argv + 2);
  if (!strcmp(c, "presets")) return cmd_presets();
  if (!strcmp(c, "calibrate-hw")) return cmd_calibrate_hw(argc - 2, argv + 2);
  return usage_error("unknown command '%s'", c);
}
