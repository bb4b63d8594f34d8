/* Verifier policies on a hand-made block whose answer is worked out below,
 * then properties over many generated blocks. */
#include <math.h>
#include <string.h>

#include "accept.h"
#include "check.h"
#include "cost.h"
#include "gen.h"
#include "policy.h"
#include "fast.h"
#include "x86.h"
#include "route.h"
#include "rng.h"

/* §7's constants for the verifiers that predict deviation (marginal) */
#define KAPPA AMOE_DEFAULT_KAPPA
#define MARGIN_MIN AMOE_DEFAULT_MARGIN_MIN

#define E 10
#define K 2

/* Node t routes to experts a (logit 0) and b (logit za); the rest -1e4. */
/* A small model on round hardware for the draft tests: layers × experts,
 * top-k, every cost term plain. */
static void tiny_spec(amoe_spec *sp, int layers, int experts, int k) {
  memset(sp, 0, sizeof *sp);
  sp->model.layers = sp->model.moe_layers = layers;
  sp->model.experts = experts;
  sp->model.top_k = k;
  sp->model.hidden = 64;
  sp->model.moe_intermediate = 64;
  sp->hw.hbm_bw = 1e12;
  sp->hw.h2d_bw = 1e10;
  sp->hw.peak_flops = 1e14;
  sp->hw.moe_eta = 1;
}

static void node(amoe_block *b, int t, int parent, int acc, int a, int bb, float zb) {
  float z[E];
  for (int x = 0; x < E; x++) z[x] = -1e4f;
  z[a] = 0;
  z[bb] = zb;
  b->parent[t] = parent;
  b->logp[t] = -0.1f;
  b->score[t] = -0.1f * t;
  b->accepted[t] = (uint8_t)acc;
  amoe_block_set_full(b, 0, t, z);
}

static int set_eq(const uint8_t *S, const int *want, int n) {
  int cnt = 0;
  for (int x = 0; x < E; x++) cnt += S[x];
  if (cnt != n) return 0;
  for (int i = 0; i < n; i++)
    if (!S[want[i]]) return 0;
  return 1;
}

/* A row for verifier v at its defaults, each required parameter at its
 * example, and budget B where it takes one (B > 0). */
static amoe_policy_row row_for(int v, double budget) {
  amoe_policy_row r;
  amoe_policy_init_examples(&r, 0, v);
  if (budget > 0) amoe_policy_set(&r, "budget", budget);
  return r;
}

/* Every required parameter has an example within its range, so the loops
 * above and `acceptmoe policies` can give a row a working value. */
static void examples_in_range(void) {
  for (int w = 0; w < 2; w++) {
    const int n = w ? amoe_verifier_rows() : amoe_draft_rows();
    for (int i = 0; i < n; i++) {
      const amoe_param_def *p = w ? amoe_verifier_table[i].params : amoe_draft_table[i].params;
      for (int j = 0; j < AMOE_MAX_PARAMS && p[j].key; j++)
        CHECK(!isnan(p[j].def) || (p[j].example >= p[j].min && p[j].example <= p[j].max && p[j].example > 0),
              "%s: required %s has no example in %g..%g (%g)", w ? amoe_verifier_table[i].name : amoe_draft_table[i].name,
              p[j].key, p[j].min, p[j].max, p[j].example);
    }
  }
}

/* Every row says what it does: `acceptmoe policies` and the generated
 * tables of README.md and docs/spec.md print it. */
static void rows_described(void) {
  for (int w = 0; w < 2; w++) {
    const int n = w ? amoe_verifier_rows() : amoe_draft_rows();
    for (int i = 0; i < n; i++) {
      const char *d = w ? amoe_verifier_table[i].description : amoe_draft_table[i].description;
      CHECK(d && d[0], "%s %s has no description", w ? "verifier" : "draft",
            w ? amoe_verifier_table[i].name : amoe_draft_table[i].name);
    }
  }
}

static void select_with(const amoe_verifier_def *v, const amoe_block *b, const amoe_policy_row *row,
                        const uint8_t *resident, uint8_t *S) {
  int nodes[4] = {0, 1, 2, 3}, level[8] = {1, 2, 1};
  double commitment[3] = {1.0, 0.5, 0.25}, scratch[AMOE_VSCRATCH(E, 4)];
  int iscratch[AMOE_VISCRATCH(E, 4)];
  float prob[4 * E];
  for (int i = 0; i < 4; i++) amoe_router_probs_top(b, 0, i, AMOE_ROUTER_SOFTMAX, K, prob + i * K);
  amoe_vctx c = {b, 0, K, E, AMOE_ROUTER_SOFTMAX, nodes, 4, level, commitment, 3, resident, row, prob, scratch,
                 iscratch, NULL, NULL, NULL, NULL, KAPPA, MARGIN_MIN, NULL};
  v->select(&c, S);
}

