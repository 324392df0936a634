/* SPDX-License-Identifier: MIT */
/*
 * bench-st http-server: the State Threads peer of examples/httpd in the
 * http group (docs/BENCHMARKS.md, "HTTP"; bench/drivers/http_driver.py
 * starts it).  The contract of echo-server: listen (default 127.0.0.1:0),
 * print "PORT n" on stdout, serve until stdin reaches end of file, then print
 * "SERVED conns=N requests=R" and exit 0.
 *
 * No HTTP library: as ST servers are written, the primordial thread
 * accepts (st_accept) and a thread per connection reads requests into a
 * 16 KiB buffer (st_read) and answers them (st_write), TCP_NODELAY, all on
 * the process's one thread.  Every request head (up to its "\r\n\r\n") that
 * a read completes is answered, so that pipelined requests arriving in one
 * read are answered together, in one write, and a head split across reads
 * waits in the buffer for its end.  The answer to GET / is the bytes
 * examples/httpd sends (the same headers in the same order, a Date rebuilt
 * when the second changes: ST's time cache, st_time), kept open for HTTP/1.1
 * and closed, with "Connection: close", for HTTP/1.0 or a Connection header
 * naming close; any other target is 404.  Anything else -- a method other than
 * GET, a malformed request line or header, a body (Content-Length other than
 * 0, Transfer-Encoding), a head that does not fit the buffer -- is answered
 * 400 and the connection closed, as httpd's own error replies are worded.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <st.h>

#include "bench.h"
#include "st_peer.h"

#define IN_CAP (16 * 1024)  /* a connection's input; a request head must fit */
#define OUT_CAP (16 * 1024) /* the answers to one read, sent together */

static long accepted;
static long long answered;

/* ---- the answers ----------------------------------------------------------- */

static const char hello_body[] = "Hello, World!";
static time_t date_sec = -1;
static char date[32];
static char hello[256], hello_close[256];
static size_t hello_len, hello_close_len;

/* httpd's date_refresh (examples/httpd/server.c), byte for byte. */
static void date_refresh(void)
{
  time_t now = st_time();
  if (now == date_sec)
    return;
  date_sec = now;
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  hello_len = (size_t)snprintf(hello, sizeof hello,
                               "HTTP/1.1 200 OK\r\nServer: treadle\r\nDate: %s\r\n"
                               "Content-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s",
                               date, sizeof hello_body - 1, hello_body);
  hello_close_len = (size_t)snprintf(hello_close, sizeof hello_close,
                                     "HTTP/1.1 200 OK\r\nServer: treadle\r\nDate: %s\r\n"
                                     "Content-Type: text/plain\r\nContent-Length: %zu\r\n"
                                     "Connection: close\r\n\r\n%s",
                                     date, sizeof hello_body - 1, hello_body);
}

enum { HELLO = 200, NOT_FOUND = 404, BAD = 400 };

/* An error answer as httpd's put_error words it; n bytes at out. */
static size_t error_answer(char *out, size_t room, int status, bool closes)
{
  const char *reason = status == NOT_FOUND ? "Not Found" : "Bad Request";
  char body[64];
  int nb = snprintf(body, sizeof body, "%d %s\n", status, reason);
  int n = snprintf(out, room,
                   "HTTP/1.1 %d %s\r\nServer: treadle\r\nDate: %s\r\nContent-Type: text/plain\r\n"
                   "Content-Length: %d\r\n%s\r\n%s",
                   status, reason, date, nb, closes ? "Connection: close\r\n" : "", body);
  return n < 0 || (size_t)n >= room ? 0 : (size_t)n;
}

/* ---- the request ----------------------------------------------------------- */

static bool is_tchar(unsigned char ch)
{
  return ch > ' ' && ch < 0x7f && !strchr("\"(),/:;<=>?@[\\]{}", ch);
}

/* Whether the comma-separated list v[0..n) has the token tok (any case). */
static bool has_token(const char *v, size_t n, const char *tok)
{
  size_t tn = strlen(tok);
  const char *end = v + n;
  while (v < end) {
    while (v < end && (*v == ' ' || *v == '\t' || *v == ','))
      v++;
    const char *t = v;
    while (v < end && *v != ',')
      v++;
    const char *te = v;
    while (te > t && (te[-1] == ' ' || te[-1] == '\t'))
      te--;
    if ((size_t)(te - t) == tn && strncasecmp(t, tok, tn) == 0)
      return true;
  }
  return false;
}

/* The answer to the complete head h[0..len) (it ends in "\r\n\r\n"): HELLO,
 * NOT_FOUND or BAD; *closes when the connection closes after it. */
