/* acceptmoe cells: read the serving cells, run each (deployment, load,
 * draft) once, print prediction against measurement (docs/design.md §19;
 * the format: docs/spec.md "Serving cells"). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "cells_internal.h"
#include "cache.h"
#include "tiers.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lines.h"
#include "results.h"
#include "spec_load.h"

/* ------------------------------------------------------------ the file */

static const char *const COLS[NCOLS + 1] = {"id", "source", "grade", "model", "hardware", "gpus", "tp", "ep", "engine",
                                        "weights", "draft", "k", "al", "isl", "osl", "lengths", "load", "requests",
                                        "metric", "value", "host", "link", "experts", "ssd", "note", NULL};
static const char *const METRICS[] = {"output_tok_s", "total_tok_s", "output_tok_s_per_gpu", "tpot_ms", "tpot_ms_p50",
                                      "ttft_ms_p50", "ttft_ms", "decode_tok_s", "prefill_tok_s", "cache_hit_rate",
                                      "ssd_gb_per_token", NULL};
/* The host links a tier row names: bytes/s to the GPU and the latency of
 * one copy (real-data tiers/pcie_h2d_rates.csv: an A10 on PCIe 4 x16 moves
 * 18.3-19.7 GB/s in a single stream, an H100 on PCIe 5 35.0-35.4 GB/s; a
 * copy each way, 86.2 us a round trip on imp's box, is half of that). */
static const struct {
  const char *name;
  double bw, latency_s;
} LINKS[] = {{"pcie4", 19.0e9, 43.1e-6}, {"pcie5", 35.2e9, 43.1e-6}, {NULL, 0, 0}};
static const char *const DRAFTS[] = {"none", "mtp", "eagle3", "dspark", "dspark-adaptive", NULL};

static int name_index(const char *const *names, const char *s) {
  for (int i = 0; names[i]; i++)
    if (!strcmp(names[i], s)) return i;
  return -1;
}

/* The next field of line at *p (quoted or not; spaces around it dropped)
 * into out; its 1-based column in *col. 0 at the end of the line. */
static int next_field(const char *line, const char **p, char *out, int *col, int *bad) {
  if (!**p) return 0;
  while (**p == ' ' || **p == '\t') (*p)++;
  *col = (int)(*p - line) + 1;
  size_t n = 0;
  if (**p == '"') { /* "..." with "" for a quote */
    (*p)++;
    for (;;) {
      if (!**p) {
        *bad = 1;
        break;
      }
      if (**p == '"' && (*p)[1] == '"') (*p)++;
      else if (**p == '"') {
        (*p)++;
        break;
      }
      if (n + 1 < FIELD_MAX) out[n++] = **p;
      (*p)++;
    }
    while (**p == ' ' || **p == '\t') (*p)++;
    if (**p && **p != ',') *bad = 1;
  } else {
    while (**p && **p != ',') {
      if (n + 1 < FIELD_MAX) out[n++] = **p;
      (*p)++;
    }
    while (n && (out[n - 1] == ' ' || out[n - 1] == '\t')) n--;
  }
  out[n] = 0;
  if (**p == ',') {
    (*p)++;
    if (!**p) *bad = 2; /* (a trailing comma: one more, empty field) */
  }
  return 1;
}

/* A whole number >= lo from s (empty: `empty`, when allowed). */
static int whole(const char *s, int lo, int empty_ok, int empty, int *out) {
  if (!s[0]) {
    *out = empty;
    return empty_ok;
  }
  char *end;
  errno = 0;
  const long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > 100000000) return 0;
  *out = (int)v;
  return 1;
}

static int preset_exists(const char *kind, const char *name);

static int link_index(const char *name) {
  for (int i = 0; LINKS[i].name; i++)
    if (!strcmp(LINKS[i].name, name)) return i;
  return -1;
}

/* The model preset's MoE layers and experts (0, 0: no such preset). */
static void model_shape(const char *model, int *layers, int *experts) {
  amoe_spec *s = calloc(1, sizeof *s);
  amoe_diag d = {0};
  *layers = *experts = 0;
  if (s) {
    amoe_spec_defaults(s);
    if (preset_exists("models", model) && amoe_spec_load_preset(s, 0, model, "cells", &d) == AMOE_OK)
      *layers = s->model.moe_layers, *experts = s->model.experts;
  }
  amoe_diag_free(&d);
  free(s);
}

/* A tier row's experts column (docs/design.md §21): the placements the
 * simulator runs (tiers.h), a GPU cache of SLOTS experts a layer over host
 * memory (cache:SLOTS:POLICY) or experts on NVMe under a GPU cache of MIB
 * (ssd:MIB), checked against the row's model where its preset is here.
 * 0 with what is wrong in e. */
static int experts_form(const char *text, const char *model, amoe_err *e) {
  int layers, experts;
  model_shape(model, &layers, &experts);
  if (!strncmp(text, "cache:", 6)) {
    char *end;
    const long slots = strtol(text + 6, &end, 10);
    if (end == text + 6 || *end != ':' || slots < 1)
      return amoe_fail(e, AMOE_EINVAL, "'%s': cache:SLOTS:POLICY takes a whole number of slots, at least 1", text), 0;
    if (experts > 0 && slots > experts)
      return amoe_fail(e, AMOE_EINVAL, "'%s': %ld slots a layer, more than %s's %d experts", text, slots, model, experts), 0;
    for (int i = 0; amoe_cache_policy_names[i]; i++)
      if (!strcmp(end + 1, amoe_cache_policy_names[i])) return 1;
    return amoe_fail(e, AMOE_EINVAL, "'%s': no cache policy '%s' (offload.policy's: lru, lfu, ...)", text, end + 1), 0;
  }
  if (!strncmp(text, "ssd:", 4)) {
    char *end;
    const double mib = strtod(text + 4, &end);
    if (end == text + 4 || *end || !(mib > 0))
      return amoe_fail(e, AMOE_EINVAL, "'%s': ssd:MIB takes the GPU cache's MiB, above 0", text), 0;
    return 1;
  }
  amoe_tiers t;
  return amoe_tiers_parse(text, layers > 0 ? layers : 1000000, &t, e) == AMOE_OK;
}

