/* core/block.c's amoe_block_stash copy (memcpy elsewhere) with
 * non-temporal stores: a generated block goes to the consumer thread's
 * queue without displacing the producer's working set from its cache.
 * SSE2, which every x86-64 has. */
#include "x86.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#include <string.h>

/* Copies bytes with non-temporal stores where the CPU has them. */
void *amoe_x86_stream_copy(void *dst, const void *src, size_t bytes) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15;
  if (head > bytes) head = bytes;
  memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 16; d += 16, s += 16, bytes -= 16)
    _mm_stream_si128((__m128i *)(void *)d, _mm_loadu_si128((const __m128i *)(const void *)s));
  memcpy(d, s, bytes);
  _mm_sfence();
  return dst;
}
#endif
