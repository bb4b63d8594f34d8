#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *g_command, *g_options;

void cli_set_command(const char *name, const char *options) { g_command = name, g_options = options; }

int cli_usage_error(const char *fmt, const char *arg) {
  if (g_command) fprintf(stderr, "acceptmoe %s: ", g_command);
  else fprintf(stderr, "acceptmoe: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see acceptmoe --help)\n");
  return CLI_EXIT_USAGE;
}

/* SIGINT and SIGTERM only raise amoe_interrupt (err.h): every long loop
 * polls it, stops, removes its temporary files and leaves what was there
 * before; main then exits 130 (128 + SIGINT). */
int cli_interrupted(void *ctx) {
  (void)ctx;
  return amoe_interrupt != 0;
}

int cli_report(amoe_status st, const amoe_err *e) {
  if (st == AMOE_OK) return 0;
  if (st == AMOE_EINTR) {
    fprintf(stderr, "acceptmoe: interrupted; no results were written (earlier ones are left as they were)\n");
    return 130;
  }
  fprintf(stderr, "acceptmoe: %s\n", e->msg);
  /* bad input (a value, a file's contents) exits 2; everything else 1 */
  return st == AMOE_EINVAL || st == AMOE_EFORMAT ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME;
}

/* ------------------------------------------------------------ options */

/* Generator threads: --threads, else the online processors (at most 8).
 * Results do not depend on it. */
static int cli_threads;


/* Whether the running command's row lists option `a`. */
static int option_allowed(const char *a) {
  if (!g_options) return 1;
  const size_t n = strlen(a);
  for (const char *p = g_options; (p = strstr(p, a)); p += n)
    if ((p == g_options || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
  return 0;
}

int cli_parse(int argc, char **argv, cli_opts *o) {
  memset(o, 0, sizeof *o);
  o->shard_n = 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : NULL)
    if (a[0] == '-' && a[1] && !option_allowed(strncmp(a, "--set=", 6) ? a : "--set"))
      return cli_usage_error("%s is not an option of this command", a);
    if (!strcmp(a, "--set")) {
      const char *v = NEXT();
      if (!v) return cli_usage_error("--set needs KEY=VALUE%s", "");
      if (o->nset == 64) return cli_usage_error("too many --set options%s", "");
      o->sets[o->nset++] = (char *)v;
    } else if (!strncmp(a, "--set=", 6)) {
      if (o->nset == 64) return cli_usage_error("too many --set options%s", "");
      o->sets[o->nset++] = (char *)a + 6;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
      if (!(o->out = NEXT())) return cli_usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--dump-selection")) {
      if (!(o->dump = NEXT())) return cli_usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--format")) {
      if (!(o->format = NEXT())) return cli_usage_error("%s needs a name", a);
    } else if (!strcmp(a, "--model")) {
      if (!(o->model = NEXT())) return cli_usage_error("%s needs a preset name", a);
    } else if (!strcmp(a, "--window")) {
      const char *v = NEXT();
      if (!v || (o->window = atoi(v)) < 1) return cli_usage_error("--window needs a positive integer%s", "");
    } else if (!strcmp(a, "--backend")) {
      if (!(o->backend = NEXT())) return cli_usage_error("%s needs a name (cpu, cublas-loop, cublas-grouped, skinny)", a);
    } else if (!strcmp(a, "--compute-backend")) {
      if (!(o->compute = NEXT())) return cli_usage_error("%s needs a name (cublas-loop, cublas-grouped, skinny)", a);
    } else if (!strcmp(a, "--repeats")) {
      const char *v = NEXT();
      if (!v || (o->repeats = atoi(v)) < 1) return cli_usage_error("--repeats needs a positive integer%s", "");
    } else if (!strcmp(a, "--threads")) {
      const char *v = NEXT();
      if (!v || (o->threads = atoi(v)) < 1 || o->threads > 256)
        return cli_usage_error("--threads needs an integer in 1..256%s", "");
    } else if (!strcmp(a, "--target")) {
      if (!(o->target = NEXT())) return cli_usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--only")) {
      if (!(o->only = NEXT())) return cli_usage_error("%s needs ID,ID,...", a);
    } else if (!strcmp(a, "--csv")) {
      if (!(o->csv = NEXT())) return cli_usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--cells")) {
      if (!(o->cells = NEXT())) return cli_usage_error("%s needs a cell file (CSV)", a);
    } else if (!strcmp(a, "--calibrated")) {
      o->calibrated = 1;
    } else if (!strcmp(a, "--curves")) {
      if (!(o->curves = NEXT())) return cli_usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--trace")) {
      if (!(o->trace = NEXT())) return cli_usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--shard")) {
      const char *v = NEXT();
      char tail = 0;
      if (!v || sscanf(v, "%d/%d%c", &o->shard_i, &o->shard_n, &tail) != 2 || o->shard_n < 1 ||
          o->shard_n > 100000 || o->shard_i < 0 || o->shard_i >= o->shard_n)
        return cli_usage_error("--shard needs I/N with 0 <= I < N%s", "");
    } else if (!strcmp(a, "--blocks")) {
      const char *v = NEXT();
      if (!v || (o->blocks = atoi(v)) < 10 || o->blocks > 1000000)
        return cli_usage_error("--blocks needs an integer in 10..1000000%s", "");
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
      return cli_usage_error("unknown option '%s'", a);
    } else if (!o->input) {
      o->input = a;
    } else {
      return cli_usage_error("unexpected argument '%s'", a);
    }
#undef NEXT
  }
  cli_threads = o->threads;
  return 0;
}

