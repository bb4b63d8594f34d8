/* The cost model (docs/design.md §9) and the cache (§8) inside the run loop, on one
 * hand-made block whose cost is worked out here from the formulas. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "accept.h"
#include "check.h"
#include "cost.h"
#include "policy.h"
#include "results.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"

#include "hand.h"

static amoe_spec spec(void) { return hand_spec(); }

/* The run loop's executed set and its cost come from the kept natural
 * entries plus replacements (no route search per node); they must be what
 * the constrained routes themselves give. The routes reach on_route, the
 * executed set on_select, for the same (row, block, layer). */
typedef struct {
  const amoe_spec *s;
  int count[AMOE_MAX_EXPERTS], layers, bad, displaced;
  double t_moe;
} route_check;

static amoe_status on_route(void *ctx, int row, uint64_t block, int layer, int nodes, int k, const int32_t *route,
                            const float *weight, double predicted_s, int fetched, double predicted_fetch_s,
                            const amoe_placement *pl, amoe_err *e) {
  (void)row, (void)block, (void)layer, (void)weight, (void)fetched, (void)predicted_fetch_s, (void)pl, (void)e;
  route_check *c = ctx;
  memset(c->count, 0, sizeof c->count);
  for (int i = 0; i < nodes * k; i++)
    if (route[i] >= 0) c->count[route[i]]++;
  c->t_moe = predicted_s;
  return AMOE_OK;
}

static amoe_status on_select(void *ctx, int row, uint64_t block, int layer, const uint8_t *uni, const uint8_t *S,
                             const uint8_t *X, const uint8_t *F, int E, amoe_err *e) {
  (void)row, (void)block, (void)layer, (void)F, (void)e;
  route_check *c = ctx;
  const amoe_expert_coef ec = amoe_cost_expert_coef(&c->s->model, &c->s->hw);
  double t = amoe_cost_moe_fixed(&c->s->hw, 1); /* resident: one wave */
  int wrong = 0;
  for (int x = 0; x < E; x++) {
    wrong += X[x] != (c->count[x] > 0) || (X[x] && !S[x]);
    c->displaced += uni[x] && !S[x];
    t += c->count[x] > 0 ? amoe_cost_expert_at(ec, c->count[x]) : 0.0;
  }
  c->bad += wrong > 0 || fabs(t - c->t_moe) > 1e-9 * t;
  c->layers++;
  return AMOE_OK;
}

/* A digest of every layer's union, S and executed set, in call order. */
static amoe_status on_select_digest(void *ctx, int row, uint64_t block, int layer, const uint8_t *uni,
                                    const uint8_t *S, const uint8_t *X, const uint8_t *F, int E, amoe_err *e) {
  (void)block, (void)F, (void)e;
  uint64_t *h = ctx;
  *h = (*h ^ (uint64_t)(row * 1000 + layer)) * 0x100000001b3ULL;
  for (int x = 0; x < E; x++) *h = (*h ^ (uint64_t)(uni[x] | S[x] << 1 | X[x] << 2)) * 0x100000001b3ULL;
  return AMOE_OK;
}
static amoe_status on_route_none(void *ctx, int row, uint64_t block, int layer, int nodes, int k,
                                 const int32_t *route, const float *weight, double predicted_s, int fetched,
                                 double predicted_fetch_s, const amoe_placement *pl, amoe_err *e) {
  (void)ctx, (void)row, (void)block, (void)layer, (void)nodes, (void)k, (void)route, (void)weight;
  (void)predicted_s, (void)fetched, (void)predicted_fetch_s, (void)pl, (void)e;
  return AMOE_OK;
}

static void executed_is_routed(void) {
  amoe_spec s;
  amoe_diag d = {0};
  amoe_spec_defaults(&s);
  CHECK(amoe_spec_load_preset(&s, 0, "qwen3-30b-a3b", "test", &d) == AMOE_OK &&
            amoe_spec_load_preset(&s, 1, "h200", "test", &d) == AMOE_OK && d.n == 0,
        "presets");
  amoe_diag_free(&d);
  s.workload.blocks = 3;
  s.npolicies = 3;
  memset(s.policies, 0, sizeof s.policies);
  const char *ver[3] = {"acceptmoe", "moe-spec", "oracle"};
  for (int i = 0; i < 3; i++) {
    amoe_policy_init(&s.policies[i], amoe_draft_find("eagle"), amoe_verifier_find(ver[i]));
    amoe_policy_set(&s.policies[i], "budget", 12); /* moe-spec: most assignments displaced */
  }
  static amoe_offline offline = {.p = {1, 0.75, 0.55, 0.4, 0.28, 0.2}, .n = 6};
  const double flops = s.hw.peak_flops;
  for (int run = 0; run < 3; run++) {
    /* h200: an expert's bytes outweigh 64 tokens of compute, so only the
     * executed set matters; at 1/50 of its FLOP/s, token counts do. With 3
     * nodes, moe-spec's S (by mass over all stored entries) reaches experts
     * outside the natural union, and so do replacements. */
    const int slow = run == 1;
    s.hw.peak_flops = slow ? flops / 50 : flops;
    s.workload.nodes = s.workload.candidates = run == 2 ? 3 : 64;
    s.workload.tau = run == 2 ? 1.5 : 4.4;
    const amoe_expert_coef ec = amoe_cost_expert_coef(&s.model, &s.hw);
    CHECK((ec.per_token_s * 64 > ec.mem_s) == slow, "the two cost regimes");
    amoe_err e;
    amoe_source *src;
    CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
    route_check c = {&s, {0}, 0, 0, 0, 0};
    amoe_run_hooks h = {0};
    h.ctx = &c;
    h.on_route = on_route;
    h.on_select = on_select;
    amoe_row_result rows[3];
    CHECK(amoe_run(&s, &offline, src, &h, rows, &e) == AMOE_OK, "%s", e.msg);
    for (int i = 0; i < 3; i++) amoe_row_result_free(&rows[i]);
    /* Reporting routes must not change what is counted: the same sets,
     * displaced counts and displaced mass (so τ), bit for bit. (Vector and
     * portable routing are compared directly in test_route.) With κ = 0 no
     * token deviates, so the displaced mass of every node on each natural
     * path is summed, not only up to the first deviation. */
    uint64_t dig[2] = {0xcbf29ce484222325ULL, 0xcbf29ce484222325ULL};
    amoe_row_result out[2][3];
    const double kappa = s.kappa;
    s.kappa = 0;
    for (int v = 0; v < 2; v++) {
      amoe_run_hooks hv = {0};
      hv.ctx = &dig[v];
      hv.on_select = on_select_digest;
      if (v) hv.on_route = on_route_none;
      CHECK(amoe_run(&s, &offline, src, &hv, out[v], &e) == AMOE_OK, "%s", e.msg);
    }
    int same = dig[0] == dig[1];
    for (int i = 0; i < 3; i++) {
      same &= !memcmp(&out[0][i].tot, &out[1][i].tot, sizeof out[0][i].tot);
      amoe_row_result_free(&out[0][i]);
      amoe_row_result_free(&out[1][i]);
    }
    CHECK(same, "run %d: results change when routes are reported", run);
    s.kappa = kappa;
    amoe_source_close(src);
    CHECK(c.layers == 3 * 3 * 48 && c.bad == 0 && c.displaced > 100,
          "token counts %s: %d of %d layers differ from their routes (%d displaced)",
          slow ? "matter" : "do not matter", c.bad, c.layers, c.displaced);
  }
}

