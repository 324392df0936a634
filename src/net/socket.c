/* SPDX-License-Identifier: MIT */
/*
 * Sockets for fibers: listen, accept (with the fd-exhaustion reserve),
 * connect, datagrams, shutdown and options.  Everything that blocks goes
 * through the fiber I/O of fd/io.c; this file adds the socket set-up and
 * the policies (what to retry, how to back off, what to close on failure).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sys.h"
#include "fd/fd_internal.h"
#include "net/net_internal.h"

#define SUN_OFF offsetof(struct sockaddr_un, sun_path)
#define NET_FLAGS (TDL_NET_REUSEPORT | TDL_NET_V6ONLY | TDL_NET_UNLINK)

/* ---- common checks ---- */

static int check_addr(const tdl_addr *a, int *family)
{
  if (!a || a->len < sizeof(sa_family_t) || a->len > sizeof a->u)
    return -EINVAL;
  int f = a->u.sa.sa_family;
  switch (f) {
  case AF_INET:
    if (a->len < sizeof(struct sockaddr_in))
      return -EINVAL;
    break;
  case AF_INET6:
    if (a->len < sizeof(struct sockaddr_in6))
      return -EINVAL;
    break;
  case AF_UNIX:
    if (a->len <= SUN_OFF) /* unnamed: nothing to bind or connect to */
      return -EINVAL;
    break;
  default:
    return -EAFNOSUPPORT;
  }
  *family = f;
  return 0;
}

/* The NUL-terminated path of a Unix path address, or false for an abstract
 * name (or another family). */
static bool unix_path(const tdl_addr *a, char path[sizeof a->u.un.sun_path + 1])
{
  if (a->u.sa.sa_family != AF_UNIX || a->len <= SUN_OFF || a->u.un.sun_path[0] == 0)
    return false;
  size_t n = strnlen(a->u.un.sun_path, (size_t)a->len - SUN_OFF);
  memcpy(path, a->u.un.sun_path, n);
  path[n] = 0;
  return true;
}

static int setopt(int fd, int level, int name, int v)
{
  return setsockopt(fd, level, name, &v, sizeof v) < 0 ? -errno : 0;
}

/* ---- binding ---- */

/* Whether the socket file at a's path is a socket that nobody serves: a probe
 * connect is refused.  Anything else (not a socket, a live peer, an error we
 * cannot read) counts as in use. */
static bool stale_socket(const tdl_addr *a, const char *path, int type)
{
  struct stat st;
  if (lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode))
    return false;
  int probe = TDL__FAULT_SYS(EMFILE, socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (probe < 0)
    return false;
  int r = tdl__sys_connect(probe, &a->u.sa, a->len);
  int err = errno;
  tdl__sys_close(probe);
  return r < 0 && err == ECONNREFUSED;
}

/* A socket of `type` bound to a, with the options flags ask for. */
static int bound_socket(const tdl_addr *a, int type, unsigned flags)
{
  int fam, e;
  if (flags & ~NET_FLAGS)
    return -EINVAL;
  if ((e = check_addr(a, &fam)) < 0)
    return e;
  int fd = TDL__FAULT_SYS(EMFILE, socket(fam, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd < 0)
    return -errno;
  if (fam != AF_UNIX) {
    if (type == SOCK_STREAM && (e = setopt(fd, SOL_SOCKET, SO_REUSEADDR, 1)) < 0)
      goto fail;
    if ((flags & TDL_NET_REUSEPORT) && (e = setopt(fd, SOL_SOCKET, SO_REUSEPORT, 1)) < 0)
      goto fail;
    /* Set either way: the default comes from a sysctl (bindv6only), and
     * "[::]" should mean the same on every machine. */
    if (fam == AF_INET6 && (e = setopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, (flags & TDL_NET_V6ONLY) != 0)) < 0)
      goto fail;
  }
  if (bind(fd, &a->u.sa, a->len) == 0)
    return fd;
  e = -errno;
  char path[sizeof a->u.un.sun_path + 1];
  if (e == -EADDRINUSE && (flags & TDL_NET_UNLINK) && unix_path(a, path) && stale_socket(a, path, type)) {
    if (unlink(path) < 0 && errno != ENOENT) {
      e = -errno;
      goto fail;
    }
    if (bind(fd, &a->u.sa, a->len) == 0)
      return fd;
    e = -errno;
  }
fail:
  tdl__sys_close(fd);
  return e;
}

