/* The backends as rows of one table, each with its operations (as
 * nccl-tests' operations are), and the float32 CPU reference (docs/design.md
 * §11). The reference materialises each (layer, expert)'s weights on first use
 * and keeps them while they fit a memory cap; past it, it regenerates them
 * per use (slow, still exact), so any shape runs, tiny ones fast. */
#include "moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* AMOE_CUDA_LOADER: the CUDA rows and the module loader, in a CUDA build
 * (the module it made) or a sanitized one (only ACCEPTMOE_CUDA_MODULE: the
 * kernels emulated on the CPU, tests/cuda_on_cpu.sh) */
#if defined(AMOE_HAVE_CUDA) && !defined(AMOE_CUDA_LOADER)
#define AMOE_CUDA_LOADER 1
#endif
#include "moe_weights.h"
#include "rng.h"
#ifdef AMOE_CUDA_LOADER
#include "moe_cuda.h"
#endif

#define REF_CACHE_BYTES (2.0 * 1024 * 1024 * 1024)

/* What a backend does; every public call below is one call through it. */
typedef struct {
  amoe_status (*run)(amoe_moe_backend *b, int layer, const amoe_moe_batch *x, const int16_t *slot_of, float *y,
                     double *seconds, amoe_err *e); /* slot_of NULL: the resident weights */
  int (*layers_held)(const amoe_moe_backend *b);
  void (*cold)(amoe_moe_backend *b, int on);
  void (*poison)(amoe_moe_backend *b, int on);
  amoe_status (*pool)(amoe_moe_backend *b, int slots, amoe_err *e);
  amoe_status (*load)(amoe_moe_backend *b, int layer, int n, const int *experts, const int16_t *slot,
                      double *seconds, amoe_err *e);
  amoe_status (*fetch)(amoe_moe_backend *b, int experts, int slots, double *seconds, amoe_err *e);
  void (*close)(amoe_moe_backend *b);
} backend_ops;

static const backend_ops CPU_OPS;
#ifdef AMOE_CUDA_LOADER
static const backend_ops GPU_OPS;
#endif

/* The backends: rows of one table (nccl-tests' operations). impl is the
 * CUDA module's kernel (moe_cuda.h), 0 for the reference. */
typedef struct {
  amoe_moe_backend_info info;
  int impl;
  const backend_ops *ops;
} backend_row;

static const backend_row BACKENDS[] = {
    {{"cpu", "float32 reference in C, the oracle every other backend is checked against", 1, 0}, 0, &CPU_OPS},
#ifdef AMOE_CUDA_LOADER
    {{"cublas-loop", "cublasGemmEx per executed expert", 5, 0}, 1, &GPU_OPS},
    {{"cublas-grouped", "one cublasGemmGroupedBatchedEx per GEMM of the layer", 5, 0}, 2, &GPU_OPS},
    {{"skinny", "our weight-streaming kernel for few tokens per expert", 5, AMOE_MOE_STREAMING}, 3, &GPU_OPS},
#endif
};
#define NBACKENDS ((int)(sizeof BACKENDS / sizeof *BACKENDS))

const char *const *amoe_moe_backends(void) {
  static const char *names[NBACKENDS + 1];
  for (int i = 0; i < NBACKENDS; i++) names[i] = BACKENDS[i].info.name;
  return names;
}

const amoe_moe_backend_info *amoe_moe_backend_find(const char *name) {
  for (int i = 0; i < NBACKENDS; i++)
    if (!strcmp(BACKENDS[i].info.name, name)) return &BACKENDS[i].info;
  return NULL;
}

const char *amoe_moe_backend_for(int role) {
  for (int i = 0; i < NBACKENDS; i++)
    if (BACKENDS[i].info.roles & role) return BACKENDS[i].info.name;
  return NULL;
}

struct amoe_moe_backend {
  const backend_row *row;
  amoe_moe_shape s;
  int layers;
  uint64_t seed;
  float **w; /* [layer * E + e] -> gate/up (2f x d) then down (d x f), or NULL */
  double cached;
  float *tmp_w, *h;
  unsigned char *host_pool, *dev_pool; /* cpu emulation of the fetch path */
  int pool_slots;
  float **slot_w;     /* the slot pool: [held layer * slots + slot] an expert's weights, or NULL */
  int *slot_expert;   /* which expert each slot holds, or -1 */
  int slots;
#ifdef AMOE_CUDA_LOADER
  amoe_moe_gpu *gpu;
#endif
};

