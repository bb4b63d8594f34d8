/* hardware.kernels (harness/kernels.c): a measured table's row for the
 * model, taken by its shape, format and one GPU, its terms into the cost
 * function's per-expert time; the analytic terms where no table or row is
 * there; a malformed name and a broken table refused. The table is written
 * here by hand, in the columns scripts/fit_aic_moe.py writes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "cost.h"
#include "kernels.h"

static char dir[64];

static void write_file(const char *version, const char *name, const char *text) {
  char p[256];
  snprintf(p, sizeof p, "%s/gx", dir);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/gx/vllm", dir);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/gx/vllm/%s", dir, version);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/gx/vllm/%s/%s", dir, version, name);
  FILE *f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
}

static void write_table(const char *version, const char *text) { write_file(version, "moe-terms.csv", text); }

/* A GEMM table over m {1, 5}, n {32, 64}, k {32, 64, 128} whose times are
 * linear in each (trilinear interpolation is then exact): base + m/1000 +
 * n/10^4 + k/10^5 ms; a second kernel slower everywhere. */
static void write_gemm(const char *version, const char *dtype, double base) {
  static char t[16384];
  int at = snprintf(t, sizeof t, "kernel,m,n,k,latency_ms\n");
  const int ms[] = {1, 5}, ns[] = {32, 64}, ks[] = {32, 64, 128};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      for (int l = 0; l < 3; l++) {
        const double ms_ = base + ms[i] / 1e3 + ns[j] / 1e4 + ks[l] / 1e5;
        at += snprintf(t + at, sizeof t - (size_t)at, "0,%d,%d,%d,%.6g\n1,%d,%d,%d,%.6g\n", ms[i], ns[j], ks[l], ms_,
                       ms[i], ns[j], ks[l], 2 * ms_);
      }
  char name[64];
  snprintf(name, sizeof name, "gemm-%s.csv", dtype);
  write_file(version, name, t);
}

/* hardware.kernel_ops gemm: the dense projections and the head from the
 * GEMM tables, by hand. */
