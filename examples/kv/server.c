/* SPDX-License-Identifier: MIT */
/*
 * kv: a Redis-protocol server on treadle, one fiber per connection.
 *
 * Each connection's fiber answers every command already buffered (a
 * pipelined batch), appending the answers to a tdl_writer, then flushes them
 * in one send() and reads again: one read and one write per batch, and no
 * read that would only hear EAGAIN (fiber I/O knows the stream is empty).
 * WAITKEY parks its fiber on two things at once, a write of the key (an
 * unpark) and the client's socket (so that a client that hangs up is seen),
 * with tdl_select: no helper fiber.
 *
 * Commands: GET SET DEL INCR EXISTS PING ECHO, WAITKEY key [timeout-ms]
 * (answers the key's value once another client writes it, or nil at the
 * timeout), KVSTATS (connections and waiting fibers now), CONFIG GET
 * (answers an empty list; redis-benchmark asks).
 * Answers and errors are Redis's own, byte for byte, for these commands.
 *
 * With a TLS configuration (cfg->tls, in a build with libtreadle-tls), each
 * connection's fiber first runs the handshake within cfg->handshake_timeout,
 * then reads and writes through the same tdl_reader and tdl_writer, set up
 * over the TLS stream (tls.h): the code above the stream does not change.
 */
#include "server.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "resp.h"
#include "store.h"
#ifdef KV_TLS
#include <treadle/tls.h>
#endif

enum { RBUF = 16 * 1024, WBUF = 16 * 1024 };
#define BIG_VALUE ((size_t)1 << 20) /* larger values skip the writer */

typedef struct conn {
  int fd;
  struct tdl_tls *tls; /* TLS: every byte goes through it; NULL: plain */
  tdl_reader r;
  tdl_writer w;
  const kv_config *cfg;
  char rmem[RBUF], wmem[WBUF];
} conn;

static kv_stats stats;

const kv_stats *kv_stats_get(void) { return &stats; }

/* ---- answers ---- */

static int put_line(conn *c, char type, const char *s)
{
  char t[1] = {type};
  int e;
  if ((e = tdl_writer_put(&c->w, t, 1)) < 0 || (e = tdl_writer_puts(&c->w, s)) < 0)
    return e;
  return tdl_writer_put(&c->w, "\r\n", 2);
}

static int put_int(conn *c, long long v)
{
  int e;
  if ((e = tdl_writer_put(&c->w, ":", 1)) < 0 || (e = tdl_writer_put_i64(&c->w, v)) < 0)
    return e;
  return tdl_writer_put(&c->w, "\r\n", 2);
}

static int put_bulk(conn *c, const char *p, size_t n)
{
  int e;
  if ((e = tdl_writer_put(&c->w, "$", 1)) < 0 || (e = tdl_writer_put_u64(&c->w, n)) < 0 ||
      (e = tdl_writer_put(&c->w, "\r\n", 2)) < 0)
    return e;
  if (n >= BIG_VALUE) { /* out of the writer: what is queued first, then it */
    tdl_time_t deadline = tdl_after(c->cfg->io_timeout);
    if ((e = tdl_writer_flush(&c->w, deadline)) < 0)
      return e;
#ifdef KV_TLS
    if (c->tls) {
      if ((e = tdl_tls_send_all(c->tls, p, n, NULL, deadline)) < 0)
        return e;
      return tdl_tls_send_all(c->tls, "\r\n", 2, NULL, deadline);
    }
#endif
    struct iovec iov[2] = {{(void *)p, n}, {"\r\n", 2}};
    return tdl_net_send_allv(c->fd, iov, 2, NULL, deadline);
  }
  if ((e = tdl_writer_put(&c->w, p, n)) < 0)
    return e;
  return tdl_writer_put(&c->w, "\r\n", 2);
}

/* Bytes that TLS has already decrypted and the reader not yet taken: they
 * make the socket no more readable, so a wait on it would miss them. */
static bool pending(const conn *c)
{
#ifdef KV_TLS
  return c->tls && tdl_tls_pending(c->tls) > 0;
#else
  (void)c;
  return false;
#endif
}

static int put_nil(conn *c) { return tdl_writer_put(&c->w, "$-1\r\n", 5); }

static int wrong_args(conn *c, const char *name)
{
  char msg[128];
  snprintf(msg, sizeof msg, "ERR wrong number of arguments for '%s' command", name);
  return put_line(c, '-', msg);
}

/* ---- commands ---- */

