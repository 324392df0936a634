/* SPDX-License-Identifier: MIT */
/*
 * Sending behind (fiber.h: tdl_fd_writebehind, tdl_fd_flush): bytes whole and
 * in order through every write call; a small send returns at once; tdl_close
 * drops nothing; deadlines and a peer's reset reported later; misuse; turning
 * it off; a loop that ends with data held; many connections.  Every test
 * makes its own uring loop and is skipped where io_uring is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "helpers.h"

#define LONG_WAIT tdl_after(30 * TDL_SEC) /* never reached unless something broke */

/* A connected TCP pair over loopback: [0] sends behind, [1] is the peer. */
static void tcp_pair(int sv[2]) { t_tcp_pair(&sv[0], &sv[1]); }

/* The byte at position i of a test stream. */
static inline unsigned char pat(size_t i) { return (unsigned char)(i * 7 + i / 251); }
static void fill(unsigned char *b, size_t off, size_t n)
{
  for (size_t k = 0; k < n; k++)
    b[k] = pat(off + k);
}
/* 0, or the stream position of the first wrong byte + 1. */
static long check(const unsigned char *b, size_t off, size_t n)
{
  for (size_t k = 0; k < n; k++)
    if (b[k] != pat(off + k))
      return (long)(off + k) + 1;
  return 0;
}

/* Blocking receives on fd give up after 10 s (the test thread's, or a
 * fiber's that knows the bytes are in the kernel already). */
static void rcv_timeout(int fd)
{
  struct timeval tv = {.tv_sec = 10};
  assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
}

/* Nothing (more) waits to be received on fd. */
static void nothing_more(int fd)
{
  char c;
  assert_int_equal(recv(fd, &c, 1, MSG_DONTWAIT), -1);
  assert_int_equal(errno, EAGAIN);
}

/* Run fn on a uring loop with sv a TCP pair; fn sets sv[2] when it got
 * to its end. */