static double wall_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Every assignment routes to an expert of the layer, or -1. */
static amoe_status check_routes(const amoe_moe_backend *b, const amoe_moe_batch *x, amoe_err *e) {
  for (int i = 0; i < x->tokens * x->k; i++)
    if (x->route[i] < -1 || x->route[i] >= b->s.experts)
      return amoe_fail(e, AMOE_EINVAL, "assignment %d routes to expert %d of %d", i, x->route[i], b->s.experts);
  return AMOE_OK;
}

uint16_t amoe_moe_weight(uint64_t seed, int layer, int expert, int down, uint64_t i, int fan_in) {
  return amoe_w_value(seed, layer, expert, down, i, 1.0f / sqrtf((float)fan_in));
}

double amoe_moe_weight_bytes(amoe_moe_shape s, int layers) {
  return amoe_w_bytes(s.experts, s.hidden, s.inter, layers);
}

#ifdef AMOE_CUDA_LOADER
#include <dlfcn.h>
/* The CUDA module (moe_cuda.h), loaded on first use: ACCEPTMOE_CUDA_MODULE,
 * else the one this build made. Not thread-safe: the CLI loads it from its
 * main thread before any GPU work. */
static const amoe_moe_gpu_api *gpu_api(amoe_err *e) {
  static const amoe_moe_gpu_api *api;
  if (api) return api;
  const char *path = getenv("ACCEPTMOE_CUDA_MODULE");
#ifdef AMOE_CUDA_MODULE
  if (!path || !path[0]) path = AMOE_CUDA_MODULE;
#else
  if (!path || !path[0]) {
    amoe_fail(e, AMOE_EIO, "no CUDA device: this build has no CUDA module of its own (ACCEPTMOE_CUDA_MODULE names one)");
    return NULL;
  }
#endif
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    amoe_fail(e, AMOE_EIO, "cannot load the CUDA backends: %s", dlerror());
    return NULL;
  }
  const amoe_moe_gpu_api *(*get)(void);
  void *sym = dlsym(h, AMOE_MOE_GPU_API_SYMBOL);
  memcpy(&get, &sym, sizeof get); /* (object to function pointer, as POSIX allows) */
  if (!sym) {
    amoe_fail(e, AMOE_EIO, "%s: no %s in the CUDA module", path, AMOE_MOE_GPU_API_SYMBOL);
    return NULL;
  }
  api = get();
  return api;
}
#endif

amoe_status amoe_moe_open(amoe_moe_backend **out, const char *name, amoe_moe_shape s, int layers, uint64_t seed,
                          amoe_err *e) {
  *out = NULL;
  const backend_row *row = NULL;
  for (int i = 0; i < NBACKENDS; i++)
    if (!strcmp(name, BACKENDS[i].info.name)) row = &BACKENDS[i];
  if (!row) {
    char all[256] = "";
    for (int i = 0; i < NBACKENDS; i++)
      snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", i ? ", " : "", BACKENDS[i].info.name);
    return amoe_fail(e, AMOE_EINVAL, "unknown backend '%s' (this build has %s%s)", name, all,
#ifdef AMOE_CUDA_LOADER
                     ""
#else
                     "; a GPU backend needs a CUDA build"
#endif
    );
  }
  if (s.hidden < 1 || s.inter < 1 || s.experts < 1 || layers < 1)
    return amoe_fail(e, AMOE_EINVAL, "backend %s: empty shape", name);
  amoe_moe_backend *b = calloc(1, sizeof *b);
  if (!b) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  b->row = row;
  b->s = s;
  b->layers = layers;
  b->seed = seed;
#ifdef AMOE_CUDA_LOADER
  if (row->impl) {
    const amoe_moe_gpu_api *api = gpu_api(e);
    amoe_status st = api ? api->open(&b->gpu, row->impl, s, layers, seed, e) : AMOE_EIO;
    if (st != AMOE_OK) {
      free(b);
      return st;
    }
    *out = b;
    return AMOE_OK;
  }
#endif
  b->w = calloc((size_t)layers * s.experts, sizeof *b->w);
  b->tmp_w = malloc((size_t)3 * s.hidden * s.inter * sizeof(float));
  b->h = malloc((size_t)2 * s.inter * sizeof(float));
  if (!b->w || !b->tmp_w || !b->h) {
    amoe_moe_close(b);
    return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  }
  *out = b;
  return AMOE_OK;
}

