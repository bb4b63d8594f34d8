// MoE layer kernels on the GPU: the three implementations over tokens per
// expert 1..64 at the qwen3-30b-a3b and gpt-oss-120b expert shapes, 32
// executed experts. Manual timing with CUDA events (the backend's own);
// bytes = the executed experts' weights; pct_of_copy_bw = streamed bytes/s
// over the device copy bandwidth measured at start-up (printed in the context;
// divide weight_bytes_per_s by it for % of peak). Correctness is checked by
// `test_moe gpu`, which cuda/device-check.sh runs before this.
// Each backend is opened once per shape and warmed up before timing.
//   build/harness/bench/amoe_bench_moe --benchmark_min_time=0.2 [--benchmark_filter=skinny]
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <vector>

extern "C" {
#include "moe.h"
#include "rng.h"
}

static double g_copy_bw = 0;

struct shape_t {
  const char *name;
  amoe_moe_shape s;
};
static const shape_t SHAPES[] = {{"qwen3-30b-a3b", {2048, 768, 128}}, {"gpt-oss-120b", {2880, 2880, 128}}};
static const char *IMPLS[] = {"cublas-loop", "cublas-grouped", "skinny"};

// One backend per (implementation, shape), opened once and kept: opening
// fills GBs of weights, which a benchmark's every repetition would redo.
static amoe_moe_backend *g_open[3][2];

static void BM_moe_layer(benchmark::State &st, int impl, int shape) {
  const shape_t &sh = SHAPES[shape];
  const int n = (int)st.range(0), X = 32, T = X * n;
  amoe_err e;
  if (!g_open[impl][shape] && amoe_moe_open(&g_open[impl][shape], IMPLS[impl], sh.s, 1, 1, &e) != AMOE_OK) {
    st.SkipWithError(e.msg);
    return;
  }
  amoe_moe_backend *b = g_open[impl][shape];
  std::vector<uint16_t> x((size_t)T * sh.s.hidden);
  std::vector<int32_t> route(T);
  std::vector<float> w(T, 1.0f), y((size_t)T * sh.s.hidden);
  amoe_rng r;
  amoe_rng_seed(&r, 9, (uint64_t)n, 1);
  for (auto &v : x) v = amoe_f32_to_bf16((float)amoe_rng_normal(&r));
  for (int i = 0; i < T; i++) route[i] = i % X;
  amoe_moe_batch batch = {T, 1, x.data(), route.data(), w.data()};
  if (amoe_moe_run(b, 0, &batch, y.data(), nullptr, &e) != AMOE_OK) { // warm-up, untimed: buffers sized, code loaded
    st.SkipWithError(e.msg);
    return;
  }
  for (auto _ : st) {
    double sec = 0;
    if (amoe_moe_run(b, 0, &batch, y.data(), &sec, &e) != AMOE_OK) {
      st.SkipWithError(e.msg);
      break;
    }
    st.SetIterationTime(sec);
  }
  double bytes = X * 3.0 * sh.s.hidden * sh.s.inter * 2.0;
  st.counters["weight_bytes_per_s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  amoe_err e;
  double h2d = 0;
  char name[256] = "";
  if (amoe_moe_measure_copy(1 << 30, 5, &g_copy_bw, &h2d, name, sizeof name, &e) == AMOE_OK) {
    benchmark::AddCustomContext("gpu", name);
    benchmark::AddCustomContext("device_copy_bw", std::to_string(g_copy_bw));
    benchmark::AddCustomContext("pinned_h2d_bw", std::to_string(h2d));
  } else {
    benchmark::AddCustomContext("gpu", e.msg);
  }
  // names say the implementation and shape, so --benchmark_filter=skinny picks one
  for (int i = 0; i < 3; i++)
    for (int sh = 0; sh < 2; sh++)
      benchmark::RegisterBenchmark((std::string("moe_layer/") + IMPLS[i] + "/" + SHAPES[sh].name).c_str(),
                                   BM_moe_layer, i, sh)
          ->ArgName("tokens_per_expert")
          ->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->Arg(64)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  benchmark::RunSpecifiedBenchmarks();
  for (auto &row : g_open)
    for (auto *b : row) amoe_moe_close(b);
  return 0;
}
