/* Internal: the CUDA backends behind moe.h (only in CUDA builds). They are
 * built as a module (libamoe_moe_cuda.so) that moe.c loads on first use:
 * a run that never touches a GPU neither maps cuBLAS (hundreds of MB,
 * ~0.15 s at start-up) nor needs the CUDA libraries installed. The module
 * exports one symbol, amoe_moe_gpu_api_get, the table below. */
#ifndef AMOE_MOE_CUDA_H
#define AMOE_MOE_CUDA_H

#include "moe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amoe_moe_gpu amoe_moe_gpu;

/* What the module does, behind moe.c's GPU rows (moe.h says what each
 * call means; impl: 1 cublas-loop, 2 cublas-grouped, 3 skinny). */
typedef struct {
  amoe_status (*open)(amoe_moe_gpu **g, int impl, amoe_moe_shape shape, int layers, uint64_t seed, amoe_err *e);
  void (*close)(amoe_moe_gpu *g);
  amoe_status (*run)(amoe_moe_gpu *g, int layer, const amoe_moe_batch *batch, float *y, double *seconds,
                     amoe_err *e);
  int (*layers_held)(const amoe_moe_gpu *g);
  void (*poison)(amoe_moe_gpu *g, int on);
  void (*cold)(amoe_moe_gpu *g, int on);
  amoe_status (*measure_copy)(double bytes, int repeats, double *d2d_bw, double *h2d_bw, char *name, int name_len,
                              amoe_err *e);
  void (*profiler)(int on);
  amoe_status (*fetch)(amoe_moe_gpu *g, int experts, int slots, double *seconds, amoe_err *e);
  /* the offload slot pool (moe.h: amoe_moe_pool, amoe_moe_load, amoe_moe_run_pool) */
  amoe_status (*pool)(amoe_moe_gpu *g, int slots, amoe_err *e);
  amoe_status (*load)(amoe_moe_gpu *g, int layer, int n, const int *experts, const int16_t *slot, double *seconds,
                      amoe_err *e);
  amoe_status (*run_pool)(amoe_moe_gpu *g, int layer, const amoe_moe_batch *batch, const int16_t *slot_of, float *y,
                          double *seconds, amoe_err *e);
} amoe_moe_gpu_api;
#define AMOE_MOE_GPU_API_SYMBOL "amoe_moe_gpu_api_get"
const amoe_moe_gpu_api *amoe_moe_gpu_api_get(void);

#ifdef __cplusplus
}
#endif

#endif
