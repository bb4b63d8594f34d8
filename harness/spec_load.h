/* YAML experiment specs (docs/design.md §13): presets, overrides, --set,
 * sweeps. Every error is collected in the diag as "file:line:column:
 * message"; the functions return AMOE_EINVAL when they added any (the
 * caller prints them all; main exits with status 2). */
#ifndef AMOE_SPEC_LOAD_H
#define AMOE_SPEC_LOAD_H

#include <stdio.h>

#include "err.h"
#include "spec.h"

#define AMOE_MAX_SWEEP_KEYS 8
#define AMOE_MAX_SWEEP_VALUES 64

#define AMOE_SPEC_KEYS_MAX 256 /* rows of the key table, at most */

typedef struct {
  char **msgs;
  int n, cap;
} amoe_diag;

void amoe_diag_add(amoe_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void amoe_diag_print(const amoe_diag *d, FILE *f);
void amoe_diag_free(amoe_diag *d);

typedef struct {
  char key[128];
  int nvalues;
  char values[AMOE_MAX_SWEEP_VALUES][128]; /* scalar text, applied like --set */
  /* 1: moves with the key before it, value by value (`sweep: {[k1, k2]:
   * [[a1, a2], [b1, b2]]}`: tied keys add no points of their own) */
  int tied;
} amoe_sweep_key;

typedef struct {
  amoe_spec base;
  char spec_path[AMOE_PATH_MAX];
  int nsweep;
  amoe_sweep_key sweep[AMOE_MAX_SWEEP_KEYS];
  /* keys left to a default that depends on other keys (the key table's
   * auto column: routing.skew and top_m from the model, candidates from
   * tree.nodes, the engine mode from the hardware, the layout from the
   * GPUs): bit i for the table's i-th such key; each sweep point resolves
   * them again */
  unsigned auto_unset;
  /* where each policy of the spec file's list stands (file:line:column), for
   * the checks that need the model ("" where a --set or a sweep gave it) */
  char policy_at[AMOE_MAX_POLICIES][AMOE_PATH_MAX + 32];
  /* where each key of the table was set in the spec file (line, column;
   * 0: not there, or a --set or a sweep gave it), for the checks that need
   * the whole spec */
  int key_at[AMOE_SPEC_KEYS_MAX][2];
} amoe_experiment;

/* Where presets live: $ACCEPTMOE_DATA, ./workloads, the spec's ../../workloads,
 * then the build's source tree. */
void amoe_presets_dir(char *out, size_t n, const char *kind, const char *spec_path);

/* Loads a spec file and applies `nset` "KEY=VALUE" overrides in order. */
amoe_status amoe_experiment_load(amoe_experiment *x, const char *path, char *const *sets, int nset, amoe_diag *d);
/* Whether some point runs a batch (workload.batch > 1, or swept, §17). */
int amoe_experiment_batched(const amoe_experiment *x); /* some point decodes several requests at once */
int amoe_experiment_open(const amoe_experiment *x);    /* some point's requests arrive over time (§18) */
/* Whether the spec left the auto-resolved key (by its path) unset. */
int amoe_experiment_auto(const amoe_experiment *x, const char *key);
/* Number of sweep points (1 without a sweep) and the spec at point i. */
int amoe_experiment_points(const amoe_experiment *x);
/* The index into sweep key i's values at point `point` (the last key varies
 * fastest; tied keys share their group's index). */
int amoe_experiment_value_index(const amoe_experiment *x, int point, int i);
amoe_status amoe_experiment_point(const amoe_experiment *x, int i, amoe_spec *out, amoe_diag *d);
/* Writes the resolved spec (every default filled in) as YAML. */
void amoe_spec_write_yaml(FILE *f, const amoe_experiment *x);
/* Applies one KEY=VALUE to a spec (used by sweeps and --set). */
amoe_status amoe_spec_set(amoe_spec *s, const char *key, const char *value, const char *where, amoe_diag *d);
/* Loads a model or hardware preset by name into s. */
amoe_status amoe_spec_load_preset(amoe_spec *s, int hw, const char *name, const char *where, amoe_diag *d);
/* Fills every default (the schema's defaults, not a real model's numbers). */
void amoe_spec_defaults(amoe_spec *s);
/* Every stable key with its type, range and help line (`acceptmoe keys`);
 * markdown: as the table docs/spec.md carries. */
void amoe_spec_list_keys(FILE *f, int markdown);
/* Final checks that need the whole spec (model shape, policy budgets). */
amoe_status amoe_spec_validate(amoe_spec *s, const char *where, amoe_diag *d);



/* Reads a commitment file written by `acceptmoe calibrate` ({table: [...],
 * mass: [...]}): p̂ into p[0..n), m̄ into mass (AMOE_MAX_DEPTH entries, 0
 * where the file has none). */
amoe_status amoe_commitment_file_load(const char *path, double *p, int *n, double *mass, amoe_diag *d);
#endif
