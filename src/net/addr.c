/* SPDX-License-Identifier: MIT */
/*
 * Socket addresses: parsing what users write (literals, the wildcard,
 * "localhost", Unix names) and formatting, without name resolution, file
 * reads or system calls.  A failed parse records where and why, so that
 * tdl_addr_parse_error() can say it without a second grammar.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "net/net_internal.h"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path))
#define SUN_OFF offsetof(struct sockaddr_un, sun_path)

/* Why and where a string is not an address (tdl_addr_parse_error). */
typedef struct perr {
  size_t at;       /* offset of the offending byte in the string */
  const char *why;
} perr;

/* The string being parsed, and where to say what is wrong with it. */
typedef struct src {
  const char *s;
  perr *e;
} src;

static int bad(src *in, const char *at, const char *why)
{
  in->e->at = (size_t)(at - in->s);
  in->e->why = why;
  return -EINVAL;
}

/* Decimal digits p[0..n) with a value <= max. */
static bool decimal(const char *p, size_t n, uint64_t max, uint64_t *out)
{
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    v = v * 10 + (uint64_t)(p[i] - '0');
    if (v > max)
      return false;
  }
  *out = v;
  return true;
}

/* "0".."65535" to the end of the string; *port in host order. */
static int parse_port(src *in, const char *p, int *port)
{
  if (!*p)
    return bad(in, p, "no port after ':'");
  size_t n = strspn(p, "0123456789");
  if (n == 0)
    return bad(in, p, "the port is not a decimal number");
  if (p[n])
    return bad(in, p + n, "unexpected characters after the port");
  uint64_t v;
  if (!decimal(p, n, 65535, &v))
    return bad(in, p, "port above 65535");
  *port = (int)v;
  return 0;
}

#define UNIX_MAX (SUN_PATH_MAX - 1) /* 107 bytes: a path keeps room for its NUL */

static int parse_unix(src *in, tdl_addr *a, const char *rest)
{
  size_t n = strlen(rest);
  struct sockaddr_un *un = &a->u.un;
  un->sun_family = AF_UNIX;
  if (rest[0] == '@') {
    /* Abstract: sun_path[0] = 0, the name follows, no terminator. */
    if (n == 1)
      return bad(in, rest + 1, "empty abstract socket name after '@'");
    if (n - 1 > UNIX_MAX)
      return bad(in, rest + 1 + UNIX_MAX, "abstract socket name longer than 107 bytes");
    memcpy(un->sun_path + 1, rest + 1, n - 1);
    a->len = (socklen_t)(SUN_OFF + n);
    return 0;
  }
  if (n == 0)
    return bad(in, rest, "empty Unix socket path after 'unix:'");
  if (n > UNIX_MAX)
    return bad(in, rest + UNIX_MAX, "Unix socket path longer than 107 bytes");
  memcpy(un->sun_path, rest, n + 1);
  a->len = (socklen_t)(SUN_OFF + n + 1);
  return 0;
}

void tdl__addr_ip(tdl_addr *a, int family, bool loopback, int port)
{
  memset(a, 0, sizeof *a);
  if (family == AF_INET) {
    a->u.in4.sin_family = AF_INET;
    a->u.in4.sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
    a->u.in4.sin_port = htons((uint16_t)port);
    a->len = sizeof a->u.in4;
  } else {
    a->u.in6.sin6_family = AF_INET6;
    a->u.in6.sin6_addr = loopback ? in6addr_loopback : in6addr_any;
    a->u.in6.sin6_port = htons((uint16_t)port);
    a->len = sizeof a->u.in6;
  }
}

/* Bracketed IPv6 h[0..n), with an optional numeric scope "%N". */
static int parse_v6(src *in, tdl_addr *a, const char *h, size_t n)
{
  char host[INET6_ADDRSTRLEN + 16];
  if (n == 0)
    return bad(in, h, "empty IPv6 address in brackets");
  if (n >= sizeof host)
    return bad(in, h, "not an IPv6 address (too long)");
  memcpy(host, h, n);
  host[n] = 0;
  struct sockaddr_in6 *in6 = &a->u.in6;
  char *pct = strchr(host, '%');
  if (pct) {
    const char *scope = h + (pct - host) + 1;
    size_t digits = strspn(scope, "0123456789");
    uint64_t v;
    if (digits == 0 || digits != n - (size_t)(scope - h) || !decimal(scope, digits, UINT32_MAX, &v))
      return bad(in, scope, "the scope after '%' is not an interface number (0..4294967295)");
    in6->sin6_scope_id = (uint32_t)v;
    *pct = 0;
  }
  if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
    return bad(in, h, "not an IPv6 address");
  in6->sin6_family = AF_INET6;
  a->len = sizeof *in6;
  return 0;
}

