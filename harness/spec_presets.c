/* Presets: where they live, and the one loader of a model, hardware,
 * interconnect, engine or host preset (and a hardware calibration over it); a
 * deployment preset, the four sections together. */
#include "spec_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ presets */

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

void amoe_presets_dir(char *out, size_t n, const char *kind, const char *spec_path) {
  const char *env = getenv("ACCEPTMOE_DATA");
  char buf[AMOE_PATH_MAX + 64];
  if (env && env[0]) {
    snprintf(out, n, "%s/%s", env, kind);
    return;
  }
  snprintf(buf, sizeof buf, "workloads/%s", kind);
  if (is_dir(buf)) {
    snprintf(out, n, "%s", buf);
    return;
  }
  if (spec_path) { /* a spec in workloads/specs/ finds its siblings */
    char dir[AMOE_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", spec_path);
    char *slash = strrchr(dir, '/');
    if (slash) {
      *slash = 0;
      snprintf(buf, sizeof buf, "%s/../%s", dir, kind);
      if (is_dir(buf)) {
        snprintf(out, n, "%s", buf);
        return;
      }
    }
  }
  snprintf(out, n, "%s/workloads/%s", AMOE_SOURCE_DIR, kind);
}

/* The sections a preset fills: where its files live, what a message calls
 * it, and what the section starts from before the preset's keys. */
static void reset_model(amoe_spec *s) {
  memset(&s->model, 0, sizeof s->model);
  amoe_model_routing_defaults(&s->model);
}
static void reset_hw(amoe_spec *s) {
  memset(&s->hw, 0, sizeof s->hw);
  s->hw.moe_eta = 1; /* a preset without it: expert streaming at hbm_bw */
  s->hw.cuda_graphs = s->hw.overlap_scheduler = 1; /* and an engine with CUDA graphs and the overlap scheduler */
  s->hw.gpus = 1;
}
static void reset_ic(amoe_spec *s) { memset(&s->hw.ic, 0, sizeof s->hw.ic); }
static void reset_engine(amoe_spec *s) { spec_engine_defaults(&s->engine); }
static void reset_host(amoe_spec *s) {
  memset(&s->host, 0, sizeof s->host);
  s->host.sockets = 1;
}
static const struct {
  const char *section, *dir, *what;
  void (*reset)(amoe_spec *s);
  size_t name_off; /* the section's name field */
} SECTIONS[] = {
    {"model", "models", "model", reset_model, offsetof(amoe_spec, model.name)},
    {"hardware", "hw", "hardware", reset_hw, offsetof(amoe_spec, hw.name)},
    {"hardware.interconnect", "interconnect", "interconnect", reset_ic, offsetof(amoe_spec, hw.ic.name)},
    {"engine", "engines", "engine", reset_engine, offsetof(amoe_spec, engine.name)},
    {"host", "hosts", "host", reset_host, offsetof(amoe_spec, host.name)},
};

/* Measured numbers over a hardware preset's leads (docs/design.md §4):
 * results/calibration/NAME.yaml, unless ACCEPTMOE_CALIBRATION is off. */
static int apply_calibration(amoe_spec *s, const char *name, amoe_diag *d) {
  s->hw_calibration[0] = 0;
  char cal[AMOE_PATH_MAX + 200];
  struct stat sb;
  const char *env = getenv("ACCEPTMOE_CALIBRATION");
  if (env && !strcmp(env, "off")) return 1;
  snprintf(cal, sizeof cal, "%s/%s.yaml", env && env[0] ? env : "results/calibration", name);
  if (stat(cal, &sb) != 0) snprintf(cal, sizeof cal, "%s/results/calibration/%s.yaml", AMOE_SOURCE_DIR, name);
  if (stat(cal, &sb) != 0) return 1;
  ydoc c;
  if (!spec_load_file(&c, cal, d)) return 0;
  yaml_node_t *croot = yaml_document_get_root_node(&c.doc);
  if (croot && croot->type == YAML_MAPPING_NODE) spec_walk(&c, croot, "hardware", s, 1);
  else amoe_diag_add(d, "%s: a calibration file must be a mapping", cal);
  yaml_document_delete(&c.doc);
  snprintf(s->hw_calibration, sizeof s->hw_calibration, "%.1000s", cal);
  return 1;
}

int spec_load_preset(amoe_spec *s, const char *section, const char *name, const char *where, amoe_diag *d) {
  size_t i = 0;
  while (i < sizeof SECTIONS / sizeof SECTIONS[0] && strcmp(SECTIONS[i].section, section)) i++;
  if (i == sizeof SECTIONS / sizeof SECTIONS[0]) {
    amoe_diag_add(d, "%s: '%s' takes no preset", where, section);
    return 0;
  }
  char dir[AMOE_PATH_MAX], path[AMOE_PATH_MAX + 160];
  amoe_presets_dir(dir, sizeof dir, SECTIONS[i].dir, NULL);
  for (const char *c = name; *c; c++) /* a file name in the presets folder, nothing that leaves it */
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
          *c == '_' || *c == '.') || (c == name && *c == '.')) {
      amoe_diag_add(d, "%s: '%s' is not a%s %s preset name", where, name, SECTIONS[i].what[0] == 'i' ? "n" : "",
                    SECTIONS[i].what);
      return 0;
    }
  snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
  struct stat sb;
  if (stat(path, &sb) != 0) {
    amoe_diag_add(d, "%s: unknown %s preset '%s' (no %s)", where, SECTIONS[i].what, name, path);
    return 0;
  }
  ydoc y;
  const int before = d->n;
  if (!spec_load_file(&y, path, d)) return 0;
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  SECTIONS[i].reset(s);
  if (!root || root->type != YAML_MAPPING_NODE) amoe_diag_add(d, "%s: a preset must be a mapping", path);
  else spec_walk(&y, root, section, s, 1);
  yaml_document_delete(&y.doc);
  char *nm = (char *)s + SECTIONS[i].name_off;
  if (!nm[0]) snprintf(nm, AMOE_NAME_MAX, "%s", name);
  if (!strcmp(section, "hardware") && d->n == before && !apply_calibration(s, name, d)) return 0;
  return d->n == before;
}

