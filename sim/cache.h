/* Per-layer expert cache for offload mode (DESIGN §8). A run starts with
 * every cache empty. Requests arrive in ascending expert id per (block,
 * layer); a hit makes the expert most recently used, a miss fetches it and,
 * if the layer's slots are full, first evicts by policy:
 *   lru     least recently used
 *   lfu     fewest requests so far (all requests, resident or not), ties to
 *           least recently used
 *   belady  farthest next request in the realised request sequence (offline
 *           optimal; needs an amoe_reqlog recorded by an earlier pass), ties
 *           to least recently used. */
#ifndef AMOE_CACHE_H
#define AMOE_CACHE_H

#include <stdint.h>

#include "err.h"

typedef enum { AMOE_CACHE_LRU = 0, AMOE_CACHE_LFU = 1, AMOE_CACHE_BELADY = 2 } amoe_cache_policy;

/* A recorded request sequence: per layer, the expert ids in request order,
 * cut into blocks. Memory grows with the run: only Belady needs it. */
typedef struct amoe_reqlog amoe_reqlog;
amoe_reqlog *amoe_reqlog_new(int layers, int experts);
void amoe_reqlog_free(amoe_reqlog *g);
amoe_status amoe_reqlog_add(amoe_reqlog *g, int layer, int expert);
amoe_status amoe_reqlog_end_block(amoe_reqlog *g);
amoe_status amoe_reqlog_finalize(amoe_reqlog *g);

typedef struct amoe_cache amoe_cache;
amoe_cache *amoe_cache_new(int layers, int experts, int slots, amoe_cache_policy policy,
                           const amoe_reqlog *future);
void amoe_cache_free(amoe_cache *c);
/* Resident flags of a layer (E bytes, 1 = resident). */
const uint8_t *amoe_cache_resident(const amoe_cache *c, int layer);
/* Requests an expert as the j-th request of the current block at a layer.
 * Returns 1 on a hit, 0 on a miss (fetched). */
int amoe_cache_request(amoe_cache *c, int layer, int expert, int j);
/* Marks the end of a block (advances the Belady cursor). */
void amoe_cache_end_block(amoe_cache *c);
int amoe_cache_policy_parse(const char *name);
const char *amoe_cache_policy_name(int policy);

#endif
