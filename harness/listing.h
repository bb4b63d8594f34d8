/* Listings of the registries: the presets in their folders and the policy
 * rows with their parameters (`acceptmoe presets`, `acceptmoe policies`). */
#ifndef AMOE_LISTING_H
#define AMOE_LISTING_H

#include <stdio.h>

#include "err.h"

/* Each kind's folder and its preset names, sorted. */
amoe_status amoe_list_presets(FILE *f, amoe_err *e);
/* Every draft and verifier row: its name, what it does, how it batches and
 * its parameters; markdown: as the table README.md and docs/spec.md carry. */
void amoe_list_policies(FILE *f, int markdown);

#endif
