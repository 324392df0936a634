/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the request parser (fuzz/run.sh builds and runs
 * it with -fsanitize=fuzzer,address,undefined).
 *
 * Input: one control byte, then the bytes of a request.  Checked:
 *  - nothing is read outside the bytes given (each piece is copied into a
 *    heap block of exactly its size, so ASan sees any overread);
 *  - fed in pieces (piece size from the control byte; the buffer moves
 *    between calls) the parser reaches the same verdict and the same spans as
 *    fed everything at once;
 *  - a complete head is at most max_head bytes, every span lies inside it,
 *    and the framing it reports is consistent;
 *  - for a chunked body, decoding in pieces gives the same data, the same
 *    length consumed and the same verdict as decoding at once.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_parser.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_span(http_span s, size_t head)
{
  if ((size_t)s.off + s.len > head)
    abort();
}

static int parse_pieces(const char *s, size_t len, size_t step, uint32_t max_head, http_request *req)
{
  http_parser p;
  http_parser_init(&p, max_head);
  int r = HTTP_PARSE_INCOMPLETE;
  size_t n = 0;
  while (r == HTTP_PARSE_INCOMPLETE && n < len) {
    n = n + step < len ? n + step : len;
    char *copy = malloc(n ? n : 1);
    memcpy(copy, s, n);
    r = http_parse_head(&p, copy, n, req);
    free(copy);
  }
  return r;
}

/* Decode a chunked body from s; returns consumed bytes or an error, sets
 * *sum to a checksum of the data and *dlen to its length. */
static long chunked_pieces(const char *s, size_t len, size_t step, uint64_t *sum, uint64_t *dlen, int *done)
{
  http_chunked c;
  http_chunked_init(&c, 512);
  size_t pos = 0, avail = 0;
  *sum = *dlen = 0;
  for (;;) {
    if (avail < len)
      avail = avail + step < len ? avail + step : len;
    size_t n = avail - pos;
    char *copy = malloc(n ? n : 1);
    memcpy(copy, s + pos, n);
    http_span d;
    long r = http_chunked_decode(&c, copy, n, &d);
    if (r >= 0) {
      if ((size_t)r > n || (size_t)d.off + d.len > (size_t)r)
        abort();
      for (uint32_t i = 0; i < d.len; i++)
        *sum = *sum * 31 + (unsigned char)copy[d.off + i];
      *dlen += d.len;
    }
    free(copy);
    if (r < 0)
      return r;
    pos += (size_t)r;
    if (c.done) {
      *done = 1;
      return (long)pos;
    }
    if (r == 0 && d.len == 0 && avail == len) {
      *done = 0;
      return (long)pos;
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1)
    return 0;
  uint8_t ctl = data[0];
  const char *s = (const char *)data + 1;
  size_t len = size - 1;
  size_t step = (size_t)(ctl & 0x0f) + 1;
  uint32_t max_head = (ctl & 0x10) ? 64 + (uint32_t)(ctl >> 5) * 37 : 8192;

  char *whole = malloc(len ? len : 1);
  memcpy(whole, s, len);
  http_parser p;
  http_request a, b;
  http_parser_init(&p, max_head);
  int ra = http_parse_head(&p, whole, len, &a);
  int rb = parse_pieces(s, len, step, max_head, &b);
  if (ra != rb)
    abort();
  if (ra < 0 && ra != -400 && ra != -414 && ra != -431 && ra != -501 && ra != -505)
    abort();
  if (ra > 0) {
    size_t head = (size_t)ra;
    if (head > len || head > max_head)
      abort();
    if (memcmp(&a.method, &b.method, sizeof a.method) || memcmp(&a.target, &b.target, sizeof a.target) ||
        memcmp(&a.path, &b.path, sizeof a.path) || memcmp(&a.query, &b.query, sizeof a.query) ||
        a.nheaders != b.nheaders || memcmp(a.headers, b.headers, a.nheaders * sizeof a.headers[0]) ||
        a.content_length != b.content_length || a.chunked != b.chunked || a.keep_alive != b.keep_alive ||
        a.form != b.form || a.minor != b.minor)
      abort();
    if (a.method.len == 0 || a.target.len == 0 || a.nheaders > HTTP_MAX_HEADERS)
      abort();
    check_span(a.method, head);
    check_span(a.target, head);
    check_span(a.path, head);
    check_span(a.query, head);
    for (unsigned i = 0; i < a.nheaders; i++) {
      check_span(a.headers[i].name, head);
      check_span(a.headers[i].value, head);
      if (a.headers[i].name.len == 0)
        abort();
    }
    if (a.chunked && a.content_length != -1)
      abort(); /* both framings at once must have been refused */
    if (a.chunked) {
      uint64_t s1, s2, l1, l2;
      int d1, d2;
      long c1 = chunked_pieces(whole + head, len - head, len, &s1, &l1, &d1);
      long c2 = chunked_pieces(whole + head, len - head, step, &s2, &l2, &d2);
      if (c1 != c2 || (c1 >= 0 && (s1 != s2 || l1 != l2 || d1 != d2)))
        abort();
      if (c1 >= 0 && (size_t)c1 > len - head)
        abort();
    }
  }
  free(whole);
  return 0;
}
