/* Load (docs/design.md §18): queueing on a three-request trace worked out
 * by hand, the closed process as today's batch, every request's tokens
 * committed once at any rate, the arrival processes' statistics, the
 * arrival trace's errors and the new keys' errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrival.h"
#include "check.h"
#include "policy.h"
#include "profile.h"
#include "results.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"
#include "trace.h"

#include "hand.h"
#include "runs.h"

/* Three requests of one block each: runs.h's two, and a third as the
 * second (routes {6,7} {2,8}, accepted 0 -> 1). */
static const char *const THREE = HAND_TWO_REQUESTS
    "{\"request\":2,\"step\":0,\"parent\":[-1,0],\"logp\":[0,-0.1],\"accepted\":[1,1],"
    "\"topk\":[[[[6,0],[7,-1]],[[2,0],[8,-2]]]]}\n";

/* The requests' service times by hand (hand.h's costs; context 10, no
 * prompt, each request alone in its pass):
 *   request 0: 4 nodes, depth 2 (the extend and one draft step:
 *     2 · (3e-3 + 1e-6)); dense MoE layer (2e6 + 1000·10)/1e9 + 1e-6,
 *     dense layer (2.12e6 + 1e4)/1e9 + 1e-6, head 4e-3 + 1e-6,
 *     experts {0..5}: 6 · 2e-3 + 1e-6, step 5e-4
 *   requests 1, 2: 2 nodes, depth 1 (the extend alone), experts
 *     {2,6,7,8}: 4 · 2e-3 + 1e-6
 * One slot (max_running 1); arrivals 0.002, 0.003 and 0.1 (a trace):
 *   request 0 waits for nothing: it runs from 0.002 to 0.002 + T0;
 *   request 1 arrived during that pass and starts when it ends;
 *   request 2 arrives after request 1 finished: the clock idles to 0.1.
 * Without a prompt a request's first token is its first pass's end; one
 * block each, so it also finishes then. Then the same requests arriving
 * as a Poisson process, queued by hand from the plan's arrivals. */
