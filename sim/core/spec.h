/* A resolved experiment (docs/design.md §13) at one sweep point: every default
 * filled in. The harness builds it from YAML; the library only reads it. */
#ifndef AMOE_SPEC_H
#define AMOE_SPEC_H

#include <stdint.h>

#include "model.h"

#define AMOE_PATH_MAX 1024
#define AMOE_MAX_POLICIES 32
#define AMOE_MAX_DEPTH 64
#define AMOE_MAX_PARAMS 4

typedef enum {
  AMOE_SRC_SYNTHETIC = 0,
  AMOE_SRC_TRACE = 1,
  AMOE_SRC_BLOCKS_JSONL = 2,
  AMOE_SRC_ROUTING_JSONL = 3,
  AMOE_SRC_ROUTING_SAFETENSORS = 4 /* the routing-jsonl records in bulk (jsonl.h) */
} amoe_source_kind;

/* How routing-jsonl becomes blocks (docs/design.md §5): windows of real tokens
 * verified as chains, or generated draft trees whose accepted path carries
 * the real tokens' routes. */
typedef enum { AMOE_ROUTING_CHAIN = 0, AMOE_ROUTING_HYBRID = 1 } amoe_routing_blocks;

typedef enum { AMOE_PREFILL_THROUGH = 0, AMOE_PREFILL_BYPASS = 1 } amoe_prefill_mode;

/* workload.prefill_schedule at batch > 1 (§17): a request's prefill is a
 * pass of its own, or joins the running decode passes chunk by chunk. */
typedef enum { AMOE_PREFILL_SEPARATE = 0, AMOE_PREFILL_CHUNKED = 1 } amoe_prefill_schedule;

/* workload.arrival.process (§18): closed keeps workload.batch slots always
 * full; the open processes let requests arrive over time and queue for
 * workload.max_running slots. */
typedef enum {
  AMOE_ARRIVAL_CLOSED = 0,
  AMOE_ARRIVAL_POISSON = 1,
  AMOE_ARRIVAL_GAMMA = 2,
  AMOE_ARRIVAL_TRACE = 3,
  AMOE_ARRIVAL_CONSTANT = 4,   /* rate requests per second at fixed intervals */
  AMOE_ARRIVAL_CONCURRENCY = 5 /* closed loop: `concurrency` clients, each sending its next request when its
                                  last one ends (vllm bench serve --max-concurrency C --request-rate inf) */
} amoe_arrival_process;

/* workload.arrival.lengths (§19): each request's prompt and output tokens
 * uniform in [n(1-r), n(1+r)] (r = range_ratio; 0: every request n), or a
 * normal of mean n clipped to [min, max] (inference-perf's form). */
typedef enum { AMOE_LENGTHS_UNIFORM = 0, AMOE_LENGTHS_NORMAL = 1 } amoe_lengths;

typedef enum { AMOE_COMMIT_CALIBRATE = 0, AMOE_COMMIT_TABLE = 1, AMOE_COMMIT_FILE = 2 } amoe_commit_mode;

typedef struct {
  char label[64];      /* e.g. "acceptmoe", "moe-spec/B=32", "ecospec+acceptmoe" */
  int draft;           /* index into amoe_draft_table */
  int verifier;        /* index into amoe_verifier_table */
  double dparam[AMOE_MAX_PARAMS]; /* the draft's parameters, in its table row's order (policy.h) */
  double vparam[AMOE_MAX_PARAMS]; /* the verifier's */
  int implicit;        /* added by the run as the natural baseline */
} amoe_policy_row;

