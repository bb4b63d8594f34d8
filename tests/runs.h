/* What the batch and load tests share: a blocks-jsonl text as an .amt
 * trace (batches and open arrivals read traces), and a run of a spec's
 * first row. */
#ifndef AMOE_TEST_RUNS_H
#define AMOE_TEST_RUNS_H

#include <stdio.h>
#include <string.h>

#include "check.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"
#include "trace.h"

/* Two requests of one block each, as blocks-jsonl: request 0 the hand
 * block (routes {0,1} {2,3} {2,4} {2,5}, accepted 0 -> 1 -> 3), request 1
 * routes {6,7} {2,8}, accepted 0 -> 1. */
#define HAND_TWO_REQUESTS                                                                                  \
  "{\"request\":0,\"step\":0,\"parent\":[-1,0,0,1],\"logp\":[0,-0.1,-0.2,-0.3],\"accepted\":[1,1,0,1],"   \
  "\"topk\":[[[[0,0],[1,-1]],[[2,0],[3,-2]],[[2,0],[4,-2]],[[2,0],[5,-2]]]]}\n"                            \
  "{\"request\":1,\"step\":0,\"parent\":[-1,0],\"logp\":[0,-0.1],\"accepted\":[1,1],"                   \
  "\"topk\":[[[[6,0],[7,-1]],[[2,0],[8,-2]]]]}\n"

/* The blocks-jsonl text as an .amt trace at path (a batch reads traces). */
static inline void write_trace(const char *text, const char *path, amoe_spec *s) {
  const char *jl = check_write_tmp(text);
  amoe_workload_spec w = s->workload;
  w.source = AMOE_SRC_BLOCKS_JSONL;
  snprintf(w.path, sizeof w.path, "%s", jl);
  amoe_source *src = NULL;
  amoe_trace_writer *tw = NULL;
  amoe_err e;
  CHECK(amoe_source_open(&src, &w, &s->model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_trace_create(&tw, path, s->model.moe_layers, s->model.experts, s->model.top_k, amoe_source_m(src), "{}",
                          &e) == AMOE_OK,
        "%s", e.msg);
  amoe_block b;
  amoe_block_init(&b, s->model.moe_layers, s->model.experts, amoe_source_m(src));
  while (amoe_source_next(src, &b, &e) == AMOE_OK) CHECK(amoe_trace_write(tw, &b, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_trace_close(tw, &e) == AMOE_OK, "%s", e.msg);
  amoe_block_free(&b);
  amoe_source_close(src);
  s->workload.source = AMOE_SRC_TRACE;
  snprintf(s->workload.path, sizeof s->workload.path, "%s", path);
}

/* The first point of the spec whose YAML text is given, loaded as `run`
 * loads a file. */
static inline amoe_spec spec_of_yaml(const char *yaml) {
  const char *p = check_write_tmp(yaml);
  amoe_experiment x;
  amoe_diag d = {0};
  CHECK(amoe_experiment_load(&x, p, NULL, 0, &d) == AMOE_OK, "%s", d.n ? d.msgs[0] : "");
  amoe_spec s;
  CHECK(amoe_experiment_point(&x, 0, &s, &d) == AMOE_OK, "%s", d.n ? d.msgs[0] : "");
  amoe_diag_free(&d);
  return s;
}

static inline amoe_row_result run_one(const amoe_spec *s) {
  static amoe_offline offline;
  amoe_source *src = NULL;
  amoe_err e;
  amoe_row_result r[AMOE_MAX_POLICIES];
  memset(r, 0, sizeof r);
  CHECK(amoe_source_open(&src, &s->workload, &s->model, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_run(s, &offline, src, NULL, r, &e) == AMOE_OK, "%s", e.msg);
  amoe_source_close(src);
  for (int i = 1; i < s->npolicies; i++) amoe_row_result_free(&r[i]);
  return r[0];
}

/* `--set set` on a minimal spec is refused, with needle (the key) in a
 * message. */
static inline void check_set_refused(const char *set, const char *needle) {
  const char *p = check_write_tmp("name: k\nmodel: mixtral-8x7b\nhardware: h200\n");
  amoe_experiment x;
  amoe_diag d = {0};
  char *sets[1] = {(char *)set};
  const amoe_status st = amoe_experiment_load(&x, p, sets, 1, &d);
  int named = 0;
  for (int j = 0; j < d.n; j++) named |= strstr(d.msgs[j], needle) != NULL;
  CHECK(st != AMOE_OK && named, "--set %s: %s", set, d.n ? d.msgs[0] : "accepted");
  amoe_diag_free(&d);
}

#endif
