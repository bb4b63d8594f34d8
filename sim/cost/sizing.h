/* An engine's sizing rules (docs/design.md §19): what an engine derives at
 * start-up from the GPU's memory and the layout when its user sets nothing —
 * its chunked-prefill budget, its largest captured step and its KV share.
 * One row per rule (engine.sizing), each from the engine's own source; a
 * rule fills only what the spec leaves unset (0), so a key the user sets
 * wins. */
#ifndef AMOE_SIZING_H
#define AMOE_SIZING_H

#include "model.h"

/* What a rule reads: the GPU's memory, the layout (SGLang's tp_size is the
 * whole group, attention_tp · attention_dp; dp its DP-attention copies) and
 * the draft tokens a speculating server verifies per request (0: none). */
typedef struct {
  double memory_bytes;
  int tp, dp, pipeline;
  int draft_tokens;
} amoe_sizing_in;

typedef struct {
  const char *name, *what;
  void (*size)(amoe_engine *e, const amoe_sizing_in *in);
} amoe_sizing_row;

extern const amoe_sizing_row amoe_sizing_table[]; /* by amoe_sizing, in amoe_sizing_names' order */

/* Applies e->sizing's rule. */
void amoe_engine_size(amoe_engine *e, const amoe_sizing_in *in);

/* SGLang's captured batch sizes (server_args.py,
 * _generate_cuda_graph_batch_sizes): the smallest of its ladder (the
 * speculative one when `speculating`) that holds `requests`, at most
 * max_bs; 0 past it. */
int amoe_sizing_sglang_bs(int requests, int max_bs, int speculating);

#endif
