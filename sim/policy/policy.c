#include "policy.h"
#include "clones.h"
#include "fast.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A budget B: the number of experts per layer a fixed-size verifier keeps. */
#define BUDGET {.key = "budget", .tag = "B", .def = NAN, .example = 32, .min = 1, .max = AMOE_MAX_EXPERTS, .integer = 1, \
                .expert_count = 1, .shown_if_default = 1}
/* β weighs the commitment p̂ (AcceptMoE); shown only when not 0.5. */
#define BETA {.key = "beta", .tag = "beta", .def = 0.5, .min = 0, .max = 100}
/* the verifier's own work per pass on the host (utilities, an entropy, a
 * pruning loop): no source measures it, so 0 unless a spec sets it */
#define SELECTION {.key = "selection_s", .tag = "sel", .def = 0, .min = 0, .max = 1}
/* marginal's scale on AcceptMoE's predicted deviated tokens, which it
 * spends: 1 spends exactly that; 0 displaces nothing (natural routing) */
#define SHARE {.key = "share", .tag = "share", .def = 1, .min = 0, .max = 1}

/* ecospec's predictor: the share of its experts it gets right, its size
 * (billions of dense parameters: the paper's predictors are 0.6-1.5B), and
 * ε of S = P / (ΔCost + ε) in units of one expert's time. */
#define ECOSPEC_PARAMS                                                                                        \
  {.key = "predictor_accuracy", .tag = "acc", .def = 0.8, .min = 0, .max = 1, .shown_if_default = 1},        \
      {.key = "predictor_b", .tag = "pred", .def = 0.6, .min = 0, .max = 1000},                               \
      {.key = "epsilon", .tag = "eps", .def = 0.1, .min = 1e-9, .max = 1e6}

const char *const amoe_batch_kind_names[] = {
    "per request, from its own block", "per request; what the pass's other requests execute costs it nothing",
    "once for the pass, from every request's block", NULL};

amoe_verifier_def amoe_verifier_table[AMOE_MAX_TABLE] = {
    /* every verifier but natural also needs the natural top-k probabilities
     * (displaced mass); moe-spec weighs every stored entry */
    {.name = "natural", .all_experts = 1, .logits = AMOE_LOGITS_NONE, .select = amoe_verifier_natural,
     .description = "every node routes to its own top-k; the pass executes their union (EAGLE-3 as shipped)"},
    {.name = "moe-spec", .params = {BUDGET}, .logits = AMOE_LOGITS_ALL, .select = amoe_verifier_moe_spec,
     .description = "MoE-Spec: the B experts of most router mass over the tree's nodes"},
    {.name = "acceptmoe", .params = {BETA, SELECTION}, .reads_commitment = 1, .logits = AMOE_LOGITS_TOP,
     .select = amoe_verifier_acceptmoe,
     .description = "AcceptMoE: commitment-weighted utility, size by effective rank, residency pruning under "
                    "offload; as published it ignores the layout over several GPUs"},
    {.name = "acceptmoe-fix", .params = {BUDGET, BETA, SELECTION}, .reads_commitment = 1, .logits = AMOE_LOGITS_TOP,
     .select = amoe_verifier_acceptmoe_fix, .description = "AcceptMoE's utility with a fixed budget B"},
    {.name = "oracle", .logits = AMOE_LOGITS_TOP, .select = amoe_verifier_oracle,
     .description = "the accepted path's experts only: with offload.policy min, a bound on every lossless "
                    "verifier of the same draft (lossy rows can beat it); not a policy"},
    {.name = "marginal", .params = {BETA, SHARE, SELECTION}, .reads_commitment = 1, .reads_mass = 1, .logits = AMOE_LOGITS_TOP,
     .select = amoe_verifier_marginal, .batch = AMOE_BATCH_COVERED,
     .description = "AcceptMoE's predicted deviated tokens (§7: reach, displaced weight, margin; times share) "
                    "spent on the experts of least predicted damage per second of the cost function (fetch, "
                    "busiest GPU); beyond both papers"},
    {.name = "marginal-depth", .params = {BETA, SHARE, SELECTION}, .reads_commitment = 1, .logits = AMOE_LOGITS_TOP,
     .select = amoe_verifier_marginal_depth, .batch = AMOE_BATCH_COVERED,
     .description = "marginal with reach from the depth alone (p̂_d), not the draft's scores: the ablation"},
    {.name = "acceptmoe-pass", .params = {BETA, SELECTION}, .reads_commitment = 1, .logits = AMOE_LOGITS_TOP,
     .select = amoe_verifier_acceptmoe, .batch = AMOE_BATCH_PASS, .select_pass = amoe_verifier_acceptmoe_pass,
     .description = "AcceptMoE's rule once per pass over every request's utilities pooled: one set sized by "
                    "their effective rank, not a union of per-request sets; at batch 1 it is acceptmoe; not "
                    "published"},
};

