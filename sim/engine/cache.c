#include "cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct amoe_reqlog {
  int layers, experts;
  uint32_t passes;
  /* per layer: (pass, expert) pairs in request order */
  uint32_t **pass_of;
  uint16_t **seq;
  uint32_t *len, *cap;
  /* after finalize: per (layer, expert) the passes that request it, ascending */
  uint32_t **occ;
  uint32_t **occ_pos; /* the same requests' positions in their layer's stream (min) */
  uint32_t *occn;
};

amoe_reqlog *amoe_reqlog_new(int layers, int experts) {
  amoe_reqlog *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->layers = layers;
  g->experts = experts;
  g->seq = calloc((size_t)layers, sizeof *g->seq);
  g->pass_of = calloc((size_t)layers, sizeof *g->pass_of);
  g->len = calloc((size_t)layers, sizeof *g->len);
  g->cap = calloc((size_t)layers, sizeof *g->cap);
  if (!g->seq || !g->pass_of || !g->len || !g->cap) {
    amoe_reqlog_free(g);
    return NULL;
  }
  return g;
}

void amoe_reqlog_free(amoe_reqlog *g) {
  if (!g) return;
  for (int l = 0; l < g->layers; l++) {
    if (g->seq) free(g->seq[l]);
    if (g->pass_of) free(g->pass_of[l]);
  }
  if (g->occ)
    for (int i = 0; i < g->layers * g->experts; i++) free(g->occ[i]);
  if (g->occ_pos)
    for (int i = 0; i < g->layers * g->experts; i++) free(g->occ_pos[i]);
  free(g->occ);
  free(g->occ_pos);
  free(g->occn);
  free(g->seq);
  free(g->pass_of);
  free(g->len);
  free(g->cap);
  free(g);
}

amoe_status amoe_reqlog_add(amoe_reqlog *g, int l, int e) {
  if (g->len[l] == g->cap[l]) {
    uint32_t nc = g->cap[l] ? 2 * g->cap[l] : 4096;
    uint16_t *ns = realloc(g->seq[l], nc * sizeof *ns);
    if (!ns) return AMOE_ENOMEM;
    g->seq[l] = ns;
    uint32_t *np = realloc(g->pass_of[l], nc * sizeof *np);
    if (!np) return AMOE_ENOMEM;
    g->pass_of[l] = np;
    g->cap[l] = nc;
  }
  g->seq[l][g->len[l]] = (uint16_t)e;
  g->pass_of[l][g->len[l]++] = g->passes;
  return AMOE_OK;
}

amoe_status amoe_reqlog_end_pass(amoe_reqlog *g) {
  g->passes++;
  return AMOE_OK;
}

amoe_status amoe_reqlog_finalize(amoe_reqlog *g) {
  size_t ne = (size_t)g->layers * g->experts;
  g->occ = calloc(ne, sizeof *g->occ);
  g->occ_pos = calloc(ne, sizeof *g->occ_pos);
  g->occn = calloc(ne, sizeof *g->occn);
  if (!g->occ || !g->occ_pos || !g->occn) return AMOE_ENOMEM;
  for (int l = 0; l < g->layers; l++)
    for (uint32_t i = 0; i < g->len[l]; i++) g->occn[(size_t)l * g->experts + g->seq[l][i]]++;
  for (size_t i = 0; i < ne; i++) {
    g->occ[i] = malloc((g->occn[i] ? g->occn[i] : 1) * sizeof(uint32_t));
    g->occ_pos[i] = malloc((g->occn[i] ? g->occn[i] : 1) * sizeof(uint32_t));
    if (!g->occ[i] || !g->occ_pos[i]) return AMOE_ENOMEM;
    g->occn[i] = 0;
  }
  for (int l = 0; l < g->layers; l++)
    for (uint32_t i = 0; i < g->len[l]; i++) {
      size_t k = (size_t)l * g->experts + g->seq[l][i];
      g->occ_pos[k][g->occn[k]] = i;
      g->occ[k][g->occn[k]++] = g->pass_of[l][i];
    }
  return AMOE_OK;
}

struct amoe_cache {
  int layers, experts, slots;
  amoe_cache_cfg cfg;
  uint8_t *res;       /* [l][e] */
  uint64_t *last;     /* [l][e] last request time */
  uint64_t *count;    /* [l][e] requests so far */
  int *used;          /* [l] resident count */
  uint16_t *rlist;    /* [l][slots] the resident experts (any order) */
  int *rpos;          /* [l][e] index in rlist, or -1 */
  int16_t *slot_of;   /* [l][e] the slot a resident expert occupies, or -1: slots 0..used-1 are
                       * occupied (filled in order, and one is freed only for the expert
                       * that replaces it) */
  uint64_t clock;
  const amoe_reqlog *future;
  uint32_t pass;      /* Belady cursor */
  uint32_t *spos;     /* [l] min: the position of the next request in the layer's stream */
  uint32_t *ptr;      /* [l][e] index into occ */
  int *order;         /* [E] this pass's request order (scratch) */
  int *at;            /* [E] position of e in it, or -1 (scratch) */
};

