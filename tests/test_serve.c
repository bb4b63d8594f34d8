/* Serving as engines serve (docs/design.md §19), each mechanism worked by
 * hand: CUDA-graph padding and the eager cliff, a closed loop of two
 * clients, chunked prefill under a step budget, KV held as written (and
 * preempted) against reserved, acceptance given as an AL
 * curve, the prefill's top-k against its generic version, and the cell
 * format's parser and errors (every row of the shared file where it is). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrival.h"
#include "cells.h"
#include "check.h"
#include "cost.h"
#include "gen.h"
#include "profile.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"
#include "x86.h"

#include "hand.h"
#include "runs.h"
#include "sizing.h"

/* vLLM's rule (1, 2, 4, multiples of 8 below 256, then of 16) under a
 * 512-token capture; a list; and the eager cliff past the largest size:
 * the hand spec's dense layer, head and the eager launches. */
static void capture(void) {
  amoe_engine eng;
  memset(&eng, 0, sizeof eng);
  eng.cuda_graphs = 1;
  CHECK(amoe_cost_captured_tokens(&eng, 3) == 3 && amoe_cost_captured_tokens(&eng, 5000) == 5000,
        "no capture limit: every step at its own size");
  eng.graph_capture_max_tokens = 512;
  const int in[] = {1, 2, 3, 4, 5, 8, 9, 255, 256, 257, 500, 512, 513};
  const int want[] = {1, 2, 4, 4, 8, 8, 16, 256, 256, 272, 512, 512, 0};
  for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
    CHECK(amoe_cost_captured_tokens(&eng, in[i]) == want[i], "vLLM's rule: %d tokens run as %d, not %d", in[i],
          amoe_cost_captured_tokens(&eng, in[i]), want[i]);
  eng.graph_capture_sizes.n = 3;
  eng.graph_capture_sizes.v[0] = 64, eng.graph_capture_sizes.v[1] = 16, eng.graph_capture_sizes.v[2] = 1024;
  CHECK(amoe_cost_captured_tokens(&eng, 10) == 16 && amoe_cost_captured_tokens(&eng, 17) == 64 &&
            amoe_cost_captured_tokens(&eng, 65) == 0,
        "a list: 10 -> %d, 17 -> %d, 65 -> %d (1024 is past the 512 limit)", amoe_cost_captured_tokens(&eng, 10),
        amoe_cost_captured_tokens(&eng, 17), amoe_cost_captured_tokens(&eng, 65));
  /* the hand spec (hand.h) under graphs of at most 8 tokens, its sizes the
   * rule's (1, 2, 4, 8): 3 tokens run as 4, 9 tokens eager */
  amoe_spec s = hand_spec();
  s.engine.graph_capture_max_tokens = 8;
  s.engine.kernels_per_layer = 10;
  s.engine.launch_s = 2e-6;
  s.engine.cuda_graphs = 1;
  amoe_cost_pass_ctx p3, p4, p9;
  amoe_cost_pass_init(&p3, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .tokens = 3, .context = 10});
  s.engine.graph_capture_max_tokens = 0;
  amoe_cost_pass_init(&p4, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .tokens = 4, .context = 10});
  s.engine.graph_capture_max_tokens = 8;
  amoe_cost_pass_init(&p9, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .tokens = 9, .context = 10});
  /* padded: the dense side is the 4-token step's, the experts see 3 */
  CHECK(p3.padded == 4 && p3.tokens == 3 && fabs(p3.dense - p4.dense) < 1e-18 && fabs(p3.rest - p4.rest) < 1e-18 &&
            !p3.eager,
        "3 tokens padded to 4: dense %.9g against %.9g", p3.dense, p4.dense);
  /* eager: a layer's 10 launches of 2 us, the dense-only layer's 11 (+ the
   * head's in rest), added to the device time (host_overlap off) */
  CHECK(p9.eager && fabs(p9.dense_host - 10 * 2e-6) < 1e-15 && fabs(p9.host - 11 * 2e-6) < 1e-15,
        "9 tokens eager: layer host %.9g (by hand 2e-5), pass host %.9g (by hand 2.2e-5)", p9.dense_host, p9.host);
}

/* SGLang's capture per request (server_args.py's ladders) and an extend
 * eager; a DP copy's share of the requests; and the two engines' start-up
 * sizing worked by hand from the GPU's memory. */