static bool is(const resp_arg *a, const char *name)
{
  size_t n = strlen(name);
  if (a->len != n)
    return false;
  for (size_t i = 0; i < n; i++)
    if (tolower((unsigned char)a->p[i]) != name[i])
      return false;
  return true;
}

/* Redis's string2ll: no sign but '-', no leading zeros, no spaces. */
static bool to_ll(const char *p, size_t n, long long *out)
{
  if (n == 0 || n > 20)
    return false;
  if (n == 1 && p[0] == '0') {
    *out = 0;
    return true;
  }
  bool neg = p[0] == '-';
  size_t i = neg;
  if (i == n || p[i] < '1' || p[i] > '9')
    return false;
  unsigned long long v = 0;
  for (; i < n; i++) {
    if (p[i] < '0' || p[i] > '9' || v > (ULLONG_MAX - (unsigned)(p[i] - '0')) / 10)
      return false;
    v = v * 10 + (unsigned)(p[i] - '0');
  }
  if (neg ? v > (unsigned long long)LLONG_MAX + 1 : v > (unsigned long long)LLONG_MAX)
    return false;
  *out = neg ? (long long)(0 - v) : (long long)v;
  return true;
}

static int cmd_incr(conn *c, const resp_arg *key)
{
  entry *e = store_find(key->p, key->len, true);
  if (!e)
    return put_line(c, '-', "ERR out of memory");
  long long v = 0;
  if (e->val && !to_ll(e->val, e->vlen, &v)) {
    store_forget_if_empty(e);
    return put_line(c, '-', "ERR value is not an integer or out of range");
  }
  if (v == LLONG_MAX)
    return put_line(c, '-', "ERR increment or decrement would overflow");
  char buf[24];
  int n = snprintf(buf, sizeof buf, "%lld", v + 1);
  if (store_set(e, buf, (size_t)n) < 0)
    return put_line(c, '-', "ERR out of memory");
  return put_int(c, v + 1);
}

/* WAITKEY key [timeout-ms]: park until another client writes key (answer:
 * its value), the timeout (nil), or this client hangs up (no answer). */
static int cmd_waitkey(conn *c, const resp_cmd *cmd)
{
  long long ms = 0;
  if (cmd->argc == 3 && (!to_ll(cmd->argv[2].p, cmd->argv[2].len, &ms) || ms < 0))
    return put_line(c, '-', "ERR timeout is not an integer or out of range");
  /* What is queued goes first: the client may wait on our answers. */
  int e = tdl_writer_flush(&c->w, tdl_after(c->cfg->io_timeout));
  if (e < 0)
    return e;
  entry *en = store_find(cmd->argv[1].p, cmd->argv[1].len, true);
  if (!en)
    return put_line(c, '-', "ERR out of memory");
  waiter w = {.fiber = tdl_fiber_self()};
  store_wait(en, &w);
  stats.waiting++;
  tdl_time_t deadline = ms ? tdl_after(ms * TDL_MSEC) : TDL_FOREVER;
  int r;
  for (;;) {
    tdl_select_op ops[] = {
        {.kind = TDL_SELECT_PARK},
        {.kind = TDL_SELECT_FD, .fd = c->fd, .events = TDL_READ},
    };
    r = pending(c) ? 1 : tdl_select(ops, 2, deadline);
    if (r != 1)
      break;
    /* The client sent something: more commands (kept for later) or EOF. */
    ssize_t n = tdl_reader_fill(&c->r, 0);
    if (n == 0 || (n < 0 && n != -ETIMEDOUT)) {
      r = -EPIPE; /* gone, or sending more than we may hold meanwhile */
      break;
    }
  }
  store_unwait(&w);
  stats.waiting--;
  if (r == 0 && en->val) {
    e = put_bulk(c, en->val, en->vlen);
  } else {
    store_forget_if_empty(en);
    e = r == -ETIMEDOUT ? put_nil(c) : r < 0 ? r : put_nil(c);
  }
  return e;
}

