#include "inspect.h"
#include "grow.h"
#include "route.h"
#include "router.h"
#include "sort.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const int amoe_inspect_windows[AMOE_INSPECT_NW] = {1, 2, 4, 8, 16};
#define AMOE_INSPECT_RD 64 /* reuse distances counted one by one up to here */

typedef struct {
  int L, E, k;
  uint16_t *routes; /* [token][layer][k] of the current request */
  int ntok;
  size_t cap;
  double usum[AMOE_INSPECT_NW], ucnt[AMOE_INSPECT_NW];
  int *seen;
  int clock;
  double ov[AMOE_MAX_LAYERS], ovn; /* Σ overlaps per layer, pairs of adjacent tokens */
  double t16, t16n;
  int *cnt; /* [E] selections of the current request at a layer */
  int *next; /* [E] the next token that uses the expert (reuse distance) */
  double rd[AMOE_INSPECT_RD + 1], rdn; /* uses by distance to the next use (last: beyond) */
} stream;

static int shallower(const void *a, const void *b, const void *blk) {
  const uint8_t *depth = ((const amoe_block *)blk)->depth;
  return depth[*(const int *)a] < depth[*(const int *)b];
}

static int cmp_int_desc(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x < y) - (x > y);
}

static void flush_request(stream *s) {
  /* adjacent overlap and the top-16 share, per layer */
  for (int l = 0; l < s->L && s->ntok > 0; l++) {
    memset(s->cnt, 0, (size_t)s->E * sizeof *s->cnt);
    for (int t = 0; t < s->ntok; t++) {
      const uint16_t *r = s->routes + ((size_t)t * s->L + l) * s->k;
      for (int j = 0; j < s->k; j++) s->cnt[r[j]]++;
      if (t == 0) continue;
      const uint16_t *q = r - (size_t)s->L * s->k; /* the previous token's */
      int shared = 0;
      for (int j = 0; j < s->k; j++)
        for (int i = 0; i < s->k; i++) shared += r[j] == q[i];
      s->ov[l] += (double)shared / s->k;
    }
    qsort(s->cnt, (size_t)s->E, sizeof *s->cnt, cmp_int_desc);
    long top = 0;
    for (int x = 0; x < 16 && x < s->E; x++) top += s->cnt[x];
    s->t16 += (double)top / ((double)s->ntok * s->k);
    s->t16n += 1;
  }
  if (s->ntok > 1) s->ovn += s->ntok - 1;
  for (int l = 0; l < s->L; l++) { /* reuse distance, backwards from the request's end */
    for (int x = 0; x < s->E; x++) s->next[x] = -1;
    for (int t = s->ntok - 1; t >= 0; t--) {
      const uint16_t *r = s->routes + ((size_t)t * s->L + l) * s->k;
      for (int j = 0; j < s->k; j++) {
        const int nx = s->next[r[j]];
        if (t + 8 < s->ntok) {
          const int d = nx < 0 || nx - t > AMOE_INSPECT_RD ? AMOE_INSPECT_RD + 1 : nx - t;
          s->rd[d - 1] += 1;
          s->rdn += 1;
        }
        s->next[r[j]] = t;
      }
    }
  }
  for (int wi = 0; wi < AMOE_INSPECT_NW; wi++) {
    int W = amoe_inspect_windows[wi];
    if (s->ntok < W) continue;
    for (int l = 0; l < s->L; l++)
      for (int st = 0; st + W <= s->ntok; st++) {
        int distinct = 0;
        int stamp = ++s->clock; /* unique per window */
        for (int t = st; t < st + W; t++) {
          const uint16_t *r = s->routes + ((size_t)t * s->L + l) * s->k;
          for (int j = 0; j < s->k; j++)
            if (s->seen[r[j]] != stamp) {
              s->seen[r[j]] = stamp;
              distinct++;
            }
        }
        s->usum[wi] += distinct;
        s->ucnt[wi] += 1;
      }
  }
  s->ntok = 0;
}

amoe_status amoe_inspect(amoe_source *src, int L, int E, int k, int router, amoe_inspect_stats *o, amoe_err *e) {
  return amoe_inspect_chain(src, L, E, k, router, 1, o, e);
}

