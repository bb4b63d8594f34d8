/* Validation and defaults: what a spec starts from, what a resolved spec
 * must hold (every problem named), and the defaults that depend on other
 * keys filled in. */
#include "spec_internal.h"
#include "kernels.h"
#include "sizing.h"
#include "tiers.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ validation */

/* Where a check of one key points: its place in the spec file, where the
 * file set it; else the file. */
static const char *key_where(char *buf, size_t n, const char *where, const spec_at *at, const char *path) {
  const krow *k = spec_find_key(path);
  if (!at || !at->key || !k || !at->key[k - KEYS][0]) return where;
  if (at->key[k - KEYS][0] < 0) snprintf(buf, n, "--set %s", path);
  else snprintf(buf, n, "%s:%d:%d", where, at->key[k - KEYS][0], at->key[k - KEYS][1]);
  return buf;
}

#define KW(path) key_where(kw, sizeof kw, where, at, path)

/* What requests that arrive over time (§18) and passes of several requests
 * (§17) cannot do. */
static void check_requests(const amoe_spec *s, int open, const char *where, amoe_diag *d) {
  if (open) { /* requests that arrive over time (§18) */
    if (s->workload.source != AMOE_SRC_SYNTHETIC && s->workload.source != AMOE_SRC_TRACE)
      amoe_diag_add(d, "%s: workload.arrival.process: %s needs workload.source synthetic (requests generated at the "
                    "lengths it draws) or trace (its requests as captured), not %s; `acceptmoe import` makes a trace",
                    where, amoe_arrival_names[s->workload.arrival], amoe_source_kind_names[s->workload.source]);
    if (s->workload.source == AMOE_SRC_TRACE && s->workload.range_ratio > 0)
      amoe_diag_add(d, "%s: workload.arrival.range_ratio: a trace's requests have the lengths it captured", where);
    if (s->workload.arrival == AMOE_ARRIVAL_TRACE && !s->workload.arrival_path[0])
      amoe_diag_add(d, "%s: workload.arrival.path: required by workload.arrival.process trace (a CSV of "
                    "arrival_s,prompt_tokens,output_tokens; docs/spec.md)", where);
    if (s->workload.arrival != AMOE_ARRIVAL_TRACE && s->workload.arrival_path[0])
      amoe_diag_add(d, "%s: workload.arrival.path: read only by workload.arrival.process trace, not %s", where,
                    amoe_arrival_names[s->workload.arrival]);
    if (s->workload.arrival == AMOE_ARRIVAL_POISSON && s->workload.cv != 1)
      amoe_diag_add(d, "%s: workload.arrival.cv: %g, but poisson's is 1 (gamma takes another)", where, s->workload.cv);
    if (s->offload.enabled && amoe_cache_policy_needs_future(s->offload.policy))
      amoe_diag_add(d, "%s: offload.policy: %s reads the future, which open arrivals decide as the run goes (a row's "
                    "pass times admit its requests); use it with workload.arrival.process closed", where,
                    amoe_cache_policy_names[s->offload.policy]);
    if (s->workload.arrival == AMOE_ARRIVAL_TRACE && s->workload.range_ratio > 0)
      amoe_diag_add(d, "%s: workload.arrival.range_ratio: the trace gives every length", where);
  } else {
    if (s->output.requests_csv)
      amoe_diag_add(d, "%s: output.requests_csv: written for requests that arrive over time (workload.arrival.process "
                    "poisson, gamma or trace)", where);
    if (s->workload.arrival_path[0])
      amoe_diag_add(d, "%s: workload.arrival.path: read only by workload.arrival.process trace, not closed", where);
  }
  if (s->workload.batch > 1 || open) { /* what a pass of several requests cannot do (§17) */
    if (!open && s->workload.source != AMOE_SRC_SYNTHETIC && s->workload.source != AMOE_SRC_TRACE)
      amoe_diag_add(d, "%s: workload.batch: %d needs workload.source synthetic or trace (each slot reads its own "
                    "request; `acceptmoe import` makes a trace of %s)", where, s->workload.batch,
                    amoe_source_kind_names[s->workload.source]);
    if (s->output.dump_selection[0])
      amoe_diag_add(d, "%s: output.dump_selection: per-block selections are not written at workload.batch > 1 "
                    "(a pass holds several blocks)", where);
    if (s->output.blocks_csv)
      amoe_diag_add(d, "%s: output.blocks_csv: blocks.csv is not written at workload.batch > 1 (a pass holds several "
                    "blocks; summary.csv has the per-request figures)", where);
    if (s->offload.enabled && s->offload.reset)
      amoe_diag_add(d, "%s: offload.reset: the caches serve every request of a pass and are not emptied per request "
                    "at workload.batch > 1", where);
    if (s->workload.prefill_schedule == AMOE_PREFILL_CHUNKED && s->offload.enabled &&
        s->offload.prefill == AMOE_PREFILL_BYPASS && s->workload.prompt_tokens > 0)
      amoe_diag_add(d, "%s: workload.prefill_schedule: chunked puts the prompt's experts in the decode pass, through "
                    "the caches; offload.prefill: bypass needs separate", where);
  }
}

