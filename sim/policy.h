/* Policies are rows of two tables driven by one loop (run.c):
 *   draft policies choose which candidate nodes are verified;
 *   verifier policies choose the eligible expert set S of a (block, layer).
 * Adding a policy is one file and one row in policy.c. DESIGN §6. */
#ifndef AMOE_POLICY_H
#define AMOE_POLICY_H

#include <stdint.h>

#include "block.h"
#include "model.h"
#include "router.h"
#include "spec.h"

/* What a verifier sees for one (block, layer). */
typedef struct {
  const amoe_block *b;
  int layer;
  int k, experts, router;
  const int *nodes;          /* verified nodes, ascending, nodes[0] = root */
  int nn;
  const int *level_count;    /* N_d: verified nodes at depth d */
  const double *phat;        /* commitment p̂_d */
  int phat_n;
  const uint8_t *resident;   /* E flags, or NULL when every expert is resident */
  const amoe_policy_row *row;
  const float *prob;         /* [t][k] router probability of node t's natural top-k (all nodes[]) */
  double *scratch;           /* >= 4·E doubles */
  int *iscratch;             /* >= 2·E ints */
} amoe_vctx;

typedef struct {
  const char *name;
  int needs_budget;          /* 1: `budget` is required */
  int reads_commitment;      /* 1: reads the commitment table p̂ (calibrated before the run) */
  int all_experts;           /* 1: S is every expert: the pass routes naturally, nothing is displaced */
  amoe_logits logits;        /* what of the logits the run loop reads for it (block.h) */
  /* Fills S (E flags). */
  void (*select)(const amoe_vctx *c, uint8_t *S);
} amoe_verifier_def;

/* What a draft policy sees for one block. */
typedef struct {
  const amoe_block *b;
  const amoe_spec *spec;     /* model, hardware, offload; NULL in calibration */
  const amoe_policy_row *row;
  const struct amoe_commitment *offline; /* p̂ and the union-vs-n table, or NULL */
  int nodes;                 /* node budget (tree.nodes) */
  const uint8_t *const *resident; /* per layer E flags, or NULL when resident */
  const uint32_t *popularity; /* [layer][E] requests so far by this row, or NULL */
  void *scratch;             /* workspace of amoe_draft_scratch_bytes */
} amoe_dctx;

typedef struct {
  const char *name;
  /* Writes verified node ids ascending (root first); returns their count. */
  int (*choose)(const amoe_dctx *c, int *out);
  /* 1: no tree; the target decodes the chosen nodes one per forward pass,
   * in order (autoregressive decoding of the accepted path) */
  int one_token_per_pass;
  /* 1: reads the calibration workload's union-vs-n table */
  int reads_union_table;
} amoe_draft_def;

extern const amoe_verifier_def amoe_verifier_table[];
extern const int amoe_verifier_count;
extern const amoe_draft_def amoe_draft_table[];
extern const int amoe_draft_count;

int amoe_verifier_find(const char *name);
int amoe_draft_find(const char *name);
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
/* ceil(amoe_effective_rank_packed(q, c) - eps) (0 when c is 0), q kept:
 * from H in float where that settles it (always the same number, in about
 * half the time: 8% of an acceptmoe replay's samples became 3.6%), else
 * in double on a copy in scratch (c doubles). */
int amoe_effective_rank_ceil(const double *q, int c, double eps, double *scratch);
/* Keeps in S the `count` experts with the highest value (ties: lower id),
 * among those with cand[e] != 0 (cand NULL = all). */
void amoe_top_by_value(const double *value, const uint8_t *cand, int experts, int count, uint8_t *S,
                       int *iscratch);
/* The same in portable C: the reference the vector version is tested
 * against. */
void amoe_top_by_value_portable(const double *value, const uint8_t *cand, int experts, int count, uint8_t *S);

/* The verifier policies. */
void amoe_verifier_natural(const amoe_vctx *c, uint8_t *S);
void amoe_verifier_moe_spec(const amoe_vctx *c, uint8_t *S);
void amoe_verifier_acceptmoe(const amoe_vctx *c, uint8_t *S);
void amoe_verifier_acceptmoe_fix(const amoe_vctx *c, uint8_t *S);
void amoe_verifier_oracle(const amoe_vctx *c, uint8_t *S);
/* The draft policies. */
int amoe_draft_autoregressive(const amoe_dctx *c, int *out);
int amoe_draft_eagle(const amoe_dctx *c, int *out);
int amoe_draft_ecospec(const amoe_dctx *c, int *out);
int amoe_draft_evict(const amoe_dctx *c, int *out);
/* Nodes in EAGLE order (cumulative score desc, ties: earlier node), root first;
 * every prefix is a connected tree. Returns n. */
int amoe_draft_rank(const amoe_block *b, int *order);

#endif
