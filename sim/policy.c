#include "policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const amoe_verifier_def amoe_verifier_table[] = {
    {"natural", 0, 0, amoe_verifier_natural},
    {"moe-spec", 1, 0, amoe_verifier_moe_spec},
    {"acceptmoe", 0, 1, amoe_verifier_acceptmoe},
    {"acceptmoe-fix", 1, 0, amoe_verifier_acceptmoe_fix},
    {"oracle", 0, 0, amoe_verifier_oracle},
};
const int amoe_verifier_count = (int)(sizeof amoe_verifier_table / sizeof amoe_verifier_table[0]);

const amoe_draft_def amoe_draft_table[] = {
    {"eagle", amoe_draft_eagle},
    {"autoregressive", amoe_draft_autoregressive},
    {"ecospec", amoe_draft_ecospec},
    {"evict", amoe_draft_evict},
};
const int amoe_draft_count = (int)(sizeof amoe_draft_table / sizeof amoe_draft_table[0]);

int amoe_verifier_find(const char *name) {
  for (int i = 0; i < amoe_verifier_count; i++)
    if (!strcmp(amoe_verifier_table[i].name, name)) return i;
  return -1;
}

int amoe_draft_find(const char *name) {
  for (int i = 0; i < amoe_draft_count; i++)
    if (!strcmp(amoe_draft_table[i].name, name)) return i;
  return -1;
}

size_t amoe_draft_scratch_bytes(int n, int layers, int experts) {
  return (size_t)n * (16 + (size_t)layers * AMOE_MAX_TOPK * 2) + (size_t)layers * experts * 3 + 4096;
}

void amoe_router_probs(const amoe_block *b, int l, int t, int router, float *out) {
  const float *z = amoe_block_logits(b, l, t);
  if (router == AMOE_ROUTER_SIGMOID_NORM) {
    for (int j = 0; j < b->m; j++) out[j] = 1.0f / (1.0f + expf(-z[j]));
    return;
  }
  float sum = 0;
  for (int j = 0; j < b->m; j++) sum += out[j] = expf(z[j] - z[0]);
  float inv = 1.0f / sum;
  for (int j = 0; j < b->m; j++) out[j] *= inv;
}

int amoe_route_constrained(const amoe_block *b, int l, int t, int k, const uint8_t *S, uint16_t *out) {
  const uint16_t *id = amoe_block_ids(b, l, t);
  int c = 0;
  for (int j = 0; j < b->m && c < k; j++)
    if (S[id[j]]) out[c++] = id[j];
  if (c < k) { /* the rest of S is -inf: lowest ids first */
    for (int e = 0; e < b->experts && c < k; e++) {
      if (!S[e]) continue;
      int stored = 0;
      for (int j = 0; j < b->m && !stored; j++) stored = id[j] == e;
      if (!stored) out[c++] = (uint16_t)e;
    }
  }
  return c;
}

typedef struct {
  double v;
  int id;
} vpair;

/* x ranks before y: higher value, then lower id */
static inline int vbefore(vpair x, vpair y) { return x.v > y.v || (x.v == y.v && x.id < y.id); }

/* Marks the `count` best candidates (a strict total order, so the set is
 * exact): quickselect, no sort, since S is a set. */
void amoe_top_by_value(const double *value, const uint8_t *cand, int experts, int count, uint8_t *S,
                       int *iscratch) {
  (void)iscratch;
  if (count <= 0) return;
  vpair p[AMOE_MAX_EXPERTS];
  int n = 0;
  for (int e = 0; e < experts; e++)
    if (!cand || cand[e]) p[n++] = (vpair){value[e], e};
  if (count < n) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
      vpair piv = p[(lo + hi) >> 1];
      int i = lo, j = hi;
      while (i <= j) {
        while (vbefore(p[i], piv)) i++;
        while (vbefore(piv, p[j])) j--;
        if (i <= j) {
          vpair t = p[i];
          p[i++] = p[j];
          p[j--] = t;
        }
      }
      if (count - 1 <= j)
        hi = j;
      else if (count - 1 >= i)
        lo = i;
      else
        break;
    }
    n = count;
  }
  for (int i = 0; i < n; i++) S[p[i].id] = 1;
}
