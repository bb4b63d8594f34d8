/* The native binary trace `.amt` (DESIGN §5), little-endian, version 3.
 *
 *   header  magic "AMOETRC\0" | u32 version | u32 header_bytes
 *           u32 moe_layers | u32 experts | u32 top_k | u32 m
 *           u64 block_count | u64 table_offset | u32 provenance_bytes | provenance (JSON)
 *   blocks  each: u32 "AMB1" | u32 n | u64 payload_bytes | u64 checksum of the payload
 *           before the logits | u64 checksum of the logits | payload
 *           payload: u64 index | u32 request | u32 step | i32 parent[n] | f32 logp[n]
 *                    | f32 score[n] | u8 accepted[n] | ids[L·n·m] | f16 logits[L·n·m]
 *                    | f32 softmax_inv[L·n]
 *                    (ids u8 when experts <= 256, else u16; each array padded
 *                    to 8 bytes; softmax_inv is 1/Σ_j e^(z_j − z_0) of each
 *                    node-layer's logits, amoe_router_softmax_inv, which the
 *                    writer computes: a replay then needs only k exponentials
 *                    per node-layer, not m. The logits checksum covers it;
 *                    `acceptmoe inspect` recomputes it. Version-2 files,
 *                    the same without it, are read too.)
 *   table   u64 offset[block_count] | u64 checksum of the table
 *
 * A reader streams blocks through one reusable buffer, so memory does not
 * grow with the trace. Every length, offset and checksum is checked; an error
 * names the block and its byte offset. A reader told that no logits are
 * wanted (natural routing needs only the ids) skips them, the normalisers
 * and their checksum: two thirds of a qwen3 block. */
#ifndef AMOE_TRACE_H
#define AMOE_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "block.h"
#include "err.h"

#define AMOE_TRACE_VERSION 3u

typedef struct {
  int layers, experts, top_k, m;
  uint64_t blocks;
  char *provenance; /* owned, NUL-terminated */
} amoe_trace_info;

typedef struct amoe_trace_writer amoe_trace_writer;
typedef struct amoe_trace_reader amoe_trace_reader;

/* Writes to path atomically: a temporary file renamed into place on close. */
amoe_status amoe_trace_create(amoe_trace_writer **w, const char *path, int layers, int experts,
                              int top_k, int m, const char *provenance, amoe_err *e);
amoe_status amoe_trace_write(amoe_trace_writer *w, const amoe_block *b, amoe_err *e);
amoe_status amoe_trace_close(amoe_trace_writer *w, amoe_err *e); /* commits */
void amoe_trace_abort(amoe_trace_writer *w);                    /* removes the temporary */

amoe_status amoe_trace_open(amoe_trace_reader **r, const char *path, amoe_err *e);
const amoe_trace_info *amoe_trace_info_of(const amoe_trace_reader *r);
/* 1: a block, 0: end, or a negative amoe_status. b's arrays point into the
 * reader's buffer until the next call. */
int amoe_trace_next(amoe_trace_reader *r, amoe_block *b, amoe_err *e);
amoe_status amoe_trace_rewind(amoe_trace_reader *r, amoe_err *e);
/* Whether blocks carry their logits (default 1). Without them b->logits is
 * NULL. */
void amoe_trace_want_logits(amoe_trace_reader *r, int want);
void amoe_trace_close_reader(amoe_trace_reader *r);

/* Checksum used by the format (eight multiply-add lanes over 64-byte stripes). */
uint64_t amoe_trace_checksum(const void *data, size_t bytes);

/* Is this file an .amt trace (by its magic)? */
int amoe_trace_sniff(const char *path);

#endif
