/* The marginal verifier (docs/design.md §6): its guarantees on generated
 * blocks with random residency and expert layouts, and S worked out by hand
 * on the hand-made block (tests/hand.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "accept.h"
#include "check.h"
#include "fast.h"
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

/* §6 step 4 written out again here from §7, through layer l:
 * Σ_t π_t · E_c[2Φ(−m_c / (κ·√(σ²_t + ρ_t²)))] over t's children c at the
 * draft's probabilities (normalised when they sum past 1), the rest of the
 * mass off the tree at margin_min; σ²_t (sigma2) the earlier layers' ρ²,
 * to which this layer's is then added. */
static double deviation(const amoe_block *b, int l, const int *nodes, int nn, const float *prob, const double *pi,
                        const uint8_t *S, double *sigma2) {
  double d = 0;
  for (int i = 0; i < nn; i++) {
    const int t = nodes[i];
    double mass = 0, out = 0;
    for (int j = 0; j < KK; j++) {
      mass += prob[t * KK + j];
      out += S[amoe_block_ids(b, l, t)[j]] ? 0 : prob[t * KK + j];
    }
    sigma2[i] += (out / mass) * (out / mass);
    const double s = sqrt(sigma2[i]);
    double sum = 0;
    for (int c = 0; c < b->n; c++) sum += b->parent[c] == t ? exp(b->logp[c]) : 0;
    const double norm = sum > 1 ? sum : 1;
    double f = (1 - sum / norm) * amoe_flip_prob(AMOE_DEFAULT_KAPPA, AMOE_DEFAULT_MARGIN_MIN, 0, s);
    for (int c = 0; c < b->n; c++)
      if (b->parent[c] == t) {
        const double q = exp(b->logp[c]);
        f += q / norm * amoe_flip_prob(AMOE_DEFAULT_KAPPA, AMOE_DEFAULT_MARGIN_MIN, q, s);
      }
    d += pi[i] * f;
  }
  return d;
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

/* On generated 64-expert top-8 blocks, every layer in order with the
 * running prediction a pass keeps, residency at random, one GPU and four
 * groups: the predicted deviated tokens through each layer (written out
 * below, and as the verifier reports them) stay within share ×
 * AcceptMoE's; S keeps at least k experts and only natural or AcceptMoE
 * experts; at share 1 a block's first layer predicts no slower a layer
 * than AcceptMoE's. */
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
  int layers = 0, bad_run = 0, bad_dev = 0, bad_k = 0, bad_sub = 0, bad_time = 0, spent = 0, nonres_kept_less = 0;
  for (int req = 0; req < 3; req++) {
    amoe_gen_begin_request(g, (uint32_t)req);
    while (amoe_gen_next(g, &b, &e) == AMOE_OK) {
      int nodes[AMOE_MAX_NODES], level[AMOE_MAX_DEPTH * 4] = {0};
      for (int t = 0; t < b.n; t++) nodes[t] = t, level[b.depth[t]]++;
      float prob[AMOE_MAX_NODES * KK];
      static double sc[AMOE_VSCRATCH(EX, AMOE_MAX_NODES)], pi[AMOE_MAX_NODES];
      static int isc[AMOE_VISCRATCH(EX, AMOE_MAX_NODES)];
      /* the running prediction, per (layout, reach, share) row as the run
       * keeps it, and the same written out here (σ² of its sets, and of
       * S_A's per layout and reach) */
      static double run[2][2][3][2 + 2 * AMOE_MAX_NODES], sm[2][2][3][AMOE_MAX_NODES], sa[2][2][AMOE_MAX_NODES];
      memset(run, 0, sizeof run), memset(sm, 0, sizeof sm), memset(sa, 0, sizeof sa);
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
                         .prob = prob, .scratch = sc, .iscratch = isc, .mass = mass, .cost = &pc, .layout = L,
                         .kappa = AMOE_DEFAULT_KAPPA, .margin_min = AMOE_DEFAULT_MARGIN_MIN};
          uint8_t SA[EX];
          amoe_verifier_acceptmoe(&c, SA);
          for (int by = 0; by < 2; by++) {
            reach(&b, nodes, b.n, p, 6, mass, !by, pi);
            const double da = deviation(&b, l, nodes, b.n, prob, pi, SA, sa[with_layout][by]);
            for (int si = 0; si < 3; si++) {
              const amoe_policy_row row = marginal_row(by ? "marginal-depth" : "marginal", shares[si]);
              c.row = &row;
              c.deviation = run[with_layout][by][si];
              uint8_t S[EX];
              amoe_verifier_table[row.verifier].select(&c, S);
              const double dm = deviation(&b, l, nodes, b.n, prob, pi, S, sm[with_layout][by][si]);
              bad_run += fabs(c.deviation[0] - dm) > 1e-9 * (dm > 1e-6 ? dm : 1e-6) ||
                         fabs(c.deviation[1] - da) > 1e-9 * (da > 1e-6 ? da : 1e-6);
              int size = 0, nonres_s = 0, nonres_a = 0, displaces = 0;
              for (int x = 0; x < EX; x++) {
                size += S[x];
                displaces += U[x] && !S[x];
                bad_sub += S[x] && !U[x] && !SA[x];
                nonres_s += S[x] && !res[x];
                nonres_a += SA[x] && !res[x];
              }
              bad_dev += dm > shares[si] * da * (1 + 1e-9) + 1e-15;
              bad_k += size < KK;
              spent += displaces > 0;
              nonres_kept_less += nonres_s <= nonres_a;
              if (shares[si] == 1 && l == 0) /* (later, S_A may not fit what marginal's earlier layers left) */
                bad_time += layer_time(&pc, L, l, S, count, res) > layer_time(&pc, L, l, SA, count, res) + 1e-15;
            }
          }
          layers++;
        }
      }
    }
  }
  CHECK(layers >= 100, "only %d layers", layers);
  CHECK(bad_dev == 0, "%d selections predict more deviated tokens than share x AcceptMoE's", bad_dev);
  CHECK(bad_run == 0, "%d running predictions differ from the one written out here", bad_run);
  CHECK(bad_k == 0, "%d selections keep fewer than k experts", bad_k);
  CHECK(bad_sub == 0, "%d selections keep an expert neither natural nor AcceptMoE's", bad_sub);
  CHECK(bad_time == 0, "%d first layers at share 1 predict a slower layer than AcceptMoE's", bad_time);
  /* the checks above could hold by keeping everything: it does spend */
  CHECK(spent > layers, "marginal displaced natural experts in only %d of %d selections", spent, 6 * layers);
  CHECK(nonres_kept_less > layers, "marginal kept fewer nonresident experts than AcceptMoE in %d of %d",
        nonres_kept_less, 6 * layers);
  amoe_block_free(&b);
  amoe_layout_free(lay);
  amoe_gen_close(g);
}

