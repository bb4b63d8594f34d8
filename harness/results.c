#include "results.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cost.h"
#include "exec.h"
#include "policy.h"
#include "trace.h"

/* ------------------------------------------------------------ a run's files */

struct amoe_results {
  amoe_results_opts o;
  amoe_afile summary, layers, blocks, dump, meta, resolved, requests;
  json_t *meta_json, *points;
  int point, rows_written;
  const amoe_spec *s;
  char sweepvals[1024]; /* ",v1,v2" of the current point */
};

/* A CSV column: its name and where its value lives in a row struct. */
typedef struct {
  const char *name;
  char kind; /* s: const char *, i: int, n: a count as %.0f, g: a double as %.17g */
  size_t off;
} col;

static void header(FILE *f, const amoe_experiment *x, const col *c, int n) {
  fputs("point", f);
  for (int i = 0; i < x->nsweep; i++) fprintf(f, ",%s", x->sweep[i].key);
  for (int i = 0; i < n; i++) fprintf(f, ",%s", c[i].name);
}

static void values(FILE *f, const void *row, const col *c, int n) {
  const char *b = row;
  for (int i = 0; i < n; i++) switch (c[i].kind) {
    case 's': fprintf(f, ",%s", *(const char *const *)(b + c[i].off)); break;
    case 'i': fprintf(f, ",%d", *(const int *)(b + c[i].off)); break;
    case 'n': fprintf(f, ",%.0f", *(const double *)(b + c[i].off)); break;
    default: fprintf(f, ",%.17g", *(const double *)(b + c[i].off)); break;
    }
}

/* summary.csv: one row per (point, policy). */
typedef struct {
  const char *model, *hw, *policy, *draft, *verifier;
  int budget;
  double blocks, passes, committed;
  amoe_summary m;
  double speedup;
  const char *backend;
  amoe_exec_row x;
} summary_row;

#define SR(f, k) k, offsetof(summary_row, f)
static const col SUMMARY[] = {
    {"model", SR(model, 's')},
    {"hw", SR(hw, 's')},
    {"policy", SR(policy, 's')},
    {"draft_policy", SR(draft, 's')},
    {"verifier_policy", SR(verifier, 's')},
    {"budget", SR(budget, 'i')},
    {"blocks", SR(blocks, 'n')},
    {"forward_passes", SR(passes, 'n')},
    {"committed_tokens", SR(committed, 'n')},
    {"tau_mean", SR(m.tau_mean, 'g')},
    {"verified_nodes_mean", SR(m.verified_nodes_mean, 'g')},
    {"union_mean", SR(m.union_mean, 'g')},
    {"eligible_mean", SR(m.eligible_mean, 'g')},
    {"executed_mean", SR(m.executed_mean, 'g')},
    {"executed_overlap", SR(m.executed_overlap, 'g')},
    {"busiest_group_executed_mean", SR(m.busiest_group_executed_mean, 'g')},
    {"group_executed_mean", SR(m.group_executed_mean, 'g')},
    {"hbm_expert_bytes_per_token", SR(m.hbm_expert_bytes_per_token, 'g')},
    {"h2d_bytes_per_token", SR(m.h2d_bytes_per_token, 'g')},
    {"cache_hit_rate", SR(m.cache_hit_rate, 'g')},
    {"assignment_hit_rate", SR(m.assignment_hit_rate, 'g')},
    {"fetch_wait_share", SR(m.fetch_wait_share, 'g')},
    {"time_per_token_s", SR(m.time_per_token_s, 'g')},
    {"tokens_per_s", SR(m.tokens_per_s, 'g')},
    {"speedup_vs_natural", SR(speedup, 'g')},
    {"displaced_assignment_rate", SR(m.displaced_assignment_rate, 'g')},
    {"perturbation_mean", SR(m.perturbation_mean, 'g')},
    {"deviated_token_rate", SR(m.deviated_token_rate, 'g')},
    {"step_s_per_token", SR(m.step_s_per_token, 'g')},
    {"draft_s_per_token", SR(m.draft_s_per_token, 'g')},
    {"draft_extend_s_per_token", SR(m.extend_s_per_token, 'g')},
    {"tree_s_per_token", SR(m.tree_s_per_token, 'g')},
    {"sample_s_per_token", SR(m.sample_s_per_token, 'g')},
    {"cycle_host_s_per_token", SR(m.cycle_host_s_per_token, 'g')},
    {"selection_s_per_token", SR(m.selection_s_per_token, 'g')},
    {"dense_s_per_token", SR(m.dense_s_per_token, 'g')},
    {"moe_s_per_token", SR(m.moe_s_per_token, 'g')},
    {"fetch_s_per_token", SR(m.fetch_s_per_token, 'g')},
    {"host_s_per_token", SR(m.host_s_per_token, 'g')},
    {"comm_s_per_token", SR(m.comm_s_per_token, 'g')},
    {"comm_share", SR(m.comm_share, 'g')},
    {"prefill_s_per_request", SR(m.prefill_s_per_request, 'g')},
    {"predicted_over_measured_tau", SR(m.predicted_tau_ratio, 'g')},
    {"predicted_over_charged_time", SR(m.predicted_time_ratio, 'g')},
    {"prefill_h2d_bytes_per_request", SR(m.prefill_h2d_bytes_per_request, 'g')},
    {"h2d_bytes_per_token_with_prefill", SR(m.h2d_bytes_per_token_with_prefill, 'g')},
    {"nonfetch_over_fetch", SR(m.nonfetch_over_fetch, 'g')},
    {"predicted_deviated_token_rate", SR(m.predicted_deviated_token_rate, 'g')},
    {"acceptmoe_predicted_deviated_token_rate", SR(m.acceptmoe_predicted_deviated_token_rate, 'g')},
};
/* with --backend: measured beside predicted, per block */
static const col SUMMARY_MEASURED[] = {
    {"backend", SR(backend, 's')},
    {"predicted_moe_time_per_block_s", SR(x.predicted_moe_s, 'g')},
    {"measured_moe_time_per_block_s", SR(x.measured_moe_s, 'g')},
    {"measured_over_predicted", SR(x.measured_over_predicted, 'g')},
    {"predicted_fetch_time_per_block_s", SR(x.predicted_fetch_s, 'g')},
    {"measured_fetch_time_per_block_s", SR(x.measured_fetch_s, 'g')},
    {"measured_h2d_bytes_per_s", SR(x.h2d_bytes_per_s, 'g')},
};

