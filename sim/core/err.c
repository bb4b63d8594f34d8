#include "err.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile sig_atomic_t amoe_interrupt;

amoe_status amoe_fail(amoe_err *e, amoe_status code, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

void amoe_err_prefix(amoe_err *e, const char *fmt, ...) {
  if (!e) return;
  char pre[512], old[sizeof e->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, e->msg, sizeof old);
  size_t n = strlen(pre);
  if (n > sizeof e->msg - 3) n = sizeof e->msg - 3;
  memcpy(e->msg, pre, n);
  memcpy(e->msg + n, ": ", 2);
  size_t rest = sizeof e->msg - n - 3, ol = strlen(old);
  if (ol > rest) ol = rest;
  memcpy(e->msg + n + 2, old, ol);
  e->msg[n + 2 + ol] = 0;
}

