/* Growing an array by doubling: the one helper for every buffer that grows
 * while a file or a workload is read. */
#ifndef AMOE_GROW_H
#define AMOE_GROW_H

#include <stdlib.h>

/* Returns p grown to hold at least `need` elements of `size` bytes (its
 * capacity *cap doubled, from `first`), possibly moved; or NULL when out of
 * memory, leaving p and *cap as they were. */
static inline void *amoe_grow(void *p, size_t *cap, size_t need, size_t size, size_t first) {
  if (need <= *cap) return p;
  size_t nc = *cap ? *cap : first;
  while (nc < need) nc *= 2;
  void *q = realloc(p, nc * size);
  if (q) *cap = nc;
  return q;
}

#endif