static amoe_status parse_file(const char *path, cell_file *cf, amoe_err *e) {
  memset(cf, 0, sizeof *cf);
  FILE *f = fopen(path, "r");
  if (!f) return amoe_fail(e, AMOE_EIO, "%s: cannot read: %s", path, strerror(errno));
  char line[8192], buf[FIELD_MAX];
  int map[NCOLS], header = 0, ncol = 0;
  amoe_status st = AMOE_OK;
  amoe_lines lr = {f, path, 0, 0, 0};
  while (st == AMOE_OK && (st = amoe_lines_next(&lr, line, sizeof line, e)) == AMOE_OK) {
    const int lineno = lr.line;
    const long at = lr.at;
    const char *p = line;
    int col = 1, bad = 0, i = 0;
    if (!header) { /* the header: every column of the format, in any order, and no other */
      for (int c = 0; c < NCOLS; c++) map[c] = -1;
      while (next_field(line, &p, buf, &col, &bad)) {
        const int c = name_index(COLS, buf);
        if (c < 0 || map[c] >= 0) {
          st = amoe_fail(e, AMOE_EFORMAT, "%s:%d:%d (byte %ld): %s column '%s' (the columns: docs/spec.md \"Serving "
                         "cells\")", path, lineno, col, at + col - 1, c < 0 ? "unknown" : "a second", buf);
          break;
        }
        map[c] = i++;
      }
      for (int c = 0; c < C_REQUIRED && st == AMOE_OK; c++)
        if (map[c] < 0)
          st = amoe_fail(e, AMOE_EFORMAT, "%s:%d:1 (byte %ld): the header has no column '%s'", path, lineno, at,
                         COLS[c]);
      ncol = i;
      header = 1;
      continue;
    }
    if (cf->n == cf->cap) {
      const int nc = cf->cap ? 2 * cf->cap : 64;
      cell *nr = realloc(cf->rows, (size_t)nc * sizeof *nr);
      if (!nr) {
        st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
        break;
      }
      cf->rows = nr;
      cf->cap = nc;
    }
    cell *r = &cf->rows[cf->n];
    memset(r, 0, sizeof *r);
    r->line = lineno;
    int cols_at[NCOLS] = {0};
    while (st == AMOE_OK && next_field(line, &p, buf, &col, &bad)) {
      if (bad == 1) {
        st = amoe_fail(e, AMOE_EFORMAT, "%s:%d:%d (byte %ld): an unterminated or misplaced quote", path, lineno, col,
                       at + col - 1);
        break;
      }
      if (i >= ncol) {
        st = amoe_fail(e, AMOE_EFORMAT, "%s:%d:%d (byte %ld): more than the header's %d columns", path, lineno, col,
                       at + col - 1, ncol);
        break;
      }
      for (int c = 0; c < NCOLS; c++)
        if (map[c] == i) {
          snprintf(r->f[c], FIELD_MAX, "%s", buf);
          cols_at[c] = col;
        }
      i++;
      if (bad == 2 && i < ncol) { /* the trailing comma's empty field */
        for (int c = 0; c < NCOLS; c++)
          if (map[c] == i) cols_at[c] = (int)strlen(line) + 1;
        i++;
      }
    }
    if (st != AMOE_OK) break;
    if (i < ncol) {
      st = amoe_fail(e, AMOE_EFORMAT, "%s:%d:%d (byte %ld): %d columns, the header has %d", path, lineno,
                     (int)strlen(line) + 1, at + (long)strlen(line), i, ncol);
      break;
    }
    /* the fields' own forms (positions: each field's column) */
#define BAD(c, what)                                                                                              \
  do {                                                                                                            \
    st = amoe_fail(e, AMOE_EFORMAT, "%s:%d:%d (byte %ld): %s must be %s, not '%s'", path, lineno, cols_at[c],    \
                   at + cols_at[c] - 1, COLS[c], what, r->f[c]);                                                  \
  } while (0)
    char *end;
    if (!r->f[C_ID][0]) BAD(C_ID, "a name");
    else if (!whole(r->f[C_GPUS], 1, 1, -1, &r->gpus)) BAD(C_GPUS, "a whole number, at least 1 (or empty)");
    else if (!whole(r->f[C_TP], 1, 1, -1, &r->tp)) BAD(C_TP, "a whole number, at least 1 (or empty)");
    else if (!whole(r->f[C_EP], 1, 1, -1, &r->ep)) BAD(C_EP, "a whole number, at least 1 (or empty)");
    else if (!whole(r->f[C_K], 0, 0, 0, &r->k)) BAD(C_K, "a whole number, at least 0");
    else if (!whole(r->f[C_REQUESTS], 1, 1, 0, &r->requests)) BAD(C_REQUESTS, "a whole number, at least 1 (or empty)");
    if (st != AMOE_OK) break;
    errno = 0;
    r->al = r->f[C_AL][0] ? strtod(r->f[C_AL], &end) : 0;
    if (r->f[C_AL][0] && (errno || *end || !(r->al >= 1) || r->al > 64)) BAD(C_AL, "an acceptance length in 1..64 (or empty)");
    errno = 0;
    r->value = strtod(r->f[C_VALUE], &end);
    if (st == AMOE_OK && (errno || *end || !r->f[C_VALUE][0] || !isfinite(r->value) || !(r->value > 0)))
      BAD(C_VALUE, "a number above 0");
    if (st == AMOE_OK && (r->draft = name_index(DRAFTS, r->f[C_DRAFT])) < 0)
      BAD(C_DRAFT, "none, mtp, eagle3, dspark or dspark-adaptive");
    if (st == AMOE_OK && (r->draft == 0) != (r->k == 0)) BAD(C_K, r->draft ? "at least 1 with a draft" : "0 with draft none");
    /* a tier row's (§21): the host as PRESET or PRESET*SOCKETS, the link, where the experts live */
    r->sockets = 1;
    if (st == AMOE_OK && r->f[C_HOST][0]) {
      char name[FIELD_MAX];
      snprintf(name, sizeof name, "%s", r->f[C_HOST]);
      char *star = strchr(name, '*');
      if (star) *star++ = 0;
      if (star && (!whole(star, 1, 0, 0, &r->sockets) || r->sockets > 16))
        BAD(C_HOST, "a host preset, or PRESET*SOCKETS with 1 to 16 sockets");
      else if (!preset_exists("hosts", name)) BAD(C_HOST, "a host preset of workloads/hosts/ (xeon-6454s, xeon-6454s*2)");
    }
    if (st == AMOE_OK && r->f[C_LINK][0] && link_index(r->f[C_LINK]) < 0) BAD(C_LINK, "pcie4 or pcie5 (or empty)");
    if (st == AMOE_OK && r->f[C_EXPERTS][0]) {
      amoe_err te;
      if (!experts_form(r->f[C_EXPERTS], r->f[C_MODEL], &te))
        st = amoe_fail(e, AMOE_EFORMAT, "%s:%d:%d (byte %ld): experts: %s", path, lineno, cols_at[C_EXPERTS],
                       at + cols_at[C_EXPERTS] - 1, te.msg);
    }
    if (st != AMOE_OK) break;
#undef BAD
    r->isl = whole(r->f[C_ISL], 1, 0, 0, &r->isl) ? r->isl : 0; /* (a dataset's name: 0) */
    r->osl = whole(r->f[C_OSL], 1, 0, 0, &r->osl) ? r->osl : 0;
    r->metric = name_index(METRICS, r->f[C_METRIC]);
    for (int j = 0; j < cf->n; j++)
      if (!strcmp(cf->rows[j].f[C_ID], r->f[C_ID])) {
        st = amoe_fail(e, AMOE_EFORMAT, "%s:%d:%d (byte %ld): id '%s' is also line %d's", path, lineno, cols_at[C_ID],
                       at + cols_at[C_ID] - 1, r->f[C_ID], cf->rows[j].line);
        break;
      }
    if (st == AMOE_OK) cf->n++;
  }
  if (st == AMOE_END) st = AMOE_OK;
  if (st == AMOE_OK && !header) st = amoe_fail(e, AMOE_EFORMAT, "%s: no header (docs/spec.md \"Serving cells\")", path);
  fclose(f);
  if (st != AMOE_OK) {
    free(cf->rows);
    memset(cf, 0, sizeof *cf);
  }
  return st;
}

