/* Old and new simulator code in one process, timed in alternation, so that
 * this machine's swings (±30% within minutes) fall on both alike. Built by
 * scripts/ab.sh, which links two copies of libamoe_sim whose public names
 * it prefixed b_ (the old revision) and n_ (the working tree); their
 * structs must be laid out alike (the script checks the headers).
 *   ab replay TRACE POLICY ROUNDS: a whole run of the trace per round
 *   ab generate ROUNDS: 10 qwen3 blocks per round from each generator
 * Prints medians per block and the median of the per-round ratios
 * new/old, and whether both computed the same results. The order of the
 * two alternates each round (the second of two runs can gain from the
 * first's page cache or lose from its heat). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policy.h"
#include "run.h"
#include "source.h"
#include "spec_load.h"

/* what the old revision's amoe_source_next returns for a block: AMOE_OK
 * (0), or 1 before it returned an amoe_status (scripts/ab.sh says which) */
#ifndef AB_OLD_BLOCK
#define AB_OLD_BLOCK 0
#endif

#define AB_DECLARE(v)                                                                                         \
  amoe_status v##_amoe_source_open(amoe_source **, const amoe_workload_spec *, const amoe_model *, amoe_err *); \
  int v##_amoe_source_next(amoe_source *, amoe_block *, amoe_err *);                                          \
  int v##_amoe_source_m(const amoe_source *);                                                                 \
  void v##_amoe_block_init(amoe_block *, int, int, int);                                                      \
  amoe_status v##_amoe_run(const amoe_spec *, const amoe_offline *, amoe_source *, const amoe_run_hooks *, \
                           amoe_row_result *, amoe_err *);                                                    \
  int v##_amoe_verifier_find(const char *);                                                                   \
  int v##_amoe_draft_find(const char *);                                                                      \
  void v##_amoe_policy_init(amoe_policy_row *, int, int);                                                     \
  void v##_amoe_row_result_free(amoe_row_result *);
AB_DECLARE(b)
AB_DECLARE(n)

static double ab_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int ab_cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double ab_quantile(const double *v, int n, double q) {
  double s[1024];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, ab_cmp);
  return s[(int)lround(q * (n - 1))];
}

static void ab_report(const char *what, const double *tb, const double *tn, int rounds, int same) {
  double ratio[1024];
  for (int r = 0; r < rounds; r++) ratio[r] = tn[r] / tb[r];
  printf("%s: old %.1f us/block, new %.1f us/block (medians of %d rounds); new/old per round: median %.3f "
         "(quartiles %.3f-%.3f); %s\n",
         what, ab_quantile(tb, rounds, 0.5), ab_quantile(tn, rounds, 0.5), rounds, ab_quantile(ratio, rounds, 0.5),
         ab_quantile(ratio, rounds, 0.25), ab_quantile(ratio, rounds, 0.75),
         same ? "same results" : "DIFFERENT RESULTS");
}

static amoe_spec ab_qwen3(void) {
  amoe_spec s;
  amoe_diag d = {0};
  amoe_spec_defaults(&s);
  if (amoe_spec_load_preset(&s, 0, "qwen3-30b-a3b", "ab", &d) || amoe_spec_load_preset(&s, 1, "h200", "ab", &d)) {
    fprintf(stderr, "ab: presets not found\n");
    exit(2);
  }
  amoe_diag_free(&d);
  return s;
}

