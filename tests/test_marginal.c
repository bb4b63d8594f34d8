/* The marginal verifier (docs/design.md §6): its guarantees on generated
 * blocks with random residency and expert layouts, and S worked out by hand
 * on the hand-made block (tests/hand.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cost.h"
#include "gen.h"
#include "layout.h"
#include "policy.h"
#include "rng.h"
#include "router.h"
#include "source.h"

#include "hand.h"

enum { EX = 64, KK = 8 };

static amoe_policy_row marginal_row(const char *name, double share) {
  amoe_policy_row r;
  amoe_policy_init(&r, 0, amoe_verifier_find(name));
  CHECK(amoe_policy_set(&r, "share", share) == 0, "%s takes share", name);
  return r;
}

/* π written out again here from §6 (not through amoe_marginal_reach). */
static void reach(const amoe_block *b, const int *nodes, int nn, const double *p, int pn, const double *mass,
                  int by_scores, double *pi) {
  for (int i = 0; i < nn; i++) {
    const int t = nodes[i], d = b->depth[t];
    if (t == 0) {
      pi[i] = 1;
      continue;
    }
    double parent = 1;
    for (int q = 0; q < i; q++)
      if (nodes[q] == b->parent[t]) parent = pi[q];
    const double pd = d < pn ? p[d] : 0;
    const double r = by_scores ? (mass[d] > 0 ? pd * exp(b->score[t]) / mass[d] : 0) : pd;
    pi[i] = fmin(parent, r);
  }
}

/* The layer time the cost function predicts for executing X (counts:
 * natural tokens per expert). */
static double layer_time(const amoe_cost_pass_ctx *pc, const amoe_layout *lay, int l, const uint8_t *X,
                         const int *count, const uint8_t *res) {
  amoe_layer_counts c = {0, 0, 1, 0};
  for (int e = 0; e < EX; e++)
    if (X[e]) {
      c.executed += 1;
      c.fetched += res && !res[e];
      c.expert_s += amoe_cost_expert_at(pc->ec, count[e]);
    }
  if (lay) {
    int busiest;
    c.expert_s = amoe_layout_layer(lay, l, X, count, pc->ec, 1, &busiest);
  }
  return amoe_cost_layer(pc, &c).total;
}

/* On generated 64-expert top-8 blocks, every layer, residency at random,
 * one GPU and four groups: the displaced path mass stays within share ×
 * AcceptMoE's, S keeps at least k experts and only natural or AcceptMoE
 * experts, and with share = 1 the predicted layer time is at most
 * AcceptMoE's. */
