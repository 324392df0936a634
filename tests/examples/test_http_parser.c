/* SPDX-License-Identifier: MIT */
/* The HTTP request parser of examples/httpd: what it accepts, what it refuses
 * (and with which status), incremental feeding, limits, chunked bodies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* A unity build: the parser is one small file, compiled into this test. */
#include "http_parser.c"

#define MAX_HEAD 8192

static int parse_all(const char *s, http_request *req)
{
  http_parser p;
  http_parser_init(&p, MAX_HEAD);
  return http_parse_head(&p, s, strlen(s), req);
}

static bool span_is(const char *buf, http_span s, const char *want)
{
  return s.len == strlen(want) && memcmp(buf + s.off, want, s.len) == 0;
}

static void test_simple_get(void **state)
{
  (void)state;
  const char *s = "GET /index.html?a=1&b=2 HTTP/1.1\r\nHost: example.com\r\nUser-Agent:  x y  \r\n"
                  "Accept:*/*\r\nEmpty:\r\n\r\nNEXT";
  http_request req;
  int r = parse_all(s, &req);
  assert_int_equal(r, (int)(strstr(s, "NEXT") - s));
  assert_true(span_is(s, req.method, "GET"));
  assert_true(span_is(s, req.target, "/index.html?a=1&b=2"));
  assert_true(span_is(s, req.path, "/index.html"));
  assert_true(span_is(s, req.query, "a=1&b=2"));
  assert_int_equal(req.form, HTTP_TARGET_ORIGIN);
  assert_int_equal(req.minor, 1);
  assert_int_equal(req.nheaders, 4);
  assert_true(span_is(s, req.headers[0].name, "Host"));
  assert_true(span_is(s, req.headers[0].value, "example.com"));
  assert_true(span_is(s, req.headers[1].value, "x y")); /* OWS trimmed both sides, inner SP kept */
  assert_true(span_is(s, req.headers[2].value, "*/*"));
  assert_true(span_is(s, req.headers[3].value, ""));
  assert_true(req.has_host);
  assert_true(span_is(s, req.host, "example.com"));
  assert_true(req.keep_alive);
  assert_false(req.chunked);
  assert_int_equal(req.content_length, -1);
  /* zero-copy: the spans point into the caller's bytes */
  assert_ptr_equal(http_ptr(s, req.method), s);
  const http_header *h = http_find_header(&req, s, "user-agent");
  assert_non_null(h);
  assert_ptr_equal(h, &req.headers[1]);
  assert_null(http_find_header(&req, s, "cookie"));
}

