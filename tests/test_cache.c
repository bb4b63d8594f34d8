/* Expert cache (docs/design.md §8): hand-worked passes (hits first, misses once,
 * pinned experts, waves, the naive ascending engine, bypass, reset, LRU,
 * LFU, LFRU); Belady never misses more than LRU or LFU and matches a
 * brute-force optimum on small cases. */
#include <string.h>

#include "cache.h"
#include "check.h"
#include "rng.h"

static amoe_cache *mk(int slots, int policy, int order, int overflow, const amoe_reqlog *g) {
  amoe_cache_cfg cfg = {policy, order, overflow};
  return amoe_cache_new(1, 8, slots, cfg, g);
}

/* One pass at layer 0 over the listed experts (-1 ends the list). */
static amoe_cache_pass_stats pass(amoe_cache *c, const int *ids) {
  uint8_t X[8] = {0}, F[8];
  for (; *ids >= 0; ids++) X[*ids] = 1;
  amoe_cache_pass_stats st;
  amoe_cache_pass(c, 0, X, F, &st);
  amoe_cache_end_pass(c);
  return st;
}

/* Resident set of layer 0 as a bit mask. */
static unsigned resident(const amoe_cache *c) {
  unsigned m = 0;
  for (int x = 0; x < 8; x++) m |= (unsigned)amoe_cache_resident(c, 0)[x] << x;
  return m;
}

/* Runs passes of `per` experts each; returns misses. */
static int run(amoe_cache *c, int npass, int per, const int *seq) {
  int miss = 0;
  for (int b = 0; b < npass; b++) {
    int ids[9];
    for (int j = 0; j < per; j++) ids[j] = seq[b * per + j];
    ids[per] = -1;
    miss += pass(c, ids).fetched;
  }
  return miss;
}

/* Optimal misses by exhaustive search (tiny cases): passes of `per`
 * experts (per <= slots), each needing its whole set resident at once; the
 * victims for a pass's misses are any residents outside the pass. */
static int best(const int *req, int npass, int per, int i, unsigned res, int slots) {
  if (i == npass) return 0;
  unsigned X = 0;
  for (int j = 0; j < per; j++) X |= 1u << req[i * per + j];
  const unsigned miss = X & ~res, out = res & ~X;
  const int over = __builtin_popcount(res) + __builtin_popcount(miss) - slots;
  int b = 1 << 30;
  for (unsigned v = out;; v = (v - 1) & out) { /* every subset of the outside residents */
    if (__builtin_popcount(v) == (over > 0 ? over : 0)) {
      int c = __builtin_popcount(miss) + best(req, npass, per, i + 1, (res & ~v) | X, slots);
      if (c < b) b = c;
    }
    if (!v) break;
  }
  return b;
}

