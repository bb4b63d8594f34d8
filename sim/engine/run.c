#include "run.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "accept.h"
#include "cache.h"
#include "clones.h"
#include "cost.h"
#include "grow.h"
#include "layout.h"
#include "policy.h"
#include "rng.h"
#include "route.h"

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
  double predicted[2];  /* the draft's predicted τ and pass time for the current block (0: none) */
  double select_s;      /* the verifier's selection_s per pass (0: none) */
  int have_prev;        /* prev_x holds a pass of this request */
  double req_time, req_committed; /* batch 1: the current request's decode time and tokens so far */
  double *slot_first, *slot_committed; /* batch > 1, per slot: the clock at its request's first pass, its tokens */
} row_state;

typedef struct { /* scratch shared by all rows (one row runs at a time) */
  int *nodes, *level, *count, *rcount, *iscratch;
  int *path; /* indices into nodes[] of the accepted ones */
  int *seq;  /* tokens decoded one per pass */
  uint8_t *U, *S, *X, *F, *R;
  float *perturbation_sq; /* [nodes[] index] Σ_l ρ_t,l², s_t² (§7), on the accepted path */
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
  BUF(iscratch, int, E * 2) \
  BUF(U, uint8_t, E) \
  BUF(S, uint8_t, E) \
  BUF(X, uint8_t, E) \
  BUF(F, uint8_t, E) \
  BUF(R, uint8_t, E + 1) \
  BUF(perturbation_sq, float, n) \
  BUF(scratch, double, E * 5 + n) \
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

static void work_free(work *w) {
#define WORK_FREE(f, T, cnt) free(w->f);
  WORK_BUFFERS(WORK_FREE)
#undef WORK_FREE
}

static amoe_status work_fit(work *w, const amoe_block *b, amoe_err *e) {
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
static const float *probs_of(work *w, const amoe_block *b, int l, int nn, int router, int k) {
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
static void record_route(const amoe_block *b, int l, work *w, int i, int k, const uint16_t *ids, int got,
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

/* What one forward pass adds to its block's figures. */
typedef struct {
  double T, u, s, x, f;
} pass_sums;

/* One MoE layer of a pass: the sets and counts (in work) and its figures. */
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
static amoe_vctx vctx_of(const amoe_spec *s, const amoe_offline *offline, const row_state *rs,
                         const amoe_cost_pass_ctx *pc, const amoe_block *b, int l, work *w, int nn,
                         const uint8_t *resident, const uint8_t *covered) {
  const int k = s->model.top_k;
  const float *P = probs_of(w, b, l, nn, s->model.router, k); /* [node][k] at this layer */
  const amoe_vctx vc = {.b = b, .layer = l, .k = k, .experts = b->experts, .router = s->model.router,
                        .nodes = w->nodes, .nn = nn, .level_count = w->level, .commitment = offline->p,
                        .commitment_n = offline->n, .resident = resident, .row = rs->row, .prob = P,
                        .scratch = w->scratch, .iscratch = w->iscratch, .mass = offline->mass, .cost = pc,
                        .layout = rs->layout, .covered = covered};
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
                                          const uint8_t *covered, const uint8_t *given, layer_sums *ls) {
  const int E = b->experts, k = s->model.top_k;
  const amoe_vctx vc = vctx_of(s, offline, rs, pc, b, l, w, nn, resident, covered);
  const float *P = vc.prob;
  if (given) /* decided once for the pass (AMOE_BATCH_PASS) */
    memcpy(w->S, given, (size_t)E);
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

/* Belady's and MIN's first run: the layer's requests into the row's log
 * (nothing when the row keeps none). */
static amoe_status log_requests(row_state *rs, int l, const uint8_t *X, int E, amoe_err *e) {
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
static __attribute__((noinline)) double mtp_draft_s(const amoe_spec *s, const row_state *rs, const amoe_block *b, work *w, int nn) {
  const amoe_model *M = &s->model;
  const int E = b->experts, k = M->top_k, tp = s->parallel.attention_tp > 1 ? s->parallel.attention_tp : 1;
  amoe_cost_pass_ctx one;
  amoe_cost_pass_init(&one, &(amoe_pass_shape){.model = M, .hw = &s->hw, .engine = &s->engine, .parallel = &s->parallel,
      .tokens = 1, .context = s->workload.context_tokens});
  double t = 0;
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
static __attribute__((noinline)) void layer_place(const amoe_layout *lay, int moe_tp, amoe_expert_coef ec, int l,
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
static void account_pass(amoe_totals *tt, const amoe_cost_pass_ctx *pc) {
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
 * forwards, mtp_s; a predictor over `candidates`) and the verifier's own
 * selection when a draft ran (drafted). */
static amoe_cost_pass_ctx pass_cost(const amoe_spec *s, const row_state *rs, const amoe_pass_shape *sh, int drafted,
                                    double mtp_s, int candidates) {
  amoe_cost_pass_ctx pc;
  amoe_cost_pass_init(&pc, sh);
  if (rs->draft->mtp) pc.draft = mtp_s;
  if (drafted) {
    pc.select = rs->select_s;
    if (rs->draft->draft_cost) pc.draft += rs->draft->draft_cost(rs->row, s, candidates);
  }
  return pc;
}

/* Stages execute, place, cache, cost and account of one MoE layer: the
 * sequence every pass runs on its executed set, batch 1 or several
 * requests (place: hand the cache's placement to the hooks). */
AMOE_STAGE amoe_status layer_stages(const amoe_spec *s, row_state *rs, const amoe_cost_pass_ctx *pc, int l, work *w,
                                    int counted, int by_count, int place, int record_only, layer_sums *ls,
                                    amoe_pass_time *pt, amoe_err *e) {
  layer_execute(pc->ec, rs, l, s->model.experts, w, counted, by_count, ls);
  if (rs->layout) layer_place(rs->layout, pc->moe_tp, pc->ec, l, w, by_count, ls);
  AMOE_TRY(layer_cache(s, rs, l, w, place, ls, e));
  layer_cost(pc, ls, pt);
  if (!record_only) layer_account(&s->model, rs, l, pc->dense, ls);
  return AMOE_OK;
}

/* The pass's end, every pass alike: the caches and the request log close
 * it, and its parts that do not depend on the layers join the totals. */
static amoe_status pass_close(row_state *rs, const amoe_cost_pass_ctx *pc, int record_only, amoe_err *e) {
  if (rs->cache) amoe_cache_end_pass(rs->cache);
  if (rs->log && amoe_reqlog_end_pass(rs->log) != AMOE_OK)
    return amoe_fail(e, AMOE_ENOMEM, "out of memory recording requests");
  rs->have_prev = 1;
  if (!record_only) account_pass(&rs->res->tot, pc);
  return AMOE_OK;
}

/* One forward pass of the target over w->nodes[0..nn) (ascending, root
 * first), after drafting a tree of `depth` (0: none): per MoE layer the
 * stages route or select + constrain, execute, cache, cost. Leaves the
 * squared displaced weight shares (§7) of the verified accepted nodes,
 * summed over the layers, in w->perturbation_sq. record_only: Belady's first pass,
 * which only realises the request sequence. */
static AMOE_CLONES amoe_status row_pass(const amoe_spec *s, const amoe_offline *offline, row_state *rs, int ri,
                                        const amoe_block *b, work *w, const amoe_run_hooks *h, int record_only,
                                        int nn, int depth, pass_sums *ps, amoe_err *e) {
  const amoe_model *M = &s->model;
  const amoe_hw *HW = &s->hw;
  const int E = b->experts, k = M->top_k, L = b->layers;
  const int natural = rs->ver->all_experts;
  memset(w->level, 0, AMOE_MAX_DEPTH * 4 * sizeof(int));
  for (int i = 0; i < nn; i++) w->level[b->depth[w->nodes[i]]]++;
  int npath = 0;
  for (int i = 0; i < nn; i++) {
    w->perturbation_sq[i] = 0;
    w->path[npath] = i;
    npath += b->accepted[w->nodes[i]];
  }
  /* cost (§9) of what does not depend on the layer's experts */
  const amoe_cost_pass_ctx pc = pass_cost(s, rs, &(amoe_pass_shape){.model = M, .hw = HW, .engine = &s->engine,
      .parallel = &s->parallel, .offload = rs->cache != NULL, .fetch_overlap = s->offload.overlap, .tokens = nn,
      .depth = rs->draft->mtp ? 0 : depth, .branch = s->workload.top_k, .accepted = npath,
      .draft_priced = rs->draft->mtp && depth > 0, .context = s->workload.context_tokens},
      depth > 0, rs->draft->mtp ? mtp_draft_s(s, rs, b, w, nn) : 0, b->n);
  pass_sums sum = {0};
  amoe_pass_time pt = amoe_cost_pass_begin(&pc);
  const amoe_expert_coef ec = pc.ec;
  /* When even all nn tokens on one expert cost less compute than its bytes,
   * every executed expert costs exactly its bytes: then only the executed
   * set matters, and the per-expert token counts are not kept. */
  const int by_count = ec.per_token_s * nn > ec.mem_s;
  const int counted = by_count || rs->cache; /* offload also reports hits per (token, expert) */
  const int want_routes = h && h->on_route && !record_only;
  for (int l = 0; l < L; l++) {
    layer_sums ls = {0};
    const uint8_t *resident = rs->cache ? amoe_cache_resident(rs->cache, l) : NULL;
    if (natural) {
      layer_route_natural(b, l, k, w, nn, counted, &ls);
      if (want_routes)
        for (int i = 0; i < nn; i++) record_route(b, l, w, i, k, amoe_block_ids(b, l, w->nodes[i]), k, M->router);
    } else {
      layer_select_constrain(s, offline, rs, &pc, b, l, w, nn, npath, counted, want_routes, resident, NULL, NULL, &ls);
      if (!record_only) rs->res->tot.displaced += (double)ls.displaced;
    }
    rs->res->tot.assignments += record_only ? 0 : (double)nn * k;
    AMOE_TRY(layer_stages(s, rs, &pc, l, w, counted, by_count, want_routes, record_only, &ls, &pt, e));
    if (want_routes) {
      const amoe_placement pl = {w->F, w->slot, w->wave, ls.waves};
      const int placed = rs->cache && s->offload.order == AMOE_ORDER_HITS_FIRST;
      AMOE_TRY(h->on_route(h->ctx, ri, b->index, l, nn, k, w->rt, w->rw, ls.t_moe, ls.nf, ls.wait, placed ? &pl : NULL,
                           e));
    }
    if (record_only) continue;
    sum.u += ls.nu;
    sum.s += ls.ns;
    sum.x += ls.nx;
    sum.f += ls.nf;
    if (h && h->on_select)
      AMOE_TRY(h->on_select(h->ctx, ri, b->index, l, w->U, w->S, w->X, w->F, E, e));
  }
  AMOE_TRY(pass_close(rs, &pc, record_only, e));
  sum.T = pt.total;
  *ps = sum;
  return AMOE_OK;
}

/* A request's prefill for one row (§8): one forward pass over the prompt
 * whose executed set is the union of the prompt tokens' routes
 * (w->prefill: counts per layer and expert). Under offload it goes through
 * the row's caches in engine order (prefill: through) or streams every
 * missing expert past them (bypass). Its time and bytes are kept apart from
 * the decode figures. */
static amoe_status row_prefill(const amoe_spec *s, row_state *rs, work *w, int record_only, amoe_err *e) {
  const amoe_model *M = &s->model;
  const int L = M->moe_layers, E = M->experts, tokens = s->workload.prompt_tokens;
  amoe_cost_pass_ctx pc;
  amoe_cost_pass_init(&pc, &(amoe_pass_shape){.model = M, .hw = &s->hw, .engine = &s->engine, .parallel = &s->parallel,
      .offload = rs->cache != NULL, .fetch_overlap = s->offload.overlap, .tokens = tokens,
      .context = s->workload.context_tokens});
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
  if (record_only) return AMOE_OK;
  const amoe_pass_time pt = amoe_cost_pass(&pc, w->lc, L);
  rs->res->tot.prefills += 1;
  rs->res->tot.t_prefill += pt.total;
  rs->res->tot.prefill_h2d_bytes += fetched * amoe_model_expert_bytes(M);
  return AMOE_OK;
}

/* What one row did with one block. */
typedef struct {
  pass_sums sum;
  int passes, verified, tau, deviated;
  double perturbation_sum; /* Σ s_t over the walked (or decoded) tokens */
} block_outcome;

/* Stage draft: the nodes the target processes, ascending, root first. */
static int block_draft(const amoe_spec *s, const amoe_offline *offline, row_state *rs, const amoe_block *b, work *w,
                       const uint8_t *const *covered) {
  const uint8_t *res_layers[AMOE_MAX_LAYERS];
  if (rs->cache)
    for (int l = 0; l < b->layers; l++) res_layers[l] = amoe_cache_resident(rs->cache, l);
  amoe_dctx dc = {b, s, rs->row, offline, s->workload.nodes, rs->cache ? res_layers : NULL, rs->draft_state,
                  w->dscratch, rs->predicted, rs->layout, covered};
  rs->predicted[0] = rs->predicted[1] = 0;
  return rs->draft->choose(&dc, w->nodes);
}

/* Speculative decoding: the nn nodes verified in one pass, then the
 * acceptance walk (§7). */
static amoe_status block_verify(const amoe_spec *s, const amoe_offline *offline, row_state *rs, int ri,
                                const amoe_block *b, work *w, const amoe_run_hooks *h, int record_only, int nn,
                                block_outcome *o, amoe_err *e) {
  int maxd = 0;
  for (int i = 0; i < nn; i++)
    if (b->depth[w->nodes[i]] > maxd) maxd = b->depth[w->nodes[i]];
  AMOE_TRY(row_pass(s, offline, rs, ri, b, w, h, record_only, nn, maxd, &o->sum, e));
  const amoe_accept_result ar = amoe_accept_walk(s, b, w->nodes, nn, w->perturbation_sq);
  o->passes = 1;
  o->verified = nn;
  o->tau = ar.tau;
  o->deviated = ar.deviated;
  o->perturbation_sum = ar.perturbation_sum;
  return AMOE_OK;
}

/* Autoregressive decoding: nodes[] is the token sequence, each token alone
 * in its own pass. A token the verifier displaced may come out differently;
 * the stream stays the natural one's (there is no draft to reject). */
static amoe_status block_decode(const amoe_spec *s, const amoe_offline *offline, row_state *rs, int ri,
                                const amoe_block *b, work *w, const amoe_run_hooks *h, int record_only, int nn,
                                block_outcome *o, amoe_err *e) {
  memcpy(w->seq, w->nodes, (size_t)nn * sizeof *w->seq);
  for (int q = 0; q < nn; q++) {
    pass_sums ps;
    w->nodes[0] = w->seq[q];
    AMOE_TRY(row_pass(s, offline, rs, ri, b, w, h, record_only, 1, 0, &ps, e));
    o->sum.T += ps.T, o->sum.u += ps.u, o->sum.s += ps.s, o->sum.x += ps.x, o->sum.f += ps.f;
    const double s_t = sqrt((double)w->perturbation_sq[0]);
    o->perturbation_sum += s_t;
    o->deviated += amoe_accept_flips(s, b, w->seq[q], s_t);
  }
  o->tau = o->passes = o->verified = nn;
  return AMOE_OK;
}

/* The block's figures into the row's totals and the per-block hook. */
static amoe_status block_account(row_state *rs, int ri, const amoe_block *b, const amoe_run_hooks *h,
                                 const block_outcome *o, amoe_err *e) {
  amoe_totals *tt = &rs->res->tot;
  tt->blocks += 1;
  tt->passes += o->passes;
  tt->committed += o->tau;
  tt->verified += o->verified;
  tt->layer_blocks += (double)b->layers * o->passes;
  tt->union_sum += o->sum.u;
  tt->eligible_sum += o->sum.s;
  tt->executed_sum += o->sum.x;
  tt->t_total += o->sum.T;
  rs->req_time += o->sum.T;
  rs->req_committed += o->tau;
  if (rs->predicted[1] > 0) {
    tt->predicted_tau += rs->predicted[0];
    tt->predicted_s += rs->predicted[1];
    tt->predictions += o->sum.T; /* the charged time of the predicted blocks */
  }
  tt->perturbation_sum += o->perturbation_sum;
  tt->perturbation_n += o->tau;
  tt->deviated += o->deviated;
  if (h && h->on_block) {
    const double lp = (double)b->layers * o->passes;
    amoe_block_stats bs = {b->index,   b->request,    b->step,       o->passes,    o->verified,
                           o->tau,     o->deviated,   o->sum.u / lp, o->sum.s / lp, o->sum.x / lp,
                           o->sum.f,   o->perturbation_sum / o->tau, o->sum.T};
    AMOE_TRY(h->on_block(h->ctx, ri, &bs, e));
  }
  return AMOE_OK;
}

/* A finished request into the row's list. */
static amoe_status push_request(amoe_row_result *r, double tokens, double time, amoe_err *e) {
  amoe_request_stat *v = amoe_grow(r->reqs, &r->reqs_cap, (size_t)r->nreqs + 1, sizeof *v, 64);
  if (!v) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  r->reqs = v;
  v[r->nreqs++] = (amoe_request_stat){tokens, time / tokens};
  return AMOE_OK;
}

/* Batch 1: the request the row was decoding is done (if any). */
static amoe_status request_done(row_state *rs, amoe_err *e) {
  if (rs->req_committed > 0) AMOE_TRY(push_request(rs->res, rs->req_committed, rs->req_time, e));
  rs->req_time = rs->req_committed = 0;
  return AMOE_OK;
}

/* One row on one block: draft, then the passes (each: route, select,
 * constrain, execute, cache, cost), acceptance, totals. */
static amoe_status row_block(const amoe_spec *s, const amoe_offline *offline, row_state *rs, int ri,
                             const amoe_block *b, work *w, const amoe_run_hooks *h, int record_only,
                             amoe_err *e) {
  if (b->experts < 1) return amoe_fail(e, AMOE_EINVAL, "a block with no experts"); /* (and sizes below are positive) */
  const int first = (int64_t)b->request != rs->request; /* a request's first block */
  if (first && !record_only) AMOE_TRY(request_done(rs, e));
  if (first) rs->have_prev = 0;
  if (rs->cache && s->offload.reset && first) amoe_cache_reset(rs->cache);
  rs->request = b->request;
  if (first && w->prefill_ready) AMOE_TRY(row_prefill(s, rs, w, record_only, e));
  const int nn = block_draft(s, offline, rs, b, w, NULL);
  block_outcome o = {0};
  if (rs->draft->one_token_per_pass)
    AMOE_TRY(block_decode(s, offline, rs, ri, b, w, h, record_only, nn, &o, e));
  else
    AMOE_TRY(block_verify(s, offline, rs, ri, b, w, h, record_only, nn, &o, e));
  return record_only ? AMOE_OK : block_account(rs, ri, b, h, &o, e);
}

void amoe_row_result_free(amoe_row_result *r) {
  free(r->layers);
  free(r->reqs);
  r->layers = NULL;
  r->reqs = NULL;
  r->nreqs = 0;
  r->reqs_cap = 0;
}

static amoe_status run_sweep(const amoe_spec *s, const amoe_offline *offline, amoe_source *src,
                            row_state *rs, const amoe_run_hooks *h, int record_only, amoe_err *e) {
  amoe_block b;
  amoe_block_init(&b, s->model.moe_layers, s->model.experts, amoe_source_m(src));
  work w;
  memset(&w, 0, sizeof w);
  amoe_status st = amoe_source_rewind(src, e), rc = AMOE_OK;
  int64_t request = -1;
  int prefill_ready = 0;
  uint16_t *prefill = NULL;
  if (st == AMOE_OK && s->workload.prompt_tokens > 0 &&
      !(prefill = malloc((size_t)s->model.moe_layers * s->model.experts * sizeof *prefill)))
    st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  while (st == AMOE_OK && (rc = amoe_source_next(src, &b, e)) == AMOE_OK) {
    st = work_fit(&w, &b, e); /* (may start the scratch afresh) */
    if ((int64_t)b.request != request) prefill_ready = 0;
    w.prefill = prefill;
    w.prefill_ready = prefill_ready;
    if (st == AMOE_OK) { /* a new block */
      memset(w.pdone, 0, (size_t)b.layers * b.n);
      memset(w.ldone, 0, (size_t)b.layers);
    }
    if (st == AMOE_OK && (int64_t)b.request != request && s->workload.prompt_tokens > 0) {
      st = amoe_source_prefill(src, b.request, s->workload.prompt_tokens, 0, prefill, &prefill_ready, e);
      w.prefill_ready = prefill_ready;
    }
    request = b.request;
    for (int i = 0; i < s->npolicies && st == AMOE_OK; i++)
      st = row_block(s, offline, &rs[i], i, &b, &w, h, record_only, e);
    if (st == AMOE_OK && h && h->on_progress && !record_only) h->on_progress(h->ctx, b.index + 1);
    if (st == AMOE_OK && h && h->stop && h->stop(h->ctx)) st = amoe_fail(e, AMOE_EINTR, "interrupted");
  }
  if (st == AMOE_OK && rc != AMOE_END) st = rc;
  for (int i = 0; i < s->npolicies && st == AMOE_OK && !record_only; i++) st = request_done(&rs[i], e);
  free(prefill);
  work_free(&w);
  amoe_block_free(&b);
  return st;
}

/* ---- Batches (docs/design.md §17) ----
 * workload.batch slots each hold one request; a finished request's slot
 * takes the next request (continuous batching). Each pass, every slot
 * with a request adds its block: a speculative row's tree, or a one-token
 * row's next token of its block. Per layer the requests' stages (route,
 * or select and constrain) run one after another on their own blocks and
 * their sets and counts are merged; execute, place, cache and cost then
 * run once on the merged pass. Rows that consume a block per pass share
 * one schedule, one-token rows another: each group reads the slots'
 * requests once, every row of it on the same pass. */

typedef struct {
  amoe_source *src;   /* the slot's own reader */
  amoe_block b;       /* its request's current block */
  work w;             /* its scratch, and the block's router probabilities for every row */
  int req;            /* index into the request list; -1: free */
  int fresh;          /* its request has not had a decode pass yet */
  int pos, len;       /* one-token rows: the block's tokens decoded so far, of len (in w.seq) */
  int nn;             /* this pass: the nodes it verifies */
  uint16_t *prefill;  /* [chunk][layer][E] its request's prefill counts (prompt_tokens > 0) */
  int chunk, chunks;  /* chunked prefill: the next chunk, of chunks (done: chunk == chunks) */
} bslot;

typedef struct {     /* one pass's merged sets (one layer at a time) */
  work w;            /* its E-sized buffers: U, S, X, F, R, count, slot, wave */
  uint8_t *cov;      /* [layer][E] what the drafts so far route to (covered drafts) */
  const uint8_t *covl[AMOE_MAX_LAYERS];
  uint8_t *given;    /* [E] a pass-wide S (AMOE_BATCH_PASS) */
  amoe_vctx *vc;     /* [batch] their contexts */
  double *tau;       /* [batch] what each request committed */
  int *count;        /* [layer][E] natural rows: the pass's tokens per expert */
  amoe_status *rc;   /* [batch] each advancing slot's outcome */
  amoe_err *err;     /* [batch] and its error */
} bpass;

/* bpass's arrays once: (member, element type, count) in L layers, E
 * experts and B slots; run_batch allocates (zeroed) and frees them from
 * this list. */
#define BPASS_BUFFERS(BUF) \
  BUF(cov, uint8_t, L * E) \
  BUF(given, uint8_t, E) \
  BUF(vc, amoe_vctx, B) \
  BUF(tau, double, B) \
  BUF(count, int, L * E) \
  BUF(rc, amoe_status, B) \
  BUF(err, amoe_err, B)

/* The row's clock: every pass it ran, prefills included. */
static double row_clock(const row_state *rs) { return rs->res->tot.t_total + rs->res->tot.t_prefill; }

/* One pass of one row over the decoding slots act[0..na), with a prompt
 * chunk of each prefilling slot pf[0..npf) (chunked prefill). */
static amoe_status batch_pass(const amoe_spec *s, const amoe_offline *offline, row_state *rs, bslot *sl,
                              const int *act, int na, const int *pf, int npf, bpass *bp, int record_only,
                              amoe_err *e) {
  const amoe_model *M = &s->model;
  const int E = M->experts, k = M->top_k, L = M->moe_layers;
  const int one = rs->draft->one_token_per_pass, natural = rs->ver->all_experts;
  const int cover_draft = rs->draft->batch == AMOE_BATCH_COVERED;
  /* stage draft, request by request: each covered draft sees what the
   * requests drafted before it route to */
  if (cover_draft) memset(bp->cov, 0, (size_t)L * E);
  int tokens = 0, maxd = 0, candidates = 0;
  double kv = 0, attn = 0, mtp_s = 0, accepted = 0;
  for (int q = 0; q < na; q++) {
    bslot *x = &sl[act[q]];
    const amoe_block *b = &x->b;
    work *w = &x->w;
    int nn = 1;
    if (one) w->nodes[0] = w->seq[x->pos];
    else nn = block_draft(s, offline, rs, b, w, cover_draft ? bp->covl : NULL);
    x->nn = nn;
    memset(w->level, 0, AMOE_MAX_DEPTH * 4 * sizeof(int));
    int npath = 0;
    for (int i = 0; i < nn; i++) {
      const int t = w->nodes[i];
      w->level[b->depth[t]]++;
      maxd = b->depth[t] > maxd ? b->depth[t] : maxd;
      w->perturbation_sq[i] = 0;
      w->path[npath] = i;
      npath += b->accepted[t];
    }
    w->npath = npath;
    accepted += npath;
    if (cover_draft)
      for (int l = 0; l < L; l++)
        for (int i = 0; i < nn; i++) {
          const uint16_t *id = amoe_block_ids(b, l, w->nodes[i]);
          for (int j = 0; j < k; j++) bp->cov[(size_t)l * E + id[j]] = 1;
        }
    const double ctx = s->workload.context_tokens + rs->slot_committed[act[q]];
    kv += ctx;
    attn += nn * ctx;
    tokens += nn;
    candidates += b->n;
    if (rs->draft->mtp) { /* the chain positions run batched: the longest request's chain */
      const double d = mtp_draft_s(s, rs, b, w, nn);
      mtp_s = d > mtp_s ? d : mtp_s;
    }
  }
  const int decoded = tokens;
  for (int q = 0; q < npf; q++) { /* a chunk attends to the prompt before it and to itself (causal) */
    const int P = s->workload.prompt_tokens, c = s->workload.chunk_tokens, done = sl[pf[q]].chunk * c;
    const int n = P - done < c ? P - done : c;
    tokens += n;
    kv += done + n;
    attn += n * (done + 0.5 * n);
  }
  const amoe_cost_pass_ctx pc = pass_cost(s, rs, &(amoe_pass_shape){.model = M, .hw = &s->hw, .engine = &s->engine,
      .parallel = &s->parallel, .offload = rs->cache != NULL, .fetch_overlap = s->offload.overlap, .tokens = tokens,
      .depth = rs->draft->mtp || one ? 0 : maxd, .branch = s->workload.top_k * na, .accepted = accepted,
      .draft_priced = rs->draft->mtp && na > 0, .context = s->workload.context_tokens, .kv_tokens = kv,
      .attn_tokens = attn, .requests = na + npf}, !one && na > 0, mtp_s, candidates);
  amoe_pass_time pt = amoe_cost_pass_begin(&pc);
  const amoe_expert_coef ec = pc.ec;
  const int by_count = ec.per_token_s * tokens > ec.mem_s;
  const int counted = by_count || rs->cache;
  const int pass_wide = !natural && rs->ver->batch == AMOE_BATCH_PASS && rs->ver->select_pass && na > 0;
  work *wp = &bp->w;
  if (natural) { /* every request's natural routes, all its layers at once (each block read once per pass) */
    memset(bp->count, 0, (size_t)L * E * sizeof *bp->count);
    for (int q = 0; q < na; q++) {
      const bslot *x = &sl[act[q]];
      for (int l = 0; l < L; l++) amoe_route_natural(&x->b, l, k, x->w.nodes, x->nn, NULL, bp->count + (size_t)l * E);
    }
  }
  double su = 0, ss = 0, sx = 0;
  for (int l = 0; l < L; l++) {
    layer_sums ls = {0};
    const uint8_t *resident = rs->cache ? amoe_cache_resident(rs->cache, l) : NULL;
    memset(wp->U, 0, (size_t)E);
    memset(wp->S, 0, (size_t)E);
    memset(wp->X, 0, (size_t)E);
    memset(wp->count, 0, (size_t)E * sizeof *wp->count);
    if (pass_wide) { /* one S for the pass, from every request's block */
      for (int q = 0; q < na; q++) {
        bslot *x = &sl[act[q]];
        bp->vc[q] = vctx_of(s, offline, rs, &pc, &x->b, l, &x->w, x->nn, resident, NULL);
      }
      rs->ver->select_pass(bp->vc, na, bp->given);
    }
    const uint8_t *covered = rs->ver->batch == AMOE_BATCH_COVERED ? wp->X : NULL;
    double displaced = 0;
    uint8_t *restrict pU = wp->U, *restrict pS = wp->S, *restrict pX = wp->X;
    int *restrict pcount = wp->count;
    if (natural) { /* routed before the layers, request by request */
      const int *restrict cl = bp->count + (size_t)l * E;
      for (int y = 0; y < E; y++) {
        pcount[y] = cl[y];
        pU[y] = pX[y] = cl[y] > 0;
      }
      memset(pS, 1, (size_t)(E > 0 ? E : 0));
    }
    for (int q = 0; q < na && !natural; q++) {
      bslot *x = &sl[act[q]];
      work *w = &x->w;
      layer_sums lq = {0};
      layer_select_constrain(s, offline, rs, &pc, &x->b, l, w, x->nn, w->npath, counted, 0, resident, covered,
                             pass_wide ? bp->given : NULL, &lq);
      displaced += lq.displaced;
      const uint8_t *restrict U = w->U, *restrict S = w->S, *restrict X = w->X;
      const int *restrict count = w->count;
      for (int y = 0; y < E; y++) {
        pU[y] |= U[y];
        pS[y] |= S[y];
      }
      if (counted)
        for (int y = 0; y < E; y++) {
          pcount[y] += count[y];
          pX[y] |= count[y] > 0;
        }
      else
        for (int y = 0; y < E; y++) pX[y] |= X[y];
    }
    for (int q = 0; q < npf; q++) { /* the prompt chunks' experts, natural */
      const bslot *x = &sl[pf[q]];
      const uint16_t *pc_l = x->prefill + ((size_t)x->chunk * L + l) * E;
      for (int y = 0; y < E; y++) {
        const uint8_t run = pc_l[y] > 0;
        wp->count[y] += pc_l[y];
        wp->X[y] |= run;
        wp->U[y] |= run;
        wp->S[y] |= run;
      }
    }
    for (int y = 0; y < E; y++) {
      ls.nu += wp->U[y];
      ls.ns += wp->S[y];
    }
    if (!record_only) {
      rs->res->tot.displaced += displaced;
      rs->res->tot.assignments += (double)tokens * k;
    }
    AMOE_TRY(layer_stages(s, rs, &pc, l, wp, counted, by_count, 0, record_only, &ls, &pt, e));
    if (record_only) continue;
    su += ls.nu;
    ss += ls.ns;
    sx += ls.nx;
  }
  AMOE_TRY(pass_close(rs, &pc, record_only, e));
  if (record_only) return AMOE_OK;
  amoe_totals *tt = &rs->res->tot;
  tt->t_total += pt.total;
  tt->passes += 1;
  tt->request_passes += na;
  tt->layer_blocks += L;
  tt->union_sum += su;
  tt->eligible_sum += ss;
  tt->executed_sum += sx;
  tt->verified += decoded;
  /* acceptance, request by request from its own block (§7) */
  for (int q = 0; q < na; q++) {
    bslot *x = &sl[act[q]];
    work *w = &x->w;
    int tau = 1, deviated;
    double psum;
    if (one) {
      psum = sqrt((double)w->perturbation_sq[0]);
      deviated = amoe_accept_flips(s, &x->b, w->nodes[0], psum);
      tt->blocks += x->pos + 1 == x->len;
    } else {
      const amoe_accept_result ar = amoe_accept_walk(s, &x->b, w->nodes, x->nn, w->perturbation_sq);
      tau = ar.tau;
      deviated = ar.deviated;
      psum = ar.perturbation_sum;
      tt->blocks += 1;
    }
    tt->committed += tau;
    tt->perturbation_sum += psum;
    tt->perturbation_n += tau;
    tt->deviated += deviated;
    rs->slot_committed[act[q]] += tau;
    bp->tau[q] = tau;
  }
  /* engine.request_s per committed token: known once every request is walked */
  const double per_token = amoe_cost_request_tokens(&s->engine, bp->tau, na);
  tt->t_step += per_token;
  tt->t_total += per_token;
  return AMOE_OK;
}

/* The slot's next block into x->b (AMOE_END: its request is done); a
 * one-token group's tokens of it into x->w.seq (the draft of rs0, which
 * reads the block alone: slots advance on several threads). */
static amoe_status slot_next(const amoe_spec *s, const amoe_offline *offline, const row_state *rs0, int one, bslot *x,
                             amoe_err *e) {
  const amoe_status rc = amoe_source_next(x->src, &x->b, e);
  if (rc != AMOE_OK) return rc;
  if (x->b.experts < 1) return amoe_fail(e, AMOE_EINVAL, "a block with no experts");
  AMOE_TRY(work_fit(&x->w, &x->b, e));
  memset(x->w.pdone, 0, (size_t)x->b.layers * x->b.n);
  memset(x->w.ldone, 0, (size_t)x->b.layers);
  x->pos = 0;
  if (one) {
    const amoe_dctx dc = {&x->b, s, rs0->row, offline, s->workload.nodes, NULL, NULL, x->w.dscratch, NULL, NULL, NULL};
    x->len = rs0->draft->choose(&dc, x->w.nodes);
    memcpy(x->w.seq, x->w.nodes, (size_t)x->len * sizeof *x->w.seq);
  }
  return AMOE_OK;
}

/* The slots todo[0..n) to their next blocks, rc[i] and e[i] each: on the
 * generator's threads when it has them (each slot's generator is its own,
 * so the blocks are the same on any count). */
typedef struct {
  const amoe_spec *s;
  const amoe_offline *offline;
  const row_state *rs0;
  int one, n, step, first;
  bslot *sl;
  const int *todo;
  amoe_status *rc;
  amoe_err *e;
} advance_job;
static void *advance_some(void *v) {
  const advance_job *j = v;
  for (int i = j->first; i < j->n; i += j->step)
    j->rc[i] = slot_next(j->s, j->offline, j->rs0, j->one, &j->sl[j->todo[i]], &j->e[i]);
  return NULL;
}
static void advance(const amoe_spec *s, const amoe_offline *offline, const row_state *rs0, int one, bslot *sl,
                    const int *todo, int n, amoe_status *rc, amoe_err *e) {
  enum { MAX_THREADS = 16 };
  int T = s->workload.source == AMOE_SRC_SYNTHETIC ? s->workload.threads : 1; /* (a trace reads fast enough) */
  T = T > n ? n : T > MAX_THREADS ? MAX_THREADS : T;
  if (T < 1) T = 1;
  advance_job job[MAX_THREADS];
  pthread_t th[MAX_THREADS];
  int started[MAX_THREADS] = {0};
  for (int t = 0; t < T; t++) job[t] = (advance_job){s, offline, rs0, one, n, T, t, sl, todo, rc, e};
  for (int t = 1; t < T; t++) started[t] = pthread_create(&th[t], NULL, advance_some, &job[t]) == 0;
  advance_some(&job[0]);
  for (int t = 1; t < T; t++)
    if (started[t]) pthread_join(th[t], NULL);
    else advance_some(&job[t]); /* (no thread: here) */
}

/* The rows rows[0..nr) of one schedule (one: one token per pass) over
 * the requests rq[0..nrq). */
static amoe_status batch_group(const amoe_spec *s, const amoe_offline *offline, amoe_source *src, row_state *rs,
                               const int *rows, int nr, int one, const amoe_source_request *rq, int nrq, bslot *sl,
                               bpass *bp, const amoe_run_hooks *h, int record_only, int group, int groups,
                               amoe_err *e) {
  const int B = s->workload.batch, P = s->workload.prompt_tokens;
  const int chunked = s->workload.prefill_schedule == AMOE_PREFILL_CHUNKED;
  int act[AMOE_MAX_BATCH], pf[AMOE_MAX_BATCH], todo[AMOE_MAX_BATCH], next = 0;
  uint64_t done = 0, total = 0;
  for (int i = 0; i < nrq; i++) total += (uint64_t)rq[i].blocks;
  for (int i = 0; i < B; i++) sl[i].req = -1;
  for (int r = 0; r < nr; r++) rs[rows[r]].have_prev = 0;
  for (;;) {
    for (int i = 0; i < B && next < nrq; i++) { /* continuous batching: a free slot takes the next request */
      bslot *x = &sl[i];
      if (x->req >= 0) continue;
      AMOE_TRY(amoe_source_seek(x->src, &rq[next], e));
      const amoe_status rc = slot_next(s, offline, &rs[rows[0]], one, x, e);
      if (rc == AMOE_END) return amoe_fail(e, AMOE_EINVAL, "request %u has no blocks", rq[next].id);
      AMOE_TRY(rc);
      x->req = next++;
      x->fresh = 1;
      for (int r = 0; r < nr; r++) rs[rows[r]].slot_committed[i] = 0;
      int made = 0;
      const int chunk = chunked ? s->workload.chunk_tokens : 0;
      if (P > 0) AMOE_TRY(amoe_source_prefill(src, rq[x->req].id, P, chunk, x->prefill, &made, e));
      x->w.prefill = x->prefill;
      x->chunk = x->chunks = 0;
      if (made && chunked) { /* its chunks join the next passes; it decodes after the last */
        x->chunks = (P + chunk - 1) / chunk;
        for (int r = 0; r < nr && !record_only; r++) rs[rows[r]].res->tot.prefills += 1;
      }
      for (int r = 0; r < nr && made && !chunked; r++) /* separate: its own pass, which the running requests wait for */
        AMOE_TRY(row_prefill(s, &rs[rows[r]], &x->w, record_only, e));
    }
    int na = 0, npf = 0;
    for (int i = 0; i < B; i++)
      if (sl[i].req >= 0 && sl[i].chunk < sl[i].chunks) pf[npf++] = i;
      else if (sl[i].req >= 0) act[na++] = i;
    if (na + npf == 0) break;
    AMOE_TRY(work_fit(&bp->w, &sl[na ? act[0] : pf[0]].b, e));
    for (int r = 0; r < nr; r++) {
      row_state *x = &rs[rows[r]];
      for (int q = 0; q < na; q++)
        if (sl[act[q]].fresh) x->slot_first[act[q]] = row_clock(x);
      AMOE_TRY(batch_pass(s, offline, x, sl, act, na, pf, npf, bp, record_only, e));
    }
    for (int q = 0; q < npf; q++) sl[pf[q]].chunk++;
    int nt = 0;
    for (int q = 0; q < na; q++) { /* the slots whose block is done */
      bslot *x = &sl[act[q]];
      x->fresh = 0;
      if (one && ++x->pos < x->len) continue;
      todo[nt++] = act[q];
    }
    done += (uint64_t)nt;
    advance(s, offline, &rs[rows[0]], one, sl, todo, nt, bp->rc, bp->err);
    for (int q = 0; q < nt; q++) { /* in slot order, whatever the threads did */
      const int i = todo[q];
      if (bp->rc[q] == AMOE_OK) continue;
      if (bp->rc[q] != AMOE_END) {
        *e = bp->err[q];
        return bp->rc[q];
      }
      for (int r = 0; r < nr && !record_only; r++) { /* the request is done */
        row_state *y = &rs[rows[r]];
        const double c = y->slot_committed[i];
        if (c > 0) AMOE_TRY(push_request(y->res, c, row_clock(y) - y->slot_first[i], e));
      }
      sl[i].req = -1;
    }
    if (h && h->on_progress && !record_only) /* (the groups' shares of the blocks, one after another) */
      h->on_progress(h->ctx, (group * total + done) / (uint64_t)groups);
    if (h && h->stop && h->stop(h->ctx)) return amoe_fail(e, AMOE_EINTR, "interrupted");
  }
  return AMOE_OK;
}

/* Every row at workload.batch > 1: block-per-pass rows, then one-token rows. */
static amoe_status run_batch(const amoe_spec *s, const amoe_offline *offline, amoe_source *src, row_state *rs,
                             const amoe_run_hooks *h, int record_only, amoe_err *e) {
  const int B = s->workload.batch, L = s->model.moe_layers, E = s->model.experts;
  amoe_source_request *rq = NULL;
  int nrq = 0;
  AMOE_TRY(amoe_source_requests(src, &rq, &nrq, e));
  bslot *sl = calloc((size_t)B, sizeof *sl);
  bpass bp;
  memset(&bp, 0, sizeof bp);
  int ok = sl != NULL;
#define BPASS_ALLOC(f, T, cnt) ok &= (bp.f = calloc((size_t)(cnt), sizeof(T))) != NULL;
  BPASS_BUFFERS(BPASS_ALLOC)
#undef BPASS_ALLOC
  amoe_status st = ok ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  for (int l = 0; l < L && bp.cov; l++) bp.covl[l] = bp.cov + (size_t)l * E;
  for (int i = 0; i < B && st == AMOE_OK; i++) {
    amoe_block_init(&sl[i].b, L, E, amoe_source_m(src));
    st = amoe_source_slot(src, i, &sl[i].src, e);
    const int P = s->workload.prompt_tokens, c = s->workload.chunk_tokens;
    const size_t chunks = s->workload.prefill_schedule == AMOE_PREFILL_CHUNKED && c > 0 ? (size_t)(P + c - 1) / c : 1;
    if (st == AMOE_OK && P > 0 && !(sl[i].prefill = malloc(chunks * L * E * sizeof *sl[i].prefill)))
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  }
  int kinds[2] = {0, 0};
  for (int i = 0; i < s->npolicies; i++) kinds[rs[i].draft->one_token_per_pass != 0] = 1;
  const int groups = kinds[0] + kinds[1];
  for (int one = 0, g = 0; one < 2 && st == AMOE_OK; one++) {
    int rows[AMOE_MAX_POLICIES], nr = 0;
    for (int i = 0; i < s->npolicies; i++)
      if (rs[i].draft->one_token_per_pass == one) rows[nr++] = i;
    if (nr) st = batch_group(s, offline, src, rs, rows, nr, one, rq, nrq, sl, &bp, h, record_only, g++, groups, e);
  }
  for (int i = 0; sl && i < B; i++) {
    amoe_block_free(&sl[i].b);
    work_free(&sl[i].w);
    free(sl[i].prefill);
  }
  work_free(&bp.w);
#define BPASS_FREE(f, T, cnt) free(bp.f);
  BPASS_BUFFERS(BPASS_FREE)
#undef BPASS_FREE
  free(sl);
  free(rq);
  return st;
}

static amoe_cache_cfg cache_cfg(const amoe_spec *s, int policy) {
  amoe_cache_cfg c = {policy, s->offload.order, s->offload.overflow};
  return c;
}

amoe_status amoe_run(const amoe_spec *s, const amoe_offline *offline, amoe_source *src,
                     const amoe_run_hooks *h, amoe_row_result *rows, amoe_err *e) {
  const int P = s->npolicies, L = s->model.moe_layers, E = s->model.experts;
  if (s->workload.batch > AMOE_MAX_BATCH)
    return amoe_fail(e, AMOE_EINVAL, "workload.batch: %d, at most %d", s->workload.batch, AMOE_MAX_BATCH);
  if (!(s->hw.moe_eta > 0 && s->hw.hbm_bw > 0 && s->hw.h2d_bw > 0 && s->hw.peak_flops > 0))
    return amoe_fail(e, AMOE_EINVAL, "hardware %s: hbm_bw, h2d_bw, peak_flops and moe_eta must be positive", s->hw.name);
  row_state rs[AMOE_MAX_POLICIES];
  memset(rs, 0, sizeof rs);
  amoe_status st = AMOE_OK;
  amoe_layout *layout = NULL;
  for (int i = 0; i < P; i++) memset(&rows[i], 0, sizeof rows[i]);
  if (L > 0 && amoe_parallel_has_groups(&s->parallel, s->hw.gpus)) { /* (a dense model has no experts to place) */ /* expert groups on several GPUs (§16) */
    const int groups = s->parallel.moe_ep > 0 ? s->parallel.moe_ep : 1;
    layout = amoe_layout_new(L, E, groups);
    if (!layout) return amoe_fail(e, AMOE_ENOMEM, "out of memory for the placement");
    switch (s->parallel.placement) {
    case AMOE_PLACE_ROUND_ROBIN: amoe_layout_round_robin(layout); break;
    case AMOE_PLACE_FILE: st = amoe_layout_read(layout, s->parallel.placement_file, e); break;
    case AMOE_PLACE_BALANCED:
      st = offline->load ? amoe_layout_balanced(layout, offline->load, s->parallel.redundant, e)
                    : amoe_fail(e, AMOE_EINVAL, "parallel.placement: balanced needs a calibration workload's load");
      break;
    default: break; /* contiguous */
    }
  }
  for (int i = 0; i < P && st == AMOE_OK; i++) {
    rows[i].layers = calloc((size_t)L, sizeof *rows[i].layers);
    if (!rows[i].layers) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
    rs[i].row = &s->policies[i];
    rs[i].request = -1;
    rs[i].layout = layout;
    rows[i].tot.groups = layout ? amoe_layout_groups(layout) : 1;
    rs[i].ver = &amoe_verifier_table[s->policies[i].verifier];
    rs[i].draft = &amoe_draft_table[s->policies[i].draft];
    rs[i].res = &rows[i];
    int which, idx;
    if (amoe_policy_param(rs[i].row, "selection_s", &which, &idx))
      rs[i].select_s = which ? rs[i].row->vparam[idx] : rs[i].row->dparam[idx];
    const size_t dsb = rs[i].draft->state_bytes ? rs[i].draft->state_bytes(L, E) : 0;
    if (dsb) rs[i].draft_state = calloc(1, dsb);
    rs[i].prev_x = calloc((size_t)L * E, 1);
    const int B = s->workload.batch > 1 ? s->workload.batch : 0;
    if (B) {
      rs[i].slot_first = calloc((size_t)B, sizeof *rs[i].slot_first);
      rs[i].slot_committed = calloc((size_t)B, sizeof *rs[i].slot_committed);
    }
    if ((dsb && !rs[i].draft_state) || !rs[i].prev_x || (B && (!rs[i].slot_first || !rs[i].slot_committed)))
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  }
  /* Read what the rows need of the logits; routes handed to a backend
   * carry weights renormalised over every stored entry. */
  amoe_logits need = h && h->on_route ? AMOE_LOGITS_ALL : AMOE_LOGITS_NONE;
  for (int i = 0; i < P; i++) {
    if (rs[i].ver->logits > need) need = rs[i].ver->logits;
    /* a constrained row's stages read the natural top-k weights (probs_of),
     * whatever the row declares */
    if (!rs[i].ver->all_experts && need < AMOE_LOGITS_TOP) need = AMOE_LOGITS_TOP;
  }
  amoe_source_want_logits(src, need);
  int belady = s->offload.enabled && amoe_cache_policy_needs_future(s->offload.policy); /* (belady, min) */
  if (st == AMOE_OK && belady) {
    /* Belady needs the future: pass 1 realises each row's request sequence
     * (decisions that read residency see an LRU cache there). */
    for (int i = 0; i < P && st == AMOE_OK; i++) {
      rs[i].cache = amoe_cache_new(L, E, s->offload.slots_per_layer, cache_cfg(s, AMOE_CACHE_LRU), NULL);
      rs[i].log = amoe_reqlog_new(L, E);
      if (!rs[i].cache || !rs[i].log) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
    }
    amoe_run_hooks stop_only = {0};
    if (h) stop_only.ctx = h->ctx, stop_only.stop = h->stop;
    if (st == AMOE_OK) st = (s->workload.batch > 1 ? run_batch : run_sweep)(s, offline, src, rs, &stop_only, 1, e);
    for (int i = 0; i < P; i++) /* pass 2 starts from no history */
      if (rs[i].draft_state) memset(rs[i].draft_state, 0, rs[i].draft->state_bytes(L, E));
    for (int i = 0; i < P && st == AMOE_OK; i++) {
      amoe_cache_free(rs[i].cache);
      rs[i].cache = NULL;
      if (amoe_reqlog_finalize(rs[i].log) != AMOE_OK) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
    }
  }
  for (int i = 0; i < P && st == AMOE_OK && s->offload.enabled; i++) {
    rs[i].cache = amoe_cache_new(L, E, s->offload.slots_per_layer, cache_cfg(s, s->offload.policy), rs[i].log);
    if (!rs[i].cache) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  }
  /* the log is read by the cache now, no longer written */
  amoe_reqlog *logs[AMOE_MAX_POLICIES];
  for (int i = 0; i < P; i++) {
    logs[i] = rs[i].log;
    rs[i].log = NULL;
  }
  if (st == AMOE_OK) st = (s->workload.batch > 1 ? run_batch : run_sweep)(s, offline, src, rs, h, 0, e);
  amoe_source_want_logits(src, AMOE_LOGITS_ALL);
  for (int i = 0; i < P; i++) {
    amoe_cache_free(rs[i].cache);
    amoe_reqlog_free(logs[i]);
    free(rs[i].draft_state);
    free(rs[i].prev_x);
    free(rs[i].slot_first);
    free(rs[i].slot_committed);
  }
  amoe_layout_free(layout);
  if (st != AMOE_OK)
    for (int i = 0; i < P; i++) amoe_row_result_free(&rows[i]);
  return st;
}
