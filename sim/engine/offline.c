#include "offline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "policy.h"
#include "route.h"

amoe_status amoe_offline_estimate(amoe_source *src, int nodes, int top_k, amoe_offline *out, amoe_err *e) {
  memset(out, 0, sizeof *out);
  double reach[AMOE_MAX_DEPTH] = {0}, mass[AMOE_MAX_DEPTH] = {0}, blocks = 0;
  double *usum = calloc(AMOE_MAX_UNION_N + 1, sizeof *usum), *ucnt = calloc(AMOE_MAX_UNION_N + 1, sizeof *ucnt);
  amoe_block b;
  amoe_block_init(&b, 1, 2, 1);
  int *order = NULL;
  size_t cap = 0;
  uint8_t seen[AMOE_MAX_EXPERTS];
  amoe_source_want_logits(src, AMOE_LOGITS_NONE); /* ids only */
  amoe_status st = usum && ucnt ? amoe_source_rewind(src, e) : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  amoe_status rc = AMOE_OK;
  while (st == AMOE_OK && (rc = amoe_source_next(src, &b, e)) == AMOE_OK) {
    int *grown = amoe_grow(order, &cap, (size_t)b.n, sizeof *order, 64);
    if (!grown) {
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
      break;
    }
    order = grown;
    int n = amoe_draft_rank(&b, order);
    int nn = n < nodes ? n : nodes;
    int depth = 0; /* the accepted verified chain is closed under parents */
    for (int i = 1; i < nn; i++)
      if (b.accepted[order[i]] && b.depth[order[i]] > depth) depth = b.depth[order[i]];
    for (int d = 0; d <= depth && d < AMOE_MAX_DEPTH; d++) reach[d] += 1;
    for (int i = 0; i < nn; i++)
      if (b.depth[order[i]] < AMOE_MAX_DEPTH) mass[b.depth[order[i]]] += exp(b.score[order[i]]);
    blocks += 1;
    /* union of natural routes over the first i nodes in EAGLE order */
    int un = nn < AMOE_MAX_UNION_N ? nn : AMOE_MAX_UNION_N;
    for (int l = 0; l < b.layers; l++) {
      memset(seen, 0, (size_t)b.experts);
      int u = 0;
      for (int i = 0; i < un; i++) {
        u += amoe_route_union_add(&b, l, top_k, order[i], seen);
        usum[i + 1] += u;
        ucnt[i + 1] += 1;
      }
    }
  }
  if (st == AMOE_OK && rc != AMOE_END) st = rc;
  if (st == AMOE_OK && blocks == 0) st = amoe_fail(e, AMOE_EINVAL, "commitment: the calibration workload is empty");
  if (st == AMOE_OK) {
    int n = 0;
    for (int d = 0; d < AMOE_MAX_DEPTH; d++)
      if (reach[d] > 0) n = d + 1;
    for (int d = 0; d < n; d++) out->p[d] = reach[d] / blocks;
    for (int d = 0; d < AMOE_MAX_DEPTH; d++) out->mass[d] = mass[d] / blocks;
    out->n = n;
    for (int i = 1; i <= AMOE_MAX_UNION_N; i++)
      if (ucnt[i] > 0) {
        out->unions[i] = usum[i] / ucnt[i];
        out->union_n = i;
      }
  }
  amoe_source_want_logits(src, AMOE_LOGITS_ALL);
  free(usum);
  free(ucnt);
  free(order);
  amoe_block_free(&b);
  return st;
}

amoe_status amoe_expert_load_estimate(amoe_source *src, int nodes, int top_k, int layers, int experts, double *load,
                                      amoe_err *e) {
  memset(load, 0, (size_t)layers * experts * sizeof *load);
  amoe_block b;
  amoe_block_init(&b, 1, 2, 1);
  int *order = NULL;
  size_t cap = 0;
  amoe_source_want_logits(src, AMOE_LOGITS_NONE); /* ids only */
  amoe_status st = amoe_source_rewind(src, e);
  amoe_status rc = AMOE_OK;
  while (st == AMOE_OK && (rc = amoe_source_next(src, &b, e)) == AMOE_OK) {
    int *grown = amoe_grow(order, &cap, (size_t)b.n, sizeof *order, 64);
    if (!grown) {
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
      break;
    }
    order = grown;
    const int n = amoe_draft_rank(&b, order), nn = n < nodes ? n : nodes;
    for (int l = 0; l < b.layers && l < layers; l++)
      for (int i = 0; i < nn; i++) {
        const uint16_t *id = amoe_block_ids(&b, l, order[i]);
        for (int j = 0; j < top_k; j++)
          if (id[j] < experts) load[(size_t)l * experts + id[j]] += 1;
      }
  }
  if (st == AMOE_OK && rc != AMOE_END) st = rc;
  amoe_source_want_logits(src, AMOE_LOGITS_ALL);
  free(order);
  amoe_block_free(&b);
  return st;
}
