/* The routing-safetensors reader (safetensors.c): a reader of jsonl.h over a
 * safetensors capture. */
#ifndef AMOE_SAFETENSORS_H
#define AMOE_SAFETENSORS_H

#include "jsonl.h"

/* routing-safetensors (docs/design.md §5): the same records in bulk: a
 * safetensors file with 'experts' I16|I32 [tokens, moe_layers, k] (-1 =
 * none), 'req_offsets' I64 [R+1], optional 'weights' F16|F32, 'logits'
 * F16|BF16|F32 [tokens, moe_layers, E] and 'prompt_len' I32 [R]. Every
 * length and offset is checked against the file; errors name the tensor
 * and byte offset. */
amoe_status amoe_routing_safetensors_open(amoe_jsonl_reader **r, const char *path, int layers, int experts,
                                          int top_k, int router, int window, amoe_err *e);

#endif