static void hand_block(void) {
  amoe_block b;
  amoe_block_init(&b, 1, E, E);
  amoe_err e;
  amoe_block_reserve(&b, 4, &e);
  float l9 = -logf(9.0f); /* r = 0.9 / 0.1 */
  node(&b, 0, -1, 1, 0, 1, 0.0f); /* root: anchors {0, 1} */
  node(&b, 1, 0, 1, 2, 3, l9);    /* depth 1, on the accepted path */
  node(&b, 2, 0, 0, 2, 4, l9);    /* depth 1 */
  node(&b, 3, 1, 1, 2, 5, l9);    /* depth 2, accepted */
  CHECK(amoe_block_finish(&b, AMOE_CHECK_ALL, &e) == AMOE_OK, "%s", e.msg);
  amoe_policy_row row = row_for(amoe_verifier_find("acceptmoe"), 0);
  uint8_t S[E];
  /* α = sqrt(p̂_d)/sqrt(N_d) = 0.5 for nodes 1, 2 (p̂ 0.5, N 2) and node 3 (p̂ 0.25, N 1).
   * u2 = 3·0.5·0.9 = 1.35; u3 = u4 = u5 = 0.5·0.1 = 0.05.
   * q = (0.9, 1/30, 1/30, 1/30): H = 0.4349, exp(H) = 1.545, n_er = 2:
   * expert 2 and, of the tied 3/4/5, the lowest id 3. */
  const amoe_verifier_def *am = &amoe_verifier_table[amoe_verifier_find("acceptmoe")];
  select_with(am, &b, &row, NULL, S);
  int want[] = {0, 1, 2, 3};
  CHECK(set_eq(S, want, 4), "acceptmoe resident: S = {0,1,2,3}");
  /* Pruning with experts 0, 1, 2 resident: C = {3}, v3 = 1, a(S) = 2 (4 and 5 displaced): delete 3. */
  uint8_t res[E] = {1, 1, 1};
  select_with(am, &b, &row, res, S);
  int want2[] = {0, 1, 2};
  CHECK(set_eq(S, want2, 3), "pruning deletes the nonresident 3");
  /* With only the anchors resident: C = (3: u 0.05, v 1), (2: u 1.35, v 3); a = 2:
   * delete 3 (1 <= 2), stop at 2 (1 + 3 > 2). */
  uint8_t res2[E] = {1, 1};
  select_with(am, &b, &row, res2, S);
  CHECK(set_eq(S, want2, 3), "pruning stops at a(S)");
  /* Every expert resident: no pruning. */
  uint8_t all[E];
  memset(all, 1, E);
  select_with(am, &b, &row, all, S);
  CHECK(set_eq(S, want, 4), "all resident: never prunes");
  /* moe-spec B=3: mass e2 = 2.7, e0 = e1 = 0.5, others 0.1 -> {0, 1, 2} */
  row = row_for(amoe_verifier_find("moe-spec"), 3);
  select_with(&amoe_verifier_table[amoe_verifier_find("moe-spec")], &b, &row, NULL, S);
  CHECK(set_eq(S, want2, 3), "moe-spec top-3 by mass");
  /* acceptmoe-fix B=3: u0 = u1 = 0.5 (root α = 1), u2 = 1.35 -> {0, 1, 2} */
  row = row_for(amoe_verifier_find("acceptmoe-fix"), 3);
  select_with(&amoe_verifier_table[amoe_verifier_find("acceptmoe-fix")], &b, &row, NULL, S);
  CHECK(set_eq(S, want2, 3), "acceptmoe-fix top-3 by utility");
  /* oracle: accepted path 0 -> 1 -> 3: {0,1} ∪ {2,3} ∪ {2,5} */
  select_with(&amoe_verifier_table[amoe_verifier_find("oracle")], &b, &row, NULL, S);
  int want3[] = {0, 1, 2, 3, 5};
  CHECK(set_eq(S, want3, 5), "oracle = union over the accepted path");
  /* constrained routing of node 2 inside {0,1,2,3}: 2, then the best stored in S (0, lower id of the -1e4 ties) */
  uint8_t S4[E] = {1, 1, 1, 1};
  uint16_t out[K + 1];
  CHECK(amoe_route_constrained(&b, 0, 2, K, S4, out) == K && out[0] == 2 && out[1] == 0, "constrained route");
  amoe_block_free(&b);
}

