/* SPDX-License-Identifier: MIT */
/*
 * Receiving ahead (fiber.h: tdl_fd_readahead; src/fd/ahead.c): the
 * bytes of a stream come out whole and in order through every read call and
 * flag it honours, across buffers and in bulk; a read that times out loses
 * nothing; a reader that does not read holds at most a few buffers (the
 * peer's writes block); the end of the stream and errors come after the
 * data; tdl_close during a read wakes it and really closes the socket; a
 * loop freed with receives still armed; turning it off; and misuse.  Every
 * test makes its own uring loop and is skipped where io_uring is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "helpers.h"

/* A connected TCP pair over loopback: [0] is read ahead, [1] the peer. */
static void tcp_pair(int sv[2]) { t_tcp_pair(&sv[1], &sv[0]); }

/* The byte at position i of a test stream. */
static inline unsigned char pat(size_t i) { return (unsigned char)(i * 7 + (i >> 11)); }

/* ---- bytes whole and in order, through every call ---- */

typedef struct stream {
  int sv[2];
  size_t total; /* bytes the writer sends */
  size_t got;
  int bad;      /* first mismatch + 1 */
  int rc;       /* the reader's last result */
  int ahead_rc;
} stream;

static void *reader_every_call(void *arg)
{
  stream *s = arg;
  s->ahead_rc = tdl_fd_readahead(s->sv[0], true);
  if (s->ahead_rc < 0)
    return NULL;
  unsigned char buf[3000];
  for (unsigned i = 0;; i++) {
    ssize_t n;
    size_t want = 1 + (i * 977) % sizeof buf;
    switch (i % 5) {
    case 0:
      n = tdl_read(s->sv[0], buf, want, TDL_FOREVER);
      break;
    case 1:
      n = tdl_recv(s->sv[0], buf, want, 0, TDL_FOREVER);
      break;
    case 2: {
      size_t h = want / 2;
      struct iovec iov[3] = {{buf, h}, {buf + h, 0}, {buf + h, want - h}};
      n = tdl_readv(s->sv[0], iov, 3, TDL_FOREVER);
      break;
    }
    case 3: {
      struct sockaddr_storage from;
      socklen_t fl = sizeof from;
      n = tdl_recvfrom(s->sv[0], buf, want, 0, (struct sockaddr *)&from, &fl, TDL_FOREVER);
      if (n > 0 && fl != 0)
        s->bad = -1;
      break;
    }
    default: {
      /* A peek shows what the read after it returns. */
      unsigned char peek[64];
      ssize_t p = tdl_recv(s->sv[0], peek, sizeof peek, MSG_PEEK, TDL_FOREVER);
      n = tdl_recv(s->sv[0], buf, want, MSG_WAITALL, TDL_FOREVER);
      if (p > 0 && n > 0 && memcmp(peek, buf, (size_t)(p < n ? p : n)) != 0)
        s->bad = -2;
      if (n > 0 && (size_t)n != want && s->got + (size_t)n != s->total)
        s->bad = -3; /* MSG_WAITALL came back short before the end */
      break;
    }
    }
    if (n <= 0) {
      s->rc = (int)n;
      break;
    }
    for (ssize_t k = 0; k < n && !s->bad; k++)
      if (buf[k] != pat(s->got + (size_t)k))
        s->bad = (int)(s->got + (size_t)k) + 1;
    s->got += (size_t)n;
  }
  tdl_close(s->sv[0]);
  return NULL;
}

static void *writer(void *arg)
{
  stream *s = arg;
  unsigned char buf[8192];
  size_t sent = 0;
  for (unsigned i = 0; sent < s->total; i++) {
    size_t n = 1 + (i * 4099) % sizeof buf;
    if (n > s->total - sent)
      n = s->total - sent;
    for (size_t k = 0; k < n; k++)
      buf[k] = pat(sent + k);
    size_t done = 0;
    assert_int_equal(tdl_net_send_all(s->sv[1], buf, n, &done, TDL_FOREVER), 0);
    sent += n;
    if (i % 16 == 0)
      tdl_fiber_yield(); /* let the reader take some in small pieces */
  }
  assert_int_equal(shutdown(s->sv[1], SHUT_WR), 0);
  return NULL;
}