/* layers.csv: one row per (point, policy, MoE layer); sets per forward
 * pass, bytes and time per block. */
typedef struct {
  const char *policy;
  int layer;
  double union_mean, eligible_mean, executed_mean, busiest_mean, hit_rate, fetched, h2d_bytes, t_moe, t_fetch, measured;
} layer_row;

#define LR(f, k) k, offsetof(layer_row, f)
static const col LAYERS[] = {
    {"policy", LR(policy, 's')},
    {"layer", LR(layer, 'i')},
    {"union_mean", LR(union_mean, 'g')},
    {"eligible_mean", LR(eligible_mean, 'g')},
    {"executed_mean", LR(executed_mean, 'g')},
    {"busiest_group_executed_mean", LR(busiest_mean, 'g')},
    {"cache_hit_rate", LR(hit_rate, 'g')},
    {"fetched_per_block", LR(fetched, 'g')},
    {"h2d_bytes_per_block", LR(h2d_bytes, 'g')},
    {"t_moe_s_per_block", LR(t_moe, 'g')},
    {"t_fetch_s_per_block", LR(t_fetch, 'g')},
};
static const col LAYERS_MEASURED[] = {{"measured_moe_s_per_block", LR(measured, 'g')}};

/* blocks.csv: one row per (point, policy, block). */
typedef struct {
  const char *policy;
  double block, request, step; /* integers, written as %.0f */
  int passes, verified, tau, deviated;
  double union_mean, eligible_mean, executed_mean, fetched, perturbation_mean, time_s;
} block_row;

#define BR(f, k) k, offsetof(block_row, f)
static const col BLOCKS[] = {
    {"policy", BR(policy, 's')},
    {"block", BR(block, 'n')},
    {"request", BR(request, 'n')},
    {"step", BR(step, 'n')},
    {"forward_passes", BR(passes, 'i')},
    {"verified_nodes", BR(verified, 'i')},
    {"tau", BR(tau, 'i')},
    {"deviated", BR(deviated, 'i')},
    {"union_mean", BR(union_mean, 'g')},
    {"eligible_mean", BR(eligible_mean, 'g')},
    {"executed_mean", BR(executed_mean, 'g')},
    {"fetched_experts", BR(fetched, 'g')},
    {"perturbation_mean", BR(perturbation_mean, 'g')},
    {"time_s", BR(time_s, 'g')},
};
/* at batch (§17; where any point has workload.batch > 1): per request and
 * beside the autoregressive row */
typedef struct {
  double batch;
  double occupancy, requests, tpot_mean, tpot_p90, rate_mean, rate_p10, wall_tokens_per_s, speedup_ar;
} batch_row;
#define BA(f, k) k, offsetof(batch_row, f)
static const col SUMMARY_BATCH[] = {
    {"batch", BA(batch, 'n')},
    {"batch_occupancy_mean", BA(occupancy, 'g')},
    {"requests", BA(requests, 'n')},
    {"tpot_mean_s", BA(tpot_mean, 'g')},
    {"tpot_p90_s", BA(tpot_p90, 'g')},
    {"request_tokens_per_s_mean", BA(rate_mean, 'g')},
    {"request_tokens_per_s_p10", BA(rate_p10, 'g')},
    {"wall_tokens_per_s", BA(wall_tokens_per_s, 'g')},
    {"speedup_vs_autoregressive", BA(speedup_ar, 'g')},
};

/* with open arrivals (§18; where any point has them): latency and
 * goodput, as `vllm bench serve` reports them */