static void capture_requests(void) {
  const int in[] = {1, 2, 3, 5, 9, 12, 13, 256, 257, 497, 513};
  const int plain[] = {1, 2, 4, 8, 12, 12, 16, 256, 272, 512, 544};
  const int spec_in[] = {3, 9, 31, 33, 41, 65, 257};
  const int spec[] = {3, 10, 32, 40, 44, 72, 272};
  for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
    CHECK(amoe_sizing_sglang_bs(in[i], 1024, 0) == plain[i], "SGLang's ladder: %d requests run as %d, not %d", in[i],
          amoe_sizing_sglang_bs(in[i], 1024, 0), plain[i]);
  for (size_t i = 0; i < sizeof spec_in / sizeof spec_in[0]; i++)
    CHECK(amoe_sizing_sglang_bs(spec_in[i], 1024, 1) == spec[i], "its speculative ladder: %d requests run as %d, not %d",
          spec_in[i], amoe_sizing_sglang_bs(spec_in[i], 1024, 1), spec[i]);
  CHECK(amoe_sizing_sglang_bs(97, 100, 0) == 100 && amoe_sizing_sglang_bs(101, 100, 0) == 0,
        "the ladder's last rung is cuda_graph_max_bs (97 -> %d), past it eager (101 -> %d)",
        amoe_sizing_sglang_bs(97, 100, 0), amoe_sizing_sglang_bs(101, 100, 0));
  amoe_engine eng;
  memset(&eng, 0, sizeof eng);
  eng.cuda_graphs = 1, eng.graph_capture_max_requests = 512;
  /* two verifying requests of k = 3 (4 tokens each) and three decoding ones */
  CHECK(amoe_cost_captured(&eng, 8, 2, 0, 1) == 8 && amoe_cost_captured(&eng, 3, 3, 0, 0) == 4 &&
            amoe_cost_captured(&eng, 36, 9, 0, 1) == 40 && amoe_cost_captured(&eng, 7, 2, 5, 0) == 0,
        "per request: 2x4 -> %d (8), 3x1 -> %d (4), 9x4 -> %d (10 requests, 40), an extend -> %d (eager)",
        amoe_cost_captured(&eng, 8, 2, 0, 1), amoe_cost_captured(&eng, 3, 3, 0, 0), amoe_cost_captured(&eng, 36, 9, 0, 1),
        amoe_cost_captured(&eng, 7, 2, 5, 0));
  /* a GPU of 1.8e11 bytes (171,661 MiB: the B200 bucket) as the cookbook runs it, 4 GPUs of DP attention: 16,384
   * tokens a step, 4,096 a copy, 512 requests a copy captured; reserved 512 + 1.5 x 16384 + 2 x 512 +
   * 1024 x 4/8 + 3 x 512 x 4 + 1.5 x 512 x 4 = 35,840 MiB: 0.791 of the memory */
  amoe_engine sg;
  memset(&sg, 0, sizeof sg);
  sg.sizing = AMOE_SIZING_SGLANG;
  amoe_engine_size(&sg, &(amoe_sizing_in){.memory_bytes = 1.8e11, .tp = 4, .dp = 4});
  CHECK(sg.max_batched_tokens == 16384 && sg.graph_capture_max_requests == 512 &&
            fabs(sg.gpu_memory_utilization - 0.791) < 1e-12 && sg.draft_reserve_bytes == 2048.0 * 1048576,
        "SGLang on a B200, DP 4: budget %d (16384), captured %d (512), utilisation %g (0.791), draft reserve %g",
        sg.max_batched_tokens, sg.graph_capture_max_requests, sg.gpu_memory_utilization, sg.draft_reserve_bytes);
  /* an H100 (8e10 bytes: 76,294 MiB) at TP 1: 8,192 tokens, 256 requests; reserved 512 + 12288 +
   * 512 + 128 = 13,440 MiB (above the 10 GiB floor): 0.824; a budget the user set (2,048)
   * stays, and the reserve follows it: 512 + 1.5 x 2048 + 512 + 128 = 4,224 MiB, raised to the
   * 10 GiB floor */
  memset(&sg, 0, sizeof sg);
  sg.sizing = AMOE_SIZING_SGLANG, sg.max_batched_tokens = 2048;
  amoe_engine_size(&sg, &(amoe_sizing_in){.memory_bytes = 8e10, .tp = 1, .dp = 1});
  const double mib = 8e10 / 1048576, h100 = round((mib - 10240) / mib * 1000) / 1000;
  CHECK(sg.max_batched_tokens == 2048 && sg.graph_capture_max_requests == 256 && fabs(sg.gpu_memory_utilization - h100) < 1e-12,
        "SGLang on an H100 with a 2,048-token budget set: budget %d, captured %d, utilisation %g (by hand %g: the 10 GiB floor)",
        sg.max_batched_tokens, sg.graph_capture_max_requests, sg.gpu_memory_utilization, h100);
  memset(&sg, 0, sizeof sg);
  sg.sizing = AMOE_SIZING_SGLANG;
  amoe_engine_size(&sg, &(amoe_sizing_in){.memory_bytes = 8e10, .tp = 1, .dp = 1});
  CHECK(sg.max_batched_tokens == 8192 && fabs(sg.gpu_memory_utilization - 0.824) < 1e-12,
        "SGLang on an H100: budget %d (8192), utilisation %g (0.824)", sg.max_batched_tokens, sg.gpu_memory_utilization);
  /* vLLM: min(max_num_seqs (1 + k) 2, 512, budget) */
  const int seqs[] = {1024, 32, 32, 1024}, k[] = {3, 3, 0, 0}, budget[] = {8192, 8192, 8192, 256}, max[] = {512, 256, 64, 256};
  for (int i = 0; i < 4; i++) {
    amoe_engine v;
    memset(&v, 0, sizeof v);
    v.sizing = AMOE_SIZING_VLLM, v.max_running = seqs[i], v.max_batched_tokens = budget[i];
    amoe_engine_size(&v, &(amoe_sizing_in){.draft_tokens = k[i]});
    CHECK(v.graph_capture_max_tokens == max[i], "vLLM, %d sequences, k %d, budget %d: capture %d tokens, not %d", seqs[i], k[i],
          budget[i], v.graph_capture_max_tokens, max[i]);
  }
}

