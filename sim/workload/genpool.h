/* Synthetic requests generated on worker threads ahead of the consumer.
 * A request depends only on (seed, request index) (gen.h), so the blocks
 * and their order are the same for any thread count; memory holds at most
 * 2·threads requests in flight. */
#ifndef AMOE_GENPOOL_H
#define AMOE_GENPOOL_H

#include "block.h"
#include "err.h"
#include "gen.h"

typedef struct amoe_genpool amoe_genpool;

/* p->accept_scale > 0 skips each worker's calibration (pass the value one
 * calibrated generator found). */
amoe_status amoe_genpool_open(amoe_genpool **pool, const amoe_gen_params *p, int threads, amoe_err *e);
/* The next block, requests in order: AMOE_OK, or the error. Never ends
 * (no AMOE_END): the consumer decides how many blocks it wants. */
amoe_status amoe_genpool_next(amoe_genpool *pool, amoe_block *b, amoe_err *e);
amoe_status amoe_genpool_rewind(amoe_genpool *pool, amoe_err *e);
void amoe_genpool_close(amoe_genpool *pool);
double amoe_genpool_accept_scale(const amoe_genpool *pool);

#endif
