#include "arrival.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "lines.h"
#include "rng.h"

const char *const amoe_arrival_names[] = {"closed", "poisson", "gamma", "trace", "constant", "concurrency", NULL};
const char *const amoe_lengths_names[] = {"uniform", "normal", NULL};

/* Gamma(shape a, scale 1) from r: Marsaglia and Tsang's method, with
 * a < 1 boosted by U^(1/a). */
static double gamma_draw(amoe_rng *r, double a) {
  if (a < 1) {
    const double u = amoe_rng_unif(r);
    return gamma_draw(r, a + 1) * pow(u > 0 ? u : 0x1.0p-53, 1 / a);
  }
  const double d = a - 1.0 / 3, c = 1 / sqrt(9 * d);
  for (;;) {
    double x, v;
    do {
      x = amoe_rng_normal(r);
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = amoe_rng_unif(r);
    if (u < 1 - 0.0331 * x * x * x * x || log(u > 0 ? u : 0x1.0p-53) < 0.5 * x * x + d * (1 - v + log(v))) return d * v;
  }
}

/* The gap before request i, in units of the mean gap: a stream of its own
 * per request, so a request's gap does not depend on the others'. */
double amoe_arrival_gap(uint64_t seed, uint32_t request, double cv) {
  amoe_rng r;
  amoe_rng_seed(&r, seed ^ 0x617272697661ULL, request, 0);
  if (cv == 1) { /* exponential: one uniform */
    const double u = amoe_rng_unif(&r);
    return -log1p(-u);
  }
  const double a = 1 / (cv * cv);
  return gamma_draw(&r, a) / a;
}

/* A length uniform in [n(1 - r), n(1 + r)], at least min, from request i's
 * own stream (`which` tells the prompt's from the output's). */
static int length_of(uint64_t seed, uint32_t request, int which, int n, double ratio, int min) {
  if (!(ratio > 0)) return n;
  const double lo = floor(n * (1 - ratio)), hi = floor(n * (1 + ratio));
  const double u = amoe_rng_coin(seed ^ 0x6c656e677468ULL, request, (uint64_t)which);
  const int v = (int)(lo + floor(u * (hi - lo + 1)));
  return v < min ? min : v;
}

/* A length normal of mean n and deviation sd, rounded and clipped to
 * [lo, hi] (hi 0: no upper clip), at least min. */
static int normal_length_of(uint64_t seed, uint32_t request, int which, int n, double sd, int lo, int hi, int min) {
  amoe_rng r;
  amoe_rng_seed(&r, seed ^ 0x6c656e677468ULL, request, 2 + (uint64_t)which);
  double v = floor(n + sd * amoe_rng_normal(&r) + 0.5);
  if (v < lo) v = lo;
  if (hi > 0 && v > hi) v = hi;
  return v < min ? min : (int)v;
}

static int request_length(const amoe_workload_spec *w, uint32_t i, int output) {
  if (w->lengths == AMOE_LENGTHS_NORMAL)
    return output ? normal_length_of(w->seed, i, 1, w->tokens_per_request, w->output_sd, w->output_min, w->output_max, 1)
                  : normal_length_of(w->seed, i, 0, w->prompt_tokens, w->prompt_sd, w->prompt_min, w->prompt_max, 0);
  return output ? length_of(w->seed, i, 1, w->tokens_per_request, w->range_ratio, 1)
                : length_of(w->seed, i, 0, w->prompt_tokens, w->range_ratio, 0);
}

/* ---- the trace: CSV, a header naming the three columns, a row per request ---- */

static const char *const TRACE_COLS[] = {"arrival_s", "prompt_tokens", "output_tokens"};

/* The next comma-separated field of line at *p (spaces around it dropped)
 * into buf; its column (1-based) in *col. 0 at the end of the line. */
static int field(const char *line, const char **p, char *buf, size_t size, int *col) {
  if (!**p) return 0;
  while (**p == ' ' || **p == '\t') (*p)++;
  *col = (int)(*p - line) + 1;
  size_t n = 0;
  while (**p && **p != ',') {
    if (n + 1 < size) buf[n++] = **p;
    (*p)++;
  }
  while (n && (buf[n - 1] == ' ' || buf[n - 1] == '\t' || buf[n - 1] == '\r')) n--;
  buf[n] = 0;
  if (**p == ',') (*p)++;
  return 1;
}

static amoe_status read_trace(const char *path, amoe_arrival **out, int *n, amoe_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) return amoe_fail(e, AMOE_EIO, "workload.arrival.path: %s: cannot read: %s", path, strerror(errno));
  char line[512], buf[128];
  int header = 0;
  amoe_arrival *v = NULL;
  size_t cap = 0;
  amoe_status st = AMOE_OK;
  double prev = 0;
  amoe_lines lr = {f, path, 0, 0, 0};
  while (st == AMOE_OK && (st = amoe_lines_next(&lr, line, sizeof line, e)) == AMOE_OK) {
    const int lineno = lr.line;
    const long at = lr.at;
    const char *p = line;
    int col = 1, k = 0;
    if (!header) { /* the header: the three columns, in this order */
      for (; k < 3 && field(line, &p, buf, sizeof buf, &col); k++)
        if (strcmp(buf, TRACE_COLS[k])) break;
      if (k < 3 || *p)
        st = amoe_fail(e, AMOE_EINVAL, "%s:%d:%d (byte %ld): the header must be arrival_s,prompt_tokens,output_tokens",
                       path, lineno, k < 3 ? col : (int)(p - line) + 1, at + (k < 3 ? col - 1 : (long)(p - line)));
      header = 1;
      continue;
    }
    double x[3];
    for (; k < 3 && st == AMOE_OK; k++) {
      if (!field(line, &p, buf, sizeof buf, &col)) {
        st = amoe_fail(e, AMOE_EINVAL, "%s:%d:%d (byte %ld): %s is missing", path, lineno, (int)strlen(line) + 1,
                       at + (long)strlen(line), TRACE_COLS[k]);
        break;
      }
      char *end;
      errno = 0;
      x[k] = strtod(buf, &end);
      const int whole = k == 0 || (x[k] == floor(x[k]) && x[k] <= 1e9);
      const double lo = k == 2 ? 1 : 0;
      if (errno || *end || !buf[0] || !isfinite(x[k]) || !whole || x[k] < lo)
        st = amoe_fail(e, AMOE_EINVAL, "%s:%d:%d (byte %ld): %s must be %s, not '%s'", path, lineno, col,
                       at + col - 1, TRACE_COLS[k],
                       k == 0 ? "a time in seconds, at least 0" : k == 1 ? "a whole number, at least 0"
                                                                       : "a whole number, at least 1", buf);
    }
    if (st == AMOE_OK && *p)
      st = amoe_fail(e, AMOE_EINVAL, "%s:%d:%d (byte %ld): more than three columns", path, lineno, (int)(p - line) + 1,
                     at + (long)(p - line));
    if (st == AMOE_OK && x[0] < prev)
      st = amoe_fail(e, AMOE_EINVAL, "%s:%d:1 (byte %ld): arrival_s %g comes before the previous row's %g (rows are in "
                     "arrival order)", path, lineno, at, x[0], prev);
    if (st != AMOE_OK) break;
    prev = x[0];
    amoe_arrival *nv = amoe_grow(v, &cap, (size_t)*n + 1, sizeof *v, 64);
    if (!nv) {
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
      break;
    }
    v = nv;
    v[(*n)++] = (amoe_arrival){x[0], (int)x[1], (int)x[2]};
  }
  if (st == AMOE_END) st = AMOE_OK;
  if (st == AMOE_OK && *n == 0) st = amoe_fail(e, AMOE_EINVAL, "%s: no requests (a header and a row per request)", path);
  fclose(f);
  if (st != AMOE_OK) {
    free(v);
    *n = 0;
    return st;
  }
  *out = v;
  return AMOE_OK;
}