static void hand_worked(void) {
  const int HF = AMOE_ORDER_HITS_FIRST, ASC = AMOE_ORDER_ASCENDING, EV = AMOE_OVERFLOW_EVICT;
  /* LRU, 2 slots: {0,1} | {2} | {0}: 0 and 1 miss; 2 evicts 0; 0 evicts 1 */
  amoe_cache *c = mk(2, AMOE_CACHE_LRU, HF, EV, NULL);
  CHECK(pass(c, (int[]){0, 1, -1}).fetched == 2, "cold misses");
  CHECK(pass(c, (int[]){2, -1}).fetched == 1 && resident(c) == 0x6, "LRU evicted 0, kept 1");
  CHECK(pass(c, (int[]){0, -1}).fetched == 1 && resident(c) == 0x5, "then 1 goes");
  amoe_cache_free(c);
  /* LFU: 0 requested 3 times, 1 once; a new expert evicts 1 */
  c = mk(2, AMOE_CACHE_LFU, HF, EV, NULL);
  run(c, 4, 1, (int[]){0, 1, 0, 0});
  pass(c, (int[]){3, -1});
  CHECK(resident(c) == 0x9, "LFU keeps the frequent one: %#x", resident(c));
  amoe_cache_free(c);
  /* LFRU vs LRU, 2 slots: {0} {0} {0} {1} then {2}. At 2's request (clock 5)
   * 0 scores 3/(5-3+1) = 1, 1 scores 1/(5-4+1) = 0.5: LFRU evicts 1, LRU 0. */
  for (int pol = 0; pol < 2; pol++) {
    c = mk(2, pol ? AMOE_CACHE_LFRU : AMOE_CACHE_LRU, HF, EV, NULL);
    run(c, 5, 1, (int[]){0, 0, 0, 1, 2});
    CHECK(resident(c) == (pol ? 0x5u : 0x6u), "%s kept %#x", pol ? "lfru" : "lru", resident(c));
    amoe_cache_free(c);
  }
  /* A pass with more executed experts than slots (3 slots, {1,2,3}
   * resident, X = {0,1,2,3}). Hits first: 1, 2, 3 are served (wave 1);
   * 0 misses once and evicts a computed expert, the least recent (1): hits
   * 3, fetched 1, 2 waves. */
  c = mk(3, AMOE_CACHE_LRU, HF, EV, NULL);
  pass(c, (int[]){1, 2, 3, -1});
  amoe_cache_pass_stats st = pass(c, (int[]){0, 1, 2, 3, -1});
  CHECK(st.hits == 3 && st.fetched == 1 && st.waves == 2 && resident(c) == 0xd,
        "hits first: hits %d fetched %d waves %d resident %#x", st.hits, st.fetched, st.waves, resident(c));
  amoe_cache_free(c);
  /* The naive engine on the same pass: ascending ids, 0 evicts 1 before 1
   * is served, and so on: 0 hits, 4 fetched (the thrash of §8). */
  c = mk(3, AMOE_CACHE_LRU, ASC, EV, NULL);
  pass(c, (int[]){1, 2, 3, -1});
  st = pass(c, (int[]){0, 1, 2, 3, -1});
  CHECK(st.hits == 0 && st.fetched == 4 && st.waves == 2, "ascending: hits %d fetched %d", st.hits, st.fetched);
  amoe_cache_free(c);
  /* Bypass: 0 finds only needed residents and streams through staging. */
  c = mk(3, AMOE_CACHE_LRU, HF, AMOE_OVERFLOW_BYPASS, NULL);
  pass(c, (int[]){1, 2, 3, -1});
  st = pass(c, (int[]){0, 1, 2, 3, -1});
  CHECK(st.hits == 3 && st.fetched == 1 && st.waves == 1 && resident(c) == 0xe, "bypass: hits %d waves %d res %#x",
        st.hits, st.waves, resident(c));
  amoe_cache_free(c);
  /* Pinned: LFU, {1,2,3} used twice, X = {0,1,2,3,4}. 0 (position 3,
   * wave 2) evicts 1 (least recent of the equally used); 4 may not evict 0,
   * though 0 is the least used: it is not computed yet. */
  c = mk(3, AMOE_CACHE_LFU, HF, EV, NULL);
  pass(c, (int[]){1, 2, 3, -1});
  pass(c, (int[]){1, 2, 3, -1});
  st = pass(c, (int[]){0, 1, 2, 3, 4, -1});
  CHECK(st.hits == 3 && st.fetched == 2 && st.waves == 2 && resident(c) == 0x19, "pinned: res %#x", resident(c));
  amoe_cache_free(c);
  /* Each miss is fetched once, whatever the overflow: 8 experts, 2 slots */
  c = mk(2, AMOE_CACHE_LRU, HF, EV, NULL);
  st = pass(c, (int[]){0, 1, 2, 3, 4, 5, 6, 7, -1});
  CHECK(st.hits == 0 && st.fetched == 8 && st.waves == 4, "8 over 2 slots: fetched %d waves %d", st.fetched, st.waves);
  /* reset: request empties the cache */
  amoe_cache_reset(c);
  CHECK(resident(c) == 0 && pass(c, (int[]){6, 7, -1}).fetched == 2, "reset empties");
  amoe_cache_free(c);
}

/* Where each executed expert is computed from (amoe_cache_pass_placed),
 * checked against a model of the pool the test keeps itself: wave by wave,
 * the fetched experts are written into their slots, and then every expert
 * of the wave must find its own weights in its slot; slots of a wave are
 * distinct, waves are 0..waves-1, and hits, fetches and the plain call's
 * figures agree. Random passes over every policy, hits first, both
 * overflows; the naive order gives no placement. */
