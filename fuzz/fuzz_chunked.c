/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the chunked body decoder of examples/httpd
 * (http_chunked_decode, http_parser.h), fed in pieces as a server reads.
 *
 * Input: two control bytes, then a body.  Control byte 0: bit 0x80 picks the
 * mode, bit 0x40 a small limit on extensions and trailers (control byte 1 &
 * 0x3f), bits 0-5 the largest piece (1..64 bytes); control byte 1 also seeds
 * the piece sizes.
 *
 * Raw mode: the bytes are a body as a client might send it.  Decoded all at
 * once and in pieces of random sizes (each piece with the bytes still
 * unconsumed, copied to a block of exactly that size so that ASan sees an
 * overread), the decoder must give the same data, byte for byte, the same
 * verdict (done, error, or more needed) and, when done, the same length.
 * Every call also makes progress: given bytes and not done, it consumes
 * some, reports data or fails (a server loops on it), and consumes no more
 * than it was given.
 *
 * Encode mode: the bytes are cut into chunks (a length byte, then that many
 * data bytes), which are framed as a client would (hex sizes in either case,
 * leading zeros, extensions, trailers, from the control bits), followed by
 * the start of a next request.  Decoding that in pieces must succeed, give
 * back exactly the data, and stop right where the next request starts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_parser.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) ((x) ? (void)0 : (fprintf(stderr, "fuzz_chunked: failed: %s (line %d)\n", #x, __LINE__), abort()))

enum { DONE, MORE, ERROR };

typedef struct result {
  int verdict;
  size_t consumed;   /* bytes consumed in all */
  char *out;         /* the data, in order */
  size_t out_len;
} result;

static uint32_t next_rand(uint32_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

/* Decode body[0..len), making it available max_piece bytes at a time (all
 * at once when max_piece is 0). */
static result decode(const char *body, size_t len, size_t max_piece, uint32_t seed, uint32_t max_meta)
{
  http_chunked c;
  http_chunked_init(&c, max_meta);
  result res = {MORE, 0, malloc(len ? len : 1), 0};
  uint32_t rnd = seed * 2654435761u + 1;
  size_t avail = 0;
  for (;;) {
    if (avail < len) {
      size_t step = max_piece ? 1 + next_rand(&rnd) % max_piece : len;
      avail = step < len - avail ? avail + step : len;
    }
    /* The server's loop: decode while bytes remain and the body is not done. */
    while (res.consumed < avail && !c.done) {
      size_t n = avail - res.consumed;
      char *copy = malloc(n);
      memcpy(copy, body + res.consumed, n);
      http_span d;
      long r = http_chunked_decode(&c, copy, n, &d);
      if (r < 0) {
        CHECK(r == -400);
        free(copy);
        res.verdict = ERROR;
        return res;
      }
      CHECK((size_t)r <= n && (size_t)d.off + d.len <= (size_t)r);
      CHECK(r > 0 || d.len > 0); /* progress */
      memcpy(res.out + res.out_len, copy + d.off, d.len);
      res.out_len += d.len;
      res.consumed += (size_t)r;
      free(copy);
    }
    if (c.done) {
      http_span d;
      CHECK(http_chunked_decode(&c, body + res.consumed, len - res.consumed, &d) == 0 && d.len == 0);
      res.verdict = DONE;
      return res;
    }
    if (avail == len)
      return res; /* MORE */
  }
}

static void same(const result *a, const result *b)
{
  CHECK(a->verdict == b->verdict);
  CHECK(a->out_len == b->out_len && memcmp(a->out, b->out, a->out_len) == 0);
  if (a->verdict != ERROR)
    CHECK(a->consumed == b->consumed);
}

/* ---- encode mode ---- */

typedef struct buf {
  char *p;
  size_t len, cap;
} buf;

static void put(buf *b, const void *s, size_t n)
{
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static void size_line(buf *b, size_t n, uint8_t style)
{
  char hex[32];
  snprintf(hex, sizeof hex, (style & 1) ? "%s%zX" : "%s%zx", (style & 2) ? "000" : "", n);
  puts_(b, hex);
  switch ((style >> 2) & 3) {
  case 1: puts_(b, ";name=value"); break;
  case 2: puts_(b, " \t;a;b=\"q s\""); break;
  case 3: puts_(b, ";x=\x80\xff obs-text"); break;
  }
  puts_(b, "\r\n");
}

static void encode_mode(uint8_t ctl, uint8_t seed, const uint8_t *in, size_t size)
{
  buf body = {0}, want = {0};
  size_t i = 0;
  uint8_t style = seed;
  while (i < size) {
    size_t n = in[i++];
    if (n > size - i)
      n = size - i;
    if (n == 0)
      continue; /* a size 0 would end the body */
    size_line(&body, n, style);
    put(&body, in + i, n);
    put(&want, in + i, n);
    puts_(&body, "\r\n");
    i += n;
    style = (uint8_t)(style * 5 + 1);
  }
  size_line(&body, 0, style);
  if (ctl & 0x10)
    puts_(&body, "Trailer-One: v\r\nX:\r\nchecksum: a b\tc\x80\r\n");
  puts_(&body, "\r\n");
  size_t framed = body.len;
  puts_(&body, "GET / HTTP/1.1\r\n"); /* the next request, not the body's */
  result r = decode(body.p, body.len, 1 + (ctl & 0x3f), seed, 65535);
  CHECK(r.verdict == DONE && r.consumed == framed);
  CHECK(r.out_len == want.len && (want.len == 0 || memcmp(r.out, want.p, want.len) == 0));
  result w = decode(body.p, body.len, 0, 0, 65535);
  same(&r, &w);
  free(r.out);
  free(w.out);
  free(body.p);
  free(want.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 2)
    return 0;
  uint8_t ctl = data[0], seed = data[1];
  if (ctl & 0x80) {
    encode_mode(ctl, seed, data + 2, size - 2);
    return 0;
  }
  uint32_t max_meta = (ctl & 0x40) ? seed & 0x3f : 512;
  const char *body = (const char *)data + 2;
  size_t len = size - 2;
  result whole = decode(body, len, 0, 0, max_meta);
  result pieces = decode(body, len, 1 + (ctl & 0x3f), seed, max_meta);
  same(&whole, &pieces);
  if (whole.verdict == DONE)
    CHECK(whole.consumed <= len);
  free(whole.out);
  free(pieces.out);
  return 0;
}
