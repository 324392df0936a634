/*
 * Socket addresses: parsing and formatting literals, without name resolution
 * and without system calls.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path))
#define SUN_OFF offsetof(struct sockaddr_un, sun_path)

/* A whole string of 1 to `digits` decimal digits with a value <= max. */
static int parse_decimal(const char *p, size_t digits, uint64_t max, uint64_t *out)
{
  uint64_t v = 0;
  size_t n = 0;
  for (; p[n]; n++) {
    if (p[n] < '0' || p[n] > '9' || n == digits)
      return -EINVAL;
    v = v * 10 + (uint64_t)(p[n] - '0');
  }
  if (n == 0 || v > max)
    return -EINVAL;
  *out = v;
  return 0;
}

/* "0".."65535", in network order. */
static int parse_port(const char *p, in_port_t *out)
{
  uint64_t v;
  int e = parse_decimal(p, 5, 65535, &v);
  if (e == 0)
    *out = htons((uint16_t)v);
  return e;
}

static int parse_unix(tdl_addr *a, const char *rest)
{
  size_t n = strlen(rest);
  struct sockaddr_un *un = &a->u.un;
  un->sun_family = AF_UNIX;
  if (rest[0] == '@') {
    /* Abstract: sun_path[0] = 0, the name follows, no terminator. */
    n--;
    if (n == 0 || n > SUN_PATH_MAX - 1)
      return -EINVAL;
    memcpy(un->sun_path + 1, rest + 1, n);
    a->len = (socklen_t)(SUN_OFF + 1 + n);
    return 0;
  }
  if (n == 0 || n > SUN_PATH_MAX - 1)
    return -EINVAL;
  memcpy(un->sun_path, rest, n + 1);
  a->len = (socklen_t)(SUN_OFF + n + 1);
  return 0;
}

static int parse_scope(const char *p, uint32_t *out)
{
  uint64_t v;
  int e = parse_decimal(p, 10, UINT32_MAX, &v);
  if (e == 0)
    *out = (uint32_t)v;
  return e;
}

static int parse_ip(tdl_addr *a, const char *s)
{
  char host[INET6_ADDRSTRLEN + 16];
  const char *h, *hend, *port;
  bool v6 = s[0] == '[';
  if (v6) {
    h = s + 1;
    hend = strchr(h, ']');
    if (!hend || hend[1] != ':')
      return -EINVAL;
    port = hend + 2;
  } else {
    h = s;
    hend = strchr(s, ':');
    if (!hend)
      return -EINVAL;
    port = hend + 1;
  }
  size_t hl = (size_t)(hend - h);
  if (hl == 0 || hl >= sizeof host)
    return -EINVAL;
  memcpy(host, h, hl);
  host[hl] = 0;
  in_port_t po;
  if (parse_port(port, &po) < 0)
    return -EINVAL;
  if (!v6) {
    struct sockaddr_in *in4 = &a->u.in4;
    if (inet_pton(AF_INET, host, &in4->sin_addr) != 1)
      return -EINVAL;
    in4->sin_family = AF_INET;
    in4->sin_port = po;
    a->len = sizeof *in4;
    return 0;
  }
  struct sockaddr_in6 *in6 = &a->u.in6;
  char *pct = strchr(host, '%');
  if (pct) {
    *pct = 0;
    if (parse_scope(pct + 1, &in6->sin6_scope_id) < 0)
      return -EINVAL;
  }
  if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
    return -EINVAL;
  in6->sin6_family = AF_INET6;
  in6->sin6_port = po;
  a->len = sizeof *in6;
  return 0;
}

int tdl_addr_parse(tdl_addr *a, const char *s)
{
  if (!a)
    return -EINVAL;
  memset(a, 0, sizeof *a);
  if (!s)
    return -EINVAL;
  int e = strncmp(s, "unix:", 5) == 0 ? parse_unix(a, s + 5) : parse_ip(a, s);
  if (e < 0)
    memset(a, 0, sizeof *a);
  return e;
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

static void put_name(out *o, const unsigned char *p, size_t n)
{
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    unsigned char c = p[i];
    if (c > 0x20 && c < 0x7f && c != '\\') {
      put(o, (const char *)&c, 1);
    } else {
      char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
      put(o, esc, 4);
    }
  }
}

static size_t unix_name_len(const tdl_addr *a)
{
  return (size_t)a->len - SUN_OFF;
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
      put_name(&o, p + 1, n - 1);
    } else {
      put_name(&o, p, strnlen((const char *)p, n));
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
