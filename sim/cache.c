#include "cache.h"

#include <stdlib.h>
#include <string.h>

struct amoe_reqlog {
  int layers, experts;
  uint32_t blocks;
  /* per layer: sequence of expert ids; block_start[l][b] */
  uint16_t **seq;
  uint32_t *len, *cap;
  uint32_t **bstart;
  uint32_t bcap;
  /* after finalize: per (layer, expert) sorted positions */
  uint32_t **occ;   /* [l*E+e] -> positions */
  uint32_t *occn;
};

amoe_reqlog *amoe_reqlog_new(int layers, int experts) {
  amoe_reqlog *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->layers = layers;
  g->experts = experts;
  g->seq = calloc((size_t)layers, sizeof *g->seq);
  g->len = calloc((size_t)layers, sizeof *g->len);
  g->cap = calloc((size_t)layers, sizeof *g->cap);
  g->bstart = calloc((size_t)layers, sizeof *g->bstart);
  if (!g->seq || !g->len || !g->cap || !g->bstart) {
    amoe_reqlog_free(g);
    return NULL;
  }
  return g;
}

void amoe_reqlog_free(amoe_reqlog *g) {
  if (!g) return;
  for (int l = 0; l < g->layers; l++) {
    if (g->seq) free(g->seq[l]);
    if (g->bstart) free(g->bstart[l]);
  }
  if (g->occ)
    for (int i = 0; i < g->layers * g->experts; i++) free(g->occ[i]);
  free(g->occ);
  free(g->occn);
  free(g->seq);
  free(g->len);
  free(g->cap);
  free(g->bstart);
  free(g);
}

amoe_status amoe_reqlog_add(amoe_reqlog *g, int l, int e) {
  if (g->len[l] == g->cap[l]) {
    uint32_t nc = g->cap[l] ? 2 * g->cap[l] : 4096;
    uint16_t *ns = realloc(g->seq[l], nc * sizeof *ns);
    if (!ns) return AMOE_ENOMEM;
    g->seq[l] = ns;
    g->cap[l] = nc;
  }
  g->seq[l][g->len[l]++] = (uint16_t)e;
  return AMOE_OK;
}

amoe_status amoe_reqlog_end_block(amoe_reqlog *g) {
  if (g->blocks + 1 >= g->bcap) {
    uint32_t nc = g->bcap ? 2 * g->bcap : 1024;
    for (int l = 0; l < g->layers; l++) {
      uint32_t *nb = realloc(g->bstart[l], nc * sizeof *nb);
      if (!nb) return AMOE_ENOMEM;
      if (!g->bcap) nb[0] = 0;
      g->bstart[l] = nb;
    }
    g->bcap = nc;
  }
  g->blocks++;
  for (int l = 0; l < g->layers; l++) g->bstart[l][g->blocks] = g->len[l];
  return AMOE_OK;
}

amoe_status amoe_reqlog_finalize(amoe_reqlog *g) {
  size_t ne = (size_t)g->layers * g->experts;
  g->occ = calloc(ne, sizeof *g->occ);
  g->occn = calloc(ne, sizeof *g->occn);
  if (!g->occ || !g->occn) return AMOE_ENOMEM;
  for (int l = 0; l < g->layers; l++)
    for (uint32_t i = 0; i < g->len[l]; i++) g->occn[(size_t)l * g->experts + g->seq[l][i]]++;
  for (size_t i = 0; i < ne; i++) {
    g->occ[i] = malloc((g->occn[i] ? g->occn[i] : 1) * sizeof(uint32_t));
    if (!g->occ[i]) return AMOE_ENOMEM;
    g->occn[i] = 0;
  }
  for (int l = 0; l < g->layers; l++)
    for (uint32_t i = 0; i < g->len[l]; i++) {
      size_t k = (size_t)l * g->experts + g->seq[l][i];
      g->occ[k][g->occn[k]++] = i;
    }
  return AMOE_OK;
}

struct amoe_cache {
  int layers, experts, slots, policy;
  uint8_t *res;       /* [l][e] */
  uint64_t *last;     /* [l][e] last request time */
  uint64_t *count;    /* [l][e] requests so far */
  int *used;          /* [l] resident count */
  uint16_t *rlist;    /* [l][slots] the resident experts (any order) */
  int *rpos;          /* [l][e] index in rlist, or -1 */
  uint64_t clock;
  const amoe_reqlog *future;
  uint32_t block;     /* Belady cursor */
  uint32_t *ptr;      /* [l][e] index into occ */
};

