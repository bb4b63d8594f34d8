#include "spec_load.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "accept.h"
#include "cache.h"
#include "gen.h"
#include "policy.h"
#include "run.h"
#include "source.h"

/* ------------------------------------------------------------ diagnostics */

void amoe_diag_add(amoe_diag *d, const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (d->n == d->cap) {
    int nc = d->cap ? 2 * d->cap : 16;
    char **nm = realloc(d->msgs, (size_t)nc * sizeof *nm);
    if (!nm) return;
    d->msgs = nm;
    d->cap = nc;
  }
  d->msgs[d->n] = strdup(buf);
  if (d->msgs[d->n]) d->n++;
}

void amoe_diag_print(const amoe_diag *d, FILE *f) {
  for (int i = 0; i < d->n; i++) fprintf(f, "%s\n", d->msgs[i]);
}

void amoe_diag_free(amoe_diag *d) {
  for (int i = 0; i < d->n; i++) free(d->msgs[i]);
  free(d->msgs);
  memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------ key table */

/* T_DVEC: an amoe_layer_values, one number (every layer) or a list (one per
 * MoE layer). nullable T_DBL and T_DVEC: null leaves the key unset (NaN,
 * or n = 0): a workload.routing override that names nothing. */
typedef enum { T_INT, T_U64, T_DBL, T_STR, T_BOOL, T_ENUM, T_DVEC } ktype;

/* A key left unset (0; a bool -1; a layer list empty) resolves to a default
 * that depends on other keys: each sweep point resolves it again when one
 * of those is swept. */
typedef enum {
  AUTO_NONE,
  AUTO_BY_MODEL,  /* routing.skew, top_m: from the model */
  AUTO_BY_NODES,  /* candidates: from tree.nodes */
  AUTO_BY_HW,     /* the engine mode: from the hardware */
  AUTO_BY_LAYOUT, /* the layout over the GPUs: from hardware.gpus or parallel.* */
} kauto;

typedef struct {
  const char *path;
  ktype type;
  size_t off, size;
  double lo, hi;
  const char *const *names;
  int nullable;
  int alias;   /* an older name of another key: read, never written */
  kauto autos; /* what its default depends on (AUTO_NONE: a plain default) */
} krow;

#define F(field) offsetof(amoe_spec, field), sizeof(((amoe_spec *)0)->field)
#define BIG 1e30
/* model.routing.* and workload.routing.*: one set of fields and ranges, two
 * homes (a workload's override is nullable: null keeps the model's) */
#define ROUTING_KEYS(P, R, NULLABLE, SKEW_AUTO)                                             \
  {P "locality", T_DBL, F(R.locality), 0, 0.999, NULL, NULLABLE, 0, 0},                         \
      {P "locality_first", T_DBL, F(R.locality_first), 0, 0.999, NULL, NULLABLE, 0, 0},         \
      {P "locality_last", T_DBL, F(R.locality_last), 0, 0.999, NULL, NULLABLE, 0, 0},           \
      {P "locality_peak", T_DBL, F(R.locality_peak), 0, 1, NULL, NULLABLE, 0, 0},               \
      {P "request_bias", T_DBL, F(R.request_bias), 0, 100, NULL, NULLABLE, 0, 0},               \
      {P "noise", T_DBL, F(R.noise), 0, 100, NULL, NULLABLE, 0, 0},                             \
      {P "drift_tokens", T_DBL, F(R.drift_tokens), 0, 1e9, NULL, NULLABLE, 0, 0},               \
      {P "temperature", T_DBL, F(R.temperature), 1e-3, 1e3, NULL, NULLABLE, 0, 0},              \
      {P "layer_correlation", T_DBL, F(R.layer_correlation), 0, 0.999, NULL, NULLABLE, 0, 0},   \
      {P "skew", T_DVEC, F(R.skew), 0, 100, NULL, 1, 0, SKEW_AUTO},                          \
      {P "score_scale", T_DVEC, F(R.score_scale), 1e-3, 1e3, NULL, 1, 0, 0},                 \
      {P "tree_sibling", T_DVEC, F(R.tree_sibling), 0, 0.99, NULL, 1, 0, 0},                 \
  {                                                                                          \
    P "tree_repeat", T_DVEC, F(R.tree_repeat), 0, 1, NULL, 1, 0, 0                           \
  }
/* The stable keys of docs/design.md §13, in the order spec.resolved.yaml lists them. */
static const krow KEYS[] = {
    {"name", T_STR, F(name), 0, 0, NULL, 0, 0, 0},
    {"model.name", T_STR, F(model.name), 0, 0, NULL, 0, 0, 0},
    {"model.layers", T_INT, F(model.layers), 1, AMOE_MAX_LAYERS, NULL, 0, 0, 0},
    {"model.moe_layers", T_INT, F(model.moe_layers), 0, AMOE_MAX_LAYERS, NULL, 0, 0, 0},
    {"model.experts", T_INT, F(model.experts), 2, AMOE_MAX_EXPERTS, NULL, 0, 0, 0},
    {"model.top_k", T_INT, F(model.top_k), 1, AMOE_MAX_TOPK, NULL, 0, 0, 0},
    {"model.shared_experts", T_INT, F(model.shared_experts), 0, 64, NULL, 0, 0, 0},
    {"model.hidden", T_INT, F(model.hidden), 1, 1 << 20, NULL, 0, 0, 0},
    {"model.moe_intermediate", T_INT, F(model.moe_intermediate), 1, 1 << 20, NULL, 0, 0, 0},
    {"model.dense_intermediate", T_INT, F(model.dense_intermediate), 0, 1 << 22, NULL, 0, 0, 0},
    {"model.router", T_ENUM, F(model.router), 0, 0, amoe_router_names, 0, 0, 0},
    {"model.weight_format", T_ENUM, F(model.weight_format), 0, 0, amoe_weight_fmt_names, 0, 0, 0},
    {"model.expert_bytes", T_DBL, F(model.expert_bytes), 0, BIG, NULL, 0, 0, 0},
    {"model.attn_bytes_per_layer", T_DBL, F(model.attn_bytes_per_layer), 0, BIG, NULL, 0, 0, 0},
    {"model.kv_bytes_per_token_layer", T_DBL, F(model.kv_bytes_per_token_layer), 0, BIG, NULL, 0, 0, 0},
    {"model.vocab", T_INT, F(model.vocab), 0, 1 << 24, NULL, 0, 0, 0},
    {"model.lm_head_bytes", T_DBL, F(model.lm_head_bytes), 0, BIG, NULL, 0, 0, 0},
    {"model.draft_head_bytes", T_DBL, F(model.draft_head_bytes), 0, BIG, NULL, 0, 0, 0},
    ROUTING_KEYS("model.routing.", model.routing, 0, AUTO_BY_MODEL),
    {"hardware.name", T_STR, F(hw.name), 0, 0, NULL, 0, 0, 0},
    {"hardware.hbm_bw", T_DBL, F(hw.hbm_bw), 1e6, BIG, NULL, 0, 0, 0},
    {"hardware.h2d_bw", T_DBL, F(hw.h2d_bw), 1e6, BIG, NULL, 0, 0, 0},
    {"hardware.peak_flops", T_DBL, F(hw.peak_flops), 1e6, BIG, NULL, 0, 0, 0},
    {"hardware.moe_flops", T_DBL, F(hw.moe_flops), 0, BIG, NULL, 0, 0, 0},
    {"hardware.launch_s", T_DBL, F(hw.launch_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.memory_bytes", T_DBL, F(hw.memory_bytes), 0, BIG, NULL, 0, 0, 0},
    {"hardware.step_s", T_DBL, F(hw.step_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.layer_fixed_s", T_DBL, F(hw.layer_fixed_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.moe_t0_s", T_DBL, F(hw.moe_t0_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.moe_eta", T_DBL, F(hw.moe_eta), 0.01, 2, NULL, 0, 0, 0},
    {"hardware.draft_step_fixed_s", T_DBL, F(hw.draft_step_fixed_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.copy_latency_s", T_DBL, F(hw.copy_latency_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.readback_s", T_DBL, F(hw.readback_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.step_host_s", T_DBL, F(hw.step_host_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.cuda_graphs", T_BOOL, F(hw.cuda_graphs), 0, 0, NULL, 0, 0, 0},
    {"hardware.gpus", T_INT, F(hw.gpus), 1, AMOE_MAX_GPUS, NULL, 0, 0, 0},
    {"hardware.interconnect.name", T_STR, F(hw.ic.name), 0, 0, NULL, 1, 0, 0},
    {"hardware.interconnect.allreduce_latency_s", T_DBL, F(hw.ic.allreduce_latency_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.interconnect.allreduce_bw", T_DBL, F(hw.ic.allreduce_bw), 0, BIG, NULL, 0, 0, 0},
    {"hardware.interconnect.dispatch_s", T_DBL, F(hw.ic.dispatch_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.interconnect.combine_s", T_DBL, F(hw.ic.combine_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.interconnect.layer_sync_per_peer_s", T_DBL, F(hw.ic.layer_sync_per_peer_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.interconnect.hop_latency_s", T_DBL, F(hw.ic.hop_latency_s), 0, 1, NULL, 0, 0, 0},
    {"hardware.interconnect.hop_bw", T_DBL, F(hw.ic.hop_bw), 0, BIG, NULL, 0, 0, 0},
    {"hardware.overlap_scheduler", T_BOOL, F(hw.overlap_scheduler), 0, 0, NULL, 0, 0, 0},
    {"parallel.attention_tp", T_INT, F(parallel.attention_tp), 0, AMOE_MAX_GPUS, NULL, 0, 0, AUTO_BY_LAYOUT},
    {"parallel.moe_ep", T_INT, F(parallel.moe_ep), 0, AMOE_MAX_GPUS, NULL, 0, 0, AUTO_BY_LAYOUT},
    {"parallel.moe_tp", T_INT, F(parallel.moe_tp), 0, AMOE_MAX_GPUS, NULL, 0, 0, AUTO_BY_LAYOUT},
    {"parallel.placement", T_ENUM, F(parallel.placement), 0, 0, amoe_placement_names, 0, 0, 0},
    {"parallel.placement_file", T_STR, F(parallel.placement_file), 0, 0, NULL, 1, 0, 0},
    {"parallel.redundant", T_INT, F(parallel.redundant), 0, AMOE_MAX_EXPERTS, NULL, 0, 0, 0},
    {"parallel.moe_comm", T_ENUM, F(parallel.moe_comm), 0, 0, amoe_moe_comm_names, 0, 0, 0},
    {"parallel.pipeline", T_INT, F(parallel.pipeline), 0, AMOE_MAX_GPUS, NULL, 0, 0, 0},
    {"engine.cuda_graphs", T_BOOL, F(engine.cuda_graphs), 0, 0, NULL, 0, 0, AUTO_BY_HW},
    {"engine.overlap_scheduler", T_BOOL, F(engine.overlap_scheduler), 0, 0, NULL, 0, 0, AUTO_BY_HW},
    {"engine.name", T_STR, F(engine.name), 0, 0, NULL, 1, 0, 0},
    {"engine.moe_kernels", T_ENUM, F(engine.moe_kernels), 0, 0, amoe_moe_kernels_names, 0, 0, 0},
    {"engine.kernels_per_layer", T_DBL, F(engine.kernels_per_layer), 0, 1e4, NULL, 0, 0, 0},
    {"engine.kernels_per_expert", T_DBL, F(engine.kernels_per_expert), 0, 1e4, NULL, 0, 0, 0},
    {"engine.visits", T_ENUM, F(engine.visits), 0, 0, amoe_visits_names, 0, 0, 0},
    {"engine.expert_host_s", T_DBL, F(engine.expert_host_s), 0, 1, NULL, 0, 0, 0},
    {"engine.visit_host_s", T_DBL, F(engine.visit_host_s), 0, 1, NULL, 0, 0, 0},
    {"engine.host_overlap", T_BOOL, F(engine.host_overlap), 0, 0, NULL, 0, 0, 0},
    {"engine.launch_s", T_DBL, F(engine.launch_s), 0, 1, NULL, 0, 0, 0},
    {"engine.moe_call_host_s", T_DBL, F(engine.moe_call_host_s), 0, 1, NULL, 0, 0, 0},
    {"engine.request_s", T_DBL, F(engine.request_s), 0, 1, NULL, 0, 0, 0},
    {"engine.request_per", T_ENUM, F(engine.request_per), 0, 0, amoe_request_per_names, 0, 0, 0},
    {"engine.step_host_s", T_DBL, F(engine.step_host_s), 0, 1, NULL, 0, 0, 0},
    {"engine.draft_step_s", T_DBL, F(engine.draft_step_s), 0, 1, NULL, 0, 0, 0},
    {"engine.draft_token_s", T_DBL, F(engine.draft_token_s), 0, 1, NULL, 0, 0, 0},
    {"engine.draft_extend_s", T_DBL, F(engine.draft_extend_s), 0, 1, NULL, 0, 0, 0},
    {"engine.tree_node_s", T_DBL, F(engine.tree_node_s), 0, 1, NULL, 0, 0, 0},
    {"engine.sample_s", T_DBL, F(engine.sample_s), 0, 1, NULL, 0, 0, 0},
    {"engine.cycle_host_s", T_DBL, F(engine.cycle_host_s), 0, 1, NULL, 0, 0, 0},
    {"workload.source", T_ENUM, F(workload.source), 0, 0, amoe_source_kind_names, 0, 0, 0},
    {"workload.path", T_STR, F(workload.path), 0, 0, NULL, 1, 0, 0},
    {"workload.window", T_INT, F(workload.window), 1, AMOE_MAX_NODES, NULL, 0, 0, 0},
    {"workload.routing_blocks", T_ENUM, F(workload.routing_blocks), 0, 0, amoe_routing_blocks_names, 0, 0, 0},
    {"workload.blocks", T_INT, F(workload.blocks), 0, 2e9, NULL, 0, 0, 0},
    {"workload.tokens_per_request", T_INT, F(workload.tokens_per_request), 1, 1e9, NULL, 0, 0, 0},
    {"workload.prompt_tokens", T_INT, F(workload.prompt_tokens), 0, 1e6, NULL, 0, 0, 0},
    {"workload.batch", T_INT, F(workload.batch), 1, 4096, NULL, 0, 0, 0},
    {"workload.prefill_schedule", T_ENUM, F(workload.prefill_schedule), 0, 0, amoe_prefill_schedule_names, 0, 0, 0},
    {"workload.chunk_tokens", T_INT, F(workload.chunk_tokens), 1, 1e6, NULL, 0, 0, 0},
    {"workload.context_tokens", T_INT, F(workload.context_tokens), 0, 1e8, NULL, 0, 0, 0},
    {"workload.seed", T_U64, F(workload.seed), 0, 0, NULL, 0, 0, 0},
    {"workload.top_m", T_INT, F(workload.top_m), 0, AMOE_MAX_EXPERTS, NULL, 0, 0, AUTO_BY_MODEL},
    {"workload.tree.depth", T_INT, F(workload.depth), 1, 16, NULL, 0, 0, 0},
    {"workload.tree.top_k", T_INT, F(workload.top_k), 1, AMOE_MAX_TOPK, NULL, 0, 0, 0},
    {"workload.tree.nodes", T_INT, F(workload.nodes), 1, AMOE_MAX_NODES, NULL, 0, 0, 0},
    {"workload.tree.candidates", T_INT, F(workload.candidates), 0, AMOE_MAX_NODES, NULL, 0, 0, AUTO_BY_NODES},
    {"workload.acceptance.tau", T_DBL, F(workload.tau), 1, 64, NULL, 0, 0, 0},
    {"workload.acceptance.replay", T_STR, F(workload.replay), 0, 0, NULL, 1, 0, 0},
    ROUTING_KEYS("workload.routing.", workload.routing, 1, AUTO_NONE),
    {"commitment.calibrate.blocks", T_INT, F(commitment.blocks), 1, 1e8, NULL, 0, 0, 0},
    {"commitment.calibrate.seed", T_U64, F(commitment.seed), 0, 0, NULL, 0, 0, 0},
    {"commitment.file", T_STR, F(commitment.file), 0, 0, NULL, 1, 0, 0},
    {"offload.slots_per_layer", T_INT, F(offload.slots_per_layer), 1, AMOE_MAX_EXPERTS, NULL, 0, 0, 0},
    {"offload.policy", T_ENUM, F(offload.policy), 0, 0, amoe_cache_policy_names, 0, 0, 0},
    {"offload.order", T_ENUM, F(offload.order), 0, 0, amoe_cache_order_names, 0, 0, 0},
    {"offload.overflow", T_ENUM, F(offload.overflow), 0, 0, amoe_cache_overflow_names, 0, 0, 0},
    {"offload.reset", T_ENUM, F(offload.reset), 0, 0, amoe_cache_reset_names, 0, 0, 0},
    {"offload.overlap", T_BOOL, F(offload.overlap), 0, 0, NULL, 0, 0, 0},
    {"offload.prefill", T_ENUM, F(offload.prefill), 0, 0, amoe_prefill_names, 0, 0, 0},
    {"offload.host_overhead_per_layer_s", T_DBL, F(hw.readback_s), 0, 1, NULL, 0, 1, 0}, /* now hardware.readback_s */
    {"acceptance_model.kappa", T_DBL, F(kappa), 0, 1e6, NULL, 0, 0, 0},
    {"acceptance_model.margin_min", T_DBL, F(margin_min), 0, 100, NULL, 0, 0, 0},
    {"output.dir", T_STR, F(output.dir), 0, 0, NULL, 1, 0, 0},
    {"output.blocks_csv", T_BOOL, F(output.blocks_csv), 0, 0, NULL, 0, 0, 0},
    {"output.dump_selection", T_STR, F(output.dump_selection), 0, 0, NULL, 1, 0, 0},
};
#define NKEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

/* An auto-resolved key (krow.autos) is unset: an int 0, a bool -1, a layer
 * list empty. */
static int auto_is_unset(const amoe_spec *s, const krow *k) {
  const char *p = (const char *)s + k->off;
  if (k->type == T_DVEC) return ((const amoe_layer_values *)(const void *)p)->n == 0;
  int v;
  memcpy(&v, p, sizeof v);
  return k->type == T_BOOL ? v < 0 : v == 0;
}
/* k's bit in amoe_experiment.auto_unset: its place among the auto rows. */
static int auto_bit(const krow *k) {
  int bit = 0;
  for (const krow *r = KEYS; r < k; r++) bit += r->autos != AUTO_NONE;
  return bit;
}
int amoe_experiment_auto(const amoe_experiment *x, const char *key) {
  for (int i = 0; i < NKEYS; i++)
    if (KEYS[i].autos && !strcmp(KEYS[i].path, key)) return (int)(x->auto_unset >> auto_bit(&KEYS[i]) & 1);
  return 0;
}
static void auto_unset(amoe_spec *s, const krow *k) {
  char *p = (char *)s + k->off;
  if (k->type == T_DVEC) {
    ((amoe_layer_values *)(void *)p)->n = 0;
    return;
  }
  const int v = k->type == T_BOOL ? -1 : 0;
  memcpy(p, &v, sizeof v);
}

static const krow *find_key(const char *path) {
  for (int i = 0; i < NKEYS; i++)
    if (!strcmp(KEYS[i].path, path)) return &KEYS[i];
  return NULL;
}

static int is_prefix_of_key(const char *path) {
  size_t n = strlen(path);
  for (int i = 0; i < NKEYS; i++)
    if (!strncmp(KEYS[i].path, path, n) && KEYS[i].path[n] == '.') return 1;
  return 0;
}

/* Edit distance of a and b (short strings: keys), capped at 99. */
static int edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 60 || lb > 60) return 99;
  int d[61][61];
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
      d[i][j] = c;
    }
  return d[la][lb];
}

/* " (did you mean 'K'?)" for the nearest known key within a few edits, or "". */
static const char *did_you_mean(const char *path) {
  static char buf[200];
  int best = 99;
  const char *bk = NULL;
  for (int i = 0; i < NKEYS; i++) {
    const int dd = edit_distance(path, KEYS[i].path);
    if (dd < best) best = dd, bk = KEYS[i].path;
  }
  const int lim = (int)strlen(path) / 4 > 2 ? (int)strlen(path) / 4 : 2;
  if (!bk || best > lim) return "";
  snprintf(buf, sizeof buf, " (did you mean '%s'?)", bk);
  return buf;
}

static int is_null_text(const char *v) { return !strcmp(v, "null") || !strcmp(v, "~") || !v[0]; }

/* Sets one table key from scalar text. quoted: the YAML scalar was quoted. */
static int set_value(amoe_spec *s, const krow *k, const char *v, int quoted, const char *where,
                     amoe_diag *d) {
  char *p = (char *)s + k->off, *end;
  if (!quoted && is_null_text(v) && k->nullable && (k->type == T_DBL || k->type == T_DVEC)) { /* unset */
    if (k->type == T_DBL) *(double *)(void *)p = NAN;
    else ((amoe_layer_values *)(void *)p)->n = 0;
    return 1;
  }
  if (!quoted && is_null_text(v) && k->type != T_STR) {
    amoe_diag_add(d, "%s: %s needs a value", where, k->path);
    return 0;
  }
  switch (k->type) {
  case T_STR:
    if (!quoted && is_null_text(v)) v = "";
    if (!k->nullable && !v[0]) {
      amoe_diag_add(d, "%s: %s must not be empty", where, k->path);
      return 0;
    }
    if (strlen(v) >= k->size) {
      amoe_diag_add(d, "%s: %s is longer than %zu characters", where, k->path, k->size - 1);
      return 0;
    }
    memcpy(p, v, strlen(v) + 1);
    return 1;
  case T_BOOL: {
    int b = -1;
    if (!quoted) {
      if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) b = 1;
      if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) b = 0;
    }
    if (b < 0) {
      amoe_diag_add(d, "%s: %s must be true or false, not '%s'", where, k->path, v);
      return 0;
    }
    *(int *)p = b;
    return 1;
  }
  case T_ENUM:
    for (int i = 0; k->names[i]; i++)
      if (!strcmp(k->names[i], v)) {
        *(int *)p = i;
        return 1;
      }
    {
      char list[256] = "";
      for (int i = 0; k->names[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", k->names[i]);
      amoe_diag_add(d, "%s: %s must be one of %s, not '%s'", where, k->path, list, v);
    }
    return 0;
  case T_INT:
  case T_U64: {
    errno = 0;
    if (quoted) goto bad_int;
    if (k->type == T_U64) {
      if (v[0] == '-') goto bad_int;
      unsigned long long x = strtoull(v, &end, 10);
      if (errno || *end || end == v) goto bad_int;
      *(uint64_t *)p = (uint64_t)x;
      return 1;
    }
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v) goto bad_int;
    if ((double)x < k->lo || (double)x > k->hi) {
      amoe_diag_add(d, "%s: %s = %lld is out of range %.0f..%.0f", where, k->path, x, k->lo, k->hi);
      return 0;
    }
    *(int *)p = (int)x;
    return 1;
  bad_int:
    amoe_diag_add(d, "%s: %s must be an integer, not '%s'", where, k->path, v);
    return 0;
  }
  case T_DVEC: /* one number: every layer (a list comes through set_list) */
  case T_DBL: {
    errno = 0;
    double x = quoted ? NAN : strtod(v, &end);
    if (quoted || errno || *end || end == v || !isfinite(x)) {
      amoe_diag_add(d, "%s: %s must be a number, not '%s'", where, k->path, v);
      return 0;
    }
    if (x < k->lo || x > k->hi) {
      amoe_diag_add(d, "%s: %s = %g is out of range %g..%g", where, k->path, x, k->lo, k->hi);
      return 0;
    }
    if (k->type == T_DVEC) {
      amoe_layer_values *lv = (amoe_layer_values *)(void *)p;
      lv->n = 1;
      lv->v[0] = x;
    } else
      *(double *)p = x;
    return 1;
  }
  }
  return 0;
}

/* ------------------------------------------------------------ YAML helpers */

typedef struct {
  yaml_document_t doc;
  const char *file;
  amoe_diag *d;
  const char *base_dir; /* for relative paths inside the spec */
} ydoc;

static void at(const ydoc *y, const yaml_node_t *n, char *buf, size_t len) {
  snprintf(buf, len, "%s:%lu:%lu", y->file, (unsigned long)n->start_mark.line + 1,
           (unsigned long)n->start_mark.column + 1);
}

static const char *scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }
static int quoted(const yaml_node_t *n) {
  return n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
         n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
}

static int load_file(ydoc *y, const char *path, amoe_diag *d) {
  memset(y, 0, sizeof *y);
  y->file = path;
  y->d = d;
  FILE *f = fopen(path, "rb");
  if (!f) {
    amoe_diag_add(d, "%s: cannot open: %s", path, strerror(errno));
    return 0;
  }
  yaml_parser_t p;
  yaml_parser_initialize(&p);
  yaml_parser_set_input_file(&p, f);
  int ok = yaml_parser_load(&p, &y->doc);
  if (!ok) {
    amoe_diag_add(d, "%s:%lu:%lu: %s%s%s", path, (unsigned long)p.problem_mark.line + 1,
                  (unsigned long)p.problem_mark.column + 1, p.problem ? p.problem : "YAML error",
                  p.context ? " " : "", p.context ? p.context : "");
  }
  yaml_parser_delete(&p);
  fclose(f);
  return ok;
}

static int load_string(ydoc *y, const char *text, const char *where, amoe_diag *d) {
  memset(y, 0, sizeof *y);
  y->file = where;
  y->d = d;
  yaml_parser_t p;
  yaml_parser_initialize(&p);
  yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
  int ok = yaml_parser_load(&p, &y->doc);
  if (!ok) amoe_diag_add(d, "%s: %s", where, p.problem ? p.problem : "YAML error");
  yaml_parser_delete(&p);
  return ok;
}

/* ------------------------------------------------------------ presets */

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

void amoe_presets_dir(char *out, size_t n, const char *kind, const char *spec_path) {
  const char *env = getenv("ACCEPTMOE_DATA");
  char buf[AMOE_PATH_MAX + 64];
  if (env && env[0]) {
    snprintf(out, n, "%s/%s", env, kind);
    return;
  }
  snprintf(buf, sizeof buf, "workloads/%s", kind);
  if (is_dir(buf)) {
    snprintf(out, n, "%s", buf);
    return;
  }
  if (spec_path) { /* a spec in workloads/specs/ finds its siblings */
    char dir[AMOE_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", spec_path);
    char *slash = strrchr(dir, '/');
    if (slash) {
      *slash = 0;
      snprintf(buf, sizeof buf, "%s/../%s", dir, kind);
      if (is_dir(buf)) {
        snprintf(out, n, "%s", buf);
        return;
      }
    }
  }
  snprintf(out, n, "%s/workloads/%s", AMOE_SOURCE_DIR, kind);
}

static void walk(ydoc *y, yaml_node_t *map, const char *prefix, amoe_spec *s, int preset);

static void engine_defaults(amoe_engine *e);

/* A preset of one section: hardware.interconnect: NAME (workloads/interconnect/)
 * or engine: NAME (workloads/engines/). The section starts from its defaults. */
static int load_section_preset(amoe_spec *s, const char *kind, const char *prefix, const char *name,
                               const char *where, amoe_diag *d) {
  char dir[AMOE_PATH_MAX], path[AMOE_PATH_MAX + 160];
  const int ic = !strcmp(prefix, "hardware.interconnect");
  amoe_presets_dir(dir, sizeof dir, kind, NULL);
  for (const char *c = name; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.')) {
      amoe_diag_add(d, "%s: '%s' is not an %s preset name", where, name, ic ? "interconnect" : "engine");
      return 0;
    }
  snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
  struct stat sb;
  if (stat(path, &sb) != 0) {
    amoe_diag_add(d, "%s: unknown %s preset '%s' (no %s)", where, ic ? "interconnect" : "engine", name, path);
    return 0;
  }
  ydoc y;
  int before = d->n;
  if (!load_file(&y, path, d)) return 0;
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  if (ic) memset(&s->hw.ic, 0, sizeof s->hw.ic);
  else engine_defaults(&s->engine);
  if (!root || root->type != YAML_MAPPING_NODE) amoe_diag_add(d, "%s: a preset must be a mapping", path);
  else walk(&y, root, prefix, s, 1);
  yaml_document_delete(&y.doc);
  char *nm = ic ? s->hw.ic.name : s->engine.name;
  if (!nm[0]) snprintf(nm, AMOE_NAME_MAX, "%s", name);
  return d->n == before;
}

static int load_preset(amoe_spec *s, int hw, const char *name, const char *where, amoe_diag *d) {
  char dir[AMOE_PATH_MAX], path[AMOE_PATH_MAX + 160];
  amoe_presets_dir(dir, sizeof dir, hw ? "hw" : "models", NULL);
  for (const char *c = name; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.' ||
          (*c >= 'A' && *c <= 'Z'))) {
      amoe_diag_add(d, "%s: '%s' is not a preset name", where, name);
      return 0;
    }
  snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
  struct stat sb;
  if (stat(path, &sb) != 0) {
    amoe_diag_add(d, "%s: unknown %s preset '%s' (no %s)", where, hw ? "hardware" : "model", name, path);
    return 0;
  }
  ydoc y;
  int before = d->n;
  if (!load_file(&y, path, d)) return 0;
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  if (hw) {
    memset(&s->hw, 0, sizeof s->hw);
    s->hw.moe_eta = 1; /* a preset without it: expert streaming at hbm_bw */
    s->hw.cuda_graphs = s->hw.overlap_scheduler = 1; /* and an engine with CUDA graphs and the overlap scheduler */
    s->hw.gpus = 1;
  } else {
    memset(&s->model, 0, sizeof s->model);
    amoe_model_routing_defaults(&s->model);
  }
  if (!root || root->type != YAML_MAPPING_NODE)
    amoe_diag_add(d, "%s: a preset must be a mapping", path);
  else
    walk(&y, root, hw ? "hardware" : "model", s, 1);
  yaml_document_delete(&y.doc);
  if (hw && !s->hw.name[0]) snprintf(s->hw.name, sizeof s->hw.name, "%s", name);
  if (hw && d->n == before) { /* measured numbers override the preset's leads (docs/design.md §4) */
    s->hw_calibration[0] = 0;
    char cal[AMOE_PATH_MAX + 200];
    const char *env = getenv("ACCEPTMOE_CALIBRATION");
    if (env && !strcmp(env, "off")) return 1;
    snprintf(cal, sizeof cal, "%s/%s.yaml", env && env[0] ? env : "results/calibration", name);
    if (stat(cal, &sb) != 0) snprintf(cal, sizeof cal, "%s/results/calibration/%s.yaml", AMOE_SOURCE_DIR, name);
    if (stat(cal, &sb) == 0) {
      ydoc c;
      if (!load_file(&c, cal, d)) return 0;
      yaml_node_t *croot = yaml_document_get_root_node(&c.doc);
      if (croot && croot->type == YAML_MAPPING_NODE) walk(&c, croot, "hardware", s, 1);
      else amoe_diag_add(d, "%s: a calibration file must be a mapping", cal);
      yaml_document_delete(&c.doc);
      snprintf(s->hw_calibration, sizeof s->hw_calibration, "%.1000s", cal);
    }
  }
  if (!hw && !s->model.name[0]) snprintf(s->model.name, sizeof s->model.name, "%s", name);
  return d->n == before;
}

/* ------------------------------------------------------------ policies */

static void names_of(char *buf, size_t n, int verifier) {
  buf[0] = 0;
  int cnt = verifier ? amoe_verifier_rows() : amoe_draft_rows();
  for (int i = 0; i < cnt; i++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? ", " : "",
             verifier ? amoe_verifier_table[i].name : amoe_draft_table[i].name);
}

static void policy_defaults(amoe_policy_row *r) { amoe_policy_init(r, 0, 0); }

static int set_policy_name(ydoc *y, yaml_node_t *n, amoe_policy_row *r, int verifier, int either) {
  char w[AMOE_PATH_MAX + 64], names[256];
  at(y, n, w, sizeof w);
  if (n->type != YAML_SCALAR_NODE) {
    amoe_diag_add(y->d, "%s: a policy name must be a string", w);
    return 0;
  }
  const char *v = scalar(n);
  int vi = amoe_verifier_find(v), di = amoe_draft_find(v);
  if ((verifier || either) && vi >= 0) {
    r->verifier = vi;
    return 1;
  }
  if ((!verifier || either) && di >= 0) {
    r->draft = di;
    return 1;
  }
  names_of(names, sizeof names, 1);
  char dn[256];
  names_of(dn, sizeof dn, 0);
  amoe_diag_add(y->d, "%s: unknown %s policy '%s' (verifiers: %s; drafts: %s)", w,
                either ? "" : verifier ? "verifier" : "draft", v, names, dn);
  return 0;
}

/* The parameter `key` of a table row (row->params), for a message. */
static const amoe_param_def *param_in(const amoe_param_def *p, const char *key) {
  for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++)
    if (!strcmp(p[i].key, key)) return &p[i];
  return NULL;
}

/* One `key: value` of a policy mapping, a parameter of the row's draft or
 * verifier, checked against its table row's range. */
static int set_policy_param(ydoc *y, yaml_node_t *k, yaml_node_t *v, amoe_policy_row *r, const char *key,
                            unsigned *given) {
  char kw[AMOE_PATH_MAX + 64];
  int which, idx;
  const amoe_param_def *pd = amoe_policy_param(r, key, &which, &idx);
  if (!pd) {
    /* another policy's parameter: resolved specs written before parameters
     * were per policy list every one at its default; accept those */
    char others[256] = "";
    double dv = NAN;
    for (int w = 0; w < 2; w++)
      for (int i = 0; i < (w ? amoe_verifier_rows() : amoe_draft_rows()); i++) {
        const amoe_param_def *o = param_in(w ? amoe_verifier_table[i].params : amoe_draft_table[i].params, key);
        if (!o) continue;
        snprintf(others + strlen(others), sizeof others - strlen(others), "%s%s", others[0] ? ", " : "",
                 w ? amoe_verifier_table[i].name : amoe_draft_table[i].name);
        dv = o->def;
      }
    char *end;
    if (others[0] && v->type == YAML_SCALAR_NODE && strtod(scalar(v), &end) == dv && !*end) return 1;
    at(y, k, kw, sizeof kw);
    if (others[0])
      amoe_diag_add(y->d, "%s: '%s' is not a parameter of draft %s or verifier %s (it is of: %s)", kw, key,
                    amoe_draft_table[r->draft].name, amoe_verifier_table[r->verifier].name, others);
    else
    {
      char known[256] = "draft, verifier";
      for (int w = 0; w < 2; w++) {
        const amoe_param_def *p = w ? amoe_verifier_table[r->verifier].params : amoe_draft_table[r->draft].params;
        for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++)
          snprintf(known + strlen(known), sizeof known - strlen(known), ", %s", p[i].key);
      }
      amoe_diag_add(y->d, "%s: unknown policy key '%s' (this policy takes: %s)", kw, key, known);
    }
    return 0;
  }
  at(y, v, kw, sizeof kw);
  if (v->type != YAML_SCALAR_NODE) {
    amoe_diag_add(y->d, "%s: %s must be a number", kw, key);
    return 0;
  }
  /* the scalar parser, on a double beside the row */
  double x;
  const krow kr = {pd->key, T_DBL, 0, 8, pd->min, pd->max, NULL, 0, 0, AUTO_NONE};
  if (!set_value((amoe_spec *)(void *)&x, &kr, scalar(v), quoted(v), kw, y->d)) return 0;
  if (pd->integer && x != floor(x)) {
    amoe_diag_add(y->d, "%s: %s must be an integer, not '%s'", kw, key, scalar(v));
    return 0;
  }
  (which ? r->vparam : r->dparam)[idx] = x;
  *given |= 1u << (which * AMOE_MAX_PARAMS + idx);
  return 1;
}

/* Every parameter without a default was given. */
static int required_params_given(ydoc *y, const amoe_policy_row *r, unsigned given, const char *where) {
  int ok = 1;
  for (int w = 0; w < 2; w++) {
    const amoe_param_def *p = w ? amoe_verifier_table[r->verifier].params : amoe_draft_table[r->draft].params;
    for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++)
      if (isnan(p[i].def) && !(given >> (w * AMOE_MAX_PARAMS + i) & 1)) {
        amoe_diag_add(y->d, "%s: %s %s needs %s", where, w ? "verifier" : "draft",
                      w ? amoe_verifier_table[r->verifier].name : amoe_draft_table[r->draft].name, p[i].key);
        ok = 0;
      }
  }
  return ok;
}

/* The opening every section parser shares: n must be a node of `type`,
 * else a diagnostic "FILE:LINE:COL: what" and 0. */
static int expect_node(ydoc *y, yaml_node_t *n, yaml_node_type_t type, const char *what) {
  if (n->type == type) return 1;
  char w[AMOE_PATH_MAX + 64];
  at(y, n, w, sizeof w);
  amoe_diag_add(y->d, "%s: %s", w, what);
  return 0;
}

static void parse_policies(ydoc *y, yaml_node_t *seq, amoe_spec *s) {
  char w[AMOE_PATH_MAX + 64];
  if (!expect_node(y, seq, YAML_SEQUENCE_NODE, "policies must be a list")) return;
  s->npolicies = 0;
  for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++) {
    yaml_node_t *n = yaml_document_get_node(&y->doc, *it);
    at(y, n, w, sizeof w);
    if (s->npolicies == AMOE_MAX_POLICIES - 1) {
      amoe_diag_add(y->d, "%s: at most %d policies", w, AMOE_MAX_POLICIES - 1);
      return;
    }
    amoe_policy_row *r = &s->policies[s->npolicies];
    policy_defaults(r);
    int ok = 1;
    unsigned given = 0;
    if (n->type == YAML_SCALAR_NODE) {
      ok = set_policy_name(y, n, r, 0, 1);
      if (ok) amoe_policy_init(r, r->draft, r->verifier);
    } else if (n->type == YAML_MAPPING_NODE) {
      /* the names first: they say which parameters there are */
      for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
        const char *key = k->type == YAML_SCALAR_NODE ? scalar(k) : "";
        if (!strcmp(key, "draft") || !strcmp(key, "verifier")) ok &= set_policy_name(y, v, r, key[0] == 'v', 0);
      }
      if (ok) amoe_policy_init(r, r->draft, r->verifier);
      for (yaml_node_pair_t *p = n->data.mapping.pairs.start; ok && p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
        const char *key = k->type == YAML_SCALAR_NODE ? scalar(k) : "";
        if (!strcmp(key, "draft") || !strcmp(key, "verifier")) continue;
        ok &= set_policy_param(y, k, v, r, key, &given);
      }
    } else {
      amoe_diag_add(y->d, "%s: a policy is a name or a mapping", w);
      ok = 0;
    }
    if (!ok || !required_params_given(y, r, given, w)) continue;
    amoe_policy_label(r);
    s->npolicies++;
  }
}

/* ------------------------------------------------------------ walking */

/* A list of numbers in [lo, hi] at commitment.`key` into out (at most
 * AMOE_MAX_DEPTH); returns the count. */
static int parse_depths(ydoc *y, yaml_node_t *v, const char *key, double lo, double hi, double *out) {
  char w[AMOE_PATH_MAX + 64];
  int n = 0;
  at(y, v, w, sizeof w);
  if (v->type != YAML_SEQUENCE_NODE) {
    amoe_diag_add(y->d, "%s: commitment.%s must be a list of numbers, one per depth", w, key);
    return 0;
  }
  for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
    yaml_node_t *x = yaml_document_get_node(&y->doc, *it);
    at(y, x, w, sizeof w);
    char *end;
    double val = x->type == YAML_SCALAR_NODE ? strtod(scalar(x), &end) : NAN;
    if (x->type != YAML_SCALAR_NODE || *end || !(val >= lo && val <= hi)) {
      amoe_diag_add(y->d, "%s: commitment.%s entries must be numbers in [%g, %g]", w, key, lo, hi);
    } else if (n == AMOE_MAX_DEPTH) {
      amoe_diag_add(y->d, "%s: commitment.%s has more than %d entries", w, key, AMOE_MAX_DEPTH);
      break;
    } else {
      out[n++] = val;
    }
  }
  return n;
}

static void parse_commitment(ydoc *y, yaml_node_t *n, amoe_spec *s) {
  char w[AMOE_PATH_MAX + 64];
  if (!expect_node(y, n, YAML_MAPPING_NODE, "commitment must be {calibrate: {...}}, {table: [...]} or {file: F}"))
    return;
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
    const char *key = k->type == YAML_SCALAR_NODE ? scalar(k) : "";
    at(y, v, w, sizeof w);
    if (!strcmp(key, "table")) {
      s->commitment.mode = AMOE_COMMIT_TABLE;
      s->commitment.table_n = parse_depths(y, v, "table", 0, 1, s->commitment.table);
    } else if (!strcmp(key, "mass")) { /* m̄_d, beside a table (acceptmoe calibrate writes both) */
      s->commitment.mass_n = parse_depths(y, v, "mass", 0, AMOE_MAX_NODES, s->commitment.mass);
    } else if (!strcmp(key, "file")) {
      s->commitment.mode = AMOE_COMMIT_FILE;
      if (v->type == YAML_SCALAR_NODE)
        set_value(s, find_key("commitment.file"), scalar(v), quoted(v), w, y->d);
      else
        amoe_diag_add(y->d, "%s: commitment.file must be a path", w);
    } else if (!strcmp(key, "calibrate")) {
      s->commitment.mode = AMOE_COMMIT_CALIBRATE;
      if (v->type == YAML_MAPPING_NODE) walk(y, v, "commitment.calibrate", s, 0);
      else if (!(v->type == YAML_SCALAR_NODE && is_null_text(scalar(v))))
        amoe_diag_add(y->d, "%s: commitment.calibrate must be {blocks: N, seed: S}", w);
    } else {
      at(y, k, w, sizeof w);
      amoe_diag_add(y->d, "%s: unknown key 'commitment.%s' (calibrate, table, mass, file)", w, key);
    }
  }
  if (s->commitment.mass_n && s->commitment.mode != AMOE_COMMIT_TABLE) {
    at(y, n, w, sizeof w);
    amoe_diag_add(y->d, "%s: commitment.mass goes beside commitment.table", w);
  }
}

/* A section's preset by name: model, hardware or engine. */
static void load_named(amoe_spec *s, const char *sect, const char *name, const char *where, amoe_diag *d) {
  if (!strcmp(sect, "engine")) load_section_preset(s, "engines", "engine", name, where, d);
  else load_preset(s, sect[0] == 'h', name, where, d);
}

/* model:, hardware: or engine: as a preset name, or a mapping whose
 * `preset` is loaded first and its other keys set over it. */
static void parse_preset_node(ydoc *y, yaml_node_t *v, amoe_spec *s, const char *sect) {
  char w[AMOE_PATH_MAX + 64];
  at(y, v, w, sizeof w);
  if (v->type == YAML_SCALAR_NODE) {
    load_named(s, sect, scalar(v), w, y->d);
    return;
  }
  if (v->type != YAML_MAPPING_NODE) {
    amoe_diag_add(y->d, "%s: %s must be a preset name or a mapping", w, sect);
    return;
  }
  for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *x = yaml_document_get_node(&y->doc, p->value);
    if (k->type == YAML_SCALAR_NODE && !strcmp(scalar(k), "preset")) {
      at(y, x, w, sizeof w);
      if (x->type != YAML_SCALAR_NODE)
        amoe_diag_add(y->d, "%s: %s.preset must be a name", w, sect);
      else
        load_named(s, sect, scalar(x), w, y->d);
    }
  }
  walk(y, v, sect, s, 0);
}

