/* A verification block (docs/design.md §1, §5): the candidate draft tree with, per
 * node, its parent, draft log-probability, cumulative score and whether it
 * lies on the natural accepted path, and for every MoE layer the router
 * logits stored as the top-m (expert id, logit) pairs, sorted by logit
 * descending with ties to the lower id. Entries beyond m count as -inf.
 * Logits are binary16 (f16.h). */
#ifndef AMOE_BLOCK_H
#define AMOE_BLOCK_H

#include <stdint.h>

#include "err.h"
#include "f16.h"
#include "model.h"

#define AMOE_MAX_NODES 4096

typedef struct {
  uint64_t index;    /* position in the workload */
  uint32_t request;  /* request this block belongs to */
  uint32_t step;     /* block number inside the request */
  int n;             /* nodes; node 0 is the root, parent[t] < t */
  int layers, experts, m;
  int32_t *parent;
  float *logp;       /* draft log-probability of the node given its parent */
  float *score;      /* cumulative draft log-probability */
  uint8_t *accepted; /* 1 on the natural accepted path (root included) */
  uint8_t *depth;    /* derived by amoe_block_finish */
  uint16_t *ids;     /* [layer][node][m] */
  amoe_f16 *logits;  /* [layer][node][lm]: the first lm of each node-layer's m logits */
  int lm;            /* m, or top_k when a reader was asked for the top-k only (AMOE_LOGITS_TOP) */
  /* [layer][node] softmax normalisers of the logits (amoe_router_softmax_inv)
   * when the source carries them (a trace does), else NULL; anything that
   * changes the logits must drop them (amoe_block_reserve does) */
  const float *softmax_inv;
  /* storage */
  int cap_n;
  int owns;          /* 0 when the arrays point into a reader's buffer */
  void *mem;
  uint8_t *depth_mem;
} amoe_block;

void amoe_block_init(amoe_block *b, int layers, int experts, int m);
amoe_status amoe_block_reserve(amoe_block *b, int n, amoe_err *e);
void amoe_block_free(amoe_block *b);
/* Makes b a view of n nodes (layers x experts, m stored) whose arrays the
 * caller points into storage b does not own (a reader's buffer): frees
 * what b owned; the arrays, index, request and step are the caller's to set. */
void amoe_block_borrow(amoe_block *b, int layers, int experts, int m, int n);

static inline const uint16_t *amoe_block_ids(const amoe_block *b, int l, int t) {
  return b->ids + ((size_t)l * b->n + t) * b->m;
}
static inline const amoe_f16 *amoe_block_logits(const amoe_block *b, int l, int t) {
  return b->logits + ((size_t)l * b->n + t) * b->lm;
}

/* Which logits a reader hands over: none (b->logits NULL; natural routing
 * needs only the ids), each node-layer's top-k with their softmax
 * normalisers (router probabilities of the natural top-k: every policy but
 * moe-spec), or all m. A trace stores them in that order, so a reader
 * reads no more than it is asked for. */
typedef enum { AMOE_LOGITS_NONE = 0, AMOE_LOGITS_TOP = 1, AMOE_LOGITS_ALL = 2 } amoe_logits;

/* Stores node t's layer-l logits from a full E-vector: rounds them to f16
 * and keeps the top m. Picks a vector version where the CPU has one. */
void amoe_block_set_full(amoe_block *b, int l, int t, const float *z);
/* The same in portable C: the reference the vector version is tested
 * against, bit for bit. */
void amoe_block_set_full_generic(amoe_block *b, int l, int t, const float *z);
/* Import exactness: node t's layer-l pairs chosen and ordered on the
 * caller's float logits, not on their binary16 roundings. From a full
 * E-vector, the top m by (float logit desc, id asc); from m given pairs,
 * those pairs in that order. Where rounding would merge two logits that the
 * float order separates, the later is stored one binary16 step below the
 * earlier, so the stored order, and with it the natural top-k, is the
 * file's exactly (a change below the storage precision). */
void amoe_block_set_exact(amoe_block *b, int l, int t, const float *zfull);
void amoe_block_set_pairs_exact(amoe_block *b, int l, int t, const uint16_t *ids, const float *z);
/* Score shape: node t's stored layer-l logits times scale > 0, in place,
 * keeping their order and so every top-k set exactly (where rounding would
 * merge two, the later goes one binary16 step lower, as in
 * amoe_f16_store_ordered). */
void amoe_block_scale_logits(amoe_block *b, int l, int t, float scale);
/* The same in portable C, the reference the vector version is tested
 * against, bit for bit. */
void amoe_block_scale_logits_generic(amoe_block *b, int l, int t, float scale);
/* The order fix of that rescaling: h[j] is the binary16 rounding of old[j]
 * times the scale (never -0), and old with ids the stored order; where h
 * would break it (a rise, or a tie of two entries old orders strictly, by
 * logit key with -0 as +0, then id), h[j] goes one step below h[j-1];
 * below -inf everything is -inf. */
void amoe_f16_fix_order(amoe_f16 *h, const amoe_f16 *old, const uint16_t *ids, int n);
/* The same store for n pairs already in their final order (strictly:
 * each after the previous by float logit desc, id asc): writes the
 * binary16 logits. */
void amoe_f16_store_ordered(const float *zf, const uint16_t *ids, int n, amoe_f16 *out);

/* What amoe_block_finish checks besides the tree and the accepted path. */
typedef enum {
  AMOE_CHECK_ALL = 0, /* every stored pair: id in range, logit usable, order, ids distinct */
  AMOE_CHECK_TREE = 1 /* no pair: built by amoe_block_set_full, or read from a trace (whose
                         writer checked every pair, whose checksum protects them, and whose
                         reader checks the id ranges a crash could come from) */
} amoe_block_check;

/* Derives depth and checks the tree, the accepted path and, as `check`
 * says, the stored pairs. */
amoe_status amoe_block_finish(amoe_block *b, amoe_block_check check, amoe_err *e);
/* Checks every stored pair (ids distinct too when `unique`). */
amoe_status amoe_block_check_pairs(const amoe_block *b, int unique, amoe_err *e);

/* Nodes on the natural accepted path (root included): τ under natural routing
 * when every node is verified. */
int amoe_block_accepted_count(const amoe_block *b);

/* Copies src into dst (dst owns its storage). */
amoe_status amoe_block_copy(amoe_block *dst, const amoe_block *src, amoe_err *e);
/* The same, for a block kept to be read once, later, by another thread:
 * written so as not to evict the writer's working set. */
amoe_status amoe_block_stash(amoe_block *dst, const amoe_block *src, amoe_err *e);

#endif
