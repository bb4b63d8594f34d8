/* Calibrated deployments (docs/design.md §20): a deployment's residual
 * terms fitted to its speculation-off cells alone, by Levenberg-Marquardt
 * over the whole simulator (each evaluation one round of the deployment's
 * off rows), written as a deployment preset (`acceptmoe fit --cells`) or
 * used at once to predict every row of it (`acceptmoe cells --calibrated`).
 *
 * The terms, in the units the fit steps in (u):
 *   hardware.step_s    per-pass host time (sampling, scheduling), u0 in ms
 *   engine.request_s   per request beyond the first (per committed token or
 *                      per pass, as the engine's request_per), u1 in 100 us
 *   engine.efficiency  the share of the modelled device speed reached,
 *                      u2 = ln(efficiency) / 0.5
 * The residuals: ln(predicted / measured) per fit row, and beside them a
 * weak pull of each term to its preset's value, PRIOR per unit (a term
 * one unit from its preset costs as much as a 10% miss on one row), so
 * that a term the rows cannot tell apart stays where the preset put it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cells_internal.h"
#include "spec_load.h"

#define NT 3
#define PRIOR 0.1
#define MAX_ITER 8
static const char *const TERM[NT] = {"hardware.step_s", "engine.request_s", "engine.efficiency"};
static const double LO[NT] = {0, 0, -3.2189}, HI[NT] = {50, 50, 3.2189}; /* 0-50 ms, 0-5 ms, x0.2-x5 */
static const double FD[NT] = {0.25, 0.25, 0.25};                          /* finite-difference steps */

static double term_value(int j, double u) { return j == 0 ? u * 1e-3 : j == 1 ? u * 1e-4 : exp(0.5 * u); }
static double term_unit(int j, double v) { return j == 0 ? v / 1e-3 : j == 1 ? v / 1e-4 : 2 * log(v); }

/* The terms as the overrides a round takes (4 significant digits, the
 * form the preset is written in, so that it predicts what the fit saw). */
static void term_sets(const double *u, char sets[NT][64], double *v) {
  for (int j = 0; j < NT; j++) {
    snprintf(sets[j], sizeof sets[j], "%s=%.4g", TERM[j], term_value(j, u[j]));
    v[j] = strtod(strchr(sets[j], '=') + 1, NULL);
  }
}

/* The preset's own values of the terms for the row's hardware and engine
 * (efficiency 1). */
static void preset_terms(const cell *c, double *u0) {
  amoe_spec *s = calloc(1, sizeof *s);
  amoe_diag d = {0};
  u0[0] = u0[1] = u0[2] = 0;
  if (!s) return;
  amoe_spec_defaults(s);
  char engine[FIELD_MAX];
  snprintf(engine, sizeof engine, "%s", c->f[C_ENGINE]);
  engine[strcspn(engine, ";")] = 0;
  if (amoe_spec_load_preset(s, 1, c->f[C_HW], "fit --cells", &d) == AMOE_OK) u0[0] = term_unit(0, s->hw.step_s);
  if (amoe_spec_set(s, "engine.preset", engine, "fit --cells", &d) == AMOE_OK) u0[1] = term_unit(1, s->engine.request_s);
  for (int j = 0; j < NT; j++) u0[j] = fmin(fmax(u0[j], LO[j]), HI[j]);
  amoe_diag_free(&d);
  free(s);
}

typedef struct {
  cells_ctx *x;
  const unsigned char *pick; /* the fit rows */
  int n;                     /* how many */
  double u0[NT];             /* the preset's */
  double *pred;              /* the last round's, per row of the file */
  int evals;
  char name[160];
} fit_job;

/* The residuals at u into r (n + NT), |r|² into *cost. */
static amoe_status residuals(fit_job *f, const double *u, double *r, double *cost, amoe_err *e) {
  char sets[NT][64], *ptr[NT];
  double v[NT];
  term_sets(u, sets, v);
  for (int j = 0; j < NT; j++) ptr[j] = sets[j];
  if (!f->x->o->quiet) fprintf(stderr, "cells: calibrating %s, round %d\n", f->name, ++f->evals);
  AMOE_TRY(cells_predict(f->x, f->pick, ptr, NT, f->pred, 0, e));
  int k = 0;
  *cost = 0;
  const cell_file *cf = &f->x->cf;
  for (int i = 0; i < cf->n; i++) {
    if (!f->pick[i]) continue;
    if (!isfinite(f->pred[i]) || !(f->pred[i] > 0))
      return amoe_fail(e, AMOE_EINVAL, "%s: row %s did not run with %s %s %s", f->name, cf->rows[i].f[C_ID], sets[0],
                       sets[1], sets[2]);
    r[k] = log(f->pred[i] / cf->rows[i].value);
    *cost += r[k] * r[k];
    k++;
  }
  for (int j = 0; j < NT; j++, k++) {
    r[k] = PRIOR * (u[j] - f->u0[j]);
    *cost += r[k] * r[k];
  }
  return AMOE_OK;
}