/* The block's top T experts by router mass per layer (cur, [layer][E]),
 * and, in the same request, how many they share with the previous block's
 * (prev): added to *sum as a share of T, one per layer in *n. */
static void block_top_mass(const amoe_block *b, int L, int E, int k, int router, int T, int same_request,
                           const double *alpha, float *mass, float *prob, uint8_t *top, double *sum, double *n) {
  memset(mass, 0, (size_t)L * E * sizeof *mass);
  for (int l = 0; l < L; l++)
    for (int t = 0; t < b->n; t++) {
      amoe_router_probs(b, l, t, router, k, prob);
      const uint16_t *id = amoe_block_ids(b, l, t);
      const float a = alpha ? (float)alpha[b->depth[t] < AMOE_INSPECT_DEPTHS ? b->depth[t] : AMOE_INSPECT_DEPTHS - 1] : 1.0f;
      for (int q = 0; q < b->m; q++) mass[(size_t)l * E + id[q]] += a * prob[q];
    }
  uint8_t *cur = top + (size_t)L * E, *prev = top;
  for (int l = 0; l < L; l++) {
    uint8_t *c = cur + (size_t)l * E;
    memset(c, 0, (size_t)E);
    for (int j = 0; j < T; j++) { /* (ties: the lower id) */
      int best = -1;
      for (int x = 0; x < E; x++)
        if (!c[x] && (best < 0 || mass[(size_t)l * E + x] > mass[(size_t)l * E + best])) best = x;
      c[best] = 1;
    }
    if (same_request) {
      int shared = 0;
      for (int x = 0; x < E; x++) shared += c[x] & prev[(size_t)l * E + x];
      *sum += (double)shared / T;
      *n += 1;
    }
  }
  memcpy(prev, cur, (size_t)L * E);
}

/* What a committed token's router gives at one layer: with every logit
 * stored, the softmax's entropy and the top-k's share of it (added to *ent
 * and *kmass; returns 1); else nothing (0). */
static int token_shape(const amoe_block *b, const amoe_f16 *z, int k, double *ent, double *kmass) {
  if (!b->logits || b->lm != b->m) return 0;
  double zd[AMOE_MAX_EXPERTS], zs, zk = 0;
  for (int j = 0; j < b->m; j++) zd[j] = amoe_f16_to_f32(z[j]);
  *ent += amoe_router_entropy(zd, b->m, zd[0], &zs); /* stored in order: z[0] the largest */
  for (int j = 0; j < k; j++) zk += exp(zd[j] - zd[0]);
  *kmass += zk / zs;
  return 1;
}

/* The top-1 weight renormalised over the top-k, as the router weighs them. */
static double token_top1(const amoe_f16 *z, int k, int router) {
  double sum = 0, w0 = 1;
  if (router == AMOE_ROUTER_SIGMOID_NORM) {
    for (int j = 0; j < k; j++) sum += 1.0 / (1.0 + exp(-(double)amoe_f16_to_f32(z[j])));
    w0 = 1.0 / (1.0 + exp(-(double)amoe_f16_to_f32(z[0])));
  } else
    for (int j = 0; j < k; j++) sum += exp((double)amoe_f16_to_f32(z[j]) - amoe_f16_to_f32(z[0]));
  return w0 / sum;
}

/* Reuse distance from its histogram: within 1 and 8 tokens, and the median. */
static void finish_reuse(const stream *s, amoe_inspect_stats *o) {
  o->reuse_within_1 = o->reuse_within_8 = o->reuse_median = NAN;
  if (!(s->rdn > 0)) return;
  double acc = 0;
  o->reuse_within_1 = s->rd[0] / s->rdn;
  for (int d = 0; d < 8; d++) acc += s->rd[d];
  o->reuse_within_8 = acc / s->rdn;
  acc = 0;
  for (int d = 0; d <= AMOE_INSPECT_RD; d++) {
    acc += s->rd[d];
    if (acc >= 0.5 * s->rdn) {
      o->reuse_median = d < AMOE_INSPECT_RD ? d + 1 : INFINITY;
      break;
    }
  }
}

