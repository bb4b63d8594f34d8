#include "exec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "afile.h"
#include "cost.h"
#include "moe.h"
#include "nvtx.h"
#include "rng.h"

#define MAX_REPEATS 64

struct amoe_exec {
  amoe_moe_backend *be;
  char name[32];
  int repeats, rows, layers, slots; /* slots: offload slots per layer, 0 = resident */
  int hidden, inter, cold, experts;
  int pool;         /* 1: offload runs from the backend's slot pool, wave by wave */
  double check_err;
  int32_t *wroute;  /* [cap][k] one wave's routes (the rest -1) */
  float *wy;        /* [cap][d] one wave's output */
  int *load_e;      /* [E] the wave's fetched experts */
  int16_t *load_s;  /* [E] their slots */
  uint16_t *x; /* activations of the block's verified nodes */
  float *y;
  int cap;
  uint64_t x_block; /* the block the activations belong to */
  double *measured, *predicted, *fetch_measured, *fetch_predicted, *fetch_bytes; /* [row] */
  double *layer_measured;                                                        /* [row][layer] */
  double samples[MAX_REPEATS];
};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void amoe_exec_close(amoe_exec *x) {
  if (!x) return;
  amoe_moe_close(x->be);
  free(x->wroute);
  free(x->wy);
  free(x->load_e);
  free(x->load_s);
  free(x->x);
  free(x->y);
  free(x->measured);
  free(x->predicted);
  free(x->fetch_measured);
  free(x->fetch_predicted);
  free(x->fetch_bytes);
  free(x->layer_measured);
  free(x);
}

amoe_status amoe_exec_open(amoe_exec **out, const char *backend, const amoe_spec *s, int repeats, int cold,
                           amoe_err *e) {
  *out = NULL;
  if (s->hw.gpus > 1) /* (docs/gpu.md: several-GPU layouts are simulated only) */
    return amoe_fail(e, AMOE_EINVAL, "--backend runs one GPU; this spec lays the model over %d (hardware.gpus)",
                     s->hw.gpus);
  amoe_exec *x = calloc(1, sizeof *x);
  if (!x) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  snprintf(x->name, sizeof x->name, "%s", backend);
  x->repeats = repeats < 1 ? 1 : repeats > MAX_REPEATS ? MAX_REPEATS : repeats;
  x->rows = s->npolicies;
  x->layers = s->model.moe_layers;
  x->slots = s->offload.enabled ? s->offload.slots_per_layer : 0;
  x->hidden = s->model.hidden;
  x->inter = s->model.moe_intermediate;
  x->x_block = UINT64_MAX;
  size_t R = (size_t)x->rows;
  x->measured = calloc(R, sizeof(double));
  x->predicted = calloc(R, sizeof(double));
  x->fetch_measured = calloc(R, sizeof(double));
  x->fetch_predicted = calloc(R, sizeof(double));
  x->fetch_bytes = calloc(R, sizeof(double));
  x->layer_measured = calloc(R * (size_t)x->layers, sizeof(double));
  amoe_status st = AMOE_OK;
  if (!x->measured || !x->predicted || !x->fetch_measured || !x->fetch_predicted || !x->fetch_bytes ||
      !x->layer_measured)
    st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  amoe_moe_shape shape = {s->model.hidden, s->model.moe_intermediate, s->model.experts};
  if (!st) st = amoe_moe_open(&x->be, backend, shape, s->model.moe_layers, 1, e);
  if (!st) st = amoe_moe_selfcheck(x->be, &x->check_err, e); /* before anything is timed */
  if (!st) amoe_moe_cold(x->be, cold);
  x->cold = cold;
  x->experts = s->model.experts;
  if (!st && x->slots && amoe_moe_has_pool(x->be)) { /* the kernels read the slots the cache filled */
    x->pool = 1;
    st = amoe_moe_pool(x->be, x->slots, e);
    x->load_e = malloc((size_t)x->experts * sizeof *x->load_e);
    x->load_s = malloc((size_t)x->experts * sizeof *x->load_s);
    if (!st && (!x->load_e || !x->load_s)) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  }
  if (st) {
    amoe_exec_close(x);
    return st;
  }
  *out = x;
  return AMOE_OK;
}