void amoe_moe_close(amoe_moe_backend *b) {
  if (b) b->row->ops->close(b);
}

/* The slot pool's buffers, freed (a second pool replaces the first). */
static void cpu_pool_free(amoe_moe_backend *b) {
  if (b->slot_w)
    for (size_t i = 0; i < (size_t)b->layers * b->slots; i++) free(b->slot_w[i]);
  free(b->slot_w);
  free(b->slot_expert);
  b->slot_w = NULL;
  b->slot_expert = NULL;
  b->slots = 0;
}

static void cpu_close(amoe_moe_backend *b) {
  if (b->w)
    for (int i = 0; i < b->layers * b->s.experts; i++) free(b->w[i]);
  free(b->w);
  free(b->tmp_w);
  free(b->h);
  free(b->host_pool);
  free(b->dev_pool);
  cpu_pool_free(b);
  free(b);
}

/* Float weights of (layer, expert): cached, or generated into tmp_w. */
static const float *ref_weights(amoe_moe_backend *b, int layer, int ex) {
  const int d = b->s.hidden, f = b->s.inter;
  size_t n_gu = (size_t)2 * f * d, n_dn = (size_t)d * f;
  float **slot = &b->w[(size_t)layer * b->s.experts + ex];
  if (*slot) return *slot;
  float *w = b->tmp_w;
  double bytes = (double)(n_gu + n_dn) * sizeof(float);
  if (b->cached + bytes <= REF_CACHE_BYTES) {
    float *nw = malloc((n_gu + n_dn) * sizeof(float));
    if (nw) {
      w = nw;
      *slot = nw;
      b->cached += bytes;
    }
  }
  float sg = 1.0f / sqrtf((float)d), sd = 1.0f / sqrtf((float)f);
  for (size_t i = 0; i < n_gu; i++) w[i] = amoe_bf16_to_f32(amoe_w_value(b->seed, layer, ex, 0, i, sg));
  for (size_t i = 0; i < n_dn; i++) w[n_gu + i] = amoe_bf16_to_f32(amoe_w_value(b->seed, layer, ex, 1, i, sd));
  return w;
}

/* slot_of: NULL, or per expert the pool slot to read its weights from (-1:
 * from the weights themselves, as a streamed expert is) */
static amoe_status ref_run(amoe_moe_backend *b, int layer, const amoe_moe_batch *x, const int16_t *slot_of, float *y) {
  const int d = b->s.hidden, f = b->s.inter;
  memset(y, 0, (size_t)x->tokens * d * sizeof(float));
  for (int ex = 0; ex < b->s.experts; ex++) { /* expert-major: each expert's weights once */
    const float *w = NULL;
    for (int t = 0; t < x->tokens; t++)
      for (int j = 0; j < x->k; j++) {
        if (x->route[t * x->k + j] != ex) continue;
        if (!w)
          w = slot_of && slot_of[ex] >= 0 ? b->slot_w[(size_t)layer * b->slots + slot_of[ex]] : ref_weights(b, layer, ex);
        const uint16_t *xt = x->x + (size_t)t * d;
        for (int r = 0; r < 2 * f; r++) {
          const float *row = w + (size_t)r * d;
          float acc = 0;
          for (int c = 0; c < d; c++) acc += row[c] * amoe_bf16_to_f32(xt[c]);
          b->h[r] = acc;
        }
        for (int r = 0; r < f; r++) { /* SwiGLU: silu(gate) * up */
          float g = b->h[r];
          b->h[r] = g / (1.0f + expf(-g)) * b->h[f + r];
        }
        const float *dn = w + (size_t)2 * f * d;
        float wt = x->weight[t * x->k + j];
        for (int c = 0; c < d; c++) {
          const float *row = dn + (size_t)c * f;
          float acc = 0;
          for (int r = 0; r < f; r++) acc += row[r] * b->h[r];
          y[(size_t)t * d + c] += wt * acc;
        }
      }
  }
  return AMOE_OK;
}