/* Sets a T_DVEC key from a YAML sequence: one number per MoE layer, each
 * checked as set_value checks one (its own position in messages). */
static void set_list(ydoc *y, yaml_node_t *v, amoe_spec *s, const krow *k) {
  amoe_layer_values *lv = (amoe_layer_values *)(void *)((char *)s + k->off), got = {0};
  char w[AMOE_PATH_MAX + 64];
  amoe_spec one;
  const int n = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
  if (n < 1 || n > AMOE_MAX_LAYERS) {
    at(y, v, w, sizeof w);
    amoe_diag_add(y->d, "%s: %s takes 1..%d values, not %d", w, k->path, AMOE_MAX_LAYERS, n);
    return;
  }
  int ok = 1;
  for (int i = 0; i < n; i++) {
    yaml_node_t *e = yaml_document_get_node(&y->doc, v->data.sequence.items.start[i]);
    at(y, e, w, sizeof w);
    if (e->type != YAML_SCALAR_NODE || is_null_text(scalar(e))) {
      amoe_diag_add(y->d, "%s: %s: each value must be a number", w, k->path);
      ok = 0;
      continue;
    }
    krow one_k = *k;
    one_k.nullable = 0;
    if (!set_value(&one, &one_k, scalar(e), quoted(e), w, y->d)) {
      ok = 0;
      continue;
    }
    got.v[i] = ((amoe_layer_values *)(void *)((char *)&one + k->off))->v[0];
  }
  if (!ok) return;
  got.n = n;
  *lv = got;
}

