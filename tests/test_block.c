/* Blocks: binary16 logits (every value, rounding to even, key order), top-m
 * selection against a plain sort, and the pair checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "check.h"
#include "rng.h"
#include "sort.h"
#include "x86.h"

/* The value of f16 bits h, computed the long way. */
static double f16_value(unsigned h) {
  int s = h >> 15, ex = (h >> 10) & 31, mant = h & 1023;
  double v = ex == 0 ? ldexp(mant, -24) : (ex == 31 ? (mant ? NAN : INFINITY) : ldexp(1024 + mant, ex - 25));
  return s ? -v : v;
}

static void test_f16(void) {
  int bad = 0;
  for (unsigned h = 0; h < 65536; h++) { /* every value converts exactly, and back */
    double v = f16_value(h);
    float f = amoe_f16_to_f32((amoe_f16)h);
    if (isnan(v) ? !isnan(f) : (double)f != v || !signbit(f) != !signbit(v)) bad++;
    if (!isnan(v) && h != 0x8000 && amoe_f16_from_f32(f) != h) bad++;
    if (amoe_f16_of_key(amoe_f16_key((amoe_f16)h)) != h) bad++;
  }
  CHECK(bad == 0, "%d f16 values do not convert exactly", bad);
  CHECK(amoe_f16_from_f32(-0.0f) == 0, "-0 is stored as +0");
  CHECK(amoe_f16_bad(0x8000) && amoe_f16_bad(AMOE_F16_POS_INF) && amoe_f16_bad(0x7e00) &&
            !amoe_f16_bad(AMOE_F16_NEG_INF) && !amoe_f16_bad(0x3c00),
        "usable logits: -inf yes; NaN, +inf, -0 no");
  /* rounding: between two neighbours (positive finite), the midpoint goes to
   * the even one, anything off the midpoint to the nearer one */
  bad = 0;
  for (unsigned h = 0; h < 0x7bff; h++) {
    float lo = amoe_f16_to_f32((amoe_f16)h), hi = amoe_f16_to_f32((amoe_f16)(h + 1));
    float mid = (float)(((double)lo + hi) / 2); /* exact: 12 significant bits */
    unsigned even = (h & 1) ? h + 1 : h;
    if (amoe_f16_from_f32(mid) != even) bad++;
    if (amoe_f16_from_f32(nextafterf(mid, 0)) != h) bad++;
    if (amoe_f16_from_f32(nextafterf(mid, INFINITY)) != h + 1) bad++;
    if (amoe_f16_from_f32(-nextafterf(mid, 0)) != (h ? (h | 0x8000) : 0)) bad++;
  }
  CHECK(bad == 0, "%d roundings are not to nearest even", bad);
  CHECK(amoe_f16_from_f32(65519.0f) == 0x7bff && amoe_f16_from_f32(65520.0f) == AMOE_F16_POS_INF &&
            amoe_f16_from_f32(-1e30f) == AMOE_F16_NEG_INF,
        "overflow to inf at 65520");
  /* keys order the numbers */
  bad = 0;
  amoe_rng r;
  amoe_rng_seed(&r, 7, 0, 0);
  for (int i = 0; i < 200000; i++) {
    amoe_f16 a = (amoe_f16)(amoe_rng_next(&r) & 0xffff), b = (amoe_f16)(amoe_rng_next(&r) & 0xffff);
    double va = f16_value(a), vb = f16_value(b);
    if (isnan(va) || isnan(vb) || a == 0x8000 || b == 0x8000) continue;
    if ((va > vb) != (amoe_f16_key(a) > amoe_f16_key(b))) bad++;
  }
  CHECK(bad == 0, "%d key comparisons disagree with the numbers", bad);
}

