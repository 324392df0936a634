/* SPDX-License-Identifier: MIT */
/*
 * The request parser: see http_parser.h.  A byte-driven state machine whose
 * state lives in struct http_parser, so that a head may arrive in any number
 * of pieces; runs of ordinary bytes (names, values, the target) are scanned
 * by tight inner loops over a character-class table.
 */
#include "http_parser.h"

#include <string.h>

/* ---- character classes (RFC 9110 5.6.2, RFC 3986) ---- */

enum {
  C_TCHAR = 1,  /* token character */
  C_VCHAR = 2,  /* field-vchar: visible ASCII or obs-text */
  C_TARGET = 4, /* allowed unescaped in a request-target */
  C_HEX = 8,
  C_HOST = 16,  /* allowed in a Host value: reg-name, IP literal, port */
  C_FIELD = 32, /* field-content: VCHAR, obs-text, SP, HTAB */
};

/* The table is a constant, built by the compiler from these predicates. */
#define DIGIT_(c) ((c) >= '0' && (c) <= '9')
#define ALPHA_(c) (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z'))
#define TSPECIAL_(c)                                                                                      \
  ((c) == '!' || (c) == '#' || (c) == '$' || (c) == '%' || (c) == '&' || (c) == '\'' || (c) == '*' ||     \
   (c) == '+' || (c) == '-' || (c) == '.' || (c) == '^' || (c) == '_' || (c) == '`' || (c) == '|' ||       \
   (c) == '~')
#define VCHAR_(c) (((c) >= 0x21 && (c) <= 0x7e) || (c) >= 0x80)
/* unreserved, sub-delims and ':' '@' '[' ']' (the latter for IP literals) */
#define HOSTSET_(c)                                                                                       \
  (DIGIT_(c) || ALPHA_(c) || (c) == '-' || (c) == '.' || (c) == '_' || (c) == '~' || (c) == '!' ||         \
   (c) == '$' || (c) == '&' || (c) == '\'' || (c) == '(' || (c) == ')' || (c) == '*' || (c) == '+' ||       \
   (c) == ',' || (c) == ';' || (c) == '=' || (c) == ':' || (c) == '[' || (c) == ']' || (c) == '%')
/* a request-target: the above plus '/' '?' '@'; never '#', '"', '<', '>',
 * '\\', '^', '`', '{', '|', '}', controls, space or non-ASCII */
#define TARGET_(c) (HOSTSET_(c) || (c) == '/' || (c) == '?' || (c) == '@')
#define CLS(c)                                                                                            \
  (uint8_t)(((DIGIT_(c) || ALPHA_(c) || TSPECIAL_(c)) ? C_TCHAR : 0) | (VCHAR_(c) ? C_VCHAR : 0) |         \
            (TARGET_(c) ? C_TARGET : 0) |                                                                 \
            ((DIGIT_(c) || ((c) >= 'a' && (c) <= 'f') || ((c) >= 'A' && (c) <= 'F')) ? C_HEX : 0) |         \
            (HOSTSET_(c) ? C_HOST : 0) | ((VCHAR_(c) || (c) == ' ' || (c) == '\t') ? C_FIELD : 0))
#define R4_(n) CLS(n), CLS((n) + 1), CLS((n) + 2), CLS((n) + 3)
#define R16_(n) R4_(n), R4_((n) + 4), R4_((n) + 8), R4_((n) + 12)
#define R64_(n) R16_(n), R16_((n) + 16), R16_((n) + 32), R16_((n) + 48)
static const uint8_t cls[256] = {R64_(0), R64_(64), R64_(128), R64_(192)};

#define IS(c, k) ((cls[(unsigned char)(c)] & (k)) != 0)

static int hexval(unsigned char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  return (c | 0x20) - 'a' + 10;
}

static inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c | 0x20) : c; }

static bool ieq(const char *a, size_t n, const char *lower_s)
{
  for (size_t i = 0; i < n; i++)
    if (lower_s[i] == '\0' || lower(a[i]) != lower_s[i])
      return false;
  return lower_s[n] == '\0';
}

bool http_span_ieq(const char *buf, http_span s, const char *lower_s) { return ieq(buf + s.off, s.len, lower_s); }

const http_header *http_find_header(const http_request *req, const char *buf, const char *lower_name)
{
  for (unsigned i = 0; i < req->nheaders; i++)
    if (http_span_ieq(buf, req->headers[i].name, lower_name))
      return &req->headers[i];
  return NULL;
}

/* ---- the head ---- */

