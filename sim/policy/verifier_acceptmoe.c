/* acceptmoe and acceptmoe-fix, exactly as docs/design.md §6 states them.
 *   α_t = p̂_{d_t}^β · N_{d_t}^{-1/2};  u_e = Σ_t α_t · r_t,e · 1[e ∈ K_t]
 *   S = K_root ∪ top-n_er(R) with n_er = ⌈exp(H(q))⌉ over the non-anchors;
 *   offload: drop the lowest-utility nonresident non-anchors while the
 *   displaced tokens they would add (v_e) fit in the displacement S already
 *   causes (a(S)) and |S| stays >= k. */
#include <math.h>
#include <string.h>

#include "clones.h"
#include "policy.h"
#include "fast.h"
#include "sort.h"

/* ascending utility, ties lower id */
static int lower_utility(const void *a, const void *b, const void *util) {
  const double *u = util;
  const int x = *(const int *)a, y = *(const int *)b;
  return u[x] < u[y] || (u[x] == u[y] && x < y);
}

/* parameter slots, in the table rows' order (policy.c) */
enum { BETA = 0 };                     /* acceptmoe: beta */
enum { FIX_BUDGET = 0, FIX_BETA = 1 }; /* acceptmoe-fix: budget, beta */

/* exp(H) is an integer for a uniform q; don't let rounding push it over. */
#define AMOE_NER_EPS 1e-9

/* The positive u[e] with anchor[e] == 0, in expert order, into pu[] with
 * their ids in pid[] (room for 8 past the count); returns the count. */
static int pack(const double *u, const uint8_t *anchor, int E, double *pu, int *pid) {
  int np = 0;
  for (int e = 0; e < E; e++) {
    pu[np] = u[e];
    pid[np] = e;
    np += !anchor[e] && u[e] > 0;
  }
  return np;
}

/* u_e over the natural top-k of every verified node. α_d is 0 from the
 * end of the commitment table on, so only depths below it are computed. */
static AMOE_CLONES void utilities_of(const amoe_vctx *c, double beta, double *u, int vec) {
  memset(u, 0, (size_t)c->experts * sizeof *u);
  double alpha_d[AMOE_MAX_DEPTH];
  const int nd = c->commitment_n < AMOE_MAX_DEPTH ? c->commitment_n : AMOE_MAX_DEPTH;
  for (int d = 0; d < nd; d++) {
    const double pd = d == 0 ? 1.0 : c->commitment[d];
    const double w = beta == 0.5 ? sqrt(pd) : pow(pd, beta); /* β = 0.5 is the default */
    const int level = c->level_count[d];
    alpha_d[d] = pd > 0 && level > 0 ? w / sqrt((double)level) : 0;
  }
  /* locals: the stores to u could otherwise alias every field read */
  const int k = c->k, m = c->b->m, nn = c->nn, *nodes = c->nodes;
  const uint8_t *depth = c->b->depth;
  const uint16_t *ids = amoe_block_ids(c->b, c->layer, 0);
  const float *prob = c->prob;
  if (vec && k == 8) {
    amoe_fast.acceptmoe_scatter8(u, ids, m, prob, nodes, nn, depth, alpha_d, nd);
    return;
  }
  for (int i = 0; i < nn; i++) {
    const int t = nodes[i], d = depth[t];
    const double alpha = d < nd ? alpha_d[d] : 0;
    if (alpha <= 0) continue;
    const uint16_t *id = ids + (size_t)t * m;
    const float *p = prob + (size_t)t * k;
    for (int j = 0; j < k; j++) u[id[j]] += alpha * p[j];
  }
}

void amoe_acceptmoe_utilities(const amoe_vctx *c, double beta, double *u) {
  utilities_of(c, beta, u, amoe_fast.acceptmoe_scatter8 != NULL);
}
void amoe_acceptmoe_utilities_generic(const amoe_vctx *c, double beta, double *u) { utilities_of(c, beta, u, 0); }

/* AcceptMoE's rule over the requests c[0..R) of a pass (R = 1: one block,
 * as published): their utilities summed, every root's top-k an anchor,
 * the displacement of every request's nodes in the residency pruning. */