amoe_status amoe_cells_parse(const char *path, int *rows, amoe_err *e) {
  cell_file cf;
  AMOE_TRY(parse_file(path, &cf, e));
  *rows = cf.n;
  free(cf.rows);
  return AMOE_OK;
}

/* ------------------------------------------------------------ acceptance curves */

/* acceptance_curves.csv (curve,model,draft,mode,k1..k8,source); a missing
 * file is no curves. */
static amoe_status read_curves(const char *path, curve **out, int *n, amoe_err *e) {
  *out = NULL;
  *n = 0;
  FILE *f = fopen(path, "r");
  if (!f) return AMOE_OK;
  char line[4096], buf[FIELD_MAX];
  int lineno = 0, cap = 0;
  amoe_status st = AMOE_OK;
  while (st == AMOE_OK && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (++lineno == 1 || !line[0] || line[0] == '#') continue;
    curve c;
    memset(&c, 0, sizeof c);
    const char *p = line;
    int col, bad = 0, i = 0;
    while (next_field(line, &p, buf, &col, &bad) && st == AMOE_OK) {
      char *end;
      if (i == 0) snprintf(c.name, sizeof c.name, "%.63s", buf);
      else if (i == 1) snprintf(c.model, sizeof c.model, "%.63s", buf);
      else if (i == 2) snprintf(c.draft, sizeof c.draft, "%.31s", buf);
      else if (i == 3) snprintf(c.mode, sizeof c.mode, "%.31s", buf);
      else if (i < 12 && (c.al[i - 4] = strtod(buf, &end), *end || !(c.al[i - 4] >= 1)))
        st = amoe_fail(e, AMOE_EFORMAT, "%s:%d:%d: k%d must be an acceptance length, not '%s'", path, lineno, col,
                       i - 3, buf);
      i++;
    }
    if (st == AMOE_OK && i < 12) st = amoe_fail(e, AMOE_EFORMAT, "%s:%d: curve,model,draft,mode,k1..k8 expected", path, lineno);
    if (st != AMOE_OK) break;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      curve *nc = realloc(*out, (size_t)cap * sizeof *nc);
      if (!nc) {
        st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
        break;
      }
      *out = nc;
    }
    (*out)[(*n)++] = c;
  }
  fclose(f);
  if (st != AMOE_OK) {
    free(*out);
    *out = NULL;
    *n = 0;
  }
  return st;
}

/* ------------------------------------------------------------ rows to runs */

/* What a row runs: its deployment, load and draft, as spec text and
 * overrides (the cell's own, then a round's: a calibration's terms). Rows
 * that share it share one run. */
#define RUN_SETS 12
typedef struct {
  char key[4096];
  char spec[4096];
  char sets[RUN_SETS][256];
  int nset, gpus, isl;
  char policy_note[256]; /* what the row's run stands on beyond the cell */
  int done, failed;
  char why[256];
  /* what the run gave */
  double output_tok_s, total_tok_s, tpot_mean_s, tpot_p50_s, ttft_p50_s, ttft_mean_s, cache_hit_rate;
} cell_run;