enum {
  S_LINE_START, /* before the request line (empty lines are skipped) */
  S_EMPTY_LF,   /* CR of an empty line seen */
  S_METHOD,
  S_TARGET_START,
  S_TARGET,
  S_VERSION,
  S_RL_CR,
  S_RL_LF,
  S_FIELD_START,
  S_NAME,
  S_VALUE_LEAD,
  S_VALUE,
  S_FIELD_LF,
  S_HEAD_LF,
};

#define CONN_CLOSE 1
#define CONN_KEEP_ALIVE 2

void http_parser_init(http_parser *p, uint32_t max_head)
{
  memset(p, 0, sizeof *p);
  p->max_head = max_head;
  p->state = S_LINE_START;
}

/* Elements of a comma-separated list (RFC 9110 5.6.1), OWS trimmed.  Empty
 * elements are skipped when allow_empty (as RFC 9110 asks of recipients),
 * refused (-1) otherwise.  Calls fn(ctx, elem, len) for each; stops at a
 * negative return. */
static int each_elem(const char *v, size_t n, bool allow_empty, int (*fn)(void *ctx, const char *e, size_t len),
                     void *ctx)
{
  size_t i = 0;
  for (;;) {
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
      i++;
    size_t start = i;
    while (i < n && v[i] != ',')
      i++;
    size_t end = i;
    while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
      end--;
    if (end == start) {
      if (!allow_empty)
        return -1;
    } else {
      int r = fn(ctx, v + start, end - start);
      if (r < 0)
        return r;
    }
    if (i == n)
      return 0;
    i++; /* the comma */
  }
}

static int conn_elem(void *ctx, const char *e, size_t len)
{
  int *bits = ctx;
  for (size_t i = 0; i < len; i++)
    if (!IS(e[i], C_TCHAR))
      return -1;
  if (ieq(e, len, "close"))
    *bits |= CONN_CLOSE;
  else if (ieq(e, len, "keep-alive"))
    *bits |= CONN_KEEP_ALIVE;
  return 0;
}

struct te_state {
  int count;        /* codings seen */
  bool last_chunked;
  bool chunked_seen;
  bool unknown;
};

static int te_elem(void *ctx, const char *e, size_t len)
{
  struct te_state *t = ctx;
  /* A coding may carry parameters ("gzip;q=..."); chunked takes none. */
  size_t n = 0;
  while (n < len && IS(e[n], C_TCHAR))
    n++;
  if (n == 0)
    return -1;
  for (size_t i = n; i < len; i++)
    if (!IS(e[i], C_VCHAR) && e[i] != ' ' && e[i] != '\t')
      return -1;
  bool ch = n == len && ieq(e, n, "chunked");
  if (ch && t->chunked_seen)
    return -1; /* chunked applied twice */
  t->chunked_seen |= ch;
  t->last_chunked = ch;
  if (!ch)
    t->unknown = true;
  t->count++;
  return 0;
}

/* A header field is complete: act on the ones that frame the message. */
static int field_done(http_parser *p, const char *buf, http_request *req)
{
  const http_header *h = &req->headers[req->nheaders - 1];
  const char *name = buf + h->name.off;
  const char *v = buf + h->value.off;
  size_t n = h->value.len;
  switch (h->name.len) {
  case 4:
    if (ieq(name, 4, "host")) {
      if (req->has_host)
        return -400; /* two Hosts: which one routes? */
      for (size_t i = 0; i < n; i++)
        if (!IS(v[i], C_HOST))
          return -400;
      req->has_host = true;
      req->host = h->value;
    }
    break;
  case 6:
    if (ieq(name, 6, "expect")) {
      if (ieq(v, n, "100-continue"))
        req->expect_continue = true;
      else
        req->expect_other = true;
    }
    break;
  case 10:
    if (ieq(name, 10, "connection") && each_elem(v, n, true, conn_elem, &p->connection) < 0)
      return -400;
    break;
  case 14:
    if (ieq(name, 14, "content-length")) {
      /* Exactly one, 1*DIGIT.  Even a repeat of the same value is refused:
       * a list such as "5, 5" is not a number either. */
      if (p->saw_cl || n == 0)
        return -400;
      p->saw_cl = 1;
      int64_t cl = 0;
      for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
          return -400;
        if (cl > (INT64_MAX - (v[i] - '0')) / 10)
          return -400; /* past INT64_MAX: no length, and saturating would be a guess */
        cl = cl * 10 + (v[i] - '0');
      }
      req->content_length = cl;
    }
    break;
  case 17:
    if (ieq(name, 17, "transfer-encoding")) {
      if (p->saw_te)
        return -400;
      p->saw_te = 1;
      struct te_state t = {0};
      /* Framing is where parsers must not disagree: no empty elements here,
       * and a request body's length must be known, so chunked comes last. */
      if (each_elem(v, n, false, te_elem, &t) < 0 || !t.last_chunked)
        return -400;
      p->te_unknown = t.unknown;
    }
    break;
  default:
    break;
  }
  return 0;
}