static int parse_head(const char *h, size_t len, bool *closes)
{
  const char *end = h + len - 2; /* the empty line that ends the head */
  const char *eol = memmem(h, len, "\r\n", 2);
  /* "GET " target " HTTP/1.x" */
  if (eol - h < 14 || memcmp(h, "GET ", 4) != 0)
    return BAD;
  const char *target = h + 4, *sp = memchr(target, ' ', (size_t)(eol - target));
  if (!sp || sp == target || eol - sp != 9 || memcmp(sp + 1, "HTTP/1.", 7) != 0 || (sp[8] != '0' && sp[8] != '1'))
    return BAD;
  for (const char *p = target; p < sp; p++)
    if ((unsigned char)*p <= ' ' || *p == 0x7f)
      return BAD;
  *closes = sp[8] == '0';
  bool root = sp - target == 1 && *target == '/';
  for (const char *line = eol + 2; line < end; line = eol + 2) {
    eol = memmem(line, (size_t)(end + 2 - line), "\r\n", 2);
    const char *colon = memchr(line, ':', (size_t)(eol - line));
    if (!colon || colon == line)
      return BAD;
    for (const char *p = line; p < colon; p++)
      if (!is_tchar((unsigned char)*p))
        return BAD;
    const char *v = colon + 1, *ve = eol;
    for (const char *p = v; p < ve; p++)
      if (*p == '\r' || *p == '\n' || *p == '\0')
        return BAD;
    while (v < ve && (*v == ' ' || *v == '\t'))
      v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
      ve--;
    size_t nlen = (size_t)(colon - line), vlen = (size_t)(ve - v);
    if (nlen == 10 && strncasecmp(line, "connection", 10) == 0) {
      if (has_token(v, vlen, "close"))
        *closes = true;
    } else if (nlen == 14 && strncasecmp(line, "content-length", 14) == 0) {
      if (vlen != 1 || *v != '0')
        return BAD; /* no bodies */
    } else if (nlen == 17 && strncasecmp(line, "transfer-encoding", 17) == 0) {
      return BAD;
    }
  }
  return root ? HELLO : NOT_FOUND;
}

/* ---- the connection -------------------------------------------------------- */

static void *serve(void *arg)
{
  st_netfd_t c = arg;
  char *in = malloc(IN_CAP), *out = malloc(OUT_CAP);
  size_t len = 0;     /* bytes held in in[] */
  size_t scanned = 0; /* of them, searched for a head's end without finding one */
  bool open = in && out;
  while (open) {
    ssize_t n = st_read(c, in + len, IN_CAP - len, ST_UTIME_NO_TIMEOUT);
    if (n <= 0) /* the client closed */
      break;
    len += (size_t)n;
    date_refresh();
    size_t start = 0, out_len = 0;
    for (;;) {
      const char *e = memmem(in + scanned, len - scanned, "\r\n\r\n", 4);
      if (!e) {
        scanned = len - start > 3 ? len - 3 : start;
        if (start == 0 && len == IN_CAP) { /* a head larger than the buffer */
          out_len += error_answer(out + out_len, OUT_CAP - out_len, BAD, true);
          open = false;
        }
        break;
      }
      size_t end = (size_t)(e - in) + 4;
      bool closes = false;
      int what = parse_head(in + start, end - start, &closes);
      if (what == BAD)
        closes = true;
      size_t need = what == HELLO ? (closes ? hello_close_len : hello_len) : 256;
      if (out_len + need > OUT_CAP) {
        if (st_write(c, out, out_len, ST_UTIME_NO_TIMEOUT) != (ssize_t)out_len) {
          out_len = 0;
          open = false;
          break;
        }
        out_len = 0;
      }
      if (what == HELLO) {
        memcpy(out + out_len, closes ? hello_close : hello, need);
        out_len += need;
      } else {
        out_len += error_answer(out + out_len, OUT_CAP - out_len, what, closes);
      }
      answered++;
      start = scanned = end;
      if (closes) {
        open = false;
        break;
      }
    }
    if (out_len > 0 && st_write(c, out, out_len, ST_UTIME_NO_TIMEOUT) != (ssize_t)out_len)
      break;
    memmove(in, in + start, len - start);
    len -= start;
    scanned -= start;
  }
  free(in);
  free(out);
  st_netfd_close(c);
  return NULL;
}

/* Serves until stdin ends: the driver's way to stop the server. */
static void *watch_stdin(void *arg)
{
  (void)arg;
  st_netfd_t in = st_netfd_open(0);
  char b[256];
  while (in && st_read(in, b, sizeof b, ST_UTIME_NO_TIMEOUT) > 0)
    ;
  printf("SERVED conns=%ld requests=%lld\n", accepted, answered);
  fflush(stdout);
  _exit(0);
}

int st_http_server_main(int argc, char **argv)
{
  const char *listen_at = bench_opt_str(argc, argv, "listen", "127.0.0.1:0");
  int one = 1, port;
  st_peer_init();
  st_timecache_set(1); /* st_time(): the scheduler's clock, read once a pass */
  st_netfd_t l = st_peer_listen("http-server", listen_at, &port);
  if (!st_thread_create(watch_stdin, NULL, 0, 0))
    bench_die("http-server: setup: %s", strerror(errno));
  printf("PORT %d\n", port);
  fflush(stdout);
  fprintf(stderr, "http-server: State Threads %s, listening on port %d, event system %s\n", ST_VERSION, port,
          st_peer_eventsys);

  for (;;) {
    st_netfd_t c = st_accept(l, NULL, NULL, ST_UTIME_NO_TIMEOUT);
    if (!c) {
      if (errno != EINTR)
        fprintf(stderr, "http-server: accept: %s\n", strerror(errno));
      if (errno == EMFILE || errno == ENFILE)
        st_usleep(10000);
      continue;
    }
    setsockopt(st_netfd_fileno(c), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!st_thread_create(serve, c, 0, 0)) {
      fprintf(stderr, "http-server: cannot serve a connection: %s\n", strerror(errno));
      st_netfd_close(c);
      continue;
    }
    accepted++;
  }
}
