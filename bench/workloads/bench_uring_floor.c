/* SPDX-License-Identifier: MIT */
/*
 * uring-floor: the floor under the echo and HTTP figures on io_uring.  No
 * treadle on the measured path: one thread, one ring, liburing called
 * directly, the least work a server on io_uring can do for these two
 * workloads on the machine at hand.  It plays the part `xping --floor 1` plays for
 * the loops group: how close treadle comes to what io_uring itself allows.
 *
 *   uring-floor --listen ADDR [--mode echo|http] [--recv single|multishot]
 *               [--accept multishot|single|eager] [--send plain|ring]
 *
 * The listener is made with tdl_net_listen_str (ADDR as echo-server reads it;
 * not on the measured path).  The server prints "PORT n" on stdout, serves
 * until its stdin reaches end of file (or SIGTERM's default action ends it),
 * then prints "SERVED conns=N bytes=B" and exits 0, as echo-server does, so
 * that bench/drivers/echo_driver.py can check the bytes echoed (http: B counts the
 * bytes received, and " requests=R" follows).
 *
 * The ring: SINGLE_ISSUER | DEFER_TASKRUN, completion queue 8 x the
 * submission queue, its fd registered, as treadle's uring back end does; a
 * kernel that refuses the flags gets a plain ring (stderr says which).  The
 * submission queue is larger than treadle's (RING_SQ), so that re-arming a
 * receive on each of 1000 connections fits in one pass.  One multishot
 * accept on the listener, TCP_NODELAY on every connection, stdin watched by
 * a POLL_ADD in the same ring, every completion handled in one pass per
 * io_uring_submit_and_wait.
 *
 *   --recv single     one IORING_OP_RECV per connection into its own 16 KiB
 *                     buffer (echo-server's and httpd's size), armed again
 *                     after each completion.
 *   --recv inc        multishot, from a provided-buffer ring registered with
 *                     IOU_PBUF_RING_INC (Linux 6.12): PBUF_INC_COUNT buffers
 *                     of PBUF_INC_SIZE, each consumed incrementally, so the
 *                     data of consecutive receives, whatever their connection,
 *                     lies packed one after the other; a buffer goes back when
 *                     a completion without IORING_CQE_F_BUF_MORE ends it.
 *   --recv multishot  one multishot receive per connection, the data in
 *                     buffers of a provided-buffer ring (PBUF_COUNT buffers
 *                     of PBUF_SIZE bytes, shared by every connection), each
 *                     given back as soon as its bytes are answered; armed
 *                     again when a completion comes without IORING_CQE_F_MORE
 *                     (ENOBUFS included).
 *
 *   --accept multishot  one multishot accept on the listener (the default).
 *   --accept single     one IORING_OP_ACCEPT at a time, armed again after
 *                       each completion.
 *   --accept eager      what treadle's accept does on a uring loop: accept4(2)
 *                       until EAGAIN, then one IORING_OP_ACCEPT; after its
 *                       completion accept4 again.  The three measure what a
 *                       multishot accept is worth when connections come and
 *                       go (bench/run.py's http-close group, "Connection: close").
 *
 *   --mode echo       what arrives goes back with send(2).
 *   --mode http       every complete request head ("\r\n\r\n") in what
 *                     arrives is answered with the bytes examples/httpd sends
 *                     for GET / (same headers, a Date of the same length
 *                     rebuilt once a second, "Hello, World!"); the answers to
 *                     one receive go out in one send.  Nothing else of the
 *                     request is looked at, except whether the connection
 *                     stays open (HTTP/1.1 without "Connection: close"),
 *                     which the readiness probe of bench/drivers/http_driver.py needs.
 *
 *   --send plain      send(2), as above (the default).
 *   --send ring       an IORING_OP_SEND (MSG_WAITALL) per answer instead,
 *                     submitted with the next io_uring_enter: what the floor
 *                     would be if answers went through the ring too.  Needs
 *                     --recv multishot.  echo sends straight from the
 *                     provided buffer, given back at the send's completion;
 *                     http gathers into the connection's own OUT_CAP buffer,
 *                     and a receive that completes while that buffer is still
 *                     being sent stops the floor (wrk waits for each answer).
 *
 * Sends are plain send(2) on blocking sockets: loopback clients that read
 * what they asked for never make one wait, and a short send is finished in a
 * loop, never dropped.  The price, acceptable for a floor and for these
 * clients only: a client that stops reading would stall the whole server.
 * No allocation per message: a connection's memory is taken at accept and
 * given back at its close.
 */