typedef struct {
  double arrival_rate, duration, request_rate, queue_mean;
  double ttft_mean, ttft_p50, ttft_p90, ttft_p99, tpot_p50, tpot_p99;
  double e2e_mean, e2e_p50, e2e_p90, e2e_p99, goodput, slo_attainment;
} load_row;
#define LO(f, k) k, offsetof(load_row, f)
static const col SUMMARY_LOAD[] = {
    {"arrival_rate", LO(arrival_rate, 'g')},
    {"duration_s", LO(duration, 'g')},
    {"request_throughput", LO(request_rate, 'g')},
    {"queue_mean_s", LO(queue_mean, 'g')},
    {"ttft_mean_s", LO(ttft_mean, 'g')},
    {"ttft_p50_s", LO(ttft_p50, 'g')},
    {"ttft_p90_s", LO(ttft_p90, 'g')},
    {"ttft_p99_s", LO(ttft_p99, 'g')},
    {"tpot_p50_s", LO(tpot_p50, 'g')},
    {"tpot_p99_s", LO(tpot_p99, 'g')},
    {"e2e_mean_s", LO(e2e_mean, 'g')},
    {"e2e_p50_s", LO(e2e_p50, 'g')},
    {"e2e_p90_s", LO(e2e_p90, 'g')},
    {"e2e_p99_s", LO(e2e_p99, 'g')},
    {"goodput", LO(goodput, 'g')},
    {"slo_attainment", LO(slo_attainment, 'g')},
};

/* requests.csv (output.requests_csv): one row per (point, policy, request). */
typedef struct {
  const char *policy;
  double request, arrival, admitted, first, finish, prompt, tokens, ttft, tpot, e2e, preemptions;
} request_row;
#define RQ(f, k) k, offsetof(request_row, f)
static const col REQUESTS[] = {
    {"policy", RQ(policy, 's')},
    {"request", RQ(request, 'n')},
    {"arrival_s", RQ(arrival, 'g')},
    {"admitted_s", RQ(admitted, 'g')},
    {"first_token_s", RQ(first, 'g')},
    {"finish_s", RQ(finish, 'g')},
    {"prompt_tokens", RQ(prompt, 'n')},
    {"output_tokens", RQ(tokens, 'n')},
    {"ttft_s", RQ(ttft, 'g')},
    {"tpot_s", RQ(tpot, 'g')},
    {"e2e_s", RQ(e2e, 'g')},
    {"preemptions", RQ(preemptions, 'n')},
};

/* Σ over passes of the requests in each (batch 1: one a pass). */
static double request_passes(const amoe_totals *t) { return t->request_passes > 0 ? t->request_passes : t->passes; }

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The per-request figures of one row. p90: the nearest-rank 90th
 * percentile of the time per output token; p10 of the rates, the same
 * slow requests. */