/* Walks a mapping whose keys extend `prefix`. preset: a preset file (its
 * citation keys `source`, `sources` and `notes` are allowed and skipped). */
static void walk(ydoc *y, yaml_node_t *map, const char *prefix, amoe_spec *s, int preset) {
  char w[AMOE_PATH_MAX + 64], path[256];
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
    at(y, k, w, sizeof w);
    if (k->type != YAML_SCALAR_NODE) {
      amoe_diag_add(y->d, "%s: keys must be strings", w);
      continue;
    }
    const char *key = scalar(k);
    if (prefix[0])
      snprintf(path, sizeof path, "%s.%s", prefix, key);
    else
      snprintf(path, sizeof path, "%s", key);
    if (preset && (!strcmp(key, "source") || !strcmp(key, "sources") || !strcmp(key, "notes") ||
                   !strcmp(key, "measured"))) continue;
    if (!strcmp(path, "model.preset") || !strcmp(path, "hardware.preset") || !strcmp(path, "engine.preset")) continue;
    if (!strcmp(path, "hardware.interconnect") && v->type == YAML_SCALAR_NODE) { /* a preset name */
      at(y, v, w, sizeof w);
      load_section_preset(s, "interconnect", "hardware.interconnect", scalar(v), w, y->d);
      continue;
    }
    if (!strcmp(path, "model") || !strcmp(path, "hardware") || !strcmp(path, "engine")) {
      parse_preset_node(y, v, s, path);
      continue;
    }
    if (!strcmp(path, "policies")) {
      parse_policies(y, v, s);
      continue;
    }
    if (!strcmp(path, "sweep")) continue; /* handled by the caller */
    if (!strcmp(path, "commitment")) {
      parse_commitment(y, v, s);
      continue;
    }
    if (!strcmp(path, "offload")) {
      if (v->type == YAML_SCALAR_NODE && is_null_text(scalar(v))) {
        s->offload.enabled = 0;
        continue;
      }
      s->offload.enabled = 1;
    }
    const krow *kr = find_key(path);
    char vw[AMOE_PATH_MAX + 64];
    at(y, v, vw, sizeof vw);
    if (kr) {
      if (kr->type == T_DVEC && v->type == YAML_SEQUENCE_NODE)
        set_list(y, v, s, kr);
      else if (v->type != YAML_SCALAR_NODE)
        amoe_diag_add(y->d, "%s: %s must be a single value", vw, path);
      else
        set_value(s, kr, scalar(v), quoted(v), vw, y->d);
      continue;
    }
    if (is_prefix_of_key(path)) {
      if (v->type == YAML_MAPPING_NODE)
        walk(y, v, path, s, preset);
      else
        amoe_diag_add(y->d, "%s: %s must be a mapping", vw, path);
      continue;
    }
    amoe_diag_add(y->d, "%s: unknown key '%s'%s", w, path, did_you_mean(path));
  }
}