static int preset_exists(const char *kind, const char *name) {
  char dir[AMOE_PATH_MAX], path[AMOE_PATH_MAX + 200];
  amoe_presets_dir(dir, sizeof dir, kind, NULL);
  for (const char *c = name; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.')) return 0;
  snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
  struct stat sb;
  return name[0] && stat(path, &sb) == 0;
}

/* The node's link where the hardware preset names none: NVIDIA's NVLink of
 * that generation. */
const char *cells_weight_format(const char *weights) {
  static const char *const W[][2] = {{"bf16", "bf16"}, {"fp8", "fp8-block128"}, {"nvfp4", "nvfp4"}, {"mxfp4", "mxfp4"},
                                     {"q4_k_m", "q4_k_m"}, {"int8", "int8"}};
  for (size_t i = 0; i < sizeof W / sizeof W[0]; i++)
    if (!strcmp(W[i][0], weights)) return W[i][1];
  return NULL;
}

const char *cells_default_link(const char *hw) {
  static const char *const L[][2] = {{"h100", "nvlink4"}, {"h200", "nvlink4"}, {"h20", "nvlink4"}, {"b200", "nvlink5"}};
  for (size_t i = 0; i < sizeof L / sizeof L[0]; i++)
    if (!strcmp(L[i][0], hw)) return L[i][1];
  return NULL;
}

/* Prompts join the steps' decodes in chunks of this many tokens, as many
 * as the engine's max_batched_tokens lets in (vLLM and SGLang schedule
 * chunked prefill by tokens; 256 is the granularity the simulator keeps). */
#define CHUNK 256
/* Each chunk's experts from an eighth of its tokens, evenly spread
 * (workload.prefill_sample): a step's prompt chunks still route thousands
 * of tokens, whose union is every expert, at an eighth of the cost (the
 * shared file's predictions moved at most 0.4% against a quarter, and one
 * deployment's throughput 0.7% from a quarter to every token). */
#define SAMPLE 32
/* Each request routes every 32nd of its blocks afresh and repeats its
 * routes between (workload.route_hold; design §19): a step's requests stay
 * independent draws, so what it pays for keeps its distribution. The shared
 * file's 65 predictions moved at most 0.10% from every block routed (0.105%
 * at 8), and the decode tokens' routes, nine tenths of a DeepSeek-V4 row's
 * time, cost a 32nd. */
#define HOLD 32

/* The logits a row's nodes keep (workload.top_m): the model's top_k,
 * rounded up to the eight the vector paths take, at most its experts. A
 * row verifies with every expert its nodes route to (natural), which reads
 * a node's top_k alone; the default's 32 or more were stored and, in held
 * blocks, copied for nothing (a sixth of a DeepSeek-V4 row's time). The
 * shared file's predictions are the same to the byte. 0 (the default):
 * the preset did not load, and the run says why. */
static int row_top_m(const char *model) {
  amoe_spec *s = calloc(1, sizeof *s);
  amoe_diag d = {0};
  int m = 0;
  if (s) {
    amoe_spec_defaults(s);
    if (amoe_spec_load_preset(s, 0, model, "cells", &d) == AMOE_OK && s->model.top_k > 0) {
      m = (s->model.top_k + 7) / 8 * 8;
      if (s->model.experts > 0 && m > s->model.experts) m = s->model.experts;
    }
  }
  amoe_diag_free(&d);
  free(s);
  return m;
}

/* Stand-ins for datasets a cell names instead of lengths: the mean prompt
 * each request gets, and where that mean comes from. */
static const struct {
  const char *name;
  int prompt_tokens;
  const char *note;
  int output_tokens; /* where a row names the dataset for its output too (0: no stand-in) */
  const char *output_note;
} DATASETS[] = {
    /* vLLM paper (Kwon et al., SOSP 2023, fig. 11): ShareGPT's mean input 161 tokens, output 338 */
    {"sharegpt", 161, "prompts 161 tokens, ShareGPT's mean (vLLM paper)", 338, "outputs 338 tokens, ShareGPT's mean"},
    /* nvidia/SPEED-Bench's dataset card: the qualitative split is 909,126
     * bytes in 880 rows, 1,033 a row with its metadata: about 256 tokens
     * of prompt at ~4 bytes a token, with the chat template */
    {"speed-bench", 256, "prompts 256 tokens, SPEED-Bench qualitative's mean (dataset card bytes)", 0, NULL},
    {NULL, 0, NULL, 0, NULL}};

/* The run a row asks for into r (its key, spec and overrides), or the
 * reason it cannot run into why (return 0). */
/* The row's load as workload.arrival (its lengths inside), the requests
 * it runs, and what was capped; 0 with why if the load is not one of the
 * format's. */
static int row_load(const cell *c, const char *lengths, char *arrival, size_t an, int *requests, char *capped,
                    size_t cn, char *why, size_t wn) {
  int conc = 0;
  double rate = 0;
  *requests = c->requests;
  if (sscanf(c->f[C_LOAD], "concurrency:%d", &conc) == 1 && conc >= 1 && conc <= 4096) {
    snprintf(arrival, an, "{process: concurrency, concurrency: %d%s}", conc, lengths);
    /* two per client: a closed loop is at its steady state from the first
     * wave, and a row's 880 requests of 2,048 tokens would route 1.8M
     * tokens a run (DeepSeek-V4-Pro at 64 clients: 1,792 tok/s over 880,
     * 1,812 over 128) */
    const int sample = 2 * conc > 32 ? 2 * conc : 32;
    if (*requests > sample) snprintf(capped, cn, "%d of its %d requests run", sample, *requests);
    if (!*requests || *requests > sample) *requests = sample;
  } else if ((sscanf(c->f[C_LOAD], "constant:%lf", &rate) == 1 || sscanf(c->f[C_LOAD], "poisson:%lf", &rate) == 1) &&
             rate > 0) {
    snprintf(arrival, an, "{process: %s, rate: %.17g%s}", c->f[C_LOAD][0] == 'c' ? "constant" : "poisson", rate,
             lengths);
    if (!*requests) *requests = (int)fmin(fmax(ceil(rate * 60), 64), 2000); /* (none stated: a minute's worth) */
  } else
    return snprintf(why, wn, "load '%.80s': concurrency:C, constant:R or poisson:R", c->f[C_LOAD]), 0;
  return 1;
}

/* The row's draft as a policy, tree and acceptance (its al, else the
 * model's curve for the draft, said in note), and whether it drafts in
 * one forward; 0 with why where no acceptance is known. */
static int row_draft(const cell *c, const curve *cv, int ncv, char *policy, size_t pn, char *tree, size_t tn,
                     char *accept, size_t acn, int *passes, char *note, size_t nn, char *why, size_t wn) {
  const char *model = c->f[C_MODEL];
  snprintf(policy, pn, "autoregressive");
  snprintf(tree, tn, "{depth: 1, top_k: 1, nodes: 1}");
  *passes = 0;
  if (c->draft == 0) {
    snprintf(accept, acn, "{tau: 1}"); /* plain decoding: a block is one token */
    return 1;
  }
  snprintf(tree, tn, "{depth: %d, top_k: 1, nodes: %d}", c->k, c->k + 1);
  if (c->al > 0) {
    snprintf(accept, acn, "{al: [%.17g]}", c->al);
  } else { /* the model's curve for the draft (dspark-adaptive: dspark's) */
    const char *d = c->draft == 4 ? "dspark" : c->f[C_DRAFT];
    const curve *hit = NULL;
    for (int i = 0; i < ncv && !hit; i++)
      if (!strcmp(cv[i].model, model) && !strcmp(cv[i].draft, d)) hit = &cv[i];
    /* else a dated revision of the model's (deepseek-v4-pro-0813 for
     * deepseek-v4-pro), said in the row's note */
    const size_t ml = strlen(model);
    for (int i = 0; i < ncv && !hit; i++)
      if (!strncmp(cv[i].model, model, ml) && cv[i].model[ml] == '-' && !strcmp(cv[i].draft, d)) hit = &cv[i];
    if (!hit) return snprintf(why, wn, "no al, and no acceptance curve for %.80s with %.80s", model, d), 0;
    if (c->k > 8) return snprintf(why, wn, "no al, and the curve stops at k = 8"), 0;
    int n = snprintf(accept, acn, "{al: [");
    for (int i = 0; i < 8; i++) n += snprintf(accept + n, acn - (size_t)n, "%s%.17g", i ? ", " : "", hit->al[i]);
    snprintf(accept + n, acn - (size_t)n, "]}");
    const size_t n0 = strlen(note);
    snprintf(note + n0, nn - n0, "%sal from %.60s's %.20s curve", n0 ? "; " : "", hit->model, hit->mode);
  }
  if (c->draft == 1) snprintf(policy, pn, "{draft: mtp, tokens: %d}", c->k);
  else if (c->draft == 2 || c->draft == 3) snprintf(policy, pn, "natural");
  else snprintf(policy, pn, "{draft: adaptive, cost: tokens}");
  *passes = c->draft >= 3; /* DSpark drafts its block in one forward */
  return 1;
}

/* A tier row's link as the hardware's copies (bandwidth, latency), where it names one. */
static void link_sets(const cell *c, cell_run *r) {
  const int li = c->f[C_LINK][0] ? link_index(c->f[C_LINK]) : -1;
  if (li < 0) return;
  snprintf(r->sets[r->nset++], sizeof r->sets[0], "hardware.h2d_bw=%.17g", LINKS[li].bw);
  snprintf(r->sets[r->nset++], sizeof r->sets[0], "hardware.copy_latency_s=%.17g", LINKS[li].latency_s);
}

static int row_run(const cell *c, const curve *cv, int ncv, cell_run *r, char *why, size_t wn) {
  memset(r, 0, sizeof *r);
  const char *model = c->f[C_MODEL], *hw = c->f[C_HW];
  char engine[FIELD_MAX];
  snprintf(engine, sizeof engine, "%s", c->f[C_ENGINE]);
  char *ov = strchr(engine, ';');
  if (ov) *ov++ = 0;
  if (c->metric < 0) return snprintf(why, wn, "metric '%.80s' is not one this command predicts", c->f[C_METRIC]), 0;
  const char *tier = c->f[C_EXPERTS];
  if (!strcmp(c->f[C_METRIC], "ssd_gb_per_token") || !strncmp(tier, "ssd:", 4))
    return snprintf(why, wn, "experts '%.60s', %.40s: experts on NVMe are not modelled yet (docs/design.md §21)",
                    tier[0] ? tier : "gpu", c->f[C_METRIC]), 0;
  if (!strcmp(c->f[C_METRIC], "cache_hit_rate") && strncmp(tier, "cache:", 6))
    return snprintf(why, wn, "cache_hit_rate without a cache (experts cache:SLOTS:POLICY)"), 0;
  if (!preset_exists("models", model))
    return snprintf(why, wn, "no model preset '%.80s' (its shape is in no public config read here)", model), 0;
  if (!preset_exists("hw", hw)) return snprintf(why, wn, "no hardware preset '%.80s'", hw), 0;
  if (!preset_exists("engines", engine)) return snprintf(why, wn, "no engine preset '%.200s'", engine), 0;
  if (c->gpus < 1 || c->tp < 1) return snprintf(why, wn, "the layout is not stated (gpus, tp)"), 0;
  /* tp below the GPUs: SGLang's DP attention, gpus / tp copies of tp GPUs */
  if (c->gpus % c->tp) return snprintf(why, wn, "tp %d does not divide %d GPUs", c->tp, c->gpus), 0;
  const int ep = c->ep < 1 ? 1 : c->ep, dp = c->gpus / c->tp;
  if (c->gpus % ep) return snprintf(why, wn, "ep %d does not divide %d GPUs", ep, c->gpus), 0;
  /* a dataset named for its lengths: its stand-in's mean prompt, every
   * request at it (no dataset's spread is modelled), the output as stated */
  int isl = c->isl;
  const char *stand_in = NULL;
  int osl = c->osl;
  char stand_ins[160];
  for (int i = 0; !isl && DATASETS[i].name; i++)
    if (!strcmp(c->f[C_ISL], DATASETS[i].name) &&
        (!strcmp(c->f[C_LENGTHS], DATASETS[i].name) || !strcmp(c->f[C_LENGTHS], "fixed"))) {
      isl = DATASETS[i].prompt_tokens, stand_in = DATASETS[i].note;
      if (!osl && DATASETS[i].output_tokens && !strcmp(c->f[C_OSL], DATASETS[i].name)) { /* its outputs too */
        osl = DATASETS[i].output_tokens;
        snprintf(stand_ins, sizeof stand_ins, "%s; %s", stand_in, DATASETS[i].output_note);
        stand_in = stand_ins;
      }
    }
  if (!isl || !osl)
    return snprintf(why, wn, "lengths '%.80s': no stand-in for that dataset's lengths", c->f[C_LENGTHS]), 0;
  if (c->k > 16) return snprintf(why, wn, "k %d: a chain of at most 16 draft tokens", c->k), 0;
  /* lengths */
  char lengths[256] = "";
  const char *L = c->f[C_LENGTHS];
  double a[6];
  if (!strcmp(L, "fixed") || !L[0] || stand_in) {
  } else if (sscanf(L, "uniform:%lf", &a[0]) == 1 && a[0] >= 0 && a[0] < 1) {
    snprintf(lengths, sizeof lengths, ", lengths: uniform, range_ratio: %.17g", a[0]);
  } else if (sscanf(L, "normal:%lf:%lf:%lf:%lf:%lf:%lf", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5]) == 6) {
    snprintf(lengths, sizeof lengths,
             ", lengths: normal, prompt_sd: %.17g, output_sd: %.17g, prompt_min: %d, prompt_max: %d, output_min: %d, "
             "output_max: %d", a[0], a[1], (int)a[2], (int)a[3], a[4] < 1 ? 1 : (int)a[4], (int)a[5]);
  } else
    return snprintf(why, wn, "lengths '%.80s': fixed, uniform:R or normal:SD_IN:SD_OUT:IN_MIN:IN_MAX:OUT_MIN:OUT_MAX", L), 0;
  /* load */
  char arrival[256], capped[64] = "";
  int requests;
  if (!row_load(c, lengths, arrival, sizeof arrival, &requests, capped, sizeof capped, why, wn)) return 0;
  /* the draft and its acceptance */
  char accept[512] = "", policy[128], tree[128];
  int passes;
  snprintf(r->policy_note, sizeof r->policy_note, "%s%s%s", stand_in ? stand_in : "", stand_in && capped[0] ? "; " : "",
           capped);
  if (!row_draft(c, cv, ncv, policy, sizeof policy, tree, sizeof tree, accept, sizeof accept, &passes, r->policy_note,
                 sizeof r->policy_note, why, wn))
    return 0;
  char model_extra[128] = "";
  if (c->f[C_WEIGHTS][0]) {
    const char *fmt = cells_weight_format(c->f[C_WEIGHTS]);
    if (!fmt) return snprintf(why, wn, "weights '%.80s': bf16, fp8, nvfp4, mxfp4, q4_k_m or int8", c->f[C_WEIGHTS]), 0;
    snprintf(model_extra, sizeof model_extra, "%s", fmt);
  }
  char dpline[32] = "";
  if (dp > 1) snprintf(dpline, sizeof dpline, ", attention_dp: %d", dp);
  const char *link = cells_default_link(hw);
  char hwline[256];
  snprintf(hwline, sizeof hwline, "{preset: %.80s, gpus: %d%.80s%.80s}", hw, c->gpus, link && c->gpus > 1 ? ", interconnect: " : "",
           link && c->gpus > 1 ? link : "");
  snprintf(r->spec, sizeof r->spec,
           "name: cell\nbaseline: false\nmodel: %s\nhardware: %s\nparallel: {attention_tp: %d, moe_ep: %d, moe_tp: %d%s}\n"
           "engine: {preset: %s}\nworkload:\n  tokens_per_request: %d\n  prompt_tokens: %d\n  seed: 1\n"
           "  prefill_schedule: chunked\n  chunk_tokens: %d\n  prefill_sample: %d\n  route_hold: %d\n  top_m: %d\n  tree: %s\n  acceptance: %s\n  arrival: %s\n  requests: %d\n"
           "policies: [%s]\noutput: {requests_csv: true}\n",
           model, hwline, c->tp, ep, c->gpus / ep, dpline, engine, osl, isl, CHUNK, SAMPLE, HOLD, row_top_m(model), tree, accept,
           arrival, requests, policy);
  /* a format other than the preset's: its bytes by the format (expert_bytes 0) */
  if (model_extra[0]) {
    snprintf(r->sets[r->nset++], sizeof r->sets[0], "model.weight_format=%s", model_extra);
    snprintf(r->sets[r->nset++], sizeof r->sets[0], "model.expert_bytes=0");
  }
  if (passes) snprintf(r->sets[r->nset++], sizeof r->sets[0], "workload.tree.draft_passes=1");
  if (!strncmp(tier, "cache:", 6)) { /* a GPU cache over host memory: offload's (§8), its link the row's */
    int slots;
    char pol[32];
    if (sscanf(tier + 6, "%d:%31s", &slots, pol) != 2) return snprintf(why, wn, "experts '%.60s'", tier), 0;
    snprintf(r->sets[r->nset++], sizeof r->sets[0], "offload.slots_per_layer=%d", slots);
    snprintf(r->sets[r->nset++], sizeof r->sets[0], "offload.policy=%s", pol);
    snprintf(r->sets[r->nset++], sizeof r->sets[0], "workload.route_hold=1"); /* (a cache sees every block's own routes) */
    link_sets(c, r);
  } else if (tier[0] && strcmp(tier, "gpu")) { /* experts off the GPU (§21): the host, its sockets, the link */
    char host[FIELD_MAX];
    snprintf(host, sizeof host, "%s", c->f[C_HOST]);
    if (!host[0]) return snprintf(why, wn, "experts '%.60s' and no host", tier), 0;
    char *star = strchr(host, '*');
    if (star) *star = 0;
    snprintf(r->sets[r->nset++], sizeof r->sets[0], "host=%.200s", host);
    snprintf(r->sets[r->nset++], sizeof r->sets[0], "host.sockets=%d", c->sockets);
    snprintf(r->sets[r->nset++], sizeof r->sets[0], "experts=%.200s", tier);
    link_sets(c, r);
  }
  for (char *tok = ov ? strtok(ov, ";") : NULL; tok; tok = strtok(NULL, ";")) {
    if (r->nset == RUN_SETS - 3) /* (a round's extra after: a calibration's three terms) */
      return snprintf(why, wn, "more than %d overrides", RUN_SETS - 3), 0;
    if (!strchr(tok, '=')) return snprintf(why, wn, "override '%.80s' is not KEY=VALUE", tok), 0;
    snprintf(r->sets[r->nset++], sizeof r->sets[0], "%s", tok);
  }
  r->gpus = c->gpus;
  r->isl = isl;
  return 1;
}