/* Expert popularity per layer from the committed tokens' counts pop[layer][E]:
 * busiest and quietest over the mean, and the effective number (exp of the
 * entropy of the shares), per layer and averaged. */
static void finish_popularity(const double *pop, int L, int E, amoe_inspect_stats *o) {
  for (int l = 0; l < L; l++) {
    double tot = 0, mx = 0, mn = 1e300, H = 0;
    for (int x = 0; x < E; x++) {
      double c = pop[(size_t)l * E + x];
      tot += c;
      mx = c > mx ? c : mx;
      mn = c < mn ? c : mn;
    }
    if (tot <= 0) continue;
    for (int x = 0; x < E; x++) {
      double q = pop[(size_t)l * E + x] / tot;
      if (q > 0) H -= q * log(q);
    }
    o->pop_max_over_mean += mx / (tot / E) / L;
    o->pop_min_over_mean += mn / (tot / E) / L;
    o->pop_effective += exp(H) / L;
    o->pop_effective_layer[l] = exp(H);
  }
}

/* What the chain's walk sums beside the request streams: over blocks, their
 * nodes and per layer the union of every node's experts (histogram, and
 * the share the request's last tokens never used) and of the accepted
 * path's; over committed tokens, the experts' counts and the score shape. */
typedef struct {
  double nodes, usum, ucnt, psum, pcnt, nov, novn;
  double top1, top1n, ent[AMOE_MAX_LAYERS], entn, kmass;
  double *pop;      /* [layer][E]: committed tokens per expert */
  uint32_t *uhist;  /* [layer][union]: blocks */
  uint8_t useen[AMOE_MAX_EXPERTS];
} chain_sums;

/* The block's unions, layer by layer (every node verified; the accepted path). */
static void block_unions(chain_sums *a, const stream *s, const amoe_block *b, int L, int E, int k) {
  const int before = s->ntok >= AMOE_INSPECT_NOVELTY_W; /* the request's last W committed tokens */
  for (int l = 0; l < L; l++) {
    memset(a->useen, 0, (size_t)E);
    int u = 0;
    for (int t = 0; t < b->n; t++) u += amoe_route_union_add(b, l, k, t, a->useen);
    a->usum += u;
    a->ucnt += 1;
    a->uhist[(size_t)l * (E + 1) + u]++;
    if (before) { /* the share of it those tokens never used */
      for (int t = s->ntok - AMOE_INSPECT_NOVELTY_W; t < s->ntok; t++)
        for (int j = 0; j < k; j++) a->useen[s->routes[((size_t)t * L + l) * k + j]] = 2;
      int fresh = 0;
      for (int x = 0; x < E; x++) fresh += a->useen[x] == 1;
      a->nov += u ? (double)fresh / u : 0;
      a->novn += 1;
    }
    memset(a->useen, 0, (size_t)E); /* the accepted path's union */
    int pu = 0;
    for (int t = 0; t < b->n; t++)
      if (b->accepted[t]) pu += amoe_route_union_add(b, l, k, t, a->useen);
    a->psum += pu;
    a->pcnt += 1;
  }
}

/* The accepted path's tokens, root first, into the request's stream (their
 * routes, the experts' counts, the score shape). */
static amoe_status commit_path(chain_sums *a, stream *s, const amoe_block *b, int L, int k, int router, int **path,
                               size_t *pcap, amoe_inspect_stats *o, amoe_err *e) {
  const int E = s->E;
  int *grown = amoe_grow(*path, pcap, (size_t)b->n, sizeof **path, 64);
  if (!grown) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  *path = grown;
  int np = 0; /* accepted nodes, root first, in depth order */
  for (int t = 0; t < b->n; t++)
    if (b->accepted[t]) grown[np++] = t;
  amoe_sort(grown, np, sizeof *grown, shallower, (void *)b);
  o->tau_hist[np < 64 ? np : 64]++;
  o->tau_mean += np;
  uint16_t *nr = amoe_grow(s->routes, &s->cap, (size_t)(s->ntok + np), (size_t)L * k * sizeof *nr, 256);
  if (!nr) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  s->routes = nr;
  for (int i = 0; i < np; i++) {
    int t = grown[i], shaped = 0;
    for (int l = 0; l < L; l++) {
      const uint16_t *id = amoe_block_ids(b, l, t);
      const amoe_f16 *z = amoe_block_logits(b, l, t);
      memcpy(s->routes + ((size_t)s->ntok * L + l) * k, id, (size_t)k * sizeof *id);
      for (int j = 0; j < k; j++) a->pop[(size_t)l * E + id[j]] += 1;
      shaped = token_shape(b, z, k, &a->ent[l], &a->kmass); /* the score shape: softmax over the stored logits */
      if (k >= 2) {
        a->top1 += token_top1(z, k, router);
        a->top1n += 1;
      }
    }
    a->entn += shaped;
    s->ntok++;
    o->tokens++;
  }
  return AMOE_OK;
}

