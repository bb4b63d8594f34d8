/* What HIP-CPU (../shared/tools/hip-cpu: HIP kernels run on the CPU, threads
 * as fibers) lacks for cuda/moe_cuda.cu once hipify-perl has translated it
 * (cuda/hip-cpu/translate.sh force-includes this header): bf16, the _sync
 * shuffles, __expf, and the few runtime calls that change nothing on a CPU.
 * cuBLAS is include/hipblas.h beside it. The project's own code; nothing of
 * HIP-CPU's is copied. */
#ifndef AMOE_HIP_CPU_COMPAT_H
#define AMOE_HIP_CPU_COMPAT_H

#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

/* bf16: the top 16 bits of a float; float -> bf16 rounds to nearest even,
 * NaN stays a (quiet) NaN, as CUDA's __float2bfloat16 does. */
struct hip_bfloat16 {
  std::uint16_t data;
};
__host__ __device__ inline float __bfloat162float(hip_bfloat16 h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h.data) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
__host__ __device__ inline hip_bfloat16 __float2bfloat16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return hip_bfloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return hip_bfloat16{static_cast<std::uint16_t>(u >> 16)};
}
__host__ __device__ inline hip_bfloat16 __ushort_as_bfloat16(unsigned short v) { return hip_bfloat16{v}; }

/* CUDA's 32-lane shuffles: HIP-CPU's warp is 64 wide, so an xor below 32
 * stays inside the 32-lane half a CUDA warp is (the mask is all lanes here). */
template <typename T>
__device__ inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  (void)mask;
  return __shfl_xor(v, lane_mask);
}

__device__ inline float __expf(float x) { return std::exp(x); }
__host__ __device__ inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/* An attribute that only raises a GPU's shared-memory limit, and the
 * profiler's range: nothing to do on a CPU. */
enum { hipFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <typename F>
inline hipError_t hipFuncSetAttribute(F, int, int) {
  return hipSuccess;
}
inline hipError_t hipProfilerStart() { return hipSuccess; }
inline hipError_t hipProfilerStop() { return hipSuccess; }

/* Fault injection for tests/cuda_on_cpu.sh: while AMOE_HIP_MALLOC_LIMIT is
 * set (read at every call, so a test sets it after opening), it is the
 * largest device allocation that succeeds. */
#include <cstdlib>
inline hipError_t amoe_hip_malloc(void **p, std::size_t n) {
  const char *lim = std::getenv("AMOE_HIP_MALLOC_LIMIT");
  if (lim && n > std::strtoull(lim, nullptr, 10)) return hipErrorOutOfMemory;
  return hipMalloc(p, n);
}
template <typename T>
inline hipError_t amoe_hip_malloc(T **p, std::size_t n) {
  return amoe_hip_malloc(reinterpret_cast<void **>(p), n);
}
#define hipMalloc amoe_hip_malloc

#endif
