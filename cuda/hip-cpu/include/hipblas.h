/* The cuBLAS calls cuda/moe_cuda.cu makes, evaluated on the CPU from their
 * documented column-major definition on the exact pointers, sizes and
 * leading dimensions the code passes: C = alpha · op(A) · op(B) + beta · C,
 * A m×k after op, B k×n after op, bf16 in and out, fp32 accumulation. Each
 * call first waits for its stream (what the GPU's queue order gives), so
 * it sees the kernels and copies enqueued before it. For the HIP-CPU build
 * of cuda/hip-cpu/translate.sh only; the project's own code. */
#ifndef AMOE_HIP_CPU_HIPBLAS_H
#define AMOE_HIP_CPU_HIPBLAS_H

#include <hip/hip_runtime.h>

#include <cstddef>

/* The cuBLAS this stands in for: 12.5, the first with grouped GEMMs (a
 * build may set an older one to compile moe_cuda.cu's guard, N3). */
#ifndef CUBLAS_VERSION
#define CUBLAS_VERSION 120500
#endif

typedef enum { HIPBLAS_STATUS_SUCCESS = 0, HIPBLAS_STATUS_INVALID_VALUE = 3, HIPBLAS_STATUS_NOT_SUPPORTED = 6 } hipblasStatus_t;
typedef enum { HIPBLAS_OP_N = 111, HIPBLAS_OP_T = 112 } hipblasOperation_t;
typedef enum { HIP_R_32F = 0, HIP_R_16BF = 14 } hipDataType;
typedef enum { HIPBLAS_COMPUTE_32F = 2 } hipblasComputeType_t;
typedef enum { HIPBLAS_GEMM_DEFAULT = 160 } hipblasGemmAlgo_t;
struct amoe_hipblas_handle {
  hipStream_t stream;
};
typedef amoe_hipblas_handle *hipblasHandle_t;

inline hipblasStatus_t hipblasCreate(hipblasHandle_t *h) {
  *h = new amoe_hipblas_handle{nullptr};
  return HIPBLAS_STATUS_SUCCESS;
}
inline hipblasStatus_t hipblasDestroy(hipblasHandle_t h) {
  delete h;
  return HIPBLAS_STATUS_SUCCESS;
}
inline hipblasStatus_t hipblasSetStream(hipblasHandle_t h, hipStream_t s) {
  h->stream = s;
  return HIPBLAS_STATUS_SUCCESS;
}

/* One GEMM, column-major: element (i, j) of an r-row matrix at ld is p[i + j·ld]. */
inline hipblasStatus_t amoe_hipblas_gemm(hipblasOperation_t ta, hipblasOperation_t tb, int m, int n, int k,
                                         float alpha, const hip_bfloat16 *A, int lda, const hip_bfloat16 *B, int ldb,
                                         float beta, hip_bfloat16 *C, int ldc) {
  if (m < 0 || n < 0 || k < 0 || ldc < (m > 1 ? m : 1) || lda < 1 || ldb < 1) return HIPBLAS_STATUS_INVALID_VALUE;
  if ((ta == HIPBLAS_OP_N ? lda < m : lda < k) || (tb == HIPBLAS_OP_N ? ldb < k : ldb < n))
    return HIPBLAS_STATUS_INVALID_VALUE;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float acc = 0;
      for (int q = 0; q < k; q++) {
        const float a = __bfloat162float(ta == HIPBLAS_OP_N ? A[i + (std::size_t)q * lda] : A[q + (std::size_t)i * lda]);
        const float b = __bfloat162float(tb == HIPBLAS_OP_N ? B[q + (std::size_t)j * ldb] : B[j + (std::size_t)q * ldb]);
        acc += a * b;
      }
      hip_bfloat16 *c = C + i + (std::size_t)j * ldc;
      *c = __float2bfloat16(alpha * acc + (beta != 0 ? beta * __bfloat162float(*c) : 0.0f));
    }
  return HIPBLAS_STATUS_SUCCESS;
}

inline hipblasStatus_t hipblasGemmEx_v2(hipblasHandle_t h, hipblasOperation_t ta, hipblasOperation_t tb, int m, int n,
                                        int k, const void *alpha, const void *A, hipDataType at, int lda, const void *B,
                                        hipDataType bt, int ldb, const void *beta, void *C, hipDataType ct, int ldc,
                                        hipblasComputeType_t compute, hipblasGemmAlgo_t algo) {
  (void)algo;
  if (at != HIP_R_16BF || bt != HIP_R_16BF || ct != HIP_R_16BF || compute != HIPBLAS_COMPUTE_32F)
    return HIPBLAS_STATUS_NOT_SUPPORTED;
  if (hipStreamSynchronize(h->stream) != hipSuccess) return HIPBLAS_STATUS_INVALID_VALUE;
  return amoe_hipblas_gemm(ta, tb, m, n, k, *(const float *)alpha, (const hip_bfloat16 *)A, lda,
                           (const hip_bfloat16 *)B, ldb, *(const float *)beta, (hip_bfloat16 *)C, ldc);
}

/* cublasGemmGroupedBatchedEx (hipify leaves its name): group g holds
 * group_size[g] problems of its sizes; A, B and C are device arrays of
 * pointers, one per problem in group order. */
inline hipblasStatus_t cublasGemmGroupedBatchedEx(hipblasHandle_t h, const hipblasOperation_t *ta,
                                                  const hipblasOperation_t *tb, const int *m, const int *n,
                                                  const int *k, const void *alpha, const void *const *A,
                                                  hipDataType at, const int *lda, const void *const *B, hipDataType bt,
                                                  const int *ldb, const void *beta, void *const *C, hipDataType ct,
                                                  const int *ldc, int groups, const int *group_size,
                                                  hipblasComputeType_t compute) {
  if (at != HIP_R_16BF || bt != HIP_R_16BF || ct != HIP_R_16BF || compute != HIPBLAS_COMPUTE_32F)
    return HIPBLAS_STATUS_NOT_SUPPORTED;
  if (hipStreamSynchronize(h->stream) != hipSuccess) return HIPBLAS_STATUS_INVALID_VALUE;
  const float *al = (const float *)alpha, *be = (const float *)beta;
  for (int g = 0, p = 0; g < groups; g++)
    for (int i = 0; i < group_size[g]; i++, p++) {
      const hipblasStatus_t st = amoe_hipblas_gemm(ta[g], tb[g], m[g], n[g], k[g], al[g], (const hip_bfloat16 *)A[p],
                                                   lda[g], (const hip_bfloat16 *)B[p], ldb[g], be[g],
                                                   (hip_bfloat16 *)C[p], ldc[g]);
      if (st != HIPBLAS_STATUS_SUCCESS) return st;
    }
  return HIPBLAS_STATUS_SUCCESS;
}

#endif