static void properties(void) {
  amoe_gen_params p = {0};
  p.seed = 9;
  p.layers = 3;
  p.experts = 32;
  p.top_k = 4;
  p.m = 16;
  p.depth = 4;
  p.branch = 4;
  p.nodes = 20;
  p.candidates = 40;
  p.tau = 2.5;
  p.temperature = 0.8;
  p.locality = 0.5;
  p.layer_correlation = 0.5;
  p.skew = 0.6;
  p.noise = 1.0;
  p.tokens_per_request = 100;
  amoe_gen *g;
  amoe_err e;
  CHECK(amoe_gen_open(&g, &p, &e) == AMOE_OK, "%s", e.msg);
  amoe_block b;
  amoe_block_init(&b, 3, 32, 16);
  amoe_rng r;
  amoe_rng_seed(&r, 4, 4, 4);
  int bad = 0, checked = 0;
  for (int req = 0; req < 10; req++) {
    amoe_gen_begin_request(g, (uint32_t)req);
    while (amoe_gen_next(g, &b, &e) == AMOE_OK) {
      int nodes[AMOE_MAX_NODES], nn = 0, level[AMOE_MAX_DEPTH * 4] = {0};
      amoe_policy_row row = row_for(0, 0);
      static char scratch[1 << 20];
      amoe_dctx dc = {.b = &b, .row = &row, .nodes = p.nodes, .scratch = scratch};
      nn = amoe_draft_eagle(&dc, nodes);
      { /* draft properties: ecospec, ecospec-global and evict give
         * connected trees within the budget; evict keeps a prefix of
         * EAGLE's selection */
        static amoe_spec sp;
        tiny_spec(&sp, 3, 32, 4);
        sp.workload.seed = 9;
        sp.workload.nodes = p.nodes;
        amoe_policy_row er, eg;
        amoe_policy_init(&er, amoe_draft_find("ecospec"), 0);
        amoe_policy_init(&eg, amoe_draft_find("ecospec-global"), 0);
        amoe_policy_set(&er, "predictor_accuracy", 0.7);
        amoe_dctx ec = {.b = &b, .spec = &sp, .row = &er, .nodes = p.nodes, .scratch = scratch};
        int o2[AMOE_MAX_NODES], n2;
        for (int pass = 0; pass < 3; pass++) { /* a subtree from the root within the budget */
          ec.row = pass == 1 ? &eg : &er;
          n2 = pass == 2 ? amoe_draft_evict(&ec, o2) : amoe_draft_ecospec(&ec, o2);
          if (pass == 1) n2 = amoe_draft_ecospec_global(&ec, o2);
          bad += n2 < 1 || n2 > p.nodes || o2[0] != 0;
          uint8_t in[AMOE_MAX_NODES] = {0};
          for (int i = 0; i < n2; i++) in[o2[i]] = 1;
          for (int i = 1; i < n2; i++) bad += !in[b.parent[o2[i]]] || o2[i] <= o2[i - 1];
          if (pass == 2) { /* a subset of eagle's choice */
            uint8_t ine[AMOE_MAX_NODES] = {0};
            for (int i = 0; i < nn; i++) ine[nodes[i]] = 1;
            for (int i = 0; i < n2; i++) bad += !ine[o2[i]];
          }
        }
        checked++;
      }
      for (int i = 0; i < nn; i++) level[b.depth[nodes[i]]]++;
      double commitment[8] = {1, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.01}, sc[AMOE_VSCRATCH(32, AMOE_MAX_NODES)];
      int isc[AMOE_VISCRATCH(32, AMOE_MAX_NODES)];
      float prob[AMOE_MAX_NODES * 16];
      uint8_t res[32], all[32], U[32], S[32], S2[32];
      memset(all, 1, 32);
      for (int x = 0; x < 32; x++) res[x] = amoe_rng_unif(&r) < 0.5;
      for (int l = 0; l < 3; l++) {
        for (int i = 0; i < nn; i++) amoe_router_probs_top(&b, l, nodes[i], 0, 4, prob + nodes[i] * 4);
        memset(U, 0, 32);
        for (int i = 0; i < nn; i++)
          for (int j = 0; j < 4; j++) U[amoe_block_ids(&b, l, nodes[i])[j]] = 1;
        for (int v = 0; v < amoe_verifier_rows(); v++) {
          const amoe_verifier_def *vd = &amoe_verifier_table[v];
          const amoe_policy_row vrow = row_for(v, 8);
          amoe_vctx c = {&b, l, 4, 32, 0, nodes, nn, level, commitment, 8, res, &vrow, prob, sc, isc, NULL, NULL, NULL, NULL, KAPPA, MARGIN_MIN, NULL};
          vd->select(&c, S);
          int size = 0;
          for (int x = 0; x < 32; x++) size += S[x];
          if (size < 4) bad++;
          for (int i = 0; i < nn; i++) { /* executed ⊆ S, k experts each */
            uint16_t out[4 + 1];
            int got = amoe_route_constrained(&b, l, nodes[i], 4, S, out);
            if (got != 4) bad++;
            for (int j = 0; j < got; j++) bad += !S[out[j]];
          }
          if (!strcmp(vd->name, "natural")) bad += size != 32;
          if (!strcmp(vd->name, "oracle"))
            for (int x = 0; x < 32; x++) bad += S[x] && !U[x];
          if (!strcmp(vd->name, "acceptmoe")) {
            const uint16_t *root = amoe_block_ids(&b, l, 0);
            for (int j = 0; j < 4; j++) bad += !S[root[j]]; /* anchors kept */
            amoe_vctx c0 = c, c1 = c;
            c0.resident = NULL;
            c1.resident = all;
            vd->select(&c0, S);
            vd->select(&c1, S2);
            bad += memcmp(S, S2, 32) != 0; /* all resident = no pruning */
          }
          checked++;
        }
      }
    }
  }
  CHECK(checked > 500 && bad == 0, "%d violations over %d selections", bad, checked);
  amoe_block_free(&b);
  amoe_gen_close(g);
}

/* The router's e^x step by step, as plain scalar code: the library's
 * (vectorised, possibly AVX2) router probabilities must equal it to the bit. */
static float plain_exp(float x0) {
  volatile float x = x0 < -86.0f ? -86.0f : (x0 > 88.0f ? 88.0f : x0);
  float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  float r = (x - n * 0.693145752f) - n * 1.42860677e-06f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits;
  memcpy(&bits, &p, 4);
  bits += (int32_t)n * (1 << 23);
  memcpy(&p, &bits, 4);
  return x0 < -86.0f ? 0.0f : p;
}

