/* oracle: S = the union of the natural routes of the verified nodes on the
 * natural accepted path. A bound: it needs the outcome before verifying. */
#include <string.h>

#include "policy.h"

void amoe_verifier_oracle(const amoe_vctx *c, uint8_t *S) {
  memset(S, 0, (size_t)c->experts);
  for (int i = 0; i < c->nn; i++) {
    int t = c->nodes[i];
    if (!c->b->accepted[t]) continue;
    const uint16_t *id = amoe_block_ids(c->b, c->layer, t);
    for (int j = 0; j < c->k; j++) S[id[j]] = 1;
  }
}