/* ---- the reference's operations ---- */

static int cpu_layers_held(const amoe_moe_backend *b) { return b->layers; }
static void cpu_no_switch(amoe_moe_backend *b, int on) { /* no cache to flush; every output element is written */
  (void)b;
  (void)on;
}

static amoe_status cpu_run(amoe_moe_backend *b, int layer, const amoe_moe_batch *x, const int16_t *slot_of, float *y,
                           double *seconds, amoe_err *e) {
  if (slot_of) {
    if (!b->slots) return amoe_fail(e, AMOE_EINVAL, "run_pool: no slot pool (amoe_moe_pool first)");
    for (int i = 0; i < x->tokens * x->k; i++)
      if (x->route[i] >= 0 && slot_of[x->route[i]] >= b->slots)
        return amoe_fail(e, AMOE_EINVAL, "expert %d placed in slot %d of %d", x->route[i], slot_of[x->route[i]],
                         b->slots);
  }
  const double t0 = wall_s();
  amoe_status st = ref_run(b, layer, x, slot_of, y);
  if (seconds) *seconds = wall_s() - t0;
  return st;
}

static amoe_status cpu_pool(amoe_moe_backend *b, int slots, amoe_err *e) {
  cpu_pool_free(b);
  const size_t n = (size_t)b->layers * slots, per = (size_t)3 * b->s.hidden * b->s.inter;
  b->slot_w = calloc(n, sizeof *b->slot_w);
  b->slot_expert = malloc(n * sizeof *b->slot_expert);
  b->slots = slots; /* (what cpu_pool_free walks, allocated or not) */
  if (!b->slot_w || !b->slot_expert) return amoe_fail(e, AMOE_ENOMEM, "pool: out of memory");
  for (size_t i = 0; i < n; i++) {
    b->slot_expert[i] = -1;
    if (!(b->slot_w[i] = malloc(per * sizeof(float)))) return amoe_fail(e, AMOE_ENOMEM, "pool: out of memory");
  }
  return AMOE_OK;
}

static amoe_status cpu_load(amoe_moe_backend *b, int layer, int n, const int *experts, const int16_t *slot,
                            double *seconds, amoe_err *e) {
  if (!b->slots) return amoe_fail(e, AMOE_EINVAL, "load: no slot pool (amoe_moe_pool first)");
  const size_t per = (size_t)3 * b->s.hidden * b->s.inter;
  const double t0 = wall_s();
  for (int i = 0; i < n; i++) {
    if (experts[i] < 0 || experts[i] >= b->s.experts || slot[i] < 0 || slot[i] >= b->slots)
      return amoe_fail(e, AMOE_EINVAL, "load: expert %d into slot %d of %d", experts[i], slot[i], b->slots);
    const size_t k = (size_t)layer * b->slots + slot[i];
    memcpy(b->slot_w[k], ref_weights(b, layer, experts[i]), per * sizeof(float));
    b->slot_expert[k] = experts[i];
  }
  if (seconds) *seconds = wall_s() - t0;
  return AMOE_OK;
}

/* The fetch path with memcpy: host buffer to a pool of `slots` expert slots. */
static amoe_status cpu_fetch(amoe_moe_backend *b, int experts, int slots, double *seconds, amoe_err *e) {
  size_t eb = (size_t)3 * b->s.hidden * b->s.inter * 2;
  if (!b->host_pool || b->pool_slots != slots) {
    free(b->host_pool);
    free(b->dev_pool);
    b->host_pool = malloc(eb);
    b->dev_pool = malloc(eb * (size_t)slots);
    b->pool_slots = slots;
    if (!b->host_pool || !b->dev_pool) return amoe_fail(e, AMOE_ENOMEM, "fetch: out of memory for %d slots", slots);
    memset(b->host_pool, 0x3c, eb);
  }
  const double t0 = wall_s();
  for (int i = 0; i < experts; i++) memcpy(b->dev_pool + eb * (size_t)(i % slots), b->host_pool, eb);
  if (seconds) *seconds = wall_s() - t0;
  return AMOE_OK;
}

