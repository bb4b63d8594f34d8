/* The one sort: stable insertion sort, for the short arrays sorted here (a
 * node's k experts, a tree's nodes, a pruning's candidates), where it beats
 * qsort and keeps equal elements in order. Static inline, so `before`
 * inlines at each call. */
#ifndef AMOE_SORT_H
#define AMOE_SORT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Sorts n elements of `size` (<= 64) bytes at base so that no element comes
 * after one it is `before` (before(a, b, ctx) != 0: a goes first); elements
 * move left only past ones they are strictly before. */
static inline void amoe_sort(void *base, int n, size_t size, int (*before)(const void *a, const void *b, const void *ctx),
                             const void *ctx) {
  char *p = (char *)base, tmp[64];
  for (int i = 1; i < n; i++) {
    memcpy(tmp, p + (size_t)i * size, size);
    int j = i;
    for (; j > 0 && before(tmp, p + (size_t)(j - 1) * size, ctx); j--)
      memcpy(p + (size_t)j * size, p + (size_t)(j - 1) * size, size);
    memcpy(p + (size_t)j * size, tmp, size);
  }
}

/* A double's order key as a signed 64-bit integer: compares as the values
 * do (no NaN). Branch-free, so loops over it vectorise. */
static inline int64_t amoe_order_key64(double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  return (int64_t)(u ^ ((0 - (u >> 63)) & 0x7fffffffffffffffULL)); /* negative: flip all but the sign */
}

#endif
