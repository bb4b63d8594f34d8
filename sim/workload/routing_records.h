/* What the routing readers share (jsonl.c: routing-jsonl; safetensors.c:
 * routing-safetensors): a token's record, the reader, and the steps that
 * turn token-layer rows into problems. Inside the library only. */
#ifndef AMOE_ROUTING_RECORDS_H
#define AMOE_ROUTING_RECORDS_H

#include <stdio.h>

#include "jsonl.h"

typedef struct {
  int token;
  uint16_t ids[AMOE_MAX_TOPK];
  amoe_f16 z[AMOE_MAX_TOPK];
} rrec;

typedef struct {
  int problem;
  int tokens;
  rrec **layer; /* [L] arrays of `tokens` records, sorted by token */
} rproblem;

struct amoe_jsonl_reader {
  int routing;
  char *path;
  int layers, experts, top_k, m, window;
  /* blocks-jsonl */
  FILE *f;
  char *line;
  size_t line_cap;
  long lineno;
  uint64_t count;
  /* routing-jsonl */
  rproblem *probs;
  int nprob;
  int cur_prob, cur_tok, cur_step;
  char note[512];
  /* the score shape of the records that carry every expert's logit, per
   * layer: Σ entropy of the softmax over them, Σ its top-k mass, count */
  double *shape_h, *shape_k;
  long *shape_n;
};

typedef struct {
  int problem, layer;
  rrec rec;
} rrow;

/* A routing reader for `layers` x `experts`, top-k, chain blocks of `window`. */
amoe_status amoe_routing_reader_new(amoe_jsonl_reader **out, const char *path, int layers, int experts, int top_k,
                                      int window, amoe_err *e);
/* Groups token-layer rows into problems (request order), cuts ragged layers
 * to the shortest and says in the reader's note what was dropped. */
amoe_status amoe_routing_group(amoe_jsonl_reader *r, rrow *rows, size_t nrows, long prompt_rows, long ids_only,
                                 long with_logits, amoe_err *e);
/* A record's k experts with their float logits zf: ordered by logit desc
 * (equal ones keep the file's order) and stored so exactly (block.h);
 * returns the first expert listed twice, or -1. */
int amoe_routing_rec_store(rrec *rec, float *zf, int k);
/* Adds one record's full logits lg[experts] (its top-k: ids) to the score shape. */
int amoe_routing_shape_add(amoe_jsonl_reader *r, int layer, const float *lg, const uint16_t *ids, int k);

#endif
