#include "afile.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

amoe_status amoe_afile_open(amoe_afile *a, const char *path, amoe_err *e) {
  memset(a, 0, sizeof *a);
  snprintf(a->path, sizeof a->path, "%s", path);
  snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", path, (long)getpid());
  a->f = fopen(a->tmp, "wb");
  if (!a->f) return amoe_fail(e, AMOE_EIO, "%s: cannot write: %s", path, strerror(errno));
  return AMOE_OK;
}

amoe_status amoe_afile_commit(amoe_afile *a, amoe_err *e) {
  if (!a->f) return AMOE_OK;
  int bad = ferror(a->f) || fflush(a->f) != 0 || fsync(fileno(a->f)) != 0;
  int err = errno;
  if (fclose(a->f) != 0) bad = 1;
  a->f = NULL;
  if (bad || rename(a->tmp, a->path) != 0) {
    if (!bad) err = errno;
    remove(a->tmp);
    return amoe_fail(e, AMOE_EIO, "%s: write failed: %s", a->path, strerror(err));
  }
  return AMOE_OK;
}

void amoe_afile_abort(amoe_afile *a) {
  if (!a->f) return;
  fclose(a->f);
  a->f = NULL;
  remove(a->tmp);
}

amoe_status amoe_mkdirs(const char *dir, amoe_err *e) {
  char buf[1200];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return amoe_fail(e, AMOE_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0777) != 0 && errno != EEXIST)
    return amoe_fail(e, AMOE_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
  amoe_afile probe;
  char pp[1250];
  snprintf(pp, sizeof pp, "%s/.write-probe", buf);
  AMOE_TRY(amoe_afile_open(&probe, pp, e));
  amoe_afile_abort(&probe);
  return AMOE_OK;
}
