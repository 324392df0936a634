/* SPDX-License-Identifier: MIT */
/*
 * tdl_dns_dial: "host:port" to a connected fd, one address after another
 * under one deadline.
 *
 * Each attempt gets a share of what remains, as Go's dialer does: an
 * address whose packets are dropped would otherwise hold the whole deadline
 * while the next one answers at once.  A share is never smaller than a
 * floor (2 s: a TCP handshake over a slow path fits, a black hole is given
 * up on), and the last address gets everything that remains.
 */
#include <string.h>

#include "base/clock.h"
#include "dns/dns_internal.h"
#include "fiber/fiber_internal.h"
#include "net/net_internal.h"

#define ATTEMPT_FLOOR (2 * TDL_SEC)
#define PORT_MAX_LEN 32 /* a service name's longest; a port is shorter */

/* Errors that only say this family is not here (no IPv6 route, no such
 * local address): the next address may still work, and its error says more.
 * The same rule as tdl_dns_dial's. */
static bool family_missing(int e)
{
  return e == -EAFNOSUPPORT || e == -EADDRNOTAVAIL || e == -ENETUNREACH;
}

static bool passed(tdl_time_t deadline) { return deadline != TDL_FOREVER && tdl__clock_now() >= deadline; }

tdl_time_t tdl__dns_attempt_deadline(tdl_time_t now, tdl_time_t deadline, size_t left, tdl_time_t floor)
{
  if (deadline == TDL_FOREVER)
    return TDL_FOREVER;
  tdl_time_t remaining = deadline - now;
  if (remaining <= 0)
    return deadline;
  tdl_time_t share = remaining / (tdl_time_t)left;
  if (share < floor)
    share = floor < remaining ? floor : remaining;
  return now + share;
}

int tdl__dns_dial_addrs(const tdl_addr *a, size_t n, tdl_time_t floor, tdl_time_t deadline)
{
  int first = -ENXIO;
  for (size_t i = 0; i < n; i++) {
    int fd = tdl_net_connect(&a[i], tdl__dns_attempt_deadline(tdl__clock_now(), deadline, n - i, floor));
    if (fd >= 0 || fd == -ECANCELED)
      return fd;
    if (fd == -ETIMEDOUT && passed(deadline))
      return fd; /* the whole dial's time is up, not just this attempt's */
    if (i == 0 || (family_missing(first) && !family_missing(fd)))
      first = fd;
  }
  return first;
}

/* Copy p[0..n) into buf (cap bytes) with its NUL; -EINVAL if it does not
 * fit, which only a string tdl_dns_resolve would refuse can hit. */
static int copy_part(char *buf, size_t cap, const char *p, size_t n)
{
  if (n >= cap)
    return -EINVAL;
  memcpy(buf, p, n);
  buf[n] = 0;
  return 0;
}

/* "host:port" or "[v6]:port" into host and port, without judging either
 * (tdl_dns_resolve does).  One colon only outside brackets: an IPv6
 * literal goes in brackets, and a bracket holds nothing else. */
static int split(const char *s, char *host, size_t host_cap, char *port, size_t port_cap)
{
  const char *h = s, *colon, *he;
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close || close[1] != ':')
      return -EINVAL;
    h = s + 1;
    he = close;
    colon = close + 1;
    if (!memchr(h, ':', (size_t)(he - h)))
      return -EINVAL;
  } else {
    colon = strchr(s, ':');
    if (!colon || strchr(colon + 1, ':'))
      return -EINVAL;
    he = colon;
  }
  int e = copy_part(host, host_cap, h, (size_t)(he - h));
  if (e == 0)
    e = copy_part(port, port_cap, colon + 1, strlen(colon + 1));
  return e;
}

int tdl_dns_dial(const char *hostport, tdl_time_t deadline)
{
  int e = tdl__may_block(NULL);
  if (e < 0)
    return e;
  if (!hostport)
    return -EINVAL;
  tdl_addr literal;
  if (tdl_addr_parse(&literal, hostport) == 0)
    return tdl__net_dial_literal(hostport, deadline); /* no name to look up */
  /* Room for the longest valid host (a name with its trailing dot, or an
   * IPv6 literal with a named scope) and service; longer is refused. */
  char host[TDL_DNS_NAME_MAX + 2], port[PORT_MAX_LEN + 1];
  e = split(hostport, host, sizeof host, port, sizeof port);
  if (e < 0)
    return e;
  tdl_addr addrs[TDL_DNS_DIAL_MAX];
  int n = tdl_dns_resolve(host, port, AF_UNSPEC, addrs, TDL_DNS_DIAL_MAX, deadline);
  if (n < 0)
    return n;
  return tdl__dns_dial_addrs(addrs, (size_t)n, ATTEMPT_FLOOR, deadline);
}
