/* Constrained routing (docs/design.md §1, §6): each verified node's natural
 * top-k entries that lie in the eligible set S stay; each one outside S is
 * replaced by the node's next-best expert inside S (its stored entries past
 * the top-k in logit order, then, the rest being -inf, the lowest ids of S
 * it does not store). */
#ifndef AMOE_ROUTE_H
#define AMOE_ROUTE_H

#include <stdint.h>
#include <string.h>

#include "block.h"
#include "route_scan.h"

/* Node t's top-k under S: the natural entries inside S in order, then
 * their replacements. Returns the count (<= k; < k only when S holds fewer
 * than k experts). out has room for k. */
int amoe_route_constrained(const amoe_block *b, int l, int t, int k, const uint8_t *S, uint16_t *out);

/* Natural routing (S = every expert) of nodes[0..nn) at layer l: their
 * top-k entries marked in U (zeroed by the caller), or, with U NULL,
 * counted in cnt. The plain loop is the _generic twin; the other
 * specialises k = 8 (tested against it). */
void amoe_route_natural(const amoe_block *b, int l, int k, const int *nodes, int nn, uint8_t *U, int *cnt);
void amoe_route_natural_generic(const amoe_block *b, int l, int k, const int *nodes, int nn, uint8_t *U, int *cnt);
/* The counts of amoe_route_natural split in two, a + c (at k = 8 every
 * other node into c: a node's increments need not wait on the node
 * before's, which often routes to the same experts); the caller sums them. */
void amoe_route_natural_counts2(const amoe_block *b, int l, int k, const int *nodes, int nn, int *a, int *c);
/* The natural union grown by node t at layer l: its top-k entries marked in
 * U; returns how many were not there yet. (Union sizes for inspect and the
 * commitment table's union-vs-n curve.) */
int amoe_route_union_add(const amoe_block *b, int l, int k, int t, uint8_t *U);

/* Routes nodes[0..nn) of layer l under S. Returns the number of displaced
 * entries. Picks a vector version where there is one (top-8, at most 256
 * experts, AVX2). */
int amoe_route_layer(const amoe_block *b, int l, int k, const int *nodes, int nn, const uint8_t *S,
                     const amoe_route_sums *o);
/* The same in portable C: the reference the vector version is tested
 * against. */
int amoe_route_layer_generic(const amoe_block *b, int l, int k, const int *nodes, int nn, const uint8_t *S,
                              const amoe_route_sums *o);

/* d plus the router probability pi[j] of each natural top-k entry id[j]
 * outside S, added in entry order: the mass constrained routing displaces
 * from a node (needed only for the nodes on the accepted path, §7). */
static inline float amoe_route_displaced(float d, const uint16_t *id, const float *pi, int k, const uint8_t *S) {
  for (int j = 0; j < k; j++) { /* adds exactly +0 for a kept entry (a bit mask, not a branch) */
    uint32_t u;
    memcpy(&u, &pi[j], 4);
    u &= (uint32_t)S[id[j]] - 1u; /* S[e] is 0 or 1 */
    float v;
    memcpy(&v, &u, 4);
    d += v;
  }
  return d;
}

#endif
