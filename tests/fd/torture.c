/* SPDX-License-Identifier: MIT */
/*
 * The torture test of fiber I/O: many connections at once, each served by
 * fibers of one loop and driven by a client of the test's own, on a plain
 * thread with poll(2), whose behaviour is drawn from a seeded generator.
 *
 * Per connection, drawn from (seed, connection number):
 *  - the transport: TCP over loopback, a Unix stream socket pair, two
 *    pipes, or (where libtreadle-tls is built) a TLS stream over TCP or a
 *    Unix socket pair, its records going through fiber I/O or OpenSSL's
 *    socket BIO (TREADLE_TLS_BIO, tls.h); often with small kernel buffers,
 *    so that they fill;
 *  - the work: echo (the server writes back what it reads), upload (the
 *    server reads to the end, then answers with the count), download (the
 *    server writes while the client's end is already shut), or full duplex
 *    (a reader fiber and a writer fiber on one fd);
 *  - sizes: streams of up to 2 MiB, client and server calls of 1 byte to
 *    256 KiB;
 *  - the client's pauses (reads and writes that stop for up to 200 ms), a
 *    client that closes or resets mid-stream, a server that shuts the
 *    connection mid-stream;
 *  - the server's calls (read, recv, readv; write, send, writev,
 *    tdl_net_send_all; over TLS tdl_tls_read, tdl_tls_wait then a read,
 *    tdl_tls_write, tdl_tls_writev, tdl_tls_send_all; now and then a
 *    read that waits for readability twice first, tdl_fd_wait) and
 *    deadlines (none, or 1-30 ms, retried when they pass); on io_uring
 *    loops, receiving ahead and sending behind (over TLS where its records
 *    go through fiber I/O).
 * With TDL_TORTURE_HOOKED=1 (and libtreadle-hook preloaded) the server's
 * fibers call plain read, write and poll on blocking fds, as a blocking
 * library would (no TLS then), or for half the connections on fds they made
 * non-blocking, the call first and a poll on EAGAIN, as libpq does.  The TLS client is OpenSSL's, non-blocking,
 * on the client's thread.
 *
 * Every byte is checked: each direction is a stream whose byte at offset i
 * is a function of the connection's key and i, so a byte lost, doubled or
 * reordered is seen where it lands.  And no connection may stall: a server
 * fiber parked on a read while poll(2) says its fd is readable (or on a
 * write while it is writable), for a second without progress, fails the
 * run, as does any connection without progress for 10 s while its client
 * is not pausing, or a loop kept from its poll for a second (the watchdog,
 * loop.h, names the fiber and its call chain).  (Under a sanitizer the
 * second is three, under valgrind twenty.)
 *
 * Environment: TDL_TORTURE_SEED (else one is drawn and printed: a failure
 * replays with it), TDL_TORTURE_SECONDS (default 5; 2 under valgrind),
 * TDL_TORTURE_CONNS (at once, default 48; 16 under valgrind),
 * TDL_TORTURE_ONLY=N (run connection N of the seed
 * alone, again and again), TDL_TORTURE_PAUSE (on a failure, wait for a
 * debugger instead of exiting), TDL_BACKEND.  Prints one line of totals and
 * exits 0, or names the connection, its drawn behaviour and what went
 * wrong, dumps the fibers, and exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <treadle.h>
#if TORTURE_TLS
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <treadle/tls.h>
#endif

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLOW_BUILD 1
#else
#define SLOW_BUILD 0
#endif

/* ---- the generator and the streams ---- */

static uint64_t mix(uint64_t x)
{
  x += 0x9e3779b97f4a7c15u;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t next(rng *r) { return mix(r->s++); }
/* Uniform in [lo, hi]. */
static uint64_t in(rng *r, uint64_t lo, uint64_t hi) { return lo + next(r) % (hi - lo + 1); }
static bool chance(rng *r, unsigned percent) { return next(r) % 100 < percent; }
/* Spread over magnitudes: as many small values as large ones, up to max. */
static size_t log_size(rng *r, size_t max)
{
  unsigned bits = (unsigned)in(r, 0, 63 - (unsigned)__builtin_clzll(max));
  size_t v = (size_t)in(r, (uint64_t)1 << bits, ((uint64_t)2 << bits) - 1);
  return v > max ? max : v;
}

/* Byte i of the stream of `key`. */
static void stream_fill(uint64_t key, uint64_t off, uint8_t *buf, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    uint64_t at = off + i;
    buf[i] = (uint8_t)(mix(key ^ (at >> 3) * 0x100000001b3u) >> ((at & 7) * 8));
  }
}

/* The first offset (from off) where buf differs from the stream, or -1. */
static int64_t stream_check(uint64_t key, uint64_t off, const uint8_t *buf, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    uint64_t at = off + i;
    if (buf[i] != (uint8_t)(mix(key ^ (at >> 3) * 0x100000001b3u) >> ((at & 7) * 8)))
      return (int64_t)at;
  }
  return -1;
}

static tdl_time_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

/* ---- a connection ---- */

enum { TCP, UNIX, PIPE, TLS };
enum { ECHO, UPLOAD, DOWNLOAD, DUPLEX };
static const char *const transports[] = {"tcp", "unix", "pipe", "tls"};
static const char *const modes[] = {"echo", "upload", "download", "duplex"};
enum { MAX_CALL = 256 * 1024, MAX_STREAM = 2 * 1024 * 1024 };

typedef struct conn {
  unsigned id;
  uint64_t key; /* its streams: key (client to server) and ~key */
  /* drawn */
  int transport, mode;
  size_t c2s_len, s2c_len;
  int bufsize;                  /* SO_RCVBUF/SO_SNDBUF or the pipe's size; 0: the kernel's */
  size_t cw_max, cr_max;        /* the client's calls */
  unsigned c_pauses, c_pause_ms; /* pauses per direction, each up to c_pause_ms */
  int64_t c_abort_at;           /* client progress at which it closes (-1: never) */
  bool c_reset;                 /* ...with a reset (TCP) */
  int64_t s_abort_at;           /* server progress at which it shuts both ways (-1: never) */
  size_t sr_max, sw_max;        /* the server's calls */
  unsigned s_rcall, s_wcall;    /* which call */
  unsigned s_deadline_ms;       /* 0: none */
  bool ahead, behind;           /* uring: tdl_fd_readahead, tdl_fd_writebehind */
  bool s_user_nb;               /* hooked: the server's fds non-blocking by the user, read and written
                                   as libpq does (the call first, poll on EAGAIN) */
  bool s_wait_twice;            /* not hooked: a read waits (tdl_fd_wait) first, and once readable
                                   waits again before it reads: the second must end at once */
  bool tls_unix;                /* TLS over a Unix socket pair (else TCP) */
  bool tls_socket_bio;          /* TLS records on OpenSSL's socket BIO */
  /* fds: the server's and the client's ends (a socket is both ways) */
  int s_in, s_out, c_in, c_out;
  /* the server, as the monitor sees it */
  _Atomic uint64_t s_progress;  /* bytes moved by the server */
  _Atomic int s_rwait, s_wwait; /* a server fiber is in a read or a write call */
  _Atomic bool s_done, c_done;
  uint64_t s_got, s_sent;       /* server fibers only */
  bool s_aborted;
  int s_parts;                  /* server fibers still running */
  tdl_fiber_t s_main;
#if TORTURE_TLS
  tdl_tls *s_tls;               /* TLS: the server's stream */
  SSL *c_ssl;                   /* TLS: the client's */
  bool c_hs_done;               /* its handshake is over */
  short c_hs_want;              /* what the handshake waits for */
  size_t c_wretry;              /* an SSL_write to repeat with at least this many bytes */
  bool c_shut_due;              /* close_notify to send once the handshake is over */
#endif
  /* the client (its thread only) */
  uint64_t c_sent, c_got;
  bool c_shut;                  /* its write side is shut */
  bool c_eof;
  bool c_closed;                /* its fds are closed: it is over */
  tdl_time_t c_rpause, c_wpause; /* paused until */
  uint64_t c_rpoint, c_wpoint;    /* the next pause, at that count */
  uint8_t trailer[8];           /* upload: the server's count */
  /* the monitor (client thread) */
  uint64_t m_progress;
  tdl_time_t m_since, m_stuck_since;
  tdl_time_t born;
} conn;

