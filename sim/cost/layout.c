#include "layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct amoe_layout {
  int layers, experts, groups;
  uint8_t *ncopy; /* [l][e] */
  int16_t *grp;   /* [l][e][groups]: the groups holding a copy */
  /* from ncopy and grp (index_copies): a single copy's group or -1 [l][e],
   * and each layer's replicated experts, ascending, rep[rep_at[l]..rep_at[l + 1]) */
  int16_t *home;
  uint16_t *rep;
  int *rep_at;
  double *work;   /* [groups] scratch */
  int *n;         /* [groups] scratch */
};

amoe_layout *amoe_layout_new(int layers, int experts, int groups) {
  if (layers < 1 || experts < 1 || groups < 1 || groups > AMOE_MAX_GPUS) return NULL;
  amoe_layout *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->layers = layers, t->experts = experts, t->groups = groups;
  const size_t ne = (size_t)layers * experts;
  t->ncopy = calloc(ne, 1);
  t->grp = calloc(ne * groups, sizeof *t->grp);
  t->home = calloc(ne, sizeof *t->home);
  t->rep = calloc(ne, sizeof *t->rep);
  t->rep_at = calloc((size_t)layers + 1, sizeof *t->rep_at);
  t->work = calloc((size_t)groups, sizeof *t->work);
  t->n = calloc((size_t)groups, sizeof *t->n);
  if (!t->ncopy || !t->grp || !t->home || !t->rep || !t->rep_at || !t->work || !t->n) {
    amoe_layout_free(t);
    return NULL;
  }
  amoe_layout_contiguous(t);
  return t;
}

void amoe_layout_free(amoe_layout *t) {
  if (!t) return;
  free(t->ncopy);
  free(t->grp);
  free(t->home);
  free(t->rep);
  free(t->rep_at);
  free(t->work);
  free(t->n);
  free(t);
}

int amoe_layout_groups(const amoe_layout *t) { return t->groups; }

/* home and the replicated experts' lists, after every change of placement */
static void index_copies(amoe_layout *t) {
  const int E = t->experts;
  int r = 0;
  for (int l = 0; l < t->layers; l++) {
    t->rep_at[l] = r;
    for (int x = 0; x < E; x++) {
      const size_t k = (size_t)l * E + x;
      t->home[k] = t->ncopy[k] == 1 ? t->grp[k * t->groups] : -1;
      if (t->ncopy[k] > 1) t->rep[r++] = (uint16_t)x;
    }
  }
  t->rep_at[t->layers] = r;
}

static void place_one(amoe_layout *t, int l, int x, int g) {
  const size_t k = (size_t)l * t->experts + x;
  t->ncopy[k] = 1;
  t->grp[k * t->groups] = (int16_t)g;
}

void amoe_layout_contiguous(amoe_layout *t) {
  for (int l = 0; l < t->layers; l++)
    for (int x = 0; x < t->experts; x++) place_one(t, l, x, (int)((long)x * t->groups / t->experts));
  index_copies(t);
}

void amoe_layout_round_robin(amoe_layout *t) {
  for (int l = 0; l < t->layers; l++)
    for (int x = 0; x < t->experts; x++) place_one(t, l, x, x % t->groups);
  index_copies(t);
}

int amoe_layout_copies(const amoe_layout *t, int l, int x, int *g) {
  const size_t k = (size_t)l * t->experts + x;
  for (int c = 0; c < t->ncopy[k]; c++) g[c] = t->grp[k * t->groups + c];
  return t->ncopy[k];
}

amoe_status amoe_layout_balanced(amoe_layout *t, const double *load, int redundant, amoe_err *e) {
  const int E = t->experts, G = t->groups;
  if (redundant < 0 || redundant > E * (G - 1))
    return amoe_fail(e, AMOE_EINVAL, "parallel.redundant %d: at most %d extra copies fit %d groups", redundant,
                     E * (G - 1), G);
  const int units = E + redundant, cap = (units + G - 1) / G;
  int *copies = malloc((size_t)E * sizeof *copies), *order = malloc((size_t)units * sizeof *order);
  double *gl = malloc((size_t)G * sizeof *gl);
  int *gn = malloc((size_t)G * sizeof *gn);
  if (!copies || !order || !gl || !gn) {
    free(copies), free(order), free(gl), free(gn);
    return amoe_fail(e, AMOE_ENOMEM, "out of memory for the placement");
  }
  for (int l = 0; l < t->layers; l++) {
    const double *ld = load + (size_t)l * E;
    for (int x = 0; x < E; x++) copies[x] = 1;
    for (int r = 0; r < redundant; r++) { /* the most load per copy gets a copy (ties: the lower id) */
      int best = -1;
      for (int x = 0; x < E; x++)
        if (copies[x] < G && (best < 0 || ld[x] / copies[x] > ld[best] / copies[best])) best = x;
      copies[best]++;
    }
    int u = 0; /* every copy, heaviest first (ties: lower id) */
    for (int x = 0; x < E; x++)
      for (int c = 0; c < copies[x]; c++) order[u++] = x;
    for (int i = 1; i < u; i++) { /* insertion sort by load per copy, descending, stable */
      const int v = order[i];
      const double kv = ld[v] / copies[v];
      int j = i - 1;
      while (j >= 0 && ld[order[j]] / copies[order[j]] < kv) {
        order[j + 1] = order[j];
        j--;
      }
      order[j + 1] = v;
    }
    for (int g = 0; g < G; g++) gl[g] = 0, gn[g] = 0;
    for (int x = 0; x < E; x++) t->ncopy[(size_t)l * E + x] = 0;
    for (int i = 0; i < u; i++) {
      const int x = order[i];
      const size_t k = (size_t)l * E + x;
      int best = -1;
      for (int g = 0; g < G; g++) {
        int has = 0;
        for (int c = 0; c < t->ncopy[k]; c++) has |= t->grp[k * G + c] == g;
        if (has || gn[g] >= cap) continue;
        if (best < 0 || gl[g] < gl[best]) best = g;
      }
      if (best < 0) /* (cannot happen: a copy count is at most G and the room is enough) */
        for (int g = 0; g < G && best < 0; g++) best = gn[g] < cap ? g : -1;
      gl[best] += ld[x] / copies[x];
      gn[best]++;
      t->grp[k * G + t->ncopy[k]++] = (int16_t)best;
    }
  }
  free(copies), free(order), free(gl), free(gn);
  index_copies(t);
  return AMOE_OK;
}

