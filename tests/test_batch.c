/* Batches (docs/design.md §17): a pass of two requests worked out by hand
 * (tests/hand.h), continuous batching on generated requests, what the
 * pass's other requests cover, acceptmoe-pass's guarantees and the new
 * keys' errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accept.h"
#include "check.h"
#include "cost.h"
#include "gen.h"
#include "policy.h"
#include "results.h"
#include "router.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"
#include "trace.h"

#include "hand.h"
#include "runs.h"

static const char *const TWO = HAND_TWO_REQUESTS;

/* Both requests in one pass. n = 4 + 2 = 6 tokens, depth 2; union and
 * executed {0..8} = 9 experts, counts 2:4 and 1 for each other. Per
 * request context 10 (nothing committed yet): KV Σ 20 tokens, attention
 * Σ n·ctx = 60.
 *   step 5e-4; draft: the extend and one step, 2 · (3e-3 + 1e-6)
 *   dense (MoE layer): (2e6 + 1000·20)/1e9 = 2.02e-3 (FLOPs 6·2e6 + 4·60·100
 *     = 1.2024e7 -> 1.2e-5: memory-bound) + 1e-6
 *   dense layer: (2.12e6 + 2e4)/1e9 = 2.14e-3 + 1e-6
 *   head 4e-3 + 1e-6; experts 9 · 2e-3 + t0 1e-6
 * Request 0 commits 3 tokens, request 1 two, both in this one pass. */
static void two_requests_by_hand(void) {
  amoe_spec s = hand_spec();
  char path[] = "/tmp/amoe_batch_XXXXXX";
  close(mkstemp(path));
  write_trace(TWO, path, &s);
  s.workload.batch = 2;
  amoe_row_result r = run_one(&s);
  const amoe_totals *t = &r.tot;
  const double T = 5e-4 + 2 * (3e-3 + 1e-6) + (2.02e-3 + 1e-6) + (2.14e-3 + 1e-6) + (4e-3 + 1e-6) + (18e-3 + 1e-6);
  CHECK(t->passes == 1 && t->request_passes == 2 && t->blocks == 2 && t->committed == 5 && t->verified == 6,
        "passes %g request passes %g blocks %g committed %g verified %g", t->passes, t->request_passes, t->blocks,
        t->committed, t->verified);
  CHECK(t->union_sum == 9 && t->executed_sum == 9 && t->layer_blocks == 1, "union %g executed %g", t->union_sum,
        t->executed_sum);
  CHECK(fabs(t->t_total - T) < 1e-12, "pass time %.12g, by hand %.12g", t->t_total, T);
  CHECK(r.nreqs == 2 && r.reqs[0].tokens == 3 && r.reqs[1].tokens == 2 && fabs(r.reqs[0].tpot - T / 3) < 1e-15 &&
            fabs(r.reqs[1].tpot - T / 2) < 1e-15,
        "requests %d: %g tokens at %g s, %g at %g s", r.nreqs, r.nreqs ? r.reqs[0].tokens : 0,
        r.nreqs ? r.reqs[0].tpot : 0, r.nreqs > 1 ? r.reqs[1].tokens : 0, r.nreqs > 1 ? r.reqs[1].tpot : 0);
  amoe_summary m;
  amoe_summarize(t, 0, &m);
  CHECK(m.tau_mean == 2.5 && m.verified_nodes_mean == 3 && m.union_mean == 9, "per request: tau %g verified %g union %g",
        m.tau_mean, m.verified_nodes_mean, m.union_mean);
  amoe_row_result_free(&r);
  /* engine.request_s for the request beyond the first: per token its 2
   * committed tokens, per pass once */
  s.engine.request_s = 1e-3;
  for (int per = 0; per < 2; per++) {
    s.engine.request_per = per ? AMOE_REQUEST_PER_PASS : AMOE_REQUEST_PER_TOKEN;
    r = run_one(&s);
    const double want = T + (per ? 1e-3 : 2e-3);
    CHECK(fabs(r.tot.t_total - want) < 1e-12, "request_s per %s: %.12g, by hand %.12g", per ? "pass" : "token",
          r.tot.t_total, want);
    amoe_row_result_free(&r);
  }
  s.engine.request_s = 0;
  /* per-expert tokens: at peak 3e7 one token costs 2·3·100·50/3e7 = 1e-3,
   * so expert 2's four tokens (4e-3) pass its bytes (2e-3) and every
   * other expert stays at its bytes: t_moe = 8 · 2e-3 + 4e-3 + t0 */
  s.hw.peak_flops = 3e7;
  r = run_one(&s);
  CHECK(fabs(r.layers[0].t_moe - (8 * 2e-3 + 4e-3 + 1e-6)) < 1e-12, "t_moe %.12g, by hand %.12g", r.layers[0].t_moe,
        8 * 2e-3 + 4e-3 + 1e-6);
  amoe_row_result_free(&r);
  /* at batch 1 the same trace takes two passes: {0..5} then {6,7,2,8} */
  s = hand_spec();
  write_trace(TWO, path, &s);
  r = run_one(&s);
  CHECK(r.tot.passes == 2 && r.tot.union_sum == 10 && r.tot.committed == 5 && r.nreqs == 2,
        "batch 1: passes %g union %g committed %g requests %d", r.tot.passes, r.tot.union_sum, r.tot.committed, r.nreqs);
  amoe_row_result_free(&r);
  remove(path);
}