static bool name_char(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

/* An IPv4 literal h[0..n), or why the host is not one. */
static int parse_v4(src *in, tdl_addr *a, const char *h, size_t n)
{
  size_t ok = 0;
  while (ok < n && name_char(h[ok]))
    ok++;
  if (ok < n)
    return bad(in, h + ok, "unexpected character in the host");
  char host[16];
  struct sockaddr_in *in4 = &a->u.in4;
  if (n < sizeof host) {
    memcpy(host, h, n);
    host[n] = 0;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
      in4->sin_family = AF_INET;
      a->len = sizeof *in4;
      return 0;
    }
  }
  if (strspn(h, "0123456789.") >= n)
    return bad(in, h, "not an IPv4 address (four numbers 0..255 without leading zeros)");
  return bad(in, h, "not an IP address; of host names only localhost is known (no DNS)");
}

/* An unbracketed host h[0..n): empty or "*" (the wildcard), "localhost", or
 * an IPv4 literal.  Other names are refused: a lookup blocks, so names are
 * dns.h's (tdl_dns_resolve, tdl_dns_dial), on the pool. */
static int parse_host(src *in, tdl_addr *a, const char *h, size_t n, int *kind)
{
  if (n == 0 || (n == 1 && h[0] == '*')) {
    /* The IPv6 wildcard: one socket for both families (net.h says why). */
    *kind = TDL__HOST_WILDCARD;
    tdl__addr_ip(a, AF_INET6, false, 0);
    return 0;
  }
  /* RFC 6761 6.3: "localhost" may be hard-wired to the loopback. */
  if (n == 9 && strncasecmp(h, "localhost", 9) == 0) {
    *kind = TDL__HOST_LOCALHOST;
    tdl__addr_ip(a, AF_INET, true, 0);
    return 0;
  }
  *kind = TDL__HOST_LITERAL;
  return parse_v4(in, a, h, n);
}

/* "::1:80": an IPv6 address the user forgot to bracket (the part before
 * the last colon parses as one). */
static bool unbracketed_v6(const char *s)
{
  char v6[INET6_ADDRSTRLEN];
  struct in6_addr dummy;
  const char *last = strrchr(s, ':');
  size_t n = (size_t)(last - s);
  if (last == strchr(s, ':') || n >= sizeof v6)
    return false;
  memcpy(v6, s, n);
  v6[n] = 0;
  return inet_pton(AF_INET6, v6, &dummy) == 1;
}

/* Split HOST:PORT or [HOST]:PORT: the host is h[0..*hl), the port's colon
 * at *colon. */
static int split(src *in, const char **h, size_t *hl, const char **colon)
{
  const char *s = in->s, *end = s + strlen(s);
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close)
      return bad(in, end, "no ']' after the IPv6 address");
    if (close[1] != ':')
      return bad(in, close + 1, "no ':' and port after ']'");
    *h = s + 1;
    *hl = (size_t)(close - *h);
    *colon = close + 1;
  } else {
    if (!(*colon = strchr(s, ':')))
      return bad(in, end, "no ':' and port (expected HOST:PORT)");
    if (unbracketed_v6(s))
      return bad(in, s, "an IPv6 address goes in brackets: [ADDR]:PORT");
    *h = s;
    *hl = (size_t)(*colon - s);
  }
  if (strncmp(*colon, "://", 3) == 0)
    return bad(in, *colon, "not a URL: expected HOST:PORT");
  return 0;
}

static int parse_ip(src *in, tdl_addr *a, int *kind)
{
  const char *h, *colon;
  size_t hl;
  int port, e = split(in, &h, &hl, &colon);
  if (e == 0)
    e = parse_port(in, colon + 1, &port);
  if (e == 0)
    e = in->s[0] == '[' ? parse_v6(in, a, h, hl) : parse_host(in, a, h, hl, kind);
  if (e < 0)
    return e;
  if (a->u.sa.sa_family == AF_INET)
    a->u.in4.sin_port = htons((uint16_t)port);
  else
    a->u.in6.sin6_port = htons((uint16_t)port);
  return 0;
}

