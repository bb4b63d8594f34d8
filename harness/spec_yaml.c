/* The YAML walk: a spec's or preset's mapping into an amoe_spec, key by
 * key, with file:line:column in every message; policies, the commitment,
 * sweeps (tied keys too), --set, and the commitment file. */
#include "spec_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ YAML helpers */


static void at(const ydoc *y, const yaml_node_t *n, char *buf, size_t len) {
  snprintf(buf, len, "%s:%lu:%lu", y->file, (unsigned long)n->start_mark.line + 1,
           (unsigned long)n->start_mark.column + 1);
}

const char *spec_scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }
static int quoted(const yaml_node_t *n) {
  return n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
         n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
}

int spec_load_file(ydoc *y, const char *path, amoe_diag *d) {
  memset(y, 0, sizeof *y);
  y->file = path;
  y->d = d;
  FILE *f = fopen(path, "rb");
  if (!f) {
    amoe_diag_add(d, "%s: cannot open: %s", path, strerror(errno));
    return 0;
  }
  yaml_parser_t p;
  yaml_parser_initialize(&p);
  yaml_parser_set_input_file(&p, f);
  int ok = yaml_parser_load(&p, &y->doc);
  if (!ok) {
    amoe_diag_add(d, "%s:%lu:%lu: %s%s%s", path, (unsigned long)p.problem_mark.line + 1,
                  (unsigned long)p.problem_mark.column + 1, p.problem ? p.problem : "YAML error",
                  p.context ? " " : "", p.context ? p.context : "");
  }
  yaml_parser_delete(&p);
  fclose(f);
  return ok;
}

static int load_string(ydoc *y, const char *text, const char *where, amoe_diag *d) {
  memset(y, 0, sizeof *y);
  y->file = where;
  y->d = d;
  yaml_parser_t p;
  yaml_parser_initialize(&p);
  yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
  int ok = yaml_parser_load(&p, &y->doc);
  if (!ok) amoe_diag_add(d, "%s: %s", where, p.problem ? p.problem : "YAML error");
  yaml_parser_delete(&p);
  return ok;
}

/* ------------------------------------------------------------ policies */

static void names_of(char *buf, size_t n, int verifier) {
  buf[0] = 0;
  int cnt = verifier ? amoe_verifier_rows() : amoe_draft_rows();
  for (int i = 0; i < cnt; i++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? ", " : "",
             verifier ? amoe_verifier_table[i].name : amoe_draft_table[i].name);
}


static int set_policy_name(ydoc *y, yaml_node_t *n, amoe_policy_row *r, int verifier, int either) {
  char w[AMOE_PATH_MAX + 64], names[256];
  at(y, n, w, sizeof w);
  if (n->type != YAML_SCALAR_NODE) {
    amoe_diag_add(y->d, "%s: a policy name must be a string", w);
    return 0;
  }
  const char *v = spec_scalar(n);
  int vi = amoe_verifier_find(v), di = amoe_draft_find(v);
  if ((verifier || either) && vi >= 0) {
    r->verifier = vi;
    return 1;
  }
  if ((!verifier || either) && di >= 0) {
    r->draft = di;
    return 1;
  }
  names_of(names, sizeof names, 1);
  char dn[256];
  names_of(dn, sizeof dn, 0);
  amoe_diag_add(y->d, "%s: unknown %s policy '%s' (verifiers: %s; drafts: %s)", w,
                either ? "" : verifier ? "verifier" : "draft", v, names, dn);
  return 0;
}

/* The parameter `key` of a table row (row->params), for a message. */
static const amoe_param_def *param_in(const amoe_param_def *p, const char *key) {
  for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++)
    if (!strcmp(p[i].key, key)) return &p[i];
  return NULL;
}

/* One `key: value` of a policy mapping, a parameter of the row's draft or
 * verifier, checked against its table row's range. */
