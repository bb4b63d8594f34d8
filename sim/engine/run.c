#include "run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stages.h"

/* One forward pass of the target over w->nodes[0..nn) (ascending, root
 * first), after drafting them as a tree (drafted; else a decoded token):
 * per MoE layer the
 * stages route or select + constrain, execute, cache, cost. Leaves the
 * squared displaced weight shares (§7) of the verified accepted nodes,
 * summed over the layers, in w->perturbation_sq. log_pass: Belady's first pass,
 * which only realises the request sequence. */
static AMOE_CLONES amoe_status row_pass(const amoe_spec *s, const amoe_offline *offline, row_state *rs, int ri,
                                        const amoe_block *b, work *w, const amoe_run_hooks *h, int log_pass,
                                        int nn, int drafted, pass_sums *ps, amoe_err *e) {
  const amoe_model *M = &s->model;
  const int E = b->experts, k = M->top_k, L = b->layers;
  const int natural = rs->ver->all_experts;
  int maxd;
  const int npath = pass_nodes(b, w, nn, &maxd), depth = drafted ? maxd : 0;
  /* cost (§9) of what does not depend on the layer's experts */
  amoe_pass_shape sh = amoe_spec_pass_shape(s, nn, rs->draft->mtp ? 0 : depth);
  sh.offload = rs->cache != NULL, sh.branch = s->workload.top_k, sh.accepted = npath;
  sh.draft_priced = rs->draft->mtp && depth > 0;
  const amoe_cost_pass_ctx pc = pass_cost(s, rs, &sh, depth > 0, rs->draft->mtp ? mtp_draft_s(s, rs, b, w, nn) : 0, b->n);
  pass_sums sum = {0};
  amoe_pass_time pt = amoe_cost_pass_begin(&pc);
  const amoe_expert_coef ec = pc.ec;
  /* When even all nn tokens on one expert cost less compute than its bytes,
   * every executed expert costs exactly its bytes: then only the executed
   * set matters, and the per-expert token counts are not kept. */
  const int by_count = ec.per_token_s * nn > ec.mem_s;
  const int counted = by_count || rs->cache || rs->on_gpu; /* offload also reports hits per (token, expert); the host computes per pair */
  const int want_routes = h && h->on_route && !log_pass;
  for (int l = 0; l < L; l++) {
    layer_sums ls = {0};
    const uint8_t *resident = layer_resident(rs, l, E);
    if (natural) {
      layer_route_natural(b, l, k, w, nn, counted, &ls);
      if (want_routes)
        for (int i = 0; i < nn; i++) record_route(b, l, w, i, k, amoe_block_ids(b, l, w->nodes[i]), k, M->router);
    } else {
      layer_select_constrain(s, offline, rs, &pc, b, l, w, nn, npath, counted, want_routes, resident, NULL, NULL, &ls);
      if (!log_pass) rs->res->tot.displaced += (double)ls.displaced;
    }
    rs->res->tot.assignments += log_pass ? 0 : (double)nn * k;
    AMOE_TRY(layer_stages(s, rs, &pc, l, w, counted, by_count, want_routes, log_pass, &ls, &pt, e));
    if (want_routes) {
      const amoe_placement pl = {w->F, w->slot, w->wave, ls.waves};
      const int placed = rs->cache && s->offload.order == AMOE_ORDER_HITS_FIRST;
      AMOE_TRY(h->on_route(h->ctx, ri, b->index, l, nn, k, w->rt, w->rw, ls.t_moe, ls.nf, ls.wait, placed ? &pl : NULL,
                           e));
    }
    if (log_pass) continue;
    sum.u += ls.nu;
    sum.s += ls.ns;
    sum.x += ls.nx;
    sum.f += ls.nf;
    if (h && h->on_select)
      AMOE_TRY(h->on_select(h->ctx, ri, b->index, l, w->U, w->S, w->X, w->F, E, e));
  }
  AMOE_TRY(pass_close(rs, &pc, log_pass, e));
  sum.T = pt.total;
  *ps = sum;
  return AMOE_OK;
}

typedef struct {
  pass_sums sum;
  int passes, verified, tau, deviated;
  double deviation[2]; /* the verifier's predicted deviated tokens (work.deviation), summed over the passes */
  double perturbation_sum; /* Σ s_t over the walked (or decoded) tokens */
} block_outcome;

/* Speculative decoding: the nn nodes verified in one pass, then the
 * acceptance walk (§7). */
