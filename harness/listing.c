#include "listing.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "spec_load.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

amoe_status amoe_list_presets(FILE *f, amoe_err *e) {
  const char *kinds[4] = {"models", "hw", "interconnect", "engines"};
  for (int k = 0; k < 4; k++) {
    char dir[AMOE_PATH_MAX];
    amoe_presets_dir(dir, sizeof dir, kinds[k], NULL);
    fprintf(f, "%s (%s):\n", kinds[k], dir);
    DIR *d = opendir(dir);
    if (!d) return amoe_fail(e, AMOE_EIO, "%s: %s", dir, strerror(errno));
    char *names[256];
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) && n < 256;) {
      size_t len = strlen(de->d_name);
      if (len > 5 && !strcmp(de->d_name + len - 5, ".yaml") && (names[n] = strndup(de->d_name, len - 5))) n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
      fprintf(f, "  %s\n", names[i]);
      free(names[i]);
    }
  }
  return AMOE_OK;
}

/* A row's parameters in one line: "budget (required, e.g. 32), beta = 0.5". */
static void param_line(const amoe_param_def *pd, char *out, size_t n) {
  out[0] = 0;
  for (int j = 0; j < AMOE_MAX_PARAMS && pd[j].key; j++) {
    const size_t u = strlen(out);
    if (pd[j].names) {
      snprintf(out + u, n - u, "%s`%s` = %s (", j ? ", " : "", pd[j].key, pd[j].names[(int)pd[j].def]);
      for (int c = 0; pd[j].names[c]; c++)
        snprintf(out + strlen(out), n - strlen(out), "%s%s", c ? " or " : "", pd[j].names[c]);
      snprintf(out + strlen(out), n - strlen(out), ")");
    } else if (isnan(pd[j].def))
      snprintf(out + u, n - u, "%s`%s` (required, e.g. %g)", j ? ", " : "", pd[j].key, pd[j].example);
    else snprintf(out + u, n - u, "%s`%s` = %g", j ? ", " : "", pd[j].key, pd[j].def);
  }
}

void amoe_list_policies(FILE *f, int markdown) {
  if (markdown) {
    fputs("| row | side | parameters | what it does |\n", f);
    fputs("|---|---|---|---|\n", f);
  }
  for (int w = 0; w < 2; w++) {
    if (!markdown)
      fprintf(f, "%s (`{%s: NAME, ...}` in a spec's policies):\n", w ? "verifiers" : "drafts", w ? "verifier" : "draft");
    const int n = w ? amoe_verifier_rows() : amoe_draft_rows();
    for (int i = 0; i < n; i++) {
      const char *name = w ? amoe_verifier_table[i].name : amoe_draft_table[i].name;
      const char *what = w ? amoe_verifier_table[i].description : amoe_draft_table[i].description;
      const amoe_param_def *pd = w ? amoe_verifier_table[i].params : amoe_draft_table[i].params;
      const int batch = w ? amoe_verifier_table[i].batch : amoe_draft_table[i].batch;
      if (markdown) {
        char pl[512];
        param_line(pd, pl, sizeof pl);
        fprintf(f, "| `%s` | %s | %s | %s; at batch > 1, %s |\n", name, w ? "verifier" : "draft", pl[0] ? pl : "",
                what ? what : "", amoe_batch_kind_names[batch]);
        continue;
      }
      fprintf(f, "  %-15s %s\n", name, what ? what : "");
      fprintf(f, "  %-15s   at batch > 1: %s\n", "", amoe_batch_kind_names[batch]);
      for (int j = 0; j < AMOE_MAX_PARAMS && pd[j].key; j++) {
        if (pd[j].names) {
          fprintf(f, "  %-15s   %s: default %s, one of", "", pd[j].key, pd[j].names[(int)pd[j].def]);
          for (int c = 0; pd[j].names[c]; c++) fprintf(f, " %s", pd[j].names[c]);
          fputc('\n', f);
        } else if (isnan(pd[j].def))
          fprintf(f, "  %-15s   %s: required (e.g. %g), %g..%g%s\n", "", pd[j].key, pd[j].example, pd[j].min, pd[j].max,
                  pd[j].expert_count ? " (experts per layer)" : "");
        else fprintf(f, "  %-15s   %s: default %g, %g..%g\n", "", pd[j].key, pd[j].def, pd[j].min, pd[j].max);
      }
    }
  }
}