/* ---- the accept reserve ---- */

enum { RESERVE_AUTO, RESERVE_ON, RESERVE_OFF };

static atomic_int g_reserve = -1;  /* the /dev/null fd, or -1 */
static atomic_int g_reserve_mode = RESERVE_AUTO;
static _Atomic uint64_t g_exhausted, g_shed;
#define BACKOFF_MIN (10 * TDL_MSEC)
#define BACKOFF_MAX (160 * TDL_MSEC)
/* Back-off of this thread's accepts while fds are exhausted. */
static _Thread_local tdl__backoff t_backoff = {BACKOFF_MIN, BACKOFF_MAX};
#define SHED_MAX 64

static int reserve_open(void)
{
  int fd = TDL__FAULT_SYS(EMFILE, open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (fd < 0)
    return -errno;
  int none = -1;
  if (!atomic_compare_exchange_strong(&g_reserve, &none, fd))
    tdl__sys_close(fd); /* another thread was quicker */
  return 0;
}

static void reserve_ensure(void)
{
  if (atomic_load_explicit(&g_reserve, memory_order_relaxed) < 0 &&
      atomic_load_explicit(&g_reserve_mode, memory_order_relaxed) != RESERVE_OFF)
    (void)reserve_open();
}

int tdl_net_accept_reserve(bool on)
{
  if (on) {
    atomic_store(&g_reserve_mode, RESERVE_ON);
    return atomic_load(&g_reserve) < 0 ? reserve_open() : 0;
  }
  atomic_store(&g_reserve_mode, RESERVE_OFF);
  int fd = atomic_exchange(&g_reserve, -1);
  if (fd >= 0)
    tdl__sys_close(fd);
  return 0;
}

void tdl_net_stats_get(tdl_net_stats *out)
{
  if (!out)
    return;
  out->accept_exhausted = atomic_load_explicit(&g_exhausted, memory_order_relaxed);
  out->accept_shed = atomic_load_explicit(&g_shed, memory_order_relaxed);
}

/* Out of fds: give the reserve's slot to the pending connections one at a
 * time, closing each at once, then take the slot back. */
static void shed(int lfd)
{
  /* The fiber layer made lfd non-blocking before it reported EMFILE; check
   * anyway, since an accept4() on a blocking listener would stall the thread
   * once the queue is empty. */
  int fl = tdl__sys_fcntl(lfd, F_GETFL, 0);
  if (fl < 0 || !(fl & O_NONBLOCK))
    return;
  int r = atomic_exchange(&g_reserve, -1);
  if (r < 0)
    return;
  tdl__sys_close(r);
  for (int i = 0; i < SHED_MAX;) {
    int c = tdl__sys_accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (c >= 0) {
      tdl__sys_close(c);
      atomic_fetch_add_explicit(&g_shed, 1, memory_order_relaxed);
      i++;
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED)
      continue;
    break; /* EAGAIN (nothing left), EMFILE (another thread took the slot)... */
  }
  if (atomic_load(&g_reserve_mode) != RESERVE_OFF)
    (void)reserve_open();
}

/* Sleep this thread's next back-off period, never past the deadline.
 * Returns 0 or -ECANCELED.  Without memory for a timer the sleep fails at
 * once: yield then, or a caller that retries on the error (as a server's
 * accept loop does) would never let the loop's other fibers run. */
static int backoff(tdl_time_t deadline)
{
  tdl_time_t pause = tdl__backoff_step(&t_backoff);
  int e = tdl_sleep(tdl__deadline_min(deadline, tdl_after(pause)));
  if (e == -ENOMEM && tdl_fiber_yield() == 0)
    e = tdl_fiber_cancelled() ? -ECANCELED : 0;
  return e;
}

/* ---- listen, accept, connect ---- */

int tdl_net_listen(const tdl_addr *a, int backlog, unsigned flags)
{
  int fd = bound_socket(a, SOCK_STREAM, flags);
  if (fd < 0)
    return fd;
  if (listen(fd, backlog <= 0 ? SOMAXCONN : backlog) < 0) {
    int e = -errno;
    char path[sizeof a->u.un.sun_path + 1];
    if (unix_path(a, path))
      unlink(path); /* the file our bind just made */
    tdl__sys_close(fd);
    return e;
  }
  reserve_ensure();
  return fd;
}

int tdl_net_accept(int lfd, tdl_addr *peer, tdl_time_t deadline)
{
  if (peer)
    peer->len = 0;
  if (!tdl_fiber_self())
    return -EPERM;
  reserve_ensure();
  for (;;) {
    socklen_t len = sizeof peer->u;
    int fd = tdl__fd_accept(lfd, peer ? &peer->u.sa : NULL, peer ? &len : NULL, deadline);
    if (fd >= 0) {
      if (peer)
        peer->len = len;
      t_backoff.next = BACKOFF_MIN;
      return fd;
    }
    switch (-fd) {
    /* The pending connection failed before we took it (accept(2) passes
     * such network errors on); it is gone from the queue: wait for the next. */
    case ECONNABORTED:
    case EPROTO:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case ENETUNREACH:
      continue;
    case EMFILE:
    case ENFILE:
      atomic_fetch_add_explicit(&g_exhausted, 1, memory_order_relaxed);
      shed(lfd);
      /* fall through */
    case ENOBUFS:
    case ENOMEM: {
      int e = backoff(deadline);
      return e < 0 ? e : fd;
    }
    default:
      return fd;
    }
  }
}

/* A TCP connection to a loopback port nobody listens on can end up connected
 * to itself (simultaneous open with its own SYN): local address == remote. */
static bool self_connected(int fd, const tdl_addr *to)
{
  tdl_addr local;
  return tdl_net_local_addr(fd, &local) == 0 && tdl_addr_equal(&local, to);
}

int tdl_net_connect(const tdl_addr *a, tdl_time_t deadline)
{
  tdl__fiber *f;
  int fam, e = tdl__may_block(&f);
  if (e < 0)
    return e;
  if ((e = check_addr(a, &fam)) < 0)
    return e;
  tdl_loop *loop = f->sched->loop;
  int fd = TDL__FAULT_SYS(EMFILE, socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd < 0)
    return -errno;
  tdl__backoff pause = {TDL_MSEC, 50 * TDL_MSEC};
  for (;;) {
    e = tdl__fd_connect(fd, &a->u.sa, a->len, deadline);
    if (e != -EAGAIN || fam != AF_UNIX)
      break;
    /* A Unix listener with a full backlog: the kernel will not queue a
     * non-blocking connect, and nothing signals room; poll with back-off. */
    if (deadline != TDL_FOREVER && loop->now >= deadline) {
      e = -ETIMEDOUT;
      break;
    }
    if ((e = tdl_sleep(tdl__deadline_min(deadline, tdl_after(tdl__backoff_step(&pause))))) < 0)
      break;
  }
  if (e == 0 && fam != AF_UNIX && self_connected(fd, a))
    e = -ECONNREFUSED;
  if (e < 0) {
    tdl_close(fd);
    return e;
  }
  return fd;
}

/* ---- listen and connect from a string ---- */

/* The addresses a string stands for, in the order to try them: a literal is
 * itself; "localhost" (and, for connecting, the wildcard: the local host, as
 * the kernel reads a connect to 0.0.0.0) is 127.0.0.1 then ::1; the wildcard
 * for listening is [::] then 0.0.0.0.  Returns their count or -EINVAL. */
static int candidates(const char *s, bool listening, tdl_addr c[2])
{
  int kind, e = tdl__addr_parse_kind(&c[0], s, &kind);
  if (e < 0 || kind == TDL__HOST_LITERAL)
    return e < 0 ? e : 1;
  int port = tdl_addr_port(&c[0]);
  bool any = kind == TDL__HOST_WILDCARD && listening;
  tdl__addr_ip(&c[0], any ? AF_INET6 : AF_INET, !any, port);
  tdl__addr_ip(&c[1], any ? AF_INET : AF_INET6, !any, port);
  return 2;
}

/* Errors that say "this family is not here" (no IPv6, no IPv4 loopback):
 * the next candidate may still work, and its error says more. */
static bool family_missing(int e)
{
  return e == -EAFNOSUPPORT || e == -EADDRNOTAVAIL || e == -ENETUNREACH;
}

int tdl_net_listen_str(const char *s, int backlog, unsigned flags)
{
  tdl_addr c[2];
  int n = candidates(s, true, c), fd = n;
  for (int i = 0; i < n; i++)
    if ((fd = tdl_net_listen(&c[i], backlog, flags)) >= 0 || !family_missing(fd))
      break;
  return fd;
}

int tdl__net_dial_literal(const char *s, tdl_time_t deadline)
{
  int e = tdl__may_block(NULL);
  if (e < 0)
    return e;
  tdl_addr c[2];
  int n = candidates(s, false, c), first = n;
  for (int i = 0; i < n; i++) {
    int fd = tdl_net_connect(&c[i], deadline);
    if (fd >= 0 || fd == -ETIMEDOUT || fd == -ECANCELED)
      return fd; /* the deadline covers every candidate: none after it */
    if (i == 0 || family_missing(first))
      first = fd;
  }
  return first;
}

/* getsockname or getpeername into *out. */
static int socket_name(int fd, tdl_addr *out, int (*get)(int, struct sockaddr *, socklen_t *))
{
  if (!out)
    return -EINVAL;
  memset(out, 0, sizeof *out);
  socklen_t len = sizeof out->u;
  if (get(fd, &out->u.sa, &len) < 0)
    return -errno;
  out->len = len > sizeof out->u ? (socklen_t)sizeof out->u : len;
  return 0;
}

int tdl_net_local_addr(int fd, tdl_addr *out) { return socket_name(fd, out, getsockname); }

int tdl_net_peer_addr(int fd, tdl_addr *out) { return socket_name(fd, out, getpeername); }

/* ---- datagrams ---- */

int tdl_net_udp_bind(const tdl_addr *a, unsigned flags) { return bound_socket(a, SOCK_DGRAM, flags); }

ssize_t tdl_net_udp_send(int fd, const void *buf, size_t len, const tdl_addr *to, tdl_time_t deadline)
{
  if (to && (to->len == 0 || to->len > sizeof to->u))
    return -EINVAL;
  return tdl_sendto(fd, buf, len, 0, to ? &to->u.sa : NULL, to ? to->len : 0, deadline);
}

ssize_t tdl_net_udp_recv(int fd, void *buf, size_t len, tdl_addr *from, tdl_time_t deadline)
{
  socklen_t alen = sizeof from->u;
  if (from)
    memset(from, 0, sizeof *from);
  /* MSG_TRUNC: the datagram's real length, so that a cut one is reported. */
  ssize_t n = tdl_recvfrom(fd, buf, len, MSG_TRUNC, from ? &from->u.sa : NULL, from ? &alen : NULL, deadline);
  if (n < 0)
    return n;
  if (from)
    from->len = alen > sizeof from->u ? (socklen_t)sizeof from->u : alen;
  return (size_t)n > len ? -EMSGSIZE : n;
}

/* ---- shutdown and options ---- */

int tdl_net_shutdown(int fd, int how)
{
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
    return -EINVAL;
  /* The end of the stream goes after what was sent behind (fiber.h),
   * which its own deadlines bound. */
  if (how != SHUT_RD) {
    int e = tdl_fd_flush(fd, TDL_FOREVER);
    if (e < 0 && e != -EPERM) /* (-EPERM: not in a fiber, so nothing behind) */
      return e;
  }
  return shutdown(fd, how) < 0 ? -errno : 0;
}

int tdl_net_nodelay(int fd, bool on) { return setopt(fd, IPPROTO_TCP, TCP_NODELAY, on); }

int tdl_net_quickack(int fd, bool on) { return setopt(fd, IPPROTO_TCP, TCP_QUICKACK, on); }

int tdl_net_keepalive(int fd, bool on, int idle_s, int interval_s, int count)
{
  if (!on)
    return setopt(fd, SOL_SOCKET, SO_KEEPALIVE, 0);
  if (idle_s < 0 || interval_s < 0 || count < 0)
    return -EINVAL;
  /* Only TCP has the knobs; ask before switching anything on (SO_KEEPALIVE
   * alone would be accepted by any socket). */
  int v, e;
  socklen_t vl = sizeof v;
  if (getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &vl) < 0)
    return -errno;
  if (idle_s && (e = setopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, idle_s)) < 0)
    return e;
  if (interval_s && (e = setopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, interval_s)) < 0)
    return e;
  if (count && (e = setopt(fd, IPPROTO_TCP, TCP_KEEPCNT, count)) < 0)
    return e;
  return setopt(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
}