static int set_policy_param(ydoc *y, yaml_node_t *k, yaml_node_t *v, amoe_policy_row *r, const char *key,
                            unsigned *given) {
  char kw[AMOE_PATH_MAX + 64];
  int which, idx;
  const amoe_param_def *pd = amoe_policy_param(r, key, &which, &idx);
  if (!pd) {
    /* another policy's parameter: resolved specs written before parameters
     * were per policy list every one at its default; accept those */
    char others[256] = "";
    double dv = NAN;
    for (int w = 0; w < 2; w++)
      for (int i = 0; i < (w ? amoe_verifier_rows() : amoe_draft_rows()); i++) {
        const amoe_param_def *o = param_in(w ? amoe_verifier_table[i].params : amoe_draft_table[i].params, key);
        if (!o) continue;
        snprintf(others + strlen(others), sizeof others - strlen(others), "%s%s", others[0] ? ", " : "",
                 w ? amoe_verifier_table[i].name : amoe_draft_table[i].name);
        dv = o->def;
      }
    char *end;
    if (others[0] && v->type == YAML_SCALAR_NODE && strtod(spec_scalar(v), &end) == dv && !*end) return 1;
    at(y, k, kw, sizeof kw);
    if (others[0])
      amoe_diag_add(y->d, "%s: '%s' is not a parameter of draft %s or verifier %s (it is of: %s)", kw, key,
                    amoe_draft_table[r->draft].name, amoe_verifier_table[r->verifier].name, others);
    else
    {
      char known[256] = "draft, verifier";
      for (int w = 0; w < 2; w++) {
        const amoe_param_def *p = w ? amoe_verifier_table[r->verifier].params : amoe_draft_table[r->draft].params;
        for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++)
          snprintf(known + strlen(known), sizeof known - strlen(known), ", %s", p[i].key);
      }
      amoe_diag_add(y->d, "%s: unknown policy key '%s' (this policy takes: %s)", kw, key, known);
    }
    return 0;
  }
  at(y, v, kw, sizeof kw);
  if (v->type != YAML_SCALAR_NODE) {
    amoe_diag_add(y->d, "%s: %s must be a number", kw, key);
    return 0;
  }
  if (pd->names) { /* a choice by name */
    for (int i = 0; pd->names[i]; i++)
      if (!strcmp(pd->names[i], spec_scalar(v))) {
        (which ? r->vparam : r->dparam)[idx] = i;
        *given |= 1u << (which * AMOE_MAX_PARAMS + idx);
        return 1;
      }
    char list[256] = "";
    for (int i = 0; pd->names[i]; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", pd->names[i]);
    amoe_diag_add(y->d, "%s: %s must be one of %s, not '%s'", kw, key, list, spec_scalar(v));
    return 0;
  }
  /* the scalar parser, on a double beside the row */
  double x;
  const krow kr = {pd->key, T_DBL, 0, 8, pd->min, pd->max, NULL, 0, 0, AUTO_NONE, NULL};
  if (!spec_set_value((amoe_spec *)(void *)&x, &kr, spec_scalar(v), quoted(v), kw, y->d)) return 0;
  if (pd->integer && x != floor(x)) {
    amoe_diag_add(y->d, "%s: %s must be an integer, not '%s'", kw, key, spec_scalar(v));
    return 0;
  }
  (which ? r->vparam : r->dparam)[idx] = x;
  *given |= 1u << (which * AMOE_MAX_PARAMS + idx);
  return 1;
}

/* Every parameter without a default was given. */
static int required_params_given(ydoc *y, const amoe_policy_row *r, unsigned given, const char *where) {
  int ok = 1;
  for (int w = 0; w < 2; w++) {
    const amoe_param_def *p = w ? amoe_verifier_table[r->verifier].params : amoe_draft_table[r->draft].params;
    for (int i = 0; i < AMOE_MAX_PARAMS && p[i].key; i++)
      if (isnan(p[i].def) && !(given >> (w * AMOE_MAX_PARAMS + i) & 1)) {
        amoe_diag_add(y->d, "%s: %s %s needs %s", where, w ? "verifier" : "draft",
                      w ? amoe_verifier_table[r->verifier].name : amoe_draft_table[r->draft].name, p[i].key);
        ok = 0;
      }
  }
  return ok;
}

/* The opening every section parser shares: n must be a node of `type`,
 * else a diagnostic "FILE:LINE:COL: what" and 0. */
static int expect_node(ydoc *y, yaml_node_t *n, yaml_node_type_t type, const char *what) {
  if (n->type == type) return 1;
  char w[AMOE_PATH_MAX + 64];
  at(y, n, w, sizeof w);
  amoe_diag_add(y->d, "%s: %s", w, what);
  return 0;
}

