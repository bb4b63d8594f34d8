/* JSONL interchange (docs/design.md §5).
 *   blocks-jsonl: one block per line, full E-vectors ("logits") or top-m
 *                 pairs ("topk"); read line by line, errors name file:line.
 *   routing-jsonl: real decode traces, one record per (token, layer); read
 *                 whole, grouped by problem, cut into chain blocks of
 *                 `window` tokens. Ragged layers are cut to the shortest
 *                 and what was dropped is reported. Hybrid blocks (real
 *                 accepted path, generated siblings) are composed in
 *                 source.c from the tokens this reader holds. */
#ifndef AMOE_JSONL_H
#define AMOE_JSONL_H

#include <stdio.h>

#include "block.h"
#include "model.h"
#include "err.h"

typedef struct amoe_jsonl_reader amoe_jsonl_reader;

/* Opens blocks-jsonl; layers/experts from the model; m = 0 picks E for full
 * vectors or the file's top-m count. */
amoe_status amoe_blocks_jsonl_open(amoe_jsonl_reader **r, const char *path, int layers, int experts,
                                   amoe_err *e);
/* Opens routing-jsonl and converts it into chain blocks of `window` tokens.
 * A gating probability p becomes the logit the model's router maps back to
 * it: log p for softmax (the softmax over the top-k gives the renormalised
 * weights p / Σp), log(p / (1 − p)) for sigmoid-normalized routers (whose
 * per-entry score is then p again; at most 30 for p = 1). */
amoe_status amoe_routing_jsonl_open(amoe_jsonl_reader **r, const char *path, int layers, int experts,
                                    int top_k, int router, int window, amoe_err *e);
/* The real tokens of a routing-jsonl file (hybrid blocks, source.h):
 * problems in problem_id order, each `tokens` long after ragged layers are
 * cut; a token's top-k ids and logits (log of its gating probabilities) at
 * layer l, sorted by logit (ties: lower id), as a block stores them. */
int amoe_routing_problems(const amoe_jsonl_reader *r);
int amoe_routing_tokens(const amoe_jsonl_reader *r, int problem);
void amoe_routing_token(const amoe_jsonl_reader *r, int problem, int layer, int token, const uint16_t **ids,
                        const amoe_f16 **logits);
int amoe_jsonl_m(const amoe_jsonl_reader *r);
/* A routing capture's score shape, from the records that carry every
 * expert's logit (which the blocks keep only the top-k of): per layer the
 * mean entropy (nats) of the softmax over all experts into entropy[layers],
 * and the mean share of it in the record's top-k. 0 when some layer has
 * no such record. */
int amoe_jsonl_score_shape(const amoe_jsonl_reader *r, double *entropy, double *topk_mass);
const char *amoe_jsonl_note(const amoe_jsonl_reader *r); /* what was dropped, or "" */
/* AMOE_OK: a block in b; AMOE_END: no more; else the error. */
amoe_status amoe_jsonl_next(amoe_jsonl_reader *r, amoe_block *b, amoe_err *e);
amoe_status amoe_jsonl_rewind(amoe_jsonl_reader *r, amoe_err *e);
void amoe_jsonl_close(amoe_jsonl_reader *r);

/* Writes one block as a blocks-jsonl line (top-m pairs, or full vectors if m = E). */
amoe_status amoe_blocks_jsonl_write(FILE *f, const amoe_block *b, amoe_err *e);

#endif