/* The statistics from what the walk summed. */
static void finish_chain(const chain_sums *a, const stream *s, amoe_source *src, int L, int E, int k,
                         amoe_inspect_stats *o) {
  if (o->blocks) {
    o->nodes_mean = a->nodes / o->blocks;
    o->tau_mean /= o->blocks;
  }
  for (int wi = 0; wi < AMOE_INSPECT_NW; wi++) o->window_union[wi] = s->ucnt[wi] > 0 ? s->usum[wi] / s->ucnt[wi] : NAN;
  o->top1_weight_mean = a->top1n > 0 ? a->top1 / a->top1n : NAN;
  o->entropy_mean = o->topk_mass_mean = NAN;
  o->entropy_full = amoe_source_m(src) == E;
  if (a->entn > 0) {
    o->entropy_mean = 0;
    for (int l = 0; l < L; l++) o->entropy_mean += (o->entropy_layer[l] = a->ent[l] / a->entn) / L;
    o->topk_mass_mean = a->kmass / (a->entn * L);
  } else
    for (int l = 0; l < L; l++) o->entropy_layer[l] = NAN;
  double shape[AMOE_MAX_LAYERS], km;
  if (amoe_source_score_shape(src, shape, &km)) { /* a capture's full logits, which the blocks keep the top-k of */
    o->entropy_full = 1;
    o->entropy_mean = 0;
    for (int l = 0; l < L; l++) o->entropy_mean += (o->entropy_layer[l] = shape[l]) / L;
    o->topk_mass_mean = km;
  }
  o->tree_union_mean = a->ucnt > 0 ? a->usum / a->ucnt : NAN;
  o->path_union_mean = a->pcnt > 0 ? a->psum / a->pcnt : NAN;
  o->novelty_mean = a->novn > 0 ? a->nov / a->novn : NAN;
  for (int l = 0; l < L; l++) { /* each layer's mean and percentiles (nearest rank) */
    const uint32_t *h = a->uhist + (size_t)l * (E + 1);
    double sum = 0;
    for (int u = 0; u <= E; u++) sum += (double)u * h[u];
    o->union_layer[l] = o->blocks ? sum / o->blocks : NAN;
    o->union_p90_layer[l] = o->union_p99_layer[l] = NAN;
    long seen = 0;
    for (int u = 0; u <= E && o->blocks; u++) {
      seen += h[u];
      if (isnan(o->union_p90_layer[l]) && seen >= ceil(0.90 * o->blocks)) o->union_p90_layer[l] = u;
      if (isnan(o->union_p99_layer[l]) && seen >= ceil(0.99 * o->blocks)) o->union_p99_layer[l] = u;
    }
  }
  o->layers = L;
  o->uniform_overlap = (double)k / E;
  double ov = 0;
  for (int l = 0; l < L; l++) {
    o->overlap_layer[l] = s->ovn > 0 ? s->ov[l] / s->ovn : NAN;
    ov += s->ov[l];
  }
  o->adjacent_overlap = s->ovn > 0 ? ov / (s->ovn * L) : NAN;
  o->top16_share = s->t16n > 0 ? s->t16 / s->t16n : NAN;
  finish_reuse(s, o);
  finish_popularity(a->pop, L, E, o);
}

/* One walk over the source: per block its checks, the request streams,
 * the top experts against the previous block's, the tree's shape, the
 * unions and the accepted path (the statistics: inspect.h). */
