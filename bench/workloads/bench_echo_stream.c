/* SPDX-License-Identifier: MIT */
/*
 * echo-stream (docs/BENCHMARKS.md, "Servers"): one TCP connection to an
 * echo server, streamed both ways at once, as the streaming clients of
 * fiber runtimes' echo benchmarks do.
 *
 *   echo-stream --port P [--host H] [--seconds S] [--size B] [--backend ...]
 *       On a loop of its own, a writer fiber sends B-byte messages as fast
 *       as the socket takes them while a reader fiber reads the echoes;
 *       after S seconds the writer shuts its side and the reader reads to
 *       the end.  Every byte that comes back is checked against what was
 *       sent (byte i of the stream is a function of i), and so is the total.
 *       A server that stops echoing while bytes wait for it (its reader
 *       parked with data queued) fails the run: the reader gives up after 5
 *       s without a byte.  Keys: bytes_per_s and msgs_per_s (echoed, wall),
 *       client_cpu_ns_per_byte.
 */
#include <treadle.h>

#include "backend.h"
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define READ_BUF (64 * 1024)
#define STALL (5 * TDL_SEC)

typedef struct stream {
  int fd;
  long size;
  tdl_time_t until;
  uint64_t sent, got;
  bool failed;
} stream;

static uint8_t stream_byte(uint64_t i) { return (uint8_t)(i * 131 + (i >> 9)); }

static void *writer(void *arg)
{
  stream *s = arg;
  uint8_t *msg = malloc((size_t)s->size);
  if (!msg)
    bench_die("out of memory");
  while (!s->failed && tdl_now() < s->until) {
    for (long k = 0; k < s->size; k++)
      msg[k] = stream_byte(s->sent + (uint64_t)k);
    size_t n = 0;
    int e = tdl_net_send_all(s->fd, msg, (size_t)s->size, &n, tdl_after(STALL));
    s->sent += n;
    if (e < 0) {
      fprintf(stderr, "echo-stream: send after %llu bytes: %s\n", (unsigned long long)s->sent, tdl_strerror(e));
      s->failed = true;
    }
  }
  free(msg);
  tdl_net_shutdown(s->fd, SHUT_WR);
  return NULL;
}

static void *reader(void *arg)
{
  stream *s = arg;
  uint8_t *buf = malloc(READ_BUF);
  if (!buf)
    bench_die("out of memory");
  for (;;) {
    ssize_t n = tdl_read(s->fd, buf, READ_BUF, tdl_after(STALL));
    if (n == 0)
      break;
    if (n < 0) {
      fprintf(stderr, "echo-stream: read after %llu of %llu bytes: %s\n", (unsigned long long)s->got,
              (unsigned long long)s->sent, tdl_strerror((int)n));
      s->failed = true;
      break;
    }
    for (ssize_t k = 0; k < n; k++) {
      if (buf[k] != stream_byte(s->got + (uint64_t)k)) {
        fprintf(stderr, "echo-stream: byte %llu came back wrong\n", (unsigned long long)(s->got + (uint64_t)k));
        s->failed = true;
        free(buf);
        return NULL;
      }
    }
    s->got += (uint64_t)n;
  }
  free(buf);
  return NULL;
}

typedef struct run {
  stream s;
  tdl_addr addr;
  bench_span span;
  int rc;
} run;

static void *client(void *arg)
{
  run *r = arg;
  int fd = tdl_net_connect(&r->addr, tdl_after(10 * TDL_SEC));
  if (fd < 0) {
    fprintf(stderr, "echo-stream: connect: %s\n", tdl_strerror(fd));
    return NULL;
  }
  tdl_net_nodelay(fd, true);
  r->s.fd = fd;
  tdl_fiber_t w, rd;
  bench_begin(&r->span);
  if (tdl_fiber_spawn(&rd, tdl_fiber_loop(), reader, &r->s, NULL) < 0 ||
      tdl_fiber_spawn(&w, tdl_fiber_loop(), writer, &r->s, NULL) < 0)
    bench_die("echo-stream: tdl_fiber_spawn");
  tdl_fiber_join(w, NULL, TDL_FOREVER);
  tdl_fiber_join(rd, NULL, TDL_FOREVER);
  bench_end(&r->span);
  tdl_close(fd);
  if (!r->s.failed && r->s.got != r->s.sent) {
    fprintf(stderr, "echo-stream: FAILED: %llu bytes came back of %llu sent\n", (unsigned long long)r->s.got,
            (unsigned long long)r->s.sent);
    r->s.failed = true;
  }
  r->rc = r->s.failed ? 1 : 0;
  return NULL;
}

int bench_echo_stream_main(int argc, char **argv)
{
  long port = bench_opt_long(argc, argv, "port", 0);
  const char *host = bench_opt_str(argc, argv, "host", "127.0.0.1");
  long seconds = bench_opt_long(argc, argv, "seconds", 5);
  run r = {.s = {.fd = -1, .size = bench_opt_long(argc, argv, "size", 512)}, .rc = 1};
  const char *be = bench_opt_str(argc, argv, "backend", NULL);
  if (port < 1 || port > 65535) {
    fprintf(stderr, "echo-stream: need --port (the echo server's, 1 to 65535)\n");
    return 2;
  }
  tdl_backend backend;
  if (bench_parse_backend(be, &backend) < 0)
    bench_die("echo-stream: unknown back end");
  char addr[300];
  snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:%ld" : "%s:%ld", host, port);
  if (tdl_addr_parse(&r.addr, addr) < 0) {
    fprintf(stderr, "echo-stream: bad --host '%s'\n", host);
    return 2;
  }
  tdl_loop *loop;
  int rc = tdl_loop_new(&loop, &(tdl_loop_options){.backend = backend});
  if (rc < 0)
    bench_die("echo-stream: tdl_loop_new: %s", tdl_strerror(rc));
  r.s.until = tdl_now() + seconds * TDL_SEC;
  tdl_fiber_t f;
  if ((rc = tdl_fiber_spawn(&f, loop, client, &r, NULL)) < 0)
    bench_die("echo-stream: tdl_fiber_spawn: %s", tdl_strerror(rc));
  tdl_fiber_detach(loop, f);
  if ((rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT)) < 0)
    bench_die("echo-stream: tdl_loop_run: %s", tdl_strerror(rc));
  if (r.rc == 0) {
    char impl[32];
    snprintf(impl, sizeof impl, "treadle-%s", tdl_loop_backend(loop));
    const bench_span *s = &r.span;
    bench_result(impl, "echo-stream", s,
                 "size=%ld bytes=%llu bytes_per_s=%.0f msgs_per_s=%.0f client_cpu_ns_per_byte=%.3f", r.s.size,
                 (unsigned long long)r.s.got, (double)r.s.got / s->wall_s,
                 (double)r.s.got / (double)r.s.size / s->wall_s, (s->user_s + s->sys_s) * 1e9 / (double)r.s.got);
  }
  tdl_loop_free(loop);
  return r.rc;
}