/* Three one-block requests of hand.h's costs (test_load.c's THREE): two
 * clients send requests 0 and 1 at once, which run in one pass of both
 * (T01); request 2 is sent when they finish and runs alone (T1). Its TTFT
 * counts from its sending, not from the run's start. */
static void closed_loop(void) {
  static const char *const THREE = HAND_TWO_REQUESTS
      "{\"request\":2,\"step\":0,\"parent\":[-1,0],\"logp\":[0,-0.1],\"accepted\":[1,1],"
      "\"topk\":[[[[6,0],[7,-1]],[[2,0],[8,-2]]]]}\n";
  amoe_spec s = hand_spec();
  char path[] = "/tmp/amoe_serve_XXXXXX";
  close(mkstemp(path));
  write_trace(THREE, path, &s);
  s.workload.arrival = AMOE_ARRIVAL_CONCURRENCY;
  s.workload.concurrency = 2;
  s.workload.requests = 3;
  s.workload.tokens_per_request = 2;
  s.workload.batch = 1;
  const double common = 5e-4 + (2.01e-3 + 1e-6) + (2.13e-3 + 1e-6) + (4e-3 + 1e-6);
  const double T1 = common + (3e-3 + 1e-6) + (8e-3 + 1e-6);
  const double T01 = 5e-4 + 2 * (3e-3 + 1e-6) + (2.02e-3 + 1e-6) + (2.14e-3 + 1e-6) + (4e-3 + 1e-6) + (18e-3 + 1e-6);
  amoe_row_result r = run_one(&s);
  CHECK(r.nreqs == 3 && r.tot.passes == 2, "%d requests in %g passes (by hand 3 in 2)", r.nreqs, r.tot.passes);
  const double arrival[3] = {0, 0, T01}, finish[3] = {T01, T01, T01 + T1};
  for (int i = 0; i < r.nreqs && i < 3; i++) {
    const amoe_request_stat *q = &r.reqs[i];
    CHECK(fabs(q->arrival_s - arrival[i]) < 1e-12 && fabs(q->admitted_s - arrival[i]) < 1e-12 &&
              fabs(q->finish_s - finish[i]) < 1e-12 && fabs(q->first_s - q->finish_s) < 1e-12,
          "request %d: sent %.12g admitted %.12g finished %.12g; by hand sent %.12g finished %.12g", (int)q->request,
          q->arrival_s, q->admitted_s, q->finish_s, arrival[i], finish[i]);
  }
  CHECK(r.tot.t_idle == 0, "a closed loop never waits for an arrival (idle %g)", r.tot.t_idle);
  amoe_row_result_free(&r);
  /* KV capacity for 3 tokens: the hand model's weights are 22.12 MB (ten
   * 1 MB experts and 2 MB of attention in the MoE layer, 2.12 MB in the
   * dense one, the head and the embedding 8 MB) and the draft head 3 MB; a
   * token's KV 3 x 1000 bytes (two layers and the draft head's, for a row
   * that speculates). Each request holds its 2 output tokens, so
   * one runs at a time: request 1 waits for request 0 (T0), request 2, sent
   * when request 0 ends, waits for request 1. */
  s.engine.gpu_memory_utilization = 1;
  s.hw.memory_bytes = 22.12e6 + 3e6 + 3 * 3000;
  s.hw.gpus = 1;
  CHECK(amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 1) == 3, "KV capacity %g tokens (by hand 3)",
        amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 1));
  CHECK(amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 0) == 1504,
        "plain decoding loads no draft: %g tokens (by hand (3e6 + 9000) / 2000 = 1504)",
        amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 0));
  const double T0 = common + 2 * (3e-3 + 1e-6) + (12e-3 + 1e-6);
  r = run_one(&s);
  const double sent[3] = {0, 0, T0}, admitted[3] = {0, T0, T0 + T1}, done[3] = {T0, T0 + T1, T0 + 2 * T1};
  CHECK(r.nreqs == 3 && r.tot.passes == 3, "KV for one: %d requests in %g passes (by hand 3 in 3)", r.nreqs, r.tot.passes);
  for (int i = 0; i < r.nreqs && i < 3; i++) {
    const amoe_request_stat *q = &r.reqs[i];
    CHECK(q->request == i && fabs(q->arrival_s - sent[i]) < 1e-12 && fabs(q->admitted_s - admitted[i]) < 1e-12 &&
              fabs(q->finish_s - done[i]) < 1e-12,
          "KV for one, request %d: sent %.12g admitted %.12g finished %.12g; by hand %.12g %.12g %.12g", (int)q->request,
          q->arrival_s, q->admitted_s, q->finish_s, sent[i], admitted[i], done[i]);
  }
  amoe_row_result_free(&r);
  s.hw.memory_bytes = 22.12e6; /* the weights alone leave nothing: refused, naming why */
  amoe_source *src = NULL;
  amoe_err e;
  amoe_row_result rr[AMOE_MAX_POLICIES];
  memset(rr, 0, sizeof rr);
  static amoe_offline none;
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_run(&s, &none, src, NULL, rr, &e) == AMOE_EINVAL && strstr(e.msg, "leave no KV cache"), "no KV: %s", e.msg);
  amoe_source_close(src);
  for (int i = 0; i < s.npolicies; i++) amoe_row_result_free(&rr[i]);
  remove(path);
}

