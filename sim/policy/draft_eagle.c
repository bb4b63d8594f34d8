/* eagle: verify the root and the best nodes-1 candidates by cumulative draft
 * score (ties: the earlier node). Also the EAGLE order itself, which evict
 * and the commitment estimate read. */
#include <stdint.h>

#include "policy.h"
#include "sort.h"

static int higher_score(const void *a, const void *b, const void *blk) {
  const float *score = ((const amoe_block *)blk)->score;
  return score[*(const int *)a] > score[*(const int *)b];
}

/* A child never outscores its parent and ties go to the earlier node (the
 * sort is stable), so every prefix of this order is closed under parents. */
int amoe_draft_rank(const amoe_block *b, int *order) {
  for (int t = 0; t < b->n; t++) order[t] = t;
  amoe_sort(order + 1, b->n - 1, sizeof *order, higher_score, b); /* the root stays first */
  return b->n;
}

int amoe_nodes_ascending(const amoe_block *b, const int *order, int n, uint8_t *keep, int *out) {
  for (int t = 0; t < b->n; t++) keep[t] = 0;
  for (int i = 0; i < n; i++) keep[order[i]] = 1;
  int m = 0;
  for (int t = 0; t < b->n; t++)
    if (keep[t]) out[m++] = t;
  return m;
}

int amoe_draft_eagle(const amoe_dctx *c, int *out) {
  const amoe_block *b = c->b;
  if (b->n <= c->nodes) {
    for (int t = 0; t < b->n; t++) out[t] = t;
    return b->n;
  }
  int *order = c->scratch;
  amoe_draft_rank(b, order);
  return amoe_nodes_ascending(b, order, c->nodes, (uint8_t *)(order + b->n), out);
}