/* Reads one JSONL block into b (the source closed again). */
static void read_block(amoe_spec *s, const char *jsonl, amoe_block *b) {
  char path[] = "/tmp/amoe_marginal_XXXXXX";
  amoe_source *src = hand_open_fixture(path, jsonl, s);
  amoe_err e;
  amoe_block_init(b, 1, 10, 2);
  CHECK(src && amoe_source_next(src, b, &e) == AMOE_OK, "read the hand block");
  amoe_source_close(src);
  remove(path);
}

/* The expected-deviation predictor (§6 step 4) on a two-node block: root
 * {0,1} (router 0.7311, 0.2689), its child 1 {2,3} (0.8808, 0.1192) drafted
 * with q = e^−0.1 = 0.9048; one MoE layer (√L = 1), κ = 1, m_min = 0.25,
 * reach by depth p̂ = (1, 0.5).
 * S = {0,2} displaces ρ_0 = 0.2689 and ρ_1 = 0.1192.
 * Root: its one child at m = ln(0.9048/0.0952) = 2.2518, the rest 0.0952
 * off the tree at m_min: F_0 = 0.9048·erfc(2.2518/(0.2689·√2)) +
 * 0.0952·erfc(0.25/(0.2689·√2)) = 0.9048·1.27e-16 + 0.0952·0.35254
 * = 0.033554.
 * Node 1 has no children: F_1 = erfc(0.25/(0.1192·√2)) = 0.035970.
 * D = 1·0.033554 + 0.5·0.035970 = 0.051539. S ⊇ U: D = 0. */
