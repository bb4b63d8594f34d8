/* Requests that arrive over time (docs/design.md §18): when each request of
 * an open workload arrives, and its prompt and output lengths. Request i's
 * draws come from (workload.seed, i) alone, so every row, rate and policy
 * sees the same requests; only when they arrive moves with the rate. */
#ifndef AMOE_ARRIVAL_H
#define AMOE_ARRIVAL_H

#include <stdint.h>

#include "err.h"
#include "spec.h"

/* workload.arrival.process, by amoe_arrival_process, NULL-terminated. */
extern const char *const amoe_arrival_names[];
/* workload.arrival.lengths, by amoe_lengths, NULL-terminated. */
extern const char *const amoe_lengths_names[];

typedef struct {
  double arrival_s;  /* from the run's start; nondecreasing in request order */
  int prompt_tokens; /* its prefill (0: none) */
  int output_tokens; /* the tokens it decodes */
} amoe_arrival;

/* The open workload's requests in arrival order (*n of them, the caller
 * frees *out); closed: *out NULL and *n 0. A trace's errors name its
 * file:line:column. A closed loop (concurrency C) knows only its first C
 * arrivals (0); the others are INFINITY until the schedule sends them. */
amoe_status amoe_arrival_plan(const amoe_workload_spec *w, amoe_arrival **out, int *n, amoe_err *e);

/* A closed loop's sends (workload.arrival.process concurrency): C clients
 * each send their next request when their last one ends, so request j >= C
 * arrives when the (j - C)-th request to finish does. */
typedef struct {
  amoe_arrival *plan;
  int n, sent; /* plan[0..n); plan[0..sent) have been sent */
} amoe_closed_loop;
/* (Re)starts the loop over plan[0..n): the first min(C, n) requests sent
 * at 0, the rest not yet (arrival INFINITY). */
void amoe_arrival_loop_start(amoe_closed_loop *lp, amoe_arrival *plan, int n, int concurrency);
/* A request ended at t: the next request is sent then (nothing once every
 * one is sent, or without a loop: plan NULL). */
void amoe_arrival_sent(amoe_closed_loop *lp, double t);

/* One gamma-distributed draw of mean 1 and coefficient of variation cv
 * from u, a stream (Marsaglia and Tsang; cv 1: exponential). Exposed for
 * tests of the distribution. */
double amoe_arrival_gap(uint64_t seed, uint32_t request, double cv);

#endif
