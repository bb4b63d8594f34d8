/* Where blocks come from (docs/design.md §5): the seeded generator, an .amt trace,
 * blocks-jsonl, routing-jsonl or routing-safetensors. One interface, so the run loop streams any
 * of them the same way; each block is produced once and handed to every
 * policy row. */
#ifndef AMOE_SOURCE_H
#define AMOE_SOURCE_H

#include "arrival.h"
#include "block.h"
#include "err.h"
#include "spec.h"

/* The spec's names, by enum value, NULL-terminated: workload.source
 * (amoe_source_kind), workload.routing_blocks (amoe_routing_blocks). */
extern const char *const amoe_source_kind_names[];
extern const char *const amoe_routing_blocks_names[];
extern const char *const amoe_prefill_names[]; /* offload.prefill, by amoe_prefill_mode */
extern const char *const amoe_prefill_schedule_names[]; /* workload.prefill_schedule */

typedef struct amoe_source amoe_source;

/* Opens the spec's workload. For file sources the model's (moe_layers,
 * experts, top_k) must match the file. */
amoe_status amoe_source_open(amoe_source **s, const amoe_workload_spec *w, const amoe_model *m,
                             amoe_err *e);
/* AMOE_OK: a block in b; AMOE_END: no more; else the error. */
amoe_status amoe_source_next(amoe_source *s, amoe_block *b, amoe_err *e);
amoe_status amoe_source_rewind(amoe_source *s, amoe_err *e);
void amoe_source_close(amoe_source *s);
/* Provenance (JSON text) and the stored logits per node-layer. */
const char *amoe_source_provenance(const amoe_source *s);
int amoe_source_m(const amoe_source *s);
/* Which logits blocks must carry (default AMOE_LOGITS_ALL; block.h). Only
 * a trace gives fewer (fewer bytes read); other sources give all. */
void amoe_source_want_logits(amoe_source *s, amoe_logits want);
/* A routing capture's score shape from the full logits its records carry
 * (amoe_jsonl_score_shape): 1 with entropy[layers] and the top-k mass, 0
 * for every other source or a capture without them. */
int amoe_source_score_shape(const amoe_source *s, double *entropy, double *topk_mass);
/* For synthetic sources, the acceptance scale found by calibration (else 0). */
double amoe_source_accept_scale(const amoe_source *s);
/* The prefill of `request`: each prompt token's natural top-k added to
 * counts[chunk][layer][expert] (zeroed first; token t in chunk t / chunk,
 * chunk 0: one chunk). *made: 1 when the source made it (the generator),
 * 0 when it has none (traces and captures carry no prompt). */
amoe_status amoe_source_prefill(amoe_source *s, uint32_t request, int tokens, int chunk, uint16_t *counts, int *made,
                                amoe_err *e);

/* ---- Batches (docs/design.md §17): each slot reads its own request ---- */
/* One request of the workload: its id, the block index of its first block
 * and how many blocks it has as one reader gives them. */
typedef struct {
  uint32_t id;
  uint64_t first;
  int blocks;
  int tokens; /* the tokens it decodes (0: workload.tokens_per_request) */
} amoe_source_request;
/* The requests a reader of s gives, in order, the last cut where
 * workload.blocks ends (*out: n entries, the caller frees): a batch of any
 * size runs exactly the blocks a batch-1 run does. Synthetic workloads
 * (counted without routing, amoe_gen_count_blocks) and traces only. */
amoe_status amoe_source_requests(amoe_source *s, amoe_source_request **out, int *n, amoe_err *e);
/* Open arrivals (§18): request i of plan[0..n) as the generator makes it
 * with plan[i].output_tokens tokens, whole (workload.blocks does not cut
 * it; *out: n entries, the caller frees). Synthetic workloads only. */
amoe_status amoe_source_requests_planned(amoe_source *s, const amoe_arrival *plan, int n, amoe_source_request **out,
                                         amoe_err *e);
/* Slot i's reader of its own over s's workload, owned by s (opened on
 * first use, kept for later runs, closed with s); amoe_source_seek puts it
 * at a request, whose blocks next() then gives (indexed from rq->first)
 * before AMOE_END. */
amoe_status amoe_source_slot(amoe_source *s, int i, amoe_source **slot, amoe_err *e);
amoe_status amoe_source_seek(amoe_source *slot, const amoe_source_request *rq, amoe_err *e);

/* Reads a per-step accept-length file: Spec-Bench answers (JSONL with
 * choices[0].accept_lengths) or plain whitespace-separated integers. */
amoe_status amoe_replay_load(const char *path, uint16_t **out, int *n, amoe_err *e);

/* The default stored logits per node-layer: min(E, max(4k, 32)). */
int amoe_default_top_m(int experts, int top_k);

#endif
