/* Model and hardware descriptions (docs/design.md §4). Values come from the presets
 * in workloads/models and workloads/hw, overridden field by field by a spec;
 * nothing here holds a default number for a real model or GPU. */
#ifndef AMOE_MODEL_H
#define AMOE_MODEL_H

#include <stdint.h>

#include "err.h"

#define AMOE_NAME_MAX 64
#define AMOE_MAX_EXPERTS 1024
#define AMOE_MAX_LAYERS 256
#define AMOE_MAX_TOPK 32

/* The router's kind (docs/design.md §5; core/router.h gives each one's
 * weights): softmax over every expert, kept as it is; sigmoid affinities
 * renormalised over the top-k; softmax over every expert with the top-k
 * renormalised; softmax over the top-k logits only. */
typedef enum {
  AMOE_ROUTER_SOFTMAX = 0,
  AMOE_ROUTER_SIGMOID_NORM = 1,
  AMOE_ROUTER_SOFTMAX_NORM = 2,
  AMOE_ROUTER_SOFTMAX_TOPK = 3
} amoe_router;
/* Names in amoe_router order, NULL-terminated (the spec key model.router). */
extern const char *const amoe_router_names[];
/* Expert weight formats (docs/design.md §4): bf16; fp8 with an fp32 scale
 * per 128x128 block; mxfp4, 4-bit weights with an e8m0 scale per 32; nvfp4,
 * 4-bit weights with an fp8 scale per 16 (and one fp32 per tensor). */
typedef enum {
  AMOE_FMT_BF16 = 0,
  AMOE_FMT_FP8_BLOCK128 = 1,
  AMOE_FMT_MXFP4 = 2,
  AMOE_FMT_NVFP4 = 3,
  AMOE_FMT_Q4_K_M = 4, /* llama.cpp's 4-bit K-quant mix, about 4.85 bits a weight with its scales (§21) */
  AMOE_FMT_INT8 = 5    /* 8-bit integers, a scale per output row */
} amoe_weight_fmt;
typedef enum { AMOE_DENSE_AUTO = 0, AMOE_DENSE_BF16 = 1, AMOE_DENSE_FP8 = 2 } amoe_dense_fmt;
extern const char *const amoe_dense_fmt_names[]; /* by amoe_dense_fmt, NULL-terminated */
/* hardware.kernel_ops: the measured operations a kernel table replaces */
typedef enum { AMOE_KOPS_MOE = 0, AMOE_KOPS_MOE_GEMM = 1, AMOE_KOPS_GEMM = 2 } amoe_kernel_ops;
extern const char *const amoe_kernel_ops_names[]; /* by amoe_kernel_ops, NULL-terminated */
#define AMOE_GEMM_POINTS 96 /* a GEMM table's token counts kept (AIConfigurator's: 74) */
extern const char *const amoe_weight_fmt_names[]; /* by amoe_weight_fmt, NULL-terminated */

/* A value per MoE layer: n = 0 unset (the default), 1 the same at every
 * layer, else one per layer (n = moe_layers, checked by the spec loader). */
typedef struct {
  int n;
  double v[AMOE_MAX_LAYERS];
} amoe_layer_values;
static inline double amoe_layer_value(const amoe_layer_values *x, int l, double unset) {
  return x->n == 0 ? unset : x->v[x->n == 1 ? 0 : l];
}

/* The routing structure of a model (`routing:` in its preset, written by
 * `acceptmoe fit`; docs/design.md §5, docs/generator.md): token-to-token
 * locality as a profile over the MoE layers, piecewise linear through
 * (first layer, locality_first), (locality_peak · (layers − 1), locality),
 * (last layer, locality_last); the per-request concentration
 * request_bias; and the score shape, which decides the router's weights
 * and no top-k set. `workload.routing.*` names the same fields with the
 * same meaning: a value set there replaces the model's (amoe_routing_resolve). */
