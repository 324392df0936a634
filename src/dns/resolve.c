/* SPDX-License-Identifier: MIT */
/*
 * tdl_dns_resolve: literals at once, names through getaddrinfo() on a pool
 * thread.
 *
 * A lookup is a heap request that the pool owns once it has it: the fiber
 * may leave at its deadline or on a cancel while getaddrinfo() still runs,
 * and then the pool's drop function (lookup_free) frees the request and its
 * answer when the thread is done.  So the thread touches nothing of the
 * fiber's: the strings are copied into the request, and the answer is
 * copied out to the caller's array on the fiber's side, after the call.
 */
#include <assert.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "dns/dns_internal.h"

typedef struct lookup {
  int family;
  int numeric_service;   /* the service is a port number: no /etc/services */
  const char *host;      /* NULL: only the service's port is wanted */
  const char *service;   /* NULL: none */
  int status;            /* getaddrinfo's, written by the pool thread */
  int sys_errno;         /* its errno, for EAI_SYSTEM */
  struct addrinfo *res;  /* its answer (status 0) */
  char strings[];        /* host and service, each with its NUL */
} lookup;

static lookup *lookup_new(const char *host, const char *service, int family, bool numeric_service)
{
  size_t hl = host ? strlen(host) + 1 : 0, sl = service ? strlen(service) + 1 : 0;
  lookup *q = TDL__FAULT_ALLOC(calloc(1, sizeof *q + hl + sl));
  if (!q)
    return NULL;
  q->family = family;
  q->numeric_service = numeric_service;
  if (host)
    q->host = memcpy(q->strings, host, hl);
  if (service)
    q->service = memcpy(q->strings + hl, service, sl);
  return q;
}

/* The pool's drop function, and the fiber's own clean-up. */
static void lookup_free(void *arg)
{
  lookup *q = arg;
  if (q->res)
    freeaddrinfo(q->res);
  free(q);
}

/* On a pool thread. */
static void *lookup_run(void *arg)
{
  lookup *q = arg;
  struct addrinfo hints = {
      .ai_family = q->family,
      .ai_socktype = SOCK_STREAM, /* one entry per address, not one per socket type */
      .ai_protocol = IPPROTO_TCP,
      .ai_flags = q->numeric_service ? AI_NUMERICSERV : 0,
  };
  struct addrinfo *res = NULL;
  errno = 0;
  q->status = getaddrinfo(q->host, q->service, &hints, &res);
  q->sys_errno = errno;
  if (q->status == 0)
    q->res = res;
  return NULL;
}

int tdl__dns_eai_errno(int status, int sys_errno)
{
  switch (status) {
  case EAI_NONAME:
#ifdef EAI_NODATA
  case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
  case EAI_ADDRFAMILY:
#endif
    return -ENXIO;
  case EAI_AGAIN:
    return -EAGAIN;
  case EAI_MEMORY:
    return -ENOMEM;
  case EAI_SYSTEM:
    /* -ETIMEDOUT and -ECANCELED are kept for the caller's deadline and
     * cancel; the library's own timeouts are "no answer now". */
    if (sys_errno == ETIMEDOUT)
      return -EAGAIN;
    return sys_errno > 0 && sys_errno != ECANCELED ? -sys_errno : -EIO;
  case EAI_SERVICE:
    return -ENOENT;
  case EAI_FAMILY:
    return -EAFNOSUPPORT;
  default: /* EAI_FAIL, and what our hints should never provoke */
    return -EIO;
  }
}

static void set_port(tdl_addr *a, int port)
{
  if (a->u.sa.sa_family == AF_INET)
    a->u.in4.sin_port = htons((uint16_t)port);
  else
    a->u.in6.sin6_port = htons((uint16_t)port);
}

/* Append a to out[0..n) unless it is there already; the new count. */
static size_t keep(tdl_addr *out, size_t n, const tdl_addr *a)
{
  for (size_t i = 0; i < n; i++)
    if (tdl_addr_equal(&out[i], a))
      return n;
  out[n] = *a;
  return n + 1;
}

/* The IP addresses of an answer, in its order, without duplicates: at most
 * cap of them.  out is written only when there is one (success). */