static const backend_ops CPU_OPS = {cpu_run, cpu_layers_held, cpu_no_switch, cpu_no_switch, cpu_pool,
                                    cpu_load, cpu_fetch, cpu_close};

/* ---- the CUDA module's operations (moe_cuda.h), loaded on first use ---- */
#ifdef AMOE_CUDA_LOADER
/* (every call below follows a successful open, which loaded the module) */
static amoe_status gpu_run(amoe_moe_backend *b, int layer, const amoe_moe_batch *x, const int16_t *slot_of, float *y,
                           double *seconds, amoe_err *e) {
  return slot_of ? gpu_api(NULL)->run_pool(b->gpu, layer, x, slot_of, y, seconds, e)
                 : gpu_api(NULL)->run(b->gpu, layer, x, y, seconds, e);
}
static int gpu_layers_held(const amoe_moe_backend *b) { return gpu_api(NULL)->layers_held(b->gpu); }
static void gpu_cold(amoe_moe_backend *b, int on) { gpu_api(NULL)->cold(b->gpu, on); }
static void gpu_poison(amoe_moe_backend *b, int on) { gpu_api(NULL)->poison(b->gpu, on); }
static amoe_status gpu_pool(amoe_moe_backend *b, int slots, amoe_err *e) { return gpu_api(NULL)->pool(b->gpu, slots, e); }
static amoe_status gpu_load(amoe_moe_backend *b, int layer, int n, const int *experts, const int16_t *slot,
                            double *seconds, amoe_err *e) {
  return gpu_api(NULL)->load(b->gpu, layer, n, experts, slot, seconds, e);
}
static amoe_status gpu_fetch(amoe_moe_backend *b, int experts, int slots, double *seconds, amoe_err *e) {
  return gpu_api(NULL)->fetch(b->gpu, experts, slots, seconds, e);
}
static void gpu_close(amoe_moe_backend *b) {
  gpu_api(NULL)->close(b->gpu);
  free(b);
}
static const backend_ops GPU_OPS = {gpu_run, gpu_layers_held, gpu_cold, gpu_poison, gpu_pool,
                                    gpu_load, gpu_fetch, gpu_close};
#endif

/* ---- the public calls: checks, then the row's operation ---- */

int amoe_moe_layers_held(const amoe_moe_backend *b) { return b->row->ops->layers_held(b); }
void amoe_moe_cold(amoe_moe_backend *b, int on) { b->row->ops->cold(b, on); }
void amoe_moe_poison(amoe_moe_backend *b, int on) { b->row->ops->poison(b, on); }
const amoe_moe_backend_info *amoe_moe_info(const amoe_moe_backend *b) { return &b->row->info; }

amoe_status amoe_moe_run(amoe_moe_backend *b, int layer, const amoe_moe_batch *x, float *y, double *seconds,
                         amoe_err *e) {
  if (layer < 0) return amoe_fail(e, AMOE_EINVAL, "layer %d out of range", layer);
  AMOE_TRY(check_routes(b, x, e));
  return b->row->ops->run(b, layer % amoe_moe_layers_held(b), x, NULL, y, seconds, e);
}

amoe_status amoe_moe_run_pool(amoe_moe_backend *b, int layer, const amoe_moe_batch *x, const int16_t *slot_of,
                              float *y, double *seconds, amoe_err *e) {
  if (layer < 0) return amoe_fail(e, AMOE_EINVAL, "layer %d out of range", layer);
  AMOE_TRY(check_routes(b, x, e));
  return b->row->ops->run(b, layer % amoe_moe_layers_held(b), x, slot_of, y, seconds, e);
}

int amoe_moe_has_pool(const amoe_moe_backend *b) { return b != NULL; } /* every backend of this build */

amoe_status amoe_moe_pool(amoe_moe_backend *b, int slots, amoe_err *e) {
  if (slots < 1) return amoe_fail(e, AMOE_EINVAL, "pool: need at least one slot");
  return b->row->ops->pool(b, slots, e);
}