static void router_probabilities_m(int m) {
  amoe_rng r;
  amoe_rng_seed(&r, 3, 1, 4);
  amoe_block b;
  amoe_err e;
  amoe_block_init(&b, 1, 64, m);
  CHECK(amoe_block_reserve(&b, 1, &e) == AMOE_OK, "%s", e.msg);
  int same = 1;
  double worst = 0;
  for (int trial = 0; trial < 2000; trial++) {
    float z[64];
    const double scale = trial % 11 == 0 ? 3000 : trial % 7 + 0.5; /* some beyond exp's clamps */
    for (int x = 0; x < 64; x++) z[x] = (float)(amoe_rng_normal(&r) * scale);
    if (trial % 5 == 0) z[trial % 64] = -1e30f; /* a masked expert */
    amoe_block_set_full(&b, 0, 0, z);
    for (int router = 0; router < 4; router++)
      for (int k = 3; k <= 8; k += 5) {
        float got[64], want[64], zf[64];
        amoe_router_probs(&b, 0, 0, router, k, got);
        for (int j = 0; j < m; j++) zf[j] = amoe_f16_to_f32(b.logits[j]);
        float inv;
        if (router == AMOE_ROUTER_SIGMOID_NORM) {
          for (int j = 0; j < m; j++) want[j] = 1.0f / (1.0f + plain_exp(-zf[j]));
          inv = 1.0f;
        } else {
          float s4[4] = {0, 0, 0, 0};
          for (int j = 0; j < m; j++) want[j] = plain_exp(zf[j] - zf[0]);
          int j = 0;
          for (; j + 4 <= m; j += 4)
            for (int q = 0; q < 4; q++) s4[q] += want[j + q];
          for (; j < m; j++) s4[0] += want[j];
          inv = 1.0f / ((s4[0] + s4[1]) + (s4[2] + s4[3]));
        }
        if (router != AMOE_ROUTER_SOFTMAX) { /* the normalising kinds: over the top-k, in order */
          float sk = 0;
          for (int j = 0; j < k; j++) sk += want[j];
          inv = 1.0f / sk;
        }
        for (int j = 0; j < m; j++) want[j] *= inv;
        /* and the whole is the kind's weight to float accuracy */
        double sum = 0;
        for (int j = 0; j < (router == AMOE_ROUTER_SOFTMAX ? m : k); j++)
          sum += router == AMOE_ROUTER_SIGMOID_NORM ? 1.0 / (1.0 + exp(-(double)zf[j])) : exp((double)zf[j] - zf[0]);
        for (int j = 0; j < m; j++) {
          const double ref = (router == AMOE_ROUTER_SIGMOID_NORM ? 1.0 / (1.0 + exp(-(double)zf[j]))
                                                                 : exp((double)zf[j] - zf[0])) / sum;
          if (ref > 1e-30 && sum < 1e30) worst = fmax(worst, fabs(got[j] - ref) / ref);
        }
        same &= !memcmp(got, want, (size_t)m * sizeof(float));
        float top[8]; /* the top-k shortcut: the same first k */
        amoe_router_probs_top(&b, 0, 0, router, k, top);
        same &= !memcmp(top, want, (size_t)k * sizeof(float));
      }
  }
  CHECK(same, "m=%d: router probabilities differ from the plain scalar computation", m);
  CHECK(worst < 2e-6, "m=%d: softmax relative error %.3g", m, worst);
  amoe_block_free(&b);
}

/* Each router kind's weights worked by hand: logits 2, 1, 0, -1, -2, -3 over
 * six experts, top-2. softmax: e^z / Σ of all six (Σ e^(z-2) = 1.578055);
 * the softmax kinds renormalised: e^z / (e^2 + e^1); sigmoid: σ(z) / (σ(2) + σ(1)). */
static void router_kinds_by_hand(void) {
  amoe_block b;
  amoe_err e;
  amoe_block_init(&b, 1, 6, 6);
  CHECK(amoe_block_reserve(&b, 1, &e) == AMOE_OK, "%s", e.msg);
  const float z[6] = {2, 1, 0, -1, -2, -3};
  amoe_block_set_full(&b, 0, 0, z);
  static const struct {
    int router;
    double w[3];
  } want[] = {{AMOE_ROUTER_SOFTMAX, {0.6336913, 0.2331220, 0.0857608}},
              {AMOE_ROUTER_SOFTMAX_NORM, {0.7310586, 0.2689414, 0.0989380}},
              {AMOE_ROUTER_SOFTMAX_TOPK, {0.7310586, 0.2689414, 0.0989380}},
              {AMOE_ROUTER_SIGMOID_NORM, {0.5464491, 0.4535509, 0.3102015}}};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    float got[6], top[2];
    amoe_router_probs(&b, 0, 0, want[i].router, 2, got);
    amoe_router_probs_top(&b, 0, 0, want[i].router, 2, top);
    for (int j = 0; j < 3; j++)
      CHECK(fabs(got[j] - want[i].w[j]) < 2e-6, "router %s entry %d: weight %.7f, by hand %.7f",
            amoe_router_names[want[i].router], j, got[j], want[i].w[j]);
    CHECK(top[0] == got[0] && top[1] == got[1], "router %s: the top-k shortcut differs",
          amoe_router_names[want[i].router]);
  }
  amoe_block_free(&b);
}

static void router_probabilities(void) {
  /* m = 32: the vector path where there is one; 37: no vector width */
  for (int m = 32; m <= 37; m += 5) router_probabilities_m(m);
}

/* top_by_value against a plain ranking, with many ties and negatives;
 * effective_rank against libm. */