static struct {
  uint64_t seed;
  double seconds;
  unsigned at_once;
  long only; /* -1: all */
  bool hooked;
  bool uring;
  bool tls; /* TLS connections are drawn */
#if TORTURE_TLS
  tdl_tls_config *tls_fiber, *tls_socket; /* the server's: records through fiber I/O, or the socket BIO */
  SSL_CTX *tls_client;
#endif
  tdl_time_t stall; /* a parked fiber with its fd ready this long is a stall */
  tdl_loop *loop;
  /* handed to the client thread */
  pthread_mutex_t lock;
  conn *incoming[4096];
  unsigned n_incoming;
  int wake[2];
  atomic_bool stop;
  /* the first failure */
  atomic_bool failed;
  char why[8192];
  /* totals */
  uint64_t conns, bytes, timeouts, aborts, tls_conns;
  double conn_seconds;
  tdl_time_t slowest;
  char slowest_who[1024];
} T;

static void describe(const conn *c, char *out, size_t n)
{
  snprintf(out, n,
           "connection %u (%s, %s): c2s %zu bytes, s2c %zu, buffers %d, client calls <= %zu/%zu, %u pauses of up "
           "to %u ms, client %s at %" PRId64 ", server shuts at %" PRId64 ", server calls %u/%u of <= %zu/%zu, "
           "deadline %u ms, ahead %d, behind %d%s%s%s; server fds %d/%d",
           c->id, transports[c->transport], modes[c->mode], c->c2s_len, c->s2c_len, c->bufsize, c->cw_max, c->cr_max,
           c->c_pauses, c->c_pause_ms, c->c_reset ? "resets" : "closes", c->c_abort_at, c->s_abort_at,
           c->s_rcall, c->s_wcall, c->sr_max, c->sw_max, c->s_deadline_ms, c->ahead, c->behind,
           c->transport != TLS      ? ""
           : c->tls_socket_bio ? (c->tls_unix ? "; TLS over a Unix socket, socket BIO" : "; TLS over TCP, socket BIO")
                               : (c->tls_unix ? "; TLS over a Unix socket, fiber I/O" : "; TLS over TCP, fiber I/O"),
           c->s_user_nb ? "; server fds non-blocking (read or write first, poll on EAGAIN)" : "",
           c->s_wait_twice ? "; reads wait twice first" : "", c->s_in, c->s_out);
}

static void fail(const conn *c, const char *fmt, ...)
{
  static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&once);
  if (!atomic_load(&T.failed)) {
    char what[512], who[1024] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (c)
      describe(c, who, sizeof who);
    snprintf(T.why, sizeof T.why, "%s\n  %s", what, who);
    atomic_store(&T.failed, true);
  }
  pthread_mutex_unlock(&once);
}

/* Draw connection `id`'s behaviour. */
static void draw(conn *c, unsigned id)
{
  rng r = {mix(T.seed) ^ mix(id + 1)};
  c->id = id;
  c->key = next(&r);
  c->transport = (int)in(&r, 0, T.tls ? 3 : 2);
  if (c->transport == TLS) {
    c->tls_unix = chance(&r, 30);
    c->tls_socket_bio = chance(&r, 30);
  }
  bool tcp = c->transport == TCP || (c->transport == TLS && !c->tls_unix);
  c->mode = chance(&r, 40) ? ECHO : (int)in(&r, 1, 3); /* echo, the most common server, most often */
  /* Half of them bulk transfers, which fill buffers; the rest of every
   * size, a few empty. */
  size_t len = chance(&r, 50)   ? (size_t)in(&r, MAX_STREAM / 8, MAX_STREAM)
               : chance(&r, 10) ? (size_t)in(&r, 0, 16)
                                : log_size(&r, MAX_STREAM);
  c->c2s_len = c->mode == DOWNLOAD ? 0 : len;
  c->s2c_len = c->mode == ECHO ? c->c2s_len : c->mode == UPLOAD ? 8 : c->mode == DUPLEX ? log_size(&r, MAX_STREAM) : len;
  /* (TCP through a receive buffer under a few segments' worth crawls at
   * the persist timer's pace, as the kernel avoids silly windows.) */
  c->bufsize = chance(&r, 60) ? (int)in(&r, tcp ? 8192 : 2048, 65536) : 0;
  /* Calls no smaller than a 10,000th of the stream (a 2,500th over TLS,
   * where each is a record to seal and open), so that a connection ends in
   * a time the run can wait for: the run drains what it started. */
  size_t floor = (c->c2s_len > c->s2c_len ? c->c2s_len : c->s2c_len) / (c->transport == TLS ? 2500 : 10000) + 1;
  c->cw_max = log_size(&r, MAX_CALL);
  c->cr_max = log_size(&r, MAX_CALL);
  c->c_pauses = chance(&r, 70) ? (unsigned)in(&r, 1, 20) : 0;
  c->c_pause_ms = (unsigned)in(&r, 1, chance(&r, 20) ? 200 : 20);
  uint64_t total = c->c2s_len + (c->mode == UPLOAD ? 0 : c->s2c_len);
  c->c_abort_at = chance(&r, 10) && total ? (int64_t)in(&r, 0, total - 1) : -1;
  c->c_reset = tcp && chance(&r, 50);
  c->s_abort_at = c->transport != PIPE && chance(&r, 5) && total ? (int64_t)in(&r, 0, total - 1) : -1;
  c->sr_max = chance(&r, 50) ? MAX_CALL : log_size(&r, MAX_CALL); /* a large read is a short one */
  c->sw_max = log_size(&r, MAX_CALL);
  c->cw_max = c->cw_max < floor ? floor : c->cw_max;
  c->cr_max = c->cr_max < floor ? floor : c->cr_max;
  c->sr_max = c->sr_max < floor ? floor : c->sr_max;
  c->sw_max = c->sw_max < floor ? floor : c->sw_max;
  c->s_rcall = (unsigned)in(&r, 0, 2);
  c->s_wcall = (unsigned)in(&r, 0, 3);
  c->s_deadline_ms = chance(&r, 30) ? (unsigned)in(&r, 1, 30) : 0;
  c->ahead = T.uring && c->transport != PIPE && chance(&r, 50);
  c->behind = T.uring && c->transport != PIPE && chance(&r, 50);
  if (T.hooked)
    c->ahead = c->behind = false;
  if (c->c_pauses) {
    c->c_wpoint = in(&r, 0, c->c2s_len / c->c_pauses);
    c->c_rpoint = in(&r, 0, (c->mode == UPLOAD ? 8 : c->s2c_len) / c->c_pauses);
  }
  /* Drawn last, so that the draws above stay what a seed gave before. */
  c->s_user_nb = T.hooked && chance(&r, 50);
  c->s_wait_twice = !T.hooked && c->transport != TLS && !c->ahead && chance(&r, 20);
  /* Sends behind give up what they hold when their deadline passes (fd.h):
   * a torture of lost data would be no test.  Their deadlines are long. */
}

/* ---- the server: fibers of the loop ---- */

