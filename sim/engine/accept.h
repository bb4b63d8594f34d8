/* The acceptance model (docs/design.md §7): which verified tokens commit when
 * the verifier displaced some of their experts. Natural routing reproduces
 * the trace's accepted path; a displaced node's output flips with a
 * probability that grows with its perturbation and shrinks with the draft's
 * confidence. Coins are keyed by (seed, block, node): every policy row sees
 * the same ones. */
#ifndef AMOE_ACCEPT_H
#define AMOE_ACCEPT_H

#include "block.h"
#include "spec.h"

/* §7: a node's output flips with probability 2Φ(−m / (κ s)), s = √(Σ_l ρ_l²)
 * its displaced weight shares in quadrature, m its margin. κ is calibrated
 * by scripts/calibrate-kappa.sh (docs/validation.md); margin_min is the
 * floor of a margin taken from the draft's confidence, in nats. */
#define AMOE_DEFAULT_KAPPA 0.14
#define AMOE_DEFAULT_MARGIN_MIN 0.25

/* The probability that a node's output flips, given κ, the margin floor,
 * the draft's confidence c in the node's natural child (0: none) and the
 * perturbation s = √(Σ_l ρ_l²): 2Φ(−m / (κ s)), m = max(ln(c/(1−c)),
 * margin_min). */
double amoe_flip_prob(double kappa, double margin_min, double c, double s);

/* Whether node t's output flips under perturbation s_t (its coin). */
int amoe_accept_flips(const amoe_spec *s, const amoe_block *b, int t, double s_t);

/* The walk of one verification pass over nodes[0..nn) (ascending, root
 * first), perturbation_sq[i] = Σ_l ρ² (s_t²) of nodes[i]: along the natural accepted path
 * inside the verified set until a node flips (then one verified sibling of
 * the natural child may still commit) or the path leaves the set. */
typedef struct {
  int tau;        /* committed tokens */
  int deviated;   /* 1: a flip ended the walk */
  double perturbation_sum; /* Σ s_t over the nodes walked */
} amoe_accept_result;
amoe_accept_result amoe_accept_walk(const amoe_spec *s, const amoe_block *b, const int *nodes, int nn,
                                    const float *perturbation_sq);

#endif