static amoe_spec serve_spec(const char *extra) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "name: serve\n"
           "model: {name: tiny-moe, layers: 2, moe_layers: 2, experts: 16, top_k: 2, hidden: 64, moe_intermediate: 32, "
           "vocab: 1000}\n"
           "hardware: h200\n"
           "baseline: false\n"
           "%s\n",
           extra);
  return spec_of_yaml(yaml);
}

/* Two requests of 10-token prompts arrive together; chunks of 4 tokens,
 * a budget of 12 tokens a step, plain decoding (one token a request a step),
 * 2 output tokens each, the first given by the prefill (as engines count):
 *   step 1: no decodes; request 0's chunks 4 + 4 + 2 = 10 fit, request 1's
 *           first 4 do not (2 left): request 0's first token;
 *   step 2: request 0 decodes its second and is done; request 1's 10 fit
 *           in the 11 left: its first token;
 *   step 3: request 1 decodes its second and is done.
 * Without the budget every prefilling request runs one chunk a step: the
 * chunks take three steps, then one of decoding: 4 steps. */
static void budget(void) {
  const char *w = "workload: {tokens_per_request: 2, prompt_tokens: 10, prefill_schedule: chunked, chunk_tokens: 4, "
                  "arrival: {process: concurrency, concurrency: 2}, requests: 2}\n"
                  "policies: [autoregressive]";
  char with[1024];
  snprintf(with, sizeof with, "engine: {max_batched_tokens: 12}\n%s", w);
  amoe_spec s = serve_spec(with);
  amoe_row_result r = run_one(&s);
  CHECK(r.nreqs == 2 && r.tot.passes == 3, "budget 12: %d requests in %g steps (by hand 2 in 3)", r.nreqs, r.tot.passes);
  if (r.nreqs == 2) {
    const amoe_request_stat *a = r.reqs[0].request == 0 ? &r.reqs[0] : &r.reqs[1], *b = a == r.reqs ? &r.reqs[1] : &r.reqs[0];
    CHECK(a->first_s < b->first_s && a->finish_s < b->finish_s, "request 0's first token (%g) and end (%g) come first",
          a->first_s, a->finish_s);
  }
  amoe_row_result_free(&r);
  /* SGLang's steps (engine.prefill_apart): a step of prompt chunks alone
   * whenever one waits. Step 1 as above; step 2 runs request 1's 10 alone
   * (its first token) while request 0 waits to decode; step 3 decodes
   * both: three steps, both requests ending in the last */
  snprintf(with, sizeof with, "engine: {max_batched_tokens: 12, prefill_apart: true}\n%s", w);
  amoe_spec ap = serve_spec(with);
  r = run_one(&ap);
  CHECK(r.nreqs == 2 && r.tot.passes == 3 && r.reqs[0].finish_s == r.reqs[1].finish_s &&
            r.reqs[0].first_s != r.reqs[1].first_s,
        "prefill apart: %d requests in %g steps (by hand 2 in 3), ends %g and %g (by hand equal)", r.nreqs, r.tot.passes,
        r.nreqs == 2 ? r.reqs[0].finish_s : 0, r.nreqs == 2 ? r.reqs[1].finish_s : 0);
  amoe_row_result_free(&r);
  amoe_spec u = serve_spec(w);
  r = run_one(&u);
  CHECK(r.nreqs == 2 && r.tot.passes == 4, "no budget: %d requests in %g steps (by hand 2 in 4)", r.nreqs, r.tot.passes);
  CHECK(r.nreqs == 2 && r.reqs[0].first_s == r.reqs[1].first_s, "no budget: both prompts end in the same step");
  amoe_row_result_free(&r);
}

/* TPOT as engines report it (vLLM's benchmark: (end - first token) /
 * (output tokens - 1)), on a log worked by hand: two requests of 4-token
 * prompts arrive together, each prompt its own pass (separate), plain
 * decoding, 3 output tokens each:
 *   prefill of request 0: its first token at f0;
 *   prefill of request 1: its first token at f1 > f0 (request 0 waits);
 *   two decode steps of both: each request's 2nd and 3rd, both ending at
 *   the run's end T.
 * Request 0's TPOT is (T - f0) / 2: request 1's prefill between its first
 * token and its first decode counts, as it does for a served request (the
 * clock from its first decode pass over its tokens, the old figure, left it
 * out). A request of one output token ends with its prefill: TPOT 0, no
 * decode pass. */
