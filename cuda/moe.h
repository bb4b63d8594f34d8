/* One MoE layer over the verified tokens of a block (docs/design.md §11), behind a
 * plain C header: no CUDA types, so the CLI and the tests link it whether or
 * not CUDA exists. The backends are the rows of moe.c's table: cpu (the
 * float32 reference, always built) and, in CUDA builds, cublas-loop,
 * cublas-grouped and skinny (moe_cuda.cu).
 * Every backend computes, for each token t and each of its k assignments
 * (e, w):  y[t] += w · W_down[e] · (silu(W_gate[e]·x[t]) ⊙ (W_up[e]·x[t]))
 * with bf16 weights and activations and fp32 accumulation. */
#ifndef AMOE_MOE_H
#define AMOE_MOE_H

#include <stdint.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int hidden, inter, experts; /* d, f, E */
} amoe_moe_shape;

/* Host-side description of one layer's work. x is bf16 [tokens][d]; route and
 * weight are [tokens][k] (route -1 = no assignment). */
typedef struct {
  int tokens, k;
  const uint16_t *x;
  const int32_t *route;
  const float *weight;
} amoe_moe_batch;

typedef struct amoe_moe_backend amoe_moe_backend;

/* A backend is a row of one table (moe.c): its name, a line for --help,
 * how many timed repeats a run takes by default (wall clock on the CPU
 * needs one; device timings take the median of five), and the roles it
 * is the default for in calibrate-hw. */
enum { AMOE_MOE_STREAMING = 1 };
typedef struct {
  const char *name, *description;
  int repeats;
  int roles; /* AMOE_MOE_STREAMING: calibrate-hw's default kernel */
} amoe_moe_backend_info;

/* Names of the backends this build has, NULL-terminated. */
const char *const *amoe_moe_backends(void);
/* The row named `name`, or NULL when this build has none. */
const amoe_moe_backend_info *amoe_moe_backend_find(const char *name);
/* The first backend of this build with the role, or NULL. */
const char *amoe_moe_backend_for(int role);
/* An open backend's row. */
const amoe_moe_backend_info *amoe_moe_info(const amoe_moe_backend *b);
/* Opens a backend for `layers` layers of the given shape. Weights are
 * deterministic random bf16 from seed (the same on every backend), uniform
 * in ±1/sqrt(fan-in). Fails with a clear message when a GPU backend has no
 * device or the weights do not fit. */
amoe_status amoe_moe_open(amoe_moe_backend **b, const char *name, amoe_moe_shape shape, int layers,
                          uint64_t seed, amoe_err *e);
void amoe_moe_close(amoe_moe_backend *b);
/* Checks a backend against the CPU reference on a small random batch at its
 * shape (poisoned buffers, relative L2 error <= 2e-2): run before anything
 * is timed. Returns the error in *rel_err. The cpu backend passes trivially. */
amoe_status amoe_moe_selfcheck(amoe_moe_backend *b, double *rel_err, amoe_err *e);

/* Runs one layer; y is float [tokens][d] on the host. seconds: measured time
 * of the layer (device time for GPU backends, wall time for cpu). */
amoe_status amoe_moe_run(amoe_moe_backend *b, int layer, const amoe_moe_batch *batch, float *y, double *seconds,
                         amoe_err *e);

/* Weight layers the backend holds: layer l runs on weights l % held (GPU
 * backends hold all layers when they fit in device memory, else a subset). */
int amoe_moe_layers_held(const amoe_moe_backend *b);
/* Cold runs: flush the L2 cache (a memset of its size) before each timed
 * run, so the weights come from HBM (no-op on the cpu backend). */
void amoe_moe_cold(amoe_moe_backend *b, int on);
/* Fill intermediate and output buffers with NaN before each run, so an
 * element a kernel forgot to write shows up in the comparison. */
void amoe_moe_poison(amoe_moe_backend *b, int on);

/* Device measurements for `acceptmoe calibrate-hw` (errors without a GPU):
 * device-to-device copy bandwidth (bytes read + written per second) and
 * pinned host-to-device bandwidth, each the median of `repeats` copies of
 * `bytes`; and the device's name. */
amoe_status amoe_moe_measure_copy(double bytes, int repeats, double *d2d_bw, double *h2d_bw, char *name,
                                  int name_len, amoe_err *e);

/* Offload (docs/design.md §11): performs the host-to-device copies of `experts`
 * expert-sized blocks (3·d·f bf16 each) from pinned host memory into a device
 * slot pool, on their own stream, and waits for them as an on-demand fetch
 * does; seconds = the copies' device time (CUDA events). The compute keeps
 * reading the device-resident weights, so results are unchanged: what is
 * measured is the fetch wait the simulator's cache decisions cost. The cpu
 * backend does the same with memcpy. slots: the pool's size in experts. */
amoe_status amoe_moe_fetch(amoe_moe_backend *b, int experts, int slots, double *seconds, amoe_err *e);

/* The offload slot pool (docs/design.md §8, §11): `slots` expert slots per
 * held layer. amoe_moe_load copies layer l's experts into the given slots
 * (seconds: the copies' time); amoe_moe_run_pool computes like
 * amoe_moe_run but reads expert e's weights from slot slot_of[e] (-1: from
 * the weights themselves, as an expert streamed past the cache is), so a
 * wrong placement shows in y. The CUDA backends keep pinned host copies of
 * as many layers as 16 GB hold and, from then on, hold that many layers for
 * the resident path too (the same weights); their pool has no staging
 * buffer, so every expert needs a slot (overflow: evict). */
int amoe_moe_has_pool(const amoe_moe_backend *b);
amoe_status amoe_moe_pool(amoe_moe_backend *b, int slots, amoe_err *e);
amoe_status amoe_moe_load(amoe_moe_backend *b, int layer, int n, const int *experts, const int16_t *slot,
                          double *seconds, amoe_err *e);
amoe_status amoe_moe_run_pool(amoe_moe_backend *b, int layer, const amoe_moe_batch *batch, const int16_t *slot_of,
                              float *y, double *seconds, amoe_err *e);

/* cudaProfilerStart/Stop around a pass, for nsys/ncu capture ranges
 * (no-op without CUDA). */
void amoe_moe_profiler(int on);

/* The deterministic weights, for tests: element i of expert e's gate/up
 * (2f x d, gate rows first) or down (d x f) matrix at a layer. */
uint16_t amoe_moe_weight(uint64_t seed, int layer, int expert, int down, uint64_t i, int fan_in);
/* Device memory the GPU backends need for `layers` layers of this shape
 * (weights only), for planning which layers fit. */
double amoe_moe_weight_bytes(amoe_moe_shape shape, int layers);

/* bf16 helpers (round to nearest even). */
static inline float amoe_bf16_to_f32(uint16_t h) {
  union {
    uint32_t u;
    float f;
  } v = {(uint32_t)h << 16};
  return v.f;
}
static inline uint16_t amoe_f32_to_bf16(float f) {
  union {
    float f;
    uint32_t u;
  } v = {f};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* NaN stays NaN */
  uint32_t r = 0x7fffu + ((v.u >> 16) & 1u);
  return (uint16_t)((v.u + r) >> 16);
}

#ifdef __cplusplus
}
#endif

#endif