static void guarantees(void) {
  const amoe_gen_params gp = {.seed = 77, .layers = 4, .experts = EX, .top_k = KK, .m = 32, .depth = 5, .branch = 8,
                              .nodes = 48, .candidates = 64, .tau = 3.5, .temperature = 0.8, .locality = 0.3,
                              .layer_correlation = 0.5, .skew = 0.45, .noise = 1.0, .tokens_per_request = 60};
  amoe_spec s = hand_spec();
  s.model.experts = EX;
  s.model.top_k = KK;
  s.model.moe_layers = 4;
  amoe_gen *g;
  amoe_err e;
  CHECK(amoe_gen_open(&g, &gp, &e) == AMOE_OK, "%s", e.msg);
  amoe_layout *lay = amoe_layout_new(4, EX, 4);
  amoe_layout_round_robin(lay);
  amoe_block b;
  amoe_block_init(&b, 4, EX, 32);
  amoe_rng r;
  amoe_rng_seed(&r, 5, 6, 7);
  const double p[6] = {1, 0.8, 0.6, 0.45, 0.3, 0.2}, mass[6] = {1, 1.4, 1.1, 0.8, 0.5, 0.3};
  const double shares[3] = {0.3, 0.7, 1};
  int layers = 0, bad_mass = 0, bad_k = 0, bad_sub = 0, bad_time = 0, spent = 0, nonres_kept_less = 0;
  for (int req = 0; req < 3; req++) {
    amoe_gen_begin_request(g, (uint32_t)req);
    while (amoe_gen_next(g, &b, &e) == AMOE_OK) {
      int nodes[AMOE_MAX_NODES], level[AMOE_MAX_DEPTH * 4] = {0};
      for (int t = 0; t < b.n; t++) nodes[t] = t, level[b.depth[t]]++;
      float prob[AMOE_MAX_NODES * KK];
      double sc[5 * EX + AMOE_MAX_NODES], pi[AMOE_MAX_NODES];
      int isc[2 * EX];
      for (int l = 0; l < b.layers; l++) {
        for (int t = 0; t < b.n; t++) amoe_router_probs_top(&b, l, t, 0, KK, prob + t * KK);
        uint8_t res[EX], U[EX] = {0};
        int count[EX] = {0};
        for (int x = 0; x < EX; x++) res[x] = amoe_rng_unif(&r) < 0.5;
        for (int t = 0; t < b.n; t++)
          for (int j = 0; j < KK; j++) U[amoe_block_ids(&b, l, t)[j]] = 1, count[amoe_block_ids(&b, l, t)[j]]++;
        for (int with_layout = 0; with_layout < 2; with_layout++) {
          const amoe_layout *L = with_layout ? lay : NULL;
          amoe_cost_pass_ctx pc;
          amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .offload = 1,
              .tokens = b.n, .depth = 5, .context = 10});
          const amoe_policy_row arow = marginal_row("marginal", 1); /* (acceptmoe reads beta only) */
          amoe_vctx c = {.b = &b, .layer = l, .k = KK, .experts = EX, .router = 0, .nodes = nodes, .nn = b.n,
                         .level_count = level, .commitment = p, .commitment_n = 6, .resident = res, .row = &arow,
                         .prob = prob, .scratch = sc, .iscratch = isc, .mass = mass, .cost = &pc, .layout = L};
          uint8_t SA[EX];
          amoe_verifier_acceptmoe(&c, SA);
          for (int by = 0; by < 2; by++) {
            reach(&b, nodes, b.n, p, 6, mass, !by, pi);
            double v[EX] = {0};
            for (int t = 0; t < b.n; t++)
              for (int j = 0; j < KK; j++) v[amoe_block_ids(&b, l, t)[j]] += pi[t] * prob[t * KK + j];
            double da = 0;
            for (int x = 0; x < EX; x++) da += U[x] && !SA[x] ? v[x] : 0;
            for (int si = 0; si < 3; si++) {
              const amoe_policy_row row = marginal_row(by ? "marginal-depth" : "marginal", shares[si]);
              c.row = &row;
              uint8_t S[EX];
              amoe_verifier_table[row.verifier].select(&c, S);
              double dm = 0;
              int size = 0, nonres_s = 0, nonres_a = 0;
              for (int x = 0; x < EX; x++) {
                dm += U[x] && !S[x] ? v[x] : 0;
                size += S[x];
                bad_sub += S[x] && !U[x] && !SA[x];
                nonres_s += S[x] && !res[x];
                nonres_a += SA[x] && !res[x];
              }
              bad_mass += dm > shares[si] * da + 1e-12;
              bad_k += size < KK;
              spent += dm > 0;
              nonres_kept_less += nonres_s <= nonres_a;
              if (shares[si] == 1)
                bad_time += layer_time(&pc, L, l, S, count, res) > layer_time(&pc, L, l, SA, count, res) + 1e-15;
            }
          }
          layers++;
        }
      }
    }
  }
  CHECK(layers >= 100, "only %d layers", layers);
  CHECK(bad_mass == 0, "%d selections displace more path mass than share x AcceptMoE's", bad_mass);
  CHECK(bad_k == 0, "%d selections keep fewer than k experts", bad_k);
  CHECK(bad_sub == 0, "%d selections keep an expert neither natural nor AcceptMoE's", bad_sub);
  CHECK(bad_time == 0, "%d selections at share 1 predict a slower layer than AcceptMoE's", bad_time);
  /* the checks above could hold by keeping everything: it does spend */
  CHECK(spent > layers, "marginal displaced path mass in only %d of %d selections", spent, 6 * layers);
  CHECK(nonres_kept_less > layers, "marginal kept fewer nonresident experts than AcceptMoE in %d of %d",
        nonres_kept_less, 6 * layers);
  amoe_block_free(&b);
  amoe_layout_free(lay);
  amoe_gen_close(g);
}

