/* Batches (docs/design.md §17): workload.batch slots each hold one
 * request, and every pass runs the stages of stages.h over the slots'
 * blocks together. */
#include <limits.h>
#include <math.h>
#include <pthread.h>

#include "schedule.h"
#include "stages.h"

/*
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
  amoe_sched_slot q;  /* what the scheduler knows of it (schedule.h): its request, KV, chunks */
  int fresh;          /* its request has not had a decode pass yet */
  int pos, len;       /* one-token rows: the block's tokens decoded so far, of len (in w.seq) */
  int nn;             /* this pass: the nodes it verifies */
  uint16_t *prefill;  /* [chunk][layer][E] its request's prefill counts (prompt > 0) */
  int target;         /* open arrivals of generated requests: the decode tokens at which it ends, its output tokens
                       less the first its prefill gave (-1: at its last block) */
  int gave_first;     /* open arrivals: its prefill gave its first token, an output token beside its committed ones */
  /* open arrivals (a group of one row): when its request took the slot,
   * and its first token (-1: not yet) */
  double admitted_s, first_s;
  uint16_t *prev;     /* [layer][top_k] the route of its request's last committed token (amoe_dctx.previous), where a row may read it; else NULL */
  int have_prev;      /* prev holds one of its current request */
} request_slot;

typedef struct {     /* one pass's merged sets (one layer at a time) */
  work w;            /* its E-sized buffers: U, S, X, F, R, count, slot, wave */
  uint8_t *cov;      /* [layer][E] what the drafts so far route to (covered drafts) */
  const uint8_t *covl[AMOE_MAX_LAYERS];
  uint8_t *pass_S;    /* [E] a pass-wide S (AMOE_BATCH_PASS) */
  amoe_vctx *vc;     /* [batch] their contexts */
  double *tau;       /* [batch] what each request committed */
  int *count, *count_odd; /* [layer][E] natural rows: the pass's tokens per expert, in two parts */
  amoe_status *rc;   /* [batch] each advancing slot's outcome */
  amoe_err *err;     /* [batch] and its error */
  amoe_dctx *dc;     /* [batch] a pass-wide draft's contexts (choose_pass) */
  int **outs;        /* [batch] where it writes each request's nodes */
  int *counts;       /* [batch] and how many */
  int prefill_cap;   /* the tokens a slot's prefill counts have room for */
} pass_buffers;

/* pass_buffers's arrays once: (member, element type, count) in L layers, E
 * experts and B slots; run_batch allocates (zeroed) and frees them from
 * this list. */
#define BPASS_BUFFERS(BUF) \
  BUF(cov, uint8_t, L * E) \
  BUF(pass_S, uint8_t, E) \
  BUF(vc, amoe_vctx, B) \
  BUF(tau, double, B) \
  BUF(count, int, L * E) \
  BUF(count_odd, int, L * E) \
  BUF(rc, amoe_status, B) \
  BUF(err, amoe_err, B) \
  BUF(dc, amoe_dctx, B) \
  BUF(outs, int *, B) \
  BUF(counts, int, B)

/* The row's clock: every pass it ran, prefills included, and (open
 * arrivals) the time it waited for a request to arrive. */
static double row_clock(const row_state *rs) {
  return rs->res->tot.t_total + rs->res->tot.t_prefill + rs->res->tot.t_idle;
}

/* The KV a decoding request's attention reads: a request with a prompt,
 * its own tokens (the prompt, the first token its prefill gave and what it
 * has committed since); without one, workload.context_tokens stands for
 * the context before it, and its committed tokens add to it. */
static double request_context(const amoe_spec *s, const request_slot *x, double committed) {
  if (x->q.prompt > 0) return x->q.prompt + x->gave_first + committed;
  return s->workload.context_tokens + committed;
}

/* A batched pass's shape, summed over its requests and prompt chunks. */
typedef struct {
  int tokens, decoded, maxd, candidates; /* decoded: the requests' verified tokens (tokens: and the prompt chunks') */
  double kv, attn, mtp_s, accepted;
} pass_shape_sums;

/* Stage draft and each request's nodes (pass_nodes), then the prompt
 * chunks' tokens: the pass's shape. A pass-wide draft chooses every
 * request's nodes at once; else each request drafts its own, a covered
 * draft seeing what the requests drafted before it route to. */