void amoe_exec_describe(const amoe_exec *x, char *buf, size_t n) {
  snprintf(buf, n,
           "backend %s: %d of %d layers' weights held (bf16, d=%d f=%d), median of %d repeats, vs CPU reference "
           "rel L2 %.2g%s%s",
           x->name, amoe_moe_layers_held(x->be), x->layers, x->hidden, x->inter, x->repeats, x->check_err,
           !x->slots ? "" : x->pool ? ", offload from the slot pool in the cache's waves" : ", offload fetches executed",
           x->cold ? ", L2 flushed before each run" : "");
}

/* Offload from the slot pool: per wave of the cache's placement, the
 * wave's fetched experts are copied into their slots, then the wave's
 * routes run reading every expert from its slot; the layer's output is the
 * waves' sum. Measured: the copies (fetch) and the waves' compute (each the
 * median of the repeats after a warm-up). */
static amoe_status pool_route(amoe_exec *x, int row, int layer, int nodes, int k, const int32_t *route,
                              const float *weight, double predicted_s, double predicted_fetch_s,
                              const amoe_placement *pl, amoe_err *e) {
  const int d = x->hidden, A = nodes * k;
  double moe = 0, fetch = 0;
  int fetched = 0;
  memset(x->y, 0, (size_t)nodes * d * sizeof *x->y);
  for (int w = 0; w < pl->waves; w++) {
    int n = 0, any = 0;
    for (int ex = 0; ex < x->experts; ex++)
      if (pl->fetched[ex] && pl->wave[ex] == w && pl->slot[ex] >= 0) {
        x->load_e[n] = ex;
        x->load_s[n++] = pl->slot[ex];
      }
    double ft = 0;
    AMOE_TRY(amoe_moe_load(x->be, layer, n, x->load_e, x->load_s, &ft, e));
    fetch += ft;
    fetched += n;
    for (int i = 0; i < A; i++) { /* this wave's routes */
      const int ex = route[i];
      x->wroute[i] = ex >= 0 && pl->wave[ex] == w ? ex : -1;
      any |= x->wroute[i] >= 0;
    }
    if (!any) continue;
    const amoe_moe_batch batch = {nodes, k, x->x, x->wroute, weight};
    double t;
    amoe_status st = amoe_moe_run_pool(x->be, layer, &batch, pl->slot, x->wy, &t, e); /* warm-up */
    int r = 0;
    for (; st == AMOE_OK && r < x->repeats; r++)
      st = amoe_moe_run_pool(x->be, layer, &batch, pl->slot, x->wy, &x->samples[r], e);
    AMOE_TRY(st);
    moe += median(x->samples, r);
    for (size_t i = 0; i < (size_t)nodes * d; i++) x->y[i] += x->wy[i];
  }
  x->fetch_measured[row] += fetch;
  x->fetch_bytes[row] += fetched * 3.0 * x->hidden * x->inter * 2.0;
  x->fetch_predicted[row] += predicted_fetch_s;
  x->measured[row] += moe;
  x->predicted[row] += predicted_s;
  x->layer_measured[(size_t)row * x->layers + layer] += moe;
  return AMOE_OK;
}

amoe_status amoe_exec_route(amoe_exec *x, int row, uint64_t block, int layer, int nodes, int k, const int32_t *route,
                            const float *weight, double predicted_s, int fetched, double predicted_fetch_s,
                            const amoe_placement *placement, amoe_err *e) {
  const int d = x->hidden;
  if (nodes > x->cap) {
    free(x->x);
    free(x->y);
    free(x->wroute);
    free(x->wy);
    x->x = malloc((size_t)nodes * d * sizeof *x->x);
    x->y = malloc((size_t)nodes * d * sizeof *x->y);
    x->wroute = malloc((size_t)nodes * AMOE_MAX_TOPK * sizeof *x->wroute);
    x->wy = malloc((size_t)nodes * d * sizeof *x->wy);
    if (!x->x || !x->y || !x->wroute || !x->wy) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
    x->cap = nodes;
    x->x_block = UINT64_MAX;
  }
  if (x->x_block != block) { /* deterministic activations per block */
    amoe_rng r;
    amoe_rng_seed(&r, 0xac7ULL, block, 0);
    for (size_t i = 0; i < (size_t)nodes * d; i++) x->x[i] = amoe_f32_to_bf16((float)amoe_rng_normal(&r));
    x->x_block = block;
  }
  if (x->pool && placement)
    return pool_route(x, row, layer, nodes, k, route, weight, predicted_s, predicted_fetch_s, placement, e);
  if (x->slots) { /* the copies the cache decided on come first, as an on-demand fetch */
    double ft = 0;
    AMOE_TRY(amoe_moe_fetch(x->be, fetched, x->slots, &ft, e));
    x->fetch_measured[row] += ft;
    x->fetch_bytes[row] += fetched * 3.0 * x->hidden * x->inter * 2.0;
    x->fetch_predicted[row] += predicted_fetch_s;
  }
  amoe_moe_batch batch = {nodes, k, x->x, route, weight};
  char name[32];
  snprintf(name, sizeof name, "layer/%d", layer);
  AMOE_NVTX_PUSH(name);
  double t;
  amoe_status st = amoe_moe_run(x->be, layer, &batch, x->y, &t, e); /* warm-up */
  int n = 0;
  for (; st == AMOE_OK && n < x->repeats; n++) st = amoe_moe_run(x->be, layer, &batch, x->y, &x->samples[n], e);
  AMOE_NVTX_POP();
  AMOE_TRY(st);
  double med = median(x->samples, n);
  x->measured[row] += med;
  x->predicted[row] += predicted_s;
  x->layer_measured[(size_t)row * x->layers + layer] += med;
  return AMOE_OK;
}