static void queue_by_hand(void) {
  amoe_spec s = hand_spec();
  char path[] = "/tmp/amoe_load_XXXXXX";
  close(mkstemp(path));
  write_trace(THREE, path, &s);
  const double common = 5e-4 + (2.01e-3 + 1e-6) + (2.13e-3 + 1e-6) + (4e-3 + 1e-6);
  const double T0 = common + 2 * (3e-3 + 1e-6) + (12e-3 + 1e-6), T1 = common + (3e-3 + 1e-6) + (8e-3 + 1e-6);
  const char *csv = check_write_tmp("arrival_s,prompt_tokens,output_tokens\n0.002,0,2\n0.003,0,2\n0.1,0,2\n");
  s.workload.arrival = AMOE_ARRIVAL_TRACE;
  snprintf(s.workload.arrival_path, sizeof s.workload.arrival_path, "%s", csv);
  s.workload.batch = 1;
  s.workload.max_running = 1;
  amoe_row_result r = run_one(&s);
  const double arrival[3] = {0.002, 0.003, 0.1};
  const double start[3] = {0.002, 0.002 + T0, 0.1};
  const double finish[3] = {0.002 + T0, 0.002 + T0 + T1, 0.1 + T1};
  CHECK(r.nreqs == 3, "%d requests finished", r.nreqs);
  for (int i = 0; i < r.nreqs && i < 3; i++) {
    const amoe_request_stat *q = &r.reqs[i];
    CHECK(q->request == i && fabs(q->arrival_s - arrival[i]) < 1e-15 && fabs(q->admitted_s - start[i]) < 1e-12 &&
              fabs(q->first_s - finish[i]) < 1e-12 && fabs(q->finish_s - finish[i]) < 1e-12,
          "request %d: arrived %.12g started %.12g first token %.12g finished %.12g; by hand %.12g %.12g %.12g", i,
          q->arrival_s, q->admitted_s, q->first_s, q->finish_s, arrival[i], start[i], finish[i]);
  }
  CHECK(fabs(r.tot.t_idle - (0.002 + 0.1 - (0.002 + T0 + T1))) < 1e-12 && fabs(r.tot.t_total - (T0 + 2 * T1)) < 1e-12,
        "idle %.12g, busy %.12g", r.tot.t_idle, r.tot.t_total);
  amoe_row_result_free(&r);
  /* two slots and requests 0 and 1 arriving together: one pass of both
   * (test_batch's pass of two requests), then request 2 alone */
  const char *csv2 = check_write_tmp("arrival_s,prompt_tokens,output_tokens\n0.002,0,2\n0.002,0,2\n0.1,0,2\n");
  snprintf(s.workload.arrival_path, sizeof s.workload.arrival_path, "%s", csv2);
  s.workload.max_running = 2;
  r = run_one(&s);
  const double T01 = 5e-4 + 2 * (3e-3 + 1e-6) + (2.02e-3 + 1e-6) + (2.14e-3 + 1e-6) + (4e-3 + 1e-6) + (18e-3 + 1e-6);
  CHECK(r.nreqs == 3 && r.tot.passes == 2 && fabs(r.reqs[0].finish_s - (0.002 + T01)) < 1e-12 &&
            fabs(r.reqs[1].finish_s - (0.002 + T01)) < 1e-12 && fabs(r.reqs[2].finish_s - (0.1 + T1)) < 1e-12,
        "two slots: %d requests, %g passes, finished %.12g %.12g; by hand %.12g", r.nreqs, r.tot.passes,
        r.nreqs ? r.reqs[0].finish_s : 0, r.nreqs > 2 ? r.reqs[2].finish_s : 0, 0.002 + T01);
  amoe_row_result_free(&r);
  /* Poisson arrivals at 60/s over the same three requests: the gaps from
   * the plan, the queue by hand (one slot: each starts at its arrival or
   * when the one before it finishes, whichever is later) */
  s.workload.arrival = AMOE_ARRIVAL_POISSON;
  s.workload.arrival_path[0] = 0;
  s.workload.rate = 60;
  s.workload.cv = 1;
  s.workload.requests = 3;
  s.workload.max_running = 1;
  amoe_arrival *plan = NULL;
  int n = 0;
  amoe_err e;
  CHECK(amoe_arrival_plan(&s.workload, &plan, &n, &e) == AMOE_OK && n == 3, "plan: %d", n);
  r = run_one(&s);
  const double service[3] = {T0, T1, T1};
  double free_at = 0;
  int queued = 0;
  for (int i = 0; i < 3 && i < n && i < r.nreqs; i++) {
    const double start_i = plan[i].arrival_s > free_at ? plan[i].arrival_s : free_at;
    queued += start_i > plan[i].arrival_s;
    free_at = start_i + service[i];
    const amoe_request_stat *q = &r.reqs[i];
    CHECK(q->request == i && fabs(q->arrival_s - plan[i].arrival_s) < 1e-15 && fabs(q->admitted_s - start_i) < 1e-12 &&
              fabs(q->first_s - free_at) < 1e-12 && fabs(q->finish_s - free_at) < 1e-12,
          "poisson, request %d: arrived %.12g started %.12g finished %.12g; by hand %.12g %.12g %.12g", i, q->arrival_s,
          q->admitted_s, q->finish_s, plan[i].arrival_s, start_i, free_at);
  }
  CHECK(r.nreqs == 3, "poisson: %d requests finished", r.nreqs);
  printf("poisson at 60/s: arrivals %.4f %.4f %.4f s, %d of 3 queued\n", plan[0].arrival_s, plan[1].arrival_s,
         plan[2].arrival_s, queued);
  free(plan);
  amoe_row_result_free(&r);
  remove(path);
}

static amoe_spec load_spec(const char *extra) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "name: load\n"
           "model: {name: tiny-moe, layers: 2, moe_layers: 2, experts: 16, top_k: 2, hidden: 64, moe_intermediate: 32, "
           "vocab: 1000}\n"
           "hardware: h200\n"
           "workload: {blocks: 60, tokens_per_request: 12, prompt_tokens: 16, tree: {depth: 3, top_k: 4, nodes: 12}, "
           "acceptance: {tau: 2.0}%s}\n"
           "policies: [natural, {draft: autoregressive}, acceptmoe]\n",
           extra);
  return spec_of_yaml(yaml);
}