/* One request at batch 2 is exactly the batch-1 pass: same figures. */
static void one_request_is_batch_one(void) {
  amoe_spec s = hand_spec();
  char path[] = "/tmp/amoe_batch1_XXXXXX";
  close(mkstemp(path));
  write_trace(BLOCK, path, &s);
  amoe_row_result a = run_one(&s);
  s.workload.batch = 2;
  amoe_row_result b = run_one(&s);
  b.tot.request_passes = 0; /* (counted at batch only) */
  CHECK(memcmp(&a.tot, &b.tot, sizeof a.tot) == 0, "one request: batch 2 differs from batch 1 (%.12g vs %.12g s)",
        b.tot.t_total, a.tot.t_total);
  CHECK(memcmp(a.layers, b.layers, sizeof *a.layers) == 0, "one request: layers differ");
  amoe_row_result_free(&a);
  amoe_row_result_free(&b);
  remove(path);
}

static int by_tokens(const void *x, const void *y) {
  const double a = ((const amoe_request_stat *)x)->tokens, b = ((const amoe_request_stat *)y)->tokens;
  return (a > b) - (a < b);
}

/* Continuous batching on generated requests of ~12 tokens: every slot
 * refills, every request is committed once and whole, and the totals are
 * the requests' sums, at every batch and for speculative and one-token
 * rows alike. */
