/* A minimal test harness: CHECK counts, the closing line is
 * "N passed, N failed" (read by CI); exit 1 on any failure, 77 to skip. */
#ifndef AMOE_CHECK_H
#define AMOE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_pass, check_fail;

#define CHECK(cond, ...)                                                                 \
  do {                                                                                   \
    if (cond) {                                                                          \
      check_pass++;                                                                      \
    } else {                                                                             \
      check_fail++;                                                                      \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);           \
      fprintf(stderr, __VA_ARGS__);                                                      \
      fputc('\n', stderr);                                                               \
    }                                                                                    \
  } while (0)

static inline int check_done(void) {
  printf("%d passed, %d failed\n", check_pass, check_fail);
  return check_fail ? 1 : 0;
}

#endif
