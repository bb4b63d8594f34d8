/* acceptmoe: a cost simulator for MoE speculative decoding.
 *   build:  cmake -B build && cmake --build build -j
 *   run:    build/acceptmoe run workloads/specs/quickstart.yaml
 * Commands return statuses; only main() turns them into exit codes:
 * 0 ok, 1 runtime error, 2 bad spec or usage, 130 interrupted. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cells.h"
#include "cli.h"
#include "exec.h"
#include "fit.h"
#include "inspect.h"
#include "listing.h"
#include "merge.h"
#include "moe.h"
#include "prepare.h"
#include "trace.h"

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

/* SIGINT and SIGTERM only raise amoe_interrupt (err.h): every long loop
 * polls it, stops, removes its temporary files and leaves what was there
 * before; main then exits 130 (128 + SIGINT). */
static void on_signal(int sig) { amoe_interrupt = sig; }

static int cmd_run(int argc, char **argv) {
  cli_command c;
  int rc = cli_begin(&c, argc, argv, -1);
  const cli_opts o = c.o;
  amoe_experiment *x = c.x;
  amoe_spec *s = c.s;
  if (rc || (rc = cli_load_spec(&o, x))) goto out;
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
  const amoe_status st = cli_run_points(&o, x, s, &ro, &rc, &e);
  if (!st && !rc && !o.quiet) fprintf(stderr, "results in %s/\n", dir);
  if (!rc) rc = cli_report(st, &e);
out:
  cli_end(&c);
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
    cli_opts o;
    memset(&o, 0, sizeof o);
    o.quiet = 1;
    o.shard_n = 1;
    const amoe_results_opts ro = {out_dir, x, spec, NULL, 0, NULL, 0, 1, NULL};
    int rc = 0;
    st = cli_run_points(&o, x, s, &ro, &rc, e);
    if (!st && rc) st = amoe_fail(e, AMOE_EINVAL, "%s: the spec's point does not resolve (its errors above)", spec);
  }
  free(x);
  free(s);
  return st;
}

static int cmd_cells(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse(argc, argv, &o);
  if (rc) return rc;
  if (!o.input) return cli_usage_error("cells needs a cell file (CSV; docs/spec.md \"Serving cells\")%s", "");
  const amoe_cells_opts co = {o.input, o.only, o.csv, o.curves, o.out, o.quiet, o.calibrated, stdout, cells_run, NULL};
  amoe_err e = {{0}};
  return cli_report(amoe_cells(&co, &e), &e);
}

/* fit --cells: each deployment's residual terms from its speculation-off
 * cells, a deployment preset each (docs/design.md §20). */
static int cmd_fit_cells(const cli_opts *o) {
  if (o->input) return cli_usage_error("fit --cells takes no spec (the cells name their deployments): '%s'", o->input);
  if (o->target || o->trace || o->nset || o->blocks || o->keep_drift || o->keep_noise)
    return cli_usage_error("fit --cells takes --only, --curves, -o DIR and --quiet%s", "");
  const char *dir = o->out ? o->out : "workloads/deployments";
  const amoe_cells_opts co = {o->cells, o->only, NULL, o->curves, NULL, o->quiet, 0, stdout, cells_run, NULL};
  amoe_err e = {{0}};
  return cli_report(amoe_cells_fit(&co, dir, &e), &e);
}

/* ------------------------------------------------------------ gen, import */

static int cmd_gen(int argc, char **argv) {
  cli_command c;
  int rc = cli_begin(&c, argc, argv, -1);
  if (!rc && !c.o.out) rc = cli_usage_error("gen needs -o FILE.amt%s", "");
  if (!rc && !(rc = cli_load_spec(&c.o, c.x)) && !(rc = cli_spec_point(c.x, 0, c.s))) {
    amoe_err e = {{0}};
    amoe_source *src;
    amoe_status st = amoe_source_open(&src, &c.s->workload, &c.s->model, &e);
    if (!st) st = cli_write_source(src, &c.s->model, c.o.out, c.o.quiet, &e);
    amoe_source_close(st ? NULL : src);
    rc = cli_report(st, &e);
  }
  cli_end(&c);
  return rc;
}