/* The policy rows: the default row, each budget within the model's
 * experts, no row twice, the natural baseline added, and what held routes
 * allow. */
static void resolve_policies(amoe_spec *s, const char *where, const spec_at *at, amoe_diag *d) {
  char kw[AMOE_PATH_MAX + 64];
  if (s->npolicies == 0) { /* default: natural alone */
    spec_policy_defaults(&s->policies[0]);
    amoe_policy_label(&s->policies[0]);
    s->npolicies = 1;
  }
  int have_nat = 0;
  for (int i = 0; i < s->npolicies; i++) {
    amoe_policy_row *r = &s->policies[i];
    const char *pw = at && at->policy && at->policy[i][0] && !r->implicit ? at->policy[i] : where; /* the row's position */
    for (int w = 0; w < 2; w++) { /* budgets: within the model's top_k..experts */
      const amoe_param_def *pd = w ? amoe_verifier_table[r->verifier].params : amoe_draft_table[r->draft].params;
      const double *pv = w ? r->vparam : r->dparam;
      for (int j = 0; j < AMOE_MAX_PARAMS && pd[j].key; j++)
        if (pd[j].expert_count && s->model.top_k && (pv[j] < s->model.top_k || pv[j] > s->model.experts))
          amoe_diag_add(d, "%s: policy %s: %s %g must be in top_k..experts (%d..%d)", pw, r->label, pd[j].key,
                        pv[j], s->model.top_k, s->model.experts);
    }
    if (amoe_policy_is_baseline(r)) have_nat = 1;
    for (int j = 0; j < i; j++)
      if (!strcmp(s->policies[j].label, r->label))
        amoe_diag_add(d, "%s: policy %s is listed twice", pw, r->label);
  }
  if (!have_nat && s->baseline && s->npolicies < AMOE_MAX_POLICIES) { /* the baseline of speedup_vs_natural */
    amoe_policy_row *r = &s->policies[s->npolicies++];
    spec_policy_defaults(r);
    amoe_policy_label(r);
    r->implicit = 1;
  }
  if (s->workload.route_hold > 1) { /* held routes keep each pass's draw, not a request's sequence (§19) */
    const char *hw = KW("workload.route_hold");
    if (s->workload.source != AMOE_SRC_SYNTHETIC)
      amoe_diag_add(d, "%s: workload.route_hold holds the generator's routes; a %s workload has its own", hw,
                    amoe_source_kind_names[s->workload.source]);
    if (s->offload.enabled)
      amoe_diag_add(d, "%s: workload.route_hold repeats a request's routes, which the offload caches would reuse; "
                    "use it without offload", hw);
    for (int i = 0; i < s->npolicies; i++) {
      const amoe_policy_row *r = &s->policies[i];
      if (!amoe_verifier_table[r->verifier].all_experts || amoe_draft_table[r->draft].state_bytes ||
          amoe_policy_reads_routes(r))
        amoe_diag_add(d, "%s: workload.route_hold: policy %s reads a request's routes from block to block, which "
                      "held routes repeat; it needs natural verification and a draft without state or predicted "
                      "routes", hw, r->label);
    }
  }
}

/* The layout over the node's GPUs (docs/design.md §16): what is left out
 * resolved from hardware.gpus, and what does not multiply out named. */