#include <treadle.h>

#include "bench.h"

#ifdef TDL_HAVE_URING /* bench/CMakeLists.txt: where liburing is installed */

#include <liburing.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RING_SQ 1024           /* submission entries; the completion queue has 8 x as many */
#define SERVER_BUF (16 * 1024) /* --recv single: per connection, as echo-server's and httpd's input */
#define PBUF_COUNT 4096        /* --recv multishot: a power of two (the ring's mask); a completion */
#define PBUF_SIZE 2048         /* takes a whole buffer: 4 per connection of echo's 1000; 8 MiB in all */
#define PBUF_GROUP 0
#define PBUF_INC_COUNT 64          /* --recv inc: fewer, larger buffers, each filled piece by piece */
#define PBUF_INC_SIZE (64 * 1024)  /* (4 MiB in all, as treadle's provided buffers) */
#ifndef IOU_PBUF_RING_INC          /* Linux 6.12; Debian 12's headers predate it */
#define IOU_PBUF_RING_INC 2
#endif
#ifndef IORING_CQE_F_BUF_MORE
#define IORING_CQE_F_BUF_MORE (1U << 4)
#endif
#define HEAD_MAX 8192          /* --mode http: a partial head kept per connection; httpd's --max-head */
#define OUT_CAP (16 * 1024)    /* --mode http: the answers to one receive, one send (httpd's OUT_CAP) */

/* What a completion is for, in its user_data's low bits; a receive's carries
 * its connection's address above them (malloc aligns to 8 at least). */
enum { TAG_ACCEPT = 1, TAG_STDIN = 2, TAG_RECV = 3, TAG_SEND = 4, TAG_MASK = 7 };
/* --send ring: a send's user_data also carries the provided buffer it sends
 * from (echo) above bit 48, where no user-space pointer reaches. */
#define SEND_BID_SHIFT 48

typedef struct conn {
  struct conn *prev, *next; /* live connections, closed at the end */
  int fd;
  bool closing;        /* shut down: its receive's last completion releases it */
  bool recv_done;      /* its receive's last completion came (--send ring: sends may remain) */
  unsigned sends;      /* --send ring: sends in flight; the last one releases a closed c */
  char *out;           /* --send ring, --mode http: OUT_CAP bytes being gathered or sent */
  unsigned hlen;       /* --mode http: bytes of a partial head in head */
  unsigned char *buf;  /* --recv single: the receive buffer */
  char *head;          /* --mode http: HEAD_MAX bytes */
  unsigned char mem[]; /* buf and head */
} conn;

static const char hello_body[] = "Hello, World!";

static struct {
  struct io_uring ring;
  int lfd;
  bool http, multishot, inc, ring_send, stopping;
  unsigned pbuf_count, pbuf_size;
  unsigned *pbuf_off; /* --recv inc: where each buffer's next data starts */
  enum { ACCEPT_MULTISHOT, ACCEPT_SINGLE, ACCEPT_EAGER } accept;
  struct io_uring_buf_ring *br; /* --recv multishot */
  unsigned char *pbufs;
  conn *conns;
  long accepted;
  long long bytes, requests;
  /* --mode http: httpd's answer to GET /, kept open or closing, rebuilt when
   * the second changes; out gathers the answers to one receive. */
  time_t date_sec;
  char hello[256], hello_close[256];
  size_t hello_len, hello_close_len;
  size_t out_len;
  char out[OUT_CAP];
} U = {.lfd = -1, .date_sec = -1};