/* Row 0 natural (from spec()), row 1 autoregressive, a cold offload cache. */
static void with_autoregressive(amoe_spec *s, int slots) {
  s->npolicies = 2;
  s->policies[1].draft = amoe_draft_find("autoregressive");
  s->policies[1].verifier = amoe_verifier_find("natural");
  s->offload.enabled = 1;
  s->offload.slots_per_layer = slots;
}

/* The autoregressive baseline (docs/design.md §6) decodes the natural accepted path
 * 0 -> 1 -> 3 one token per forward pass: routes {0,1}, {2,3}, {2,5}. */
static void autoregressive_by_hand(amoe_source *src, amoe_spec s) {
  static amoe_offline offline;
  amoe_err e;
  amoe_row_result rows[2];
  with_autoregressive(&s, 2); /* natural and autoregressive on the same block */
  s.hw.readback_s = 2e-4;
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  const amoe_totals *ar = &rows[1].tot;
  /* per token, one MoE layer, a 2-slot LRU cache from cold:
   *   token 0 {0,1}: 2 misses             -> {0,1}
   *   token 1 {2,3}: 2 misses (evict 0,1) -> {2,3}
   *   token 3 {2,5}: 2 hits, 5 misses (evicts 3)
   * each pass (n = 1, all memory-bound, no draft): step 5e-4, dense of the
   * MoE layer 2.01e-3 + 1e-6, dense layer 2.13e-3 + 1e-6, two experts
   * 4e-3 + t0 1e-6, head 4e-3 + 1e-6, host synchronisation 2e-4; fetches
   * 5 · (1e6 / 1e8 + 1e-4) = 0.0505 s. */
  double pass = 5e-4 + (2.01e-3 + 1e-6) + (2.13e-3 + 1e-6) + (4e-3 + 1e-6) + (4e-3 + 1e-6) + 2e-4;
  CHECK(ar->blocks == 1 && ar->passes == 3 && ar->committed == 3 && ar->verified == 3,
        "autoregressive: blocks %g passes %g committed %g verified %g", ar->blocks, ar->passes, ar->committed,
        ar->verified);
  CHECK(ar->committed == rows[0].tot.committed, "autoregressive commits %g tokens, natural %g", ar->committed,
        rows[0].tot.committed);
  CHECK(ar->requests == 6 && ar->hits == 1 && ar->h2d_bytes == 5e6, "autoregressive: requests %g hits %g h2d %g",
        ar->requests, ar->hits, ar->h2d_bytes);
  CHECK(fabs(ar->t_fetch - (0.0505 + 3 * 2e-4)) < 1e-12 && fabs(ar->t_total - (3 * pass + 0.0505)) < 1e-12,
        "autoregressive: fetch %.9g total %.9g, by hand %.9g", ar->t_fetch, ar->t_total, 3 * pass + 0.0505);
  CHECK(ar->union_sum == 6 && ar->executed_sum == 6 && ar->layer_blocks == 3, "per-pass sets: union %g layers %g",
        ar->union_sum, ar->layer_blocks);
  amoe_summary m;
  amoe_summarize(ar, 1, &m);
  CHECK(m.tau_mean == 1 && m.verified_nodes_mean == 1 && m.union_mean == 2 && fabs(m.cache_hit_rate - 1.0 / 6) < 1e-15,
        "autoregressive summary: tau %g verified %g union %g hit %g", m.tau_mean, m.verified_nodes_mean, m.union_mean,
        m.cache_hit_rate);
  for (int i = 0; i < 2; i++) amoe_row_result_free(&rows[i]);
}

/* On blocks of one node, autoregressive decoding and natural verification
 * are the same forward passes: every total is identical. */