/* The engine without a preset: the hardware preset's mode; kernel counts of
 * a C++ engine measured at ~790 launches per decoded token of
 * Qwen3-30B-A3B's 48 layers (real-data costs/engine_modes.csv: 16 per
 * layer, one of them the fused MoE call), and ~4.5 per expert where an
 * offload path runs one expert at a time ((3,091 − 632 copies − 790 + 48)
 * / (48 · 8)); launches added to the device time (docs/validation.md). */
static void engine_defaults(amoe_engine *e) {
  memset(e, 0, sizeof *e);
  e->cuda_graphs = -1;
  e->overlap_scheduler = -1;
  e->moe_kernels = AMOE_MOE_FUSED;
  e->kernels_per_layer = 15;
  e->kernels_per_expert = 4.5;
  e->visits = AMOE_VISIT_HIT; /* launch_s, step_host_s 0: the hardware preset's */
}

/* ------------------------------------------------------------ public */

void amoe_spec_defaults(amoe_spec *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "run");
  amoe_workload_spec *w = &s->workload;
  w->source = AMOE_SRC_SYNTHETIC;
  w->window = 8;
  w->blocks = 2000;
  w->tokens_per_request = 256;
  w->context_tokens = 1024;
  w->batch = 1;
  w->chunk_tokens = 512;
  w->seed = 1;
  w->depth = 5;
  w->top_k = 8;
  w->nodes = 64;
  w->tau = 4.4;
  /* Routing defaults fitted to the real Mixtral-8x7B trace: docs/generator.md. */
  amoe_routing_unset(&w->routing); /* every field the model preset's (model.routing) */
  s->commitment.mode = AMOE_COMMIT_CALIBRATE;
  s->commitment.blocks = 500;
  s->commitment.seed = 0; /* 0: workload.seed + 1000 */
  s->offload.slots_per_layer = 48;
  s->offload.policy = AMOE_CACHE_LRU;
  engine_defaults(&s->engine);
  s->hw.moe_eta = 1; /* a hardware shape given in full without it: streaming at hbm_bw */
  s->hw.cuda_graphs = s->hw.overlap_scheduler = 1;
  s->hw.gpus = 1;
  amoe_model_routing_defaults(&s->model);
  s->kappa = AMOE_DEFAULT_KAPPA;
  s->margin_min = AMOE_DEFAULT_MARGIN_MIN;
}