int cli_load_spec(const cli_opts *o, amoe_experiment *x) {
  if (!o->input) return cli_usage_error("this command needs a spec file%s", "");
  amoe_diag d = {0};
  int ok = amoe_experiment_load(x, o->input, o->sets, o->nset, &d) == AMOE_OK;
  amoe_diag_print(&d, stderr);
  amoe_diag_free(&d);
  return ok ? 0 : CLI_EXIT_USAGE;
}

int cli_spec_point(const amoe_experiment *x, int i, amoe_spec *s) {
  amoe_diag d = {0};
  int ok = amoe_experiment_point(x, i, s, &d) == AMOE_OK;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  s->workload.threads = cli_threads ? cli_threads : (int)(n < 1 ? 1 : n > 8 ? 8 : n);
  amoe_diag_print(&d, stderr);
  amoe_diag_free(&d);
  return ok ? 0 : CLI_EXIT_USAGE;
}

/* What the commands that read a spec start with: the options, the
 * experiment and one resolved point (point < 0: none yet), allocated and
 * checked; and end with (cli_end). Returns an exit status, 0 to go on. */
int cli_begin(cli_command *c, int argc, char **argv, int point) {
  memset(c, 0, sizeof *c);
  int rc = cli_parse(argc, argv, &c->o);
  if (rc) return rc;
  c->x = calloc(1, sizeof *c->x);
  c->s = calloc(1, sizeof *c->s);
  if (!c->x || !c->s) {
    amoe_err e;
    return cli_report(amoe_fail(&e, AMOE_ENOMEM, "out of memory for the spec"), &e);
  }
  if (point < 0) return 0;
  if ((rc = cli_load_spec(&c->o, c->x))) return rc;
  return cli_spec_point(c->x, point, c->s);
}
void cli_end(cli_command *c) {
  free(c->x);
  free(c->s);
}


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
cli_progress cli_progress_start(int quiet) {
  cli_progress p = {!quiet && isatty(2), now_s(), 0};
  return p;
}
/* 1 when a line is due (then *rate is blocks per second so far). */
int cli_progress_due(cli_progress *p, double blocks, double *rate) {
  if (!p->on) return 0;
  double t = now_s();
  if (t - p->t0 < 1.0 || t - p->last < 0.2) return 0;
  p->last = t;
  *rate = blocks / (t - p->t0);
  return 1;
}
void cli_progress_blocks(cli_progress *p, long blocks, const char *what) {
  double rate;
  if (cli_progress_due(p, (double)blocks, &rate)) fprintf(stderr, "\r%s: %ld blocks, %.0f blocks/s   ", what, blocks, rate);
}
void cli_progress_end(cli_progress *p) {
  if (p->on && p->last > 0) fputc('\n', stderr);
}
