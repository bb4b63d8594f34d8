/* Experts where users keep them (docs/design.md §21): which of each layer's
 * routed experts the GPU holds (experts), and what the host's part
 * of a layer costs when the rest are computed by its CPU. The placements
 * (amoe_tiers, model.h):
 *   gpu                 every expert on the GPU (the default)
 *   cpu                 every routed expert on the host (attention and the
 *                       shared experts stay on the GPU)
 *   cpu:SHARE:STRATEGY  SHARE (0..1) of the experts on the GPU, chosen by
 *                       random    (drawn over every layer's experts at once),
 *                       uniform   (the same count in every layer, drawn in each),
 *                       front     (the first layers' experts first),
 *                       frequency (each layer's most used, by a popularity)
 *   cpu-layers:N        every expert of the first N MoE layers on the host
 *                       (llama.cpp's --n-cpu-moe N), the rest on the GPU */
#ifndef AMOE_TIERS_H
#define AMOE_TIERS_H

#include <stdint.h>

#include "err.h"
#include "model.h"

/* Parses an experts value for a model of `layers` MoE layers and
 * `experts` experts a layer. AMOE_EINVAL, saying what is wrong: an unknown
 * form or strategy, a share outside 0..1, N outside 0..layers. */
amoe_status amoe_tiers_parse(const char *text, int layers, amoe_tiers *t, amoe_err *e);

/* on_gpu[l·E + x] = 1 where layer l's expert x lives on the GPU (L layers
 * of E). popularity[l·E + x]: how often each is routed to, for frequency
 * (NULL otherwise); seed: random's and uniform's draws. A share places
 * round(share · L · E) experts (uniform and frequency: round(share · E) a
 * layer). AMOE_EINVAL: frequency without a popularity. */
amoe_status amoe_tiers_place(const amoe_tiers *t, int L, int E, const double *popularity, uint64_t seed,
                             uint8_t *on_gpu, amoe_err *e);

/* The host's part of one layer: `experts` experts, each read once, and
 * `tokens` (token, expert) pairs computed: the larger of their bytes over
 * the bandwidth its cores reach and their FLOPs at its ISA's rate for the
 * model's weight format, plus a fixed cost per expert. 0 with no expert. */
double amoe_cost_host_layer(const amoe_model *m, const amoe_host *h, int experts, double tokens);

/* A layer with experts on both sides: the GPU's own (gpu_s) and the
 * host's at once, the host's side carrying the pass's `tokens` hidden
 * states to it and back in bf16 over a link of link_bw bytes/s and
 * link_latency_s a copy; the layer waits for the slower side. */
double amoe_cost_tier_layer(const amoe_model *m, const amoe_host *h, double gpu_s, int host_experts, double pairs,
                            int tokens, double link_bw, double link_latency_s);

/* The host's memory bandwidth an expert kernel reaches and its FLOP/s for
 * the model's weights, every socket counted (bytes/s, FLOP/s): bf16 at
 * flops, q4_k_m at flops_vector (its kernels are vector ones), 8-bit and
 * narrower formats at flops_int8. */
double amoe_host_bw(const amoe_host *h);
double amoe_host_flops(const amoe_model *m, const amoe_host *h);

#endif
