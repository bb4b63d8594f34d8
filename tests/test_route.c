/* Constrained routing of a layer's nodes (route.h): a case worked out by
 * hand, and the vector version against the portable one over random blocks
 * and eligible sets of every size. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "x86.h"
#include "rng.h"
#include "route.h"

#define MAXE 256

typedef struct {
  uint8_t U[MAXE], R[MAXE + 1];
  int cnt[MAXE], rcnt[MAXE + 1];
  uint16_t route[8];
  int displaced;
} sums;

static void run(int vec, const amoe_block *b, int l, int k, const int *nodes, int nn, const uint8_t *S, int counted,
                sums *o) {
  memset(o, 0, sizeof *o);
  const amoe_route_sums ro = {o->U, counted ? o->cnt : NULL, o->rcnt, o->R, o->route};
  o->displaced = vec ? amoe_route_layer(b, l, k, nodes, nn, S, &ro) : amoe_route_layer_generic(b, l, k, nodes, nn, S, &ro);
}

/* A block of one node and one layer over 16 experts, logits 16 - e (so
 * entry j is expert j), m of them stored. */
static void one_node(amoe_block *b, int m) {
  amoe_err e;
  amoe_block_init(b, 1, 16, m);
  CHECK(amoe_block_reserve(b, 1, &e) == AMOE_OK, "%s", e.msg);
  float z[16];
  for (int x = 0; x < 16; x++) z[x] = 16.0f - (float)x;
  b->parent[0] = -1;
  b->accepted[0] = 1;
  amoe_block_set_full(b, 0, 0, z);
  CHECK(amoe_block_finish(b, AMOE_CHECK_ALL, &e) == AMOE_OK, "%s", e.msg);
}

/* One node, top-8 of 16 experts, all stored; S leaves out experts 1, 4
 * and 6 and holds 0, 2, 3, 5, 7 and 9, 12, 13. */
static void by_hand(void) {
  amoe_block b;
  one_node(&b, 16);
  const float P[8] = {0.3f, 0.2f, 0.1f, 0.1f, 0.1f, 0.1f, 0.05f, 0.05f};
  uint8_t S[16] = {0};
  const int in[] = {0, 2, 3, 5, 7, 9, 12, 13};
  for (int i = 0; i < 8; i++) S[in[i]] = 1;
  const int node0 = 0;
  for (int vec = 0; vec < 2; vec++)
    for (int counted = 0; counted < 2; counted++) {
      sums o;
      run(vec, &b, 0, 8, &node0, 1, S, counted, &o);
      /* three displaced, replaced by the three next-best inside S: 9, 12, 13 */
      CHECK(o.displaced == 3, "vec %d: %d displaced, want 3", vec, o.displaced);
      int ok = 1;
      for (int x = 0; x < 16; x++) {
        const int rep = x == 9 || x == 12 || x == 13;
        ok &= o.U[x] == (x < 8);
        ok &= counted ? o.cnt[x] == (x < 8) && o.rcnt[x] == rep : o.R[x] == rep;
      }
      CHECK(ok, "vec %d counted %d: union or replacements wrong", vec, counted);
    }
  /* their mass: 0.2 + 0.1 + 0.05 in entry order, onto what the node had */
  CHECK(amoe_route_displaced(0.0f, amoe_block_ids(&b, 0, 0), P, 8, S) == (0.0f + 0.2f) + 0.1f + 0.05f &&
            amoe_route_displaced(1.0f, amoe_block_ids(&b, 0, 0), P, 8, S) == ((1.0f + 0.2f) + 0.1f) + 0.05f,
        "displaced mass");
  /* S = {2, 14}, fewer than k: seven entries leave S, and the only
   * replacement is 14 (every expert is stored, so none comes from past m) */
  memset(S, 0, sizeof S);
  S[2] = S[14] = 1;
  for (int vec = 0; vec < 2; vec++) {
    sums o;
    run(vec, &b, 0, 8, &node0, 1, S, 0, &o);
    int ok = o.displaced == 7;
    for (int x = 0; x < 16; x++) ok &= o.R[x] == (x == 14);
    CHECK(ok, "vec %d: S smaller than k", vec);
  }
  amoe_block_free(&b);
  /* m = 8 of 16: S = {1, 3, 10, 12, 14}; the node keeps 1 and 3, and its
   * six other entries find only 10, 12 and 14, none of them stored */
  one_node(&b, 8);
  memset(S, 0, sizeof S);
  S[1] = S[3] = S[10] = S[12] = S[14] = 1;
  uint16_t out[8];
  const int got = amoe_route_constrained(&b, 0, 0, 8, S, out);
  CHECK(got == 5 && out[0] == 1 && out[1] == 3 && out[2] == 10 && out[3] == 12 && out[4] == 14,
        "past the stored m: the lowest unstored ids of S");
  for (int vec = 0; vec < 2; vec++) {
    sums o;
    run(vec, &b, 0, 8, &node0, 1, S, 0, &o);
    int ok = o.displaced == 6;
    for (int x = 0; x < 16; x++) ok &= o.R[x] == (x == 10 || x == 12 || x == 14);
    CHECK(ok, "vec %d: replacements past the stored m", vec);
  }
  amoe_block_free(&b);
}

