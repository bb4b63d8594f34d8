// CUDA backends for one MoE layer (docs/design.md §11): bucket the (token, expert,
// weight) assignments by expert on the device, gather, gate/up GEMM, SwiGLU,
// down GEMM, weighted combine, for the executed experts only. bf16 weights and
// activations, fp32 accumulation. Three GEMM implementations:
//   cublas-loop     cublasGemmEx per executed expert
//   cublas-grouped  one cublasGemmGroupedBatchedEx per GEMM (a group per expert)
//   skinny          weight-streaming kernel: one warp per output row reads the
//                   row once and serves up to 16 tokens of that expert
// Every CUDA and cuBLAS call is checked; errors come back as amoe_status.
// Checked against the CPU reference (cuda/moe.c) by tests/test_moe.c before
// anything is timed (cuda/device-check.sh).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_cuda.h"
#include "moe_weights.h"
#include "nvtx.h"

#define CU(call)                                                                                    \
  do {                                                                                              \
    cudaError_t err_ = (call);                                                                      \
    if (err_ != cudaSuccess)                                                                        \
      return amoe_fail(e, AMOE_EIO, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
  } while (0)
#define CB(call)                                                                                    \
  do {                                                                                              \
    cublasStatus_t st_ = (call);                                                                    \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                               \
      return amoe_fail(e, AMOE_EIO, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__, #call, (int)st_); \
  } while (0)
#define KERNEL_CHECK() CU(cudaGetLastError())
// cublasGemmGroupedBatchedEx came with cuBLAS 12.5 (N3): an older toolkit
// builds every other backend, and cublas-grouped refuses at open
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120500
#define AMOE_GROUPED_GEMM 1
#else
#define AMOE_GROUPED_GEMM 0
#endif

#define SKINNY_TOK 16
#define SKINNY_SMEM (200 * 1024) // the skinny kernel's dynamic shared memory at most
#define MAX_E 1024

typedef __nv_bfloat16 bf16;

struct amoe_moe_gpu {
  int impl, layers_held, poison, cold;
  unsigned flushes; // cold runs so far (varies the flush pattern)
  void *l2_flush; // a buffer of the L2's size, for cold runs
  size_t l2_bytes;
  amoe_moe_shape s;
  uint64_t seed;
  cublasHandle_t blas;
  cudaStream_t stream;
  cudaEvent_t ev0, ev1;
  bf16 *w_gu, *w_dn; // [held][E][2f][d], [held][E][d][f]
  int cap_a, cap_t;  // assignment and token capacity
  bf16 *x, *xe, *h, *ha, *o;
  int32_t *route;
  float *weight, *y;
  int *perm_tok, *pos_of, *work; // work: the executed experts (expert, offset, count)
  int *chunk_cnt;                // [chunk][E] bucketing's counts per chunk of assignments
  const void **dA, **dB;
  void **dC;
  int *h_count, *h_work; // pinned host copies
  // cublas-grouped's pointer arrays, pinned, two sets (a layer's two GEMMs):
  // their copies to dA/dB/dC are then truly asynchronous (from pageable
  // memory cudaMemcpyAsync waited for the stream inside the timed window)
  const void **pA, **pB;
  void **pC;
  int gcall; // grouped GEMMs so far in this run (which set)
  // offload: a pinned host expert and a device slot pool, copies on their own stream
  cudaStream_t copy;
  cudaEvent_t c0, c1;
  void *host_expert, *slot_pool;
  // the slot pool proper: [held][slots] experts' weights on the device, loaded
  // from pinned host copies of the held layers ([held][E]); layers_held shrinks
  // to what the host copies hold, for the resident path too (same weights)
  bf16 *pool_gu, *pool_dn, *host_gu, *host_dn;
  int slots;
  int pool_slots;
};

static int amoe_moe_gpu_available(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static int amoe_moe_gpu_layers_held(const amoe_moe_gpu *g) { return g->layers_held; }
static void amoe_moe_gpu_poison(amoe_moe_gpu *g, int on) { g->poison = on; }
static void amoe_moe_gpu_cold(amoe_moe_gpu *g, int on) { g->cold = on; }

__global__ void fill_weights(bf16 *w, size_t per_expert, int experts, uint64_t seed, int layer, int down,
                             float scale) {
  size_t n = per_expert * (size_t)experts;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    int ex = (int)(i / per_expert);
    uint16_t v = amoe_w_value(seed, layer, ex, down, i % per_expert, scale);
    w[i] = __ushort_as_bfloat16(v);
  }
}

// Evicts the L2 by reading a buffer twice its size; the sum goes to memory
// only when it equals `tag`, which it never does in practice, so no line of
// the buffer turns dirty (a store would be written back later, in a timed
// window).
__global__ void l2_read(const uint4 *p, size_t n, unsigned tag, unsigned *sink) {
  unsigned s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s ^= p[i].x ^ p[i].y ^ p[i].z ^ p[i].w;
  if (s == tag + 0x9e3779b9u) sink[0] = s;
}

// Bucketing, in chunks of BUCKET_CHUNK assignments, one block each (N9:
// no single block over the whole pass). bucket_count: each chunk's count per
// expert, and -1 for an assignment without an expert. bucket_place: every
// block sums the chunks' counts (each expert's total, and what the chunks
// before its own hold), takes the exclusive offsets over the experts by a
// block-wide scan, and places its chunk's assignments of each expert in
// order: the same deterministic placement as one pass over all of them.
#define BUCKET_CHUNK 1024
__global__ void bucket_count(const int32_t *route, int A, int E, int *chunk_cnt, int *pos_of) {
  extern __shared__ int cnt[]; // [E]
  const int i0 = blockIdx.x * BUCKET_CHUNK, i1 = i0 + BUCKET_CHUNK < A ? i0 + BUCKET_CHUNK : A;
  for (int x = threadIdx.x; x < E; x += blockDim.x) cnt[x] = 0;
  __syncthreads();
  for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    const int ex = route[i];
    if (ex >= 0) atomicAdd(&cnt[ex], 1);
    else pos_of[i] = -1;
  }
  __syncthreads();
  for (int x = threadIdx.x; x < E; x += blockDim.x) chunk_cnt[(size_t)blockIdx.x * E + x] = cnt[x];
}

__global__ void bucket_place(const int32_t *route, int A, int k, int E, const int *chunk_cnt, int *perm_tok,
                             int *pos_of) {
  extern __shared__ int sh[]; // [E] totals, [E] offsets, [E] earlier chunks', [blockDim.x] partial sums
  int *tot = sh, *off = sh + E, *before = sh + 2 * E, *part = sh + 3 * E;
  const int nchunks = gridDim.x, c = blockIdx.x;
  for (int x = threadIdx.x; x < E; x += blockDim.x) {
    int t = 0, b = 0;
    for (int q = 0; q < nchunks; q++) {
      const int n = chunk_cnt[(size_t)q * E + x];
      t += n;
      b += q < c ? n : 0;
    }
    tot[x] = t;
    before[x] = b;
  }
  __syncthreads();
  // exclusive offsets without a serial pass over E: each thread sums its run
  // of experts, a scan over the threads' sums, then each run's offsets
  const int per = (E + blockDim.x - 1) / blockDim.x, x0 = threadIdx.x * per, x1 = x0 + per < E ? x0 + per : E;
  int sum = 0;
  for (int x = x0; x < x1; x++) sum += tot[x];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int step = 1; step < blockDim.x; step <<= 1) {
    const int v = threadIdx.x >= step ? part[threadIdx.x - step] : 0;
    __syncthreads();
    part[threadIdx.x] += v;
    __syncthreads();
  }
  int run = part[threadIdx.x] - sum;
  for (int x = x0; x < x1; x++) {
    off[x] = run;
    run += tot[x];
  }
  __syncthreads();
  const int i0 = c * BUCKET_CHUNK, i1 = i0 + BUCKET_CHUNK < A ? i0 + BUCKET_CHUNK : A;
  for (int x = threadIdx.x; x < E; x += blockDim.x) {
    int p = off[x] + before[x];
    for (int i = i0; i < i1; i++)
      if (route[i] == x) {
        perm_tok[p] = i / k;
        pos_of[i] = p;
        p++;
      }
  }
}