/* Every row of s, with the offline tables o (NULL: none). */
static void run_rows_with(const amoe_spec *s, const amoe_offline *o, amoe_row_result *r) {
  static const amoe_offline none;
  amoe_source *src = NULL;
  amoe_err e;
  CHECK(amoe_source_open(&src, &s->workload, &s->model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_run(s, o ? o : &none, src, NULL, r, &e) == AMOE_OK, "%s", e.msg);
  amoe_source_close(src);
}
static void run_rows(const amoe_spec *s, amoe_row_result *r) { run_rows_with(s, NULL, r); }

/* `arrival: {process: closed}` is the batch of §17: the same totals and
 * requests, bit for bit. */
static void closed_is_batch(void) {
  amoe_spec a = load_spec(", batch: 4"), b = load_spec(", batch: 4, arrival: {process: closed, rate: 3}");
  amoe_row_result ra[3], rb[3];
  run_rows(&a, ra);
  run_rows(&b, rb);
  for (int i = 0; i < 3; i++) {
    CHECK(!memcmp(&ra[i].tot, &rb[i].tot, sizeof ra[i].tot) && ra[i].nreqs == rb[i].nreqs &&
              !memcmp(ra[i].reqs, rb[i].reqs, (size_t)ra[i].nreqs * sizeof *ra[i].reqs),
          "row %d: closed differs from the batch", i);
    amoe_row_result_free(&ra[i]);
    amoe_row_result_free(&rb[i]);
  }
}

static int by_request(const void *x, const void *y) {
  const double a = ((const amoe_request_stat *)x)->request, b = ((const amoe_request_stat *)y)->request;
  return (a > b) - (a < b);
}

/* At a trickle and at a flood, every request finishes once with the same
 * tokens, which add to the row's committed tokens; the flood queues and
 * the trickle idles. The lengths drawn with range_ratio are the plan's. */
static void committed_once(void) {
  const int N = 24;
  amoe_row_result lo[3], hi[3];
  amoe_spec s = load_spec(", requests: 24, max_running: 4, arrival: {process: poisson, rate: 0.5, range_ratio: 0.5}");
  run_rows(&s, lo);
  s.workload.rate = 1e5;
  run_rows(&s, hi);
  amoe_arrival *plan = NULL;
  int n = 0;
  amoe_err e;
  CHECK(amoe_arrival_plan(&s.workload, &plan, &n, &e) == AMOE_OK && n == N, "plan: %d", n);
  int varied = 0;
  for (int q = 1; q < n; q++) varied += plan[q].output_tokens != plan[0].output_tokens;
  CHECK(varied > 0, "range_ratio 0.5: every request has %d tokens", plan[0].output_tokens);
  for (int i = 0; i < 3; i++) {
    amoe_row_result *rr[2] = {&lo[i], &hi[i]};
    for (int k = 0; k < 2; k++) {
      amoe_row_result *r = rr[k];
      qsort(r->reqs, (size_t)r->nreqs, sizeof *r->reqs, by_request);
      double tokens = 0;
      int bad = r->nreqs != N;
      for (int q = 0; q < r->nreqs && !bad; q++) {
        tokens += r->reqs[q].tokens;
        bad += r->reqs[q].request != q || r->reqs[q].prompt_tokens != plan[q].prompt_tokens ||
               r->reqs[q].first_s < r->reqs[q].admitted_s || r->reqs[q].admitted_s < r->reqs[q].arrival_s ||
               r->reqs[q].finish_s < r->reqs[q].first_s;
        /* every row commits the request's length exactly: it decodes
         * until then, and what its last pass runs past it is dropped */
        bad += r->reqs[q].tokens != plan[q].output_tokens;
        if (bad)
          fprintf(stderr, "request %d: id %g prompt %g/%d arrival %g admitted %g first %g finish %g tokens %g/%d\n", q,
                  r->reqs[q].request, r->reqs[q].prompt_tokens, plan[q].prompt_tokens, r->reqs[q].arrival_s,
                  r->reqs[q].admitted_s, r->reqs[q].first_s, r->reqs[q].finish_s, r->reqs[q].tokens,
                  plan[q].output_tokens);
      }
      /* (the output tokens: each prefill's first token and the committed ones after it) */
      CHECK(!bad && tokens == r->tot.committed + r->tot.first_tokens && r->tot.first_tokens == N,
            "row %d rate %s: %d requests, %g tokens of %g + %g first", i, k ? "high" : "low", r->nreqs, tokens,
            r->tot.committed, r->tot.first_tokens);
    }
    int diff = 0;
    for (int q = 0; q < N && lo[i].nreqs == N && hi[i].nreqs == N; q++) diff += lo[i].reqs[q].tokens != hi[i].reqs[q].tokens;
    CHECK(!diff, "row %d: %d requests' tokens differ between the rates", i, diff);
    CHECK(lo[i].tot.t_idle > 0 && hi[i].tot.t_idle < lo[i].tot.t_idle, "row %d: idle %g at the trickle, %g at the flood",
          i, lo[i].tot.t_idle, hi[i].tot.t_idle);
  }
  /* natural reads the same blocks at both rates; a constrained row's
   * tokens are its own, as many */
  CHECK(lo[0].tot.committed == hi[0].tot.committed && lo[0].tot.blocks == hi[0].tot.blocks &&
            lo[2].tot.committed == lo[0].tot.committed,
        "natural: %g tokens at the trickle, %g at the flood (acceptmoe %g)", lo[0].tot.committed, hi[0].tot.committed,
        lo[2].tot.committed);
  for (int i = 0; i < 3; i++) amoe_row_result_free(&lo[i]), amoe_row_result_free(&hi[i]);
  free(plan);
}

/* The gaps: mean 1 and the asked coefficient of variation (20,000 draws:
 * the standard errors are under 1% of each). */
static void gaps(void) {
  const double cvs[] = {1, 0.5, 2};
  for (int c = 0; c < 3; c++) {
    double sum = 0, sq = 0;
    const int n = 20000;
    for (int i = 0; i < n; i++) {
      const double g = amoe_arrival_gap(11, (uint32_t)i, cvs[c]);
      sum += g;
      sq += g * g;
    }
    const double mean = sum / n, cv = sqrt(sq / n - mean * mean) / mean;
    CHECK(fabs(mean - 1) < 0.04 && fabs(cv - cvs[c]) < 0.06 * cvs[c], "cv %g: mean %g, cv %g", cvs[c], mean, cv);
  }
  /* the same (seed, request): the same gap, whatever came before */
  CHECK(amoe_arrival_gap(3, 7, 2) == amoe_arrival_gap(3, 7, 2) && amoe_arrival_gap(3, 7, 2) != amoe_arrival_gap(3, 8, 2),
        "gaps are per request");
}

/* An arrival trace's errors name file:line:column and the byte offset. */
static void trace_errors(void) {
  const struct {
    const char *text, *needle;
  } bad[] = {
      {"arrival,prompt_tokens,output_tokens\n0,1,1\n", ":1:1 (byte 0): the header"},
      {"arrival_s,prompt_tokens,output_tokens\n0.5,8,x\n", ":2:7 (byte 44): output_tokens must be"},
      {"arrival_s,prompt_tokens,output_tokens\n0.5,8,0\n", ":2:7 (byte 44): output_tokens must be"},
      {"arrival_s,prompt_tokens,output_tokens\n0.5,8\n", ":2:6 (byte 43): output_tokens is missing"},
      {"arrival_s,prompt_tokens,output_tokens\n1,8,4\n0.5,8,4\n", ":3:1 (byte 44): arrival_s 0.5 comes before"},
      {"arrival_s,prompt_tokens,output_tokens\n1,8,4,9\n", ":2:7 (byte 44): more than three columns"},
      {"arrival_s,prompt_tokens,output_tokens\n", "no requests"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    amoe_workload_spec w;
    memset(&w, 0, sizeof w);
    w.arrival = AMOE_ARRIVAL_TRACE;
    snprintf(w.arrival_path, sizeof w.arrival_path, "%s", check_write_tmp(bad[i].text));
    amoe_arrival *v = NULL;
    int n = 0;
    amoe_err e;
    const amoe_status st = amoe_arrival_plan(&w, &v, &n, &e);
    CHECK(st != AMOE_OK && strstr(e.msg, bad[i].needle), "trace %zu: %s", i, st ? e.msg : "accepted");
    free(v);
  }
}

/* Every new key's error names it. */
static void key_errors(void) {
  const struct {
    const char *set, *needle;
  } bad[] = {
      {"workload.arrival.process=bursty", "workload.arrival.process"},
      {"workload.arrival.rate=0", "workload.arrival.rate"},
      {"workload.arrival.cv=0", "workload.arrival.cv"},
      {"workload.arrival.range_ratio=1", "workload.arrival.range_ratio"},
      {"workload.requests=0", "workload.requests"},
      {"workload.max_running=-1", "workload.max_running"},
      {"slo.ttft_s=-1", "slo.ttft_s"},
      {"slo.tpot_s=x", "slo.tpot_s"},
      {"output.requests_csv=true", "output.requests_csv"},
      {"workload.arrival.process=trace", "workload.arrival.path"},
      {"workload.arrival.path=a.csv", "workload.arrival.path"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) check_set_refused(bad[i].set, bad[i].needle);
}

/* The sizing rows at batch 8, resident and under offload: lossless (no
 * token displaced or deviated, at least the root's token per block, at
 * most natural's tokens), and cost experts never predicts a step slower
 * than the run charges it. */
static void sizing(void) {
  for (int off = 0; off < 2; off++) {
    amoe_spec s = load_spec(off ? ", batch: 8} \noffload: {slots_per_layer: 6" : ", batch: 8");
    s.policies[1].draft = amoe_draft_find("adaptive");
    s.policies[1].dparam[0] = 0;
    s.policies[2].draft = amoe_draft_find("adaptive");
    s.policies[2].verifier = amoe_verifier_find("natural");
    s.policies[2].dparam[0] = 1;
    amoe_step_table steps;
    amoe_source *src = NULL;
    amoe_err e;
    CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
    CHECK(amoe_step_table_profile(&s, src, NULL, 8, 4, &steps, &e) == AMOE_OK, "%s", e.msg);
    amoe_source_close(src);
    static amoe_offline offline;
    offline.steps = &steps;
    amoe_row_result r[3];
    run_rows_with(&s, &offline, r);
    for (int i = 1; i < 3; i++) {
      const amoe_totals *t = &r[i].tot;
      CHECK(t->deviated == 0 && t->displaced == 0 && t->committed >= t->blocks && t->committed <= r[0].tot.committed &&
                t->verified < r[0].tot.verified && t->blocks == r[0].tot.blocks,
            "offload %d, cost %s: %g tokens over %g blocks (natural %g), %g verified (natural %g), deviated %g", off,
            i == 1 ? "tokens" : "experts", t->committed, t->blocks, r[0].tot.committed, t->verified, r[0].tot.verified,
            t->deviated);
    }
    const amoe_totals *x = &r[2].tot;
    CHECK(x->predictions > 0 && x->predicted_over == 0 && x->predicted_s <= x->predictions,
          "offload %d: cost experts predicted %g passes slower than charged (%g s predicted of %g)", off,
          x->predicted_over, x->predicted_s, x->predictions);
    for (int i = 0; i < 3; i++) amoe_row_result_free(&r[i]);
    /* requests that arrive: every request's tokens are natural's, for a
     * row that verifies less takes more steps to reach them */
    s.workload.arrival = AMOE_ARRIVAL_POISSON;
    s.workload.rate = 50;
    s.workload.requests = 12;
    s.workload.max_running = 8;
    s.offload.enabled = 0;
    run_rows_with(&s, &offline, r);
    for (int i = 1; i < 3; i++) {
      qsort(r[0].reqs, (size_t)r[0].nreqs, sizeof *r[0].reqs, by_request);
      qsort(r[i].reqs, (size_t)r[i].nreqs, sizeof *r[i].reqs, by_request);
      int diff = r[i].nreqs != r[0].nreqs || r[i].nreqs != 12;
      for (int q = 0; q < r[i].nreqs && !diff; q++) diff += r[i].reqs[q].tokens != r[0].reqs[q].tokens;
      CHECK(!diff && r[i].tot.deviated == 0 && r[i].tot.committed == r[0].tot.committed &&
                r[i].tot.passes >= r[0].tot.passes,
            "open, cost %s: %d requests, tokens %s natural's (%g of %g), %g passes (natural %g)",
            i == 1 ? "tokens" : "experts", r[i].nreqs, diff ? "differ from" : "equal", r[i].tot.committed,
            r[0].tot.committed, r[i].tot.passes, r[0].tot.passes);
    }
    for (int i = 0; i < 3; i++) amoe_row_result_free(&r[i]);
  }
}

/* cost experts's routes (§18): predictor at accuracy 1 is the oracle's row
 * exactly; at accuracy 0, over a popularity that puts each layer's mass on
 * k experts, every prediction is those k: popular's row exactly; at 0.5
 * neither; a second run gives the same rows (deterministic for the seed);
 * and sizing under previous, popular and predictor at accuracy 0 reads no
 * true route of the blocks it sizes: the same choice with every node's
 * routes made disjoint, which moves the oracle's. */
static void route_predictors(void) {
  const char *rows[] = {"{draft: adaptive, cost: experts}",
                        "{draft: adaptive, cost: experts, routes: predictor, accuracy: 1}",
                        "{draft: adaptive, cost: experts, routes: predictor, accuracy: 0}",
                        "{draft: adaptive, cost: experts, routes: popular}",
                        "{draft: adaptive, cost: experts, routes: previous}",
                        "{draft: adaptive, cost: experts, routes: predictor, accuracy: 0.5}"};
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "name: routes\nbaseline: false\nmodel: qwen3-30b-a3b\nhardware: h100\n"
           "workload: {blocks: 40, batch: 4, seed: 7, tree: {depth: 5, top_k: 8, nodes: 32}, acceptance: {tau: 3.0}}\n"
           "policies: [%s, %s, %s, %s, %s, %s]\n",
           rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]);
  amoe_spec s = spec_of_yaml(yaml);
  CHECK(s.npolicies == 6, "%d rows, the spec's 6 (no implicit natural row)", s.npolicies);
  const int L = s.model.moe_layers, E = s.model.experts, k = s.model.top_k;
  double *pop = calloc((size_t)L * E, sizeof *pop);
  for (int l = 0; l < L; l++)
    for (int j = 0; j < k; j++) pop[l * E + (l + 5 * j) % E] = 1 + j; /* k experts a layer */
  static amoe_offline offline;
  offline.popularity = pop;
  amoe_row_result r[6], again[6];
  memset(r, 0, sizeof r);
  memset(again, 0, sizeof again);
  run_rows_with(&s, &offline, r);
  run_rows_with(&s, &offline, again);
  CHECK(!memcmp(&r[1].tot, &r[0].tot, sizeof r[0].tot), "predictor at accuracy 1: %g verified, the oracle %g",
        r[1].tot.verified, r[0].tot.verified);
  CHECK(!memcmp(&r[2].tot, &r[3].tot, sizeof r[2].tot), "predictor at accuracy 0: %g verified, popular %g",
        r[2].tot.verified, r[3].tot.verified);
  CHECK(r[5].tot.verified != r[0].tot.verified && r[5].tot.verified != r[3].tot.verified,
        "predictor at 0.5: %g verified, the oracle %g, popular %g (between the two, not either)", r[5].tot.verified,
        r[0].tot.verified, r[3].tot.verified);
  for (int i = 0; i < 6; i++) {
    CHECK(!memcmp(&r[i].tot, &again[i].tot, sizeof r[i].tot), "row %d differs on a second run (committed %g and %g)", i,
          r[i].tot.committed, again[i].tot.committed);
    CHECK(r[i].tot.deviated == 0, "row %d deviated %g tokens (sizing is lossless)", i, r[i].tot.deviated);
    amoe_row_result_free(&r[i]);
    amoe_row_result_free(&again[i]);
  }
  /* poisoning: one pass of 2 requests' blocks, sized, then sized again with
   * every true route of both blocks moved to another expert */
  amoe_source *src = NULL;
  amoe_err e;
  amoe_workload_spec one = s.workload;
  one.batch = 1; /* (a batch's blocks come through its slots' readers) */
  CHECK(amoe_source_open(&src, &one, &s.model, &e) == AMOE_OK, "%s", e.msg);
  amoe_block b[2], read;
  amoe_source_want_logits(src, AMOE_LOGITS_ALL); /* (a block is copied whole) */
  amoe_block_init(&read, L, E, amoe_source_m(src));
  for (int q = 0; q < 2; q++) { /* each its own copy, to poison */
    amoe_block_init(&b[q], L, E, amoe_source_m(src));
    CHECK(amoe_source_next(src, &read, &e) == AMOE_OK && amoe_block_copy(&b[q], &read, &e) == AMOE_OK, "%s", e.msg);
  }
  amoe_block_free(&read);
  uint16_t *truth[2];
  for (int q = 0; q < 2; q++) {
    truth[q] = malloc((size_t)L * b[q].n * b[q].m * sizeof *truth[q]);
    memcpy(truth[q], b[q].ids, (size_t)L * b[q].n * b[q].m * sizeof *truth[q]);
  }
  uint16_t *previous = calloc((size_t)L * k, sizeof *previous);
  for (int j = 0; j < L * k; j++) previous[j] = (uint16_t)((j * 7) % E);
  const int cases[] = {0, 2, 3, 4};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const int row = cases[ci];
    int chosen[2][2][AMOE_MAX_NODES], count[2][2];
    for (int poisoned = 0; poisoned < 2; poisoned++) {
      void *scratch[2];
      amoe_dctx c[2];
      int *outs[2];
      for (int q = 0; q < 2; q++) {
        scratch[q] = calloc(1, amoe_draft_scratch_bytes(b[q].n, L, E));
        c[q] = (amoe_dctx){&b[q], &s, &s.policies[row], &offline, s.workload.nodes, NULL, NULL, scratch[q],
                           NULL, NULL, NULL, q ? previous : NULL, 0};
        outs[q] = chosen[poisoned][q];
      }
      amoe_draft_adaptive_pass(c, 2, outs, count[poisoned]);
      for (int q = 0; q < 2; q++) free(scratch[q]);
      for (int q = 0; q < 2 && !poisoned; q++) /* every node's experts apart from every other's */
        for (int l = 0; l < L; l++)
          for (int t = 0; t < b[q].n; t++)
            for (int j = 0; j < b[q].m; j++) b[q].ids[((size_t)l * b[q].n + t) * b[q].m + j] = (uint16_t)((t * k + j) % E);
    }
    int same = 1;
    for (int q = 0; q < 2; q++) {
      same &= count[0][q] == count[1][q] && !memcmp(chosen[0][q], chosen[1][q], (size_t)count[0][q] * sizeof(int));
      memcpy(b[q].ids, truth[q], (size_t)L * b[q].n * b[q].m * sizeof *truth[q]);
    }
    /* (the oracle, which reads them, is the control: its sizing moves) */
    CHECK(same == (row != 0), "%s: sized %d and %d nodes, %d and %d with the true routes poisoned", rows[row],
          count[0][0], count[0][1], count[1][0], count[1][1]);
  }
  for (int q = 0; q < 2; q++) {
    amoe_block_free(&b[q]);
    free(truth[q]);
  }
  amoe_source_close(src);
  free(previous);
  free(pop);
}