static void placement(void) {
  amoe_rng r;
  amoe_rng_seed(&r, 41, 4, 1);
  int bad = 0, checked = 0;
  for (int trial = 0; trial < 240; trial++) {
    const int E = 4 + trial % 29, slots = 1 + trial % 7, L = 2;
    const int policy = trial % 3 == 0 ? AMOE_CACHE_LRU : trial % 3 == 1 ? AMOE_CACHE_LFU : AMOE_CACHE_LFRU;
    const int overflow = trial % 4 == 3 ? AMOE_OVERFLOW_BYPASS : AMOE_OVERFLOW_EVICT;
    const int naive = trial % 11 == 5;
    amoe_cache_cfg cfg = {policy, naive ? AMOE_ORDER_ASCENDING : AMOE_ORDER_HITS_FIRST, overflow};
    amoe_cache *c = amoe_cache_new(L, E, slots, cfg, NULL), *twin = amoe_cache_new(L, E, slots, cfg, NULL);
    int owner[2][8];
    for (int l = 0; l < L; l++)
      for (int q = 0; q < 8; q++) owner[l][q] = -1;
    for (int pass = 0; pass < 40; pass++) {
      for (int l = 0; l < L; l++) {
        uint8_t X[40] = {0}, F[40], F2[40], res0[40];
        int16_t slot[40];
        uint16_t wave[40];
        const double pr = 0.1 + 0.5 * amoe_rng_unif(&r);
        for (int x = 0; x < E; x++) X[x] = amoe_rng_unif(&r) < pr;
        memcpy(res0, amoe_cache_resident(c, l), (size_t)E);
        amoe_cache_pass_stats st, st2;
        amoe_cache_pass_placed(c, l, X, F, &st, slot, wave);
        amoe_cache_pass(twin, l, X, F2, &st2); /* the plain call: the same decisions */
        bad += memcmp(F, F2, (size_t)E) != 0 || st.hits != st2.hits || st.fetched != st2.fetched ||
               st.waves != st2.waves;
        int maxw = -1;
        for (int x = 0; x < E; x++) {
          if (!X[x]) continue;
          bad += !naive && F[x] == res0[x]; /* fetched exactly the non-residents (naive may evict and refetch) */
          if (naive) {
            bad += slot[x] != -1;
            continue;
          }
          bad += slot[x] < -1 || slot[x] >= slots || (slot[x] < 0 && overflow != AMOE_OVERFLOW_BYPASS);
          if (wave[x] > maxw) maxw = wave[x];
        }
        if (!naive && st.waves > 0) bad += maxw != st.waves - 1;
        for (int w = 0; !naive && w <= maxw; w++) {
          int used[8] = {0};
          for (int x = 0; x < E; x++) /* this wave's fetches land first */
            if (X[x] && wave[x] == w && F[x] && slot[x] >= 0) owner[l][slot[x]] = x;
          for (int x = 0; x < E; x++) {
            if (!X[x] || wave[x] != w || slot[x] < 0) continue;
            bad += owner[l][slot[x]] != x || used[slot[x]]++;
            checked++;
          }
        }
      }
      amoe_cache_end_pass(c);
      amoe_cache_end_pass(twin);
    }
    amoe_cache_free(c);
    amoe_cache_free(twin);
  }
  CHECK(bad == 0 && checked > 10000, "placement: %d violations in %d placed experts", bad, checked);
}

/* The fewest fetches on a flat request stream by exhaustive search: on a
 * miss, stream it past the cache, take a free slot, or replace any
 * resident (every choice is tried). */
static int best_flat(const int *req, int n, int i, unsigned res, int slots) {
  if (i == n) return 0;
  const unsigned x = 1u << req[i];
  if (res & x) return best_flat(req, n, i + 1, res, slots);
  int b = 1 + best_flat(req, n, i + 1, res, slots); /* bypass */
  if (__builtin_popcount(res) < slots) {
    const int c = 1 + best_flat(req, n, i + 1, res | x, slots);
    if (c < b) b = c;
  } else
    for (unsigned v = res; v; v &= v - 1) {
      const int c = 1 + best_flat(req, n, i + 1, (res & ~(v & -v)) | x, slots);
      if (c < b) b = c;
    }
  return b;
}

/* min against the exhaustive optimum of its stream (passes of random
 * subsets, each requested in ascending id), and never above belady's or
 * LRU's fetches; a hand-worked stream where it bypasses. */