/* tdl_addr_parse with the kind of host and, on failure, why. */
static int parse(tdl_addr *a, const char *s, int *kind, perr *e)
{
  memset(a, 0, sizeof *a);
  *kind = TDL__HOST_LITERAL;
  /* Only carries e, which bad() fills in before the caller reads it. */
  /* cppcheck-suppress ctuuninitvar */
  src in = {s, e};
  int r;
  if (!s) {
    e->at = 0;
    e->why = "no string (NULL)";
    return -EINVAL;
  }
  if (!*s)
    r = bad(&in, s, "empty string (expected HOST:PORT, [IPV6]:PORT or unix:PATH)");
  else if (strncmp(s, "unix:", 5) == 0)
    r = parse_unix(&in, a, s + 5);
  else
    r = parse_ip(&in, a, kind);
  if (r < 0)
    memset(a, 0, sizeof *a);
  return r;
}

int tdl__addr_parse_kind(tdl_addr *a, const char *s, int *kind)
{
  perr e;
  return parse(a, s, kind, &e);
}

int tdl_addr_parse(tdl_addr *a, const char *s)
{
  int kind;
  if (!a)
    return -EINVAL;
  return tdl__addr_parse_kind(a, s, &kind);
}

/* ---- formatting ---- */

typedef struct out {
  char *buf;
  size_t cap, len;
  bool over;
} out;

static void put(out *o, const char *s, size_t n)
{
  if (o->over || n >= o->cap - o->len) {
    o->over = true;
    return;
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
  o->buf[o->len] = 0;
}

static void puts_(out *o, const char *s) { put(o, s, strlen(s)); }

/* p[0..n) with bytes outside printable ASCII, and backslashes, as \xHH.
 * In a quoted string (a message) spaces stay and quotes are escaped; in an
 * address, spaces are escaped so that the string has none. */
static void put_escaped(out *o, const unsigned char *p, size_t n, bool quoted)
{
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    unsigned char c = p[i];
    bool plain = quoted ? c >= 0x20 && c != '"' : c > 0x20;
    if (plain && c < 0x7f && c != '\\') {
      put(o, (const char *)&c, 1);
    } else {
      char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
      put(o, esc, 4);
    }
  }
}

/* A name lies in sun_path, whatever a longer len says (a sockaddr_un the
 * kernel never hands out; tdl_addr_from_sockaddr takes up to the union's
 * size): past it, TDL_ADDR_STRLEN would not hold the escaped bytes. */
static size_t unix_name_len(const tdl_addr *a)
{
  size_t n = (size_t)a->len - SUN_OFF;
  return n < SUN_PATH_MAX ? n : SUN_PATH_MAX;
}

int tdl_addr_format(const tdl_addr *a, char *buf, size_t cap)
{
  if (!a || !buf || a->len < sizeof(sa_family_t) || a->len > sizeof a->u)
    return -EINVAL;
  out o = {buf, cap, 0, cap == 0};
  if (cap)
    buf[0] = 0;
  char ip[INET6_ADDRSTRLEN], num[32];
  switch (a->u.sa.sa_family) {
  case AF_INET:
    if (a->len < sizeof(struct sockaddr_in))
      return -EINVAL;
    inet_ntop(AF_INET, &a->u.in4.sin_addr, ip, sizeof ip);
    puts_(&o, ip);
    snprintf(num, sizeof num, ":%u", (unsigned)ntohs(a->u.in4.sin_port));
    puts_(&o, num);
    break;
  case AF_INET6:
    if (a->len < sizeof(struct sockaddr_in6))
      return -EINVAL;
    inet_ntop(AF_INET6, &a->u.in6.sin6_addr, ip, sizeof ip);
    puts_(&o, "[");
    puts_(&o, ip);
    if (a->u.in6.sin6_scope_id) {
      snprintf(num, sizeof num, "%%%u", (unsigned)a->u.in6.sin6_scope_id);
      puts_(&o, num);
    }
    snprintf(num, sizeof num, "]:%u", (unsigned)ntohs(a->u.in6.sin6_port));
    puts_(&o, num);
    break;
  case AF_UNIX: {
    size_t n = unix_name_len(a);
    const unsigned char *p = (const unsigned char *)a->u.un.sun_path;
    puts_(&o, "unix:");
    if (n > 0 && p[0] == 0) {
      puts_(&o, "@");
      put_escaped(&o, p + 1, n - 1, false);
    } else {
      size_t len = strnlen((const char *)p, n);
      if (len > 0 && p[0] == '@') { /* "unix:@..." would name an abstract socket */
        puts_(&o, "\\x40");
        p++;
        len--;
      }
      put_escaped(&o, p, len, false);
    }
    break;
  }
  default:
    return -EAFNOSUPPORT;
  }
  if (o.over) {
    if (cap)
      buf[0] = 0;
    return -ENOSPC;
  }
  return (int)o.len;
}