amoe_status amoe_inspect_chain(amoe_source *src, int L, int E, int k, int router, int blocks, amoe_inspect_stats *o,
                               amoe_err *e) {
  memset(o, 0, sizeof *o);
  if (L > AMOE_MAX_LAYERS) return amoe_fail(e, AMOE_EINVAL, "inspect: more than %d layers", AMOE_MAX_LAYERS);
  stream s;
  memset(&s, 0, sizeof s);
  s.L = L, s.E = E, s.k = k;
  s.seen = calloc((size_t)E, sizeof(int));
  s.cnt = calloc((size_t)E, sizeof(int));
  s.next = calloc((size_t)E, sizeof(int));
  float *mass = calloc((size_t)L * E, sizeof(float)), *prob = calloc((size_t)E, sizeof(float));
  /* [2][2][layer][E]: by router mass, then by utility, this block's top-32 and the previous one's */
  uint8_t *top = calloc((size_t)L * E * 4, 1);
  double b32 = 0, b32n = 0, u32 = 0, u32n = 0, alpha[AMOE_INSPECT_DEPTHS];
  const int T32 = E >= 64 ? 32 : E / 2;
  chain_sums *a = calloc(1, sizeof *a);
  if (a) a->pop = calloc((size_t)L * E, sizeof(double)), a->uhist = calloc((size_t)L * (E + 1), sizeof *a->uhist);
  amoe_block b;
  amoe_block_init(&b, L, E, amoe_source_m(src));
  amoe_status st = (s.seen && s.cnt && s.next && a && a->pop && mass && prob && top && a->uhist)
                       ? amoe_source_rewind(src, e) : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  amoe_status rc = AMOE_OK;
  long last_req = -1;
  int *path = NULL;
  size_t pcap = 0;
  if (st == AMOE_OK && blocks && T32 > 0) { /* α_d: how often a node at depth d is committed, over the same blocks */
    double cnt[AMOE_INSPECT_DEPTHS] = {0}, acc[AMOE_INSPECT_DEPTHS] = {0};
    while ((rc = amoe_source_next(src, &b, e)) == AMOE_OK)
      for (int t = 0; t < b.n; t++) {
        const int d = b.depth[t] < AMOE_INSPECT_DEPTHS ? b.depth[t] : AMOE_INSPECT_DEPTHS - 1;
        cnt[d] += 1;
        acc[d] += b.accepted[t];
      }
    for (int d = 0; d < AMOE_INSPECT_DEPTHS; d++) alpha[d] = cnt[d] > 0 ? acc[d] / cnt[d] : 0;
    st = rc == AMOE_END ? amoe_source_rewind(src, e) : rc;
  }
  while (st == AMOE_OK && (rc = amoe_source_next(src, &b, e)) == AMOE_OK) {
    /* every stored pair and normaliser, including what trace replay leaves
     * to the checksum */
    if ((st = amoe_block_check_pairs(&b, 1, e)) != AMOE_OK || (st = amoe_router_check_inv(&b, e)) != AMOE_OK) {
      amoe_err_prefix(e, "block %llu", (unsigned long long)b.index);
      break;
    }
    const int same_request = (long)b.request == last_req && b.step != 0;
    if (!same_request) {
      flush_request(&s);
      last_req = (long)b.request;
      o->requests++;
    }
    if (blocks && b.logits && T32 > 0) { /* the block's top experts, against the previous block's */
      block_top_mass(&b, L, E, k, router, T32, same_request, NULL, mass, prob, top, &b32, &b32n);
      block_top_mass(&b, L, E, k, router, T32, same_request, alpha, mass, prob, top + (size_t)2 * L * E, &u32, &u32n);
    }
    o->blocks++;
    a->nodes += b.n;
    for (int t = 0; t < b.n; t++) {
      int ch = 0;
      for (int u = t + 1; u < b.n; u++) ch += b.parent[u] == t;
      if (b.depth[t] > o->tree_depth_max) o->tree_depth_max = b.depth[t];
      if (ch > o->tree_branch_max) o->tree_branch_max = ch;
    }
    block_unions(a, &s, &b, L, E, k);
    if ((st = commit_path(a, &s, &b, L, k, router, &path, &pcap, o, e)) != AMOE_OK) break;
  }
  if (st == AMOE_OK && rc != AMOE_END) st = rc;
  flush_request(&s);
  if (st == AMOE_OK) {
    finish_chain(a, &s, src, L, E, k, o);
    o->block_top32_overlap = b32n > 0 ? b32 / b32n : NAN;
    o->block_top32_utility_overlap = u32n > 0 ? u32 / u32n : NAN;
  }
  free(path);
  free(s.routes);
  free(s.seen);
  free(s.cnt);
  free(s.next);
  free(mass);
  free(prob);
  free(top);
  if (a) free(a->pop), free(a->uhist);
  free(a);
  amoe_block_free(&b);
  return st;
}