/* set_full keeps the top m of E by (f16 logit desc, id asc), sorted. */
static void test_set_full(void) {
  amoe_rng r;
  amoe_rng_seed(&r, 11, 0, 0);
  const int shapes[][2] = {{8, 8}, {16, 5}, {64, 32}, {128, 32}, {256, 32}, {160, 100}, {300, 300}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int E = shapes[s][0], m = shapes[s][1];
    amoe_block b;
    amoe_err e;
    amoe_block_init(&b, 1, E, m);
    CHECK(amoe_block_reserve(&b, 1, &e) == AMOE_OK, "%s", e.msg);
    float z[AMOE_MAX_EXPERTS];
    for (int trial = 0; trial < 200; trial++) {
      for (int x = 0; x < E; x++) /* coarse values, so ties after rounding are common */
        z[x] = (float)((int)(amoe_rng_unif(&r) * 40) - 20) * (trial & 1 ? 0.5f : 0.013f);
      amoe_block_set_full(&b, 0, 0, z);
      /* the reference: rank every expert by a plain comparison */
      int ok = 1;
      for (int j = 0; j < m && ok; j++) {
        int x = b.ids[j];
        float v = amoe_f16_to_f32(amoe_f16_from_f32(z[x]));
        int before = 0;
        for (int y = 0; y < E; y++) {
          float u = amoe_f16_to_f32(amoe_f16_from_f32(z[y]));
          before += u > v || (u == v && y < x);
        }
        ok = before == j && b.logits[j] == amoe_f16_from_f32(z[x]);
      }
      CHECK(ok, "E %d m %d trial %d: stored pairs are not the sorted top m", E, m, trial);
      CHECK(amoe_block_check_pairs(&b, 1, &e) == AMOE_OK, "%s", e.msg);
    }
    amoe_block_free(&b);
  }
}

/* Two one-layer, one-node blocks of E experts and m stored logits: a
 * fast path's output and its plain twin's. */
static void one_row_pair(amoe_block *a, amoe_block *b, int E, int m) {
  amoe_err e;
  amoe_block_init(a, 1, E, m);
  amoe_block_init(b, 1, E, m);
  CHECK(amoe_block_reserve(a, 1, &e) == AMOE_OK && amoe_block_reserve(b, 1, &e) == AMOE_OK, "%s", e.msg);
}

/* The vector selection (where this CPU has it) against the portable one,
 * bit for bit, on ordinary, coarse (many ties) and special values: -0,
 * f16 subnormals, overflow to ±inf, NaN. */
static void test_set_full_versions(void) {
  amoe_rng r;
  amoe_rng_seed(&r, 12, 0, 0);
  const int shapes[][2] = {{16, 5},   {32, 32},  {32, 3},   {64, 32},  {96, 20},  {128, 32},
                           {128, 27}, {128, 8},  {128, 16}, {128, 17}, {128, 64}, {160, 32},
                           {192, 32}, {256, 32}, {256, 64}, {1024, 32}, {1024, 40}, {32, 1},
                           {64, 4},   {256, 8},  {384, 6},  {384, 8},  {1024, 8}};
  int same = 1;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int E = shapes[s][0], m = shapes[s][1];
    amoe_block a, b;
    one_row_pair(&a, &b, E, m);
    static const float special[] = {-0.0f, 0.0f, 1e-7f, -3e-6f, 6.1e-5f, 7e4f, -7e4f, 65519.0f, -65520.0f};
    float z[AMOE_MAX_EXPERTS];
    for (int trial = 0; trial < 300; trial++) {
      for (int x = 0; x < E; x++) {
        const double u = amoe_rng_unif(&r);
        z[x] = trial % 3 == 0   ? (float)(amoe_rng_normal(&r) * 2)
               : trial % 3 == 1 ? (float)((int)(u * 20) - 10) * 0.25f
               : u < 0.2        ? special[(int)(amoe_rng_unif(&r) * 9)]
                                : (float)amoe_rng_normal(&r);
      }
      if (trial % 7 == 6) z[trial % E] = NAN;
      if (trial == 299) /* 16 high keys, one per 16-lane column, the rest low: a bracket that
                           assumes 16 keys reach the lowest column maximum fails at m = 17 */
        for (int x = 0; x < E; x++) z[x] = x < 16 ? 10.0f + 0.5f * (float)x : -0.01f * (float)x;
      amoe_block_set_full(&a, 0, 0, z);
      amoe_block_set_full_generic(&b, 0, 0, z);
      same &= !memcmp(a.ids, b.ids, (size_t)m * 2) && !memcmp(a.logits, b.logits, (size_t)m * 2);
    }
    amoe_block_free(&a);
    amoe_block_free(&b);
  }
  CHECK(same, "the vector top-m differs from the portable one");
}

/* The score shape's rescaling, vector (where this CPU has it) against
 * portable, bit for bit: stored rows of ordinary, coarse (many ties, which
 * rounding merges) and special values (-inf, subnormals, -0, NaN), scaled
 * down, up and past the binary16 range. The vector path must also have
 * stored most ordinary rows itself, or the comparison proves nothing. */
