#include "model.h"

#include <stdio.h>

const char *const amoe_router_names[] = {"softmax", "sigmoid-normalized", "softmax-normalized", "softmax-topk",
                                         NULL};

double amoe_model_shared_expert_bytes(const amoe_model *m) {
  return 3.0 * m->hidden * (double)m->moe_intermediate * 2.0;
}

amoe_status amoe_model_check(const amoe_model *m, amoe_err *e) {
  if (m->moe_layers < 1 || m->moe_layers > AMOE_MAX_LAYERS)
    return amoe_fail(e, AMOE_EINVAL, "moe_layers must be in 1..%d", AMOE_MAX_LAYERS);
  if (m->layers < m->moe_layers)
    return amoe_fail(e, AMOE_EINVAL, "layers (%d) < moe_layers (%d)", m->layers, m->moe_layers);
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
  m->routing.locality = m->routing.locality_first = m->routing.locality_last = AMOE_FIT_LOCALITY;
  m->routing.locality_peak = 0;
  m->routing.request_bias = 0;
  m->routing.noise = AMOE_FIT_NOISE;
}
