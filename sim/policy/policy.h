/* Policies are rows of two tables driven by one loop (run.c):
 *   draft policies choose which candidate nodes are verified;
 *   verifier policies choose the eligible expert set S of a (block, layer).
 * A row carries everything the rest of the program needs: the name, the
 * parameters (spec key, label tag, default, range), what the policy reads.
 * Nothing outside policy.c and a policy's own file names a policy; adding
 * one is one file and one row (docs/adding-a-policy.md). docs/design.md §6. */
#ifndef AMOE_POLICY_H
#define AMOE_POLICY_H

#include <stdint.h>
#include <string.h>

#include "block.h"
#include "model.h"
#include "router.h"
#include "sort.h"
#include "spec.h"

/* One numeric parameter of a policy: `key` in the spec's policy mapping,
 * shown in the row's label as tag=value. */
typedef struct {
  const char *key;
  const char *tag;
  double def;                /* the default; NAN: the spec must give it */
  double example;            /* a required one's typical value (tests, `acceptmoe policies`) */
  double min, max;           /* the allowed range */
  int integer;               /* 1: a whole number */
  int expert_count;          /* 1: also within top_k..experts of the model (a budget) */
  int shown_if_default;      /* 1: always in the label; 0: only when it differs from def */
  const char *const *names;  /* a choice by name (NULL-terminated): the value is its index */
} amoe_param_def;

/* What a row does when a pass holds several requests (workload.batch,
 * docs/design.md §17); `acceptmoe policies` says it for every row. */
typedef enum {
  AMOE_BATCH_PER_REQUEST = 0, /* decides per request from its own block, as published */
  AMOE_BATCH_COVERED = 1,     /* per request, and what the pass's other requests already execute costs it nothing */
  AMOE_BATCH_PASS = 2,        /* decides once for the pass from every request's block */
} amoe_batch_kind;
extern const char *const amoe_batch_kind_names[]; /* by amoe_batch_kind, for `acceptmoe policies` */

/* What a verifier sees for one (block, layer). */
typedef struct {
  const amoe_block *b;
  int layer;
  int k, experts, router;
  const int *nodes;          /* verified nodes, ascending, nodes[0] = root */
  int nn;
  const int *level_count;    /* N_d: verified nodes at depth d */
  const double *commitment;  /* commitment p̂_d */
  int commitment_n;
  const uint8_t *resident;   /* E flags, or NULL when every expert is resident */
  const amoe_policy_row *row;
  const float *prob;         /* [t][k] router probability of node t's natural top-k (all nodes[]) */
  double *scratch;           /* >= AMOE_VSCRATCH(E, n) doubles (n: the block's nodes) */
  int *iscratch;             /* >= AMOE_VISCRATCH(E, n) ints */
  /* what a verifier that prices experts reads (marginal); NULL where a
   * caller has none: */
  const double *mass;        /* m̄_d: the draft's mean path mass per depth (offline.h) */
  const struct amoe_cost_pass_ctx *cost; /* this pass, by the one cost function (cost.h) */
  const struct amoe_layout *layout;      /* several GPUs: where the experts are (layout.h) */
  /* at batch > 1: E flags of the experts the pass's requests before this
   * one execute at this layer (their bytes are read anyway), or NULL */
  const uint8_t *covered;
  /* §7's acceptance model, for a verifier that predicts deviation (marginal) */
  double kappa, margin_min;
  /* NULL, or the pass's running prediction, which such a verifier reads
   * and updates layer after layer (zeroed when the pass opens): [0] the
   * block's expected deviated tokens through this layer under its own
   * sets, [1] under AcceptMoE's (its budget), then per verified node the
   * squared displaced shares so far, under its own sets (nn) and
   * AcceptMoE's (nn); 2 + 2n doubles */
  double *deviation;
} amoe_vctx;
/* A verifier's scratch for a block of n nodes and E experts. */
#define AMOE_VSCRATCH(E, n) (5 * (size_t)(E) + (size_t)(n) * (AMOE_MAX_TOPK + 8))
#define AMOE_VISCRATCH(E, n) (3 * (size_t)(E) + 2 + (size_t)(n) * (AMOE_MAX_TOPK + 3))

