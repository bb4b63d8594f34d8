/* libFuzzer targets, one per input format acceptmoe reads (FUZZ_FORMAT
 * picks it at compile time; tests/fuzz/CMakeLists.txt builds each):
 *   spec       a YAML spec through the loader `run` uses, then a --set
 *              KEY=VALUE taken from after the first NUL byte
 *   amt        an .amt trace, every block read
 *   blocks     blocks-jsonl, every block read
 *   routing    routing-jsonl as chain blocks, every block read
 *   commitment a commitment file ({table: [...]})
 *   targets    a fit targets file
 *   safetensors routing-safetensors as chain blocks, every block read
 *   placement  a parallel.placement_file (layer,expert,group lines) for a
 *              layout of 4 layers, 16 experts, 4 groups
 *   replay     a workload.acceptance.replay file of accept lengths
 *   arrivals   a workload.arrival.path CSV of arrival_s,prompt_tokens,output_tokens
 *   cells      a serving-cell CSV (`acceptmoe cells`; docs/spec.md "Serving cells")
 *   kernels    a measured kernel table's moe-terms.csv (hardware.kernels), read for a
 *              tiny fp8 model from a kernels directory of its own
 * Each writes the input to a private temporary file (the readers take
 * paths) and reads it as the command would; any crash, leak or sanitizer
 * report is a finding. Build and run: scripts/fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cells.h"
#include "cost.h"
#include "kernels.h"
#include "fit.h"
#include "layout.h"
#include "source.h"
#include "spec_load.h"

#define FMT_SPEC 1
#define FMT_AMT 2
#define FMT_BLOCKS 3
#define FMT_ROUTING 4
#define FMT_COMMITMENT 5
#define FMT_TARGETS 6
#define FMT_SAFETENSORS 7
#define FMT_PLACEMENT 8
#define FMT_REPLAY 9
#define FMT_ARRIVALS 10
#define FMT_CELLS 11
#define FMT_KERNELS 12

static const char *tmp_path(void) {
  static char p[128];
  if (!p[0]) snprintf(p, sizeof p, "/tmp/amoe-fuzz-%d-%d.%s", (int)getpid(), FUZZ_FORMAT,
                      FUZZ_FORMAT == FMT_AMT ? "amt" : FUZZ_FORMAT == FMT_SPEC ? "yaml" : "txt");
  return p;
}

static int write_file(const char *path, const uint8_t *d, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  int ok = fwrite(d, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

/* Reads every block of a source over the file (a tiny model: 2 MoE layers,
 * 8 experts, top-2). */