void amoe_exec_row_of(const amoe_exec *x, int row, double blocks, amoe_exec_row *o) {
  double B = blocks > 0 ? blocks : 1;
  o->predicted_moe_s = x->predicted[row] / B;
  o->measured_moe_s = x->measured[row] / B;
  o->measured_over_predicted = x->predicted[row] > 0 ? x->measured[row] / x->predicted[row] : 0;
  o->predicted_fetch_s = x->fetch_predicted[row] / B;
  o->measured_fetch_s = x->fetch_measured[row] / B;
  o->h2d_bytes_per_s = x->fetch_measured[row] > 0 ? x->fetch_bytes[row] / x->fetch_measured[row] : 0;
}

double amoe_exec_layer(const amoe_exec *x, int row, int layer, double blocks) {
  return x->layer_measured[(size_t)row * x->layers + layer] / (blocks > 0 ? blocks : 1);
}

void amoe_exec_meta(const amoe_exec *x, json_t *pt) {
  json_object_set_new(pt, "backend", json_string(x->name));
  json_object_set_new(pt, "backend_layers_held", json_integer(amoe_moe_layers_held(x->be)));
  json_object_set_new(pt, "backend_repeats", json_integer(x->repeats));
  json_object_set_new(pt, "backend_check_rel_l2", json_real(x->check_err));
  json_object_set_new(pt, "backend_cold", json_boolean(x->cold));
  json_object_set_new(pt, "backend_note",
                      json_string("bf16 expert weights at (hidden, moe_intermediate) whatever the preset's weight "
                                  "format; measured = median over repeats of the expert part of each layer"));
}

/* X experts with n tokens each (one assignment per token): median of `reps`
 * timed runs after a warm-up. */
static amoe_status time_experts(amoe_moe_backend *be, int d, int X, int n, int reps, double *out, amoe_err *e) {
  int T = X * n;
  uint16_t *x = malloc((size_t)T * d * sizeof *x);
  int32_t *route = malloc((size_t)T * sizeof *route);
  float *w = malloc((size_t)T * sizeof *w), *y = malloc((size_t)T * d * sizeof *y);
  double t[MAX_REPEATS];
  amoe_status st = x && route && w && y ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  if (!st) {
    amoe_rng r;
    amoe_rng_seed(&r, 3, (uint64_t)X, (uint64_t)n);
    for (size_t i = 0; i < (size_t)T * d; i++) x[i] = amoe_f32_to_bf16((float)amoe_rng_normal(&r));
    for (int i = 0; i < T; i++) {
      route[i] = i % X;
      w[i] = 1;
    }
    amoe_moe_batch b = {T, 1, x, route, w};
    st = amoe_moe_run(be, 0, &b, y, &t[0], e);
    for (int i = 0; i < reps && !st; i++) st = amoe_moe_run(be, 0, &b, y, &t[i], e);
    if (!st) *out = median(t, reps);
  }
  free(x);
  free(route);
  free(w);
  free(y);
  return st;
}

