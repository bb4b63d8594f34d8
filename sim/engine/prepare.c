#include "prepare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offline.h"
#include "policy.h"
#include "profile.h"
#include "source.h"

amoe_workload_spec amoe_calibration_workload(const amoe_spec *s) {
  amoe_workload_spec w = s->workload;
  w.seed = s->commitment.seed;
  w.blocks = s->commitment.blocks;
  w.route_hold = 0; /* every block routed: its blocks stand for independent requests (a step table's batch) */
  return w;
}

amoe_status amoe_commitment_estimate(const amoe_spec *s, int unions, amoe_offline *o, char *how, size_t hn,
                                     amoe_err *e) {
  memset(o, 0, sizeof *o);
  if (s->commitment.mode == AMOE_COMMIT_CALIBRATE || unions) {
    const amoe_workload_spec w = amoe_calibration_workload(s);
    amoe_source *src;
    AMOE_TRY(amoe_source_open(&src, &w, &s->model, e));
    const amoe_status st = amoe_offline_estimate(src, s->workload.nodes, s->model.top_k, o, e);
    amoe_source_close(src);
    AMOE_TRY(st);
    if (w.source == AMOE_SRC_SYNTHETIC)
      snprintf(how, hn, "calibrated on %d blocks of the workload with seed %llu", w.blocks, (unsigned long long)w.seed);
    else /* a file has no other seed: say so rather than pretend */
      snprintf(how, hn, "calibrated on the first %d blocks of the evaluation trace itself (a file source has no "
               "other seed; give commitment.table or commitment.file for an independent estimate)", w.blocks);
  }
  if (s->commitment.mode == AMOE_COMMIT_TABLE || s->commitment.mode == AMOE_COMMIT_FILE) {
    memcpy(o->p, s->commitment.table, sizeof(double) * (size_t)s->commitment.table_n);
    o->n = s->commitment.table_n;
    memcpy(o->mass, s->commitment.mass, sizeof(double) * (size_t)s->commitment.mass_n);
    if (s->commitment.mode == AMOE_COMMIT_TABLE) snprintf(how, hn, "table in the spec");
    else snprintf(how, hn, "file %s", s->commitment.file);
  }
  return AMOE_OK;
}

/* p̂ (and the union table) where a row reads them; m̄ beside p̂ where a
 * verifier weighs nodes by their draft mass. */
static amoe_status offline_tables(const amoe_spec *s, amoe_run_prep *p, amoe_err *e) {
  int unions = 0;
  for (int i = 0; i < s->npolicies; i++) {
    p->reads_commitment |= amoe_verifier_table[s->policies[i].verifier].reads_commitment;
    unions |= amoe_draft_table[s->policies[i].draft].reads_union_table;
  }
  if (!p->reads_commitment && !unions) {
    snprintf(p->how, sizeof p->how, "not needed by these policies");
    return AMOE_OK;
  }
  AMOE_TRY(amoe_commitment_estimate(s, unions, &p->offline, p->how, sizeof p->how, e));
  p->self_calibrated = strstr(p->how, "trace itself") != NULL;
  for (int i = 0; i < s->npolicies; i++) {
    const amoe_verifier_def *v = &amoe_verifier_table[s->policies[i].verifier];
    for (int d = 1; v->reads_mass && d < p->offline.n; d++)
      if (p->offline.p[d] > 0 && !(p->offline.mass[d] > 0))
        return amoe_fail(e, AMOE_EINVAL,
                         "verifier %s needs the draft mass per depth (m_d) beside p_d, and the commitment %s has "
                         "none at depth %d: calibrate it (commitment: {calibrate: ...}), or give commitment.mass "
                         "beside commitment.table (acceptmoe calibrate writes both)",
                         v->name, p->how, d);
  }
  return AMOE_OK;
}

/* The calibration workload's natural token counts per (layer, expert)
 * into a new *load. */
static amoe_status calibration_load(const amoe_spec *s, double **load, amoe_err *e) {
  double *l = malloc((size_t)s->model.moe_layers * s->model.experts * sizeof *l);
  if (!l) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  const amoe_workload_spec w = amoe_calibration_workload(s);
  amoe_source *cal = NULL;
  amoe_status st = amoe_source_open(&cal, &w, &s->model, e);
  if (!st)
    st = amoe_expert_load_estimate(cal, s->workload.nodes, s->model.top_k, s->model.moe_layers, s->model.experts, l, e);
  amoe_source_close(cal);
  if (st) free(l);
  else *load = l;
  return st;
}

/* A balanced placement's long-run load per (layer, expert), from the
 * calibration workload (*load NULL when the layout needs none). */
static amoe_status placement_load(const amoe_spec *s, double **load, amoe_err *e) {
  *load = NULL;
  if (!amoe_parallel_has_groups(&s->parallel, s->hw.gpus) || s->parallel.placement != AMOE_PLACE_BALANCED)
    return AMOE_OK;
  return calibration_load(s, load, e);
}

/* The layers' popularity a route predictor reads (§18), from the same
 * workload (*pop NULL when no row reads it). */
static amoe_status route_popularity(const amoe_spec *s, double **pop, amoe_err *e) {
  *pop = NULL;
  int reads = 0;
  for (int i = 0; i < s->npolicies; i++) reads |= amoe_policy_reads_routes(&s->policies[i]);
  return reads ? calibration_load(s, pop, e) : AMOE_OK;
}

/* The step table over the calibration workload, as an engine profiles it
 * at start-up: batch up to the run's slots, STEP_SAMPLES passes an entry. */
enum { STEP_SAMPLES = 8 };
static amoe_status step_table(const amoe_spec *s, const double *load, amoe_step_table *t, amoe_err *e) {
  const amoe_workload_spec w = amoe_calibration_workload(s);
  amoe_source *cal = NULL;
  amoe_status st = amoe_source_open(&cal, &w, &s->model, e);
  if (!st) st = amoe_step_table_profile(s, cal, load, amoe_workload_slots(&s->workload), STEP_SAMPLES, t, e);
  amoe_source_close(cal);
  return st;
}

amoe_status amoe_step_table_build(const amoe_spec *s, amoe_step_table *t, amoe_err *e) {
  double *load = NULL;
  amoe_status st = placement_load(s, &load, e);
  if (!st) st = step_table(s, load, t, e);
  free(load);
  return st;
}

amoe_status amoe_run_prepare(const amoe_spec *s, amoe_run_prep *p, amoe_err *e) {
  memset(p, 0, sizeof *p);
  amoe_status st = offline_tables(s, p, e);
  if (!st) st = placement_load(s, &p->load, e);
  int reads_steps = 0;
  for (int i = 0; i < s->npolicies; i++) reads_steps |= amoe_draft_table[s->policies[i].draft].reads_step_table;
  if (!st && reads_steps) {
    p->steps = malloc(sizeof *p->steps);
    st = p->steps ? step_table(s, p->load, p->steps, e) : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  }
  if (!st) st = route_popularity(s, &p->popularity, e);
  p->offline.load = p->load;
  p->offline.steps = p->steps;
  p->offline.popularity = p->popularity;
  if (st) amoe_run_prep_free(p);
  return st;
}

void amoe_run_prep_free(amoe_run_prep *p) {
  free(p->load);
  free(p->steps);
  free(p->popularity);
  p->load = NULL;
  p->steps = NULL;
  p->popularity = NULL;
  p->offline.load = NULL;
  p->offline.steps = NULL;
  p->offline.popularity = NULL;
}
