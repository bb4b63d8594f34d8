#include "offline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "policy.h"
#include "route.h"

/* Every calibration block with its first min(n, nodes) nodes in EAGLE
 * order (ids only), handed to visit; returns how many blocks there were. */
typedef void (*ranked_visit)(void *ctx, const amoe_block *b, const int *order, int nn);
static amoe_status walk_ranked(amoe_source *src, int nodes, ranked_visit visit, void *ctx, double *blocks,
                               amoe_err *e) {
  amoe_block b;
  amoe_block_init(&b, 1, 2, 1);
  int *order = NULL;
  size_t cap = 0;
  *blocks = 0;
  amoe_source_want_logits(src, AMOE_LOGITS_NONE);
  amoe_status st = amoe_source_rewind(src, e), rc = AMOE_OK;
  while (st == AMOE_OK && (rc = amoe_source_next(src, &b, e)) == AMOE_OK) {
    int *grown = amoe_grow(order, &cap, (size_t)b.n, sizeof *order, 64);
    if (!grown) {
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
      break;
    }
    order = grown;
    const int n = amoe_draft_rank(&b, order);
    visit(ctx, &b, order, n < nodes ? n : nodes);
    *blocks += 1;
  }
  if (st == AMOE_OK && rc != AMOE_END) st = rc;
  amoe_source_want_logits(src, AMOE_LOGITS_ALL);
  free(order);
  amoe_block_free(&b);
  return st;
}

typedef struct {
  int top_k;
  double reach[AMOE_MAX_DEPTH], mass[AMOE_MAX_DEPTH];
  double *usum, *ucnt;
} offline_sums;

static void offline_visit(void *ctx, const amoe_block *b, const int *order, int nn) {
  offline_sums *o = ctx;
  int depth = 0; /* the accepted verified chain is closed under parents */
  for (int i = 1; i < nn; i++)
    if (b->accepted[order[i]] && b->depth[order[i]] > depth) depth = b->depth[order[i]];
  for (int d = 0; d <= depth && d < AMOE_MAX_DEPTH; d++) o->reach[d] += 1;
  for (int i = 0; i < nn; i++)
    if (b->depth[order[i]] < AMOE_MAX_DEPTH) o->mass[b->depth[order[i]]] += exp(b->score[order[i]]);
  /* union of natural routes over the first i nodes in EAGLE order */
  uint8_t seen[AMOE_MAX_EXPERTS];
  const int un = nn < AMOE_MAX_UNION_N ? nn : AMOE_MAX_UNION_N;
  for (int l = 0; l < b->layers; l++) {
    memset(seen, 0, (size_t)b->experts);
    int u = 0;
    for (int i = 0; i < un; i++) {
      u += amoe_route_union_add(b, l, o->top_k, order[i], seen);
      o->usum[i + 1] += u;
      o->ucnt[i + 1] += 1;
    }
  }
}

amoe_status amoe_offline_estimate(amoe_source *src, int nodes, int top_k, amoe_offline *out, amoe_err *e) {
  memset(out, 0, sizeof *out);
  offline_sums o = {.top_k = top_k};
  o.usum = calloc(AMOE_MAX_UNION_N + 1, sizeof *o.usum);
  o.ucnt = calloc(AMOE_MAX_UNION_N + 1, sizeof *o.ucnt);
  double blocks = 0;
  amoe_status st = o.usum && o.ucnt ? walk_ranked(src, nodes, offline_visit, &o, &blocks, e)
                                    : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  if (st == AMOE_OK && blocks == 0) st = amoe_fail(e, AMOE_EINVAL, "commitment: the calibration workload is empty");
  if (st == AMOE_OK) {
    int n = 0;
    for (int d = 0; d < AMOE_MAX_DEPTH; d++)
      if (o.reach[d] > 0) n = d + 1;
    for (int d = 0; d < n; d++) out->p[d] = o.reach[d] / blocks;
    for (int d = 0; d < AMOE_MAX_DEPTH; d++) out->mass[d] = o.mass[d] / blocks;
    out->n = n;
    for (int i = 1; i <= AMOE_MAX_UNION_N; i++)
      if (o.ucnt[i] > 0) {
        out->unions[i] = o.usum[i] / o.ucnt[i];
        out->union_n = i;
      }
  }
  free(o.usum);
  free(o.ucnt);
  return st;
}

typedef struct {
  int top_k, layers, experts;
  double *load;
} load_sums;

static void load_visit(void *ctx, const amoe_block *b, const int *order, int nn) {
  load_sums *o = ctx;
  for (int l = 0; l < b->layers && l < o->layers; l++)
    for (int i = 0; i < nn; i++) {
      const uint16_t *id = amoe_block_ids(b, l, order[i]);
      for (int j = 0; j < o->top_k; j++)
        if (id[j] < o->experts) o->load[(size_t)l * o->experts + id[j]] += 1;
    }
}

amoe_status amoe_expert_load_estimate(amoe_source *src, int nodes, int top_k, int layers, int experts, double *load,
                                      amoe_err *e) {
  memset(load, 0, (size_t)layers * experts * sizeof *load);
  load_sums o = {top_k, layers, experts, load};
  double blocks;
  return walk_ranked(src, nodes, load_visit, &o, &blocks, e);
}
