/* Adding a verifier through the policy table alone (docs/adding-a-policy.md).
 * "window" keeps `width` consecutive experts from `offset`: one function
 * and one table row, added here at run time with amoe_verifier_add exactly
 * as a built-in row sits in policy.c. No other code learns its name, yet
 * the spec loader takes it with its parameters (defaults, ranges, the
 * required one), labels it, writes it into the resolved spec, and the run
 * loop executes it: every layer's S is the window, every executed expert
 * lies in it, and summary.csv gains its rows. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "policy.h"
#include "results.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"

/* The policy's own file would hold this function. */
static void verifier_window(const amoe_vctx *c, uint8_t *S) {
  const int width = (int)c->row->vparam[0], offset = (int)c->row->vparam[1];
  memset(S, 0, (size_t)c->experts);
  for (int i = 0; i < width; i++) S[(offset + i) % c->experts] = 1;
}

/* ... and policy.c this row. */
static const amoe_verifier_def WINDOW = {
    .name = "window",
    .params = {{.key = "width", .tag = "w", .def = NAN, .min = 1, .max = AMOE_MAX_EXPERTS, .integer = 1,
                .expert_count = 1, .shown_if_default = 1},
               {.key = "offset", .tag = "off", .def = 0, .min = 0, .max = AMOE_MAX_EXPERTS - 1, .integer = 1}},
    .logits = AMOE_LOGITS_TOP,
    .select = verifier_window,
};

/* A draft added the same way: the root alone (a block verifies nothing). */
static int draft_root(const amoe_dctx *c, int *out) {
  (void)c;
  out[0] = 0;
  return 1;
}
static const amoe_draft_def ROOT = {.name = "root-only", .choose = draft_root};

typedef struct {
  const amoe_spec *s;
  int bad_s, bad_exec, layers_seen[AMOE_MAX_POLICIES];
} watch;

/* every (row, block, layer): the toy rows' S is their window and nothing
 * outside S executes */
static amoe_status on_select(void *ctx, int row, uint64_t block, int layer, const uint8_t *uni,
                             const uint8_t *eligible, const uint8_t *executed, const uint8_t *fetched, int experts,
                             amoe_err *e) {
  (void)block, (void)layer, (void)uni, (void)fetched, (void)e;
  watch *w = ctx;
  const amoe_policy_row *r = &w->s->policies[row];
  w->layers_seen[row]++;
  for (int x = 0; x < experts; x++) w->bad_exec += executed[x] && !eligible[x];
  if (strcmp(amoe_verifier_table[r->verifier].name, "window")) return AMOE_OK;
  const int width = (int)r->vparam[0], offset = (int)r->vparam[1];
  for (int x = 0; x < experts; x++) w->bad_s += eligible[x] != ((x - offset + experts) % experts < width);
  return AMOE_OK;
}

