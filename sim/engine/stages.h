/* The stages of a pass (docs/design.md §2) and the run state they share:
 * the batch-1 run (run.c) and batches (batch.c) run the same stages, each
 * inline here so that the run loop's clones keep them inlined. Inside the
 * engine only. */
#ifndef AMOE_STAGES_H
#define AMOE_STAGES_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accept.h"
#include "cache.h"
#include "clones.h"
#include "cost.h"
#include "grow.h"
#include "layout.h"
#include "policy.h"
#include "tiers.h"
#include "route.h"
#include "run.h"

typedef struct {
  const amoe_policy_row *row;
  const amoe_verifier_def *ver;
  const amoe_draft_def *draft;
  amoe_cache *cache;
  amoe_reqlog *log; /* pass 1 of a Belady run records here */
  amoe_row_result *res;
  void *draft_state;    /* what the draft keeps across blocks (amoe_draft_def.state_bytes), else NULL */
  int64_t request;      /* the current block's request (offload.reset: request) */
  uint8_t *prev_x;      /* [layer][E] the previous pass's executed sets (executed_overlap) */
  const amoe_layout *layout; /* several GPUs: where the experts are, else NULL */
  const uint8_t *on_gpu;     /* experts: off the GPU (§21): [layer][E] 1 where the GPU holds it, else NULL */
  amoe_draft_prediction predicted; /* the draft's prediction for the current block (0: none) */
  double select_s;      /* the verifier's selection_s per pass (0: none) */
  int have_prev;        /* prev_x holds a pass of this request */
  uint16_t *prev_route; /* batch 1: [layer][top_k] the route of the request's last committed token (amoe_dctx.previous), where the row's draft may read it; else NULL */
  int have_prev_route;  /* prev_route holds one of this request */
  double req_time, req_committed; /* batch 1: the current request's decode time and tokens so far */
  double *slot_first, *slot_committed; /* batch > 1, per slot: the clock at its request's first pass, its tokens */
} row_state;

typedef struct { /* scratch shared by all rows (one row runs at a time) */
  int *nodes, *level, *count, *rcount, *iscratch;
  int *path; /* indices into nodes[] of the accepted ones */
  int *seq;  /* tokens decoded one per pass */
  /* [E] flags per expert of the layer (docs/metrics.md): U the union of
   * the verified nodes' natural top-k, S the verifier's allowed set, X the
   * executed experts, F the fetched ones (misses under offload), R the
   * replacements constrained routing sent a node to */
  uint8_t *U, *S, *X, *F, *R;
  float *perturbation_sq; /* [nodes[] index] Σ_l ρ_t,l², s_t² (§7), on the accepted path */
  double *deviation; /* the verifier's running prediction of the pass (amoe_vctx.deviation) */
  double *scratch;
  void *dscratch;
  uint16_t *route;
  int32_t *rt;   /* [node][k] executed routes for on_route */
  float *rw;     /* [node][k] their renormalised weights */
  float *pcache; /* [layer][node][k] natural top-k router probabilities, once per block for every row */
  uint8_t *pdone, *ldone; /* [layer][node], [layer] */
  amoe_layer_counts *lc;  /* [layer] the pass's counts for the cost function */
  uint16_t *prefill;      /* [layer][E] the current request's prefill counts (run_sweep's, not owned) */
  int prefill_ready;      /* they are the current request's */
  int16_t *slot;          /* [E] the cache's placement for on_route */
  uint16_t *wave;         /* [E] */
  int *todo;
  int npath; /* batch: the accepted nodes among this pass's (path[0..npath)) */
  int cap_n;
} work;

/* Every scratch buffer once: (member, element type, count), counts in the
 * block's n nodes, E experts and L layers. work_fit allocates them all
 * and work_free frees them, from this one list. */
#define WORK_BUFFERS(BUF) \
  BUF(nodes, int, n) \
  BUF(path, int, n) \
  BUF(seq, int, n) \
  BUF(level, int, AMOE_MAX_DEPTH * 4 + 256) \
  BUF(count, int, E) \
  BUF(rcount, int, E + 1) /* + amoe_route_sums' spare slot */ \
  BUF(iscratch, int, AMOE_VISCRATCH(E, n)) \
  BUF(U, uint8_t, E) \
  BUF(S, uint8_t, E) \
  BUF(X, uint8_t, E) \
  BUF(F, uint8_t, E) \
  BUF(R, uint8_t, E + 1) \
  BUF(perturbation_sq, float, n) \
  BUF(deviation, double, 2 + 2 * n) \
  BUF(scratch, double, AMOE_VSCRATCH(E, n)) \
  BUF(dscratch, char, amoe_draft_scratch_bytes((int)n, (int)L, (int)E)) \
  BUF(route, uint16_t, AMOE_MAX_TOPK + 1) \
  BUF(rt, int32_t, n * AMOE_MAX_TOPK) \
  BUF(rw, float, n * AMOE_MAX_TOPK) \
  BUF(pcache, float, L * n * AMOE_MAX_TOPK) \
  BUF(pdone, uint8_t, L * n) \
  BUF(ldone, uint8_t, L) \
  BUF(todo, int, n) \
  BUF(slot, int16_t, E) \
  BUF(wave, uint16_t, E) \
  BUF(lc, amoe_layer_counts, L)