/* Random blocks: per (E, k, m) many layers of random logits; random node
 * subsets in random order; S of every size, sometimes built around the
 * union so few entries are displaced, sometimes random so many are. */
static void vector_vs_generic(void) {
  static const int cfg[][3] = {{128, 8, 32}, {128, 8, 8}, {128, 8, 12}, {128, 8, 36}, {128, 8, 64},
                               {256, 8, 32}, {256, 8, 256}, {64, 8, 64}, {40, 8, 24}, {128, 4, 16}};
  amoe_rng r;
  amoe_rng_seed(&r, 11, 22, 33);
  int cases = 0, differ = 0, rare = 0, bad_routes = 0, natural_differ = 0;
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
    const int E = cfg[c][0], k = cfg[c][1], m = cfg[c][2], L = 6, n = 48;
    amoe_block b;
    amoe_err e;
    amoe_block_init(&b, L, E, m);
    CHECK(amoe_block_reserve(&b, n, &e) == AMOE_OK, "%s", e.msg);
    float z[MAXE];
    for (int t = 0; t < n; t++) {
      b.parent[t] = t ? (int)(amoe_rng_next(&r) % (uint64_t)t) : -1;
      b.accepted[t] = t == 0;
      for (int l = 0; l < L; l++) {
        for (int x = 0; x < E; x++) z[x] = (float)(2.0 * amoe_rng_normal(&r));
        amoe_block_set_full(&b, l, t, z);
      }
    }
    CHECK(amoe_block_finish(&b, AMOE_CHECK_ALL, &e) == AMOE_OK, "%s", e.msg);
    int nodes[64];
    uint8_t S[MAXE];
    for (int l = 0; l < L; l++) {
      for (int trial = 0; trial < 40; trial++) {
        int nn = 1 + (int)(amoe_rng_next(&r) % (uint64_t)n);
        for (int i = 0; i < n; i++) nodes[i] = i;
        for (int i = 0; i < nn; i++) { /* a random subset, in random order */
          int j = i + (int)(amoe_rng_next(&r) % (uint64_t)(n - i)), x = nodes[i];
          nodes[i] = nodes[j];
          nodes[j] = x;
        }
        const double keep = amoe_rng_unif(&r);
        memset(S, 0, sizeof S);
        if (trial & 1) { /* around the union: each natural entry kept with probability `keep` */
          for (int i = 0; i < nn; i++)
            for (int j = 0; j < m; j++)
              if (amoe_rng_unif(&r) < (j < k ? keep : keep * 0.3)) S[amoe_block_ids(&b, l, nodes[i])[j]] = 1;
        } else {
          for (int x = 0; x < E; x++) S[x] = amoe_rng_unif(&r) < keep * keep;
        }
        sums a, v;
        const int counted = trial % 4 >= 2;
        run(0, &b, l, k, nodes, nn, S, counted, &a);
        run(1, &b, l, k, nodes, nn, S, counted, &v);
        cases++;
        rare += a.displaced > 2 * nn;
        int same = a.displaced == v.displaced && !memcmp(a.U, v.U, sizeof a.U) &&
                   !memcmp(a.cnt, v.cnt, sizeof a.cnt) && !memcmp(a.rcnt, v.rcnt, (size_t)E * sizeof(int)) &&
                   !memcmp(a.R, v.R, (size_t)E);
        if (!same && differ++ < 5)
          fprintf(stderr, "E %d k %d m %d layer %d trial %d: vector and portable differ\n", E, k, m, l, trial);
        /* natural routing: the k = 8 form against the plain loop, marking
         * and counting */
        uint8_t U0[MAXE] = {0}, U1[MAXE] = {0};
        int c0[MAXE] = {0}, c1[MAXE] = {0};
        amoe_route_natural_generic(&b, l, k, nodes, nn, U0, NULL);
        amoe_route_natural(&b, l, k, nodes, nn, U1, NULL);
        amoe_route_natural_generic(&b, l, k, nodes, nn, NULL, c0);
        amoe_route_natural(&b, l, k, nodes, nn, NULL, c1);
        int ca[MAXE] = {0}, cc[MAXE] = {0}, split_differs = 0; /* and the counts split in two, summed */
        amoe_route_natural_counts2(&b, l, k, nodes, nn, ca, cc);
        for (int x = 0; x < MAXE; x++) split_differs |= ca[x] + cc[x] != c0[x];
        if ((memcmp(U0, U1, sizeof U0) || memcmp(c0, c1, sizeof c0) || split_differs) && natural_differ++ < 5)
          fprintf(stderr, "E %d k %d m %d layer %d trial %d: natural routing differs from its generic twin\n", E, k, m,
                  l, trial);
        /* the replacements are what amoe_route_constrained adds: check the
         * union of routes against U ∩ S ∪ R */
        uint8_t X[MAXE] = {0};
        for (int i = 0; i < nn; i++) {
          uint16_t out[8];
          const int got = amoe_route_constrained(&b, l, nodes[i], k, S, out);
          for (int j = 0; j < got; j++) X[out[j]] = 1;
          /* and the route itself, written out the plain way: S's stored
           * entries in logit order, then S's unstored experts by id */
          const uint16_t *id = amoe_block_ids(&b, l, nodes[i]);
          int want[MAXE], nw = 0;
          for (int j = 0; j < m; j++)
            if (S[id[j]]) want[nw++] = id[j];
          for (int x = 0; x < E; x++) {
            int stored = 0;
            for (int j = 0; j < m; j++) stored |= id[j] == x;
            if (S[x] && !stored) want[nw++] = x;
          }
          int same_route = got == (nw < k ? nw : k);
          for (int j = 0; j < got && same_route; j++) same_route = out[j] == want[j];
          if (!same_route && bad_routes++ < 5)
            fprintf(stderr, "E %d m %d layer %d trial %d node %d: constrained route differs\n", E, m, l, trial, nodes[i]);
        }
        int xs = 1;
        for (int x = 0; x < E; x++)
          xs &= X[x] == (counted ? (a.cnt[x] && S[x]) || a.rcnt[x] : (a.U[x] && S[x]) || a.R[x]);
        CHECK(xs, "E %d m %d layer %d trial %d: routed set is not (U ∩ S) ∪ R", E, m, l, trial);
      }
    }
    amoe_block_free(&b);
  }
  CHECK(differ == 0, "%d of %d cases differ", differ, cases);
  CHECK(bad_routes == 0, "%d constrained routes differ from the plain ones", bad_routes);
  CHECK(natural_differ == 0, "%d natural routings differ from the generic twin", natural_differ);
  CHECK(rare > cases / 10, "too few cases with more than two displaced entries per node (%d of %d)", rare, cases);
  if (!amoe_cpu_avx2_f16c()) printf("(no AVX2 here: the vector version was the portable one)\n");
}

int main(void) {
  by_hand();
  vector_vs_generic();
  return check_done();
}