static void parse_policies(ydoc *y, yaml_node_t *seq, amoe_spec *s) {
  char w[AMOE_PATH_MAX + 64];
  if (!expect_node(y, seq, YAML_SEQUENCE_NODE, "policies must be a list")) return;
  s->npolicies = 0;
  for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++) {
    yaml_node_t *n = yaml_document_get_node(&y->doc, *it);
    at(y, n, w, sizeof w);
    if (s->npolicies == AMOE_MAX_POLICIES - 1) {
      amoe_diag_add(y->d, "%s: at most %d policies", w, AMOE_MAX_POLICIES - 1);
      return;
    }
    amoe_policy_row *r = &s->policies[s->npolicies];
    if (y->policy_at) snprintf(y->policy_at[s->npolicies], sizeof y->policy_at[0], "%.1050s", w);
    spec_policy_defaults(r);
    int ok = 1;
    unsigned given = 0;
    if (n->type == YAML_SCALAR_NODE) {
      ok = set_policy_name(y, n, r, 0, 1);
      if (ok) amoe_policy_init(r, r->draft, r->verifier);
    } else if (n->type == YAML_MAPPING_NODE) {
      /* the names first: they say which parameters there are */
      for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
        const char *key = k->type == YAML_SCALAR_NODE ? spec_scalar(k) : "";
        if (!strcmp(key, "draft") || !strcmp(key, "verifier")) ok &= set_policy_name(y, v, r, key[0] == 'v', 0);
      }
      if (ok) amoe_policy_init(r, r->draft, r->verifier);
      for (yaml_node_pair_t *p = n->data.mapping.pairs.start; ok && p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
        const char *key = k->type == YAML_SCALAR_NODE ? spec_scalar(k) : "";
        if (!strcmp(key, "draft") || !strcmp(key, "verifier")) continue;
        ok &= set_policy_param(y, k, v, r, key, &given);
      }
    } else {
      amoe_diag_add(y->d, "%s: a policy is a name or a mapping", w);
      ok = 0;
    }
    if (!ok || !required_params_given(y, r, given, w)) continue;
    amoe_policy_label(r);
    s->npolicies++;
  }
}

/* ------------------------------------------------------------ walking */

/* A list of numbers in [lo, hi] at commitment.`key` into out (at most
 * AMOE_MAX_DEPTH); returns the count. */
static int parse_depths(ydoc *y, yaml_node_t *v, const char *key, double lo, double hi, double *out) {
  char w[AMOE_PATH_MAX + 64];
  int n = 0;
  at(y, v, w, sizeof w);
  if (v->type != YAML_SEQUENCE_NODE) {
    amoe_diag_add(y->d, "%s: commitment.%s must be a list of numbers, one per depth", w, key);
    return 0;
  }
  for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
    yaml_node_t *x = yaml_document_get_node(&y->doc, *it);
    at(y, x, w, sizeof w);
    char *end;
    double val = x->type == YAML_SCALAR_NODE ? strtod(spec_scalar(x), &end) : NAN;
    if (x->type != YAML_SCALAR_NODE || *end || !(val >= lo && val <= hi)) {
      amoe_diag_add(y->d, "%s: commitment.%s entries must be numbers in [%g, %g]", w, key, lo, hi);
    } else if (n == AMOE_MAX_DEPTH) {
      amoe_diag_add(y->d, "%s: commitment.%s has more than %d entries", w, key, AMOE_MAX_DEPTH);
      break;
    } else {
      out[n++] = val;
    }
  }
  return n;
}

