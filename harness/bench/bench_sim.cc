// Simulator speed: generation, trace replay with natural routing, the
// AcceptMoE selector per (block, layer), whole-block simulation, and the
// top-32 selection that takes half of generation.
//   build/harness/bench/amoe_bench --benchmark_min_time=2
// Shape: qwen3-30b-a3b (48 MoE layers x 128 experts, top-8), 64-node trees.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" {
#include "cache.h"
#include "gen.h"
#include "rng.h"
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

// Writes `blocks` blocks of s's workload to path.
static void write_trace(amoe_spec s, int blocks, const std::string &path) {
  s.workload.blocks = blocks;
  const int L = s.model.moe_layers, E = s.model.experts;
  amoe_err e;
  amoe_source *src;
  amoe_source_open(&src, &s.workload, &s.model, &e);
  amoe_trace_writer *w;
  amoe_trace_create(&w, path.c_str(), L, E, s.model.top_k, amoe_source_m(src), "{}", &e);
  amoe_block b;
  amoe_block_init(&b, L, E, amoe_source_m(src));
  while (amoe_source_next(src, &b, &e) == AMOE_OK) amoe_trace_write(w, &b, &e);
  amoe_trace_close(w, &e);
  amoe_block_free(&b);
  amoe_source_close(src);
}

// Writes a 400-block trace once.
static const std::string &bench_trace() {
  static std::string path;
  if (!path.empty()) return path;
  path = trace_path();
  write_trace(qwen_spec(), 400, path);
  return path;
}

// Arg: generator threads (amoe_genpool; the blocks are the same for any
// count). One thread is the per-core figure.
static void BM_generate(benchmark::State &st) {
  amoe_spec s = qwen_spec();
  s.workload.blocks = 0;
  s.workload.threads = (int)st.range(0);
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
BENCHMARK(BM_generate)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMicrosecond);

// Whole runs of s over the trace at path: one policy row, resident.
static void replay(benchmark::State &st, amoe_spec s, const std::string &path, const char *policy) {
  s.workload.source = AMOE_SRC_TRACE;
  snprintf(s.workload.path, sizeof s.workload.path, "%s", path.c_str());
  s.workload.blocks = 0;
  s.npolicies = 1;
  amoe_policy_init(&s.policies[0], amoe_draft_find("eagle"), amoe_verifier_find(policy));
  // p̂ and m̄ of the kind `acceptmoe calibrate` writes for this model
  static amoe_offline offline = {{1, 0.75, 0.55, 0.4, 0.28, 0.2}, 6, {1, 0.6, 0.355, 0.2, 0.105, 0.052}, {0}, 0, nullptr};
  amoe_err e;
  amoe_source *src;
  amoe_source_open(&src, &s.workload, &s.model, &e);
  double blocks = 0, passes = 0, request_passes = 0;
  for (auto _ : st) {
    amoe_row_result rows[1];
    amoe_run(&s, &offline, src, nullptr, rows, &e);
    blocks += rows[0].tot.blocks;
    passes += rows[0].tot.passes;
    request_passes += rows[0].tot.request_passes;
    amoe_row_result_free(&rows[0]);
  }
  st.counters["blocks_per_s"] = benchmark::Counter(blocks, benchmark::Counter::kIsRate);
  if (request_passes > 0) st.counters["requests_per_pass"] = request_passes / passes; // (batches: the mean occupancy)
  amoe_source_close(src);
}
// Over the 400-block Qwen3-30B-A3B trace.
static void run_trace(benchmark::State &st, const char *policy) { replay(st, qwen_spec(), bench_trace(), policy); }
static void BM_replay_natural(benchmark::State &st) { run_trace(st, "natural"); }