static void ranking_helpers(void) {
  amoe_rng r;
  amoe_rng_seed(&r, 9, 9, 9);
  int ok = 1;
  for (int trial = 0; trial < 3000 && ok; trial++) {
    const int n = 1 + (int)(amoe_rng_unif(&r) * 200);
    double v[200];
    uint8_t cand[200], S[200];
    for (int e = 0; e < n; e++) {
      v[e] = (double)((int)(amoe_rng_unif(&r) * 12) - 3) * (trial % 3 ? 0.25 : 1e-3); /* ties */
      cand[e] = trial % 4 ? amoe_rng_unif(&r) < 0.8 : 1;
    }
    const int count = (int)(amoe_rng_unif(&r) * (n + 2));
    memset(S, 0, (size_t)n);
    amoe_top_by_value(v, trial % 4 ? cand : NULL, n, count, S);
    for (int e = 0; e < n && ok; e++) {
      int before = 0; /* candidates ranked ahead of e */
      for (int f = 0; f < n; f++) before += cand[f] && (v[f] > v[e] || (v[f] == v[e] && f < e));
      ok = S[e] == (cand[e] && before < count);
      if (!ok) fprintf(stderr, "trial %d: expert %d value %g rank %d count %d got %d\n", trial, e, v[e], before, count, S[e]);
    }
  }
  CHECK(ok, "top_by_value disagrees with a plain ranking");
  /* the vector version (where this CPU has it) and the portable one agree */
  int same = 1;
  for (int trial = 0; trial < 3000; trial++) {
    const int n = 1 + (int)(amoe_rng_unif(&r) * 300);
    double v[300];
    uint8_t cand[300], S1[300], S2[300];
    for (int e = 0; e < n; e++) {
      const double x = amoe_rng_unif(&r);
      switch (trial % 4) { /* ties and signs; utilities' spread; one digit shared by many keys */
      case 0: v[e] = amoe_rng_normal(&r); break;
      case 1: v[e] = (double)((int)(x * 9) - 2); break;
      case 2: v[e] = exp(-12 * x); break;
      default: v[e] = x < 0.7 ? 1.0 : 1.0 + (double)(int)(x * 64) * 0x1p-40; break;
      }
      cand[e] = amoe_rng_unif(&r) < 0.85;
    }
    const int count = (int)(amoe_rng_unif(&r) * (n + 2));
    memset(S1, 0, (size_t)n);
    memset(S2, 0, (size_t)n);
    amoe_top_by_value(v, trial % 3 ? cand : NULL, n, count, S1);
    amoe_top_by_value_generic(v, trial % 3 ? cand : NULL, n, count, S2);
    same &= !memcmp(S1, S2, (size_t)n);
  }
  CHECK(same, "vector and portable top_by_value differ");
  double worst = 0;
  for (int trial = 0; trial < 2000; trial++) {
    const int n = 1 + trial % 150;
    double w[150], sc[150], H = 0, Z = 0;
    for (int e = 0; e < n; e++) w[e] = amoe_rng_unif(&r) < 0.3 ? 0 : exp(amoe_rng_normal(&r) * (1 + trial % 9));
    for (int e = 0; e < n; e++) Z += w[e];
    for (int e = 0; e < n; e++)
      if (w[e] > 0) H -= w[e] / Z * log(w[e] / Z);
    const double got = amoe_effective_rank(w, NULL, n, sc), want = Z > 0 ? exp(H) : 0;
    worst = fmax(worst, want > 0 ? fabs(got - want) / want : got);
  }
  CHECK(worst < 1e-12, "effective rank relative error %.3g", worst);
  double flat[10] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, sc[10];
  CHECK(fabs(amoe_effective_rank(flat, NULL, 10, sc) - 10) < 1e-12, "uniform over 10: rank 10");
  /* ceil(rank - eps) is a long-double reference's, also where exp(H) sits
   * next to an integer: (nearly) uniform weights, one weight nudged by 1e-4
   * to 1e-15 */
  int agree = 1, near = 0;
  for (int trial = 0; trial < 40000 && agree; trial++) {
    const int c = 1 + (int)(amoe_rng_unif(&r) * 300);
    double q[300], scr[300];
    for (int i = 0; i < c; i++) {
      const double x = amoe_rng_unif(&r);
      q[i] = trial % 3 == 0 ? exp(-12 * x) : trial % 3 == 1 ? exp(-40 * x * x) + 1e-300 : 1.0;
    }
    if (trial % 3 == 2) q[0] += (amoe_rng_unif(&r) - 0.5) * pow(10, -4 - (trial / 3) % 12);
    /* an independent reference: exp(entropy) in long double, straight from q */
    long double z = 0, h = 0;
    for (int i = 0; i < c; i++) z += q[i];
    for (int i = 0; i < c; i++) {
      const long double p = q[i] / z;
      if (p > 0) h -= p * logl(p);
    }
    const long double rank = expl(h), t = rank - 1e-9L;
    const int want = rank > 0 ? (int)ceill(t) : 0, got = amoe_effective_rank_ceil(q, c, 1e-9, scr);
    near += fabsl(rank - roundl(rank)) < 1e-6L;
    if (fabsl(t - roundl(t)) < 1e-12L) continue; /* on the threshold itself: either side is right */
    agree = got == want;
    if (!agree) fprintf(stderr, "trial %d: c %d rank %.20Lg: ceil %d, got %d\n", trial, c, rank, want, got);
  }
  CHECK(agree && near > 5000, "ceil of the effective rank differs from a long-double reference (%d near integers)", near);
  CHECK(amoe_effective_rank_ceil(flat, 0, 1e-9, sc) == 0 && amoe_effective_rank_ceil(flat, 10, 1e-9, sc) == 10,
        "ceil of the rank: none, and uniform over 10");
}