static pass_shape_sums batch_open(const amoe_spec *s, const amoe_offline *offline, row_state *rs, request_slot *sl,
                                  const int *act, int na, const int *pf, int npf, pass_buffers *bp, int pass_draft) {
  const int E = s->model.experts, k = s->model.top_k, L = s->model.moe_layers;
  const int one_token = rs->draft->one_token_per_pass, cover_draft = rs->draft->batch == AMOE_BATCH_COVERED;
  pass_shape_sums o = {0};
  if (cover_draft) memset(bp->cov, 0, (size_t)L * E);
  if (pass_draft) {
    const uint8_t *res_layers[AMOE_MAX_LAYERS];
    for (int l = 0; rs->cache && l < L; l++) res_layers[l] = amoe_cache_resident(rs->cache, l);
    for (int q = 0; q < na; q++) {
      request_slot *x = &sl[act[q]];
      bp->dc[q] = (amoe_dctx){&x->b, s, rs->row, offline, s->workload.nodes, rs->cache ? res_layers : NULL,
                              rs->draft_state, x->w.dscratch, q ? NULL : &rs->predicted, rs->layout, NULL,
                              x->have_prev ? x->prev : NULL, request_context(s, x, rs->slot_committed[act[q]])};
      bp->outs[q] = x->w.nodes;
    }
    rs->predicted = (amoe_draft_prediction){0, 0};
    rs->draft->choose_pass(bp->dc, na, bp->outs, bp->counts);
  }
  for (int q = 0; q < na; q++) {
    request_slot *x = &sl[act[q]];
    const amoe_block *b = &x->b;
    work *w = &x->w;
    int nn = 1, maxd;
    if (one_token) w->nodes[0] = w->seq[x->pos];
    else if (pass_draft) nn = bp->counts[q];
    else nn = block_draft(s, offline, rs, b, w, cover_draft ? bp->covl : NULL, x->have_prev ? x->prev : NULL);
    x->nn = nn;
    w->npath = pass_nodes(b, w, nn, &maxd);
    o.maxd = maxd > o.maxd ? maxd : o.maxd;
    o.accepted += w->npath;
    if (cover_draft)
      for (int l = 0; l < L; l++)
        for (int i = 0; i < nn; i++) {
          const uint16_t *id = amoe_block_ids(b, l, w->nodes[i]);
          for (int j = 0; j < k; j++) bp->cov[(size_t)l * E + id[j]] = 1;
        }
    const double ctx = request_context(s, x, rs->slot_committed[act[q]]);
    o.kv += ctx;
    o.attn += nn * ctx;
    o.tokens += nn;
    o.candidates += b->n;
    if (rs->draft->mtp) { /* the chain positions run batched: the longest request's chain */
      const double d = mtp_draft_s(s, rs, b, w, nn);
      o.mtp_s = d > o.mtp_s ? d : o.mtp_s;
    }
  }
  o.decoded = o.tokens;
  for (int q = 0; q < npf; q++) { /* its chunks attend to the prompt before them and to themselves (causal) */
    const int P = sl[pf[q]].q.prompt, c = s->workload.chunk_tokens, done = sl[pf[q]].q.chunk * c;
    const int upto = (sl[pf[q]].q.chunk + sl[pf[q]].q.take) * c, n = (P < upto ? P : upto) - done;
    o.tokens += n;
    o.kv += done + n;
    o.attn += n * (done + 0.5 * n);
  }
  return o;
}

/* Natural rows: every request's routes, all its layers at once, into the
 * pass's per-layer counts (each block read once per pass). */
static void batch_route_natural(const amoe_spec *s, const request_slot *sl, const int *act, int na, pass_buffers *bp) {
  const int E = s->model.experts, k = s->model.top_k, L = s->model.moe_layers;
  memset(bp->count, 0, (size_t)L * E * sizeof *bp->count);
  memset(bp->count_odd, 0, (size_t)L * E * sizeof *bp->count_odd);
  for (int q = 0; q < na; q++) {
    const request_slot *x = &sl[act[q]];
    for (int l = 0; l < L; l++)
      amoe_route_natural_counts2(&x->b, l, k, x->w.nodes, x->nn, bp->count + (size_t)l * E,
                                 bp->count_odd + (size_t)l * E);
  }
}

/* Layer l's merged sets in bp->w (U S X, counts): the natural routes, or
 * each request's select and constrain over its own block (one S for the
 * pass when pass_wide), then the prompt chunks' experts, natural. Returns
 * the weight the requests' constraints displaced. */
