#include "merge.h"
#include "grow.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "results.h"
#include "spec.h"

typedef struct {
  long point, order; /* the sweep point; the line's place in the shards' order */
  char *text;
} mline;

static int by_point(const void *a, const void *b) {
  const mline *x = a, *y = b;
  if (x->point != y->point) return x->point < y->point ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      char *nb = realloc(buf, 2 * cap + 1);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[n] = 0;
  *len = n;
  return buf;
}

static int exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}

/* Joins one CSV of every shard: the header once (it must be the same in
 * all), then every row ordered by its sweep point (the first column), rows
 * of one point in the order they were written. */
static amoe_status merge_csv(char *const *dirs, int n, const char *name, const char *out, amoe_err *e) {
  char path[AMOE_PATH_MAX + 64];
  char *header = NULL, **bufs = calloc((size_t)n, sizeof *bufs);
  mline *lines = NULL;
  size_t nl = 0, cap = 0;
  amoe_status st = bufs ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  for (int i = 0; i < n && !st; i++) {
    if (amoe_interrupt) {
      st = amoe_fail(e, AMOE_EINTR, "interrupted");
      break;
    }
    snprintf(path, sizeof path, "%s/%s", dirs[i], name);
    size_t len;
    bufs[i] = slurp(path, &len);
    if (!bufs[i]) {
      st = amoe_fail(e, AMOE_EIO, "%s: cannot read", path);
      break;
    }
    char *save = NULL, *line = strtok_r(bufs[i], "\n", &save);
    if (!line) {
      st = amoe_fail(e, AMOE_EFORMAT, "%s: empty", path);
      break;
    }
    if (!header) header = line;
    else if (strcmp(header, line)) {
      st = amoe_fail(e, AMOE_EFORMAT, "%s: its header differs from %s/%s's: shards of different runs", path,
                     dirs[0], name);
      break;
    }
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
      char *end;
      long p = strtol(line, &end, 10);
      if (end == line || *end != ',') {
        st = amoe_fail(e, AMOE_EFORMAT, "%s: a row without its sweep point: %.60s", path, line);
        break;
      }
      mline *nlines = amoe_grow(lines, &cap, nl + 1, sizeof *lines, 1024);
      if (!nlines) {
        st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
        break;
      }
      lines = nlines;
      lines[nl] = (mline){p, (long)nl, line};
      nl++;
    }
  }
  if (!st) {
    qsort(lines, nl, sizeof *lines, by_point);
    amoe_afile a;
    snprintf(path, sizeof path, "%s/%s", out, name);
    st = amoe_afile_open(&a, path, e);
    if (!st) {
      fprintf(a.f, "%s\n", header);
      for (size_t i = 0; i < nl; i++) fprintf(a.f, "%s\n", lines[i].text);
      st = amoe_afile_commit(&a, e);
    }
    amoe_afile_abort(&a);
  }
  for (int i = 0; bufs && i < n; i++) free(bufs[i]);
  free(bufs);
  free(lines);
  return st;
}

static int point_of(const void *a, const void *b) {
  json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "point"));
  json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "point"));
  return (x > y) - (x < y);
}

/* The same key in both (as text), or both without it. */
static int same_field(json_t *a, json_t *b, const char *key) {
  json_t *x = json_object_get(a, key), *y = json_object_get(b, key);
  if (!x || !y) return !x && !y;
  return json_equal(x, y);
}