amoe_cache *amoe_cache_new(int layers, int experts, int slots, amoe_cache_cfg cfg, const amoe_reqlog *future) {
  if (!amoe_cache_policy_name(cfg.policy) || (amoe_cache_policy_needs_future(cfg.policy) && !future)) return NULL;
  amoe_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  size_t ne = (size_t)layers * experts;
  c->layers = layers;
  c->experts = experts;
  c->slots = slots;
  c->cfg = cfg;
  c->future = future;
  c->res = calloc(ne, 1);
  c->last = calloc(ne, sizeof *c->last);
  c->count = calloc(ne, sizeof *c->count);
  c->used = calloc((size_t)layers, sizeof *c->used);
  c->ptr = calloc(ne, sizeof *c->ptr);
  c->spos = calloc((size_t)layers, sizeof *c->spos);
  c->rlist = calloc((size_t)layers * (slots > 0 ? slots : 1), sizeof *c->rlist);
  c->rpos = malloc(ne * sizeof *c->rpos);
  c->slot_of = malloc(ne * sizeof *c->slot_of);
  c->order = malloc((size_t)experts * sizeof *c->order);
  c->at = malloc((size_t)experts * sizeof *c->at);
  if (!c->res || !c->last || !c->count || !c->used || !c->ptr || !c->spos || !c->rlist || !c->rpos || !c->slot_of || !c->order ||
      !c->at) {
    amoe_cache_free(c);
    return NULL;
  }
  for (size_t i = 0; i < ne; i++) c->rpos[i] = c->slot_of[i] = -1;
  for (int x = 0; x < experts; x++) c->at[x] = -1;
  return c;
}

void amoe_cache_free(amoe_cache *c) {
  if (!c) return;
  free(c->res);
  free(c->last);
  free(c->count);
  free(c->used);
  free(c->ptr);
  free(c->spos);
  free(c->rlist);
  free(c->rpos);
  free(c->slot_of);
  free(c->order);
  free(c->at);
  free(c);
}

void amoe_cache_reset(amoe_cache *c) {
  size_t ne = (size_t)c->layers * c->experts;
  memset(c->res, 0, ne);
  memset(c->count, 0, ne * sizeof *c->count);
  memset(c->used, 0, (size_t)c->layers * sizeof *c->used);
  for (size_t i = 0; i < ne; i++) c->rpos[i] = c->slot_of[i] = -1;
}

const uint8_t *amoe_cache_resident(const amoe_cache *c, int l) { return c->res + (size_t)l * c->experts; }

/* The next pass after the current one that requests expert e at layer l. */
static uint64_t next_use(amoe_cache *c, int l, int e) {
  const amoe_reqlog *g = c->future;
  size_t k = (size_t)l * c->experts + e;
  uint32_t p = c->ptr[k];
  while (p < g->occn[k] && g->occ[k][p] <= c->pass) p++;
  c->ptr[k] = p;
  return p < g->occn[k] ? g->occ[k][p] : UINT64_MAX;
}

/* Replacement policies are rows: a candidate victim's key (lower goes
 * first; NULL: every key equal, so the least recently used goes), and what
 * the policy needs. Ties always go to the least recently used. min does not
 * choose among residents this way (min_pass). */
typedef double (*victim_key)(amoe_cache *c, int l, int e);
static double key_lfu(amoe_cache *c, int l, int e) { return (double)c->count[(size_t)l * c->experts + e]; }
static double key_lfru(amoe_cache *c, int l, int e) {
  const size_t k = (size_t)l * c->experts + e;
  return (double)c->count[k] / (double)(c->clock - c->last[k] + 1);
}
static double key_belady(amoe_cache *c, int l, int e) {
  const uint64_t nu = next_use(c, l, e);
  return nu == UINT64_MAX ? -HUGE_VAL : -(double)nu; /* never again: first */
}
const char *const amoe_cache_policy_names[] = {[AMOE_CACHE_LRU] = "lru", [AMOE_CACHE_LFU] = "lfu",
                                               [AMOE_CACHE_BELADY] = "belady", [AMOE_CACHE_LFRU] = "lfru",
                                               [AMOE_CACHE_MIN] = "min", [AMOE_CACHE_MIN + 1] = NULL};
