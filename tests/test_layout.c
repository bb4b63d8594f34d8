/* Several GPUs (docs/design.md §16): placements, the busiest group, and a
 * hand-worked two-GPU pass through the run loop and the one cost function. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cost.h"
#include "layout.h"
#include "policy.h"
#include "results.h"
#include "run.h"
#include "source.h"

#include "hand.h"

/* The hand-made block (hand.h: the union {0..5}, token counts 0:1 1:1 2:3
 * 3:1 4:1 5:1) on two GPUs. */
static amoe_spec spec(void) {
  amoe_spec s = hand_spec();
  s.hw.gpus = 2;
  s.hw.ic.allreduce_latency_s = 1e-5;
  s.hw.ic.allreduce_bw = 1e8;
  s.hw.ic.layer_sync_per_peer_s = 1e-6;
  s.parallel.attention_tp = 2;
  s.parallel.moe_ep = 2;
  s.parallel.moe_tp = 1;
  return s;
}

/* By hand. Contiguous over 2 groups: experts 0-4 on group 0, 5-9 on group 1;
 * the pass executes 0-4 on group 0 and 5 on group 1: group 0 is the busiest,
 * 5 experts of 2 ms (1e6 B at 0.5 · 1e9 B/s). Attention, dense layer, head
 * and draft read half their bytes: MoE layer's dense part (2e6 + 1e4) / 2 /
 * 1e9 + 1e-6, dense layer (2.12e6 + 1e4) / 2 / 1e9 + 1e-6, head 2e-3 + 1e-6,
 * draft (extend + one step) 2 · (1.5e-3 + 1e-6). All-reduce of 4 tokens: 1e-5 + 4 · 100 · 2 /
 * 1e8 = 1.8e-5; of 1 token 1.2e-5; two per layer and draft forward, and a
 * sync of 1e-6 each. Round-robin: 0, 2, 4 and 1, 3, 5: 3 experts busiest. */
static void two_gpus_by_hand(void) {
  char path[] = "/tmp/amoe_layout_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0 && write(fd, BLOCK, strlen(BLOCK)) == (ssize_t)strlen(BLOCK), "fixture");
  close(fd);
  amoe_spec s = spec();
  snprintf(s.workload.path, sizeof s.workload.path, "%s", path);
  amoe_err e;
  amoe_source *src = NULL;
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  static amoe_offline offline;
  const double comm = (2 * 1.8e-5 + 1e-6) * 2 + 2 * (2 * 1.2e-5 + 1e-6);
  const double rest = 5e-4 + 2 * (1.5e-3 + 1e-6) + (2e-3 + 1e-6) + (1.065e-3 + 1e-6) + (1.005e-3 + 1e-6);
  for (int rr = 0; rr < 2; rr++) {
    s.parallel.placement = rr ? AMOE_PLACE_ROUND_ROBIN : AMOE_PLACE_CONTIGUOUS;
    amoe_row_result rows[1];
    CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
    const amoe_totals *t = &rows[0].tot;
    const int busiest = rr ? 3 : 5;
    const double T = rest + busiest * 2e-3 + 1e-6 + comm;
    CHECK(fabs(t->t_total - T) < 1e-12, "%s: block time %.12g, by hand %.12g",
          rr ? "round-robin" : "contiguous", t->t_total, T);
    CHECK(fabs(t->t_comm - comm) < 1e-15, "collectives %.12g, by hand %.12g", t->t_comm, comm);
    amoe_summary m;
    amoe_summarize(t, 0, &m);
    CHECK(m.busiest_group_executed_mean == busiest && m.group_executed_mean == 3 && m.executed_mean == 6,
          "busiest %g, per group %g, union %g", m.busiest_group_executed_mean, m.group_executed_mean, m.executed_mean);
    amoe_row_result_free(&rows[0]);
  }
  /* TP over the MoE too (moe_ep 1, moe_tp 2): every expert split in half */
  s.parallel.moe_ep = 1;
  s.parallel.moe_tp = 2;
  s.parallel.placement = AMOE_PLACE_CONTIGUOUS;
  amoe_row_result rows[1];
  CHECK(amoe_run(&s, &offline, src, NULL, rows, &e) == AMOE_OK, "%s", e.msg);
  CHECK(fabs(rows[0].tot.t_total - (rest + 6 * 1e-3 + 1e-6 + comm)) < 1e-12, "moe_tp 2: %.12g",
        rows[0].tot.t_total);
  amoe_row_result_free(&rows[0]);
  amoe_source_close(src);
  remove(path);
}

