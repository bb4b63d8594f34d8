/* The native binary trace `.amt` (docs/design.md §5), little-endian, version 4.
 *
 *   header  magic "AMOETRC\0" | u32 version | u32 header_bytes
 *           u32 moe_layers | u32 experts | u32 top_k | u32 m
 *           u64 block_count | u64 table_offset | u32 provenance_bytes | provenance (JSON)
 *   blocks  each: u32 "AMB1" | u32 n | u64 payload_bytes | u64 checksum[3] | payload
 *           payload, three sections, a checksum each:
 *             1. u64 index | u32 request | u32 step | i32 parent[n] | f32 logp[n]
 *                | f32 score[n] | u8 accepted[n] | ids[L·n·m]
 *             2. f16 top[L·n·k] | f32 softmax_inv[L·n]
 *             3. f16 rest[L·n·(m−k)]
 *           ids u8 when experts <= 256, else u16; every array padded to 8
 *           bytes. Node-layer i's logits are top[i·k ..] then rest[i·(m−k) ..]
 *           (logit descending, as the ids). softmax_inv is 1/Σ_j e^(z_j − z_0)
 *           over all m, amoe_router_softmax_inv, computed by the writer: the
 *           natural top-k probabilities then need the second section only,
 *           and only k exponentials; `acceptmoe inspect` recomputes it.
 *   table   u64 offset[block_count] | u64 checksum of the table
 *
 * Versions 2 and 3 are read too: a 32-byte block header with two checksums
 * (tree and ids; the rest), all logits [L·n·m] after the ids, then (version
 * 3) the normalisers.
 *
 * A reader streams blocks through one reusable buffer, so memory does not
 * grow with the trace. Every length, offset and checksum is checked; an error
 * names the block and its byte offset. A reader reads the sections it is
 * asked for (amoe_trace_want_logits) and checks only their checksums:
 * natural routing needs the first (a third of a qwen3 block), every other
 * policy but moe-spec the first two (a half). */
#ifndef AMOE_TRACE_H
#define AMOE_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "block.h"
#include "err.h"

#define AMOE_TRACE_VERSION 4u

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
/* AMOE_OK: a block in b, AMOE_END: no more, else the error. b's arrays
 * point into the reader's buffer until the next call. */
amoe_status amoe_trace_next(amoe_trace_reader *r, amoe_block *b, amoe_err *e);
amoe_status amoe_trace_rewind(amoe_trace_reader *r, amoe_err *e);
/* The next block read is block `block` (its offset from the table). */
amoe_status amoe_trace_seek(amoe_trace_reader *r, uint64_t block, amoe_err *e);
/* Block `block`'s request, read alone (its index checked; the checksums
 * are checked when the block itself is read). */
amoe_status amoe_trace_block_request(amoe_trace_reader *r, uint64_t block, uint32_t *request, amoe_err *e);
/* Which logits blocks carry (default AMOE_LOGITS_ALL; block.h). NONE:
 * b->logits is NULL. TOP, from a version-4 trace: each node-layer's top-k,
 * b->lm = top_k (older versions give all m). */
void amoe_trace_want_logits(amoe_trace_reader *r, amoe_logits want);
void amoe_trace_close_reader(amoe_trace_reader *r);

/* Checksum used by the format (eight multiply-add lanes over 64-byte stripes). */
uint64_t amoe_trace_checksum(const void *data, size_t bytes);
/* The same without the vector path: its plain twin, which tests compare it with. */
uint64_t amoe_trace_checksum_generic(const void *data, size_t bytes);

/* Is this file an .amt trace (by its magic)? */
int amoe_trace_sniff(const char *path);

#endif