static inline void work_free(work *w) {
#define WORK_FREE(f, T, cnt) free(w->f);
  WORK_BUFFERS(WORK_FREE)
#undef WORK_FREE
}

static inline amoe_status work_fit(work *w, const amoe_block *b, amoe_err *e) {
  if (b->n <= w->cap_n && w->U) return AMOE_OK;
  work_free(w);
  memset(w, 0, sizeof *w);
  const size_t n = (size_t)b->n, E = (size_t)b->experts, L = (size_t)b->layers;
  w->cap_n = b->n;
  int ok = 1;
#define WORK_ALLOC(f, T, cnt) ok &= (w->f = malloc((size_t)(cnt) * sizeof(T))) != NULL;
  WORK_BUFFERS(WORK_ALLOC)
#undef WORK_ALLOC
  if (!ok) return amoe_fail(e, AMOE_ENOMEM, "out of memory for run scratch");
  memset(w->level, 0, (AMOE_MAX_DEPTH * 4 + 256) * sizeof(int));
  return AMOE_OK;
}

/* Layer l's natural top-k router probabilities of the verified nodes,
 * [node][k]: from the per-block cache, so several policy rows pay for each
 * node-layer once. */
static inline const float *probs_of(work *w, const amoe_block *b, int l, int nn, int router, int k) {
  float *p = w->pcache + (size_t)l * b->n * k;
  uint8_t *done = w->pdone + (size_t)l * b->n;
  if (w->ldone[l]) return p;
  if (nn == b->n) { /* every node (the usual case): the whole layer in order */
    amoe_router_probs_nodes(b, l, NULL, nn, router, k, p);
    w->ldone[l] = 1;
    return p;
  }
  int c = 0;
  for (int i = 0; i < nn; i++) { /* the ones not computed yet */
    const int t = w->nodes[i];
    w->todo[c] = t;
    c += !done[t];
    done[t] = 1;
  }
  amoe_router_probs_nodes(b, l, w->todo, c, router, k, p);
  return p;
}

/* Node i's chosen experts and their weights, renormalised over them as the
 * model's router does (probabilities of the stored entries; an expert beyond
 * the stored m gets weight 0). */
static inline void record_route(const amoe_block *b, int l, work *w, int i, int k, const uint16_t *ids, int got,
                         int router) {
  const uint16_t *st = amoe_block_ids(b, l, w->nodes[i]);
  float prob[AMOE_MAX_EXPERTS];
  amoe_router_probs(b, l, w->nodes[i], router, k, prob);
  float sum = 0;
  for (int j = 0; j < k; j++) {
    w->rt[i * k + j] = j < got ? ids[j] : -1;
    w->rw[i * k + j] = 0;
    if (j >= got) continue;
    for (int q = 0; q < b->m; q++)
      if (st[q] == ids[j]) {
        w->rw[i * k + j] = prob[q];
        break;
      }
    sum += w->rw[i * k + j];
  }
  for (int j = 0; j < got; j++) w->rw[i * k + j] = sum > 0 ? w->rw[i * k + j] / sum : 1.0f / got;
}

/* What one forward pass adds to its block's figures (the names of §6's
 * union U, eligible S, executed X and fetched F, summed over its layers):
 *   T  the pass's time, s
 *   u  |U|: experts its verified nodes route to
 *   s  |S|: experts the verifier allows
 *   x  |X|: experts executed
 *   f  |F|: experts fetched over PCIe (offload) */
typedef struct {
  double T, u, s, x, f;
} pass_sums;

/* One MoE layer of a pass: the sets and counts (in work) and its figures:
 *   nu, ns, nx, nf  |U|, |S|, |X|, |F| (routed, allowed, executed, fetched)
 *   hits            executed experts already resident (every one without offload)
 *   waves           fused-MoE calls (a second when the slots overflow)
 *   displaced       (node, expert) assignments moved off their natural expert */