static int spec_set(amoe_spec *s, const char *key, const char *value, const char *where, amoe_diag *d) {
  int before = d->n;
  char text[AMOE_PATH_MAX + 256];
  /* Build a one-key YAML document so every key goes through the same walk. */
  ydoc y;
  const char *dot = strrchr(key, '.');
  if (!strcmp(key, "model") || !strcmp(key, "hardware") || !strcmp(key, "engine")) {
    load_named(s, key, value, where, d);
    return d->n == before;
  }
  if (!strcmp(key, "hardware.interconnect")) {
    load_section_preset(s, "interconnect", "hardware.interconnect", value, where, d);
    return d->n == before;
  }
  if (!strcmp(key, "engine.preset")) {
    load_named(s, "engine", value, where, d);
    return d->n == before;
  }
  if (dot && (!strncmp(key, "offload.", 8))) s->offload.enabled = 1;
  const krow *kr = find_key(key);
  if (!kr) {
    if (!strcmp(key, "policies") || !strcmp(key, "commitment.table")) {
      snprintf(text, sizeof text, "%s: %s", !strcmp(key, "policies") ? "policies" : "commitment",
               !strcmp(key, "policies") ? value : "");
      if (!strcmp(key, "commitment.table")) snprintf(text, sizeof text, "commitment: {table: %s}", value);
      if (!load_string(&y, text, where, d)) return 0;
      yaml_node_t *root = yaml_document_get_root_node(&y.doc);
      if (root && root->type == YAML_MAPPING_NODE) walk(&y, root, "", s, 0);
      yaml_document_delete(&y.doc);
      return d->n == before;
    }
    amoe_diag_add(d, "%s: unknown key '%s'%s", where, key, did_you_mean(key));
    return 0;
  }
  /* a commitment key also picks its form */
  if (!strcmp(key, "commitment.file")) s->commitment.mode = AMOE_COMMIT_FILE;
  if (!strncmp(key, "commitment.calibrate.", 21)) s->commitment.mode = AMOE_COMMIT_CALIBRATE;
  snprintf(text, sizeof text, "%s", value);
  if (!load_string(&y, text, where, d)) return 0;
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  if (!root)
    set_value(s, kr, "", 0, where, d);
  else if (kr->type == T_DVEC && root->type == YAML_SEQUENCE_NODE)
    set_list(&y, root, s, kr);
  else if (root->type != YAML_SCALAR_NODE)
    amoe_diag_add(d, "%s: %s must be a single value", where, key);
  else
    set_value(s, kr, scalar(root), quoted(root), where, d);
  yaml_document_delete(&y.doc);
  return d->n == before;
}

