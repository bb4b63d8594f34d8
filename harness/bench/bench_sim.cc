// Simulator speed: generation, trace replay with natural routing, the
// AcceptMoE selector per (block, layer), whole-block simulation.
//   build/harness/bench/amoe_bench --benchmark_min_time=2
// Shape: qwen3-30b-a3b (48 MoE layers x 128 experts, top-8), 64-node trees.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>

extern "C" {
#include "gen.h"
#include "policy.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"
#include "trace.h"
}

static amoe_spec qwen_spec() {
  amoe_spec s;
  amoe_diag d = {};
  amoe_spec_defaults(&s);
  amoe_spec_load_preset(&s, 0, "qwen3-30b-a3b", "bench", &d);
  amoe_spec_load_preset(&s, 1, "h200", "bench", &d);
  amoe_diag_free(&d);
  return s;
}

static std::string trace_path() { return "/tmp/amoe_bench_" + std::to_string(getpid()) + ".amt"; }

// Writes a 400-block trace once.
static const std::string &bench_trace() {
  static std::string path;
  if (!path.empty()) return path;
  path = trace_path();
  amoe_spec s = qwen_spec();
  s.workload.blocks = 400;
  amoe_err e;
  amoe_source *src;
  amoe_source_open(&src, &s.workload, &s.model, &e);
  amoe_trace_writer *w;
  amoe_trace_create(&w, path.c_str(), 48, 128, 8, amoe_source_m(src), "{}", &e);
  amoe_block b;
  amoe_block_init(&b, 48, 128, amoe_source_m(src));
  while (amoe_source_next(src, &b, &e) == 1) amoe_trace_write(w, &b, &e);
  amoe_trace_close(w, &e);
  amoe_block_free(&b);
  amoe_source_close(src);
  return path;
}

static void BM_generate(benchmark::State &st) {
  amoe_spec s = qwen_spec();
  s.workload.blocks = 0;
  amoe_err e;
  amoe_source *src;
  amoe_source_open(&src, &s.workload, &s.model, &e);
  amoe_block b;
  amoe_block_init(&b, 48, 128, amoe_source_m(src));
  for (auto _ : st) benchmark::DoNotOptimize(amoe_source_next(src, &b, &e));
  st.counters["blocks_per_s"] = benchmark::Counter((double)st.iterations(), benchmark::Counter::kIsRate);
  amoe_block_free(&b);
  amoe_source_close(src);
}
BENCHMARK(BM_generate)->Unit(benchmark::kMicrosecond);

// Whole runs over the 400-block trace: one policy row, resident.
static void run_trace(benchmark::State &st, const char *policy) {
  amoe_spec s = qwen_spec();
  s.workload.source = AMOE_SRC_TRACE;
  snprintf(s.workload.path, sizeof s.workload.path, "%s", bench_trace().c_str());
  s.workload.blocks = 0;
  s.npolicies = 1;
  memset(&s.policies[0], 0, sizeof s.policies[0]);
  s.policies[0].verifier = amoe_verifier_find(policy);
  s.policies[0].draft = amoe_draft_find("eagle");
  s.policies[0].beta = 0.5;
  static amoe_commitment ph = {{1, 0.75, 0.55, 0.4, 0.28, 0.2}, 6, {0}, 0};
  amoe_err e;
  amoe_source *src;
  amoe_source_open(&src, &s.workload, &s.model, &e);
  double blocks = 0;
  for (auto _ : st) {
    amoe_row_result rows[1];
    amoe_run(&s, &ph, src, nullptr, rows, &e);
    blocks += rows[0].tot.blocks;
    amoe_row_result_free(&rows[0]);
  }
  st.counters["blocks_per_s"] = benchmark::Counter(blocks, benchmark::Counter::kIsRate);
  amoe_source_close(src);
}
static void BM_replay_natural(benchmark::State &st) { run_trace(st, "natural"); }
static void BM_replay_acceptmoe(benchmark::State &st) { run_trace(st, "acceptmoe"); }
BENCHMARK(BM_replay_natural)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_replay_acceptmoe)->Unit(benchmark::kMillisecond);

// The selector alone: one (block, layer) of 64 nodes x 128 experts.
static void BM_acceptmoe_select(benchmark::State &st) {
  amoe_spec s = qwen_spec();
  s.workload.blocks = 1;
  amoe_err e;
  amoe_source *src;
  amoe_source_open(&src, &s.workload, &s.model, &e);
  amoe_block b;
  amoe_block_init(&b, 48, 128, amoe_source_m(src));
  amoe_source_next(src, &b, &e);
  int nodes[64], level[256] = {0};
  int nn = b.n < 64 ? b.n : 64;
  for (int i = 0; i < nn; i++) nodes[i] = i, level[b.depth[i]]++;
  static float prob[64 * 128];
  for (int i = 0; i < nn; i++) amoe_router_probs(&b, 0, i, 0, prob + i * b.m);
  double phat[6] = {1, 0.75, 0.55, 0.4, 0.28, 0.2}, scratch[4 * 128];
  int iscratch[256];
  amoe_policy_row row = {};
  row.beta = 0.5;
  uint8_t S[128];
  amoe_vctx c = {&b, 0, 8, 128, 0, nodes, nn, level, phat, 6, nullptr, &row, prob, scratch, iscratch};
  for (auto _ : st) {
    amoe_verifier_acceptmoe(&c, S);
    benchmark::DoNotOptimize(S);
  }
  amoe_block_free(&b);
  amoe_source_close(src);
}
BENCHMARK(BM_acceptmoe_select)->Unit(benchmark::kNanosecond);

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  if (!trace_path().empty()) remove(trace_path().c_str());
  return 0;
}