typedef struct {
  int nu, ns, nx, nf, hits, waves, displaced;
  int assigned, assigned_hits; /* offload: (token, expert) assignments, and those served from the slots */
  int shared;                  /* executed by the previous pass of the request too */
  int busiest;                 /* several GPUs: executed on the busiest group */
  double t_moe, wait, host, comm; /* t_moe: the executed experts' own time until stage cost adds the waves' */
} layer_sums;

/* Stage route, natural verifier: U = the union of the nodes' top-k, which
 * is also what executes (X = U); counts per expert when counted. */
AMOE_STAGE void layer_route_natural(const amoe_block *b, int l, int k, work *w, int nn, int counted,
                                       layer_sums *ls) {
  const int E = b->experts;
  if (counted) { /* the union is where the counts are nonzero */
    memset(w->count, 0, (size_t)E * sizeof(int));
    amoe_route_natural(b, l, k, w->nodes, nn, NULL, w->count);
    int nu = 0; /* (a local: the byte stores below may alias *ls) */
    for (int x = 0; x < E; x++) nu += w->U[x] = w->count[x] > 0;
    ls->nu += nu;
  } else {
    memset(w->U, 0, (size_t)E);
    amoe_route_natural(b, l, k, w->nodes, nn, w->U, NULL);
    int nu = 0;
    for (int x = 0; x < E; x++) nu += w->U[x];
    ls->nu += nu;
    memcpy(w->X, w->U, (size_t)E);
  }
  memset(w->S, 1, (size_t)E);
  ls->ns = E;
}

/* What the verifier sees of block b's nn nodes at layer l (covered: at
 * batch, the experts the pass's earlier requests execute, else NULL). */
static inline amoe_vctx vctx_of(const amoe_spec *s, const amoe_offline *offline, const row_state *rs,
                         const amoe_cost_pass_ctx *pc, const amoe_block *b, int l, work *w, int nn,
                         const uint8_t *resident, const uint8_t *covered) {
  const int k = s->model.top_k;
  const float *P = probs_of(w, b, l, nn, s->model.router, k); /* [node][k] at this layer */
  const amoe_vctx vc = {.b = b, .layer = l, .k = k, .experts = b->experts, .router = s->model.router,
                        .nodes = w->nodes, .nn = nn, .level_count = w->level, .commitment = offline->p,
                        .commitment_n = offline->n, .resident = resident, .row = rs->row, .prob = P,
                        .scratch = w->scratch, .iscratch = w->iscratch, .mass = offline->mass, .cost = pc,
                        .layout = rs->layout, .covered = covered, .kappa = s->kappa, .margin_min = s->margin_min,
                        .deviation = w->deviation};
  return vc;
}

/* Stages select and constrain: the verifier's S, then every node routed
 * inside it. The executed set is the natural entries inside S plus one
 * replacement per displaced entry: X = (U ∩ S) ∪ R, and the token counts
 * likewise (natural counts kept where S holds, plus R's). Adds each
 * accepted-path node's displaced weight share squared to w->perturbation_sq (§7:
 * layers add in quadrature). */
AMOE_STAGE void layer_select_constrain(const amoe_spec *s, const amoe_offline *offline, const row_state *rs,
                                          const amoe_cost_pass_ctx *pc, const amoe_block *b, int l, work *w, int nn,
                                          int npath, int counted, int want_routes, const uint8_t *resident,
                                          const uint8_t *covered, const uint8_t *pass_S, layer_sums *ls) {
  const int E = b->experts, k = s->model.top_k;
  const amoe_vctx vc = vctx_of(s, offline, rs, pc, b, l, w, nn, resident, covered);
  const float *P = vc.prob;
  if (pass_S) /* decided once for the pass (AMOE_BATCH_PASS) */
    memcpy(w->S, pass_S, (size_t)E);
  else
    rs->ver->select(&vc, w->S);
  int ns = 0;
  for (int x = 0; x < E; x++) ns += w->S[x];
  ls->ns += ns;
  uint8_t *restrict Xl = w->X, *restrict U = w->U, *restrict R = w->R;
  const uint8_t *restrict Sl = w->S;
  int *restrict cnt = w->count, *restrict rcnt = w->rcount;
  memset(U, 0, (size_t)E);
  if (counted) {
    memset(cnt, 0, (size_t)E * sizeof(int));
    memset(rcnt, 0, (size_t)(E + 1) * sizeof(int)); /* (the spare slot too: it counts) */
  } else
    memset(R, 0, (size_t)E + 1);
  const amoe_route_sums ro = {U, counted ? cnt : NULL, rcnt, R, w->route};
  ls->displaced = amoe_route_layer(b, l, k, w->nodes, nn, Sl, &ro);
  for (int q = 0; q < npath; q++) {
    const int i = w->path[q], t = w->nodes[i];
    const float *pt = P + (size_t)t * k;
    float mass = 0;
    for (int j = 0; j < k; j++) mass += pt[j];
    const float rho = mass > 0 ? amoe_route_displaced(0.0f, amoe_block_ids(b, l, t), pt, k, Sl) / mass : 0.0f;
    w->perturbation_sq[i] += rho * rho;
  }
  if (want_routes)
    for (int i = 0; i < nn; i++) {
      const int got = amoe_route_constrained(b, l, w->nodes[i], k, Sl, w->route);
      record_route(b, l, w, i, k, w->route, got, s->model.router);
    }
  if (counted)
    for (int x = 0; x < E; x++) cnt[x] = (Sl[x] ? cnt[x] : 0) + rcnt[x];
  else
    for (int x = 0; x < E; x++) Xl[x] = (uint8_t)((U[x] & Sl[x]) | R[x]);
  int nu = 0;
  for (int x = 0; x < E; x++) nu += U[x];
  ls->nu += nu;
}