static void continuous(void) {
  const char *yaml =
      "name: cb\n"
      "model: {name: tiny-moe, layers: 2, moe_layers: 2, experts: 16, top_k: 2, hidden: 64, moe_intermediate: 32, "
      "vocab: 1000}\n"
      "hardware: h200\n"
      "workload: {blocks: 45, tokens_per_request: 12, tree: {depth: 3, top_k: 4, nodes: 12}, acceptance: {tau: 2.0}}\n"
      "policies: [natural, {draft: autoregressive}, acceptmoe-pass]\n";
  amoe_spec s = spec_of_yaml(yaml);
  amoe_source *src = NULL;
  amoe_err e;
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  amoe_source_request *rq = NULL;
  int nrq = 0;
  CHECK(amoe_source_requests(src, &rq, &nrq, &e) == AMOE_OK, "%s", e.msg);
  /* the count without routing is what a reader gives */
  amoe_block b;
  amoe_block_init(&b, s.model.moe_layers, s.model.experts, amoe_source_m(src));
  int got[64] = {0}, seen = 0, wrong_index = 0;
  uint64_t at = 0;
  CHECK(amoe_source_rewind(src, &e) == AMOE_OK, "%s", e.msg);
  while (amoe_source_next(src, &b, &e) == AMOE_OK) {
    if (b.request < 64) got[b.request]++;
    seen = (int)b.request + 1 > seen ? (int)b.request + 1 : seen;
    wrong_index += b.index != at++;
  }
  CHECK(seen == nrq && nrq >= 5 && !wrong_index, "%d requests read, %d listed", seen, nrq);
  int total = 0, bad = 0;
  for (int i = 0; i < nrq; i++) {
    bad += rq[i].blocks != got[i] || rq[i].first != (uint64_t)total;
    total += rq[i].blocks;
  }
  CHECK(!bad && total == 45, "request list: %d wrong, %d blocks", bad, total);
  amoe_block_free(&b);
  free(rq);
  amoe_source_close(src);
  static amoe_offline offline;
  amoe_row_result one[3], many[3];
  for (int B = 1; B <= 4; B += 3) {
    s.workload.batch = B;
    amoe_row_result *r = B == 1 ? one : many;
    CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
    CHECK(amoe_run(&s, &offline, src, NULL, r, &e) == AMOE_OK, "%s", e.msg);
    amoe_source_close(src);
    for (int i = 0; i < 3; i++) {
      double tokens = 0;
      for (int q = 0; q < r[i].nreqs; q++) tokens += r[i].reqs[q].tokens;
      CHECK(r[i].nreqs == nrq && tokens == r[i].tot.committed && r[i].tot.blocks == 45,
            "batch %d row %d: %d requests of %d, %g tokens of %g, %g blocks", B, i, r[i].nreqs, nrq, tokens,
            r[i].tot.committed, r[i].tot.blocks);
    }
  }
  /* B = 4 slots over ≥ 5 requests: some pass held 4, and a slot was refilled */
  CHECK(many[0].tot.passes < one[0].tot.passes && many[0].tot.request_passes == 45 &&
            many[0].tot.request_passes / many[0].tot.passes > 2,
        "batch 4: %g passes (batch 1: %g), %g request passes", many[0].tot.passes, one[0].tot.passes,
        many[0].tot.request_passes);
  /* the natural row commits the same tokens per request at every batch */
  for (int i = 0; i < 2; i++) {
    qsort(one[i].reqs, (size_t)one[i].nreqs, sizeof *one[i].reqs, by_tokens);
    qsort(many[i].reqs, (size_t)many[i].nreqs, sizeof *many[i].reqs, by_tokens);
    int diff = one[i].nreqs != many[i].nreqs;
    for (int q = 0; q < one[i].nreqs && !diff; q++) diff += one[i].reqs[q].tokens != many[i].reqs[q].tokens;
    CHECK(!diff, "row %d: the requests' tokens differ between batch 1 and 4", i);
  }
  CHECK(many[1].tot.passes < one[1].tot.passes && one[1].tot.passes == one[1].tot.committed,
        "autoregressive: %g passes at batch 4, %g at batch 1", many[1].tot.passes, one[1].tot.passes);
  /* acceptmoe-pass: one S per pass holds what every request executes */
  CHECK(many[2].tot.executed_sum <= many[2].tot.eligible_sum, "acceptmoe-pass executed %g of eligible %g",
        many[2].tot.executed_sum, many[2].tot.eligible_sum);
  for (int i = 0; i < 3; i++) amoe_row_result_free(&one[i]), amoe_row_result_free(&many[i]);
  /* prompts of 20 tokens: a pass of their own each (separate), or 8, 8
   * and 4 of them in the next three passes before the request decodes
   * (chunked): the same requests and tokens either way, the prefill time
   * apart or inside the passes */
  s.workload.prompt_tokens = 20;
  s.workload.chunk_tokens = 8;
  amoe_row_result sep[3], chk[3];
  for (int c = 0; c < 2; c++) {
    s.workload.prefill_schedule = c ? AMOE_PREFILL_CHUNKED : AMOE_PREFILL_SEPARATE;
    CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
    CHECK(amoe_run(&s, &offline, src, NULL, c ? chk : sep, &e) == AMOE_OK, "%s", e.msg);
    amoe_source_close(src);
  }
  for (int i = 0; i < 3; i++) {
    const amoe_totals *a = &sep[i].tot, *b = &chk[i].tot;
    CHECK(a->prefills == nrq && b->prefills == nrq && a->t_prefill > 0 && b->t_prefill == 0 &&
              a->committed == b->committed && a->blocks == b->blocks && sep[i].nreqs == nrq && chk[i].nreqs == nrq,
          "row %d prefills %g/%g, prefill time %g/%g, committed %g/%g", i, a->prefills, b->prefills, a->t_prefill,
          b->t_prefill, a->committed, b->committed);
    /* chunked passes carry the prompts: more passes than separate's decode passes, each slower */
    CHECK(b->passes > a->passes && b->request_passes == a->request_passes && b->t_total > a->t_total,
          "row %d: chunked %g passes (%g requests in them), separate %g (%g)", i, b->passes, b->request_passes,
          a->passes, a->request_passes);
    amoe_row_result_free(&sep[i]);
    amoe_row_result_free(&chk[i]);
  }
}

