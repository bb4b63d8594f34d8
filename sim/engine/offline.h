/* The offline tables some policies read, estimated from a calibration
 * workload before a run (never from the evaluation workload itself): the
 * commitment p̂_d and the draft mass m̄_d per depth (acceptmoe, evict), the
 * mean union of the first n nodes in EAGLE order (evict), and the
 * per-layer expert load (a balanced placement on several GPUs). */
#ifndef AMOE_OFFLINE_H
#define AMOE_OFFLINE_H

#include "err.h"
#include "source.h"
#include "spec.h"
#include "tables.h"


/* The per-layer expert load of a calibration workload for a balanced
 * placement: natural top-k counts of the first `nodes` nodes of each block
 * in EAGLE order, into load[layers][experts] (zeroed first). */
amoe_status amoe_expert_load_estimate(amoe_source *src, int nodes, int top_k, int layers, int experts, double *load,
                                      amoe_err *e);

/* p̂_d: the fraction of blocks whose natural accepted prefix, within the
 * EAGLE-verified tree of `nodes` nodes, reaches depth d; and the union table. */
amoe_status amoe_offline_estimate(amoe_source *src, int nodes, int top_k, amoe_offline *out, amoe_err *e);


#endif