typedef struct {
  double locality, locality_first, locality_last, locality_peak;
  double request_bias;
  double noise; /* the token-specific share of each logit: caps how alike adjacent tokens can route */
  double drift_tokens; /* the request bias's time constant in committed tokens (0: fixed per request) */
  double temperature;  /* divides the state and noise part of a logit (Mixtral's fit) */
  double layer_correlation; /* how much of a token's part carries from one layer to the next */
  amoe_layer_values skew; /* popularity: the std of the fixed per-expert bias, per layer (unset: by E) */
  /* score shape: every stored logit of the layer times this after the top-k
   * sets are drawn (unset: 1), so each set stays and the weights flatten
   * (< 1) or sharpen (> 1) */
  amoe_layer_values score_scale;
  /* the draft tree (docs/design.md §5 item 3; unset: 0, every node its own):
   * tree_sibling, per layer, the share of a node's fresh token part and
   * logit noise common to its siblings (alternatives at one position share
   * their context); tree_repeat, per layer, the probability that a node
   * carries the token of the first node with its depth and sibling rank in
   * another branch, and routes as that token (its token part and noise)
   * at the layer. Neither moves a root-to-leaf path's statistics. */
  amoe_layer_values tree_sibling, tree_repeat;
} amoe_routing_fit;
typedef struct {
  char name[AMOE_NAME_MAX];
  int layers;            /* decoder layers in all */
  int moe_layers;        /* of which MoE; the first (layers - moe_layers) are dense */
  int experts;           /* E routed experts per MoE layer */
  int top_k;             /* k */
  int shared_experts;
  int hidden;            /* d */
  int moe_intermediate;  /* f */
  int dense_intermediate;
  int router;            /* amoe_router */
  int weight_format;     /* amoe_weight_fmt */
  double expert_bytes;   /* bytes of one routed expert; 0 = derive from format */
  double attn_bytes_per_layer;  /* attention + norms + router weights */
  double kv_bytes_per_token_layer;
  /* the attention's KV heads (§19): a GPU of t attention ranks holds
   * 1/min(t, kv_heads) of a token's KV; 0: a latent every rank holds whole
   * (MLA), or not given */
  int kv_heads;
  /* attention FLOPs per (query, key) pair and layer (QK and PV over every
   * head); 0: 4·hidden, multi-head attention whose heads span d */
  double attn_flops_per_key;
  /* kernels one of its decoder layers launches when a step runs eager,
   * where its layer is not an ordinary one (DeepSeek-V4's hyper-connections
   * and compressors); 0: the engine's kernels_per_layer */
  double kernels_per_layer;
  /* the format of its dense weights (attention, shared experts, dense
   * MLPs): which of a measured kernel table's GEMMs run them (§20) and the
   * parameters attn_bytes_per_layer holds; amoe_dense_fmt (auto:
   * amoe_model_dense_format) */
  int dense_format;
  int vocab;
  double lm_head_bytes;
  double draft_head_bytes;
  amoe_routing_fit routing;
} amoe_model;

/* Routing defaults fitted to the real Mixtral-8x7B trace (docs/generator.md). */
#define AMOE_FIT_LOCALITY 0.3
#define AMOE_FIT_NOISE 1.0
#define AMOE_FIT_TEMPERATURE 0.8
#define AMOE_FIT_LAYER_CORRELATION 0.5

/* The routing of a model without a fitted `routing:` section: Mixtral's
 * fit (constant locality 0.3, no request concentration). */
void amoe_model_routing_defaults(amoe_model *m);
/* The routing a workload generates: the model's, with every field that the
 * overrides set (a number, not NaN; layer values with n > 0) in its place. */
void amoe_routing_resolve(const amoe_routing_fit *model, const amoe_routing_fit *override, amoe_routing_fit *out);
/* Overrides that set nothing (every number NaN, every layer list unset). */
void amoe_routing_unset(amoe_routing_fit *r);
/* Locality ρ_l of MoE layer l of `layers` under the model's profile. */
double amoe_model_locality_at(const amoe_model *m, int l, int layers);