// DeepSeek-V3 on 8 GPUs (docs/design.md §16): a 200-block trace of 64-node
// trees replayed with attention TP8 and the experts EP8 (the busiest group of
// every layer), natural routing: the several-GPU floor's case.
static void BM_replay_deepseek_8gpu(benchmark::State &st) {
  amoe_spec s;
  amoe_diag d = {};
  amoe_spec_defaults(&s);
  amoe_spec_load_preset(&s, 0, "deepseek-v3", "bench", &d);
  amoe_spec_load_preset(&s, 1, "h200", "bench", &d);
  amoe_spec_set(&s, "hardware.gpus", "8", "bench", &d);
  amoe_spec_set(&s, "hardware.interconnect", "nvlink4", "bench", &d);
  amoe_spec_validate(&s, "bench", &d);
  amoe_diag_free(&d);
  const std::string path = "/tmp/amoe_bench_ds_" + std::to_string(getpid()) + ".amt";
  write_trace(s, 200, path);
  replay(st, s, path, "natural");
  remove(path.c_str());
}
BENCHMARK(BM_replay_deepseek_8gpu)->Unit(benchmark::kMillisecond);
static void BM_replay_acceptmoe(benchmark::State &st) { run_trace(st, "acceptmoe"); }
static void BM_replay_marginal(benchmark::State &st) { run_trace(st, "marginal"); }
BENCHMARK(BM_replay_natural)->Unit(benchmark::kMillisecond);

// Batches (docs/design.md §17), Arg: workload.batch. A 600-block trace of
// short requests (16 tokens, ~4 blocks each: ~150 requests, so 32 slots stay
// full), natural routing; blocks/s per core at 32 against 1 is the batch floor.
static std::string batch_trace_path() { return "/tmp/amoe_bench_batch_" + std::to_string(getpid()) + ".amt"; }
static void BM_replay_batch(benchmark::State &st) {
  static int written;
  amoe_spec s = qwen_spec();
  s.workload.tokens_per_request = 16;
  if (!written++) write_trace(s, 600, batch_trace_path());
  const std::string path = batch_trace_path();
  s.workload.batch = (int)st.range(0);
  replay(st, s, path, "natural");
}
BENCHMARK(BM_replay_batch)->Arg(1)->Arg(32)->ArgName("batch")->Unit(benchmark::kMillisecond);

// Load (docs/design.md §18): 1,000 requests of the same shape arriving as a
// Poisson process at 200 per second (the 64 slots stay busy), natural
// routing; blocks/s per core against BM_replay_batch/batch:1 is the open-loop
// floor.
static std::string open_trace_path() { return "/tmp/amoe_bench_open_" + std::to_string(getpid()) + ".amt"; }
static void BM_open_loop(benchmark::State &st) {
  static int written;
  amoe_spec s = qwen_spec();
  s.workload.tokens_per_request = 16;
  if (!written++) write_trace(s, 4600, open_trace_path());
  s.workload.arrival = AMOE_ARRIVAL_POISSON;
  s.workload.rate = st.range(0);
  s.workload.cv = 1;
  s.workload.requests = 1000;
  s.workload.max_running = 64;
  replay(st, s, open_trace_path(), "natural");
}
BENCHMARK(BM_open_loop)->Arg(200)->Arg(2000)->ArgName("rate")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_replay_acceptmoe)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_replay_marginal)->Unit(benchmark::kMillisecond);

// Reading the 400-block trace alone, with each amount of the logits (Arg:
// amoe_logits): what trace format 4's sections save a replay.
static void BM_trace_read(benchmark::State &st) {
  amoe_err e;
  amoe_trace_reader *r;
  if (amoe_trace_open(&r, bench_trace().c_str(), &e) != AMOE_OK) {
    st.SkipWithError(e.msg);
    return;
  }
  amoe_trace_want_logits(r, (amoe_logits)st.range(0));
  amoe_block b;
  amoe_block_init(&b, 48, 128, amoe_trace_info_of(r)->m);
  double blocks = 0;
  for (auto _ : st) {
    amoe_trace_rewind(r, &e);
    amoe_status rc;
    while ((rc = amoe_trace_next(r, &b, &e)) == AMOE_OK) blocks += 1;
    if (rc != AMOE_END) {
      st.SkipWithError(e.msg);
      break;
    }
  }
  st.counters["blocks_per_s"] = benchmark::Counter(blocks, benchmark::Counter::kIsRate);
  amoe_block_free(&b);
  amoe_trace_close_reader(r);
}
BENCHMARK(BM_trace_read)->Arg(AMOE_LOGITS_NONE)->Arg(AMOE_LOGITS_TOP)->Arg(AMOE_LOGITS_ALL)->ArgName("logits")
    ->Unit(benchmark::kMillisecond);