static void batch_of(const amoe_spec *s, const amoe_row_result *r, double ar_tokens_per_s, double tokens_per_s,
                     batch_row *o) {
  const amoe_totals *t = &r->tot;
  o->batch = s->workload.batch;
  o->occupancy = t->passes > 0 ? request_passes(t) / t->passes : 0;
  o->requests = r->nreqs;
  o->tpot_mean = o->tpot_p90 = o->rate_mean = o->rate_p10 = 0;
  const int n = r->nreqs;
  double *v = n ? malloc((size_t)n * sizeof *v) : NULL;
  if (v) {
    double sum = 0, rate = 0;
    for (int i = 0; i < n; i++) {
      v[i] = r->reqs[i].tpot;
      sum += v[i];
      rate += v[i] > 0 ? 1 / v[i] : 0;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    const int i90 = (int)ceil(0.9 * n) - 1;
    o->tpot_mean = sum / n;
    o->tpot_p90 = v[i90 < 0 ? 0 : i90];
    o->rate_mean = rate / n;
    o->rate_p10 = o->tpot_p90 > 0 ? 1 / o->tpot_p90 : 0;
    free(v);
  }
  const double wall = t->t_total + t->t_prefill + t->t_idle;
  o->wall_tokens_per_s = wall > 0 ? (t->committed + t->first_tokens) / wall : 0;
  o->speedup_ar = ar_tokens_per_s > 0 ? tokens_per_s / ar_tokens_per_s : 0;
}

#define NCOL(t) ((int)(sizeof t / sizeof t[0]))

/* The nearest-rank q-quantile of the sorted v[0..n) (0 when empty). */
static double rank_of(const double *v, int n, double q) {
  if (n < 1) return 0;
  int i = (int)ceil(q * n) - 1;
  return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* Mean and the quantiles of v[0..n), which it sorts. */
static double sorted_mean(double *v, int n) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += v[i];
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n ? sum / n : 0;
}

/* The latency figures of one row (open arrivals). A request meets the SLO
 * when its TTFT and its TPOT are within slo.ttft_s and slo.tpot_s (a 0
 * bound: any); goodput is those requests per second of the run. */
static amoe_status load_of(const amoe_spec *s, const amoe_row_result *r, load_row *o, amoe_err *e) {
  memset(o, 0, sizeof *o);
  const amoe_totals *t = &r->tot;
  const int n = r->nreqs;
  o->duration = t->t_total + t->t_prefill + t->t_idle;
  double last = 0;
  for (int i = 0; i < n; i++) last = r->reqs[i].arrival_s > last ? r->reqs[i].arrival_s : last;
  const int sent_by_run = s->workload.arrival == AMOE_ARRIVAL_TRACE || s->workload.arrival == AMOE_ARRIVAL_CONCURRENCY;
  o->arrival_rate = sent_by_run ? (last > 0 ? n / last : 0) : s->workload.rate;
  if (n < 1) return AMOE_OK;
  double *v = malloc((size_t)n * 3 * sizeof *v);
  if (!v) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  double *ttft = v, *tpot = v + n, *e2e = v + 2 * n, queue = 0;
  int good = 0;
  for (int i = 0; i < n; i++) {
    const amoe_request_stat *q = &r->reqs[i];
    ttft[i] = q->first_s - q->arrival_s;
    tpot[i] = q->tpot;
    e2e[i] = q->finish_s - q->arrival_s;
    queue += q->admitted_s - q->arrival_s;
    good += (!(s->slo.ttft_s > 0) || ttft[i] <= s->slo.ttft_s) && (!(s->slo.tpot_s > 0) || tpot[i] <= s->slo.tpot_s);
  }
  o->request_rate = o->duration > 0 ? n / o->duration : 0;
  o->queue_mean = queue / n;
  o->ttft_mean = sorted_mean(ttft, n);
  o->ttft_p50 = rank_of(ttft, n, 0.5);
  o->ttft_p90 = rank_of(ttft, n, 0.9);
  o->ttft_p99 = rank_of(ttft, n, 0.99);
  qsort(tpot, (size_t)n, sizeof *tpot, cmp_double);
  o->tpot_p50 = rank_of(tpot, n, 0.5);
  o->tpot_p99 = rank_of(tpot, n, 0.99);
  o->e2e_mean = sorted_mean(e2e, n);
  o->e2e_p50 = rank_of(e2e, n, 0.5);
  o->e2e_p90 = rank_of(e2e, n, 0.9);
  o->e2e_p99 = rank_of(e2e, n, 0.99);
  o->goodput = o->duration > 0 ? good / o->duration : 0;
  o->slo_attainment = (double)good / n;
  free(v);
  return AMOE_OK;
}

amoe_status amoe_results_open(amoe_results **out, const amoe_results_opts *o, amoe_err *e) {
  *out = NULL;
  AMOE_TRY(amoe_mkdirs(o->dir, e));
  amoe_results *r = calloc(1, sizeof *r);
  if (!r) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  r->o = *o;
  char path[AMOE_PATH_MAX + 64];
  amoe_status st;
  snprintf(path, sizeof path, "%s/summary.csv", o->dir);
  st = amoe_afile_open(&r->summary, path, e);
  snprintf(path, sizeof path, "%s/layers.csv", o->dir);
  if (!st) st = amoe_afile_open(&r->layers, path, e);
  snprintf(path, sizeof path, "%s/blocks.csv", o->dir);
  if (!st && o->blocks_csv) st = amoe_afile_open(&r->blocks, path, e);
  snprintf(path, sizeof path, "%s/requests.csv", o->dir);
  if (!st && o->x->base.output.requests_csv) st = amoe_afile_open(&r->requests, path, e);
  if (!st && o->dump) st = amoe_afile_open(&r->dump, o->dump, e);
  snprintf(path, sizeof path, "%s/meta.json", o->dir);
  if (!st) st = amoe_afile_open(&r->meta, path, e);
  snprintf(path, sizeof path, "%s/spec.resolved.yaml", o->dir);
  if (!st) st = amoe_afile_open(&r->resolved, path, e);
  if (st) {
    amoe_results_close(r);
    return st;
  }
  header(r->summary.f, o->x, SUMMARY, NCOL(SUMMARY));
  if (o->backend)
    for (int i = 0; i < NCOL(SUMMARY_MEASURED); i++) fprintf(r->summary.f, ",%s", SUMMARY_MEASURED[i].name);
  if (amoe_experiment_batched(o->x))
    for (int i = 0; i < NCOL(SUMMARY_BATCH); i++) fprintf(r->summary.f, ",%s", SUMMARY_BATCH[i].name);
  if (amoe_experiment_open(o->x))
    for (int i = 0; i < NCOL(SUMMARY_LOAD); i++) fprintf(r->summary.f, ",%s", SUMMARY_LOAD[i].name);
  fputc('\n', r->summary.f);
  if (r->requests.f) {
    header(r->requests.f, o->x, REQUESTS, NCOL(REQUESTS));
    fputc('\n', r->requests.f);
  }
  header(r->layers.f, o->x, LAYERS, NCOL(LAYERS));
  if (o->backend) fprintf(r->layers.f, ",%s", LAYERS_MEASURED[0].name);
  fputc('\n', r->layers.f);
  if (r->blocks.f) {
    header(r->blocks.f, o->x, BLOCKS, NCOL(BLOCKS));
    fputc('\n', r->blocks.f);
  }
  r->meta_json = json_object();
  r->points = json_array();
  json_object_set_new(r->meta_json, "tool", json_string("acceptmoe"));
  json_object_set_new(r->meta_json, "version", json_string(AMOE_VERSION));
  json_object_set_new(r->meta_json, "git_commit", json_string(AMOE_GIT));
  json_object_set_new(r->meta_json, "spec", json_string(o->spec_path));
  if (o->shard_n > 1) /* a partial result: `acceptmoe merge` joins the shards */
    json_object_set_new(r->meta_json, "shard", json_pack("{s:i,s:i}", "index", o->shard_i, "count", o->shard_n));
  *out = r;
  return AMOE_OK;
}

void amoe_results_begin_point(amoe_results *r, int point, const amoe_spec *s) {
  r->point = point;
  r->s = s;
  if (s->kernels_note[0]) /* (every point's hardware is one preset's) */
    json_object_set_new(r->meta_json, "kernels", json_string(s->kernels_note));
  static int warned; /* a table the hardware names but this machine lacks: said once a process */
  if (!warned && s->kernels_note[0] && (strstr(s->kernels_note, "the analytic MoE terms") || strstr(s->kernels_note, "the dense roofline"))) {
    warned = 1;
    fprintf(stderr, "acceptmoe: hardware.kernels %s: %s\n", s->hw.kernels, s->kernels_note);
  }
  /* the point's value of each sweep key: the last key varies fastest */
  const amoe_experiment *x = r->o.x;
  r->sweepvals[0] = 0;
  for (int i = 0; i < x->nsweep; i++)
    snprintf(r->sweepvals + strlen(r->sweepvals), sizeof r->sweepvals - strlen(r->sweepvals), ",%s",
             x->sweep[i].values[amoe_experiment_value_index(x, point, i)]);
}

int amoe_results_wants_blocks(const amoe_results *r) { return r->blocks.f != NULL; }
int amoe_results_wants_selection(const amoe_results *r) { return r->dump.f != NULL; }

amoe_status amoe_results_block(amoe_results *r, int row, const amoe_block_stats *b, amoe_err *e) {
  if (!r->blocks.f) return AMOE_OK;
  const block_row br = {r->s->policies[row].label, (double)b->block, b->request, b->step, b->passes, b->verified,
                        b->tau, b->deviated, b->union_mean, b->eligible_mean, b->executed_mean, b->fetched,
                        b->perturbation_mean, b->time_s};
  fprintf(r->blocks.f, "%d%s", r->point, r->sweepvals);
  values(r->blocks.f, &br, BLOCKS, NCOL(BLOCKS));
  return fputc('\n', r->blocks.f) == EOF ? amoe_fail(e, AMOE_EIO, "blocks.csv: write failed") : AMOE_OK;
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

amoe_status amoe_results_select(amoe_results *r, int row, uint64_t block, int layer, const uint8_t *uni,
                                const uint8_t *eligible, const uint8_t *executed, const uint8_t *fetched, int experts,
                                amoe_err *e) {
  FILE *f = r->dump.f;
  if (!f) return AMOE_OK;
  fprintf(f, "{\"point\":%d,\"block\":%llu,\"layer\":%d,\"policy\":\"%s\"", r->point, (unsigned long long)block, layer,
          r->s->policies[row].label);
  ids_json(f, "union", uni, experts);
  ids_json(f, "eligible", eligible, experts);
  ids_json(f, "executed", executed, experts);
  ids_json(f, "fetched", fetched, experts);
  return fputs("}\n", f) == EOF ? amoe_fail(e, AMOE_EIO, "selection dump: write failed") : AMOE_OK;
}

/* meta.json's engine of a point: its mode, launch and step host times, and
 * the speculative cycle's and host loop's terms where it sets them. */
static json_t *engine_json(const amoe_spec *s) {
  const amoe_engine *eng = &s->engine;
  json_t *ej = json_pack("{s:b,s:b,s:s,s:f,s:f,s:f,s:f}", "cuda_graphs", eng->cuda_graphs > 0, "overlap_scheduler",
                         eng->overlap_scheduler > 0, "moe_kernels", amoe_moe_kernels_names[eng->moe_kernels],
                         "kernels_per_layer", eng->kernels_per_layer, "launch_s", amoe_engine_launch_s(eng, &s->hw),
                         "readback_s", s->hw.readback_s, "step_host_s", amoe_engine_step_host_s(eng, &s->hw));
  if (eng->name[0]) json_object_set_new(ej, "preset", json_string(eng->name));
  if (eng->host_overlap) json_object_set_new(ej, "host_overlap", json_true());
  if (amoe_engine_has_cycle(eng)) { /* the speculative cycle's terms, where an engine sets them */
    json_t *cy = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}", "draft_step_s", amoe_engine_draft_step_s(eng, &s->hw),
                           "draft_token_s", eng->draft_token_s, "draft_extend_s", eng->draft_extend_s, "tree_node_s",
                           eng->tree_node_s, "sample_s", eng->sample_s, "cycle_host_s", eng->cycle_host_s);
    json_object_update(ej, cy);
    json_decref(cy);
  }
  if (eng->moe_call_host_s > 0) json_object_set_new(ej, "moe_call_host_s", json_real(eng->moe_call_host_s));
  if (eng->moe_kernels == AMOE_MOE_LOOP) {
    json_object_set_new(ej, "visits", json_string(amoe_visits_names[eng->visits]));
    json_object_set_new(ej, "expert_host_s", json_real(eng->expert_host_s));
    json_object_set_new(ej, "visit_host_s", json_real(eng->visit_host_s));
  }
  return ej;
}

