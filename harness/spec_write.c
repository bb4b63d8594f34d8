/* The resolved-spec writer: spec.resolved.yaml, every default filled in,
 * which runs again to the same results. */
#include "spec_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
  case T_DLIST:
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

int amoe_experiment_open(const amoe_experiment *x) {
  return x->base.workload.arrival != AMOE_ARRIVAL_CLOSED || swept(x, "workload.arrival.process");
}

int amoe_experiment_batched(const amoe_experiment *x) {
  return x->base.workload.batch > 1 || swept(x, "workload.batch") || amoe_experiment_open(x);
}

/* Keys of §18 load: written only where requests arrive over time. */
static int load_key(const char *path) {
  return !strncmp(path, "workload.arrival.", 17) || !strcmp(path, "workload.requests") ||
         !strcmp(path, "workload.max_running") || !strncmp(path, "slo.", 4) || !strcmp(path, "output.requests_csv");
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

/* Keys of §19 that a spec sets only where it serves as an engine serves:
 * written where set (non-zero, or a list) or swept, so a spec without them
 * resolves as it did before them. */
static const char *const SERVING_KEYS[] = {"hardware.peak_flops_fp8", "hardware.peak_flops_fp4", "hardware.moe_flops_tokens", "hardware.moe_peak_share",
                                           "engine.graph_capture_max_tokens", "engine.graph_capture_sizes", "engine.graph_capture_max_requests",
                                           "engine.sizing", "engine.draft_reserve_bytes", "engine.prefill_apart",
                                           "engine.max_running", "engine.max_batched_tokens",
                                           "engine.gpu_memory_utilization", "engine.memory_reserve_bytes", "engine.kv_allocation", "engine.layer_sync_per_peer_s", "model.kv_heads", "model.attn_flops_per_key", "model.kernels_per_layer", "model.dense_format", "hardware.kernel_ops",
                                           "workload.acceptance.al", "workload.tree.draft_passes", "workload.route_hold", NULL};
static int unset_serving_key(const amoe_experiment *x, const char *path) {
  for (int i = 0; SERVING_KEYS[i]; i++)
    if (!strcmp(path, SERVING_KEYS[i])) {
      const krow *k = spec_find_key(path);
      const char *p = (const char *)&x->base + k->off;
      const int unset = k->type == T_INT || k->type == T_ENUM || k->type == T_BOOL ? *(const int *)(const void *)p == 0
                        : k->type == T_DBL ? *(const double *)(const void *)p == 0
                                           : ((const amoe_layer_values *)(const void *)p)->n == 0;
      return unset && !swept(x, path);
    }
  return 0;
}

/* Keys of §17 batches, written only where they do something (a spec that
 * runs no batch resolves as it did before them). */
static int unused_batch_key(const amoe_experiment *x, const char *path) {
  const amoe_spec *s = &x->base;
  /* §19's arrival keys: the closed loop's clients with it, the normal
   * lengths' deviations and clips with them */
  if (!strcmp(path, "workload.arrival.concurrency") && amoe_experiment_open(x))
    return s->workload.arrival != AMOE_ARRIVAL_CONCURRENCY && !swept(x, path) && !swept(x, "workload.arrival.process");
  if (!strcmp(path, "workload.arrival.lengths") && amoe_experiment_open(x))
    return s->workload.lengths == AMOE_LENGTHS_UNIFORM && !swept(x, path);
  if ((!strncmp(path, "workload.arrival.prompt_", 24) || !strncmp(path, "workload.arrival.output_", 24)) &&
      amoe_experiment_open(x))
    return s->workload.lengths != AMOE_LENGTHS_NORMAL && !swept(x, path) && !swept(x, "workload.arrival.lengths");
  if (load_key(path)) return !amoe_experiment_open(x);
  if (unset_serving_key(x, path)) return 1;
  /* §21's tiers: where the experts live, and the host, only where set */
  if (!strcmp(path, "experts")) return !s->experts[0] && !swept(x, path);
  if (!strncmp(path, "host.", 5)) return !s->host.name[0] && !swept(x, path) && !swept(x, "host");
  if (!strcmp(path, "baseline")) return s->baseline && !swept(x, path); /* (written where it is off) */
  if (!strcmp(path, "workload.prefill_sample")) { /* (only a prompt chunk longer than it reads it) */
    const amoe_workload_spec *w = &s->workload;
    const int varies = amoe_experiment_open(x) && (w->range_ratio > 0 || w->lengths == AMOE_LENGTHS_NORMAL);
    return w->prefill_sample == 256 && w->prompt_tokens <= 256 && !varies && !swept(x, path);
  }
  if (!strcmp(path, "engine.prefill_apart")) /* (only chunked prefill has prompt chunks to set apart) */
    return s->workload.prefill_schedule != AMOE_PREFILL_CHUNKED && !swept(x, path) && !swept(x, "workload.prefill_schedule");
  if (!strcmp(path, "workload.batch") || !strcmp(path, "workload.prefill_schedule") ||
      !strcmp(path, "workload.chunk_tokens"))
    return !amoe_experiment_batched(x);
  if (!strcmp(path, "engine.request_s") || !strcmp(path, "engine.request_per"))
    return s->engine.request_s == 0 && !swept(x, "engine.request_s") && !swept(x, "engine.request_per");
  if (!strcmp(path, "parallel.attention_dp")) return s->parallel.attention_dp <= 1 && !swept(x, path);
  if (!strcmp(path, "engine.efficiency")) return s->engine.efficiency == 0 && !swept(x, path);
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
    const int per_point = k->autos && (x->auto_unset >> spec_auto_bit(k) & 1) && swept_by[k->autos];
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
        if (pd[j].names)
          fprintf(f, ", %s: %s", pd[j].key, pd[j].names[(int)(w ? r->vparam : r->dparam)[j]]);
        else
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