// One generated qwen3-30b-a3b block (the caller frees it).
static void one_block(amoe_block *b) {
  amoe_spec s = qwen_spec();
  s.workload.blocks = 1;
  amoe_err e;
  amoe_source *src;
  amoe_source_open(&src, &s.workload, &s.model, &e);
  amoe_block_init(b, 48, 128, amoe_source_m(src));
  amoe_source_next(src, b, &e);
  amoe_source_close(src);
}

// The selector alone, per (block, layer) of 64 nodes x 128 experts. It
// cycles through every layer of 4 blocks: repeating one (block, layer) would
// let the branch predictor learn that input and flatter branchy code.
static void BM_acceptmoe_select(benchmark::State &st) {
  const int NB = 4, L = 48, E = 128;
  amoe_spec s = qwen_spec();
  s.workload.blocks = NB;
  amoe_err e;
  amoe_source *src;
  amoe_source_open(&src, &s.workload, &s.model, &e);
  std::vector<amoe_block> blk(NB);
  std::vector<std::vector<float>> prob(NB);
  std::vector<std::vector<int>> nodes(NB), level(NB);
  amoe_block b;
  amoe_block_init(&b, L, E, amoe_source_m(src));
  for (int i = 0; i < NB; i++) {
    amoe_source_next(src, &b, &e);
    amoe_block_init(&blk[i], L, E, b.m);
    amoe_block_copy(&blk[i], &b, &e);
    const int n = blk[i].n;
    prob[i].resize((size_t)L * n * 8);
    nodes[i].resize(n);
    level[i].assign(256, 0);
    for (int t = 0; t < n; t++) nodes[i][t] = t, level[i][blk[i].depth[t]]++;
    for (int l = 0; l < L; l++)
      for (int t = 0; t < n; t++) amoe_router_probs_top(&blk[i], l, t, 0, 8, &prob[i][((size_t)l * n + t) * 8]);
  }
  amoe_block_free(&b);
  amoe_source_close(src);
  double commitment[6] = {1, 0.75, 0.55, 0.4, 0.28, 0.2}, scratch[4 * 128];
  int iscratch[256];
  amoe_policy_row row;
  amoe_policy_init(&row, 0, amoe_verifier_find("acceptmoe"));
  uint8_t S[128];
  int at = 0;
  for (auto _ : st) {
    const int i = at / L, l = at % L, n = blk[i].n;
    amoe_vctx c = {&blk[i], l, 8, E, 0, nodes[i].data(), n, level[i].data(), commitment, 6, nullptr, &row,
                   &prob[i][(size_t)l * n * 8], scratch, iscratch, nullptr, nullptr, nullptr};
    amoe_verifier_acceptmoe(&c, S);
    benchmark::DoNotOptimize(S);
    at = (at + 1) % (NB * L);
  }
  for (int i = 0; i < NB; i++) amoe_block_free(&blk[i]);
}
BENCHMARK(BM_acceptmoe_select)->Unit(benchmark::kNanosecond);

// Keeping the top 32 of one node-layer's 128 logits (binary16, sorted;
// amoe_block_set_full), half the time of generation. The logits follow the
// generator's qwen3 shape: (N(0,1) + N(0,1)) / 0.8 + 0.45 * a fixed N(0,1)
// bias per expert. 3,072 rows (one block's node-layers) in turn, so the
// data do not sit in L1.
static void BM_set_full(benchmark::State &st) {
  const int E = 128, R = 3072;
  std::vector<float> z((size_t)R * E), bias(E);
  amoe_rng r;
  amoe_rng_seed(&r, 5, 6, 7);
  for (auto &x : bias) x = (float)(0.45 * amoe_rng_normal(&r));
  for (int i = 0; i < R; i++)
    for (int x = 0; x < E; x++)
      z[(size_t)i * E + x] = (float)((amoe_rng_normal(&r) + amoe_rng_normal(&r)) / 0.8) + bias[x];
  amoe_block b;
  amoe_err e;
  amoe_block_init(&b, 48, E, 32);
  amoe_block_reserve(&b, 64, &e);
  int at = 0;
  for (auto _ : st) {
    amoe_block_set_full(&b, (at / 64) % 48, at % 64, &z[(size_t)at * E]);
    benchmark::ClobberMemory();
    at = (at + 1) % R;
  }
  amoe_block_free(&b);
}
BENCHMARK(BM_set_full)->Unit(benchmark::kNanosecond);