static int ab_replay(const char *trace, const char *policy, int rounds) {
  amoe_spec s = ab_qwen3();
  s.workload.source = AMOE_SRC_TRACE;
  snprintf(s.workload.path, sizeof s.workload.path, "%s", trace);
  s.workload.blocks = 0;
  s.npolicies = 1;
  amoe_spec sb = s, sn = s;
  const int vb = b_amoe_verifier_find(policy), vn = n_amoe_verifier_find(policy);
  if (vb < 0 || vn < 0) {
    fprintf(stderr, "ab: no verifier '%s'\n", policy);
    return 2;
  }
  b_amoe_policy_init(&sb.policies[0], b_amoe_draft_find("eagle"), vb);
  n_amoe_policy_init(&sn.policies[0], n_amoe_draft_find("eagle"), vn);
  static const amoe_offline offline = {.p = {1, 0.75, 0.55, 0.4, 0.28, 0.2}, .n = 6};
  amoe_err e;
  amoe_source *srcb, *srcn;
  if (b_amoe_source_open(&srcb, &sb.workload, &sb.model, &e) || n_amoe_source_open(&srcn, &sn.workload, &sn.model, &e)) {
    fprintf(stderr, "ab: %s\n", e.msg);
    return 1;
  }
  double tb[1024], tn[1024];
  int same = 1;
  for (int r = 0; r < rounds; r++) {
    amoe_row_result rb, rn;
    for (int half = 0; half < 2; half++) {
      const int old = (r + half) % 2 == 0;
      const double t0 = ab_now();
      const amoe_status st = old ? b_amoe_run(&sb, &offline, srcb, NULL, &rb, &e) : n_amoe_run(&sn, &offline, srcn, NULL, &rn, &e);
      if (st != AMOE_OK) {
        fprintf(stderr, "ab: %s\n", e.msg);
        return 1;
      }
      (old ? tb : tn)[r] = ab_now() - t0;
    }
    same &= !memcmp(&rb.tot, &rn.tot, sizeof rb.tot);
    tb[r] *= 1e6 / rb.tot.blocks;
    tn[r] *= 1e6 / rn.tot.blocks;
    b_amoe_row_result_free(&rb);
    n_amoe_row_result_free(&rn);
  }
  ab_report(policy, tb, tn, rounds, same);
  return same ? 0 : 3;
}

static int ab_generate(int rounds) {
  enum { PER = 10 };
  amoe_spec s = ab_qwen3();
  s.workload.blocks = 0;
  s.workload.threads = 1;
  amoe_err e;
  amoe_source *srcb, *srcn;
  if (b_amoe_source_open(&srcb, &s.workload, &s.model, &e) || n_amoe_source_open(&srcn, &s.workload, &s.model, &e)) {
    fprintf(stderr, "ab: %s\n", e.msg);
    return 1;
  }
  amoe_block bb, bn;
  b_amoe_block_init(&bb, s.model.moe_layers, s.model.experts, b_amoe_source_m(srcb));
  n_amoe_block_init(&bn, s.model.moe_layers, s.model.experts, n_amoe_source_m(srcn));
  double tb[1024], tn[1024];
  int same = 1;
  for (int r = 0; r < rounds; r++) {
    for (int half = 0; half < 2; half++) {
      const int old = (r + half) % 2 == 0;
      const double t0 = ab_now();
      for (int i = 0; i < PER; i++)
        if (old ? b_amoe_source_next(srcb, &bb, &e) != AB_OLD_BLOCK : n_amoe_source_next(srcn, &bn, &e) != AMOE_OK) {
          fprintf(stderr, "ab: %s\n", e.msg);
          return 1;
        }
      (old ? tb : tn)[r] = (ab_now() - t0) * 1e6 / PER;
    }
    const size_t cells = (size_t)bb.layers * (size_t)bb.n * (size_t)bb.m;
    same &= bb.n == bn.n && !memcmp(bb.ids, bn.ids, cells * sizeof *bb.ids) &&
            !memcmp(bb.logits, bn.logits, cells * sizeof *bb.logits);
  }
  ab_report("generate", tb, tn, rounds, same);
  return same ? 0 : 3;
}

static int ab_rounds(const char *a) {
  const int r = atoi(a);
  return r < 1 ? 1 : r > 1024 ? 1024 : r;
}

int main(int argc, char **argv) {
  if (argc == 5 && !strcmp(argv[1], "replay")) return ab_replay(argv[2], argv[3], ab_rounds(argv[4]));
  if (argc == 3 && !strcmp(argv[1], "generate")) return ab_generate(ab_rounds(argv[2]));
  fprintf(stderr, "usage: ab replay TRACE POLICY ROUNDS | ab generate ROUNDS (built by scripts/ab.sh)\n");
  return 2;
}
