/* Experts off the GPU (sim/cost/tiers.c, docs/design.md §21): a host-side
 * layer's cost by hand, bandwidth-bound and compute-bound, one socket and
 * two; offload.experts' forms and their errors; each placement strategy's
 * experts, by hand. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "tiers.h"

static void host_cost(void) {
  /* an expert of 3 · 1024 · 512 bf16 weights: 3,145,728 bytes, 3.15 MFLOP a token */
  amoe_model m = {.name = "tiny", .hidden = 1024, .moe_intermediate = 512, .weight_format = AMOE_FMT_BF16};
  amoe_host h = {.name = "hx", .sockets = 1, .channels = 8, .mts = 4800, .bw_share = 0.5, .flops = 1e12,
                 .flops_int8 = 4e12, .expert_fixed_s = 1e-6, .socket_gain = 0.63};
  CHECK(fabs(amoe_host_bw(&h) - 153.6e9) < 1, "8 channels of DDR5-4800 at half: %g B/s", amoe_host_bw(&h));
  /* two experts, two tokens: their reads (6,291,456 B at 153.6 GB/s: 40.96 us) over their FLOPs (6.29 us) */
  const double read2 = 2 * 3145728.0 / 153.6e9;
  CHECK(fabs(amoe_cost_host_layer(&m, &h, 2, 2) - (read2 + 2e-6)) < 1e-12, "bandwidth-bound: %.9g, by hand %.9g",
        amoe_cost_host_layer(&m, &h, 2, 2), read2 + 2e-6);
  /* a thousand tokens: 3.146 GFLOP at 1 TFLOP/s, over the reads */
  const double comp = 1000 * 6.0 * 1024 * 512 / 1e12;
  CHECK(fabs(amoe_cost_host_layer(&m, &h, 2, 1000) - (comp + 2e-6)) < 1e-12, "compute-bound: %.9g, by hand %.9g",
        amoe_cost_host_layer(&m, &h, 2, 1000), comp + 2e-6);
  CHECK(amoe_cost_host_layer(&m, &h, 0, 5) == 0, "no expert on the host: nothing");
  /* a second socket adds 63% of the first's bandwidth and rate */
  h.sockets = 2;
  CHECK(fabs(amoe_cost_host_layer(&m, &h, 2, 2) - (read2 / 1.63 + 2e-6)) < 1e-12, "two sockets: %.9g",
        amoe_cost_host_layer(&m, &h, 2, 2));
  /* narrower weights compute at the integer rate */
  m.weight_format = AMOE_FMT_FP8_BLOCK128;
  CHECK(fabs(amoe_host_flops(&m, &h) - 4e12 * 1.63) < 1, "fp8 weights at the int8 rate: %g", amoe_host_flops(&m, &h));
  /* q4_k_m runs the vector kernels' rate */
  m.weight_format = AMOE_FMT_Q4_K_M;
  h.flops_vector = 2e12;
  CHECK(fabs(amoe_host_flops(&m, &h) - 2e12 * 1.63) < 1, "q4_k_m at the vector rate: %g", amoe_host_flops(&m, &h));
  /* the host formats' bytes: 4.85 bits a weight; a byte a weight and a float scale a row */
  CHECK(fabs(amoe_model_format_bytes(AMOE_FMT_Q4_K_M, 1024, 512) - 1024 * 512 * 4.85 / 8) < 1e-6 &&
            amoe_model_format_bytes(AMOE_FMT_INT8, 1024, 512) == 1024 * 512 + 4 * 1024,
        "q4_k_m and int8 bytes");
}

/* A two-sided layer by hand: the slower of the GPU's side and the host's
 * plus the activations' copies both ways. */
static void two_sided(void) {
  amoe_model m = {.name = "tiny", .hidden = 1024, .moe_intermediate = 512, .weight_format = AMOE_FMT_BF16};
  amoe_host h = {.name = "hx", .sockets = 1, .channels = 8, .mts = 4800, .bw_share = 0.5, .flops = 1e12,
                 .expert_fixed_s = 1e-6};
  /* 4 tokens over 1e9 B/s, 1 us a copy: 2 · (4 · 1024 · 2 / 1e9 + 1e-6) = 18.384 us; the host's 2 experts 42.96 us */
  const double host = 2 * 3145728.0 / 153.6e9 + 2e-6, link = 2 * (4 * 1024 * 2 / 1e9 + 1e-6);
  CHECK(fabs(amoe_cost_tier_layer(&m, &h, 10e-6, 2, 2, 4, 1e9, 1e-6) - (host + link)) < 1e-12,
        "the host's side is slower: %.9g, by hand %.9g", amoe_cost_tier_layer(&m, &h, 10e-6, 2, 2, 4, 1e9, 1e-6),
        host + link);
  CHECK(amoe_cost_tier_layer(&m, &h, 1e-3, 2, 2, 4, 1e9, 1e-6) == 1e-3, "the GPU's side is slower");
  CHECK(amoe_cost_tier_layer(&m, &h, 7e-6, 0, 0, 4, 1e9, 1e-6) == 7e-6, "nothing on the host: the GPU's time, no copy");
}