static tdl_time_t s_deadline(const conn *c)
{
  return c->s_deadline_ms ? tdl_after((tdl_time_t)c->s_deadline_ms * TDL_MSEC) : TDL_FOREVER;
}

/* Hooked: plain calls, on blocking fds, with poll for a deadline. */
static ssize_t hooked_wait(int fd, short events, unsigned ms)
{
  if (!ms)
    return 1;
  struct pollfd p = {.fd = fd, .events = events};
  int r = poll(&p, 1, (int)ms);
  return r < 0 ? -errno : r == 0 ? -ETIMEDOUT : 1;
}

static ssize_t s_read(conn *c, void *buf, size_t n)
{
  int fd = c->s_in;
  ssize_t r;
  atomic_store(&c->s_rwait, 1);
  if (c->s_user_nb) {
    /* As libpq: read; on EAGAIN poll (POLLERR asked, as libpq does), then
     * read again.  The hook passes these reads through, and a read that
     * finds the stream empty lets the poll park at once. */
    bool said_readable = false;
    /* Now and then the poll first, as libpq waits for the rest of a reply
     * it has part of: after a read that filled its buffer too. */
    bool poll_first = c->s_rcall == 1;
    for (;;) {
      if (!poll_first) {
        r = read(fd, buf, n);
        if (r >= 0 || errno != EAGAIN) {
          r = r < 0 ? -errno : r;
          break;
        }
        /* This fiber is the fd's only reader: a poll that said readable
         * (data, the end, an error) is followed by a read that finds it. */
        if (said_readable) {
          fail(c, "server: poll said readable, then read found nothing (EAGAIN)");
          r = -EIO;
          break;
        }
      }
      poll_first = false;
      struct pollfd p = {.fd = fd, .events = POLLIN | POLLERR};
      int k = poll(&p, 1, c->s_deadline_ms ? (int)c->s_deadline_ms : -1);
      if (k <= 0) {
        r = k < 0 ? -errno : -ETIMEDOUT;
        break;
      }
      said_readable = true;
    }
  } else if (T.hooked) {
    r = hooked_wait(fd, POLLIN, c->s_deadline_ms);
    if (r > 0) {
      r = read(fd, buf, n);
      if (r < 0)
        r = -errno;
    }
#if TORTURE_TLS
  } else if (c->transport == TLS) {
    /* Now and then the wait of a server between requests first. */
    r = c->s_rcall == 1 ? tdl_tls_wait(c->s_tls, s_deadline(c)) : 0;
    if (r == 0)
      r = tdl_tls_read(c->s_tls, buf, n, s_deadline(c));
#endif
  } else {
    unsigned call = c->transport == PIPE && c->s_rcall == 1 ? 0 : c->s_rcall;
    if (c->s_wait_twice) {
      /* A server that waits for a request before it takes a buffer, and is
       * told again: what made the fd readable is still there (this fiber
       * is its only reader), so the second wait must end, on every back
       * end, however the first one ended.  It has no deadline: one that
       * parks for good on a readable fd is the stall the monitor reports. */
      r = tdl_fd_wait(fd, TDL_READ, s_deadline(c));
      if (r > 0)
        r = tdl_fd_wait(fd, TDL_READ, TDL_FOREVER);
      if (r < 0) {
        atomic_store(&c->s_rwait, 0);
        return r;
      }
    }
    if (call == 0) {
      r = tdl_read(fd, buf, n, s_deadline(c));
    } else if (call == 1) {
      r = tdl_recv(fd, buf, n, 0, s_deadline(c));
    } else {
      struct iovec iov[2] = {{buf, n / 2}, {(char *)buf + n / 2, n - n / 2}};
      r = tdl_readv(fd, n > 1 ? iov : iov + 1, n > 1 ? 2 : 1, s_deadline(c));
    }
  }
  atomic_store(&c->s_rwait, 0);
  return r;
}

/* Write all of buf.  0, or a negative errno. */
static int s_write_all(conn *c, const uint8_t *buf, size_t n)
{
  int fd = c->s_out;
  size_t done = 0;
  while (done < n) {
    ssize_t r;
    size_t want = n - done;
    atomic_store(&c->s_wwait, 1);
    if (c->s_user_nb) {
      r = write(fd, buf + done, want);
      if (r < 0 && errno == EAGAIN) {
        struct pollfd p = {.fd = fd, .events = POLLOUT | POLLERR};
        int k = poll(&p, 1, c->s_deadline_ms ? (int)c->s_deadline_ms : -1);
        if (k > 0) { /* writable (or an error the next write hears) */
          atomic_store(&c->s_wwait, 0);
          continue;
        }
        r = k < 0 ? -errno : -ETIMEDOUT;
      } else if (r < 0) {
        r = -errno;
      }
    } else if (T.hooked) {
      r = hooked_wait(fd, POLLOUT, c->s_deadline_ms);
      if (r > 0) {
        r = write(fd, buf + done, want);
        if (r < 0)
          r = -errno;
      }
#if TORTURE_TLS
    } else if (c->transport == TLS) {
      /* After a write that timed out the next starts with the same bytes,
       * as tls.h asks: this loop's retry does. */
      tdl_time_t dl = c->behind ? tdl_after(60 * TDL_SEC) : s_deadline(c);
      if (c->s_wcall == 0) {
        r = tdl_tls_write(c->s_tls, buf + done, want, dl);
      } else if (c->s_wcall == 1) {
        struct iovec iov[2] = {{(void *)(buf + done), want / 2}, {(void *)(buf + done + want / 2), want - want / 2}};
        r = tdl_tls_writev(c->s_tls, want > 1 ? iov : iov + 1, want > 1 ? 2 : 1, dl);
      } else {
        size_t sent = 0;
        int e = tdl_tls_send_all(c->s_tls, buf + done, want, &sent, dl);
        r = e < 0 && !(e == -ETIMEDOUT && sent) ? e : (ssize_t)sent;
      }
#endif
    } else {
      tdl_time_t dl = c->behind ? tdl_after(60 * TDL_SEC) : s_deadline(c);
      unsigned call = c->s_wcall;
      if (c->transport == PIPE && (call == 1 || call == 3))
        call = 0;
      if (call == 0) {
        r = tdl_write(fd, buf + done, want, dl);
      } else if (call == 1) {
        r = tdl_send(fd, buf + done, want, MSG_NOSIGNAL, dl);
      } else if (call == 2) {
        struct iovec iov[2] = {{(void *)(buf + done), want / 2}, {(void *)(buf + done + want / 2), want - want / 2}};
        r = tdl_writev(fd, want > 1 ? iov : iov + 1, want > 1 ? 2 : 1, dl);
      } else {
        size_t sent = 0;
        int e = tdl_net_send_all(fd, buf + done, want, &sent, dl);
        r = e < 0 && !(e == -ETIMEDOUT && sent) ? e : (ssize_t)sent;
      }
    }
    atomic_store(&c->s_wwait, 0);
    if (r == -ETIMEDOUT) {
      __atomic_fetch_add(&T.timeouts, 1, __ATOMIC_RELAXED);
      continue;
    }
    if (r < 0)
      return (int)r;
    if (r == 0 && want) {
      fail(c, "server: a write of %zu bytes returned 0", want);
      return -EIO;
    }
    done += (size_t)r;
    c->s_sent += (uint64_t)r;
    atomic_fetch_add(&c->s_progress, (uint64_t)r);
  }
  return 0;
}

/* Whether the connection may end early: someone aborts. */
static bool may_break(const conn *c) { return c->c_abort_at >= 0 || c->s_abort_at >= 0; }

/* The server's abort: shut both ways (the fd stays the fibers' until both
 * are done, so its number cannot go to another connection meanwhile). */