typedef struct {
  const char *name;
  amoe_param_def params[AMOE_MAX_PARAMS]; /* read as row->vparam[i]; unused slots have key NULL */
  int reads_commitment;      /* 1: reads the commitment table p̂ (calibrated before the run) */
  int reads_mass;            /* 1: also the draft mass m̄_d beside p̂ (a table without it is refused) */
  int all_experts;           /* 1: S is every expert: the pass routes naturally, nothing is displaced */
  amoe_logits logits;        /* what of the logits the run loop reads for it (block.h) */
  /* Fills S (E flags). */
  void (*select)(const amoe_vctx *c, uint8_t *S);
  amoe_batch_kind batch; /* AMOE_BATCH_PASS: select_pass decides at batch > 1 */
  /* One S for the whole pass from its requests' contexts c[0..requests)
   * (a pass of one request: the same S as select). */
  void (*select_pass)(const amoe_vctx *c, int requests, uint8_t *S);
  const char *description; /* one line for `acceptmoe policies` */
} amoe_verifier_def;

/* What a draft policy sees for one block. */
/* What a sizing draft predicts of the pass it chose: committed tokens (τ)
 * and the pass's time (0: no prediction). */
typedef struct {
  double tau, pass_s;
} amoe_draft_prediction;

typedef struct {
  const amoe_block *b;
  const amoe_spec *spec;     /* model, hardware, offload; NULL in calibration */
  const amoe_policy_row *row;
  const struct amoe_offline *offline; /* p̂ and the union-vs-n table, or NULL */
  int nodes;                 /* node budget (tree.nodes) */
  const uint8_t *const *resident; /* per layer E flags, or NULL when resident */
  const void *state;         /* what the row's draft keeps across blocks (state_bytes), or NULL */
  void *scratch;             /* workspace of amoe_draft_scratch_bytes */
  /* a draft that predicts may leave its prediction here (NULL: nobody
   * asks); the run reports it against what it then charged */
  amoe_draft_prediction *predicted;
  /* several GPUs: where the experts are (layout.h), or NULL on one GPU */
  const struct amoe_layout *layout;
  /* at batch > 1: per layer E flags of the experts the pass's requests
   * drafted before this one route to, or NULL */
  const uint8_t *const *covered;
  /* [layer][top_k] the route of the committed token before the block (the
   * previous block's last naturally accepted node: an engine has it from
   * the last pass), or NULL at a request's first block */
  const uint16_t *previous;
  /* the KV context the request's attention reads (a batched request's own,
   * batch.c's request_context), or 0: workload.context_tokens */
  double context;
} amoe_dctx;

typedef struct {
  const char *name;
  amoe_param_def params[AMOE_MAX_PARAMS]; /* read as row->dparam[i] */
  /* Writes verified node ids ascending (root first); returns their count. */
  int (*choose)(const amoe_dctx *c, int *out);
  /* 1: no tree; the target decodes the chosen nodes one per forward pass,
   * in order (autoregressive decoding of the accepted path) */
  int one_token_per_pass;
  /* 1: reads the calibration workload's union-vs-n table */
  int reads_union_table;
  /* A draft that learns across blocks (ecospec: how often its row executed
   * each expert) keeps state_bytes(layers, experts) bytes, which the run
   * loop allocates zeroed per row (and zeroes again before each sweep over
   * the blocks), hands to observe() with every executed layer X and to
   * choose() as amoe_dctx.state. NULL: no state. */
  size_t (*state_bytes)(int layers, int experts);
  void (*observe)(void *state, int layer, const uint8_t *X, int experts);
  /* 1: each verified node after the root was drafted by one forward of the
   * target's MTP module (a decoder layer and the head), not by a draft head */
  int mtp;
  /* a draft-side cost per pass beside the draft model's steps (ecospec's
   * predictor over the block's candidates), or NULL */
  double (*draft_cost)(const amoe_policy_row *row, const amoe_spec *s, int candidates);
  amoe_batch_kind batch; /* AMOE_BATCH_COVERED: reads amoe_dctx.covered; AMOE_BATCH_PASS: choose_pass */
  /* AMOE_BATCH_PASS: every request's nodes of a pass at once, c[q] request
   * q's context: writes out[q] (ascending, root first), returns the pass's
   * verified nodes, count[q] each; the pass's prediction in c[0].predicted */
  int (*choose_pass)(const amoe_dctx *c, int requests, int *const *out, int *count);
  int reads_step_table; /* 1: reads amoe_offline.steps (profiled before the run) */
  /* a draft whose row (by its parameters) reads the layers' measured
   * popularity (amoe_offline.popularity): returns 1; NULL: never */
  int (*reads_popularity)(const amoe_policy_row *row);
  const char *description; /* one line for `acceptmoe policies` */
} amoe_draft_def;