/* Run one command, appending its answer.  < 0: the connection is done. */
static int execute(conn *c, const resp_cmd *cmd)
{
  const resp_arg *a = cmd->argv;
  int n = cmd->argc;
  stats.commands++;
  if (n == 0)
    return 0; /* an empty array: nothing, as Redis */
  if (is(&a[0], "get")) {
    if (n != 2)
      return wrong_args(c, "get");
    entry *e = store_find(a[1].p, a[1].len, false);
    return e && e->val ? put_bulk(c, e->val, e->vlen) : put_nil(c);
  }
  if (is(&a[0], "set")) {
    if (n != 3)
      return n < 3 ? wrong_args(c, "set") : put_line(c, '-', "ERR syntax error");
    entry *e = store_find(a[1].p, a[1].len, true);
    if (!e || store_set(e, a[2].p, a[2].len) < 0)
      return put_line(c, '-', "ERR out of memory");
    return put_line(c, '+', "OK");
  }
  if (is(&a[0], "del") || is(&a[0], "exists")) {
    bool del = is(&a[0], "del");
    if (n < 2)
      return wrong_args(c, del ? "del" : "exists");
    long long k = 0;
    for (int i = 1; i < n; i++) {
      entry *e = store_find(a[i].p, a[i].len, false);
      if (e && e->val)
        k += del ? store_del(e) : 1;
    }
    return put_int(c, k);
  }
  if (is(&a[0], "incr"))
    return n != 2 ? wrong_args(c, "incr") : cmd_incr(c, &a[1]);
  if (is(&a[0], "ping")) {
    if (n > 2)
      return wrong_args(c, "ping");
    return n == 2 ? put_bulk(c, a[1].p, a[1].len) : put_line(c, '+', "PONG");
  }
  if (is(&a[0], "echo"))
    return n != 2 ? wrong_args(c, "echo") : put_bulk(c, a[1].p, a[1].len);
  if (is(&a[0], "waitkey"))
    return n != 2 && n != 3 ? wrong_args(c, "waitkey") : cmd_waitkey(c, cmd);
  if (is(&a[0], "kvstats")) { /* kv's own: what its fibers do now */
    char line[96];
    int len = snprintf(line, sizeof line, "connections:%ld waiting:%ld", stats.connections, stats.waiting);
    return put_bulk(c, line, (size_t)len);
  }
  if (is(&a[0], "config") && n >= 2 && is(&a[1], "get"))
    return tdl_writer_put(&c->w, "*0\r\n", 4);
  char msg[96];
  snprintf(msg, sizeof msg, "ERR unknown command '%.*s'", (int)(a[0].len > 40 ? 40 : a[0].len), a[0].p);
  return put_line(c, '-', msg);
}

/* ---- connections ---- */

/* Answer every complete command buffered; how many bytes the next command
 * needs in all (0: unknown) goes to *want.  < 0: close. */
static int answer_buffered(conn *c, resp_cmd *cmd, size_t *want)
{
  for (;;) {
    const char *err = NULL;
    long n = resp_parse(tdl_reader_data(&c->r), tdl_reader_len(&c->r), c->cfg->max_request, cmd, want, &err);
    if (n < 0) {
      char msg[128];
      snprintf(msg, sizeof msg, "ERR %s", err);
      put_line(c, '-', msg);
      tdl_writer_flush(&c->w, tdl_after(c->cfg->io_timeout));
      return -EPROTO;
    }
    if (n == 0)
      return 0;
    int e = execute(c, cmd);
    tdl_reader_consume(&c->r, (size_t)n); /* after: the arguments point into the buffer */
    if (e < 0)
      return e;
  }
}

#ifdef KV_TLS
/* A client that does not speak TLS (a plaintext redis-cli): end with a FIN
 * after reading what it sent, not with the RST that closing over unread
 * bytes makes, so that it sees the server close.  Bounded in time and
 * bytes. */
static void refuse(conn *c)
{
  if (tdl_net_shutdown(c->fd, SHUT_WR) < 0)
    return;
  tdl_time_t deadline = tdl_after(2 * TDL_SEC);
  size_t total = 0;
  while (total < RBUF) {
    ssize_t n = tdl_read(c->fd, c->rmem, RBUF, deadline);
    if (n <= 0)
      break;
    total += (size_t)n;
  }
}
#endif

/* Set up c's reader and writer, over TLS after its handshake when the
 * server speaks TLS. */