static void gemm_tables(void) {
  write_gemm("4.0", "bfloat16", 0.01);
  /* hidden 64: attention of 3,072 bf16 parameters is one GEMM of n 48, k 64;
   * the shared expert (inter 32) gate-up n 64 k 64 and down n 64 k 32 */
  amoe_model m = {.name = "tiny", .hidden = 64, .moe_intermediate = 32, .shared_experts = 1, .top_k = 2, .experts = 16,
                  .attn_bytes_per_layer = 3072 * 2, .vocab = 256, .weight_format = AMOE_FMT_BF16};
  amoe_hw hw = {.name = "gx", .hbm_bw = 1e12, .peak_flops = 1e14, .moe_eta = 1, .launch_s = 1e-6,
                .layer_fixed_s = 2e-6, .kernel_ops = AMOE_KOPS_GEMM};
  snprintf(hw.kernels, sizeof hw.kernels, "aic:gx:vllm:4.0");
  char note[1024];
  amoe_err e;
  CHECK(amoe_kernels_apply(&m, &hw, 1, note, sizeof note, &e) == AMOE_OK && hw.gemm_points == 2 && hw.gemm_tp == 1 &&
            strstr(note, "gx/vllm/4.0/gemm-bfloat16"),
        "the bf16 table baked (%d points): %s", hw.gemm_points, note);
  const double attn1 = 0.01 + 0.001 + 0.0048 + 0.00064, up1 = 0.01 + 0.001 + 0.0064 + 0.00064,
               down1 = 0.01 + 0.001 + 0.0064 + 0.00032, layer1 = (attn1 + up1 + down1) * 1e-3;
  CHECK(fabs(hw.gemm_moe_layer[0] - layer1) < 1e-12, "a MoE layer's GEMMs at 1 token: %.9g, by hand %.9g",
        hw.gemm_moe_layer[0], layer1);
  /* 3 tokens: halfway to 5, each GEMM 2 us slower; no context, no attention */
  const double d3 = amoe_cost_dense(&m, &hw, 3, 0, 1, 1);
  CHECK(fabs(d3 - (layer1 + 3 * 2e-6 + 2e-6)) < 1e-12, "the dense side at 3 tokens: %.9g", d3);
  /* the head: n 256 past the table's 64, in proportion (x4), plus its launch */
  const double head1 = 4 * (0.01 + 0.001 + 0.0064 + 0.00064) * 1e-3 + 1e-6;
  CHECK(fabs(amoe_cost_head(&m, &hw, 1, 1) - head1) < 1e-12, "the head at 1 token: %.9g, by hand %.9g",
        amoe_cost_head(&m, &hw, 1, 1), head1);
  /* past the largest m, in proportion: 10 tokens are twice 5 */
  CHECK(fabs(amoe_cost_head(&m, &hw, 10, 1) - 1e-6 - 2 * (amoe_cost_head(&m, &hw, 5, 1) - 1e-6)) < 1e-12,
        "the head past the table's m");
  /* another attention split: the roofline, as without the table */
  amoe_hw plain = hw;
  plain.gemm_points = 0;
  CHECK(amoe_cost_dense(&m, &hw, 3, 0, 1, 2) == amoe_cost_dense(&m, &plain, 3, 0, 1, 2),
        "a tp the table was not baked at: the roofline");
  /* fp8 weights: the fastest of the block-scaled and per-tensor tables at each point */
  write_gemm("5.0", "fp8_block", 0.02);
  write_gemm("5.0", "fp8", 0.005);
  write_gemm("5.0", "bfloat16", 0.01);
  m.dense_format = AMOE_DENSE_FP8;
  m.attn_bytes_per_layer = 3072; /* one byte a parameter */
  snprintf(hw.kernels, sizeof hw.kernels, "aic:gx:vllm:5.0");
  CHECK(amoe_kernels_apply(&m, &hw, 1, note, sizeof note, &e) == AMOE_OK && strstr(note, "gemm-fp8_block+fp8") &&
            fabs(hw.gemm_moe_layer[0] - (attn1 + up1 + down1 - 3 * 0.005) * 1e-3) < 1e-12,
        "fp8: the per-tensor table's faster times (%.9g): %s", hw.gemm_moe_layer[0], note);
  /* no table: the roofline, said; a malformed one refused at its line */
  snprintf(hw.kernels, sizeof hw.kernels, "aic:gx:vllm:6.0");
  CHECK(amoe_kernels_apply(&m, &hw, 1, note, sizeof note, &e) == AMOE_OK && hw.gemm_points == 0 &&
            strstr(note, "the dense roofline"),
        "no GEMM table: %s", note);
  write_file("7.0", "gemm-fp8.csv", "kernel,m,n,k,latency_ms\n0,1,32,32,0.01\n0,2,32,x,0.01\n");
  snprintf(hw.kernels, sizeof hw.kernels, "aic:gx:vllm:7.0");
  CHECK(amoe_kernels_apply(&m, &hw, 1, note, sizeof note, &e) == AMOE_EINVAL && strstr(e.msg, "gemm-fp8.csv:3:") &&
            hw.gemm_points == 0,
        "a malformed GEMM table refused at its line: %s", e.msg);
  /* moe (the default) leaves the dense side alone */
  hw.kernel_ops = AMOE_KOPS_MOE;
  snprintf(hw.kernels, sizeof hw.kernels, "aic:gx:vllm:5.0");
  CHECK(amoe_kernels_apply(&m, &hw, 1, note, sizeof note, &e) == AMOE_OK && hw.gemm_points == 0 && !strstr(note, "gemm"),
        "kernel_ops moe: no GEMMs: %s", note);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/amoe_kernels_XXXXXX");
  if (!mkdtemp(dir)) return 77;
  setenv("ACCEPTMOE_KERNELS", dir, 1);
  const char *hdr = "dtype,kernel,hidden,inter,topk,experts,moe_tp,moe_ep,t0_s,expert_s,token_s,points,fit_mape,"
                    "held_mape,power_law_mape,power_law_points\n";
  char t[2048];
  /* fp8_block is tried before fp8 for fp8-block128 weights; among one dtype's
   * kernels the least held-out error; a split expert (moe_tp 2) and another
   * shape are not the model's one-GPU row */
  snprintf(t, sizeof t, "%s%s", hdr,
           "fp8,k1,64,32,2,16,1,1,1e-05,2e-06,3e-08,21,0.1,0.05,0.1,54\n"
           "fp8_block,k2,64,32,2,16,1,1,1.1e-05,2.1e-06,3.1e-08,21,0.1,0.3,0.1,54\n"
           "fp8_block,k3,64,32,2,16,1,1,1.2e-05,2.2e-06,3.2e-08,21,0.1,0.1,0.1,54\n"
           "fp8_block,k4,64,32,2,16,2,1,1.3e-05,2.3e-06,3.3e-08,21,0.1,0.01,0.1,54\n"
           "fp8_block,k5,64,64,2,16,1,1,1.4e-05,2.4e-06,3.4e-08,21,0.1,0.0,nan,0\n");
  write_table("1.0", t);
  amoe_model m = {.name = "tiny", .hidden = 64, .moe_intermediate = 32, .top_k = 2, .experts = 16,
                  .weight_format = AMOE_FMT_FP8_BLOCK128};
  amoe_hw hw = {.name = "gx", .hbm_bw = 1e12, .peak_flops = 1e14, .moe_eta = 1, .moe_t0_s = 3e-5};
  snprintf(hw.kernels, sizeof hw.kernels, "aic:gx:vllm:1.0");
  char note[512];
  amoe_err e;
  CHECK(amoe_kernels_apply(&m, &hw, 1, note, sizeof note, &e) == AMOE_OK, "%s", e.msg);
  CHECK(hw.moe_t0_s == 1.2e-05 && hw.moe_expert_s == 2.2e-06 && hw.moe_token_s == 3.2e-08,
        "k3's terms (t0 %g, expert %g, token %g): %s", hw.moe_t0_s, hw.moe_expert_s, hw.moe_token_s, note);
  CHECK(strstr(note, "gx/vllm/1.0/moe-terms.csv: fp8_block k3") != NULL && !strstr(note, dir),
        "the note names the row from the kernels directory: %s", note);
  /* the cost function: max(expert_s, token_s · n) */
  const amoe_expert_coef c = amoe_cost_expert_coef(&m, &hw);
  CHECK(amoe_cost_expert_at(c, 1) == 2.2e-06 && amoe_cost_expert_at(c, 50) == 2.2e-06 &&
            amoe_cost_expert_at(c, 1000) == 1000 * 3.2e-08,
        "an expert's time: %g at 1 token, %g at 50, %g at 1000", amoe_cost_expert_at(c, 1), amoe_cost_expert_at(c, 50),
        amoe_cost_expert_at(c, 1000));
  /* bf16 weights: no row; the hardware's terms stay */
  amoe_hw h2 = {.name = "gx", .hbm_bw = 1e12, .peak_flops = 1e14, .moe_eta = 1, .moe_t0_s = 3e-5};
  snprintf(h2.kernels, sizeof h2.kernels, "aic:gx:vllm:1.0");
  m.weight_format = AMOE_FMT_BF16;
  CHECK(amoe_kernels_apply(&m, &h2, 1, note, sizeof note, &e) == AMOE_OK && h2.moe_t0_s == 3e-5 &&
            h2.moe_expert_s == 0 && h2.moe_token_s == 0 && strstr(note, "no row for tiny"),
        "bf16: no row, analytic terms: %s", note);
  const amoe_expert_coef c2 = amoe_cost_expert_coef(&m, &h2);
  CHECK(c2.mem_s == amoe_model_expert_bytes(&m) / 1e12, "the analytic expert time (%g)", c2.mem_s);
  snprintf(h2.kernels, sizeof h2.kernels, "aic:gx:vllm:2.0");
  CHECK(amoe_kernels_apply(&m, &h2, 1, note, sizeof note, &e) == AMOE_OK && h2.moe_expert_s == 0 &&
            strstr(note, "no table gx/vllm/2.0/moe-terms.csv"),
        "no table: analytic terms: %s", note);
  snprintf(h2.kernels, sizeof h2.kernels, "aic:gx");
  CHECK(amoe_kernels_apply(&m, &h2, 1, note, sizeof note, &e) == AMOE_EINVAL && strstr(e.msg, "aic:GPU:ENGINE:VERSION"),
        "a malformed name refused: %s", e.msg);
  snprintf(t, sizeof t, "%s%s", hdr, "fp8_block,k3,64,32,2,16,1,1,1.2e-05\n");
  write_table("3.0", t);
  snprintf(h2.kernels, sizeof h2.kernels, "aic:gx:vllm:3.0");
  CHECK(amoe_kernels_apply(&m, &h2, 1, note, sizeof note, &e) == AMOE_EINVAL && strstr(e.msg, "moe-terms.csv:2:"),
        "a short row refused at its line: %s", e.msg);
  h2.kernels[0] = 0;
  CHECK(amoe_kernels_apply(&m, &h2, 1, note, sizeof note, &e) == AMOE_OK && !note[0], "no kernels: nothing to do");
  gemm_tables();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("%d passed, %d failed\n", check_pass, check_fail);
  return check_fail ? 1 : 0;
}