static void min_policy(void) {
  amoe_cache *h = NULL;
  { /* slots 1: 0 | 1 | 0 — keeping 0 and streaming 1 costs 2 fetches, LRU 3 */
    amoe_reqlog *g = amoe_reqlog_new(1, 8);
    const int st[3] = {0, 1, 0};
    for (int i = 0; i < 3; i++) amoe_reqlog_add(g, 0, st[i]), amoe_reqlog_end_pass(g);
    amoe_reqlog_finalize(g);
    h = mk(1, AMOE_CACHE_MIN, AMOE_ORDER_HITS_FIRST, AMOE_OVERFLOW_EVICT, g);
    int f = pass(h, (int[]){0, -1}).fetched;
    f += pass(h, (int[]){1, -1}).fetched;
    CHECK(resident(h) == 0x1, "min streamed 1 past the slot that keeps 0: %#x", resident(h));
    f += pass(h, (int[]){0, -1}).fetched;
    CHECK(f == 2, "min: %d fetches on 0 1 0 with one slot", f);
    amoe_cache_free(h);
    amoe_reqlog_free(g);
  }
  amoe_rng r;
  amoe_rng_seed(&r, 4, 5, 6);
  int beat = 0;
  for (int trial = 0; trial < 300; trial++) {
    int np = 5 + trial % 4, flat[64], n = 0, per[16];
    uint8_t X[16][8];
    amoe_reqlog *g = amoe_reqlog_new(1, 8);
    for (int b = 0; b < np; b++) {
      per[b] = 0;
      for (int x = 0; x < 8; x++) {
        X[b][x] = x < 5 && amoe_rng_next(&r) % 3 == 0;
        if (X[b][x]) flat[n++] = x, per[b]++, amoe_reqlog_add(g, 0, x);
      }
      amoe_reqlog_end_pass(g);
    }
    amoe_reqlog_finalize(g);
    const int slots = 1 + trial % 3;
    amoe_cache *mn = mk(slots, AMOE_CACHE_MIN, AMOE_ORDER_HITS_FIRST, AMOE_OVERFLOW_EVICT, g);
    amoe_cache *lru = mk(slots, AMOE_CACHE_LRU, AMOE_ORDER_HITS_FIRST, AMOE_OVERFLOW_BYPASS, NULL);
    int fm = 0, fl = 0;
    for (int b = 0; b < np; b++) {
      uint8_t F[8];
      amoe_cache_pass_stats st;
      amoe_cache_pass(mn, 0, X[b], F, &st);
      amoe_cache_end_pass(mn);
      int nf = 0;
      for (int x = 0; x < 8; x++) nf += F[x];
      CHECK(nf == st.fetched && st.hits + st.fetched == per[b] && st.waves == (per[b] > 0), "min pass counts");
      fm += st.fetched;
      amoe_cache_pass(lru, 0, X[b], F, &st);
      amoe_cache_end_pass(lru);
      fl += st.fetched;
    }
    const int opt = best_flat(flat, n, 0, 0, slots);
    CHECK(fm == opt, "trial %d: min %d fetches, optimum %d", trial, fm, opt);
    CHECK(fm <= fl, "trial %d: min %d > lru %d", trial, fm, fl);
    beat += fm < fl;
    amoe_cache_free(mn);
    amoe_cache_free(lru);
    amoe_reqlog_free(g);
  }
  CHECK(beat > 50, "min beats lru on %d of 300 streams", beat);
  CHECK(mk(2, AMOE_CACHE_MIN, 0, 0, NULL) == NULL, "min needs a future");
}

int main(void) {
  hand_worked();
  min_policy();
  placement();
  /* Random sequences: Belady <= LRU, LFU; equals the exhaustive optimum. */
  amoe_rng r;
  amoe_rng_seed(&r, 1, 2, 3);
  for (int trial = 0; trial < 200; trial++) {
    int nb = 8, per = 2, req[16];
    for (int b = 0; b < nb; b++) {
      int a = (int)(amoe_rng_next(&r) % 6), d = (int)(amoe_rng_next(&r) % 6);
      if (a == d) d = (d + 1) % 6;
      req[b * per] = a < d ? a : d;
      req[b * per + 1] = a < d ? d : a;
    }
    amoe_reqlog *g = amoe_reqlog_new(1, 8);
    for (int b = 0; b < nb; b++) {
      for (int j = 0; j < per; j++) amoe_reqlog_add(g, 0, req[b * per + j]);
      amoe_reqlog_end_pass(g);
    }
    amoe_reqlog_finalize(g);
    int slots = 2 + trial % 2;
    amoe_cache *lru = mk(slots, AMOE_CACHE_LRU, AMOE_ORDER_HITS_FIRST, AMOE_OVERFLOW_EVICT, NULL);
    amoe_cache *lfu = mk(slots, AMOE_CACHE_LFU, AMOE_ORDER_HITS_FIRST, AMOE_OVERFLOW_EVICT, NULL);
    amoe_cache *bel = mk(slots, AMOE_CACHE_BELADY, AMOE_ORDER_HITS_FIRST, AMOE_OVERFLOW_EVICT, g);
    int ml = run(lru, nb, per, req), mf = run(lfu, nb, per, req), mb = run(bel, nb, per, req);
    int opt = best(req, nb, per, 0, 0, slots);
    CHECK(mb <= ml && mb <= mf, "trial %d: belady %d > lru %d / lfu %d", trial, mb, ml, mf);
    CHECK(mb == opt, "trial %d: belady %d, optimum %d", trial, mb, opt);
    amoe_cache_free(lru);
    amoe_cache_free(lfu);
    amoe_cache_free(bel);
    amoe_reqlog_free(g);
  }
  CHECK(mk(2, AMOE_CACHE_BELADY, 0, 0, NULL) == NULL, "belady needs a future");
  return check_done();
}