static void s_maybe_abort(conn *c)
{
  if (c->s_abort_at < 0 || c->s_aborted || c->s_got + c->s_sent < (uint64_t)c->s_abort_at)
    return;
  c->s_aborted = true;
  if (T.hooked)
    shutdown(c->s_in, SHUT_RDWR);
  else
    tdl_net_shutdown(c->s_in, SHUT_RDWR);
}

/* Shut the server's way out: the client reads to its end. */
static void s_shut_out(conn *c)
{
  if (c->transport == PIPE)
    return; /* closed with the rest */
#if TORTURE_TLS
  if (c->transport == TLS) {
    int e = tdl_tls_shutdown(c->s_tls, tdl_after(10 * T.stall)); /* close_notify */
    if (e < 0 && !may_break(c))
      fail(c, "server: tdl_tls_shutdown: %s (%s)", strerror(-e), tdl_tls_error(c->s_tls));
    return;
  }
#endif
  int e = T.hooked ? (shutdown(c->s_out, SHUT_WR) < 0 ? -errno : 0) : tdl_net_shutdown(c->s_out, SHUT_WR);
  if (e < 0 && e != -ENOTCONN && !may_break(c))
    fail(c, "server: shutdown: %s", strerror(-e));
}

/* Read the client's stream to its end, checking it; echo it back if asked. */
static void s_read_part(conn *c, uint8_t *buf, bool echo)
{
  for (;;) {
    s_maybe_abort(c);
    size_t n = (size_t)in(&(rng){c->key ^ c->s_got ^ 0x5a5a}, 1, c->sr_max);
    ssize_t r = s_read(c, buf, n);
    if (r == -ETIMEDOUT) {
      __atomic_fetch_add(&T.timeouts, 1, __ATOMIC_RELAXED);
      continue;
    }
    if (r < 0) {
      if (!may_break(c))
        fail(c, "server: read at %" PRIu64 ": %s", c->s_got, strerror((int)-r));
      return;
    }
    if (r == 0) {
      if (c->s_got != c->c2s_len && !may_break(c))
        fail(c, "server: the stream ended at %" PRIu64 " of %zu", c->s_got, c->c2s_len);
      return;
    }
    if (c->s_got + (uint64_t)r > c->c2s_len) {
      fail(c, "server: %zd bytes at %" PRIu64 ", beyond the stream's %zu", r, c->s_got, c->c2s_len);
      return;
    }
    int64_t bad = stream_check(c->key, c->s_got, buf, (size_t)r);
    if (bad >= 0) {
      fail(c, "server: byte %" PRId64 " of the client's stream is wrong (read of %zd at %" PRIu64 ")", bad, r,
           c->s_got);
      return;
    }
    c->s_got += (uint64_t)r;
    atomic_fetch_add(&c->s_progress, (uint64_t)r);
    if (echo && s_write_all(c, buf, (size_t)r) < 0) {
      if (!may_break(c))
        fail(c, "server: echo at %" PRIu64 " failed", c->s_sent);
      return;
    }
  }
}

/* Write the server's stream, in calls of up to sw_max. */
static void s_write_part(conn *c, uint8_t *buf)
{
  while (c->s_sent < c->s2c_len) {
    s_maybe_abort(c);
    size_t n = (size_t)in(&(rng){~c->key ^ c->s_sent}, 1, c->sw_max);
    if (n > c->s2c_len - c->s_sent)
      n = c->s2c_len - c->s_sent;
    stream_fill(~c->key, c->s_sent, buf, n);
    int e = s_write_all(c, buf, n);
    if (e < 0) {
      if (!may_break(c))
        fail(c, "server: write at %" PRIu64 ": %s", c->s_sent, strerror(-e));
      return;
    }
  }
}

static void s_part_done(conn *c)
{
  if (--c->s_parts)
    return;
#if TORTURE_TLS
  if (c->s_tls) {
    int e = tdl_tls_free(c->s_tls);
    if (e < 0)
      fail(c, "server: tdl_tls_free: %s", strerror(-e));
  }
#endif
  if (T.hooked) {
    close(c->s_in);
    if (c->s_out != c->s_in)
      close(c->s_out);
  } else {
    tdl_close(c->s_in);
    if (c->s_out != c->s_in)
      tdl_close(c->s_out);
  }
  atomic_store(&c->s_done, true);
}

static void *s_writer(void *arg)
{
  conn *c = arg;
  uint8_t *buf = malloc(MAX_CALL);
  if (!buf) {
    fail(c, "server: no memory");
  } else {
    s_write_part(c, buf);
    s_shut_out(c);
  }
  free(buf);
  s_part_done(c);
  return NULL;
}

static void *serve(void *arg)
{
  conn *c = arg;
  uint8_t *buf = malloc(MAX_CALL);
  if (!buf) {
    fail(c, "server: no memory");
    s_part_done(c);
    return NULL;
  }
#if TORTURE_TLS
  if (c->transport == TLS) {
    /* The handshake cannot be retried after its deadline: a long one. */
    tdl_tls_config *cfg = c->tls_socket_bio ? T.tls_socket : T.tls_fiber;
    int e = tdl_tls_new(&c->s_tls, cfg, c->s_in, NULL);
    if (e == 0)
      e = tdl_tls_handshake(c->s_tls, tdl_after(10 * T.stall));
    if (e < 0) {
      if (!may_break(c))
        fail(c, "server: the handshake: %s (%s)", strerror(-e), c->s_tls ? tdl_tls_error(c->s_tls) : "");
      free(buf);
      s_part_done(c);
      return NULL;
    }
    if (tdl_tls_fiber_io(c->s_tls) == c->tls_socket_bio)
      fail(c, "server: tdl_tls_fiber_io says %d", tdl_tls_fiber_io(c->s_tls));
    /* Ahead and behind only where records go through fiber I/O (tls.h). */
    if (c->tls_socket_bio)
      c->ahead = c->behind = false;
  }
#endif
  if (c->ahead && tdl_fd_readahead(c->s_in, true) < 0)
    fail(c, "server: tdl_fd_readahead");
  if (c->behind && tdl_fd_writebehind(c->s_out, true) < 0)
    fail(c, "server: tdl_fd_writebehind");
  switch (c->mode) {
  case ECHO:
    s_read_part(c, buf, true);
    s_shut_out(c);
    break;
  case UPLOAD: {
    s_read_part(c, buf, false);
    uint64_t got = c->s_got;
    memcpy(buf, &got, sizeof got);
    /* The answer: not part of either stream, so not counted as sent. */
    uint64_t sent = c->s_sent;
    if (s_write_all(c, buf, sizeof got) < 0 && !may_break(c))
      fail(c, "server: the upload's answer failed");
    c->s_sent = sent;
    s_shut_out(c);
    break;
  }
  case DOWNLOAD:
    /* The client has shut its side already: its end waits to be read. */
    s_write_part(c, buf);
    s_shut_out(c);
    s_read_part(c, buf, false);
    break;
  case DUPLEX: {
    c->s_parts++;
    tdl_fiber_options o = {.name = "torture writer", .detached = true};
    if (tdl_fiber_spawn(NULL, tdl_fiber_loop(), s_writer, c, &o) < 0) {
      c->s_parts--;
      fail(c, "server: spawn");
    }
    s_read_part(c, buf, false);
    break;
  }
  }
  free(buf);
  s_part_done(c);
  return NULL;
}

/* ---- making connections ---- */

static void set_bufs(int fd, int size)
{
  if (size) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
}

static int listener = -1;

/* An accept made before its connection comes (so that, on io_uring, a
 * multishot accept is armed and keeps the connections that follow). */
typedef struct accept_one {
  int fd;
  bool done;
  tdl_fiber_t waiter;
} accept_one;