static void predictor_two_nodes(void) {
  amoe_spec s = hand_spec();
  amoe_block b;
  read_block(&s, "{\"parent\":[-1,0],\"logp\":[0,-0.1],\"accepted\":[1,1],"
                 "\"topk\":[[[[0,0],[1,-1]],[[2,0],[3,-2]]]]}\n", &b);
  int nodes[2] = {0, 1}, level[AMOE_MAX_DEPTH * 4] = {1, 1};
  float prob[4];
  for (int t = 0; t < 2; t++) amoe_router_probs_top(&b, 0, t, 0, 2, prob + t * 2);
  const double p[2] = {1, 0.5};
  amoe_policy_row row = marginal_row("marginal", 1);
  const amoe_vctx c = {.b = &b, .layer = 0, .k = 2, .experts = 10, .nodes = nodes, .nn = 2, .level_count = level,
                       .commitment = p, .commitment_n = 2, .row = &row, .prob = prob, .kappa = 1, .margin_min = 0.25};
  double pi[2], sc[8];
  int isc[8];
  amoe_marginal_reach(&c, 0, pi);
  CHECK(pi[0] == 1 && pi[1] == 0.5, "reach %g %g", pi[0], pi[1]);
  const uint8_t S[10] = {1, 0, 1, 0, 0, 0, 0, 0, 0, 0}, all[10] = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
  const double d = amoe_marginal_expected_deviation(&c, pi, S, sc, isc);
  CHECK(fabs(d - 0.0515388) < 1e-6, "two nodes: D = %.7f, by hand 0.0515388", d);
  CHECK(amoe_marginal_expected_deviation(&c, pi, all, sc, isc) == 0, "nothing displaced: D = 0");
  amoe_block_free(&b);
}

/* The hand-made block (hand.h): root {0,1} (router 0.7311, 0.2689), nodes
 * 1, 2, 3 each {2, x} (0.8808, 0.1192) with x = 3, 4, 5; draft q = e^−0.1,
 * e^−0.2, e^−0.3 at nodes 1, 2, 3 (3 a child of 1); scores 0, −0.1,
 * −0.2, −0.4 at depths 0, 1, 1, 2. Experts 3 and 5 are not resident.
 * p̂ = (1, 0.5, 0.25), m̄ = (1, 1.2, 0.4); κ = 1, m_min = 0.25, one layer.
 * AcceptMoE: u = (0.7311, 0.2689, 1.3212, 0.0596, 0.0596, 0.0596); anchors
 * {0,1}; n_er = ⌈e^0.496⌉ = 2 → {0,1,2,3}; pruning drops 3 (v 1 ≤ a(S) 2):
 * S_A = {0,1,2}.
 * marginal: π = (1, 0.5·e^−0.1/1.2, 0.5·e^−0.2/1.2, min(π_1, 0.25·e^−0.4/0.4))
 *            = (1, 0.37702, 0.34114, 0.37702).
 * Flip model: the root's two children normalised (Σ q = 1.7236) to
 * w = 0.5250 at m 2.2518 and 0.4750 at m 1.5075, nothing at m_min; node 1's
 * child w 0.7408 at m 1.0502, 0.2592 at m_min; nodes 2 and 3 all at m_min.
 * S_A displaces 0.1192 of nodes 1, 2, 3: π·F = 0.003515, 0.012271,
 * 0.013561; D(S_A) = 0.029347.
 * δ_e (dropping e alone): e1 9.8e−9 (the root's children are confident),
 * e3 0.003515, e4 0.012271, e5 0.013561, e0 0.019688, e2 0.69866.
 * c: resident 2 ms (1 MB at 0.5 GB/s), not resident + 10.1 ms (1 MB at
 * 100 MB/s + 0.1 ms per copy); δ/c orders 1, 3, 5, 4, 0, 2.
 * share 1 (B 0.029347): drop 1, 3 (D 0.003515), 5 does not fit
 * (0.030591), 4 fits (0.017076); 0 and 2 do not: S = {0,2,4}, as fast as
 * S_A (three resident experts), so the guard keeps it.
 * share 0.5 (B 0.014673): 1 and 3 dropped, 5 and 4 do not fit:
 * S = {0,2,4,5}. share 0: S ⊇ U, natural routing.
 * marginal-depth (π = (1, 0.5, 0.5, 0.25)), share 0.5: D(S_A) = 0.031639,
 * B 0.015820; order 1, 3, 5, 4: drop 1, 3 (0.004661), 5 (0.013654), 4
 * does not fit: S = {0,2,4}. */