/* ------------------------------------------------------------ reading a run */

/* The first data row of a CSV (and the header) as fields; returns the
 * number of fields (0: none). */
static int csv_first_row(const char *path, char hdr[][64], char row[][64], int max) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  static char h[65536], l[65536];
  int n = 0;
  if (fgets(h, sizeof h, f) && fgets(l, sizeof l, f)) {
    h[strcspn(h, "\r\n")] = 0;
    l[strcspn(l, "\r\n")] = 0;
    char *sh, *sl, *a = strtok_r(h, ",", &sh), *b = strtok_r(l, ",", &sl);
    for (; a && b && n < max; n++, a = strtok_r(NULL, ",", &sh), b = strtok_r(NULL, ",", &sl)) {
      snprintf(hdr[n], 64, "%s", a);
      snprintf(row[n], 64, "%s", b);
    }
  }
  fclose(f);
  return n;
}

static double column(char hdr[][64], char row[][64], int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(hdr[i], name)) return strtod(row[i], NULL);
  return NAN;
}

/* The summary's first row (the row the spec lists first) and its requests'
 * prompt tokens (requests.csv) into r. */
static amoe_status read_run(const char *dir, cell_run *r, amoe_err *e) {
  char path[AMOE_PATH_MAX + 32];
  static char hdr[256][64], row[256][64];
  snprintf(path, sizeof path, "%.1000s/summary.csv", dir);
  const int n = csv_first_row(path, hdr, row, 256);
  if (n == 0) return amoe_fail(e, AMOE_EIO, "%s: no result row", path);
  const double dur = column(hdr, row, n, "duration_s");
  const char *policy = NULL;
  for (int i = 0; i < n; i++)
    if (!strcmp(hdr[i], "policy")) policy = row[i];
  if (!(dur > 0) || !policy) return amoe_fail(e, AMOE_EIO, "%s: no duration_s or policy", path);
  r->tpot_mean_s = column(hdr, row, n, "tpot_mean_s");
  r->tpot_p50_s = column(hdr, row, n, "tpot_p50_s");
  r->ttft_p50_s = column(hdr, row, n, "ttft_p50_s");
  r->ttft_mean_s = column(hdr, row, n, "ttft_mean_s");
  r->cache_hit_rate = column(hdr, row, n, "cache_hit_rate");
  /* the requests' prompt and output tokens (the output: committed tokens and
   * the first token each prefill gave), as a benchmark counts them */
  double prompt = 0, output = 0;
  snprintf(path, sizeof path, "%.1000s/requests.csv", dir);
  FILE *f = fopen(path, "r");
  if (!f) return amoe_fail(e, AMOE_EIO, "%s: cannot read: %s", path, strerror(errno));
  char line[4096];
  int pcol = -1, ocol = -1, lcol = 0;
  if (fgets(line, sizeof line, f)) { /* policy,request,arrival_s,admitted_s,first_token_s,finish_s,prompt_tokens,... */
    line[strcspn(line, "\r\n")] = 0;
    int i = 0;
    for (char *s, *t = strtok_r(line, ",", &s); t; t = strtok_r(NULL, ",", &s), i++) {
      if (!strcmp(t, "prompt_tokens")) pcol = i;
      if (!strcmp(t, "output_tokens")) ocol = i;
      if (!strcmp(t, "policy")) lcol = i;
    }
  }
  if (pcol < 0 || ocol < 0) {
    fclose(f);
    return amoe_fail(e, AMOE_EIO, "%s: no prompt_tokens or output_tokens column", path);
  }
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    int i = 0, mine = 0;
    for (char *s, *t = strtok_r(line, ",", &s); t; t = strtok_r(NULL, ",", &s), i++) {
      if (i == lcol) mine = !strcmp(t, policy);
      if (i == pcol && mine) prompt += strtod(t, NULL);
      if (i == ocol && mine) output += strtod(t, NULL);
    }
  }
  fclose(f);
  r->output_tok_s = output / dur;
  r->total_tok_s = (output + prompt) / dur;
  return AMOE_OK;
}