static void resolve_layout(amoe_spec *s, const char *where, const spec_at *at, amoe_diag *d) {
  char kw[AMOE_PATH_MAX + 64];
  amoe_parallel *p = &s->parallel;
  const int g = s->hw.gpus > 0 ? s->hw.gpus : 1;
  if (!p->pipeline) p->pipeline = 1;
  if (!p->attention_dp) p->attention_dp = 1;
  if (p->pipeline > 1 && (p->attention_tp > 1 || p->moe_ep > 1 || p->moe_tp > 1 || p->attention_dp > 1 ||
                          g != p->pipeline))
    amoe_diag_add(d, "%s: parallel.pipeline (%d) puts each stage of layers on one GPU: hardware.gpus must be %d "
                     "and parallel.attention_tp, moe_ep and moe_tp 1", where, p->pipeline, p->pipeline);
  if (p->pipeline > s->model.layers && s->model.layers > 0)
    amoe_diag_add(d, "%s: parallel.pipeline (%d) exceeds the model's %d layers", KW("parallel.pipeline"), p->pipeline, s->model.layers);
  if (p->pipeline > 1 && !(s->hw.ic.hop_bw > 0))
    amoe_diag_add(d, "%s: parallel.pipeline needs the interconnect's hop_latency_s and hop_bw "
                     "(hardware.interconnect: nvlink4 | pcie5)", where);
  const int dp = p->attention_dp;
  if (!p->attention_tp) p->attention_tp = g / p->pipeline / dp > 0 ? g / p->pipeline / dp : 1;
  const int ranks = p->attention_tp * dp; /* the GPUs attention runs on: the experts' too */
  if (!p->moe_ep && !p->moe_tp) p->moe_ep = ranks, p->moe_tp = 1;
  else if (!p->moe_ep) p->moe_ep = ranks / p->moe_tp > 0 ? ranks / p->moe_tp : 1;
  else if (!p->moe_tp) p->moe_tp = ranks / p->moe_ep > 0 ? ranks / p->moe_ep : 1;
  char att[96];
  if (dp > 1) snprintf(att, sizeof att, "parallel.attention_tp x attention_dp (%d x %d)", p->attention_tp, dp);
  else snprintf(att, sizeof att, "parallel.attention_tp (%d)", p->attention_tp);
  if (p->moe_ep * p->moe_tp != ranks)
    amoe_diag_add(d, "%s: parallel.moe_ep (%d) x parallel.moe_tp (%d) = %d must equal %s", where, p->moe_ep, p->moe_tp,
                  p->moe_ep * p->moe_tp, att);
  if (p->pipeline <= 1 && ranks != g) amoe_diag_add(d, "%s: %s must equal hardware.gpus (%d)", where, att, g);
  if (s->model.experts && p->moe_ep > s->model.experts)
    amoe_diag_add(d, "%s: parallel.moe_ep (%d) exceeds the model's %d experts", KW("parallel.moe_ep"), p->moe_ep, s->model.experts);
  if (g > 1 && !(s->hw.ic.allreduce_bw > 0))
    amoe_diag_add(d, "%s: hardware.gpus %d needs an interconnect (hardware.interconnect: nvlink4 | pcie5)", where, g);
  if (p->placement == AMOE_PLACE_FILE && !p->placement_file[0])
    amoe_diag_add(d, "%s: parallel.placement: file needs parallel.placement_file", where);
  if (p->redundant && p->placement != AMOE_PLACE_BALANCED)
    amoe_diag_add(d, "%s: parallel.redundant copies are placed by parallel.placement: balanced", where);
}

/* The engine's sizing rule (engine.sizing) over what the spec leaves
 * unset, from the GPU's memory, the layout and the draft tokens a
 * speculating row verifies per request (a server speculates when any row
 * does). */
/* experts: (§21) parsed into s->tiers; a placement off the GPU needs a
 * host to run its experts, and is not offload's cache over PCIe. */
