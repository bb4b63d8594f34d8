#include "profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "grow.h"
#include "layout.h"
#include "run.h"
#include "policy.h"

/* One calibration block as the profile needs it: its first n nodes in
 * EAGLE order, their depths, acceptance and top-k ids per layer. */
typedef struct {
  int n;
  int *depth, *accepted;
  uint16_t *ids; /* [node][layer][k] */
} pblock;

static void grid(int *v, int *n, int max, int doubling) {
  static const int steps[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
                              1536, 2048, 3072, 4096};
  *n = 0;
  if (doubling)
    for (int b = 1; b < max && *n < AMOE_STEP_GRID - 1; b *= 2) v[(*n)++] = b;
  else
    for (int i = 0; i < (int)(sizeof steps / sizeof *steps) && steps[i] < max && *n < AMOE_STEP_GRID - 1; i++)
      v[(*n)++] = steps[i];
  v[(*n)++] = max;
}

amoe_status amoe_step_table_profile(const amoe_spec *s, amoe_source *src, const double *load, int max_batch, int samples,
                                    amoe_step_table *t, amoe_err *e) {
  memset(t, 0, sizeof *t);
  const amoe_model *M = &s->model;
  const int L = M->moe_layers, E = M->experts, k = M->top_k;
  const int nodes = s->workload.nodes > 0 ? s->workload.nodes : 1;
  grid(t->batch, &t->nb, max_batch > 0 ? max_batch : 1, 1);
  grid(t->tokens, &t->nt, nodes, 0);
  t->samples = samples;
  const int want = samples * t->batch[t->nb - 1];
  pblock *pb = calloc((size_t)want, sizeof *pb);
  int *order = NULL, have = 0;
  size_t ocap = 0;
  amoe_block b;
  amoe_block_init(&b, L, E, amoe_source_m(src));
  amoe_status st = pb ? amoe_source_rewind(src, e) : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  amoe_source_want_logits(src, AMOE_LOGITS_NONE);
  while (st == AMOE_OK && have < want) {
    const amoe_status rc = amoe_source_next(src, &b, e);
    if (rc == AMOE_END) break;
    if ((st = rc) != AMOE_OK) break;
    int *grown = amoe_grow(order, &ocap, (size_t)b.n, sizeof *order, 64);
    if (!grown) {
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
      break;
    }
    order = grown;
    const int n = amoe_draft_rank(&b, order) < nodes ? b.n : nodes;
    pblock *p = &pb[have++];
    p->n = n;
    p->depth = malloc((size_t)n * 2 * sizeof *p->depth);
    p->ids = malloc((size_t)n * L * k * sizeof *p->ids);
    if (!p->depth || !p->ids) {
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
      break;
    }
    p->accepted = p->depth + n;
    for (int i = 0; i < n; i++) {
      p->depth[i] = b.depth[order[i]];
      p->accepted[i] = b.accepted[order[i]];
      for (int l = 0; l < L; l++) memcpy(p->ids + ((size_t)i * L + l) * k, amoe_block_ids(&b, l, order[i]), (size_t)k * 2);
    }
  }
  amoe_source_want_logits(src, AMOE_LOGITS_ALL);
  if (st == AMOE_OK && have == 0) st = amoe_fail(e, AMOE_EINVAL, "the profile's calibration workload is empty");
  amoe_layout *layout = NULL; /* the run's own (balanced by the same load) */
  if (st == AMOE_OK) st = amoe_run_layout(s, load, &layout, e);
  uint8_t *X = calloc((size_t)(E > 0 ? E : 1), 1);
  int *count = calloc((size_t)(E > 0 ? E : 1), sizeof *count);
  double *tau = calloc((size_t)t->batch[t->nb - 1], sizeof *tau);
  if (st == AMOE_OK && !(X && count && tau)) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  const double miss = s->offload.enabled ? 1 - fmin(1.0, (double)s->offload.slots_per_layer / E) : 0;
  for (int bi = 0; bi < t->nb && st == AMOE_OK; bi++)
    for (int ti = 0; ti < t->nt; ti++) {
      const int B = t->batch[bi], n = t->tokens[ti];
      double sum = 0;
      for (int j = 0; j < samples; j++) {
        int tokens = 0, maxd = 0;
        for (int q = 0; q < B; q++) {
          const pblock *p = &pb[(j * B + q) % have];
          const int m = n < p->n ? n : p->n;
          tau[q] = 0;
          for (int i = 0; i < m; i++) {
            maxd = p->depth[i] > maxd ? p->depth[i] : maxd;
            tau[q] += p->accepted[i];
          }
          tokens += m;
        }
        double accepted = 0;
        for (int q = 0; q < B; q++) accepted += tau[q];
        const double ctx = s->workload.context_tokens;
        amoe_cost_pass_ctx pc;
        amoe_pass_shape sh = amoe_spec_pass_shape(s, tokens, n > 1 ? maxd : 0);
        sh.branch = s->workload.top_k * B, sh.accepted = accepted;
        sh.kv_tokens = B * ctx, sh.attn_tokens = tokens * ctx, sh.requests = B;
        amoe_cost_pass_init(&pc, &sh);
        amoe_pass_time pt = amoe_cost_pass_begin(&pc);
        for (int l = 0; l < L; l++) {
          memset(X, 0, (size_t)E);
          memset(count, 0, (size_t)E * sizeof *count);
          double u = 0, xs = 0;
          for (int q = 0; q < B; q++) {
            const pblock *p = &pb[(j * B + q) % have];
            const int m = n < p->n ? n : p->n;
            for (int i = 0; i < m; i++)
              for (int c = 0; c < k; c++) {
                const int x = p->ids[((size_t)i * L + l) * k + c];
                if (x >= E) continue;
                u += !X[x];
                X[x] = 1;
                count[x]++;
              }
          }
          if (layout) {
            int busiest;
            xs = amoe_layout_layer(layout, l, X, count, pc.ec, pc.moe_tp, &busiest);
          } else
            for (int x = 0; x < E; x++) xs += count[x] ? amoe_cost_expert_at(pc.ec, count[x]) : 0;
          const int slots = s->offload.slots_per_layer;
          const int waves = s->offload.enabled ? amoe_cost_waves(u, slots) : 1;
          const amoe_layer_counts lc = {u, u * miss, waves, xs};
          const amoe_layer_time lt = amoe_cost_layer(&pc, &lc);
          amoe_cost_pass_add(&pt, &lt);
        }
        sum += pt.total + amoe_cost_request_tokens(&s->engine, tau, B);
      }
      t->step_s[bi][ti] = sum / samples;
    }
  for (int i = 0; pb && i < have; i++) {
    free(pb[i].depth);
    free(pb[i].ids);
  }
  free(pb);
  free(order);
  free(X);
  free(count);
  free(tau);
  amoe_layout_free(layout);
  amoe_block_free(&b);
  return st;
}