static void *acceptor(void *arg)
{
  accept_one *a = arg;
  a->fd = tdl_net_accept(listener, NULL, tdl_after(10 * T.stall));
  a->done = true;
  tdl_fiber_unpark(tdl_fiber_loop(), a->waiter);
  return NULL;
}

static int tcp_pair(int *srv, int *cli, int bufsize)
{
  if (listener < 0) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof a) < 0 || listen(listener, 4096) < 0)
      return -errno;
    /* On io_uring, accept ahead (a multishot accept keeps the next ones). */
    if (T.uring && !T.hooked && tdl_fd_readahead(listener, true) < 0)
      return -EIO;
  }
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  if (getsockname(listener, (struct sockaddr *)&a, &al) < 0)
    return -errno;
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c < 0)
    return -errno;
  set_bufs(c, bufsize);
  /* One at a time (the spawner's): static, so that an acceptor left
   * waiting when the connect fails writes nowhere it should not. */
  static accept_one acc;
  acc = (accept_one){.fd = -1, .waiter = tdl_fiber_self()};
  if (!T.hooked) {
    tdl_fiber_options o = {.name = "torture accept", .detached = true};
    int e = tdl_fiber_spawn(NULL, tdl_fiber_loop(), acceptor, &acc, &o);
    if (e < 0) {
      close(c);
      return e;
    }
    tdl_fiber_yield(); /* it waits in its accept now */
  }
  /* Without it Nagle's rule and the delayed acknowledgement make a
   * transfer through small buffers crawl, at 40 ms a window. */
  int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(c, (struct sockaddr *)&a, al) < 0) {
    int e = -errno;
    close(c);
    return e;
  }
  /* Hooked, a blocking library's accept; else treadle's, waiting. */
  int s;
  if (T.hooked) {
    s = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
  } else {
    while (!acc.done)
      (void)tdl_fiber_park(TDL_FOREVER);
    s = acc.fd;
    if (s < 0)
      errno = -s;
  }
  if (s < 0) {
    int e = -errno;
    close(c);
    return e;
  }
  /* Its send buffer only: a receive buffer shrunk after the handshake,
   * whose window scale was agreed for the listener's larger one, takes in
   * less than the window it advertises, so that whole segments are
   * dropped and sent again under a timer that doubles each time (a stall
   * of the kernel's, seconds long, on a loaded machine).  The client's,
   * set before its connect, is small in the other direction. */
  if (bufsize)
    setsockopt(s, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  *srv = s;
  *cli = c;
  return 0;
}

static int make_fds(conn *c)
{
  int e = 0;
  if (c->transport == TCP || (c->transport == TLS && !c->tls_unix)) {
    e = tcp_pair(&c->s_in, &c->c_in, c->bufsize);
    c->s_out = c->s_in;
    c->c_out = c->c_in;
  } else if (c->transport == UNIX || c->transport == TLS) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
      return -errno;
    set_bufs(sv[0], c->bufsize);
    set_bufs(sv[1], c->bufsize);
    c->s_in = c->s_out = sv[0];
    c->c_in = c->c_out = sv[1];
  } else {
    int up[2], down[2];
    if (pipe2(up, O_CLOEXEC) < 0)
      return -errno;
    if (pipe2(down, O_CLOEXEC) < 0) {
      e = -errno;
      close(up[0]);
      close(up[1]);
      return e;
    }
    if (c->bufsize) {
      fcntl(up[1], F_SETPIPE_SZ, c->bufsize);
      fcntl(down[1], F_SETPIPE_SZ, c->bufsize);
    }
    c->s_in = up[0];
    c->c_out = up[1];
    c->c_in = down[0];
    c->s_out = down[1];
  }
  if (e < 0)
    return e;
  /* The client's ends are non-blocking (its thread polls); the server's
   * are left blocking, as a program's would be (fiber I/O and the hook make
   * them non-blocking underneath). */
  fcntl(c->c_in, F_SETFL, O_NONBLOCK);
  fcntl(c->c_out, F_SETFL, O_NONBLOCK);
  if (c->s_user_nb) {
    fcntl(c->s_in, F_SETFL, O_NONBLOCK);
    fcntl(c->s_out, F_SETFL, O_NONBLOCK);
  }
  return 0;
}

/* ---- the client: one thread, poll(2) ---- */

static void c_close(conn *c)
{
#if TORTURE_TLS
  SSL_free(c->c_ssl);
  c->c_ssl = NULL;
#endif
  if (c->c_in >= 0)
    close(c->c_in);
  if (c->c_out >= 0 && c->c_out != c->c_in)
    close(c->c_out);
  c->c_in = c->c_out = -1;
  c->c_closed = true; /* c_done is set by the client's loop, its last touch of c */
}

static void c_shut(conn *c)
{
  if (c->c_shut)
    return;
  c->c_shut = true;
  if (c->transport == TLS) {
    /* close_notify, as soon as the handshake lets it go (c_tls_step). */
#if TORTURE_TLS
    c->c_shut_due = true;
#endif
  } else if (c->transport == PIPE) {
    close(c->c_out);
    c->c_out = -1;
  } else {
    shutdown(c->c_out, SHUT_WR);
  }
}

