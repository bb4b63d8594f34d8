/* Expert placement over the node's GPUs (docs/design.md §16). The routed
 * experts of each MoE layer live on moe_ep groups of GPUs (each expert split
 * over the group's moe_tp GPUs); a layer waits for the group with the most
 * expert work. Placements: contiguous blocks of ids (the engines' default),
 * round-robin, balanced (EPLB-style: from a calibration workload's per-layer
 * load, R extra copies of the hottest experts, everything packed to even
 * the long-run load) or read from a file. */
#ifndef AMOE_LAYOUT_H
#define AMOE_LAYOUT_H

#include <stdint.h>

#include "cost.h"
#include "err.h"

typedef struct amoe_layout amoe_layout;

amoe_layout *amoe_layout_new(int layers, int experts, int groups);
void amoe_layout_free(amoe_layout *t);
int amoe_layout_groups(const amoe_layout *t);
/* Expert e of every layer on group e·groups/E (blocks of ids). */
void amoe_layout_contiguous(amoe_layout *t);
/* Expert e on group e mod groups. */
void amoe_layout_round_robin(amoe_layout *t);
/* EPLB-style from load[layer][expert] (a calibration workload's token
 * counts): per layer, `redundant` times the expert with the most load per
 * copy gets one more copy; then the copies, heaviest first, each go to the
 * group with the least load that has room ((E + redundant) / groups
 * copies a group, rounded up) and holds no copy of that expert yet. */
amoe_status amoe_layout_balanced(amoe_layout *t, const double *load, int redundant, amoe_err *e);
/* A placement file: lines `layer,expert,group` (a second line for the same
 * expert is one more copy; '#' starts a comment); every expert of every
 * layer needs at least one. */
amoe_status amoe_layout_read(amoe_layout *t, const char *path, amoe_err *e);
/* Copies of expert x at layer l and their groups (into g, at most groups). */
int amoe_layout_copies(const amoe_layout *t, int l, int x, int *g);

/* One MoE layer's executed experts X (E flags) over the groups: each on its
 * group; then each replicated one, ascending id, on the copy whose group
 * has the least work so far (ties: the lower group). An expert's work is
 * amoe_cost_expert_at(count[x]) / moe_tp (count NULL: its bytes alone).
 * Returns the busiest group's expert time; *busiest_n its experts. */
double amoe_layout_layer(const amoe_layout *t, int l, const uint8_t *X, const int *count, amoe_expert_coef ec,
                         int moe_tp, int *busiest_n);
/* Plain version of amoe_layout_layer for tests: every group's work and experts (work[groups], n[groups]). */
void amoe_layout_layer_groups(const amoe_layout *t, int l, const uint8_t *X, const int *count, amoe_expert_coef ec,
                              int moe_tp, double *work, int *n);

#endif