static void parse_commitment(ydoc *y, yaml_node_t *n, amoe_spec *s) {
  char w[AMOE_PATH_MAX + 64];
  if (!expect_node(y, n, YAML_MAPPING_NODE, "commitment must be {calibrate: {...}}, {table: [...]} or {file: F}"))
    return;
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
    const char *key = k->type == YAML_SCALAR_NODE ? spec_scalar(k) : "";
    at(y, v, w, sizeof w);
    if (!strcmp(key, "table")) {
      s->commitment.mode = AMOE_COMMIT_TABLE;
      s->commitment.table_n = parse_depths(y, v, "table", 0, 1, s->commitment.table);
    } else if (!strcmp(key, "mass")) { /* m̄_d, beside a table (acceptmoe calibrate writes both) */
      s->commitment.mass_n = parse_depths(y, v, "mass", 0, AMOE_MAX_NODES, s->commitment.mass);
    } else if (!strcmp(key, "file")) {
      s->commitment.mode = AMOE_COMMIT_FILE;
      if (v->type == YAML_SCALAR_NODE)
        spec_set_value(s, spec_find_key("commitment.file"), spec_scalar(v), quoted(v), w, y->d);
      else
        amoe_diag_add(y->d, "%s: commitment.file must be a path", w);
    } else if (!strcmp(key, "calibrate")) {
      s->commitment.mode = AMOE_COMMIT_CALIBRATE;
      if (v->type == YAML_MAPPING_NODE) spec_walk(y, v, "commitment.calibrate", s, 0);
      else if (!(v->type == YAML_SCALAR_NODE && spec_is_null_text(spec_scalar(v))))
        amoe_diag_add(y->d, "%s: commitment.calibrate must be {blocks: N, seed: S}", w);
    } else {
      at(y, k, w, sizeof w);
      amoe_diag_add(y->d, "%s: unknown key 'commitment.%s' (calibrate, table, mass, file)", w, key);
    }
  }
  if (s->commitment.mass_n && s->commitment.mode != AMOE_COMMIT_TABLE) {
    at(y, n, w, sizeof w);
    amoe_diag_add(y->d, "%s: commitment.mass goes beside commitment.table", w);
  }
}

/* model:, hardware:, engine: or host: as a preset name, or a mapping whose
 * `preset` is loaded first and its other keys set over it. */
static void parse_preset_node(ydoc *y, yaml_node_t *v, amoe_spec *s, const char *sect) {
  char w[AMOE_PATH_MAX + 64];
  at(y, v, w, sizeof w);
  if (v->type == YAML_SCALAR_NODE) {
    spec_load_preset(s, sect, spec_scalar(v), w, y->d);
    return;
  }
  if (v->type != YAML_MAPPING_NODE) {
    amoe_diag_add(y->d, "%s: %s must be a preset name or a mapping", w, sect);
    return;
  }
  for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *x = yaml_document_get_node(&y->doc, p->value);
    if (k->type == YAML_SCALAR_NODE && !strcmp(spec_scalar(k), "preset")) {
      at(y, x, w, sizeof w);
      if (x->type != YAML_SCALAR_NODE)
        amoe_diag_add(y->d, "%s: %s.preset must be a name", w, sect);
      else
        spec_load_preset(s, sect, spec_scalar(x), w, y->d);
    }
  }
  spec_walk(y, v, sect, s, 0);
}

/* Sets a T_DVEC key from a YAML sequence: one number per MoE layer, each
 * checked as set_value checks one (its own position in messages). */
static void set_list(ydoc *y, yaml_node_t *v, amoe_spec *s, const krow *k) {
  amoe_layer_values *lv = (amoe_layer_values *)(void *)((char *)s + k->off), got = {0};
  char w[AMOE_PATH_MAX + 64];
  amoe_spec one;
  const int n = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
  if (n < 1 || n > AMOE_MAX_LAYERS) {
    at(y, v, w, sizeof w);
    amoe_diag_add(y->d, "%s: %s takes 1..%d values, not %d", w, k->path, AMOE_MAX_LAYERS, n);
    return;
  }
  int ok = 1;
  for (int i = 0; i < n; i++) {
    yaml_node_t *e = yaml_document_get_node(&y->doc, v->data.sequence.items.start[i]);
    at(y, e, w, sizeof w);
    if (e->type != YAML_SCALAR_NODE || spec_is_null_text(spec_scalar(e))) {
      amoe_diag_add(y->d, "%s: %s: each value must be a number", w, k->path);
      ok = 0;
      continue;
    }
    krow one_k = *k;
    one_k.nullable = 0;
    if (!spec_set_value(&one, &one_k, spec_scalar(e), quoted(e), w, y->d)) {
      ok = 0;
      continue;
    }
    got.v[i] = ((amoe_layer_values *)(void *)((char *)&one + k->off))->v[0];
  }
  if (!ok) return;
  got.n = n;
  *lv = got;
}

/* Walks a mapping whose keys extend `prefix`. preset: a preset file (its
 * citation keys `source`, `sources` and `notes` are allowed and skipped). */