/* Stage execute: X (from the counts when counted), the experts' part of
 * the MoE time (§9: per expert from its tokens when by_count, else its
 * bytes; the fixed part per wave comes with the cost stage), what the draft
 * ecospec's predictor reads. */
AMOE_STAGE void layer_execute(const amoe_expert_coef ec, row_state *rs, int l, int E, work *w, int counted,
                                 int by_count, layer_sums *ls) {
  /* no branches: about half the experts run, at random. Each loop also
   * counts how much of X the previous pass of the request executed
   * (executed_overlap) and keeps X for the next. */
  uint8_t *restrict px = rs->prev_x + (size_t)l * E;
  uint8_t *restrict X = w->X, *restrict F = w->F;
  int nx = 0, shared = 0; /* (locals: the byte stores may alias *ls) */
  if (counted) {
    const int *restrict cnt = w->count;
    double t = 0;
    for (int x = 0; x < E; x++) {
      const uint8_t run = cnt[x] > 0;
      X[x] = run;
      F[x] = 0;
      nx += run;
      shared += px[x] & run;
      px[x] = run;
      if (by_count) t += run ? amoe_cost_expert_at(ec, cnt[x]) : 0.0;
    }
    ls->nx += nx;
    ls->t_moe += by_count ? t : ls->nx * ec.mem_s;
  } else {
    for (int x = 0; x < E; x++) {
      F[x] = 0;
      nx += X[x];
      shared += px[x] & X[x];
      px[x] = X[x];
    }
    ls->nx += nx;
    ls->t_moe += ls->nx * ec.mem_s;
  }
  ls->shared = shared;
  if (rs->draft_state) rs->draft->observe(rs->draft_state, l, X, E);
}

/* The executed experts of layer l split by where they live (§21): the GPU
 * runs its own (priced as layer_execute prices them: by their tokens, or
 * each at its bytes) while the host runs the rest at once (their reads and
 * their (token, expert) pairs) and the pass's tokens cross the link to it
 * and back (amoe_cost_tier_layer: the hardware's h2d_bw and
 * copy_latency_s). all_gpu: the layer's time
 * with every expert on the GPU, returned as it is when the host has none. */
static inline double tier_moe_s(const amoe_spec *s, const amoe_cost_pass_ctx *pc, const uint8_t *on_gpu, int l,
                                const uint8_t *X, const int *count, int by_count, int tokens, double all_gpu) {
  const int E = s->model.experts;
  const uint8_t *g = on_gpu + (size_t)l * E;
  double gpu = 0, pairs = 0;
  int on_host = 0;
  for (int x = 0; x < E; x++) {
    if (!X[x]) continue;
    const int n = count ? count[x] : 1;
    if (g[x]) gpu += by_count ? amoe_cost_expert_at(pc->ec, n) : pc->ec.mem_s;
    else on_host++, pairs += n;
  }
  if (!on_host) return all_gpu;
  return amoe_cost_tier_layer(&s->model, &s->host, gpu, on_host, pairs, tokens, s->hw.h2d_bw, s->hw.copy_latency_s);
}

/* What the verifiers see as resident at layer l: the cache's slots under
 * offload, the GPU's experts where experts live on the host (§21: so
 * AcceptMoE's residency pruning prefers the GPU's at its own deviation
 * budget), else nothing. */
static inline const uint8_t *layer_resident(const row_state *rs, int l, int E) {
  if (rs->cache) return amoe_cache_resident(rs->cache, l);
  return rs->on_gpu ? rs->on_gpu + (size_t)l * E : NULL;
}