static void run_on_pair(tdl_fiber_fn fn)
{
  T_RING_LOOP(loop);
  int sv[3] = {0};
  tcp_pair(sv);
  t_spawn(loop, fn, sv);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_true(sv[2]);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* The peer's side, a fiber: reads fd in pieces of varied sizes until `want`
 * bytes came (0: until the end), checking each against pat(base + i). */
typedef struct peer {
  int fd;
  size_t base, want, got;
  long bad;
  ssize_t end; /* the last read's result: 0 for the end */
} peer;

static void *peer_reader(void *arg)
{
  peer *p = arg;
  unsigned char buf[4096];
  p->end = 1;
  for (unsigned i = 0; !p->want || p->got < p->want; i++) {
    ssize_t n = tdl_recv(p->fd, buf, 1 + (i * 997u) % sizeof buf, 0, LONG_WAIT);
    if ((p->end = n) <= 0)
      break;
    if (!p->bad)
      p->bad = check(buf, p->base + p->got, (size_t)n);
    p->got += (size_t)n;
  }
  return NULL;
}

/* ---- 1: bytes whole and in order, through every write call ---- */

enum { BULK = 3 * 1024 * 1024, PIECE = 20 * 1024 };

/* All n bytes through one kind of call: 0 or an error. */
static int send_piece(int fd, unsigned char *p, size_t n, unsigned how)
{
  for (size_t done = 0; done < n;) {
    ssize_t r;
    size_t left = n - done, h = left / 3, s = 0;
    struct iovec iov[3] = {{p + done, h}, {p + done + h, 0}, {p + done + h, left - h}};
    if (how == 1) {
      int e = tdl_net_send_all(fd, p + done, left, &s, LONG_WAIT);
      r = e < 0 ? e : (ssize_t)s;
    } else if (how == 2) {
      r = tdl_write(fd, p + done, left, LONG_WAIT);
    } else if (how == 3) {
      r = tdl_writev(fd, iov, 3, LONG_WAIT);
    } else {
      r = tdl_send(fd, p + done, left, how == 4 ? MSG_MORE : 0, LONG_WAIT);
    }
    if (r <= 0)
      return r < 0 ? (int)r : -EIO;
    done += (size_t)r;
  }
  return 0;
}

static void *bulk_sender(void *arg)
{
  int fd = *(int *)arg;
  assert_int_equal(tdl_fd_writebehind(fd, true), 0);
  unsigned char *buf = malloc(PIECE);
  assert_non_null(buf);
  size_t sent = 0;
  for (unsigned i = 0; sent < BULK; i++) {
    /* 1 byte .. 20 KiB, mostly small; the last piece without MSG_MORE */
    size_t n = i % 3 == 0 ? 1 + (i * 7919u) % PIECE : 1 + (i * 131u) % 700;
    if (n > BULK - sent)
      n = BULK - sent;
    fill(buf, sent, n);
    assert_int_equal(send_piece(fd, buf, n, sent + n == BULK ? 0 : i % 5), 0);
    memset(buf, 0xee, n); /* what went behind was copied */
    sent += n;
  }
  assert_int_equal(tdl_fd_flush(fd, LONG_WAIT), 0);
  free(buf);
  *(int *)arg = -1; /* done */
  return NULL;
}

static void bytes_in_order(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  int sv[2], fd;
  tcp_pair(sv);
  fd = sv[0];
  peer p = {.fd = sv[1], .want = BULK};
  t_spawn(loop, bulk_sender, &fd);
  t_spawn(loop, peer_reader, &p);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(fd, -1);
  assert_true(p.end > 0);
  assert_int_equal(p.bad, 0);
  assert_int_equal(p.got, BULK);
  nothing_more(sv[1]);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- 2: a small send returns at once; what does not fit ---- */

static void *at_once(void *arg)
{
  int *sv = arg;
  char msg[8] = "hello", got[16];
  assert_int_equal(tdl_fd_writebehind(sv[0], true), 0);
  assert_int_equal(tdl_send(sv[0], msg, 5, 0, LONG_WAIT), 5);
  memcpy(msg, "XXXXX", 5); /* copied: the caller's buffer is free at once */
  nothing_more(sv[1]);     /* not in the kernel yet: this fiber has not let the loop turn */
  /* It goes with the loop's next turn, without a flush. */
  assert_int_equal(tdl_recv(sv[1], got, sizeof got, 0, LONG_WAIT), 5);
  assert_memory_equal(got, "hello", 5);
  assert_int_equal(tdl_fd_flush(sv[0], LONG_WAIT), 0); /* nothing held now */
  /* 8000 and 100 bytes fit in the 8 KiB; 1000 more do not. */
  static unsigned char big[9100], in[8100];
  fill(big, 0, sizeof big);
  assert_int_equal(tdl_send(sv[0], big, 8000, 0, LONG_WAIT), 8000);
  assert_int_equal(tdl_send(sv[0], big + 8000, 100, MSG_DONTWAIT, LONG_WAIT), 100);
  assert_int_equal(tdl_send(sv[0], big + 8100, 1000, MSG_DONTWAIT, LONG_WAIT), -EAGAIN);
  nothing_more(sv[1]);
  size_t n = 0;
  assert_int_equal(tdl_net_recv_exactly(sv[1], in, sizeof in, &n, LONG_WAIT), 0);
  assert_int_equal(check(in, 0, sizeof in), 0);
  assert_int_equal(tdl_fd_flush(sv[0], LONG_WAIT), 0);
  nothing_more(sv[1]); /* the -EAGAIN one did not go */
  sv[2] = 1;
  return NULL;
}

static void returns_at_once(void **state)
{
  (void)state;
  run_on_pair(at_once);
}

/* ---- 3: tdl_close drops nothing ---- */

/* Sends `pieces` pieces behind (of `size` bytes; 0: 1..60), then closes. */
typedef struct closing {
  int fd;
  size_t base, pieces, size, total;
  bool yield; /* now and then, let the loop turn */
} closing;

static void *send_then_close(void *arg)
{
  closing *c = arg;
  unsigned char buf[1000];
  size_t off = c->base;
  assert_int_equal(tdl_fd_writebehind(c->fd, true), 0);
  for (size_t m = 0; m < c->pieces; m++) {
    size_t n = c->size ? c->size : 1 + (m * 13 + c->base) % 60;
    fill(buf, off, n);
    assert_int_equal(tdl_send(c->fd, buf, n, 0, LONG_WAIT), (ssize_t)n);
    off += n;
    if (c->yield && m % 7 == 6)
      tdl_fiber_yield();
    if (c->yield && m % 25 == 24)
      assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  }
  assert_int_equal(tdl_close(c->fd), 0);
  assert_int_equal(fcntl(c->fd, F_GETFD), -1); /* the number is free at once */
  assert_int_equal(errno, EBADF);
  c->total = off - c->base;
  return NULL;
}

static void close_drops_nothing(void **state)
{
  (void)state;
  static const size_t rounds[][2] = {{30, 250}, {50, 1000}}; /* within one buffer; more */
  for (int r = 0; r < 2; r++) {
    T_RING_LOOP(loop);
    int sv[2];
    tcp_pair(sv);
    closing c = {.fd = sv[0], .pieces = rounds[r][0], .size = rounds[r][1]};
    peer p = {.fd = sv[1]};
    t_spawn(loop, send_then_close, &c);
    t_spawn(loop, peer_reader, &p);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    assert_int_equal(c.total, c.pieces * c.size);
    assert_int_equal(p.bad, 0);
    assert_int_equal(p.got, c.total);
    assert_int_equal(p.end, 0); /* the end, after every byte */
    tdl_close(sv[1]);
    assert_int_equal(tdl_loop_free(loop), 0);
  }
}

/* ---- 4: a peer that does not read: the deadlines pass ---- */

static void *fill_up(void *arg)
{
  int *sv = arg;
  static unsigned char buf[1000];
  ssize_t n = 0;
  size_t sent = 0;
  assert_int_equal(tdl_fd_writebehind(sv[0], true), 0);
  for (int i = 0; i < 100000 && n >= 0; i++) /* 100 MB: never reached */
    if ((n = tdl_send(sv[0], buf, sizeof buf, 0, tdl_after(50 * TDL_MSEC))) > 0)
      sent += (size_t)n;
  /* From a send that found no room, or reporting what was given up. */
  assert_int_equal(n, -ETIMEDOUT);
  assert_true(sent > 0);
  /* What was held is given up when its deadline passes: the first flush
   * gets 0 or that error; the error reported once, the second gets 0. */
  int e = tdl_fd_flush(sv[0], tdl_after(2 * TDL_SEC));
  assert_true(e == 0 || e == -ETIMEDOUT);
  assert_int_equal(tdl_fd_flush(sv[0], tdl_after(2 * TDL_SEC)), 0);
  /* Closed holding what cannot go: the socket is closed all the same once
   * its deadline has passed. */
  assert_int_equal(tdl_send(sv[0], buf, sizeof buf, 0, tdl_after(50 * TDL_MSEC)), sizeof buf);
  tdl_close(sv[0]);
  sv[2] = 1;
  return NULL;
}

static void slow_peer_and_deadline(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  int sv[3] = {0}, small = 16 * 1024;
  tcp_pair(sv);
  assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  t_spawn(loop, fill_up, sv);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_true(sv[2]);
  rcv_timeout(sv[1]); /* what the kernel took, then the end */
  static char buf[4096];
  ssize_t n;
  while ((n = recv(sv[1], buf, sizeof buf, 0)) > 0)
    ;
  assert_int_equal(n, 0);
  close(sv[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- 5: a peer's reset, reported by a later call ---- */

static void *send_into_reset(void *arg)
{
  int *sv = arg;
  static unsigned char buf[100];
  ssize_t n = 0;
  assert_int_equal(tdl_fd_writebehind(sv[0], true), 0);
  assert_int_equal(tdl_send(sv[0], "!", 1, 0, LONG_WAIT), 1);
  for (int i = 0; i < 100000 && n >= 0; i++) {
    n = tdl_send(sv[0], buf, sizeof buf, 0, tdl_after(5 * TDL_SEC));
    if (i % 10 == 9 && n >= 0)
      assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0); /* the loop turns: the sends go */
  }
  assert_true(sv[3]); /* the peer has reset */
  assert_true(n == -EPIPE || n == -ECONNRESET);
  assert_int_equal(tdl_fd_flush(sv[0], LONG_WAIT), 0); /* reported once: nothing held */
  tdl_close(sv[0]);
  sv[2] = 1;
  return NULL;
}

static void *reset_peer(void *arg)
{
  int *sv = arg;
  char c;
  assert_int_equal(tdl_recv(sv[1], &c, 1, 0, LONG_WAIT), 1);
  struct linger lg = {1, 0};
  assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  tdl_close(sv[1]); /* an RST */
  sv[3] = 1;
  return NULL;
}

static void peer_reset_reported_later(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  int sv[4] = {0};
  tcp_pair(sv);
  t_spawn(loop, send_into_reset, sv);
  t_spawn(loop, reset_peer, sv);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_true(sv[2] && sv[3]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- 6: misuse ---- */

static void *misuse_fiber(void *arg)
{
  int *sv = arg, p[2];
  t_pipe(p);
  int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_int_equal(listen(l, 1), 0); /* on an ephemeral port */
  assert_int_equal(tdl_fd_writebehind(-1, true), -EBADF);
  assert_int_equal(tdl_fd_writebehind(p[1], true), -ENOTSOCK);
  assert_int_equal(tdl_fd_writebehind(udp, true), -EPROTOTYPE);
  assert_int_equal(tdl_fd_writebehind(l, true), -EINVAL);
  /* An fd that does not send behind: a flush is 0 at once. */
  assert_int_equal(tdl_fd_flush(sv[0], tdl_after(TDL_SEC)), 0);
  assert_int_equal(tdl_fd_flush(p[1], tdl_after(TDL_SEC)), 0);
  assert_int_equal(tdl_fd_writebehind(sv[0], true), 0);
  assert_int_equal(tdl_fd_writebehind(sv[0], true), 0);          /* twice: still one */
  assert_int_equal(tdl_fd_flush(sv[0], tdl_after(TDL_SEC)), 0); /* nothing held */
  assert_int_equal(tdl_send(sv[0], "ok", 2, 0, LONG_WAIT), 2);
  char buf[4];
  assert_int_equal(tdl_recv(sv[1], buf, sizeof buf, 0, LONG_WAIT), 2);
  tdl_close(p[0]);
  tdl_close(p[1]);
  close(udp);
  close(l);
  sv[2] = 1;
  return NULL;
}

static void *on_epoll(void *arg)
{
  int *rc = arg, sv[2];
  tcp_pair(sv);
  rc[0] = tdl_fd_writebehind(sv[0], true);
  rc[1] = tdl_fd_flush(sv[0], tdl_after(TDL_SEC));
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  return NULL;
}

static void misuse(void **state)
{
  (void)state;
  assert_int_equal(tdl_fd_writebehind(0, true), -EPERM); /* outside a fiber */
  tdl_loop_options o = {.backend = TDL_BACKEND_EPOLL};
  tdl_loop *ep = NULL;
  assert_int_equal(tdl_loop_new(&ep, &o), 0);
  int rc[2] = {1, 1};
  t_spawn(ep, on_epoll, rc);
  assert_int_equal(tdl_loop_run(ep, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(rc[0], -ENOTSUP);
  assert_int_equal(rc[1], 0);
  assert_int_equal(tdl_loop_free(ep), 0);
  run_on_pair(misuse_fiber);
}

/* ---- 7: turning it off ---- */

static void *on_off(void *arg)
{
  int *sv = arg;
  char got[8];
  rcv_timeout(sv[1]);
  assert_int_equal(tdl_fd_writebehind(sv[0], true), 0);
  assert_int_equal(tdl_send(sv[0], "abc", 3, 0, LONG_WAIT), 3);
  assert_int_equal(tdl_fd_writebehind(sv[0], false), 0);
  /* Ordinary now, after what was held: once it returns, all six bytes are
   * in the kernel (a blocking recv, without letting the loop turn). */
  assert_int_equal(tdl_send(sv[0], "def", 3, 0, LONG_WAIT), 3);
  assert_int_equal(recv(sv[1], got, 6, MSG_WAITALL), 6);
  assert_memory_equal(got, "abcdef", 6);
  /* On again: behind again; off, and a write goes after it. */
  assert_int_equal(tdl_fd_writebehind(sv[0], true), 0);
  assert_int_equal(tdl_send(sv[0], "ghi", 3, 0, LONG_WAIT), 3);
  nothing_more(sv[1]);
  assert_int_equal(tdl_fd_writebehind(sv[0], false), 0);
  assert_int_equal(tdl_write(sv[0], "jk", 2, LONG_WAIT), 2);
  assert_int_equal(recv(sv[1], got, 5, MSG_WAITALL), 5);
  assert_memory_equal(got, "ghijk", 5);
  assert_int_equal(tdl_fd_writebehind(sv[0], false), 0); /* off again: nothing to do */
  sv[2] = 1;
  return NULL;
}

static void turning_off(void **state)
{
  (void)state;
  run_on_pair(on_off);
}

/* ---- 8: a loop that ends with data held ---- */

enum { LEFT = 20000, LEFT_PIECE = 2000 };

static void *send_and_go(void *arg)
{
  int *sv = arg;
  unsigned char buf[LEFT_PIECE];
  assert_int_equal(tdl_fd_writebehind(sv[0], true), 0);
  for (size_t off = 0; off < LEFT; off += LEFT_PIECE) {
    fill(buf, off, LEFT_PIECE);
    assert_int_equal(tdl_send(sv[0], buf, LEFT_PIECE, 0, LONG_WAIT), LEFT_PIECE);
  }
  return NULL; /* no flush, no close */
}

static void loop_freed_with_data_behind(void **state)
{
  (void)state;
  for (int round = 0; round < 3; round++) { /* the ring is reused by the next loop */
    T_RING_LOOP(loop);
    int sv[2];
    tcp_pair(sv);
    t_spawn(loop, send_and_go, sv);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    assert_false(tdl_loop_alive(loop));
    assert_int_equal(tdl_loop_free(loop), 0);
    static unsigned char in[LEFT];
    rcv_timeout(sv[1]);
    assert_int_equal(recv(sv[1], in, sizeof in, MSG_WAITALL), LEFT);
    assert_int_equal(check(in, 0, LEFT), 0);
    close(sv[0]); /* the last of the socket: the peer sees the end */
    assert_int_equal(recv(sv[1], in, sizeof in, 0), 0);
    close(sv[1]);
  }
}

/* ---- 9: many connections: the loop's buffers taken and given back ---- */

enum { CONNS = 200 };

typedef struct conn {
  int sv[2];
  closing c;
  peer p;
} conn;

static void many_connections(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  conn *c = calloc(CONNS, sizeof *c);
  assert_non_null(c);
  for (size_t i = 0; i < CONNS; i++) {
    tcp_pair(c[i].sv);
    c[i].c = (closing){.fd = c[i].sv[0], .base = i, .pieces = 100, .yield = true};
    c[i].p = (peer){.fd = c[i].sv[1], .base = i};
    t_spawn(loop, send_then_close, &c[i].c);
    t_spawn(loop, peer_reader, &c[i].p);
  }
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  for (size_t i = 0; i < CONNS; i++) {
    assert_true(c[i].c.total > 100);
    assert_int_equal(c[i].p.bad, 0);
    assert_int_equal(c[i].p.got, c[i].c.total);
    assert_int_equal(c[i].p.end, 0);
    tdl_close(c[i].sv[1]);
  }
  assert_int_equal(tdl_loop_free(loop), 0);
  free(c);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bytes_in_order),
      cmocka_unit_test(returns_at_once),
      cmocka_unit_test(close_drops_nothing),
      cmocka_unit_test(slow_peer_and_deadline),
      cmocka_unit_test(peer_reset_reported_later),
      cmocka_unit_test(misuse),
      cmocka_unit_test(turning_off),
      cmocka_unit_test(loop_freed_with_data_behind),
      cmocka_unit_test(many_connections),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