static void c_abort(conn *c)
{
  if (c->c_reset) {
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    setsockopt(c->c_in, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  __atomic_fetch_add(&T.aborts, 1, __ATOMIC_RELAXED);
  c_close(c);
}

/* What the client expects to read: the server's stream, the echo of its
 * own, or the upload's 8-byte count. */
static size_t c_expect(const conn *c) { return c->mode == UPLOAD ? 8 : c->s2c_len; }

/* After a call that took the client's count in a direction to `at` (of
 * `len`): pause for a spell at a drawn point, c_pauses times in all. */
static void c_pause(conn *c, rng *r, tdl_time_t *until, uint64_t *point, uint64_t at, uint64_t len,
                    tdl_time_t now)
{
  if (!c->c_pauses || at < *point)
    return;
  *until = now + (tdl_time_t)in(r, 1, c->c_pause_ms) * TDL_MSEC;
  *point = at + 1 + in(r, 0, len / c->c_pauses);
}

static uint8_t cbuf[MAX_CALL];

#if TORTURE_TLS
/* OpenSSL's last error on the client's thread, in words. */
static const char *ssl_why(int err)
{
  static char why[256];
  unsigned long e = ERR_get_error();
  if (e)
    ERR_error_string_n(e, why, sizeof why);
  else
    snprintf(why, sizeof why, "SSL error %d, errno %s", err, strerror(errno));
  ERR_clear_error();
  return why;
}

/* The client's TLS call: its count, or -EAGAIN (try again when poll says),
 * 0 at the clean end, or -EIO (said in *why). */
static ssize_t c_tls_io(conn *c, bool writing, size_t n, const char **why)
{
  ERR_clear_error();
  int r = writing ? SSL_write(c->c_ssl, cbuf, (int)n) : SSL_read(c->c_ssl, cbuf, (int)n);
  if (r > 0)
    return r;
  int err = SSL_get_error(c->c_ssl, r);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
    return -EAGAIN;
  if (err == SSL_ERROR_ZERO_RETURN)
    return 0;
  *why = ssl_why(err);
  return -EIO;
}

/* The client's handshake and close_notify; false when it is over (failed). */
static bool c_tls_step(conn *c)
{
  if (!c->c_hs_done) {
    ERR_clear_error();
    int r = SSL_do_handshake(c->c_ssl);
    int err = r == 1 ? 0 : SSL_get_error(c->c_ssl, r);
    if (r == 1) {
      c->c_hs_done = true;
    } else if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      c->c_hs_want = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
      return true;
    } else {
      if (c->s_abort_at < 0)
        fail(c, "client: the handshake: %s", ssl_why(err));
      c_close(c);
      return false;
    }
  }
  if (c->c_shut_due && !c->c_wretry) {
    ERR_clear_error();
    int r = SSL_shutdown(c->c_ssl);
    int err = r >= 0 ? 0 : SSL_get_error(c->c_ssl, r);
    if (r >= 0) {
      c->c_shut_due = false;
    } else if (err != SSL_ERROR_WANT_WRITE && err != SSL_ERROR_WANT_READ) {
      if (c->s_abort_at < 0)
        fail(c, "client: SSL_shutdown: %s", ssl_why(err));
      c_close(c);
      return false;
    }
  }
  return true;
}
#endif

static void c_write(conn *c, rng *r, tdl_time_t now)
{
  size_t n = log_size(r, c->cw_max);
  if (n > c->c2s_len - c->c_sent)
    n = (size_t)(c->c2s_len - c->c_sent);
  ssize_t w;
#if TORTURE_TLS
  if (c->transport == TLS) {
    /* A write that wanted to wait is made again with as many bytes. */
    if (c->c_wretry)
      n = c->c_wretry;
    stream_fill(c->key, c->c_sent, cbuf, n);
    const char *why = "";
    w = c_tls_io(c, true, n, &why);
    c->c_wretry = w == -EAGAIN ? n : 0;
    if (w == -EAGAIN)
      return;
    if (w <= 0) {
      if (c->s_abort_at < 0)
        fail(c, "client: TLS write at %" PRIu64 ": %s", c->c_sent, why);
      c_close(c);
      return;
    }
  } else
#endif
  {
    stream_fill(c->key, c->c_sent, cbuf, n);
    w = c->transport == PIPE ? write(c->c_out, cbuf, n) : send(c->c_out, cbuf, n, MSG_NOSIGNAL);
  }
  if (w < 0) {
    if (errno == EAGAIN)
      return;
    if (c->s_abort_at < 0)
      fail(c, "client: write at %" PRIu64 ": %s", c->c_sent, strerror(errno));
    c_close(c);
    return;
  }
  c->c_sent += (uint64_t)w;
  if (c->c_sent == c->c2s_len)
    c_shut(c);
  c_pause(c, r, &c->c_wpause, &c->c_wpoint, c->c_sent, c->c2s_len, now);
}

static void c_read(conn *c, rng *r, tdl_time_t now)
{
  size_t n = log_size(r, c->cr_max);
  ssize_t got;
#if TORTURE_TLS
  if (c->transport == TLS) {
    const char *why = "";
    got = c_tls_io(c, false, n, &why);
    if (got == -EAGAIN)
      return;
    if (got < 0) {
      if (c->s_abort_at < 0)
        fail(c, "client: TLS read at %" PRIu64 ": %s", c->c_got, why);
      c_close(c);
      return;
    }
  } else
#endif
    got = read(c->c_in, cbuf, n);
  if (got < 0) {
    if (errno == EAGAIN)
      return;
    if (c->s_abort_at < 0)
      fail(c, "client: read at %" PRIu64 ": %s", c->c_got, strerror(errno));
    c_close(c);
    return;
  }
  size_t want = c_expect(c);
  if (got == 0) {
    if (c->c_got != want && c->s_abort_at < 0)
      fail(c, "client: the server's stream ended at %" PRIu64 " of %zu", c->c_got, want);
    c->c_eof = true;
    return;
  }
  if (c->c_got + (uint64_t)got > want) {
    fail(c, "client: %zd bytes at %" PRIu64 ", beyond the %zu expected", got, c->c_got, want);
    c_close(c);
    return;
  }
  if (c->mode == UPLOAD) {
    memcpy(c->trailer + c->c_got, cbuf, (size_t)got);
  } else {
    uint64_t key = c->mode == ECHO ? c->key : ~c->key;
    int64_t bad = stream_check(key, c->c_got, cbuf, (size_t)got);
    if (bad >= 0) {
      fail(c, "client: byte %" PRId64 " from the server is wrong (read of %zd at %" PRIu64 ")", bad, got, c->c_got);
      c_close(c);
      return;
    }
  }
  c->c_got += (uint64_t)got;
  if (c->mode == UPLOAD && c->c_got == 8) {
    uint64_t count;
    memcpy(&count, c->trailer, sizeof count);
    if (count != c->c2s_len && c->s_abort_at < 0)
      fail(c, "client: the server counted %" PRIu64 " of %zu bytes", count, c->c2s_len);
  }
  c_pause(c, r, &c->c_rpause, &c->c_rpoint, c->c_got, c_expect(c), now);
}

/* One step of c, if poll said so; true when it is over. */
static bool c_step(conn *c, rng *r, short revents, short wevents, tdl_time_t now)
{
  if (c->c_abort_at >= 0 && c->c_sent + c->c_got >= (uint64_t)c->c_abort_at) {
    c_abort(c);
    return true;
  }
#if TORTURE_TLS
  if (c->transport == TLS) {
    if (!c_tls_step(c))
      return true;
    if (!c->c_hs_done)
      return false;
    /* What OpenSSL holds already decrypted, poll cannot see. */
    if (SSL_has_pending(c->c_ssl))
      revents |= POLLIN;
  }
#endif
  if ((wevents & (POLLOUT | POLLERR | POLLHUP)) && c->c_sent < c->c2s_len && now >= c->c_wpause)
    c_write(c, r, now);
  if (c->c_closed)
    return true;
  if ((revents & (POLLIN | POLLERR | POLLHUP)) && now >= c->c_rpause)
    c_read(c, r, now);
  if (c->c_closed)
    return true;
#if TORTURE_TLS
  if (c->c_shut_due)
    return false; /* the server reads to the close_notify */
#endif
  if (c->c_eof && (c->c_sent == c->c2s_len || c->s_abort_at >= 0)) {
    c_close(c);
    return true;
  }
  return false;
}

/* ---- the monitor: no connection stalls ---- */

static bool ready(int fd, short events)
{
  struct pollfd p = {.fd = fd, .events = events};
  return poll(&p, 1, 0) == 1 && (p.revents & (events | POLLHUP | POLLERR));
}

static int queued_in(int fd)
{
  int n = -1;
  ioctl(fd, FIONREAD, &n);
  return n;
}

static void monitor(conn *c, tdl_time_t now)
{
  if (atomic_load(&c->s_done))
    return;
  uint64_t p = atomic_load(&c->s_progress) + c->c_sent + c->c_got;
  if (p != c->m_progress || !c->m_since) {
    c->m_progress = p;
    c->m_since = now;
    c->m_stuck_since = 0;
    return;
  }
  /* No progress since m_since.  Parked with its fd ready? */
  bool rstuck = atomic_load(&c->s_rwait) && ready(c->s_in, POLLIN);
  bool wstuck = atomic_load(&c->s_wwait) && ready(c->s_out, POLLOUT);
  if (rstuck || wstuck) {
    if (!c->m_stuck_since)
      c->m_stuck_since = now;
    else if (now - c->m_stuck_since > T.stall)
      fail(c, "stall: the server has waited %.1f s in a %s with its fd ready (%d bytes queued for it)",
           (double)(now - c->m_stuck_since) / TDL_SEC, rstuck ? "read" : "write", queued_in(c->s_in));
  } else {
    c->m_stuck_since = 0;
  }
  if (now - c->m_since > 10 * T.stall && now > c->c_rpause && now > c->c_wpause)
    fail(c, "stall: no progress for %.1f s (server in a read: %d, in a write: %d; %d bytes queued for it)",
         (double)(now - c->m_since) / TDL_SEC, atomic_load(&c->s_rwait), atomic_load(&c->s_wwait),
         queued_in(c->s_in));
}

static void *client_thread(void *arg)
{
  (void)arg;
  enum { MAXC = 4096 };
  static conn *cs[MAXC];
  static rng rs[MAXC];
  static struct pollfd pf[2 * MAXC + 1];
  unsigned n = 0;
  tdl_time_t last_monitor = 0;
  while (!atomic_load(&T.stop) || n) {
    pthread_mutex_lock(&T.lock);
    for (unsigned i = 0; i < T.n_incoming && n < MAXC; i++) {
      cs[n] = T.incoming[i];
      rs[n] = (rng){cs[n]->key ^ 0xc11e};
#if TORTURE_TLS
      conn *c = cs[n];
      if (c->transport == TLS) {
        /* Partial writes: a full buffer takes what it can, as write(2). */
        c->c_ssl = SSL_new(T.tls_client);
        if (!c->c_ssl || !SSL_set_fd(c->c_ssl, c->c_in)) {
          fail(c, "client: SSL_new: %s", ssl_why(0));
          return NULL;
        }
        SSL_set_mode(c->c_ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        SSL_set_connect_state(c->c_ssl);
        c->c_hs_want = POLLOUT;
      }
#endif
      n++;
    }
    T.n_incoming = 0;
    pthread_mutex_unlock(&T.lock);
    tdl_time_t now = now_ns(), wake = now + 10 * TDL_MSEC;
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
      conn *c = cs[i];
      short rev = 0, wev = 0;
#if TORTURE_TLS
      if (c->transport == TLS && !c->c_hs_done) {
        /* The handshake first. */
        pf[k++] = (struct pollfd){.fd = c->c_in, .events = c->c_hs_want};
        pf[k++] = (struct pollfd){.fd = -1};
        continue;
      }
      if (c->transport == TLS && !c->c_eof && now >= c->c_rpause && SSL_has_pending(c->c_ssl))
        wake = now;
#endif
      if (!c->c_eof && now >= c->c_rpause)
        rev = POLLIN;
      else if (!c->c_eof && c->c_rpause < wake)
        wake = c->c_rpause;
      if (c->c_sent < c->c2s_len && now >= c->c_wpause)
        wev = POLLOUT;
      else if (c->c_sent < c->c2s_len && c->c_wpause < wake)
        wake = c->c_wpause;
#if TORTURE_TLS
      if (c->c_shut_due)
        wev = POLLOUT; /* the close_notify to go */
#endif
      pf[k++] = (struct pollfd){.fd = rev ? c->c_in : -1, .events = rev};
      pf[k++] = (struct pollfd){.fd = wev ? c->c_out : -1, .events = wev};
    }
    pf[k++] = (struct pollfd){.fd = T.wake[0], .events = POLLIN};
    int ms = (int)((wake - now + TDL_MSEC - 1) / TDL_MSEC);
    if (poll(pf, k, ms < 1 ? 1 : ms) < 0 && errno != EINTR) {
      fail(NULL, "client: poll: %s", strerror(errno));
      return NULL;
    }
    if (pf[k - 1].revents) {
      char b[64];
      while (read(T.wake[0], b, sizeof b) > 0)
        ;
    }
    now = now_ns();
    for (unsigned i = 0; i < n;) {
      if (c_step(cs[i], &rs[i], pf[2 * i].revents, pf[2 * i + 1].revents, now)) {
        /* Over: the run frees it once both sides say so, so this store is
         * the client's last touch of it.  Keep pf in step with cs: the one
         * moved into i's place keeps its events for the next round. */
        atomic_store(&cs[i]->c_done, true);
        cs[i] = cs[n - 1];
        rs[i] = rs[n - 1];
        pf[2 * i] = pf[2 * i + 1] = (struct pollfd){.fd = -1};
        pf[2 * (n - 1)] = pf[2 * (n - 1) + 1] = (struct pollfd){.fd = -1};
        n--;
        /* The one moved here has not had its step: give it one now with no
         * events (it may be due to abort). */
        continue;
      }
      i++;
    }
    if (now - last_monitor >= 100 * TDL_MSEC) {
      last_monitor = now;
      for (unsigned i = 0; i < n; i++)
        monitor(cs[i], now);
    }
  }
  return NULL;
}

/* ---- the run: a fiber keeps `at_once` connections going ---- */

static void fail_now(void)
{
  fprintf(stderr, "torture: FAILED (seed %" PRIu64 ", replay: TDL_TORTURE_SEED=%" PRIu64 "%s TDL_BACKEND=%s)\n  %s\n",
          T.seed, T.seed, T.hooked ? " TDL_TORTURE_HOOKED=1" : "", tdl_loop_backend(T.loop), T.why);
  tdl_fiber_dump(T.loop, STDERR_FILENO);
  fflush(stderr);
  if (getenv("TDL_TORTURE_PAUSE"))
    pause(); /* for a debugger: gdb -p PID, then `info fibers` (gdb/treadle.py) */
  _exit(1);
}

static void *run(void *arg)
{
  (void)arg;
  enum { MAXC = 4096 };
  static conn *live[MAXC];
  unsigned n = 0, next_id = T.only >= 0 ? (unsigned)T.only : 0;
  tdl_time_t start = tdl_now(), end = start + (tdl_time_t)(T.seconds * TDL_SEC);
  for (;;) {
    if (atomic_load(&T.failed))
      fail_now();
    bool more = tdl_now() < end;
    while (more && n < T.at_once) {
      conn *c = calloc(1, sizeof *c);
      if (!c) {
        fail(NULL, "no memory");
        break;
      }
      draw(c, next_id);
      if (T.only < 0)
        next_id++;
      int e = make_fds(c);
      if (e < 0) {
        fail(c, "making the connection: %s", strerror(-e));
        free(c);
        break;
      }
      c->s_parts = 1;
      if (c->c2s_len == 0)
        c_shut(c); /* the client sends nothing: its end is there from the start */
      tdl_fiber_options o = {.name = "torture", .detached = true};
      if ((e = tdl_fiber_spawn(&c->s_main, tdl_fiber_loop(), serve, c, &o)) < 0) {
        fail(c, "spawn: %s", strerror(-e));
        break;
      }
      c->born = tdl_now();
      pthread_mutex_lock(&T.lock);
      T.incoming[T.n_incoming++] = c;
      pthread_mutex_unlock(&T.lock);
      live[n++] = c;
      T.conns++;
      T.tls_conns += c->transport == TLS;
      (void)!write(T.wake[1], "", 1);
    }
    for (unsigned i = 0; i < n;) {
      conn *c = live[i];
      if (atomic_load(&c->s_done) && atomic_load(&c->c_done)) {
        T.bytes += c->s_got + c->s_sent;
        T.conn_seconds += (double)(tdl_now() - c->born) / TDL_SEC;
        if (tdl_now() - c->born > T.slowest) {
          T.slowest = tdl_now() - c->born;
          describe(c, T.slowest_who, sizeof T.slowest_who);
        }
        live[i] = live[--n];
        free(c);
        continue;
      }
      i++;
    }
    if (!more && !n)
      break;
    tdl_sleep(tdl_after(2 * TDL_MSEC));
  }
  if (listener >= 0) {
    if (T.hooked)
      close(listener);
    else
      tdl_close(listener);
    listener = -1;
  }
  return NULL;
}

#if TORTURE_TLS
/* A key and a self-signed certificate for the server, made here (no key is
 * ever committed), PEM in memory; and the configurations: records through
 * fiber I/O, or OpenSSL's socket BIO.  The client trusts anything: what is
 * tortured is the stream, not verification (test_tls has that). */
static int tls_setup(void)
{
  int rc = -1;
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *x = X509_new();
  BIO *cb = BIO_new(BIO_s_mem()), *kb = BIO_new(BIO_s_mem());
  char *cert = NULL, *pkey = NULL, *cp, *kp, err[256] = "";
  if (!key || !x || !cb || !kb)
    goto out;
  X509_NAME *name = X509_get_subject_name(x);
  if (!X509_set_version(x, 2) || !ASN1_INTEGER_set(X509_get_serialNumber(x), 1) ||
      !X509_gmtime_adj(X509_getm_notBefore(x), -3600) || !X509_gmtime_adj(X509_getm_notAfter(x), 86400) ||
      !X509_set_pubkey(x, key) ||
      !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0) ||
      !X509_set_issuer_name(x, name) || !X509_sign(x, key, EVP_sha256()) || !PEM_write_bio_X509(cb, x) ||
      !PEM_write_bio_PrivateKey(kb, key, NULL, NULL, 0, NULL, NULL))
    goto out;
  long cl = BIO_get_mem_data(cb, &cp), kl = BIO_get_mem_data(kb, &kp);
  cert = strndup(cp, (size_t)cl);
  pkey = strndup(kp, (size_t)kl);
  if (!cert || !pkey)
    goto out;
  /* No kernel TLS: records stay where the test can drive them. */
  tdl_tls_options o = {.role = TDL_TLS_SERVER, .cert_pem = cert, .key_pem = pkey, .no_resumption = true,
                       .no_ktls = true, .error = err, .error_cap = sizeof err};
  unsetenv("TREADLE_TLS_BIO");
  if (tdl_tls_config_new(&T.tls_fiber, &o) < 0)
    goto out;
  setenv("TREADLE_TLS_BIO", "socket", 1); /* read when a configuration is made (tls.h) */
  int e = tdl_tls_config_new(&T.tls_socket, &o);
  unsetenv("TREADLE_TLS_BIO");
  if (e < 0)
    goto out;
  T.tls_client = SSL_CTX_new(TLS_client_method());
  if (!T.tls_client)
    goto out;
  SSL_CTX_set_verify(T.tls_client, SSL_VERIFY_NONE, NULL);
  rc = 0;
out:
  if (rc < 0)
    fprintf(stderr, "torture: TLS set-up failed: %s\n", *err ? err : ssl_why(0));
  free(cert);
  free(pkey);
  BIO_free(cb);
  BIO_free(kb);
  X509_free(x);
  EVP_PKEY_free(key);
  return rc;
}