/* Belady's and MIN's first run: the layer's requests into the row's log
 * (nothing when the row keeps none). */
static inline amoe_status log_requests(row_state *rs, int l, const uint8_t *X, int E, amoe_err *e) {
  if (rs->log)
    for (int x = 0; x < E; x++)
      if (X[x] && amoe_reqlog_add(rs->log, l, x) != AMOE_OK)
        return amoe_fail(e, AMOE_ENOMEM, "out of memory recording requests");
  return AMOE_OK;
}

/* Stage cache (offload, §8): hits, fetches and waves. Resident: every
 * executed expert hits, in one wave. */
AMOE_STAGE amoe_status layer_cache(const amoe_spec *s, row_state *rs, int l, work *w, int place, layer_sums *ls,
                                      amoe_err *e) {
  ls->hits = ls->nx;
  ls->waves = ls->nx > 0;
  if (!rs->cache) return AMOE_OK;
  AMOE_TRY(log_requests(rs, l, w->X, s->model.experts, e));
  amoe_cache_pass_stats cs;
  /* with routes for a backend, also where each expert is computed from */
  amoe_cache_pass_placed(rs->cache, l, w->X, w->F, &cs, place ? w->slot : NULL, place ? w->wave : NULL);
  ls->hits = cs.hits;
  ls->nf = cs.fetched;
  ls->waves = cs.waves;
  for (int x = 0; x < s->model.experts; x++) { /* (offload counts its tokens per expert) */
    ls->assigned += w->count[x];
    ls->assigned_hits += w->F[x] ? 0 : w->count[x];
  }
  return AMOE_OK;
}

/* The MTP draft of a chain (§6): each node after the root was proposed by
 * one forward of the MTP module, a decoder layer of the target's shapes over
 * one token (its MoE layer routing the token as the target's last MoE layer
 * does; on several GPUs, the busiest group's share) plus the shared head,
 * priced by the one cost function. */
static __attribute__((noinline, unused)) double mtp_draft_s(const amoe_spec *s, const row_state *rs, const amoe_block *b, work *w, int nn) {
  const amoe_model *M = &s->model;
  const int E = b->experts, k = M->top_k, tp = s->parallel.attention_tp > 1 ? s->parallel.attention_tp : 1;
  amoe_cost_pass_ctx one;
  amoe_pass_shape sh = amoe_spec_pass_shape(s, 1, 0);
  sh.offload = sh.fetch_overlap = sh.draft_passes = 0; /* (one resident forward of the module, no draft of its own) */
  amoe_cost_pass_init(&one, &sh);
  double t = 0;
  if (b->layers < 1) /* a dense target: the module is one dense decoder layer and the head */
    return (nn - 1) * (amoe_cost_dense(M, &s->hw, 1, s->workload.context_tokens, 0, tp) + amoe_cost_head(M, &s->hw, 1, tp));
  for (int i = 1; i < nn; i++) {
    const uint16_t *id = amoe_block_ids(b, b->layers - 1, w->nodes[i]);
    memset(w->X, 0, (size_t)E);
    for (int j = 0; j < k; j++) w->X[id[j]] = 1, w->count[id[j]] = 1;
    amoe_layer_counts c = {k, 0, 1, k * amoe_cost_expert_at(one.ec, 1)};
    int busiest;
    if (rs->layout) c.expert_s = amoe_layout_layer(rs->layout, b->layers - 1, w->X, w->count, one.ec, one.moe_tp, &busiest);
    t += amoe_cost_layer(&one, &c).total + amoe_cost_head(M, &s->hw, 1, tp);
  }
  return t;
}

/* Stage place (several GPUs, §16): the executed experts over the groups
 * of the layout; the layer waits for the busiest group, so its expert time
 * is that group's. */
static __attribute__((noinline, unused)) void layer_place(const amoe_layout *lay, int moe_tp, amoe_expert_coef ec, int l,
                                                   work *w, int by_count, layer_sums *ls) { /* (off the one-GPU path) */
  ls->t_moe = amoe_layout_layer(lay, l, w->X, by_count ? w->count : NULL, ec, moe_tp, &ls->busiest);
}

/* Stage cost (§9): the layer's time from its counts, by the one cost
 * function (cost.h), added to the pass's. */
AMOE_STAGE void layer_cost(const amoe_cost_pass_ctx *pc, layer_sums *ls, amoe_pass_time *pt) {
  const amoe_layer_counts c = {ls->nx, ls->nf, ls->waves, ls->t_moe};
  const amoe_layer_time lt = amoe_cost_layer(pc, &c);
  amoe_cost_pass_add(pt, &lt);
  ls->t_moe = lt.moe;
  ls->wait = lt.fetch;
  ls->host = lt.host;
  ls->comm = lt.comm;
}

