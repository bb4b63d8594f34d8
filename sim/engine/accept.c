#include "accept.h"

#include <math.h>

#include "rng.h"

/* Draft probability of node t's natural (accepted) child, or 0 when the
 * candidate tree has none: the accepted path ends at t. */
static double natural_child_prob(const amoe_block *b, int t) {
  for (int c = t + 1; c < b->n; c++)
    if (b->parent[c] == t && b->accepted[c]) return exp((double)b->logp[c]);
  return 0;
}

/* m_t is the target's margin at t, taken from the draft's confidence c in
 * the natural child: max(ln(c / (1 − c)), margin_min). */
double amoe_flip_prob(double kappa, double margin_min, double c, double s_t) {
  if (!(s_t > 0) || !(kappa > 0) || c >= 1) return 0;
  double m = c > 0 ? log(c / (1 - c)) : margin_min;
  if (!(m >= margin_min)) m = margin_min;
  return erfc(m / (kappa * s_t * sqrt(2.0))); /* 2Φ(−x) = erfc(x/√2) */
}

int amoe_accept_flips(const amoe_spec *s, const amoe_block *b, int t, double s_t) {
  if (!(s_t > 0) || !(s->kappa > 0)) return 0; /* (natural routing: no scan for the child) */
  const double p = amoe_flip_prob(s->kappa, s->margin_min, natural_child_prob(b, t), s_t);
  return p > 0 && amoe_rng_coin(s->workload.seed, b->index, (uint64_t)t) < p;
}

/* After a flip at t the new token may still be one of t's other verified
 * children: with probability (their draft mass) / (1 − natural child's),
 * picked in proportion to their draft probability (a second coin keyed by
 * the node). Returns that child's index into nodes[], or -1. */
static int sibling_after_flip(const amoe_spec *s, const amoe_block *b, const int *nodes, int nn, int pos) {
  const int t = nodes[pos];
  const double rest = 1 - natural_child_prob(b, t);
  if (!(rest > 0)) return -1;
  double u = amoe_rng_coin(s->workload.seed, b->index, (uint64_t)t + AMOE_MAX_NODES) * rest;
  for (int i = pos + 1; i < nn; i++) {
    const int c = nodes[i];
    if (b->parent[c] != t || b->accepted[c]) continue;
    u -= exp((double)b->logp[c]);
    if (u < 0) return i;
  }
  return -1;
}

amoe_accept_result amoe_accept_walk(const amoe_spec *s, const amoe_block *b, const int *nodes, int nn,
                                    const float *perturbation_sq) {
  amoe_accept_result r = {1, 0, 0};
  int pos = 0; /* index into nodes[] of the current path node (root) */
  for (;;) {
    const int t = nodes[pos];
    const double s_t = sqrt((double)perturbation_sq[pos]);
    r.perturbation_sum += s_t;
    if (amoe_accept_flips(s, b, t, s_t)) {
      /* t's output changed: the walk may go on one verified sibling of
       * the natural child, whose own output the trace does not know */
      r.deviated = 1;
      r.tau += sibling_after_flip(s, b, nodes, nn, pos) >= 0;
      return r;
    }
    int next = -1;
    for (int i = pos + 1; i < nn && next < 0; i++)
      if (b->parent[nodes[i]] == t && b->accepted[nodes[i]]) next = i;
    if (next < 0) return r;
    pos = next;
    r.tau++;
  }
}