/* A deployment (docs/design.md §20): model, hardware, parallel and engine
 * as one preset of workloads/deployments/ (or a file path), as `acceptmoe
 * fit --cells` writes them; walked as a spec's own keys would be. */
int spec_load_deployment(amoe_spec *s, const char *name, const char *where, const char *spec_path, amoe_diag *d) {
  char dir[AMOE_PATH_MAX], path[AMOE_PATH_MAX + 160];
  const size_t n = strlen(name);
  if (strchr(name, '/') || (n > 5 && !strcmp(name + n - 5, ".yaml"))) {
    snprintf(path, sizeof path, "%s", name);
  } else {
    for (const char *c = name; *c; c++)
      if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
            *c == '_' || *c == '.') || (c == name && *c == '.')) {
        amoe_diag_add(d, "%s: '%s' is not a deployment preset name or a path", where, name);
        return 0;
      }
    amoe_presets_dir(dir, sizeof dir, "deployments", spec_path);
    snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
  }
  struct stat sb;
  if (!name[0] || stat(path, &sb) != 0) {
    amoe_diag_add(d, "%s: unknown deployment '%s' (no %s; `acceptmoe fit --cells` writes them)", where, name, path);
    return 0;
  }
  ydoc y;
  const int before = d->n;
  if (!spec_load_file(&y, path, d)) return 0;
  yaml_node_t *root = yaml_document_get_root_node(&y.doc);
  if (!root || root->type != YAML_MAPPING_NODE) {
    amoe_diag_add(d, "%s: a deployment must be a mapping", path);
  } else {
    static const char *const OK[] = {"model", "hardware", "parallel", "engine", "source", "sources", "notes", "measured"};
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
      yaml_node_t *k = yaml_document_get_node(&y.doc, p->key);
      size_t i = 0;
      while (k->type == YAML_SCALAR_NODE && i < sizeof OK / sizeof OK[0] && strcmp(OK[i], spec_scalar(k))) i++;
      if (k->type != YAML_SCALAR_NODE || i == sizeof OK / sizeof OK[0])
        amoe_diag_add(d, "%s:%lu:%lu: a deployment sets model, hardware, parallel and engine only, not '%s'", path,
                      (unsigned long)k->start_mark.line + 1, (unsigned long)k->start_mark.column + 1,
                      k->type == YAML_SCALAR_NODE ? spec_scalar(k) : "?");
    }
    if (d->n == before) spec_walk(&y, root, "", s, 1);
  }
  yaml_document_delete(&y.doc);
  return d->n == before;
}