/* The request line is complete: classify and check the target. */
static int target_done(const char *buf, http_request *req)
{
  const char *t = buf + req->target.off;
  uint32_t n = req->target.len;
  for (uint32_t i = 0; i < n; i++)
    if (t[i] == '%' && (i + 2 >= n || !IS(t[i + 1], C_HEX) || !IS(t[i + 2], C_HEX)))
      return -400;
  bool is_connect = req->method.len == 7 && memcmp(buf + req->method.off, "CONNECT", 7) == 0;
  bool is_options = req->method.len == 7 && memcmp(buf + req->method.off, "OPTIONS", 7) == 0;
  uint32_t path_start;
  if (is_connect) {
    /* authority-form: host:port, nothing else. */
    for (uint32_t i = 0; i < n; i++)
      if (!IS(t[i], C_HOST))
        return -400;
    req->form = HTTP_TARGET_AUTHORITY;
    req->path = (http_span){req->target.off + n, 0};
    req->query = req->path;
    return 0;
  }
  if (n == 1 && t[0] == '*') {
    if (!is_options)
      return -400;
    req->form = HTTP_TARGET_ASTERISK;
    req->path = req->target;
    req->query = (http_span){req->target.off + n, 0};
    return 0;
  }
  if (t[0] == '/') {
    req->form = HTTP_TARGET_ORIGIN;
    path_start = 0;
  } else {
    /* absolute-form: scheme "://" authority [path] */
    uint32_t i = 0;
    if (!((t[0] | 0x20) >= 'a' && (t[0] | 0x20) <= 'z'))
      return -400;
    while (i < n && (IS(t[i], C_HOST) && t[i] != ':' && t[i] != '%' && t[i] != '['))
      i++;
    if (i + 3 > n || t[i] != ':' || t[i + 1] != '/' || t[i + 2] != '/')
      return -400;
    i += 3;
    while (i < n && t[i] != '/' && t[i] != '?')
      i++;
    req->form = HTTP_TARGET_ABSOLUTE;
    path_start = i;
  }
  uint32_t q = path_start;
  while (q < n && t[q] != '?')
    q++;
  req->path = (http_span){req->target.off + path_start, q - path_start};
  req->query = q < n ? (http_span){req->target.off + q + 1, n - q - 1} : (http_span){req->target.off + n, 0};
  return 0;
}

static int head_done(http_parser *p, http_request *req)
{
  if (p->saw_te) {
    if (req->minor == 0)
      return -400; /* HTTP/1.0 has no chunked framing: refuse, do not guess */
    if (p->saw_cl)
      return -400; /* Content-Length and Transfer-Encoding: request smuggling */
    if (p->te_unknown)
      return -501;
    req->chunked = true;
  }
  if (req->minor >= 1 && !req->has_host)
    return -400;
  if (p->connection & CONN_CLOSE)
    req->keep_alive = false;
  else if (req->minor >= 1)
    req->keep_alive = true;
  else
    req->keep_alive = (p->connection & CONN_KEEP_ALIVE) != 0;
  return 0;
}