/* The hand-made block (hand.h): root {0,1} (router 0.7311, 0.2689), nodes
 * 1, 2, 3 each {2, x} (0.8808, 0.1192) with x = 3, 4, 5; scores 0, −0.1,
 * −0.2, −0.4 at depths 0, 1, 1, 2. Experts 3 and 5 are not resident.
 * p̂ = (1, 0.5, 0.25), m̄ = (1, 1.2, 0.4).
 * AcceptMoE: u = (0.7311, 0.2689, 1.3212, 0.0596, 0.0596, 0.0596); anchors
 * {0,1}; n_er = ⌈e^0.496⌉ = 2 → {0,1,2,3}; pruning drops 3 (v 1 ≤ a(S) 2):
 * S_A = {0,1,2}.
 * marginal: π = (1, 0.5·e^−0.1/1.2, 0.5·e^−0.2/1.2, min(π_1, 0.25·e^−0.4/0.4))
 *            = (1, 0.37702, 0.34114, 0.37702);
 * v_3 = v_5 = 0.1192·0.37702 = 0.04494, v_4 = 0.1192·0.34114 = 0.04067;
 * D = share·(v_3 + v_4 + v_5) = 0.9 · 0.13055 = 0.11749.
 * c: resident 2 ms (1 MB at 0.5 GB/s), not resident + 10.1 ms (1 MB at
 * 100 MB/s + 0.1 ms per copy). v/c: e5 3.714 = e3 (higher id first), e4
 * 20.3, e1 134, e0 366, e2 482. Drop 5 (left 0.07255), 3 (left 0.02761);
 * 4 does not fit: S = {0,1,2,4}. share 1 would also keep 4 or drop it at
 * the last ulp, and both are slower than S_A, which the guard then takes.
 * marginal-depth: π = (1, 0.5, 0.5, 0.25): v_3 = v_4 = 0.0596, v_5 = 0.0298,
 * D = 0.9·0.1490 = 0.1341; order 5, 3, 4: drop 5 and 3, 4 does not fit. */