/* ---- the ring ------------------------------------------------------------ */

static struct io_uring_sqe *sqe_get(void)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe(&U.ring);
  if (!sqe) { /* full: what is queued goes to the kernel, which frees every entry */
    int rc = io_uring_submit(&U.ring);
    if (rc < 0)
      bench_die("uring-floor: io_uring_submit: %s", strerror(-rc));
    sqe = io_uring_get_sqe(&U.ring);
    if (!sqe)
      bench_die("uring-floor: no submission entry after a submit");
  }
  return sqe;
}

static void arm_accept(void)
{
  struct io_uring_sqe *sqe = sqe_get();
  if (U.accept == ACCEPT_MULTISHOT)
    io_uring_prep_multishot_accept(sqe, U.lfd, NULL, NULL, SOCK_CLOEXEC);
  else
    io_uring_prep_accept(sqe, U.lfd, NULL, NULL, SOCK_CLOEXEC);
  io_uring_sqe_set_data64(sqe, TAG_ACCEPT);
}

static void arm_stdin(void)
{
  struct io_uring_sqe *sqe = sqe_get();
  io_uring_prep_poll_add(sqe, 0, POLLIN);
  io_uring_sqe_set_data64(sqe, TAG_STDIN);
}

static void arm_recv(conn *c)
{
  struct io_uring_sqe *sqe = sqe_get();
  if (U.multishot) {
    io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = PBUF_GROUP;
  } else {
    io_uring_prep_recv(sqe, c->fd, c->buf, SERVER_BUF, 0);
  }
  io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | TAG_RECV);
}

/* The provided-buffer ring, registered by hand: liburing 2.3 (Debian 12) has
 * no io_uring_setup_buf_ring.  The kernel reads the ring's entries from
 * memory we map; page-aligned, as registration requires. */
static void pbufs_setup(void)
{
  U.pbuf_count = U.inc ? PBUF_INC_COUNT : PBUF_COUNT;
  U.pbuf_size = U.inc ? PBUF_INC_SIZE : PBUF_SIZE;
  size_t ring_bytes = U.pbuf_count * sizeof(struct io_uring_buf);
  void *mem = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED)
    bench_die("uring-floor: mmap of the buffer ring: %s", strerror(errno));
  U.br = mem;
  io_uring_buf_ring_init(U.br);
  struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)(uintptr_t)mem, .ring_entries = U.pbuf_count,
                                 .bgid = PBUF_GROUP, .pad = U.inc ? IOU_PBUF_RING_INC : 0}; /* pad: flags */
  int rc = io_uring_register_buf_ring(&U.ring, &reg, 0);
  if (rc < 0)
    bench_die("uring-floor: io_uring_register_buf_ring: %s (a kernel before 5.19?)", strerror(-rc));
  U.pbufs = malloc((size_t)U.pbuf_count * U.pbuf_size);
  U.pbuf_off = calloc(U.pbuf_count, sizeof *U.pbuf_off);
  if (!U.pbufs || !U.pbuf_off)
    bench_die("uring-floor: out of memory for the provided buffers");
  int mask = io_uring_buf_ring_mask(U.pbuf_count);
  for (unsigned i = 0; i < U.pbuf_count; i++)
    io_uring_buf_ring_add(U.br, U.pbufs + (size_t)i * U.pbuf_size, U.pbuf_size, (unsigned short)i, mask, (int)i);
  io_uring_buf_ring_advance(U.br, (int)U.pbuf_count);
}