/* `[k1, k2, ...]: [[v1, v2, ...], ...]`: one sweep key each, the later ones
 * tied to the first, every value checked at its own position. */
static void parse_sweep_tied(ydoc *y, yaml_node_t *k, yaml_node_t *v, const char *w, amoe_experiment *x) {
  const int nk = (int)(k->data.sequence.items.top - k->data.sequence.items.start);
  if (nk < 1 || x->nsweep + nk > AMOE_MAX_SWEEP_KEYS) {
    amoe_diag_add(y->d, "%s: tied sweep keys: 1 to %d keys in all", w, AMOE_MAX_SWEEP_KEYS);
    return;
  }
  if (v->type != YAML_SEQUENCE_NODE) {
    amoe_diag_add(y->d, "%s: tied sweep keys take a list of [%d values] lists", w, nk);
    return;
  }
  const int first = x->nsweep;
  for (int i = 0; i < nk; i++) {
    yaml_node_t *ki = yaml_document_get_node(&y->doc, k->data.sequence.items.start[i]);
    const char *key = ki->type == YAML_SCALAR_NODE ? scalar(ki) : "";
    if (!find_key(key) && strcmp(key, "model") && strcmp(key, "hardware")) {
      char kw[AMOE_PATH_MAX + 64];
      at(y, ki, kw, sizeof kw);
      amoe_diag_add(y->d, "%s: cannot sweep unknown key '%s'%s", kw, key, did_you_mean(key));
      return;
    }
    amoe_sweep_key *sk = &x->sweep[first + i];
    memset(sk, 0, sizeof *sk);
    snprintf(sk->key, sizeof sk->key, "%s", key);
    sk->tied = i > 0;
  }
  int ok = 1;
  for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
    yaml_node_t *row = yaml_document_get_node(&y->doc, *it);
    char rw[AMOE_PATH_MAX + 64];
    at(y, row, rw, sizeof rw);
    const int nv = row->type == YAML_SEQUENCE_NODE ? (int)(row->data.sequence.items.top - row->data.sequence.items.start) : -1;
    if (nv != nk || x->sweep[first].nvalues == AMOE_MAX_SWEEP_VALUES) {
      amoe_diag_add(y->d, "%s: each point of tied sweep keys is a list of %d scalars (at most %d points)", rw, nk,
                    AMOE_MAX_SWEEP_VALUES);
      ok = 0;
      continue;
    }
    amoe_spec probe = x->base;
    for (int i = 0; i < nk; i++) {
      yaml_node_t *e = yaml_document_get_node(&y->doc, row->data.sequence.items.start[i]);
      char ew[AMOE_PATH_MAX + 64];
      at(y, e, ew, sizeof ew);
      amoe_sweep_key *sk = &x->sweep[first + i];
      if (e->type != YAML_SCALAR_NODE) {
        amoe_diag_add(y->d, "%s: sweep values must be scalars", ew);
        ok = 0;
        continue;
      }
      ok &= spec_set(&probe, sk->key, scalar(e), ew, y->d);
      snprintf(sk->values[sk->nvalues++], 128, "%s", scalar(e));
    }
  }
  if (ok && x->sweep[first].nvalues > 0) x->nsweep += nk;
}

static void parse_sweep(ydoc *y, yaml_node_t *n, amoe_experiment *x) {
  char w[AMOE_PATH_MAX + 64];
  if (!expect_node(y, n, YAML_MAPPING_NODE, "sweep must map keys to lists of values")) return;
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
    at(y, k, w, sizeof w);
    if (x->nsweep == AMOE_MAX_SWEEP_KEYS) {
      amoe_diag_add(y->d, "%s: at most %d sweep keys", w, AMOE_MAX_SWEEP_KEYS);
      return;
    }
    if (k->type == YAML_SEQUENCE_NODE) { /* tied keys: their values move together */
      parse_sweep_tied(y, k, v, w, x);
      continue;
    }
    const char *key = k->type == YAML_SCALAR_NODE ? scalar(k) : "";
    if (!find_key(key) && strcmp(key, "model") && strcmp(key, "hardware")) {
      amoe_diag_add(y->d, "%s: cannot sweep unknown key '%s'%s", w, key, did_you_mean(key));
      continue;
    }
    amoe_sweep_key *sk = &x->sweep[x->nsweep];
    memset(sk, 0, sizeof *sk);
    snprintf(sk->key, sizeof sk->key, "%s", key);
    yaml_node_item_t one = p->value, *start = &one, *top = &one + 1;
    if (v->type == YAML_SEQUENCE_NODE) {
      start = v->data.sequence.items.start;
      top = v->data.sequence.items.top;
    }
    int ok = 1;
    for (yaml_node_item_t *it = start; it < top; it++) {
      yaml_node_t *e = yaml_document_get_node(&y->doc, *it);
      char ew[AMOE_PATH_MAX + 64];
      at(y, e, ew, sizeof ew);
      if (e->type != YAML_SCALAR_NODE || sk->nvalues == AMOE_MAX_SWEEP_VALUES) {
        amoe_diag_add(y->d, "%s: sweep values must be scalars (at most %d)", ew, AMOE_MAX_SWEEP_VALUES);
        ok = 0;
        continue;
      }
      amoe_spec probe = x->base; /* check the value now, with its position */
      ok &= spec_set(&probe, key, scalar(e), ew, y->d);
      snprintf(sk->values[sk->nvalues++], 128, "%s", scalar(e));
    }
    if (ok && sk->nvalues > 0) x->nsweep++;
  }
}

