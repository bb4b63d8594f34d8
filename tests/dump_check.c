/* Reads a selection dump (docs/design.md §10) back and checks it against itself and
 * the run's summary.csv: ids ascending and in range, executed ⊆ eligible,
 * fetched ⊆ executed, natural executes its union, and the mean |executed|
 * and |union| per policy equal the summary's executed_mean and union_mean.
 * usage: dump_check DUMP.jsonl SUMMARY.csv EXPERTS */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "check.h"

#define MAXP 32

static int ids(json_t *o, const char *key, int E, unsigned char *set) {
  json_t *a = json_object_get(o, key);
  memset(set, 0, (size_t)E);
  if (!json_is_array(a)) return -1;
  int prev = -1;
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_int_t x = json_integer_value(json_array_get(a, i));
    if (!json_is_integer(json_array_get(a, i)) || x <= prev || x >= E) return -1;
    set[x] = 1;
    prev = (int)x;
  }
  return (int)json_array_size(a);
}

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  int E = atoi(argv[3]);
  char names[MAXP][96];
  double sum_x[MAXP] = {0}, sum_u[MAXP] = {0}, cnt[MAXP] = {0};
  int np = 0, lines = 0, bad = 0;
  FILE *f = fopen(argv[1], "r");
  CHECK(f != NULL, "open %s", argv[1]);
  if (!f) return check_done();
  char *line = NULL;
  size_t cap = 0;
  unsigned char U[1024], S[1024], X[1024], F[1024];
  while (getline(&line, &cap, f) > 0) {
    json_error_t je;
    json_t *o = json_loads(line, 0, &je);
    lines++;
    if (!o) {
      bad++;
      continue;
    }
    const char *pol = json_string_value(json_object_get(o, "policy"));
    int nu = ids(o, "union", E, U), ns = ids(o, "eligible", E, S), nx = ids(o, "executed", E, X),
        nf = ids(o, "fetched", E, F);
    if (!pol || nu < 0 || ns < 0 || nx < 0 || nf < 0 || !json_is_integer(json_object_get(o, "block")) ||
        !json_is_integer(json_object_get(o, "layer"))) {
      bad++;
      json_decref(o);
      continue;
    }
    for (int x = 0; x < E; x++) {
      bad += X[x] && !S[x];
      bad += F[x] && !X[x];
      if (!strcmp(pol, "natural")) bad += U[x] != X[x];
    }
    int p = 0;
    while (p < np && strcmp(names[p], pol)) p++;
    if (p == np && np < MAXP) snprintf(names[np++], sizeof names[0], "%s", pol);
    sum_x[p] += nx;
    sum_u[p] += nu;
    cnt[p] += 1;
    json_decref(o);
  }
  free(line);
  fclose(f);
  CHECK(lines > 0 && bad == 0, "%d bad records of %d", bad, lines);
  /* compare with summary.csv by column name */
  f = fopen(argv[2], "r");
  CHECK(f != NULL, "open %s", argv[2]);
  if (!f) return check_done();
  char hdr[4096], row[4096];
  CHECK(fgets(hdr, sizeof hdr, f) != NULL, "header");
  int cpol = -1, cx = -1, cu = -1, col = 0;
  for (char *t = strtok(hdr, ",\n"); t; t = strtok(NULL, ",\n"), col++) {
    if (!strcmp(t, "policy")) cpol = col;
    if (!strcmp(t, "executed_mean")) cx = col;
    if (!strcmp(t, "union_mean")) cu = col;
  }
  CHECK(cpol >= 0 && cx >= 0 && cu >= 0, "summary.csv lacks policy, executed_mean or union_mean");
  if (cpol < 0 || cx < 0 || cu < 0) {
    fclose(f);
    return check_done();
  }
  int matched = 0;
  while (fgets(row, sizeof row, f)) {
    char *fields[64];
    int nfld = 0;
    for (char *t = strtok(row, ",\n"); t && nfld < 64; t = strtok(NULL, ",\n")) fields[nfld++] = t;
    if (cpol >= nfld || cx >= nfld || cu >= nfld) continue;
    for (int p = 0; p < np; p++)
      if (!strcmp(names[p], fields[cpol])) {
        double ex = atof(fields[cx]), un = atof(fields[cu]);
        CHECK(fabs(sum_x[p] / cnt[p] - ex) < 1e-9 * (1 + ex), "%s: dump executed %.6f vs summary %.6f", names[p],
              sum_x[p] / cnt[p], ex);
        CHECK(fabs(sum_u[p] / cnt[p] - un) < 1e-9 * (1 + un), "%s: dump union %.6f vs summary %.6f", names[p],
              sum_u[p] / cnt[p], un);
        matched++;
      }
  }
  fclose(f);
  CHECK(matched == np && np > 1, "matched %d of %d policies", matched, np);
  return check_done();
}