static void hand_worked(void) {
  amoe_spec s = hand_spec();
  char path[] = "/tmp/amoe_marginal_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0 && write(fd, BLOCK, strlen(BLOCK)) == (ssize_t)strlen(BLOCK), "write fixture");
  close(fd);
  snprintf(s.workload.path, sizeof s.workload.path, "%s", path);
  amoe_err e;
  amoe_source *src = NULL;
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  amoe_block b;
  amoe_block_init(&b, 1, 10, 2);
  CHECK(src && amoe_source_next(src, &b, &e) == AMOE_OK, "read the hand block");
  int nodes[4] = {0, 1, 2, 3}, level[AMOE_MAX_DEPTH * 4] = {1, 2, 1};
  float prob[8];
  for (int t = 0; t < 4; t++) amoe_router_probs_top(&b, 0, t, 0, 2, prob + t * 2);
  CHECK(fabsf(prob[0] - 0.731059f) < 1e-5f && fabsf(prob[2] - 0.880797f) < 1e-5f, "router %g %g", prob[0], prob[2]);
  const double p[3] = {1, 0.5, 0.25}, mass[3] = {1, 1.2, 0.4};
  const uint8_t res[10] = {1, 1, 1, 0, 1, 0, 1, 1, 1, 1};
  amoe_cost_pass_ctx pc;
  amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .offload = 1,
      .tokens = 4, .depth = 2, .context = 10});
  double sc[5 * 10 + 4], pi[4];
  int isc[20];
  struct {
    const char *name;
    double share;
    uint8_t want[10];
  } cases[] = {
      {"marginal", 0.9, {1, 1, 1, 0, 1, 0, 0, 0, 0, 0}},
      {"marginal", 0.5, {1, 1, 1, 1, 1, 0, 0, 0, 0, 0}}, /* D = 0.0653: 5 fits (the tie's higher id), 3 no more */
      {"marginal", 1.0, {1, 1, 1, 0, 0, 0, 0, 0, 0, 0}},
      {"marginal-depth", 0.9, {1, 1, 1, 0, 1, 0, 0, 0, 0, 0}},
      {"acceptmoe", 0, {1, 1, 1, 0, 0, 0, 0, 0, 0, 0}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    amoe_policy_row row;
    amoe_policy_init(&row, 0, amoe_verifier_find(cases[i].name));
    if (cases[i].share > 0) amoe_policy_set(&row, "share", cases[i].share);
    const amoe_vctx c = {.b = &b, .layer = 0, .k = 2, .experts = 10, .router = 0, .nodes = nodes, .nn = 4,
                         .level_count = level, .commitment = p, .commitment_n = 3, .resident = res, .row = &row,
                         .prob = prob, .scratch = sc, .iscratch = isc, .mass = mass, .cost = &pc};
    uint8_t S[10];
    amoe_verifier_table[row.verifier].select(&c, S);
    CHECK(!memcmp(S, cases[i].want, 10), "%s share %g: S = {%d%d%d%d%d%d%d%d%d%d}", cases[i].name, cases[i].share, S[0],
          S[1], S[2], S[3], S[4], S[5], S[6], S[7], S[8], S[9]);
    if (i == 0) {
      amoe_marginal_reach(&c, 1, pi);
      CHECK(fabs(pi[1] - 0.377015) < 1e-6 && fabs(pi[2] - 0.341138) < 1e-6 && fabs(pi[3] - 0.377015) < 1e-6,
            "reach %g %g %g", pi[1], pi[2], pi[3]);
      amoe_marginal_reach(&c, 0, pi);
      CHECK(pi[0] == 1 && pi[1] == 0.5 && pi[2] == 0.5 && pi[3] == 0.25, "depth reach %g %g %g", pi[1], pi[2], pi[3]);
    }
  }
  /* every expert resident: AcceptMoE prunes nothing, S_A = {0,1,2,3};
   * D = 0.9·(v_4 + v_5) = 0.0770. Nothing costs a fetch, so v/c orders by
   * mass alone: 4 (0.0407) is dropped, then 5 and 3 (0.0449 each, 5
   * first) do not fit the 0.0364 left */
  {
    amoe_policy_row row = marginal_row("marginal", 0.9);
    const amoe_vctx c = {.b = &b, .layer = 0, .k = 2, .experts = 10, .router = 0, .nodes = nodes, .nn = 4,
                         .level_count = level, .commitment = p, .commitment_n = 3, .resident = NULL, .row = &row,
                         .prob = prob, .scratch = sc, .iscratch = isc, .mass = mass, .cost = &pc};
    uint8_t S[10];
    const uint8_t want[10] = {1, 1, 1, 1, 0, 1, 0, 0, 0, 0};
    amoe_verifier_marginal(&c, S);
    CHECK(!memcmp(S, want, 10), "resident: S = {%d%d%d%d%d%d}", S[0], S[1], S[2], S[3], S[4], S[5]);
  }
  amoe_block_free(&b);
  amoe_source_close(src);
  remove(path);
}

int main(void) {
  guarantees();
  hand_worked();
  return check_done();
}
