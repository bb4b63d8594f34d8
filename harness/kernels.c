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

/* The MoE terms of the model's one-GPU row of moe-terms.csv, into hw. */
static amoe_status apply_moe(const amoe_model *m, amoe_hw *hw, const char *dir, const char *gpu, const char *engine,
                             const char *version, char *note, size_t n, amoe_err *e) {
  char rel[3 * AMOE_NAME_MAX + 32], path[PATH_MAX + sizeof rel];
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

/* One GEMM table (gemm-DTYPE.csv: kernel,m,n,k,latency_ms) as a grid over
 * its m, n and k, the fastest kernel at each point. */
typedef struct {
  int nm, nn, nk;
  double m[AMOE_GEMM_POINTS], n[64], k[64];
  double *t; /* seconds at [(i·nn + j)·nk + l]; NAN where not measured */
} gemm_grid;

/* x's index in the sorted, distinct v[0..*c), inserted if new (false: full). */
static int grid_axis(double *v, int *c, int max, double x) {
  int i = 0;
  while (i < *c && v[i] < x) i++;
  if (i < *c && v[i] == x) return 1;
  if (*c == max) return 0;
  memmove(v + i + 1, v + i, (size_t)(*c - i) * sizeof *v);
  v[i] = x;
  (*c)++;
  return 1;
}

static int axis_index(const double *v, int c, double x) {
  int lo = 0, hi = c - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (v[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Reads the tables paths[0..count) into one grid g, the fastest at each
 * point (two passes over them: the axes, then the times). AMOE_EIO: one
 * cannot be read; AMOE_EINVAL: a malformed table, with file:line. */
static amoe_status gemm_load(const char *const *paths, int count, gemm_grid *g, amoe_err *e) {
  memset(g, 0, sizeof *g);
  static const char *const names[4] = {"m", "n", "k", "latency_ms"};
  amoe_status st = AMOE_OK;
  for (int pass = 0; pass < 2 && st == AMOE_OK; pass++) {
    if (pass == 1) {
      if (!g->nm || !g->nn || !g->nk) {
        st = amoe_fail(e, AMOE_EINVAL, "%s: no rows", paths[0]);
        break;
      }
      g->t = malloc((size_t)g->nm * g->nn * g->nk * sizeof *g->t);
      if (!g->t) {
        st = amoe_fail(e, AMOE_ENOMEM, "%s: out of memory", paths[0]);
        break;
      }
      for (int i = 0; i < g->nm * g->nn * g->nk; i++) g->t[i] = NAN;
    }
    for (int p = 0; p < count && st == AMOE_OK; p++) {
      FILE *f = fopen(paths[p], "r");
      if (!f) {
        st = amoe_fail(e, AMOE_EIO, "%s: cannot be read", paths[p]);
        break;
      }
      char line[512], *fld[8];
      int col[4] = {-1, -1, -1, -1};
      if (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        const int nf = split(line, fld, 8);
        for (int i = 0; i < nf; i++)
          for (int c = 0; c < 4; c++)
            if (!strcmp(fld[i], names[c])) col[c] = i;
      }
      for (int c = 0; c < 4 && st == AMOE_OK; c++)
        if (col[c] < 0) st = amoe_fail(e, AMOE_EINVAL, "%s:1: no column %s (written by scripts/aic-import.py)", paths[p], names[c]);
      for (int ln = 2; st == AMOE_OK && fgets(line, sizeof line, f); ln++) {
        line[strcspn(line, "\r\n")] = 0;
        const int got = split(line, fld, 8);
        double v[4];
        for (int c = 0; c < 4 && st == AMOE_OK; c++) {
          char *end = NULL;
          v[c] = col[c] < got ? strtod(fld[col[c]], &end) : NAN;
          if (col[c] >= got || end == fld[col[c]] || *end || !(v[c] > 0))
            st = amoe_fail(e, AMOE_EINVAL, "%s:%d: column %s is not a positive number", paths[p], ln, names[c]);
        }
        if (st != AMOE_OK) break;
        if (pass == 0) {
          if (!grid_axis(g->m, &g->nm, AMOE_GEMM_POINTS, v[0]) || !grid_axis(g->n, &g->nn, 64, v[1]) ||
              !grid_axis(g->k, &g->nk, 64, v[2]))
            st = amoe_fail(e, AMOE_EINVAL, "%s:%d: more distinct m (%d), n or k (64) than kept", paths[p], ln,
                           AMOE_GEMM_POINTS);
        } else {
          double *t = &g->t[((size_t)axis_index(g->m, g->nm, v[0]) * g->nn + axis_index(g->n, g->nn, v[1])) * g->nk +
                            axis_index(g->k, g->nk, v[2])];
          if (!(*t <= v[3] * 1e-3)) *t = v[3] * 1e-3; /* the fastest kernel the engine has there */
        }
      }
      fclose(f);
    }
  }
  if (st != AMOE_OK) {
    free(g->t);
    g->t = NULL;
  }
  return st;
}

/* x on axis v[0..c): the lower index and the weight of the upper one,
 * clamped to the axis; *scale: x over the axis's end beyond it (a GEMM's
 * time grows in proportion past the largest measured size). */
static void axis_at(const double *v, int c, double x, int *i, double *w, double *scale) {
  *scale = 1;
  if (c == 1 || x <= v[0]) {
    *i = 0, *w = 0;
    return;
  }
  if (x >= v[c - 1]) {
    *scale = x / v[c - 1];
    *i = c - 2, *w = 1;
    return;
  }
  int j = axis_index(v, c, x); /* v[j] >= x > v[j-1] */
  *i = j - 1, *w = (x - v[j - 1]) / (v[j] - v[j - 1]);
}

/* A GEMM of m × k by k × n: trilinear over the measured grid, the missing
 * points left out with their weight; NAN where none around it was measured. */
static double gemm_s(const gemm_grid *g, double m, double n, double k) {
  int i[3];
  double w[3], sc[3];
  axis_at(g->m, g->nm, m, &i[0], &w[0], &sc[0]);
  axis_at(g->n, g->nn, n, &i[1], &w[1], &sc[1]);
  axis_at(g->k, g->nk, k, &i[2], &w[2], &sc[2]);
  double sum = 0, wsum = 0;
  for (int c = 0; c < 8; c++) {
    int at[3];
    double wc = 1;
    for (int a = 0; a < 3; a++) {
      const int up = c >> a & 1, size = a == 0 ? g->nm : a == 1 ? g->nn : g->nk;
      at[a] = i[a] + up < size ? i[a] + up : size - 1;
      wc *= up ? w[a] : 1 - w[a];
    }
    const double t = g->t[((size_t)at[0] * g->nn + at[1]) * g->nk + at[2]];
    if (wc > 0 && t == t) sum += wc * t, wsum += wc;
  }
  return wsum > 0 ? sum / wsum * sc[0] * sc[1] * sc[2] : NAN;
}

/* A gated MLP of width `inter` split over tp: gate and up as one GEMM, then down. */
static double mlp_s(const gemm_grid *g, double m, double hidden, double inter, int tp) {
  return inter > 0 ? gemm_s(g, m, 2 * inter / tp, hidden) + gemm_s(g, m, hidden, inter / tp) : 0;
}

/* The model's dense side from the GEMM tables, baked into hw at each
 * measured token count: a layer's attention projections as one GEMM of
 * their parameters from the hidden state (k = hidden, n = parameters /
 * hidden / tp), the shared experts' and a dense layer's MLP as gate-up and
 * down, the head over the vocabulary in bf16. */
static amoe_status apply_gemm(const amoe_model *m, amoe_hw *hw, int tp, const char *dir, const char *gpu,
                              const char *engine, const char *version, char *note, size_t n, amoe_err *e) {
  const int fmt = amoe_model_dense_format(m);
  static const char *const bf16[] = {"bfloat16", NULL}, *const fp8[] = {"fp8_block", "fp8", NULL};
  const char *const *dtypes = fmt == AMOE_DENSE_FP8 ? fp8 : bf16;
  char rel[3 * AMOE_NAME_MAX + 48];
  /* every table of the format the engine has, the fastest at each point:
   * for fp8, DeepGEMM's block-scaled kernels and the per-tensor ones (the
   * block-scaled table of vLLM 0.24.0 on Blackwell takes 150-520 us at a
   * few tokens where SGLang's and TensorRT-LLM's DeepGEMM take 14-17 us:
   * its collection was host-bound, docs/design.md §20) */
  char paths[2][PATH_MAX + sizeof rel], which[96] = "";
  const char *list[2];
  int count = 0;
  for (int i = 0; dtypes[i]; i++) {
    snprintf(rel, sizeof rel, "%s/%s/%s/gemm-%s.csv", gpu, engine, version, dtypes[i]);
    snprintf(paths[count], sizeof paths[count], "%s/%s", dir, rel);
    if (access(paths[count], R_OK) != 0) continue;
    list[count] = paths[count];
    snprintf(which + strlen(which), sizeof which - strlen(which), "%s%s", count ? "+" : "", dtypes[i]);
    count++;
  }
  if (!count) {
    snprintf(note, n, "no table %s/%s/%s/gemm-%s.csv in the kernels directory (scripts/kernel-tables.sh imports it): "
             "the dense roofline", gpu, engine, version, dtypes[0]);
    return AMOE_OK;
  }
  gemm_grid dense = {0}, head = {0};
  amoe_status st = gemm_load(list, count, &dense, e);
  if (st != AMOE_OK) return st;
  const int own_head = fmt != AMOE_DENSE_BF16;
  char hpath[PATH_MAX + sizeof rel];
  snprintf(rel, sizeof rel, "%s/%s/%s/gemm-bfloat16.csv", gpu, engine, version);
  snprintf(hpath, sizeof hpath, "%s/%s", dir, rel);
  if (own_head && access(hpath, R_OK) != 0) {
    free(dense.t);
    snprintf(note, n, "no table %s in the kernels directory (the head's): the dense roofline", rel);
    return AMOE_OK;
  }
  const char *hlist[1] = {hpath};
  st = own_head ? gemm_load(hlist, 1, &head, e) : AMOE_OK;
  const gemm_grid *h = own_head ? &head : &dense;
  if (st != AMOE_OK) {
    free(dense.t);
    return st;
  }
  const double bpp = fmt == AMOE_DENSE_FP8 ? 1 : 2, d = m->hidden;
  const double attn_n = m->attn_bytes_per_layer / bpp / d / tp;
  int ok = 1;
  for (int i = 0; i < dense.nm; i++) {
    const double x = dense.m[i];
    hw->gemm_m[i] = x;
    const double attn = attn_n > 0 ? gemm_s(&dense, x, attn_n, d) : 0;
    hw->gemm_moe_layer[i] = attn + mlp_s(&dense, x, d, (double)m->shared_experts * m->moe_intermediate, tp);
    hw->gemm_dense_layer[i] = attn + mlp_s(&dense, x, d, m->dense_intermediate, tp);
    hw->gemm_head[i] = m->vocab > 0 ? gemm_s(h, x, (double)m->vocab / tp, d) : 0;
    ok &= hw->gemm_moe_layer[i] == hw->gemm_moe_layer[i] && hw->gemm_dense_layer[i] == hw->gemm_dense_layer[i] &&
          hw->gemm_head[i] == hw->gemm_head[i];
  }
  free(dense.t);
  free(head.t);
  if (!ok) {
    snprintf(note, n, "%s/%s/%s: gemm-%s measures nothing near the model's shapes: the dense roofline", gpu, engine,
             version, which);
    return AMOE_OK;
  }
  hw->gemm_points = dense.nm;
  hw->gemm_tp = tp;
  snprintf(note, n, "%s/%s/%s/gemm-%s: the dense projections at tp %d (%.3g ms a MoE layer at 1 token, %.3g at %g), "
           "the head's in bfloat16", gpu, engine, version, which, tp, 1e3 * hw->gemm_moe_layer[0],
           1e3 * hw->gemm_moe_layer[dense.nm - 1], dense.m[dense.nm - 1]);
  return AMOE_OK;
}

amoe_status amoe_kernels_apply(const amoe_model *m, amoe_hw *hw, int tp, char *note, size_t n, amoe_err *e) {
  note[0] = 0;
  hw->gemm_points = 0;
  if (!hw->kernels[0]) return AMOE_OK;
  char gpu[AMOE_NAME_MAX], engine[AMOE_NAME_MAX], version[AMOE_NAME_MAX];
  if (sscanf(hw->kernels, "aic:%63[^:]:%63[^:]:%63s", gpu, engine, version) != 3)
    return amoe_fail(e, AMOE_EINVAL, "'%s' is not aic:GPU:ENGINE:VERSION (e.g. aic:b300_sxm:vllm:0.24.0)", hw->kernels);
  char dir[PATH_MAX];
  kernels_dir(dir);
  amoe_status st = AMOE_OK;
  const size_t half = hw->kernel_ops == AMOE_KOPS_MOE_GEMM ? n / 2 : n;
  if (hw->kernel_ops != AMOE_KOPS_GEMM) st = apply_moe(m, hw, dir, gpu, engine, version, note, half, e);
  if (st == AMOE_OK && hw->kernel_ops != AMOE_KOPS_MOE) {
    const size_t used = strlen(note);
    if (used) snprintf(note + used, n - used, "; ");
    const size_t at = strlen(note);
    st = apply_gemm(m, hw, tp > 0 ? tp : 1, dir, gpu, engine, version, note + at, n - at, e);
  }
  return st;
}