static int cmd_import(int argc, char **argv) {
  cli_command c;
  int rc = cli_begin(&c, argc, argv, -1);
  const cli_opts o = c.o;
  if (!rc && (!o.input || !o.out || !o.format))
    rc = cli_usage_error("import needs --format F IN --model PRESET -o OUT%s", "");
  amoe_source *src = NULL;
  amoe_err e = {{0}};
  if (!rc && !(rc = cli_file_source(&o, c.s, &src, &e))) {
    fprintf(stderr, "%s\n", amoe_source_provenance(src));
    rc = cli_report(cli_write_source(src, &c.s->model, o.out, o.quiet, &e), &e);
    amoe_source_close(src);
  }
  cli_end(&c);
  return rc;
}

static int cmd_inspect(int argc, char **argv) {
  cli_command c;
  int rc = cli_begin(&c, argc, argv, -1);
  const cli_opts o = c.o;
  amoe_spec *s = c.s;
  amoe_experiment *x = c.x;
  if (!rc && !o.input) rc = cli_usage_error("inspect needs a file%s", "");
  if (rc) {
    cli_end(&c);
    return rc;
  }
  amoe_source *src = NULL;
  amoe_err e = {{0}};
  size_t n = strlen(o.input);
  int is_spec = (n > 5 && !strcmp(o.input + n - 5, ".yaml")) || (n > 4 && !strcmp(o.input + n - 4, ".yml"));
  if (is_spec) {
    if (!(rc = cli_load_spec(&o, x)) && !(rc = cli_spec_point(x, 0, s))) {
      /* a generated workload stores every logit here, so that the score
       * shape is the full softmax's (no selection depends on m) */
      if (s->workload.source == AMOE_SRC_SYNTHETIC && amoe_experiment_auto(x, "workload.top_m")) s->workload.top_m = s->model.experts;
      amoe_status st = amoe_source_open(&src, &s->workload, &s->model, &e);
      rc = cli_report(st, &e);
    }
  } else {
    rc = cli_file_source(&o, s, &src, &e);
    if (!rc && !o.json) fprintf(stderr, "%s\n", amoe_source_provenance(src)); /* says what a reader dropped */
  }
  if (!rc) {
    amoe_inspect_stats st;
    amoe_status r = amoe_inspect(src, s->model.moe_layers, s->model.experts, s->model.top_k, s->model.router, &st, &e);
    if (!r) amoe_inspect_print(stdout, &st, o.input, o.json);
    rc = cli_report(r, &e);
  }
  amoe_source_close(src);
  cli_end(&c);
  return rc;
}

static int cmd_merge(int argc, char **argv) {
  char *dirs[4096];
  int n = 0;
  const char *out = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--out") || !strcmp(argv[i], "-o")) {
      if (i + 1 >= argc) return cli_usage_error("%s needs a directory", argv[i]);
      out = argv[++i];
    } else if (argv[i][0] == '-') {
      return cli_usage_error("unknown option '%s'", argv[i]);
    } else if (n < 4096) {
      dirs[n++] = argv[i];
    } else {
      return cli_usage_error("at most 4096 partial results%s", "");
    }
  }
  if (!out || n < 1) return cli_usage_error("merge needs DIR... --out DIR%s", "");
  amoe_err e = {{0}};
  return cli_report(amoe_merge(dirs, n, out, &e), &e);
}

