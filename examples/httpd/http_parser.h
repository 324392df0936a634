/* SPDX-License-Identifier: MIT */
/*
 * A small, strict, incremental HTTP/1.x request parser.
 *
 * Zero-copy: the parser never copies or allocates.  What it finds (method,
 * target, header names and values, chunk data) is reported as spans: offsets
 * and lengths into the bytes the caller passed in.
 *
 * Incremental: feed it whatever has arrived.  Each call continues where the
 * previous one stopped (it never rescans), so the caller may hand it a
 * request one byte at a time.  The one rule: every call for a request must be
 * given ALL of that request's bytes received so far, starting at its first
 * byte.  The buffer may move between calls (spans are offsets, not pointers).
 *
 * Strict: only what RFC 9110/9112 allow for a request is accepted, and where
 * a lenient reading could let two parsers disagree about where a request ends
 * (request smuggling) the request is refused:
 *  - request-line: method token, one SP, request-target (origin-form;
 *    absolute-form; "*" for OPTIONS; authority-form for CONNECT), one SP,
 *    HTTP/1.x; lines end in CRLF (no bare LF, no bare CR);
 *  - header fields: token name immediately followed by ':', value of visible
 *    characters, SP, HTAB and obs-text; no obs-fold (a line starting with
 *    whitespace), no control characters;
 *  - framing: Content-Length is 1*DIGIT, at most INT64_MAX, and may appear
 *    once; Transfer-Encoding must end in "chunked", may appear once, is
 *    refused in HTTP/1.0 requests, and together with Content-Length is an
 *    error;
 *  - HTTP/1.1 requests carry exactly one Host.
 * Errors are returned as the negated HTTP status a server should answer with
 * before closing the connection (-400, -414, -431, -501, -505).
 */
#ifndef HTTPD_HTTP_PARSER_H
#define HTTPD_HTTP_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_MAX_HEADERS 64

/* A run of bytes: buf + off, len bytes, where buf is what was parsed. */
typedef struct http_span {
  uint32_t off, len;
} http_span;

typedef struct http_header {
  http_span name, value;
} http_header;

typedef enum http_target_form {
  HTTP_TARGET_ORIGIN,    /* "/path?query" */
  HTTP_TARGET_ABSOLUTE,  /* "http://host/path?query" */
  HTTP_TARGET_AUTHORITY, /* "host:port" (CONNECT only) */
  HTTP_TARGET_ASTERISK,  /* "*" (OPTIONS only) */
} http_target_form;

typedef struct http_request {
  http_span method;
  http_span target;
  http_span path; /* of the target: origin-form's path, absolute-form's path ("" for "http://host") */
  http_span query; /* after '?', without it; len 0 when absent */
  http_target_form form;
  int minor;      /* HTTP/1.<minor>: 0 or 1 (later 1.x minors are reported as 1) */
  unsigned nheaders;
  http_header headers[HTTP_MAX_HEADERS];
  /* What the framing and connection headers say. */
  int64_t content_length; /* -1 when absent (larger than INT64_MAX: -400) */
  bool chunked;           /* Transfer-Encoding: chunked */
  bool keep_alive;        /* after the version's default and Connection */
  bool expect_continue;   /* Expect: 100-continue */
  bool expect_other;      /* an Expect the server cannot meet (answer 417) */
  bool has_host;
  http_span host;
} http_request;

typedef struct http_parser {
  uint32_t max_head; /* limit on request line + headers, in bytes */
  uint32_t pos;      /* bytes examined so far */
  uint8_t state;
  uint8_t vpos;      /* position within "HTTP/1.x" */
  uint8_t saw_cl, saw_te;
  uint32_t mark;     /* start of the token being scanned */
  uint32_t skipped;  /* empty lines before the request line */
  bool te_unknown;
  int connection;    /* bits: 1 close, 2 keep-alive */
} http_parser;

#define HTTP_PARSE_INCOMPLETE 0

/* Prepare p for a new request.  max_head: the largest request line + header
 * section accepted (an oversized request line is -414, oversized headers or
 * more than HTTP_MAX_HEADERS of them -431). */
void http_parser_init(http_parser *p, uint32_t max_head);

/*
 * Parse the head of the request in buf[0 .. len).  Returns the head's length
 * in bytes (> 0: the request line, the header fields and the empty line that
 * ends them; the body, if any, starts there), HTTP_PARSE_INCOMPLETE when more
 * bytes are needed, or a negated HTTP status on error.  *req is filled in
 * bit by bit and is complete only when the head is.  After a result other
 * than HTTP_PARSE_INCOMPLETE, call http_parser_init() before parsing again.
 */
int http_parse_head(http_parser *p, const char *buf, size_t len, http_request *req);

/* The span as a pointer into buf. */
static inline const char *http_ptr(const char *buf, http_span s) { return buf + s.off; }

/* Case-insensitive comparison of a span with a NUL-terminated lower-case
 * string. */
bool http_span_ieq(const char *buf, http_span s, const char *lower);

/* The first header named `lower_name` (lower case), or NULL. */
const http_header *http_find_header(const http_request *req, const char *buf, const char *lower_name);

/* ---- chunked request bodies ---- */

typedef struct http_chunked {
  uint64_t remaining; /* data bytes left in the current chunk */
  uint32_t meta;      /* bytes of chunk extensions and trailers seen */
  uint32_t max_meta;  /* limit on them */
  uint8_t state;
  uint8_t digits;
  bool done;          /* the last chunk and the trailer section have been read */
} http_chunked;

/* max_meta: how many bytes of chunk extensions and trailer fields a body may
 * carry in all (they are not data, so the body limit does not bound them). */
void http_chunked_init(http_chunked *c, uint32_t max_meta);

/*
 * Decode chunked framing in buf[0 .. len) (bytes not yet given to the
 * decoder; unlike http_parse_head, consumed bytes are not passed again).
 * Returns how many bytes were consumed (>= 0) or -400 for bad framing.  When
 * chunk data is found it stops after it and reports it in *data (offset into
 * buf, length; len 0 when there is none): call again with the rest.  c->done
 * becomes true when the body, trailers included, has been read; the next
 * request starts right after.  A call that consumes nothing and reports no
 * data needs more input.
 */
long http_chunked_decode(http_chunked *c, const char *buf, size_t len, http_span *data);

/* The reason phrase of a status code ("OK", "Not Found", ...), "Unknown" for
 * codes it does not know. */
const char *http_reason(int status);

#endif /* HTTPD_HTTP_PARSER_H */