static void tpot_engine(void) {
  const char *w = "workload: {tokens_per_request: 3, prompt_tokens: 4, prefill_schedule: separate, "
                  "arrival: {process: concurrency, concurrency: 2}, requests: 2}\n"
                  "policies: [autoregressive]";
  amoe_spec s = serve_spec(w);
  amoe_row_result r = run_one(&s);
  const double T = r.tot.t_total + r.tot.t_prefill + r.tot.t_idle;
  CHECK(r.nreqs == 2 && r.tot.passes == 2 && r.tot.prefills == 2 && r.tot.first_tokens == 2,
        "%d requests, %g decode steps, %g prefills, %g first tokens (by hand 2, 2, 2, 2)", r.nreqs, r.tot.passes,
        r.tot.prefills, r.tot.first_tokens);
  if (r.nreqs == 2) {
    const amoe_request_stat *a = r.reqs[0].request == 0 ? &r.reqs[0] : &r.reqs[1], *b = a == r.reqs ? &r.reqs[1] : &r.reqs[0];
    CHECK(a->first_s > 0 && b->first_s > a->first_s && a->finish_s == T && b->finish_s == T,
          "first tokens %g < %g, both end at %g (%g, %g)", a->first_s, b->first_s, T, a->finish_s, b->finish_s);
    CHECK(a->tokens == 3 && b->tokens == 3, "output tokens %g and %g (3 each)", a->tokens, b->tokens);
    CHECK(a->tpot == (T - a->first_s) / 2 && b->tpot == (T - b->first_s) / 2, "TPOT %g and %g (by hand %g and %g)",
          a->tpot, b->tpot, (T - a->first_s) / 2, (T - b->first_s) / 2);
    CHECK(a->tpot > b->tpot, "request 0's TPOT (%g) holds request 1's prefill, request 1's (%g) does not", a->tpot,
          b->tpot);
  }
  amoe_row_result_free(&r);
  const char *one = "workload: {tokens_per_request: 1, prompt_tokens: 4, prefill_schedule: separate, "
                    "arrival: {process: concurrency, concurrency: 1}, requests: 2}\n"
                    "policies: [autoregressive]";
  amoe_spec u = serve_spec(one);
  r = run_one(&u);
  CHECK(r.nreqs == 2 && r.tot.passes == 0 && r.tot.prefills == 2 && r.tot.committed == 0,
        "one output token: %d requests, %g decode steps, %g prefills, %g committed (by hand 2, 0, 2, 0)", r.nreqs,
        r.tot.passes, r.tot.prefills, r.tot.committed);
  for (int i = 0; i < r.nreqs; i++)
    CHECK(r.reqs[i].tokens == 1 && r.reqs[i].tpot == 0 && r.reqs[i].finish_s == r.reqs[i].first_s,
          "one output token: request %g has %g tokens, TPOT %g, ends at %g (its first token %g)", r.reqs[i].request,
          r.reqs[i].tokens, r.reqs[i].tpot, r.reqs[i].finish_s, r.reqs[i].first_s);
  amoe_row_result_free(&r);
}

/* KV held as it is written (engine.kv_allocation: incremental, vLLM's)
 * against reserved at admission, on a KV cache of 10 tokens: two requests
 * of 4-token prompts and 4 output tokens (the first given by the prefill,
 * three decoded; a token's KV is written when it is fed, the step after it
 * is sampled), plain decoding, one chunk of 4 a step (no budget).
 * Incremental:
 *   step 1: both prompts (KV 4 + 4 = 8): both first tokens;
 *   step 2: both decode (8 + 2 = 10 fits) their 2nd: KV 5 + 5;
 *   step 3: 10 + 2 does not fit: request 1, the newer, is preempted (its
 *           5 tokens freed); request 0 decodes its 3rd (KV 6);
 *   step 4: request 1 cannot return (6 + 5 > 10); request 0 decodes its
 *           4th and ends;
 *   steps 5-6: request 1 recomputes its prompt and first output token (5
 *           tokens: chunks of 4 and 1), its first token kept from step 1;
 *   steps 7-8: its 3rd and 4th tokens.
 * Eight steps, three prefills, one preemption. Reserved (4 + 4 = 8 tokens
 * a request): request 1 waits for request 0's end (step 4), then prefills
 * and decodes: eight steps, two prefills, no preemption. */