int main(void) {
  /* the built-in counts match the rows written in policy.c */
  int rows_ok = amoe_verifier_table[amoe_verifier_rows()].name == NULL && amoe_draft_table[amoe_draft_rows()].name == NULL;
  for (int i = 0; i < amoe_verifier_rows(); i++) rows_ok &= amoe_verifier_table[i].name && amoe_verifier_table[i].select;
  for (int i = 0; i < amoe_draft_rows(); i++) rows_ok &= amoe_draft_table[i].name && amoe_draft_table[i].choose;
  CHECK(rows_ok, "amoe_verifier_rows() / amoe_draft_rows() match their tables");
  const int v = amoe_verifier_add(&WINDOW);
  CHECK(v >= 0 && amoe_verifier_find("window") == v, "the row is added");
  CHECK(amoe_verifier_add(&WINDOW) < 0, "a name is taken once");
  const int dr = amoe_draft_add(&ROOT);
  CHECK(dr >= 0 && amoe_draft_find("root-only") == dr, "a draft row is added");

  /* the spec loader: parameters, defaults, labels */
  amoe_diag d = {0};
  static amoe_experiment x;
  static amoe_spec s;
  const char *p = check_write_tmp("name: toy\n"
                            "model: {preset: olmoe-1b-7b}\n"
                            "hardware: h200\n"
                            "workload: {blocks: 12, seed: 5, tree: {nodes: 16}}\n"
                            "policies: [natural, {verifier: window, width: 12}, {verifier: window, width: 10, "
                            "offset: 30}, {draft: ecospec, verifier: window, width: 9}, root-only]\n");
  CHECK(amoe_experiment_load(&x, p, NULL, 0, &d) == AMOE_OK, "load: %s", d.n ? d.msgs[0] : "");
  amoe_diag_free(&d);
  CHECK(x.base.npolicies == 5, "five rows (%d)", x.base.npolicies);
  CHECK(!strcmp(x.base.policies[4].label, "root-only"), "label %s", x.base.policies[4].label);
  CHECK(!strcmp(x.base.policies[1].label, "window/w=12"), "label %s", x.base.policies[1].label);
  CHECK(!strcmp(x.base.policies[2].label, "window/w=10/off=30"), "label %s", x.base.policies[2].label);
  CHECK(!strcmp(x.base.policies[3].label, "ecospec/acc=0.8+window/w=9"), "label %s",
        x.base.policies[3].label);
  CHECK(x.base.policies[1].vparam[1] == 0, "offset defaults to 0");
  CHECK(amoe_policy_budget(&x.base.policies[2]) == 10, "width is the budget column");

  /* the resolved spec names the parameters and loads to the same rows */
  char *txt = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&txt, &len);
  amoe_spec_write_yaml(mem, &x);
  fclose(mem);
  CHECK(strstr(txt, "{draft: eagle, verifier: window, width: 10, offset: 30}") != NULL, "resolved:\n%s", txt);
  static amoe_experiment x2;
  p = check_write_tmp(txt);
  free(txt);
  CHECK(amoe_experiment_load(&x2, p, NULL, 0, &d) == AMOE_OK && x2.base.npolicies == 5 &&
            !strcmp(x2.base.policies[2].label, "window/w=10/off=30"),
        "resolved spec reloads: %s", d.n ? d.msgs[0] : "");
  amoe_diag_free(&d);

  /* its parameters are checked as the table says */
  const char *bad[][2] = {
      {"policies: [{verifier: window}]", "verifier window needs width"},
      {"policies: [{verifier: window, width: 2.5}]", "width must be an integer"},
      {"policies: [{verifier: window, width: 4, offset: -1}]", "offset = -1 is out of range"},
      {"policies: [{verifier: window, width: 4, widht: 5}]", "this policy takes: draft, verifier, width, offset"},
      {"policies: [{verifier: window, width: 100}]", "width 100 must be in top_k..experts (8..64)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[256];
    snprintf(text, sizeof text, "model: olmoe-1b-7b\nhardware: h200\n%s\n", bad[i][0]);
    p = check_write_tmp(text);
    int ok = amoe_experiment_load(&x2, p, NULL, 0, &d) == AMOE_OK && amoe_experiment_point(&x2, 0, &s, &d) == AMOE_OK;
    CHECK(!ok && d.n >= 1 && strstr(d.msgs[0], bad[i][1]), "%s: %s", bad[i][0], d.n ? d.msgs[0] : "accepted");
    amoe_diag_free(&d);
  }

  /* the run loop executes it */
  CHECK(amoe_experiment_point(&x, 0, &s, &d) == AMOE_OK, "point 0");
  amoe_diag_free(&d);
  amoe_source *src;
  amoe_err e;
  CHECK(amoe_source_open(&src, &s.workload, &s.model, &e) == AMOE_OK, "%s", e.msg);
  watch w = {.s = &s};
  amoe_run_hooks h = {.ctx = &w, .on_select = on_select};
  static const amoe_offline offline = {.p = {1, 0.75, 0.55, 0.4, 0.28, 0.2}, .n = 6};
  amoe_row_result rows[AMOE_MAX_POLICIES];
  CHECK(amoe_run(&s, &offline, src, &h, rows, &e) == AMOE_OK, "%s", e.msg);
  CHECK(w.bad_s == 0, "window rows: S is the window (%d mismatches)", w.bad_s);
  CHECK(w.bad_exec == 0, "executed within S (%d outside)", w.bad_exec);
  for (int i = 0; i < s.npolicies; i++)
    CHECK(w.layers_seen[i] == 12 * s.model.moe_layers, "row %d saw %d layers", i, w.layers_seen[i]);
  CHECK(rows[1].tot.eligible_sum == 12.0 * rows[1].tot.passes * s.model.moe_layers &&
            rows[2].tot.eligible_sum == 10.0 * rows[2].tot.passes * s.model.moe_layers,
        "eligible = width per layer");
  CHECK(rows[0].tot.displaced == 0 && rows[1].tot.displaced > 0, "natural displaces nothing, a window does");
  CHECK(rows[4].tot.verified == rows[4].tot.blocks && rows[4].tot.committed == rows[4].tot.blocks,
        "root-only: one node verified and one token committed per block");
  /* ... and the results: its rows in summary.csv, named and budgeted by the table */
  char dir[] = "/tmp/amoe_toy_out_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  amoe_results *res;
  const amoe_results_opts ro = {.dir = dir, .x = &x, .spec_path = "toy", .shard_n = 1};
  CHECK(amoe_results_open(&res, &ro, &e) == AMOE_OK, "%s", e.msg);
  amoe_results_begin_point(res, 0, &s);
  const amoe_point_result pr = {0, &s, rows, amoe_source_provenance(src), "table", &offline, NULL, NULL};
  CHECK(amoe_results_point(res, &pr, &e) != NULL, "%s", e.msg);
  CHECK(amoe_results_commit(res, &e) == AMOE_OK, "%s", e.msg);
  amoe_results_close(res);
  char path[300], line[2048];
  snprintf(path, sizeof path, "%s/summary.csv", dir);
  FILE *f = fopen(path, "r");
  int found = 0, lines = 0;
  while (f && fgets(line, sizeof line, f)) {
    lines++;
    found += !strncmp(line, "0,olmoe-1b-7b,h200,window/w=10/off=30,eagle,window,10,12,", 57);
  }
  if (f) fclose(f);
  CHECK(lines == 6 && found == 1, "summary.csv: %d lines, the window/w=10/off=30 row %d times", lines, found);
  for (const char *n = "summary.csv\0layers.csv\0meta.json\0spec.resolved.yaml\0"; *n; n += strlen(n) + 1) {
    snprintf(path, sizeof path, "%s/%s", dir, n);
    remove(path);
  }
  rmdir(dir);
  for (int i = 0; i < s.npolicies; i++) amoe_row_result_free(&rows[i]);
  amoe_source_close(src);
  remove(p);
  return check_done();
}