/* meta.json's arrival of a point with requests over time (§18): the
 * process, its load and the KV cache's capacity. */
static json_t *arrival_json(const amoe_spec *s) {
  json_t *aj = json_pack("{s:s,s:i}", "process", amoe_arrival_names[s->workload.arrival], "max_running",
                         amoe_workload_slots(&s->workload));
  if (s->workload.arrival == AMOE_ARRIVAL_TRACE) json_object_set_new(aj, "path", json_string(s->workload.arrival_path));
  else {
    json_object_set_new(aj, "requests", json_integer(s->workload.requests));
    if (s->workload.arrival == AMOE_ARRIVAL_CONCURRENCY)
      json_object_set_new(aj, "concurrency", json_integer(s->workload.concurrency));
    else
      json_object_set_new(aj, "rate", json_real(s->workload.rate));
  }
  if (s->workload.arrival == AMOE_ARRIVAL_GAMMA) json_object_set_new(aj, "cv", json_real(s->workload.cv));
  int drafted = 0; /* (the draft's weights where some row speculates) */
  for (int i = 0; i < s->npolicies; i++) drafted |= !amoe_draft_table[s->policies[i].draft].one_token_per_pass;
  const double kv = amoe_cost_kv_tokens(&s->model, &s->hw, &s->engine, &s->parallel, drafted);
  if (kv != 0) json_object_set_new(aj, "kv_tokens", json_real(kv)); /* (§19: the KV cache's capacity per GPU) */
  return aj;
}