static int cmd_fit(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--cells")) {
      cli_opts o;
      const int rc = cli_parse(argc, argv, &o);
      return rc ? rc : cmd_fit_cells(&o);
    }
  cli_command c;
  int rc = cli_begin(&c, argc, argv, -1);
  const cli_opts o = c.o;
  amoe_experiment *x = c.x;
  amoe_spec *s = c.s;
  if (!rc && !o.target == !o.trace) rc = cli_usage_error("fit needs one of --target TARGETS.yaml or --trace FILE%s", "");
  amoe_fit_targets *t = calloc(1, sizeof *t);
  amoe_inspect_stats *ts = calloc(1, sizeof *ts);
  amoe_err e = {{0}};
  char how[AMOE_PATH_MAX + 64];
  if (!rc && (!t || !ts)) rc = cli_report(amoe_fail(&e, AMOE_ENOMEM, "out of memory"), &e);
  if (!rc && !(rc = cli_load_spec(&o, x)) && !(rc = cli_spec_point(x, 0, s))) {
    if (o.target) {
      amoe_diag d = {0};
      if (!amoe_fit_targets_load(t, o.target, &d)) rc = CLI_EXIT_USAGE;
      amoe_diag_print(&d, stderr);
      amoe_diag_free(&d);
      snprintf(how, sizeof how, "--target %s", o.target);
    } else { /* the trace's own statistics, read as the spec's model */
      amoe_workload_spec w = s->workload;
      snprintf(w.path, sizeof w.path, "%s", o.trace);
      w.blocks = 0;
      if (o.window) w.window = o.window;
      const int kind = cli_source_of_format(o.format);
      if (amoe_trace_sniff(o.trace)) w.source = AMOE_SRC_TRACE;
      else if (kind >= 0) w.source = kind;
      else
        rc = cli_usage_error("%s is not an .amt trace: give --format blocks-jsonl|routing-jsonl|routing-safetensors", o.trace);
      amoe_source *src = NULL;
      amoe_status st = rc ? AMOE_OK : amoe_source_open(&src, &w, &s->model, &e);
      if (!rc && !st)
        st = amoe_inspect(src, s->model.moe_layers, s->model.experts, s->model.top_k, s->model.router, ts, &e);
      amoe_source_close(src);
      if (!rc) rc = cli_report(st, &e);
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
    rc = cli_report(st, &e);
  }
  free(ts);
  free(t);
  cli_end(&c);
  return rc;
}

static int cmd_calibrate(int argc, char **argv) {
  cli_command c;
  int rc = cli_begin(&c, argc, argv, 0);
  if (!rc) {
    amoe_err e = {{0}};
    amoe_offline offline;
    char how[AMOE_PATH_MAX + 128];
    c.s->commitment.mode = AMOE_COMMIT_CALIBRATE;
    amoe_status st = amoe_commitment_estimate(c.s, 0, &offline, how, sizeof how, &e);
    if (!st) st = amoe_results_commitment(c.o.out, c.s, how, &offline, &e);
    rc = cli_report(st, &e);
  }
  cli_end(&c);
  return rc;
}

/* costtable: the profiled step-time table (§18) as plain JSON, for an
 * engine's scheduler to load beside its own (docs/spec.md). */
static int cmd_costtable(int argc, char **argv) {
  cli_command c;
  int rc = cli_begin(&c, argc, argv, 0);
  if (!rc) {
    amoe_err e = {{0}};
    amoe_step_table *t = malloc(sizeof *t);
    amoe_status st = t ? amoe_step_table_build(c.s, t, &e) : amoe_fail(&e, AMOE_ENOMEM, "out of memory");
    if (!st) st = amoe_results_costtable(c.o.out, c.o.input, c.s, t, &e);
    free(t);
    rc = cli_report(st, &e);
  }
  cli_end(&c);
  return rc;
}

/* calibrate-hw: measure, fit the cost model's coefficients, write them. */
static int cmd_calibrate_hw(int argc, char **argv) {
  setenv("ACCEPTMOE_CALIBRATION", "off", 1); /* fit from the preset, not from an earlier fit */
  cli_command c;
  int rc = cli_begin(&c, argc, argv, 0);
  const cli_opts o = c.o;
  amoe_spec *s = c.s;
  if (!rc) {
    char path[AMOE_PATH_MAX + 64];
    amoe_err e = {{0}};
    amoe_status st = AMOE_OK;
    if (o.out) {
      snprintf(path, sizeof path, "%s", o.out);
      char dir[sizeof path];
      snprintf(dir, sizeof dir, "%s", path);
      char *slash = strrchr(dir, '/');
      if (slash && slash != dir) { /* its folder before the minutes of measuring, not after */
        *slash = 0;
        st = amoe_mkdirs(dir, &e);
      }
    } else {
      snprintf(path, sizeof path, "results/calibration/%s.yaml", s->hw.name);
      st = amoe_mkdirs("results/calibration", &e);
    }
    const char *b = o.backend ? o.backend : amoe_moe_backend_for(AMOE_MOE_STREAMING);
    if (!st) st = amoe_exec_calibrate_hw(s, b, o.compute ? o.compute : b, path, &e);
    rc = cli_report(st, &e);
  }
  cli_end(&c);
  return rc;
}