void amoe_inspect_print(FILE *f, const amoe_inspect_stats *s, const char *what, int json) {
  if (json) {
    fprintf(f, "{\"input\":\"%s\",\"blocks\":%ld,\"requests\":%ld,\"committed_tokens\":%ld,\"nodes_mean\":%.6g,"
               "\"tau_mean\":%.6g,\"window_union\":{",
            what, s->blocks, s->requests, s->tokens, s->nodes_mean, s->tau_mean);
    for (int i = 0; i < AMOE_INSPECT_NW; i++)
      fprintf(f, "%s\"%d\":%.6g", i ? "," : "", amoe_inspect_windows[i],
              isnan(s->window_union[i]) ? -1.0 : s->window_union[i]);
    fprintf(f, "},\"tree_union_mean\":%.6g,\"top1_weight_mean\":%.6g,\"popularity\":{\"max_over_mean\":%.6g,\"min_over_mean\":%.6g,"
               "\"effective_experts\":%.6g",
            s->tree_union_mean, isnan(s->top1_weight_mean) ? -1.0 : s->top1_weight_mean, s->pop_max_over_mean, s->pop_min_over_mean,
            s->pop_effective);
    fprintf(f, "},\"adjacent_overlap\":%.6g,\"top16_share\":%.6g,\"overlap_by_layer\":[",
            isnan(s->adjacent_overlap) ? -1.0 : s->adjacent_overlap, isnan(s->top16_share) ? -1.0 : s->top16_share);
    for (int l = 0; l < s->layers; l++)
      fprintf(f, "%s%.4g", l ? "," : "", isnan(s->overlap_layer[l]) ? -1.0 : s->overlap_layer[l]);
    fprintf(f, "],\"score_shape\":{\"full_softmax\":%s,\"entropy_mean\":%.6g,\"topk_mass_mean\":%.6g,\"entropy_by_layer\":[",
            s->entropy_full ? "true" : "false", isnan(s->entropy_mean) ? -1.0 : s->entropy_mean,
            isnan(s->topk_mass_mean) ? -1.0 : s->topk_mass_mean);
    for (int l = 0; l < s->layers; l++)
      fprintf(f, "%s%.4g", l ? "," : "", isnan(s->entropy_layer[l]) ? -1.0 : s->entropy_layer[l]);
    fprintf(f, "],\"popularity_effective_by_layer\":[");
    for (int l = 0; l < s->layers; l++) fprintf(f, "%s%.4g", l ? "," : "", s->pop_effective_layer[l]);
    fprintf(f, "]}");
    fprintf(f, ",\"reuse_distance\":{\"median\":%.6g,\"within_1\":%.6g,\"within_8\":%.6g},\"block_top32_overlap\":%.6g",
            isfinite(s->reuse_median) ? s->reuse_median : -1.0, isnan(s->reuse_within_1) ? -1.0 : s->reuse_within_1,
            isnan(s->reuse_within_8) ? -1.0 : s->reuse_within_8,
            isnan(s->block_top32_overlap) ? -1.0 : s->block_top32_overlap);
    fprintf(f, ",\"block_top32_utility_overlap\":%.6g",
            isnan(s->block_top32_utility_overlap) ? -1.0 : s->block_top32_utility_overlap);
    fprintf(f, ",\"passes\":{\"path_union_mean\":%.6g,\"novelty_w%d\":%.6g", isnan(s->path_union_mean) ? -1.0 : s->path_union_mean,
            AMOE_INSPECT_NOVELTY_W, isnan(s->novelty_mean) ? -1.0 : s->novelty_mean);
    const double *per[3] = {s->union_layer, s->union_p90_layer, s->union_p99_layer};
    const char *pname[3] = {"union_by_layer", "union_p90_by_layer", "union_p99_by_layer"};
    for (int i = 0; i < 3; i++) {
      fprintf(f, ",\"%s\":[", pname[i]);
      for (int l = 0; l < s->layers; l++) fprintf(f, "%s%.4g", l ? "," : "", isnan(per[i][l]) ? -1.0 : per[i][l]);
      fputc(']', f);
    }
    fputc('}', f);
    fprintf(f, ",\"tau_hist\":{");
    int first = 1;
    for (int i = 0; i <= 64; i++)
      if (s->tau_hist[i]) {
        fprintf(f, "%s\"%d\":%ld", first ? "" : ",", i, s->tau_hist[i]);
        first = 0;
      }
    fprintf(f, "}}\n");
    return;
  }
  fprintf(f, "%s\n  blocks %ld, requests %ld, committed tokens %ld, nodes/block %.2f, tau %.3f\n", what,
          s->blocks, s->requests, s->tokens, s->nodes_mean, s->tau_mean);
  fprintf(f, "  distinct experts per layer over W consecutive committed tokens:\n   ");
  for (int i = 0; i < AMOE_INSPECT_NW; i++) fprintf(f, "  W=%d: %.3f", amoe_inspect_windows[i], s->window_union[i]);
  fprintf(f, "\n  union of every node's top-k per layer and block: %.2f experts (%.1f nodes per block)\n",
          s->tree_union_mean, s->nodes_mean);
  fprintf(f, "  the pass's union per layer (mean / p90 / p99 over blocks):");
  for (int l = 0; l < s->layers; l++)
    fprintf(f, "%s%.1f/%.0f/%.0f", l % 8 ? "  " : "\n   ", s->union_layer[l], s->union_p90_layer[l], s->union_p99_layer[l]);
  fprintf(f, "\n  the accepted path's union: %.2f experts per layer; novelty (the share of a pass's union the last %d "
             "committed tokens never used): %.3f\n",
          s->path_union_mean, AMOE_INSPECT_NOVELTY_W, s->novelty_mean);
  fprintf(f, "  mean renormalised top-1 weight: %.3f\n", s->top1_weight_mean);
  if (!isnan(s->entropy_mean)) {
    fprintf(f, "  router entropy per token (softmax over %s logits, nats): mean %.3f, top-k mass %.3f; by layer:",
            s->entropy_full ? "all" : "the stored (a lower bound: not every expert's)", s->entropy_mean,
            s->topk_mass_mean);
    for (int l = 0; l < s->layers; l++) fprintf(f, "%s%.2f", l % 16 ? " " : "\n   ", s->entropy_layer[l]);
    fputc('\n', f);
  }
  fprintf(f, "  expert popularity (mean over layers): busiest %.2fx mean, quietest %.2fx, effective %.1f experts\n",
          s->pop_max_over_mean, s->pop_min_over_mean, s->pop_effective);
  fprintf(f, "  adjacent committed tokens share %.3f of their experts (uniform routing: %.3f); by layer:",
          s->adjacent_overlap, s->uniform_overlap);
  for (int l = 0; l < s->layers; l++) fprintf(f, "%s%.2f", l % 16 ? " " : "\n   ", s->overlap_layer[l]);
  fprintf(f, "\n  top-16 experts' share of a request's selections (mean over requests and layers): %.3f\n",
          s->top16_share);
  fprintf(f, "  reuse distance (tokens until a layer uses the expert again): median %g, within 1 %.3f, within 8 %.3f\n",
          s->reuse_median, s->reuse_within_1, s->reuse_within_8);
  fprintf(f, "  consecutive blocks of a request share %.3f of their 32 experts of most router mass (per layer), %.3f of "
             "their 32 of most utility\n",
          s->block_top32_overlap, s->block_top32_utility_overlap);
  fprintf(f, "  tau histogram:");
  for (int i = 0; i <= 64; i++)
    if (s->tau_hist[i]) fprintf(f, " %d:%ld", i, s->tau_hist[i]);
  fprintf(f, "\n");
}