static int spec_validate(amoe_spec *s, const char *where, amoe_diag *d) {
  int before = d->n;
  amoe_err me;
  if (!s->model.name[0] && s->model.moe_layers > 0) snprintf(s->model.name, sizeof s->model.name, "custom");
  if (!s->model.name[0]) amoe_diag_add(d, "%s: model: required (a preset name or a shape)", where);
  else if (amoe_model_check(&s->model, &me)) amoe_diag_add(d, "%s: model %s: %s", where, s->model.name, me.msg);
  if (!s->hw.name[0] || s->hw.hbm_bw <= 0 || s->hw.h2d_bw <= 0 || s->hw.peak_flops <= 0)
    amoe_diag_add(d, "%s: hardware: required (a preset name, or hbm_bw, h2d_bw and peak_flops)", where);
  if (s->workload.batch > 1) { /* what a pass of several requests cannot do (§17) */
    if (s->workload.source != AMOE_SRC_SYNTHETIC && s->workload.source != AMOE_SRC_TRACE)
      amoe_diag_add(d, "%s: workload.batch: %d needs workload.source synthetic or trace (each slot reads its own "
                    "request; `acceptmoe import` makes a trace of %s)", where, s->workload.batch,
                    amoe_source_kind_names[s->workload.source]);
    if (s->output.dump_selection[0])
      amoe_diag_add(d, "%s: output.dump_selection: per-block selections are not written at workload.batch > 1 "
                    "(a pass holds several blocks)", where);
    if (s->output.blocks_csv)
      amoe_diag_add(d, "%s: output.blocks_csv: blocks.csv is not written at workload.batch > 1 (a pass holds several "
                    "blocks; summary.csv has the per-request figures)", where);
    if (s->offload.enabled && s->offload.reset)
      amoe_diag_add(d, "%s: offload.reset: the caches serve every request of a pass and are not emptied per request "
                    "at workload.batch > 1", where);
    if (s->workload.prefill_schedule == AMOE_PREFILL_CHUNKED && s->offload.enabled &&
        s->offload.prefill == AMOE_PREFILL_BYPASS && s->workload.prompt_tokens > 0)
      amoe_diag_add(d, "%s: workload.prefill_schedule: chunked puts the prompt's experts in the decode pass, through "
                    "the caches; offload.prefill: bypass needs separate", where);
  }
  if (s->workload.source != AMOE_SRC_SYNTHETIC && !s->workload.path[0])
    amoe_diag_add(d, "%s: workload.path is required for source %s", where, amoe_source_kind_names[s->workload.source]);
  if (s->workload.candidates && s->workload.candidates < s->workload.nodes)
    amoe_diag_add(d, "%s: workload.tree.candidates (%d) must be >= nodes (%d)", where, s->workload.candidates,
                  s->workload.nodes);
  if (s->workload.top_m && s->model.experts && (s->workload.top_m < s->model.top_k || s->workload.top_m > s->model.experts))
    amoe_diag_add(d, "%s: workload.top_m must be in top_k..experts", where);
  if (s->npolicies == 0) { /* default: natural alone */
    policy_defaults(&s->policies[0]);
    amoe_policy_label(&s->policies[0]);
    s->npolicies = 1;
  }
  int have_nat = 0;
  for (int i = 0; i < s->npolicies; i++) {
    amoe_policy_row *r = &s->policies[i];
    for (int w = 0; w < 2; w++) { /* budgets: within the model's top_k..experts */
      const amoe_param_def *pd = w ? amoe_verifier_table[r->verifier].params : amoe_draft_table[r->draft].params;
      const double *pv = w ? r->vparam : r->dparam;
      for (int j = 0; j < AMOE_MAX_PARAMS && pd[j].key; j++)
        if (pd[j].expert_count && s->model.top_k && (pv[j] < s->model.top_k || pv[j] > s->model.experts))
          amoe_diag_add(d, "%s: policy %s: %s %g must be in top_k..experts (%d..%d)", where, r->label, pd[j].key,
                        pv[j], s->model.top_k, s->model.experts);
    }
    if (amoe_policy_is_baseline(r)) have_nat = 1;
    for (int j = 0; j < i; j++)
      if (!strcmp(s->policies[j].label, r->label))
        amoe_diag_add(d, "%s: policy %s is listed twice", where, r->label);
  }
  if (!have_nat && s->npolicies < AMOE_MAX_POLICIES) { /* the baseline of speedup_vs_natural */
    amoe_policy_row *r = &s->policies[s->npolicies++];
    policy_defaults(r);
    amoe_policy_label(r);
    r->implicit = 1;
  }
  { /* the layout over the node's GPUs (docs/design.md §16) */
    amoe_parallel *p = &s->parallel;
    const int g = s->hw.gpus > 0 ? s->hw.gpus : 1;
    if (!p->pipeline) p->pipeline = 1;
    if (p->pipeline > 1 && (p->attention_tp > 1 || p->moe_ep > 1 || p->moe_tp > 1 || g != p->pipeline))
      amoe_diag_add(d, "%s: parallel.pipeline (%d) puts each stage of layers on one GPU: hardware.gpus must be %d "
                       "and parallel.attention_tp, moe_ep and moe_tp 1", where, p->pipeline, p->pipeline);
    if (p->pipeline > s->model.layers && s->model.layers > 0)
      amoe_diag_add(d, "%s: parallel.pipeline (%d) exceeds the model's %d layers", where, p->pipeline, s->model.layers);
    if (p->pipeline > 1 && !(s->hw.ic.hop_bw > 0))
      amoe_diag_add(d, "%s: parallel.pipeline needs the interconnect's hop_latency_s and hop_bw "
                       "(hardware.interconnect: nvlink4 | pcie5)", where);
    if (!p->attention_tp) p->attention_tp = g / p->pipeline > 0 ? g / p->pipeline : 1;
    if (!p->moe_ep && !p->moe_tp) p->moe_ep = p->attention_tp, p->moe_tp = 1;
    else if (!p->moe_ep) p->moe_ep = p->attention_tp / p->moe_tp > 0 ? p->attention_tp / p->moe_tp : 1;
    else if (!p->moe_tp) p->moe_tp = p->attention_tp / p->moe_ep > 0 ? p->attention_tp / p->moe_ep : 1;
    if (p->moe_ep * p->moe_tp != p->attention_tp)
      amoe_diag_add(d, "%s: parallel.moe_ep (%d) x parallel.moe_tp (%d) = %d must equal parallel.attention_tp (%d)",
                    where, p->moe_ep, p->moe_tp, p->moe_ep * p->moe_tp, p->attention_tp);
    if (p->pipeline <= 1 && p->attention_tp != g)
      amoe_diag_add(d, "%s: parallel.attention_tp (%d) must equal hardware.gpus (%d)", where, p->attention_tp, g);
    if (s->model.experts && p->moe_ep > s->model.experts)
      amoe_diag_add(d, "%s: parallel.moe_ep (%d) exceeds the model's %d experts", where, p->moe_ep, s->model.experts);
    if (g > 1 && !(s->hw.ic.allreduce_bw > 0))
      amoe_diag_add(d, "%s: hardware.gpus %d needs an interconnect (hardware.interconnect: nvlink4 | pcie5)", where, g);
    if (p->placement == AMOE_PLACE_FILE && !p->placement_file[0])
      amoe_diag_add(d, "%s: parallel.placement: file needs parallel.placement_file", where);
    if (p->redundant && p->placement != AMOE_PLACE_BALANCED)
      amoe_diag_add(d, "%s: parallel.redundant copies are placed by parallel.placement: balanced", where);
  }
  if (s->engine.cuda_graphs < 0) s->engine.cuda_graphs = s->hw.cuda_graphs;
  if (s->engine.overlap_scheduler < 0) s->engine.overlap_scheduler = s->hw.overlap_scheduler;
  if (s->engine.moe_kernels == AMOE_MOE_LOOP && s->engine.cuda_graphs)
    amoe_diag_add(d, "%s: engine.moe_kernels: loop synchronises at every expert, so it cannot run under CUDA graphs "
                     "(set engine.cuda_graphs: false)", where);
  if (s->engine.moe_kernels != AMOE_MOE_LOOP && s->engine.visits != AMOE_VISIT_HIT)
    amoe_diag_add(d, "%s: engine.visits is the loop's (engine.moe_kernels: loop)", where);
  if (s->commitment.seed == 0) s->commitment.seed = s->workload.seed + 1000;
  if (s->model.routing.skew.n == 0 && s->model.experts > 0) { /* the fitted default for the expert count */
    s->model.routing.skew.n = 1;
    s->model.routing.skew.v[0] = amoe_gen_default_skew(s->model.experts);
  }
  for (int i = 0; i < NKEYS; i++) /* a list gives one value per MoE layer */
    if (KEYS[i].type == T_DVEC) {
      const amoe_layer_values *v = (const void *)((const char *)s + KEYS[i].off);
      if (v->n > 1 && v->n != s->model.moe_layers)
        amoe_diag_add(d, "%s: %s lists %d values; it takes one, or one per MoE layer (%d)", where, KEYS[i].path, v->n,
                      s->model.moe_layers);
    }
  if (s->workload.top_m == 0 && s->model.experts > 0)
    s->workload.top_m = amoe_default_top_m(s->model.experts, s->model.top_k);
  if (s->workload.candidates == 0) s->workload.candidates = s->workload.nodes;
  return d->n == before;
}

static int experiment_load(amoe_experiment *x, const char *path, char *const *sets, int nset, amoe_diag *d) {
  memset(x, 0, sizeof *x);
  snprintf(x->spec_path, sizeof x->spec_path, "%s", path);
  amoe_spec_defaults(&x->base);
  int before = d->n;
  ydoc y;
  if (!load_file(&y, path, d)) return 0;
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  if (!root || root->type != YAML_MAPPING_NODE) {
    amoe_diag_add(d, "%s:1:1: a spec must be a mapping of keys", path);
    yaml_document_delete(&y.doc);
    return 0;
  }
  /* model and hardware first, so that other keys may refer to them */
  walk(&y, root, "", &x->base, 0);
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y.doc, p->key);
    if (k->type == YAML_SCALAR_NODE && !strcmp(scalar(k), "sweep"))
      parse_sweep(&y, yaml_document_get_node(&y.doc, p->value), x);
  }
  yaml_document_delete(&y.doc);
  for (int i = 0; i < nset; i++) {
    char key[256], where[320];
    const char *eq = strchr(sets[i], '=');
    snprintf(where, sizeof where, "--set %s", sets[i]);
    if (!eq || eq == sets[i]) {
      amoe_diag_add(d, "%s: expected KEY=VALUE", where);
      continue;
    }
    snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
    int swept = -1;
    for (int j = 0; j < x->nsweep; j++)
      if (!strcmp(x->sweep[j].key, key)) swept = j;
    if (swept >= 0) { /* --set pins a swept key to one value (the keys tied to it sweep on together) */
      if (!x->sweep[swept].tied && swept + 1 < x->nsweep) x->sweep[swept + 1].tied = 0;
      for (int j = swept; j < x->nsweep - 1; j++) x->sweep[j] = x->sweep[j + 1];
      x->nsweep--;
    }
    spec_set(&x->base, key, eq + 1, where, d);
  }
  x->auto_unset = 0;
  for (int i = 0; i < NKEYS; i++)
    if (KEYS[i].autos) x->auto_unset |= (unsigned)auto_is_unset(&x->base, &KEYS[i]) << auto_bit(&KEYS[i]);
  if (d->n == before) spec_validate(&x->base, path, d);
  return d->n == before;
}

int amoe_experiment_points(const amoe_experiment *x) {
  int n = 1;
  for (int i = 0; i < x->nsweep; i++) n *= x->sweep[i].tied ? 1 : x->sweep[i].nvalues;
  return n;
}

int amoe_experiment_value_index(const amoe_experiment *x, int point, int i) {
  int g = i;
  while (g > 0 && x->sweep[g].tied) g--; /* the group's first key holds its digit */
  for (int j = x->nsweep - 1; j > g; j--)
    if (!x->sweep[j].tied) point /= x->sweep[j].nvalues;
  return point % x->sweep[g].nvalues;
}

static int experiment_point(const amoe_experiment *x, int idx, amoe_spec *out, amoe_diag *d) {
  *out = x->base;
  int before = d->n;
  /* the implicit baseline is re-added by validate */
  if (out->npolicies && out->policies[out->npolicies - 1].implicit) out->npolicies--;
  for (int i = 0; i < NKEYS; i++)
    if (KEYS[i].autos && (x->auto_unset >> auto_bit(&KEYS[i]) & 1)) auto_unset(out, &KEYS[i]);
  for (int i = 0; i < x->nsweep; i++) {
    const amoe_sweep_key *k = &x->sweep[i];
    const int v = amoe_experiment_value_index(x, idx, i);
    char where[AMOE_PATH_MAX + 200];
    snprintf(where, sizeof where, "%s: sweep %s", x->spec_path, k->key);
    spec_set(out, k->key, k->values[v], where, d);
  }
  if (d->n == before) spec_validate(out, x->spec_path, d);
  return d->n == before;
}

/* ------------------------------------------------------------ writing */

static void yaml_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s < 0x20) fprintf(f, "\\x%02x", (unsigned char)*s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void write_value(FILE *f, const amoe_spec *s, const krow *k) {
  const char *p = (const char *)s + k->off;
  switch (k->type) {
  case T_STR:
    if (k->nullable && !p[0]) fputs("null", f);
    else yaml_str(f, p);
    break;
  case T_BOOL: fputs(*(const int *)p ? "true" : "false", f); break;
  case T_ENUM: fputs(k->names[*(const int *)p], f); break;
  case T_INT: fprintf(f, "%d", *(const int *)p); break;
  case T_U64: fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)p); break;
  case T_DBL:
    if (isnan(*(const double *)p)) fputs("null", f);
    else fprintf(f, "%.17g", *(const double *)p);
    break;
  case T_DVEC: {
    const amoe_layer_values *lv = (const void *)p;
    if (lv->n == 0) fputs("null", f);
    else if (lv->n == 1) fprintf(f, "%.17g", lv->v[0]);
    else
      for (int j = 0; j < lv->n; j++) fprintf(f, "%s%.17g%s", j ? ", " : "[", lv->v[j], j == lv->n - 1 ? "]" : "");
    break;
  }
  }
}