amoe_status amoe_merge(char *const *dirs, int n, const char *out, amoe_err *e) {
  if (n < 1) return amoe_fail(e, AMOE_EINVAL, "merge: no partial results given");
  char path[AMOE_PATH_MAX + 64];
  json_t **metas = calloc((size_t)n, sizeof *metas);
  if (!metas) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  amoe_status st = AMOE_OK;
  int count = 0;
  unsigned char *seen = NULL;
  for (int i = 0; i < n && !st; i++) {
    if (amoe_interrupt) {
      st = amoe_fail(e, AMOE_EINTR, "interrupted");
      break;
    }
    snprintf(path, sizeof path, "%s/meta.json", dirs[i]);
    json_error_t je;
    metas[i] = json_load_file(path, 0, &je);
    if (!metas[i]) {
      st = amoe_fail(e, AMOE_EFORMAT, "%s:%d:%d: %s", path, je.line, je.column, je.text);
      break;
    }
    json_t *sh = json_object_get(metas[i], "shard");
    const int c = sh ? (int)json_integer_value(json_object_get(sh, "count")) : 1;
    const int idx = sh ? (int)json_integer_value(json_object_get(sh, "index")) : 0;
    if (i == 0) {
      count = c;
      seen = calloc((size_t)(c > 0 ? c : 1), 1);
      if (!seen) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
    } else if (c != count || !same_field(metas[0], metas[i], "spec_hash") ||
               !same_field(metas[0], metas[i], "git_commit") || !same_field(metas[0], metas[i], "version")) {
      st = amoe_fail(e, AMOE_EINVAL,
                     "%s: not a shard of the same run as %s (spec, commit or shard count differ): refusing to merge",
                     path, dirs[0]);
    }
    if (!st && (idx < 0 || idx >= count || seen[idx]))
      st = amoe_fail(e, AMOE_EINVAL, "%s: shard %d/%d given twice or out of range", path, idx, count);
    if (!st) seen[idx] = 1;
  }
  for (int i = 0; i < count && !st; i++)
    if (!seen[i]) st = amoe_fail(e, AMOE_EINVAL, "merge: shard %d/%d is missing", i, count);
  if (!st) st = amoe_mkdirs(out, e);
  /* spec.resolved.yaml: one and the same text in every shard */
  size_t l0 = 0;
  char *y0 = NULL;
  if (!st) {
    snprintf(path, sizeof path, "%s/spec.resolved.yaml", dirs[0]);
    y0 = slurp(path, &l0);
    if (!y0) st = amoe_fail(e, AMOE_EIO, "%s: cannot read", path);
  }
  for (int i = 1; i < n && !st; i++) {
    size_t li;
    snprintf(path, sizeof path, "%s/spec.resolved.yaml", dirs[i]);
    char *yi = slurp(path, &li);
    if (!yi || li != l0 || memcmp(yi, y0, l0)) st = amoe_fail(e, AMOE_EINVAL, "%s differs from %s's: refusing to merge", path, dirs[0]);
    free(yi);
  }
  if (!st) st = merge_csv(dirs, n, "summary.csv", out, e);
  if (!st) st = merge_csv(dirs, n, "layers.csv", out, e);
  snprintf(path, sizeof path, "%s/blocks.csv", dirs[0]);
  if (!st && exists(path)) st = merge_csv(dirs, n, "blocks.csv", out, e);
  if (!st) { /* meta.json: the first shard's, every shard's points in point order, no shard mark */
    json_t *meta = json_deep_copy(metas[0]), *pts = json_array();
    json_object_del(meta, "shard");
    size_t np = 0;
    for (int i = 0; i < n; i++) np += json_array_size(json_object_get(metas[i], "points"));
    json_t **all = calloc(np ? np : 1, sizeof *all);
    size_t k = 0;
    for (int i = 0; all && i < n; i++) {
      json_t *a = json_object_get(metas[i], "points");
      for (size_t j = 0; j < json_array_size(a); j++) all[k++] = json_array_get(a, j);
    }
    if (!all) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
    else {
      qsort(all, np, sizeof *all, point_of);
      for (size_t j = 0; j < np; j++) json_array_append(pts, all[j]);
      json_object_set_new(meta, "points", pts);
      /* the key order of an unsharded run: points before spec_hash */
      json_t *hash = json_incref(json_object_get(meta, "spec_hash"));
      if (hash) {
        json_object_del(meta, "spec_hash");
        json_object_set_new(meta, "spec_hash", hash);
      }
      amoe_afile a;
      snprintf(path, sizeof path, "%s/meta.json", out);
      st = amoe_afile_open(&a, path, e);
      char *txt = st ? NULL : json_dumps(meta, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
      if (!st && !txt) st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
      if (!st) {
        fputs(txt, a.f);
        fputc('\n', a.f);
        st = amoe_afile_commit(&a, e);
      }
      free(txt);
      amoe_afile_abort(&a);
    }
    free(all);
    json_decref(meta);
  }
  if (!st) {
    amoe_afile a;
    snprintf(path, sizeof path, "%s/spec.resolved.yaml", out);
    st = amoe_afile_open(&a, path, e);
    if (!st) {
      fwrite(y0, 1, l0, a.f);
      st = amoe_afile_commit(&a, e);
    }
    amoe_afile_abort(&a);
  }
  free(y0);
  free(seen);
  for (int i = 0; i < n; i++) json_decref(metas[i]);
  free(metas);
  return st;
}