struct amoe_step_table; /* tables.h */

/* Row 0 of each table is the default (eagle, natural); their pairing is
 * the baseline every speedup is measured against. The built-in rows are in
 * policy.c; amoe_*_add appends one at run time (the toy verifier of
 * tests/test_toy_policy.c is added so), up to AMOE_MAX_TABLE rows. */
#define AMOE_MAX_TABLE 16
extern amoe_verifier_def amoe_verifier_table[AMOE_MAX_TABLE];
/* The rows in use (the named ones). */
int amoe_verifier_rows(void);
extern amoe_draft_def amoe_draft_table[AMOE_MAX_TABLE];
int amoe_draft_rows(void);

int amoe_verifier_find(const char *name);
int amoe_draft_find(const char *name);
/* Appends a row; returns its index, or -1 when the name is taken or the
 * table is full. */
int amoe_verifier_add(const amoe_verifier_def *def);
int amoe_draft_add(const amoe_draft_def *def);

/* A row of the spec: the pairing of draft and verifier with every
 * parameter at its default (a required one at 0, to be set). */
void amoe_policy_init(amoe_policy_row *r, int draft, int verifier);
/* The same with a required parameter at its example value. */
void amoe_policy_init_examples(amoe_policy_row *r, int draft, int verifier);
/* The definition of parameter `key` of the row's draft (*which = 0) or
 * verifier (1), and its index; NULL when neither takes it. */
const amoe_param_def *amoe_policy_param(const amoe_policy_row *r, const char *key, int *which, int *index);
/* Sets parameter `key`; -1 when neither policy of the row takes it. */
int amoe_policy_set(amoe_policy_row *r, const char *key, double value);
/* The row's label: the draft with its parameters, then "+", then the
 * verifier with its parameters ("moe-spec/B=32", "ecospec/lambda=2/acc=0.8",
 * "ecospec+acceptmoe"); the default draft and the all-experts verifier go
 * unnamed when paired with something else. CSV-safe (no commas). */
void amoe_policy_label(amoe_policy_row *r);
/* 1 when the row is the baseline pairing (row 0 with row 0). */
int amoe_policy_is_baseline(const amoe_policy_row *r);
/* The value of the verifier's expert-count parameter (the `budget` column),
 * or 0 when it has none. */
int amoe_policy_budget(const amoe_policy_row *r);
size_t amoe_draft_scratch_bytes(int n, int layers, int experts);

/* Shared helpers. */
/* exp(H) of the positive w[e] among the candidates (cand NULL = all),
 * normalised to sum 1, H their entropy in nats; sums run over the
 * candidates in expert order in four interleaved partial sums. 0 when none
 * is positive. scratch: n doubles. */
double amoe_effective_rank(const double *w, const uint8_t *cand, int n, double *scratch);
/* The same over q[0..c), those positive values already packed in expert
 * order (q is overwritten). */
double amoe_effective_rank_packed(double *q, int c);
/* ceil(amoe_effective_rank_packed(q, c) - eps) (0 when c is 0), q kept
 * (computed on a copy in scratch, c doubles). */
int amoe_effective_rank_ceil(const double *q, int c, double eps, double *scratch);
/* Sets S[e] = 1 for the `count` experts of highest value (ties: lower id)
 * among those with cand[e] != 0 (cand NULL = all); S's other entries are
 * left as they are. */
void amoe_top_by_value(const double *value, const uint8_t *cand, int experts, int count, uint8_t *S);
/* The same in portable C: the reference the vector version
 * (arch/x86/policy_x86.c) is tested against. */
void amoe_top_by_value_generic(const double *value, const uint8_t *cand, int experts, int count, uint8_t *S);


/* The verifier policies. */
void amoe_verifier_natural(const amoe_vctx *c, uint8_t *S);
void amoe_verifier_moe_spec(const amoe_vctx *c, uint8_t *S);
void amoe_verifier_acceptmoe(const amoe_vctx *c, uint8_t *S);
void amoe_verifier_acceptmoe_fix(const amoe_vctx *c, uint8_t *S);
/* acceptmoe-pass: AcceptMoE's rule over the pass's pooled utilities (each
 * request's α from its own tree), its anchors every request's root top-k. */