/* Tensor parallelism splits the bytes exactly. */
static void tp_split(void) {
  amoe_spec s = spec();
  for (int tp = 2; tp <= 8; tp *= 2) {
    const double d1 = amoe_cost_dense(&s.model, &s.hw, 4, 10, 1, 1) - s.hw.layer_fixed_s;
    const double dt = amoe_cost_dense(&s.model, &s.hw, 4, 10, 1, tp) - s.hw.layer_fixed_s;
    const double h1 = amoe_cost_head(&s.model, &s.hw, 4, 1) - s.hw.launch_s;
    const double ht = amoe_cost_head(&s.model, &s.hw, 4, tp) - s.hw.launch_s;
    CHECK(dt * tp == d1 && ht * tp == h1, "tp %d: dense %.17g vs %.17g, head %.17g vs %.17g", tp, dt * tp, d1, ht * tp, h1);
  }
}

/* A skewed long-run load: contiguous blocks put the two heaviest pairs on
 * two groups (70 against a mean of 50); balanced evens it exactly; one
 * redundant copy of a dominant expert splits it over two groups. */
static void balanced(void) {
  amoe_err e;
  amoe_layout *t = amoe_layout_new(1, 8, 4);
  const double load[8] = {40, 30, 20, 10, 10, 20, 30, 40};
  double work[4];
  int n[4], g[4];
  uint8_t all[8];
  int cnt[8];
  memset(all, 1, sizeof all);
  for (int x = 0; x < 8; x++) cnt[x] = (int)load[x]; /* token counts as load, compute-bound experts */
  const amoe_expert_coef ec = {0, 1, 0, 0};
  amoe_layout_layer_groups(t, 0, all, cnt, ec, 1, work, n);
  CHECK(work[0] == 70 && work[1] == 30 && work[2] == 30 && work[3] == 70, "contiguous: %g %g %g %g", work[0], work[1],
        work[2], work[3]);
  CHECK(amoe_layout_balanced(t, load, 0, &e) == AMOE_OK, "%s", e.msg);
  amoe_layout_layer_groups(t, 0, all, cnt, ec, 1, work, n);
  CHECK(work[0] == 50 && work[1] == 50 && work[2] == 50 && work[3] == 50 && n[0] == 2 && n[3] == 2,
        "balanced: %g %g %g %g", work[0], work[1], work[2], work[3]);
  amoe_layout_free(t);
  t = amoe_layout_new(1, 8, 2);
  const double hot[8] = {100, 1, 1, 1, 1, 1, 1, 1};
  CHECK(amoe_layout_balanced(t, hot, 1, &e) == AMOE_OK, "%s", e.msg);
  CHECK(amoe_layout_copies(t, 0, 0, g) == 2 && g[0] != g[1], "the hot expert has a copy on each group");
  int units = 0;
  for (int x = 0; x < 8; x++) units += amoe_layout_copies(t, 0, x, g);
  CHECK(units == 9, "8 experts and one copy: %d", units);
  /* a replicated expert goes to the copy whose group has less work */
  uint8_t only[8] = {1, 1, 0, 0, 0, 0, 0, 0};
  int c1[8] = {1, 1};
  amoe_layout_layer_groups(t, 0, only, c1, ec, 1, work, n);
  CHECK(n[0] == 1 && n[1] == 1, "experts 0 and 1 on separate groups: %d %d", n[0], n[1]);
  CHECK(amoe_layout_balanced(t, hot, 9, &e) == AMOE_EINVAL, "more copies than groups allow");
  amoe_layout_free(t);
}

/* The placement file: lines layer,expert,group; errors name the line. */
static void placement_file(void) {
  amoe_err e;
  amoe_layout *t = amoe_layout_new(1, 4, 2);
  const char *good = check_write_tmp("# layer,expert,group\n0,0,1\n0,1,1\n0,2,0\n0,3,0\n0,3,1\n");
  CHECK(amoe_layout_read(t, good, &e) == AMOE_OK, "%s", e.msg);
  int g[2];
  CHECK(amoe_layout_copies(t, 0, 0, g) == 1 && g[0] == 1 && amoe_layout_copies(t, 0, 3, g) == 2, "read");
  const char *gap = check_write_tmp("0,0,1\n0,1,1\n0,2,0\n");
  CHECK(amoe_layout_read(t, gap, &e) == AMOE_EFORMAT && strstr(e.msg, "expert 3 of layer 0 has no group"), "%s", e.msg);
  const char *bad = check_write_tmp("0,0,1\n0,9,1\n");
  CHECK(amoe_layout_read(t, bad, &e) == AMOE_EFORMAT && strstr(e.msg, ":2: layer 0, expert 9"), "%s", e.msg);
  amoe_layout_free(t);
}

int main(void) {
  two_gpus_by_hand();
  tp_split();
  balanced();
  placement_file();
  return check_done();
}