static void parse(void) {
  amoe_tiers t;
  amoe_err e;
  CHECK(amoe_tiers_parse("gpu", 4, &t, &e) == AMOE_OK && t.kind == AMOE_TIER_GPU, "gpu");
  CHECK(amoe_tiers_parse("", 4, &t, &e) == AMOE_OK && t.kind == AMOE_TIER_GPU, "unset: gpu");
  CHECK(amoe_tiers_parse("cpu", 4, &t, &e) == AMOE_OK && t.kind == AMOE_TIER_CPU, "cpu");
  CHECK(amoe_tiers_parse("cpu:0.3:front", 4, &t, &e) == AMOE_OK && t.kind == AMOE_TIER_SHARE && t.share == 0.3 &&
            t.strategy == AMOE_PICK_FRONT,
        "cpu:0.3:front");
  CHECK(amoe_tiers_parse("cpu-layers:2", 4, &t, &e) == AMOE_OK && t.kind == AMOE_TIER_CPU_LAYERS && t.layers == 2,
        "cpu-layers:2");
  CHECK(amoe_tiers_parse("cpu:1.5:random", 4, &t, &e) == AMOE_EINVAL && strstr(e.msg, "from 0 to 1"), "a share over 1: %s",
        e.msg);
  CHECK(amoe_tiers_parse("cpu:0.5:busiest", 4, &t, &e) == AMOE_EINVAL && strstr(e.msg, "no strategy 'busiest'"),
        "an unknown strategy: %s", e.msg);
  CHECK(amoe_tiers_parse("cpu-layers:5", 4, &t, &e) == AMOE_EINVAL && strstr(e.msg, "4 MoE layers"),
        "more CPU layers than the model's: %s", e.msg);
  CHECK(amoe_tiers_parse("disk", 4, &t, &e) == AMOE_EINVAL && strstr(e.msg, "is not gpu, cpu"), "another form: %s", e.msg);
}

static int on_layer(const uint8_t *g, int l, int E) {
  int n = 0;
  for (int x = 0; x < E; x++) n += g[l * E + x];
  return n;
}

static void place(void) {
  enum { L = 4, E = 8 };
  uint8_t g[L * E], g2[L * E];
  amoe_tiers t;
  amoe_err e;
  amoe_tiers_parse("gpu", L, &t, &e);
  CHECK(amoe_tiers_place(&t, L, E, NULL, 1, g, &e) == AMOE_OK && on_layer(g, 0, E) == E && on_layer(g, 3, E) == E,
        "gpu: every expert on the GPU");
  amoe_tiers_parse("cpu", L, &t, &e);
  CHECK(amoe_tiers_place(&t, L, E, NULL, 1, g, &e) == AMOE_OK && on_layer(g, 0, E) == 0 && on_layer(g, 3, E) == 0,
        "cpu: none");
  /* front, a quarter: 8 of the 32, layer 0's all */
  amoe_tiers_parse("cpu:0.25:front", L, &t, &e);
  amoe_tiers_place(&t, L, E, NULL, 1, g, &e);
  CHECK(on_layer(g, 0, E) == E && on_layer(g, 1, E) == 0 && on_layer(g, 3, E) == 0, "front: the first layer's");
  /* uniform: 2 in every layer */
  amoe_tiers_parse("cpu:0.25:uniform", L, &t, &e);
  amoe_tiers_place(&t, L, E, NULL, 7, g, &e);
  CHECK(on_layer(g, 0, E) == 2 && on_layer(g, 1, E) == 2 && on_layer(g, 2, E) == 2 && on_layer(g, 3, E) == 2,
        "uniform: 2 a layer");
  /* random: 8 in all, the same for the same seed */
  amoe_tiers_parse("cpu:0.25:random", L, &t, &e);
  amoe_tiers_place(&t, L, E, NULL, 7, g, &e);
  amoe_tiers_place(&t, L, E, NULL, 7, g2, &e);
  int n = 0;
  for (int l = 0; l < L; l++) n += on_layer(g, l, E);
  CHECK(n == 8 && !memcmp(g, g2, sizeof g), "random: 8 of 32, the seed's (%d)", n);
  /* frequency: each layer's two most used, ties to the lower id */
  double pop[L * E] = {0};
  for (int l = 0; l < L; l++) pop[l * E + 5] = 9, pop[l * E + (l + 1) % E] = 4, pop[l * E + 7] = 4;
  amoe_tiers_parse("cpu:0.25:frequency", L, &t, &e);
  CHECK(amoe_tiers_place(&t, L, E, NULL, 1, g, &e) == AMOE_EINVAL && strstr(e.msg, "popularity"),
        "frequency without a popularity refused: %s", e.msg);
  CHECK(amoe_tiers_place(&t, L, E, pop, 1, g, &e) == AMOE_OK && g[0 * E + 5] && g[0 * E + 1] && !g[0 * E + 7] &&
            g[3 * E + 5] && g[3 * E + 4] && on_layer(g, 3, E) == 2,
        "frequency: the most used, then the lower id");
  /* cpu-layers:2 is a share of 0 on its two layers and the GPU's on the rest */
  amoe_tiers_parse("cpu-layers:2", L, &t, &e);
  amoe_tiers_place(&t, L, E, NULL, 1, g, &e);
  CHECK(on_layer(g, 0, E) == 0 && on_layer(g, 1, E) == 0 && on_layer(g, 2, E) == E && on_layer(g, 3, E) == E,
        "cpu-layers:2: layers 0 and 1 on the host");
}

int main(void) {
  host_cost();
  two_sided();
  parse();
  place();
  printf("%d passed, %d failed\n", check_pass, check_fail);
  return check_fail ? 1 : 0;
}