int http_parse_head(http_parser *p, const char *buf, size_t len, http_request *req)
{
  const unsigned char *b = (const unsigned char *)buf;
  size_t end = len < p->max_head ? len : p->max_head;
  size_t i = p->pos;
  unsigned state = p->state;
  uint32_t mark = p->mark;
  if (i == 0 && state == S_LINE_START) {
    req->nheaders = 0;
    req->content_length = -1;
    req->chunked = req->keep_alive = req->expect_continue = req->expect_other = req->has_host = false;
    req->host = (http_span){0, 0};
    req->minor = 1;
  }
  int e;
  size_t j;
  /* Each state consumes what it can and moves on; running out of input in
   * the middle of a state leaves (i, state, mark) to resume from. */
  while (i < end) {
    switch (state) {
    case S_LINE_START:
      if (b[i] == '\r') {
        state = S_EMPTY_LF;
        i++;
        break;
      }
      if (!IS(b[i], C_TCHAR))
        return -400;
      mark = (uint32_t)i;
      state = S_METHOD;
      break;
    case S_EMPTY_LF:
      if (b[i] != '\n')
        return -400;
      state = S_LINE_START;
      i++;
      break;
    case S_METHOD:
      for (j = i; j < end && IS(b[j], C_TCHAR); j++)
        ;
      i = j;
      if (j == end)
        break;
      if (b[j] != ' ')
        return -400;
      req->method = (http_span){mark, (uint32_t)j - mark};
      state = S_TARGET_START;
      i++;
      break;
    case S_TARGET_START:
      if (!IS(b[i], C_TARGET) && b[i] != '*')
        return -400;
      mark = (uint32_t)i++;
      state = S_TARGET;
      break;
    case S_TARGET:
      for (j = i; j < end && IS(b[j], C_TARGET); j++)
        ;
      i = j;
      if (j == end)
        break;
      if (b[j] != ' ')
        return -400;
      req->target = (http_span){mark, (uint32_t)j - mark};
      state = S_VERSION;
      p->vpos = 0;
      i++;
      /* the common case in one comparison */
      if (end - i >= 10 && memcmp(b + i, "HTTP/1.", 7) == 0 && (b[i + 7] == '1' || b[i + 7] == '0') &&
          b[i + 8] == '\r' && b[i + 9] == '\n') {
        req->minor = b[i + 7] - '0';
        if ((e = target_done(buf, req)) < 0)
          return e;
        i += 10;
        state = S_FIELD_START;
      }
      break;
    case S_VERSION: {
      unsigned char c = b[i];
      if (p->vpos < 5) {
        if (c != (unsigned char)"HTTP/"[p->vpos])
          return -400;
      } else if (p->vpos == 5) {
        if (c < '0' || c > '9')
          return -400;
        if (c != '1')
          return -505;
      } else if (p->vpos == 6) {
        if (c != '.')
          return -400;
      } else {
        if (c < '0' || c > '9')
          return -400;
        req->minor = c == '0' ? 0 : 1;
        state = S_RL_CR;
      }
      p->vpos++;
      i++;
      break;
    }
    case S_RL_CR:
      if (b[i] != '\r')
        return -400;
      state = S_RL_LF;
      i++;
      break;
    case S_RL_LF:
      if (b[i] != '\n')
        return -400;
      if ((e = target_done(buf, req)) < 0)
        return e;
      state = S_FIELD_START;
      i++;
      break;
    case S_FIELD_START:
      if (b[i] == '\r') {
        state = S_HEAD_LF;
        i++;
        break;
      }
      if (!IS(b[i], C_TCHAR))
        return -400; /* obs-fold (leading whitespace), or junk */
      if (req->nheaders == HTTP_MAX_HEADERS)
        return -431;
      mark = (uint32_t)i++;
      state = S_NAME;
      break;
    case S_NAME:
      for (j = i; j < end && IS(b[j], C_TCHAR); j++)
        ;
      i = j;
      if (j == end)
        break;
      if (b[j] != ':')
        return -400; /* including whitespace before the colon */
      req->headers[req->nheaders].name = (http_span){mark, (uint32_t)j - mark};
      state = S_VALUE_LEAD;
      i++;
      break;
    case S_VALUE_LEAD:
      while (i < end && (b[i] == ' ' || b[i] == '\t'))
        i++;
      if (i == end)
        break;
      mark = (uint32_t)i;
      state = S_VALUE;
      break;
    case S_VALUE:
      for (j = i; j < end && IS(b[j], C_FIELD); j++)
        ;
      i = j;
      if (j == end)
        break;
      if (b[j] != '\r')
        return -400; /* a control character, or a bare LF */
      while (j > mark && (b[j - 1] == ' ' || b[j - 1] == '\t'))
        j--; /* trailing whitespace is not part of the value */
      req->headers[req->nheaders].value = (http_span){mark, (uint32_t)j - mark};
      state = S_FIELD_LF;
      i++;
      break;
    case S_FIELD_LF:
      if (b[i] != '\n')
        return -400;
      req->nheaders++;
      if ((e = field_done(p, buf, req)) < 0)
        return e;
      state = S_FIELD_START;
      i++;
      break;
    case S_HEAD_LF:
      if (b[i] != '\n')
        return -400;
      if ((e = head_done(p, req)) < 0)
        return e;
      p->pos = (uint32_t)i + 1;
      p->state = (uint8_t)state;
      return (int)(i + 1);
    }
  }
  p->pos = (uint32_t)end;
  p->state = (uint8_t)state;
  p->mark = mark;
  if (end == p->max_head && len >= p->max_head) /* the limit, not the input, ran out */
    return state < S_FIELD_START ? -414 : -431;
  return HTTP_PARSE_INCOMPLETE;
}

/* ---- chunked bodies ---- */