static void kv_incremental(void) {
  const char *w = "workload: {tokens_per_request: 4, prompt_tokens: 4, prefill_schedule: chunked, chunk_tokens: 4, "
                  "arrival: {process: concurrency, concurrency: 2}, requests: 2}\n"
                  "policies: [autoregressive]";
  for (int inc = 0; inc < 2; inc++) {
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "engine: {gpu_memory_utilization: 1, kv_allocation: %s}\n%s", inc ? "incremental" : "reserve", w);
    amoe_spec s = serve_spec(yaml);
    s.model.kv_bytes_per_token_layer = 1000; /* 2 layers: 2,000 bytes a token */
    s.engine.memory_reserve_bytes = 0;
    const double all = amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 0);
    s.engine.memory_reserve_bytes = (all - 10) * 2000; /* (a whole number of tokens: the floor moves by it) */
    CHECK(amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 0) == 10, "KV capacity %g (want 10)",
          amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 0));
    amoe_row_result r = run_one(&s);
    CHECK(r.nreqs == 2 && r.tot.passes == 8 && r.tot.prefills == 2 + inc,
          "%s: %d requests in %g steps, %g prefills (by hand 2 in 8, %d)", inc ? "incremental" : "reserve", r.nreqs,
          r.tot.passes, r.tot.prefills, 2 + inc);
    if (r.nreqs == 2) {
      const amoe_request_stat *a = r.reqs[0].request == 0 ? &r.reqs[0] : &r.reqs[1], *b = a == r.reqs ? &r.reqs[1] : &r.reqs[0];
      CHECK(a->preemptions == 0 && b->preemptions == inc, "%s: preemptions %g and %g (by hand 0 and %d)",
            inc ? "incremental" : "reserve", a->preemptions, b->preemptions, inc);
      CHECK(a->tokens == 4 && b->tokens == 4 && a->finish_s < b->finish_s, "%s: tokens %g, %g; request 0 ends first",
            inc ? "incremental" : "reserve", a->tokens, b->tokens);
      if (inc)
        CHECK(b->admitted_s == 0 && b->first_s == a->first_s, "incremental: request 1 admitted at %g, its first token "
              "at %g with request 0's (%g)", b->admitted_s, b->first_s, a->first_s);
      else
        CHECK(b->admitted_s == a->finish_s && b->first_s > a->finish_s,
              "reserve: request 1 admitted at %g, when request 0 ends (%g)", b->admitted_s, a->finish_s);
    }
    amoe_row_result_free(&r);
  }
}

/* A speculating row's KV capacity by hand: a 2-layer model of 1,000 bytes
 * of KV per token and layer, a 1,000-byte draft head, 24,000 bytes left
 * after the weights. Plain decoding: 24,000 / 2,000 = 12 tokens. Drafted:
 * the head's weights (23,000 left) and its one layer's KV (3,000 a token):
 * 7 tokens. So two requests of 3 + 3 tokens reserved fit beside each other
 * plain (12) and not drafted (7): the second waits. */
static void draft_kv(void) {
  amoe_spec s = serve_spec("engine: {gpu_memory_utilization: 1}\npolicies: [autoregressive]");
  s.model.kv_bytes_per_token_layer = 1000;
  s.model.draft_head_bytes = 1000;
  s.hw.memory_bytes = 1.41e11; /* (a round figure: what is free comes out in whole tokens both ways) */
  s.engine.memory_reserve_bytes = 0;
  const double free0 = amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 0) * 2000;
  s.engine.memory_reserve_bytes = free0 - 24000; /* (whole tokens both ways) */
  const double plain = amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 0),
               drafted = amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 1);
  CHECK(plain == 12 && drafted == 7, "KV capacity %g plain, %g drafted (by hand 12 and 7)", plain, drafted);
  s.model.draft_head_bytes = 0; /* no draft head modelled: nothing of its own */
  CHECK(amoe_cost_kv_tokens(&s.model, &s.hw, &s.engine, &s.parallel, 1) == 12, "no head: 12");
}

/* An AL curve's per-position chances: one pinned AL (every position
 * alike), a curve that rises, and one that falls at k = 8 (InferenceX's
 * DSpark on DeepSeek-V4, acceptance_curves.csv): at each k the chain's
 * expected AL is the curve's, and the generator's chains give it back
 * within 0.02 over 40,000 blocks. */
static void al_curve(void) {
  amoe_err e;
  double a[AMOE_GEN_MAX_CHAIN];
  const double pinned[1] = {2.0};
  CHECK(amoe_gen_chain_accept(pinned, 1, 2, a, &e) == AMOE_OK && fabs(a[0] - a[1]) < 1e-12 &&
            fabs(a[0] + a[0] * a[0] - 1) < 1e-9,
        "AL 2 at k = 2: a + a^2 = 1 (a = 0.618), got %.9g %.9g", a[0], a[1]);
  static const double curve[8] = {1.84, 2.51, 3.01, 3.36, 3.61, 3.77, 3.73, 3.47};
  for (int k = 1; k <= 8; k++) {
    CHECK(amoe_gen_chain_accept(curve, 8, k, a, &e) == AMOE_OK, "%s", e.msg);
    double reach = 1, al = 1;
    for (int i = 0; i < k; i++) al += reach *= a[i];
    CHECK(fabs(al - curve[k - 1]) < 1e-9, "k = %d: the chain's expected AL %.9g, the curve's %.9g", k, al, curve[k - 1]);
    for (int i = 0; i < k; i++) CHECK(a[i] >= 0 && a[i] <= 1, "k = %d: position %d's chance %g", k, i + 1, a[i]);
  }
  CHECK(amoe_gen_chain_accept(curve, 8, 9, a, &e) == AMOE_EINVAL && strstr(e.msg, "k = 1..8"), "k beyond the curve: %s",
        e.msg);
  for (int k = 1; k <= 8; k += 7) { /* the generator: 40,000 blocks of chains */
    char extra[512];
    snprintf(extra, sizeof extra,
             "workload: {blocks: 40000, tokens_per_request: 100000, tree: {depth: %d, top_k: 1, nodes: %d}, "
             "acceptance: {al: [1.84, 2.51, 3.01, 3.36, 3.61, 3.77, 3.73, 3.47]}}\npolicies: [natural]",
             k, k + 1);
    amoe_spec s = serve_spec(extra);
    amoe_source *src = NULL;
    CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
    amoe_block b;
    amoe_block_init(&b, s.model.moe_layers, s.model.experts, amoe_source_m(src));
    double sum = 0;
    int n = 0;
    while (n < 40000 && amoe_source_next(src, &b, &e) == AMOE_OK) sum += amoe_block_accepted_count(&b), n++;
    amoe_block_free(&b);
    amoe_source_close(src);
    CHECK(n == 40000 && fabs(sum / n - curve[k - 1]) < 0.02, "k = %d: AL %.4f over %d blocks, the curve's %.2f", k,
          sum / n, n, curve[k - 1]);
  }
}