static void test_scale_versions(void) {
  amoe_rng r;
  amoe_rng_seed(&r, 15, 0, 0);
  const int shapes[][2] = {{32, 32}, {128, 32}, {128, 16}, {128, 8}, {128, 24}, {64, 64}, {128, 17}, {256, 48}};
  static const float scales[] = {0.26f, 0.5f, 0.74f, 1.0f, 1.7f, 1e-3f, 3e4f};
  static const float special[] = {-INFINITY, 0.0f, -0.0f, 1e-7f, -3e-6f, 6.1e-5f, 7e4f, -7e4f, NAN};
  int same = 1, fast = 0, ordinary = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int E = shapes[s][0], m = shapes[s][1];
    amoe_block a, b;
    one_row_pair(&a, &b, E, m);
    float z[AMOE_MAX_EXPERTS];
    for (int trial = 0; trial < 200; trial++) {
      const int kind = trial % 3;
      for (int x = 0; x < E; x++) {
        const double u = amoe_rng_unif(&r);
        z[x] = kind == 0   ? (float)(amoe_rng_normal(&r) * 2)
               : kind == 1 ? (float)((int)(u * 20) - 10) * 0.25f + (float)(x % 3) * 1e-3f
               : u < 0.3   ? special[(int)(amoe_rng_unif(&r) * 9)]
                           : (float)amoe_rng_normal(&r);
      }
      amoe_block_set_full_generic(&a, 0, 0, z);
      if (kind == 1 && trial % 2) /* a tie whose ids run down: the plain store bumps the later one */
        for (int j = 1; j < m; j++)
          if (a.logits[j] == a.logits[j - 1]) {
            const uint16_t x = a.ids[j];
            a.ids[j] = a.ids[j - 1], a.ids[j - 1] = x;
            break;
          }
      for (size_t c = 0; c < sizeof scales / sizeof scales[0]; c++) {
        memcpy(b.ids, a.ids, (size_t)m * 2);
        memcpy(b.logits, a.logits, (size_t)m * 2);
        amoe_block_scale_logits(&b, 0, 0, scales[c]);
        amoe_f16 want[AMOE_MAX_EXPERTS];
        memcpy(want, b.logits, (size_t)m * 2);
        memcpy(b.logits, a.logits, (size_t)m * 2);
        amoe_block_scale_logits_generic(&b, 0, 0, scales[c]);
        same &= !memcmp(want, b.logits, (size_t)m * 2) && !memcmp(a.ids, b.ids, (size_t)m * 2);
#ifdef AMOE_X86_PATHS
        if (amoe_x86_avx2 && m % 16 == 0 && kind == 0 && scales[c] < 2) {
          memcpy(b.logits, a.logits, (size_t)m * 2);
          ordinary++;
          amoe_f16 old[AMOE_MAX_EXPERTS];
          fast += amoe_x86_scale_logits(b.logits, old, b.ids, m, scales[c]) != 0; /* stored (2: the order fix left) */
        }
#endif
      }
    }
    amoe_block_free(&a);
    amoe_block_free(&b);
  }
  CHECK(same, "the vector rescaling differs from the portable one");
  CHECK(fast * 2 >= ordinary, "the vector rescaling stored %d of %d ordinary rows itself", fast, ordinary);
}

/* amoe_block_stash (non-temporal stores on x86) against amoe_block_copy
 * (memcpy), its plain twin: the same block, field for field, for sizes
 * around the vector width. */
static void test_stash(void) {
  amoe_rng r;
  amoe_rng_seed(&r, 14, 0, 0);
  int same = 1;
  for (int n = 1; n <= 40; n += 3) {
    amoe_block a, s, c;
    amoe_err e;
    amoe_block_init(&a, 3, 64, 17);
    amoe_block_init(&s, 1, 2, 1); /* (other shapes: the copy re-initialises) */
    amoe_block_init(&c, 1, 2, 1);
    CHECK(amoe_block_reserve(&a, n, &e) == AMOE_OK, "%s", e.msg);
    float z[64];
    for (int t = 0; t < n; t++) {
      a.parent[t] = t - 1;
      a.logp[t] = a.score[t] = (float)-t;
      a.accepted[t] = t < 2;
      for (int l = 0; l < 3; l++) {
        for (int x = 0; x < 64; x++) z[x] = (float)amoe_rng_normal(&r);
        amoe_block_set_full(&a, l, t, z);
      }
    }
    CHECK(amoe_block_finish(&a, AMOE_CHECK_ALL, &e) == AMOE_OK, "%s", e.msg);
    a.index = (uint64_t)n;
    CHECK(amoe_block_stash(&s, &a, &e) == AMOE_OK && amoe_block_copy(&c, &a, &e) == AMOE_OK, "%s", e.msg);
    const size_t cells = (size_t)3 * n * 17;
    same &= s.n == c.n && s.index == c.index && !memcmp(s.ids, c.ids, cells * 2) &&
            !memcmp(s.logits, c.logits, cells * 2) && !memcmp(s.parent, c.parent, (size_t)n * 4) &&
            !memcmp(s.score, c.score, (size_t)n * 4) && !memcmp(s.depth, c.depth, (size_t)n) &&
            !memcmp(s.ids, a.ids, cells * 2);
    amoe_block_free(&a);
    amoe_block_free(&s);
    amoe_block_free(&c);
  }
  CHECK(same, "amoe_block_stash differs from amoe_block_copy");
}

