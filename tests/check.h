/* A minimal test harness: CHECK counts, the closing line is
 * "N passed, N failed" (read by CI); exit 1 on any failure, 77 to skip. */
#ifndef AMOE_CHECK_H
#define AMOE_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Writes text to a fresh temporary file and returns its path; the previous
 * one is removed (one at a time). */
static inline const char *check_write_tmp(const char *text) {
  static char path[64];
  if (path[0]) remove(path);
  snprintf(path, sizeof path, "/tmp/amoe_test_XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, text, strlen(text)) < 0) path[0] = 0;
  if (fd >= 0) close(fd);
  return path;
}

static inline int check_done(void) {
  printf("%d passed, %d failed\n", check_pass, check_fail);
  return check_fail ? 1 : 0;
}

#endif