enum { EX = 64, KK = 8 };

/* What the pass's other requests execute costs a cost-aware row nothing:
 * marginal never drops a covered expert (and does drop some when nothing
 * is covered), ecospec with every expert covered grows the tree to its
 * budget. acceptmoe-pass over one request is acceptmoe; over several it
 * keeps every request's root experts. */
static void covered_and_pass(void) {
  const amoe_gen_params gp = {.seed = 91, .layers = 3, .experts = EX, .top_k = KK, .m = 32, .depth = 5, .branch = 8,
                              .nodes = 48, .candidates = 64, .tau = 3.5, .temperature = 0.8, .locality = 0.3,
                              .layer_correlation = 0.5, .skew = 0.45, .noise = 1.0, .tokens_per_request = 60};
  amoe_spec s = hand_spec();
  s.model.experts = EX;
  s.model.top_k = KK;
  s.model.moe_layers = 3;
  s.workload.depth = 5;
  amoe_gen *g;
  amoe_err e;
  CHECK(amoe_gen_open(&g, &gp, &e) == AMOE_OK, "%s", e.msg);
  amoe_block b[2];
  for (int q = 0; q < 2; q++) amoe_block_init(&b[q], 3, EX, 32);
  const double p[6] = {1, 0.8, 0.6, 0.45, 0.3, 0.2}, mass[6] = {1, 1.4, 1.1, 0.8, 0.5, 0.3};
  amoe_policy_row mrow, arow;
  amoe_policy_init(&mrow, 0, amoe_verifier_find("marginal"));
  amoe_policy_set(&mrow, "share", 1);
  amoe_policy_init(&arow, 0, amoe_verifier_find("acceptmoe-pass"));
  int layers = 0, dropped_covered = 0, dropped_uncovered = 0, pass_not_one = 0, roots_missing = 0;
  static int nodes[2][AMOE_MAX_NODES], level[2][AMOE_MAX_DEPTH * 4];
  static float prob[2][AMOE_MAX_NODES * KK];
  static double sc[2][AMOE_VSCRATCH(EX, AMOE_MAX_NODES)];
  static int isc[2][AMOE_VISCRATCH(EX, AMOE_MAX_NODES)];
  for (int req = 0; req < 4; req += 2) {
    for (int q = 0; q < 2; q++) {
      amoe_gen_begin_request(g, (uint32_t)(req + q));
      CHECK(amoe_gen_next(g, &b[q], &e) == AMOE_OK, "%s", e.msg);
    }
    for (int l = 0; l < 3; l++) {
      amoe_vctx c[2];
      for (int q = 0; q < 2; q++) {
        memset(level[q], 0, sizeof level[q]);
        for (int t = 0; t < b[q].n; t++) nodes[q][t] = t, level[q][b[q].depth[t]]++;
        for (int t = 0; t < b[q].n; t++) amoe_router_probs_top(&b[q], l, t, 0, KK, prob[q] + t * KK);
        c[q] = (amoe_vctx){.b = &b[q], .layer = l, .k = KK, .experts = EX, .nodes = nodes[q], .nn = b[q].n,
                           .level_count = level[q], .commitment = p, .commitment_n = 6, .row = &mrow,
                           .prob = prob[q], .scratch = sc[q], .iscratch = isc[q], .mass = mass,
                           .kappa = AMOE_DEFAULT_KAPPA, .margin_min = AMOE_DEFAULT_MARGIN_MIN};
      }
      /* marginal with and without request 1's executed (here: its natural union) covered */
      uint8_t cov[EX] = {0}, S0[EX], S1[EX], SA[EX];
      for (int t = 0; t < b[1].n; t++)
        for (int j = 0; j < KK; j++) cov[amoe_block_ids(&b[1], l, t)[j]] = 1;
      amoe_verifier_marginal(&c[0], S0);
      amoe_vctx cc = c[0];
      cc.covered = cov;
      amoe_verifier_marginal(&cc, S1);
      amoe_verifier_acceptmoe(&c[0], SA);
      for (int x = 0; x < EX; x++) {
        int in_u = 0;
        for (int t = 0; t < b[0].n && !in_u; t++)
          for (int j = 0; j < KK; j++) in_u |= amoe_block_ids(&b[0], l, t)[j] == x;
        const int candidate = in_u || SA[x]; /* marginal starts from U ∪ S_A */
        dropped_covered += candidate && cov[x] && !S1[x];
        dropped_uncovered += candidate && cov[x] && !S0[x];
      }
      /* acceptmoe-pass */
      c[0].row = c[1].row = &arow;
      uint8_t P1[EX], A1[EX], P2[EX];
      amoe_verifier_acceptmoe_pass(c, 1, P1);
      amoe_verifier_acceptmoe(&c[0], A1);
      pass_not_one += memcmp(P1, A1, EX) != 0;
      amoe_verifier_acceptmoe_pass(c, 2, P2);
      for (int q = 0; q < 2; q++)
        for (int j = 0; j < KK; j++) roots_missing += !P2[amoe_block_ids(&b[q], l, 0)[j]];
      layers++;
    }
  }
  CHECK(layers == 6 && dropped_covered == 0 && dropped_uncovered > 0,
        "marginal dropped %d covered experts (%d when not covered) over %d layers", dropped_covered, dropped_uncovered,
        layers);
  CHECK(pass_not_one == 0 && roots_missing == 0, "acceptmoe-pass: %d layers differ from acceptmoe at one request, %d "
        "root experts missing", pass_not_one, roots_missing);
  /* ecospec: every expert covered, so no node adds a cost: the whole budget */
  amoe_policy_row erow;
  amoe_policy_init(&erow, amoe_draft_find("ecospec"), 0);
  static uint8_t all[3][EX];
  memset(all, 1, sizeof all);
  const uint8_t *covl[3] = {all[0], all[1], all[2]};
  static char scratch[1 << 20];
  int out[AMOE_MAX_NODES];
  amoe_dctx dc = {.b = &b[0], .spec = &s, .row = &erow, .nodes = 20, .scratch = scratch};
  const int bare = amoe_draft_ecospec(&dc, out);
  dc.covered = covl;
  const int full = amoe_draft_ecospec(&dc, out);
  CHECK(full == 20 && bare < full, "ecospec: %d nodes with everything covered (budget 20), %d with nothing", full, bare);
  for (int q = 0; q < 2; q++) amoe_block_free(&b[q]);
  amoe_gen_close(g);
}