static amoe_status block_verify(const amoe_spec *s, const amoe_offline *offline, row_state *rs, int ri,
                                const amoe_block *b, work *w, const amoe_run_hooks *h, int log_pass, int nn,
                                block_outcome *o, amoe_err *e) {
  AMOE_TRY(row_pass(s, offline, rs, ri, b, w, h, log_pass, nn, 1, &o->sum, e));
  const amoe_accept_result ar = pass_accept(s, b, w, nn, 0);
  o->deviation[0] = w->deviation[0], o->deviation[1] = w->deviation[1];
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
                                const amoe_block *b, work *w, const amoe_run_hooks *h, int log_pass, int nn,
                                block_outcome *o, amoe_err *e) {
  memcpy(w->seq, w->nodes, (size_t)nn * sizeof *w->seq);
  for (int q = 0; q < nn; q++) {
    pass_sums ps;
    w->nodes[0] = w->seq[q];
    AMOE_TRY(row_pass(s, offline, rs, ri, b, w, h, log_pass, 1, 0, &ps, e));
    o->sum.T += ps.T, o->sum.u += ps.u, o->sum.s += ps.s, o->sum.x += ps.x, o->sum.f += ps.f;
    const amoe_accept_result ar = pass_accept(s, b, w, 1, 1);
    o->deviation[0] += w->deviation[0], o->deviation[1] += w->deviation[1];
    o->perturbation_sum += ar.perturbation_sum;
    o->deviated += ar.deviated;
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
  account_prediction(tt, &rs->predicted, o->sum.T);
  tt->perturbation_sum += o->perturbation_sum;
  tt->perturbation_n += o->tau;
  tt->deviated += o->deviated;
  tt->deviation_predicted += o->deviation[0];
  tt->deviation_budget += o->deviation[1];
  if (h && h->on_block) {
    const double lp = (double)b->layers * o->passes;
    amoe_block_stats bs = {b->index,   b->request,    b->step,       o->passes,    o->verified,
                           o->tau,     o->deviated,   o->sum.u / lp, o->sum.s / lp, o->sum.x / lp,
                           o->sum.f,   o->perturbation_sum / o->tau, o->sum.T};
    AMOE_TRY(h->on_block(h->ctx, ri, &bs, e));
  }
  return AMOE_OK;
}

/* One row on one block: draft, then the passes (each: route, select,
 * constrain, execute, cache, cost), acceptance, totals. */
static amoe_status row_block(const amoe_spec *s, const amoe_offline *offline, row_state *rs, int ri,
                             const amoe_block *b, work *w, const amoe_run_hooks *h, int log_pass,
                             amoe_err *e) {
  if (b->experts < 1) return amoe_fail(e, AMOE_EINVAL, "a block with no experts"); /* (and sizes below are positive) */
  const int first = (int64_t)b->request != rs->request; /* a request's first block */
  if (first && !log_pass) { /* the request it was decoding is done */
    AMOE_TRY(request_done(rs->res, rs->req_committed, rs->req_time, e));
    rs->req_time = rs->req_committed = 0;
  }
  if (first) rs->have_prev = rs->have_prev_route = 0;
  if (rs->cache && s->offload.reset && first) amoe_cache_reset(rs->cache);
  rs->request = b->request;
  if (first && w->prefill_ready) AMOE_TRY(row_prefill(s, rs, w, s->workload.prompt_tokens, log_pass, e));
  const int nn = block_draft(s, offline, rs, b, w, NULL, rs->have_prev_route ? rs->prev_route : NULL);
  block_outcome o = {0};
  if (rs->draft->one_token_per_pass)
    AMOE_TRY(block_decode(s, offline, rs, ri, b, w, h, log_pass, nn, &o, e));
  else
    AMOE_TRY(block_verify(s, offline, rs, ri, b, w, h, log_pass, nn, &o, e));
  if (rs->prev_route) { /* (only a row whose draft may read it keeps it) */
    last_route(b, s->model.top_k, rs->prev_route);
    rs->have_prev_route = 1;
  }
  return log_pass ? AMOE_OK : block_account(rs, ri, b, h, &o, e);
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
                            row_state *rs, const amoe_run_hooks *h, int log_pass, amoe_err *e) {
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
      st = row_block(s, offline, &rs[i], i, &b, &w, h, log_pass, e);
    if (st == AMOE_OK && h && h->on_progress && !log_pass) h->on_progress(h->ctx, b.index + 1);
    if (st == AMOE_OK && h && h->stop && h->stop(h->ctx)) st = amoe_fail(e, AMOE_EINTR, "interrupted");
  }
  if (st == AMOE_OK && rc != AMOE_END) st = rc;
  for (int i = 0; i < s->npolicies && st == AMOE_OK && !log_pass; i++)
    st = request_done(rs[i].res, rs[i].req_committed, rs[i].req_time, e);
  free(prefill);
  work_free(&w);
  amoe_block_free(&b);
  return st;
}

static amoe_cache_cfg cache_cfg(const amoe_spec *s, int policy) {
  amoe_cache_cfg c = {policy, s->offload.order, s->offload.overflow};
  return c;
}

