/* natural: S = [E]; standard speculative decoding (the EAGLE-3 baseline). */
#include <string.h>

#include "policy.h"

void amoe_verifier_natural(const amoe_vctx *c, uint8_t *S) { memset(S, 1, (size_t)c->experts); }
