/* Sources: routing-jsonl as hybrid blocks (generated draft trees whose
 * natural accepted path carries the real tokens' routes, docs/design.md §5). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "f16.h"
#include "source.h"
#include "spec_load.h"

#define L 16 /* olmoe-1b-7b: 16 MoE layers x 64 experts, top-8 */
#define K 8
static const int TOKENS[3] = {37, 20, 1}; /* the last: its block must cut the accepted path */
static const double PROB[K] = {0.3, 0.2, 0.15, 0.1, 0.09, 0.07, 0.05, 0.04};

static int expert(int prob, int tok, int l, int j) { return (prob * 11 + tok * 7 + l * 3 + j * 5) % 64; }

/* Problems 0, 5 and 9 (ids need not be dense), records shuffled by layer,
 * and one ragged extra token at layer 3 of problem 5 (cut by the reader). */
static void write_fixture(const char *path) {
  FILE *f = fopen(path, "w");
  for (int l = L - 1; l >= 0; l--)
    for (int p = 0; p < 3; p++)
      for (int tok = 0; tok < TOKENS[p] + (p == 1 && l == 3); tok++) {
        fprintf(f, "{\"problem_id\":%d,\"layer\":%d,\"token_idx\":%d,\"experts\":[", 5 * p - (p == 2), l, tok);
        for (int j = 0; j < K; j++) fprintf(f, "%s%d", j ? "," : "", expert(p, tok, l, j));
        fprintf(f, "],\"gating_probs\":[");
        for (int j = 0; j < K; j++) fprintf(f, "%s%.17g", j ? "," : "", PROB[j]);
        fprintf(f, "]}\n");
      }
  fclose(f);
}

static amoe_spec hybrid_spec(const char *path) {
  amoe_spec s;
  amoe_diag d = {0};
  amoe_spec_defaults(&s);
  CHECK(amoe_spec_load_preset(&s, 0, "olmoe-1b-7b", "test", &d) == AMOE_OK && d.n == 0, "preset");
  amoe_diag_free(&d);
  s.workload.source = AMOE_SRC_ROUTING_JSONL;
  s.workload.routing_blocks = AMOE_ROUTING_HYBRID;
  snprintf(s.workload.path, sizeof s.workload.path, "%s", path);
  s.workload.blocks = 0;
  s.workload.nodes = s.workload.candidates = 24;
  s.workload.tau = 3;
  return s;
}

/* Reads every block; checks the accepted paths against the fixture and
 * returns a digest of all blocks. */
static uint64_t read_all(amoe_source *src, int *blocks, int *with_siblings, int *bad_path, int *used) {
  amoe_block b;
  amoe_err e;
  amoe_block_init(&b, L, 64, amoe_source_m(src));
  uint64_t h = 0xcbf29ce484222325ULL;
  amoe_status rc;
  int prob = -1, tok = 0;
  *blocks = *with_siblings = *bad_path = 0;
  used[0] = used[1] = used[2] = 0;
  while ((rc = amoe_source_next(src, &b, &e)) == AMOE_OK) {
    (*blocks)++;
    if ((int)b.request != prob) prob = (int)b.request, tok = 0;
    int tau = 0;
    for (int t = 0; t < b.n; t++) tau += b.accepted[t];
    *with_siblings += b.n > tau;
    for (int t = 0, q = 0; t < b.n; t++) { /* path nodes come in depth order */
      if (!b.accepted[t]) continue;
      for (int l = 0; l < L; l++)
        for (int j = 0; j < K; j++)
          *bad_path += amoe_block_ids(&b, l, t)[j] != expert(prob, tok + q, l, j) ||
                       amoe_block_logits(&b, l, t)[j] != amoe_f16_from_f32((float)log(PROB[j]));
      q++;
    }
    tok += tau;
    if (prob >= 0 && prob < 3) used[prob] = tok;
    for (int t = 0; t < b.n; t++) {
      h = (h ^ (uint64_t)(b.parent[t] + 1) ^ (uint64_t)b.accepted[t] << 20) * 0x100000001b3ULL;
      for (int l = 0; l < L; l++)
        for (int j = 0; j < K; j++)
          h = (h ^ amoe_block_ids(&b, l, t)[j] ^ (uint64_t)amoe_block_logits(&b, l, t)[j] << 16) *
              0x100000001b3ULL;
    }
  }
  CHECK(rc == AMOE_END, "hybrid source ended with %d: %s", rc, e.msg);
  amoe_block_free(&b);
  return h;
}