/* requests.csv: row i's requests, one line each. */
static void write_requests(amoe_results *r, const amoe_point_result *pt, int i) {
  const amoe_spec *s = pt->s;
  const amoe_policy_row *p = &s->policies[i];
  for (int q = 0; r->requests.f && s->workload.arrival != AMOE_ARRIVAL_CLOSED && q < pt->rows[i].nreqs; q++) {
    const amoe_request_stat *rq = &pt->rows[i].reqs[q];
    const request_row row = {p->label, rq->request, rq->arrival_s, rq->admitted_s, rq->first_s, rq->finish_s,
                             rq->prompt_tokens, rq->tokens, rq->first_s - rq->arrival_s, rq->tpot,
                             rq->finish_s - rq->arrival_s, rq->preemptions};
    fprintf(r->requests.f, "%d%s", pt->point, r->sweepvals);
    values(r->requests.f, &row, REQUESTS, NCOL(REQUESTS));
    fputc('\n', r->requests.f);
  }
}

/* layers.csv: row i's MoE layers, one line each. */
static void write_layers(amoe_results *r, const amoe_point_result *pt, int i) {
  const amoe_spec *s = pt->s;
  const amoe_policy_row *p = &s->policies[i];
  const amoe_totals *tot = &pt->rows[i].tot;
  const double B_bytes = amoe_model_expert_bytes(&s->model);
  const double B = tot->blocks > 0 ? tot->blocks : 1, P = tot->passes > 0 ? tot->passes : 1;
  for (int l = 0; l < s->model.moe_layers; l++) {
    const amoe_layer_totals *lt = &pt->rows[i].layers[l];
    layer_row lr = {p->label, l, lt->union_sum / P, lt->eligible_sum / P, lt->executed_sum / P,
                    lt->busiest_sum / P, s->offload.enabled ? (lt->requests > 0 ? lt->hits / lt->requests : 0) : 1.0, lt->fetched / B,
                    lt->fetched * B_bytes / B, lt->t_moe / B, lt->t_fetch / B, 0};
    fprintf(r->layers.f, "%d%s", pt->point, r->sweepvals);
    values(r->layers.f, &lr, LAYERS, NCOL(LAYERS));
    if (pt->measured_layers) {
      lr.measured = pt->measured_layers[(size_t)i * s->model.moe_layers + l];
      values(r->layers.f, &lr, LAYERS_MEASURED, NCOL(LAYERS_MEASURED));
    }
    fputc('\n', r->layers.f);
  }
}