const char *const amoe_cache_order_names[] = {"hits-first", "ascending", NULL};
const char *const amoe_cache_overflow_names[] = {"evict", "bypass", NULL};
const char *const amoe_cache_reset_names[] = {"run", "request", NULL};
static const struct {
  victim_key key;
  int needs_future; /* reads the request log of an earlier run */
} POLICY[] = {
    [AMOE_CACHE_LRU] = {NULL, 0},
    [AMOE_CACHE_LFU] = {key_lfu, 0},
    [AMOE_CACHE_BELADY] = {key_belady, 1},
    [AMOE_CACHE_LFRU] = {key_lfru, 0},
    [AMOE_CACHE_MIN] = {NULL, 1},
};

const char *amoe_cache_policy_name(int policy) {
  return policy >= 0 && policy < (int)(sizeof POLICY / sizeof POLICY[0]) ? amoe_cache_policy_names[policy] : NULL;
}

int amoe_cache_policy_needs_future(int policy) {
  return amoe_cache_policy_name(policy) ? POLICY[policy].needs_future : 0;
}

/* The resident to evict among those at positions before `wave` in this
 * pass's order or outside it (at[e] < 0); -1 when every resident is pinned.
 * Residents outside the pass go first. Keys are unique (timestamps break
 * every tie), so the scan order of the resident list does not matter. */
static int victim(amoe_cache *c, int l, int wave) {
  const size_t base = (size_t)l * c->experts;
  const uint16_t *rl = c->rlist + (size_t)l * c->slots;
  const victim_key keyf = POLICY[c->cfg.policy].key;
  int best = -1, bout = 0;
  double bkey = 0;
  uint64_t blast = 0;
  for (int i = 0; i < c->used[l]; i++) {
    const int e = rl[i], pos = c->at[e];
    if (pos >= wave) continue; /* pinned: not computed yet */
    const int out = pos < 0;
    const uint64_t last = c->last[base + e];
    const double key = keyf ? keyf(c, l, e) : 0; /* lower goes first */
    int better = best < 0 || out > bout || (out == bout && (key < bkey || (key == bkey && last < blast)));
    if (better) {
      best = e;
      bout = out;
      bkey = key;
      blast = last;
    }
  }
  return best;
}

static void touch(amoe_cache *c, int l, int e) {
  const size_t k = (size_t)l * c->experts + e;
  c->clock++;
  c->count[k]++;
  c->last[k] = c->clock;
}

/* Removes v; returns the slot it freed. */
static int evict(amoe_cache *c, int l, int v) {
  uint16_t *rl = c->rlist + (size_t)l * c->slots;
  const size_t kv = (size_t)l * c->experts + v;
  const int at = c->rpos[kv], lastv = rl[c->used[l] - 1], slot = c->slot_of[kv];
  rl[at] = (uint16_t)lastv; /* swap-remove from the resident list */
  c->rpos[(size_t)l * c->experts + lastv] = at;
  c->rpos[kv] = -1;
  c->slot_of[kv] = -1;
  c->res[kv] = 0;
  c->used[l]--;
  return slot;
}

static void insert(amoe_cache *c, int l, int e, int slot) {
  const size_t k = (size_t)l * c->experts + e;
  uint16_t *rl = c->rlist + (size_t)l * c->slots;
  c->res[k] = 1;
  c->slot_of[k] = (int16_t)slot;
  c->rpos[k] = c->used[l];
  rl[c->used[l]++] = (uint16_t)e;
}

/* min: the position after `pos` in layer l's stream where e is requested
 * next (UINT64_MAX: never). */
static uint64_t next_pos(amoe_cache *c, int l, int e, uint32_t pos) {
  const amoe_reqlog *g = c->future;
  size_t k = (size_t)l * c->experts + e;
  uint32_t p = c->ptr[k];
  while (p < g->occn[k] && g->occ_pos[k][p] <= pos) p++;
  c->ptr[k] = p;
  return p < g->occn[k] ? g->occ_pos[k][p] : UINT64_MAX;
}

/* min: the layer's requests one at a time in ascending id (the stream the
 * log recorded); a miss is kept, in the place of the resident used
 * farthest ahead, only if it is used again sooner than that resident; else
 * it streams through a staging slot. One wave. */