static int swept(const amoe_experiment *x, const char *key) {
  for (int j = 0; j < x->nsweep; j++)
    if (!strcmp(x->sweep[j].key, key)) return 1;
  return 0;
}

int amoe_experiment_batched(const amoe_experiment *x) {
  return x->base.workload.batch > 1 || swept(x, "workload.batch");
}

static const char *const CYCLE_KEYS[] = {"engine.moe_call_host_s", "engine.draft_step_s", "engine.draft_token_s", "engine.draft_extend_s",
                                          "engine.tree_node_s", "engine.sample_s", "engine.cycle_host_s", NULL};
static int cycle_key(const char *path) {
  for (int i = 0; CYCLE_KEYS[i]; i++)
    if (!strcmp(path, CYCLE_KEYS[i])) return 1;
  return 0;
}
static int swept_cycle(const amoe_experiment *x) {
  for (int i = 0; CYCLE_KEYS[i]; i++)
    if (swept(x, CYCLE_KEYS[i])) return 1;
  return 0;
}

/* Keys of §17 batches, written only where they do something (a spec that
 * runs no batch resolves as it did before them). */
static int unused_batch_key(const amoe_experiment *x, const char *path) {
  const amoe_spec *s = &x->base;
  if (!strcmp(path, "workload.batch") || !strcmp(path, "workload.prefill_schedule") ||
      !strcmp(path, "workload.chunk_tokens"))
    return !amoe_experiment_batched(x);
  if (!strcmp(path, "engine.request_s") || !strcmp(path, "engine.request_per"))
    return s->engine.request_s == 0 && !swept(x, "engine.request_s") && !swept(x, "engine.request_per");
  if (!strcmp(path, "hardware.moe_flops")) return s->hw.moe_flops == 0 && !swept(x, path);
  /* the speculative cycle's terms and the eager MoE call (§9): an engine
   * without them resolves as before them */
  if (!strncmp(path, "engine.", 7) && cycle_key(path))
    return !amoe_engine_has_cycle(&s->engine) && !(s->engine.moe_call_host_s > 0) && !swept_cycle(x);
  return 0;
}

void amoe_spec_write_yaml(FILE *f, const amoe_experiment *x) {
  const amoe_spec *s = &x->base;
  fprintf(f, "# resolved from %s: every default filled in\n", x->spec_path);
  char prev[8][64];
  int np = 0;
  for (int i = 0; i < NKEYS; i++) {
    const krow *k = &KEYS[i];
    if (k->alias) continue;
    if (!strncmp(k->path, "offload.", 8) && !s->offload.enabled) {
      if (!strcmp(k->path, "offload.slots_per_layer")) fputs("offload: null\n", f);
      np = 0;
      continue;
    }
    if (!strcmp(k->path, "commitment.calibrate.blocks")) { /* commitment is one of three forms */
      np = 0;
      if (s->commitment.mode == AMOE_COMMIT_TABLE) {
        fputs("commitment:\n  table: [", f);
        for (int j = 0; j < s->commitment.table_n; j++) fprintf(f, "%s%.17g", j ? ", " : "", s->commitment.table[j]);
        fputs("]\n", f);
        if (s->commitment.mass_n) {
          fputs("  mass: [", f);
          for (int j = 0; j < s->commitment.mass_n; j++) fprintf(f, "%s%.17g", j ? ", " : "", s->commitment.mass[j]);
          fputs("]\n", f);
        }
      } else if (s->commitment.mode == AMOE_COMMIT_FILE) {
        fputs("commitment:\n  file: ", f);
        yaml_str(f, s->commitment.file);
        fputc('\n', f);
      } else {
        fprintf(f, "commitment:\n  calibrate:\n    blocks: %d\n    seed: %llu\n", s->commitment.blocks,
                (unsigned long long)s->commitment.seed);
      }
      continue;
    }
    if (!strncmp(k->path, "commitment.", 11)) continue;
    if (unused_batch_key(x, k->path)) continue;
    /* split into components; open the mappings that differ from the previous key */
    char comp[8][64];
    int nc = 0;
    const char *a = k->path;
    while (nc < 8) {
      const char *dot = strchr(a, '.');
      size_t len = dot ? (size_t)(dot - a) : strlen(a);
      snprintf(comp[nc++], 64, "%.*s", (int)len, a);
      if (!dot) break;
      a = dot + 1;
    }
    int same = 0;
    while (same < np && same < nc - 1 && !strcmp(prev[same], comp[same])) same++;
    for (int j = same; j < nc - 1; j++) fprintf(f, "%*s%s:\n", 2 * j, "", comp[j]);
    int model_swept = 0, nodes_swept = 0, hw_swept = 0, par_swept = 0;
    for (int j = 0; j < x->nsweep; j++) {
      model_swept |= !strcmp(x->sweep[j].key, "model") || !strncmp(x->sweep[j].key, "model.", 6);
      nodes_swept |= !strcmp(x->sweep[j].key, "workload.tree.nodes");
      hw_swept |= !strcmp(x->sweep[j].key, "hardware") || !strncmp(x->sweep[j].key, "hardware.", 9);
      par_swept |= !strncmp(x->sweep[j].key, "parallel.", 9);
    }
    const int swept_by[] = {[AUTO_NONE] = 0, [AUTO_BY_MODEL] = model_swept, [AUTO_BY_NODES] = nodes_swept,
                            [AUTO_BY_HW] = hw_swept, [AUTO_BY_LAYOUT] = hw_swept || par_swept};
    const int per_point = k->autos && (x->auto_unset >> auto_bit(k) & 1) && swept_by[k->autos];
    if (per_point) { /* each sweep point resolves its own default: leave the key unset */
      fprintf(f, "%*s# %s: resolved per sweep point from the swept keys\n", 2 * (nc - 1), "", comp[nc - 1]);
    } else {
      fprintf(f, "%*s%s: ", 2 * (nc - 1), "", comp[nc - 1]);
      write_value(f, s, k);
      fputc('\n', f);
    }
    memcpy(prev, comp, sizeof comp);
    np = nc - 1;
  }
  fputs("policies:\n", f);
  for (int i = 0; i < s->npolicies; i++) {
    const amoe_policy_row *r = &s->policies[i];
    fprintf(f, "  - {draft: %s, verifier: %s", amoe_draft_table[r->draft].name,
            amoe_verifier_table[r->verifier].name);
    for (int w = 0; w < 2; w++) {
      const amoe_param_def *pd = w ? amoe_verifier_table[r->verifier].params : amoe_draft_table[r->draft].params;
      for (int j = 0; j < AMOE_MAX_PARAMS && pd[j].key; j++)
        fprintf(f, ", %s: %.17g", pd[j].key, (w ? r->vparam : r->dparam)[j]);
    }
    fprintf(f, "}%s\n", r->implicit ? "  # added: the baseline of speedup_vs_natural" : "");
  }
  if (x->nsweep) {
    fputs("sweep:\n", f);
    for (int i = 0; i < x->nsweep; i++) {
      int n = 1; /* the keys tied to this one */
      while (i + n < x->nsweep && x->sweep[i + n].tied) n++;
      if (n == 1) {
        fprintf(f, "  %s: [", x->sweep[i].key);
        for (int j = 0; j < x->sweep[i].nvalues; j++) fprintf(f, "%s%s", j ? ", " : "", x->sweep[i].values[j]);
        fputs("]\n", f);
        continue;
      }
      fputs("  [", f);
      for (int t = 0; t < n; t++) fprintf(f, "%s%s", t ? ", " : "", x->sweep[i + t].key);
      fputs("]: [", f);
      for (int j = 0; j < x->sweep[i].nvalues; j++) {
        fprintf(f, "%s[", j ? ", " : "");
        for (int t = 0; t < n; t++) fprintf(f, "%s%s", t ? ", " : "", x->sweep[i + t].values[j]);
        fputc(']', f);
      }
      fputs("]\n", f);
      i += n - 1;
    }
  }
}

static int commitment_file_load(const char *path, double *p, int *n, double *mass, amoe_diag *d) {
  ydoc y;
  int before = d->n;
  if (!load_file(&y, path, d)) return 0;
  amoe_spec tmp;
  memset(&tmp, 0, sizeof tmp);
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  if (!root || root->type != YAML_MAPPING_NODE)
    amoe_diag_add(d, "%s:1:1: expected a mapping with key 'table'", path);
  else
    parse_commitment(&y, root, &tmp);
  yaml_document_delete(&y.doc);
  if (d->n == before && (tmp.commitment.mode != AMOE_COMMIT_TABLE || tmp.commitment.table_n == 0))
    amoe_diag_add(d, "%s:1:1: expected 'table: [p0, p1, ...]'", path);
  if (d->n != before) return 0;
  memcpy(p, tmp.commitment.table, sizeof(double) * (size_t)tmp.commitment.table_n);
  *n = tmp.commitment.table_n;
  memset(mass, 0, sizeof(double) * AMOE_MAX_DEPTH);
  memcpy(mass, tmp.commitment.mass, sizeof(double) * (size_t)tmp.commitment.mass_n);
  return 1;
}

/* ------------------------------------------------------------ the API: errors as values */

amoe_status amoe_spec_load_preset(amoe_spec *s, int hw, const char *name, const char *where, amoe_diag *d) {
  return load_preset(s, hw, name, where, d) ? AMOE_OK : AMOE_EINVAL;
}

amoe_status amoe_spec_set(amoe_spec *s, const char *key, const char *value, const char *where, amoe_diag *d) {
  return spec_set(s, key, value, where, d) ? AMOE_OK : AMOE_EINVAL;
}

amoe_status amoe_spec_validate(amoe_spec *s, const char *where, amoe_diag *d) {
  return spec_validate(s, where, d) ? AMOE_OK : AMOE_EINVAL;
}

amoe_status amoe_experiment_load(amoe_experiment *x, const char *path, char *const *sets, int nset, amoe_diag *d) {
  return experiment_load(x, path, sets, nset, d) ? AMOE_OK : AMOE_EINVAL;
}

amoe_status amoe_experiment_point(const amoe_experiment *x, int idx, amoe_spec *out, amoe_diag *d) {
  return experiment_point(x, idx, out, d) ? AMOE_OK : AMOE_EINVAL;
}

amoe_status amoe_commitment_file_load(const char *path, double *p, int *n, double *mass, amoe_diag *d) {
  return commitment_file_load(path, p, n, mass, d) ? AMOE_OK : AMOE_EINVAL;
}