static void check_tiers(amoe_spec *s, const char *where, const spec_at *at, amoe_diag *d) {
  char kw[AMOE_PATH_MAX + 64];
  amoe_err me;
  if (amoe_tiers_parse(s->experts, s->model.moe_layers, &s->tiers, &me) != AMOE_OK) {
    amoe_diag_add(d, "%s: experts: %s", KW("experts"), me.msg);
    return;
  }
  if (s->tiers.kind == AMOE_TIER_GPU) return;
  if (!s->host.name[0] || !(s->host.channels > 0 && s->host.mts > 0 && s->host.bw_share > 0 && s->host.flops > 0))
    amoe_diag_add(d, "%s: experts: %s computes experts on the host: host: needs a preset (workloads/hosts/) or "
                  "channels, mts, bw_share and flops", KW("experts"), s->experts);
  if (s->offload.enabled)
    amoe_diag_add(d, "%s: experts: %s and offload: are two placements of the experts (the host computes them, or "
                  "the GPU's cache fetches them); set one", KW("experts"), s->experts);
  if (s->parallel.moe_ep > 1)
    amoe_diag_add(d, "%s: experts: %s with parallel.moe_ep %d: experts off the GPU are modelled beside tensor "
                  "parallelism only (the GPU's side is not yet its busiest group's)", KW("experts"), s->experts,
                  s->parallel.moe_ep);
  if (s->tiers.strategy == AMOE_PICK_FREQUENCY && s->tiers.kind == AMOE_TIER_SHARE)
    amoe_diag_add(d, "%s: experts: frequency places by a calibration workload's counts, which no run gives yet; "
                  "random, uniform or front", KW("experts"));
}

static void size_engine(amoe_spec *s) {
  int speculating = 0;
  for (int i = 0; i < s->npolicies; i++) speculating |= !amoe_draft_table[s->policies[i].draft].one_token_per_pass;
  const amoe_parallel *p = &s->parallel;
  const amoe_sizing_in in = {.memory_bytes = s->hw.memory_bytes,
                             .tp = (p->attention_tp > 0 ? p->attention_tp : 1) * (p->attention_dp > 1 ? p->attention_dp : 1),
                             .dp = p->attention_dp,
                             .pipeline = p->pipeline,
                             .draft_tokens = speculating ? s->workload.depth : 0};
  amoe_engine_size(&s->engine, &in);
}