static double batch_layer_sets(const amoe_spec *s, const amoe_offline *offline, row_state *rs,
                               const amoe_cost_pass_ctx *pc, request_slot *sl, const int *act, int na, const int *pf,
                               int npf, pass_buffers *bp, int l, int counted, int pass_wide) {
  const int E = s->model.experts, L = s->model.moe_layers;
  const uint8_t *resident = layer_resident(rs, l, E);
  work *wp = &bp->w;
  memset(wp->U, 0, (size_t)E);
  memset(wp->S, 0, (size_t)E);
  memset(wp->X, 0, (size_t)E);
  memset(wp->count, 0, (size_t)E * sizeof *wp->count);
  if (pass_wide) { /* one S for the pass, from every request's block */
    for (int q = 0; q < na; q++) {
      request_slot *x = &sl[act[q]];
      bp->vc[q] = vctx_of(s, offline, rs, pc, &x->b, l, &x->w, x->nn, resident, NULL);
    }
    rs->ver->select_pass(bp->vc, na, bp->pass_S);
  }
  const uint8_t *covered = rs->ver->batch == AMOE_BATCH_COVERED ? wp->X : NULL;
  double displaced = 0;
  uint8_t *restrict pU = wp->U, *restrict pS = wp->S, *restrict pX = wp->X;
  int *restrict pcount = wp->count;
  if (rs->ver->all_experts) {
    const int *restrict cl = bp->count + (size_t)l * E, *restrict cl2 = bp->count_odd + (size_t)l * E;
    for (int y = 0; y < E; y++) {
      pcount[y] = cl[y] + cl2[y];
      pU[y] = pX[y] = pcount[y] > 0;
    }
    memset(pS, 1, (size_t)(E > 0 ? E : 0));
  }
  for (int q = 0; q < na && !rs->ver->all_experts; q++) {
    request_slot *x = &sl[act[q]];
    work *w = &x->w;
    layer_sums lq = {0};
    layer_select_constrain(s, offline, rs, pc, &x->b, l, w, x->nn, w->npath, counted, 0, resident, covered,
                           pass_wide ? bp->pass_S : NULL, &lq);
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
  for (int q = 0; q < npf; q++) /* the prompt chunks' experts, natural */
    for (int ch = sl[pf[q]].q.chunk; ch < sl[pf[q]].q.chunk + sl[pf[q]].q.take; ch++) {
      const uint16_t *pc_l = sl[pf[q]].prefill + ((size_t)ch * L + l) * E;
      for (int y = 0; y < E; y++) {
        const uint8_t run = pc_l[y] > 0;
        wp->count[y] += pc_l[y];
        wp->X[y] |= run;
        wp->U[y] |= run;
        wp->S[y] |= run;
      }
    }
  return displaced;
}

/* Acceptance, request by request from its own block (§7), into the row's
 * totals; bp->tau[q]: what request q committed (cut at its length). */
static void batch_accept(const amoe_spec *s, row_state *rs, request_slot *sl, const int *act, int na,
                         pass_buffers *bp) {
  const int one_token = rs->draft->one_token_per_pass;
  amoe_totals *tt = &rs->res->tot;
  for (int q = 0; q < na; q++) {
    request_slot *x = &sl[act[q]];
    const amoe_accept_result ar = pass_accept(s, &x->b, &x->w, x->nn, one_token);
    int tau = ar.tau;
    tt->blocks += one_token ? x->pos + 1 == x->len : 1;
    if (x->target >= 0) { /* the engine stops at the request's length: what runs past it is not committed */
      const int left = x->target - (int)rs->slot_committed[act[q]];
      tau = tau < left ? tau : left;
    }
    tt->committed += tau;
    tt->perturbation_sum += ar.perturbation_sum;
    tt->perturbation_n += tau;
    tt->deviated += ar.deviated;
    tt->deviation_predicted += x->w.deviation[0];
    tt->deviation_budget += x->w.deviation[1];
    rs->slot_committed[act[q]] += tau;
    bp->tau[q] = tau;
  }
}

/* One pass of one row over the decoding slots act[0..na), with a prompt
 * chunk of each prefilling slot pf[0..npf) (chunked prefill): open it on
 * every request's nodes, then per layer the merged sets through the
 * stages, then each request's acceptance. */
static amoe_status batch_pass(const amoe_spec *s, const amoe_offline *offline, row_state *rs, request_slot *sl,
                              const int *act, int na, const int *pf, int npf, pass_buffers *bp, int log_pass,
                              amoe_err *e) {
  const int k = s->model.top_k, L = s->model.moe_layers, one_token = rs->draft->one_token_per_pass;
  const int pass_draft = !one_token && rs->draft->choose_pass && na > 0;
  const pass_shape_sums o = batch_open(s, offline, rs, sl, act, na, pf, npf, bp, pass_draft);
  amoe_pass_shape sh = amoe_spec_pass_shape(s, o.tokens, rs->draft->mtp || one_token ? 0 : o.maxd);
  sh.offload = rs->cache != NULL, sh.branch = s->workload.top_k * na, sh.accepted = o.accepted;
  sh.draft_priced = rs->draft->mtp && na > 0, sh.kv_tokens = o.kv, sh.attn_tokens = o.attn, sh.requests = na + npf;
  sh.prompt_tokens = o.tokens - o.decoded;
  sh.draft_prompt = one_token ? 0 : sh.prompt_tokens; /* the prompt chunks' tokens, drafted over too */
  const amoe_cost_pass_ctx pc = pass_cost(s, rs, &sh, !one_token && na > 0, o.mtp_s, o.candidates);
  amoe_pass_time pt = amoe_cost_pass_begin(&pc);
  const int by_count = pc.ec.per_token_s * o.tokens > pc.ec.mem_s, counted = by_count || rs->cache || rs->on_gpu;
  const int pass_wide = !rs->ver->all_experts && rs->ver->batch == AMOE_BATCH_PASS && rs->ver->select_pass && na > 0;
  if (rs->ver->all_experts) batch_route_natural(s, sl, act, na, bp);
  double su = 0, ss = 0, sx = 0;
  for (int l = 0; l < L; l++) {
    layer_sums ls = {0};
    const double displaced = batch_layer_sets(s, offline, rs, &pc, sl, act, na, pf, npf, bp, l, counted, pass_wide);
    for (int y = 0; y < s->model.experts; y++) {
      ls.nu += bp->w.U[y];
      ls.ns += bp->w.S[y];
    }
    if (!log_pass) {
      rs->res->tot.displaced += displaced;
      rs->res->tot.assignments += (double)o.tokens * k;
    }
    AMOE_TRY(layer_stages(s, rs, &pc, l, &bp->w, counted, by_count, 0, log_pass, &ls, &pt, e));
    if (log_pass) continue;
    su += ls.nu;
    ss += ls.ns;
    sx += ls.nx;
  }
  AMOE_TRY(pass_close(rs, &pc, log_pass, e));
  if (log_pass) return AMOE_OK;
  amoe_totals *tt = &rs->res->tot;
  tt->t_total += pt.total;
  tt->passes += 1;
  tt->request_passes += na;
  tt->layer_blocks += L;
  tt->union_sum += su;
  tt->eligible_sum += ss;
  tt->executed_sum += sx;
  tt->verified += o.decoded;
  batch_accept(s, rs, sl, act, na, bp);
  /* engine.request_s per committed token: known once every request is walked */
  const double per_token = amoe_cost_request_tokens(&s->engine, bp->tau, na);
  tt->t_step += per_token;
  tt->t_total += per_token;
  if (pass_draft) account_prediction(tt, &rs->predicted, pt.total + per_token);
  return AMOE_OK;
}

/* Slot i's request is done: into every row's list, and (open arrivals,
 * one row) with its times (the scheduler then frees the slot). */
static amoe_status slot_release(row_state *rs, const int *rows, int nr, request_slot *sl, int i,
                                const amoe_arrival *plan, int log_pass, amoe_err *e) {
  for (int r = 0; r < nr && !log_pass; r++) {
    row_state *y = &rs[rows[r]];
    const int id = sl[i].q.req;
    const amoe_request_stat times = {.arrival_s = plan ? plan[id].arrival_s : 0, .admitted_s = sl[i].admitted_s,
                                     .first_s = sl[i].first_s, .finish_s = row_clock(y), .request = id,
                                     .prompt_tokens = sl[i].q.prompt, .preemptions = sl[i].q.preempted,
                                     .first_tokens = sl[i].gave_first};
    if (plan) AMOE_TRY(request_logged(y->res, y->slot_committed[i], &times, e));
    else AMOE_TRY(request_done(y->res, y->slot_committed[i], row_clock(y) - y->slot_first[i], e));
  }
  return AMOE_OK;
}

/* Slot x's request prefills `tokens` (its prompt; a preempted request's
 * prompt and output so far): chunked, its chunks join the next passes and
 * it decodes after the last; separate, its own pass now, which the running
 * requests wait for and which gives its first token. */
static amoe_status start_prefill(const amoe_spec *s, amoe_source *src, row_state *rs, const int *rows, int nr,
                                 request_slot *x, uint32_t id, int tokens, int log_pass, amoe_err *e) {
  const int chunked = s->workload.prefill_schedule == AMOE_PREFILL_CHUNKED;
  const int chunk = chunked ? s->workload.chunk_tokens : 0;
  int made = 0;
  if (tokens > 0) AMOE_TRY(amoe_source_prefill(src, id, tokens, chunk, x->prefill, &made, e));
  x->w.prefill = x->prefill;
  x->q.chunk = x->q.chunks = 0;
  if (made && chunked) {
    x->q.chunks = (tokens + chunk - 1) / chunk;
    for (int r = 0; r < nr && !log_pass; r++) rs[rows[r]].res->tot.prefills += 1;
  }
  for (int r = 0; r < nr && made && !chunked; r++) AMOE_TRY(row_prefill(s, &rs[rows[r]], &x->w, tokens, log_pass, e));
  if (made && x->first_s < 0) x->gave_first = 1; /* (a request preempted before its first token prefills again) */
  if (made && !chunked && x->first_s < 0) x->first_s = row_clock(&rs[rows[0]]);
  return AMOE_OK;
}

/* The slot's next block into x->b (AMOE_END: its request is done); a
 * one-token group's tokens of it into x->w.seq (the draft of rs0, which
 * reads the block alone: slots advance on several threads). ongoing: x->b
 * is its request's block just verified, whose last committed route the
 * next block's draft may know (0: a request just admitted, whose reader
 * was moved). */
static amoe_status slot_next(const amoe_spec *s, const amoe_offline *offline, const row_state *rs0, int one_token,
                             int ongoing, request_slot *x, amoe_err *e) {
  const int64_t was = ongoing && x->prev && x->b.n > 0 ? (int64_t)x->b.request : -1;
  if (was >= 0) last_route(&x->b, s->model.top_k, x->prev);
  const amoe_status rc = amoe_source_next(x->src, &x->b, e);
  if (rc != AMOE_OK) return rc;
  x->have_prev = (int64_t)x->b.request == was; /* (a new request's first block: none) */
  if (x->b.experts < 1) return amoe_fail(e, AMOE_EINVAL, "a block with no experts");
  AMOE_TRY(work_fit(&x->w, &x->b, e));
  memset(x->w.pdone, 0, (size_t)x->b.layers * x->b.n);
  memset(x->w.ldone, 0, (size_t)x->b.layers);
  x->pos = 0;
  if (one_token) {
    const amoe_dctx dc = {&x->b, s, rs0->row, offline, s->workload.nodes, NULL, NULL, x->w.dscratch, NULL, NULL, NULL, NULL, 0};
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
  int one_token, n, step, first;
  request_slot *sl;
  const int *todo;
  amoe_status *rc;
  amoe_err *e;
} advance_job;
static void *advance_some(void *v) {
  const advance_job *j = v;
  for (int i = j->first; i < j->n; i += j->step)
    j->rc[i] = slot_next(j->s, j->offline, j->rs0, j->one_token, 1, &j->sl[j->todo[i]], &j->e[i]);
  return NULL;
}
static void advance(const amoe_spec *s, const amoe_offline *offline, const row_state *rs0, int one_token,
                    request_slot *sl,
                    const int *todo, int n, amoe_status *rc, amoe_err *e) {
  enum { MAX_THREADS = 16 };
  int T = s->workload.source == AMOE_SRC_SYNTHETIC ? s->workload.threads : 1; /* (a trace reads fast enough) */
  T = T > n ? n : T > MAX_THREADS ? MAX_THREADS : T;
  if (T < 1) T = 1;
  advance_job job[MAX_THREADS];
  pthread_t th[MAX_THREADS];
  int started[MAX_THREADS] = {0};
  for (int t = 0; t < T; t++) job[t] = (advance_job){s, offline, rs0, one_token, n, T, t, sl, todo, rc, e};
  for (int t = 1; t < T; t++) started[t] = pthread_create(&th[t], NULL, advance_some, &job[t]) == 0;
  advance_some(&job[0]);
  for (int t = 1; t < T; t++)
    if (started[t]) pthread_join(th[t], NULL);
    else advance_some(&job[t]); /* (no thread: here) */
}

/* The rows rows[0..nr) of one schedule (one: one token per pass) over
 * the requests rq[0..nrq). Open arrivals (plan: request i's arrival and
 * lengths): one row, whose clock admits the requests that have arrived
 * into free slots, first come first served, at each pass's start; with
 * no request running the clock waits for the next. */
static amoe_status batch_group(const amoe_spec *s, const amoe_offline *offline, amoe_source *src, row_state *rs,
                               const int *rows, int nr, int one_token, const amoe_source_request *rq, int nrq,
                               amoe_arrival *plan, request_slot *sl, pass_buffers *bp, const amoe_run_hooks *h,
                               int log_pass, int group, int groups, amoe_err *e) {
  const int B = amoe_workload_slots(&s->workload);
  /* a closed loop (each row's schedule starts it over) */
  amoe_closed_loop loop = {0};
  if (plan && s->workload.arrival == AMOE_ARRIVAL_CONCURRENCY) amoe_arrival_loop_start(&loop, plan, nrq, s->workload.concurrency);
  /* the scheduler (schedule.h) over the slots, under the KV capacity (§19) */
  const double kv_cap = plan ? amoe_cost_kv_tokens(&s->model, &s->hw, &s->engine, &s->parallel, !one_token) : 0;
  if (kv_cap < 0)
    return amoe_fail(e, AMOE_EINVAL, "engine.gpu_memory_utilization %g: the weights of %s leave no KV cache on %d %s",
                     s->engine.gpu_memory_utilization, s->model.name, s->hw.gpus, s->hw.name);
  const int incremental = kv_cap > 0 && s->engine.kv_allocation == AMOE_KV_INCREMENTAL;
  amoe_sched_slot *qs[AMOE_MAX_BATCH];
  for (int i = 0; i < B; i++) qs[i] = &sl[i].q;
  const int chunked = s->workload.prefill_schedule == AMOE_PREFILL_CHUNKED;
  amoe_sched sch;
  amoe_sched_init(&sch, qs, B, kv_cap, incremental, chunked && s->engine.prefill_apart);
  const int budget = chunked ? s->engine.max_batched_tokens : 0;
  int act[AMOE_MAX_BATCH], pf[AMOE_MAX_BATCH], todo[AMOE_MAX_BATCH], next = 0;
  uint64_t done = 0, total = 0;
  for (int i = 0; i < nrq; i++) total += (uint64_t)rq[i].blocks;
  for (int r = 0; r < nr; r++) rs[rows[r]].have_prev = 0;
  double waited_to = 0; /* the arrival the clock last waited for (it is the clock's, up to rounding) */
  for (;;) {
    const double now = plan ? fmax(row_clock(&rs[rows[0]]), waited_to) : 0;
    for (int i; (i = amoe_sched_resume(&sch, rs[rows[0]].slot_committed)) >= 0;) {
      /* the preempted return first, their prompt and output so far recomputed */
      request_slot *x = &sl[i];
      const int redo = x->q.kv < bp->prefill_cap ? (int)x->q.kv : bp->prefill_cap; /* (a trace's request may outrun its plan) */
      AMOE_TRY(start_prefill(s, src, rs, rows, nr, x, rq[x->q.req].id, redo, log_pass, e));
    }
    for (int i = 0; i < B && next < nrq && sch.nheld == 0; i++) { /* continuous batching: a free slot takes the next request */
      request_slot *x = &sl[i];
      if (x->q.req >= 0) continue;
      if (plan && plan[next].arrival_s > now) break; /* not arrived yet */
      const int P = plan ? plan[next].prompt_tokens : s->workload.prompt_tokens;
      const double need = plan ? (double)P + (incremental ? 0 : plan[next].output_tokens) : 0;
      if (!amoe_sched_fits(&sch, need)) break; /* no KV for it yet */
      amoe_sched_admit(&sch, i, next, P, need);
      x->admitted_s = plan ? fmax(row_clock(&rs[rows[0]]), plan[next].arrival_s) : 0;
      x->first_s = -1;
      x->gave_first = 0;
      amoe_source_request at = rq[next];
      x->target = -1;
      if (plan && s->workload.source == AMOE_SRC_SYNTHETIC) { /* blocks until its tokens are committed */
        x->target = plan[next].output_tokens - (P > 0); /* (a prompt's prefill gives the first, as engines count) */
        at.blocks = at.tokens = INT_MAX;
      }
      AMOE_TRY(amoe_source_seek(x->src, &at, e));
      const amoe_status rc = slot_next(s, offline, &rs[rows[0]], one_token, 0, x, e);
      if (rc == AMOE_END) return amoe_fail(e, AMOE_EINVAL, "request %u has no blocks", rq[next].id);
      AMOE_TRY(rc);
      next++;
      x->fresh = 1;
      for (int r = 0; r < nr; r++) rs[rows[r]].slot_committed[i] = 0;
      AMOE_TRY(start_prefill(s, src, rs, rows, nr, x, rq[x->q.req].id, P, log_pass, e));
      if (!plan) x->gave_first = 0; /* (closed batches count decode tokens alone) */
    }
    for (int i = 0; i < B; i++) /* a one-token request whose prefill gave its token: done */
      if (sl[i].q.req >= 0 && !sl[i].q.paused && sl[i].target == 0 && sl[i].q.chunk == sl[i].q.chunks && sl[i].first_s >= 0) {
        AMOE_TRY(slot_release(rs, rows, nr, sl, i, plan, log_pass, e));
        amoe_sched_release(&sch, i);
        amoe_arrival_sent(&loop, row_clock(&rs[rows[0]]));
      }
    /* incremental KV: the pass's decode tokens (as the token budget counts
     * them) must fit; else the newest running request gives its KV back */
    const int per = one_token ? 1 : s->workload.nodes;
    amoe_sched_preempt(&sch, per);
    int na = 0, npf = 0;
    amoe_sched_running(&sch, act, &na, pf, &npf);
    for (int q = 0; q < npf; q++) sl[pf[q]].q.take = 1;
    if (budget > 0 && npf > 0) npf = amoe_sched_budget(&sch, budget - na * per, s->workload.chunk_tokens, na, pf, npf);
    if (na + npf == 0 && plan && next < nrq) { /* nothing running: wait for the next arrival */
      const double gap = plan[next].arrival_s - now;
      if (gap > 0 && !log_pass) rs[rows[0]].res->tot.t_idle += gap;
      waited_to = plan[next].arrival_s;
      continue;
    }
    if (na + npf == 0) break;
    AMOE_TRY(work_fit(&bp->w, &sl[na ? act[0] : pf[0]].b, e));
    for (int r = 0; r < nr; r++) {
      row_state *x = &rs[rows[r]];
      for (int q = 0; q < na; q++)
        if (sl[act[q]].fresh) x->slot_first[act[q]] = row_clock(x);
      AMOE_TRY(batch_pass(s, offline, x, sl, act, na, pf, npf, bp, log_pass, e));
    }
    const double end = row_clock(&rs[rows[0]]);
    for (int q = 0; q < npf; q++)
      if ((sl[pf[q]].q.chunk += sl[pf[q]].q.take) == sl[pf[q]].q.chunks && sl[pf[q]].first_s < 0)
        sl[pf[q]].first_s = end; /* its last chunk gives its first token */
    for (int q = 0; q < na && incremental; q++) { /* the KV its tokens wrote */
      request_slot *x = &sl[act[q]];
      const double now_kv = x->q.prompt + rs[rows[0]].slot_committed[act[q]]; /* (its newest token's KV is written when it is fed) */
      amoe_sched_wrote(&sch, act[q], now_kv);
    }
    int nt = 0;
    for (int q = 0; q < na; q++) { /* the slots whose block is done */
      request_slot *x = &sl[act[q]];
      x->fresh = 0;
      if (x->first_s < 0) x->first_s = end; /* no prompt: its first decode pass gives its first token */
      if (x->target >= 0 && rs[rows[0]].slot_committed[act[q]] >= x->target) { /* (one row) */
        AMOE_TRY(slot_release(rs, rows, nr, sl, act[q], plan, log_pass, e));
        amoe_sched_release(&sch, act[q]);
        amoe_arrival_sent(&loop, end);
        continue;
      }
      if (one_token && ++x->pos < x->len) continue;
      todo[nt++] = act[q];
    }
    done += (uint64_t)nt;
    advance(s, offline, &rs[rows[0]], one_token, sl, todo, nt, bp->rc, bp->err);
    for (int q = 0; q < nt; q++) { /* in slot order, whatever the threads did */
      const int i = todo[q];
      if (bp->rc[q] == AMOE_OK) continue;
      if (bp->rc[q] != AMOE_END) {
        *e = bp->err[q];
        return bp->rc[q];
      }
      AMOE_TRY(slot_release(rs, rows, nr, sl, i, plan, log_pass, e)); /* its last block */
      amoe_sched_release(&sch, i);
      amoe_arrival_sent(&loop, end);
    }
    if (h && h->on_progress && !log_pass) /* (the groups' shares of the blocks, one after another) */
      h->on_progress(h->ctx, (group * total + (done < total ? done : total)) / (uint64_t)groups);
    if (h && h->stop && h->stop(h->ctx)) return amoe_fail(e, AMOE_EINTR, "interrupted");
  }
  return AMOE_OK;
}

/* Every row at workload.batch > 1: block-per-pass rows, then one-token rows. */
amoe_status amoe_run_batch(const amoe_spec *s, const amoe_offline *offline, amoe_source *src, row_state *rs,
                           const amoe_run_hooks *h, int log_pass, amoe_err *e) {
  const int B = amoe_workload_slots(&s->workload), L = s->model.moe_layers, E = s->model.experts;
  amoe_source_request *rq = NULL;
  amoe_arrival *plan = NULL;
  int nrq = 0, maxp = s->workload.prompt_tokens;
  AMOE_TRY(amoe_arrival_plan(&s->workload, &plan, &nrq, e));
  amoe_status rst;
  if (plan && s->workload.source == AMOE_SRC_SYNTHETIC) /* generated at the plan's lengths */
    rst = amoe_source_requests_planned(src, plan, nrq, &rq, e);
  else { /* a trace's requests, as long as it made them: the plan gives their arrivals and prompts */
    const int nplan = nrq;
    rst = amoe_source_requests(src, &rq, &nrq, e);
    if (plan && nrq > nplan) nrq = nplan;
    if (plan && rst == AMOE_OK && nrq < nplan && s->workload.arrival != AMOE_ARRIVAL_TRACE)
      rst = amoe_fail(e, AMOE_EINVAL, "workload.requests: %d, but the trace has %d requests", nplan, nrq);
  }
  if (rst != AMOE_OK) {
    free(plan);
    free(rq);
    return rst;
  }
  for (int i = 0; plan && i < nrq; i++) { /* (incremental KV: a preempted request recomputes its output too) */
    const int p = plan[i].prompt_tokens + (s->engine.kv_allocation == AMOE_KV_INCREMENTAL ? plan[i].output_tokens : 0);
    maxp = p > maxp ? p : maxp;
  }
  request_slot *sl = calloc((size_t)B, sizeof *sl);
  pass_buffers bp;
  memset(&bp, 0, sizeof bp);
  int ok = sl != NULL;
#define BPASS_ALLOC(f, T, cnt) ok &= (bp.f = calloc((size_t)(cnt), sizeof(T))) != NULL;
  BPASS_BUFFERS(BPASS_ALLOC)
#undef BPASS_ALLOC
  amoe_status st = ok ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  for (int l = 0; l < L && bp.cov; l++) bp.covl[l] = bp.cov + (size_t)l * E;
  bp.prefill_cap = maxp;
  int routes = 0; /* a row that sizes by predicted routes: the slots keep the last committed one */
  for (int i = 0; i < s->npolicies; i++) routes |= amoe_policy_reads_routes(&s->policies[i]);
  for (int i = 0; i < B && st == AMOE_OK; i++) {
    amoe_block_init(&sl[i].b, L, E, amoe_source_m(src));
    st = amoe_source_slot(src, i, &sl[i].src, e);
    if (st == AMOE_OK && routes && !(sl[i].prev = calloc((size_t)L * s->model.top_k, sizeof *sl[i].prev)))
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
    const int P = maxp, c = s->workload.chunk_tokens;
    const size_t chunks = s->workload.prefill_schedule == AMOE_PREFILL_CHUNKED && c > 0 ? (size_t)(P + c - 1) / c : 1;
    if (st == AMOE_OK && P > 0 && !(sl[i].prefill = malloc(chunks * L * E * sizeof *sl[i].prefill)))
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  }
  int kinds[2] = {0, 0};
  for (int i = 0; i < s->npolicies; i++) kinds[rs[i].draft->one_token_per_pass != 0] = 1;
  const int groups = kinds[0] + kinds[1];
  for (int one_token = 0, g = 0; one_token < 2 && st == AMOE_OK && !plan; one_token++) {
    int rows[AMOE_MAX_POLICIES], nr = 0;
    for (int i = 0; i < s->npolicies; i++)
      if (rs[i].draft->one_token_per_pass == one_token) rows[nr++] = i;
    if (nr)
      st = batch_group(s, offline, src, rs, rows, nr, one_token, rq, nrq, NULL, sl, &bp, h, log_pass, g++, groups, e);
  }
  /* open arrivals: a schedule per row, as each row's own clock admits the requests */
  for (int i = 0; i < s->npolicies && st == AMOE_OK && plan; i++)
    st = batch_group(s, offline, src, rs, &i, 1, rs[i].draft->one_token_per_pass, rq, nrq, plan, sl, &bp, h,
                     log_pass, i, s->npolicies, e);
  for (int i = 0; sl && i < B; i++) {
    amoe_block_free(&sl[i].b);
    work_free(&sl[i].w);
    free(sl[i].prefill);
    free(sl[i].prev);
  }
  work_free(&bp.w);
#define BPASS_FREE(f, T, cnt) free(bp.f);
  BPASS_BUFFERS(BPASS_FREE)
#undef BPASS_FREE
  free(sl);
  free(rq);
  free(plan);
  return st;
}
