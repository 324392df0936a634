/* SPDX-License-Identifier: MIT */
/*
 * getaddrinfo, getnameinfo and the gethostbyname family in a fiber: libc's
 * function on the pool's name lane, so that only the fiber waits.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hook/hook_internal.h"

#ifndef NETDB_INTERNAL
#define NETDB_INTERNAL (-1) /* glibc's; musl has no name for it */
#endif

/* A lookup goes to the pool's name lane (tdl_pool_call) and parks only
 * the fiber.  The pool thread calls libc's function (real.*, never the hook
 * again) on a record of its own on the heap, never the caller's buffers: a
 * cancelled fiber leaves while the lookup runs on, and the pool frees the
 * record afterwards through `drop`.  The fiber copies the answer out once it
 * has it back.  A pool that cannot take the call fails the lookup as a
 * system error (EAI_SYSTEM, NETDB_INTERNAL) with errno ECANCELED, ENOMEM,
 * EAGAIN (no thread could start). */

static char *dup_or_null(const char *s, bool *bad)
{
  char *d = s ? strdup(s) : NULL;
  if (s && !d)
    *bad = true; // GCOVR_EXCL_LINE: strdup fails only without memory (no fault-injection site here)
  return d;
}

typedef struct gai_call {
  char *node, *service;
  struct addrinfo hints, *hintp, *res;
  int ret, err;
} gai_call;

static void *gai_run(void *arg)
{
  gai_call *c = arg;
  c->ret = tdl__hook_real.getaddrinfo(c->node, c->service, c->hintp, &c->res);
  c->err = errno;
  return NULL;
}

static void gai_drop(void *arg)
{
  gai_call *c = arg;
  if (c->ret == 0 && c->res)
    freeaddrinfo(c->res);
  free(c->node);
  free(c->service);
  free(c);
}

static bool all_digits(const char *s)
{
  if (!*s)
    return false;
  for (; *s; s++)
    if (*s < '0' || *s > '9')
      return false;
  return true;
}

/* No name to look up: an address literal (or none) and a port number (or
 * none).  libc answers these without a name server or a file. */
static bool gai_is_literal(const char *node, const char *service, const struct addrinfo *hints)
{
  int flags = hints ? hints->ai_flags : 0;
  unsigned char a[16];
  bool host = !node || (flags & AI_NUMERICHOST) || inet_pton(AF_INET, node, a) == 1 ||
              inet_pton(AF_INET6, node, a) == 1;
  return host && (!service || (flags & AI_NUMERICSERV) || all_digits(service));
}

TDL__HOOK int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber() || !res || gai_is_literal(node, service, hints))
    return tdl__hook_real.getaddrinfo(node, service, hints, res);
  bool bad = false;
  gai_call *c = calloc(1, sizeof *c);
  if (!c)
    return EAI_MEMORY; // GCOVR_EXCL_LINE: calloc fails only without memory (no fault-injection site here)
  c->node = dup_or_null(node, &bad);
  c->service = dup_or_null(service, &bad);
  if (hints) {
    /* The fields a caller may set; the rest must be zero (POSIX). */
    c->hints.ai_flags = hints->ai_flags;
    c->hints.ai_family = hints->ai_family;
    c->hints.ai_socktype = hints->ai_socktype;
    c->hints.ai_protocol = hints->ai_protocol;
    c->hintp = &c->hints;
  }
  if (bad) {
    /* GCOVR_EXCL_START: a strdup above failed: only without memory */
    gai_drop(c);
    return EAI_MEMORY;
    /* GCOVR_EXCL_STOP */
  }
  int e = tdl_pool_call(TDL_LANE_NAME, gai_run, c, gai_drop, NULL, TDL_FOREVER);
  if (e < 0) { /* c is the pool's now */
    if (e == -ENOMEM)
      return EAI_MEMORY; // GCOVR_EXCL_LINE: the pool without memory (its fault sites are libtreadle's, hidden from the hook's tests)
    errno = -e;
    return EAI_SYSTEM;
  }
  int ret = c->ret;
  if (ret == 0)
    *res = c->res;
  else if (ret == EAI_SYSTEM)
    errno = c->err;
  c->res = NULL;
  gai_drop(c);
  return ret;
}

typedef struct gni_call {
  struct sockaddr_storage sa;
  socklen_t salen, hostlen, servlen;
  int flags, ret, err;
  char *host, *serv; /* in buf, or NULL */
  char buf[];
} gni_call;

static void *gni_run(void *arg)
{
  gni_call *c = arg;
  c->ret = tdl__hook_real.getnameinfo((struct sockaddr *)&c->sa, c->salen, c->host, c->hostlen, c->serv, c->servlen,
                                      c->flags);
  c->err = errno;
  return NULL;
}