/* Every new key's error names it. */
static void key_errors(void) {
  const struct {
    const char *set, *needle;
  } bad[] = {
      {"workload.batch=0", "workload.batch"},
      {"workload.batch=5000", "workload.batch"},
      {"workload.prefill_schedule=interleaved", "workload.prefill_schedule"},
      {"workload.chunk_tokens=0", "workload.chunk_tokens"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) check_set_refused(bad[i].set, bad[i].needle);
  /* a batch needs a source each slot can seek in */
  amoe_spec s;
  amoe_spec_defaults(&s);
  amoe_diag d = {0};
  CHECK(amoe_spec_load_preset(&s, 0, "mixtral-8x7b", "t", &d) == AMOE_OK, "preset");
  CHECK(amoe_spec_load_preset(&s, 1, "h200", "t", &d) == AMOE_OK, "preset");
  s.workload.batch = 4;
  s.workload.source = AMOE_SRC_ROUTING_JSONL;
  snprintf(s.workload.path, sizeof s.workload.path, "x.jsonl");
  CHECK(amoe_spec_validate(&s, "t", &d) != AMOE_OK && d.n && strstr(d.msgs[0], "workload.batch"), "%s",
        d.n ? d.msgs[0] : "accepted");
  amoe_diag_free(&d);
}

int main(void) {
  two_requests_by_hand();
  one_request_is_batch_one();
  continuous();
  covered_and_pass();
  key_errors();
  return check_done();
}