static void test_keep_alive_rules(void **state)
{
  (void)state;
  http_request req;
  assert_true(parse_all("GET / HTTP/1.0\r\n\r\n", &req) > 0);
  assert_int_equal(req.minor, 0);
  assert_false(req.keep_alive);
  assert_true(parse_all("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &req) > 0);
  assert_true(req.keep_alive);
  assert_true(parse_all("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", &req) > 0);
  assert_false(req.keep_alive);
  assert_true(parse_all("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade, CLOSE\r\n\r\n", &req) > 0);
  assert_false(req.keep_alive);
  assert_true(parse_all("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n", &req) > 0);
  assert_true(req.keep_alive);
  /* empty list elements are ignored (RFC 9110 5.6.1), not refused */
  assert_true(parse_all("GET / HTTP/1.1\r\nHost: a\r\nConnection: , ,close,\r\n\r\n", &req) > 0);
  assert_false(req.keep_alive);
  assert_true(parse_all("GET / HTTP/1.1\r\nHost: a\r\nConnection:\r\n\r\n", &req) > 0);
  assert_true(req.keep_alive);
  assert_int_equal(parse_all("GET / HTTP/1.1\r\nHost: a\r\nConnection: a b\r\n\r\n", &req), -400);
  /* a later 1.x minor is answered as 1.1 */
  assert_true(parse_all("GET / HTTP/1.7\r\nHost: a\r\n\r\n", &req) > 0);
  assert_int_equal(req.minor, 1);
  /* one empty line before the request line is ignored (RFC 9112 2.2) */
  assert_int_equal(parse_all("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", &req), 29);
}

static void test_framing(void **state)
{
  (void)state;
  http_request req;
  assert_true(parse_all("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 42\r\n\r\n", &req) > 0);
  assert_int_equal(req.content_length, 42);
  assert_true(parse_all("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", &req) > 0);
  assert_int_equal(req.content_length, 0);
  /* the largest length there is, leading zeros and all; the server answers 413 */
  assert_true(parse_all("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n", &req) > 0);
  assert_int_equal(req.content_length, INT64_MAX);
  assert_true(parse_all("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0000000000000000000000042\r\n\r\n", &req) > 0);
  assert_int_equal(req.content_length, 42);
  assert_true(parse_all("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", &req) > 0);
  assert_true(req.chunked);
  assert_int_equal(req.content_length, -1);
  assert_true(parse_all("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", &req) > 0);
  assert_true(req.expect_continue);
  assert_false(req.expect_other);
  assert_true(parse_all("POST / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n", &req) > 0);
  assert_true(req.expect_other);
}

static void test_target_forms(void **state)
{
  (void)state;
  http_request req;
  const char *s = "GET http://example.com:8080/x/y?q HTTP/1.1\r\nHost: example.com:8080\r\n\r\n";
  assert_true(parse_all(s, &req) > 0);
  assert_int_equal(req.form, HTTP_TARGET_ABSOLUTE);
  assert_true(span_is(s, req.path, "/x/y"));
  assert_true(span_is(s, req.query, "q"));
  s = "GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n";
  assert_true(parse_all(s, &req) > 0);
  assert_true(span_is(s, req.path, ""));
  s = "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n";
  assert_true(parse_all(s, &req) > 0);
  assert_int_equal(req.form, HTTP_TARGET_ASTERISK);
  s = "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n";
  assert_true(parse_all(s, &req) > 0);
  assert_int_equal(req.form, HTTP_TARGET_AUTHORITY);
  s = "GET /a%20b/%2e%2E HTTP/1.1\r\nHost: a\r\n\r\n"; /* valid escapes pass; decoding is the server's */
  assert_true(parse_all(s, &req) > 0);
  assert_true(span_is(s, req.path, "/a%20b/%2e%2E"));
}

struct bad {
  const char *req;
  int status;
};

static const struct bad bad_requests[] = {
    /* request line */
    {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", -400},         /* two spaces */
    {" GET / HTTP/1.1\r\nHost: a\r\n\r\n", -400},         /* leading space */
    {"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", -400},         /* trailing space */
    {"GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", -400},         /* tab as separator */
    {"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", -400},          /* not a token */
    {"GET / HTTP/1.1\nHost: a\r\n\r\n", -400},            /* bare LF */
    {"GET / HTTP/1.1\rHost: a\r\n\r\n", -400},            /* bare CR */
    {"GET / HTTP/1.1\r\nHost: a\n\n", -400},              /* bare LFs in the header section */
    {"GET / http/1.1\r\nHost: a\r\n\r\n", -400},          /* case of the version */
    {"GET / HTTP/1.10\r\nHost: a\r\n\r\n", -400},
    {"GET / HTTP/1\r\nHost: a\r\n\r\n", -400},
    {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", -505},
    {"GET / HTTP/0.9\r\nHost: a\r\n\r\n", -505},
    {"GET /\r\n\r\n", -400},                              /* HTTP/0.9 style */
    {"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", -400},
    {"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n", -400},
    {"GET /a\"b HTTP/1.1\r\nHost: a\r\n\r\n", -400},
    {"GET /a\x7f HTTP/1.1\r\nHost: a\r\n\r\n", -400},
    {"GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", -400},  /* raw UTF-8 must be escaped */
    {"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n", -400},
    {"GET /%2 HTTP/1.1\r\nHost: a\r\n\r\n", -400},
    {"GET * HTTP/1.1\r\nHost: a\r\n\r\n", -400},          /* "*" is for OPTIONS only */
    {"GET example.com HTTP/1.1\r\nHost: a\r\n\r\n", -400},
    {"CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n", -400},
    /* header fields */
    {"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", -400},  /* obs-fold */
    {"GET / HTTP/1.1\r\nHost: a\r\n\tfolded\r\n\r\n", -400},
    {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", -400},          /* whitespace before the colon */
    {"GET / HTTP/1.1\r\n: a\r\nHost: a\r\n\r\n", -400},     /* empty name */
    {"GET / HTTP/1.1\r\nHo(st: a\r\n\r\n", -400},
    {"GET / HTTP/1.1\r\nHost a\r\n\r\n", -400},            /* no colon */
    {"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", -400},
    {"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", -400},
    {"GET / HTTP/1.1\r\nHost: a\r\nX: a\nb\r\n\r\n", -400},
    {"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n", -400},
    /* Host */
    {"GET / HTTP/1.1\r\n\r\n", -400},
    {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", -400},
    {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", -400},
    {"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", -400},
    /* framing: anything two parsers could read differently */
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5a\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", -400},
    /* past INT64_MAX: not a length (it was once read as INT64_MAX, a guess) */
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775810\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551621\r\n\r\n", -400}, /* 2^64 + 5 */
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", -400},    /* chunked must be last */
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,chunked\r\n\r\n", -400},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", -501},
    {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", -400},
    {NULL, 0},
};

static void test_bad_requests(void **state)
{
  (void)state;
  for (const struct bad *b = bad_requests; b->req; b++) {
    http_request req;
    int r = parse_all(b->req, &req);
    if (r != b->status) {
      fprintf(stderr, "request %d gave %d, not %d: ", (int)(b - bad_requests), r, b->status);
      for (const char *c = b->req; *c; c++)
        fprintf(stderr, (*c >= 0x20 && *c < 0x7f) ? "%c" : "\\x%02x", (unsigned char)*c);
      fprintf(stderr, "\n");
    }
    assert_int_equal(r, b->status);
  }
}

/* Feeding the bytes one at a time, each time in a freshly allocated copy (the
 * buffer moves), gives the same result as one call with everything. */
static void check_incremental(const char *s, size_t len)
{
  http_request whole, part;
  http_parser p;
  http_parser_init(&p, MAX_HEAD);
  int want = http_parse_head(&p, s, len, &whole);
  http_parser_init(&p, MAX_HEAD);
  int got = HTTP_PARSE_INCOMPLETE;
  for (size_t n = 1; n <= len && got == HTTP_PARSE_INCOMPLETE; n++) {
    char *copy = malloc(n);
    assert_non_null(copy);
    memcpy(copy, s, n);
    got = http_parse_head(&p, copy, n, &part);
    free(copy);
  }
  assert_int_equal(got, want);
  if (want > 0) {
    assert_memory_equal(&whole.method, &part.method, sizeof whole.method);
    assert_memory_equal(&whole.target, &part.target, sizeof whole.target);
    assert_memory_equal(&whole.path, &part.path, sizeof whole.path);
    assert_int_equal(whole.nheaders, part.nheaders);
    assert_memory_equal(whole.headers, part.headers, whole.nheaders * sizeof whole.headers[0]);
    assert_int_equal(whole.content_length, part.content_length);
    assert_int_equal(whole.keep_alive, part.keep_alive);
    assert_int_equal(whole.chunked, part.chunked);
  }
}

static void test_incremental(void **state)
{
  (void)state;
  const char *good[] = {
      "GET /index.html?a=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: x y \r\nX-Empty:\r\n\r\n",
      "\r\nPOST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 1234\r\n\r\nbody",
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
      "GET / HTTP/1.0\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    check_incremental(good[i], strlen(good[i]));
  for (const struct bad *b = bad_requests; b->req; b++)
    check_incremental(b->req, strlen(b->req));
}

static void test_incomplete(void **state)
{
  (void)state;
  http_request req;
  assert_int_equal(parse_all("", &req), HTTP_PARSE_INCOMPLETE);
  assert_int_equal(parse_all("GET / HTTP/1.1\r\nHost: a\r\n", &req), HTTP_PARSE_INCOMPLETE);
  assert_int_equal(parse_all("GET / HTTP/1.1\r\nHost: a\r\n\r", &req), HTTP_PARSE_INCOMPLETE);
  /* an error is reported as soon as it is certain, not at the end of the head */
  assert_int_equal(parse_all("GET / HTTP/1.1\r\nHost: a\r\n\x01", &req), -400);
  assert_int_equal(parse_all("GET / HTTP/3", &req), -505);
}

static void test_limits(void **state)
{
  (void)state;
  size_t cap = 20000;
  char *s = malloc(cap);
  assert_non_null(s);
  http_request req;
  http_parser p;

  /* A head of exactly max_head bytes passes; one byte more does not. */
  const char *pre = "GET / HTTP/1.1\r\nHost: a\r\nX: ";
  for (uint32_t limit = 64; limit <= 4096; limit *= 4) {
    size_t fill = limit - strlen(pre) - 4;
    size_t n = (size_t)snprintf(s, cap, "%s%*s\r\n\r\n", pre, (int)fill, "");
    memset(s + strlen(pre), 'v', fill);
    assert_int_equal(n, limit);
    http_parser_init(&p, limit);
    assert_int_equal(http_parse_head(&p, s, n, &req), (int)limit);
    http_parser_init(&p, limit - 1);
    assert_int_equal(http_parse_head(&p, s, n, &req), -431);
  }

  /* A request line past the limit is 414; headers past it 431, also when
   * they arrive a piece at a time. */
  memcpy(s, "GET /", 5);
  memset(s + 5, 'a', 10000);
  http_parser_init(&p, MAX_HEAD);
  assert_int_equal(http_parse_head(&p, s, 10005, &req), -414);
  size_t n = (size_t)snprintf(s, cap, "GET / HTTP/1.1\r\nHost: a\r\nCookie: ");
  memset(s + n, 'c', 10000);
  http_parser_init(&p, MAX_HEAD);
  int r = HTTP_PARSE_INCOMPLETE;
  for (size_t len = 100; len <= n + 10000 && r == HTTP_PARSE_INCOMPLETE; len += 100)
    r = http_parse_head(&p, s, len, &req);
  assert_int_equal(r, -431);

  /* HTTP_MAX_HEADERS fields pass, one more is 431. */
  for (int extra = 0; extra <= 1; extra++) {
    n = (size_t)snprintf(s, cap, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int i = 1; i < HTTP_MAX_HEADERS + extra; i++)
      n += (size_t)snprintf(s + n, cap - n, "X-%d: %d\r\n", i, i);
    n += (size_t)snprintf(s + n, cap - n, "\r\n");
    http_parser_init(&p, MAX_HEAD);
    r = http_parse_head(&p, s, n, &req);
    if (extra)
      assert_int_equal(r, -431);
    else
      assert_int_equal(r, (int)n);
  }
  free(s);
}

/* ---- chunked ---- */

/* Decode all of s, in pieces of `step` bytes (each call sees only the bytes
 * not consumed yet plus the new piece); collect the data. */
static long decode(const char *s, size_t len, size_t step, char *out, size_t *outlen, bool *done)
{
  http_chunked c;
  http_chunked_init(&c, 256);
  size_t pos = 0, avail = 0;
  *outlen = 0;
  while (!c.done) {
    if (avail < len)
      avail = avail + step < len ? avail + step : len;
    http_span d;
    long r = http_chunked_decode(&c, s + pos, avail - pos, &d);
    if (r < 0)
      return r;
    memcpy(out + *outlen, s + pos + d.off, d.len);
    *outlen += d.len;
    pos += (size_t)r;
    if (r == 0 && d.len == 0 && avail == len)
      break; /* needs more input than there is */
  }
  *done = c.done;
  return (long)pos;
}

static void test_chunked(void **state)
{
  (void)state;
  const char *s = "5\r\nhello\r\n6;name=value;x=\"q\"\r\n world\r\nA\r\n0123456789\r\n0\r\n"
                  "Trailer-One: x\r\nTrailer-Two:\r\n\r\nNEXT";
  size_t len = strlen(s);
  for (size_t step = 1; step <= len; step++) {
    char out[64];
    size_t outlen;
    bool done;
    long r = decode(s, len, step, out, &outlen, &done);
    assert_true(done);
    assert_int_equal(r, (long)(strstr(s, "NEXT") - s));
    assert_int_equal(outlen, 21);
    assert_memory_equal(out, "hello world0123456789", 21);
  }
  /* the smallest body */
  char out[64];
  size_t outlen;
  bool done;
  assert_int_equal(decode("0\r\n\r\n", 5, 5, out, &outlen, &done), 5);
  assert_true(done);
  assert_int_equal(outlen, 0);
  /* uppercase hex, leading zeros */
  assert_int_equal(decode("00B\r\nhello world\r\n0\r\n\r\n", 23, 3, out, &outlen, &done), 23);
  assert_int_equal(outlen, 11);
  /* incomplete: not done, no error */
  assert_int_equal(decode("5\r\nhel", 6, 6, out, &outlen, &done), 6);
  assert_false(done);
  /* What the server's body limit reads before any data: after a size line,
   * `remaining` is the size declared; while the digits arrive, the value so
   * far, which more digits only make larger. */
  http_chunked c;
  http_span d;
  http_chunked_init(&c, 256);
  assert_int_equal(http_chunked_decode(&c, "1000", 4, &d), 4);
  assert_int_equal(c.remaining, 0x1000);
  assert_int_equal(http_chunked_decode(&c, "00;x\r\n", 6, &d), 6);
  assert_int_equal(d.len, 0);
  assert_int_equal(c.remaining, 0x100000);
  assert_false(c.done);
}

static void test_chunked_bad(void **state)
{
  (void)state;
  const char *bad[] = {
      "x\r\n",                        /* not hex */
      "\r\n",                         /* no size */
      "-5\r\nhello\r\n0\r\n\r\n",
      "5\nhello\r\n0\r\n\r\n",        /* bare LF after the size */
      "5\r\nhello\n0\r\n\r\n",        /* bare LF after the data */
      "5\r\nhelloX\r\n0\r\n\r\n",     /* data longer than announced */
      "5 \r\nhello\r\n0\r\n\r\n",     /* whitespace not followed by an extension */
      "0x5\r\nhello\r\n0\r\n\r\n",
      "1000000000000000\r\n",         /* 16 hex digits: refused rather than overflowed */
      "5;a\x01\r\nhello\r\n0\r\n\r\n",
      "0\r\nBad Trailer: x\r\n\r\n",
      "0\r\nX: a\x01\r\n\r\n",
      "0\r\n\n",
      NULL,
  };
  for (int i = 0; bad[i]; i++) {
    char out[64];
    size_t outlen;
    bool done;
    long r = decode(bad[i], strlen(bad[i]), 1, out, &outlen, &done);
    if (r != -400)
      fprintf(stderr, "chunked case %d: %ld\n", i, r);
    assert_int_equal(r, -400);
  }
  /* extensions and trailers are bounded (they are not data) */
  char big[600];
  int n = snprintf(big, sizeof big, "1;");
  memset(big + n, 'e', 300);
  memcpy(big + n + 300, "\r\nx\r\n0\r\n\r\n", 11);
  char out[64];
  size_t outlen;
  bool done;
  assert_int_equal(decode(big, strlen(big), 7, out, &outlen, &done), -400);
}

static void test_reason(void **state)
{
  (void)state;
  assert_string_equal(http_reason(200), "OK");
  assert_string_equal(http_reason(431), "Request Header Fields Too Large");
  assert_string_equal(http_reason(799), "Unknown");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_simple_get),  cmocka_unit_test(test_keep_alive_rules),
      cmocka_unit_test(test_framing),     cmocka_unit_test(test_target_forms),
      cmocka_unit_test(test_bad_requests), cmocka_unit_test(test_incremental),
      cmocka_unit_test(test_incomplete),  cmocka_unit_test(test_limits),
      cmocka_unit_test(test_chunked),     cmocka_unit_test(test_chunked_bad),
      cmocka_unit_test(test_reason),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