/* What a hand-made trace can still hold after the reader's checks (a valid
 * tree, ids in range): logits of any bits (NaN, ±inf, -0), pairs out of
 * order, an expert stored twice. Every policy must stay inside its arrays:
 * results may be meaningless, a crash is not allowed. (Run under valgrind
 * by hand: clean.) */
static void hostile_blocks(void) {
  amoe_rng r;
  amoe_rng_seed(&r, 66, 6, 6);
  const int L = 2, EX = 24, M = 8, KK = 3;
  int bad = 0;
  for (int trial = 0; trial < 300; trial++) {
    amoe_block b;
    amoe_err e;
    amoe_block_init(&b, L, EX, M);
    const int n = 1 + (int)(amoe_rng_unif(&r) * 20);
    CHECK(amoe_block_reserve(&b, n, &e) == AMOE_OK, "%s", e.msg);
    for (int t = 0; t < n; t++) {
      b.parent[t] = t ? (int)(amoe_rng_unif(&r) * t) : -1;
      b.logp[t] = -1;
      b.score[t] = (float)-t;
      b.accepted[t] = t == 0;
    }
    for (size_t i = 0; i < (size_t)L * n * M; i++) {
      b.ids[i] = (uint16_t)(amoe_rng_unif(&r) * EX);
      b.logits[i] = (amoe_f16)(amoe_rng_next(&r) & 0xffff);
    }
    CHECK(amoe_block_finish(&b, AMOE_CHECK_TREE, &e) == AMOE_OK, "%s", e.msg);
    int nodes[32], level[256] = {0};
    for (int t = 0; t < n; t++) nodes[t] = t, level[b.depth[t]]++;
    float prob[32 * M];
    double commitment[4] = {1, 0.5, 0.3, 0.1}, sc[AMOE_VSCRATCH(EX, 32)];
    int isc[AMOE_VISCRATCH(EX, 32)];
    uint8_t res[EX], S[EX];
    for (int x = 0; x < EX; x++) res[x] = amoe_rng_unif(&r) < 0.5;
    for (int l = 0; l < L; l++) {
      for (int t = 0; t < n; t++) amoe_router_probs_top(&b, l, t, trial & 1, KK, prob + t * KK);
      for (int v = 0; v < amoe_verifier_rows(); v++) {
        const amoe_policy_row row = row_for(v, 5);
        amoe_vctx c = {&b, l, KK, EX, trial & 1, nodes, n, level, commitment, 4, trial & 2 ? res : NULL, &row, prob,
                       sc, isc, NULL, NULL, NULL, NULL, KAPPA, MARGIN_MIN, NULL};
        memset(S, 0, EX);
        amoe_verifier_table[v].select(&c, S);
        for (int x = 0; x < EX; x++) bad += S[x] > 1;
        for (int t = 0; t < n; t++) {
          uint16_t out[KK + 1];
          int got = amoe_route_constrained(&b, l, t, KK, S, out);
          bad += got < 0 || got > KK;
          for (int j = 0; j < got; j++) bad += out[j] >= EX;
        }
      }
    }
    amoe_block_free(&b);
  }
  CHECK(bad == 0, "%d out-of-bounds results on hostile blocks", bad);
}

/* acceptmoe steps 1-5 with top-8 routing (the vector utility path on AVX2
 * machines) against the same steps written plainly here, on generated
 * 64-expert blocks: the same S, expert for expert. */