amoe_status amoe_layout_read(amoe_layout *t, const char *path, amoe_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) return amoe_fail(e, AMOE_EIO, "%s: cannot read the placement file", path);
  memset(t->ncopy, 0, (size_t)t->layers * t->experts);
  char line[256];
  long ln = 0;
  amoe_status st = AMOE_OK;
  while (st == AMOE_OK && fgets(line, sizeof line, f)) {
    ln++;
    char *h = strchr(line, '#');
    if (h) *h = 0;
    int l, x, g;
    char extra;
    if (sscanf(line, " %d , %d , %d %c", &l, &x, &g, &extra) != 3) {
      int blank = 1;
      for (char *c = line; *c; c++) blank &= *c == ' ' || *c == '\t' || *c == '\r' || *c == '\n';
      if (!blank) st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: expected layer,expert,group", path, ln);
      continue;
    }
    if (l < 0 || l >= t->layers || x < 0 || x >= t->experts || g < 0 || g >= t->groups) {
      st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: layer %d, expert %d or group %d out of range (%d layers, %d experts, %d groups)",
                     path, ln, l, x, g, t->layers, t->experts, t->groups);
      break;
    }
    const size_t k = (size_t)l * t->experts + x;
    for (int c = 0; c < t->ncopy[k]; c++)
      if (t->grp[k * t->groups + c] == g) st = amoe_fail(e, AMOE_EFORMAT, "%s:%ld: expert %d of layer %d is on group %d twice", path, ln, x, l, g);
    if (st == AMOE_OK) t->grp[k * t->groups + t->ncopy[k]++] = (int16_t)g;
  }
  fclose(f);
  for (int l = 0; l < t->layers && st == AMOE_OK; l++)
    for (int x = 0; x < t->experts && st == AMOE_OK; x++)
      if (!t->ncopy[(size_t)l * t->experts + x]) st = amoe_fail(e, AMOE_EFORMAT, "%s: expert %d of layer %d has no group", path, x, l);
  index_copies(t);
  return st;
}

void amoe_layout_layer_groups(const amoe_layout *t, int l, const uint8_t *X, const int *count, amoe_expert_coef ec,
                              int moe_tp, double *work, int *n) {
  const int G = t->groups;
  for (int g = 0; g < G; g++) work[g] = 0, n[g] = 0;
  const int16_t *home = t->home + (size_t)l * t->experts;
  for (int x = 0; x < t->experts; x++) { /* the single copies first: then the work a replica joins is known */
    if (!X[x] || home[x] < 0) continue;
    work[home[x]] += (count ? amoe_cost_expert_at(ec, count[x]) : ec.mem_s) / moe_tp;
    n[home[x]]++;
  }
  for (int i = t->rep_at[l]; i < t->rep_at[l + 1]; i++) {
    const int x = t->rep[i];
    if (!X[x]) continue;
    const int16_t *cg = t->grp + ((size_t)l * t->experts + x) * G;
    int g = cg[0];
    for (int c = 1; c < t->ncopy[(size_t)l * t->experts + x]; c++)
      if (work[cg[c]] < work[g] || (work[cg[c]] == work[g] && cg[c] < g)) g = cg[c];
    work[g] += (count ? amoe_cost_expert_at(ec, count[x]) : ec.mem_s) / moe_tp;
    n[g]++;
  }
}

double amoe_layout_layer(const amoe_layout *t, int l, const uint8_t *X, const int *count, amoe_expert_coef ec,
                         int moe_tp, int *busiest_n) {
  amoe_layout_layer_groups(t, l, X, count, ec, moe_tp, t->work, t->n);
  int b = 0;
  for (int g = 1; g < t->groups; g++)
    if (t->work[g] > t->work[b]) b = g;
  *busiest_n = t->n[b];
  return t->work[b];
}