/* costtable's entries are what the run charges: one pass of b requests of
 * one block each, every one verifying its first n nodes (eagle, natural),
 * costs the table's (b, n) entry profiled on those blocks. */
static void costtable_round_trip(void) {
  for (int n = 2; n <= 12; n += 10) {
    char extra[128];
    snprintf(extra, sizeof extra, ", batch: 4, blocks: 4, tokens_per_request: 1, prompt_tokens: 0, tree: {depth: 3, "
             "top_k: 4, nodes: %d}", n);
    amoe_spec s = load_spec(extra);
    s.npolicies = 1;
    amoe_step_table t;
    amoe_source *src = NULL;
    amoe_err e;
    CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
    CHECK(amoe_step_table_profile(&s, src, NULL, 4, 1, &t, &e) == AMOE_OK, "%s", e.msg);
    amoe_source_close(src);
    amoe_row_result r = run_one(&s);
    const double entry = t.step_s[t.nb - 1][t.nt - 1];
    CHECK(t.batch[t.nb - 1] == 4 && t.tokens[t.nt - 1] == n && r.tot.passes == 1 &&
              fabs(r.tot.t_total - entry) < 1e-12 * entry,
          "n %d: the table's (4, %d) entry %.15g, the run's pass %.15g (%g passes)", n, t.tokens[t.nt - 1], entry,
          r.tot.t_total, r.tot.passes);
    /* and the lookup gives the grid's entries at its points */
    CHECK(amoe_step_table_at(&t, 4, n) == entry && amoe_step_table_at(&t, 1, 1) == t.step_s[0][0],
          "lookup: %g at (4, %d), entry %g", amoe_step_table_at(&t, 4, n), n, entry);
    amoe_row_result_free(&r);
  }
}

int main(void) {
  route_predictors();
  queue_by_hand();
  closed_is_batch();
  committed_once();
  gaps();
  trace_errors();
  key_errors();
  sizing();
  costtable_round_trip();
  return check_done();
}