// The natural union of one (block, layer): 64 nodes x top-8 over 128 experts.
static void BM_union(benchmark::State &st) {
  amoe_block b;
  one_block(&b);
  uint8_t U[128];
  int l = 0;
  for (auto _ : st) {
    memset(U, 0, sizeof U);
    for (int t = 0; t < b.n; t++) {
      const uint16_t *id = amoe_block_ids(&b, l, t);
      for (int j = 0; j < 8; j++) U[id[j]] = 1;
    }
    int n = 0;
    for (int x = 0; x < 128; x++) n += U[x];
    benchmark::DoNotOptimize(n);
    l = (l + 1) % 48;
  }
  amoe_block_free(&b);
}
BENCHMARK(BM_union)->Unit(benchmark::kNanosecond);

// One layer's passes through a 48-slot cache: ~70 executed experts per
// (pass, layer), drawn from a skewed popularity, hits first (docs/design.md §8).
static void cache_bench(benchmark::State &st, amoe_cache_policy pol) {
  const int E = 128, L = 1;
  amoe_rng r;
  amoe_rng_seed(&r, 1, 2, 3);
  std::vector<uint8_t> sets(256 * E);
  for (int blk = 0; blk < 256; blk++)
    for (int x = 0; x < E; x++) sets[blk * E + x] = amoe_rng_unif(&r) < 0.9 * (1.0 - 0.5 * x / E);
  amoe_reqlog *log = nullptr;
  if (pol == AMOE_CACHE_BELADY) {
    log = amoe_reqlog_new(L, E);
    for (int rep = 0; rep < 64; rep++)
      for (int blk = 0; blk < 256; blk++) {
        for (int x = 0; x < E; x++)
          if (sets[blk * E + x]) amoe_reqlog_add(log, 0, x);
        amoe_reqlog_end_pass(log);
      }
    amoe_reqlog_finalize(log);
  }
  const amoe_cache_cfg cfg = {pol, AMOE_ORDER_HITS_FIRST, AMOE_OVERFLOW_EVICT};
  amoe_cache *c = amoe_cache_new(L, E, 48, cfg, log);
  std::vector<uint8_t> fetched(E);
  long blk = 0, requests = 0;
  for (auto _ : st) {
    const uint8_t *set = &sets[(blk % 256) * E];
    amoe_cache_pass_stats cs;
    amoe_cache_pass(c, 0, set, fetched.data(), &cs);
    benchmark::DoNotOptimize(cs);
    requests += cs.hits + cs.fetched;
    amoe_cache_end_pass(c);
    if (++blk == 256 * 64) { // past the recorded future: start over
      st.PauseTiming();
      amoe_cache_free(c);
      c = amoe_cache_new(L, E, 48, cfg, log);
      blk = 0;
      st.ResumeTiming();
    }
  }
  st.counters["requests_per_s"] = benchmark::Counter((double)requests, benchmark::Counter::kIsRate);
  amoe_cache_free(c);
  amoe_reqlog_free(log);
}
static void BM_cache_lru(benchmark::State &st) { cache_bench(st, AMOE_CACHE_LRU); }
static void BM_cache_belady(benchmark::State &st) { cache_bench(st, AMOE_CACHE_BELADY); }
BENCHMARK(BM_cache_lru)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cache_belady)->Unit(benchmark::kMicrosecond);

// `acceptmoe cells` over the whole shared file of serving cells, on one
// core (the floor: under 2 minutes; docs/performance.md). Skips where the
// shared folder is absent.
static void BM_cells_shared(benchmark::State &st) {
  const std::string cells = std::string(AMOE_SOURCE_DIR) + "/../shared/real-data/serving/cells.csv";
  if (access(cells.c_str(), R_OK) != 0) {
    st.SkipWithError("no shared serving cells");
    return;
  }
  const std::string cmd = "taskset -c 0 " + std::string(AMOE_BIN) + " cells " + cells + " --quiet >/dev/null";
  for (auto _ : st)
    if (std::system(cmd.c_str()) != 0) st.SkipWithError("acceptmoe cells failed");
}
BENCHMARK(BM_cells_shared)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  remove(trace_path().c_str());
  remove(batch_trace_path().c_str()); /* (either may not exist) */
  return 0;
}
