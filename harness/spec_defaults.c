/* A spec's defaults: what every key holds before a file, a preset or
 * --set gives it one (docs/spec.md), the engine section's without a
 * preset, and a policy row's. The loader, the presets and the checks all
 * start from here, and this file calls none of them. */
#include "spec_internal.h"

#include <string.h>

void spec_policy_defaults(amoe_policy_row *r) { amoe_policy_init(r, 0, 0); }

/* The engine without a preset: the hardware preset's mode; kernel counts of
 * a C++ engine measured at ~790 launches per decoded token of
 * Qwen3-30B-A3B's 48 layers (real-data costs/engine_modes.csv: 16 per
 * layer, one of them the fused MoE call), and ~4.5 per expert where an
 * offload path runs one expert at a time ((3,091 − 632 copies − 790 + 48)
 * / (48 · 8)); launches added to the device time (docs/validation.md). */
void spec_engine_defaults(amoe_engine *e) {
  memset(e, 0, sizeof *e);
  e->cuda_graphs = -1;
  e->overlap_scheduler = -1;
  e->moe_kernels = AMOE_MOE_FUSED;
  e->kernels_per_layer = 15;
  e->kernels_per_expert = 4.5;
  e->visits = AMOE_VISIT_HIT; /* launch_s, step_host_s 0: the hardware preset's */
}

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
  w->rate = 1;
  w->cv = 1;
  w->requests = 100;
  s->baseline = 1;
  w->concurrency = 1;
  w->prefill_sample = 256;
  w->output_min = 1;
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
  spec_engine_defaults(&s->engine);
  s->hw.moe_eta = 1; /* a hardware shape given in full without it: streaming at hbm_bw */
  s->hw.cuda_graphs = s->hw.overlap_scheduler = 1;
  s->hw.gpus = 1;
  amoe_model_routing_defaults(&s->model);
  s->kappa = AMOE_DEFAULT_KAPPA;
  s->margin_min = AMOE_DEFAULT_MARGIN_MIN;
}
