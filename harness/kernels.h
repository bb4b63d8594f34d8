/* Measured kernel tables (docs/design.md §20): `hardware.kernels:
 * aic:GPU:ENGINE:VERSION` names AIConfigurator's tables for one GPU, engine
 * and version, imported by scripts/aic-import.py and fitted by
 * scripts/fit_aic_moe.py into <dir>/GPU/ENGINE/VERSION/moe-terms.csv. The
 * model's row (its shape, its weight format, one GPU) gives the MoE call's
 * fixed cost and an expert's per-expert and per-token times; the simulator
 * keeps its own union, busiest GPU and tensor split. The GEMM tables
 * (gemm-DTYPE.csv, as imported) price the dense projections and the head. <dir>: the
 * environment's ACCEPTMOE_KERNELS, else `kernels` beside the binary
 * (build/kernels, where the import writes by default). */
#ifndef AMOE_KERNELS_H
#define AMOE_KERNELS_H

#include <stddef.h>

#include "err.h"
#include "model.h"

/* The terms hw->kernels names for model m, into hw: with hw->kernel_ops
 * moe (the default) or moe+gemm the MoE terms (moe_t0_s, moe_expert_s,
 * moe_token_s); with gemm or moe+gemm the dense side's GEMMs at attention
 * tensor parallelism tp (gemm_*: gemm-DTYPE.csv, imported as it is,
 * interpolated over its m, n and k). AMOE_EINVAL: the name is not of the
 * form aic:GPU:ENGINE:VERSION, or a table is malformed (file:line). Where
 * no table or no row for the model is there, hw keeps its analytic terms
 * and `note` (n bytes) says why; else `note` names what was taken. Nothing
 * to do (empty note) without hw->kernels. */
amoe_status amoe_kernels_apply(const amoe_model *m, amoe_hw *hw, int tp, char *note, size_t n, amoe_err *e);

#endif