typedef struct {
  int source;
  char path[AMOE_PATH_MAX];
  int window;
  int routing_blocks; /* amoe_routing_blocks */
  int blocks;
  int tokens_per_request;
  int context_tokens;
  uint64_t seed;
  int depth, top_k, nodes, candidates, top_m;
  double tau;
  char replay[AMOE_PATH_MAX];
  /* acceptance as engines give it (§19; n = 0: tau): AL at k = 1..n, or one
   * AL pinned at the run's k (a chain: tree.top_k 1, k = tree.depth) */
  amoe_layer_values al;
  int draft_passes; /* draft forwards per step (0: one per tree level, EAGLE's; 1: a block draft, DSpark's) */
  /* workload.routing.*: overrides of the model's routing, field by field
   * (NaN, or layer values with n = 0: the model's; amoe_routing_resolve) */
  amoe_routing_fit routing;
  int prompt_tokens; /* each request's prompt: one prefill pass before its blocks (0: none) */
  int prefill_sample; /* a prefill chunk longer than this routes this many of its tokens (amoe_gen_prefill; 0: all) */
  int route_hold;     /* a request routes every route_hold-th block afresh and holds its routes between (0, 1: every block) */
  /* requests decoding at once (§17; 1: one request's blocks one after
   * another, the papers' setting); a finished request's slot goes to the
   * next request (continuous batching) */
  int batch;
  int prefill_schedule; /* amoe_prefill_schedule */
  int chunk_tokens;     /* chunked: prompt tokens a request adds to each pass it prefills in */
  /* open arrivals (§18; arrival == AMOE_ARRIVAL_CLOSED: none) */
  int arrival;          /* amoe_arrival_process */
  double rate;          /* poisson, gamma: requests per second */
  double cv;            /* gamma: the inter-arrival times' coefficient of variation */
  char arrival_path[AMOE_PATH_MAX]; /* trace: CSV arrival_s,prompt_tokens,output_tokens (docs/spec.md) */
  double range_ratio;   /* lengths uniform: in [n(1-r), n(1+r)] (0: the fixed n) */
  int lengths;          /* amoe_lengths */
  double prompt_sd, output_sd; /* lengths normal: the standard deviations */
  int prompt_min, prompt_max, output_min, output_max; /* lengths normal: the clip (max 0: none) */
  int concurrency;      /* process concurrency: the clients */
  int requests;         /* poisson, gamma: how many requests arrive */
  int max_running;      /* open: requests decoding at once; the rest queue (0: workload.batch) */
  int threads; /* generator threads (not a spec key: results do not depend on it); 0 = 1 */
} amoe_workload_spec;

/* Requests decoding at once: workload.batch, or with open arrivals
 * workload.max_running (0: workload.batch; a closed loop's clients). */
static inline int amoe_workload_slots(const amoe_workload_spec *w) {
  if (w->arrival != AMOE_ARRIVAL_CLOSED && w->max_running > 0) return w->max_running;
  return w->arrival == AMOE_ARRIVAL_CONCURRENCY ? w->concurrency : w->batch;
}

typedef struct {
  char name[128];
  amoe_model model;
  amoe_hw hw;
  char hw_calibration[AMOE_PATH_MAX]; /* calibration file applied over the preset, or "" */
  amoe_engine engine;
  amoe_parallel parallel;
  amoe_host host;          /* the CPU and memory experts off the GPU live on (§21) */
  char experts[64];        /* where the routed experts live: gpu, cpu, cpu:SHARE:STRATEGY, cpu-layers:N ("": gpu) */
  amoe_tiers tiers;        /* experts, parsed (spec_validate) */
  amoe_workload_spec workload;
  struct {
    int mode;
    int blocks;
    uint64_t seed;
    double table[AMOE_MAX_DEPTH];
    int table_n;
    double mass[AMOE_MAX_DEPTH]; /* m̄_d beside a table (0 entries: not given) */
    int mass_n;
    char file[AMOE_PATH_MAX];
  } commitment;
  struct {
    int enabled;
    int slots_per_layer;
    int policy; /* amoe_cache_policy */
    int order;    /* amoe_cache_order */
    int overflow; /* amoe_cache_overflow */
    int reset;    /* 1: every cache empties at each request's first block */
    int overlap;
    int prefill; /* amoe_prefill_mode: a prefill's experts go through the caches or bypass them */
  } offload;
  struct { /* the service-level objective goodput counts against (§18; 0: none) */
    double ttft_s, tpot_s;
  } slo;
  double kappa;      /* acceptance_model.kappa (§7) */
  double margin_min; /* acceptance_model.margin_min, nats */
  amoe_policy_row policies[AMOE_MAX_POLICIES];
  int npolicies;
  int baseline; /* 1: natural is added when no row lists it (speedup_vs_natural's row); 0: only the rows listed */
  struct {
    char dir[AMOE_PATH_MAX];
    int blocks_csv;
    int requests_csv; /* open arrivals: requests.csv, a row per (point, policy, request) */
    char dump_selection[AMOE_PATH_MAX];
  } output;
  /* what hardware.kernels resolved to (the table's row taken, or why the
   * analytic terms stayed), for meta.json; empty without it */
  char kernels_note[AMOE_PATH_MAX + 256];
} amoe_spec;

#endif