amoe_cache *amoe_cache_new(int layers, int experts, int slots, amoe_cache_policy policy,
                           const amoe_reqlog *future) {
  if (policy == AMOE_CACHE_BELADY && !future) return NULL;
  amoe_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  size_t ne = (size_t)layers * experts;
  c->layers = layers;
  c->experts = experts;
  c->slots = slots;
  c->policy = policy;
  c->future = future;
  c->res = calloc(ne, 1);
  c->last = calloc(ne, sizeof *c->last);
  c->count = calloc(ne, sizeof *c->count);
  c->used = calloc((size_t)layers, sizeof *c->used);
  c->ptr = calloc(ne, sizeof *c->ptr);
  c->rlist = calloc((size_t)layers * (slots > 0 ? slots : 1), sizeof *c->rlist);
  c->rpos = malloc(ne * sizeof *c->rpos);
  if (c->rpos)
    for (size_t i = 0; i < ne; i++) c->rpos[i] = -1;
  if (!c->res || !c->last || !c->count || !c->used || !c->ptr || !c->rlist || !c->rpos) {
    amoe_cache_free(c);
    return NULL;
  }
  return c;
}

void amoe_cache_free(amoe_cache *c) {
  if (!c) return;
  free(c->res);
  free(c->last);
  free(c->count);
  free(c->used);
  free(c->ptr);
  free(c->rlist);
  free(c->rpos);
  free(c);
}

const uint8_t *amoe_cache_resident(const amoe_cache *c, int l) { return c->res + (size_t)l * c->experts; }

/* Position of expert e's next request at layer l after position `now`. */
static uint64_t next_use(amoe_cache *c, int l, int e, uint32_t now) {
  const amoe_reqlog *g = c->future;
  size_t k = (size_t)l * c->experts + e;
  uint32_t p = c->ptr[k];
  while (p < g->occn[k] && g->occ[k][p] <= now) p++;
  c->ptr[k] = p;
  return p < g->occn[k] ? g->occ[k][p] : UINT64_MAX;
}

/* The resident expert to evict. Keys are unique (timestamps break every tie),
 * so scanning the resident list in any order gives the same victim. */
static int victim(amoe_cache *c, int l, int j) {
  size_t base = (size_t)l * c->experts;
  const uint16_t *rl = c->rlist + (size_t)l * c->slots;
  int best = -1;
  uint64_t bkey = 0, blast = 0;
  uint32_t now = 0;
  if (c->policy == AMOE_CACHE_BELADY) {
    const amoe_reqlog *g = c->future;
    if (c->block < g->blocks) {
      uint32_t s = g->bstart[l][c->block], end = g->bstart[l][c->block + 1];
      now = s + (uint32_t)j < end ? s + (uint32_t)j : (end ? end - 1 : 0);
    } else {
      now = g->len[l];
    }
  }
  for (int i = 0; i < c->used[l]; i++) {
    int e = rl[i];
    uint64_t last = c->last[base + e], key;
    int better;
    if (c->policy == AMOE_CACHE_LRU) {
      better = best < 0 || last < blast;
      key = 0;
    } else if (c->policy == AMOE_CACHE_LFU) {
      key = c->count[base + e];
      better = best < 0 || key < bkey || (key == bkey && last < blast);
    } else {
      key = next_use(c, l, e, now);
      better = best < 0 || key > bkey || (key == bkey && last < blast);
    }
    if (better) {
      best = e;
      bkey = key;
      blast = last;
    }
  }
  return best;
}

int amoe_cache_request(amoe_cache *c, int l, int e, int j) {
  size_t k = (size_t)l * c->experts + e;
  uint16_t *rl = c->rlist + (size_t)l * c->slots;
  c->clock++;
  c->count[k]++;
  int hit = c->res[k];
  if (!hit) {
    if (c->used[l] >= c->slots) {
      int v = victim(c, l, j);
      size_t kv = (size_t)l * c->experts + v;
      int at = c->rpos[kv], lastv = rl[c->used[l] - 1];
      rl[at] = (uint16_t)lastv; /* swap-remove from the resident list */
      c->rpos[(size_t)l * c->experts + lastv] = at;
      c->rpos[kv] = -1;
      c->res[kv] = 0;
      c->used[l]--;
    }
    c->res[k] = 1;
    c->rpos[k] = c->used[l];
    rl[c->used[l]++] = (uint16_t)e;
  }
  c->last[k] = c->clock;
  return hit;
}

void amoe_cache_end_block(amoe_cache *c) { c->block++; }

int amoe_cache_policy_parse(const char *name) {
  if (!strcmp(name, "lru")) return AMOE_CACHE_LRU;
  if (!strcmp(name, "lfu")) return AMOE_CACHE_LFU;
  if (!strcmp(name, "belady")) return AMOE_CACHE_BELADY;
  return -1;
}

const char *amoe_cache_policy_name(int p) {
  return p == AMOE_CACHE_LFU ? "lfu" : p == AMOE_CACHE_BELADY ? "belady" : "lru";
}