TDL__HOOK int getnameinfo(const struct sockaddr *sa, socklen_t salen, char *host, socklen_t hostlen, char *serv,
                     socklen_t servlen, int flags)
{
  TDL__HOOK_READY();
  bool host_numeric = !host || !hostlen || (flags & NI_NUMERICHOST);
  bool serv_numeric = !serv || !servlen || (flags & NI_NUMERICSERV);
  if (!tdl__hook_in_fiber() || !sa || salen > sizeof(struct sockaddr_storage) || (host_numeric && serv_numeric))
    return tdl__hook_real.getnameinfo(sa, salen, host, hostlen, serv, servlen, flags);
  size_t hl = host ? hostlen : 0, sl = serv ? servlen : 0;
  gni_call *c = calloc(1, sizeof *c + hl + sl);
  if (!c)
    return EAI_MEMORY; // GCOVR_EXCL_LINE: calloc fails only without memory (no fault-injection site here)
  memcpy(&c->sa, sa, salen);
  c->salen = salen;
  c->flags = flags;
  c->host = host ? c->buf : NULL;
  c->hostlen = (socklen_t)hl;
  c->serv = serv ? c->buf + hl : NULL;
  c->servlen = (socklen_t)sl;
  int e = tdl_pool_call(TDL_LANE_NAME, gni_run, c, free, NULL, TDL_FOREVER);
  if (e < 0) {
    if (e == -ENOMEM)
      return EAI_MEMORY; // GCOVR_EXCL_LINE: the pool without memory (its fault sites are libtreadle's, hidden from the hook's tests)
    errno = -e;
    return EAI_SYSTEM;
  }
  int ret = c->ret;
  if (ret == 0) {
    if (host)
      memcpy(host, c->host, hl);
    if (serv)
      memcpy(serv, c->serv, sl);
  } else if (ret == EAI_SYSTEM) {
    errno = c->err;
  }
  free(c);
  return ret;
}

/* gethostbyname2_r on the pool, into a buffer of its own.  errno and the
 * h_errno answer are libc's too: the pool thread's call starts with the
 * caller's (err_in, herr) and hands back what libc left there (err_out,
 * herr).  The C libraries differ: glibc sets both on a failure, musl's
 * leaves h_errno alone on success and errno as its look-up left it. */
typedef struct ghb_call {
  char *name;
  int af, ret, herr, err_in, err_out;
  struct hostent he, *result;
  size_t buflen;
  char buf[];
} ghb_call;

static void *ghb_run(void *arg)
{
  ghb_call *c = arg;
  errno = c->err_in;
  c->ret = tdl__hook_real.gethostbyname2_r(c->name, c->af, &c->he, c->buf, c->buflen, &c->result, &c->herr);
  c->err_out = errno;
  return NULL;
}

static void ghb_free(void *arg)
{
  ghb_call *c = arg;
  if (c) {
    free(c->name);
    free(c);
  }
}

/* Look name up on the pool with a buffer of buflen, h_errno's answer
 * starting as herr (the caller's).  0 with *out (its answer in
 * (*out)->ret, ->result, ->herr, ->err_out), or -errno from the pool. */
static int ghb_call_pool(const char *name, int af, size_t buflen, int herr, ghb_call **out)
{
  int err_in = errno;
  ghb_call *c = calloc(1, sizeof *c + buflen);
  if (!c)
    return -ENOMEM; // GCOVR_EXCL_LINE: calloc fails only without memory (no fault-injection site here)
  c->err_in = err_in;
  c->herr = herr;
  c->af = af;
  c->buflen = buflen;
  if (!(c->name = strdup(name))) {
    /* GCOVR_EXCL_START: strdup fails only without memory */
    free(c);
    return -ENOMEM;
    /* GCOVR_EXCL_STOP */
  }
  int e = tdl_pool_call(TDL_LANE_NAME, ghb_run, c, ghb_free, NULL, TDL_FOREVER);
  if (e < 0)
    return e; /* and the pool gives c to ghb_free */
  *out = c;
  return 0;
}

/* p moved from [from, from + len) to the same place in `to`. */
static void *moved(void *p, const char *from, size_t len, char *to)
{
  const char *q = p;
  return q >= from && q < from + len ? to + (q - from) : p;
}

static void moved_list(char **list, const char *from, size_t len, char *to)
{
  for (; list && *list; list++)
    *list = moved(*list, from, len, to);
}