typedef struct {
  char name[AMOE_NAME_MAX];
  double hbm_bw;          /* effective device-memory bandwidth, bytes/s */
  double h2d_bw;          /* pinned host-to-device bandwidth, bytes/s */
  double peak_flops;      /* dense bf16 FLOP/s */
  double peak_flops_fp8, peak_flops_fp4; /* dense FLOP/s in fp8 and in 4-bit formats (0: the next wider's) */
  /* what a routed expert's tokens compute at (its grouped GEMM at a few
   * tokens per expert, far below peak_flops; fitted where measured,
   * docs/validation.md); 0: peak_flops */
  double moe_flops;
  double moe_flops_tokens; /* the tokens per expert moe_flops was fitted over; beyond them each token at the format's peak (0: all at moe_flops) */
  double moe_peak_share;   /* the share of the format's peak those further tokens reach (0: all of it) */
  double launch_s;        /* per-kernel launch overhead, s (the lm head) */
  double memory_bytes;    /* device memory */
  /* fixed costs (docs/design.md §9); each preset says where its numbers come from */
  double step_s;          /* per target forward pass: sampling, scheduling, tree masks */
  double layer_fixed_s;   /* per decoder layer: its ~8-10 small dense kernels */
  double moe_t0_s;        /* per fused-MoE call (per wave) */
  double moe_eta;         /* share of hbm_bw that expert streaming reaches */
  /* an expert's time as a measured kernel table gives it for the model's
   * shape and format (docs/design.md §20; hardware.kernels fills them):
   * max(moe_expert_s, moe_token_s · its tokens) in place of the bytes over
   * moe_eta · hbm_bw and the FLOPs at moe_flops (0: those) */
  double moe_expert_s, moe_token_s;
  /* the measured kernel table the MoE terms come from, as
   * aic:GPU:ENGINE:VERSION (AIConfigurator's, imported by
   * scripts/aic-import.py and fitted by scripts/fit_aic_moe.py); empty:
   * the analytic terms */
  char kernels[AMOE_NAME_MAX];
  int kernel_ops; /* amoe_kernel_ops: which of the table's operations replace the analytic terms */
  /* the table's GEMMs (kernel_ops gemm), baked by harness/kernels.c for
   * the spec's model at attention_tp gemm_tp: a MoE layer's dense
   * projections (attention, shared experts), a dense layer's, and the
   * head's, in seconds at gemm_m[i] tokens a step; gemm_points 0: the
   * roofline of bytes and FLOPs */
  int gemm_points, gemm_tp;
  double gemm_m[AMOE_GEMM_POINTS], gemm_moe_layer[AMOE_GEMM_POINTS], gemm_dense_layer[AMOE_GEMM_POINTS],
      gemm_head[AMOE_GEMM_POINTS];
  double draft_step_fixed_s; /* per draft step, beside the draft head's bytes */
  double copy_latency_s;  /* per host-to-device expert copy */
  /* the engine around the kernels (docs/design.md §9) */
  double readback_s;      /* offload: the routing's device-to-host copy and synchronisation, per MoE layer */
  double step_host_s;     /* host work between passes (sampling, tree building) when no overlap scheduler hides it */
  int cuda_graphs;        /* the engine's default mode: 1 = a pass is one graph launch */
  int overlap_scheduler;  /* the engine's default: 1 = the step's host work runs under the previous pass */
  int gpus;               /* GPUs of the node (docs/design.md §16); 1: everything on one */
  struct {                /* the link between them (`interconnect:`, a preset of workloads/interconnect/) */
    char name[AMOE_NAME_MAX];
    double allreduce_latency_s; /* a small all-reduce */
    double allreduce_bw;        /* bus bandwidth of a large one, bytes/s */
    double dispatch_s, combine_s; /* an all-to-all engine's token dispatch and combine per MoE layer */
    double layer_sync_per_peer_s; /* per decoder layer and GPU beyond the first of its collectives: their
                                     synchronisation and imbalance (fitted; a layer of g GPUs pays g − 1 of it) */
    double hop_latency_s; /* parallel.pipeline: one hidden-state copy between stages, beyond its bytes */
    double hop_bw;        /* its bytes/s */
  } ic;
} amoe_hw;

/* The host that experts off the GPU live on and run on (`host:`, a preset
 * of workloads/hosts/; docs/design.md §21): its CPU sockets and their
 * memory. A CPU-side expert costs the larger of its bytes over the
 * bandwidth the cores reach and its FLOPs at the ISA's rate, plus a fixed
 * cost; a second socket adds socket_gain of the first's rates. */