__global__ void gather(const bf16 *x, const int *perm_tok, int A, int d, bf16 *xe) {
  int p = blockIdx.x;
  if (p >= A) return;
  const bf16 *src = x + (size_t)perm_tok[p] * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) xe[(size_t)p * d + c] = src[c];
}

__global__ void swiglu(const bf16 *h, int A, int f, bf16 *ha) {
  size_t n = (size_t)A * f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t p = i / f, r = i % f;
    float g = __bfloat162float(h[p * 2 * f + r]), u = __bfloat162float(h[p * 2 * f + f + r]);
    ha[i] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
  }
}

__global__ void combine(const bf16 *o, const int *pos_of, const float *weight, int T, int k, int d, float *y) {
  int t = blockIdx.x;
  if (t >= T) return;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0;
    for (int j = 0; j < k; j++) { // fixed order: deterministic
      int p = pos_of[t * k + j];
      if (p >= 0) acc += weight[t * k + j] * __bfloat162float(o[(size_t)p * d + c]);
    }
    y[(size_t)t * d + c] = acc;
  }
}

// Skinny GEMM over every executed expert at once: out[(off+i)*rows + r] =
// W_e[r,:] · in[(off+i), :] for the expert's n_e tokens. The block stages a
// tile of the expert's tokens in shared memory; each warp owns SKINNY_RPW
// rows and streams them once per tile with 16-byte loads, so weights are read
// from HBM once while the token tile is reused from shared memory.
// work[3*j .. 3*j+2] = (expert, offset, count) of the j-th executed expert.
#define SKINNY_RPW 4
#define SKINNY_WARPS 8
// The eight bf16 of a 16-byte vector as floats, by bit operations on its
// 32-bit words (a bf16 is a float's top half; element 2z is word z's low
// half, little-endian). Not through a bf16 pointer to the vector: that
// breaks strict aliasing, and g++ -O2 miscompiled it in the CPU build.
__device__ __forceinline__ void bf16x8_floats(const uint4 v, float *f) {
  f[0] = __uint_as_float(v.x << 16), f[1] = __uint_as_float(v.x & 0xffff0000u);
  f[2] = __uint_as_float(v.y << 16), f[3] = __uint_as_float(v.y & 0xffff0000u);
  f[4] = __uint_as_float(v.z << 16), f[5] = __uint_as_float(v.z & 0xffff0000u);
  f[6] = __uint_as_float(v.w << 16), f[7] = __uint_as_float(v.w & 0xffff0000u);
}
__global__ void __launch_bounds__(SKINNY_WARPS * 32)
    skinny_gemm(const bf16 *W, size_t w_stride, const bf16 *in, int K, int rows, const int *work, int tile, bf16 *out) {
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r0 = (blockIdx.x * SKINNY_WARPS + warp) * SKINNY_RPW;
  const int ex = work[3 * blockIdx.y], off = work[3 * blockIdx.y + 1], n = work[3 * blockIdx.y + 2];
  const bf16 *wbase = W + (size_t)ex * w_stride;
  const int kv = K / 8; // uint4 vectors per row (K % 8 == 0)
  for (int t0 = 0; t0 < n; t0 += tile) {
    const int nt = n - t0 < tile ? n - t0 : tile;
    __syncthreads(); // the previous tile is no longer read
    const uint4 *src = reinterpret_cast<const uint4 *>(in + (size_t)(off + t0) * K);
    for (int v = threadIdx.x; v < nt * kv; v += blockDim.x) smem[v] = src[v];
    __syncthreads();
    float acc[SKINNY_RPW][SKINNY_TOK];
#pragma unroll
    for (int q = 0; q < SKINNY_RPW; q++)
#pragma unroll
      for (int i = 0; i < SKINNY_TOK; i++) acc[q][i] = 0;
    for (int v = lane; v < kv; v += 32) {
      float wf[SKINNY_RPW][8];
#pragma unroll
      for (int q = 0; q < SKINNY_RPW; q++) {
        int r = r0 + q;
        const uint4 wv =
            r < rows ? *reinterpret_cast<const uint4 *>(wbase + (size_t)r * K + 8 * v) : make_uint4(0, 0, 0, 0);
        bf16x8_floats(wv, wf[q]);
      }
#pragma unroll
      for (int i = 0; i < SKINNY_TOK; i++) {
        if (i < nt) {
          float xf[8];
          bf16x8_floats(smem[i * kv + v], xf);
#pragma unroll
          for (int q = 0; q < SKINNY_RPW; q++) {
            float s = 0;
#pragma unroll
            for (int z = 0; z < 8; z++) s += wf[q][z] * xf[z];
            acc[q][i] += s;
          }
        }
      }
    }
#pragma unroll
    for (int q = 0; q < SKINNY_RPW; q++)
#pragma unroll
      for (int i = 0; i < SKINNY_TOK; i++) {
        if (i >= nt) break; // only the tile's tokens: nt is the same in every lane, so the shuffles stay full-warp
        float s = acc[q][i];
        for (int sh = 16; sh > 0; sh >>= 1) s += __shfl_xor_sync(0xffffffffu, s, sh);
        if (lane == 0 && r0 + q < rows) out[(size_t)(off + t0 + i) * rows + r0 + q] = __float2bfloat16(s);
      }
  }
}