int spec_validate(amoe_spec *s, const char *where, const spec_at *at, amoe_diag *d) {
  int before = d->n;
  char kw[AMOE_PATH_MAX + 64];
  amoe_err me;
  if (!s->model.name[0] && s->model.moe_layers > 0) snprintf(s->model.name, sizeof s->model.name, "custom");
  if (!s->model.name[0]) amoe_diag_add(d, "%s: model: required (a preset name or a shape)", where);
  else if (amoe_model_check(&s->model, &me)) amoe_diag_add(d, "%s: model %s: %s", where, s->model.name, me.msg);
  if (!s->hw.name[0] || s->hw.hbm_bw <= 0 || s->hw.h2d_bw <= 0 || s->hw.peak_flops <= 0)
    amoe_diag_add(d, "%s: hardware: required (a preset name, or hbm_bw, h2d_bw and peak_flops)", where);
  const int open = s->workload.arrival != AMOE_ARRIVAL_CLOSED;
  check_requests(s, open, where, d);
  if (s->workload.source != AMOE_SRC_SYNTHETIC && !s->workload.path[0])
    amoe_diag_add(d, "%s: workload.path is required for source %s", where, amoe_source_kind_names[s->workload.source]);
  if (s->workload.candidates && s->workload.candidates < s->workload.nodes)
    amoe_diag_add(d, "%s: workload.tree.candidates (%d) must be >= nodes (%d)", KW("workload.tree.candidates"), s->workload.candidates,
                  s->workload.nodes);
  if (s->workload.top_m && s->model.experts && (s->workload.top_m < s->model.top_k || s->workload.top_m > s->model.experts))
    amoe_diag_add(d, "%s: workload.top_m %d must be in the model's top_k..experts (%d..%d)", KW("workload.top_m"),
                  s->workload.top_m, s->model.top_k, s->model.experts);
  resolve_policies(s, where, at, d);
  resolve_layout(s, where, at, d);
  check_tiers(s, where, at, d);
  if (s->engine.cuda_graphs < 0) s->engine.cuda_graphs = s->hw.cuda_graphs;
  if (s->engine.overlap_scheduler < 0) s->engine.overlap_scheduler = s->hw.overlap_scheduler;
  size_engine(s);
  if (s->engine.moe_kernels == AMOE_MOE_LOOP && s->engine.cuda_graphs)
    amoe_diag_add(d, "%s: engine.moe_kernels: loop synchronises at every expert, so it cannot run under CUDA graphs "
                     "(set engine.cuda_graphs: false)", where);
  if (s->engine.moe_kernels != AMOE_MOE_LOOP && s->engine.visits != AMOE_VISIT_HIT)
    amoe_diag_add(d, "%s: engine.visits is the loop's (engine.moe_kernels: loop)", where);
  if (s->commitment.seed == 0) s->commitment.seed = s->workload.seed + 1000;
  if (s->model.routing.skew.n == 0 && s->model.experts > 0) { /* the fitted default for the expert count */
    s->model.routing.skew.n = 1;
    s->model.routing.skew.v[0] = amoe_gen_default_skew(s->model.experts);
  }
  for (int i = 0; i < NKEYS; i++) /* a list gives one value per MoE layer */
    if (KEYS[i].type == T_DVEC) {
      const amoe_layer_values *v = (const void *)((const char *)s + KEYS[i].off);
      if (v->n > 1 && v->n != s->model.moe_layers)
        amoe_diag_add(d, "%s: %s lists %d values; it takes one, or one per MoE layer (%d)", KW(KEYS[i].path), KEYS[i].path, v->n,
                      s->model.moe_layers);
    }
  if (open && s->workload.max_running == 0 && s->engine.max_running > 0) { /* the engine's cap on running requests */
    const int want = s->workload.arrival == AMOE_ARRIVAL_CONCURRENCY ? s->workload.concurrency : s->workload.requests;
    s->workload.max_running = want < s->engine.max_running ? want : s->engine.max_running;
  }
  if (s->engine.max_batched_tokens > 0 && s->workload.prefill_schedule == AMOE_PREFILL_CHUNKED &&
      s->workload.chunk_tokens > s->engine.max_batched_tokens)
    amoe_diag_add(d, "%s: workload.chunk_tokens %d is more than engine.max_batched_tokens %d (a step's budget)",
                  KW("workload.chunk_tokens"),
                  s->workload.chunk_tokens, s->engine.max_batched_tokens);
  if (s->workload.al.n > 0) { /* §19: a chain whose positions accept as the curve says */
    double a[AMOE_GEN_MAX_CHAIN];
    if (s->workload.top_k != 1 || s->workload.nodes != s->workload.depth + 1)
      amoe_diag_add(d, "%s: workload.acceptance.al sets a chain's acceptance: workload.tree top_k 1 and nodes depth + 1 "
                    "(%d), not top_k %d and nodes %d", where, s->workload.depth + 1, s->workload.top_k, s->workload.nodes);
    else if (s->workload.replay[0])
      amoe_diag_add(d, "%s: workload.acceptance: al and replay both give the acceptance; set one", where);
    else if (amoe_gen_chain_accept(s->workload.al.v, s->workload.al.n, s->workload.depth, a, &me) != AMOE_OK)
      amoe_diag_add(d, "%s: %s", where, me.msg);
  }
  if (s->workload.draft_passes > s->workload.depth)
    amoe_diag_add(d, "%s: workload.tree.draft_passes %d: a draft of depth %d runs at most %d forwards",
                  KW("workload.tree.draft_passes"),
                  s->workload.draft_passes, s->workload.depth, s->workload.depth);
  if (s->workload.top_m == 0 && s->model.experts > 0)
    s->workload.top_m = amoe_default_top_m(s->model.experts, s->model.top_k);
  if (s->workload.candidates == 0) s->workload.candidates = s->workload.nodes;
  if (d->n == before && amoe_kernels_apply(&s->model, &s->hw, s->parallel.attention_tp, s->kernels_note, sizeof s->kernels_note, &me) != AMOE_OK)
    amoe_diag_add(d, "%s: %s", KW("hardware.kernels"), me.msg);
  return d->n == before;
#undef KW
}