/* a x = b for the NT x NT system (Gaussian elimination, partial pivots); 0 if singular. */
static int solve(double a[NT][NT], double *b, double *out) {
  for (int c = 0; c < NT; c++) {
    int p = c;
    for (int i = c + 1; i < NT; i++)
      if (fabs(a[i][c]) > fabs(a[p][c])) p = i;
    if (!(fabs(a[p][c]) > 1e-300)) return 0;
    for (int j = 0; j < NT; j++) {
      const double t = a[c][j];
      a[c][j] = a[p][j], a[p][j] = t;
    }
    const double t = b[c];
    b[c] = b[p], b[p] = t;
    for (int i = c + 1; i < NT; i++) {
      const double m = a[i][c] / a[c][c];
      for (int j = c; j < NT; j++) a[i][j] -= m * a[c][j];
      b[i] -= m * b[c];
    }
  }
  for (int c = NT - 1; c >= 0; c--) {
    double s = b[c];
    for (int j = c + 1; j < NT; j++) s -= a[c][j] * out[j];
    out[c] = s / a[c][c];
  }
  return 1;
}

/* The Jacobian by forward differences at u (r: the residuals there). */
static amoe_status jacobian(fit_job *f, const double *u, const double *r, double *J, int m, double *tmp, amoe_err *e) {
  for (int j = 0; j < NT; j++) {
    double v[NT], cost;
    memcpy(v, u, sizeof v);
    const double h = v[j] + FD[j] <= HI[j] ? FD[j] : -FD[j];
    v[j] += h;
    char sets[NT][64];
    double exact[NT];
    term_sets(v, sets, exact); /* the step as the round rounds it */
    const double step = term_unit(j, exact[j]) - term_unit(j, term_value(j, u[j]));
    AMOE_TRY(residuals(f, v, tmp, &cost, e));
    for (int i = 0; i < m; i++) J[i * NT + j] = (tmp[i] - r[i]) / (step != 0 ? step : h);
  }
  return AMOE_OK;
}

/* Levenberg-Marquardt from the preset's terms; *u the fit, rows' errors
 * before (presets) and after into *before, *after (mean |error|). */
static amoe_status fit_terms(fit_job *f, double *u, double *before, double *after, amoe_err *e) {
  const int m = f->n + NT;
  double *r = calloc((size_t)m, sizeof *r), *rn = calloc((size_t)m, sizeof *rn), *J = calloc((size_t)m * NT, sizeof *J);
  amoe_status st = r && rn && J ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  double cost = 0, lambda = 1e-2;
  memcpy(u, f->u0, NT * sizeof *u);
  if (st == AMOE_OK) st = residuals(f, u, r, &cost, e);
  *before = 0;
  for (int i = 0; i < f->n; i++) *before += fabs(exp(r[i]) - 1) / f->n;
  if (st == AMOE_OK) st = jacobian(f, u, r, J, m, rn, e);
  for (int it = 0, fails = 0; st == AMOE_OK && it < MAX_ITER; it++) {
    double A[NT][NT] = {{0}}, g[NT] = {0}, d[NT] = {0}, un[NT];
    for (int i = 0; i < m; i++)
      for (int a = 0; a < NT; a++) {
        g[a] -= J[i * NT + a] * r[i];
        for (int b = 0; b < NT; b++) A[a][b] += J[i * NT + a] * J[i * NT + b];
      }
    for (int a = 0; a < NT; a++) A[a][a] += lambda * A[a][a] + 1e-12;
    if (!solve(A, g, d)) break;
    double moved = 0;
    for (int j = 0; j < NT; j++) {
      un[j] = fmin(fmax(u[j] + d[j], LO[j]), HI[j]);
      moved = fmax(moved, fabs(un[j] - u[j]));
    }
    if (moved < 0.01) break; /* 10 us, 1 us, 0.5% of efficiency */
    double cn;
    if ((st = residuals(f, un, rn, &cn, e))) break;
    if (cn < cost) { /* taken: Broyden's update of J along the step */
      double dd = 0, Jd;
      for (int j = 0; j < NT; j++) dd += (un[j] - u[j]) * (un[j] - u[j]);
      for (int i = 0; i < m; i++) {
        Jd = 0;
        for (int j = 0; j < NT; j++) Jd += J[i * NT + j] * (un[j] - u[j]);
        for (int j = 0; j < NT; j++) J[i * NT + j] += (rn[i] - r[i] - Jd) * (un[j] - u[j]) / dd;
      }
      const double gain = cost - cn;
      memcpy(u, un, NT * sizeof *u);
      memcpy(r, rn, (size_t)m * sizeof *r);
      cost = cn;
      lambda *= 0.3;
      fails = 0;
      if (gain < 1e-4 * cost) break;
    } else if (++fails == 2) { /* twice refused: the Jacobian afresh */
      lambda *= 4;
      st = jacobian(f, u, r, J, m, rn, e);
    } else {
      lambda *= 4;
    }
  }
  /* the taken terms' round once more, so that f->pred holds their predictions */
  if (st == AMOE_OK) st = residuals(f, u, r, &cost, e);
  *after = 0;
  for (int i = 0; i < f->n; i++) *after += fabs(exp(r[i]) - 1) / f->n;
  free(r), free(rn), free(J);
  return st;
}

