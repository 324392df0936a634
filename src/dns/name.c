/* SPDX-License-Identifier: MIT */
/*
 * Host and service strings: which are well formed, and which need no lookup.
 *
 * Everything a lookup thread would only refuse, or worse read in some
 * surprising way, is refused here first, before any thread is used:
 * getaddrinfo() reads "127.1" and "0x7f.1" as addresses (inet_aton's old
 * forms), and passes spaces or control characters on to DNS.  Literals and
 * "localhost" are answered here, the way tdl_addr_parse reads them.
 */
#include <arpa/inet.h>
#include <net/if.h>
#include <string.h>
#include <strings.h>

#include "dns/dns_internal.h"

#define LABEL_MAX 63
#define SERVICE_MAX 32

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* "0".."65535": its value; -1 for anything else. */
static int port_number(const char *s, size_t n)
{
  if (n == 0 || n > 5)
    return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!is_digit(s[i]))
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v <= 65535 ? v : -1;
}

int tdl__dns_service_parse(const char *service)
{
  if (!service)
    return 0;
  size_t n = strnlen(service, SERVICE_MAX + 1);
  if (n == 0 || n > SERVICE_MAX)
    return -EINVAL;
  bool letters = false;
  for (size_t i = 0; i < n; i++) {
    if (!is_digit(service[i]) && !is_letter(service[i]) && service[i] != '-')
      return -EINVAL;
    letters = letters || is_letter(service[i]);
  }
  if (letters) /* RFC 6335 names have one at least; "-1" is no name */
    return TDL__DNS_SERVICE_NAMED;
  int port = port_number(service, n);
  return port >= 0 ? port : -EINVAL;
}

/* Labels of letters, digits, '-' and '_' (underscores are not in RFC 1123,
 * but /etc/hosts and container runtimes use them), 1..63 bytes each, at most
 * 253 bytes with an optional trailing dot, the last label not all digits
 * (then it would be a malformed IPv4 address, not a name). */
static bool well_formed_name(const char *h)
{
  size_t n = strnlen(h, TDL_DNS_NAME_MAX + 2);
  if (n > 0 && h[n - 1] == '.')
    n--;
  if (n == 0 || n > TDL_DNS_NAME_MAX)
    return false;
  size_t label = 0;
  bool label_digits = true;
  for (size_t i = 0; i < n; i++) {
    char c = h[i];
    if (c == '.') {
      if (label == 0)
        return false;
      label = 0;
      label_digits = true;
      continue;
    }
    if (!is_digit(c) && !is_letter(c) && c != '-' && c != '_')
      return false;
    if (++label > LABEL_MAX)
      return false;
    label_digits = label_digits && is_digit(c);
  }
  if (label == 0 || label_digits)
    return false;
  struct in_addr ignored;
  return inet_aton(h, &ignored) == 0; /* "0x7f": getaddrinfo would read an address */
}

/* The scope after '%': an interface number, or a name if_nametoindex knows. */
static int parse_scope(const char *s, uint32_t *scope)
{
  size_t n = strlen(s);
  if (n == 0 || n >= IF_NAMESIZE + 10)
    return -EINVAL;
  if (strspn(s, "0123456789") == n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
      if ((v = v * 10 + (uint64_t)(s[i] - '0')) > UINT32_MAX)
        return -EINVAL;
    *scope = (uint32_t)v;
    return 0;
  }
  if (n >= IF_NAMESIZE)
    return -EINVAL;
  for (size_t i = 0; i < n; i++)
    if (s[i] <= ' ' || s[i] >= 0x7f || s[i] == '/' || s[i] == ':' || s[i] == '%')
      return -EINVAL;
  unsigned index = if_nametoindex(s);
  if (index == 0)
    return errno == ENODEV || errno == ENXIO || errno == 0 ? -ENODEV : -errno;
  *scope = index;
  return 0;
}

static int parse_v6(const char *h, tdl_addr *a)
{
  char buf[INET6_ADDRSTRLEN + IF_NAMESIZE + 10];
  size_t n = strnlen(h, sizeof buf);
  if (n >= sizeof buf)
    return -EINVAL;
  memcpy(buf, h, n + 1);
  char *pct = strchr(buf, '%');
  if (pct)
    *pct = 0;
  memset(a, 0, sizeof *a);
  struct sockaddr_in6 *in6 = &a->u.in6;
  if (inet_pton(AF_INET6, buf, &in6->sin6_addr) != 1)
    return -EINVAL;
  if (pct) { /* only now: a bad address must not cost an interface lookup */
    int e = parse_scope(pct + 1, &in6->sin6_scope_id);
    if (e < 0)
      return e;
  }
  in6->sin6_family = AF_INET6;
  a->len = sizeof *in6;
  return 0;
}

static bool parse_v4(const char *h, tdl_addr *a)
{
  memset(a, 0, sizeof *a);
  if (inet_pton(AF_INET, h, &a->u.in4.sin_addr) != 1)
    return false;
  a->u.in4.sin_family = AF_INET;
  a->len = sizeof a->u.in4;
  return true;
}

static bool is_localhost(const char *h)
{
  return strcasecmp(h, "localhost") == 0 || strcasecmp(h, "localhost.") == 0;
}

/* 127.0.0.1 then ::1, as tdl_dns_dial tries them. */
static int localhost(int family, tdl_addr lit[2])
{
  int n = 0;
  if (family != AF_INET6) {
    memset(&lit[n], 0, sizeof lit[n]);
    lit[n].u.in4.sin_family = AF_INET;
    lit[n].u.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    lit[n++].len = sizeof lit[0].u.in4;
  }
  if (family != AF_INET) {
    memset(&lit[n], 0, sizeof lit[n]);
    lit[n].u.in6.sin6_family = AF_INET6;
    lit[n].u.in6.sin6_addr = in6addr_loopback;
    lit[n++].len = sizeof lit[0].u.in6;
  }
  return n;
}

int tdl__dns_host_parse(const char *host, int family, tdl_addr lit[2])
{
  if (!host)
    return -EINVAL;
  if (is_localhost(host))
    return localhost(family, lit);
  if (strchr(host, ':')) {
    int e = parse_v6(host, &lit[0]);
    if (e < 0)
      return e;
  } else if (!parse_v4(host, &lit[0])) {
    return well_formed_name(host) ? 0 : -EINVAL;
  }
  if (family != AF_UNSPEC && family != lit[0].u.sa.sa_family)
    return -ENXIO; /* as getaddrinfo's EAI_ADDRFAMILY for a literal */
  return 1;
}
