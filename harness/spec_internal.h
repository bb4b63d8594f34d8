/* What the spec loader's files share (harness/spec_*.c; the public API is
 * spec_load.h): the key table, the YAML document with its file for
 * positions, and the steps each file takes for the others. */
#ifndef AMOE_SPEC_INTERNAL_H
#define AMOE_SPEC_INTERNAL_H

#include <stddef.h>
#include <stdio.h>
#include <yaml.h>

#include "accept.h"
#include "cache.h"
#include "gen.h"
#include "policy.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"

/* T_DVEC: an amoe_layer_values, one number (every layer) or a list (one per
 * MoE layer). nullable T_DBL and T_DVEC: null leaves the key unset (NaN,
 * or n = 0): a workload.routing override that names nothing. */
/* T_DLIST: the same storage, a list of any length (1 to AMOE_MAX_LAYERS) that
 * is not per layer (an acceptance curve, captured graph sizes). */
typedef enum { T_INT, T_U64, T_DBL, T_STR, T_BOOL, T_ENUM, T_DVEC, T_DLIST } ktype;
#define SPEC_IS_LIST(t) ((t) == T_DVEC || (t) == T_DLIST)

/* A key left unset (0; a bool -1; a layer list empty) resolves to a default
 * that depends on other keys: each sweep point resolves it again when one
 * of those is swept. */
typedef enum {
  AUTO_NONE,
  AUTO_BY_MODEL,  /* routing.skew, top_m: from the model */
  AUTO_BY_NODES,  /* candidates: from tree.nodes */
  AUTO_BY_HW,     /* the engine mode: from the hardware */
  AUTO_BY_LAYOUT, /* the layout over the GPUs: from hardware.gpus or parallel.* */
} kauto;

typedef struct {
  const char *path;
  ktype type;
  size_t off, size;
  double lo, hi;
  const char *const *names;
  int nullable;
  int alias;   /* an older name of another key: read, never written */
  kauto autos; /* what its default depends on (AUTO_NONE: a plain default) */
  const char *help; /* one line for `acceptmoe keys` and docs/spec.md's key list */
} krow;

#define F(field) offsetof(amoe_spec, field), sizeof(((amoe_spec *)0)->field)
#define BIG 1e30

/* The stable keys of docs/design.md §13, in the order spec.resolved.yaml
 * lists them (spec_keys.c). */
extern const krow KEYS[];
extern const int NKEYS;

typedef struct {
  yaml_document_t doc;
  const char *file;
  amoe_diag *d;
  const char *base_dir; /* for relative paths inside the spec */
  char (*policy_at)[AMOE_PATH_MAX + 32]; /* the spec file's: each policy's position, or NULL */
  int (*key_at)[2];                      /* and each key's (line, column), or NULL */
} ydoc;

int spec_auto_bit(const krow *k);
int spec_auto_is_unset(const amoe_spec *s, const krow *k);
void spec_auto_unset(amoe_spec *s, const krow *k);
int spec_commitment_file_load(const char *path, double *p, int *n, double *mass, amoe_diag *d);
const char *spec_did_you_mean(const char *path);
const krow *spec_find_key(const char *path);
int spec_is_null_text(const char *v);
int spec_is_prefix_of_key(const char *path);
int spec_load_file(ydoc *y, const char *path, amoe_diag *d);
/* The one preset loader: section model, hardware (with its calibration
 * file over it), hardware.interconnect or engine, from its folder of
 * workloads/ (amoe_presets_dir); the section starts from its defaults. */
int spec_load_preset(amoe_spec *s, const char *section, const char *name, const char *where, amoe_diag *d);
void spec_parse_sweep(ydoc *y, yaml_node_t *n, amoe_experiment *x);
void spec_policy_defaults(amoe_policy_row *r);
const char *spec_scalar(const yaml_node_t *n);
int spec_set_value(amoe_spec *s, const krow *k, const char *v, int quoted, const char *where,
                     amoe_diag *d);
int spec_set(amoe_spec *s, const char *key, const char *value, const char *where, amoe_diag *d);
/* Where the whole-spec checks point: the spec file (`where`), each policy's
 * position in it (NULL, or "" entries: where) and each key's (NULL, or
 * line 0: where). */
typedef struct {
  const char (*policy)[AMOE_PATH_MAX + 32];
  const int (*key)[2];
} spec_at;
int spec_validate(amoe_spec *s, const char *where, const spec_at *at, amoe_diag *d);
/* An engine section with nothing set: the mode left to the hardware preset. */
void spec_engine_defaults(amoe_engine *e);
/* A deployment preset (NAME in workloads/deployments/, or a path) walked
 * into s as a spec's first keys; 0 with its messages in d. */
int spec_load_deployment(amoe_spec *s, const char *name, const char *where, const char *spec_path, amoe_diag *d);
void spec_walk(ydoc *y, yaml_node_t *map, const char *prefix, amoe_spec *s, int preset);

#endif