void spec_walk(ydoc *y, yaml_node_t *map, const char *prefix, amoe_spec *s, int preset) {
  char w[AMOE_PATH_MAX + 64], path[256];
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
    at(y, k, w, sizeof w);
    if (k->type != YAML_SCALAR_NODE) {
      amoe_diag_add(y->d, "%s: keys must be strings", w);
      continue;
    }
    const char *key = spec_scalar(k);
    if (prefix[0])
      snprintf(path, sizeof path, "%s.%s", prefix, key);
    else
      snprintf(path, sizeof path, "%s", key);
    if (preset && (!strcmp(key, "source") || !strcmp(key, "sources") || !strcmp(key, "notes") ||
                   !strcmp(key, "measured"))) continue;
    if (!strcmp(path, "model.preset") || !strcmp(path, "hardware.preset") || !strcmp(path, "engine.preset") ||
        !strcmp(path, "host.preset"))
      continue;
    if (!strcmp(path, "hardware.interconnect") && v->type == YAML_SCALAR_NODE) { /* a preset name */
      at(y, v, w, sizeof w);
      spec_load_preset(s, "hardware.interconnect", spec_scalar(v), w, y->d);
      continue;
    }
    if (!strcmp(path, "model") || !strcmp(path, "hardware") || !strcmp(path, "engine") || !strcmp(path, "host")) {
      parse_preset_node(y, v, s, path);
      continue;
    }
    if (!strcmp(path, "deployment")) { /* the spec's first key: what follows is set over it */
      at(y, v, w, sizeof w);
      if (preset || p != map->data.mapping.pairs.start)
        amoe_diag_add(y->d, "%s: deployment must be a spec's first key (the keys after it are set over it)", w);
      else if (v->type != YAML_SCALAR_NODE)
        amoe_diag_add(y->d, "%s: deployment must be a preset name or a path", w);
      else
        spec_load_deployment(s, spec_scalar(v), w, y->file, y->d);
      continue;
    }
    if (!strcmp(path, "policies")) {
      parse_policies(y, v, s);
      continue;
    }
    if (!strcmp(path, "sweep")) continue; /* handled by the caller */
    if (!strcmp(path, "commitment")) {
      parse_commitment(y, v, s);
      continue;
    }
    if (!strcmp(path, "offload")) {
      if (v->type == YAML_SCALAR_NODE && spec_is_null_text(spec_scalar(v))) {
        s->offload.enabled = 0;
        continue;
      }
      s->offload.enabled = 1;
    }
    const krow *kr = spec_find_key(path);
    char vw[AMOE_PATH_MAX + 64];
    at(y, v, vw, sizeof vw);
    if (kr) {
      if (y->key_at) { /* (its value's position, as its own errors name) */
        y->key_at[kr - KEYS][0] = (int)v->start_mark.line + 1;
        y->key_at[kr - KEYS][1] = (int)v->start_mark.column + 1;
      }
      if (SPEC_IS_LIST(kr->type) && v->type == YAML_SEQUENCE_NODE)
        set_list(y, v, s, kr);
      else if (v->type != YAML_SCALAR_NODE)
        amoe_diag_add(y->d, "%s: %s must be a single value", vw, path);
      else
        spec_set_value(s, kr, spec_scalar(v), quoted(v), vw, y->d);
      continue;
    }
    if (spec_is_prefix_of_key(path)) {
      if (v->type == YAML_MAPPING_NODE)
        spec_walk(y, v, path, s, preset);
      else
        amoe_diag_add(y->d, "%s: %s must be a mapping", vw, path);
      continue;
    }
    amoe_diag_add(y->d, "%s: unknown key '%s'%s", w, path, spec_did_you_mean(path));
  }
}

/* ------------------------------------------------------------ --set and sweeps */