static void autoregressive_single_nodes(void) {
  const char *blocks =
      "{\"parent\":[-1],\"logp\":[0],\"accepted\":[1],\"topk\":[[[[0,0],[1,-1]]]]}\n"
      "{\"parent\":[-1],\"logp\":[0],\"accepted\":[1],\"topk\":[[[[2,0],[1,-1]]]]}\n"
      "{\"parent\":[-1],\"logp\":[0],\"accepted\":[1],\"topk\":[[[[3,0],[4,-1]]]]}\n"
      "{\"parent\":[-1],\"logp\":[0],\"accepted\":[1],\"topk\":[[[[1,0],[0,-1]]]]}\n";
  char path[] = "/tmp/amoe_ar_XXXXXX";
  amoe_spec s = spec();
  with_autoregressive(&s, 3);
  amoe_source *src = hand_open_fixture(path, blocks, &s);
  amoe_err e;
  static amoe_offline offline;
  amoe_row_result rows[2];
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  CHECK(memcmp(&rows[0].tot, &rows[1].tot, sizeof rows[0].tot) == 0, "single-node blocks: rows differ");
  CHECK(memcmp(rows[0].layers, rows[1].layers, sizeof *rows[0].layers) == 0, "single-node blocks: layers differ");
  CHECK(rows[0].tot.passes == 4 && rows[0].tot.hits == 1, /* {0,1} {1,2} {3,4} {0,1} in 3 slots */ "passes %g hits %g", rows[0].tot.passes, rows[0].tot.hits);
  for (int i = 0; i < 2; i++) amoe_row_result_free(&rows[i]);
  amoe_source_close(src);
  remove(path);
}

/* An eager engine (docs/design.md §9) on the hand-made block: every kernel
 * is a host launch (launch_s 1e-6) added to the device time. Kernels: the
 * dense layer 10 + 1, the draft's extend and one step 2 · (10 + 1), the MoE
 * layer 10 + one fused call = 44 launches; without the overlap scheduler the step's host
 * work (3e-4) too. Per-expert MoE kernels (2 per executed expert): the MoE
 * layer 10 + 6 · 2. */
static void eager_by_hand(amoe_source *src, double T) {
  static amoe_offline offline;
  amoe_err e;
  amoe_row_result rows[1];
  amoe_spec s = spec();
  s.engine.cuda_graphs = 0;
  s.engine.overlap_scheduler = 0;
  s.engine.kernels_per_layer = 10;
  s.engine.kernels_per_expert = 2;
  s.hw.step_host_s = 3e-4;
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  CHECK(fabs(rows[0].tot.t_total - (T + 44e-6 + 3e-4)) < 1e-12 && fabs(rows[0].tot.t_host - (44e-6 + 3e-4)) < 1e-15,
        "eager: total %.12g (by hand %.12g), host %.12g", rows[0].tot.t_total, T + 44e-6 + 3e-4, rows[0].tot.t_host);
  amoe_row_result_free(&rows[0]);
  s.engine.moe_kernels = AMOE_MOE_PER_EXPERT;
  s.engine.overlap_scheduler = 1;
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  CHECK(fabs(rows[0].tot.t_total - (T + 55e-6)) < 1e-12, "per-expert eager: total %.12g, by hand %.12g",
        rows[0].tot.t_total, T + 55e-6);
  amoe_row_result_free(&rows[0]);
  /* the shared function on the same counts */
  amoe_cost_pass_ctx pc;
  amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .tokens = 4,
      .depth = 2, .context = s.workload.context_tokens});
  const amoe_layer_counts lc = {6, 0, 1, 6 * pc.ec.mem_s};
  const amoe_pass_time pt = amoe_cost_pass(&pc, &lc, 1);
  CHECK(fabs(pt.total - (T + 55e-6)) < 1e-12 &&
            fabs(pt.step + pt.draft + pt.extend + pt.dense + pt.moe + pt.fetch + pt.host - pt.total) < 1e-15,
        "amoe_cost_pass: %.12g, parts add to it", pt.total);
  CHECK(fabs(amoe_cost_expert_marginal(&pc, &lc, 1, 0) - (pc.ec.mem_s + 2e-6)) < 1e-15,
        "one more expert: its bytes and its two launches");
}

/* Hugging Face transformers' expert loop (engine.moe_kernels: loop) on the
 * hand-made block: no fused call (T less t0 1e-6); launches 10 per layer
 * and 33 fixed ((1 dense layer + 2 draft forwards) · 11) at 1e-6, added; each
 * of the 6 executed experts takes max(expert_host_s, its 2e-3 device time),
 * and with visits all or all-skip each of the 4 others its host time. */
static void loop_engine_by_hand(amoe_source *src, double T) {
  static amoe_offline offline;
  amoe_err e;
  amoe_row_result rows[1];
  const double base = T - 1e-6 + 43e-6;
  struct {
    int visits, overlap;
    double expert_host, launch, want;
  } cases[] = {
      {AMOE_VISIT_HIT, 0, 1e-3, 0, base},                  /* the device is longer: host issue hidden */
      {AMOE_VISIT_HIT, 0, 3e-3, 0, base + 6e-3},           /* 6 · 3e-3 issue against 12e-3 device */
      {AMOE_VISIT_ALL, 0, 3e-3, 0, base + 6e-3 + 12e-3},   /* and 4 empty experts run their kernels */
      {AMOE_VISIT_ALL_SKIP, 0, 3e-3, 0, base + 6e-3 + 2e-3}, /* or are only visited, 5e-4 each */
      {AMOE_VISIT_HIT, 1, 3e-3, 0, T - 1e-6 + 6e-3},       /* host_overlap: the launches hide under the device */
      {AMOE_VISIT_HIT, 0, 1e-3, 2e-6, T - 1e-6 + 86e-6},  /* the engine's own launch_s */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    amoe_spec s = spec();
    s.engine.cuda_graphs = 0;
    s.engine.moe_kernels = AMOE_MOE_LOOP;
    s.engine.kernels_per_layer = 10;
    s.engine.visits = cases[i].visits;
    s.engine.host_overlap = cases[i].overlap;
    s.engine.expert_host_s = cases[i].expert_host;
    s.engine.visit_host_s = 5e-4;
    s.engine.launch_s = cases[i].launch;
    CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
    CHECK(fabs(rows[0].tot.t_total - cases[i].want) < 1e-12, "loop case %zu: total %.12g, by hand %.12g", i,
          rows[0].tot.t_total, cases[i].want);
    amoe_row_result_free(&rows[0]);
    if (i == 1) { /* one more expert costs what its issue adds: 3e-3 (host 1e-3 more, device 2e-3) */
      amoe_cost_pass_ctx pc;
      amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .tokens = 4,
          .depth = 2, .context = s.workload.context_tokens});
      const amoe_layer_counts lc = {6, 0, 1, 6 * pc.ec.mem_s};
      CHECK(fabs(amoe_cost_expert_marginal(&pc, &lc, 1, 0) - 3e-3) < 1e-15, "loop: one more expert %.12g",
            amoe_cost_expert_marginal(&pc, &lc, 1, 0));
    }
  }
}

