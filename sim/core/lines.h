/* Reading a text file line by line with the positions errors name: the
 * line's number and its first byte's offset (the CSV readers: arrival
 * traces, serving cells). */
#ifndef AMOE_LINES_H
#define AMOE_LINES_H

#include <stdio.h>

#include "err.h"

typedef struct {
  FILE *f;
  const char *path;
  int line;    /* the last line read, from 1 */
  long at;     /* its first byte's offset */
  long offset; /* the next line's */
} amoe_lines;

/* The next line that is neither blank nor a `#` comment into buf, its line
 * ending dropped; r->line and r->at say where it is. AMOE_END at the end of
 * the file; AMOE_EFORMAT (path:line:1 and the byte) for a line longer than
 * size - 2 characters; AMOE_EIO for a read error. */
amoe_status amoe_lines_next(amoe_lines *r, char *buf, size_t size, amoe_err *e);

#endif