static double metric_of(const cell_run *r, int metric) {
  switch (metric) {
  case 0: return r->output_tok_s;
  case 1: return r->total_tok_s;
  case 2: return r->output_tok_s / r->gpus;
  case 3: return 1000 * r->tpot_mean_s;
  case 4: return 1000 * r->tpot_p50_s;
  case 5: return 1000 * r->ttft_p50_s;
  case 6: return 1000 * r->ttft_mean_s;
  case 7: return 1 / r->tpot_mean_s;          /* decode_tok_s: one stream's */
  case 8: return r->isl / r->ttft_mean_s;     /* prefill_tok_s: its prompt over its first token's wait */
  case 9: return r->cache_hit_rate;           /* a GPU cache over host memory (offload's, §8) */
  default: return NAN;
  }
}

/* ------------------------------------------------------------ the report */

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

int cells_wanted(const char *only, const char *id) {
  if (!only) return 1;
  const size_t n = strlen(id);
  for (const char *p = only; (p = strstr(p, id)); p += n)
    if ((p == only || p[-1] == ',') && (p[n] == ',' || !p[n])) return 1;
  return 0;
}

void cells_deployment_key(const cell *c, char *out, size_t n) {
  const int m = snprintf(out, n, "%.64s|%.32s|%.8s|%.8s|%.8s|%.300s|%.16s", c->f[C_MODEL], c->f[C_HW], c->f[C_GPUS],
                         c->f[C_TP], c->f[C_EP], c->f[C_ENGINE], c->f[C_WEIGHTS]);
  if (c->f[C_EXPERTS][0] && m > 0 && (size_t)m < n) /* a tier row's: where its experts live, and on what */
    snprintf(out + m, n - (size_t)m, "|%.64s|%.16s|%.64s", c->f[C_HOST], c->f[C_LINK], c->f[C_EXPERTS]);
}

