/* Expert cache: LRU and LFU on hand-worked sequences; Belady never misses
 * more than LRU or LFU and matches a brute-force optimum on small cases. */
#include <string.h>

#include "cache.h"
#include "check.h"
#include "rng.h"

/* Runs blocks (each an ascending list of experts at layer 0); returns misses. */
static int run(amoe_cache *c, int nblocks, int per, const int *seq) {
  int miss = 0;
  for (int b = 0; b < nblocks; b++) {
    for (int j = 0; j < per; j++) miss += !amoe_cache_request(c, 0, seq[b * per + j], j);
    amoe_cache_end_block(c);
  }
  return miss;
}

/* Optimal misses by exhaustive search over eviction choices (tiny cases). */
static int best(const int *req, int n, int i, unsigned res, int slots) {
  if (i == n) return 0;
  unsigned bit = 1u << req[i];
  if (res & bit) return best(req, n, i + 1, res, slots);
  if (__builtin_popcount(res) < slots) return 1 + best(req, n, i + 1, res | bit, slots);
  int b = 1 << 30;
  for (int e = 0; e < 16; e++)
    if (res & (1u << e)) {
      int v = 1 + best(req, n, i + 1, (res & ~(1u << e)) | bit, slots);
      if (v < b) b = v;
    }
  return b;
}

int main(void) {
  /* LRU, 2 slots: 0 1 | 2 | 0 -> 0,1 miss; 2 evicts 0 (LRU); 0 evicts 1 */
  int s1[] = {0, 1, 2, 0};
  amoe_cache *c = amoe_cache_new(1, 8, 2, AMOE_CACHE_LRU, NULL);
  CHECK(run(c, 1, 2, s1) == 2, "cold misses");
  CHECK(!amoe_cache_request(c, 0, 2, 0), "2 misses");
  CHECK(!amoe_cache_resident(c, 0)[0] && amoe_cache_resident(c, 0)[1], "LRU evicted 0, kept 1");
  CHECK(!amoe_cache_request(c, 0, 0, 0), "0 misses again");
  CHECK(!amoe_cache_resident(c, 0)[1] && amoe_cache_resident(c, 0)[2], "then 1 goes");
  amoe_cache_free(c);
  /* LFU: 0 requested 3 times, 1 once; a new expert evicts 1 */
  c = amoe_cache_new(1, 8, 2, AMOE_CACHE_LFU, NULL);
  amoe_cache_request(c, 0, 0, 0);
  amoe_cache_request(c, 0, 1, 1);
  amoe_cache_request(c, 0, 0, 0);
  amoe_cache_request(c, 0, 0, 0);
  amoe_cache_request(c, 0, 3, 0);
  CHECK(amoe_cache_resident(c, 0)[0] && !amoe_cache_resident(c, 0)[1], "LFU keeps the frequent one");
  amoe_cache_free(c);
  /* Random sequences: Belady <= LRU, LFU; equals the exhaustive optimum. */
  amoe_rng r;
  amoe_rng_seed(&r, 1, 2, 3);
  for (int trial = 0; trial < 200; trial++) {
    int nb = 6, per = 2, req[12];
    for (int b = 0; b < nb; b++) {
      int a = (int)(amoe_rng_next(&r) % 6), d = (int)(amoe_rng_next(&r) % 6);
      if (a == d) d = (d + 1) % 6;
      req[b * per] = a < d ? a : d;
      req[b * per + 1] = a < d ? d : a;
    }
    amoe_reqlog *g = amoe_reqlog_new(1, 8);
    for (int b = 0; b < nb; b++) {
      for (int j = 0; j < per; j++) amoe_reqlog_add(g, 0, req[b * per + j]);
      amoe_reqlog_end_block(g);
    }
    amoe_reqlog_finalize(g);
    int slots = 2 + trial % 2;
    amoe_cache *lru = amoe_cache_new(1, 8, slots, AMOE_CACHE_LRU, NULL);
    amoe_cache *lfu = amoe_cache_new(1, 8, slots, AMOE_CACHE_LFU, NULL);
    amoe_cache *bel = amoe_cache_new(1, 8, slots, AMOE_CACHE_BELADY, g);
    int ml = run(lru, nb, per, req), mf = run(lfu, nb, per, req), mb = run(bel, nb, per, req);
    int opt = best(req, nb * per, 0, 0, slots);
    CHECK(mb <= ml && mb <= mf, "trial %d: belady %d > lru %d / lfu %d", trial, mb, ml, mf);
    CHECK(mb == opt, "trial %d: belady %d, optimum %d", trial, mb, opt);
    amoe_cache_free(lru);
    amoe_cache_free(lfu);
    amoe_cache_free(bel);
    amoe_reqlog_free(g);
  }
  CHECK(amoe_cache_new(1, 8, 2, AMOE_CACHE_BELADY, NULL) == NULL, "belady needs a future");
  return check_done();
}