int spec_set(amoe_spec *s, const char *key, const char *value, const char *where, amoe_diag *d) {
  int before = d->n;
  char text[AMOE_PATH_MAX + 256];
  /* Build a one-key YAML document so every key goes through the same walk. */
  ydoc y;
  const char *dot = strrchr(key, '.');
  if (!strcmp(key, "model") || !strcmp(key, "hardware") || !strcmp(key, "engine") || !strcmp(key, "host")) {
    spec_load_preset(s, key, value, where, d);
    return d->n == before;
  }
  if (!strcmp(key, "hardware.interconnect")) {
    spec_load_preset(s, "hardware.interconnect", value, where, d);
    return d->n == before;
  }
  if (!strcmp(key, "engine.preset")) {
    spec_load_preset(s, "engine", value, where, d);
    return d->n == before;
  }
  if (dot && (!strncmp(key, "offload.", 8))) s->offload.enabled = 1;
  const krow *kr = spec_find_key(key);
  if (!kr) {
    if (!strcmp(key, "policies") || !strcmp(key, "commitment.table")) {
      snprintf(text, sizeof text, "%s: %s", !strcmp(key, "policies") ? "policies" : "commitment",
               !strcmp(key, "policies") ? value : "");
      if (!strcmp(key, "commitment.table")) snprintf(text, sizeof text, "commitment: {table: %s}", value);
      if (!load_string(&y, text, where, d)) return 0;
      yaml_node_t *root = yaml_document_get_root_node(&y.doc);
      if (root && root->type == YAML_MAPPING_NODE) spec_walk(&y, root, "", s, 0);
      yaml_document_delete(&y.doc);
      return d->n == before;
    }
    amoe_diag_add(d, "%s: unknown key '%s'%s", where, key, spec_did_you_mean(key));
    return 0;
  }
  /* a commitment key also picks its form */
  if (!strcmp(key, "commitment.file")) s->commitment.mode = AMOE_COMMIT_FILE;
  if (!strncmp(key, "commitment.calibrate.", 21)) s->commitment.mode = AMOE_COMMIT_CALIBRATE;
  snprintf(text, sizeof text, "%s", value);
  if (!load_string(&y, text, where, d)) return 0;
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  if (!root)
    spec_set_value(s, kr, "", 0, where, d);
  else if (SPEC_IS_LIST(kr->type) && root->type == YAML_SEQUENCE_NODE)
    set_list(&y, root, s, kr);
  else if (root->type != YAML_SCALAR_NODE)
    amoe_diag_add(d, "%s: %s must be a single value", where, key);
  else
    spec_set_value(s, kr, spec_scalar(root), quoted(root), where, d);
  yaml_document_delete(&y.doc);
  return d->n == before;
}

/* `[k1, k2, ...]: [[v1, v2, ...], ...]`: one sweep key each, the later ones
 * tied to the first, every value checked at its own position. */
static void parse_sweep_tied(ydoc *y, yaml_node_t *k, yaml_node_t *v, const char *w, amoe_experiment *x) {
  const int nk = (int)(k->data.sequence.items.top - k->data.sequence.items.start);
  if (nk < 1 || x->nsweep + nk > AMOE_MAX_SWEEP_KEYS) {
    amoe_diag_add(y->d, "%s: tied sweep keys: 1 to %d keys in all", w, AMOE_MAX_SWEEP_KEYS);
    return;
  }
  if (v->type != YAML_SEQUENCE_NODE) {
    amoe_diag_add(y->d, "%s: tied sweep keys take a list of [%d values] lists", w, nk);
    return;
  }
  const int first = x->nsweep;
  for (int i = 0; i < nk; i++) {
    yaml_node_t *ki = yaml_document_get_node(&y->doc, k->data.sequence.items.start[i]);
    const char *key = ki->type == YAML_SCALAR_NODE ? spec_scalar(ki) : "";
    if (!spec_find_key(key) && strcmp(key, "model") && strcmp(key, "hardware")) {
      char kw[AMOE_PATH_MAX + 64];
      at(y, ki, kw, sizeof kw);
      amoe_diag_add(y->d, "%s: cannot sweep unknown key '%s'%s", kw, key, spec_did_you_mean(key));
      return;
    }
    amoe_sweep_key *sk = &x->sweep[first + i];
    memset(sk, 0, sizeof *sk);
    snprintf(sk->key, sizeof sk->key, "%s", key);
    sk->tied = i > 0;
  }
  int ok = 1;
  for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
    yaml_node_t *row = yaml_document_get_node(&y->doc, *it);
    char rw[AMOE_PATH_MAX + 64];
    at(y, row, rw, sizeof rw);
    const int nv = row->type == YAML_SEQUENCE_NODE ? (int)(row->data.sequence.items.top - row->data.sequence.items.start) : -1;
    if (nv != nk || x->sweep[first].nvalues == AMOE_MAX_SWEEP_VALUES) {
      amoe_diag_add(y->d, "%s: each point of tied sweep keys is a list of %d scalars (at most %d points)", rw, nk,
                    AMOE_MAX_SWEEP_VALUES);
      ok = 0;
      continue;
    }
    amoe_spec probe = x->base;
    for (int i = 0; i < nk; i++) {
      yaml_node_t *e = yaml_document_get_node(&y->doc, row->data.sequence.items.start[i]);
      char ew[AMOE_PATH_MAX + 64];
      at(y, e, ew, sizeof ew);
      amoe_sweep_key *sk = &x->sweep[first + i];
      if (e->type != YAML_SCALAR_NODE) {
        amoe_diag_add(y->d, "%s: sweep values must be scalars", ew);
        ok = 0;
        continue;
      }
      ok &= spec_set(&probe, sk->key, spec_scalar(e), ew, y->d);
      snprintf(sk->values[sk->nvalues++], 128, "%s", spec_scalar(e));
    }
  }
  if (ok && x->sweep[first].nvalues > 0) x->nsweep += nk;
}