amoe_status amoe_arrival_plan(const amoe_workload_spec *w, amoe_arrival **out, int *n, amoe_err *e) {
  *out = NULL;
  *n = 0;
  switch (w->arrival) {
  case AMOE_ARRIVAL_CLOSED: return AMOE_OK;
  case AMOE_ARRIVAL_TRACE: return read_trace(w->arrival_path, out, n, e);
  default: break;
  }
  const int loop = w->arrival == AMOE_ARRIVAL_CONCURRENCY;
  if (loop && w->concurrency < 1)
    return amoe_fail(e, AMOE_EINVAL, "workload.arrival.concurrency: %d, must be at least 1", w->concurrency);
  if (!loop && !(w->rate > 0)) return amoe_fail(e, AMOE_EINVAL, "workload.arrival.rate: %g, must be above 0", w->rate);
  if (w->requests < 1) return amoe_fail(e, AMOE_EINVAL, "workload.requests: %d, must be at least 1", w->requests);
  amoe_arrival *v = malloc((size_t)w->requests * sizeof *v);
  if (!v) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  const double cv = w->arrival == AMOE_ARRIVAL_POISSON ? 1 : w->cv;
  double t = 0;
  for (int i = 0; i < w->requests; i++) {
    if (loop) /* each client's first request at once; the rest when a request ends (amoe_arrival_sent) */
      t = i < w->concurrency ? 0 : INFINITY;
    else if (w->arrival == AMOE_ARRIVAL_CONSTANT)
      t = i / w->rate;
    else
      t += amoe_arrival_gap(w->seed, (uint32_t)i, cv) / w->rate; /* (the first arrives one gap in) */
    v[i] = (amoe_arrival){t, request_length(w, (uint32_t)i, 0), request_length(w, (uint32_t)i, 1)};
  }
  *out = v;
  *n = w->requests;
  return AMOE_OK;
}

void amoe_arrival_loop_start(amoe_closed_loop *lp, amoe_arrival *plan, int n, int concurrency) {
  lp->plan = plan;
  lp->n = n;
  lp->sent = concurrency < n ? concurrency : n;
  for (int i = 0; i < n; i++) plan[i].arrival_s = i < lp->sent ? 0 : INFINITY;
}

void amoe_arrival_sent(amoe_closed_loop *lp, double t) {
  if (lp->plan && lp->sent < lp->n) lp->plan[lp->sent++].arrival_s = t;
}
