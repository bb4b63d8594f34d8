/* eagle: verify the root and the best nodes-1 candidates by cumulative draft
 * score (ties: the earlier node). Also the EAGLE order itself, which evict
 * and the commitment estimate read. */
#include <stdint.h>

#include "policy.h"

/* A child never outscores its parent and ties go to the earlier node, so
 * every prefix of this order is closed under parents. */
int amoe_draft_rank(const amoe_block *b, int *order) {
  order[0] = 0;
  int cnt = 0;
  for (int t = 1; t < b->n; t++) { /* insertion: stable on ties */
    float s = b->score[t];
    int j = cnt++;
    while (j > 0 && s > b->score[order[j]]) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = t;
  }
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