/* The prefill's top-k: the one-pass version gives a repeated argmax's set
 * (ties to the lower id, NaN and -inf never), and the AVX2 path gives the
 * generic one's: on logits with many ties (its scan), on logits drawn from
 * a continuum (its counted candidates, k <= 8), and on a continuum with a
 * few repeats, NaNs and -infs (either, as they fall). */
static void top_k(void) {
  float z[512];
  int g[AMOE_MAX_TOPK], f[AMOE_MAX_TOPK];
  uint64_t x = 88172645463325252ULL;
  for (int trial = 0; trial < 6000; trial++) {
    const int kind = trial % 3, E = 8 * (1 + trial / 3 % 64), k = 1 + trial / 3 % 16 < E ? 1 + trial / 3 % 16 : E;
    for (int i = 0; i < E; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      if (kind == 0) {
        z[i] = (float)(x % 64) / 8; /* (many ties) */
        if (x % 97 == 0) z[i] = -INFINITY;
      } else {
        z[i] = (float)((double)(x >> 11) * 0x1p-53 * 20 - 10);
        if (kind == 2 && i && x % 23 == 0) z[i] = z[(x >> 7) % (unsigned)i]; /* (a repeat) */
        if (kind == 2 && x % 89 == 0) z[i] = x % 2 ? NAN : -INFINITY;
      }
    }
    const int n = amoe_gen_top_k_generic(z, E, k, g);
    float zz[512]; /* the repeated argmax */
    memcpy(zz, z, sizeof zz);
    int ok = 1, m = 0;
    for (int j = 0; j < k; j++) {
      int best = -1;
      for (int i = 0; i < E; i++)
        if (zz[i] > -INFINITY && (best < 0 || zz[i] > zz[best])) best = i;
      if (best < 0) break;
      ok &= m < n && g[m] == best;
      m++;
      zz[best] = -INFINITY;
    }
    CHECK(ok && m == n, "trial %d (E %d, k %d): the one-pass top-k differs from the repeated argmax", trial, E, k);
#ifdef AMOE_X86_PATHS
    if (amoe_x86_avx2) {
      const int nf = amoe_x86_top_k(z, E, k, f);
      CHECK(nf == n && !memcmp(f, g, (size_t)n * sizeof *g), "trial %d (E %d, k %d): the AVX2 top-k differs", trial, E, k);
    }
#endif
  }
}

/* The cell format: every row of the shared file parses; errors name
 * file:line:column and the byte offset. */