static int conn_open(conn *c)
{
  /* The largest request: the largest argument and room for the rest. */
  size_t max = c->cfg->max_request + 64 * 1024;
  if (max < RBUF)
    max = RBUF;
  int e;
#ifdef KV_TLS
  if (c->cfg->tls) {
    /* Within its own deadline: a client that says nothing, half a hello or
     * plaintext is closed, quietly. */
    if ((e = tdl_tls_new(&c->tls, c->cfg->tls, c->fd, NULL)) < 0)
      return e;
    if ((e = tdl_tls_handshake(c->tls, tdl_after(c->cfg->handshake_timeout))) < 0) {
      if (e == -EPROTO)
        refuse(c);
      return e;
    }
    /* Records through fiber I/O from here (tdl_tls_fiber_io): then the
     * fd may receive ahead and send behind, as plaintext connections do. */
    if (tdl_tls_fiber_io(c->tls)) {
      (void)tdl_fd_readahead(c->fd, true);
      (void)tdl_fd_writebehind(c->fd, true);
    }
    if ((e = tdl_tls_reader_init(&c->r, c->tls, c->rmem, RBUF, max)) < 0)
      return e;
    return tdl_tls_writer_init(&c->w, c->tls, c->wmem, WBUF, (size_t)64 << 20);
  }
#endif
  if ((e = tdl_reader_init(&c->r, c->fd, c->rmem, RBUF, max)) < 0)
    return e;
  return tdl_writer_init(&c->w, c->fd, c->wmem, WBUF, (size_t)64 << 20);
}

static void *connection(void *arg)
{
  conn *c = arg;
  resp_cmd *cmd = malloc(sizeof *cmd);
  stats.connections++;
  if (cmd && conn_open(c) == 0) {
    for (;;) {
      size_t want = 0;
      if (answer_buffered(c, cmd, &want) < 0)
        break;
      if (tdl_writer_len(&c->w) && tdl_writer_flush(&c->w, tdl_after(c->cfg->io_timeout)) < 0)
        break;
      tdl_time_t idle = c->cfg->idle_timeout ? tdl_after(c->cfg->idle_timeout) : TDL_FOREVER;
      ssize_t got = want > tdl_reader_len(&c->r) ? tdl_reader_need(&c->r, want, idle) : tdl_reader_fill(&c->r, idle);
      if (got == -EMSGSIZE) {
        put_line(c, '-', "ERR Protocol error: request larger than the server's maximum");
        tdl_writer_flush(&c->w, tdl_after(c->cfg->io_timeout));
        break;
      }
      if (got <= 0)
        break; /* EOF, a reset, the idle timeout, a cancel */
    }
  }
#ifdef KV_TLS
  /* close_notify, so that the client sees an end and not a truncation (a
   * stream that failed refuses at once). */
  if (c->tls)
    (void)tdl_tls_shutdown(c->tls, tdl_after(c->cfg->io_timeout));
#endif
  tdl_reader_destroy(&c->r);
  tdl_writer_destroy(&c->w);
#ifdef KV_TLS
  tdl_tls_free(c->tls); /* after the reader and writer, which it carries */
#endif
  tdl_close(c->fd);
  free(cmd);
  free(c);
  stats.connections--;
  return NULL;
}

int kv_serve(int lfd, const kv_config *cfg)
{
  int e = store_init(1024);
  if (e < 0)
    return e;
  (void)tdl_fd_readahead(lfd, true); /* on uring, accept ahead too (-ENOTSUP elsewhere) */
  for (;;) {
    int fd = tdl_net_accept(lfd, NULL, TDL_FOREVER);
    /* Out of fds, of memory or of socket buffers: net.h has shed or backed
     * off already, and the shortage passes; it is no reason to stop serving
     * everyone. */
    if (fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM || fd == -ENOBUFS)
      continue;
    if (fd < 0)
      return fd == -ECANCELED ? 0 : fd;
    tdl_net_nodelay(fd, true);
    /* On a uring loop ($TDL_BACKEND=uring), receive ahead and send behind
     * (fiber.h): the kernel receives requests as they come, and the answers
     * of a whole loop iteration go with its one io_uring_enter, as Redis
     * writes its clients' replies before it sleeps.  Every read and write of
     * fd is treadle's, and tdl_close closes it, as both ask.  Elsewhere they
     * are -ENOTSUP, and nothing changes.  Over TLS, only after the
     * handshake, which OpenSSL reads and writes itself (tls.h, conn_open). */
    if (!cfg->tls) {
      (void)tdl_fd_readahead(fd, true);
      (void)tdl_fd_writebehind(fd, true);
    }
    conn *c = malloc(sizeof *c);
    if (c) {
      c->fd = fd;
      c->cfg = cfg;
      c->tls = NULL;
      /* Zeroed, destroying them is harmless when setting up fails halfway. */
      memset(&c->r, 0, sizeof c->r);
      memset(&c->w, 0, sizeof c->w);
    }
    if (!c || tdl_fiber_spawn(NULL, tdl_fiber_loop(), connection, c, &(tdl_fiber_options){.name = "conn", .detached = true}) < 0) {
      free(c);
      tdl_close(fd);
    }
  }
}
