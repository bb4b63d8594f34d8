#include "trace.h"

#include "clones.h"
#include "grow.h"
#include "router.h"
#include "fast.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HDR_FIXED 52
#define BLK_HDR3 32 /* versions 2 and 3: two checksums */
#define BLK_HDR 40  /* version 4: three */
static const char MAGIC[8] = {'A', 'M', 'O', 'E', 'T', 'R', 'C', 0};
static const uint32_t BLK_MAGIC = 0x31424d41u; /* "AMB1" */

static size_t pad8(size_t x) { return (x + 7) & ~(size_t)7; }

/* Where a block's arrays lie in its payload. Version 4: the top-k logits,
 * the normalisers, then the other logits (rest), each section with its own
 * checksum. Versions 2 and 3: all logits at `top`, then the normalisers
 * (version 3), no rest. */
typedef struct {
  size_t parent, logp, score, accepted, ids, top, inv, rest, total;
} layout;

/* Bytes per stored expert id: one while every id fits. */
static size_t id_bytes(int experts) { return experts <= 256 ? 1 : 2; }

static layout layout_of(uint32_t version, size_t n, size_t layers, size_t m, size_t k, size_t idb) {
  const size_t ln = layers * n, lnm = ln * m, lnk = version >= 4 ? ln * k : lnm;
  layout o;
  o.parent = 16;
  o.logp = o.parent + pad8(4 * n);
  o.score = o.logp + pad8(4 * n);
  o.accepted = o.score + pad8(4 * n);
  o.ids = o.accepted + pad8(n);
  o.top = o.ids + pad8(idb * lnm);
  o.inv = o.top + pad8(2 * lnk);
  o.rest = o.inv + (version >= 3 ? pad8(4 * ln) : 0);
  o.total = o.rest + pad8(2 * (lnm - lnk));
  return o;
}

/* The stripes of amoe_trace_checksum (arch/x86/trace_x86.c: four lanes per
 * register, the same sums). Returns the words done. */
static size_t checksum_stripes(const unsigned char *p, size_t words, uint64_t *acc, uint64_t *key) {
  size_t i = 0;
  for (; i + 8 <= words; i += 8)
    for (int j = 0; j < 8; j++) {
      uint64_t w;
      memcpy(&w, p + 8 * (i + j), 8);
      const uint64_t x = w ^ key[j];
      acc[j] += (x & 0xffffffffULL) * (x >> 32) + w;
      key[j] += 0x9e3779b97f4a7c15ULL;
    }
  return i;
}

