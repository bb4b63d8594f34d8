/* `acceptmoe merge` (docs/design.md §14): joins the partial results of a
 * sweep run in shards (`run --shard I/N`) into the summary.csv, layers.csv,
 * blocks.csv, meta.json and spec.resolved.yaml an unsharded run writes,
 * byte for byte. Refuses shards of different specs, commits or shard
 * counts, a shard given twice and a missing one. */
#ifndef AMOE_MERGE_H
#define AMOE_MERGE_H

#include "err.h"

amoe_status amoe_merge(char *const *dirs, int n, const char *out, amoe_err *e);

#endif