static void acceptmoe_top8(void) {
  const amoe_gen_params p = {.seed = 21, .layers = 4, .experts = 64, .top_k = 8, .m = 32, .depth = 5,
                             .branch = 8, .nodes = 48, .candidates = 64, .tau = 3.5, .temperature = 0.8,
                             .locality = 0.3, .layer_correlation = 0.5, .skew = 0.45, .noise = 1.0,
                             .tokens_per_request = 60};
  amoe_gen *g;
  amoe_err e;
  CHECK(amoe_gen_open(&g, &p, &e) == AMOE_OK, "%s", e.msg);
  amoe_block b;
  amoe_block_init(&b, 4, 64, 32);
  double commitment[6] = {1, 0.8, 0.6, 0.45, 0.3, 0.2};
  int same = 1, layers = 0, vec_same = 1, vec_checked = 0;
  for (uint32_t req = 0; req < 4; req++) {
    amoe_gen_begin_request(g, req);
    while (amoe_gen_next(g, &b, &e) == AMOE_OK) {
      int nodes[AMOE_MAX_NODES], level[256] = {0};
      static int isc[AMOE_VISCRATCH(64, AMOE_MAX_NODES)];
      for (int t = 0; t < b.n; t++) nodes[t] = t, level[b.depth[t]]++;
      static float prob[AMOE_MAX_NODES * 32];
      static double sc[AMOE_VSCRATCH(64, AMOE_MAX_NODES)];
      double u[64], tmp[64];
      uint8_t S[64], R[64], rest[64];
      const amoe_policy_row row = row_for(amoe_verifier_find("acceptmoe"), 0);
      for (int l = 0; l < 4; l++, layers++) {
        for (int t = 0; t < b.n; t++) amoe_router_probs_top(&b, l, t, 0, 8, prob + t * 8);
        amoe_vctx c = {&b, l, 8, 64, 0, nodes, b.n, level, commitment, 6, NULL, &row, prob, sc, isc, NULL, NULL, NULL, NULL, KAPPA, MARGIN_MIN, NULL};
        memset(S, 0, 64);
        amoe_verifier_acceptmoe(&c, S);
        memset(u, 0, sizeof u);
        for (int t = 0; t < b.n; t++) {
          const int d = b.depth[t];
          const double pd = d == 0 ? 1.0 : d < 6 ? commitment[d] : 0.0;
          const double alpha = pd > 0 ? sqrt(pd) / sqrt((double)level[d]) : 0;
          if (alpha <= 0) continue;
          for (int j = 0; j < 8; j++) u[amoe_block_ids(&b, l, t)[j]] += alpha * prob[t * 8 + j];
        }
        memset(R, 0, 64);
        for (int j = 0; j < 8; j++) R[amoe_block_ids(&b, l, 0)[j]] = 1;
        for (int x = 0; x < 64; x++) rest[x] = !R[x];
        const double rank = amoe_effective_rank(u, rest, 64, tmp);
        amoe_top_by_value_generic(u, rest, 64, rank > 0 ? (int)ceil(rank - 1e-9) : 0, R);
        same &= !memcmp(S, R, 64);
        { /* the utility loop and its plain twin, to the bit */
          double uv[64], ug[64];
          amoe_acceptmoe_utilities(&c, 0.5, uv);
          amoe_acceptmoe_utilities_generic(&c, 0.5, ug);
          vec_same &= !memcmp(uv, ug, sizeof uv) && !memcmp(ug, u, sizeof u);
          /* the router's probabilities and theirs */
          float pv[64 * 32], pg[64 * 32];
          for (int kind = 0; amoe_router_names[kind]; kind++) { /* every router kind; all nodes, then every third */
            int odd[AMOE_MAX_NODES], no = 0;
            for (int t = 1; t < b.n; t += 3) odd[no++] = t;
            memset(pv, 0, sizeof pv), memset(pg, 0, sizeof pg);
            amoe_router_probs_nodes(&b, l, NULL, b.n, kind, 8, pv);
            amoe_router_probs_nodes_generic(&b, l, NULL, b.n, kind, 8, pg);
            vec_same &= !memcmp(pv, pg, (size_t)b.n * 8 * sizeof *pv);
            memset(pv, 0, sizeof pv), memset(pg, 0, sizeof pg);
            amoe_router_probs_nodes(&b, l, odd, no, kind, 8, pv);
            amoe_router_probs_nodes_generic(&b, l, odd, no, kind, 8, pg);
            vec_same &= !memcmp(pv, pg, (size_t)b.n * 8 * sizeof *pv);
            for (int t = 0; t < b.n; t += 7) {
              amoe_router_probs(&b, l, t, kind, 8, pv);
              amoe_router_probs_generic(&b, l, t, kind, 8, pg);
              vec_same &= !memcmp(pv, pg, (size_t)b.m * sizeof *pv);
            }
          }
        }
#ifdef AMOE_X86_PATHS
        /* every verifier with the vector paths (arch/x86) on and off */
        const int had = amoe_x86_avx2;
        if (had) { /* the utility loop itself, to the bit */
          double ad[6], uv[64] = {0};
          for (int d = 0; d < 6; d++) {
            const double pd = d == 0 ? 1.0 : commitment[d];
            ad[d] = pd > 0 && level[d] > 0 ? sqrt(pd) / sqrt((double)level[d]) : 0;
          }
          amoe_x86_acceptmoe_scatter8(uv, amoe_block_ids(&b, l, 0), b.m, prob, nodes, b.n, b.depth, ad, 6);
          vec_same &= !memcmp(uv, u, sizeof u);
        }
        for (int v = 0; v < amoe_verifier_rows() && had; v++) {
          const amoe_policy_row vr = row_for(v, 20);
          amoe_vctx cv = c;
          cv.row = &vr;
          uint8_t S1[64] = {0}, S0[64] = {0};
          amoe_verifier_table[v].select(&cv, S1);
          const amoe_fast_paths lent = amoe_fast; /* the plain code alone: the table emptied */
          memset(&amoe_fast, 0, sizeof amoe_fast);
          amoe_verifier_table[v].select(&cv, S0);
          amoe_fast = lent;
          vec_same &= !memcmp(S1, S0, 64);
          vec_checked++;
        }
#endif
      }
    }
  }
  CHECK(same && layers > 100, "acceptmoe with top-8 differs from the plain steps (%d layers)", layers);
  CHECK(vec_same, "a verifier's S differs with the vector paths off (%d checked)", vec_checked);
  if (!vec_checked) printf("(no AVX2 here: the vector paths were not compared)\n");
  amoe_block_free(&b);
  amoe_gen_close(g);
}

/* ecospec on a tree worked by hand: one layer, 8 experts, top-2, a
 * predictor that is always right, ε = 0.1 of one expert's time c.
 *   node (parent) experts  P      ΔCost at first   S·c
 *   0 root        {0,1}
 *   1 (0)         {0,1}    0.3    0 (covered)      3
 *   2 (0)         {2,3}    0.6    2c               0.286
 *   3 (0)         {0,2}    0.5    c                0.455
 *   4 (1)         {1,0}    0.2    0                2 (once 1 is in)
 *   5 (0)         {4,5}    0.62   2c               0.295
 * ecospec takes 1 (no expert: nearly free, before the likelier 2), then 4,
 * then 3; 3 brings expert 2 into the buffer, so 2 then adds only expert 3
 * (S·c = 0.6/1.1 = 0.545) and beats 5 (which it would not without the
 * buffer: 0.286 < 0.295); then 5. ecospec-global prices every node at 2c
 * and so goes by P: 5, 2, 3, 1. The stop: with 1-4 in, E[τ] = 2.6 and
 * T = T0 + 2c; node 5 (ΔCost 2c) is refused iff P5·T < 2c·2.6. */