/* The checksum, its stripes by the plain loop or the vector path. */
static uint64_t checksum(const void *data, size_t bytes, int vec) {
  /* Eight lanes over 64-byte stripes. A lane adds the word and the product
   * of the two halves of (word ^ key), whose key changes every stripe so
   * that moved data changes the sum; 32x32-bit products vectorise. The
   * lanes are mixed at the end. */
  const unsigned char *p = data;
  uint64_t acc[8], key[8];
  for (int j = 0; j < 8; j++) {
    acc[j] = 0x243f6a8885a308d3ULL * (uint64_t)(j + 1);
    key[j] = 0x13198a2e03707344ULL ^ ((uint64_t)j << 56);
  }
  const size_t words = bytes / 8;
  size_t i = vec ? amoe_fast.checksum_stripes(p, words, acc, key) : checksum_stripes(p, words, acc, key);
  uint64_t h = bytes;
  for (; i < words; i++) {
    uint64_t w;
    memcpy(&w, p + 8 * i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (size_t k = words * 8; k < bytes; k++) h = (h ^ p[k]) * 0x100000001b3ULL;
  for (int j = 0; j < 8; j++) h = (h ^ acc[j]) * 0x9e3779b97f4a7c15ULL, h ^= h >> 32;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

uint64_t amoe_trace_checksum(const void *data, size_t bytes) {
  return checksum(data, bytes, amoe_fast.checksum_stripes != NULL);
}
uint64_t amoe_trace_checksum_generic(const void *data, size_t bytes) { return checksum(data, bytes, 0); }

static int little_endian(void) {
  uint16_t x = 1;
  return *(unsigned char *)&x == 1;
}

/* rows pieces of `bytes` from src (src_stride apart) to dst (dst_stride
 * apart): how a node-layer's m logits become its k top-k ones and m − k
 * others in a version-4 block, and back. In whole 16-byte pieces where the
 * size allows (k = 8, m = 32), not a library call per piece, which cost a
 * reader more than the read. */
static void copy_rows(unsigned char *dst, size_t dst_stride, const unsigned char *src, size_t src_stride, size_t rows,
                      size_t bytes) {
  if (bytes % 16 == 0)
    for (size_t i = 0; i < rows; i++)
      for (size_t c = 0; c < bytes; c += 16) memcpy(dst + dst_stride * i + c, src + src_stride * i + c, 16);
  else
    for (size_t i = 0; i < rows; i++) memcpy(dst + dst_stride * i, src + src_stride * i, bytes);
}

/* ---------------------------------------------------------------- writer */

struct amoe_trace_writer {
  FILE *f;
  char *path, *tmp;
  int layers, experts, top_k, m;
  uint64_t count;
  size_t cap;
  uint64_t *offsets;
  unsigned char *buf;
  size_t buf_cap;
  uint64_t pos;
};

static amoe_status wr(amoe_trace_writer *w, const void *p, size_t n, amoe_err *e) {
  if (fwrite(p, 1, n, w->f) != n)
    return amoe_fail(e, AMOE_EIO, "%s: write failed: %s", w->path, strerror(errno));
  w->pos += n;
  return AMOE_OK;
}

amoe_status amoe_trace_create(amoe_trace_writer **out, const char *path, int layers, int experts,
                              int top_k, int m, const char *provenance, amoe_err *e) {
  *out = NULL;
  if (!little_endian()) return amoe_fail(e, AMOE_EINVAL, "the .amt format needs a little-endian host");
  if (layers < 1 || layers > 256 || experts < 2 || experts > 1024 || top_k < 1 || m < top_k || m > experts)
    return amoe_fail(e, AMOE_EINVAL, "%s: impossible trace shape (layers %d, experts %d, top_k %d, m %d)", path,
                     layers, experts, top_k, m);
  amoe_trace_writer *w = calloc(1, sizeof *w);
  if (!w) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  size_t pl = strlen(path);
  w->path = malloc(pl + 1);
  w->tmp = malloc(pl + 32);
  if (!w->path || !w->tmp) {
    free(w->path);
    free(w->tmp);
    free(w);
    return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  }
  memcpy(w->path, path, pl + 1);
  snprintf(w->tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
  w->f = fopen(w->tmp, "wb");
  if (!w->f) {
    amoe_status st = amoe_fail(e, AMOE_EIO, "%s: cannot create: %s", path, strerror(errno));
    free(w->path);
    free(w->tmp);
    free(w);
    return st;
  }
  w->layers = layers;
  w->experts = experts;
  w->top_k = top_k;
  w->m = m;
  const char *prov = provenance ? provenance : "{}";
  uint32_t plen = (uint32_t)strlen(prov);
  uint32_t hb = (uint32_t)pad8(HDR_FIXED + plen);
  unsigned char hdr[HDR_FIXED];
  uint32_t v32[6] = {AMOE_TRACE_VERSION, hb, (uint32_t)layers, (uint32_t)experts, (uint32_t)top_k,
                     (uint32_t)m};
  uint64_t zero = 0;
  memcpy(hdr, MAGIC, 8);
  memcpy(hdr + 8, v32, 24);
  memcpy(hdr + 32, &zero, 8);
  memcpy(hdr + 40, &zero, 8);
  memcpy(hdr + 48, &plen, 4);
  amoe_status st = wr(w, hdr, HDR_FIXED, e);
  if (st == AMOE_OK) st = wr(w, prov, plen, e);
  if (st == AMOE_OK && hb > HDR_FIXED + plen) st = wr(w, "\0\0\0\0\0\0\0", hb - HDR_FIXED - plen, e);
  if (st != AMOE_OK) {
    amoe_trace_abort(w);
    return st;
  }
  *out = w;
  return AMOE_OK;
}

amoe_status amoe_trace_write(amoe_trace_writer *w, const amoe_block *b, amoe_err *e) {
  if (b->layers != w->layers || b->m != w->m || b->experts != w->experts)
    return amoe_fail(e, AMOE_EINVAL, "%s: block shape differs from the trace header", w->path);
  /* the reader leaves distinct ids to the checksum: check them here */
  if (amoe_block_check_pairs(b, 1, e) != AMOE_OK) {
    amoe_err_prefix(e, "%s: block %llu", w->path, (unsigned long long)w->count);
    return AMOE_EFORMAT;
  }
  const size_t n = (size_t)b->n, ln = (size_t)b->layers * n, lnm = ln * b->m, m = (size_t)b->m,
               k = (size_t)w->top_k;
  layout o = layout_of(AMOE_TRACE_VERSION, n, (size_t)b->layers, m, k, id_bytes(w->experts));
  unsigned char *nb = amoe_grow(w->buf, &w->buf_cap, o.total, 1, o.total);
  if (!nb) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  unsigned char *p = w->buf = nb;
  memset(p, 0, o.total);
  uint64_t idx = w->count;
  memcpy(p, &idx, 8);
  memcpy(p + 8, &b->request, 4);
  memcpy(p + 12, &b->step, 4);
  memcpy(p + o.parent, b->parent, 4 * n);
  memcpy(p + o.logp, b->logp, 4 * n);
  memcpy(p + o.score, b->score, 4 * n);
  memcpy(p + o.accepted, b->accepted, n);
  if (id_bytes(w->experts) == 1)
    for (size_t i = 0; i < lnm; i++) p[o.ids + i] = (unsigned char)b->ids[i];
  else
    memcpy(p + o.ids, b->ids, 2 * lnm);
  const unsigned char *z = (const unsigned char *)b->logits; /* each node-layer's top-k, then the rest */
  copy_rows(p + o.top, 2 * k, z, 2 * m, ln, 2 * k);
  copy_rows(p + o.rest, 2 * (m - k), z + 2 * k, 2 * m, ln, 2 * (m - k));
  for (size_t i = 0; i < ln; i++) { /* computed here from the logits, never taken from the block */
    const float inv = amoe_router_softmax_inv(b->logits + i * m, b->m);
    memcpy(p + o.inv + 4 * i, &inv, 4);
  }
  uint64_t *no = amoe_grow(w->offsets, &w->cap, (size_t)w->count + 1, 8, 1024);
  if (!no) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  w->offsets = no;
  w->offsets[w->count] = w->pos;
  unsigned char hdr[BLK_HDR];
  uint32_t nn = (uint32_t)n;
  /* a checksum per section: a reader skips the sections it was not asked
   * for, and their checksums */
  const uint64_t pb = o.total, ck[3] = {amoe_trace_checksum(p, o.top), amoe_trace_checksum(p + o.top, o.rest - o.top),
                                        amoe_trace_checksum(p + o.rest, o.total - o.rest)};
  memcpy(hdr, &BLK_MAGIC, 4);
  memcpy(hdr + 4, &nn, 4);
  memcpy(hdr + 8, &pb, 8);
  memcpy(hdr + 16, ck, 24);
  AMOE_TRY(wr(w, hdr, BLK_HDR, e));
  AMOE_TRY(wr(w, p, o.total, e));
  w->count++;
  return AMOE_OK;
}

static void writer_free(amoe_trace_writer *w) {
  free(w->offsets);
  free(w->buf);
  free(w->path);
  free(w->tmp);
  free(w);
}

void amoe_trace_abort(amoe_trace_writer *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  remove(w->tmp);
  writer_free(w);
}

amoe_status amoe_trace_close(amoe_trace_writer *w, amoe_err *e) {
  uint64_t table = w->pos;
  amoe_status st = AMOE_OK;
  if (w->count) st = wr(w, w->offsets, w->count * 8, e);
  uint64_t ck = amoe_trace_checksum(w->offsets, w->count * 8);
  if (st == AMOE_OK) st = wr(w, &ck, 8, e);
  if (st == AMOE_OK && (fseek(w->f, 32, SEEK_SET) != 0 || fwrite(&w->count, 8, 1, w->f) != 1 ||
                        fwrite(&table, 8, 1, w->f) != 1))
    st = amoe_fail(e, AMOE_EIO, "%s: cannot finish the header: %s", w->path, strerror(errno));
  if (st == AMOE_OK && (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0))
    st = amoe_fail(e, AMOE_EIO, "%s: flush failed: %s", w->path, strerror(errno));
  if (fclose(w->f) != 0 && st == AMOE_OK)
    st = amoe_fail(e, AMOE_EIO, "%s: close failed: %s", w->path, strerror(errno));
  w->f = NULL;
  if (st == AMOE_OK && rename(w->tmp, w->path) != 0)
    st = amoe_fail(e, AMOE_EIO, "%s: cannot rename into place: %s", w->path, strerror(errno));
  if (st != AMOE_OK) remove(w->tmp);
  writer_free(w);
  return st;
}

/* ---------------------------------------------------------------- reader */

struct amoe_trace_reader {
  FILE *f;
  char *path;
  amoe_trace_info info;
  uint64_t file_bytes, data_start, table_offset, next_index, pos;
  unsigned char *buf;
  size_t buf_cap;
  uint8_t *depth;
  size_t depth_cap;
  uint16_t *ids; /* widened ids when the file stores them as bytes */
  size_t ids_cap;
  amoe_f16 *full; /* version 4, all logits wanted: each node-layer's top-k and rest put together */
  size_t full_cap;
  amoe_logits want;
  uint32_t version;
  size_t blk_hdr;
};

const amoe_trace_info *amoe_trace_info_of(const amoe_trace_reader *r) { return &r->info; }

void amoe_trace_want_logits(amoe_trace_reader *r, amoe_logits want) { r->want = want; }

int amoe_trace_sniff(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  char m[8];
  int ok = fread(m, 1, 8, f) == 8 && memcmp(m, MAGIC, 8) == 0;
  fclose(f);
  return ok;
}

void amoe_trace_close_reader(amoe_trace_reader *r) {
  if (!r) return;
  if (r->f) fclose(r->f);
  free(r->path);
  free(r->info.provenance);
  free(r->buf);
  free(r->depth);
  free(r->ids);
  free(r->full);
  free(r);
}

amoe_status amoe_trace_open(amoe_trace_reader **out, const char *path, amoe_err *e) {
  *out = NULL;
  if (!little_endian()) return amoe_fail(e, AMOE_EINVAL, "the .amt format needs a little-endian host");
  amoe_trace_reader *r = calloc(1, sizeof *r);
  if (!r) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  r->want = AMOE_LOGITS_ALL;
  r->path = strdup(path);
  r->f = fopen(path, "rb");
  amoe_status st = AMOE_OK;
  struct stat sb;
  unsigned char h[HDR_FIXED];
  if (!r->path)
    st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
  else if (!r->f)
    st = amoe_fail(e, AMOE_EIO, "%s: cannot open: %s", path, strerror(errno));
  else if (fstat(fileno(r->f), &sb) != 0)
    st = amoe_fail(e, AMOE_EIO, "%s: cannot stat: %s", path, strerror(errno));
  else if (fread(h, 1, HDR_FIXED, r->f) != HDR_FIXED)
    st = amoe_fail(e, AMOE_EFORMAT, "%s: byte offset 0: truncated header (file has %lld bytes)", path,
                   (long long)sb.st_size);
  else if (memcmp(h, MAGIC, 8) != 0)
    st = amoe_fail(e, AMOE_EFORMAT, "%s: byte offset 0: not an .amt trace (bad magic)", path);
  if (st != AMOE_OK) {
    amoe_trace_close_reader(r);
    return st;
  }
  uint32_t v32[6], plen;
  uint64_t count, table;
  memcpy(v32, h + 8, 24);
  memcpy(&count, h + 32, 8);
  memcpy(&table, h + 40, 8);
  memcpy(&plen, h + 48, 4);
  r->file_bytes = (uint64_t)sb.st_size;
  if (v32[0] < 2 || v32[0] > AMOE_TRACE_VERSION)
    st = amoe_fail(e, AMOE_EFORMAT,
                   "%s: byte offset 8: version %u, this build reads 2 to %u (re-create the trace with this build)",
                   path, v32[0], AMOE_TRACE_VERSION);
  else if (v32[2] < 1 || v32[2] > 256 || v32[3] < 2 || v32[3] > 1024 || v32[4] < 1 ||
           v32[4] > v32[3] || v32[5] < v32[4] || v32[5] > v32[3])
    st = amoe_fail(e, AMOE_EFORMAT,
                   "%s: byte offset 16: impossible model signature (layers %u, experts %u, top_k %u, m %u)",
                   path, v32[2], v32[3], v32[4], v32[5]);
  else if (v32[1] != pad8(HDR_FIXED + (uint64_t)plen) || v32[1] > r->file_bytes)
    st = amoe_fail(e, AMOE_EFORMAT, "%s: byte offset 12: header length %u does not fit the file", path,
                   v32[1]);
  else if (table < v32[1] || table > r->file_bytes || count > (r->file_bytes - table) / 8 ||
           r->file_bytes - table != count * 8 + 8)
    st = amoe_fail(e, AMOE_EFORMAT,
                   "%s: byte offset 32: block count %llu / table offset %llu do not fit a file of %llu bytes "
                   "(truncated, or not finished by its writer)",
                   path, (unsigned long long)count, (unsigned long long)table,
                   (unsigned long long)r->file_bytes);
  if (st == AMOE_OK) {
    r->info.provenance = calloc(plen + 1, 1);
    if (!r->info.provenance)
      st = amoe_fail(e, AMOE_ENOMEM, "out of memory");
    else if (fread(r->info.provenance, 1, plen, r->f) != plen)
      st = amoe_fail(e, AMOE_EFORMAT, "%s: byte offset %d: truncated provenance", path, HDR_FIXED);
  }
  if (st != AMOE_OK) {
    amoe_trace_close_reader(r);
    return st;
  }
  r->info.layers = (int)v32[2];
  r->info.experts = (int)v32[3];
  r->info.top_k = (int)v32[4];
  r->info.m = (int)v32[5];
  r->version = v32[0];
  r->blk_hdr = r->version >= 4 ? BLK_HDR : BLK_HDR3;
  r->info.blocks = count;
  r->data_start = v32[1];
  r->table_offset = table;
  st = amoe_trace_rewind(r, e);
  if (st != AMOE_OK) {
    amoe_trace_close_reader(r);
    return st;
  }
  *out = r;
  return AMOE_OK;
}

amoe_status amoe_trace_rewind(amoe_trace_reader *r, amoe_err *e) {
  (void)e; /* blocks are read at explicit offsets */
  r->pos = r->data_start;
  r->next_index = 0;
  return AMOE_OK;
}

/* Block `block`'s byte offset from the table (block < the block count). */
static amoe_status table_entry(const amoe_trace_reader *r, uint64_t block, uint64_t *off, amoe_err *e) {
  const uint64_t at = r->table_offset + 8 * block;
  if (pread(fileno(r->f), off, 8, (off_t)at) != 8)
    return amoe_fail(e, AMOE_EFORMAT, "%s: byte offset %llu: truncated block table", r->path, (unsigned long long)at);
  if (*off < r->data_start || *off >= r->table_offset)
    return amoe_fail(e, AMOE_EFORMAT, "%s: byte offset %llu: block %llu's offset %llu lies outside the blocks",
                     r->path, (unsigned long long)at, (unsigned long long)block, (unsigned long long)*off);
  return AMOE_OK;
}

amoe_status amoe_trace_seek(amoe_trace_reader *r, uint64_t block, amoe_err *e) {
  if (block > r->info.blocks)
    return amoe_fail(e, AMOE_EINVAL, "%s: block %llu: the trace has %llu", r->path, (unsigned long long)block,
                     (unsigned long long)r->info.blocks);
  uint64_t off = r->table_offset; /* (one past the last: at the end) */
  if (block < r->info.blocks) AMOE_TRY(table_entry(r, block, &off, e));
  r->pos = off;
  r->next_index = block;
  return AMOE_OK;
}

amoe_status amoe_trace_block_request(amoe_trace_reader *r, uint64_t block, uint32_t *request, amoe_err *e) {
  uint64_t off;
  if (block >= r->info.blocks)
    return amoe_fail(e, AMOE_EINVAL, "%s: block %llu: the trace has %llu", r->path, (unsigned long long)block,
                     (unsigned long long)r->info.blocks);
  AMOE_TRY(table_entry(r, block, &off, e));
  unsigned char h[16];
  const uint64_t p = off + r->blk_hdr;
  if (p + 16 > r->table_offset || pread(fileno(r->f), h, 16, (off_t)p) != 16)
    return amoe_fail(e, AMOE_EFORMAT, "%s: block %llu at byte offset %llu: truncated block", r->path,
                     (unsigned long long)block, (unsigned long long)off);
  uint64_t idx;
  memcpy(&idx, h, 8);
  memcpy(request, h + 8, 4);
  if (idx != block)
    return amoe_fail(e, AMOE_EFORMAT, "%s: block %llu at byte offset %llu: stored index %llu out of sequence", r->path,
                     (unsigned long long)block, (unsigned long long)p, (unsigned long long)idx);
  return AMOE_OK;
}

/* Byte ids to u16; nonzero when one exceeds emax. */
static AMOE_CLONES unsigned widen_ids(const uint8_t *restrict src, uint16_t *restrict dst, size_t n, uint8_t emax) {
  uint8_t over = 0;
  for (size_t i = 0; i < n; i++) {
    over |= (uint8_t)(src[i] > emax);
    dst[i] = src[i];
  }
  return over;
}

/* The first k of each row of m ids, widened, and whether any is above
 * emax. */
static AMOE_CLONES unsigned widen_top_ids(const uint8_t *restrict src, uint16_t *restrict dst, size_t rows, size_t m,
                                          size_t k, uint8_t emax) {
  uint8_t over = 0;
  if (k == 8) { /* (a fixed count the compiler vectorises: every Qwen3 and DeepSeek router) */
    uint8_t mx[8] = {0};
    for (size_t r = 0; r < rows; r++) {
      const uint8_t *restrict s8 = src + r * m;
      uint16_t *restrict d8 = dst + r * 8;
      for (int j = 0; j < 8; j++) {
        mx[j] = s8[j] > mx[j] ? s8[j] : mx[j];
        d8[j] = s8[j];
      }
    }
    for (int j = 0; j < 8; j++) over |= (uint8_t)(mx[j] > emax);
    return over;
  }
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < k; j++) {
      const uint8_t v = src[r * m + j];
      over |= (uint8_t)(v > emax);
      dst[r * k + j] = v;
    }
  return over;
}

amoe_status amoe_trace_next(amoe_trace_reader *r, amoe_block *b, amoe_err *e) {
  uint64_t at = r->pos, bi = r->next_index;
  if (bi == r->info.blocks) {
    if (at != r->table_offset)
      return amoe_fail(e, AMOE_EFORMAT, "%s: byte offset %llu: data after the last block (%llu)", r->path,
                        (unsigned long long)at, (unsigned long long)bi);
    return AMOE_END;
  }
#define BAD(...) amoe_fail(e, AMOE_EFORMAT, __VA_ARGS__)
  const int fd = fileno(r->f);
  const size_t bh = r->blk_hdr;
  unsigned char h[BLK_HDR];
  if (r->table_offset - at < bh || pread(fd, h, bh, (off_t)at) != (ssize_t)bh)
    return BAD("%s: block %llu at byte offset %llu: truncated block header", r->path, (unsigned long long)bi,
               (unsigned long long)at);
  uint32_t mg, n;
  uint64_t pb, ck[3] = {0, 0, 0};
  memcpy(&mg, h, 4);
  memcpy(&n, h + 4, 4);
  memcpy(&pb, h + 8, 8);
  memcpy(ck, h + 16, bh - 16);
  if (mg != BLK_MAGIC)
    return BAD("%s: block %llu at byte offset %llu: bad block marker", r->path, (unsigned long long)bi,
               (unsigned long long)at);
  if (n < 1 || n > AMOE_MAX_NODES)
    return BAD("%s: block %llu at byte offset %llu: node count %u out of range 1..%d", r->path,
               (unsigned long long)bi, (unsigned long long)(at + 4), n, AMOE_MAX_NODES);
  const size_t m = (size_t)r->info.m, k = (size_t)r->info.top_k, ln = (size_t)r->info.layers * n, lnm = ln * m;
  const size_t idb = id_bytes(r->info.experts);
  const layout o = layout_of(r->version, n, (size_t)r->info.layers, m, k, idb);
  if (pb != o.total)
    return BAD("%s: block %llu at byte offset %llu: payload length %llu, expected %zu for %u nodes", r->path,
               (unsigned long long)bi, (unsigned long long)(at + 8), (unsigned long long)pb, o.total, n);
  if (r->table_offset - at - bh < pb)
    return BAD("%s: block %llu at byte offset %llu: payload runs past the end of the data (truncated?)",
               r->path, (unsigned long long)bi, (unsigned long long)(at + bh));
  unsigned char *nb = amoe_grow(r->buf, &r->buf_cap, pb, 1, pb);
  if (!nb) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  r->buf = nb;
  /* only the sections wanted: results cannot depend on bytes never read
   * (before version 4 the normalisers follow all the logits) */
  const amoe_logits want = r->version < 4 && r->want == AMOE_LOGITS_TOP ? AMOE_LOGITS_ALL : r->want;
  const size_t got = want == AMOE_LOGITS_NONE ? o.top : want == AMOE_LOGITS_TOP ? o.rest : o.total;
  if ((size_t)pread(fd, r->buf, got, (off_t)(at + bh)) != got)
    return BAD("%s: block %llu at byte offset %llu: truncated payload", r->path, (unsigned long long)bi,
               (unsigned long long)(at + bh));
  static const char *const what[2][3] = {{"the tree and ids", "the logits or their normalisers", ""},
                                         {"the tree and ids", "the top-k logits or their normalisers",
                                          "the logits past the top-k"}};
  const size_t sec[4] = {0, o.top, r->version >= 4 ? o.rest : o.total, o.total};
  for (int q = 0; q < 3 && sec[q] < got; q++)
    if (amoe_trace_checksum(r->buf + sec[q], sec[q + 1] - sec[q]) != ck[q])
      return BAD("%s: block %llu at byte offset %llu: checksum mismatch in %s (corrupted)", r->path,
                 (unsigned long long)bi, (unsigned long long)(at + bh + sec[q]),
                 what[r->version >= 4][q]);
  uint64_t idx;
  memcpy(&idx, r->buf, 8);
  if (idx != bi)
    return BAD("%s: block %llu at byte offset %llu: stored index %llu out of sequence", r->path,
               (unsigned long long)bi, (unsigned long long)(at + bh), (unsigned long long)idx);
  uint8_t *nd = amoe_grow(r->depth, &r->depth_cap, n, 1, n);
  if (!nd) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
  r->depth = nd;
  if (idb == 1) {
    uint16_t *ni = amoe_grow(r->ids, &r->ids_cap, lnm, 2, lnm);
    if (!ni) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
    r->ids = ni;
  }
  /* point the block into our buffer */
  amoe_block_borrow(b, r->info.layers, r->info.experts, r->info.m, (int)n);
  b->index = idx;
  memcpy(&b->request, r->buf + 8, 4);
  memcpy(&b->step, r->buf + 12, 4);
  b->parent = (int32_t *)(void *)(r->buf + o.parent);
  b->logp = (float *)(void *)(r->buf + o.logp);
  b->score = (float *)(void *)(r->buf + o.score);
  b->accepted = r->buf + o.accepted;
  b->lm = (int)m;
  b->logits = want == AMOE_LOGITS_NONE ? NULL : (amoe_f16 *)(void *)(r->buf + o.top);
  b->softmax_inv = want != AMOE_LOGITS_NONE && r->version >= 3 ? (const float *)(const void *)(r->buf + o.inv) : NULL;
  if (r->version >= 4 && want == AMOE_LOGITS_TOP)
    b->lm = (int)k;
  else if (r->version >= 4 && want == AMOE_LOGITS_ALL && k < m) { /* put each node-layer's two parts together */
    amoe_f16 *nf = amoe_grow(r->full, &r->full_cap, lnm, 2, lnm);
    if (!nf) return amoe_fail(e, AMOE_ENOMEM, "out of memory");
    r->full = nf;
    unsigned char *z = (unsigned char *)r->full;
    copy_rows(z, 2 * m, r->buf + o.top, 2 * k, ln, 2 * k);
    copy_rows(z + 2 * k, 2 * m, r->buf + o.rest, 2 * (m - k), ln, 2 * (m - k));
    b->logits = r->full;
  }
  b->depth = r->depth;
  /* Ids index arrays everywhere: check their range here (the one check a
   * crash could come from). Order, distinct ids and usable logits were
   * checked by the writer and are protected by the checksum;
   * `acceptmoe inspect` checks them again. */
  const unsigned emax = (unsigned)r->info.experts - 1;
  unsigned over = 0;
  if (idb == 1 && want == AMOE_LOGITS_NONE && k < m) { /* no logits: the top-k ids alone (routes are top-k), a
                                                        * quarter of the bytes at k = m/4 for every later stage */
    over = widen_top_ids(r->buf + o.ids, r->ids, ln, m, k, (uint8_t)emax);
    b->ids = r->ids;
    b->m = b->lm = (int)k;
  } else if (idb == 1) { /* widen to u16 and check in one vectorised pass */
    over = widen_ids(r->buf + o.ids, r->ids, lnm, (uint8_t)emax);
    b->ids = r->ids;
  } else {
    b->ids = (uint16_t *)(void *)(r->buf + o.ids);
    const uint16_t em16 = (uint16_t)emax;
    uint16_t over16 = 0;
    for (size_t i = 0; i < lnm; i++) over16 |= (uint16_t)(b->ids[i] > em16);
    over = over16;
  }
  if (over) {
    size_t i = 0;
    while (b->ids[i] <= emax) i++;
    const size_t stored = b->m == (int)m ? i : i / k * m + i % k; /* (its place among the stored ids) */
    return BAD("%s: block %llu at byte offset %llu: expert id %u out of range 0..%u", r->path,
               (unsigned long long)bi, (unsigned long long)(at + bh + o.ids + stored * idb), b->ids[i], emax);
  }
  r->pos = at + bh + pb;
  r->next_index++;
  amoe_status st = amoe_block_finish(b, AMOE_CHECK_TREE, e);
  if (st != AMOE_OK) {
    amoe_err_prefix(e, "%s: block %llu at byte offset %llu", r->path, (unsigned long long)bi,
                    (unsigned long long)at);
    return st;
  }
  return AMOE_OK;
#undef BAD
}