void spec_parse_sweep(ydoc *y, yaml_node_t *n, amoe_experiment *x) {
  char w[AMOE_PATH_MAX + 64];
  if (!expect_node(y, n, YAML_MAPPING_NODE, "sweep must map keys to lists of values")) return;
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
    at(y, k, w, sizeof w);
    if (x->nsweep == AMOE_MAX_SWEEP_KEYS) {
      amoe_diag_add(y->d, "%s: at most %d sweep keys", w, AMOE_MAX_SWEEP_KEYS);
      return;
    }
    if (k->type == YAML_SEQUENCE_NODE) { /* tied keys: their values move together */
      parse_sweep_tied(y, k, v, w, x);
      continue;
    }
    const char *key = k->type == YAML_SCALAR_NODE ? spec_scalar(k) : "";
    if (!spec_find_key(key) && strcmp(key, "model") && strcmp(key, "hardware")) {
      amoe_diag_add(y->d, "%s: cannot sweep unknown key '%s'%s", w, key, spec_did_you_mean(key));
      continue;
    }
    amoe_sweep_key *sk = &x->sweep[x->nsweep];
    memset(sk, 0, sizeof *sk);
    snprintf(sk->key, sizeof sk->key, "%s", key);
    yaml_node_item_t one = p->value, *start = &one, *top = &one + 1;
    if (v->type == YAML_SEQUENCE_NODE) {
      start = v->data.sequence.items.start;
      top = v->data.sequence.items.top;
    }
    int ok = 1;
    for (yaml_node_item_t *it = start; it < top; it++) {
      yaml_node_t *e = yaml_document_get_node(&y->doc, *it);
      char ew[AMOE_PATH_MAX + 64];
      at(y, e, ew, sizeof ew);
      if (e->type != YAML_SCALAR_NODE || sk->nvalues == AMOE_MAX_SWEEP_VALUES) {
        amoe_diag_add(y->d, "%s: sweep values must be scalars (at most %d)", ew, AMOE_MAX_SWEEP_VALUES);
        ok = 0;
        continue;
      }
      amoe_spec probe = x->base; /* check the value now, with its position */
      ok &= spec_set(&probe, key, spec_scalar(e), ew, y->d);
      snprintf(sk->values[sk->nvalues++], 128, "%s", spec_scalar(e));
    }
    if (ok && sk->nvalues > 0) x->nsweep++;
  }
}

/* ------------------------------------------------------------ the commitment file */

int spec_commitment_file_load(const char *path, double *p, int *n, double *mass, amoe_diag *d) {
  ydoc y;
  int before = d->n;
  if (!spec_load_file(&y, path, d)) return 0;
  amoe_spec tmp;
  memset(&tmp, 0, sizeof tmp);
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  if (!root || root->type != YAML_MAPPING_NODE)
    amoe_diag_add(d, "%s:1:1: expected a mapping with key 'table'", path);
  else
    parse_commitment(&y, root, &tmp);
  yaml_document_delete(&y.doc);
  if (d->n == before && (tmp.commitment.mode != AMOE_COMMIT_TABLE || tmp.commitment.table_n == 0))
    amoe_diag_add(d, "%s:1:1: expected 'table: [p0, p1, ...]'", path);
  if (d->n != before) return 0;
  memcpy(p, tmp.commitment.table, sizeof(double) * (size_t)tmp.commitment.table_n);
  *n = tmp.commitment.table_n;
  memset(mass, 0, sizeof(double) * AMOE_MAX_DEPTH);
  memcpy(mass, tmp.commitment.mass, sizeof(double) * (size_t)tmp.commitment.mass_n);
  return 1;
}

