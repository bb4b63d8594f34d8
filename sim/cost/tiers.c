/* Experts where users keep them (tiers.h). */
#include "tiers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

amoe_status amoe_tiers_parse(const char *text, int layers, amoe_tiers *t, amoe_err *e) {
  memset(t, 0, sizeof *t);
  if (!text[0] || !strcmp(text, "gpu")) return AMOE_OK;
  if (!strcmp(text, "cpu")) {
    t->kind = AMOE_TIER_CPU;
    return AMOE_OK;
  }
  if (!strncmp(text, "cpu-layers:", 11)) {
    char *end;
    const long n = strtol(text + 11, &end, 10);
    if (end == text + 11 || *end || n < 0 || n > layers)
      return amoe_fail(e, AMOE_EINVAL, "'%s': cpu-layers:N takes N from 0 to the model's %d MoE layers", text, layers);
    t->kind = AMOE_TIER_CPU_LAYERS;
    t->layers = (int)n;
    return AMOE_OK;
  }
  if (!strncmp(text, "cpu:", 4)) {
    char *end;
    const double share = strtod(text + 4, &end);
    if (end == text + 4 || *end != ':' || !(share >= 0 && share <= 1))
      return amoe_fail(e, AMOE_EINVAL, "'%s': cpu:SHARE:STRATEGY takes the GPU's share from 0 to 1", text);
    for (int i = 0; amoe_tier_strategy_names[i]; i++)
      if (!strcmp(end + 1, amoe_tier_strategy_names[i])) {
        t->kind = AMOE_TIER_SHARE;
        t->share = share;
        t->strategy = i;
        return AMOE_OK;
      }
    return amoe_fail(e, AMOE_EINVAL, "'%s': no strategy '%s' (random, uniform, front or frequency)", text, end + 1);
  }
  return amoe_fail(e, AMOE_EINVAL, "'%s' is not gpu, cpu, cpu:SHARE:STRATEGY or cpu-layers:N", text);
}

/* The first `want` of order[0..n) on the GPU after a seeded shuffle. */
static void place_drawn(uint8_t *on_gpu, int *order, int n, int want, amoe_rng *r) {
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
    const int j = (int)(amoe_rng_next(r) % (uint64_t)(i + 1)), x = order[i];
    order[i] = order[j], order[j] = x;
  }
  for (int i = 0; i < want; i++) on_gpu[order[i]] = 1;
}

amoe_status amoe_tiers_place(const amoe_tiers *t, int L, int E, const double *popularity, uint64_t seed,
                             uint8_t *on_gpu, amoe_err *e) {
  const int n = L * E;
  memset(on_gpu, t->kind == AMOE_TIER_GPU, (size_t)n);
  if (t->kind == AMOE_TIER_GPU || t->kind == AMOE_TIER_CPU) return AMOE_OK;
  if (t->kind == AMOE_TIER_CPU_LAYERS) {
    for (int l = t->layers; l < L; l++) memset(on_gpu + (size_t)l * E, 1, (size_t)E);
    return AMOE_OK;
  }
  if (t->strategy == AMOE_PICK_FREQUENCY && !popularity)
    return amoe_fail(e, AMOE_EINVAL, "cpu:%g:frequency needs a popularity of the experts", t->share);
  const int total = (int)lround(t->share * n), per = (int)lround(t->share * E);
  amoe_rng r;
  amoe_rng_seed(&r, seed, 0x7469657273ULL, 0); /* ("tiers") */
  int *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
  if (!order) return amoe_fail(e, AMOE_ENOMEM, "out of memory placing experts");
  switch (t->strategy) {
  case AMOE_PICK_RANDOM: place_drawn(on_gpu, order, n, total, &r); break;
  case AMOE_PICK_UNIFORM:
    for (int l = 0; l < L; l++) place_drawn(on_gpu + (size_t)l * E, order, E, per, &r);
    break;
  case AMOE_PICK_FRONT: memset(on_gpu, 1, (size_t)total); break;
  case AMOE_PICK_FREQUENCY:
    for (int l = 0; l < L; l++) { /* the `per` most used, ties to the lower id */
      const double *p = popularity + (size_t)l * E;
      for (int k = 0; k < per; k++) {
        int best = -1;
        for (int x = 0; x < E; x++)
          if (!on_gpu[(size_t)l * E + x] && (best < 0 || p[x] > p[best])) best = x;
        on_gpu[(size_t)l * E + best] = 1;
      }
    }
    break;
  }
  free(order);
  return AMOE_OK;
}

static double socket_factor(const amoe_host *h) {
  return 1 + (h->sockets > 1 ? (h->sockets - 1) * h->socket_gain : 0);
}

double amoe_host_bw(const amoe_host *h) {
  return h->channels * 8.0 * h->mts * 1e6 * h->bw_share * socket_factor(h);
}

double amoe_host_flops(const amoe_model *m, const amoe_host *h) {
  double per = h->flops;
  if (m->weight_format == AMOE_FMT_Q4_K_M && h->flops_vector > 0) per = h->flops_vector;
  else if (m->weight_format != AMOE_FMT_BF16 && m->weight_format != AMOE_FMT_Q4_K_M && h->flops_int8 > 0)
    per = h->flops_int8;
  return per * socket_factor(h);
}

double amoe_cost_tier_layer(const amoe_model *m, const amoe_host *h, double gpu_s, int host_experts, double pairs,
                            int tokens, double link_bw, double link_latency_s) {
  if (host_experts <= 0) return gpu_s;
  const double link = 2 * ((double)tokens * m->hidden * 2 / link_bw + link_latency_s);
  const double host = amoe_cost_host_layer(m, h, host_experts, pairs) + link;
  return gpu_s > host ? gpu_s : host;
}

double amoe_cost_host_layer(const amoe_model *m, const amoe_host *h, int experts, double tokens) {
  if (experts <= 0) return 0;
  const double bytes = experts * amoe_model_expert_bytes(m);
  const double flops = tokens * 6.0 * m->hidden * (double)m->moe_intermediate; /* gate, up, down: 2 FLOPs a weight */
  const double read = bytes / amoe_host_bw(h), compute = flops / amoe_host_flops(m, h);
  return (read > compute ? read : compute) + experts * h->expert_fixed_s;
}
