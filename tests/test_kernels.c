/* hardware.kernels (harness/kernels.c): a measured table's row for the
 * model, taken by its shape, format and one GPU, its terms into the cost
 * function's per-expert time; the analytic terms where no table or row is
 * there; a malformed name and a broken table refused. The table is written
 * here by hand, in the columns scripts/fit_aic_moe.py writes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "cost.h"
#include "kernels.h"

static char dir[64];

static void write_table(const char *version, const char *text) {
  char p[256];
  snprintf(p, sizeof p, "%s/gx", dir);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/gx/vllm", dir);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/gx/vllm/%s", dir, version);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/gx/vllm/%s/moe-terms.csv", dir, version);
  FILE *f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
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
  CHECK(amoe_kernels_apply(&m, &hw, note, sizeof note, &e) == AMOE_OK, "%s", e.msg);
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
  CHECK(amoe_kernels_apply(&m, &h2, note, sizeof note, &e) == AMOE_OK && h2.moe_t0_s == 3e-5 &&
            h2.moe_expert_s == 0 && h2.moe_token_s == 0 && strstr(note, "no row for tiny"),
        "bf16: no row, analytic terms: %s", note);
  const amoe_expert_coef c2 = amoe_cost_expert_coef(&m, &h2);
  CHECK(c2.mem_s == amoe_model_expert_bytes(&m) / 1e12, "the analytic expert time (%g)", c2.mem_s);
  snprintf(h2.kernels, sizeof h2.kernels, "aic:gx:vllm:2.0");
  CHECK(amoe_kernels_apply(&m, &h2, note, sizeof note, &e) == AMOE_OK && h2.moe_expert_s == 0 &&
            strstr(note, "no table gx/vllm/2.0/moe-terms.csv"),
        "no table: analytic terms: %s", note);
  snprintf(h2.kernels, sizeof h2.kernels, "aic:gx");
  CHECK(amoe_kernels_apply(&m, &h2, note, sizeof note, &e) == AMOE_EINVAL && strstr(e.msg, "aic:GPU:ENGINE:VERSION"),
        "a malformed name refused: %s", e.msg);
  snprintf(t, sizeof t, "%s%s", hdr, "fp8_block,k3,64,32,2,16,1,1,1.2e-05\n");
  write_table("3.0", t);
  snprintf(h2.kernels, sizeof h2.kernels, "aic:gx:vllm:3.0");
  CHECK(amoe_kernels_apply(&m, &h2, note, sizeof note, &e) == AMOE_EINVAL && strstr(e.msg, "moe-terms.csv:2:"),
        "a short row refused at its line: %s", e.msg);
  h2.kernels[0] = 0;
  CHECK(amoe_kernels_apply(&m, &h2, note, sizeof note, &e) == AMOE_OK && !note[0], "no kernels: nothing to do");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("%d passed, %d failed\n", check_pass, check_fail);
  return check_fail ? 1 : 0;
}
