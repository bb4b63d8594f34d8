/* moe-spec: keep the B experts with the largest router mass Σ_t r_t,e over
 * every verified node (all stored entries, not only the top-k). */
#include <string.h>

#include "policy.h"

void amoe_verifier_moe_spec(const amoe_vctx *c, uint8_t *S) {
  double *mass = c->scratch;
  memset(mass, 0, (size_t)c->experts * sizeof *mass);
  int m = c->b->m;
  for (int i = 0; i < c->nn; i++) {
    const uint16_t *id = amoe_block_ids(c->b, c->layer, c->nodes[i]);
    float p[AMOE_MAX_EXPERTS];
    amoe_router_probs(c->b, c->layer, c->nodes[i], c->router, c->k, p);
    for (int j = 0; j < m; j++) mass[id[j]] += p[j];
  }
  memset(S, 0, (size_t)c->experts);
  amoe_top_by_value(mass, NULL, c->experts, (int)c->row->vparam[0] /* budget */, S);
}