json_t *amoe_results_point(amoe_results *r, const amoe_point_result *pt, amoe_err *e) {
  const amoe_spec *s = pt->s;
  json_t *pj = json_object();
  json_object_set_new(pj, "point", json_integer(pt->point));
  json_error_t je;
  json_t *prov = json_loads(pt->workload, 0, &je);
  json_object_set_new(pj, "workload", prov ? prov : json_string(pt->workload));
  json_object_set_new(pj, "workload_seed", json_integer((json_int_t)s->workload.seed));
  if (s->workload.arrival != AMOE_ARRIVAL_CLOSED) json_object_set_new(pj, "arrival", arrival_json(s)); /* the load (§18) */
  json_object_set_new(pj, "acceptance_seed", json_integer((json_int_t)s->workload.seed));
  json_object_set_new(pj, "commitment", json_string(pt->commitment));
  json_object_set_new(pj, "acceptance_model", json_pack("{s:f,s:f}", "kappa", s->kappa, "margin_min", s->margin_min));
  json_object_set_new(pj, "engine", engine_json(s));
  if (pt->offline) {
    json_t *tab = json_array();
    for (int d = 0; d < pt->offline->n; d++) json_array_append_new(tab, json_real(pt->offline->p[d]));
    json_object_set_new(pj, "commitment_table", tab);
  }
  json_object_set_new(pj, "hw_calibration",
                      json_string(s->hw_calibration[0] ? s->hw_calibration : "preset (no calibration file applied)"));
  json_array_append_new(r->points, pj);
  FILE *t = r->o.table;
  if (t && !r->rows_written++) { /* the markdown table, once a point has results */
    fprintf(t, "| point | policy | tau | verified | union | executed | h2d MB/tok | hit | tok/s | speedup | deviated |\n");
    fprintf(t, "|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  amoe_summary base;
  memset(&base, 0, sizeof base);
  for (int i = 0; i < s->npolicies; i++)
    if (amoe_policy_is_baseline(&s->policies[i])) amoe_summarize(&pt->rows[i].tot, s->offload.enabled, &base);
  amoe_summary ar; /* the autoregressive row's (the first), for speedup_vs_autoregressive */
  memset(&ar, 0, sizeof ar);
  for (int i = s->npolicies - 1; i >= 0; i--)
    if (amoe_draft_table[s->policies[i].draft].one_token_per_pass) amoe_summarize(&pt->rows[i].tot, s->offload.enabled, &ar);
  for (int i = 0; i < s->npolicies; i++) {
    const amoe_policy_row *p = &s->policies[i];
    const amoe_totals *tot = &pt->rows[i].tot;
    summary_row sr = {.model = s->model.name, .hw = s->hw.name, .policy = p->label,
                      .draft = amoe_draft_table[p->draft].name, .verifier = amoe_verifier_table[p->verifier].name,
                      .budget = amoe_policy_budget(p), .blocks = tot->blocks, .passes = tot->passes,
                      .committed = tot->committed};
    amoe_summarize(tot, s->offload.enabled, &sr.m);
    sr.speedup = base.tokens_per_s > 0 ? sr.m.tokens_per_s / base.tokens_per_s : 0;
    fprintf(r->summary.f, "%d%s", pt->point, r->sweepvals);
    values(r->summary.f, &sr, SUMMARY, NCOL(SUMMARY));
    if (pt->measured) {
      sr.backend = r->o.backend;
      sr.x = pt->measured[i];
      values(r->summary.f, &sr, SUMMARY_MEASURED, NCOL(SUMMARY_MEASURED));
    }
    if (amoe_experiment_batched(r->o.x)) {
      batch_row br;
      memset(&br, 0, sizeof br);
      batch_of(s, &pt->rows[i], ar.tokens_per_s, sr.m.tokens_per_s, &br);
      values(r->summary.f, &br, SUMMARY_BATCH, NCOL(SUMMARY_BATCH));
    }
    if (amoe_experiment_open(r->o.x)) {
      load_row lr;
      if (load_of(s, &pt->rows[i], &lr, e) != AMOE_OK) return NULL;
      values(r->summary.f, &lr, SUMMARY_LOAD, NCOL(SUMMARY_LOAD));
    }
    fputc('\n', r->summary.f);
    write_requests(r, pt, i);
    if (t)
      fprintf(t, "| %d | %s | %.3f | %.1f | %.2f | %.2f | %.2f | %.3f | %.1f | %.3f | %.4f |\n", pt->point, p->label,
              sr.m.tau_mean, sr.m.verified_nodes_mean, sr.m.union_mean, sr.m.executed_mean,
              sr.m.h2d_bytes_per_token / 1e6, sr.m.cache_hit_rate, sr.m.tokens_per_s, sr.speedup,
              sr.m.deviated_token_rate);
    write_layers(r, pt, i);
  }
  if (ferror(r->summary.f) || ferror(r->layers.f) || (r->requests.f && ferror(r->requests.f))) {
    amoe_fail(e, AMOE_EIO, "%s: write failed", r->o.dir);
    return NULL;
  }
  return pj;
}

amoe_status amoe_results_commit(amoe_results *r, amoe_err *e) {
  json_object_set(r->meta_json, "points", r->points);
  char *ytxt = NULL;
  size_t ylen = 0;
  FILE *mem = open_memstream(&ytxt, &ylen);
  if (!mem) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  amoe_spec_write_yaml(mem, r->o.x);
  fclose(mem);
  fwrite(ytxt, 1, ylen, r->resolved.f);
  char hash[32];
  snprintf(hash, sizeof hash, "%016llx", (unsigned long long)amoe_trace_checksum(ytxt, ylen));
  json_object_set_new(r->meta_json, "spec_hash", json_string(hash)); /* of spec.resolved.yaml */
  free(ytxt);
  char *txt = json_dumps(r->meta_json, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (!txt) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  fputs(txt, r->meta.f);
  fputc('\n', r->meta.f);
  free(txt);
  AMOE_TRY(amoe_afile_commit(&r->summary, e));
  AMOE_TRY(amoe_afile_commit(&r->layers, e));
  AMOE_TRY(amoe_afile_commit(&r->blocks, e));
  AMOE_TRY(amoe_afile_commit(&r->requests, e));
  AMOE_TRY(amoe_afile_commit(&r->dump, e));
  AMOE_TRY(amoe_afile_commit(&r->resolved, e));
  return amoe_afile_commit(&r->meta, e);
}

void amoe_results_close(amoe_results *r) {
  if (!r) return;
  amoe_afile_abort(&r->summary);
  amoe_afile_abort(&r->layers);
  amoe_afile_abort(&r->blocks);
  amoe_afile_abort(&r->requests);
  amoe_afile_abort(&r->dump);
  amoe_afile_abort(&r->meta);
  amoe_afile_abort(&r->resolved);
  json_decref(r->meta_json);
  json_decref(r->points);
  free(r);
}

void amoe_summarize(const amoe_totals *t, int offload, amoe_summary *o) {
  double c = t->committed > 0 ? t->committed : 1, lb = t->layer_blocks > 0 ? t->layer_blocks : 1;
  const double rp = request_passes(t);
  o->tau_mean = rp > 0 ? t->committed / rp : 0;
  o->verified_nodes_mean = rp > 0 ? t->verified / rp : 0;
  o->union_mean = t->union_sum / lb;
  o->eligible_mean = t->eligible_sum / lb;
  o->executed_mean = t->executed_sum / lb;
  o->hbm_expert_bytes_per_token = t->hbm_expert_bytes / c;
  o->h2d_bytes_per_token = t->h2d_bytes / c;
  o->cache_hit_rate = offload ? (t->requests > 0 ? t->hits / t->requests : 0) : 1.0;
  o->fetch_wait_share = t->t_total > 0 ? t->t_fetch / t->t_total : 0;
  o->time_per_token_s = t->t_total / c;
  o->tokens_per_s = t->t_total > 0 ? t->committed / t->t_total : 0;
  o->displaced_assignment_rate = t->assignments > 0 ? t->displaced / t->assignments : 0;
  o->deviated_token_rate = t->deviated / c;
  o->perturbation_mean = t->perturbation_n > 0 ? t->perturbation_sum / t->perturbation_n : 0;
  o->step_s_per_token = t->t_step / c;
  o->draft_s_per_token = t->t_draft / c;
  o->extend_s_per_token = t->t_extend / c;
  o->tree_s_per_token = t->t_tree / c;
  o->sample_s_per_token = t->t_sample / c;
  o->cycle_host_s_per_token = t->t_cycle_host / c;
  o->selection_s_per_token = t->t_select / c;
  o->dense_s_per_token = t->t_dense / c;
  o->moe_s_per_token = t->t_moe / c;
  o->fetch_s_per_token = t->t_fetch / c;
  o->host_s_per_token = t->t_host / c;
  o->predicted_tau_ratio = t->predicted_tau > 0 ? t->predicted_tau / t->committed : 0;
  o->predicted_time_ratio = t->predictions > 0 ? t->predicted_s / t->predictions : 0;
  o->predicted_deviated_token_rate = t->deviation_predicted / c;
  o->acceptmoe_predicted_deviated_token_rate = t->deviation_budget / c;
  o->busiest_group_executed_mean = t->busiest_sum / lb;
  o->group_executed_mean = o->executed_mean / (t->groups > 0 ? t->groups : 1);
  o->comm_share = t->t_total > 0 ? t->t_comm / t->t_total : 0;
  o->comm_s_per_token = t->t_comm / c;
  o->executed_overlap = t->executed_overlap_n > 0 ? t->executed_overlap_sum / t->executed_overlap_n : 0;
  o->assignment_hit_rate = offload ? (t->assignments_served > 0 ? t->assignment_hits / t->assignments_served : 0) : 1.0;
  o->prefill_s_per_request = t->prefills > 0 ? t->t_prefill / t->prefills : 0;
  o->prefill_h2d_bytes_per_request = t->prefills > 0 ? t->prefill_h2d_bytes / t->prefills : 0;
  o->h2d_bytes_per_token_with_prefill = (t->h2d_bytes + t->prefill_h2d_bytes) / c;
  o->nonfetch_over_fetch = t->t_fetch > 0 ? (t->t_total - t->t_fetch) / t->t_fetch : 0;
}

/* ------------------------------------------------------------ calibrate, costtable */

amoe_status amoe_results_commitment(const char *out, const amoe_spec *s, const char *how, const amoe_offline *o,
                                    amoe_err *e) {
  amoe_status st = AMOE_OK;
  amoe_afile a = {0};
  FILE *f = stdout;
  if (out) {
    st = amoe_afile_open(&a, out, e);
    f = a.f;
  }
  if (!st) {
    fprintf(f, "# commitment p_d: fraction of blocks whose natural accepted prefix reaches depth d\n");
    fprintf(f, "# model %s, %s, eagle tree of %d nodes\n", s->model.name, how, s->workload.nodes);
    fprintf(f, "table: [");
    for (int d = 0; d < o->n; d++) fprintf(f, "%s%.6f", d ? ", " : "", o->p[d]);
    fprintf(f, "]\n");
    fprintf(f, "# draft mass m_d: mean over blocks of exp(score) summed over the verified nodes at depth d\n");
    fprintf(f, "mass: [");
    for (int d = 0; d < o->n; d++) fprintf(f, "%s%.6f", d ? ", " : "", o->mass[d]);
    fprintf(f, "]\n");
    if (out) st = amoe_afile_commit(&a, e);
  }
  amoe_afile_abort(&a);
  return st;
}

amoe_status amoe_results_costtable(const char *out, const char *spec_path, const amoe_spec *s,
                                   const amoe_step_table *t, amoe_err *e) {
  amoe_status st = AMOE_OK;
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
  json_object_set_new(root, "spec", json_string(spec_path));
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
  if (!txt) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  amoe_afile a = {0};
  FILE *f = stdout;
  if (!st && out && !(st = amoe_afile_open(&a, out, e))) f = a.f;
  if (!st) {
    fputs(txt, f);
    fputc('\n', f);
    if (out) st = amoe_afile_commit(&a, e);
  }
  amoe_afile_abort(&a);
  free(txt);
  return st;
}