static int cmd_presets(int argc, char **argv) {
  (void)argc, (void)argv;
  amoe_err e = {{0}};
  return cli_report(amoe_list_presets(stdout, &e), &e);
}

/* Every draft and verifier row with its parameters and what it does; --markdown:
 * the table README.md and docs/spec.md carry (scripts/docs-generated.sh). */
static int cmd_policies(int argc, char **argv) {
  cli_opts o;
  if (cli_parse(argc, argv, &o)) return CLI_EXIT_USAGE;
  amoe_list_policies(stdout, o.markdown);
  return 0;
}

static int cmd_keys(int argc, char **argv) {
  cli_opts o;
  if (cli_parse(argc, argv, &o)) return CLI_EXIT_USAGE;
  amoe_spec_list_keys(stdout, o.markdown);
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
     "               [--blocks N] [--keep-drift] [--keep-noise] [--set KEY=VALUE]... [-o FILE]\n"
     "  fit --cells CELLS.csv [--only ID,...] [--curves CURVES.csv] [-o DIR] [--quiet]",
     "fit the spec's model's routing structure (locality per layer, request\n"
     "concentration and its drift, popularity, score shape, the draft tree's own\n"
     "concentration) to target statistics or to a real trace's; prints achieved vs\n"
     "target and the `routing:` section for the model preset.\n"
     "--keep-drift keeps the model's drift_tokens instead of fitting it to\n"
     "reuse_within_8 (which reruns every round at each of 8 drift trials);\n"
     "--keep-noise keeps its noise instead of setting it by its rule.\n"
     "--cells: calibrate each deployment of the cell file (docs/spec.md\n"
     "\"Serving cells\") to its speculation-off rows alone: per-pass host time\n"
     "(hardware.step_s), per-request scheduler cost (engine.request_s) and one\n"
     "device efficiency (engine.efficiency), each drawn weakly to its preset's\n"
     "value; prints the terms and each deployment's error before and after, and\n"
     "writes a deployment preset per deployment into DIR (default\n"
     "workloads/deployments), which a spec names as `deployment: NAME`",
     "--target --trace --format --window --blocks --keep-drift --keep-noise --set --out -o --quiet -q --threads "
     "--cells --only --curves"},
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
     "from --backend (default skinny) and an expert's per-token rate\n"
     "(moe_flops) from --compute-backend (default: the same kernel, so that\n"
     "the fit describes what a run with --backend measures); write\n"
     "results/calibration/<hw>.yaml\n"
     "(used by later runs; ACCEPTMOE_CALIBRATION=off ignores it)",
     "--set --backend --compute-backend --out -o"},
    {"cells", cmd_cells,
     "CELLS.csv [--only ID,...] [--calibrated] [--csv OUT.csv] [--curves CURVES.csv] [--out DIR] [--quiet]",
     "run every serving cell of the file (docs/spec.md \"Serving cells\") once\n"
     "per deployment, load and draft, and print each row's prediction, its\n"
     "measurement and the signed error, the MAPE per metric and per source,\n"
     "and for each deployment and load with speculation off and on the\n"
     "measured and predicted ratio of on to off. A row that cannot run is\n"
     "listed with its reason. --csv writes id,predicted,measured,error,status;\n"
     "--curves: acceptance curves for rows without an al (default: the\n"
     "acceptance_curves.csv beside the file); --out keeps each run's files.\n"
     "--calibrated: also each deployment calibrated first to its speculation-off\n"
     "rows (as fit --cells does), every row of it predicted again, and the\n"
     "errors and on/off ratios both ways (presets alone; calibrated); --csv\n"
     "gains calibrated,calibrated_error",
     "--only --calibrated --csv --curves --out -o --quiet -q"},
    {"presets", cmd_presets, "", "list model, hardware, interconnect and engine presets", ""},
    {"keys", cmd_keys, "[--markdown]", "list every spec key with its type, range and what it is (--markdown: as\n"
     "docs/spec.md's key list)", "--markdown"},
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
    return argc < 2 ? CLI_EXIT_USAGE : 0;
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
      cli_set_command(c, COMMANDS[i].options);
      if (!COMMANDS[i].options[0] && argc > 2) return cli_usage_error("takes no arguments ('%s')", argv[2]);
      return COMMANDS[i].run(argc - 2, argv + 2);
    }
  return cli_usage_error("unknown command '%s'", c);
}
