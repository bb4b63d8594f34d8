/* Internal: the CUDA backends behind moe.h (only in CUDA builds). */
#ifndef AMOE_MOE_CUDA_H
#define AMOE_MOE_CUDA_H

#include "moe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amoe_moe_gpu amoe_moe_gpu;
/* impl: 1 cublas-loop, 2 cublas-grouped, 3 skinny */
amoe_status amoe_moe_gpu_open(amoe_moe_gpu **g, int impl, amoe_moe_shape shape, int layers, uint64_t seed,
                              amoe_err *e);
void amoe_moe_gpu_close(amoe_moe_gpu *g);
amoe_status amoe_moe_gpu_run(amoe_moe_gpu *g, int layer, const amoe_moe_batch *batch, float *y, double *seconds,
                             amoe_err *e);
int amoe_moe_gpu_layers_held(const amoe_moe_gpu *g);
void amoe_moe_gpu_poison(amoe_moe_gpu *g, int on);
void amoe_moe_gpu_cold(amoe_moe_gpu *g, int on);
amoe_status amoe_moe_gpu_measure_copy(double bytes, int repeats, double *d2d_bw, double *h2d_bw, char *name,
                                      int name_len, amoe_err *e);
void amoe_moe_gpu_profiler(int on);
amoe_status amoe_moe_gpu_fetch(amoe_moe_gpu *g, int experts, int slots, double *seconds, amoe_err *e);
/* Whether a CUDA device is usable (any error counts as "no"). */
int amoe_moe_gpu_available(void);

#ifdef __cplusplus
}
#endif

#endif