amoe_draft_def amoe_draft_table[AMOE_MAX_TABLE] = {
    {.name = "eagle", .choose = amoe_draft_eagle,
     .description = "EAGLE-2/3: the root and the best nodes - 1 candidates by cumulative draft score"},
    {.name = "autoregressive", .choose = amoe_draft_autoregressive, .one_token_per_pass = 1,
     .description = "no speculation: natural's committed tokens decoded one forward pass each"},
    {.name = "ecospec", .params = {ECOSPEC_PARAMS}, .choose = amoe_draft_ecospec, .batch = AMOE_BATCH_COVERED,
     .state_bytes = amoe_draft_ecospec_state_bytes, .observe = amoe_draft_ecospec_observe,
     .draft_cost = amoe_draft_ecospec_cost,
     .description = "EcoSpec: the tree grown from the root by acceptance likelihood over the predicted marginal cost "
                    "of the experts a node adds to the buffer (fetch, busiest GPU; 0 when covered), stopping where a "
                    "node would lower the predicted rate; lossless"},
    {.name = "ecospec-global", .params = {ECOSPEC_PARAMS}, .choose = amoe_draft_ecospec_global, .batch = AMOE_BATCH_COVERED,
     .state_bytes = amoe_draft_ecospec_state_bytes, .observe = amoe_draft_ecospec_observe,
     .draft_cost = amoe_draft_ecospec_cost,
     .description = "ecospec ranking nodes by the whole predicted cost of their experts, covered or not: the ablation"},
    {.name = "evict", .choose = amoe_draft_evict, .batch = AMOE_BATCH_COVERED, .reads_union_table = 1,
     .description = "the prefix of the EAGLE order with the most expected committed tokens per predicted second; "
                    "lossless"},
    {.name = "adaptive",
     .params = {{.key = "cost", .tag = "cost", .def = 0, .example = 0, .min = 0, .max = 1, .integer = 1,
                 .shown_if_default = 1, .names = amoe_adaptive_cost_names},
                /* what cost experts sizes by: the draft tokens' true routes
                 * (an oracle), a predictor's, the last committed token's,
                 * or each layer's most popular experts */
                {.key = "routes", .tag = "routes", .def = 0, .example = 1, .min = 0, .max = 3, .integer = 1,
                 .names = amoe_adaptive_routes_names},
                /* the predictor's share of experts right: EcoSpec's stated 0.8 */
                {.key = "accuracy", .tag = "acc", .def = 0.8, .min = 0, .max = 1}},
     .choose = amoe_draft_adaptive, .batch = AMOE_BATCH_PASS, .choose_pass = amoe_draft_adaptive_pass,
     .reads_step_table = 1, .reads_union_table = 1, /* (the calibration's p̂ and m̄ for its chances) */
     .reads_popularity = amoe_draft_adaptive_reads_popularity,
     .description = "verification sized per step (D-Cut's rule): the prefix of each request's EAGLE order that "
                    "maximises the pass's expected committed tokens per second, the step priced by the profiled "
                    "batch x tokens table (cost: tokens) or by the one cost function over its expert union, cache "
                    "and busiest GPU (cost: experts) of the routes `routes` names (the draft tokens' true ones: "
                    "an oracle; a predictor's; the last committed token's; the popular experts); lossless"},
    {.name = "mtp",
     .params = {{.key = "tokens", .tag = "N", .def = NAN, .example = 3, .min = 1, .max = 16, .integer = 1, .shown_if_default = 1}},
     .choose = amoe_draft_mtp,
     .mtp = 1,
     .description = "a chain of N tokens from the target's multi-token-prediction module (DeepSeek)"},
};

/* The rows in use: those with a name (a new row needs no count raised). */
int amoe_verifier_rows(void) {
  int n = 0;
  while (n < AMOE_MAX_TABLE && amoe_verifier_table[n].name) n++;
  return n;
}

int amoe_policy_reads_routes(const amoe_policy_row *row) {
  const amoe_draft_def *d = &amoe_draft_table[row->draft];
  return d->reads_popularity && d->reads_popularity(row);
}

int amoe_draft_rows(void) {
  int n = 0;
  while (n < AMOE_MAX_TABLE && amoe_draft_table[n].name) n++;
  return n;
}