/* The layer's figures into the row's totals. */
AMOE_STAGE void layer_account(const amoe_model *M, row_state *rs, int l, double t_dense, const layer_sums *ls) {
  amoe_totals *tt = &rs->res->tot;
  amoe_layer_totals *lt = &rs->res->layers[l];
  lt->union_sum += ls->nu;
  lt->eligible_sum += ls->ns;
  lt->executed_sum += ls->nx;
  lt->hits += ls->hits;
  lt->requests += ls->nx;
  lt->fetched += ls->nf;
  lt->t_moe += ls->t_moe;
  lt->t_fetch += ls->wait;
  tt->t_fetch += ls->wait;
  tt->t_host += ls->host;
  tt->t_comm += ls->comm;
  tt->busiest_sum += rs->layout ? ls->busiest : ls->nx;
  lt->busiest_sum += rs->layout ? ls->busiest : ls->nx;
  tt->t_moe += ls->t_moe;
  tt->t_dense += t_dense;
  tt->hits += ls->hits;
  tt->requests += ls->nx;
  if (rs->have_prev && ls->nx > 0) {
    tt->executed_overlap_sum += (double)ls->shared / ls->nx;
    tt->executed_overlap_n += 1;
  }
  tt->assignments_served += ls->assigned;
  tt->assignment_hits += ls->assigned_hits;
  tt->h2d_bytes += ls->nf * amoe_model_expert_bytes(M);
  tt->hbm_expert_bytes += ls->nx * amoe_model_expert_bytes(M);
}

/* The pass's parts that do not depend on its layers into the row's totals. */
static inline void account_pass(amoe_totals *tt, const amoe_cost_pass_ctx *pc) {
  tt->t_step += pc->step;
  tt->t_draft += pc->draft;
  tt->t_extend += pc->extend;
  tt->t_tree += pc->tree;
  tt->t_sample += pc->sample;
  tt->t_cycle_host += pc->cycle_host;
  tt->t_select += pc->select;
  tt->t_dense += pc->rest; /* the head and the dense layers */
  tt->t_host += pc->host;
  tt->t_comm += pc->rest_comm;
}

/* A pass's cost context (§9): what does not depend on its layers' experts,
 * with the draft priced as the row's draft is (an MTP chain's module
 * forwards, mtp_s; a predictor over `candidates`, whenever it ran) and the
 * verifier's own selection when a tree was verified (drafted). */
static inline amoe_cost_pass_ctx pass_cost(const amoe_spec *s, const row_state *rs, const amoe_pass_shape *sh, int drafted,
                                    double mtp_s, int candidates) {
  amoe_cost_pass_ctx pc;
  amoe_pass_shape shape = *sh;
  shape.draft_passes = s->workload.draft_passes;
  amoe_cost_pass_init(&pc, &shape);
  if (rs->draft->mtp) pc.draft = mtp_s;
  if (drafted) pc.select = rs->select_s;
  /* a predictor scores every candidate, however few nodes it then keeps */
  if (rs->draft->draft_cost && candidates > 0) pc.draft += rs->draft->draft_cost(rs->row, s, candidates);
  return pc;
}

/* Stages execute, place, cache, cost and account of one MoE layer: the
 * sequence every pass runs on its executed set, batch 1 or several
 * requests (place: hand the cache's placement to the hooks). */
AMOE_STAGE amoe_status layer_stages(const amoe_spec *s, row_state *rs, const amoe_cost_pass_ctx *pc, int l, work *w,
                                    int counted, int by_count, int place, int log_pass, layer_sums *ls,
                                    amoe_pass_time *pt, amoe_err *e) {
  layer_execute(pc->ec, rs, l, s->model.experts, w, counted, by_count, ls);
  if (rs->layout) layer_place(rs->layout, pc->moe_tp, pc->ec, l, w, by_count, ls);
  if (rs->on_gpu)
    ls->t_moe = tier_moe_s(s, pc, rs->on_gpu, l, w->X, counted ? w->count : NULL, by_count, pc->tokens, ls->t_moe);
  AMOE_TRY(layer_cache(s, rs, l, w, place, ls, e));
  layer_cost(pc, ls, pt);
  if (!log_pass) layer_account(&s->model, rs, l, pc->dense, ls);
  return AMOE_OK;
}

/* The pass's end, every pass alike: the caches and the request log close
 * it, and its parts that do not depend on the layers join the totals. */