amoe_status amoe_moe_load(amoe_moe_backend *b, int layer, int n, const int *experts, const int16_t *slot,
                          double *seconds, amoe_err *e) {
  if (seconds) *seconds = 0;
  if (layer < 0) return amoe_fail(e, AMOE_EINVAL, "layer %d out of range", layer);
  return b->row->ops->load(b, layer % amoe_moe_layers_held(b), n, experts, slot, seconds, e);
}

amoe_status amoe_moe_fetch(amoe_moe_backend *b, int experts, int slots, double *seconds, amoe_err *e) {
  if (seconds) *seconds = 0;
  if (experts <= 0) return AMOE_OK;
  if (slots < 1) return amoe_fail(e, AMOE_EINVAL, "fetch: need at least one slot");
  return b->row->ops->fetch(b, experts, slots, seconds, e);
}

/* Device-wide, not a backend's: through the module when there is one. */
amoe_status amoe_moe_measure_copy(double bytes, int repeats, double *d2d_bw, double *h2d_bw, char *name,
                                  int name_len, amoe_err *e) {
#ifdef AMOE_CUDA_LOADER
  const amoe_moe_gpu_api *api = gpu_api(e);
  return api ? api->measure_copy(bytes, repeats, d2d_bw, h2d_bw, name, name_len, e) : AMOE_EIO;
#else
  (void)bytes, (void)repeats, (void)d2d_bw, (void)h2d_bw, (void)name, (void)name_len;
  return amoe_fail(e, AMOE_EIO, "measuring copy bandwidth needs a CUDA build and a GPU");
#endif
}

void amoe_moe_profiler(int on) {
#ifdef AMOE_CUDA_LOADER
  const amoe_moe_gpu_api *api = gpu_api(NULL); /* no module: nothing to profile */
  if (api) api->profiler(on);
#else
  (void)on;
#endif
}

amoe_status amoe_moe_selfcheck(amoe_moe_backend *b, double *rel_err, amoe_err *e) {
  *rel_err = 0;
  if (!b->row->impl) return AMOE_OK; /* the reference itself */
  const int T = 8, k = 2, d = b->s.hidden;
  uint16_t *x = malloc((size_t)T * d * sizeof *x);
  float *yr = malloc((size_t)T * d * sizeof *yr), *yg = malloc((size_t)T * d * sizeof *yg), w[16];
  int32_t route[16];
  amoe_moe_backend *ref = NULL;
  amoe_status st = x && yr && yg ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  if (!st) {
    amoe_rng r;
    amoe_rng_seed(&r, 0x5e1fULL, (uint64_t)d, (uint64_t)b->s.experts);
    for (int i = 0; i < T * d; i++) x[i] = amoe_f32_to_bf16((float)amoe_rng_normal(&r));
    for (int i = 0; i < T * k; i++) {
      route[i] = (int32_t)((i * 7 + (i / k) * 3) % b->s.experts);
      w[i] = 0.5f;
    }
    for (int t = 0; t < T; t++) /* distinct experts per token */
      if (route[t * k] == route[t * k + 1]) route[t * k + 1] = (route[t * k + 1] + 1) % b->s.experts;
    st = amoe_moe_open(&ref, "cpu", b->s, 1, b->seed, e);
  }
  amoe_moe_batch batch = {T, k, x, route, w};
  if (!st) st = amoe_moe_run(ref, 0, &batch, yr, NULL, e);
  if (!st) {
    amoe_moe_poison(b, 1);
    st = amoe_moe_run(b, 0, &batch, yg, NULL, e);
    amoe_moe_poison(b, 0);
  }
  if (!st) {
    double num = 0, den = 0;
    int nan = 0;
    for (int i = 0; i < T * d; i++) {
      nan += isnan(yg[i]);
      num += (yg[i] - (double)yr[i]) * (yg[i] - (double)yr[i]);
      den += (double)yr[i] * yr[i];
    }
    *rel_err = sqrt(num / (den > 0 ? den : 1));
    if (nan || !(*rel_err <= 2e-2))
      st = amoe_fail(e, AMOE_EIO, "backend disagrees with the CPU reference (relative L2 %.3g, %d NaN): not timing it",
                     *rel_err, nan);
  }
  amoe_moe_close(ref);
  free(x);
  free(yr);
  free(yg);
  return st;
}