/* parallel.pipeline: 2 stages on 2 GPUs: the pass of one GPU plus one hop
 * of the 4 tokens' hidden states (1e-5 + 4 · 100 · 2 / 1e9), in comm; no
 * collectives. Pipeline 1 is the one-GPU run itself. */
static void pipeline_by_hand(amoe_source *src, double T) {
  static amoe_offline offline;
  amoe_err e;
  amoe_row_result rows[2];
  amoe_spec s = spec();
  s.parallel.attention_tp = s.parallel.moe_ep = s.parallel.moe_tp = 1;
  s.parallel.pipeline = 1;
  CHECK(amoe_run(&s, &offline, src, NULL, &rows[0], &e) == AMOE_OK, "%s", e.msg);
  s.hw.gpus = 2;
  s.parallel.pipeline = 2;
  s.hw.ic.hop_latency_s = 1e-5;
  s.hw.ic.hop_bw = 1e9;
  s.hw.ic.allreduce_latency_s = s.hw.ic.layer_sync_per_peer_s = 1; /* unused: a pipeline has no collectives */
  CHECK(amoe_run(&s, &offline, src, NULL, &rows[1], &e) == AMOE_OK, "%s", e.msg);
  const double hop = 1e-5 + 4 * 100 * 2 / 1e9;
  CHECK(fabs(rows[0].tot.t_total - T) < 1e-12, "pipeline 1: %.12g, one GPU %.12g", rows[0].tot.t_total, T);
  CHECK(fabs(rows[1].tot.t_total - (T + hop)) < 1e-12 && fabs(rows[1].tot.t_comm - hop) < 1e-15,
        "pipeline 2: total %.12g (by hand %.12g), comm %.12g", rows[1].tot.t_total, T + hop, rows[1].tot.t_comm);
  for (int i = 0; i < 2; i++) amoe_row_result_free(&rows[i]);
}

/* evict's prediction of the pass it chooses equals the time the run then
 * charges, when its union table is exact for the block (resident, every
 * expert memory-bound): EAGLE order 0, 1, 2, 3 unites 2, 4, 5, 6 experts. */
static void evict_predicts_what_is_charged(amoe_source *src) {
  static amoe_offline offline = {.p = {1, 1, 1}, .n = 3};
  offline.unions[1] = 2, offline.unions[2] = 4, offline.unions[3] = 5, offline.unions[4] = 6, offline.union_n = 4;
  amoe_err e;
  amoe_row_result rows[1];
  for (int graphs = 0; graphs < 2; graphs++) {
    amoe_spec s = spec();
    s.engine.cuda_graphs = graphs;
    s.engine.kernels_per_layer = 10;
    s.policies[0].draft = amoe_draft_find("evict");
    CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
    const amoe_totals *t = &rows[0].tot;
    CHECK(t->predictions > 0 && fabs(t->predicted_s - t->t_total) < 1e-12 * t->t_total,
          "graphs %d: evict predicted %.12g, charged %.12g (verified %g)", graphs, t->predicted_s, t->t_total,
          t->verified);
    amoe_row_result_free(&rows[0]);
  }
}

/* Hit rates per expert and per (token, expert) assignment: a one-node
 * block {2, 0} warms a 4-slot cache, then the hand-made block executes
 * {0..5} with token counts 0:1 1:1 2:3 3:1 4:1 5:1. Its hits are 0 and 2:
 * per expert 2 of 8 requests over both blocks, per assignment (1 + 3) of 10. */
static void hit_rates_by_hand(void) {
  char text[1024];
  snprintf(text, sizeof text, "{\"parent\":[-1],\"logp\":[0],\"accepted\":[1],\"topk\":[[[[2,0],[0,-1]]]]}\n%s", BLOCK);
  char path[] = "/tmp/amoe_hits_XXXXXX";
  amoe_spec s = spec();
  s.offload.enabled = 1;
  s.offload.slots_per_layer = 4;
  amoe_source *src = hand_open_fixture(path, text, &s);
  amoe_err e;
  static amoe_offline offline;
  amoe_row_result rows[1];
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  amoe_summary m;
  amoe_summarize(&rows[0].tot, 1, &m);
  CHECK(m.cache_hit_rate == 0.25 && m.assignment_hit_rate == 0.4, "hit rates: per expert %g, per assignment %g",
        m.cache_hit_rate, m.assignment_hit_rate);
  amoe_row_result_free(&rows[0]);
  amoe_source_close(src);
  remove(path);
}

/* The per-layer sync grows with the GPUs a collective waits for: on g GPUs
 * of attention TP a MoE layer pays two all-reduces and (g − 1) ·
 * layer_sync_per_peer_s; a dense layer and a draft step the same. */