static void tls_teardown(void)
{
  tdl_tls_config_free(T.tls_fiber);
  tdl_tls_config_free(T.tls_socket);
  SSL_CTX_free(T.tls_client);
}
#endif

/* The loop itself must never stall: a fiber that keeps it from its poll
 * (a call that blocked the thread) fails the run, with its call chain. */
static void watchdog(const tdl_watchdog_report *r, void *data)
{
  (void)data;
  fail(NULL, "the loop was away from its poll for %.0f ms, in fiber %" PRIu64 " \"%s\"\n%s",
       (double)r->away / TDL_MSEC, r->fiber_id, r->fiber ? r->fiber : "(a callback)", tdl_watchdog_report_chain(r));
}

static const char *env(const char *name) { return getenv(name) && *getenv(name) ? getenv(name) : NULL; }

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  T.seed = env("TDL_TORTURE_SEED") ? strtoull(env("TDL_TORTURE_SEED"), NULL, 0) : (uint64_t)now_ns() ^ (uint64_t)getpid();
  /* Under valgrind (scripts/valgrind-tests.sh runs it as it is) a shorter
   * run of fewer connections: what memcheck looks for shows in any. */
  T.seconds = env("TDL_TORTURE_SECONDS") ? atof(env("TDL_TORTURE_SECONDS")) : RUNNING_ON_VALGRIND ? 2 : 5;
  T.at_once = env("TDL_TORTURE_CONNS") ? (unsigned)atoi(env("TDL_TORTURE_CONNS")) : RUNNING_ON_VALGRIND ? 16 : 48;
  T.only = env("TDL_TORTURE_ONLY") ? atol(env("TDL_TORTURE_ONLY")) : -1;
  T.hooked = env("TDL_TORTURE_HOOKED") != NULL;
  /* A second, as a user would count a stall; more where the build or the
   * machine runs slower than the kernel's wake-ups (a sanitizer beside
   * other CI jobs, valgrind), so that only a real stall reaches it. */
  T.stall = (RUNNING_ON_VALGRIND ? 20 : SLOW_BUILD ? 3 : 1) * TDL_SEC;
  if (T.at_once < 1 || T.at_once > 1024)
    T.at_once = 48;
  printf("torture: seed %" PRIu64 " (TDL_TORTURE_SEED replays it), %.0f s, %u connections at once%s\n", T.seed,
         T.seconds, T.at_once, T.hooked ? ", hooked" : "");
  fflush(stdout);
  pthread_mutex_init(&T.lock, NULL);
  if (pipe2(T.wake, O_NONBLOCK | O_CLOEXEC) < 0)
    return perror("pipe"), 1;
  int e = tdl_loop_new(&T.loop, NULL); /* $TDL_BACKEND's */
  if (e < 0 && env("TDL_BACKEND") && !strcmp(env("TDL_BACKEND"), "uring") &&
      (e == -ENOSYS || e == -EPERM || e == -ENOMEM)) {
    printf("torture: skipped: no io_uring loop here (%s)\n", tdl_strerror(e));
    return 77;
  }
  if (e < 0) {
    fprintf(stderr, "torture: a loop: %s\n", tdl_strerror(e));
    return 1;
  }
  T.uring = strcmp(tdl_loop_backend(T.loop), "uring") == 0;