static void ecospec_by_hand(void) {
  static amoe_spec sp;
  tiny_spec(&sp, 1, 8, 2);
  sp.hw.step_s = 1e-3; /* a pass's fixed part, so the rates run as the table says */
  sp.hw.draft_step_fixed_s = 2e-5;
  sp.workload.seed = 3;
  amoe_block b;
  amoe_err e;
  amoe_block_init(&b, 1, 8, 2);
  CHECK(amoe_block_reserve(&b, 6, &e) == AMOE_OK, "%s", e.msg);
  static const int parent[6] = {-1, 0, 0, 0, 1, 0}, ex[6][2] = {{0, 1}, {0, 1}, {2, 3}, {0, 2}, {1, 0}, {4, 5}};
  static const double P[6] = {1, 0.3, 0.6, 0.5, 0.2, 0.62};
  for (int t = 0; t < 6; t++) {
    b.parent[t] = parent[t];
    b.score[t] = (float)log(P[t]);
    b.logp[t] = 0;
    b.accepted[t] = t == 0;
    b.ids[t * 2] = (uint16_t)ex[t][0], b.ids[t * 2 + 1] = (uint16_t)ex[t][1];
    b.logits[t * 2] = amoe_f16_from_f32(1.0f), b.logits[t * 2 + 1] = amoe_f16_from_f32(0.5f);
  }
  CHECK(amoe_block_finish(&b, AMOE_CHECK_TREE, &e) == AMOE_OK, "%s", e.msg);
  static char scratch[1 << 16];
  amoe_policy_row er, eg;
  amoe_policy_init(&er, amoe_draft_find("ecospec"), 0);
  amoe_policy_init(&eg, amoe_draft_find("ecospec-global"), 0);
  amoe_policy_set(&er, "predictor_accuracy", 1);
  amoe_policy_set(&eg, "predictor_accuracy", 1);
  CHECK(er.dparam[2] == 0.1, "epsilon defaults to 0.1, not %g", er.dparam[2]);
  static const int order[5] = {1, 4, 3, 2, 5}, global[5] = {5, 2, 3, 1, 4};
  for (int w = 0; w < 2; w++)
    for (int budget = 2; budget <= 6; budget++) {
      sp.workload.nodes = budget;
      amoe_dctx c = {.b = &b, .spec = &sp, .row = w ? &eg : &er, .nodes = budget, .scratch = scratch};
      int out[6], want[6] = {0}, nw = 1;
      uint8_t in[6] = {1};
      for (int i = 0; i < budget - 1; i++) in[(w ? global : order)[i]] = 1;
      for (int t = 1; t < 6; t++)
        if (in[t]) want[nw++] = t;
      const int n = w ? amoe_draft_ecospec_global(&c, out) : amoe_draft_ecospec(&c, out);
      CHECK(n == nw && !memcmp(out, want, sizeof(int) * (size_t)n), "%s at a budget of %d: %d nodes, the %dth %d",
            w ? "ecospec-global" : "ecospec", budget, n, n > 1 ? n - 1 : 0, out[n > 1 ? n - 1 : 0]);
    }
  /* the stop, from the cost function's own c and T0 */
  amoe_cost_pass_ctx pc;
  amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = &sp.model, .hw = &sp.hw, .engine = &sp.engine,
      .parallel = &sp.parallel, .tokens = 6, .depth = sp.workload.depth});
  const amoe_layer_counts base = {2, 0, 1, 2 * amoe_cost_expert_at(pc.ec, 1)};
  const double cexp = amoe_cost_expert_marginal(&pc, &base, 1, 0);
  const double T = amoe_cost_pass_begin(&pc).total + amoe_cost_layer(&pc, &base).total + 2 * cexp;
  const double edge = 2 * cexp * 2.6 / T; /* the P5 at which adding 5 keeps the rate */
  CHECK(edge < 0.1, "the fixed part should dominate here (edge %g)", edge);
  for (int q = 0; q < 2; q++) {
    b.score[5] = (float)log(q ? 1.2 * edge : 0.8 * edge);
    sp.workload.nodes = 6;
    amoe_dctx c = {.b = &b, .spec = &sp, .row = &er, .nodes = 6, .scratch = scratch};
    int out[6];
    const int n = amoe_draft_ecospec(&c, out);
    CHECK(n == (q ? 6 : 5), "P5 %.2f of the edge: %d nodes (5 iff the stop refuses it)", q ? 1.2 : 0.8, n);
  }
  /* the predictor's forward: a dense 0.6B model, weights read once */
  const double want = fmax(2 * 0.6e9 / sp.hw.hbm_bw, 2 * 0.6e9 * 6 / sp.hw.peak_flops) + sp.hw.draft_step_fixed_s;
  CHECK(fabs(amoe_draft_ecospec_cost(&er, &sp, 6) - want) < 1e-15, "predictor cost %g, want %g",
        amoe_draft_ecospec_cost(&er, &sp, 6), want);
  amoe_block_free(&b);
}

int main(void) {
  examples_in_range();
  rows_described();
  acceptmoe_top8();
  hostile_blocks();
  ranking_helpers();
  router_probabilities();
  router_kinds_by_hand();
  hand_block();
  ecospec_by_hand();
  properties();
  return check_done();
}
