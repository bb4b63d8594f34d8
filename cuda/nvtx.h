/* NVTX ranges (block, layer/<l>, select, h2d, expert_gemm, combine) that
 * compile away in builds without CUDA. NVTX3 is header-only. */
#ifndef AMOE_NVTX_H
#define AMOE_NVTX_H

#ifdef AMOE_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#define AMOE_NVTX_PUSH(name) nvtxRangePushA(name)
#define AMOE_NVTX_POP() nvtxRangePop()
#else
#define AMOE_NVTX_PUSH(name) ((void)(name))
#define AMOE_NVTX_POP() ((void)0)
#endif

#endif
