/* The generator: deterministic per (seed, request); acceptance hits the
 * target τ; replay reproduces the replayed (clamped) distribution; and the
 * default routing parameters reproduce the real Mixtral window-union curve. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "fit.h"
#include "inspect.h"
#include "prepare.h"
#include "results.h"
#include "run.h"
#include "source.h"
#include "gen.h"
#include "gen_rng.h"
#include "spec_load.h"

static amoe_spec spec_for(const char *model) {
  amoe_spec s;
  amoe_diag d = {0};
  amoe_spec_defaults(&s);
  CHECK(amoe_spec_load_preset(&s, 0, model, "test", &d) == AMOE_OK, "preset %s", model);
  amoe_diag_free(&d);
  return s;
}

/* The noise: the 65,536 values of amoe_gen_normal, in order of the piece,
 * are increasing, odd, and distributed as a standard normal to within the
 * fit's quality (KS distance 1.6e-4; the former table of 4,096 quantiles
 * had 1.2e-4). */
static void test_normal(void) {
  double ks = 0, var = 0, m4 = 0;
  int increasing = 1, odd = 1;
  for (int u = 0; u < 65536; u++) {
    const double x = amoe_gen_normal((uint16_t)u), cdf = 0.5 * erfc(-x / sqrt(2.0));
    const double lo = fabs(cdf - u / 65536.0), hi = fabs(cdf - (u + 1) / 65536.0);
    ks = fmax(ks, fmax(lo, hi));
    var += x * x;
    m4 += x * x * x * x;
    if (u) increasing &= amoe_gen_normal((uint16_t)(u - 1)) < (float)x;
    odd &= amoe_gen_normal((uint16_t)(65535 - u)) == -(float)x;
  }
  var /= 65536;
  m4 /= 65536;
  CHECK(increasing && odd, "the noise is increasing (%d) and odd (%d) in the piece", increasing, odd);
  CHECK(ks < 2e-4, "KS distance of the noise from a normal %.2e", ks);
  CHECK(fabs(var - 1) < 1e-3 && fabs(m4 / (var * var) - 3) < 0.02, "noise variance %.5f, kurtosis %.4f", var,
        m4 / (var * var));
  CHECK(amoe_gen_normal(65535) > 3.5f && amoe_gen_normal(65535) < 4.2f, "noise ends at %.3f",
        amoe_gen_normal(65535));
}