/* Messages quote at most this many bytes of the string. */
#define QUOTE_MAX 48

int tdl_addr_parse_error(const char *s, char *buf, size_t cap)
{
  tdl_addr a;
  int kind;
  perr e;
  int r = parse(&a, s, &kind, &e);
  if (!buf || cap == 0)
    return r;
  buf[0] = 0;
  if (r == 0)
    return 0;
  char msg[512], num[48];
  out o = {msg, sizeof msg, 0, false};
  if (s) {
    size_t n = strlen(s);
    puts_(&o, "bad address \"");
    put_escaped(&o, (const unsigned char *)s, n < QUOTE_MAX ? n : QUOTE_MAX, true);
    puts_(&o, n > QUOTE_MAX ? "...\": " : "\": ");
  } else {
    puts_(&o, "bad address: ");
  }
  puts_(&o, e.why);
  if (s) {
    snprintf(num, sizeof num, " (at offset %zu)", e.at);
    puts_(&o, num);
  }
  /* A message cut to fit is still worth having. */
  size_t k = o.len < cap - 1 ? o.len : cap - 1;
  memcpy(buf, msg, k);
  buf[k] = 0;
  return r;
}

int tdl_addr_from_sockaddr(tdl_addr *a, const struct sockaddr *sa, socklen_t len)
{
  if (!a)
    return -EINVAL;
  memset(a, 0, sizeof *a);
  if (!sa || len < sizeof(sa_family_t) || len > sizeof a->u)
    return -EINVAL;
  switch (sa->sa_family) {
  case AF_INET:
    if (len < sizeof(struct sockaddr_in))
      return -EINVAL;
    break;
  case AF_INET6:
    if (len < sizeof(struct sockaddr_in6))
      return -EINVAL;
    break;
  case AF_UNIX:
    break;
  default:
    return -EAFNOSUPPORT;
  }
  memcpy(&a->u, sa, len);
  a->len = len;
  return 0;
}

int tdl_addr_port(const tdl_addr *a)
{
  if (!a || a->len < sizeof(sa_family_t))
    return -EINVAL;
  switch (a->u.sa.sa_family) {
  case AF_INET:
    return a->len < sizeof(struct sockaddr_in) ? -EINVAL : ntohs(a->u.in4.sin_port);
  case AF_INET6:
    return a->len < sizeof(struct sockaddr_in6) ? -EINVAL : ntohs(a->u.in6.sin6_port);
  default:
    return -EAFNOSUPPORT;
  }
}

bool tdl_addr_equal(const tdl_addr *x, const tdl_addr *y)
{
  if (!x || !y || x->len < sizeof(sa_family_t) || y->len < sizeof(sa_family_t) || x->len > sizeof x->u ||
      y->len > sizeof y->u || x->u.sa.sa_family != y->u.sa.sa_family)
    return false;
  switch (x->u.sa.sa_family) {
  case AF_INET:
    return x->len >= sizeof(struct sockaddr_in) && y->len >= sizeof(struct sockaddr_in) &&
           x->u.in4.sin_port == y->u.in4.sin_port && x->u.in4.sin_addr.s_addr == y->u.in4.sin_addr.s_addr;
  case AF_INET6:
    return x->len >= sizeof(struct sockaddr_in6) && y->len >= sizeof(struct sockaddr_in6) &&
           x->u.in6.sin6_port == y->u.in6.sin6_port && x->u.in6.sin6_scope_id == y->u.in6.sin6_scope_id &&
           memcmp(&x->u.in6.sin6_addr, &y->u.in6.sin6_addr, sizeof x->u.in6.sin6_addr) == 0;
  case AF_UNIX: {
    size_t xn = unix_name_len(x), yn = unix_name_len(y);
    const char *xp = x->u.un.sun_path, *yp = y->u.un.sun_path;
    bool xa = xn > 0 && xp[0] == 0, ya = yn > 0 && yp[0] == 0;
    if (xn == 0 || yn == 0 || xa != ya) /* unnamed sockets name nothing */
      return false;
    if (!xa) { /* a path: up to its NUL, however the length was counted */
      xn = strnlen(xp, xn);
      yn = strnlen(yp, yn);
    }
    return xn == yn && memcmp(xp, yp, xn) == 0;
  }
  default:
    return false;
  }
}