/* A deployment's name: its cells' fields, as a preset's file name. */
static void deployment_name(const cell *c, char *out, size_t n) {
  char engine[FIELD_MAX];
  snprintf(engine, sizeof engine, "%s", c->f[C_ENGINE]);
  engine[strcspn(engine, ";")] = 0;
  snprintf(out, n, "%.40s-%.20s-%.8sx-tp%.8s-ep%.8s-%.20s%s%.12s", c->f[C_MODEL], c->f[C_HW], c->f[C_GPUS], c->f[C_TP],
           c->f[C_EP][0] ? c->f[C_EP] : "1", engine, c->f[C_WEIGHTS][0] ? "-" : "", c->f[C_WEIGHTS]);
  if (strchr(c->f[C_ENGINE], ';')) { /* its overrides, by a hash of their text (FNV-1a) */
    unsigned h = 2166136261u;
    for (const char *p = strchr(c->f[C_ENGINE], ';'); *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    const size_t k = strlen(out);
    snprintf(out + k, n - k, "-%08x", h);
  }
  for (char *p = out; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
          *p == '_' || *p == '.'))
      *p = '_';
}

/* The fit rows of row i's deployment: its speculation-off rows that ran
 * with the presets (pred: the presets' predictions). */
static int fit_rows(const cells_ctx *x, int i, const unsigned char *wanted, const double *pred, unsigned char *pick) {
  char ka[1024], kb[1024];
  cells_deployment_key(&x->cf.rows[i], ka, sizeof ka);
  int n = 0;
  for (int j = 0; j < x->cf.n; j++) {
    const cell *c = &x->cf.rows[j];
    cells_deployment_key(c, kb, sizeof kb);
    pick[j] = wanted[j] && c->draft == 0 && isfinite(pred[j]) && !strcmp(ka, kb);
    n += pick[j];
  }
  return n;
}

/* The first row of each deployment among the wanted rows with a fit row:
 * first[i] = 1 there. */
static void deployments(const cells_ctx *x, const unsigned char *wanted, const double *pred, unsigned char *first) {
  char ka[1024], kb[1024];
  for (int i = 0; i < x->cf.n; i++) {
    first[i] = 0;
    const cell *c = &x->cf.rows[i];
    if (!wanted[i] || c->draft != 0 || !isfinite(pred[i])) continue;
    cells_deployment_key(c, ka, sizeof ka);
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) {
      cells_deployment_key(&x->cf.rows[j], kb, sizeof kb);
      seen = first[j] && !strcmp(ka, kb);
    }
    first[i] = !seen;
  }
}

typedef struct {
  int row;       /* its first fit row */
  int n;         /* fit rows */
  double u0[NT], u[NT], value0[NT], value[NT];
  double before, after;
  char name[160];
  char ids[2048]; /* the fit rows' ids, a space before each */
} fitted;