static void gpu_free_buffers(amoe_moe_gpu *g) {
  cudaFree(g->x);
  cudaFree(g->xe);
  cudaFree(g->h);
  cudaFree(g->ha);
  cudaFree(g->o);
  cudaFree(g->route);
  cudaFree(g->weight);
  cudaFree(g->y);
  cudaFree(g->perm_tok);
  cudaFree(g->pos_of);
  cudaFree(g->work);
  cudaFree(g->chunk_cnt);
  cudaFree(g->dA);
  cudaFree(g->dB);
  cudaFree(g->dC);
  g->x = g->xe = g->h = g->ha = g->o = NULL;
  g->route = NULL;
  g->weight = g->y = NULL;
  g->perm_tok = g->pos_of = g->work = g->chunk_cnt = NULL;
  g->dA = g->dB = NULL;
  g->dC = NULL;
}

static void amoe_moe_gpu_close(amoe_moe_gpu *g) {
  if (!g) return;
  gpu_free_buffers(g);
  cudaFree(g->w_gu);
  cudaFree(g->w_dn);
  cudaFreeHost(g->host_expert);
  cudaFree(g->slot_pool);
  cudaFree(g->pool_gu);
  cudaFree(g->pool_dn);
  cudaFreeHost(g->host_gu);
  cudaFreeHost(g->host_dn);
  cudaFree(g->l2_flush);
  if (g->c0) cudaEventDestroy(g->c0);
  if (g->c1) cudaEventDestroy(g->c1);
  if (g->copy) cudaStreamDestroy(g->copy);
  cudaFreeHost(g->h_count);
  cudaFreeHost(g->h_work);
  cudaFreeHost((void *)g->pA);
  cudaFreeHost((void *)g->pB);
  cudaFreeHost(g->pC);
  if (g->blas) cublasDestroy(g->blas);
  if (g->ev0) cudaEventDestroy(g->ev0);
  if (g->ev1) cudaEventDestroy(g->ev1);
  if (g->stream) cudaStreamDestroy(g->stream);
  free(g);
}