typedef enum { AMOE_ISA_AVX2 = 0, AMOE_ISA_AVX512 = 1, AMOE_ISA_AMX = 2 } amoe_host_isa;
extern const char *const amoe_host_isa_names[]; /* by amoe_host_isa, NULL-terminated */
typedef struct {
  char name[AMOE_NAME_MAX];
  int cores;              /* a socket's */
  int isa;                /* amoe_host_isa: the widest the expert kernels use */
  int sockets;            /* 0 until resolved: 1 */
  int channels;           /* DRAM channels a socket */
  double mts;             /* their transfers a second, in millions (DDR5-4800: 4800) */
  double bw_share;        /* the share of the channels' peak (8 bytes a transfer) an expert kernel's reads reach */
  double flops;           /* a socket's expert FLOP/s at 16-bit weights */
  double flops_int8;      /* at 8-bit and narrower weights, integer ops (0: flops) */
  double flops_vector;    /* for formats the matrix units' kernels do not take (q4_k_m: llamafile's vector kernels; 0: flops) */
  double expert_fixed_s;  /* per expert a pass computes on the host */
  double socket_gain;     /* what a second socket adds, as a share of one (NUMA-aware kernels) */
} amoe_host;

/* Where each layer's routed experts live (`experts:`, docs/design.md §21;
 * sim/cost/tiers.h parses and places them). */
typedef enum { AMOE_TIER_GPU = 0, AMOE_TIER_CPU = 1, AMOE_TIER_SHARE = 2, AMOE_TIER_CPU_LAYERS = 3 } amoe_tier_kind;
typedef enum { AMOE_PICK_RANDOM = 0, AMOE_PICK_UNIFORM = 1, AMOE_PICK_FRONT = 2, AMOE_PICK_FREQUENCY = 3 } amoe_tier_strategy;
extern const char *const amoe_tier_strategy_names[]; /* by amoe_tier_strategy, NULL-terminated */

typedef struct {
  int kind;     /* amoe_tier_kind */
  double share; /* cpu:SHARE:…: the GPU's share of the experts */
  int strategy; /* cpu:SHARE:STRATEGY: amoe_tier_strategy */
  int layers;   /* cpu-layers:N */
} amoe_tiers;

/* How a pass is split over the node's GPUs (`parallel:`, docs/design.md §16):
 * attention, dense layers, shared experts and the head tensor-parallel over
 * attention_tp GPUs, in attention_dp data-parallel copies that each run
 * their own requests (SGLang's DP attention); the routed experts placed on
 * moe_ep groups, each split over moe_tp GPUs (moe_ep · moe_tp =
 * attention_tp · attention_dp = gpus). */
#define AMOE_MAX_GPUS 64 /* hardware.gpus, and so the expert groups of a layout */
typedef enum { AMOE_PLACE_CONTIGUOUS = 0, AMOE_PLACE_ROUND_ROBIN = 1, AMOE_PLACE_BALANCED = 2, AMOE_PLACE_FILE = 3 } amoe_placement_kind;
typedef enum { AMOE_COMM_ALL_REDUCE = 0, AMOE_COMM_ALL_TO_ALL = 1 } amoe_moe_comm;
extern const char *const amoe_placement_names[]; /* by amoe_placement_kind, NULL-terminated */
extern const char *const amoe_moe_comm_names[];  /* by amoe_moe_comm */
typedef struct {
  int attention_tp, moe_ep, moe_tp; /* 0 until resolved from hardware.gpus */
  int placement;                    /* amoe_placement_kind */
  int redundant;                    /* balanced: extra copies of the hottest experts per layer */
  int moe_comm;                     /* amoe_moe_comm */
  int pipeline;                     /* P contiguous stages of layers, one GPU each (attention_tp 1); 0 until resolved: 1 */
  int attention_dp;                 /* data-parallel attention copies; 0 until resolved: 1 */
  char placement_file[1024];        /* placement: file */
} amoe_parallel;
/* Whether a pass lays its experts over groups of GPUs (a layout of §16):
 * several GPUs not in a pipeline, or an expert split over several. */
static inline int amoe_parallel_has_groups(const amoe_parallel *p, int gpus) {
  return (gpus > 1 && p->pipeline <= 1) || p->moe_tp > 1;
}

/* How the engine executes a pass (`engine:` in a spec, or an engine preset of
 * workloads/engines/; docs/design.md §9). Eager (cuda_graphs 0): every
 * kernel is a host launch of launch_s. Kernel counts: kernels_per_layer for
 * a decoder layer's attention, norms and router; the MoE part one call per
 * wave (fused), kernels_per_expert per executed expert (per-expert), or a
 * host loop over experts that synchronises at each one it visits (loop:
 * Hugging Face transformers), where an executed expert costs expert_host_s
 * of host time and a visited expert that runs nothing visit_host_s; one
 * launch per expert copy. host_overlap: a layer's host work without a
 * synchronisation runs ahead of the device, so it takes max(host, device);
 * otherwise (the fit of docs/validation.md for a C++ engine at batch 1) they
 * add. */