/* The hostent in c, copied into he and buf (whose pointers it then uses). */
static void ghb_copy_out(const ghb_call *c, struct hostent *he, char *buf)
{
  memcpy(buf, c->buf, c->buflen);
  *he = c->he;
  he->h_name = moved(he->h_name, c->buf, c->buflen, buf);
  he->h_aliases = moved(he->h_aliases, c->buf, c->buflen, buf);
  he->h_addr_list = moved(he->h_addr_list, c->buf, c->buflen, buf);
  if ((const char *)he->h_aliases >= buf && (const char *)he->h_aliases < buf + c->buflen)
    moved_list(he->h_aliases, c->buf, c->buflen, buf);
  if ((const char *)he->h_addr_list >= buf && (const char *)he->h_addr_list < buf + c->buflen)
    moved_list(he->h_addr_list, c->buf, c->buflen, buf);
}

static int ghb_r(const char *name, int af, struct hostent *ret, char *buf, size_t buflen, struct hostent **result,
                 int *h_errnop)
{
  ghb_call *c = NULL;
  int e = name && ret && buf && result && h_errnop ? ghb_call_pool(name, af, buflen, *h_errnop, &c) : -EINVAL;
  if (e < 0) {
    if (result)
      *result = NULL;
    if (h_errnop)
      *h_errnop = NETDB_INTERNAL;
    return -e;
  }
  int r = c->ret;
  *h_errnop = c->herr;
  *result = NULL;
  if (r == 0 && c->result) {
    ghb_copy_out(c, ret, buf);
    *result = ret;
  }
  int err = c->err_out;
  ghb_free(c);
  errno = err;
  return r;
}

TDL__HOOK int gethostbyname2_r(const char *name, int af, struct hostent *ret, char *buf, size_t buflen,
                          struct hostent **result, int *h_errnop)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber())
    return tdl__hook_real.gethostbyname2_r(name, af, ret, buf, buflen, result, h_errnop);
  return ghb_r(name, af, ret, buf, buflen, result, h_errnop);
}

TDL__HOOK int gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t buflen, struct hostent **result,
                         int *h_errnop)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber())
    return tdl__hook_real.gethostbyname_r(name, ret, buf, buflen, result, h_errnop);
  return ghb_r(name, AF_INET, ret, buf, buflen, result, h_errnop);
}

/* gethostbyname's answer lives in libc's one static buffer, valid until the
 * next call.  Fibers of one thread interleave at every lookup (each parks),
 * so one buffer would be overwritten between a fiber's call and its use of
 * the answer by another fiber's: each fiber has its own (fiber-local
 * storage, freed when the fiber ends), valid until that fiber's next
 * gethostbyname or gethostbyname2.  No key left: libc's, blocking. */
static tdl_fls_key_t ghb_key;
static int ghb_key_ok;
static pthread_once_t ghb_once = PTHREAD_ONCE_INIT;
static void ghb_key_make(void) { ghb_key_ok = tdl_fls_key_new(&ghb_key, ghb_free) == 0; }

static struct hostent *ghb_static(const char *name, int af)
{
  ghb_call *c = NULL;
  int e = -EINVAL;
  if (name) {
    /* Grow the buffer until the answer fits (ERANGE), as libc does. */
    for (size_t len = 1024; len <= 1 << 20; len *= 2) {
      if ((e = ghb_call_pool(name, af, len, h_errno, &c)) < 0 || c->ret != ERANGE)
        break;
      ghb_free(c);
      c = NULL;
    }
  }
  if (e < 0 || !c) {
    h_errno = NETDB_INTERNAL;
    errno = e < 0 ? -e : ERANGE;
    return NULL;
  }
  h_errno = c->herr;
  int err = c->err_out;
  if (c->ret != 0 || !c->result) {
    ghb_free(c);
    errno = err;
    return NULL;
  }
  ghb_free(tdl_fls_get(ghb_key)); /* the fiber's last answer */
  /* In a fiber, with a key: fails only for its first value without memory. */
  if (tdl_fls_set(ghb_key, c) < 0) {
    /* GCOVR_EXCL_START: tdl_fls_set fails only without memory (above) */
    (void)tdl_fls_set(ghb_key, NULL);
    ghb_free(c);
    h_errno = NETDB_INTERNAL;
    errno = ENOMEM;
    return NULL;
    /* GCOVR_EXCL_STOP */
  }
  errno = err;
  return &c->he;
}

TDL__HOOK struct hostent *gethostbyname2(const char *name, int af)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber() || pthread_once(&ghb_once, ghb_key_make) != 0 || !ghb_key_ok)
    return tdl__hook_real.gethostbyname2(name, af);
  return ghb_static(name, af);
}

TDL__HOOK struct hostent *gethostbyname(const char *name)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber() || pthread_once(&ghb_once, ghb_key_make) != 0 || !ghb_key_ok)
    return tdl__hook_real.gethostbyname(name);
  return ghb_static(name, AF_INET);
}