enum {
  K_SIZE0,   /* first hex digit of a chunk size */
  K_SIZE,    /* more digits, or what follows them */
  K_EXT_WS,  /* whitespace after the size: only ';' may follow */
  K_EXT,     /* chunk extensions, up to CR */
  K_SIZE_LF,
  K_DATA,
  K_DATA_CR,
  K_DATA_LF,
  K_TRAILER_START,
  K_TRAILER_NAME,
  K_TRAILER_VALUE,
  K_TRAILER_LF,
  K_END_LF,
  K_DONE,
};

void http_chunked_init(http_chunked *c, uint32_t max_meta)
{
  memset(c, 0, sizeof *c);
  c->max_meta = max_meta;
  c->state = K_SIZE0;
}

long http_chunked_decode(http_chunked *c, const char *buf, size_t len, http_span *data)
{
  data->off = data->len = 0;
  size_t i = 0;
  while (i < len) {
    unsigned char ch = (unsigned char)buf[i];
    switch (c->state) {
    case K_SIZE0:
      if (!IS(ch, C_HEX))
        return -400;
      c->remaining = (uint64_t)hexval(ch);
      c->digits = 1;
      c->state = K_SIZE;
      break;
    case K_SIZE:
      if (IS(ch, C_HEX)) {
        if (++c->digits > 15)
          return -400; /* no body is 2^60 bytes: refuse rather than overflow */
        c->remaining = c->remaining * 16 + (uint64_t)hexval(ch);
      } else if (ch == ';') {
        c->state = K_EXT;
      } else if (ch == ' ' || ch == '\t') {
        c->state = K_EXT_WS;
      } else if (ch == '\r') {
        c->state = K_SIZE_LF;
      } else {
        return -400;
      }
      break;
    case K_EXT_WS:
      if (ch == ';')
        c->state = K_EXT;
      else if (ch != ' ' && ch != '\t')
        return -400;
      if (++c->meta > c->max_meta)
        return -400;
      break;
    case K_EXT:
      if (ch == '\r') {
        c->state = K_SIZE_LF;
        break;
      }
      if (!IS(ch, C_VCHAR) && ch != ' ' && ch != '\t')
        return -400;
      if (++c->meta > c->max_meta)
        return -400;
      break;
    case K_SIZE_LF:
      if (ch != '\n')
        return -400;
      c->state = c->remaining ? K_DATA : K_TRAILER_START;
      break;
    case K_DATA: {
      size_t n = len - i;
      if (n > c->remaining)
        n = (size_t)c->remaining;
      *data = (http_span){(uint32_t)i, (uint32_t)n};
      c->remaining -= n;
      if (c->remaining == 0)
        c->state = K_DATA_CR;
      return (long)(i + n);
    }
    case K_DATA_CR:
      if (ch != '\r')
        return -400;
      c->state = K_DATA_LF;
      break;
    case K_DATA_LF:
      if (ch != '\n')
        return -400;
      c->state = K_SIZE0;
      break;
    case K_TRAILER_START:
      if (ch == '\r') {
        c->state = K_END_LF;
        break;
      }
      if (!IS(ch, C_TCHAR))
        return -400;
      c->state = K_TRAILER_NAME;
      if (++c->meta > c->max_meta)
        return -400;
      break;
    case K_TRAILER_NAME:
      if (ch == ':')
        c->state = K_TRAILER_VALUE;
      else if (!IS(ch, C_TCHAR))
        return -400;
      if (++c->meta > c->max_meta)
        return -400;
      break;
    case K_TRAILER_VALUE:
      if (ch == '\r') {
        c->state = K_TRAILER_LF;
        break;
      }
      if (!IS(ch, C_VCHAR) && ch != ' ' && ch != '\t')
        return -400;
      if (++c->meta > c->max_meta)
        return -400;
      break;
    case K_TRAILER_LF:
      if (ch != '\n')
        return -400;
      c->state = K_TRAILER_START;
      break;
    case K_END_LF:
      if (ch != '\n')
        return -400;
      c->state = K_DONE;
      c->done = true;
      return (long)(i + 1);
    case K_DONE:
      return (long)i;
    }
    i++;
  }
  return (long)i;
}

const char *http_reason(int status)
{
  switch (status) {
  case 100: return "Continue";
  case 200: return "OK";
  case 204: return "No Content";
  case 301: return "Moved Permanently";
  case 304: return "Not Modified";
  case 400: return "Bad Request";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 411: return "Length Required";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 417: return "Expectation Failed";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 503: return "Service Unavailable";
  case 505: return "HTTP Version Not Supported";
  default: return "Unknown";
  }
}