void cells_base_key(const cell *c, char *out, size_t n) {
  char d[512];
  cells_deployment_key(c, d, sizeof d);
  snprintf(out, n, "%.500s|%.16s|%.16s|%.100s|%.64s|%.16s|%.32s", d, c->f[C_ISL], c->f[C_OSL], c->f[C_LENGTHS],
           c->f[C_LOAD], c->f[C_REQUESTS], c->f[C_METRIC]);
}

amoe_status cells_open(cells_ctx *x, const amoe_cells_opts *o, amoe_err *e) {
  memset(x, 0, sizeof *x);
  x->o = o;
  AMOE_TRY(parse_file(o->path, &x->cf, e));
  char cpath[AMOE_PATH_MAX + 64];
  if (o->curves) snprintf(cpath, sizeof cpath, "%s", o->curves);
  else {
    snprintf(cpath, sizeof cpath, "%s", o->path);
    char *slash = strrchr(cpath, '/');
    snprintf(slash ? slash + 1 : cpath, sizeof cpath - (size_t)(slash ? slash + 1 - cpath : 0), "acceptance_curves.csv");
  }
  amoe_status st = read_curves(cpath, &x->cv, &x->ncv, e);
  if (st == AMOE_OK && o->work_dir) {
    snprintf(x->base, sizeof x->base, "%s", o->work_dir);
    st = amoe_mkdirs(x->base, e);
  } else if (st == AMOE_OK) {
    const char *t = getenv("TMPDIR");
    snprintf(x->base, sizeof x->base, "%s/acceptmoe-cells-XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(x->base)) st = amoe_fail(e, AMOE_EIO, "%s: cannot make a temporary folder: %s", x->base, strerror(errno));
    else x->made_tmp = 1;
  }
  for (int i = 0; i < x->cf.n; i++) x->cf.rows[i].predicted = x->cf.rows[i].little = NAN, x->cf.rows[i].run = -1;
  if (st != AMOE_OK) cells_close(x);
  return st;
}

void cells_close(cells_ctx *x) {
  if (x->made_tmp) nftw(x->base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(x->cv), free(x->cf.rows);
  memset(x, 0, sizeof *x);
}

amoe_status cells_predict(cells_ctx *x, const unsigned char *pick, char *const *extra, int nextra, double *pred,
                          int record, amoe_err *e) {
  const cell_file *cf = &x->cf;
  cell_run *runs = calloc((size_t)(cf->n ? cf->n : 1), sizeof *runs);
  int *of = calloc((size_t)(cf->n ? cf->n : 1), sizeof *of), nruns = 0;
  amoe_status st = runs && of ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  for (int i = 0; i < cf->n && st == AMOE_OK; i++) { /* rows to runs; a skipped row says why */
    cell *c = &cf->rows[i];
    pred[i] = NAN;
    of[i] = -1;
    if (!pick[i]) continue;
    cell_run r;
    char why[256];
    if (!row_run(c, x->cv, x->ncv, &r, why, sizeof why) ||
        (r.nset + nextra > RUN_SETS && snprintf(why, sizeof why, "more than %d overrides", RUN_SETS) > 0)) {
      if (record) snprintf(c->why, sizeof c->why, "%s", why);
      continue;
    }
    for (int k = 0; k < nextra; k++) snprintf(r.sets[r.nset++], sizeof r.sets[0], "%s", extra[k]);
    int n = snprintf(r.key, sizeof r.key, "%s", r.spec);
    for (int k = 0; k < r.nset; k++) n += snprintf(r.key + n, sizeof r.key - (size_t)n, "|%s", r.sets[k]);
    int j = 0;
    while (j < nruns && strcmp(runs[j].key, r.key)) j++;
    if (j == nruns) runs[nruns++] = r;
    of[i] = j;
  }
  /* the runs, in a folder of their own each (the first round's as run%03d) */
  for (int j = 0; j < nruns && st == AMOE_OK; j++) {
    cell_run *r = &runs[j];
    char dir[AMOE_PATH_MAX + 48], spec[AMOE_PATH_MAX + 64];
    if (x->round) snprintf(dir, sizeof dir, "%s/round%03d/run%03d", x->base, x->round, j);
    else snprintf(dir, sizeof dir, "%s/run%03d", x->base, j);
    snprintf(spec, sizeof spec, "%s/spec.yaml", dir);
    if ((st = amoe_mkdirs(dir, e))) break;
    FILE *f = fopen(spec, "w");
    if (!f || fputs(r->spec, f) < 0 || fclose(f)) {
      st = amoe_fail(e, AMOE_EIO, "%s: cannot write", spec);
      break;
    }
    if (record && !x->o->quiet) fprintf(stderr, "cells: run %d of %d\n", j + 1, nruns);
    char *sets[RUN_SETS];
    for (int i = 0; i < r->nset; i++) sets[i] = r->sets[i];
    amoe_err re = {{0}};
    const amoe_status rs = x->o->run(x->o->ctx, spec, sets, r->nset, dir, &re);
    if (rs == AMOE_EINTR) {
      st = amoe_fail(e, AMOE_EINTR, "interrupted");
      break;
    }
    r->done = rs == AMOE_OK && read_run(dir, r, &re) == AMOE_OK;
    if (!r->done) {
      r->failed = 1;
      snprintf(r->why, sizeof r->why, "the run failed: %.220s", re.msg[0] ? re.msg : "see its errors above");
    }
  }
  x->round++;
  for (int i = 0; i < cf->n && st == AMOE_OK; i++) {
    if (of[i] < 0) continue;
    const cell_run *r = &runs[of[i]];
    cell *c = &cf->rows[i];
    if (r->done) pred[i] = metric_of(r, c->metric);
    if (record && r->failed) snprintf(c->why, sizeof c->why, "%s", r->why);
    if (record && r->done) snprintf(c->note, sizeof c->note, "%s", r->policy_note);
    if (record) c->run = of[i];
    int clients;
    if (record && r->done && c->osl > 0 && sscanf(c->f[C_LOAD], "concurrency:%d", &clients) == 1)
      c->little = r->output_tok_s / c->osl * (r->ttft_mean_s + (c->osl - 1) * r->tpot_mean_s);
  }
  free(runs), free(of);
  return st;
}

/* ------------------------------------------------------------ the report */

static double ape(const cell *c, double predicted) { return fabs(predicted - c->value) / c->value; }

/* Little's law over each closed loop run (its first row): the clients
 * against requests/s x mean latency from the run's own TPOT and TTFT. A
 * run whose TPOT and throughput disagree shows it here; a loop of two
 * requests per client is below its clients by its first wave's start and
 * its last's drain. */
static void little(FILE *out, const cell_file *cf) {
  int n = 0;
  for (int i = 0; i < cf->n; i++) {
    const cell *c = &cf->rows[i];
    if (!c->ok || !isfinite(c->little)) continue;
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = cf->rows[j].ok && cf->rows[j].run == c->run;
    if (seen) continue;
    int clients = 0;
    sscanf(c->f[C_LOAD], "concurrency:%d", &clients);
    if (!n++) fprintf(out, "\nLittle's law over each closed loop (requests/s x (TTFT + (output - 1) TPOT), the run's own):\n\n"
                           "| row | clients | by Little | ratio |\n|---|---|---|---|\n");
    fprintf(out, "| %s | %d | %.4g | %.3f |\n", c->f[C_ID], clients, c->little, c->little / clients);
  }
}

/* The matrix: every row, then the MAPE per metric and per source, then the ratios. */
static void report(FILE *out, const cell_file *cf) {
  fprintf(out, "| id | metric | predicted | measured | error | status |\n|---|---|---|---|---|---|\n");
  for (int i = 0; i < cf->n; i++) {
    const cell *c = &cf->rows[i];
    if (c->ok)
      fprintf(out, "| %s | %s | %.4g | %.4g | %+.1f%% | ok%s%s |\n", c->f[C_ID], c->f[C_METRIC], c->predicted, c->value,
              100 * (c->predicted - c->value) / c->value, c->note[0] ? ", " : "", c->note);
    else if (strcmp(c->why, "not in --only"))
      fprintf(out, "| %s | %s | | %.4g | | skipped: %s |\n", c->f[C_ID], c->f[C_METRIC], c->value, c->why);
  }
  fprintf(out, "\nMean absolute percentage error:\n\n| by | group | rows | MAPE |\n|---|---|---|---|\n");
  {
    double s = 0;
    int n = 0;
    for (int i = 0; i < cf->n; i++)
      if (cf->rows[i].ok) s += ape(&cf->rows[i], cf->rows[i].predicted), n++;
    if (n) fprintf(out, "| all | every row run | %d | %.1f%% |\n", n, 100 * s / n);
  }
  for (int by = 0; by < 2; by++) {
    for (int i = 0; i < cf->n; i++) {
      const int col = by ? C_SOURCE : C_METRIC;
      if (!cf->rows[i].ok) continue;
      int first = 1;
      for (int j = 0; j < i && first; j++) first = !(cf->rows[j].ok && !strcmp(cf->rows[j].f[col], cf->rows[i].f[col]));
      if (!first) continue;
      double s = 0;
      int n = 0;
      for (int j = i; j < cf->n; j++)
        if (cf->rows[j].ok && !strcmp(cf->rows[j].f[col], cf->rows[i].f[col]))
          s += ape(&cf->rows[j], cf->rows[j].predicted), n++;
      fprintf(out, "| %s | %s | %d | %.1f%% |\n", by ? "source" : "metric", cf->rows[i].f[col], n, 100 * s / n);
    }
  }
  double rs = 0;
  int rn = 0;
  for (int i = 0; i < cf->n; i++) {
    const int j = cells_partner(cf, i);
    if (j < 0) continue;
    const cell *on = &cf->rows[i], *off = &cf->rows[j];
    const double m = on->value / off->value, p = on->predicted / off->predicted;
    if (!rn) fprintf(out, "\nSpeculation on over off (the headline):\n\n| on | off | metric | measured | predicted | error |\n"
                          "|---|---|---|---|---|---|\n");
    fprintf(out, "| %s | %s | %s | %.3f | %.3f | %+.1f%% |\n", on->f[C_ID], off->f[C_ID], on->f[C_METRIC], m, p,
            100 * (p - m) / m);
    rs += fabs(p - m) / m;
    rn++;
  }
  if (rn) fprintf(out, "\nRatio MAPE: %.1f%% over %d pairs\n", 100 * rs / rn, rn);
  else fprintf(out, "\nNo (deployment, load) was run with speculation both off and on.\n");
  little(out, cf);
}

int cells_partner(const cell_file *cf, int i) {
  const cell *on = &cf->rows[i];
  if (on->draft == 0 || !on->ok) return -1;
  char ka[1024], kb[1024];
  cells_base_key(on, ka, sizeof ka);
  for (int j = 0; j < cf->n; j++) {
    const cell *off = &cf->rows[j];
    if (off->draft != 0 || !off->ok) continue;
    cells_base_key(off, kb, sizeof kb);
    if (!strcmp(ka, kb)) return j;
  }
  return -1;
}

/* One line per input row (id,predicted,measured,error,status; with the
 * calibration, its prediction and error after them). */
static amoe_status write_csv(const char *path, const cell_file *cf, int calibrated, amoe_err *e) {
  amoe_afile a;
  AMOE_TRY(amoe_afile_open(&a, path, e));
  fprintf(a.f, "id,predicted,measured,error,status%s\n", calibrated ? ",calibrated,calibrated_error" : "");
  for (int i = 0; i < cf->n; i++) {
    const cell *c = &cf->rows[i];
    char why[300];
    snprintf(why, sizeof why, "%s", c->why);
    for (char *p = why; *p; p++)
      if (*p == ',' || *p == '"') *p = ';';
    if (c->ok)
      fprintf(a.f, "%s,%.9g,%.9g,%.6f,ok", c->f[C_ID], c->predicted, c->value, (c->predicted - c->value) / c->value);
    else
      fprintf(a.f, "%s,,%.9g,,%s", c->f[C_ID], c->value, why);
    if (calibrated && isfinite(c->calibrated))
      fprintf(a.f, ",%.9g,%.6f", c->calibrated, (c->calibrated - c->value) / c->value);
    else if (calibrated)
      fputs(",,", a.f);
    fputc('\n', a.f);
  }
  return amoe_afile_commit(&a, e);
}

amoe_status amoe_cells(const amoe_cells_opts *o, amoe_err *e) {
  cells_ctx x;
  AMOE_TRY(cells_open(&x, o, e));
  cell_file *cf = &x.cf;
  unsigned char *pick = calloc((size_t)(cf->n ? cf->n : 1), 1);
  double *pred = calloc((size_t)(cf->n ? cf->n : 1), sizeof *pred);
  amoe_status st = pick && pred ? AMOE_OK : amoe_fail(e, AMOE_ENOMEM, "out of memory");
  for (int i = 0; i < cf->n && st == AMOE_OK; i++) {
    pick[i] = (unsigned char)cells_wanted(o->only, cf->rows[i].f[C_ID]);
    if (!pick[i]) snprintf(cf->rows[i].why, sizeof cf->rows[i].why, "not in --only");
  }
  if (st == AMOE_OK) st = cells_predict(&x, pick, NULL, 0, pred, 1, e);
  for (int i = 0; i < cf->n && st == AMOE_OK; i++) {
    cf->rows[i].predicted = pred[i];
    cf->rows[i].ok = isfinite(pred[i]);
  }
  if (st == AMOE_OK) report(o->out, cf);
  if (st == AMOE_OK && o->calibrated) st = cells_calibrated(&x, o->out, e);
  if (st == AMOE_OK && o->csv_out) st = write_csv(o->csv_out, cf, o->calibrated, e);
  free(pick), free(pred);
  cells_close(&x);
  return st;
}