/* Import exactness: float logits whose binary16 roundings tie (or swap the
 * top-k boundary) keep the file's top-k set and order. One layer, one
 * node, 8 experts, top-2: experts 5 (1.0001) and 2 (1.0) round to the same
 * binary16 1.0, where id order would put 2 first and in the top-2. */
static void opens(const char *text, int source, int top_k, amoe_source **src) {
  char path[] = "/tmp/amoe_exact_XXXXXX";
  int fd = mkstemp(path);
  CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write fixture");
  close(fd);
  amoe_spec s;
  amoe_spec_defaults(&s);
  snprintf(s.model.name, sizeof s.model.name, "tiny");
  s.model.layers = s.model.moe_layers = 1;
  s.model.experts = 8;
  s.model.top_k = top_k;
  s.workload.source = source;
  s.workload.window = 2;
  snprintf(s.workload.path, sizeof s.workload.path, "%s", path);
  amoe_err e;
  CHECK(amoe_source_open(src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  remove(path); /* (read when opened) */
}

static void first_ids(amoe_source *src, int n, const int *want, const char *what) {
  amoe_block b;
  amoe_block_init(&b, 1, 8, amoe_source_m(src));
  amoe_err e;
  CHECK(amoe_source_next(src, &b, &e) == AMOE_OK, "%s: a block", what);
  const uint16_t *id = amoe_block_ids(&b, 0, 0);
  int same = 1;
  for (int j = 0; j < n; j++) same &= id[j] == want[j];
  CHECK(same, "%s: stored order %d %d %d, want %d %d %d", what, id[0], id[1], n > 2 ? id[2] : -1, want[0], want[1],
        n > 2 ? want[2] : -1);
  CHECK(amoe_block_check_pairs(&b, 1, &e) == AMOE_OK, "%s: %s", what, e.msg);
  amoe_block_free(&b);
}

static void import_exact(void) {
  amoe_source *src;
  /* full float logits: 3 (2.0), 5 (1.0001), 2 (1.0), then 7 (0.99995 also rounds to 1.0) */
  opens("{\"parent\":[-1],\"logp\":[0],\"accepted\":[1],\"logits\":[[[0,0,1.0,2.0,0,1.0001,0,0.99995]]]}\n",
        AMOE_SRC_BLOCKS_JSONL, 2, &src);
  first_ids(src, 4, (const int[]){3, 5, 2, 7}, "full logits");
  amoe_source_close(src);
  /* top-m pairs in the file, unsorted */
  opens("{\"parent\":[-1],\"logp\":[0],\"accepted\":[1],\"topk\":[[[[2,1.0],[3,2.0],[5,1.0001],[7,0.99995]]]]}\n",
        AMOE_SRC_BLOCKS_JSONL, 2, &src);
  first_ids(src, 4, (const int[]){3, 5, 2, 7}, "top-m pairs");
  amoe_source_close(src);
  /* routing-jsonl: equal weights keep the engine's order (6 before 1), and
   * 0.50001 vs 0.5 (a binary16 tie of their logs) keeps 4 first */
  opens("{\"problem_id\":0,\"layer\":0,\"token_idx\":0,\"experts\":[6,1],\"gating_probs\":[0.5,0.5]}\n"
        "{\"problem_id\":0,\"layer\":0,\"token_idx\":1,\"experts\":[4,0],\"gating_probs\":[0.50001,0.49999]}\n",
        AMOE_SRC_ROUTING_JSONL, 2, &src);
  amoe_block b;
  amoe_block_init(&b, 1, 8, amoe_source_m(src));
  amoe_err e;
  CHECK(amoe_source_next(src, &b, &e) == AMOE_OK && b.n == 2, "a chain block of 2 tokens");
  CHECK(amoe_block_ids(&b, 0, 0)[0] == 6 && amoe_block_ids(&b, 0, 0)[1] == 1, "equal weights: the file's order");
  CHECK(amoe_block_ids(&b, 0, 1)[0] == 4 && amoe_block_ids(&b, 0, 1)[1] == 0, "near-equal weights: the file's order");
  amoe_block_free(&b);
  amoe_source_close(src);
  /* routing-jsonl as engines write it: a prompt row (left out), ids only
   * (no gating_probs: the file's order kept), and a row with its logits
   * (ordered by them) */
  opens("{\"problem_id\":0,\"layer\":0,\"token_idx\":0,\"phase\":\"prompt\",\"experts\":[1,2]}\n"
        "{\"problem_id\":0,\"layer\":0,\"token_idx\":1,\"phase\":\"decode\",\"experts\":[5,3]}\n"
        "{\"problem_id\":0,\"layer\":0,\"token_idx\":2,\"experts\":[6,0],\"logits\":[2,0,0,0,0,0,1.5,0]}\n",
        AMOE_SRC_ROUTING_JSONL, 2, &src);
  amoe_block_init(&b, 1, 8, amoe_source_m(src));
  CHECK(amoe_source_next(src, &b, &e) == AMOE_OK && b.n == 2, "the two decode tokens, one chain block");
  CHECK(amoe_block_ids(&b, 0, 0)[0] == 5 && amoe_block_ids(&b, 0, 0)[1] == 3, "ids only: the file's order");
  CHECK(amoe_block_ids(&b, 0, 1)[0] == 0 && amoe_block_ids(&b, 0, 1)[1] == 6, "with logits: by logit");
  CHECK(strstr(amoe_source_provenance(src), "1 prompt records left out") &&
            strstr(amoe_source_provenance(src), "1 records carry expert ids only"),
        "the importer says what it left out and what it does not know: %s", amoe_source_provenance(src));
  amoe_block_free(&b);
  amoe_source_close(src);
}

int main(void) {
  import_exact();
  char path[] = "/tmp/amoe_src_XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  write_fixture(path);
  amoe_spec s = hybrid_spec(path);
  amoe_err e;
  amoe_source *src;
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_source_m(src) == K, "hybrid blocks store the top-k as the real tokens do");
  CHECK(strstr(amoe_source_provenance(src), "\"blocks\":\"hybrid\"") != NULL, "provenance: %s",
        amoe_source_provenance(src));
  int blocks, sib, bad, used[3];
  const uint64_t h1 = read_all(src, &blocks, &sib, &bad, used);
  /* every real token on exactly one accepted path, in order, problem by problem */
  CHECK(bad == 0, "%d path entries differ from the real tokens", bad);
  CHECK(used[0] == TOKENS[0] && used[1] == TOKENS[1] && used[2] == TOKENS[2], "tokens used %d, %d, %d", used[0],
        used[1], used[2]);
  CHECK(blocks > 10 && blocks < TOKENS[0] + TOKENS[1], "%d blocks for %d tokens at tau 3", blocks,
        TOKENS[0] + TOKENS[1] + TOKENS[2]);
  CHECK(sib == blocks, "%d of %d blocks have rejected siblings", sib, blocks);
  /* rewound, and opened again: the same blocks */
  CHECK(amoe_source_rewind(src, &e) == AMOE_OK, "%s", e.msg);
  int blocks2, sib2, bad2, used2[3];
  CHECK(read_all(src, &blocks2, &sib2, &bad2, used2) == h1 && blocks2 == blocks, "rewind changed the blocks");
  amoe_source_close(src);
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(read_all(src, &blocks2, &sib2, &bad2, used2) == h1, "a second open gave other blocks");
  amoe_source_close(src);
  /* another seed: other trees, the same real path */
  s.workload.seed = 7;
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(read_all(src, &blocks2, &sib2, &bad2, used2) != h1 && bad2 == 0 && used2[0] == TOKENS[0] &&
            used2[1] == TOKENS[1] && used2[2] == TOKENS[2],
        "seed 7: other siblings, the same real tokens");
  amoe_source_close(src);
  remove(path);
  return check_done();
}
