/* Experiments: a spec file with its --set options and sweeps, its points,
 * and the public API (spec_load.h), errors as values. */
#include "spec_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ experiments */


/* A key no longer stands where the file set it: a --set gives it (-1), or a
 * sweep (0: the checks name the file). */
static void forget_key_at(amoe_experiment *x, const char *path, int by_set) {
  const krow *k = spec_find_key(path);
  if (k) x->key_at[k - KEYS][0] = by_set ? -1 : 0;
}

static int experiment_load(amoe_experiment *x, const char *path, char *const *sets, int nset, amoe_diag *d) {
  memset(x, 0, sizeof *x);
  snprintf(x->spec_path, sizeof x->spec_path, "%s", path);
  amoe_spec_defaults(&x->base);
  int before = d->n;
  ydoc y;
  if (!spec_load_file(&y, path, d)) return 0;
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  if (!root || root->type != YAML_MAPPING_NODE) {
    amoe_diag_add(d, "%s:1:1: a spec must be a mapping of keys", path);
    yaml_document_delete(&y.doc);
    return 0;
  }
  /* model and hardware first, so that other keys may refer to them */
  y.policy_at = x->policy_at;
  y.key_at = x->key_at;
  spec_walk(&y, root, "", &x->base, 0);
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y.doc, p->key);
    if (k->type == YAML_SCALAR_NODE && !strcmp(spec_scalar(k), "sweep"))
      spec_parse_sweep(&y, yaml_document_get_node(&y.doc, p->value), x);
  }
  for (int j = 0; j < x->nsweep; j++) forget_key_at(x, x->sweep[j].key, 0); /* a point's value is the sweep's */
  yaml_document_delete(&y.doc);
  for (int i = 0; i < nset; i++) {
    char key[256], where[320];
    const char *eq = strchr(sets[i], '=');
    snprintf(where, sizeof where, "--set %s", sets[i]);
    if (!eq || eq == sets[i]) {
      amoe_diag_add(d, "%s: expected KEY=VALUE", where);
      continue;
    }
    snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
    if (!strcmp(key, "policies")) memset(x->policy_at, 0, sizeof x->policy_at); /* a list of its own */
    forget_key_at(x, key, 1);
    int swept = -1;
    for (int j = 0; j < x->nsweep; j++)
      if (!strcmp(x->sweep[j].key, key)) swept = j;
    if (swept >= 0) { /* --set pins a swept key to one value (the keys tied to it sweep on together) */
      if (!x->sweep[swept].tied && swept + 1 < x->nsweep) x->sweep[swept + 1].tied = 0;
      for (int j = swept; j < x->nsweep - 1; j++) x->sweep[j] = x->sweep[j + 1];
      x->nsweep--;
    }
    spec_set(&x->base, key, eq + 1, where, d);
  }
  x->auto_unset = 0;
  for (int i = 0; i < NKEYS; i++)
    if (KEYS[i].autos) x->auto_unset |= (unsigned)spec_auto_is_unset(&x->base, &KEYS[i]) << spec_auto_bit(&KEYS[i]);
  /* the whole-spec checks run whatever else the file got wrong, so that
   * every problem is named at once (a key that failed keeps its default) */
  const spec_at at = {x->policy_at, (const int(*)[2])x->key_at};
  spec_validate(&x->base, path, &at, d);
  return d->n == before;
}

int amoe_experiment_points(const amoe_experiment *x) {
  int n = 1;
  for (int i = 0; i < x->nsweep; i++) n *= x->sweep[i].tied ? 1 : x->sweep[i].nvalues;
  return n;
}

int amoe_experiment_value_index(const amoe_experiment *x, int point, int i) {
  int g = i;
  while (g > 0 && x->sweep[g].tied) g--; /* the group's first key holds its digit */
  for (int j = x->nsweep - 1; j > g; j--)
    if (!x->sweep[j].tied) point /= x->sweep[j].nvalues;
  return point % x->sweep[g].nvalues;
}

static int experiment_point(const amoe_experiment *x, int idx, amoe_spec *out, amoe_diag *d) {
  *out = x->base;
  int before = d->n;
  /* the implicit baseline is re-added by validate */
  if (out->npolicies && out->policies[out->npolicies - 1].implicit) out->npolicies--;
  for (int i = 0; i < NKEYS; i++)
    if (KEYS[i].autos && (x->auto_unset >> spec_auto_bit(&KEYS[i]) & 1)) spec_auto_unset(out, &KEYS[i]);
  for (int i = 0; i < x->nsweep; i++) {
    const amoe_sweep_key *k = &x->sweep[i];
    const int v = amoe_experiment_value_index(x, idx, i);
    char where[AMOE_PATH_MAX + 200];
    snprintf(where, sizeof where, "%s: sweep %s", x->spec_path, k->key);
    spec_set(out, k->key, k->values[v], where, d);
  }
  int policies_swept = 0;
  for (int i = 0; i < x->nsweep; i++) policies_swept |= !strcmp(x->sweep[i].key, "policies");
  const spec_at at = {policies_swept ? NULL : x->policy_at, (const int(*)[2])x->key_at};
  if (d->n == before) spec_validate(out, x->spec_path, &at, d);
  if (d->n == before && out->commitment.mode == AMOE_COMMIT_FILE) { /* the file's table, read once here */
    int n = 0;
    if (spec_commitment_file_load(out->commitment.file, out->commitment.table, &n, out->commitment.mass, d))
      out->commitment.table_n = out->commitment.mass_n = n;
  }
  return d->n == before;
}

/* ------------------------------------------------------------ the API: errors as values */

amoe_status amoe_spec_load_preset(amoe_spec *s, int hw, const char *name, const char *where, amoe_diag *d) {
  return spec_load_preset(s, hw ? "hardware" : "model", name, where, d) ? AMOE_OK : AMOE_EINVAL;
}

amoe_status amoe_spec_set(amoe_spec *s, const char *key, const char *value, const char *where, amoe_diag *d) {
  return spec_set(s, key, value, where, d) ? AMOE_OK : AMOE_EINVAL;
}

amoe_status amoe_spec_validate(amoe_spec *s, const char *where, amoe_diag *d) {
  return spec_validate(s, where, NULL, d) ? AMOE_OK : AMOE_EINVAL;
}

amoe_status amoe_experiment_load(amoe_experiment *x, const char *path, char *const *sets, int nset, amoe_diag *d) {
  return experiment_load(x, path, sets, nset, d) ? AMOE_OK : AMOE_EINVAL;
}

amoe_status amoe_experiment_point(const amoe_experiment *x, int idx, amoe_spec *out, amoe_diag *d) {
  return experiment_point(x, idx, out, d) ? AMOE_OK : AMOE_EINVAL;
}

amoe_status amoe_commitment_file_load(const char *path, double *p, int *n, double *mass, amoe_diag *d) {
  return spec_commitment_file_load(path, p, n, mass, d) ? AMOE_OK : AMOE_EINVAL;
}