static amoe_status gpu_open(amoe_moe_gpu *g, int impl, amoe_moe_shape s, int layers, uint64_t seed, amoe_err *e) {
  g->impl = impl;
  g->s = s;
  g->seed = seed;
  if (s.experts > MAX_E) return amoe_fail(e, AMOE_EINVAL, "at most %d experts", MAX_E);
#if !AMOE_GROUPED_GEMM
  if (impl == 2)
    return amoe_fail(e, AMOE_EINVAL, "cublas-grouped needs cuBLAS 12.5 or later (cublasGemmGroupedBatchedEx)");
#endif
  if (impl == 3 && (s.hidden % 8 || s.inter % 8))
    return amoe_fail(e, AMOE_EINVAL, "skinny: hidden and inter must be multiples of 8");
  CU(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  CU(cudaEventCreate(&g->ev0));
  CU(cudaEventCreate(&g->ev1));
  CB(cublasCreate(&g->blas));
  CB(cublasSetStream(g->blas, g->stream));
  if (impl == 3) CU(cudaFuncSetAttribute(skinny_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, SKINNY_SMEM));
  size_t free_b = 0, total_b = 0;
  CU(cudaMemGetInfo(&free_b, &total_b));
  double per_layer = amoe_w_bytes(s.experts, s.hidden, s.inter, 1), margin = 4.0 * 1024 * 1024 * 1024;
  int held = layers;
  if (per_layer * held > (double)free_b - margin) held = (int)(((double)free_b - margin) / per_layer);
  if (held < 1)
    return amoe_fail(e, AMOE_ENOMEM, "one layer of weights (%.2f GB) does not fit the device's %.2f GB free",
                     per_layer / 1e9, free_b / 1e9);
  g->layers_held = held;
  size_t gu = (size_t)2 * s.inter * s.hidden, dn = (size_t)s.hidden * s.inter;
  CU(cudaMalloc(&g->w_gu, (size_t)held * s.experts * gu * sizeof(bf16)));
  CU(cudaMalloc(&g->w_dn, (size_t)held * s.experts * dn * sizeof(bf16)));
  float sg = 1.0f / sqrtf((float)s.hidden), sd = 1.0f / sqrtf((float)s.inter);
  for (int l = 0; l < held; l++) {
    fill_weights<<<1024, 256, 0, g->stream>>>(g->w_gu + (size_t)l * s.experts * gu, gu, s.experts, seed, l, 0, sg);
    KERNEL_CHECK();
    fill_weights<<<1024, 256, 0, g->stream>>>(g->w_dn + (size_t)l * s.experts * dn, dn, s.experts, seed, l, 1, sd);
    KERNEL_CHECK();
  }
  cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  // twice the L2: a memset of exactly its size can leave lines of the
  // weights resident (the L2 is split in partitions with their own hashing)
  g->l2_bytes = 2 * (size_t)prop.l2CacheSize;
  if (g->l2_bytes) {
    CU(cudaMalloc(&g->l2_flush, g->l2_bytes));
    CU(cudaMemsetAsync(g->l2_flush, 0, g->l2_bytes, g->stream)); // once, outside any timed window (initcheck)
  }
  CU(cudaMallocHost(&g->h_count, MAX_E * sizeof(int)));
  CU(cudaMallocHost(&g->h_work, 3 * MAX_E * sizeof(int)));
  CU(cudaMallocHost(&g->pA, 2 * MAX_E * sizeof(void *)));
  CU(cudaMallocHost(&g->pB, 2 * MAX_E * sizeof(void *)));
  CU(cudaMallocHost(&g->pC, 2 * MAX_E * sizeof(void *)));
  CU(cudaStreamSynchronize(g->stream));
  return AMOE_OK;
}

static amoe_status amoe_moe_gpu_open(amoe_moe_gpu **out, int impl, amoe_moe_shape s, int layers, uint64_t seed,
                                         amoe_err *e) {
  *out = NULL;
  if (!amoe_moe_gpu_available()) return amoe_fail(e, AMOE_EIO, "no CUDA device");
  amoe_moe_gpu *g = (amoe_moe_gpu *)calloc(1, sizeof *g);
  if (!g) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  amoe_status st = gpu_open(g, impl, s, layers, seed, e);
  if (st != AMOE_OK) {
    amoe_moe_gpu_close(g);
    return st;
  }
  *out = g;
  return AMOE_OK;
}

// The buffers for T tokens and A assignments. The capacities rise only once
// every buffer is allocated: after a failed cudaMalloc nothing is left that
// a later call would launch on (N4).
static amoe_status ensure_buffers(amoe_moe_gpu *g, int T, int A, amoe_err *e) {
  const int d = g->s.hidden, f = g->s.inter, E = g->s.experts;
  CU(cudaMalloc(&g->x, (size_t)T * d * sizeof(bf16)));
  CU(cudaMalloc(&g->xe, (size_t)A * d * sizeof(bf16)));
  CU(cudaMalloc(&g->h, (size_t)A * 2 * f * sizeof(bf16)));
  CU(cudaMalloc(&g->ha, (size_t)A * f * sizeof(bf16)));
  CU(cudaMalloc(&g->o, (size_t)A * d * sizeof(bf16)));
  CU(cudaMalloc(&g->route, (size_t)A * sizeof(int32_t)));
  CU(cudaMalloc(&g->weight, (size_t)A * sizeof(float)));
  CU(cudaMalloc(&g->y, (size_t)T * d * sizeof(float)));
  CU(cudaMalloc(&g->perm_tok, (size_t)A * sizeof(int)));
  CU(cudaMalloc(&g->pos_of, (size_t)A * sizeof(int)));
  CU(cudaMalloc(&g->work, (size_t)3 * E * sizeof(int)));
  CU(cudaMalloc(&g->chunk_cnt, (size_t)((A + BUCKET_CHUNK - 1) / BUCKET_CHUNK) * E * sizeof(int)));
  CU(cudaMalloc(&g->dA, (size_t)2 * E * sizeof(void *)));
  CU(cudaMalloc(&g->dB, (size_t)2 * E * sizeof(void *)));
  CU(cudaMalloc(&g->dC, (size_t)2 * E * sizeof(void *)));
  return AMOE_OK;
}

static amoe_status ensure(amoe_moe_gpu *g, int T, int A, amoe_err *e) {
  if (T <= g->cap_t && A <= g->cap_a) return AMOE_OK;
  gpu_free_buffers(g);
  const int t = T > g->cap_t ? T : g->cap_t, a = A > g->cap_a ? A : g->cap_a;
  g->cap_t = g->cap_a = 0;
  const amoe_status st = ensure_buffers(g, t, a, e);
  if (st != AMOE_OK) {
    gpu_free_buffers(g);
    return st;
  }
  g->cap_t = t;
  g->cap_a = a;
  return AMOE_OK;
}

// One GEMM for every executed expert: out[A][rows] = in[A][K] · W_e^T.
static amoe_status expert_gemm(amoe_moe_gpu *g, const bf16 *W, size_t w_stride, const bf16 *in, int K, int rows,
                               bf16 *out, int nwork, amoe_err *e) {
  const float one = 1.0f, zero = 0.0f;
  if (g->impl == 1) { // cuBLAS loop
    for (int j = 0; j < nwork; j++) {
      int ex = g->h_work[3 * j], off = g->h_work[3 * j + 1], n = g->h_work[3 * j + 2];
      CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, K, &one, W + (size_t)ex * w_stride, CUDA_R_16BF,
                      K, in + (size_t)off * K, CUDA_R_16BF, K, &zero, out + (size_t)off * rows, CUDA_R_16BF, rows,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return AMOE_OK;
  }
  if (g->impl == 2) { // one grouped call: a group of one problem per expert
    cublasOperation_t ta[MAX_E], tb[MAX_E];
    int m[MAX_E], n[MAX_E], k[MAX_E], lda[MAX_E], ldb[MAX_E], ldc[MAX_E], gs[MAX_E];
    float alpha[MAX_E], beta[MAX_E];
    const int set = g->gcall++ & 1, E = g->s.experts;
    const void **hA = g->pA + set * MAX_E, **hB = g->pB + set * MAX_E;
    void **hC = g->pC + set * MAX_E;
    const void **dA = g->dA + set * E, **dB = g->dB + set * E;
    void **dC = g->dC + set * E;
    for (int j = 0; j < nwork; j++) {
      int ex = g->h_work[3 * j], off = g->h_work[3 * j + 1];
      ta[j] = CUBLAS_OP_T;
      tb[j] = CUBLAS_OP_N;
      m[j] = rows;
      n[j] = g->h_work[3 * j + 2];
      k[j] = K;
      lda[j] = K;
      ldb[j] = K;
      ldc[j] = rows;
      gs[j] = 1;
      alpha[j] = one;
      beta[j] = zero;
      hA[j] = W + (size_t)ex * w_stride;
      hB[j] = in + (size_t)off * K;
      hC[j] = out + (size_t)off * rows;
    }
    // (the pinned set is rewritten only in a later run, after its final sync)
    CU(cudaMemcpyAsync(dA, hA, nwork * sizeof(void *), cudaMemcpyHostToDevice, g->stream));
    CU(cudaMemcpyAsync(dB, hB, nwork * sizeof(void *), cudaMemcpyHostToDevice, g->stream));
    CU(cudaMemcpyAsync(dC, hC, nwork * sizeof(void *), cudaMemcpyHostToDevice, g->stream));
#if AMOE_GROUPED_GEMM
    CB(cublasGemmGroupedBatchedEx(g->blas, ta, tb, m, n, k, alpha, dA, CUDA_R_16BF, lda, dB, CUDA_R_16BF, ldb, beta,
                                  dC, CUDA_R_16BF, ldc, nwork, gs, CUBLAS_COMPUTE_32F));
#else
    (void)alpha, (void)beta, (void)dA, (void)dB, (void)dC, (void)gs;
    return amoe_fail(e, AMOE_EINVAL, "cublas-grouped needs cuBLAS 12.5 or later");
#endif
    return AMOE_OK;
  }
  // token tile: as many tokens (<= 16) as fit 200 KB of shared memory
  int tile = (int)(SKINNY_SMEM / ((size_t)K * sizeof(bf16)));
  tile = tile > SKINNY_TOK ? SKINNY_TOK : tile;
  if (tile < 1) return amoe_fail(e, AMOE_EINVAL, "skinny: a row of %d elements does not fit shared memory", K);
  size_t smem = (size_t)tile * K * sizeof(bf16); // <= SKINNY_SMEM, set once at open (N10: not in the timed window)
  const int rows_per_block = SKINNY_WARPS * SKINNY_RPW;
  dim3 grid((rows + rows_per_block - 1) / rows_per_block, nwork);
  skinny_gemm<<<grid, SKINNY_WARPS * 32, smem, g->stream>>>(W, w_stride, in, K, rows, g->work, tile, out);
  KERNEL_CHECK();
  return AMOE_OK;
}

// One layer; slot_of: NULL (resident weights) or the pool slot of every
// executed expert (the GEMMs' work list then names slots in the pool).
static amoe_status run_impl(amoe_moe_gpu *g, int layer, const amoe_moe_batch *b, const int16_t *slot_of, float *y,
                            double *seconds, amoe_err *e) {
  const int d = g->s.hidden, f = g->s.inter, E = g->s.experts, T = b->tokens, k = b->k, A = T * k;
  if (T < 1) return amoe_fail(e, AMOE_EINVAL, "empty batch");
  AMOE_TRY(ensure(g, T, A, e));
  g->gcall = 0;
  // counts and the executed list on the host too: they size the GEMM launches
  memset(g->h_count, 0, (size_t)E * sizeof(int));
  for (int i = 0; i < A; i++)
    if (b->route[i] >= 0) g->h_count[b->route[i]]++;
  int nwork = 0, run = 0;
  for (int x = 0; x < E; x++) {
    if (g->h_count[x]) {
      if (slot_of && (slot_of[x] < 0 || slot_of[x] >= g->slots))
        return amoe_fail(e, AMOE_EINVAL, "expert %d has no pool slot (%d); the GPU pool has no staging buffer", x,
                         slot_of[x]);
      g->h_work[3 * nwork] = slot_of ? slot_of[x] : x;
      g->h_work[3 * nwork + 1] = run;
      g->h_work[3 * nwork + 2] = g->h_count[x];
      nwork++;
    }
    run += g->h_count[x];
  }
  CU(cudaMemcpyAsync(g->x, b->x, (size_t)T * d * sizeof(bf16), cudaMemcpyHostToDevice, g->stream));
  CU(cudaMemcpyAsync(g->route, b->route, (size_t)A * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
  CU(cudaMemcpyAsync(g->weight, b->weight, (size_t)A * sizeof(float), cudaMemcpyHostToDevice, g->stream));
  CU(cudaMemcpyAsync(g->work, g->h_work, (size_t)3 * nwork * sizeof(int), cudaMemcpyHostToDevice, g->stream));
  if (g->poison) { // 0xffff is a bf16 NaN, 0xffffffff a float NaN and the int -1
    CU(cudaMemsetAsync(g->xe, 0xff, (size_t)A * d * sizeof(bf16), g->stream));
    CU(cudaMemsetAsync(g->perm_tok, 0xff, (size_t)A * sizeof(int), g->stream));
    CU(cudaMemsetAsync(g->pos_of, 0xff, (size_t)A * sizeof(int), g->stream));
    CU(cudaMemsetAsync(g->h, 0xff, (size_t)A * 2 * f * sizeof(bf16), g->stream));
    CU(cudaMemsetAsync(g->ha, 0xff, (size_t)A * f * sizeof(bf16), g->stream));
    CU(cudaMemsetAsync(g->o, 0xff, (size_t)A * d * sizeof(bf16), g->stream));
    CU(cudaMemsetAsync(g->y, 0xff, (size_t)T * d * sizeof(float), g->stream));
  }
  const int l = layer % g->layers_held;
  const size_t gu = (size_t)2 * f * d, dn = (size_t)d * f;
  const bf16 *wgu = slot_of ? g->pool_gu + (size_t)l * g->slots * gu : g->w_gu + (size_t)l * E * gu;
  const bf16 *wdn = slot_of ? g->pool_dn + (size_t)l * g->slots * dn : g->w_dn + (size_t)l * E * dn;
  if (g->cold && g->l2_flush) { /* reads only: a memset's dirty lines were written back in the timed window (N8) */
    l2_read<<<256, 256, 0, g->stream>>>((const uint4 *)g->l2_flush, g->l2_bytes / sizeof(uint4), g->flushes++,
                                        (unsigned *)g->l2_flush);
    KERNEL_CHECK();
  }
  CU(cudaEventRecord(g->ev0, g->stream));
  const int chunks = (A + BUCKET_CHUNK - 1) / BUCKET_CHUNK;
  bucket_count<<<chunks, 256, E * sizeof(int), g->stream>>>(g->route, A, E, g->chunk_cnt, g->pos_of);
  KERNEL_CHECK();
  bucket_place<<<chunks, 256, (3 * E + 256) * sizeof(int), g->stream>>>(g->route, A, k, E, g->chunk_cnt, g->perm_tok,
                                                                          g->pos_of);
  KERNEL_CHECK();
  if (run > 0) { // only the valid assignments are bucketed
    gather<<<run, 128, 0, g->stream>>>(g->x, g->perm_tok, run, d, g->xe);
    KERNEL_CHECK();
  }
  AMOE_NVTX_PUSH("expert_gemm");
  amoe_status st = nwork ? expert_gemm(g, wgu, gu, g->xe, d, 2 * f, g->h, nwork, e) : AMOE_OK;
  if (st == AMOE_OK && run > 0) {
    swiglu<<<256, 256, 0, g->stream>>>(g->h, run, f, g->ha);
    cudaError_t ke = cudaGetLastError();
    if (ke != cudaSuccess) st = amoe_fail(e, AMOE_EIO, "swiglu: %s", cudaGetErrorString(ke));
  }
  if (st == AMOE_OK && nwork) st = expert_gemm(g, wdn, dn, g->ha, f, d, g->o, nwork, e);
  AMOE_NVTX_POP();
  AMOE_TRY(st);
  AMOE_NVTX_PUSH("combine");
  combine<<<T, 256, 0, g->stream>>>(g->o, g->pos_of, g->weight, T, k, d, g->y);
  AMOE_NVTX_POP();
  KERNEL_CHECK();
  CU(cudaEventRecord(g->ev1, g->stream));
  CU(cudaMemcpyAsync(y, g->y, (size_t)T * d * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
  CU(cudaStreamSynchronize(g->stream));
  float ms = 0;
  CU(cudaEventElapsedTime(&ms, g->ev0, g->ev1));
  if (seconds) *seconds = ms * 1e-3;
  return AMOE_OK;
}

static amoe_status amoe_moe_gpu_run(amoe_moe_gpu *g, int layer, const amoe_moe_batch *b, float *y,
                                        double *seconds, amoe_err *e) {
  return run_impl(g, layer, b, NULL, y, seconds, e);
}

static amoe_status amoe_moe_gpu_run_pool(amoe_moe_gpu *g, int layer, const amoe_moe_batch *b,
                                             const int16_t *slot_of, float *y, double *seconds, amoe_err *e) {
  if (!g->slots) return amoe_fail(e, AMOE_EINVAL, "run_pool: no slot pool");
  return run_impl(g, layer, b, slot_of, y, seconds, e);
}

// Host-to-device copies on their own stream, timed with events: begin
// (the stream and events made on first use), enqueue the copies, end (the
// compute stream waits for them, as an on-demand fetch does).
static amoe_status copy_stream(amoe_moe_gpu *g, amoe_err *e) {
  if (!g->copy) CU(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking));
  if (!g->c0) CU(cudaEventCreate(&g->c0));
  if (!g->c1) CU(cudaEventCreate(&g->c1));
  return AMOE_OK;
}

static amoe_status copies_begin(amoe_moe_gpu *g, amoe_err *e) {
  AMOE_TRY(copy_stream(g, e));
  AMOE_NVTX_PUSH("h2d");
  CU(cudaEventRecord(g->c0, g->copy));
  return AMOE_OK;
}

static amoe_status copies_end(amoe_moe_gpu *g, double *seconds, amoe_err *e) {
  CU(cudaEventRecord(g->c1, g->copy));
  // the host waits first, so the compute stream then waits on a completed
  // event: the same order of work on a GPU, and HIP-CPU (which runs every
  // stream on one thread, cuda_on_cpu) cannot block on a wait queued
  // before the record it waits for
  CU(cudaEventSynchronize(g->c1));
  CU(cudaStreamWaitEvent(g->stream, g->c1, 0));
  AMOE_NVTX_POP();
  float ms = 0;
  CU(cudaEventElapsedTime(&ms, g->c0, g->c1));
  if (seconds) *seconds = ms * 1e-3;
  return AMOE_OK;
}

// The slot pool: host copies of as many held layers as 16 GB of pinned
// memory takes (at least one), copied from the device weights; `slots`
// device slots per such layer.
static amoe_status amoe_moe_gpu_pool(amoe_moe_gpu *g, int slots, amoe_err *e) {
  const int E = g->s.experts;
  const size_t gu = (size_t)2 * g->s.inter * g->s.hidden, dn = (size_t)g->s.hidden * g->s.inter;
  const size_t per_layer = (size_t)E * (gu + dn) * sizeof(bf16);
  int held = (int)((16ull << 30) / per_layer);
  held = held < 1 ? 1 : held > g->layers_held ? g->layers_held : held;
  cudaFreeHost(g->host_gu); /* a second pool replaces the first (N7) */
  cudaFreeHost(g->host_dn);
  cudaFree(g->pool_gu);
  cudaFree(g->pool_dn);
  g->host_gu = g->host_dn = g->pool_gu = g->pool_dn = NULL;
  g->slots = 0;
  CU(cudaMallocHost(&g->host_gu, (size_t)held * E * gu * sizeof(bf16)));
  CU(cudaMallocHost(&g->host_dn, (size_t)held * E * dn * sizeof(bf16)));
  CU(cudaMemcpy(g->host_gu, g->w_gu, (size_t)held * E * gu * sizeof(bf16), cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(g->host_dn, g->w_dn, (size_t)held * E * dn * sizeof(bf16), cudaMemcpyDeviceToHost));
  CU(cudaMalloc(&g->pool_gu, (size_t)held * slots * gu * sizeof(bf16)));
  CU(cudaMalloc(&g->pool_dn, (size_t)held * slots * dn * sizeof(bf16)));
  g->layers_held = held;
  g->slots = slots;
  return AMOE_OK;
}

// Loads experts into slots of a layer's pool: pinned host to device on the
// copy stream, timed with events; the compute stream waits for them.
static amoe_status amoe_moe_gpu_load(amoe_moe_gpu *g, int layer, int n, const int *experts,
                                         const int16_t *slot, double *seconds, amoe_err *e) {
  if (seconds) *seconds = 0;
  if (!g->slots) return amoe_fail(e, AMOE_EINVAL, "load: no slot pool");
  if (n <= 0) return AMOE_OK;
  const int E = g->s.experts, l = layer % g->layers_held;
  const size_t gu = (size_t)2 * g->s.inter * g->s.hidden, dn = (size_t)g->s.hidden * g->s.inter;
  for (int i = 0; i < n; i++) /* every request checked before a copy is queued (N6) */
    if (experts[i] < 0 || experts[i] >= E || slot[i] < 0 || slot[i] >= g->slots)
      return amoe_fail(e, AMOE_EINVAL, "load: expert %d into slot %d of %d", experts[i], slot[i], g->slots);
  AMOE_TRY(copies_begin(g, e));
  for (int i = 0; i < n; i++) {
    const size_t ps = (size_t)l * g->slots + slot[i], he = (size_t)l * E + experts[i];
    CU(cudaMemcpyAsync(g->pool_gu + ps * gu, g->host_gu + he * gu, gu * sizeof(bf16), cudaMemcpyHostToDevice,
                       g->copy));
    CU(cudaMemcpyAsync(g->pool_dn + ps * dn, g->host_dn + he * dn, dn * sizeof(bf16), cudaMemcpyHostToDevice,
                       g->copy));
  }
  return copies_end(g, seconds, e);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

// Median of `repeats` timed copies (after one warm-up) with CUDA events.
static amoe_status amoe_moe_gpu_measure_copy(double bytes, int repeats, double *d2d_bw, double *h2d_bw,
                                                 char *name, int name_len, amoe_err *e) {
  if (!amoe_moe_gpu_available()) return amoe_fail(e, AMOE_EIO, "no CUDA device");
  if (repeats < 1 || repeats > 64) repeats = 5;
  size_t n = (size_t)bytes;
  cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  snprintf(name, (size_t)name_len, "%s", prop.name);
  void *a = NULL, *b = NULL, *h = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  CU(cudaEventCreate(&e0));
  if (cudaEventCreate(&e1) != cudaSuccess) { /* N11: not leaking the first */
    cudaEventDestroy(e0);
    return amoe_fail(e, AMOE_EIO, "copy test: cannot create an event");
  }
  amoe_status st = AMOE_OK;
  float t[64];
  if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess || cudaMallocHost(&h, n) != cudaSuccess)
    st = amoe_fail(e, AMOE_ENOMEM, "cannot allocate %.2f GB for the copy test", bytes / 1e9);
  for (int pass = 0; pass < 2 && st == AMOE_OK; pass++) {
    for (int r = -1; r < repeats && st == AMOE_OK; r++) {
      cudaError_t ce = cudaEventRecord(e0);
      if (ce == cudaSuccess)
        ce = pass ? cudaMemcpy(b, h, n, cudaMemcpyHostToDevice) : cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
      if (ce == cudaSuccess) ce = cudaEventRecord(e1);
      if (ce == cudaSuccess) ce = cudaEventSynchronize(e1);
      float ms = 0;
      if (ce == cudaSuccess) ce = cudaEventElapsedTime(&ms, e0, e1);
      if (ce != cudaSuccess) st = amoe_fail(e, AMOE_EIO, "copy test: %s", cudaGetErrorString(ce));
      if (r >= 0) t[r] = ms;
    }
    if (st != AMOE_OK) break;
    qsort(t, (size_t)repeats, sizeof(float), cmp_float);
    double med = (repeats % 2 ? t[repeats / 2] : 0.5 * (t[repeats / 2 - 1] + t[repeats / 2])) * 1e-3;
    if (pass) *h2d_bw = bytes / med;
    else *d2d_bw = 2.0 * bytes / med; // read + write
  }
  cudaFree(a);
  cudaFree(b);
  cudaFreeHost(h);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return st;
}

static void amoe_moe_gpu_profiler(int on) {
  if (!amoe_moe_gpu_available()) return;
  if (on) cudaProfilerStart();
  else cudaProfilerStop();
}

// On-demand fetch: `experts` copies of one expert's bytes from pinned host
// memory into slots of the pool, on the copy stream; the compute stream
// waits for them (no overlap), as docs/design.md §9's synchronous fetch.
static amoe_status amoe_moe_gpu_fetch(amoe_moe_gpu *g, int experts, int slots, double *seconds, amoe_err *e) {
  size_t eb = (size_t)3 * g->s.hidden * g->s.inter * sizeof(bf16);
  if (g->pool_slots != slots) {
    cudaFreeHost(g->host_expert);
    cudaFree(g->slot_pool);
    g->host_expert = g->slot_pool = NULL;
    CU(cudaMallocHost(&g->host_expert, eb));
    CU(cudaMalloc(&g->slot_pool, eb * (size_t)slots));
    // on the copy stream, made first (N1: a NULL stream is the legacy one,
    // which would race the timed copies), so ordered before the copies below
    AMOE_TRY(copy_stream(g, e));
    CU(cudaMemsetAsync(g->slot_pool, 0, eb * (size_t)slots, g->copy));
    memset(g->host_expert, 0x3c, eb);
    g->pool_slots = slots;
  }
  AMOE_TRY(copies_begin(g, e));
  for (int i = 0; i < experts; i++)
    CU(cudaMemcpyAsync((char *)g->slot_pool + eb * (size_t)(i % slots), g->host_expert, eb, cudaMemcpyHostToDevice,
                       g->copy));
  return copies_end(g, seconds, e);
}

// The module's one entry point (moe_cuda.h).
extern "C" __attribute__((visibility("default"))) const amoe_moe_gpu_api *amoe_moe_gpu_api_get(void) {
  static const amoe_moe_gpu_api api = {amoe_moe_gpu_open,     amoe_moe_gpu_close,  amoe_moe_gpu_run,
                                       amoe_moe_gpu_layers_held, amoe_moe_gpu_poison, amoe_moe_gpu_cold,
                                       amoe_moe_gpu_measure_copy, amoe_moe_gpu_profiler, amoe_moe_gpu_fetch,
                                       amoe_moe_gpu_pool,     amoe_moe_gpu_load,   amoe_moe_gpu_run_pool};
  return &api;
}
