/* The hand-made block and spec the cost tests work out by hand
 * (test_cost.c, test_layout.c): one dense and one MoE layer of 10 experts,
 * top-2, round numbers for every byte count and rate. */
#ifndef AMOE_TEST_HAND_H
#define AMOE_TEST_HAND_H

#include <stdio.h>
#include <string.h>

#include "check.h"
#include "policy.h"
#include "source.h"
#include "spec.h"

/* Root routes {0,1}; node 1 {2,3}; node 2 {2,4}; node 3 (child of 1) {2,5}.
 * Accepted path 0 -> 1 -> 3. One MoE layer, 10 experts, top-2. */
static const char *const BLOCK =
    "{\"parent\":[-1,0,0,1],\"logp\":[0,-0.1,-0.2,-0.3],\"accepted\":[1,1,0,1],"
    "\"topk\":[[[[0,0],[1,-1]],[[2,0],[3,-2]],[[2,0],[4,-2]],[[2,0],[5,-2]]]]}\n";

static inline amoe_spec hand_spec(void) {
  amoe_spec s;
  memset(&s, 0, sizeof s);
  snprintf(s.model.name, sizeof s.model.name, "hand");
  s.model.layers = 2; /* one dense layer + one MoE layer */
  s.model.moe_layers = 1;
  s.model.experts = 10;
  s.model.top_k = 2;
  s.model.hidden = 100;
  s.model.moe_intermediate = 50;
  s.model.dense_intermediate = 200;
  s.model.expert_bytes = 1e6;
  s.model.attn_bytes_per_layer = 2e6;
  s.model.kv_bytes_per_token_layer = 1000;
  s.model.vocab = 1000;
  s.model.lm_head_bytes = 4e6;
  s.model.draft_head_bytes = 3e6;
  snprintf(s.hw.name, sizeof s.hw.name, "hand");
  s.hw.hbm_bw = 1e9;
  s.hw.h2d_bw = 1e8;
  s.hw.peak_flops = 1e12;
  s.hw.launch_s = 1e-6;
  s.hw.step_s = 5e-4;
  s.hw.layer_fixed_s = 1e-6;
  s.hw.moe_t0_s = 1e-6;
  s.hw.moe_eta = 0.5;
  s.hw.draft_step_fixed_s = 1e-6;
  s.hw.copy_latency_s = 1e-4;
  s.engine.cuda_graphs = s.engine.overlap_scheduler = 1;
  s.workload.source = AMOE_SRC_BLOCKS_JSONL;
  s.workload.nodes = 64;
  s.workload.context_tokens = 10;
  s.workload.window = 8;
  s.npolicies = 1;
  s.policies[0].draft = amoe_draft_find("eagle");
  s.policies[0].verifier = amoe_verifier_find("natural");
  return s;
}

/* Writes a blocks-jsonl fixture to a fresh temporary path (path: a
 * mkstemp template) and opens it as s's workload. */
static inline amoe_source *hand_open_fixture(char *path, const char *text, amoe_spec *s) {
  int fd = mkstemp(path);
  CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write fixture");
  close(fd);
  snprintf(s->workload.path, sizeof s->workload.path, "%s", path);
  amoe_err e;
  amoe_source *src = NULL;
  CHECK(amoe_source_open(&src, &s->workload, &s->model, &e) == AMOE_OK, "%s", e.msg);
  return src;
}

#endif