typedef enum { AMOE_MOE_FUSED = 0, AMOE_MOE_PER_EXPERT = 1, AMOE_MOE_LOOP = 2 } amoe_moe_kernels;
/* Which experts a loop visits: the hit ones; every expert, running its
 * kernels even with no tokens; every expert, skipping the empty ones. */
typedef enum { AMOE_VISIT_HIT = 0, AMOE_VISIT_ALL = 1, AMOE_VISIT_ALL_SKIP = 2 } amoe_visits;
extern const char *const amoe_moe_kernels_names[]; /* by amoe_moe_kernels, NULL-terminated */
extern const char *const amoe_visits_names[];      /* by amoe_visits */
/* What engine.request_s is charged per: each token a request commits in
 * the pass (plain decoding cannot tell the two apart: one token a pass),
 * or each pass it is in. */
typedef enum { AMOE_REQUEST_PER_TOKEN = 0, AMOE_REQUEST_PER_PASS = 1 } amoe_request_per;
extern const char *const amoe_request_per_names[]; /* by amoe_request_per */
/* How a request holds KV under a capacity (docs/design.md §19): its
 * prompt and whole output from admission, or (vLLM's) its prompt at
 * admission and each token as it is written, the newest requests preempted
 * when a step's tokens do not fit and their KV recomputed on return. */
typedef enum { AMOE_KV_RESERVE = 0, AMOE_KV_INCREMENTAL = 1 } amoe_kv_allocation;
extern const char *const amoe_kv_allocation_names[]; /* by amoe_kv_allocation */
/* How the engine sizes what a spec leaves unset from the GPU's memory and
 * the layout (engine.sizing; sim/cost/sizing.h): the preset's numbers as
 * they are, or vLLM's or SGLang's start-up rules. */
