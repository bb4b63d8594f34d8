/* The command line's plumbing, shared by the commands of main.c: options,
 * the spec of a command, exit statuses, the progress line, and a run's
 * sweep points into its results (cli_run.c). Commands return exit
 * statuses: 0 ok, 1 runtime error, 2 bad spec or usage, 130 interrupted. */
#ifndef AMOE_CLI_H
#define AMOE_CLI_H

#include <stdio.h>

#include "err.h"
#include "results.h"
#include "source.h"
#include "spec_load.h"

#define CLI_EXIT_RUNTIME 1
#define CLI_EXIT_USAGE 2

/* The running command's name and the options its row lists (cli_parse
 * refuses the rest; NULL: any). */
void cli_set_command(const char *name, const char *options);
/* "acceptmoe CMD: " fmt (one %s: arg) and a pointer to --help on stderr;
 * returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, const char *arg);
/* A status as an exit status, its message on stderr (bad input 2, an
 * interruption 130, else 1). */
int cli_report(amoe_status st, const amoe_err *e);
/* 1 once SIGINT or SIGTERM raised amoe_interrupt (the run loop's poll). */
int cli_interrupted(void *ctx);

/* Every option any command takes; a command reads its own. */
typedef struct {
  const char *out, *dump, *format, *model, *input, *backend, *compute, *target, *trace, *only, *csv, *curves, *cells;
  char *sets[64];
  int nset, blocks_csv, quiet, json, markdown, window, repeats, profile, cold, threads, hybrid, blocks, keep_drift, keep_noise, calibrated;
  int shard_i, shard_n; /* run --shard I/N: the sweep points p with p mod N = I */
} cli_opts;
int cli_parse(int argc, char **argv, cli_opts *o);
/* The spec of o->input with its --set values; the messages on stderr. */
int cli_load_spec(const cli_opts *o, amoe_experiment *x);
/* Sweep point i of x into s, with the generator threads of --threads. */
int cli_spec_point(const amoe_experiment *x, int i, amoe_spec *s);

/* What the commands that read a spec start with: the options, the
 * experiment and one resolved point (point < 0: none yet), allocated and
 * checked; and end with (cli_end). Returns an exit status, 0 to go on. */
typedef struct {
  cli_opts o;
  amoe_experiment *x;
  amoe_spec *s;
} cli_command;
int cli_begin(cli_command *c, int argc, char **argv, int point);
void cli_end(cli_command *c);

/* One progress line on a terminal (stderr), at most five times a second,
 * after the first second; nothing when stderr is not a terminal or with
 * --quiet. */
typedef struct {
  int on;
  double t0, last;
} cli_progress;
cli_progress cli_progress_start(int quiet);
/* 1 when a line is due (then *rate is blocks per second so far). */
int cli_progress_due(cli_progress *p, double blocks, double *rate);
void cli_progress_blocks(cli_progress *p, long blocks, const char *what);
void cli_progress_end(cli_progress *p);

/* Every sweep point of x this shard (o->shard_i of o->shard_n) runs: per
 * point the offline preparation (sim/engine/prepare.h), the workload, a
 * backend (o->backend), the run loop and its rows, into the results ro
 * opens, committed when all ran. *rc: a point's exit status (its messages
 * printed), 0 when every point resolved. */
amoe_status cli_run_points(const cli_opts *o, const amoe_experiment *x, amoe_spec *s, const amoe_results_opts *ro,
                           int *rc, amoe_err *e);

/* The source kind a --format names, or -1. */
int cli_source_of_format(const char *format);
/* o->input as a source: an .amt trace as it is, else a file of o->format read
 * as o->model (with --window, --hybrid); s takes its model and workload.
 * Returns an exit status (its message printed), 0 with *src open. */
int cli_file_source(const cli_opts *o, amoe_spec *s, amoe_source **src, amoe_err *e);
/* Every block of src into out: an .amt trace, or blocks-jsonl where out ends
 * in .jsonl; written atomically, with the progress line. */
amoe_status cli_write_source(amoe_source *src, const amoe_model *m, const char *out, int quiet, amoe_err *e);

#endif
