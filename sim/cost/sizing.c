/* The engines' sizing rules (sizing.h), each from its engine's source. */
#include "sizing.h"

#include <math.h>

#define MIB 1048576.0

static void size_fixed(amoe_engine *e, const amoe_sizing_in *in) { (void)e, (void)in; }

/* vLLM (vllm/config/vllm.py, _set_cudagraph_sizes): the largest captured
 * step is min(max_num_seqs · (1 + num_speculative_tokens) · 2, 512)
 * tokens, then at most max_num_batched_tokens. */
static void size_vllm(amoe_engine *e, const amoe_sizing_in *in) {
  if (e->graph_capture_max_tokens > 0 || e->max_running <= 0) return;
  long max = 2L * e->max_running * (1 + (in->draft_tokens > 0 ? in->draft_tokens : 0));
  if (max > 512) max = 512;
  if (e->max_batched_tokens > 0 && max > e->max_batched_tokens) max = e->max_batched_tokens;
  e->graph_capture_max_tokens = (int)max;
}

/* SGLang (python/sglang/srt/server_args.py, _handle_gpu_memory_settings
 * and _handle_data_parallelism): by the GPU's memory, chunked_prefill_size
 * and cuda_graph_max_bs; the KV pool what is left of
 * mem_fraction_static = (memory − reserved) / memory after the weights,
 * reserved (MiB) = 512 + 1.5·max(chunk, 2048) + 2·bs + 1024·tp·pp/8, with
 * DP attention + 3·bs·dp (+ 1.5·bs·dp above 300), at least 10 GiB on a GPU
 * above 60 GiB; an EAGLE draft 2 GiB more (draft_reserve_bytes, taken only
 * by a speculating row). Under DP attention each copy's budget is the
 * chunk over dp, so a step of every copy's tokens (the scheduler's step)
 * carries the chunk. Decode steps are captured per request of a copy, up
 * to bs. */
static void size_sglang(amoe_engine *e, const amoe_sizing_in *in) {
  const double mem = in->memory_bytes / MIB;
  const int tp = in->tp > 0 ? in->tp : 1, dp = in->dp > 1 ? in->dp : 1, pp = in->pipeline > 1 ? in->pipeline : 1;
  int chunk, bs;
  if (!(mem > 0)) chunk = 4096, bs = 160; /* SGLang's fallback where it cannot read the memory */
  else if (mem < 60 * 1024) chunk = 4096, bs = tp < 4 ? 32 : 160;
  else if (mem < 160 * 1024) chunk = 8192, bs = tp < 4 ? 256 : 512; /* H100, A100-80GB; H20, H200 */
  else chunk = 16384, bs = 512;                                       /* B200, MI300 */
  if (e->graph_capture_max_requests > 0) bs = e->graph_capture_max_requests;
  else e->graph_capture_max_requests = bs;
  if (e->max_batched_tokens > 0) chunk = e->max_batched_tokens;
  else e->max_batched_tokens = chunk / dp * dp;
  if (e->gpu_memory_utilization > 0 || !(mem > 0)) return;
  double reserved = 512 + 1.5 * (chunk > 2048 ? chunk : 2048) + 2.0 * bs + 1024.0 * tp * pp / 8;
  if (dp > 1) reserved += 3.0 * bs * dp + (bs > 300 ? 1.5 * bs * dp : 0);
  if (mem > 60 * 1024 && reserved < 10 * 1024) reserved = 10 * 1024;
  e->gpu_memory_utilization = round((mem - reserved) / mem * 1000) / 1000;
  if (e->draft_reserve_bytes <= 0) e->draft_reserve_bytes = 2048 * MIB;
}

const amoe_sizing_row amoe_sizing_table[] = {
    {"fixed", "the preset's numbers as they are", size_fixed},
    {"vllm", "the captured steps from max_num_seqs, the draft tokens and the budget", size_vllm},
    {"sglang", "chunked prefill, captured requests and the KV share from the GPU's memory and DP attention", size_sglang},
};

void amoe_engine_size(amoe_engine *e, const amoe_sizing_in *in) {
  if (e->sizing >= 0 && e->sizing < (int)(sizeof amoe_sizing_table / sizeof amoe_sizing_table[0]))
    amoe_sizing_table[e->sizing].size(e, in);
}

int amoe_sizing_sglang_bs(int requests, int max_bs, int speculating) {
  if (requests < 1) requests = 1;
  if (requests > max_bs) return 0;
  int bs;
  if (speculating) { /* 1..8, 10..32 by 2, 40..64 by 4, 72..256 by 8, then by 16 */
    if (requests <= 8) bs = requests;
    else if (requests <= 32) bs = (requests + 1) / 2 * 2;
    else if (requests <= 40) bs = 40;
    else if (requests <= 64) bs = (requests + 3) / 4 * 4;
    else if (requests <= 256) bs = (requests + 7) / 8 * 8;
    else bs = 256 + (requests - 256 + 15) / 16 * 16;
  } else { /* 1, 2, 4, 8, 12, 16..256 by 8, 272..496 by 16, 512.. by 32 */
    if (requests <= 2) bs = requests;
    else if (requests <= 4) bs = 4;
    else if (requests <= 8) bs = 8;
    else if (requests <= 12) bs = 12;
    else if (requests <= 256) bs = (requests + 7) / 8 * 8;
    else if (requests <= 496) bs = 256 + (requests - 256 + 15) / 16 * 16;
    else bs = 512 + (requests - 512 + 31) / 32 * 32;
  }
  /* the ladder stops at max_bs (its last rung, SGLang PR #21005) */
  return bs <= max_bs ? bs : max_bs;
}