void amoe_verifier_acceptmoe_pass(const amoe_vctx *c, int requests, uint8_t *S);
void amoe_verifier_oracle(const amoe_vctx *c, uint8_t *S);
void amoe_verifier_marginal(const amoe_vctx *c, uint8_t *S);
void amoe_verifier_marginal_depth(const amoe_vctx *c, uint8_t *S);
/* marginal's reach probability π of each verified node (pi[nn], by
 * position in c->nodes): from the draft's scores (by_scores) or from the
 * depth alone (marginal-depth). */
void amoe_marginal_reach(const amoe_vctx *c, int by_scores, double *pi);
/* The block's expected deviated tokens as marginal predicts them through
 * c->layer (§6 step 4): Σ_t π_t · F_t(√(σ²_t + ρ_t(S)²)), F_t §7's flip
 * probability in expectation over the draft's children of t, ρ_t(S) t's
 * top-k weight outside S at c->layer, σ²_t its own sets' earlier layers
 * (c->deviation; 0 without it). pi by position in c->nodes; scratch: nn + 2n
 * doubles, iscratch nn + 2n ints. */
double amoe_marginal_expected_deviation(const amoe_vctx *c, const double *pi, const uint8_t *S, double *scratch,
                                        int *iscratch);
/* The draft policies. */
int amoe_draft_autoregressive(const amoe_dctx *c, int *out);
int amoe_draft_eagle(const amoe_dctx *c, int *out);
int amoe_draft_mtp(const amoe_dctx *c, int *out);
/* AcceptMoE's utilities u_e = Σ_t α_{d_t} r_t,e over the natural top-k of
 * the verified nodes (E entries); the _generic twin without the vector
 * path, which tests compare it with (bit for bit). */
void amoe_acceptmoe_utilities(const amoe_vctx *c, double beta, double *u);
void amoe_acceptmoe_utilities_generic(const amoe_vctx *c, double beta, double *u);
int amoe_draft_ecospec(const amoe_dctx *c, int *out);
int amoe_draft_ecospec_global(const amoe_dctx *c, int *out);
double amoe_draft_ecospec_cost(const amoe_policy_row *row, const amoe_spec *s, int candidates);
size_t amoe_draft_ecospec_state_bytes(int layers, int experts);
void amoe_draft_ecospec_observe(void *state, int layer, const uint8_t *X, int experts);
int amoe_draft_evict(const amoe_dctx *c, int *out);
/* A node's chance of being committed (evict, adaptive): its draft path
 * probability exp(score), scaled at its depth by p̂_d / m̄_d (the
 * calibration's reach over its draft mass) when o has them, at most 1. */
double amoe_commit_chance(const struct amoe_offline *o, const amoe_block *b, int t);
/* adaptive: per step, the prefix of every request's EAGLE order with the
 * most expected committed tokens per predicted second, allocated over the
 * pass (D-Cut's rule); cost 0 (tokens) prices a step by the profiled
 * table, 1 (experts) by the one cost function over the chosen nodes'
 * expert union, the cache and the busiest GPU. choose: one request. */
int amoe_draft_adaptive(const amoe_dctx *c, int *out);
int amoe_draft_adaptive_pass(const amoe_dctx *c, int requests, int *const *out, int *count);
extern const char *const amoe_adaptive_cost_names[];
/* cost: experts's routes (§18, docs/design.md): oracle, predictor, previous, popular */
extern const char *const amoe_adaptive_routes_names[];
int amoe_draft_adaptive_reads_popularity(const amoe_policy_row *row);
/* 1 when the row's draft sizes by predicted routes (amoe_draft_def.reads_popularity) */
int amoe_policy_reads_routes(const amoe_policy_row *row);
/* The table's step time at `batch` requests of `tokens` verified tokens
 * each: bilinear between grid points, linear beyond the last (its last
 * two points' slope), clamped at the first. */
double amoe_step_table_at(const struct amoe_step_table *t, double batch, double tokens);
/* evict's predicted time of a pass over the first n nodes of the EAGLE
 * order reaching depth maxd (the shared cost function, §9). */
double amoe_draft_evict_predict(const amoe_dctx *c, int n, int maxd);
/* Nodes in EAGLE order (cumulative score desc, ties: earlier node), root first;
 * every prefix is a connected tree. Returns n. The one tree ordering. */
int amoe_draft_rank(const amoe_block *b, int *order);
/* Writes the nodes order[0..n) to out in ascending id (keep: b->n bytes of
 * scratch); returns n. */
int amoe_nodes_ascending(const amoe_block *b, const int *order, int n, uint8_t *keep, int *out);

#endif