/* inspect's statistics of a spec's synthetic workload */
static amoe_inspect_stats stats_of(const amoe_spec *s) {
  amoe_err e;
  amoe_source *src;
  amoe_inspect_stats st;
  memset(&st, 0, sizeof st);
  CHECK(amoe_source_open(&src, &s->workload, &s->model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_inspect(src, s->model.moe_layers, s->model.experts, s->model.top_k, s->model.router, &st, &e) == AMOE_OK,
        "%s", e.msg);
  amoe_source_close(src);
  return st;
}

/* The shipped presets' routing sections hold their fit: each statistic of
 * workloads/targets/<model>.yaml within a tolerance on another seed than
 * the fit's (docs/validation.md). */
static void fitted_presets(void) {
  const char *models[2] = {"qwen3-30b-a3b", "olmoe-1b-7b"};
  for (int i = 0; i < 2; i++) {
    char path[256];
    snprintf(path, sizeof path, "../workloads/targets/%s.yaml", models[i]);
    amoe_fit_targets t;
    amoe_diag d = {0};
    CHECK(amoe_fit_targets_load(&t, path, &d), "%s", d.n ? d.msgs[0] : path);
    amoe_diag_free(&d);
    amoe_spec s = spec_for(models[i]);
    s.workload.blocks = 300;
    s.workload.seed = 31;
    s.workload.tau = 4.4;
    if (t.top16_tokens) s.workload.tokens_per_request = t.top16_tokens;
    amoe_inspect_stats st = stats_of(&s);
    for (int a = 0; a < t.nanchor; a++) {
      const double got = st.overlap_layer[t.anchor_layer[a]], want = t.anchor_value[a];
      CHECK(fabs(got - want) <= fmax(0.03, 0.15 * want), "%s: overlap at layer %d %.3f, target %.3f", models[i],
            t.anchor_layer[a], got, want);
    }
    if (!isnan(t.overlap))
      CHECK(fabs(st.adjacent_overlap - t.overlap) <= 0.12 * t.overlap, "%s: overlap %.3f, target %.3f", models[i],
            st.adjacent_overlap, t.overlap);
    if (!isnan(t.top16))
      CHECK(fabs(st.top16_share - t.top16) <= 0.05, "%s: top-16 share %.3f, target %.3f", models[i], st.top16_share,
            t.top16);
    if (!isnan(t.reuse_within_8))
      CHECK(fabs(st.reuse_within_8 - t.reuse_within_8) <= 0.03, "%s: reuse within 8 tokens %.3f, target %.3f",
            models[i], st.reuse_within_8, t.reuse_within_8);
    if (!isnan(t.reuse_median))
      CHECK(st.reuse_median == t.reuse_median, "%s: median reuse distance %g, target %g", models[i], st.reuse_median,
            t.reuse_median);
    if (t.nentropy) { /* the score shape: the full softmax's entropy per layer */
      amoe_spec f = s;
      f.workload.top_m = f.model.experts;
      f.workload.blocks = 120;
      const amoe_inspect_stats fs = stats_of(&f);
      CHECK(fs.entropy_full, "%s: every logit stored", models[i]);
      for (int l = 0; l < t.nentropy; l++)
        CHECK(fabs(fs.entropy_layer[l] - t.entropy[l]) <= 0.15, "%s: router entropy at layer %d %.3f, target %.3f",
              models[i], l, fs.entropy_layer[l], t.entropy[l]);
    }
    if (t.npopularity) { /* per-layer popularity over prompts routed as prefills */
      const int L = s.model.moe_layers, E = s.model.experts;
      amoe_source *src;
      amoe_err e;
      CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
      static uint16_t counts[AMOE_MAX_LAYERS * 128];
      static double pop[AMOE_MAX_LAYERS * 128];
      CHECK(E <= 128, "popularity test sized for 128 experts");
      memset(pop, 0, sizeof pop);
      for (int r = 0; r < t.popularity_prompts; r++) {
        int made = 0;
        CHECK(amoe_source_prefill(src, (uint32_t)r, t.popularity_prompt_tokens, 0, counts, &made, &e) == AMOE_OK && made,
              "%s", e.msg);
        for (int q = 0; q < L * E; q++) pop[q] += counts[q];
      }
      amoe_source_close(src);
      for (int l = 0; l < L; l++) {
        double tot = 0, H = 0;
        for (int x = 0; x < E; x++) tot += pop[l * E + x];
        for (int x = 0; x < E; x++)
          if (pop[l * E + x] > 0) H -= pop[l * E + x] / tot * log(pop[l * E + x] / tot);
        CHECK(fabs(exp(H) / t.popularity[l] - 1) <= 0.1, "%s: effective experts at layer %d %.1f, target %.1f",
              models[i], l, exp(H), t.popularity[l]);
      }
    }
    if (!isnan(t.tree_union)) {
      s.workload.nodes = s.workload.candidates = t.tree_nodes;
      s.workload.depth = t.tree_depth;
      s.workload.top_k = t.tree_top_k;
      s.workload.blocks = 40;
      st = stats_of(&s);
      CHECK(fabs(st.tree_union_mean - t.tree_union) <= 3, "%s: tree union %.1f, target %.0f", models[i],
            st.tree_union_mean, t.tree_union);
    }
  }
}

/* Score shape (docs/design.md §5): a router scale leaves every stored id,
 * and so every top-k set, exactly as it was, and multiplies the logits
 * (to binary16 precision); per-layer scales act per layer; the entropy
 * rises as the scale falls. */
static void score_shape(void) {
  amoe_spec s = spec_for("qwen3-30b-a3b");
  s.workload.blocks = 12;
  s.workload.nodes = s.workload.candidates = 24;
  s.workload.top_m = 128;
  s.workload.routing.score_scale = (amoe_layer_values){.n = 1, .v = {1.0}}; /* the logits as generated */
  const int L = s.model.moe_layers, m = 128;
  amoe_spec t = s;
  t.workload.routing.score_scale.n = L;
  for (int l = 0; l < L; l++) t.workload.routing.score_scale.v[l] = l % 2 ? 0.3 : 1.7;
  amoe_err e;
  amoe_source *a, *b;
  CHECK(amoe_source_open(&a, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_source_open(&b, &t.workload, &t.model, &e) == AMOE_OK, "%s", e.msg);
  amoe_block x, y;
  amoe_block_init(&x, L, 128, m);
  amoe_block_init(&y, L, 128, m);
  int ids_same = 1, moved = 0, worst_ok = 1;
  while (amoe_source_next(a, &x, &e) == AMOE_OK) {
    CHECK(amoe_source_next(b, &y, &e) == AMOE_OK, "%s", e.msg);
    ids_same &= x.n == y.n && !memcmp(x.ids, y.ids, (size_t)x.n * L * m * sizeof *x.ids) &&
                !memcmp(x.accepted, y.accepted, (size_t)x.n);
    for (int l = 0; l < L; l++)
      for (int n = 0; n < x.n; n++) {
        const amoe_f16 *zx = amoe_block_logits(&x, l, n), *zy = amoe_block_logits(&y, l, n);
        const double sc = t.workload.routing.score_scale.v[l];
        for (int j = 0; j < m; j++) {
          const double want = sc * amoe_f16_to_f32(zx[j]), got = amoe_f16_to_f32(zy[j]);
          moved += zx[j] != zy[j];
          /* a binary16 step at most, and one more where two merged (store_ordered) */
          worst_ok &= fabs(got - want) <= 2.5 * fmax(fabs(want), 6.1e-5) / 1024 + 1e-7;
        }
      }
  }
  CHECK(ids_same, "a score scale moves no stored expert id (every top-k set as it was)");
  CHECK(moved > 0 && worst_ok, "the scaled logits are the scale times the logits (%d moved)", moved);
  amoe_block_free(&x);
  amoe_block_free(&y);
  amoe_source_close(a);
  amoe_source_close(b);
  /* entropy rises as the scale falls; the selection statistics do not move */
  amoe_spec one = s, lo = s;
  one.workload.routing.score_scale = (amoe_layer_values){.n = 1, .v = {1.0}};
  lo.workload.routing.score_scale = (amoe_layer_values){.n = 1, .v = {0.5}};
  const amoe_inspect_stats s0 = stats_of(&one), s1 = stats_of(&lo);
  CHECK(s1.entropy_mean > s0.entropy_mean + 0.2 && s1.top1_weight_mean < s0.top1_weight_mean,
        "scale 0.5 flattens the router: entropy %.3f -> %.3f, top-1 weight %.3f -> %.3f", s0.entropy_mean,
        s1.entropy_mean, s0.top1_weight_mean, s1.top1_weight_mean);
  CHECK(s1.adjacent_overlap == s0.adjacent_overlap && s1.window_union[3] == s0.window_union[3] &&
            s1.pop_effective == s0.pop_effective,
        "scale moves no selection statistic");
}

/* The generator's vector paths against their plain twins, bit for bit:
 * normals and whole node-layer logits (with and without a request bias) for
 * E = 8, 64, 128 and 256. */
static void generic_twins(void) {
  int same = 1;
  for (int E = 8; E <= 256; E *= 2) {
    float w[8 * 256], st[8], bias[256], rb[256], eps[256 + 16], za[256], zb[256], na[256 + 16], nb[256 + 16];
    amoe_rng r;
    amoe_rng_seed(&r, 9, (uint64_t)E, 1);
    for (int i = 0; i < 8 * E; i++) w[i] = (float)amoe_rng_normal(&r) * 0.3f;
    for (int i = 0; i < 8; i++) st[i] = (float)amoe_rng_normal(&r);
    for (int x = 0; x < E; x++) bias[x] = (float)amoe_rng_normal(&r) * 0.4f, rb[x] = (float)amoe_rng_normal(&r);
    for (int trial = 0; trial < 8; trial++) {
      gen_rng4 a, b;
      rng4_seed(&a, 7, (uint64_t)E, (uint64_t)trial);
      rng4_seed(&b, 7, (uint64_t)E, (uint64_t)trial);
      amoe_gen_normals16(&a, na, E);
      amoe_gen_normals16_generic(&b, nb, E);
      same &= !memcmp(na, nb, (size_t)E * sizeof *na);
      amoe_gen_node_logits(&a, eps, w, st, bias, trial & 1 ? rb : NULL, E, 0.7f, za);
      amoe_gen_node_logits_generic(&b, eps, w, st, bias, trial & 1 ? rb : NULL, E, 0.7f, zb);
      same &= !memcmp(za, zb, (size_t)E * sizeof *za);
    }
  }
  CHECK(same, "the generator's vector paths differ from their plain twins");
  /* the tree path's logits with their noise given, plain and mixed, at whole and ragged widths */
  const int widths[] = {5, 8, 60, 128, 250};
  for (int i = 0; i < 5; i++) {
    const int E = widths[i];
    float w[8 * 256], st[8], bias[256], rb[256], eo[256], es[256], za[256], zb[256];
    amoe_rng r;
    amoe_rng_seed(&r, 11, (uint64_t)E, 2);
    for (int j = 0; j < 8 * E; j++) w[j] = (float)amoe_rng_normal(&r) * 0.3f;
    for (int j = 0; j < 8; j++) st[j] = (float)amoe_rng_normal(&r);
    for (int x = 0; x < E; x++)
      bias[x] = (float)amoe_rng_normal(&r) * 0.4f, rb[x] = (float)amoe_rng_normal(&r), eo[x] = (float)amoe_rng_normal(&r),
      es[x] = (float)amoe_rng_normal(&r);
    for (int v = 0; v < 4; v++) {
      const float *mix = v & 2 ? es : NULL, *req = v & 1 ? rb : NULL;
      amoe_gen_layer_logits(w, st, eo, mix, 0.6f, 0.8f, bias, req, E, 0.7f, za);
      amoe_gen_layer_logits_generic(w, st, eo, mix, 0.6f, 0.8f, bias, req, E, 0.7f, zb);
      CHECK(!memcmp(za, zb, (size_t)E * sizeof *za), "layer logits with given noise: vector path differs at E = %d (%d)", E, v);
    }
  }
}

/* The tree mechanism (gen.h): siblings' shared share narrows a tree's
 * union; a node repeating its twin (the first node with its depth and
 * sibling rank, worked out here from the block) routes exactly as the twin
 * at the layers it repeats at when no layer sees the parent (locality 0),
 * and not at the others; and a root-to-leaf path's statistics stay. */
static void tree_checks(void) {
  amoe_spec o = spec_for("qwen3-30b-a3b");
  o.workload.blocks = 40;
  o.workload.nodes = o.workload.candidates = 32;
  o.workload.depth = 6;
  o.workload.top_k = 10;
  o.workload.tau = 2.475;
  o.model.routing.tree_sibling.n = o.model.routing.tree_repeat.n = 0;
  const amoe_inspect_stats off = stats_of(&o);
  o.model.routing.tree_sibling = (amoe_layer_values){.n = 1, .v = {0.95}};
  const amoe_inspect_stats sib = stats_of(&o);
  CHECK(sib.tree_union_mean < off.tree_union_mean - 4, "sibling share 0.95 narrows the 32-node union: %.2f vs %.2f",
        sib.tree_union_mean, off.tree_union_mean);
  CHECK(fabs(sib.adjacent_overlap - off.adjacent_overlap) < 0.02 && fabs(sib.top16_share - off.top16_share) < 0.02,
        "the committed path's statistics stay: overlap %.3f vs %.3f, top-16 %.3f vs %.3f", sib.adjacent_overlap,
        off.adjacent_overlap, sib.top16_share, off.top16_share);
  /* repeats at the first 4 layers, no locality anywhere */
  const int L = o.model.moe_layers, R = 4;
  o.model.routing.tree_sibling.n = 0;
  o.model.routing.tree_repeat.n = L;
  for (int l = 0; l < L; l++) o.model.routing.tree_repeat.v[l] = l < R ? 1.0 : 0.0;
  o.model.routing.locality = o.model.routing.locality_first = o.model.routing.locality_last = 0;
  o.model.routing.request_bias = 0;
  amoe_err e;
  amoe_source *src;
  CHECK(amoe_source_open(&src, &o.workload, &o.model, &e) == AMOE_OK, "%s", e.msg);
  amoe_block b;
  amoe_block_init(&b, L, o.model.experts, amoe_source_m(src));
  long pairs = 0, same_in = 0, same_out = 0, out = 0;
  const int k = o.model.top_k;
  while (amoe_source_next(src, &b, &e) == AMOE_OK) {
    int depth[AMOE_MAX_NODES], rank[AMOE_MAX_NODES];
    for (int t = 0; t < b.n; t++) {
      depth[t] = t ? depth[b.parent[t]] + 1 : 0;
      rank[t] = 0;
      for (int u = 1; u < b.n; u++)
        rank[t] += u != t && b.parent[u] == b.parent[t] &&
                   (b.logp[u] > b.logp[t] || (b.logp[u] == b.logp[t] && u < t));
    }
    for (int t = 1; t < b.n; t++) {
      int tw = -1;
      for (int u = 1; u < t && tw < 0; u++)
        if (depth[u] == depth[t] && rank[u] == rank[t]) tw = u;
      if (tw < 0) continue;
      pairs++;
      for (int l = 0; l < L; l++) {
        const int same = !memcmp(amoe_block_ids(&b, l, t), amoe_block_ids(&b, l, tw), (size_t)k * sizeof(uint16_t));
        if (l < R) same_in += same;
        else same_out += same, out++;
      }
    }
  }
  amoe_block_free(&b);
  amoe_source_close(src);
  CHECK(pairs > 100, "the 32-node trees have twins (%ld)", pairs);
  CHECK(same_in == pairs * R, "a repeat routes as its twin at every layer it repeats at (%ld of %ld)", same_in,
        pairs * R);
  CHECK(same_out < out / 2, "and as itself past them (%ld of %ld the same)", same_out, out);
}

/* workload.route_hold: a request routes every H-th block afresh
 * (staggered by request) and repeats its routes between, while its trees
 * and acceptance stay as without it; what a pass of several requests pays
 * for keeps its distribution (the union and the busiest expert of 16
 * requests' chains, step by step, against every block routed). */
static void route_hold(void) {
  enum { R = 16, S = 96, H = 8 };
  amoe_spec o = spec_for("qwen3-30b-a3b");
  o.workload.depth = o.workload.top_k = 1;
  o.workload.nodes = o.workload.candidates = 2;
  o.workload.tau = 1.7;
  o.workload.tokens_per_request = 256;
  o.workload.blocks = R * 256;
  const int L = o.model.moe_layers, E = o.model.experts, k = o.model.top_k;
  static uint8_t parents[2][R][S][2], acc[2][R][S][2];
  static uint16_t first[R][64 * 2 * 32];
  static uint16_t cnt[2][S][64][128];
  long held = 0, held_same = 0, fresh = 0, fresh_moved = 0, first_same = 0;
  for (int v = 0; v < 2; v++) {
    o.workload.route_hold = v ? H : 0;
    amoe_err e;
    amoe_source *src;
    CHECK(amoe_source_open(&src, &o.workload, &o.model, &e) == AMOE_OK, "%s", e.msg);
    const int m = amoe_source_m(src);
    amoe_block b;
    amoe_block_init(&b, L, E, m);
    static uint16_t prev[64 * 2 * 32];
    while (amoe_source_next(src, &b, &e) == AMOE_OK && b.request < R) {
      const int r = (int)b.request, st = (int)b.step;
      const size_t all = (size_t)L * b.n * m;
      if (st == 0 && v == 0) memcpy(first[r], b.ids, all * sizeof *b.ids);
      if (st == 0 && v == 1) first_same += !memcmp(first[r], b.ids, all * sizeof *b.ids);
      if (v == 1 && st > 0) {
        const int same = !memcmp(prev, b.ids, all * sizeof *b.ids);
        if ((st + r) % H) held++, held_same += same;
        else fresh++, fresh_moved += !same;
      }
      memcpy(prev, b.ids, all * sizeof *b.ids);
      if (st >= S) continue;
      for (int t = 0; t < b.n; t++) {
        parents[v][r][st][t] = (uint8_t)(b.parent[t] + 1);
        acc[v][r][st][t] = b.accepted[t];
        for (int l = 0; l < L; l++)
          for (int j = 0; j < k; j++) cnt[v][st][l][amoe_block_ids(&b, l, t)[j]]++;
      }
    }
    amoe_block_free(&b);
    amoe_source_close(src);
  }
  CHECK(!memcmp(parents[0], parents[1], sizeof parents[0]) && !memcmp(acc[0], acc[1], sizeof acc[0]),
        "held routes leave every tree and its acceptance as they were");
  CHECK(first_same == R, "a request's first block routes as without holding (%ld of %d)", first_same, R);
  CHECK(held > 1000 && held_same == held, "a held block repeats the last routes (%ld of %ld)", held_same, held);
  CHECK(fresh > 100 && fresh_moved == fresh, "every %d-th block routes afresh (%ld of %ld moved)", H, fresh_moved,
        fresh);
  double u[2] = {0}, mx[2] = {0};
  for (int v = 0; v < 2; v++)
    for (int st = 0; st < S; st++)
      for (int l = 0; l < L; l++) {
        int n = 0, top = 0;
        for (int x = 0; x < E; x++) n += cnt[v][st][l][x] > 0, top = cnt[v][st][l][x] > top ? cnt[v][st][l][x] : top;
        u[v] += n / (double)(S * L);
        mx[v] += top / (double)(S * L);
      }
  o.workload.route_hold = H;
  CHECK(amoe_calibration_workload(&o).route_hold == 0,
        "the calibration routes every block (its blocks stand for a step table's independent requests)");
  CHECK(fabs(u[1] / u[0] - 1) < 0.01 && fabs(mx[1] / mx[0] - 1) < 0.02,
        "a pass of %d requests pays for the same: union %.2f vs %.2f, busiest expert %.3f vs %.3f", R, u[1], u[0],
        mx[1], mx[0]);
}

int main(int argc, char **argv) {
  const char *fixture = argc > 1 ? argv[1] : "fixtures/accept_lengths.txt";
  amoe_err e;
  test_normal();
  generic_twins();
  route_hold();
  score_shape();
  fitted_presets();
  /* Mixtral curve (docs/design.md §5): within 3% at every W with the defaults. */
  amoe_spec s = spec_for("mixtral-8x7b");
  s.workload.blocks = 4000;
  s.workload.seed = 11;
  amoe_source *src;
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  amoe_inspect_stats st;
  CHECK(amoe_inspect(src, 32, 8, 2, AMOE_ROUTER_SOFTMAX, &st, &e) == AMOE_OK, "%s", e.msg);
  const double real[] = {2.0, 3.31, 4.98, 6.62, 7.58};
  for (int i = 1; i < AMOE_INSPECT_NW; i++)
    CHECK(fabs(st.window_union[i] / real[i] - 1) <= 0.03, "W=%d: synthetic %.3f vs real %.2f",
          amoe_inspect_windows[i], st.window_union[i], real[i]);
  CHECK(fabs(st.tau_mean - 4.4) < 0.15, "tau %.3f close to the 4.4 target", st.tau_mean);
  /* Determinism: the same seed gives the same blocks. */
  amoe_block a, b;
  amoe_block_init(&a, 32, 8, 8);
  amoe_block_init(&b, 32, 8, 8);
  amoe_source *src2;
  CHECK(amoe_source_open(&src2, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  amoe_source_rewind(src, &e);
  int same = 1;
  for (int i = 0; i < 50; i++) {
    amoe_source_next(src, &a, &e);
    amoe_source_next(src2, &b, &e);
    same &= a.n == b.n && !memcmp(a.ids, b.ids, (size_t)a.n * 32 * 8 * 2) &&
            !memcmp(a.logits, b.logits, (size_t)a.n * 32 * 8 * 2) && !memcmp(a.accepted, b.accepted, (size_t)a.n);
  }
  CHECK(same, "same seed, same blocks");
  amoe_source_close(src2);
  amoe_source_close(src);
  /* request_bias concentrates a request on fewer experts (and is off by default) */
  {
    amoe_spec o = spec_for("olmoe-1b-7b");
    o.workload.blocks = 300;
    o.workload.routing.skew = (amoe_layer_values){.n = 1, .v = {amoe_gen_default_skew(64)}};
    double w16[2];
    for (int i = 0; i < 2; i++) {
      o.workload.routing.request_bias = i ? 2.0 : 0.0;
      w16[i] = stats_of(&o).window_union[4];
    }
    CHECK(w16[1] < w16[0] - 5, "request_bias 2 narrows the W=16 union: %.2f vs %.2f", w16[1], w16[0]);
  }
  tree_checks();
  /* Replay: τ per block follows the file, clamped to depth + 1 = 6. */
  uint16_t *rep;
  int nrep;
  CHECK(amoe_replay_load(fixture, &rep, &nrep, &e) == AMOE_OK, "%s", e.msg);
  double want = 0;
  for (int i = 0; i < nrep; i++) want += rep[i] > 6 ? 6 : rep[i];
  want /= nrep;
  amoe_spec q = spec_for("olmoe-1b-7b");
  snprintf(q.workload.replay, sizeof q.workload.replay, "%s", fixture);
  q.workload.blocks = nrep * 40;
  q.workload.tokens_per_request = 1 << 30; /* one request: the replay runs in order */
  CHECK(amoe_source_open(&src, &q.workload, &q.model, &e) == AMOE_OK, "%s", e.msg);
  amoe_block_free(&a);
  amoe_block_init(&a, 16, 64, 32);
  long hist_got[8] = {0}, hist_want[8] = {0}, n = 0;
  double sum = 0;
  while (amoe_source_next(src, &a, &e) == AMOE_OK) {
    int tau = amoe_block_accepted_count(&a);
    hist_got[tau]++;
    sum += tau;
    n++;
  }
  for (int i = 0; i < q.workload.blocks; i++) hist_want[rep[i % nrep] > 6 ? 6 : rep[i % nrep]]++;
  CHECK(fabs(sum / n - want) < 1e-12, "replayed tau mean %.4f vs file %.4f", sum / n, want);
  CHECK(!memcmp(hist_got, hist_want, sizeof hist_got), "replayed histogram equals the clamped file's");
  /* ... and the run's summary τ under natural routing equals it too. */
  q.npolicies = 0;
  amoe_diag d = {0};
  snprintf(q.hw.name, sizeof q.hw.name, "x");
  q.hw.hbm_bw = q.hw.h2d_bw = q.hw.peak_flops = 1e12;
  q.hw.moe_eta = 1;
  CHECK(amoe_spec_validate(&q, "test", &d) == AMOE_OK, "validate");
  amoe_diag_free(&d);
  static amoe_offline offline = {.p = {1}, .n = 1};
  amoe_row_result rows[2];
  CHECK(amoe_run(&q, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  amoe_summary m;
  amoe_summarize(&rows[0].tot, 0, &m);
  CHECK(fabs(m.tau_mean - want) < 1e-12, "summary tau %.4f vs %.4f", m.tau_mean, want);
  amoe_row_result_free(&rows[0]);
  amoe_source_close(src);
  free(rep);
  amoe_block_free(&a);
  amoe_block_free(&b);
  return check_done();
}
