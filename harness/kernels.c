/* hardware.kernels: a measured kernel table's MoE terms (kernels.h). */
#include "kernels.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The tables' directory: ACCEPTMOE_KERNELS, else `kernels` beside the binary. */
static void kernels_dir(char dir[PATH_MAX]) {
  const size_t n = PATH_MAX;
  const char *env = getenv("ACCEPTMOE_KERNELS");
  if (env && env[0]) {
    snprintf(dir, n, "%s", env);
    return;
  }
  char exe[PATH_MAX - 16];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) {
    snprintf(dir, n, "kernels");
    return;
  }
  exe[len] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  snprintf(dir, n, "%s/kernels", exe);
}

/* The table's dtypes a weight format runs as, in the order tried. */
static const char *const *format_dtypes(int fmt) {
  static const char *const bf16[] = {"bfloat16", NULL}, *const fp8[] = {"fp8_block", "fp8", NULL},
                           *const mx[] = {"w4a8_mxfp4_mxfp8", "w4a16_mxfp4", NULL}, *const nv[] = {"nvfp4", NULL};
  switch (fmt) {
  case AMOE_FMT_FP8_BLOCK128: return fp8;
  case AMOE_FMT_MXFP4: return mx;
  case AMOE_FMT_NVFP4: return nv;
  default: return bf16;
  }
}

enum { C_DTYPE, C_KERNEL, C_HIDDEN, C_INTER, C_TOPK, C_EXPERTS, C_TP, C_EP, C_T0, C_EXPERT, C_TOKEN, C_HELD, C_N };
static const char *const COLS[C_N] = {"dtype", "kernel", "hidden", "inter", "topk", "experts", "moe_tp", "moe_ep",
                                      "t0_s", "expert_s", "token_s", "held_mape"};

typedef struct {
  int rank; /* the dtype's place in the format's order (INT_MAX: none) */
  double held, t0, expert, token;
  char kernel[160], dtype[32];
} best_row;

/* Splits line (modified) at commas into f[0..max); returns the count. */
static int split(char *line, char **f, int max) {
  int n = 0;
  for (char *p = line; n < max;) {
    f[n++] = p;
    char *c = strchr(p, ',');
    if (!c) break;
    *c = 0;
    p = c + 1;
  }
  return n;
}

amoe_status amoe_kernels_apply(const amoe_model *m, amoe_hw *hw, char *note, size_t n, amoe_err *e) {
  note[0] = 0;
  if (!hw->kernels[0]) return AMOE_OK;
  char gpu[AMOE_NAME_MAX], engine[AMOE_NAME_MAX], version[AMOE_NAME_MAX];
  if (sscanf(hw->kernels, "aic:%63[^:]:%63[^:]:%63s", gpu, engine, version) != 3)
    return amoe_fail(e, AMOE_EINVAL, "'%s' is not aic:GPU:ENGINE:VERSION (e.g. aic:b300_sxm:vllm:0.24.0)", hw->kernels);
  char dir[PATH_MAX], rel[3 * AMOE_NAME_MAX + 32], path[PATH_MAX + sizeof rel];
  kernels_dir(dir);
  snprintf(rel, sizeof rel, "%s/%s/%s/moe-terms.csv", gpu, engine, version); /* (notes name it from the directory) */
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(note, n, "no table %s in the kernels directory (scripts/kernel-tables.sh imports and fits it): the "
             "analytic MoE terms", rel);
    return AMOE_OK;
  }
  char line[1024], *fld[32];
  int col[C_N], nf = 0;
  for (int c = 0; c < C_N; c++) col[c] = -1;
  if (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    nf = split(line, fld, 32);
    for (int i = 0; i < nf; i++)
      for (int c = 0; c < C_N; c++)
        if (!strcmp(fld[i], COLS[c])) col[c] = i;
  }
  for (int c = 0; c < C_N; c++)
    if (col[c] < 0) {
      fclose(f);
      return amoe_fail(e, AMOE_EINVAL, "%s:1: no column %s (written by scripts/fit_aic_moe.py)", path, COLS[c]);
    }
  const char *const *dts = format_dtypes(m->weight_format);
  best_row b = {.rank = INT_MAX};
  for (int ln = 2; fgets(line, sizeof line, f); ln++) {
    line[strcspn(line, "\r\n")] = 0;
    const int got = split(line, fld, 32);
    if (got != nf) {
      fclose(f);
      return amoe_fail(e, AMOE_EINVAL, "%s:%d: %d fields, the header has %d", path, ln, got, nf);
    }
    if (atoi(fld[col[C_HIDDEN]]) != m->hidden || atoi(fld[col[C_INTER]]) != m->moe_intermediate ||
        atoi(fld[col[C_TOPK]]) != m->top_k || atoi(fld[col[C_EXPERTS]]) != m->experts ||
        atoi(fld[col[C_TP]]) != 1 || atoi(fld[col[C_EP]]) != 1)
      continue; /* (one GPU holding whole experts: the simulator splits them itself) */
    int rank = INT_MAX;
    for (int i = 0; dts[i]; i++)
      if (!strcmp(fld[col[C_DTYPE]], dts[i])) rank = i;
    const double held = strtod(fld[col[C_HELD]], NULL);
    if (rank == INT_MAX || rank > b.rank || (rank == b.rank && !(held < b.held))) continue;
    b = (best_row){rank, held, strtod(fld[col[C_T0]], NULL), strtod(fld[col[C_EXPERT]], NULL),
                   strtod(fld[col[C_TOKEN]], NULL), "", ""};
    snprintf(b.kernel, sizeof b.kernel, "%s", fld[col[C_KERNEL]]);
    snprintf(b.dtype, sizeof b.dtype, "%s", fld[col[C_DTYPE]]);
  }
  fclose(f);
  if (b.rank == INT_MAX || !(b.expert > 0) || !(b.token > 0) || !(b.t0 >= 0)) {
    snprintf(note, n, "%s: no row for %s (hidden %d, inter %d, top-%d of %d, %s) on one GPU: the analytic MoE terms", rel,
             m->name, m->hidden, m->moe_intermediate, m->top_k, m->experts, amoe_weight_fmt_names[m->weight_format]);
    return AMOE_OK;
  }
  hw->moe_t0_s = b.t0;
  hw->moe_expert_s = b.expert;
  hw->moe_token_s = b.token;
  snprintf(note, n, "%s: %s %s (held-out error %.1f%%): t0 %.3g s, expert %.3g s, token %.3g s", rel, b.dtype,
           b.kernel, 100 * b.held, b.t0, b.expert, b.token);
  return AMOE_OK;
}