static void sync_per_peer_by_hand(void) {
  amoe_spec s = spec();
  s.hw.ic.allreduce_latency_s = 1e-5;
  s.hw.ic.allreduce_bw = 1e9;
  s.hw.ic.layer_sync_per_peer_s = 3e-6;
  const int gpus[3] = {2, 4, 8};
  for (int i = 0; i < 3; i++) {
    s.hw.gpus = s.parallel.attention_tp = s.parallel.moe_tp = gpus[i];
    s.parallel.moe_ep = 1;
    amoe_cost_pass_ctx pc;
    amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine,
                                                .parallel = &s.parallel, .tokens = 4, .depth = 2});
    /* all-reduce of 4 tokens: 1e-5 + 4 · 100 · 2 / 1e9; of 1 token 1e-5 + 2e-7 */
    const double ar4 = 1e-5 + 8e-7, ar1 = 1e-5 + 2e-7, sync = 3e-6 * (gpus[i] - 1);
    const double comm = 2 * ar4 + sync, rest = 1 * (2 * ar4 + sync) + 2 * (2 * ar1 + sync);
    CHECK(fabs(pc.comm - comm) < 1e-15 && fabs(pc.rest_comm - rest) < 1e-15,
          "%d GPUs: comm %.12g (by hand %.12g), rest %.12g (by hand %.12g)", gpus[i], pc.comm, comm, pc.rest_comm, rest);
  }
}

/* DP attention (parallel.attention_dp 4 of tp 1 on 4 GPUs, experts EP 4):
 * each copy runs a quarter of a step of 8 requests, 8 tokens over 8,000
 * tokens of KV: its dense layer is one GPU's over 2 tokens and 2,000 of KV;
 * the MoE layer's collective is the dispatch (5e-5) and combine (7e-5) and
 * 3 peers' sync (3e-6 each), no all-reduce; the dense layer none. KV
 * capacity: each GPU holds the dense weights whole (12.12 MB) and a
 * quarter of the ten 1 MB experts, 14.62 MB; 2,000 bytes a token (two
 * layers) in the 200,000 bytes and a half token left: 100 tokens a copy,
 * 400 in all. */
static void dp_attention_by_hand(void) {
  amoe_spec s = spec();
  s.hw.gpus = 4;
  s.hw.ic.allreduce_latency_s = 1e-5;
  s.hw.ic.allreduce_bw = 1e9;
  s.hw.ic.dispatch_s = 5e-5;
  s.hw.ic.combine_s = 7e-5;
  s.hw.ic.layer_sync_per_peer_s = 3e-6;
  s.parallel.attention_tp = 1;
  s.parallel.attention_dp = 4;
  s.parallel.moe_ep = 4;
  s.parallel.moe_tp = 1;
  amoe_cost_pass_ctx pc;
  amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine,
      .parallel = &s.parallel, .tokens = 8, .requests = 8, .kv_tokens = 8000, .attn_tokens = 8000});
  const double dense = amoe_cost_dense_batch(&s.model, &s.hw, 2, 2000, 2000, 1, 1);
  CHECK(pc.dense == dense && fabs(pc.comm - (5e-5 + 7e-5 + 9e-6)) < 1e-18 && pc.rest_comm == 0,
        "DP attention: dense %.12g (a copy's %.12g), comm %.12g (by hand 1.29e-4), rest %.12g", pc.dense, dense, pc.comm,
        pc.rest_comm);
  s.engine.gpu_memory_utilization = 1;
  s.hw.memory_bytes = 14.62e6 + 2000 * 100.5;
  const double kv = amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 0);
  CHECK(kv == 400, "DP attention: KV capacity %g tokens (by hand 4 x 100)", kv);
}

/* Attention per key (model.attn_flops_per_key): the hand layer made
 * compute-bound (bandwidth 1e15) and its weights zero, so a pass of
 * n = 4 tokens over 10 tokens of context each costs its attention only:
 * by default 4 · hidden 100 = 400 FLOPs per key, 4 · 10 · 400 = 1.6e4
 * FLOPs, 1.6e-8 s at 1e12; at 3,000 FLOPs per key 1.2e5 FLOPs, 1.2e-7 s.
 * The batch form (Σ n·context = 40) gives the same. */
static void attention_per_key_by_hand(void) {
  amoe_spec s = spec();
  s.model.attn_bytes_per_layer = 0;
  s.model.shared_experts = 0;
  s.hw.hbm_bw = 1e15;
  s.hw.layer_fixed_s = 0;
  const double by_default = amoe_cost_dense(&s.model, &s.hw, 4, 10, 1, 1);
  const double batch_default = amoe_cost_dense_batch(&s.model, &s.hw, 4, 40, 40, 1, 1);
  s.model.attn_flops_per_key = 3000;
  const double set = amoe_cost_dense(&s.model, &s.hw, 4, 10, 1, 1);
  const double batch_set = amoe_cost_dense_batch(&s.model, &s.hw, 4, 40, 40, 1, 1);
  CHECK(fabs(by_default - 1.6e-8) < 1e-20 && fabs(batch_default - 1.6e-8) < 1e-20, "4 x hidden: %.12g, batch %.12g",
        by_default, batch_default);
  CHECK(fabs(set - 1.2e-7) < 1e-19 && fabs(batch_set - 1.2e-7) < 1e-19, "3000 per key: %.12g, batch %.12g", set,
        batch_set);
}

/* The speculative cycle (docs/design.md §9) on the hand-made block, every
 * term set: n = 4 verified tokens after a tree of depth 2 over 2 decoder
 * layers, 3 of them accepted, top_k 2 tokens a draft step.
 *   extend  the first draft forward over the 3 accepted tokens:
 *           3e6/1e9 + draft_step_s 2e-6 + 3 · draft_token_s 1e-7 + draft_extend_s 3e-5
 *   draft   one step over 2 tokens: 3e-3 + 2e-6 + 2 · 1e-7
 *   tree    tree_node_s 1e-6 · 4 nodes · 2 layers = 8e-6
 *   sample  4e-5; cycle host 5e-4
 * replacing T's two draft forwards of 3e-3 + 1e-6 (the hardware's fixed
 * cost); the parts add to the total, and the summary's columns to the
 * time per token. The verifier's selection_s joins a pass by the same
 * function. */