static inline amoe_status pass_close(row_state *rs, const amoe_cost_pass_ctx *pc, int log_pass, amoe_err *e) {
  if (rs->cache) amoe_cache_end_pass(rs->cache);
  if (rs->log && amoe_reqlog_end_pass(rs->log) != AMOE_OK)
    return amoe_fail(e, AMOE_ENOMEM, "out of memory recording requests");
  rs->have_prev = 1;
  if (!log_pass) account_pass(&rs->res->tot, pc);
  return AMOE_OK;
}

/* The route [layer][k] of the block's last naturally accepted node: the
 * committed token whose route the next block's draft may know. */
static inline void last_route(const amoe_block *b, int k, uint16_t *out) {
  int t = 0;
  for (int i = 0; i < b->n; i++)
    if (b->accepted[i]) t = i; /* (a path's nodes ascend: parent[t] < t) */
  for (int l = 0; l < b->layers; l++) memcpy(out + (size_t)l * k, amoe_block_ids(b, l, t), (size_t)k * sizeof *out);
}

/* Stage draft: the nodes the target processes, ascending, root first
 * (previous: amoe_dctx.previous). */
static inline int block_draft(const amoe_spec *s, const amoe_offline *offline, row_state *rs, const amoe_block *b, work *w,
                       const uint8_t *const *covered, const uint16_t *previous) {
  const uint8_t *res_layers[AMOE_MAX_LAYERS];
  if (rs->cache)
    for (int l = 0; l < b->layers; l++) res_layers[l] = amoe_cache_resident(rs->cache, l);
  amoe_dctx dc = {b, s, rs->row, offline, s->workload.nodes, rs->cache ? res_layers : NULL, rs->draft_state,
                  w->dscratch, &rs->predicted, rs->layout, covered, previous, 0};
  rs->predicted = (amoe_draft_prediction){0, 0};
  return rs->draft->choose(&dc, w->nodes);
}

/* A request's prefill for one row (§8): one forward pass over the prompt
 * whose executed set is the union of the prompt tokens' routes
 * (w->prefill: counts per layer and expert). Under offload it goes through
 * the row's caches in engine order (prefill: through) or streams every
 * missing expert past them (bypass). Its time and bytes are kept apart from
 * the decode figures. */
static inline amoe_status row_prefill(const amoe_spec *s, row_state *rs, work *w, int tokens, int log_pass,
                                      amoe_err *e) {
  const amoe_model *M = &s->model;
  const int L = M->moe_layers, E = M->experts;
  amoe_cost_pass_ctx pc;
  amoe_pass_shape sh = amoe_spec_pass_shape(s, tokens, 0);
  sh.offload = rs->cache != NULL, sh.draft_passes = 0; /* (a prompt: no draft tree) */
  sh.prompt_tokens = tokens;
  sh.draft_prompt = rs->draft->one_token_per_pass ? 0 : tokens; /* a speculating row's draft runs over the prompt too */
  amoe_cost_pass_init(&pc, &sh);
  const int through = rs->cache && s->offload.prefill == AMOE_PREFILL_THROUGH;
  double fetched = 0;
  for (int l = 0; l < L; l++) {
    const uint16_t *cnt = w->prefill + (size_t)l * E;
    amoe_layer_counts c = {0, 0, 1, 0};
    for (int x = 0; x < E; x++) {
      w->X[x] = cnt[x] > 0;
      w->count[x] = cnt[x];
      c.executed += w->X[x];
      c.expert_s += cnt[x] ? amoe_cost_expert_at(pc.ec, cnt[x]) : 0.0;
    }
    if (rs->layout) { /* the busiest group's */
      int busiest;
      c.expert_s = amoe_layout_layer(rs->layout, l, w->X, w->count, pc.ec, pc.moe_tp, &busiest);
    }
    if (rs->on_gpu) c.expert_s = tier_moe_s(s, &pc, rs->on_gpu, l, w->X, w->count, 1, tokens, c.expert_s);
    if (through) {
      AMOE_TRY(log_requests(rs, l, w->X, E, e));
      amoe_cache_pass_stats cs;
      amoe_cache_pass(rs->cache, l, w->X, w->F, &cs);
      c.fetched = cs.fetched;
      c.waves = cs.waves;
    } else if (rs->cache) { /* bypass: what is not resident streams through staging */
      const uint8_t *res = amoe_cache_resident(rs->cache, l);
      for (int x = 0; x < E; x++) c.fetched += w->X[x] && !res[x];
    }
    fetched += c.fetched;
    w->lc[l] = c;
  }
  if (through) {
    amoe_cache_end_pass(rs->cache);
    if (rs->log && amoe_reqlog_end_pass(rs->log) != AMOE_OK)
      return amoe_fail(e, AMOE_ENOMEM, "out of memory recording requests");
  }
  if (log_pass) return AMOE_OK;
  const amoe_pass_time pt = amoe_cost_pass(&pc, w->lc, L);
  rs->res->tot.prefills += 1;
  rs->res->tot.t_prefill += pt.total;
  rs->res->tot.prefill_h2d_bytes += fetched * amoe_model_expert_bytes(M);
  return AMOE_OK;
}