/* A buffer the kernel filled, back to it at once: one entry, one tail store. */
static void pbuf_recycle(unsigned bid)
{
  U.pbuf_off[bid] = 0;
  io_uring_buf_ring_add(U.br, U.pbufs + (size_t)bid * U.pbuf_size, U.pbuf_size, (unsigned short)bid,
                        io_uring_buf_ring_mask(U.pbuf_count), 0);
  io_uring_buf_ring_advance(U.br, 1);
}

/* ---- connections ----------------------------------------------------------- */

/* A vanished client is the normal end of a connection, not worth a line. */
static bool quiet_errno(int e)
{
  return e == ECONNRESET || e == EPIPE || e == ENOTCONN;
}

static void conn_release(conn *c)
{
  if (c->prev)
    c->prev->next = c->next;
  else
    U.conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  if (close(c->fd) < 0)
    fprintf(stderr, "uring-floor: close: %s\n", strerror(errno));
  free(c);
}

/* Stop serving c.  A multishot receive still armed ends only with a last
 * completion: shutting the socket down makes it come now (with 0), and that
 * completion releases c.  Nothing is cancelled. */
static void conn_shut(conn *c)
{
  c->closing = true;
  if (c->sends > 0) /* --send ring: the answers go out first; the last send shuts it */
    return;
  if (shutdown(c->fd, SHUT_RDWR) < 0 && !quiet_errno(errno))
    fprintf(stderr, "uring-floor: shutdown: %s\n", strerror(errno));
}

/* All of p out on fd: a blocking socket sends everything unless an error
 * stops it, but a short count is finished here rather than trusted away.
 * 0, or -errno. */
static int send_all(int fd, const void *p, size_t n)
{
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p = (const char *)p + w;
    n -= (size_t)w;
  }
  return 0;
}

static bool send_ok(int rc)
{
  if (rc < 0 && !quiet_errno(-rc))
    fprintf(stderr, "uring-floor: send: %s\n", strerror(-rc));
  return rc == 0;
}

/* A new connection: its memory, TCP_NODELAY, and its first receive. */
static void conn_new(int fd)
{
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
    fprintf(stderr, "uring-floor: TCP_NODELAY: %s\n", strerror(errno));
  size_t extra = (U.multishot ? 0 : SERVER_BUF) + (U.http ? HEAD_MAX : 0) + (U.http && U.ring_send ? OUT_CAP : 0);
  conn *c = malloc(sizeof *c + extra);
  if (!c) {
    fprintf(stderr, "uring-floor: out of memory for a connection\n");
    close(fd);
    return;
  }
  *c = (conn){.fd = fd, .next = U.conns};
  c->buf = U.multishot ? NULL : c->mem;
  c->head = U.http ? (char *)c->mem + (U.multishot ? 0 : SERVER_BUF) : NULL;
  c->out = U.http && U.ring_send ? c->head + HEAD_MAX : NULL;
  if (U.conns)
    U.conns->prev = c;
  U.conns = c;
  U.accepted++;
  arm_recv(c);
}