static int collect(const struct addrinfo *ai, tdl_addr *out, size_t cap)
{
  size_t n = 0;
  for (; ai && n < cap; ai = ai->ai_next) {
    tdl_addr a;
    if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
        tdl_addr_from_sockaddr(&a, ai->ai_addr, ai->ai_addrlen) == 0)
      n = keep(out, n, &a);
  }
  return n > 0 ? (int)n : -ENXIO;
}

/* The port of the first address of an answer, for a service looked up
 * alone. */
static int answer_port(const struct addrinfo *ai)
{
  for (; ai; ai = ai->ai_next) {
    tdl_addr a;
    if (tdl_addr_from_sockaddr(&a, ai->ai_addr, ai->ai_addrlen) == 0 && tdl_addr_port(&a) >= 0)
      return tdl_addr_port(&a);
  }
  return -ENOENT;
}

/* Run q on a pool thread, in the name lane, and wait.  0: q has its answer
 * and is still ours.  On error q is not ours any more: the pool frees it
 * through lookup_free, at once or, after a deadline or cancel while it
 * waited, once the lookup has finished. */
static int lookup_wait(lookup *q, tdl_time_t deadline)
{
  return tdl_pool_call(TDL_LANE_NAME, lookup_run, q, lookup_free, NULL, deadline);
}

/* The lookup of host (NULL: of the service alone), on a pool thread. */
static int lookup_on_pool(const char *host, const char *service, int family, bool numeric_service,
                          tdl_time_t deadline, lookup **out)
{
  int e;
  lookup *q = lookup_new(host, service, family, numeric_service);
  if (!q)
    return -ENOMEM;
  if ((e = lookup_wait(q, deadline)) < 0)
    return e;
  if (q->status != 0) {
    e = tdl__dns_eai_errno(q->status, q->sys_errno);
    assert(e < 0); /* always an error: the callers read *out on 0 */
    lookup_free(q);
    return e;
  }
  *out = q;
  return 0;
}

/* The addresses of a literal host (or localhost), with port: the first cap
 * of them to out; their count. */
static int literal_out(tdl_addr *lit, int n, int port, tdl_addr *out, size_t cap)
{
  if ((size_t)n > cap)
    n = (int)cap;
  for (int i = 0; i < n; i++) {
    set_port(&lit[i], port);
    out[i] = lit[i];
  }
  return n;
}

/* A literal host (or localhost) with a service name: only the port needs
 * the lookup. */
static int literal_with_named_service(tdl_addr *lit, int n, const char *service, tdl_addr *out, size_t cap,
                                      tdl_time_t deadline)
{
  lookup *q;
  int e = lookup_on_pool(NULL, service, AF_UNSPEC, false, deadline, &q);
  if (e < 0)
    return e;
  int port = answer_port(q->res);
  lookup_free(q);
  return port < 0 ? port : literal_out(lit, n, port, out, cap);
}

static int name_lookup(const char *host, const char *service, int family, int port, tdl_addr *out, size_t cap,
                       tdl_time_t deadline)
{
  lookup *q;
  int e = lookup_on_pool(host, service, family, port != TDL__DNS_SERVICE_NAMED, deadline, &q);
  if (e < 0)
    return e;
  e = collect(q->res, out, cap);
  lookup_free(q);
  return e;
}

int tdl_dns_resolve(const char *host, const char *service, int family, tdl_addr *out, size_t cap,
                    tdl_time_t deadline)
{
  if (!out || cap == 0)
    return -EINVAL;
  if (family != AF_UNSPEC && family != AF_INET && family != AF_INET6)
    return -EAFNOSUPPORT;
  int port = tdl__dns_service_parse(service);
  if (port < 0)
    return port;
  tdl_addr lit[2];
  int n = tdl__dns_host_parse(host, family, lit);
  if (n < 0)
    return n;
  if (n == 0)
    return name_lookup(host, service, family, port, out, cap, deadline);
  if (port == TDL__DNS_SERVICE_NAMED)
    return literal_with_named_service(lit, n, service, out, cap, deadline);
  return literal_out(lit, n, port, out, cap); /* the cheap path: no thread */
}