static void min_pass(amoe_cache *c, int l, const uint8_t *X, uint8_t *fetched, amoe_cache_pass_stats *st,
                     int16_t *slot, uint16_t *wave) {
  const int E = c->experts;
  const size_t base = (size_t)l * E;
  int hits = 0, nf = 0, n = 0;
  for (int x = 0; x < E; x++) {
    fetched[x] = 0;
    if (!X[x]) continue;
    n++;
    const uint32_t pos = c->spos[l]++;
    touch(c, l, x);
    if (wave) wave[x] = 0;
    if (c->res[base + x]) {
      hits++;
      if (slot) slot[x] = c->slot_of[base + x];
      continue;
    }
    fetched[x] = 1;
    nf++;
    if (slot) slot[x] = -1;
    if (c->used[l] < c->slots) {
      insert(c, l, x, c->used[l]);
      if (slot) slot[x] = c->slot_of[base + x];
      continue;
    }
    const uint64_t mine = next_pos(c, l, x, pos);
    const uint16_t *rl = c->rlist + (size_t)l * c->slots;
    int v = -1;
    uint64_t vfar = 0;
    for (int i = 0; i < c->used[l]; i++) { /* farthest next use; ties: lower id */
      const uint64_t f = next_pos(c, l, rl[i], pos);
      if (v < 0 || f > vfar || (f == vfar && rl[i] < v)) v = rl[i], vfar = f;
    }
    if (v < 0 || mine >= vfar) continue; /* bypass */
    insert(c, l, x, evict(c, l, v));
    if (slot) slot[x] = c->slot_of[base + x];
  }
  st->hits = hits;
  st->fetched = nf;
  st->waves = n > 0;
}

void amoe_cache_pass(amoe_cache *c, int l, const uint8_t *X, uint8_t *fetched, amoe_cache_pass_stats *st) {
  amoe_cache_pass_placed(c, l, X, fetched, st, NULL, NULL);
}

void amoe_cache_pass_placed(amoe_cache *c, int l, const uint8_t *X, uint8_t *fetched, amoe_cache_pass_stats *st,
                            int16_t *slot, uint16_t *wave) {
  if (c->cfg.policy == AMOE_CACHE_MIN) {
    min_pass(c, l, X, fetched, st, slot, wave);
    return;
  }
  const int E = c->experts, naive = c->cfg.order == AMOE_ORDER_ASCENDING;
  const uint8_t *res = c->res + (size_t)l * E;
  int n = 0, hits = 0, nf = 0, bypassed = 0;
  /* the request order: hits, then misses, each ascending (naive: ascending) */
  if (naive) {
    for (int x = 0; x < E; x++)
      if (X[x]) c->order[n++] = x;
  } else {
    for (int x = 0; x < E; x++)
      if (X[x] && res[x]) c->order[n++] = x;
    for (int x = 0; x < E; x++)
      if (X[x] && !res[x]) c->order[n++] = x;
  }
  /* the naive engine pins nothing: every resident is a candidate */
  for (int p = 0; p < n; p++) c->at[c->order[p]] = naive ? -1 : p;
  const int16_t *sl = c->slot_of + (size_t)l * E;
  for (int p = 0; p < n; p++) {
    const int x = c->order[p];
    fetched[x] = 0;
    if (slot) wave[x] = (uint16_t)(c->slots > 0 ? p / c->slots : 0);
    if (res[x]) {
      hits++;
      touch(c, l, x);
      if (slot) slot[x] = sl[x];
      continue;
    }
    fetched[x] = 1;
    nf++;
    touch(c, l, x);
    if (slot) slot[x] = -1; /* until inserted: streamed through a staging buffer */
    if (c->used[l] < c->slots) {
      insert(c, l, x, c->used[l]);
      if (slot) slot[x] = sl[x];
      continue;
    }
    /* a victim from outside the pass or from a computed wave */
    int v = victim(c, l, naive ? n : (p / c->slots) * c->slots);
    if (c->cfg.overflow == AMOE_OVERFLOW_BYPASS && (v < 0 || c->at[v] >= 0)) {
      bypassed = 1; /* staged, not inserted: nothing the pass needs is evicted */
      continue;
    }
    if (v < 0) continue; /* (cannot happen: a wave holds at most `slots` residents) */
    insert(c, l, x, evict(c, l, v));
    if (slot) slot[x] = sl[x];
  }
  for (int p = 0; p < n; p++) c->at[c->order[p]] = -1;
  st->hits = hits;
  st->fetched = nf;
  st->waves = n == 0 ? 0 : bypassed || n <= c->slots ? 1 : (n + c->slots - 1) / c->slots;
  if (slot && (bypassed || naive)) /* one wave; naive pins nothing, so a slot may change before its turn */
    for (int p = 0; p < n; p++) {
      wave[c->order[p]] = 0;
      if (naive) slot[c->order[p]] = -1;
    }
  for (int x = 0; x < E; x++)
    if (!X[x]) fetched[x] = 0;
}

void amoe_cache_end_pass(amoe_cache *c) { c->pass++; }