static void on_accept(const struct io_uring_cqe *cqe)
{
  if (!(cqe->flags & IORING_CQE_F_MORE) && !U.stopping) { /* single, or the multishot ended (an error) */
    /* --accept eager: take what is queued with accept4 first; the ring's
     * accept is for when nothing is. */
    for (int fd; U.accept == ACCEPT_EAGER && cqe->res >= 0 &&
                 (fd = accept4(U.lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;)
      conn_new(fd);
    arm_accept();
  }
  if (cqe->res < 0) {
    fprintf(stderr, "uring-floor: accept: %s\n", strerror(-cqe->res));
    return;
  }
  conn_new(cqe->res);
}

/* Serves until stdin ends: the driver's way to stop the server. */
static void on_stdin(const struct io_uring_cqe *cqe)
{
  if (cqe->res < 0) {
    fprintf(stderr, "uring-floor: poll on stdin: %s\n", strerror(-cqe->res));
    U.stopping = true;
    return;
  }
  char b[256];
  ssize_t n = read(0, b, sizeof b);
  if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) {
    arm_stdin();
    return;
  }
  if (n < 0)
    fprintf(stderr, "uring-floor: read from stdin: %s\n", strerror(errno));
  U.stopping = true;
}

/* --send ring: p[0..n) out on c through the ring.  bid: the provided buffer
 * p lies in, given back at the send's completion (-1: none). */
static void send_ring(conn *c, const void *p, size_t n, int bid)
{
  struct io_uring_sqe *sqe = sqe_get();
  io_uring_prep_send(sqe, c->fd, p, n, MSG_NOSIGNAL | MSG_WAITALL);
  uint64_t b = bid < 0 ? 0 : (uint64_t)(bid + 1) << SEND_BID_SHIFT;
  io_uring_sqe_set_data64(sqe, b | (uint64_t)(uintptr_t)c | TAG_SEND);
  c->sends++;
}

/* ---- echo ------------------------------------------------------------------ */

/* What arrived in provided buffer bid goes back.  *kept: the buffer is now
 * the send's (--send ring), given back at its completion. */
static bool echo(conn *c, const unsigned char *p, size_t n, int bid, bool *kept)
{
  if (U.ring_send) {
    send_ring(c, p, n, bid);
    *kept = true;
  } else if (!send_ok(send_all(c->fd, p, n))) {
    return false;
  }
  U.bytes += (long long)n;
  return true;
}

/* ---- http ------------------------------------------------------------------ */

/* httpd's date_refresh (examples/httpd/server.c), byte for byte: the same
 * headers in the same order, a Date of the same fixed length.  Called once
 * per pass over the completions, as httpd reads its loop's cached clock; the
 * coarse clock is enough to see the second change (a tick late at most). */
static void date_refresh(void)
{
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME_COARSE, &ts) < 0)
    bench_die("uring-floor: clock_gettime: %s", strerror(errno));
  if (ts.tv_sec == U.date_sec)
    return;
  U.date_sec = ts.tv_sec;
  struct tm tm;
  char date[32];
  gmtime_r(&ts.tv_sec, &tm);
  strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  /* Kept open: httpd's prepared response.  Closing: its put_head with
   * "Connection: close" after Content-Length, then the body. */
  U.hello_len = (size_t)snprintf(U.hello, sizeof U.hello,
                                 "HTTP/1.1 200 OK\r\nServer: treadle\r\nDate: %s\r\n"
                                 "Content-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s",
                                 date, sizeof hello_body - 1, hello_body);
  U.hello_close_len = (size_t)snprintf(U.hello_close, sizeof U.hello_close,
                                       "HTTP/1.1 200 OK\r\nServer: treadle\r\nDate: %s\r\n"
                                       "Content-Type: text/plain\r\nContent-Length: %zu\r\n"
                                       "Connection: close\r\n\r\n%s",
                                       date, sizeof hello_body - 1, hello_body);
}

/* The length of the head at the start of h (up to and including its
 * "\r\n\r\n"), or 0 if it is not complete.  from: where to start looking
 * (the terminator cannot start earlier). */
static size_t head_end(const char *h, size_t len, size_t from)
{
  const char *e = memmem(h + from, len - from, "\r\n\r\n", 4);
  return e ? (size_t)(e - h) + 4 : 0;
}

/* Whether the request in head h (complete, so every line ends in "\r\n")
 * closes its connection: any version but HTTP/1.1, or a Connection header
 * whose value starts with "close".  A token list ("keep-alive, close") is
 * not looked into: wrk and run.py's readiness probe send a single value. */
static bool head_closes(const char *h, size_t len)
{
  const char *end = h + len;
  const char *eol = memchr(h, '\n', len);
  if (eol - h < 9 || memcmp(eol - 9, "HTTP/1.1\r", 9) != 0)
    return true;
  for (const char *line = eol + 1; line < end; line = eol + 1) {
    eol = memchr(line, '\n', (size_t)(end - line));
    if (eol - line > 11 && strncasecmp(line, "connection:", 11) == 0) {
      const char *v = line + 11;
      while (*v == ' ' || *v == '\t')
        v++;
      return eol - v >= 5 && strncasecmp(v, "close", 5) == 0;
    }
  }
  return false;
}

