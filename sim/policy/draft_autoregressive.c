/* autoregressive: no tree. The tokens the eagle row commits (its tree's
 * natural accepted path), which the run loop decodes one per forward pass
 * (the row's one_token_per_pass). */
#include "policy.h"

int amoe_draft_autoregressive(const amoe_dctx *c, int *out) {
  const amoe_block *b = c->b;
  int n = amoe_draft_eagle(c, out), m = 0;
  /* ascending ids with parent[t] < t: the path's nodes come in path order */
  for (int i = 0; i < n; i++) {
    const int t = out[i];
    if (t == 0 || (m > 0 && b->accepted[t] && b->parent[t] == out[m - 1])) out[m++] = t;
  }
  return m;
}