static amoe_status fit_deployment(cells_ctx *x, int row, const unsigned char *wanted, const double *pred0,
                                  unsigned char *pick, double *pred, fitted *out, amoe_err *e) {
  memset(out, 0, sizeof *out);
  out->row = row;
  out->n = fit_rows(x, row, wanted, pred0, pick);
  for (int i = 0, k = 0; i < x->cf.n; i++)
    if (pick[i]) k += snprintf(out->ids + k, sizeof out->ids - (size_t)k, " %.60s", x->cf.rows[i].f[C_ID]);
  deployment_name(&x->cf.rows[row], out->name, sizeof out->name);
  fit_job f = {x, pick, out->n, {0}, pred, 0, {0}};
  preset_terms(&x->cf.rows[row], f.u0);
  memcpy(out->u0, f.u0, sizeof f.u0);
  snprintf(f.name, sizeof f.name, "%s", out->name);
  AMOE_TRY(fit_terms(&f, out->u, &out->before, &out->after, e));
  char sets[NT][64];
  term_sets(out->u0, sets, out->value0);
  term_sets(out->u, sets, out->value);
  return AMOE_OK;
}

/* The deployment preset: the row's sections as `cells` runs them, its
 * overrides in their sections, the fitted terms. */
static amoe_status write_preset(const cells_ctx *x, const fitted *d, const char *dir, FILE *msg, amoe_err *e) {
  const cell *c = &x->cf.rows[d->row];
  char path[AMOE_PATH_MAX + 200], engine[FIELD_MAX];
  snprintf(path, sizeof path, "%s/%s.yaml", dir, d->name);
  snprintf(engine, sizeof engine, "%s", c->f[C_ENGINE]);
  char *ov = strchr(engine, ';');
  if (ov) *ov++ = 0;
  const char *fmt = cells_weight_format(c->f[C_WEIGHTS]);
  /* the overrides by section (model, hardware, parallel, engine), as flow-mapping entries */
  static const char *const SECT[] = {"model", "hardware", "parallel", "engine"};
  char extra[4][1024] = {"", "", "", ""};
  for (char *save, *tok = ov ? strtok_r(ov, ";", &save) : NULL; tok; tok = strtok_r(NULL, ";", &save)) {
    char *eq = strchr(tok, '='), *dot = strchr(tok, '.');
    int s = -1;
    for (int k = 0; k < 4 && dot && eq && dot < eq; k++)
      if ((size_t)(dot - tok) == strlen(SECT[k]) && !strncmp(tok, SECT[k], (size_t)(dot - tok))) s = k;
    const char *deeper = dot ? strchr(dot + 1, '.') : NULL;
    if (s < 0 || (deeper && deeper < eq))
      return amoe_fail(e, AMOE_EINVAL, "%s: the engine's override '%s' is not a deployment's SECTION.KEY=VALUE", d->name,
                       tok);
    const size_t n = strlen(extra[s]);
    snprintf(extra[s] + n, sizeof extra[s] - n, ", %.*s: %s", (int)(eq - dot - 1), dot + 1, eq + 1);
  }
  const int gpus = atoi(c->f[C_GPUS]), tp = atoi(c->f[C_TP]), ep = c->f[C_EP][0] ? atoi(c->f[C_EP]) : 1;
  const char *link = cells_default_link(c->f[C_HW]);
  amoe_afile a;
  AMOE_TRY(amoe_afile_open(&a, path, e));
  FILE *f = a.f;
  fprintf(f, "# %s: %s on %d %s (attention TP %d, expert EP %d), %s%s%s.\n", d->name, c->f[C_MODEL], gpus, c->f[C_HW], tp,
          ep, engine, fmt ? ", " : "", fmt ? c->f[C_WEIGHTS] : "");
  fprintf(f, "# Calibrated by `acceptmoe fit --cells` (docs/design.md §20) to %d speculation-off row%s\n# of %s:", d->n,
          d->n == 1 ? "" : "s", x->o->path);
  int col = 0;
  for (const char *p = d->ids; *p;) { /* the ids, lines of at most 76 */
    const int len = (int)strcspn(p + 1, " ") + 1;
    if (col + len > 76) fputs("\n#", f), col = 0;
    fprintf(f, "%.*s", len, p);
    col += len;
    p += len;
  }
  fprintf(f, "\n# Mean |error| on them: %.1f%% with the presets, %.1f%% calibrated (fitted, not held out).\n",
          100 * d->before, 100 * d->after);
  fprintf(f, "# The terms, each from its preset's value: per-pass host time %.4g -> %.4g s, per-request\n"
             "# scheduler cost %.4g -> %.4g s, device efficiency %.4g -> %.4g.\n",
          d->value0[0], d->value[0], d->value0[1], d->value[1], d->value0[2], d->value[2]);
  fprintf(f, "model: {preset: %s%s%s%s%s}\n", c->f[C_MODEL], fmt ? ", weight_format: " : "", fmt ? fmt : "",
          fmt ? ", expert_bytes: 0" : "", extra[0]);
  fprintf(f, "hardware: {preset: %s, gpus: %d%s%s, step_s: %.4g%s}\n", c->f[C_HW], gpus,
          link && gpus > 1 ? ", interconnect: " : "", link && gpus > 1 ? link : "", d->value[0], extra[1]);
  char dp[32] = "";
  if (tp > 0 && gpus / tp > 1) snprintf(dp, sizeof dp, ", attention_dp: %d", gpus / tp);
  fprintf(f, "parallel: {attention_tp: %d, moe_ep: %d, moe_tp: %d%s%s}\n", tp, ep, gpus / ep, dp, extra[2]);
  fprintf(f, "engine: {preset: %s%s, request_s: %.4g, efficiency: %.4g}\n", engine, extra[3], d->value[1], d->value[2]);
  AMOE_TRY(amoe_afile_commit(&a, e));
  if (msg) fprintf(msg, "wrote %s (a spec names it as `deployment: %s`, its first key)\n", path, d->name);
  return AMOE_OK;
}