static void cycle_by_hand(amoe_source *src, double T) {
  static amoe_offline offline;
  amoe_err e;
  amoe_row_result rows[1];
  amoe_spec s = spec();
  s.workload.top_k = 2;
  s.engine.draft_step_s = 2e-6;
  s.engine.draft_token_s = 1e-7;
  s.engine.draft_extend_s = 3e-5;
  s.engine.tree_node_s = 1e-6;
  s.engine.sample_s = 4e-5;
  s.engine.cycle_host_s = 5e-4;
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  const double extend = 3e-3 + 2e-6 + 3e-7 + 3e-5, draft = 3e-3 + 2e-6 + 2e-7, tree = 8e-6, sample = 4e-5,
               host = 5e-4;
  const double want = T - 2 * (3e-3 + 1e-6) + extend + draft + tree + sample + host;
  const amoe_totals *t = &rows[0].tot;
  CHECK(fabs(t->t_total - want) < 1e-12, "cycle: total %.12g, by hand %.12g", t->t_total, want);
  CHECK(fabs(t->t_extend - extend) < 1e-15 && fabs(t->t_draft - draft) < 1e-15 && fabs(t->t_tree - tree) < 1e-15 &&
            fabs(t->t_sample - sample) < 1e-15 && fabs(t->t_cycle_host - host) < 1e-15 && t->t_select == 0,
        "cycle parts: extend %.12g draft %.12g tree %.12g sample %.12g host %.12g", t->t_extend, t->t_draft, t->t_tree,
        t->t_sample, t->t_cycle_host);
  amoe_summary m;
  amoe_summarize(t, 1, &m);
  const double parts = m.step_s_per_token + m.draft_s_per_token + m.extend_s_per_token + m.tree_s_per_token +
                       m.sample_s_per_token + m.cycle_host_s_per_token + m.selection_s_per_token + m.dense_s_per_token +
                       m.moe_s_per_token + m.fetch_s_per_token + m.host_s_per_token + m.comm_s_per_token;
  CHECK(fabs(parts - m.time_per_token_s) < 1e-15, "summary parts %.15g, time per token %.15g", parts,
        m.time_per_token_s);
  amoe_row_result_free(&rows[0]);
  /* plain decoding pays none of it */
  amoe_cost_pass_ctx pc;
  amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .tokens = 1,
      .context = s.workload.context_tokens});
  CHECK(pc.extend == 0 && pc.draft == 0 && pc.tree == 0 && pc.sample == 0 && pc.cycle_host == 0,
        "a pass without a draft pays a cycle term");
  /* an MTP chain (draft_priced) pays the tree, sampling and host terms, not the draft head's */
  amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .tokens = 3,
      .draft_priced = 1, .context = s.workload.context_tokens});
  CHECK(pc.extend == 0 && pc.draft == 0 && fabs(pc.tree - 6e-6) < 1e-18 && pc.sample == 4e-5 && pc.cycle_host == 5e-4,
        "MTP: tree %.12g sample %.12g host %.12g", pc.tree, pc.sample, pc.cycle_host);
  /* at batch the requests' tree masks are read side by side: a pass of 4
   * requests verifying 3 nodes each pays one request's tree, 1e-6 · 3 · 2 */
  amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .tokens = 12,
      .depth = 2, .requests = 4, .kv_tokens = 4.0 * s.workload.context_tokens,
      .attn_tokens = 12.0 * s.workload.context_tokens});
  CHECK(fabs(pc.tree - 6e-6) < 1e-18, "a batch of 4 pays %.12g for its trees, one request's is 6e-6", pc.tree);
  /* a speculating row's prefill (draft_prompt): its draft runs over the
   * prompt's 12 tokens as well. Without a draft tree in the pass, a forward
   * of its own: 3e6 bytes at 1e9 + draft_step_s 2e-6 + 12 x 2e-6; beside
   * two requests' tree of depth 2, joined to the extend, which runs over
   * their 2 accepted tokens and the 12: 3e-3 + 2e-6 + 14 x 2e-6 +
   * draft_extend_s 3e-5 */
  {
    amoe_engine eng = s.engine;
    eng.draft_token_s = 2e-6;
    amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &eng, .tokens = 12,
        .context = s.workload.context_tokens, .draft_prompt = 12});
    const double alone = pc.extend;
    amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &eng, .tokens = 16,
        .depth = 2, .accepted = 2, .requests = 3, .kv_tokens = 40, .attn_tokens = 100, .draft_prompt = 12});
    CHECK(fabs(alone - (3e-3 + 2e-6 + 24e-6)) < 1e-15 && fabs(pc.extend - (3e-3 + 2e-6 + 28e-6 + 3e-5)) < 1e-15,
          "the draft over a prompt: alone %.12g (by hand 3.026e-3), with the extend %.12g (3.06e-3)", alone, pc.extend);
  }
  amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .tokens = 3,
      .draft_priced = 1, .context = s.workload.context_tokens});
  pc.select = 7e-5;
  const amoe_pass_time pt = amoe_cost_pass_begin(&pc);
  CHECK(pt.select == 7e-5 && fabs(pt.total - (pc.step + pc.rest + pc.host + pc.rest_comm + 6e-6 + 4e-5 + 5e-4 + 7e-5)) < 1e-15,
        "selection_s joins the pass: %.12g", pt.total);
}