static void hand_worked(void) {
  amoe_spec s = hand_spec();
  amoe_block b;
  read_block(&s, BLOCK, &b);
  int nodes[4] = {0, 1, 2, 3}, level[AMOE_MAX_DEPTH * 4] = {1, 2, 1};
  float prob[8];
  for (int t = 0; t < 4; t++) amoe_router_probs_top(&b, 0, t, 0, 2, prob + t * 2);
  CHECK(fabsf(prob[0] - 0.731059f) < 1e-5f && fabsf(prob[2] - 0.880797f) < 1e-5f, "router %g %g", prob[0], prob[2]);
  const double p[3] = {1, 0.5, 0.25}, mass[3] = {1, 1.2, 0.4};
  const uint8_t res[10] = {1, 1, 1, 0, 1, 0, 1, 1, 1, 1};
  amoe_cost_pass_ctx pc;
  amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .offload = 1,
      .tokens = 4, .depth = 2, .context = 10});
  static double sc[AMOE_VSCRATCH(10, 4)];
  static int isc[AMOE_VISCRATCH(10, 4)];
  double pi[4];
  struct {
    const char *name;
    double share;
    const uint8_t *res;
    uint8_t want[10];
    double spent, budget; /* the predicted deviation it reports: its own, AcceptMoE's */
  } cases[] = {
      {"marginal", 1.0, res, {1, 0, 1, 0, 1, 0, 0, 0, 0, 0}, 0.017076, 0.029347},
      {"marginal", 0.5, res, {1, 0, 1, 0, 1, 1, 0, 0, 0, 0}, 0.003515, 0.029347},
      {"marginal", 0.0, res, {1, 1, 1, 1, 1, 1, 0, 0, 0, 0}, 0, 0.029347},
      {"marginal-depth", 0.5, res, {1, 0, 1, 0, 1, 0, 0, 0, 0, 0}, 0.013654, 0.031639},
      {"acceptmoe", -1, res, {1, 1, 1, 0, 0, 0, 0, 0, 0, 0}, 0, 0},
      /* every expert resident: S_A = {0,1,2,3} (D 0.025832) and every c
       * alike: δ orders 1, 3, 4, 5; drop 1, 3, 4 (D 0.015786), 5 does
       * not fit (0.029347) */
      {"marginal", 1.0, NULL, {1, 0, 1, 0, 0, 1, 0, 0, 0, 0}, 0.015786, 0.025832},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    amoe_policy_row row;
    amoe_policy_init(&row, 0, amoe_verifier_find(cases[i].name));
    if (cases[i].share >= 0) CHECK(amoe_policy_set(&row, "share", cases[i].share) == 0, "share");
    double dev[2 + 2 * 4] = {0};
    const amoe_vctx c = {.b = &b, .layer = 0, .k = 2, .experts = 10, .router = 0, .nodes = nodes, .nn = 4,
                         .level_count = level, .commitment = p, .commitment_n = 3, .resident = cases[i].res,
                         .row = &row, .prob = prob, .scratch = sc, .iscratch = isc, .mass = mass, .cost = &pc,
                         .kappa = 1, .margin_min = 0.25, .deviation = dev};
    uint8_t S[10];
    amoe_verifier_table[row.verifier].select(&c, S);
    CHECK(!memcmp(S, cases[i].want, 10), "%s share %g: S = {%d%d%d%d%d%d%d%d%d%d}", cases[i].name, cases[i].share, S[0],
          S[1], S[2], S[3], S[4], S[5], S[6], S[7], S[8], S[9]);
    CHECK(fabs(dev[0] - cases[i].spent) < 1e-6 && fabs(dev[1] - cases[i].budget) < 1e-6,
          "%s share %g: predicted deviation %.6f, AcceptMoE's %.6f", cases[i].name, cases[i].share, dev[0], dev[1]);
    if (i == 0) {
      amoe_marginal_reach(&c, 1, pi);
      CHECK(fabs(pi[1] - 0.377015) < 1e-6 && fabs(pi[2] - 0.341138) < 1e-6 && fabs(pi[3] - 0.377015) < 1e-6,
            "reach %g %g %g", pi[1], pi[2], pi[3]);
      amoe_marginal_reach(&c, 0, pi);
      CHECK(pi[0] == 1 && pi[1] == 0.5 && pi[2] == 0.5 && pi[3] == 0.25, "depth reach %g %g %g", pi[1], pi[2], pi[3]);
    }
  }
  amoe_block_free(&b);
}

/* The one inexact fast path (fast.h's erfc_n, glibc's vector erfc): within
 * 4 ulp of libm's erfc from 0 to past its underflow, and marginal's whole
 * selection with it against the plain erfc on generated blocks: the same
 * sets, the predictions within 1e-12 of each other. */
