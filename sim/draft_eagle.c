/* eagle: verify the root and the best nodes-1 candidates by cumulative draft
 * score (ties: the earlier node). autoregressive: the root alone. */
#include <stdlib.h>

#include "policy.h"

int amoe_draft_autoregressive(const amoe_dctx *c, int *out) {
  (void)c;
  out[0] = 0;
  return 1;
}

int amoe_draft_eagle(const amoe_dctx *c, int *out) {
  const amoe_block *b = c->b;
  if (b->n <= c->nodes) {
    for (int t = 0; t < b->n; t++) out[t] = t;
    return b->n;
  }
  /* rank non-root nodes: insertion into a sorted top list of nodes-1 */
  int *top = c->scratch, cnt = 0, want = c->nodes - 1;
  for (int t = 1; t < b->n; t++) {
    float s = b->score[t];
    if (cnt == want && !(s > b->score[top[cnt - 1]])) continue;
    int j = cnt < want ? cnt++ : want - 1;
    while (j > 0 && s > b->score[top[j - 1]]) {
      top[j] = top[j - 1];
      j--;
    }
    top[j] = t;
  }
  uint8_t *keep = (uint8_t *)(top + b->n);
  for (int t = 0; t < b->n; t++) keep[t] = 0;
  keep[0] = 1;
  for (int i = 0; i < cnt; i++) keep[top[i]] = 1;
  int n = 0;
  for (int t = 0; t < b->n; t++)
    if (keep[t]) out[n++] = t;
  return n;
}