static void terms_table_head(FILE *out) {
  fprintf(out, "| deployment | fit rows | step_s (s) | request_s (s) | efficiency | fit rows' MAPE, presets | calibrated |\n"
               "|---|---|---|---|---|---|---|\n");
}
static void terms_table_row(FILE *out, const fitted *d) {
  fprintf(out, "| %s | %d | %.4g -> %.4g | %.4g -> %.4g | %.4g -> %.4g | %.1f%% | %.1f%% |\n", d->name, d->n, d->value0[0],
          d->value[0], d->value0[1], d->value[1], d->value0[2], d->value[2], 100 * d->before, 100 * d->after);
}

amoe_status amoe_cells_fit(const amoe_cells_opts *o, const char *out_dir, amoe_err *e) {
  cells_ctx x;
  AMOE_TRY(cells_open(&x, o, e));
  const int n = x.cf.n ? x.cf.n : 1;
  unsigned char *wanted = calloc((size_t)n, 1), *pick = calloc((size_t)n, 1), *first = calloc((size_t)n, 1);
  double *pred0 = calloc((size_t)n, sizeof *pred0), *pred = calloc((size_t)n, sizeof *pred);
  amoe_status st = wanted && pick && first && pred0 && pred ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  /* the speculation-off rows alone: nothing of the others is read */
  for (int i = 0; i < x.cf.n; i++) wanted[i] = cells_wanted(o->only, x.cf.rows[i].f[C_ID]) && x.cf.rows[i].draft == 0;
  if (st == AMOE_OK) st = cells_predict(&x, wanted, NULL, 0, pred0, 1, e);
  if (st == AMOE_OK) {
    deployments(&x, wanted, pred0, first);
    int any = 0;
    for (int i = 0; i < x.cf.n; i++) any |= first[i];
    if (!any) st = amoe_fail(e, AMOE_EINVAL, "%s: no speculation-off row runs%s (see `acceptmoe cells` for why)", o->path,
                             o->only ? " among --only" : "");
  }
  if (st == AMOE_OK) st = amoe_mkdirs(out_dir, e);
  int head = 0;
  for (int i = 0; i < x.cf.n && st == AMOE_OK; i++) {
    if (!first[i]) continue;
    fitted d;
    if ((st = fit_deployment(&x, i, wanted, pred0, pick, pred, &d, e))) break;
    if ((st = write_preset(&x, &d, out_dir, stderr, e))) break;
    if (!head++) terms_table_head(o->out);
    terms_table_row(o->out, &d);
  }
  free(wanted), free(pick), free(first), free(pred0), free(pred);
  cells_close(&x);
  return st;
}

