/* .amt round trip, streaming, and every way a file can be broken. */
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gen.h"
#include "router.h"
#include "trace.h"

static amoe_gen_params params(void) {
  amoe_gen_params p = {0};
  p.seed = 5;
  p.layers = 4;
  p.experts = 16;
  p.top_k = 2;
  p.m = 8;
  p.depth = 3;
  p.branch = 3;
  p.nodes = 10;
  p.candidates = 12;
  p.tau = 2.0;
  p.temperature = 0.7;
  p.locality = 0.5;
  p.layer_correlation = 0.5;
  p.skew = 0.5;
  p.noise = 1.0;
  p.tokens_per_request = 20;
  return p;
}

/* The format's checksum written out plainly, lane by lane: the library's
 * (its AVX2 path where the CPU has one) must give the same value. */
static uint64_t reference_checksum(const unsigned char *p, size_t bytes) {
  uint64_t acc[8], key[8];
  for (int j = 0; j < 8; j++) {
    acc[j] = 0x243f6a8885a308d3ULL * (uint64_t)(j + 1);
    key[j] = 0x13198a2e03707344ULL ^ ((uint64_t)j << 56);
  }
  size_t words = bytes / 8, i = 0;
  for (; i + 8 <= words; i += 8)
    for (int j = 0; j < 8; j++) {
      uint64_t w;
      memcpy(&w, p + 8 * (i + j), 8);
      uint64_t x = w ^ key[j];
      acc[j] += (x & 0xffffffffULL) * (x >> 32) + w;
      key[j] += 0x9e3779b97f4a7c15ULL;
    }
  uint64_t h = bytes;
  for (; i < words; i++) {
    uint64_t w;
    memcpy(&w, p + 8 * i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (size_t k = words * 8; k < bytes; k++) h = (h ^ p[k]) * 0x100000001b3ULL;
  for (int j = 0; j < 8; j++) h = (h ^ acc[j]) * 0x9e3779b97f4a7c15ULL, h ^= h >> 32;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

static size_t pad8(size_t x) { return (x + 7) & ~(size_t)7; }

/* Writes data to path with the three checksums of the block at `off`
 * recomputed (its second section starts `top` bytes into the payload, its
 * third `rest`): a file that is wrong inside but whole to the checksums
 * (made by hand, not by damage). */
static void write_forged(const char *path, unsigned char *data, long size, uint64_t off, size_t top, size_t rest) {
  uint64_t pb;
  memcpy(&pb, data + off + 8, 8);
  const unsigned char *pl = data + off + 40;
  uint64_t ck[3] = {amoe_trace_checksum(pl, top), amoe_trace_checksum(pl + top, rest - top),
                    amoe_trace_checksum(pl + rest, pb - rest)};
  memcpy(data + off + 16, ck, 24);
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, (size_t)size, f);
  fclose(f);
}

static int same_block(const amoe_block *a, const amoe_block *b) {
  if (a->n != b->n || a->request != b->request || a->step != b->step) return 0;
  size_t n = (size_t)a->n, lnm = (size_t)a->layers * n * a->m;
  return !memcmp(a->parent, b->parent, n * 4) && !memcmp(a->logp, b->logp, n * 4) &&
         !memcmp(a->score, b->score, n * 4) && !memcmp(a->accepted, b->accepted, n) &&
         !memcmp(a->ids, b->ids, lnm * 2) && !memcmp(a->logits, b->logits, lnm * 2);
}

/* A block read without logits keeps its top-k ids alone (k per
 * node-layer: the reader's widen_top_ids, its k = 8 path and the general
 * one): the same ids the whole block stores first, at every node-layer. */
static void top_ids_without_logits(int experts, int k, int m) {
  char path[] = "/tmp/amoe_test_topids_XXXXXX";
  close(mkstemp(path));
  amoe_err e;
  amoe_gen_params p = params();
  p.experts = experts;
  p.top_k = k;
  p.m = m;
  amoe_gen *g;
  CHECK(amoe_gen_open(&g, &p, &e) == AMOE_OK, "%s", e.msg);
  amoe_trace_writer *w;
  CHECK(amoe_trace_create(&w, path, 4, experts, k, m, "{}", &e) == AMOE_OK, "%s", e.msg);
  amoe_block blocks[6];
  amoe_gen_begin_request(g, 0);
  int nb = 0;
  for (; nb < 6; nb++) {
    amoe_block_init(&blocks[nb], 4, experts, m);
    if (amoe_gen_next(g, &blocks[nb], &e) != AMOE_OK) {
      amoe_block_free(&blocks[nb]);
      break;
    }
    blocks[nb].index = (uint64_t)nb;
    CHECK(amoe_trace_write(w, &blocks[nb], &e) == AMOE_OK, "%s", e.msg);
  }
  CHECK(amoe_trace_close(w, &e) == AMOE_OK, "%s", e.msg);
  amoe_trace_reader *r;
  CHECK(amoe_trace_open(&r, path, &e) == AMOE_OK, "%s", e.msg);
  amoe_trace_want_logits(r, AMOE_LOGITS_NONE);
  amoe_block b;
  amoe_block_init(&b, 4, experts, m);
  int bad = 0;
  for (int i = 0; i < nb; i++) {
    CHECK(amoe_trace_next(r, &b, &e) == AMOE_OK, "%s", e.msg);
    bad += b.m != k || b.logits != NULL;
    for (int l = 0; l < 4 && !bad; l++)
      for (int t = 0; t < b.n; t++) bad += memcmp(amoe_block_ids(&b, l, t), amoe_block_ids(&blocks[i], l, t), 2 * (size_t)k) != 0;
  }
  CHECK(nb > 0 && !bad, "top-%d of %d ids without logits: %d blocks differ", k, m, bad);
  amoe_trace_close_reader(r);
  amoe_block_free(&b);
  for (int i = 0; i < nb; i++) amoe_block_free(&blocks[i]);
  amoe_gen_close(g);
  remove(path);
}

int main(void) {
  top_ids_without_logits(64, 8, 32);
  top_ids_without_logits(16, 2, 8);
  top_ids_without_logits(64, 6, 24);
  char path[] = "/tmp/amoe_test_trace_XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  amoe_err e;
  amoe_gen_params p = params();
  amoe_gen *g;
  CHECK(amoe_gen_open(&g, &p, &e) == AMOE_OK, "%s", e.msg);
  amoe_block blocks[12];
  amoe_trace_writer *w;
  CHECK(amoe_trace_create(&w, path, 4, 16, 2, 8, "{\"test\":1}", &e) == AMOE_OK, "%s", e.msg);
  int nb = 0;
  for (uint32_t r = 0; r < 3 && nb < 12; r++) {
    amoe_gen_begin_request(g, r);
    for (;;) {
      if (nb == 12) break;
      amoe_block_init(&blocks[nb], 4, 16, 8);
      const amoe_status rc = amoe_gen_next(g, &blocks[nb], &e);
      if (rc != AMOE_OK) {
        amoe_block_free(&blocks[nb]);
        break;
      }
      blocks[nb].index = (uint64_t)nb;
      CHECK(amoe_trace_write(w, &blocks[nb], &e) == AMOE_OK, "%s", e.msg);
      nb++;
    }
  }
  CHECK(amoe_trace_close(w, &e) == AMOE_OK, "%s", e.msg);
  amoe_trace_reader *r;
  CHECK(amoe_trace_open(&r, path, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_trace_info_of(r)->blocks == (uint64_t)nb, "block count");
  CHECK(!strcmp(amoe_trace_info_of(r)->provenance, "{\"test\":1}"), "provenance");
  amoe_block b;
  amoe_block_init(&b, 4, 16, 8);
  for (int pass = 0; pass < 2; pass++) { /* and again after a rewind */
    for (int i = 0; i < nb; i++) {
      const amoe_status rc = amoe_trace_next(r, &b, &e);
      CHECK(rc == AMOE_OK && same_block(&b, &blocks[i]), "block %d differs after the round trip", i);
    }
    CHECK(amoe_trace_next(r, &b, &e) == AMOE_END, "end of trace");
    CHECK(amoe_trace_rewind(r, &e) == AMOE_OK, "rewind");
  }
  /* the stored softmax normalisers: each is its logits' own, and the top-k
   * probabilities from them are bit for bit those from the logits alone
   * (a generated block carries none) */
  {
    int same = 1, pairs = 0;
    for (int i = 0; i < nb; i++) {
      same &= amoe_trace_next(r, &b, &e) == AMOE_OK && b.softmax_inv && !blocks[i].softmax_inv &&
              amoe_router_check_inv(&b, &e) == AMOE_OK;
      for (int l = 0; l < 4; l++)
        for (int k = 2; k <= 8; k += 6) { /* 8: the one-register path */
          float all[AMOE_MAX_NODES * 8];
          int nodes[AMOE_MAX_NODES];
          for (int t = 0; t < b.n; t++) nodes[t] = b.n - 1 - t; /* any order */
          const int nn = b.n - l % 4 > 0 ? b.n - l % 4 : b.n; /* (and counts that are not multiples of 4) */
          amoe_router_probs_nodes(&b, l, nodes, nn, AMOE_ROUTER_SOFTMAX, k, all);
          for (int t = b.n - nn; t < b.n; t++) { /* the nodes listed */
            float x[8], y[8];
            amoe_router_probs_top(&b, l, t, AMOE_ROUTER_SOFTMAX, k, x);
            amoe_router_probs_top(&blocks[i], l, t, AMOE_ROUTER_SOFTMAX, k, y);
            same &= !memcmp(x, y, (size_t)k * sizeof *x) && !memcmp(all + t * k, y, (size_t)k * sizeof *x);
            pairs++;
          }
        }
    }
    CHECK(same && pairs > 100, "probabilities from the stored normalisers differ (%d compared)", pairs);
  }
  /* asked for the top-k only: each node-layer's first k logits (b->lm =
   * k), the same normalisers, so the same top-k probabilities */
  CHECK(amoe_trace_rewind(r, &e) == AMOE_OK, "rewind");
  amoe_trace_want_logits(r, AMOE_LOGITS_TOP);
  {
    int same = 1;
    for (int i = 0; i < nb; i++) {
      same &= amoe_trace_next(r, &b, &e) == AMOE_OK && b.lm == 2 && b.m == 8 && b.softmax_inv &&
              !memcmp(b.ids, blocks[i].ids, (size_t)4 * b.n * 8 * 2);
      for (int l = 0; l < 4 && same; l++)
        for (int t = 0; t < b.n; t++) {
          float x[2], y[2];
          same &= !memcmp(amoe_block_logits(&b, l, t), blocks[i].logits + ((size_t)l * b.n + t) * 8, 4);
          amoe_router_probs_top(&b, l, t, AMOE_ROUTER_SOFTMAX, 2, x);
          amoe_router_probs_top(&blocks[i], l, t, AMOE_ROUTER_SOFTMAX, 2, y);
          same &= !memcmp(x, y, sizeof x);
          amoe_router_probs_top(&b, l, t, AMOE_ROUTER_SIGMOID_NORM, 2, x);
          amoe_router_probs_top(&blocks[i], l, t, AMOE_ROUTER_SIGMOID_NORM, 2, y);
          same &= !memcmp(x, y, sizeof x);
        }
    }
    CHECK(same, "the top-k read differs from the blocks written");
    CHECK(amoe_block_check_pairs(&b, 1, &e) != AMOE_OK && strstr(e.msg, "without all its logits"),
          "a top-k block cannot be checked as a whole: %s", e.msg);
  }
  amoe_trace_close_reader(r);

  /* Read the file's bytes, then break it in every way. */
  FILE *f = fopen(path, "rb");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *data = malloc((size_t)size);
  CHECK(fread(data, 1, (size_t)size, f) == (size_t)size, "read");
  fclose(f);
  char bad[64];
  snprintf(bad, sizeof bad, "%s.bad", path);
  long cuts[] = {0, 10, 60, 200, size / 2, size - 9};
  for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
    f = fopen(bad, "wb");
    fwrite(data, 1, (size_t)cuts[c], f);
    fclose(f);
    amoe_status st = amoe_trace_open(&r, bad, &e);
    CHECK(st != AMOE_OK, "a file cut at %ld bytes must not open", cuts[c]);
    CHECK(strstr(e.msg, "byte offset") != NULL, "message names the byte offset: %s", e.msg);
    if (st == AMOE_OK) amoe_trace_close_reader(r);
  }
  /* flip one byte of the third block in each section: a checksum error
   * naming block 2 and the section for a reader that reads it; one that
   * does not (fewer logits wanted) reads every block */
  r = NULL;
  CHECK(amoe_trace_open(&r, path, &e) == AMOE_OK, "%s", e.msg);
  amoe_trace_close_reader(r);
  uint64_t table;
  memcpy(&table, data + 40, 8);
  uint64_t off2, pb2;
  uint32_t n2;
  memcpy(&off2, data + table + 16, 8);
  memcpy(&n2, data + off2 + 4, 4);
  memcpy(&pb2, data + off2 + 8, 8);
  const size_t top2 = 16 + 3 * pad8(4 * (size_t)n2) + pad8(n2) + pad8((size_t)4 * n2 * 8); /* 16 experts: byte ids */
  unsigned char *copy = malloc((size_t)size);
  amoe_status rc = AMOE_OK;
  int got = 0;
  static const char *const section[3] = {"in the tree and ids", "in the top-k logits", "in the logits past the top-k"};
  for (int where = 0; where < 3; where++) {
    memcpy(copy, data, (size_t)size);
    copy[off2 + 40 + (where == 0 ? 20 : where == 1 ? top2 + 1 : pb2 - 3)] ^= 0x5a;
    f = fopen(bad, "wb");
    fwrite(copy, 1, (size_t)size, f);
    fclose(f);
    for (int want = AMOE_LOGITS_ALL; want >= AMOE_LOGITS_NONE; want--) {
      CHECK(amoe_trace_open(&r, bad, &e) == AMOE_OK, "header still fine");
      amoe_trace_want_logits(r, (amoe_logits)want);
      got = 0;
      while ((rc = amoe_trace_next(r, &b, &e)) == AMOE_OK) got++;
      if (want < where)
        CHECK(rc == AMOE_END && got == nb, "section %d, logits %d: every block reads (got %d, rc %d: %s)", where, want, got,
              rc, e.msg);
      else {
        CHECK(rc != AMOE_END && got == 2, "section %d, logits %d: stops at block 2 (got %d, rc %d)", where, want, got, rc);
        CHECK(strstr(e.msg, "block 2 at byte offset") && strstr(e.msg, section[where]), "message: %s", e.msg);
      }
      amoe_trace_close_reader(r);
    }
  }
  /* a bad magic */
  memcpy(copy, data, (size_t)size);
  copy[0] = 'X';
  f = fopen(bad, "wb");
  fwrite(copy, 1, (size_t)size, f);
  fclose(f);
  CHECK(amoe_trace_open(&r, bad, &e) != AMOE_OK && strstr(e.msg, "bad magic"), "bad magic: %s", e.msg);
  /* an impossible node count in block 0 */
  memcpy(copy, data, (size_t)size);
  uint64_t off0;
  memcpy(&off0, data + table, 8);
  uint32_t huge = 999999;
  memcpy(copy + off0 + 4, &huge, 4);
  f = fopen(bad, "wb");
  fwrite(copy, 1, (size_t)size, f);
  fclose(f);
  CHECK(amoe_trace_open(&r, bad, &e) == AMOE_OK, "header fine");
  CHECK(amoe_trace_next(r, &b, &e) != AMOE_OK && strstr(e.msg, "block 0 at byte offset") && strstr(e.msg, "node count"),
        "node count: %s", e.msg);
  amoe_trace_close_reader(r);
  /* the checksum: vector and plain code agree, and moving data changes it */
  {
    unsigned char buf[1031];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131 + (i >> 3));
    int same = 1;
    for (size_t len = 0; len <= sizeof buf; len += (len < 200 ? 1 : 97))
      same &= amoe_trace_checksum(buf, len) == reference_checksum(buf, len) &&
              amoe_trace_checksum_generic(buf, len) == reference_checksum(buf, len);
    CHECK(same, "vector (AVX2) and plain checksums differ");
    uint64_t c0 = amoe_trace_checksum(buf, 1024);
    unsigned char t[64];
    memcpy(t, buf, 64);
    memcpy(buf, buf + 64, 64);
    memcpy(buf + 64, t, 64);
    CHECK(amoe_trace_checksum(buf, 1024) != c0, "swapping two 64-byte stripes changes the checksum");
  }
  /* hand-made files whose checksums fit: an id out of range is still an
   * error naming block and byte offset; pairs out of order pass the reader
   * (the writer checked them) and are caught by the full check */
  uint64_t off1;
  memcpy(&off1, data + table + 8, 8);
  uint32_t n1;
  memcpy(&n1, data + off1 + 4, 4);
  const size_t ids1 = off1 + 40 + 16 + 3 * pad8(4 * (size_t)n1) + pad8(n1); /* ids are bytes: 16 experts */
  const size_t lg1 = ids1 + pad8((size_t)4 * n1 * 8), inv1 = lg1 + pad8((size_t)2 * 4 * n1 * 2),
               rest1 = inv1 + pad8((size_t)4 * 4 * n1);
  memcpy(copy, data, (size_t)size);
  copy[ids1 + 5] = 16;
  write_forged(bad, copy, size, off1, lg1 - off1 - 40, rest1 - off1 - 40);
  CHECK(amoe_trace_open(&r, bad, &e) == AMOE_OK, "header fine");
  got = 0;
  while ((rc = amoe_trace_next(r, &b, &e)) == AMOE_OK) got++;
  CHECK(rc != AMOE_END && got == 1 && strstr(e.msg, "block 1 at byte offset") && strstr(e.msg, "expert id 16 out of range"),
        "forged id: %s", e.msg);
  char want[64];
  snprintf(want, sizeof want, "offset %zu:", ids1 + 5);
  CHECK(strstr(e.msg, want) != NULL, "the offset is the id's own (%s): %s", want, e.msg);
  amoe_trace_close_reader(r);
  memcpy(copy, data, (size_t)size);
  memcpy(copy + lg1, data + lg1 + 2, 2); /* pair 0 takes pair 1's logit, pair 1 pair 0's */
  memcpy(copy + lg1 + 2, data + lg1, 2);
  write_forged(bad, copy, size, off1, lg1 - off1 - 40, rest1 - off1 - 40);
  CHECK(amoe_trace_open(&r, bad, &e) == AMOE_OK, "header fine");
  got = 0;
  int caught = 0;
  while ((rc = amoe_trace_next(r, &b, &e)) == AMOE_OK) {
    got++;
    if (amoe_block_check_pairs(&b, 1, &e) != AMOE_OK) caught += strstr(e.msg, "not in order") != NULL;
  }
  CHECK(rc == AMOE_END && got == nb && caught == 1, "order forged: read %d, caught %d (%s)", got, caught, e.msg);
  amoe_trace_close_reader(r);
  /* a forged normaliser (layer 0, node 1 of block 1) passes the reader and
   * is caught by the recomputation `inspect` runs */
  memcpy(copy, data, (size_t)size);
  {
    float v;
    memcpy(&v, copy + inv1 + 4, 4);
    v = nextafterf(v, 2 * v);
    memcpy(copy + inv1 + 4, &v, 4);
  }
  write_forged(bad, copy, size, off1, lg1 - off1 - 40, rest1 - off1 - 40);
  CHECK(amoe_trace_open(&r, bad, &e) == AMOE_OK, "header fine");
  got = caught = 0;
  while ((rc = amoe_trace_next(r, &b, &e)) == AMOE_OK) {
    got++;
    if (amoe_router_check_inv(&b, &e) != AMOE_OK)
      caught += strstr(e.msg, "layer 0 node 1: stored softmax normaliser") != NULL;
  }
  CHECK(rc == AMOE_END && got == nb && caught == 1, "normaliser forged: read %d, caught %d (%s)", got, caught, e.msg);
  amoe_trace_close_reader(r);
  /* the writer refuses a block with an expert stored twice */
  {
    amoe_block d;
    amoe_block_init(&d, 4, 16, 8);
    CHECK(amoe_block_copy(&d, &blocks[0], &e) == AMOE_OK, "%s", e.msg);
    d.ids[3] = d.ids[0];
    char p2[80];
    snprintf(p2, sizeof p2, "%s.w", path);
    CHECK(amoe_trace_create(&w, p2, 4, 16, 2, 8, "{}", &e) == AMOE_OK, "%s", e.msg);
    CHECK(amoe_trace_write(w, &d, &e) != AMOE_OK && strstr(e.msg, "block 0") && strstr(e.msg, "stored twice"),
          "writer: %s", e.msg);
    amoe_trace_abort(w);
    CHECK(access(p2, F_OK) != 0, "no file left behind");
    amoe_block_free(&d);
  }
  /* more than 256 experts: ids stored as u16, read back with and without logits */
  {
    amoe_gen_params q = params();
    q.experts = 300;
    q.layers = 2;
    amoe_gen *g2;
    CHECK(amoe_gen_open(&g2, &q, &e) == AMOE_OK, "%s", e.msg);
    char p3[80];
    snprintf(p3, sizeof p3, "%s.wide", path);
    amoe_block wb[3];
    CHECK(amoe_trace_create(&w, p3, 2, 300, 2, 8, "{}", &e) == AMOE_OK, "%s", e.msg);
    amoe_gen_begin_request(g2, 0);
    for (int i = 0; i < 3; i++) {
      amoe_block_init(&wb[i], 2, 300, 8);
      CHECK(amoe_gen_next(g2, &wb[i], &e) == AMOE_OK, "%s", e.msg);
      wb[i].index = (uint64_t)i;
      CHECK(amoe_trace_write(w, &wb[i], &e) == AMOE_OK, "%s", e.msg);
    }
    CHECK(amoe_trace_close(w, &e) == AMOE_OK, "%s", e.msg);
    int maxid = 0;
    for (int i = 0; i < 3; i++)
      for (size_t j = 0; j < (size_t)2 * wb[i].n * 8; j++) maxid = wb[i].ids[j] > maxid ? wb[i].ids[j] : maxid;
    CHECK(maxid > 255, "the test needs ids above 255 (max %d)", maxid);
    for (int want = AMOE_LOGITS_ALL; want >= AMOE_LOGITS_NONE; want--) {
      CHECK(amoe_trace_open(&r, p3, &e) == AMOE_OK, "%s", e.msg);
      amoe_trace_want_logits(r, (amoe_logits)want);
      int same = 1;
      for (int i = 0; i < 3; i++) {
        same &= amoe_trace_next(r, &b, &e) == AMOE_OK && b.n == wb[i].n &&
                !memcmp(b.ids, wb[i].ids, (size_t)2 * b.n * 8 * 2);
        if (want == AMOE_LOGITS_ALL)
          same &= b.lm == 8 && !memcmp(b.logits, wb[i].logits, (size_t)2 * b.n * 8 * 2);
        else if (want == AMOE_LOGITS_TOP)
          for (int q = 0; q < 2 * b.n; q++) same &= b.lm == 2 && !memcmp(b.logits + 2 * q, wb[i].logits + 8 * q, 4);
        else
          same &= b.logits == NULL;
      }
      CHECK(same && amoe_trace_next(r, &b, &e) == AMOE_END, "u16 ids round trip (logits %d)", want);
      amoe_trace_close_reader(r);
    }
    for (int i = 0; i < 3; i++) amoe_block_free(&wb[i]);
    amoe_gen_close(g2);
    remove(p3);
  }
  /* k = 8: with m = 8 there is no third section and every mode reads the
   * same logits; with m = 16 and 24 the reader joins the two parts in
   * 16-byte pieces (m = 12: in two calls) */
  for (int mm = 8; mm <= 24; mm += 4) {
    amoe_gen_params q = params();
    q.experts = 32;
    q.top_k = 8;
    q.m = mm;
    amoe_gen *g3;
    CHECK(amoe_gen_open(&g3, &q, &e) == AMOE_OK, "%s", e.msg);
    char p4[80];
    snprintf(p4, sizeof p4, "%s.mk", path);
    amoe_block kb[2];
    CHECK(amoe_trace_create(&w, p4, 4, 32, 8, mm, "{}", &e) == AMOE_OK, "%s", e.msg);
    amoe_gen_begin_request(g3, 0);
    for (int i = 0; i < 2; i++) {
      amoe_block_init(&kb[i], 4, 32, mm);
      CHECK(amoe_gen_next(g3, &kb[i], &e) == AMOE_OK, "%s", e.msg);
      kb[i].index = (uint64_t)i;
      CHECK(amoe_trace_write(w, &kb[i], &e) == AMOE_OK, "%s", e.msg);
    }
    CHECK(amoe_trace_close(w, &e) == AMOE_OK, "%s", e.msg);
    for (int want = AMOE_LOGITS_ALL; want >= AMOE_LOGITS_TOP; want--) {
      CHECK(amoe_trace_open(&r, p4, &e) == AMOE_OK, "%s", e.msg);
      amoe_trace_want_logits(r, (amoe_logits)want);
      int same = 1;
      for (int i = 0; i < 2; i++) {
        same &= amoe_trace_next(r, &b, &e) == AMOE_OK;
        if (want == AMOE_LOGITS_ALL || mm == 8)
          same &= b.lm == mm && same_block(&b, &kb[i]);
        else
          for (int q2 = 0; q2 < 4 * b.n; q2++)
            same &= b.lm == 8 && !memcmp(b.logits + 8 * q2, kb[i].logits + mm * q2, 16);
      }
      CHECK(same && amoe_trace_next(r, &b, &e) == AMOE_END, "k = 8, m = %d round trip (logits %d): %s", mm, want, e.msg);
      amoe_trace_close_reader(r);
    }
    for (int i = 0; i < 2; i++) amoe_block_free(&kb[i]);
    amoe_gen_close(g3);
    remove(p4);
  }
  free(copy);
  free(data);
  remove(bad);
  remove(path);
  for (int i = 0; i < nb; i++) amoe_block_free(&blocks[i]);
  amoe_block_free(&b);
  amoe_gen_close(g);
  return check_done();
}