static void bytes_in_order(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  stream s = {.total = 3 * 1024 * 1024 + 17};
  tcp_pair(s.sv);
  t_spawn(loop, reader_every_call, &s);
  t_spawn(loop, writer, &s);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(s.ahead_rc, 0);
  assert_int_equal(s.bad, 0);
  assert_int_equal(s.got, s.total);
  assert_int_equal(s.rc, 0); /* the end of the stream, after every byte */
  tdl_close(s.sv[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- a read that times out loses nothing; the end stays the end ---- */

typedef struct timed {
  int sv[2];
  ssize_t first, second, third, fourth;
  char buf[16];
} timed;

static void *timed_reader(void *arg)
{
  timed *t = arg;
  assert_int_equal(tdl_fd_readahead(t->sv[0], true), 0);
  t->first = tdl_recv(t->sv[0], t->buf, sizeof t->buf, 0, tdl_after(20 * TDL_MSEC));
  t->second = tdl_recv(t->sv[0], t->buf, sizeof t->buf, MSG_DONTWAIT, TDL_FOREVER);
  /* Now the peer writes and ends, while this fiber is not reading. */
  assert_int_equal(write(t->sv[1], "late", 4), 4);
  assert_int_equal(shutdown(t->sv[1], SHUT_WR), 0);
  assert_int_equal(tdl_sleep(tdl_after(20 * TDL_MSEC)), 0);
  assert_int_equal(tdl_fd_wait(t->sv[0], TDL_READ, TDL_FOREVER) & TDL_READ, TDL_READ);
  t->third = tdl_recv(t->sv[0], t->buf, sizeof t->buf, 0, TDL_FOREVER);
  t->fourth = tdl_recv(t->sv[0], t->buf + 8, 8, 0, TDL_FOREVER);
  assert_int_equal(tdl_recv(t->sv[0], t->buf + 8, 8, 0, TDL_FOREVER), 0); /* and again */
  return NULL;
}

static void timeout_loses_nothing(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  timed t = {0};
  tcp_pair(t.sv);
  t_spawn(loop, timed_reader, &t);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(t.first, -ETIMEDOUT);
  assert_int_equal(t.second, -EAGAIN);
  assert_int_equal(t.third, 4);
  assert_memory_equal(t.buf, "late", 4);
  assert_int_equal(t.fourth, 0);
  tdl_close(t.sv[0]);
  close(t.sv[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- the receive is armed only once a read finds the stream empty ---- */

typedef struct lazy {
  int sv[2];
  int p[2]; /* a pipe read through the ring meanwhile: keeps the loop polling its ring */
} lazy;

static void *ring_keeper(void *arg)
{
  lazy *z = arg;
  char c;
  assert_int_equal(tdl_read(z->p[0], &c, 1, TDL_FOREVER), 1);
  return NULL;
}

static void *lazy_reader(void *arg)
{
  lazy *z = arg;
  int *sv = z->sv;
  char buf[4];
  assert_int_equal(tdl_fd_readahead(sv[0], true), 0);
  assert_int_equal(send(sv[1], "ab", 2, 0), 2);
  /* Data already there (a new connection's request): an ordinary read, and
   * nothing armed, so what comes next stays in the socket although the
   * loop keeps collecting its ring's completions. */
  assert_int_equal(tdl_recv(sv[0], buf, 2, 0, TDL_FOREVER), 2);
  assert_int_equal(send(sv[1], "cd", 2, 0), 2);
  assert_int_equal(tdl_sleep(tdl_after(5 * TDL_MSEC)), 0);
  assert_int_equal(recv(sv[0], buf, sizeof buf, MSG_DONTWAIT), 2);
  assert_memory_equal(buf, "cd", 2);
  /* A read that finds nothing arms it (and times out, losing nothing)... */
  assert_int_equal(tdl_recv(sv[0], buf, sizeof buf, 0, tdl_after(5 * TDL_MSEC)), -ETIMEDOUT);
  /* ...and from then on the kernel receives ahead of the reads. */
  assert_int_equal(send(sv[1], "ef", 2, 0), 2);
  assert_int_equal(tdl_sleep(tdl_after(5 * TDL_MSEC)), 0);
  assert_int_equal(recv(sv[0], buf, sizeof buf, MSG_DONTWAIT), -1);
  assert_int_equal(errno, EAGAIN);
  assert_int_equal(tdl_recv(sv[0], buf, sizeof buf, 0, TDL_FOREVER), 2);
  assert_memory_equal(buf, "ef", 2);
  assert_int_equal(write(z->p[1], "x", 1), 1);
  return NULL;
}

static void armed_when_found_empty(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  lazy z;
  tcp_pair(z.sv);
  t_pipe(z.p);
  t_spawn(loop, ring_keeper, &z);
  t_spawn(loop, lazy_reader, &z);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  tdl_close(z.sv[0]);
  close(z.sv[1]);
  tdl_close(z.p[0]);
  tdl_close(z.p[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- tdl_fd_wait on an fd that receives ahead ---- */

static void *waiting_reader(void *arg)
{
  lazy *z = arg;
  char buf[4];
  assert_int_equal(tdl_fd_readahead(z->sv[0], true), 0);
  assert_int_equal(tdl_recv(z->sv[0], buf, sizeof buf, MSG_DONTWAIT, TDL_FOREVER), -EAGAIN); /* armed */
  /* Readable once data is queued here (a poll of the socket would not see
   * it: the armed receive takes it). */
  assert_int_equal(tdl_fd_wait(z->sv[0], TDL_READ, tdl_after(10 * TDL_SEC)), TDL_READ);
  assert_int_equal(tdl_recv(z->sv[0], buf, sizeof buf, MSG_DONTWAIT, TDL_FOREVER), 2);
  assert_memory_equal(buf, "gh", 2);
  assert_int_equal(tdl_fd_wait(z->sv[0], TDL_READ, tdl_after(2 * TDL_MSEC)), -ETIMEDOUT);
  assert_int_equal(write(z->p[1], "x", 1), 1);
  return NULL;
}

static void *late_writer(void *arg)
{
  lazy *z = arg;
  assert_int_equal(tdl_sleep(tdl_after(2 * TDL_MSEC)), 0); /* the reader waits meanwhile */
  assert_int_equal(send(z->sv[1], "gh", 2, 0), 2);
  return NULL;
}

static void wait_fd_sees_what_is_received_ahead(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  lazy z;
  tcp_pair(z.sv);
  t_pipe(z.p);
  t_spawn(loop, ring_keeper, &z);
  t_spawn(loop, waiting_reader, &z);
  t_spawn(loop, late_writer, &z);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  tdl_close(z.sv[0]);
  close(z.sv[1]);
  tdl_close(z.p[0]);
  tdl_close(z.p[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- a reader that does not read holds a few buffers, not the stream ---- */

typedef struct hold {
  int sv[2];
  int p[2];     /* a pipe read through the ring meanwhile: keeps the loop polling its ring */
  size_t sent;
  size_t got;
  int done;
} hold;

static void *pipe_reader(void *arg)
{
  hold *h = arg;
  char c;
  assert_int_equal(tdl_read(h->p[0], &c, 1, TDL_FOREVER), 1);
  return NULL;
}

static void *holder(void *arg)
{
  hold *h = arg;
  char c;
  assert_int_equal(tdl_fd_readahead(h->sv[0], true), 0);
  /* A read that finds the stream empty arms the receive (one that finds
   * data is an ordinary one); then this fiber reads nothing for a while. */
  assert_int_equal(tdl_recv(h->sv[0], &c, 1, 0, TDL_FOREVER), 1);
  h->got = 1;
  assert_int_equal(tdl_recv(h->sv[0], &c, 1, MSG_DONTWAIT, TDL_FOREVER), -EAGAIN);
  for (int i = 0; i < 50; i++) {
    /* The peer pushes as much as it can, non-blocking. */
    for (;;) {
      char buf[4096] = {0};
      ssize_t n = send(h->sv[1], buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0)
        break;
      h->sent += (size_t)n;
    }
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  }
  /* Everything is still there, in order of arrival, for a reader. */
  assert_int_equal(shutdown(h->sv[1], SHUT_WR), 0);
  char buf[8192];
  ssize_t n;
  while ((n = tdl_recv(h->sv[0], buf, sizeof buf, 0, TDL_FOREVER)) > 0)
    h->got += (size_t)n;
  assert_int_equal(n, 0);
  assert_int_equal(write(h->p[1], "x", 1), 1);
  h->done = 1;
  return NULL;
}

static void reader_that_does_not_read(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  hold h = {0};
  tcp_pair(h.sv);
  t_pipe(h.p);
  /* Small socket buffers, so that what the kernel holds shows. */
  int small = 16 * 1024;
  assert_int_equal(setsockopt(h.sv[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  assert_int_equal(setsockopt(h.sv[0], SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  assert_int_equal(send(h.sv[1], "!", 1, 0), 1);
  h.sent = 1;
  t_spawn(loop, pipe_reader, &h);
  t_spawn(loop, holder, &h);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_true(h.done);
  assert_int_equal(h.got, h.sent);
  /* The socket buffers (tens of KiB) plus at most 16 KiB held ahead; with
   * no cap the loop's 4 MiB of buffers would all have been filled. */
  assert_true(h.sent < 512 * 1024);
  tdl_close(h.sv[0]);
  close(h.sv[1]);
  tdl_close(h.p[0]);
  tdl_close(h.p[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- tdl_close during a read ---- */

typedef struct closing {
  int sv[2];
  ssize_t got;
  int done;
} closing;

static void *blocked_reader(void *arg)
{
  closing *c = arg;
  char buf[32];
  assert_int_equal(tdl_fd_readahead(c->sv[0], true), 0);
  c->got = tdl_recv(c->sv[0], buf, sizeof buf, 0, TDL_FOREVER);
  c->done = 1;
  return NULL;
}

static void *closer(void *arg)
{
  closing *c = arg;
  tdl_fiber_yield();
  tdl_fiber_yield();
  assert_int_equal(tdl_close(c->sv[0]), 0);
  return NULL;
}

static void close_during_read(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  closing c = {.got = 1};
  tcp_pair(c.sv);
  int fds = t_count_fds();
  t_spawn(loop, blocked_reader, &c);
  t_spawn(loop, closer, &c);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_true(c.done);
  assert_int_equal(c.got, -EBADF);
  /* The socket is really closed: its file is gone and the peer sees the end. */
  assert_int_equal(t_count_fds(), fds - 1);
  char b;
  assert_int_equal(recv(c.sv[1], &b, 1, 0), 0);
  close(c.sv[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- a loop freed while receives are armed on fds still open ---- */

typedef struct leftover {
  int sv[2];
  ssize_t got;
} leftover;

static void *read_once(void *arg)
{
  leftover *l = arg;
  char buf[8];
  assert_int_equal(tdl_fd_readahead(l->sv[0], true), 0);
  l->got = tdl_recv(l->sv[0], buf, sizeof buf, 0, TDL_FOREVER);
  /* The stream is empty now: this arms the receive. */
  assert_int_equal(tdl_recv(l->sv[0], buf, sizeof buf, MSG_DONTWAIT, TDL_FOREVER), -EAGAIN);
  return NULL; /* the receive stays armed; the fd is not closed */
}

static void loop_freed_while_armed(void **state)
{
  (void)state;
  for (int round = 0; round < 3; round++) { /* the ring is reused by the next loop */
    T_RING_LOOP(loop);
    leftover l = {0};
    tcp_pair(l.sv);
    assert_int_equal(send(l.sv[1], "ab", 2, 0), 2);
    t_spawn(loop, read_once, &l);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    assert_int_equal(l.got, 2);
    assert_int_equal(tdl_loop_free(loop), 0);
    /* The receive is over: what comes now stays in the socket. */
    assert_int_equal(send(l.sv[1], "cd", 2, 0), 2);
    char buf[4];
    assert_int_equal(recv(l.sv[0], buf, sizeof buf, 0), 2);
    assert_memory_equal(buf, "cd", 2);
    close(l.sv[0]);
    close(l.sv[1]);
  }
}

/* ---- turning it off; misuse ---- */

typedef struct misuse {
  int sv[2];
  int p[2];
  int udp;
  int done;
} misuse;

static void *misuse_fiber(void *arg)
{
  misuse *m = arg;
  char buf[16];
  assert_int_equal(tdl_fd_readahead(-1, true), -EBADF);
  assert_int_equal(tdl_fd_readahead(m->p[0], true), -ENOTSOCK);
  assert_int_equal(tdl_fd_readahead(m->udp, true), -EPROTOTYPE);
  assert_int_equal(tdl_fd_readahead(m->sv[0], true), 0);
  assert_int_equal(tdl_fd_readahead(m->sv[0], true), 0); /* twice: still one */
  assert_int_equal(tdl_recv(m->sv[0], buf, 4, MSG_DONTWAIT, TDL_FOREVER), -EAGAIN); /* empty: armed */
  assert_int_equal(send(m->sv[1], "0123456789", 10, 0), 10);
  assert_int_equal(tdl_recv(m->sv[0], buf, 4, MSG_TRUNC, TDL_FOREVER), -EOPNOTSUPP);
  assert_int_equal(tdl_recv(m->sv[0], buf, 4, 0, TDL_FOREVER), 4);
  assert_memory_equal(buf, "0123", 4);
  assert_int_equal(tdl_sleep(tdl_after(5 * TDL_MSEC)), 0);
  /* Off: what was received ahead is still read first, then reads go to
   * the socket itself. */
  assert_int_equal(tdl_fd_readahead(m->sv[0], false), 0);
  assert_int_equal(send(m->sv[1], "abc", 3, 0), 3);
  assert_int_equal(tdl_recv(m->sv[0], buf, 6, MSG_WAITALL, TDL_FOREVER), 6);
  assert_memory_equal(buf, "456789", 6);
  assert_int_equal(tdl_recv(m->sv[0], buf, sizeof buf, 0, TDL_FOREVER), 3);
  assert_memory_equal(buf, "abc", 3);
  assert_int_equal(tdl_fd_readahead(m->sv[0], false), 0); /* off again: nothing to do */
  m->done = 1;
  return NULL;
}

static void off_and_misuse(void **state)
{
  (void)state;
  assert_int_equal(tdl_fd_readahead(0, true), -EPERM); /* outside a fiber */
  T_RING_LOOP(loop);
  misuse m = {0};
  tcp_pair(m.sv);
  t_pipe(m.p);
  m.udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  t_spawn(loop, misuse_fiber, &m);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_true(m.done);
  tdl_close(m.sv[0]);
  close(m.sv[1]);
  tdl_close(m.p[0]);
  tdl_close(m.p[1]);
  close(m.udp);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* An fd accepted from a seqpacket listener is no stream: refused, as any
 * other (the kind of an accepted fd is taken from its listener). */
static void *seqpacket_fiber(void *arg)
{
  int *rc = arg;
  int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  assert_true(l >= 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "treadle-readahead-%d", (int)getpid());
  socklen_t al = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(a.sun_path + 1));
  assert_int_equal(bind(l, (struct sockaddr *)&a, al), 0);
  assert_int_equal(listen(l, 4), 0);
  int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  assert_int_equal(connect(c, (struct sockaddr *)&a, al), 0);
  int fd = tdl_net_accept(l, NULL, TDL_FOREVER);
  assert_true(fd >= 0);
  *rc = tdl_fd_readahead(fd, true);
  tdl_close(fd);
  close(c);
  tdl_close(l);
  return NULL;
}

static void accepted_seqpacket_is_refused(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  int rc = 1;
  t_spawn(loop, seqpacket_fiber, &rc);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(rc, -EPROTOTYPE);
  assert_int_equal(tdl_loop_free(loop), 0);
}

static void *on_epoll(void *arg)
{
  int *rc = arg;
  int sv[2];
  tcp_pair(sv);
  *rc = tdl_fd_readahead(sv[0], true);
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

static void needs_uring(void **state)
{
  (void)state;
  tdl_loop_options o = {.backend = TDL_BACKEND_EPOLL};
  tdl_loop *loop = NULL;
  assert_int_equal(tdl_loop_new(&loop, &o), 0);
  int rc = 1;
  t_spawn(loop, on_epoll, &rc);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(rc, -ENOTSUP);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- more connections than the loop has buffers for ---- */

enum { CROWD = 300, CROWD_BYTES = 20000 };

typedef struct crowd {
  int sv[CROWD][2];
  int p[2];
  int ok, bad;
} crowd;

typedef struct crowd_arg {
  crowd *c;
  int i;
} crowd_arg;

static void *crowd_reader(void *arg)
{
  crowd_arg *ca = arg;
  crowd *c = ca->c;
  int fd = c->sv[ca->i][0];
  unsigned char buf[CROWD_BYTES];
  if (tdl_fd_readahead(fd, true) < 0 || tdl_recv(fd, buf, 1, 0, TDL_FOREVER) != 1 ||
      tdl_recv(fd, buf, 1, MSG_DONTWAIT, TDL_FOREVER) != -EAGAIN) {
    c->bad++;
    return NULL;
  }
  /* Armed; now every peer floods while nobody reads: 300 fds may hold
   * 8 buffers each, more than the loop's 2,048, so some receives end for
   * want of buffers and their reads go to the socket itself. */
  assert_int_equal(tdl_sleep(tdl_after(30 * TDL_MSEC)), 0);
  /* (MSG_WAITALL may come back short where receiving ahead paused for
   * want of buffers: fiber.h.) */
  for (size_t got = 0; got < sizeof buf;) {
    ssize_t n = tdl_recv(fd, buf + got, sizeof buf - got, MSG_WAITALL, TDL_FOREVER);
    if (n <= 0) {
      c->bad += 100;
      return NULL;
    }
    got += (size_t)n;
  }
  for (size_t k = 0; k < sizeof buf; k++)
    if (buf[k] != pat(k + (size_t)ca->i)) {
      c->bad++;
      return NULL;
    }
  c->ok++;
  return NULL;
}

static void *crowd_pusher(void *arg)
{
  crowd *c = arg;
  tdl_fiber_yield(); /* every reader has armed */
  static unsigned char buf[CROWD_BYTES];
  for (int i = 0; i < CROWD; i++) {
    for (size_t k = 0; k < sizeof buf; k++)
      buf[k] = pat(k + (size_t)i);
    assert_int_equal(send(c->sv[i][1], buf, sizeof buf, 0), (ssize_t)sizeof buf);
  }
  assert_int_equal(tdl_sleep(tdl_after(60 * TDL_MSEC)), 0);
  assert_int_equal(write(c->p[1], "x", 1), 1); /* the pipe's reader kept the ring polled */
  return NULL;
}

static void *crowd_pipe(void *arg)
{
  crowd *c = arg;
  char b;
  assert_int_equal(tdl_read(c->p[0], &b, 1, TDL_FOREVER), 1);
  return NULL;
}

static void more_connections_than_buffers(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  crowd *c = calloc(1, sizeof *c);
  crowd_arg args[CROWD];
  t_pipe(c->p);
  for (int i = 0; i < CROWD; i++) {
    tcp_pair(c->sv[i]);
    assert_int_equal(send(c->sv[i][1], "!", 1, 0), 1);
    args[i] = (crowd_arg){c, i};
    t_spawn(loop, crowd_reader, &args[i]);
  }
  t_spawn(loop, crowd_pipe, c);
  t_spawn(loop, crowd_pusher, c);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(c->bad, 0);
  assert_int_equal(c->ok, CROWD);
  for (int i = 0; i < CROWD; i++) {
    tdl_close(c->sv[i][0]);
    close(c->sv[i][1]);
  }
  tdl_close(c->p[0]);
  tdl_close(c->p[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
  free(c);
}

/* ---- one reader at a time ---- */

typedef struct two {
  int sv[2];
  ssize_t first;
  int second, wait, done;
} two;

static void *first_reader(void *arg)
{
  two *t = arg;
  char b[4];
  assert_int_equal(tdl_fd_readahead(t->sv[0], true), 0);
  t->first = tdl_recv(t->sv[0], b, sizeof b, 0, TDL_FOREVER);
  return NULL;
}

static void *second_reader(void *arg)
{
  two *t = arg;
  char b;
  tdl_fiber_yield(); /* the first is parked in its read */
  t->second = (int)tdl_recv(t->sv[0], &b, 1, 0, TDL_FOREVER);
  t->wait = tdl_fd_wait(t->sv[0], TDL_READ, TDL_FOREVER);
  assert_int_equal(send(t->sv[1], "ok", 2, 0), 2);
  t->done = 1;
  return NULL;
}

static void one_reader_at_a_time(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  two t = {0};
  tcp_pair(t.sv);
  t_spawn(loop, first_reader, &t);
  t_spawn(loop, second_reader, &t);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_true(t.done);
  assert_int_equal(t.second, -EBUSY);
  assert_int_equal(t.wait, -EBUSY);
  assert_int_equal(t.first, 2);
  tdl_close(t.sv[0]);
  close(t.sv[1]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bytes_in_order),
      cmocka_unit_test(timeout_loses_nothing),
      cmocka_unit_test(armed_when_found_empty),
      cmocka_unit_test(wait_fd_sees_what_is_received_ahead),
      cmocka_unit_test(reader_that_does_not_read),
      cmocka_unit_test(close_during_read),
      cmocka_unit_test(loop_freed_while_armed),
      cmocka_unit_test(off_and_misuse),
      cmocka_unit_test(accepted_seqpacket_is_refused),
      cmocka_unit_test(needs_uring),
      cmocka_unit_test(more_connections_than_buffers),
      cmocka_unit_test(one_reader_at_a_time),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