int amoe_verifier_find(const char *name) {
  for (int i = 0; i < amoe_verifier_rows(); i++)
    if (!strcmp(amoe_verifier_table[i].name, name)) return i;
  return -1;
}

int amoe_draft_find(const char *name) {
  for (int i = 0; i < amoe_draft_rows(); i++)
    if (!strcmp(amoe_draft_table[i].name, name)) return i;
  return -1;
}

int amoe_verifier_add(const amoe_verifier_def *def) {
  const int n = amoe_verifier_rows();
  if (!def->name || n == AMOE_MAX_TABLE || amoe_verifier_find(def->name) >= 0 || amoe_draft_find(def->name) >= 0)
    return -1;
  amoe_verifier_table[n] = *def;
  return n;
}

int amoe_draft_add(const amoe_draft_def *def) {
  const int n = amoe_draft_rows();
  if (!def->name || n == AMOE_MAX_TABLE || amoe_verifier_find(def->name) >= 0 || amoe_draft_find(def->name) >= 0)
    return -1;
  amoe_draft_table[n] = *def;
  return n;
}

static const amoe_param_def *params_of(const amoe_policy_row *r, int which) {
  return which ? amoe_verifier_table[r->verifier].params : amoe_draft_table[r->draft].params;
}

void amoe_policy_init(amoe_policy_row *r, int draft, int verifier) {
  memset(r, 0, sizeof *r);
  r->draft = draft;
  r->verifier = verifier;
  for (int w = 0; w < 2; w++) {
    const amoe_param_def *p = params_of(r, w);
    for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++) (w ? r->vparam : r->dparam)[i] = isnan(p[i].def) ? 0 : p[i].def;
  }
}

void amoe_policy_init_examples(amoe_policy_row *r, int draft, int verifier) {
  amoe_policy_init(r, draft, verifier);
  for (int w = 0; w < 2; w++) {
    const amoe_param_def *p = params_of(r, w);
    for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++)
      if (isnan(p[i].def)) (w ? r->vparam : r->dparam)[i] = p[i].example;
  }
}

const amoe_param_def *amoe_policy_param(const amoe_policy_row *r, const char *key, int *which, int *index) {
  for (int w = 0; w < 2; w++) {
    const amoe_param_def *p = params_of(r, w);
    for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++)
      if (!strcmp(p[i].key, key)) {
        if (which) *which = w;
        if (index) *index = i;
        return &p[i];
      }
  }
  return NULL;
}

int amoe_policy_set(amoe_policy_row *r, const char *key, double value) {
  int w, i;
  if (!amoe_policy_param(r, key, &w, &i)) return -1;
  (w ? r->vparam : r->dparam)[i] = value;
  return 0;
}

/* name, then /tag=value for each parameter shown */
static void named(char *buf, size_t n, const char *name, const amoe_param_def *p, const double *v) {
  snprintf(buf, n, "%s", name);
  for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++)
    if (p[i].names && (p[i].shown_if_default || v[i] != p[i].def))
      snprintf(buf + strlen(buf), n - strlen(buf), "/%s=%s", p[i].tag, p[i].names[(int)v[i]]);
    else if (p[i].shown_if_default || v[i] != p[i].def)
      snprintf(buf + strlen(buf), n - strlen(buf), "/%s=%g", p[i].tag, v[i]);
}

void amoe_policy_label(amoe_policy_row *r) {
  char d[96], v[64];
  named(d, sizeof d, amoe_draft_table[r->draft].name, amoe_draft_table[r->draft].params, r->dparam);
  named(v, sizeof v, amoe_verifier_table[r->verifier].name, amoe_verifier_table[r->verifier].params, r->vparam);
  if (r->draft == 0)
    snprintf(r->label, sizeof r->label, "%.60s", v);
  else if (amoe_verifier_table[r->verifier].all_experts)
    snprintf(r->label, sizeof r->label, "%.60s", d);
  else
    snprintf(r->label, sizeof r->label, "%.30s+%.30s", d, v);
}

int amoe_policy_is_baseline(const amoe_policy_row *r) { return r->draft == 0 && r->verifier == 0; }

int amoe_policy_budget(const amoe_policy_row *r) {
  const amoe_param_def *p = amoe_verifier_table[r->verifier].params;
  for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++)
    if (p[i].expert_count) return (int)r->vparam[i];
  return 0;
}

size_t amoe_draft_scratch_bytes(int n, int layers, int experts) {
  return (size_t)n * (16 + (size_t)layers * AMOE_MAX_TOPK * 2) + (size_t)layers * experts * 3 + 4096;
}