#if TORTURE_TLS
  T.tls = !T.hooked;
  if (T.tls && tls_setup() < 0)
    return 1;
#endif
  tdl_watchdog_options wo = {.threshold = T.stall, .cb = watchdog, .name = "torture"};
  if ((e = tdl_watchdog_start(T.loop, &wo)) < 0) {
    fprintf(stderr, "torture: the watchdog: %s\n", tdl_strerror(e));
    return 1;
  }
  pthread_t client;
  if (pthread_create(&client, NULL, client_thread, NULL) != 0)
    return perror("pthread_create"), 1;
  tdl_fiber_options o = {.name = "torture run", .detached = true};
  if ((e = tdl_fiber_spawn(NULL, T.loop, run, NULL, &o)) < 0)
    return fprintf(stderr, "spawn: %s\n", tdl_strerror(e)), 1;
  e = tdl_loop_run(T.loop, TDL_LOOP_DEFAULT);
  atomic_store(&T.stop, true);
  (void)!write(T.wake[1], "", 1);
  pthread_join(client, NULL);
  if (atomic_load(&T.failed))
    fail_now();
  if (e < 0) {
    fprintf(stderr, "torture: the loop: %s\n", tdl_strerror(e));
    return 1;
  }
  if ((e = tdl_loop_free(T.loop)) < 0) {
    fprintf(stderr, "torture: tdl_loop_free: %s\n", tdl_strerror(e));
    return 1;
  }
#if TORTURE_TLS
  if (T.tls)
    tls_teardown();
#endif
  printf("torture: %" PRIu64 " connections (%" PRIu64 " over TLS), %.1f MiB checked, %.0f connection-seconds, %" PRIu64
         " deadlines passed and retried, %" PRIu64 " clients aborted: passed\n",
         T.conns, T.tls_conns, (double)T.bytes / (1 << 20), T.conn_seconds, T.timeouts, T.aborts);
  printf("torture: the slowest took %.1f s: %s\n", (double)T.slowest / TDL_SEC, T.slowest_who);
  return 0;
}
