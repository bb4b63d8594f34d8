#include "lines.h"

#include <string.h>

amoe_status amoe_lines_next(amoe_lines *r, char *buf, size_t size, amoe_err *e) {
  while (fgets(buf, (int)size, r->f)) {
    r->line++;
    r->at = r->offset;
    r->offset += (long)strlen(buf);
    if (!strchr(buf, '\n') && !feof(r->f))
      return amoe_fail(e, AMOE_EFORMAT, "%s:%d:1 (byte %ld): a line longer than %zu characters", r->path, r->line, r->at,
                       size - 2);
    buf[strcspn(buf, "\r\n")] = 0;
    const char *p = buf;
    while (*p == ' ' || *p == '\t') p++;
    if (*p && *p != '#') return AMOE_OK;
  }
  return ferror(r->f) ? amoe_fail(e, AMOE_EIO, "%s: read error", r->path) : AMOE_END;
}
