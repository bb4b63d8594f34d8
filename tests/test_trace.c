/* .amt round trip, streaming, and every way a file can be broken. */
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gen.h"
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

static int same_block(const amoe_block *a, const amoe_block *b) {
  if (a->n != b->n || a->request != b->request || a->step != b->step) return 0;
  size_t n = (size_t)a->n, lnm = (size_t)a->layers * n * a->m;
  return !memcmp(a->parent, b->parent, n * 4) && !memcmp(a->logp, b->logp, n * 4) &&
         !memcmp(a->score, b->score, n * 4) && !memcmp(a->accepted, b->accepted, n) &&
         !memcmp(a->ids, b->ids, lnm * 2) && !memcmp(a->logits, b->logits, lnm * 2);
}

int main(void) {
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
      int rc = amoe_gen_next(g, &blocks[nb], &e);
      if (rc != 1) {
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
      int rc = amoe_trace_next(r, &b, &e);
      CHECK(rc == 1 && same_block(&b, &blocks[i]), "block %d differs after the round trip", i);
    }
    CHECK(amoe_trace_next(r, &b, &e) == 0, "end of trace");
    CHECK(amoe_trace_rewind(r, &e) == AMOE_OK, "rewind");
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
  /* flip one byte inside the third block's logits: a checksum error naming block 2 */
  r = NULL;
  CHECK(amoe_trace_open(&r, path, &e) == AMOE_OK, "%s", e.msg);
  amoe_trace_close_reader(r);
  uint64_t table;
  memcpy(&table, data + 40, 8);
  uint64_t off2;
  memcpy(&off2, data + table + 16, 8);
  unsigned char *copy = malloc((size_t)size);
  memcpy(copy, data, (size_t)size);
  copy[off2 + 24 + 40] ^= 0x5a;
  f = fopen(bad, "wb");
  fwrite(copy, 1, (size_t)size, f);
  fclose(f);
  CHECK(amoe_trace_open(&r, bad, &e) == AMOE_OK, "header still fine");
  int rc = 1, got = 0;
  while ((rc = amoe_trace_next(r, &b, &e)) == 1) got++;
  CHECK(rc < 0 && got == 2, "stops at block 2 (got %d, rc %d)", got, rc);
  CHECK(strstr(e.msg, "block 2 at byte offset") && strstr(e.msg, "checksum"), "message: %s", e.msg);
  amoe_trace_close_reader(r);
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
  CHECK(amoe_trace_next(r, &b, &e) < 0 && strstr(e.msg, "block 0 at byte offset") && strstr(e.msg, "node count"),
        "node count: %s", e.msg);
  amoe_trace_close_reader(r);
  free(copy);
  free(data);
  remove(bad);
  remove(path);
  for (int i = 0; i < nb; i++) amoe_block_free(&blocks[i]);
  amoe_block_free(&b);
  amoe_gen_close(g);
  return check_done();
}