amoe_status amoe_run_layout(const amoe_spec *s, const double *load, amoe_layout **out, amoe_err *e) {
  *out = NULL;
  const int L = s->model.moe_layers, E = s->model.experts;
  if (!(L > 0 && amoe_parallel_has_groups(&s->parallel, s->hw.gpus))) return AMOE_OK; /* (a dense model places nothing) */
  amoe_layout *layout = amoe_layout_new(L, E, s->parallel.moe_ep > 0 ? s->parallel.moe_ep : 1);
  if (!layout) return amoe_fail(e, AMOE_ENOMEM, "out of memory for the placement");
  amoe_status st = AMOE_OK;
  switch (s->parallel.placement) {
  case AMOE_PLACE_ROUND_ROBIN: amoe_layout_round_robin(layout); break;
  case AMOE_PLACE_FILE: st = amoe_layout_read(layout, s->parallel.placement_file, e); break;
  case AMOE_PLACE_BALANCED:
    st = load ? amoe_layout_balanced(layout, load, s->parallel.redundant, e)
              : amoe_fail(e, AMOE_EINVAL, "parallel.placement: balanced needs a calibration workload's load");
    break;
  default: break; /* contiguous */
  }
  if (st != AMOE_OK) {
    amoe_layout_free(layout);
    return st;
  }
  *out = layout;
  return AMOE_OK;
}

amoe_status amoe_run(const amoe_spec *s, const amoe_offline *offline, amoe_source *src,
                     const amoe_run_hooks *h, amoe_row_result *rows, amoe_err *e) {
  const int P = s->npolicies, L = s->model.moe_layers, E = s->model.experts;
  if (amoe_workload_slots(&s->workload) > AMOE_MAX_BATCH)
    return amoe_fail(e, AMOE_EINVAL, "workload.batch: %d, at most %d", amoe_workload_slots(&s->workload), AMOE_MAX_BATCH);
  if (!(s->hw.moe_eta > 0 && s->hw.hbm_bw > 0 && s->hw.h2d_bw > 0 && s->hw.peak_flops > 0))
    return amoe_fail(e, AMOE_EINVAL, "hardware %s: hbm_bw, h2d_bw, peak_flops and moe_eta must be positive", s->hw.name);
  row_state rs[AMOE_MAX_POLICIES];
  memset(rs, 0, sizeof rs);
  amoe_status st = AMOE_OK;
  amoe_layout *layout = NULL;
  uint8_t *on_gpu = NULL; /* experts: where each layer's experts live (§21), one placement for every row */
  for (int i = 0; i < P; i++) memset(&rows[i], 0, sizeof rows[i]);
  st = amoe_run_layout(s, offline->load, &layout, e);
  if (st == AMOE_OK && s->tiers.kind != AMOE_TIER_GPU) {
    on_gpu = malloc((size_t)L * E);
    st = on_gpu ? amoe_tiers_place(&s->tiers, L, E, NULL, s->workload.seed, on_gpu, e)
                : amoe_fail(e, AMOE_ENOMEM, "out of memory placing experts");
  }
  for (int i = 0; i < P && st == AMOE_OK; i++) {
    rows[i].layers = calloc((size_t)L, sizeof *rows[i].layers);
    if (!rows[i].layers) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
    rs[i].row = &s->policies[i];
    rs[i].request = -1;
    rs[i].layout = layout;
    rs[i].on_gpu = on_gpu;
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
    const int routes = amoe_policy_reads_routes(rs[i].row);
    if (routes) rs[i].prev_route = calloc((size_t)L * s->model.top_k, sizeof *rs[i].prev_route);
    const int B = run_batched(s) ? amoe_workload_slots(&s->workload) : 0;
    if (B) {
      rs[i].slot_first = calloc((size_t)B, sizeof *rs[i].slot_first);
      rs[i].slot_committed = calloc((size_t)B, sizeof *rs[i].slot_committed);
    }
    if ((dsb && !rs[i].draft_state) || !rs[i].prev_x || (routes && !rs[i].prev_route) || (B && (!rs[i].slot_first || !rs[i].slot_committed)))
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
    if (st == AMOE_OK) st = (run_batched(s) ? amoe_run_batch : run_sweep)(s, offline, src, rs, &stop_only, 1, e);
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
  if (st == AMOE_OK) st = (run_batched(s) ? amoe_run_batch : run_sweep)(s, offline, src, rs, h, 0, e);
  amoe_source_want_logits(src, AMOE_LOGITS_ALL);
  for (int i = 0; i < P; i++) {
    amoe_cache_free(rs[i].cache);
    amoe_reqlog_free(logs[i]);
    free(rs[i].draft_state);
    free(rs[i].prev_x);
    free(rs[i].prev_route);
    free(rs[i].slot_first);
    free(rs[i].slot_committed);
  }
  amoe_layout_free(layout);
  free(on_gpu);
  if (st != AMOE_OK)
    for (int i = 0; i < P; i++) amoe_row_result_free(&rows[i]);
  return st;
}
