/* mtp: a chain of `tokens` draft tokens, as DeepSeek's multi-token
 * prediction module proposes them: from the root, each step the most
 * likely child of the last (ties: the earlier node). Each draft token costs
 * one forward of the MTP module, which the run loop prices as a decoder
 * layer of the target's shapes plus the shared head (docs/design.md §6). */
#include "policy.h"

int amoe_draft_mtp(const amoe_dctx *c, int *out) {
  const amoe_block *b = c->b;
  const int want = (int)c->row->dparam[0];
  int n = 0, t = 0;
  out[n++] = 0;
  while (n <= want) {
    int best = -1; /* children come after their parent */
    for (int u = t + 1; u < b->n; u++)
      if (b->parent[u] == t && (best < 0 || b->logp[u] > b->logp[best])) best = u;
    if (best < 0) break;
    out[n++] = t = best;
  }
  return n; /* ascending: each chosen child has a larger index than its parent */
}