static void acceptmoe_select(const amoe_vctx *c, int R, uint8_t *S) {
  const int E = c->experts, k = c->k;
  /* scratch: u, v (E each), anchor and rest (E bytes each), then pu (E,
   * and the vector packing's overrun of up to 3) */
  double *u = c->scratch, *v = c->scratch + E;
  uint8_t *anchor = (uint8_t *)(c->scratch + 2 * E), *rest = anchor + E;
  double *pu = c->scratch + 2 * E + (2 * E + 7) / 8;
  int *pid = c->iscratch;
  amoe_acceptmoe_utilities(c, c->row->vparam[BETA], u);
  for (int q = 1; q < R; q++) { /* (each request's scratch is its own) */
    double *uq = c[q].scratch;
    amoe_acceptmoe_utilities(&c[q], c->row->vparam[BETA], uq);
    for (int e = 0; e < E; e++) u[e] += uq[e];
  }
  memset(anchor, 0, (size_t)E);
  int na = 0; /* distinct anchors */
  for (int q = 0; q < R; q++) {
    const uint16_t *rid = amoe_block_ids(c[q].b, c->layer, 0);
    for (int j = 0; j < k; j++) {
      na += !anchor[rid[j]];
      anchor[rid[j]] = 1;
    }
  }
  /* the positive non-anchor utilities, packed in expert order with their
   * ids: the effective rank is over them, and the top n_er (n_er <= their
   * count) lies among them, so the selection runs on them alone */
  const int np = pack(u, anchor, E, pu, pid);
  const int ner = amoe_effective_rank_ceil(pu, np, AMOE_NER_EPS, v);
  memcpy(S, anchor, (size_t)E);
  int size = na + ner; /* the top n_er are not anchors */
  if (ner > np) { /* rounding could only just allow it: then as stated, over all of them */
    for (int e = 0; e < E; e++) rest[e] = !anchor[e];
    amoe_top_by_value(u, rest, E, ner, S);
    size = 0;
    for (int e = 0; e < E; e++) size += S[e];
  } else if (ner > 0) {
    uint8_t *mark = (uint8_t *)v; /* v is free again */
    memset(mark, 0, (size_t)np);
    amoe_top_by_value(pu, NULL, np, ner, mark);
    for (int i = 0; i < np; i++) S[pid[i]] |= mark[i];
  }
  if (size < k) {
    for (int e = 0; e < E; e++) rest[e] = !S[e];
    amoe_top_by_value(u, rest, E, k - size, S);
    size = k;
  }
  if (!c->resident) return;
  /* residency pruning */
  memset(v, 0, (size_t)E * sizeof *v);
  long a = 0;
  for (int q = 0; q < R; q++)
    for (int i = 0; i < c[q].nn; i++) {
      const uint16_t *id = amoe_block_ids(c[q].b, c->layer, c[q].nodes[i]);
      for (int j = 0; j < k; j++) {
        v[id[j]] += 1;
        a += !S[id[j]];
      }
    }
  int *cand = c->iscratch + E, nc = 0;
  for (int e = 0; e < E; e++)
    if (S[e] && !c->resident[e] && !anchor[e]) cand[nc++] = e;
  amoe_sort(cand, nc, sizeof *cand, lower_utility, u);
  double acc = 0;
  for (int i = 0; i < nc && size - 1 >= k; i++) {
    if (acc + v[cand[i]] > (double)a) break;
    acc += v[cand[i]];
    S[cand[i]] = 0;
    size--;
  }
}

void amoe_verifier_acceptmoe(const amoe_vctx *c, uint8_t *S) { acceptmoe_select(c, 1, S); }
void amoe_verifier_acceptmoe_pass(const amoe_vctx *c, int requests, uint8_t *S) { acceptmoe_select(c, requests, S); }

void amoe_verifier_acceptmoe_fix(const amoe_vctx *c, uint8_t *S) {
  double *u = c->scratch;
  amoe_acceptmoe_utilities(c, c->row->vparam[FIX_BETA], u);
  memset(S, 0, (size_t)c->experts);
  amoe_top_by_value(u, NULL, c->experts, (int)c->row->vparam[FIX_BUDGET], S);
}