typedef enum { AMOE_SIZING_FIXED = 0, AMOE_SIZING_VLLM = 1, AMOE_SIZING_SGLANG = 2 } amoe_sizing;
extern const char *const amoe_sizing_names[]; /* by amoe_sizing */
typedef struct {
  char name[AMOE_NAME_MAX]; /* the engine preset, or "" */
  int cuda_graphs;          /* -1 until resolved: the hardware preset's */
  int overlap_scheduler;    /* -1 until resolved: the hardware preset's */
  int moe_kernels;          /* amoe_moe_kernels */
  double kernels_per_layer;
  double kernels_per_expert;
  int visits;               /* loop: amoe_visits */
  double expert_host_s;     /* loop: host time of an executed expert (its kernels, its visit's synchronisation) */
  double visit_host_s;      /* loop: host time of a visited expert that runs nothing */
  int host_overlap;         /* 1: a synchronisation-free layer takes max(host, device) */
  double launch_s;          /* 0: the hardware preset's */
  double moe_call_host_s;   /* eager, fused: host time of one fused-MoE call (0: one launch) */
  double step_host_s;       /* 0: the hardware preset's */
  /* what each request beyond the first adds to a pass, beside the device
   * model: the engine's per-request work at batch (fitted to plain
   * decoding against batch, docs/validation.md; a batch of one is the
   * batch-1 fit's); 0: none */
  double request_s;
  int request_per; /* amoe_request_per */
  /* The speculative cycle around the target's pass (docs/design.md §9),
   * fitted per engine (docs/validation.md); each 0 where unset, except
   * draft_step_s (0: the hardware's draft_step_fixed_s):
   *   draft_step_s   per draft forward (the extend and each step), beside the head's bytes
   *   draft_token_s  per token a draft forward runs over
   *   draft_extend_s the extend pass's own work beyond a draft forward (hidden states in, KV out)
   *   tree_node_s    per verified node: building the tree, its attention mask and positions
   *   sample_s       verification sampling per cycle (the accepted path, its bonus token)
   *   cycle_host_s   the engine's host work per speculative cycle, beyond a plain step's */
  double draft_step_s, draft_token_s, draft_extend_s, tree_node_s, sample_s, cycle_host_s;
  /* CUDA-graph capture (docs/design.md §19): the largest captured step in
   * tokens (0: every step runs as a graph of its own size) and the captured
   * sizes (n = 0: the engine's rule, vLLM's 1, 2, 4, multiples of 8 below
   * 256, then of 16 up to the largest). A step is padded up to the next
   * captured size; a larger one runs eager. */
  int graph_capture_max_tokens;
  amoe_layer_values graph_capture_sizes;
  /* SGLang's capture (cuda_graph_max_bs; 0: by tokens, above): decode and
   * verify steps captured per request, each with its draft tokens, up to
   * this many requests a copy, padded up its ladder
   * (amoe_sizing_sglang_bs, or graph_capture_sizes in requests); a step
   * with prompt tokens (an extend) runs eager */
  int graph_capture_max_requests;
  int sizing; /* amoe_sizing */
  /* the scheduler's caps (§19; 0: none): requests running at once (vLLM's
   * max_num_seqs), for open arrivals that set no workload.max_running; and
   * a step's tokens with chunked prefill (max_num_batched_tokens) */
  int max_running, max_batched_tokens;
  /* prompt chunks in steps of their own, ahead of the decodes, which wait
   * (SGLang's scheduler without --enable-mixed-chunk: a prefill batch first
   * whenever one can be formed); 0: beside the decodes in one step (vLLM) */
  int prefill_apart;
  /* KV capacity (§19; utilisation 0: unlimited): the share of each GPU's
   * memory the engine takes, and what it keeps of it for activations and
   * graphs; the KV cache gets the rest after the weights */
  double gpu_memory_utilization, memory_reserve_bytes;
  double draft_reserve_bytes; /* kept back besides when the row speculates: the draft's graphs and buffers */
  int kv_allocation; /* amoe_kv_allocation */
  /* the time per decoder layer and GPU beyond the first that the engine's
   * tensor-parallel collectives wait (0: the interconnect's
   * layer_sync_per_peer_s); an engine fits its own (docs/design.md §19) */
  double layer_sync_per_peer_s;
  /* the share of the modelled device speed the engine reaches: a pass's
   * device time (dense, experts, collectives, draft forwards) over it; a
   * deployment's calibration fits it (docs/design.md §20); 0: 1 */
  double efficiency;
} amoe_engine;
/* The engine's launch and step host time, or the hardware's where it sets none. */
/* The per-peer layer sync the engine's collectives pay, or the interconnect's. */
static inline double amoe_engine_layer_sync_s(const amoe_engine *e, const amoe_hw *hw) {
  return e->layer_sync_per_peer_s > 0 ? e->layer_sync_per_peer_s : hw->ic.layer_sync_per_peer_s;
}
static inline double amoe_engine_launch_s(const amoe_engine *e, const amoe_hw *hw) {
  return e->launch_s > 0 ? e->launch_s : hw->launch_s;
}
static inline double amoe_engine_step_host_s(const amoe_engine *e, const amoe_hw *hw) {
  return e->step_host_s > 0 ? e->step_host_s : hw->step_host_s;
}
/* 1 when the engine sets any term of the speculative cycle. */
static inline int amoe_engine_has_cycle(const amoe_engine *e) {
  return e->draft_step_s > 0 || e->draft_token_s > 0 || e->draft_extend_s > 0 || e->tree_node_s > 0 ||
         e->sample_s > 0 || e->cycle_host_s > 0;
}
static inline double amoe_engine_draft_step_s(const amoe_engine *e, const amoe_hw *hw) {
  return e->draft_step_s > 0 ? e->draft_step_s : hw->draft_step_fixed_s;
}

/* Bytes of one routed expert: the explicit value if set, else its three
 * d x f matrices in the model's weight format, scales included. */
double amoe_model_format_bytes(int format, int rows, int cols);
static inline double amoe_model_expert_bytes(const amoe_model *m) {
  return m->expert_bytes > 0 ? m->expert_bytes : 3.0 * amoe_model_format_bytes(m->weight_format, m->hidden, m->moe_intermediate);
}
/* The dense weights' format: model.dense_format, or for auto fp8 beside
 * fp8-block128 experts and else bf16 (amoe_dense_fmt). */
int amoe_model_dense_format(const amoe_model *m);
/* Bytes of one shared expert (always bf16 3·d·f·2). */
double amoe_model_shared_expert_bytes(const amoe_model *m);
/* Checks shapes for consistency: AMOE_EINVAL, the message naming the field. */
amoe_status amoe_model_check(const amoe_model *m, amoe_err *e);

#endif