static void read_source(int kind) {
  amoe_spec s;
  amoe_spec_defaults(&s);
  snprintf(s.model.name, sizeof s.model.name, "fuzz");
  s.model.layers = s.model.moe_layers = 2;
  s.model.experts = 8;
  s.model.top_k = 2;
  s.workload.source = kind;
  s.workload.blocks = 0;
  s.workload.window = 3;
  snprintf(s.workload.path, sizeof s.workload.path, "%s", tmp_path());
  amoe_err e;
  amoe_source *src = NULL;
  if (amoe_source_open(&src, &s.workload, &s.model, &e) != AMOE_OK) return;
  amoe_block b;
  amoe_block_init(&b, 2, 8, amoe_source_m(src));
  for (int i = 0; i < 10000 && amoe_source_next(src, &b, &e) == AMOE_OK; i++) {
  }
  amoe_block_free(&b);
  amoe_source_close(src);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
  const char *path = tmp_path();
  size_t head = n;
  if (FUZZ_FORMAT == FMT_SPEC) { /* the spec, then after a NUL one --set */
    const uint8_t *z = memchr(d, 0, n);
    if (z) head = (size_t)(z - d);
  }
  if (!write_file(path, d, head)) return 0;
  amoe_diag dg = {0};
  switch (FUZZ_FORMAT) {
  case FMT_SPEC: {
    static amoe_experiment x;
    char set[256] = "";
    char *sets[1] = {set};
    int nset = 0;
    if (head < n) {
      size_t m = n - head - 1 < sizeof set - 1 ? n - head - 1 : sizeof set - 1;
      memcpy(set, d + head + 1, m);
      set[m] = 0;
      nset = strchr(set, '=') != NULL;
    }
    if (amoe_experiment_load(&x, path, sets, nset, &dg) == AMOE_OK) {
      amoe_spec s;
      for (int i = 0; i < amoe_experiment_points(&x) && i < 4; i++) amoe_experiment_point(&x, i, &s, &dg);
      FILE *f = fopen("/dev/null", "w");
      if (f) {
        amoe_spec_write_yaml(f, &x);
        fclose(f);
      }
    }
    break;
  }
  case FMT_AMT: read_source(AMOE_SRC_TRACE); break;
  case FMT_BLOCKS: read_source(AMOE_SRC_BLOCKS_JSONL); break;
  case FMT_ROUTING: read_source(AMOE_SRC_ROUTING_JSONL); break;
  case FMT_SAFETENSORS: read_source(AMOE_SRC_ROUTING_SAFETENSORS); break;
  case FMT_COMMITMENT: {
    double p[AMOE_MAX_DEPTH], mass[AMOE_MAX_DEPTH];
    int np = 0;
    amoe_commitment_file_load(path, p, &np, mass, &dg);
    break;
  }
  case FMT_TARGETS: {
    amoe_fit_targets t;
    amoe_fit_targets_load(&t, path, &dg);
    break;
  }
  case FMT_PLACEMENT: {
    amoe_layout *lay = amoe_layout_new(4, 16, 4);
    amoe_err e;
    if (lay && amoe_layout_read(lay, path, &e) == AMOE_OK) {
      int g[AMOE_MAX_GPUS];
      for (int l = 0; l < 4; l++)
        for (int x = 0; x < 16; x++) amoe_layout_copies(lay, l, x, g);
    }
    amoe_layout_free(lay);
    break;
  }
  case FMT_ARRIVALS: {
    amoe_workload_spec w;
    memset(&w, 0, sizeof w);
    w.arrival = AMOE_ARRIVAL_TRACE;
    snprintf(w.arrival_path, sizeof w.arrival_path, "%s", path);
    amoe_arrival *v = NULL;
    int nv = 0;
    amoe_err e;
    if (amoe_arrival_plan(&w, &v, &nv, &e) == AMOE_OK)
      for (int i = 0; i < nv; i++) (void)v[i].output_tokens;
    free(v);
    break;
  }
  case FMT_CELLS: {
    int rows = 0;
    amoe_err e;
    (void)amoe_cells_parse(path, &rows, &e);
    break;
  }
  case FMT_KERNELS: { /* the input as DIR/gx/vllm/1.0/moe-terms.csv and gemm-fp8_block.csv */
    char dir[160], sub[224], file[256], gemm[256];
    snprintf(dir, sizeof dir, "%s.d", path);
    snprintf(sub, sizeof sub, "%s/gx", dir);
    mkdir(dir, 0700);
    mkdir(sub, 0700);
    snprintf(sub, sizeof sub, "%s/gx/vllm", dir);
    mkdir(sub, 0700);
    snprintf(sub, sizeof sub, "%s/gx/vllm/1.0", dir);
    mkdir(sub, 0700);
    snprintf(file, sizeof file, "%s/moe-terms.csv", sub);
    snprintf(gemm, sizeof gemm, "%s/gemm-fp8_block.csv", sub);
    if (write_file(file, d, n) && write_file(gemm, d, n)) {
      setenv("ACCEPTMOE_KERNELS", dir, 1);
      amoe_model m = {.name = "tiny", .hidden = 64, .moe_intermediate = 32, .top_k = 2, .experts = 16,
                      .shared_experts = 1, .attn_bytes_per_layer = 4096, .vocab = 100,
                      .weight_format = AMOE_FMT_FP8_BLOCK128};
      amoe_hw hw = {.name = "gx", .hbm_bw = 1e12, .peak_flops = 1e14, .moe_eta = 1, .kernel_ops = AMOE_KOPS_MOE_GEMM};
      snprintf(hw.kernels, sizeof hw.kernels, "aic:gx:vllm:1.0");
      char note[1024];
      amoe_err e;
      (void)amoe_kernels_apply(&m, &hw, 1, note, sizeof note, &e);
      /* a baked table prices every step finite and non-negative */
      for (int t = 1; hw.gemm_points > 0 && t < 100000; t *= 7) {
        const double x = amoe_cost_dense(&m, &hw, t, 100, 1, 1) + amoe_cost_head(&m, &hw, t, 1);
        if (!(x >= 0) || x > 1e300) abort();
      }
      remove(file);
      remove(gemm);
    }
    break;
  }
  case FMT_REPLAY: {
    uint16_t *r = NULL;
    int nr = 0;
    amoe_err e;
    if (amoe_replay_load(path, &r, &nr, &e) == AMOE_OK)
      for (int i = 0; i < nr; i++) (void)r[i];
    free(r);
    break;
  }
  }
  amoe_diag_free(&dg);
  remove(path);
  return 0;
}
