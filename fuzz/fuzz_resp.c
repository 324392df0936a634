/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the Redis protocol parser of examples/kv (resp_parse,
 * resp.h), fed a stream in pieces as kv's connection loop reads it.
 *
 * Input: two control bytes, then a stream of requests.  Control byte 0:
 * bits 0-5 the largest piece (1..64 bytes), bit 0x40 a small limit on bulk
 * strings (control byte 1), bit 0x80 encode mode; control byte 1 also seeds
 * the piece sizes.
 *
 * Raw mode: the stream is parsed as kv parses it (every complete command in
 * the buffer, then more bytes), once with all of it at hand and once
 * arriving in pieces of random sizes, each parse on a block holding exactly
 * the bytes received (ASan sees an overread).  Checked:
 *  - the same commands (same arguments, byte for byte), the same error, and
 *    the same bytes left over, whatever the split;
 *  - a command's arguments lie inside the bytes it took; their count is at
 *    most RESP_MAX_ARGS; a bulk argument is at most max_bulk bytes; an
 *    inline argument has no space, tab or newline;
 *  - "more needed" with a *want: want is beyond the bytes given, and the
 *    command, once complete, takes at least that many;
 *  - a multibulk command is what it says: read again by a second, plain
 *    reading of the grammar (every count and length a decimal number: an
 *    optional '-' and at least one digit), it has the same arguments and
 *    takes the same bytes;
 *  - an error names itself "Protocol error: ...".
 * Encode mode: the bytes are cut into arguments (a length byte, then that
 * many bytes) of commands (a count byte), written as multibulk requests;
 * parsing that stream in pieces must give back exactly those commands.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) ((x) ? (void)0 : (fprintf(stderr, "fuzz_resp: failed: %s (line %d)\n", #x, __LINE__), abort()))

static resp_cmd cmd; /* 16 KiB: not on the stack */

/* What a parse of the stream saw: the commands, flattened into a log of
 * length-prefixed arguments, and how it ended. */
typedef struct trace {
  char *log;
  size_t len, cap;
  size_t ncmds;
  const char *err;  /* NULL: no error */
  size_t consumed;  /* bytes taken by complete commands */
} trace;

static void log_put(trace *t, const void *p, size_t n)
{
  if (t->len + n > t->cap) {
    t->cap = (t->len + n) * 2 + 256;
    t->log = realloc(t->log, t->cap);
  }
  memcpy(t->log + t->len, p, n);
  t->len += n;
}

static uint32_t next_rand(uint32_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

/* A count or length line at p: '-'? DIGIT+ CR LF.  Its value, and the
 * byte after it in *next; false if it is not such a line. */
static bool number_line(const char *p, const char *end, long long *v, const char **next)
{
  bool neg = p < end && *p == '-';
  const char *q = p + neg, *digits = q;
  long long x = 0;
  while (q < end && *q >= '0' && *q <= '9' && q - digits < 15)
    x = x * 10 + (*q++ - '0');
  if (q == digits || end - q < 2 || q[0] != '\r' || q[1] != '\n')
    return false;
  *v = neg ? -x : x;
  *next = q + 2;
  return true;
}

/* The multibulk command in buf[0..r), read again: it must be the one parsed. */
static void reread(const char *buf, long r)
{
  const char *end = buf + r, *p;
  long long n, len;
  CHECK(number_line(buf + 1, end, &n, &p) && n == cmd.argc);
  for (int i = 0; i < cmd.argc; i++) {
    CHECK(p < end && *p == '$' && number_line(p + 1, end, &len, &p));
    CHECK(len == (long long)cmd.argv[i].len && cmd.argv[i].p == p);
    CHECK(end - p >= len + 2 && p[len] == '\r' && p[len + 1] == '\n');
    p += len + 2;
  }
  CHECK(p == end);
}

/* Check one parsed command (it took r bytes of buf) and log it. */
static void record(trace *t, const char *buf, long r, size_t max_bulk)
{
  CHECK(cmd.argc >= 0 && cmd.argc <= RESP_MAX_ARGS);
  bool multibulk = buf[0] == '*';
  if (multibulk)
    reread(buf, r);
  size_t argc = (size_t)cmd.argc;
  log_put(t, &argc, sizeof argc);
  for (int i = 0; i < cmd.argc; i++) {
    const resp_arg *a = &cmd.argv[i];
    CHECK(a->p >= buf && a->p + a->len <= buf + r);
    if (multibulk) {
      CHECK(a->len <= max_bulk);
    } else {
      CHECK(a->len > 0 && !memchr(a->p, ' ', a->len) && !memchr(a->p, '\t', a->len) &&
            !memchr(a->p, '\n', a->len));
    }
    log_put(t, &a->len, sizeof a->len);
    log_put(t, a->p, a->len);
  }
  t->ncmds++;
}

/* Parse stream[0..len) as kv does, the bytes arriving max_piece at a time
 * (all at once when max_piece is 0). */
static trace parse_stream(const char *stream, size_t len, size_t max_piece, uint32_t seed, size_t max_bulk)
{
  trace t = {0};
  uint32_t rnd = seed * 2654435761u + 1;
  size_t avail = 0, want_seen = 0;
  for (;;) {
    if (avail < len) {
      size_t step = max_piece ? 1 + next_rand(&rnd) % max_piece : len;
      avail = step < len - avail ? avail + step : len;
    }
    for (;;) {
      size_t n = avail - t.consumed;
      char *copy = malloc(n ? n : 1);
      memcpy(copy, stream + t.consumed, n);
      size_t want = 12345;
      const char *err = NULL;
      long r = resp_parse(copy, n, max_bulk, &cmd, &want, &err);
      if (r < 0) {
        CHECK(r == -1 && err && strncmp(err, "Protocol error: ", 16) == 0);
        free(copy);
        t.err = err;
        return t;
      }
      if (r == 0) {
        CHECK(want == 0 || want > n);
        if (want)
          want_seen = want;
        free(copy);
        break;
      }
      CHECK((size_t)r <= n && want == 0);
      CHECK(want_seen == 0 || (size_t)r >= want_seen);
      want_seen = 0;
      record(&t, copy, r, max_bulk);
      t.consumed += (size_t)r;
      free(copy);
    }
    if (avail == len)
      return t;
  }
}

static void same(const trace *a, const trace *b)
{
  CHECK(a->ncmds == b->ncmds && a->len == b->len && (a->len == 0 || memcmp(a->log, b->log, a->len) == 0));
  CHECK((a->err == NULL) == (b->err == NULL) && (!a->err || strcmp(a->err, b->err) == 0));
  CHECK(a->consumed == b->consumed);
}

static void encode_mode(uint8_t ctl, uint8_t seed, const uint8_t *in, size_t size)
{
  char *stream = malloc(64), *want_log = NULL;
  size_t len = 0, cap = 64, want_len = 0, want_cap = 0, ncmds = 0, max_arg = 0;
#define PUT(p, n) (len + (n) > cap ? (cap = (len + (n)) * 2 + 64, stream = realloc(stream, cap)) : 0, \
                   memcpy(stream + len, (p), (n)), len += (n))
#define LOG(p, n) (want_len + (n) > want_cap ? (want_cap = (want_len + (n)) * 2 + 64, want_log = realloc(want_log, want_cap)) : 0, \
                   memcpy(want_log + want_len, (p), (n)), want_len += (n))
  size_t i = 0;
  while (i < size) {
    size_t argc = in[i++] % 8;
    char head[32];
    int h = snprintf(head, sizeof head, "*%zu\r\n", argc);
    PUT(head, (size_t)h);
    LOG(&argc, sizeof argc);
    for (size_t k = 0; k < argc; k++) {
      size_t n = i < size ? in[i++] : 0;
      if (n > size - i)
        n = size - i;
      h = snprintf(head, sizeof head, "$%zu\r\n", n);
      PUT(head, (size_t)h);
      PUT(in + i, n);
      PUT("\r\n", 2);
      LOG(&n, sizeof n);
      LOG(in + i, n);
      max_arg = n > max_arg ? n : max_arg;
      i += n;
    }
    ncmds++;
  }
#undef PUT
#undef LOG
  trace t = parse_stream(stream, len, 1 + (ctl & 0x3f), seed, max_arg);
  CHECK(t.err == NULL && t.consumed == len && t.ncmds == ncmds);
  CHECK(t.len == want_len && (want_len == 0 || memcmp(t.log, want_log, want_len) == 0));
  free(t.log);
  free(stream);
  free(want_log);
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
  size_t max_bulk = (ctl & 0x40) ? seed : 512 * 1024 * 1024;
  const char *stream = (const char *)data + 2;
  size_t len = size - 2;
  trace whole = parse_stream(stream, len, 0, 0, max_bulk);
  trace pieces = parse_stream(stream, len, 1 + (ctl & 0x3f), seed, max_bulk);
  same(&whole, &pieces);
  free(whole.log);
  free(pieces.log);
  return 0;
}
