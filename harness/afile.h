/* Files written whole or not at all: under a temporary name, synced and
 * renamed into place, so that an interrupted command never leaves a
 * half-written file; and the folders they go in. */
#ifndef AMOE_AFILE_H
#define AMOE_AFILE_H

#include <stdio.h>

#include "err.h"

typedef struct {
  FILE *f;
  char path[1200], tmp[1300];
} amoe_afile;

/* Opens path's temporary twin for writing. */
amoe_status amoe_afile_open(amoe_afile *a, const char *path, amoe_err *e);
/* Flushes, syncs and renames into place. */
amoe_status amoe_afile_commit(amoe_afile *a, amoe_err *e);
/* Closes and removes the temporary (no-op if not open). */
void amoe_afile_abort(amoe_afile *a);
/* mkdir -p, then a probe that the directory is writable. */
amoe_status amoe_mkdirs(const char *dir, amoe_err *e);

#endif