/* Where the answers to c's receive gather. */
static char *out_buf(conn *c)
{
  return U.ring_send ? c->out : U.out;
}

static bool out_flush(conn *c)
{
  size_t n = U.out_len;
  U.out_len = 0;
  if (n > 0 && U.ring_send) {
    send_ring(c, c->out, n, -1);
    return true;
  }
  return n == 0 || send_ok(send_all(c->fd, U.out, n));
}

/* One request answered (into U.out); false when the connection closes after
 * it or a send failed. */
static bool answer(conn *c, const char *head, size_t len)
{
  bool closes = head_closes(head, len);
  const char *r = closes ? U.hello_close : U.hello;
  size_t n = closes ? U.hello_close_len : U.hello_len;
  if (U.out_len + n > OUT_CAP && !out_flush(c))
    return false;
  memcpy(out_buf(c) + U.out_len, r, n);
  U.out_len += n;
  U.requests++;
  return !closes;
}

/* Answer every request head completed by p[0..n): the one begun in an
 * earlier receive (kept in c->head) first, then those in p, whose last,
 * unfinished one is kept.  Heads are found where they lie in the receive
 * buffer; only a head split between receives is copied.  false: close. */
static bool http_serve(conn *c, const unsigned char *data, size_t n)
{
  const char *p = (const char *)data;
  bool keep = true;
  if (c->sends > 0)
    bench_die("uring-floor: --send ring: a request came before the answer to the last one was sent");
  U.bytes += (long long)n;
  while (n > 0 && keep) {
    size_t used, end;
    if (c->hlen == 0) {
      end = head_end(p, n, 0);
      if (end == 0) {
        if (n > HEAD_MAX) {
          keep = false; /* too large: httpd answers 431; the floor just closes */
          break;
        }
        memcpy(c->head, p, n);
        c->hlen = (unsigned)n;
        break;
      }
      keep = answer(c, p, end);
      used = end;
    } else {
      size_t take = n < HEAD_MAX - c->hlen ? n : HEAD_MAX - c->hlen;
      memcpy(c->head + c->hlen, p, take);
      end = head_end(c->head, c->hlen + take, c->hlen > 3 ? c->hlen - 3 : 0);
      if (end == 0) {
        c->hlen += (unsigned)take;
        keep = c->hlen < HEAD_MAX;
        break;
      }
      used = end - c->hlen;
      c->hlen = 0;
      keep = answer(c, c->head, end);
    }
    p += used;
    n -= used;
  }
  return out_flush(c) && keep;
}

/* ---- the loop -------------------------------------------------------------- */

static void on_recv(conn *c, const struct io_uring_cqe *cqe)
{
  bool armed = (cqe->flags & IORING_CQE_F_MORE) != 0; /* multishot: more completions to come */
  bool has_buf = (cqe->flags & IORING_CQE_F_BUFFER) != 0; /* multishot: the data is in this one */
  unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
  int res = cqe->res;
  bool kept = false; /* the buffer went out in a send (--send ring) */
  if (res > 0) {
    if (U.multishot && !has_buf)
      bench_die("uring-floor: a multishot receive completed without a buffer");
    const unsigned char *p = U.multishot ? U.pbufs + (size_t)bid * U.pbuf_size + U.pbuf_off[bid] : c->buf;
    if (U.inc)
      U.pbuf_off[bid] += (unsigned)res;
    /* Bytes after a shutdown (a multishot receive's last ones) are dropped. */
    if (!c->closing && !(U.http ? http_serve(c, p, (size_t)res) : echo(c, p, (size_t)res, (int)bid, &kept)))
      conn_shut(c);
  } else if (res < 0 && res != -ENOBUFS && !quiet_errno(-res)) {
    fprintf(stderr, "uring-floor: recv: %s\n", strerror(-res));
  }
  if (has_buf && U.inc && (cqe->flags & IORING_CQE_F_BUF_MORE))
    has_buf = false; /* --recv inc: the kernel goes on filling this buffer */
  if (has_buf && !kept) /* answered (the answers are sent): the kernel may fill it again */
    pbuf_recycle(bid);
  if (armed)
    return;
  if (res > 0 && !c->closing)
    arm_recv(c);
  else if (res == -ENOBUFS && !c->closing) /* every buffer was in use: they are back by the next submit */
    arm_recv(c);
  else if ((c->recv_done = true) && c->sends == 0) /* end of file, an error, or shut down */
    conn_release(c);
}

