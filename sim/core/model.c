#include "model.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

const char *const amoe_router_names[] = {"softmax", "sigmoid-normalized", "softmax-normalized", "softmax-topk",
                                         NULL};
const char *const amoe_weight_fmt_names[] = {"bf16", "fp8-block128", "mxfp4", "nvfp4", "q4_k_m", "int8", NULL};
const char *const amoe_dense_fmt_names[] = {"auto", "bf16", "fp8", NULL};
const char *const amoe_kernel_ops_names[] = {"moe", "moe+gemm", "gemm", NULL};
const char *const amoe_host_isa_names[] = {"avx2", "avx512", "amx", NULL};
const char *const amoe_tier_strategy_names[] = {"random", "uniform", "front", "frequency", NULL};

double amoe_model_format_bytes(int format, int rows, int cols) {
  const double n = (double)rows * cols;
  switch (format) {
  case AMOE_FMT_FP8_BLOCK128: return n + 4.0 * ((rows + 127) / 128) * ((cols + 127) / 128);
  case AMOE_FMT_MXFP4: return n / 2 + n / 32; /* an e8m0 byte per 32 weights */
  case AMOE_FMT_NVFP4: return n / 2 + n / 16 + 4; /* an e4m3 byte per 16, an fp32 per tensor */
  case AMOE_FMT_Q4_K_M: return n * 4.85 / 8;      /* (real-data tiers/README.md) */
  case AMOE_FMT_INT8: return n + 4.0 * rows;
  default: return 2 * n;
  }
}
const char *const amoe_placement_names[] = {"contiguous", "round-robin", "balanced", "file", NULL};
const char *const amoe_moe_comm_names[] = {"all-reduce", "all-to-all", NULL};
const char *const amoe_moe_kernels_names[] = {"fused", "per-expert", "loop", NULL};
const char *const amoe_visits_names[] = {"hit", "all", "all-skip", NULL};
const char *const amoe_request_per_names[] = {"token", "pass", NULL};
const char *const amoe_kv_allocation_names[] = {"reserve", "incremental", NULL};
const char *const amoe_sizing_names[] = {"fixed", "vllm", "sglang", NULL};

double amoe_model_shared_expert_bytes(const amoe_model *m) {
  return 3.0 * m->hidden * (double)m->moe_intermediate * 2.0;
}

int amoe_model_dense_format(const amoe_model *m) {
  if (m->dense_format != AMOE_DENSE_AUTO) return m->dense_format;
  return m->weight_format == AMOE_FMT_FP8_BLOCK128 ? AMOE_DENSE_FP8 : AMOE_DENSE_BF16;
}

amoe_status amoe_model_check(const amoe_model *m, amoe_err *e) {
  if (m->moe_layers < 0 || m->moe_layers > AMOE_MAX_LAYERS)
    return amoe_fail(e, AMOE_EINVAL, "moe_layers must be in 0..%d", AMOE_MAX_LAYERS);
  if (m->layers < m->moe_layers)
    return amoe_fail(e, AMOE_EINVAL, "layers (%d) < moe_layers (%d)", m->layers, m->moe_layers);
  if (m->moe_layers == 0) { /* a dense model (a draft's target in the cycle fit): no expert shapes */
    if (m->hidden < 1) return amoe_fail(e, AMOE_EINVAL, "hidden (d) is required for a shape");
    if (m->dense_intermediate < 1) return amoe_fail(e, AMOE_EINVAL, "a dense model (moe_layers 0) needs dense_intermediate");
    return AMOE_OK;
  }
  if (m->experts < 2 || m->experts > AMOE_MAX_EXPERTS)
    return amoe_fail(e, AMOE_EINVAL, "experts must be in 2..%d", AMOE_MAX_EXPERTS);
  if (m->top_k < 1 || m->top_k > m->experts || m->top_k > AMOE_MAX_TOPK)
    return amoe_fail(e, AMOE_EINVAL, "top_k must be in 1..min(experts, %d)", AMOE_MAX_TOPK);
  if (m->hidden < 1) return amoe_fail(e, AMOE_EINVAL, "hidden (d) is required for a shape");
  if (m->moe_intermediate < 1 && !(m->expert_bytes > 0))
    return amoe_fail(e, AMOE_EINVAL, "moe_intermediate (f) or expert_bytes is required for a shape");
  return AMOE_OK;
}

double amoe_model_locality_at(const amoe_model *m, int l, int layers) {
  const double last = layers > 1 ? layers - 1 : 1, peak = m->routing.locality_peak * last, x = l;
  if (x <= peak)
    return peak > 0 ? m->routing.locality_first + (m->routing.locality - m->routing.locality_first) * (x / peak)
                    : m->routing.locality;
  return m->routing.locality + (m->routing.locality_last - m->routing.locality) * ((x - peak) / (last - peak));
}

void amoe_model_routing_defaults(amoe_model *m) {
  memset(&m->routing, 0, sizeof m->routing);
  m->routing.locality = m->routing.locality_first = m->routing.locality_last = AMOE_FIT_LOCALITY;
  m->routing.noise = AMOE_FIT_NOISE;
  m->routing.temperature = AMOE_FIT_TEMPERATURE;
  m->routing.layer_correlation = AMOE_FIT_LAYER_CORRELATION;
}

/* The routing fields, one row each: resolve and unset walk this table. */
static const size_t ROUTING_NUMBERS[] = {
    offsetof(amoe_routing_fit, locality),     offsetof(amoe_routing_fit, locality_first),
    offsetof(amoe_routing_fit, locality_last), offsetof(amoe_routing_fit, locality_peak),
    offsetof(amoe_routing_fit, request_bias), offsetof(amoe_routing_fit, noise),
    offsetof(amoe_routing_fit, drift_tokens), offsetof(amoe_routing_fit, temperature),
    offsetof(amoe_routing_fit, layer_correlation)};
static const size_t ROUTING_LAYER_VALUES[] = {
    offsetof(amoe_routing_fit, skew), offsetof(amoe_routing_fit, score_scale),
    offsetof(amoe_routing_fit, tree_sibling), offsetof(amoe_routing_fit, tree_repeat)};
#define COUNT(a) (sizeof(a) / sizeof *(a))

void amoe_routing_resolve(const amoe_routing_fit *model, const amoe_routing_fit *override, amoe_routing_fit *out) {
  if (out != model) *out = *model;
  for (size_t i = 0; i < COUNT(ROUTING_NUMBERS); i++) {
    const double v = *(const double *)(const void *)((const char *)override + ROUTING_NUMBERS[i]);
    if (!isnan(v)) *(double *)(void *)((char *)out + ROUTING_NUMBERS[i]) = v;
  }
  for (size_t i = 0; i < COUNT(ROUTING_LAYER_VALUES); i++) {
    const amoe_layer_values *v = (const void *)((const char *)override + ROUTING_LAYER_VALUES[i]);
    if (v->n > 0) *(amoe_layer_values *)(void *)((char *)out + ROUTING_LAYER_VALUES[i]) = *v;
  }
}

void amoe_routing_unset(amoe_routing_fit *r) {
  memset(r, 0, sizeof *r);
  for (size_t i = 0; i < COUNT(ROUTING_NUMBERS); i++) *(double *)(void *)((char *)r + ROUTING_NUMBERS[i]) = NAN;
}
