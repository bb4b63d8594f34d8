#include "genpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  amoe_block *blocks;
  int n, cap;
  uint32_t request;
  int state; /* 0 free, 1 being generated, 2 ready */
  amoe_status st;
  amoe_err err;
} slot;

typedef struct amoe_genpool amoe_genpool_t;
typedef struct {
  amoe_genpool_t *pool;
  int id;
  amoe_block work; /* where this worker generates, then stashes into its slot */
} worker_arg;

struct amoe_genpool {
  amoe_gen_params p;
  worker_arg *args;
  int threads, nslots, running;
  pthread_t *th;
  amoe_gen **gens;
  slot *slots;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t next_req, cur_req;
  int cur_block, stop;
};

/* Generates request r into s (no lock held): each block in the worker's own
 * block, which stays in its caches, then stashed into the slot around them
 * (the slot's blocks are read once, by the consumer; written through the
 * caches they stalled the worker). */
static void fill(amoe_genpool *P, amoe_gen *g, amoe_block *work, slot *s, uint32_t r) {
  amoe_gen_begin_request(g, r);
  s->n = 0;
  s->st = AMOE_OK;
  for (;;) {
    if (s->n == s->cap) {
      int nc = s->cap ? 2 * s->cap : 16;
      amoe_block *nb = realloc(s->blocks, (size_t)nc * sizeof *nb);
      if (!nb) {
        s->st = amoe_fail(&s->err, AMOE_ENOMEM, "out of memory generating request %u", r);
        return;
      }
      for (int i = s->cap; i < nc; i++) amoe_block_init(&nb[i], P->p.layers, P->p.experts, P->p.m);
      s->blocks = nb;
      s->cap = nc;
    }
    const amoe_status rc = amoe_gen_next(g, work, &s->err);
    if (rc == AMOE_END) return;
    if ((s->st = rc) != AMOE_OK || (s->st = amoe_block_stash(&s->blocks[s->n], work, &s->err)) != AMOE_OK) return;
    s->n++;
  }
}

static void *worker(void *arg) {
  worker_arg *a = arg;
  amoe_genpool *P = a->pool;
  pthread_mutex_lock(&P->mu);
  while (!P->stop) {
    uint32_t r = P->next_req;
    slot *s = &P->slots[r % (uint32_t)P->nslots];
    if (s->state != 0) { /* the consumer has not taken that slot's request yet */
      pthread_cond_wait(&P->cv, &P->mu);
      continue;
    }
    P->next_req++;
    s->state = 1;
    s->request = r;
    pthread_mutex_unlock(&P->mu);
    fill(P, P->gens[a->id], &a->work, s, r);
    pthread_mutex_lock(&P->mu);
    s->state = 2;
    pthread_cond_broadcast(&P->cv);
  }
  pthread_mutex_unlock(&P->mu);
  return NULL;
}

static amoe_status start(amoe_genpool *P, amoe_err *e) {
  P->stop = 0;
  for (int i = 0; i < P->threads; i++) {
    P->args[i].pool = P;
    P->args[i].id = i;
    if (pthread_create(&P->th[i], NULL, worker, &P->args[i]) != 0)
      return amoe_fail(e, AMOE_EIO, "cannot start generator thread %d", i);
    P->running++;
  }
  return AMOE_OK;
}

static void stop_all(amoe_genpool *P) {
  pthread_mutex_lock(&P->mu);
  P->stop = 1;
  pthread_cond_broadcast(&P->cv);
  pthread_mutex_unlock(&P->mu);
  for (int i = 0; i < P->running; i++) pthread_join(P->th[i], NULL);
  P->running = 0;
}

amoe_status amoe_genpool_open(amoe_genpool **out, const amoe_gen_params *p, int threads, amoe_err *e) {
  *out = NULL;
  if (threads < 1 || threads > 256) return amoe_fail(e, AMOE_EINVAL, "generator threads must be in 1..256");
  amoe_genpool *P = calloc(1, sizeof *P);
  if (!P) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  P->p = *p;
  P->threads = threads;
  P->nslots = 2 * threads;
  P->th = calloc((size_t)threads, sizeof *P->th);
  P->args = calloc((size_t)threads, sizeof *P->args);
  P->gens = calloc((size_t)threads, sizeof *P->gens);
  P->slots = calloc((size_t)P->nslots, sizeof *P->slots);
  pthread_mutex_init(&P->mu, NULL);
  pthread_cond_init(&P->cv, NULL);
  amoe_status st = P->th && P->args && P->gens && P->slots ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  /* the first generator calibrates; the others take its acceptance scale */
  if (!st) st = amoe_gen_open(&P->gens[0], p, e);
  if (!st && !p->replay) P->p.accept_scale = amoe_gen_accept_scale(P->gens[0]);
  for (int i = 1; i < threads && !st; i++) st = amoe_gen_open(&P->gens[i], &P->p, e);
  if (P->args)
    for (int i = 0; i < threads; i++) amoe_block_init(&P->args[i].work, p->layers, p->experts, p->m);
  if (!st) st = start(P, e);
  if (st) {
    amoe_genpool_close(P);
    return st;
  }
  *out = P;
  return AMOE_OK;
}

amoe_status amoe_genpool_next(amoe_genpool *P, amoe_block *b, amoe_err *e) {
  pthread_mutex_lock(&P->mu);
  slot *s = &P->slots[P->cur_req % (uint32_t)P->nslots];
  while (!(s->state == 2 && s->request == P->cur_req)) pthread_cond_wait(&P->cv, &P->mu);
  pthread_mutex_unlock(&P->mu);
  if (s->st) { /* the worker's error, as if generated here */
    if (e) *e = s->err;
    return s->st;
  }
  AMOE_TRY(amoe_block_copy(b, &s->blocks[P->cur_block], e));
  if (++P->cur_block == s->n) { /* request done: hand the slot back */
    pthread_mutex_lock(&P->mu);
    s->state = 0;
    P->cur_req++;
    P->cur_block = 0;
    pthread_cond_broadcast(&P->cv);
    pthread_mutex_unlock(&P->mu);
  }
  return AMOE_OK;
}

amoe_status amoe_genpool_rewind(amoe_genpool *P, amoe_err *e) {
  stop_all(P);
  for (int i = 0; i < P->nslots; i++) P->slots[i].state = 0;
  P->next_req = P->cur_req = 0;
  P->cur_block = 0;
  return start(P, e);
}

void amoe_genpool_close(amoe_genpool *P) {
  if (!P) return;
  stop_all(P);
  if (P->gens)
    for (int i = 0; i < P->threads; i++) amoe_gen_close(P->gens[i]);
  if (P->slots)
    for (int i = 0; i < P->nslots; i++) {
      for (int j = 0; j < P->slots[i].cap; j++) amoe_block_free(&P->slots[i].blocks[j]);
      free(P->slots[i].blocks);
    }
  pthread_mutex_destroy(&P->mu);
  pthread_cond_destroy(&P->cv);
  free(P->th);
  if (P->args)
    for (int i = 0; i < P->threads; i++) amoe_block_free(&P->args[i].work);
  free(P->args);
  free(P->gens);
  free(P->slots);
  free(P);
}

double amoe_genpool_accept_scale(const amoe_genpool *P) { return amoe_gen_accept_scale(P->gens[0]); }
