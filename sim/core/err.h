/* Errors as values: every fallible function returns an amoe_status and, on
 * failure, fills an amoe_err with a message that names the place (file:line,
 * block and byte offset). Only main() turns a status into an exit code. */
#ifndef AMOE_ERR_H
#define AMOE_ERR_H

#include <signal.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  AMOE_OK = 0,
  AMOE_EINVAL = 1,  /* bad argument or spec value */
  AMOE_EIO = 2,     /* the OS refused a read or write */
  AMOE_EFORMAT = 3, /* a file's contents are malformed */
  AMOE_ENOMEM = 4,
  AMOE_EINTR = 5,   /* stopped on request (a signal): nothing was written */
  AMOE_END = 6      /* not an error: a stream of blocks has no more (the readers' *_next) */
} amoe_status;

typedef struct {
  char msg[2048];
} amoe_err;

/* Formats msg into e (if non-NULL) and returns code. */
amoe_status amoe_fail(amoe_err *e, amoe_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message. */
void amoe_err_prefix(amoe_err *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Set by main's SIGINT/SIGTERM handler; every long loop polls it and stops
 * with AMOE_EINTR (a source at its next block, merge between files,
 * calibrate-hw between measurements), so that every command stops cleanly
 * and writes nothing. */
extern volatile sig_atomic_t amoe_interrupt;

#define AMOE_TRY(expr)                                                         \
  do {                                                                         \
    amoe_status amoe_try_s_ = (expr);                                          \
    if (amoe_try_s_ != AMOE_OK) return amoe_try_s_;                            \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif
