/* SPDX-License-Identifier: MIT */
/* Sockets for fibers: listen, accept and connect with deadlines (from
 * addresses and from strings), whole-buffer transfers, UDP, Unix and
 * abstract sockets, IPv6 loopback, a peer that vanishes mid-send,
 * cancellation, options.  Loopback only; every wait is bounded.  Address
 * parsing is tested in test_addr.c, the reader and writer in
 * test_buffered.c. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

#define LONG_WAIT T_HANG /* for what must happen: a bound, not a delay */

/* Run fn as a fiber of L until the loop has nothing left; fn returns NULL on
 * success (assertions fail the test before). */
static void run_fiber(tdl_fiber_fn fn, void *arg)
{
  go(fn, arg);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static tdl_time_t soon(tdl_time_t delay) { return tdl_after(delay); }
static tdl_time_t now_ns(void)
{
  tdl_loop_update_time(tdl_fiber_loop());
  return tdl_now();
}

static tdl_addr parse(const char *s)
{
  tdl_addr a;
  assert_int_equal(tdl_addr_parse(&a, s), 0);
  return a;
}

/* A listener on s; its bound address (real port) in *bound. */
static int listen_on(const char *s, unsigned flags, tdl_addr *bound)
{
  tdl_addr a = parse(s);
  int fd = tdl_net_listen(&a, 64, flags);
  assert_true(fd >= 0);
  if (bound)
    assert_int_equal(tdl_net_local_addr(fd, bound), 0);
  return fd;
}

/* In a fiber: a connected pair (client c, server s) through listener lfd. */
static void pair(int lfd, const tdl_addr *to, int *c, int *s)
{
  *c = tdl_net_connect(to, soon(LONG_WAIT));
  assert_true(*c >= 0);
  *s = tdl_net_accept(lfd, NULL, soon(LONG_WAIT));
  assert_true(*s >= 0);
}

static void fmt_is(const tdl_addr *a, const char *want)
{
  char buf[TDL_ADDR_STRLEN];
  int n = tdl_addr_format(a, buf, sizeof buf);
  assert_int_equal(n, (int)strlen(want));
  assert_string_equal(buf, want);
}

static int getint(int fd, int level, int name)
{
  int v = -1;
  socklen_t l = sizeof v;
  assert_int_equal(getsockopt(fd, level, name, &v, &l), 0);
  return v;
}

/* ------------------------------------------------------------------------ */
/* Listen, accept, connect                                                   */
/* ------------------------------------------------------------------------ */

static void listen_errors(void **state)
{
  (void)state;
  tdl_addr a = parse("127.0.0.1:0"), empty = {0};
  assert_int_equal(tdl_net_listen(NULL, 0, 0), -EINVAL);
  assert_int_equal(tdl_net_listen(&empty, 0, 0), -EINVAL);
  assert_int_equal(tdl_net_listen(&a, 0, 0x100), -EINVAL);
  tdl_addr odd = {0};
  odd.u.sa.sa_family = AF_APPLETALK;
  odd.len = sizeof odd.u.ss;
  assert_int_equal(tdl_net_listen(&odd, 0, 0), -EAFNOSUPPORT);
  assert_int_equal(tdl_net_udp_bind(&odd, 0), -EAFNOSUPPORT);
  /* Shorter than its family's address, longer than any, or a Unix address
   * with no name: refused before a socket is made. */
  const struct {
    sa_family_t family;
    socklen_t len;
  } bad[] = {
      {AF_INET, sizeof(struct sockaddr_in) - 1},      {AF_INET6, sizeof(struct sockaddr_in6) - 1},
      {AF_UNIX, offsetof(struct sockaddr_un, sun_path)}, {AF_INET, sizeof odd.u + 1},
      {AF_INET, 1},
  };
  int fds = t_count_fds();
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tdl_addr b = {0};
    b.u.sa.sa_family = bad[i].family;
    b.len = bad[i].len;
    assert_int_equal(tdl_net_listen(&b, 0, 0), -EINVAL);
    assert_int_equal(tdl_net_udp_bind(&b, 0), -EINVAL);
  }
  assert_int_equal(t_count_fds(), fds);

  /* Port in use; SO_REUSEPORT lets two listeners share one. */
  tdl_addr bound;
  int l1 = listen_on("127.0.0.1:0", 0, &bound);
  int before = t_count_fds();
  assert_int_equal(tdl_net_listen(&bound, 0, 0), -EADDRINUSE);
  assert_int_equal(t_count_fds(), before); /* nothing left open */
  assert_int_equal(tdl_close(l1), 0);
  int r1 = listen_on("127.0.0.1:0", TDL_NET_REUSEPORT, &bound);
  int r2 = tdl_net_listen(&bound, 0, TDL_NET_REUSEPORT | TDL_NET_UNLINK /* ignored for IP */);
  assert_true(r2 >= 0);
  /* Non-blocking, close-on-exec. */
  assert_true(fcntl(r2, F_GETFL) & O_NONBLOCK);
  assert_true(fcntl(r2, F_GETFD) & FD_CLOEXEC);
  assert_int_equal(tdl_close(r1), 0);
  assert_int_equal(tdl_close(r2), 0);
}

typedef struct echo_ctx {
  const char *where;
  tdl_addr to;
  int lfd;
  int served;
} echo_ctx;

static void *echo_server(void *arg)
{
  echo_ctx *e = arg;
  tdl_addr peer;
  int s = tdl_net_accept(e->lfd, &peer, soon(LONG_WAIT));
  assert_true(s >= 0);
  assert_true(fcntl(s, F_GETFL) & O_NONBLOCK);
  assert_true(fcntl(s, F_GETFD) & FD_CLOEXEC);
  /* The peer's address is the client's local one. */
  tdl_addr theirs;
  assert_int_equal(tdl_net_peer_addr(s, &theirs), 0);
  if (peer.u.sa.sa_family != AF_UNIX)
    assert_true(tdl_addr_equal(&peer, &theirs));
  char buf[5];
  assert_int_equal(tdl_net_recv_exactly(s, buf, 5, NULL, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_net_send_all(s, buf, 5, NULL, soon(LONG_WAIT)), 0);
  e->served = 1;
  assert_int_equal(tdl_close(s), 0);
  return NULL;
}

static void *echo_client(void *arg)
{
  echo_ctx *e = arg;
  go(echo_server, e);
  int c = tdl_net_connect(&e->to, soon(LONG_WAIT));
  assert_true(c >= 0);
  assert_true(fcntl(c, F_GETFL) & O_NONBLOCK);
  assert_true(fcntl(c, F_GETFD) & FD_CLOEXEC);
  size_t sent = 99;
  assert_int_equal(tdl_net_send_all(c, "hello", 5, &sent, soon(LONG_WAIT)), 0);
  assert_int_equal(sent, 5);
  char buf[5];
  size_t got = 99;
  assert_int_equal(tdl_net_recv_exactly(c, buf, 5, &got, soon(LONG_WAIT)), 0);
  assert_int_equal(got, 5);
  assert_memory_equal(buf, "hello", 5);
  assert_int_equal(tdl_close(c), 0);
  return NULL;
}

static void echo_over(const char *where)
{
  echo_ctx e = {.where = where};
  e.lfd = listen_on(where, 0, &e.to);
  run_fiber(echo_client, &e);
  assert_int_equal(e.served, 1);
  assert_int_equal(tdl_close(e.lfd), 0);
}

static void tcp_ipv4_echo(void **state)
{
  (void)state;
  echo_over("127.0.0.1:0");
}

static void tcp_ipv6_loopback_echo(void **state)
{
  (void)state;
  tdl_addr a = parse("[::1]:0");
  int fd = tdl_net_listen(&a, 0, TDL_NET_V6ONLY);
  if (fd == -EAFNOSUPPORT || fd == -EADDRNOTAVAIL)
    T_SKIP("no IPv6 loopback here");
  assert_true(fd >= 0);
  int v = 0;
  socklen_t vl = sizeof v;
  assert_int_equal(getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v, &vl), 0);
  assert_int_equal(v, 1);
  tdl_close(fd);
  echo_over("[::1]:0");
}

static char tmpdir[64];

static void make_tmpdir(void)
{
  snprintf(tmpdir, sizeof tmpdir, "/tmp/treadle-net-XXXXXX");
  assert_non_null(mkdtemp(tmpdir));
}

static void unix_path_socket(void **state)
{
  (void)state;
  make_tmpdir();
  char where[160], path[128];
  snprintf(path, sizeof path, "%s/s", tmpdir);
  snprintf(where, sizeof where, "unix:%s", path);
  echo_ctx e = {.where = where};
  e.lfd = listen_on(where, 0, &e.to);
  fmt_is(&e.to, where);
  run_fiber(echo_client, &e);
  assert_int_equal(e.served, 1);

  tdl_addr a = parse(where);
  /* A live listener's path is never taken over, with or without the flag. */
  assert_int_equal(tdl_net_listen(&a, 0, 0), -EADDRINUSE);
  assert_int_equal(tdl_net_listen(&a, 0, TDL_NET_UNLINK), -EADDRINUSE);
  assert_int_equal(tdl_close(e.lfd), 0);
  /* The file stays after close: still refused without the flag... */
  struct stat st;
  assert_int_equal(lstat(path, &st), 0);
  assert_int_equal(tdl_net_listen(&a, 0, 0), -EADDRINUSE);
  /* ...and replaced with it, since nobody listens there. */
  int fd = tdl_net_listen(&a, 0, TDL_NET_UNLINK);
  assert_true(fd >= 0);
  assert_int_equal(tdl_close(fd), 0);
  assert_int_equal(unlink(path), 0);

  /* A file that is not a socket is never removed. */
  int f = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  assert_true(f >= 0);
  close(f);
  assert_int_equal(tdl_net_listen(&a, 0, TDL_NET_UNLINK), -EADDRINUSE);
  assert_int_equal(lstat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  unlink(path);
  rmdir(tmpdir);
}

static void unix_abstract_socket(void **state)
{
  (void)state;
  char where[64];
  snprintf(where, sizeof where, "unix:@treadle-net-test-%d", (int)getpid());
  echo_ctx e = {.where = where};
  e.lfd = listen_on(where, 0, &e.to);
  fmt_is(&e.to, where);
  tdl_addr a = parse(where);
  assert_int_equal(tdl_net_listen(&a, 0, TDL_NET_UNLINK), -EADDRINUSE);
  run_fiber(echo_client, &e);
  assert_int_equal(e.served, 1);
  assert_int_equal(tdl_close(e.lfd), 0);
  /* The name went with the socket. */
  int fd = tdl_net_listen(&a, 0, 0);
  assert_true(fd >= 0);
  tdl_close(fd);
}

/* 127.0.0.1 at a port that refuses, held in held[] (t_refusing_port). */
static tdl_addr refusing_addr(int held[2])
{
  tdl_addr a = parse("127.0.0.1:0");
  a.u.in4.sin_port = htons((uint16_t)t_refusing_port(held));
  return a;
}

static void *refused_body(void *arg)
{
  (void)arg;
  int before = t_count_fds();
  int held[2];
  tdl_addr a = refusing_addr(held);
  assert_int_equal(tdl_net_connect(&a, soon(LONG_WAIT)), -ECONNREFUSED);
  t_port_release(held);
  /* No such Unix path; a stale socket file; bad addresses. */
  tdl_addr u = parse("unix:/nonexistent/treadle/sock");
  assert_int_equal(tdl_net_connect(&u, soon(LONG_WAIT)), -ENOENT);
  char where[128];
  make_tmpdir();
  snprintf(where, sizeof where, "unix:%s/stale", tmpdir);
  u = parse(where);
  int l = tdl_net_listen(&u, 0, 0);
  assert_true(l >= 0);
  tdl_close(l);
  assert_int_equal(tdl_net_connect(&u, soon(LONG_WAIT)), -ECONNREFUSED);
  unlink(u.u.un.sun_path);
  rmdir(tmpdir);
  tdl_addr empty = {0};
  assert_int_equal(tdl_net_connect(&empty, soon(LONG_WAIT)), -EINVAL);
  assert_int_equal(tdl_net_connect(NULL, soon(LONG_WAIT)), -EINVAL);
  assert_int_equal(t_count_fds(), before);
  return NULL;
}

static void connect_refused(void **state)
{
  (void)state;
  run_fiber(refused_body, NULL);
}

/* A raw listener with backlog 0: the kernel queues one connection, then
 * drops SYNs (TCP) or refuses with EAGAIN (Unix). */
static int full_listener(const char *where, tdl_addr *bound)
{
  tdl_addr a = parse(where);
  int fd = socket(a.u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  assert_int_equal(bind(fd, &a.u.sa, a.len), 0);
  assert_int_equal(listen(fd, 0), 0);
  assert_int_equal(tdl_net_local_addr(fd, bound), 0);
  return fd;
}

/* ---- listen and connect from strings ---- */

/* "HOST:port" for a port. */
static const char *at_port(char *buf, size_t cap, const char *host, int port)
{
  snprintf(buf, cap, "%s:%d", host, port);
  return buf;
}

static bool have_ipv6(void)
{
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

/* Connect to `to` (a string), accept on lfd; the accepted side's local
 * address goes to *local when not NULL. */
static void connect_str_and_accept(int lfd, const char *to, tdl_addr *local)
{
  int c = tdl_dns_dial(to, soon(LONG_WAIT));
  if (c < 0)
    fail_msg("connect to %s: %s", to, tdl_strerror(c));
  int s = tdl_net_accept(lfd, NULL, soon(LONG_WAIT));
  assert_true(s >= 0);
  if (local)
    assert_int_equal(tdl_net_local_addr(s, local), 0);
  tdl_close(c);
  tdl_close(s);
}

static void *strings_body(void *arg)
{
  (void)arg;
  char to[64];
  tdl_addr a;
  int before = t_count_fds();
  /* localhost: 127.0.0.1, both ways. */
  int lfd = tdl_net_listen_str("localhost:0", 0, 0);
  assert_true(lfd >= 0);
  assert_int_equal(tdl_net_local_addr(lfd, &a), 0);
  fmt_is(&a, at_port(to, sizeof to, "127.0.0.1", tdl_addr_port(&a)));
  connect_str_and_accept(lfd, at_port(to, sizeof to, "localhost", tdl_addr_port(&a)), NULL);
  tdl_close(lfd);

  /* The wildcard: one socket for both families (when there is IPv6). */
  lfd = tdl_net_listen_str("*:0", 0, 0);
  assert_true(lfd >= 0);
  assert_int_equal(tdl_net_local_addr(lfd, &a), 0);
  int port = tdl_addr_port(&a);
  const char *hosts[] = {"127.0.0.1", "*", "", "localhost", "[::1]"};
  int nhosts = 4;
  if (have_ipv6()) {
    assert_int_equal(a.u.sa.sa_family, AF_INET6);
    assert_int_equal(getint(lfd, IPPROTO_IPV6, IPV6_V6ONLY), 0);
    nhosts = 5;
  } else {
    assert_int_equal(a.u.sa.sa_family, AF_INET);
  }
  for (int i = 0; i < nhosts; i++)
    connect_str_and_accept(lfd, at_port(to, sizeof to, hosts[i], port), NULL);
  tdl_close(lfd);

  /* A literal is exactly that address. */
  lfd = tdl_net_listen_str("0.0.0.0:0", 0, 0);
  assert_true(lfd >= 0);
  assert_int_equal(tdl_net_local_addr(lfd, &a), 0);
  assert_int_equal(a.u.sa.sa_family, AF_INET);
  tdl_close(lfd);

  /* Unix names go through too. */
  char where[64];
  snprintf(where, sizeof where, "unix:@treadle-net-str-%d", (int)getpid());
  lfd = tdl_net_listen_str(where, 0, 0);
  assert_true(lfd >= 0);
  connect_str_and_accept(lfd, where, NULL);
  tdl_close(lfd);

  /* Nobody there: refused, on both loopbacks. */
  int held[2];
  at_port(to, sizeof to, "localhost", t_refusing_port(held));
  assert_int_equal(tdl_dns_dial(to, soon(LONG_WAIT)), -ECONNREFUSED);
  t_port_release(held);

  /* Bad strings: -EINVAL, nothing opened. */
  const char *badstr[] = {"", ":", "host:1", ":99999", "[::1", "1.2.3:80", "1.2.3.4:80 ", "example.com:80"};
  for (size_t i = 0; i < sizeof badstr / sizeof *badstr; i++)
    assert_int_equal(tdl_net_listen_str(badstr[i], 0, 0), -EINVAL);
  /* Dialling takes host names too (they are dns.h's): only what is no
   * host and port at all is refused at once. */
  const char *baddial[] = {"", ":", ":99999", "[::1", "1.2.3:80", "1.2.3.4:80 "};
  for (size_t i = 0; i < sizeof baddial / sizeof *baddial; i++)
    assert_int_equal(tdl_dns_dial(baddial[i], soon(LONG_WAIT)), -EINVAL);
  assert_int_equal(tdl_net_listen_str(NULL, 0, 0), -EINVAL);
  assert_int_equal(tdl_dns_dial(NULL, soon(LONG_WAIT)), -EINVAL);
  assert_int_equal(tdl_net_listen_str("localhost:0", 0, 0x100), -EINVAL); /* flags */
  assert_int_equal(t_count_fds(), before);
  return NULL;
}

static void listen_and_connect_strings(void **state)
{
  (void)state;
  run_fiber(strings_body, NULL);
}

/* "localhost" when the server is on ::1 only: 127.0.0.1 is refused, then
 * ::1 answers, under the same deadline. */
static void *localhost_v6_body(void *arg)
{
  (void)arg;
  int lfd = tdl_net_listen_str("[::1]:0", 0, TDL_NET_V6ONLY);
  assert_true(lfd >= 0);
  tdl_addr a, local;
  assert_int_equal(tdl_net_local_addr(lfd, &a), 0);
  char to[64];
  connect_str_and_accept(lfd, at_port(to, sizeof to, "localhost", tdl_addr_port(&a)), &local);
  assert_int_equal(local.u.sa.sa_family, AF_INET6);
  tdl_close(lfd);
  /* With V6ONLY the wildcard takes no IPv4 client.  Its port stays free on
   * 127.0.0.1 for anyone: a test running beside this one may listen there,
   * so hold it refusing (a port taken on IPv4 already: try another). */
  int v4 = -EADDRINUSE;
  for (int tries = 0; v4 == -EADDRINUSE && tries < 100; tries++) {
    lfd = tdl_net_listen_str("*:0", 0, TDL_NET_V6ONLY);
    assert_true(lfd >= 0);
    assert_int_equal(tdl_net_local_addr(lfd, &a), 0);
    v4 = t_hold_port(AF_INET, tdl_addr_port(&a));
    if (v4 < 0)
      tdl_close(lfd);
  }
  assert_true(v4 >= 0);
  assert_int_equal(getint(lfd, IPPROTO_IPV6, IPV6_V6ONLY), 1);
  at_port(to, sizeof to, "127.0.0.1", tdl_addr_port(&a));
  assert_int_equal(tdl_dns_dial(to, soon(LONG_WAIT)), -ECONNREFUSED);
  at_port(to, sizeof to, "*", tdl_addr_port(&a));
  connect_str_and_accept(lfd, to, &local); /* 127.0.0.1 refused, ::1 taken */
  assert_int_equal(local.u.sa.sa_family, AF_INET6);
  close(v4);
  tdl_close(lfd);
  return NULL;
}

static void connect_str_localhost_falls_to_ipv6(void **state)
{
  (void)state;
  if (!have_ipv6())
    T_SKIP("no IPv6 loopback here");
  run_fiber(localhost_v6_body, NULL);
}

/* A deadline that passes on 127.0.0.1 ends the call: ::1 is not tried. */
static void *str_timeout_body(void *arg)
{
  const tdl_addr *full = arg;
  char to[64];
  at_port(to, sizeof to, "localhost", tdl_addr_port(full));
  int fds[8], n = 0, e = 0;
  while (n < 8 && (e = tdl_dns_dial(to, soon(100 * TDL_MSEC))) >= 0)
    fds[n++] = e;
  assert_int_equal(e, -ETIMEDOUT);
  for (int i = 0; i < n; i++)
    tdl_close(fds[i]);
  return NULL;
}

static void connect_str_timeout(void **state)
{
  (void)state;
  tdl_addr full;
  int raw = full_listener("127.0.0.1:0", &full);
  run_fiber(str_timeout_body, &full);
  close(raw);
}

typedef struct timeout_ctx {
  const char *where;
  int fill[8];
  int nfill;
  int lfd;
  tdl_addr to;
} timeout_ctx;

/* Connect with short deadlines until one times out; returns its result. */
static void *timeout_body(void *arg)
{
  timeout_ctx *t = arg;
  int e = 0;
  while (t->nfill < 8) {
    int before = t_count_fds();
    tdl_time_t t0 = now_ns();
    e = tdl_net_connect(&t->to, soon(150 * TDL_MSEC));
    if (e >= 0) {
      t->fill[t->nfill++] = e;
      continue;
    }
    assert_int_equal(e, -ETIMEDOUT);
    assert_true(now_ns() - t0 >= 140 * TDL_MSEC);
    assert_true(now_ns() - t0 < 2 * TDL_SEC);
    assert_int_equal(t_count_fds(), before); /* -ETIMEDOUT leaves nothing open */
    break;
  }
  assert_int_equal(e, -ETIMEDOUT);
  assert_true(t->nfill >= 1);
  for (int i = 0; i < t->nfill; i++)
    tdl_close(t->fill[i]);
  return NULL;
}

static void connect_timeout(const char *where)
{
  timeout_ctx t = {.where = where};
  t.lfd = full_listener(where, &t.to);
  run_fiber(timeout_body, &t);
  close(t.lfd);
}

static void connect_timeout_tcp_full_backlog(void **state)
{
  (void)state;
  connect_timeout("127.0.0.1:0");
}

static void connect_timeout_unix_full_backlog(void **state)
{
  (void)state;
  char where[64];
  snprintf(where, sizeof where, "unix:@treadle-net-full-%d", (int)getpid());
  connect_timeout(where);
}

typedef struct conn_ctx {
  int lfd;
  tdl_addr to;
  int c, s;
} conn_ctx;

static void *accept_deadline_body(void *arg)
{
  conn_ctx *k = arg;
  const tdl_addr *to = &k->to;
  int lfd = k->lfd;
  tdl_time_t t0 = now_ns();
  tdl_addr peer;
  assert_int_equal(tdl_net_accept(lfd, &peer, soon(50 * TDL_MSEC)), -ETIMEDOUT);
  assert_int_equal(peer.len, 0);
  assert_true(now_ns() - t0 >= 45 * TDL_MSEC);
  /* A deadline already past still takes a connection that is waiting. */
  int c = tdl_net_connect(to, soon(LONG_WAIT));
  assert_true(c >= 0);
  int s = tdl_net_accept(lfd, &peer, 0);
  assert_true(s >= 0);
  assert_true(peer.len > 0);
  assert_int_equal(tdl_net_accept(lfd, NULL, 0), -ETIMEDOUT);
  tdl_close(c);
  tdl_close(s);
  /* Not a listener. */
  int p[2];
  t_pipe(p);
  assert_int_equal(tdl_net_accept(p[0], NULL, 0), -ENOTSOCK);
  assert_int_equal(tdl_net_accept(-1, NULL, 0), -EBADF);
  tdl_close(p[0]);
  tdl_close(p[1]);
  return NULL;
}

static void accept_with_deadline(void **state)
{
  (void)state;
  conn_ctx k;
  k.lfd = listen_on("127.0.0.1:0", 0, &k.to);
  run_fiber(accept_deadline_body, &k);
  tdl_close(k.lfd);
}

/* ------------------------------------------------------------------------ */
/* Whole-buffer transfers                                                    */
/* ------------------------------------------------------------------------ */

static void *early_eof_body(void *arg)
{
  conn_ctx *k = arg;
  pair(k->lfd, &k->to, &k->c, &k->s);
  assert_int_equal(tdl_net_send_all(k->s, "12345", 5, NULL, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_close(k->s), 0);
  char buf[10];
  size_t got = 99;
  assert_int_equal(tdl_net_recv_exactly(k->c, buf, 10, &got, soon(LONG_WAIT)), -EPIPE);
  assert_int_equal(got, 5);
  assert_memory_equal(buf, "12345", 5);
  /* A close between messages: -EPIPE with nothing read. */
  got = 99;
  assert_int_equal(tdl_net_recv_exactly(k->c, buf, 1, &got, soon(LONG_WAIT)), -EPIPE);
  assert_int_equal(got, 0);
  assert_int_equal(tdl_net_recv_exactly(k->c, NULL, 1, &got, soon(LONG_WAIT)), -EINVAL);
  assert_int_equal(tdl_net_recv_exactly(k->c, buf, 0, &got, soon(LONG_WAIT)), 0);
  tdl_close(k->c);

  /* A reset instead of an orderly close. */
  pair(k->lfd, &k->to, &k->c, &k->s);
  assert_int_equal(tdl_net_send_all(k->s, "abc", 3, NULL, soon(LONG_WAIT)), 0);
  struct linger lg = {1, 0};
  assert_int_equal(setsockopt(k->s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  tdl_close(k->s);
  got = 99;
  int e = tdl_net_recv_exactly(k->c, buf, 10, &got, soon(LONG_WAIT));
  assert_int_equal(e, -ECONNRESET);
  assert_true(got <= 3);
  tdl_close(k->c);
  return NULL;
}

static void recv_exactly_early_eof(void **state)
{
  (void)state;
  conn_ctx k;
  k.lfd = listen_on("127.0.0.1:0", 0, &k.to);
  run_fiber(early_eof_body, &k);
  tdl_close(k.lfd);
}

static void *dribble(void *arg)
{
  /* Send "ab\r", pause, "\nrest", pause, close. */
  conn_ctx *k = arg;
  assert_int_equal(tdl_net_send_all(k->s, "ab\r", 3, NULL, soon(LONG_WAIT)), 0);
  tdl_sleep(tdl_after(20 * TDL_MSEC));
  assert_int_equal(tdl_net_send_all(k->s, "\nrest", 5, NULL, soon(LONG_WAIT)), 0);
  tdl_sleep(tdl_after(20 * TDL_MSEC));
  tdl_net_shutdown(k->s, SHUT_WR);
  return NULL;
}

static void *recv_until_body(void *arg)
{
  conn_ctx *k = arg;
  pair(k->lfd, &k->to, &k->c, &k->s);
  go(dribble, k);
  char buf[64];
  size_t got = 99;
  /* The delimiter arrives split across two segments. */
  assert_int_equal(tdl_net_recv_until(k->c, buf, sizeof buf, "\r\n", 2, &got, soon(LONG_WAIT)), 4);
  assert_int_equal(got, 4);
  assert_memory_equal(buf, "ab\r\n", 4);
  /* Nothing past the delimiter was taken: "rest" is still in the socket. */
  char rest[4];
  assert_int_equal(tdl_net_recv_exactly(k->c, rest, 4, NULL, soon(LONG_WAIT)), 0);
  assert_memory_equal(rest, "rest", 4);
  /* The end between messages: 0, nothing stored. */
  assert_int_equal(tdl_net_recv_until(k->c, buf, sizeof buf, "\r\n", 2, &got, soon(LONG_WAIT)), 0);
  assert_int_equal(got, 0);
  tdl_close(k->c);
  tdl_close(k->s);

  /* The end inside a message: -EPIPE, what came is stored. */
  pair(k->lfd, &k->to, &k->c, &k->s);
  assert_int_equal(tdl_net_send_all(k->s, "half", 4, NULL, soon(LONG_WAIT)), 0);
  tdl_net_shutdown(k->s, SHUT_WR);
  assert_int_equal(tdl_net_recv_until(k->c, buf, sizeof buf, "\r\n", 2, &got, soon(LONG_WAIT)), -EPIPE);
  assert_int_equal(got, 4);
  assert_memory_equal(buf, "half", 4);
  tdl_close(k->c);
  tdl_close(k->s);

  /* The limit: cap bytes without the delimiter. */
  pair(k->lfd, &k->to, &k->c, &k->s);
  assert_int_equal(tdl_net_send_all(k->s, "0123456789\r\n", 12, NULL, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_net_recv_until(k->c, buf, 8, "\r\n", 2, &got, soon(LONG_WAIT)), -EMSGSIZE);
  assert_int_equal(got, 8);
  assert_memory_equal(buf, "01234567", 8);
  /* The rest is where it was; a delimiter ending exactly at cap fits. */
  assert_int_equal(tdl_net_recv_until(k->c, buf, 4, "\r\n", 2, &got, soon(LONG_WAIT)), 4);
  assert_memory_equal(buf, "89\r\n", 4);
  /* Bad arguments. */
  assert_int_equal(tdl_net_recv_until(k->c, buf, 4, NULL, 2, &got, 0), -EINVAL);
  assert_int_equal(tdl_net_recv_until(k->c, buf, 4, "x", 0, &got, 0), -EINVAL);
  assert_int_equal(tdl_net_recv_until(k->c, NULL, 4, "x", 1, &got, 0), -EINVAL);
  /* Nothing comes before the deadline. */
  assert_int_equal(tdl_net_recv_until(k->c, buf, 4, "x", 1, &got, soon(10 * TDL_MSEC)), -ETIMEDOUT);
  assert_int_equal(got, 0);
  tdl_close(k->c);
  tdl_close(k->s);
  /* Not a socket. */
  int p[2];
  t_pipe(p);
  assert_int_equal(write(p[1], "x\n", 2), 2);
  assert_int_equal(tdl_net_recv_until(p[0], buf, 4, "\n", 1, &got, soon(LONG_WAIT)), -ENOTSOCK);
  tdl_close(p[0]);
  tdl_close(p[1]);
  return NULL;
}

static void recv_until_delimiter_and_limit(void **state)
{
  (void)state;
  conn_ctx k;
  k.lfd = listen_on("127.0.0.1:0", 0, &k.to);
  run_fiber(recv_until_body, &k);
  tdl_close(k.lfd);
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + (i >> 11)); }

typedef struct bulk_ctx {
  int fd;
  size_t want;
  size_t got;
  int err;
  size_t stop_after; /* reader: close after this much (0: read all) */
  int reset;         /* ...with a reset */
} bulk_ctx;

static void *bulk_reader(void *arg)
{
  bulk_ctx *b = arg;
  static unsigned char buf[65536];
  while (b->got < b->want) {
    size_t n = b->want - b->got < sizeof buf ? b->want - b->got : sizeof buf;
    if (b->stop_after && b->got >= b->stop_after)
      break;
    ssize_t r = tdl_read(b->fd, buf, n, soon(LONG_WAIT));
    if (r <= 0) {
      b->err = r < 0 ? (int)r : -EPIPE;
      break;
    }
    for (ssize_t i = 0; i < r; i++)
      if (buf[i] != pattern(b->got + (size_t)i)) {
        b->err = -EIO;
        return NULL;
      }
    b->got += (size_t)r;
  }
  if (b->reset) {
    struct linger lg = {1, 0};
    setsockopt(b->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  tdl_close(b->fd);
  return NULL;
}

#define BULK (8u << 20)

static unsigned char *bulk_data(void)
{
  unsigned char *d = malloc(BULK);
  assert_non_null(d);
  for (size_t i = 0; i < BULK; i++)
    d[i] = pattern(i);
  return d;
}

static void *sendv_body(void *arg)
{
  conn_ctx *k = arg;
  pair(k->lfd, &k->to, &k->c, &k->s);
  unsigned char *d = bulk_data();
  /* 8 MiB in 100 pieces of varied sizes with empty ones between. */
  struct iovec iov[400];
  int n = 0;
  size_t off = 0;
  for (int i = 0; off < BULK; i++) {
    size_t len = (size_t)(i * 2731 % 160000) + 1;
    if (len > BULK - off)
      len = BULK - off;
    iov[n].iov_base = d + off;
    iov[n++].iov_len = len;
    iov[n].iov_base = NULL;
    iov[n++].iov_len = 0;
    off += len;
    assert_true(n < 398);
  }
  bulk_ctx b = {.fd = k->c, .want = BULK};
  go(bulk_reader, &b);
  size_t sent = 0;
  assert_int_equal(tdl_net_send_allv(k->s, iov, n, &sent, soon(LONG_WAIT)), 0);
  assert_int_equal(sent, BULK);
  tdl_close(k->s);
  while (b.got < b.want && b.err == 0)
    tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(b.err, 0);
  assert_int_equal(b.got, BULK);

  /* Bad lists. */
  assert_int_equal(tdl_net_send_allv(k->s, NULL, 1, &sent, 0), -EINVAL);
  assert_int_equal(tdl_net_send_allv(k->s, iov, -1, &sent, 0), -EINVAL);
  struct iovec bad[2] = {{d, SIZE_MAX}, {d, 2}};
  assert_int_equal(tdl_net_send_allv(k->s, bad, 2, &sent, 0), -EINVAL);
  struct iovec nul = {NULL, 3};
  assert_int_equal(tdl_net_send_allv(k->s, &nul, 1, &sent, 0), -EINVAL);
  assert_int_equal(sent, 0);
  free(d);
  return NULL;
}

static void send_allv_gathers(void **state)
{
  (void)state;
  conn_ctx k;
  k.lfd = listen_on("127.0.0.1:0", 0, &k.to);
  run_fiber(sendv_body, &k);
  tdl_close(k.lfd);
}

typedef struct vanish_ctx {
  const char *where;
  int use_v;
} vanish_ctx;

static void *vanish_body(void *arg)
{
  vanish_ctx *v = arg;
  tdl_addr to;
  int lfd = listen_on(v->where, 0, &to);
  int c, s;
  pair(lfd, &to, &c, &s);
  unsigned char *d = bulk_data();
  /* The reader takes 64 KiB, then resets (TCP) or just closes. */
  bulk_ctx b = {.fd = c, .want = BULK, .stop_after = 65536, .reset = 1};
  go(bulk_reader, &b);
  size_t sent = 0, total = 0;
  int e = 0;
  /* The kernel's buffers may take a whole round before the reader gets to
   * run and close: send rounds until the error comes (a bound, not a loop
   * that could run away). */
  for (int round = 0; round < 64 && e == 0; round++) {
    if (v->use_v) {
      struct iovec iov[2] = {{d, BULK / 2}, {d + BULK / 2, BULK / 2}};
      e = tdl_net_send_allv(s, iov, 2, &sent, soon(LONG_WAIT));
    } else {
      e = tdl_net_send_all(s, d, BULK, &sent, soon(LONG_WAIT));
    }
    assert_true(sent <= BULK);
    assert_true(e < 0 || sent == BULK);
    total += sent;
  }
  /* Reported, not a SIGPIPE death. */
  assert_true(e == -EPIPE || e == -ECONNRESET);
  assert_true(total >= 65536);
  /* And again on the dead connection. */
  e = tdl_net_send_all(s, d, 1, &sent, soon(LONG_WAIT));
  assert_true(e == -EPIPE || e == -ECONNRESET);
  assert_int_equal(sent, 0);
  tdl_close(s);
  tdl_close(lfd);
  free(d);
  return NULL;
}

static void peer_vanishes_mid_send(void **state)
{
  (void)state;
  /* SIGPIPE is at its default (kill) here: a write without MSG_NOSIGNAL
   * would end the test binary. */
  struct sigaction sa;
  assert_int_equal(sigaction(SIGPIPE, NULL, &sa), 0);
  assert_ptr_equal(sa.sa_handler, SIG_DFL);
  char where[64];
  snprintf(where, sizeof where, "unix:@treadle-net-vanish-%d", (int)getpid());
  const char *wheres[] = {"127.0.0.1:0", where};
  for (int w = 0; w < 2; w++)
    for (int useV = 0; useV < 2; useV++) {
      vanish_ctx v = {wheres[w], useV};
      run_fiber(vanish_body, &v);
    }
}

/* ------------------------------------------------------------------------ */
/* Datagrams                                                                 */
/* ------------------------------------------------------------------------ */

static void *udp_body(void *arg)
{
  const char *where = arg;
  tdl_addr a = parse(where), aa, ba;
  int x = tdl_net_udp_bind(&a, 0), y = tdl_net_udp_bind(&a, 0);
  if (x == -EAFNOSUPPORT || x == -EADDRNOTAVAIL)
    return (void *)1;
  assert_true(x >= 0);
  if (a.u.sa.sa_family == AF_UNIX) {
    /* Two names: the second bind of one name is refused. */
    assert_int_equal(y, -EADDRINUSE);
    char w2[96];
    snprintf(w2, sizeof w2, "%s-b", where);
    tdl_addr b = parse(w2);
    y = tdl_net_udp_bind(&b, 0);
  }
  assert_true(y >= 0);
  assert_int_equal(tdl_net_local_addr(x, &aa), 0);
  assert_int_equal(tdl_net_local_addr(y, &ba), 0);
  assert_int_equal(tdl_net_udp_send(x, "ping", 4, &ba, soon(LONG_WAIT)), 4);
  char buf[16];
  tdl_addr from;
  assert_int_equal(tdl_net_udp_recv(y, buf, sizeof buf, &from, soon(LONG_WAIT)), 4);
  assert_memory_equal(buf, "ping", 4);
  assert_true(tdl_addr_equal(&from, &aa));
  /* Reply to where it came from. */
  assert_int_equal(tdl_net_udp_send(y, "pong!", 5, &from, soon(LONG_WAIT)), 5);
  assert_int_equal(tdl_net_udp_recv(x, buf, sizeof buf, NULL, soon(LONG_WAIT)), 5);
  assert_memory_equal(buf, "pong!", 5);
  /* A datagram longer than the buffer: cut and reported. */
  assert_int_equal(tdl_net_udp_send(x, "0123456789", 10, &ba, soon(LONG_WAIT)), 10);
  assert_int_equal(tdl_net_udp_recv(y, buf, 4, &from, soon(LONG_WAIT)), -EMSGSIZE);
  assert_memory_equal(buf, "0123", 4);
  /* The rest was dropped with it. */
  assert_int_equal(tdl_net_udp_recv(y, buf, sizeof buf, &from, soon(10 * TDL_MSEC)), -ETIMEDOUT);
  tdl_addr empty = {0};
  assert_int_equal(tdl_net_udp_send(x, "x", 1, &empty, 0), -EINVAL);
  tdl_close(x);
  tdl_close(y);
  return NULL;
}

static void udp_roundtrip(const char *where)
{
  go(udp_body, (void *)where);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void udp_ipv4(void **state)
{
  (void)state;
  udp_roundtrip("127.0.0.1:0");
}

static void udp_ipv6(void **state)
{
  (void)state;
  udp_roundtrip("[::1]:0");
}

static void unix_datagram_abstract(void **state)
{
  (void)state;
  static char where[64];
  snprintf(where, sizeof where, "unix:@treadle-net-dgram-%d", (int)getpid());
  udp_roundtrip(where);
}

/* ------------------------------------------------------------------------ */
/* Shutdown and options                                                      */
/* ------------------------------------------------------------------------ */

static void *shutdown_body(void *arg)
{
  conn_ctx *k = arg;
  pair(k->lfd, &k->to, &k->c, &k->s);
  assert_int_equal(tdl_net_shutdown(k->c, 42), -EINVAL);
  assert_int_equal(tdl_net_send_all(k->c, "req", 3, NULL, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_net_shutdown(k->c, SHUT_WR), 0);
  char buf[8];
  size_t got;
  assert_int_equal(tdl_net_recv_exactly(k->s, buf, 3, &got, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_net_recv_exactly(k->s, buf, 1, &got, soon(LONG_WAIT)), -EPIPE); /* EOF */
  /* The half-closed client still reads. */
  assert_int_equal(tdl_net_send_all(k->s, "resp", 4, NULL, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_net_recv_exactly(k->c, buf, 4, &got, soon(LONG_WAIT)), 0);
  assert_memory_equal(buf, "resp", 4);
  /* Writing after SHUT_WR: EPIPE, no signal. */
  assert_int_equal(tdl_net_send_all(k->c, "x", 1, NULL, soon(LONG_WAIT)), -EPIPE);
  tdl_close(k->c);
  tdl_close(k->s);
  int p[2];
  t_pipe(p);
  assert_int_equal(tdl_net_shutdown(p[0], SHUT_RD), -ENOTSOCK);
  tdl_close(p[0]);
  tdl_close(p[1]);
  return NULL;
}

static void shutdown_half_close(void **state)
{
  (void)state;
  conn_ctx k;
  k.lfd = listen_on("127.0.0.1:0", 0, &k.to);
  run_fiber(shutdown_body, &k);
  tdl_close(k.lfd);
}

static void *options_body(void *arg)
{
  conn_ctx *k = arg;
  pair(k->lfd, &k->to, &k->c, &k->s);
  assert_int_equal(tdl_net_nodelay(k->c, true), 0);
  assert_int_equal(getint(k->c, IPPROTO_TCP, TCP_NODELAY), 1);
  assert_int_equal(tdl_net_nodelay(k->c, false), 0);
  assert_int_equal(getint(k->c, IPPROTO_TCP, TCP_NODELAY), 0);
  assert_int_equal(tdl_net_quickack(k->c, true), 0);
  assert_int_equal(tdl_net_keepalive(k->c, true, 30, 5, 3), 0);
  assert_int_equal(getint(k->c, SOL_SOCKET, SO_KEEPALIVE), 1);
  assert_int_equal(getint(k->c, IPPROTO_TCP, TCP_KEEPIDLE), 30);
  assert_int_equal(getint(k->c, IPPROTO_TCP, TCP_KEEPINTVL), 5);
  assert_int_equal(getint(k->c, IPPROTO_TCP, TCP_KEEPCNT), 3);
  assert_int_equal(tdl_net_keepalive(k->c, false, 0, 0, 0), 0);
  assert_int_equal(getint(k->c, SOL_SOCKET, SO_KEEPALIVE), 0);
  /* Bad values switch nothing on. */
  assert_int_equal(tdl_net_keepalive(k->c, true, -1, 0, 0), -EINVAL);
  assert_int_equal(tdl_net_keepalive(k->c, true, 0, 0, 1 << 20), -EINVAL);
  assert_int_equal(getint(k->c, SOL_SOCKET, SO_KEEPALIVE), 0);
  tdl_close(k->c);
  tdl_close(k->s);

  /* Unix sockets have no TCP options; pipes are not sockets. */
  int sp[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  assert_int_equal(tdl_net_nodelay(sp[0], true), -EOPNOTSUPP);
  assert_int_equal(tdl_net_keepalive(sp[0], true, 0, 0, 0), -EOPNOTSUPP);
  assert_int_equal(getint(sp[0], SOL_SOCKET, SO_KEEPALIVE), 0);
  close(sp[0]);
  close(sp[1]);
  int p[2];
  t_pipe(p);
  assert_int_equal(tdl_net_nodelay(p[0], true), -ENOTSOCK);
  assert_int_equal(tdl_net_quickack(p[0], true), -ENOTSOCK);
  close(p[0]);
  close(p[1]);
  assert_int_equal(tdl_net_nodelay(-1, true), -EBADF);
  return NULL;
}

static void socket_options(void **state)
{
  (void)state;
  conn_ctx k;
  k.lfd = listen_on("127.0.0.1:0", 0, &k.to);
  run_fiber(options_body, &k);
  tdl_close(k.lfd);
}

/* ------------------------------------------------------------------------ */
/* Outside fibers, cancellation                                              */
/* ------------------------------------------------------------------------ */

static void outside_a_fiber(void **state)
{
  (void)state;
  tdl_addr bound;
  int lfd = listen_on("127.0.0.1:0", 0, &bound); /* listen works anywhere */
  int before = t_count_fds();
  char buf[4];
  size_t n = 99;
  assert_int_equal(tdl_net_accept(lfd, &bound, TDL_FOREVER), -EPERM);
  assert_int_equal(bound.len, 0);
  assert_int_equal(tdl_net_local_addr(lfd, &bound), 0);
  assert_int_equal(tdl_net_connect(&bound, TDL_FOREVER), -EPERM);
  assert_int_equal(t_count_fds(), before); /* no socket was made */
  assert_int_equal(tdl_net_send_all(lfd, "x", 1, &n, TDL_FOREVER), -EPERM);
  assert_int_equal(n, 0);
  struct iovec iov = {"x", 1};
  assert_int_equal(tdl_net_send_allv(lfd, &iov, 1, &n, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_net_recv_exactly(lfd, buf, 4, &n, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_net_recv_until(lfd, buf, 4, "\n", 1, &n, TDL_FOREVER), -EPERM);
  tdl_reader r;
  assert_int_equal(tdl_reader_init(&r, lfd, buf, sizeof buf, 1024), 0);
  assert_int_equal(tdl_reader_fill(&r, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_reader_need(&r, 1, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_reader_read(&r, buf, 1, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  /* A writer appends anywhere; only flushing blocks. */
  tdl_writer w;
  assert_int_equal(tdl_writer_init(&w, lfd, NULL, 16, 16), 0);
  assert_int_equal(tdl_writer_puts(&w, "+OK\r\n"), 0);
  assert_int_equal(tdl_writer_flush(&w, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_writer_len(&w), 5);
  assert_int_equal(tdl_writer_destroy(&w), 0);
  assert_int_equal(tdl_dns_dial("localhost:1", TDL_FOREVER), -EPERM);
  int u = tdl_net_udp_bind(&(tdl_addr){0}, 0);
  assert_int_equal(u, -EINVAL);
  tdl_addr ua = parse("127.0.0.1:0");
  u = tdl_net_udp_bind(&ua, 0);
  assert_true(u >= 0);
  assert_int_equal(tdl_net_udp_send(u, "x", 1, &bound, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_net_udp_recv(u, buf, 4, NULL, TDL_FOREVER), -EPERM);
  tdl_close(u);
  tdl_close(lfd);
}

typedef struct cancel_ctx {
  int what;
  int fd, lfd;
  tdl_addr to;
  int result;
  int started;
} cancel_ctx;

enum { C_ACCEPT, C_RECV_EXACTLY, C_RECV_UNTIL, C_READER, C_CONNECT_TCP, C_CONNECT_UNIX, C_SEND_ALL };

static void *blocked(void *arg)
{
  cancel_ctx *c = arg;
  char buf[64];
  tdl_reader r;
  c->started = 1;
  switch (c->what) {
  case C_ACCEPT:
    c->result = tdl_net_accept(c->lfd, NULL, TDL_FOREVER);
    break;
  case C_RECV_EXACTLY:
    c->result = tdl_net_recv_exactly(c->fd, buf, sizeof buf, NULL, TDL_FOREVER);
    break;
  case C_RECV_UNTIL:
    c->result = (int)tdl_net_recv_until(c->fd, buf, sizeof buf, "\n", 1, NULL, TDL_FOREVER);
    break;
  case C_READER:
    assert_int_equal(tdl_reader_init(&r, c->fd, buf, 16, sizeof buf), 0);
    c->result = (int)tdl_reader_until(&r, "\n", 1, TDL_FOREVER);
    assert_int_equal(tdl_reader_destroy(&r), 0);
    break;
  case C_CONNECT_TCP:
  case C_CONNECT_UNIX:
    c->result = tdl_net_connect(&c->to, TDL_FOREVER);
    break;
  case C_SEND_ALL: {
    unsigned char *d = calloc(1, BULK);
    c->result = tdl_net_send_all(c->fd, d, BULK, NULL, TDL_FOREVER);
    free(d);
    break;
  }
  }
  /* Sticky: every later blocking call fails too. */
  assert_int_equal(tdl_net_accept(c->lfd, NULL, TDL_FOREVER), -ECANCELED);
  assert_int_equal(tdl_net_connect(&c->to, TDL_FOREVER), -ECANCELED);
  assert_int_equal(tdl_net_send_all(c->fd, "x", 1, NULL, TDL_FOREVER), -ECANCELED);
  return NULL;
}

static void *canceller(void *arg)
{
  cancel_ctx *c = arg;
  int before = t_count_fds();
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, tdl_fiber_loop(), blocked, c, NULL), 0);
  assert_int_equal(tdl_sleep(tdl_after(30 * TDL_MSEC)), 0);
  assert_int_equal(c->started, 1);
  assert_int_equal(c->result, 1); /* still blocked */
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), h), 0);
  assert_int_equal(tdl_fiber_join(h, NULL, soon(LONG_WAIT)), 0);
  assert_int_equal(c->result, -ECANCELED);
  assert_int_equal(t_count_fds(), before); /* a cancelled connect leaves nothing */
  return NULL;
}

static void cancel_blocked(int what)
{
  cancel_ctx c = {.what = what, .result = 1, .fd = -1};
  tdl_addr bound;
  int extra[2] = {-1, -1}, raw = -1;
  if (what == C_CONNECT_TCP || what == C_CONNECT_UNIX) {
    char where[64];
    snprintf(where, sizeof where, "unix:@treadle-net-cfull-%d", (int)getpid());
    raw = full_listener(what == C_CONNECT_TCP ? "127.0.0.1:0" : where, &c.to);
    /* Fill its queue (one connection) with a plain blocking connect. */
    extra[0] = socket(c.to.u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(extra[0], &c.to.u.sa, c.to.len), 0);
    if (what == C_CONNECT_TCP) {
      /* The second handshake may still complete on some kernels; one more
       * non-blocking attempt makes sure the queue is over-full. */
      extra[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      connect(extra[1], &c.to.u.sa, c.to.len);
    }
    c.lfd = -1;
  } else {
    c.lfd = listen_on("127.0.0.1:0", 0, &bound);
    c.to = bound;
    if (what != C_ACCEPT) {
      int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      assert_int_equal(connect(s, &bound.u.sa, bound.len), 0);
      extra[0] = s;
      c.fd = accept4(c.lfd, NULL, NULL, SOCK_CLOEXEC);
      assert_true(c.fd >= 0);
    }
  }
  go(canceller, &c);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  if (c.fd >= 0)
    tdl_close(c.fd);
  if (c.lfd >= 0)
    tdl_close(c.lfd);
  for (int i = 0; i < 2; i++)
    if (extra[i] >= 0)
      close(extra[i]);
  if (raw >= 0)
    close(raw);
}

static void cancel_in_accept(void **state)
{
  (void)state;
  cancel_blocked(C_ACCEPT);
}
static void cancel_in_recv_exactly(void **state)
{
  (void)state;
  cancel_blocked(C_RECV_EXACTLY);
}
static void cancel_in_recv_until(void **state)
{
  (void)state;
  cancel_blocked(C_RECV_UNTIL);
}
static void cancel_in_reader(void **state)
{
  (void)state;
  cancel_blocked(C_READER);
}
static void cancel_in_send_all(void **state)
{
  (void)state;
  cancel_blocked(C_SEND_ALL);
}
static void cancel_in_connect_tcp(void **state)
{
  (void)state;
  cancel_blocked(C_CONNECT_TCP);
}
static void cancel_in_connect_unix(void **state)
{
  (void)state;
  cancel_blocked(C_CONNECT_UNIX);
}

/* ------------------------------------------------------------------------ */

int main(void)
{
  signal(SIGPIPE, SIG_DFL);
  /* The reserve fd is opened by the first listen; open it now so that the
   * fd counts of the tests include it from the start. */
  if (tdl_net_accept_reserve(true) != 0)
    return 1;

  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(listen_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(tcp_ipv4_echo, setup, teardown),
      cmocka_unit_test_setup_teardown(tcp_ipv6_loopback_echo, setup, teardown),
      cmocka_unit_test_setup_teardown(unix_path_socket, setup, teardown),
      cmocka_unit_test_setup_teardown(unix_abstract_socket, setup, teardown),
      cmocka_unit_test_setup_teardown(connect_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(listen_and_connect_strings, setup, teardown),
      cmocka_unit_test_setup_teardown(connect_str_localhost_falls_to_ipv6, setup, teardown),
      cmocka_unit_test_setup_teardown(connect_str_timeout, setup, teardown),
      cmocka_unit_test_setup_teardown(connect_timeout_tcp_full_backlog, setup, teardown),
      cmocka_unit_test_setup_teardown(connect_timeout_unix_full_backlog, setup, teardown),
      cmocka_unit_test_setup_teardown(accept_with_deadline, setup, teardown),
      cmocka_unit_test_setup_teardown(recv_exactly_early_eof, setup, teardown),
      cmocka_unit_test_setup_teardown(recv_until_delimiter_and_limit, setup, teardown),
      cmocka_unit_test_setup_teardown(send_allv_gathers, setup, teardown),
      cmocka_unit_test_setup_teardown(peer_vanishes_mid_send, setup, teardown),
      cmocka_unit_test_setup_teardown(udp_ipv4, setup, teardown),
      cmocka_unit_test_setup_teardown(udp_ipv6, setup, teardown),
      cmocka_unit_test_setup_teardown(unix_datagram_abstract, setup, teardown),
      cmocka_unit_test_setup_teardown(shutdown_half_close, setup, teardown),
      cmocka_unit_test_setup_teardown(socket_options, setup, teardown),
      cmocka_unit_test_setup_teardown(outside_a_fiber, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_in_accept, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_in_recv_exactly, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_in_recv_until, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_in_reader, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_in_send_all, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_in_connect_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_in_connect_unix, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