amoe_status cells_calibrated(cells_ctx *x, FILE *out, amoe_err *e) {
  cell_file *cf = &x->cf;
  const int n = cf->n ? cf->n : 1;
  unsigned char *wanted = calloc((size_t)n, 1), *pick = calloc((size_t)n, 1), *first = calloc((size_t)n, 1);
  double *pred0 = calloc((size_t)n, sizeof *pred0), *pred = calloc((size_t)n, sizeof *pred);
  fitted *fits = calloc((size_t)n, sizeof *fits);
  amoe_status st = wanted && pick && first && pred0 && pred && fits ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  int nfit = 0;
  for (int i = 0; i < cf->n && st == AMOE_OK; i++) {
    wanted[i] = cf->rows[i].ok;
    pred0[i] = cf->rows[i].ok ? cf->rows[i].predicted : NAN;
    cf->rows[i].calibrated = NAN;
  }
  if (st == AMOE_OK) deployments(x, wanted, pred0, first);
  for (int i = 0; i < cf->n && st == AMOE_OK; i++) {
    if (!first[i]) continue;
    fitted *d = &fits[nfit++];
    if ((st = fit_deployment(x, i, wanted, pred0, pick, pred, d, e))) break;
    for (int j = 0; j < cf->n; j++)
      if (pick[j]) cf->rows[j].calibrated = pred[j];
    /* the deployment's other rows (speculation on) with its terms */
    char ka[1024], kb[1024], sets[NT][64], *ptr[NT];
    double v[NT];
    cells_deployment_key(&cf->rows[i], ka, sizeof ka);
    int more = 0;
    for (int j = 0; j < cf->n; j++) {
      cells_deployment_key(&cf->rows[j], kb, sizeof kb);
      pick[j] = wanted[j] && !pick[j] && !strcmp(ka, kb);
      more += pick[j];
    }
    term_sets(d->u, sets, v);
    for (int k = 0; k < NT; k++) ptr[k] = sets[k];
    if (more && (st = cells_predict(x, pick, ptr, NT, pred, 0, e))) break;
    for (int j = 0; j < cf->n; j++)
      if (pick[j]) cf->rows[j].calibrated = pred[j];
  }
  if (st == AMOE_OK && nfit) {
    fprintf(out, "\nCalibrated deployments (each fitted to its speculation-off rows alone; `acceptmoe fit --cells`):\n\n");
    terms_table_head(out);
    for (int k = 0; k < nfit; k++) terms_table_row(out, &fits[k]);
    fprintf(out, "\n| id | metric | measured | presets | calibrated | error, presets | calibrated | fitted |\n"
                 "|---|---|---|---|---|---|---|---|\n");
    double s0 = 0, s1 = 0;
    int nn = 0;
    for (int i = 0; i < cf->n; i++) {
      const cell *c = &cf->rows[i];
      if (!isfinite(c->calibrated)) continue;
      fprintf(out, "| %s | %s | %.4g | %.4g | %.4g | %+.1f%% | %+.1f%% | %s |\n", c->f[C_ID], c->f[C_METRIC], c->value,
              c->predicted, c->calibrated, 100 * (c->predicted - c->value) / c->value,
              100 * (c->calibrated - c->value) / c->value, c->draft ? "no" : "yes");
      if (c->draft) s0 += fabs(c->predicted - c->value) / c->value, s1 += fabs(c->calibrated - c->value) / c->value, nn++;
    }
    if (nn)
      fprintf(out, "\nRows with speculation on (never fitted): MAPE %.1f%% with the presets, %.1f%% calibrated, over %d rows\n",
              100 * s0 / nn, 100 * s1 / nn, nn);
    double r0 = 0, r1 = 0;
    int rn = 0;
    for (int i = 0; i < cf->n; i++) {
      const int j = cells_partner(cf, i);
      if (j < 0 || !isfinite(cf->rows[i].calibrated) || !isfinite(cf->rows[j].calibrated)) continue;
      const cell *on = &cf->rows[i], *off = &cf->rows[j];
      const double m = on->value / off->value, p0 = on->predicted / off->predicted, p1 = on->calibrated / off->calibrated;
      if (!rn) fprintf(out, "\nSpeculation on over off, both ways:\n\n| on | off | metric | measured | presets | calibrated "
                            "| error, presets | calibrated |\n|---|---|---|---|---|---|---|---|\n");
      fprintf(out, "| %s | %s | %s | %.3f | %.3f | %.3f | %+.1f%% | %+.1f%% |\n", on->f[C_ID], off->f[C_ID],
              on->f[C_METRIC], m, p0, p1, 100 * (p0 - m) / m, 100 * (p1 - m) / m);
      r0 += fabs(p0 - m) / m, r1 += fabs(p1 - m) / m, rn++;
    }
    if (rn) fprintf(out, "\nRatio MAPE: %.1f%% with the presets, %.1f%% calibrated, over %d pairs\n", 100 * r0 / rn,
                    100 * r1 / rn, rn);
  } else if (st == AMOE_OK) {
    fprintf(out, "\nNo deployment has a speculation-off row that ran: nothing to calibrate.\n");
  }
  free(wanted), free(pick), free(first), free(pred0), free(pred), free(fits);
  return st;
}