/* --send ring: a send finished; its buffer goes back to the kernel, and a
 * connection whose receive has ended goes with its last send. */
static void on_send(conn *c, uint64_t bid1, const struct io_uring_cqe *cqe)
{
  c->sends--;
  if (bid1)
    pbuf_recycle((unsigned)(bid1 - 1));
  if (cqe->res < 0 && !c->closing) {
    send_ok(cqe->res);
    conn_shut(c);
  } else if (c->closing && c->sends == 0 && !c->recv_done) {
    conn_shut(c); /* closed while its answers were going out */
  }
  if (c->recv_done && c->sends == 0)
    conn_release(c);
}

static void dispatch(const struct io_uring_cqe *cqe)
{
  uint64_t d = io_uring_cqe_get_data64(cqe);
  switch (d & TAG_MASK) {
  case TAG_ACCEPT:
    on_accept(cqe);
    break;
  case TAG_STDIN:
    on_stdin(cqe);
    break;
  case TAG_RECV:
    on_recv((conn *)(uintptr_t)(d & ~(uint64_t)TAG_MASK), cqe);
    break;
  case TAG_SEND:
    on_send((conn *)(uintptr_t)(d & (((uint64_t)1 << SEND_BID_SHIFT) - 1) & ~(uint64_t)TAG_MASK),
            d >> SEND_BID_SHIFT, cqe);
    break;
  default:
    bench_die("uring-floor: a completion of unknown kind (user_data %#llx)", (unsigned long long)d);
  }
}