static void cell_format(void) {
  amoe_err e;
  int n = 0;
  const char *shared = "../../shared/real-data/serving/cells.csv";
  if (access(shared, R_OK) == 0) {
    CHECK(amoe_cells_parse(shared, &n, &e) == AMOE_OK && n > 50, "%s: %s (%d rows)", shared, e.msg, n);
    printf("the shared cell file: %d rows\n", n);
  } else {
    printf("no %s: its parse is not checked here\n", shared);
  }
  static const char HDR[] = "id,source,grade,model,hardware,gpus,tp,ep,engine,weights,draft,k,al,isl,osl,lengths,load,"
                            "requests,metric,value\n";
  static const char ROW[] = "a,s,T,qwen3-32b,h200,2,2,1,vllm,bf16,none,0,,2048,256,fixed,constant:1,,output_tok_s,10\n";
  char text[2048];
  snprintf(text, sizeof text, "%s%s", HDR, ROW);
  CHECK(amoe_cells_parse(check_write_tmp(text), &n, &e) == AMOE_OK && n == 1, "one row: %s", e.msg);
  const struct {
    const char *row, *want;
  } bad[] = {
      {"b,s,T,qwen3-32b,h200,2,2,1,vllm,bf16,none,0,,2048,256,fixed,constant:1,,output_tok_s,x\n",
       ":3:86 (byte 284): value must be a number above 0, not 'x'"},
      {"b,s,T,qwen3-32b,h200,two,2,1,vllm,bf16,none,0,,2048,256,fixed,constant:1,,output_tok_s,1\n",
       ":3:22 (byte 220): gpus must be"},
      {"b,s,T,qwen3-32b,h200,2,2,1,vllm,bf16,eagle3,0,,2048,256,fixed,constant:1,,output_tok_s,1\n",
       ":3:45 (byte 243): k must be at least 1 with a draft"},
      {"a,s,T,qwen3-32b,h200,2,2,1,vllm,bf16,none,0,,2048,256,fixed,constant:1,,output_tok_s,1\n",
       ":3:1 (byte 199): id 'a' is also line 2's"},
      {"b,s,T,qwen3-32b,h200,2,2,1,vllm,bf16,none,0,,2048,256,fixed,constant:1,,output_tok_s\n",
       ":3:85 (byte 283): 19 columns, the header has 20"},
      {"b,\"s,T\n", ":3:3 (byte 201): an unterminated or misplaced quote"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(text, sizeof text, "%s%s%s", HDR, ROW, bad[i].row);
    const char *p = check_write_tmp(text);
    CHECK(amoe_cells_parse(p, &n, &e) == AMOE_EFORMAT && strstr(e.msg, bad[i].want), "bad row %zu: '%s', want '%s'", i,
          e.msg, bad[i].want);
  }
  CHECK(amoe_cells_parse(check_write_tmp("id,source,grade\n"), &n, &e) == AMOE_EFORMAT &&
            strstr(e.msg, ":1:1 (byte 0): the header has no column 'model'"),
        "a short header: %s", e.msg);
  CHECK(amoe_cells_parse(check_write_tmp("id,nonsense\n"), &n, &e) == AMOE_EFORMAT &&
            strstr(e.msg, ":1:4 (byte 3): unknown column 'nonsense'"),
        "an unknown column: %s", e.msg);
}

/* costtable under `placement: balanced`: the profiled table's entry is the
 * pass the run charges on the same balanced layout (one pass of 4 requests
 * of one block, every node verified), and differs from contiguous's, which
 * the table once used whatever the placement. The load is a hand-made skew:
 * the low experts hot, so contiguous puts them on one group. */
static void costtable_balanced(void) {
  const char *y = "name: cb\n"
                  "model: {name: tiny-moe, layers: 2, moe_layers: 2, experts: 64, top_k: 4, hidden: 1024, "
                  "moe_intermediate: 512, vocab: 1000}\n"
                  "hardware: {preset: h200, gpus: 2, interconnect: nvlink4}\n"
                  "parallel: {attention_tp: 2, moe_ep: 2, moe_tp: 1, placement: balanced}\n"
                  "workload: {batch: 4, blocks: 4, tokens_per_request: 1, tree: {depth: 3, top_k: 4, nodes: 3}, "
                  "acceptance: {tau: 2.0}}\npolicies: [natural]\n";
  amoe_spec s = spec_of_yaml(y);
  double load[2 * 64];
  for (int l = 0; l < 2; l++)
    for (int x = 0; x < 64; x++) load[l * 64 + x] = x < 32 ? 100 - x : 1;
  amoe_err e;
  amoe_step_table t, tc;
  amoe_source *src = NULL;
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_step_table_profile(&s, src, load, 4, 1, &t, &e) == AMOE_OK, "%s", e.msg);
  amoe_source_close(src);
  amoe_spec c = s;
  c.parallel.placement = AMOE_PLACE_CONTIGUOUS;
  CHECK(amoe_source_open(&src, &c.workload, &c.model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_step_table_profile(&c, src, NULL, 4, 1, &tc, &e) == AMOE_OK, "%s", e.msg);
  amoe_source_close(src);
  amoe_offline offline;
  memset(&offline, 0, sizeof offline);
  offline.load = load;
  amoe_row_result r[AMOE_MAX_POLICIES];
  memset(r, 0, sizeof r);
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_run(&s, &offline, src, NULL, r, &e) == AMOE_OK, "%s", e.msg);
  amoe_source_close(src);
  const double entry = t.step_s[t.nb - 1][t.nt - 1], other = tc.step_s[tc.nb - 1][tc.nt - 1];
  CHECK(r[0].tot.passes == 1 && fabs(r[0].tot.t_total - entry) < 1e-12 * entry,
        "balanced: the table's (4, 3) entry %.15g, the run's pass %.15g (%g passes)", entry, r[0].tot.t_total,
        r[0].tot.passes);
  CHECK(other != entry, "contiguous's entry %.15g equals balanced's: the table ignored the placement", other);
  for (int i = 0; i < s.npolicies; i++) amoe_row_result_free(&r[i]);
}

int main(void) {
  costtable_balanced();
  capture();
  capture_requests();
  closed_loop();
  budget();
  tpot_engine();
  kv_incremental();
  draft_kv();
  al_curve();
  top_k();
  cell_format();
  return check_done();
}