/* q into the row's list of requests. */
static inline amoe_status request_push(amoe_row_result *r, const amoe_request_stat *q, amoe_err *e) {
  amoe_request_stat *v = amoe_grow(r->reqs, &r->reqs_cap, (size_t)r->nreqs + 1, sizeof *v, 64);
  if (!v) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  r->reqs = v;
  v[r->nreqs++] = *q;
  return AMOE_OK;
}

/* A request of a closed batch (or batch 1) is done: into the row's list
 * with its committed tokens and its time over them (nothing when it
 * committed none). */
static inline amoe_status request_done(amoe_row_result *r, double tokens, double time, amoe_err *e) {
  if (!(tokens > 0)) return AMOE_OK;
  return request_push(r, &(amoe_request_stat){.tokens = tokens, .tpot = time / tokens}, e);
}

/* A request of open arrivals is done (its times in *times): into the
 * row's list with its output tokens (the first token its prefill gave, if
 * it did, and the `committed` decode tokens after it) and its time per
 * output token as engines report it (vLLM's benchmark): the time from its
 * first token to its last over the output tokens after the first (0 with
 * one output token). */
static inline amoe_status request_logged(amoe_row_result *r, double committed, const amoe_request_stat *times,
                                         amoe_err *e) {
  const double tokens = committed + times->first_tokens;
  if (!(tokens > 0)) return AMOE_OK;
  amoe_request_stat q = *times;
  q.tokens = tokens;
  q.tpot = tokens > 1 ? (q.finish_s - q.first_s) / (tokens - 1) : 0;
  r->tot.first_tokens += times->first_tokens;
  return request_push(r, &q, e);
}

/* A pass opens on its nodes w->nodes[0..nn), batch 1 or one request of a
 * batch alike: nodes per depth (w->level), the accepted path (w->path;
 * its length returned), the perturbations and the verifier's predicted
 * deviation zeroed, the deepest depth into *maxd. */
static inline int pass_nodes(const amoe_block *b, work *w, int nn, int *maxd) {
  memset(w->level, 0, AMOE_MAX_DEPTH * 4 * sizeof(int));
  memset(w->deviation, 0, (2 + 2 * (size_t)nn) * sizeof *w->deviation);
  int npath = 0, d = 0;
  for (int i = 0; i < nn; i++) {
    const int t = w->nodes[i];
    w->level[b->depth[t]]++;
    d = b->depth[t] > d ? b->depth[t] : d;
    w->perturbation_sq[i] = 0;
    w->path[npath] = i;
    npath += b->accepted[t];
  }
  *maxd = d;
  return npath;
}

/* A request's acceptance after its pass (§7): the walk of its verified
 * tree, or one decoded token's flip (tau 1). */
static inline amoe_accept_result pass_accept(const amoe_spec *s, const amoe_block *b, const work *w, int nn,
                                             int one_token) {
  if (!one_token) return amoe_accept_walk(s, b, w->nodes, nn, w->perturbation_sq);
  const double s_t = sqrt((double)w->perturbation_sq[0]);
  return (amoe_accept_result){1, amoe_accept_flips(s, b, w->nodes[0], s_t), s_t};
}

/* A draft's prediction of its pass (tau, seconds) beside what the pass
 * was charged, into the row's totals. */
static inline void account_prediction(amoe_totals *tt, const amoe_draft_prediction *p, double charged) {
  if (!(p->pass_s > 0)) return;
  tt->predicted_tau += p->tau;
  tt->predicted_s += p->pass_s;
  tt->predictions += charged;
  tt->predicted_over += p->pass_s > charged * (1 + 1e-9);
}

/* The run goes through batch.c: several slots, or requests that arrive. */
static inline int run_batched(const amoe_spec *s) {
  return s->workload.batch > 1 || s->workload.arrival != AMOE_ARRIVAL_CLOSED;
}

/* Batches (batch.c): every row over workload.batch slots of requests. */
amoe_status amoe_run_batch(const amoe_spec *s, const amoe_offline *offline, amoe_source *src, row_state *rs,
                           const amoe_run_hooks *h, int log_pass, amoe_err *e);

#endif