/* Each kind of bad pair is found and named. */
static void test_pair_checks(void) {
  amoe_block b;
  amoe_err e;
  amoe_block_init(&b, 2, 16, 4);
  CHECK(amoe_block_reserve(&b, 3, &e) == AMOE_OK, "%s", e.msg);
  float z[16];
  for (int l = 0; l < 2; l++)
    for (int t = 0; t < 3; t++) {
      for (int x = 0; x < 16; x++) z[x] = (float)((x * 7 + t * 3 + l) % 16) * 0.25f;
      amoe_block_set_full(&b, l, t, z);
    }
  CHECK(amoe_block_check_pairs(&b, 1, &e) == AMOE_OK, "%s", e.msg);
  uint16_t *id = b.ids + (1 * 3 + 2) * 4; /* layer 1, node 2 */
  amoe_f16 *lg = b.logits + (1 * 3 + 2) * 4;
  uint16_t saved = id[2];
  id[2] = 16;
  CHECK(amoe_block_check_pairs(&b, 1, &e) != AMOE_OK && strstr(e.msg, "layer 1 node 2: expert id 16 out of range"),
        "range: %s", e.msg);
  id[2] = id[0];
  CHECK(amoe_block_check_pairs(&b, 1, &e) != AMOE_OK && strstr(e.msg, "stored twice"), "twice: %s", e.msg);
  CHECK(amoe_block_check_pairs(&b, 0, &e) == AMOE_OK, "the order alone is fine here: %s", e.msg);
  id[2] = saved;
  amoe_f16 zs = lg[1];
  lg[1] = lg[3];
  CHECK(amoe_block_check_pairs(&b, 1, &e) != AMOE_OK && strstr(e.msg, "not in order"), "order: %s", e.msg);
  lg[1] = 0x7e00;
  CHECK(amoe_block_check_pairs(&b, 1, &e) != AMOE_OK && strstr(e.msg, "not a number"), "NaN: %s", e.msg);
  lg[1] = zs;
  lg[0] = AMOE_F16_POS_INF;
  CHECK(amoe_block_check_pairs(&b, 1, &e) != AMOE_OK && strstr(e.msg, "not a number"), "+inf: %s", e.msg);
  amoe_block_free(&b);
}

/* amoe_sort against qsort on (key, position): the same stable order, on
 * arrays full of ties. */
typedef struct {
  int key, pos;
} kp;
static int kp_before(const void *a, const void *b, const void *ctx) {
  (void)ctx;
  return ((const kp *)a)->key < ((const kp *)b)->key;
}
static int kp_cmp(const void *a, const void *b) {
  const kp *x = a, *y = b;
  return x->key != y->key ? (x->key > y->key) - (x->key < y->key) : (x->pos > y->pos) - (x->pos < y->pos);
}
static void test_sort(void) {
  amoe_rng r;
  amoe_rng_seed(&r, 5, 5, 5);
  int bad = 0;
  for (int trial = 0; trial < 500; trial++) {
    const int n = trial % 70;
    kp a[70], b[70];
    for (int i = 0; i < n; i++) a[i] = b[i] = (kp){(int)(amoe_rng_unif(&r) * (1 + trial % 9)), i};
    amoe_sort(a, n, sizeof *a, kp_before, NULL);
    qsort(b, (size_t)n, sizeof *b, kp_cmp);
    bad += memcmp(a, b, (size_t)n * sizeof *a) != 0;
  }
  CHECK(bad == 0, "amoe_sort is qsort's stable order in %d of 500 arrays", 500 - bad);
}

int main(void) {
  test_sort();
  test_f16();
  test_set_full();
  test_set_full_versions();
  test_scale_versions();
  test_pair_checks();
  test_stash();
  return check_done();
}
