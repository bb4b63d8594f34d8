/* Per-layer expert cache for offload mode (docs/design.md §8). A run starts with
 * every cache empty. One call per (forward pass, layer) hands the cache the
 * executed set X; the pass runs it as real offload engines do:
 *   1. hits first: X ∩ resident, touched in ascending id;
 *   2. misses once each, in ascending id, fetched and inserted as most recent;
 *   3. a victim is a resident the pass no longer needs: one outside X, or an
 *      expert of X already computed in an earlier wave; experts of X not yet
 *      computed are pinned. With |X| > slots the layer runs in waves of
 *      `slots` experts (hits, then misses), ⌈|X| / slots⌉ of them.
 * Victims by policy, among the candidates:
 *   lru     least recently used
 *   lfu     fewest requests so far (all requests, resident or not), ties to
 *           least recently used
 *   lfru    lowest requests / (now − last use + 1), ties to least recent
 *   belady  farthest next pass that requests it (offline optimal at pass
 *           granularity; needs an amoe_reqlog recorded by an earlier run),
 *           ties to least recently used.
 *   min     Belady's MIN with bypass over the flat request stream (each
 *           layer's requests one at a time, ascending id within a pass): a
 *           miss is kept, in place of the resident used farthest ahead, only
 *           if its own next use is sooner; else it streams through a staging
 *           slot. The fewest fetches any cache of `slots` can make on that
 *           stream (the optimum cache studies report); the layer runs as
 *           one wave. Needs the log, like belady.
 * Options: order ascending (the naive engine: X requested in ascending id,
 * hits and misses interleaved, any resident a victim, so a miss can evict an
 * expert the same pass needs later), overflow bypass (a miss that finds only
 * pinned or computed residents streams through a staging buffer and is not
 * inserted; the layer then runs as one wave). */
#ifndef AMOE_CACHE_H
#define AMOE_CACHE_H

#include <stdint.h>

#include "err.h"

typedef enum {
  AMOE_CACHE_LRU = 0,
  AMOE_CACHE_LFU = 1,
  AMOE_CACHE_BELADY = 2,
  AMOE_CACHE_LFRU = 3,
  AMOE_CACHE_MIN = 4
} amoe_cache_policy;
typedef enum { AMOE_ORDER_HITS_FIRST = 0, AMOE_ORDER_ASCENDING = 1 } amoe_cache_order;
typedef enum { AMOE_OVERFLOW_EVICT = 0, AMOE_OVERFLOW_BYPASS = 1 } amoe_cache_overflow;
/* The spec's names, by enum value, NULL-terminated: offload.policy,
 * offload.order, offload.overflow, and offload.reset (0 run, 1 request). */
extern const char *const amoe_cache_policy_names[];
extern const char *const amoe_cache_order_names[];
extern const char *const amoe_cache_overflow_names[];
extern const char *const amoe_cache_reset_names[];

/* The spec's name of a replacement policy (NULL: no such row). */
const char *amoe_cache_policy_name(int policy);
/* 1 when the policy reads the request log of an earlier run (belady, min). */
int amoe_cache_policy_needs_future(int policy);

/* A recorded request sequence: per layer, the experts each forward pass
 * requested. Memory grows with the run: only Belady needs it. */
typedef struct amoe_reqlog amoe_reqlog;
amoe_reqlog *amoe_reqlog_new(int layers, int experts);
void amoe_reqlog_free(amoe_reqlog *g);
amoe_status amoe_reqlog_add(amoe_reqlog *g, int layer, int expert);
amoe_status amoe_reqlog_end_pass(amoe_reqlog *g);
amoe_status amoe_reqlog_finalize(amoe_reqlog *g);

typedef struct {
  int policy;   /* amoe_cache_policy */
  int order;    /* amoe_cache_order */
  int overflow; /* amoe_cache_overflow */
} amoe_cache_cfg;

typedef struct amoe_cache amoe_cache;
amoe_cache *amoe_cache_new(int layers, int experts, int slots, amoe_cache_cfg cfg, const amoe_reqlog *future);
void amoe_cache_free(amoe_cache *c);
/* Resident flags of a layer (E bytes, 1 = resident). */
const uint8_t *amoe_cache_resident(const amoe_cache *c, int layer);

typedef struct {
  int hits;    /* executed experts served from the slots */
  int fetched; /* executed experts copied in (each once) */
  int waves;   /* expert-compute waves the layer needs */
} amoe_cache_pass_stats;
/* Runs layer l's part of the current pass over the executed set X (E
 * flags); marks the fetched experts in `fetched` (E flags, written). */
void amoe_cache_pass(amoe_cache *c, int layer, const uint8_t *X, uint8_t *fetched, amoe_cache_pass_stats *st);
/* The same, and where each executed expert x is computed from, for a
 * harness that runs the decisions on real weights: slot[x], the pool slot
 * its weights occupy when its wave computes (-1: streamed through a staging
 * buffer, not cached: overflow bypass, or the naive order, which pins
 * nothing), and wave[x], the wave that computes it (hits first, then
 * misses, `slots` experts a wave; 0 when the layer runs as one wave). Slots
 * 0..resident-1 are occupied; a fetched expert takes the slot its victim
 * freed. slot and wave: E entries, written for the experts of X. */
void amoe_cache_pass_placed(amoe_cache *c, int layer, const uint8_t *X, uint8_t *fetched, amoe_cache_pass_stats *st,
                            int16_t *slot, uint16_t *wave);
/* Marks the end of a forward pass (advances the Belady cursor). */
void amoe_cache_end_pass(amoe_cache *c);
/* Empties every layer (offload.reset: request); use counts restart too. */
void amoe_cache_reset(amoe_cache *c);

#endif