static void erfc_fast(void) {
  if (!amoe_fast.erfc_n) {
    printf("no vector erfc on this machine: its comparison is not run\n");
    return;
  }
  enum { N = 2003 };
  static double x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = i < N - 3 ? 28.0 * i / (N - 4) : (i == N - 3 ? 1e-300 : i == N - 2 ? 0.4769 : INFINITY);
  amoe_fast.erfc_n(x, y, N);
  int worst = 0;
  for (int i = 0; i < N; i++) {
    const double e = erfc(x[i]);
    const double ulp = e > 0 ? nextafter(e, INFINITY) - e : 4.9e-324;
    const int u = (int)ceil(fabs(y[i] - e) / ulp);
    worst = u > worst ? u : worst;
  }
  CHECK(worst <= 4, "the vector erfc is %d ulp from libm's", worst);
  double one;
  amoe_fast.erfc_n(&(double){0.5}, &one, 1); /* (a lone value: the padded tail) */
  CHECK(fabs(one - erfc(0.5)) <= 4 * (nextafter(erfc(0.5), 1) - erfc(0.5)), "one value: %.17g against %.17g", one, erfc(0.5));
  const amoe_gen_params gp = {.seed = 91, .layers = 4, .experts = EX, .top_k = KK, .m = 32, .depth = 5, .branch = 8,
                              .nodes = 48, .candidates = 64, .tau = 3.5, .temperature = 0.8, .locality = 0.3,
                              .layer_correlation = 0.5, .skew = 0.45, .noise = 1.0, .tokens_per_request = 60};
  amoe_spec s = hand_spec();
  s.model.experts = EX, s.model.top_k = KK, s.model.moe_layers = 4;
  amoe_gen *g;
  amoe_err e;
  CHECK(amoe_gen_open(&g, &gp, &e) == AMOE_OK, "%s", e.msg);
  amoe_block b;
  amoe_block_init(&b, 4, EX, 32);
  const double p[6] = {1, 0.8, 0.6, 0.45, 0.3, 0.2}, mass[6] = {1, 1.4, 1.1, 0.8, 0.5, 0.3};
  void (*vec)(const double *, double *, int) = amoe_fast.erfc_n;
  int layers = 0, differ = 0;
  double worst_dev = 0;
  amoe_gen_begin_request(g, 0);
  while (amoe_gen_next(g, &b, &e) == AMOE_OK) {
    int nodes[AMOE_MAX_NODES], level[AMOE_MAX_DEPTH * 4] = {0};
    for (int t = 0; t < b.n; t++) nodes[t] = t, level[b.depth[t]]++;
    float prob[AMOE_MAX_NODES * KK];
    static double sc[AMOE_VSCRATCH(EX, AMOE_MAX_NODES)], run[2][2 + 2 * AMOE_MAX_NODES];
    static int isc[AMOE_VISCRATCH(EX, AMOE_MAX_NODES)];
    memset(run, 0, sizeof run);
    for (int l = 0; l < b.layers; l++, layers++) {
      for (int t = 0; t < b.n; t++) amoe_router_probs_top(&b, l, t, 0, KK, prob + t * KK);
      amoe_cost_pass_ctx pc;
      amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &s.model, .hw = &s.hw, .engine = &s.engine, .tokens = b.n,
                                                  .depth = 5, .context = 10});
      const amoe_policy_row row = marginal_row("marginal", 0.7);
      uint8_t S[2][EX];
      for (int v = 0; v < 2; v++) {
        amoe_fast.erfc_n = v ? vec : NULL;
        amoe_vctx c = {.b = &b, .layer = l, .k = KK, .experts = EX, .router = 0, .nodes = nodes, .nn = b.n,
                       .level_count = level, .commitment = p, .commitment_n = 6, .row = &row, .prob = prob,
                       .scratch = sc, .iscratch = isc, .mass = mass, .cost = &pc, .deviation = run[v],
                       .kappa = AMOE_DEFAULT_KAPPA, .margin_min = AMOE_DEFAULT_MARGIN_MIN};
        amoe_verifier_table[row.verifier].select(&c, S[v]);
      }
      differ += memcmp(S[0], S[1], EX) != 0;
      for (int q = 0; q < 2; q++) {
        const double d = fabs(run[0][q] - run[1][q]) / (fabs(run[0][q]) > 1e-300 ? fabs(run[0][q]) : 1);
        worst_dev = d > worst_dev ? d : worst_dev;
      }
    }
  }
  amoe_fast.erfc_n = vec;
  CHECK(layers >= 20 && differ == 0 && worst_dev < 1e-12,
        "marginal with the vector erfc: %d of %d selections differ, predictions %.3g apart", differ, layers, worst_dev);
  amoe_block_free(&b);
  amoe_gen_close(g);
}

int main(void) {
  guarantees();
  erfc_fast();
  predictor_two_nodes();
  hand_worked();
  return check_done();
}
