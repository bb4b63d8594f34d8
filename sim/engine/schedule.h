/* The serving scheduler (docs/design.md §19), as bookkeeping over the
 * slots without running a pass: which requests run in the next pass.
 *   admission  first come first served into free slots while their KV fits
 *              beside the running requests' (alone, a request is admitted
 *              regardless): its prompt and output reserved at admission, or
 *              (incremental, vLLM's) its prompt, its KV then growing as its
 *              tokens are written;
 *   preemption (incremental) while a pass's decode tokens do not fit, the
 *              newest running request gives its KV back and waits on a
 *              stack, to return (its prompt and output so far recomputed)
 *              before any new request, the last preempted first;
 *   budget     engine.max_batched_tokens: the decodes first, then whole
 *              prompt chunks first come first served while they fit (with
 *              engine.prefill_apart, SGLang's, a step of prompt chunks
 *              alone whenever one waits, the decodes after).
 * The loop that runs the passes (batch.c) asks it at each pass boundary. */
#ifndef AMOE_SCHEDULE_H
#define AMOE_SCHEDULE_H

#include "run.h"

/* What the scheduler knows of a slot's request. */
typedef struct {
  int req;            /* index into the request list; -1: free */
  int paused;         /* preempted: its KV freed, waiting to recompute it */
  int preempted;      /* times its request was */
  long admit_seq;     /* the order it was last admitted or resumed in (the newest is preempted first) */
  double kv;          /* the KV tokens it holds (reserved, or as written) */
  int prompt;         /* its request's prompt tokens */
  int chunk, chunks;  /* chunked prefill: the next chunk, of chunks (done: chunk == chunks) */
  int take;           /* the chunks it runs this pass (the budget's; else 1) */
} amoe_sched_slot;

typedef struct {
  amoe_sched_slot **slot; /* the B slots, in slot order */
  int B;
  double cap;         /* KV capacity in tokens (0: unbounded) */
  double used;        /* KV the running requests hold */
  int incremental;    /* KV as written, with preemption */
  int apart;          /* engine.prefill_apart under chunked prefill: prompt chunks in steps of their own */
  int running;        /* requests holding KV (admitted, not preempted, not done) */
  int held[AMOE_MAX_BATCH], nheld; /* the preempted slots, the last on top */
  long seq;
} amoe_sched;

/* A scheduler over slot[0..B) (all free), a KV capacity of cap tokens;
 * apart: prompt chunks run in steps of their own (engine.prefill_apart). */
void amoe_sched_init(amoe_sched *s, amoe_sched_slot **slot, int B, double cap, int incremental, int apart);
/* The preempted request on top of the stack, if it may return now: its
 * prompt and the committed[i] tokens it had fit beside the running
 * requests' KV, or nothing runs. Returns its slot, resumed (its KV held,
 * the newest admitted; its prefill to be recomputed), or -1. */
int amoe_sched_resume(amoe_sched *s, const double *committed);
/* Whether a request whose KV is `need` tokens may be admitted now. */
int amoe_sched_fits(const amoe_sched *s, double need);
/* Slot i takes request req (its prompt tokens, `need` tokens of KV). */
void amoe_sched_admit(amoe_sched *s, int i, int req, int prompt, double need);
/* The slots the next step runs, in slot order: those prefilling (pf) and
 * those decoding (act); a preempted one is neither; with apart, no decodes
 * while a prompt chunk waits. */
void amoe_sched_running(const amoe_sched *s, int *act, int *na, int *pf, int *npf);
/* Incremental KV: while the decoding requests' `per` tokens each do not
 * fit, the newest running request (of more than one) is preempted; a
 * prompt it was prefilling is recomputed whole. Returns the preempted. */
int amoe_sched_preempt(amoe_sched *s, int per);
/* The token budget over the prefilling slots pf[0..npf): `left` tokens
 * after the decodes, whole chunks of c tokens (a prompt's last shorter),
 * first come first served (by request); sets each slot's take and returns
 * how many of pf run (kept in order). With nothing decoding (na 0) the
 * first runs one chunk even if it alone is over the budget. */
int amoe_sched_budget(amoe_sched *s, int left, int c, int na, int *pf, int npf);
/* Slot i's request has written kv tokens of KV (incremental). */
void amoe_sched_wrote(amoe_sched *s, int i, double kv);
/* Slot i's request is done: its KV freed, the slot free. */
void amoe_sched_release(amoe_sched *s, int i);

#endif