/* ln x for 0 < x < 2^1023 (normal doubles), within 2 ulp: x = 2^k·f with f
 * in [√½, √2), ln f = 2·atanh(s), s = (f−1)/(f+1), |s| < 0.172, as the odd
 * series to s^19 (the next term is below 2^-56 of the sum); ln 2 in two
 * parts. Plain double arithmetic that
 * vectorises (libm's log does not). */
static inline double plain_log(double x) {
  uint64_t bits, eb;
  memcpy(&bits, &x, 8);
  /* the exponent as a double without an integer conversion (none is
   * vectorised for 64-bit lanes): 2^52 + e, minus 2^52 */
  eb = 0x4330000000000000ULL | (bits >> 52);
  double kd;
  memcpy(&kd, &eb, 8);
  kd -= 4503599627370496.0 + 1023.0;
  bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
  double f;
  memcpy(&f, &bits, 8);
  const int big = f > 1.4142135623730951;
  f = big ? f * 0.5 : f;
  kd = big ? kd + 1.0 : kd;
  const double s = (f - 1) / (f + 1), s2 = s * s;
  double p = 1.0 / 19;
  p = p * s2 + 1.0 / 17;
  p = p * s2 + 1.0 / 15;
  p = p * s2 + 1.0 / 13;
  p = p * s2 + 1.0 / 11;
  p = p * s2 + 1.0 / 9;
  p = p * s2 + 1.0 / 7;
  p = p * s2 + 1.0 / 5;
  p = p * s2 + 1.0 / 3;
  return kd * 6.93147180369123816490e-01 + ((2 * s + 2 * s * s2 * p) + kd * 1.90821492927058770002e-10);
}

static AMOE_CLONES void entropy_terms(double *q, int n, double inv) {
  for (int i = 0; i < n; i++) {
    const double x = q[i] * inv;
    q[i] = x * plain_log(x);
  }
}

/* Σ x[0..n) in four interleaved partial sums, then (s0 + s1) + (s2 + s3):
 * a fixed order (so fixed bits), without one long chain of dependent adds. */
static double sum4(const double *x, int n) {
  double s[4] = {0, 0, 0, 0};
  int i = 0;
  for (; i + 4 <= n; i += 4)
    for (int q = 0; q < 4; q++) s[q] += x[i + q];
  for (; i < n; i++) s[0] += x[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

double amoe_effective_rank_packed(double *q, int c) {
  if (c == 0) return 0;
  entropy_terms(q, c, 1 / sum4(q, c));
  return exp(-sum4(q, c));
}

int amoe_effective_rank_ceil(const double *q, int c, double eps, double *scratch) {
  if (c == 0) return 0;
  memcpy(scratch, q, (size_t)c * sizeof *q);
  const double rank = amoe_effective_rank_packed(scratch, c);
  return rank > 0 ? (int)ceil(rank - eps) : 0;
}

double amoe_effective_rank(const double *w, const uint8_t *cand, int n, double *scratch) {
  int c = 0;
  for (int e = 0; e < n; e++) { /* the positive candidates, in expert order, without branches */
    scratch[c] = w[e];
    c += (!cand || cand[e]) && w[e] > 0;
  }
  return amoe_effective_rank_packed(scratch, c);
}

/* A unique order key of (value, id): higher value first, then lower id. */
typedef unsigned __int128 vkey;
static inline vkey value_key(double v, int id) {
  const uint64_t u = (uint64_t)amoe_order_key64(v) ^ 0x8000000000000000ULL; /* unsigned order */
  return (vkey)u << 16 | (vkey)(uint16_t)(0xffff - id);
}

void amoe_top_by_value(const double *value, const uint8_t *cand, int experts, int count, uint8_t *S) {
  if (count <= 0) return;
  if (amoe_fast.top_by_value) {
    amoe_fast.top_by_value(value, cand, experts, count, S);
    return;
  }
  amoe_top_by_value_generic(value, cand, experts, count, S);
}

static int key_descending(const void *a, const void *b) {
  const vkey x = *(const vkey *)a, y = *(const vkey *)b;
  return (x < y) - (x > y);
}

/* Plainly: every candidate's unique (value, id) key, sorted, the first
 * `count` kept. */
void amoe_top_by_value_generic(const double *value, const uint8_t *cand, int experts, int count, uint8_t *S) {
  if (count <= 0) return;
  vkey k[AMOE_MAX_EXPERTS];
  int n = 0;
  for (int e = 0; e < experts; e++)
    if (!cand || cand[e]) k[n++] = value_key(value[e], e);
  qsort(k, (size_t)n, sizeof *k, key_descending);
  for (int i = 0; i < count && i < n; i++) S[0xffff - (int)(uint16_t)k[i]] = 1;
}