/* A routed expert's compute past its fitted range (hardware.moe_flops_tokens,
 * moe_peak_share), its bytes made free (bandwidth 1e15): 2·3·100·50 = 3e4
 * FLOPs a token. At moe_flops 1e10 and 4 tokens fitted, the first 4 tokens
 * take 3e-6 s each, each further one 3e4 / (the fp8 peak 1e12 × share):
 * 10 tokens: 1.2e-5 + 6 · 3e-8 = 1.218e-5 s at the whole peak (share 0),
 * 1.2e-5 + 6 · 1.2e-7 = 1.272e-5 at share 0.25. An mxfp4 expert takes the
 * fp4 peak 4e12: 1.2e-5 + 6 · 3e-8 = 1.218e-5 at share 0.25. Within the
 * fit, 3 tokens: 9e-6 either way. */
static void expert_past_fit_by_hand(void) {
  amoe_spec s = spec();
  s.hw.hbm_bw = 1e15;
  s.hw.moe_flops = 1e10;
  s.hw.moe_flops_tokens = 4;
  s.hw.peak_flops_fp8 = 1e12;
  s.hw.peak_flops_fp4 = 4e12;
  s.model.weight_format = AMOE_FMT_FP8_BLOCK128;
  const double whole = amoe_cost_expert(&s.model, &s.hw, 10), fitted = amoe_cost_expert(&s.model, &s.hw, 3);
  s.hw.moe_peak_share = 0.25;
  const double quarter = amoe_cost_expert(&s.model, &s.hw, 10), below = amoe_cost_expert(&s.model, &s.hw, 3);
  s.model.weight_format = AMOE_FMT_MXFP4;
  const double fp4 = amoe_cost_expert(&s.model, &s.hw, 10);
  CHECK(fabs(whole - 1.218e-5) < 1e-18 && fabs(quarter - 1.272e-5) < 1e-18 && fabs(fp4 - 1.218e-5) < 1e-18,
        "past the fit: whole peak %.12g, a quarter %.12g, fp4 %.12g", whole, quarter, fp4);
  CHECK(fabs(fitted - 9e-6) < 1e-18 && below == fitted, "within the fit: %.12g, with a share %.12g", fitted, below);
}