amoe_status amoe_exec_calibrate_hw(const amoe_spec *s, const char *backend, const char *compute, const char *path,
                                   amoe_err *e) {
  if (!backend || !compute) return amoe_fail(e, AMOE_EIO, "calibrate-hw needs a CUDA build (this one has no GPU backend)");
  double d2d = 0, h2d = 0;
  char gpu[256] = "";
  AMOE_TRY(amoe_moe_measure_copy(1 << 30, 5, &d2d, &h2d, gpu, sizeof gpu, e));
  amoe_moe_shape shape = {s->model.hidden, s->model.moe_intermediate, s->model.experts};
  /* per-copy latency (§9): one expert's copy takes bytes/h2d_bw + latency */
  const double ebytes = 3.0 * shape.hidden * shape.inter * 2.0;
  double d2d_e = 0, h2d_e = 0;
  AMOE_TRY(amoe_moe_measure_copy(ebytes, 21, &d2d_e, &h2d_e, gpu, sizeof gpu, e));
  const double copy_latency = amoe_cost_fit_copy_latency(ebytes, h2d_e, h2d);
  /* streaming (hbm_bw's share, the fixed cost) from `backend`, an expert's
   * per-token rate (moe_flops) from `compute` (by default the same kernel,
   * so that the fit describes the kernel a run measures), both cold: the L2
   * flushed before every timed run, as the compared runs are measured */
  enum { NN = 7 };
  const int ns[NN] = {1, 2, 4, 8, 16, 32, 64}, X = shape.experts < 32 ? shape.experts : 32;
  double t1[NN], tx[NN], c1[NN], cx[NN], per[NN], launch[NN], check = 0, ccheck = 0;
  const double bytes = 3.0 * shape.hidden * shape.inter * 2.0, flop = 6.0 * shape.hidden * shape.inter;
  for (int pass = 0; pass < 2; pass++) {
    const char *name = pass ? compute : backend;
    double *a1 = pass ? c1 : t1, *ax = pass ? cx : tx;
    if (pass && !strcmp(compute, backend)) {
      memcpy(c1, t1, sizeof c1);
      memcpy(cx, tx, sizeof cx);
      ccheck = check;
      break;
    }
    amoe_moe_backend *be = NULL;
    AMOE_TRY(amoe_moe_open(&be, name, shape, 1, 1, e));
    amoe_status st = amoe_moe_selfcheck(be, pass ? &ccheck : &check, e);
    amoe_moe_cold(be, 1);
    for (int i = 0; i < NN && !st; i++) {
      if (amoe_interrupt) st = amoe_fail(e, AMOE_EINTR, "interrupted");
      if (!st) st = time_experts(be, shape.hidden, 1, ns[i], 9, &a1[i], e);
      if (!st) st = time_experts(be, shape.hidden, X, ns[i], 9, &ax[i], e);
    }
    amoe_moe_close(be);
    if (st) return amoe_err_prefix(e, "calibrate-hw: %s", name), st;
  }
  /* t(X, n) = launch + X·c(n): c from the slope, launch from the intercept */
  for (int i = 0; i < NN; i++) {
    per[i] = (tx[i] - t1[i]) / (X - 1);
    launch[i] = t1[i] - per[i];
  }
  /* §9's coefficients: hbm_bw is the device copy rate (as in the presets),
   * moe_eta the share of it one expert streams at, moe_t0_s the fixed cost
   * of a call (the intercept), moe_flops the rate an expert's time grows at
   * once its tokens decide it: the compute kernel's marginal time per token
   * at the most tokens measured (the cost function takes an expert's time as
   * the larger of its streaming and its tokens at that rate). peak_flops, the
   * dense rate, stays the preset's: these per-expert GEMMs are far too small
   * to reach it. */
  const double pc = (cx[NN - 1] - c1[NN - 1]) / (X - 1), mflops = pc > 0 ? flop * ns[NN - 1] / pc : 0;
  double hbm = bytes / per[0], t0 = median(launch, NN), eta = hbm / d2d;
  /* the fitted coefficients through the one cost function (§9): each
   * measured layer of 1 and X experts against its prediction */
  amoe_hw fit = s->hw;
  fit.hbm_bw = d2d, fit.moe_t0_s = t0, fit.moe_eta = eta;
  fit.moe_flops = mflops > 0 ? mflops : s->hw.moe_flops, fit.moe_flops_tokens = 0;
  amoe_engine graphs = s->engine;
  graphs.cuda_graphs = 1;
  double pred1[NN], predx[NN], worst = 0;
  for (int i = 0; i < NN; i++) {
    amoe_cost_pass_ctx pc;
    amoe_pass_shape sh = amoe_spec_pass_shape(s, ns[i], 0);
    sh.hw = &fit, sh.engine = &graphs, sh.parallel = NULL, sh.offload = 0, sh.context = 0, sh.draft_passes = 0;
    amoe_cost_pass_init(&pc, &sh);
    pc.ec.mem_s = bytes / (eta * d2d); /* (the harness's bf16 experts, whatever the preset's format) */
    pc.ec.per_token_s = flop / fit.moe_flops, pc.ec.sat_tokens = 0;
    const amoe_layer_counts one = {1, 0, 1, amoe_cost_expert_at(pc.ec, ns[i])},
                            many = {X, 0, 1, X * amoe_cost_expert_at(pc.ec, ns[i])};
    pred1[i] = amoe_cost_layer(&pc, &one).moe;
    predx[i] = amoe_cost_layer(&pc, &many).moe;
    const double r1 = fabs(pred1[i] / t1[i] - 1), rx = fabs(predx[i] / tx[i] - 1);
    worst = r1 > worst ? r1 : worst;
    worst = rx > worst ? rx : worst;
  }
  amoe_afile a;
  AMOE_TRY(amoe_afile_open(&a, path, e));
  time_t now = time(NULL);
  char date[32];
  strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
  fprintf(a.f, "# Measured by `acceptmoe calibrate-hw` on %s, %s, cold (L2 flushed before each run): streaming\n"
          "# by %s (vs CPU reference: rel L2 %.2g), per-token rate by %s (rel L2 %.2g),\n",
          gpu, date, backend, check, compute, ccheck);
  fprintf(a.f, "# expert shape d=%d f=%d (model %s). Overrides workloads/hw/%s.yaml.\n", shape.hidden, shape.inter,
          s->model.name, s->hw.name);
  fprintf(a.f, "# hbm_bw: device copy rate; moe_eta: bytes of one expert / its marginal time at 1 token, over\n");
  fprintf(a.f, "# hbm_bw; moe_flops: 6·d·f·n / marginal time of an expert at n = %d of the compute backend\n",
          ns[NN - 1]);
  fprintf(a.f, "# (moe_flops_tokens 0: every token at it); moe_t0_s median intercept. peak_flops (dense), launch_s\n");
  fprintf(a.f, "# (a host launch) and readback_s are not measured here: they stay the preset's.\n");
  fprintf(a.f, "# copy_latency_s: one expert's pinned copy time minus its bytes at h2d_bw. step_s, layer_fixed_s\n");
  fprintf(a.f, "# and draft_step_fixed_s are an engine's own kernels (attention, sampling, the draft), which this\n");
  fprintf(a.f, "# harness does not run: they stay the preset's.\n");
  fprintf(a.f, "hbm_bw: %.6g\nh2d_bw: %.6g\nmoe_flops: %.6g\nmoe_flops_tokens: 0\nmoe_t0_s: %.6g\nmoe_eta: %.6g\n", d2d,
          h2d, fit.moe_flops, t0, eta);
  fprintf(a.f, "copy_latency_s: %.6g\n", copy_latency);
  fprintf(a.f, "measured:\n  gpu: \"%s\"\n  date: \"%s\"\n  device_copy_bw: %.6g\n  pinned_h2d_bw: %.6g\n", gpu, date,
          d2d, h2d);
  fprintf(a.f, "  expert_time_s:  # tokens per expert: [1 expert, %d experts], streaming backend\n", X);
  for (int i = 0; i < NN; i++) fprintf(a.f, "    %d: [%.6g, %.6g]\n", ns[i], t1[i], tx[i]);
  fprintf(a.f, "  predicted_expert_time_s:  # the cost model with these coefficients, same points (worst %.1f%%)\n",
          100 * worst);
  for (int i = 0; i < NN; i++) fprintf(a.f, "    %d: [%.6g, %.6g]\n", ns[i], pred1[i], predx[i]);
  fprintf(a.f, "  compute_expert_time_s:  # the same, compute backend\n");
  for (int i = 0; i < NN; i++) fprintf(a.f, "    %d: [%.6g, %.6g]\n", ns[i], c1[i], cx[i]);
  const amoe_status st = amoe_afile_commit(&a, e);
  amoe_afile_abort(&a);
  if (!st)
    fprintf(stderr,
            "%s: device copy %.3g B/s, pinned H2D %.3g B/s, expert streaming %.3g B/s (%.0f%% of copy), per-token "
            "rate %.3g FLOP/s, fused-MoE call %.3g s; the cost model within %.1f%% of every point -> %s\n",
            gpu, d2d, h2d, hbm, 100 * hbm / d2d, fit.moe_flops, t0, 100 * worst, path);
  return st;
}