int bench_uring_floor_main(int argc, char **argv)
{
  const char *listen = bench_opt_str(argc, argv, "listen", "127.0.0.1:0");
  const char *mode = bench_opt_str(argc, argv, "mode", "echo");
  const char *recv_mode = bench_opt_str(argc, argv, "recv", "single");
  const char *accept_mode = bench_opt_str(argc, argv, "accept", "multishot");
  const char *send_mode = bench_opt_str(argc, argv, "send", "plain");
  U.ring_send = strcmp(send_mode, "ring") == 0;
  if (!U.ring_send && strcmp(send_mode, "plain") != 0)
    bench_die("uring-floor: --send plain|ring, not '%s'", send_mode);
  U.http = strcmp(mode, "http") == 0;
  U.inc = strcmp(recv_mode, "inc") == 0;
  U.multishot = U.inc || strcmp(recv_mode, "multishot") == 0;
  if (!U.multishot && strcmp(recv_mode, "single") != 0)
    bench_die("uring-floor: --recv single|multishot|inc, not '%s'", recv_mode);
  if (strcmp(accept_mode, "multishot") == 0)
    U.accept = ACCEPT_MULTISHOT;
  else if (strcmp(accept_mode, "single") == 0)
    U.accept = ACCEPT_SINGLE;
  else if (strcmp(accept_mode, "eager") == 0)
    U.accept = ACCEPT_EAGER;
  else
    bench_die("uring-floor: --accept multishot|single|eager, not '%s'", accept_mode);
  if (U.ring_send && (!U.multishot || U.inc))
    bench_die("uring-floor: --send ring needs --recv multishot");
  bench_raise_nofile();

  /* DEFER_TASKRUN runs completions' kernel work only when we wait for them
   * (one thread, so SINGLE_ISSUER holds): treadle's uring back end asks for
   * the same, and so should its floor.  Older kernels refuse the flags. */
  struct io_uring_params p = {
      .flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE,
      .cq_entries = 8 * RING_SQ,
  };
  const char *setup = "single_issuer+defer_taskrun, cq 8x";
  int rc = io_uring_queue_init_params(RING_SQ, &U.ring, &p);
  if (rc < 0) {
    fprintf(stderr, "uring-floor: ring flags refused (%s): a plain ring\n", strerror(-rc));
    p = (struct io_uring_params){0};
    setup = "plain";
    rc = io_uring_queue_init_params(RING_SQ, &U.ring, &p);
  }
  if (rc < 0)
    bench_die("uring-floor: io_uring_queue_init_params: %s", strerror(-rc));
  /* A registered ring fd spares every io_uring_enter a look-up in the fd
   * table; treadle registers its ring's too.  It is an optimisation only. */
  if ((rc = io_uring_register_ring_fd(&U.ring)) < 0)
    fprintf(stderr, "uring-floor: io_uring_register_ring_fd: %s (going on without)\n", strerror(-rc));
  if (U.multishot)
    pbufs_setup();

  U.lfd = tdl_net_listen_str(listen, 0, 0);
  if (U.lfd < 0) {
    char why[TDL_ADDR_ERRLEN];
    tdl_addr_parse_error(listen, why, sizeof why);
    bench_die("uring-floor: cannot listen on '%s': %s", listen, why[0] ? why : tdl_strerror(U.lfd));
  }
  tdl_addr local;
  if ((rc = tdl_net_local_addr(U.lfd, &local)) < 0 || (rc = tdl_addr_port(&local)) < 0)
    bench_die("uring-floor: the listener's port: %s", tdl_strerror(rc));
  if (U.http)
    date_refresh();
  arm_accept();
  arm_stdin();
  printf("PORT %d\n", tdl_addr_port(&local));
  if (fflush(stdout) != 0)
    bench_die("uring-floor: stdout: %s", strerror(errno));
  fprintf(stderr, "uring-floor: listening on port %d, mode %s, recv %s, accept %s, send %s, ring %s\n",
          tdl_addr_port(&local), mode, recv_mode, accept_mode, send_mode, setup);

  while (!U.stopping) {
    rc = io_uring_submit_and_wait(&U.ring, 1);
    if (rc < 0 && rc != -EINTR)
      bench_die("uring-floor: io_uring_submit_and_wait: %s", strerror(-rc));
    if (U.http)
      date_refresh();
    unsigned head, seen = 0;
    struct io_uring_cqe *cqe;
    io_uring_for_each_cqe(&U.ring, head, cqe) {
      dispatch(cqe);
      seen++;
    }
    io_uring_cq_advance(&U.ring, seen);
  }

  /* The ring first: its requests hold the connections' buffers. */
  io_uring_queue_exit(&U.ring);
  while (U.conns)
    conn_release(U.conns);
  free(U.pbufs);
  free(U.pbuf_off);
  if (U.br && munmap(U.br, U.pbuf_count * sizeof(struct io_uring_buf)) < 0)
    fprintf(stderr, "uring-floor: munmap of the buffer ring: %s\n", strerror(errno));
  if (close(U.lfd) < 0)
    fprintf(stderr, "uring-floor: close of the listener: %s\n", strerror(errno));
  printf("SERVED conns=%ld bytes=%lld", U.accepted, U.bytes);
  if (U.http)
    printf(" requests=%lld", U.requests);
  printf("\n");
  return fflush(stdout) == 0 ? 0 : 1;
}

#endif /* TDL_HAVE_URING */