int main(void) {
  dp_attention_by_hand();
  attention_per_key_by_hand();
  expert_past_fit_by_hand();
  sync_per_peer_by_hand();
  executed_is_routed();
  hit_rates_by_hand();
  autoregressive_single_nodes();
  char path[] = "/tmp/amoe_cost_XXXXXX";
  amoe_spec s = spec();
  amoe_source *src = hand_open_fixture(path, BLOCK, &s);
  amoe_err e;
  static amoe_offline offline;
  amoe_row_result rows[1];
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  /* By hand. n = 4 verified tokens, depth 2, union {0..5} = 6 experts with
   * token counts 0:1 1:1 2:3 3:1 4:1 5:1.
   * step: 5e-4
   * dense (MoE layer): bytes 2e6 + KV 1000·10 = 2.01e6 -> 2.01e-3 s;
   *   FLOPs 4·(2e6 + 4·10·100) = 8.016e6 -> 8.016e-6 s; + layer fixed -> 2.011e-3
   * dense (dense layer): weights 2e6 + 3·100·200·2 = 2.12e6, + KV 1e4 -> 2.13e-3 + 1e-6
   * expert: max(1e6/(0.5·1e9), 6·100·50·n/1e12) = 2e-3 each; t_moe = 12e-3 + t0 1e-6
   * head: max(4e6/1e9, 2·4·1000·100/1e12) + launch = 4.001e-3
   * draft: depth 2 = the extend pass (the first level) and one draft step,
   *   each 3e6/1e9 + 1e-6 = 3.001e-3 */
  double t_dense_moe = 2.01e-3 + 1e-6, t_dense_dense = 2.13e-3 + 1e-6;
  double t_moe = 12e-3 + 1e-6, t_head = 4e-3 + 1e-6, t_draft = 3e-3 + 1e-6, t_extend = 3e-3 + 1e-6;
  double T = 5e-4 + t_draft + t_extend + t_head + t_dense_dense + t_dense_moe + t_moe;
  CHECK(fabs(rows[0].tot.t_total - T) < 1e-12, "block time %.9g, by hand %.9g", rows[0].tot.t_total, T);
  const amoe_totals *bt = &rows[0].tot; /* and its parts */
  CHECK(fabs(bt->t_step - 5e-4) < 1e-15 && fabs(bt->t_draft - t_draft) < 1e-15 && fabs(bt->t_extend - t_extend) < 1e-15 &&
            fabs(bt->t_dense - (t_dense_moe + t_dense_dense + t_head)) < 1e-15 && fabs(bt->t_moe - t_moe) < 1e-15 &&
            bt->t_fetch == 0,
        "parts: step %.9g draft %.9g dense %.9g moe %.9g", bt->t_step, bt->t_draft, bt->t_dense, bt->t_moe);
  CHECK(rows[0].tot.committed == 3 && rows[0].tot.union_sum == 6 && rows[0].tot.executed_sum == 6,
        "tau %g union %g executed %g", rows[0].tot.committed, rows[0].tot.union_sum, rows[0].tot.executed_sum);
  CHECK(rows[0].tot.hbm_expert_bytes == 6e6, "expert bytes %g", rows[0].tot.hbm_expert_bytes);
  amoe_row_result_free(&rows[0]);
  /* A calibrated engine at half the modelled device speed (engine.efficiency
   * 0.5): the target's dense, head and experts take twice as long; the
   * step's host work and the draft's forwards (their own fitted terms) do not. */
  s.engine.efficiency = 0.5;
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  const double T_half = 5e-4 + t_draft + t_extend + 2 * (t_head + t_dense_dense + t_dense_moe + t_moe);
  CHECK(fabs(rows[0].tot.t_total - T_half) < 1e-12 && fabs(rows[0].tot.t_step - 5e-4) < 1e-15,
        "efficiency 0.5: block time %.9g, by hand %.9g", rows[0].tot.t_total, T_half);
  amoe_row_result_free(&rows[0]);
  s.engine.efficiency = 0;
  /* Offload, 4 slots, cold cache: all 6 executed are fetched (0..5 in order,
   * 4 and 5, in the second wave, evicting 0 and 1): 6 · (1e6 / 1e8 + 1e-4)
   * = 0.0606 s of copies, 2e-4 of host synchronisation, one more fused-MoE
   * call (t0 1e-6) for the second wave. */
  s.offload.enabled = 1;
  s.offload.slots_per_layer = 4;
  s.hw.readback_s = 2e-4;
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  CHECK(rows[0].tot.h2d_bytes == 6e6 && rows[0].tot.hits == 0 && rows[0].tot.requests == 6, "h2d %g hits %g",
        rows[0].tot.h2d_bytes, rows[0].tot.hits);
  CHECK(fabs(rows[0].tot.t_fetch - 0.0608) < 1e-12 && fabs(rows[0].tot.t_total - (T + 0.0608 + 1e-6)) < 1e-12,
        "fetch %.9g total %.9g", rows[0].tot.t_fetch, rows[0].tot.t_total);
  amoe_row_result_free(&rows[0]);
  /* overlap: the copies hide behind the same layer's dense part; the host
   * synchronisation does not */
  s.offload.overlap = 1;
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  CHECK(fabs(rows[0].tot.t_fetch - (0.0606 - t_dense_moe + 2e-4)) < 1e-12, "overlapped fetch %.9g",
        rows[0].tot.t_fetch);
  amoe_row_result_free(&rows[0]);
  /* oracle: S = the accepted path's experts {0,1,2,3,5}. The off-path node 2
   * stores only (2, 4); 4 is outside S, and the unstored rest counts as -inf,
   * so it takes S's lowest unstored id, 0: executed = S, one displacement. */
  s.offload.enabled = 0;
  s.policies[0].verifier = amoe_verifier_find("oracle");
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  CHECK(rows[0].tot.eligible_sum == 5 && rows[0].tot.executed_sum == 5 && rows[0].tot.displaced == 1,
        "oracle eligible %g executed %g displaced %g", rows[0].tot.eligible_sum, rows[0].tot.executed_sum,
        rows[0].tot.displaced);
  CHECK(rows[0].tot.committed == 3 && rows[0].tot.deviated == 0, "off-path displacement never deviates");
  amoe_row_result_free(&rows[0]);
  /* §7 by hand. moe-spec B = 2 keeps the two experts of most mass, {0, 2}:
   * the root loses expert 1 (share e^-1/(1+e^-1) = 0.269 of its weight),
   * nodes 1 and 3 lose 0.119. With κ = 1e6 the root's output flips for
   * certain; its other verified child (node 2, draft mass e^-0.2) covers
   * more than 1 − e^-0.1, so the walk goes on to node 2 and ends: τ = 2,
   * one deviated token. With κ = 0 nothing flips (τ = 3); with two nodes
   * verified there is no sibling (τ = 1). */
  amoe_policy_init(&s.policies[0], amoe_draft_find("eagle"), amoe_verifier_find("moe-spec"));
  amoe_policy_set(&s.policies[0], "budget", 2);
  s.margin_min = 0.25;
  const double kappas[3] = {1e6, 0, 1e6};
  const int nodes[3] = {64, 64, 2}, want[3] = {2, 3, 1};
  for (int i = 0; i < 3; i++) {
    s.kappa = kappas[i];
    s.workload.nodes = nodes[i];
    CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
    CHECK(rows[0].tot.committed == want[i] && rows[0].tot.deviated == (kappas[i] > 0),
          "kappa %g nodes %d: tau %g deviated %g", kappas[i], nodes[i], rows[0].tot.committed, rows[0].tot.deviated);
    CHECK(fabs(rows[0].tot.perturbation_sum - (1 / (1 + exp(1.0)) + (want[i] == 3 ? 2 * (1 / (1 + exp(2.0))) : 0))) < 1e-6,
          "perturbation sum %.9g", rows[0].tot.perturbation_sum);
    amoe_row_result_free(&rows[0]);
  }
  s.workload.nodes = 64;
  /* the flip probability: 2Φ(−m/(κ s)), m = max(ln(c/(1−c)), margin_min) */
  CHECK(fabs(amoe_flip_prob(1, 0.25, 0.5, 1) - 0.80258734863) < 1e-9, "c = 0.5: the margin floor");
  CHECK(fabs(amoe_flip_prob(0.5, 0.25, 0.9, 2) - erfc(log(9.0) / sqrt(2.0))) < 1e-12, "c = 0.9");
  CHECK(amoe_flip_prob(1, 0.25, 0.9, 0) == 0 && amoe_flip_prob(0, 0.25, 0.9, 1) == 0 &&
            amoe_flip_prob(1, 0.25, 1.0, 1) == 0,
        "no perturbation, κ = 0 or a certain draft: no flip");
  /* calibrate-hw's copy latency: a 1e7-byte copy that took 1e7/5e10 + 1e-5 s */
  CHECK(fabs(amoe_cost_fit_copy_latency(1e7, 1e7 / (1e7 / 5e10 + 1e-5), 5e10) - 1e-5) < 1e-15 &&
            amoe_cost_fit_copy_latency(1e7, 6e10, 5e10) == 0,
        "copy latency fit");
  CHECK(amoe_flip_prob(1, 0.25, 0.6, 1) > amoe_flip_prob(1, 0.25, 0.9, 1) &&
            amoe_flip_prob(1, 0.25, 0.9, 2) > amoe_flip_prob(1, 0.25, 0.9, 1),
        "a smaller margin or a larger perturbation flips more often");
  autoregressive_by_hand(src, spec());
  eager_by_hand(src, T);
  loop_engine_by_hand(src, T);
  cycle_by_hand(src, T);
  pipeline_by_hand(src, T);
  evict_predicts_what_is_charged(src);
  amoe_source_close(src);
  remove(path);
  return check_done();
}
