/* SPDX-License-Identifier: MIT */
/* The buffered reader and writer: pipelined messages, growth up to the
 * maximum and back to the initial buffer, messages over the maximum,
 * length-prefixed reads, failed allocations, one system call per flushed
 * batch, a peer that stops reading (the deadline passes, nothing is lost),
 * a peer that has gone, pipes, and one fiber at a time.  Every wait is
 * bounded; nothing here measures time. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

#define LONG_WAIT T_HANG /* for what must happen: a bound, not a delay */

/* Allocations of 2^60 bytes must fail with NULL, not stop the test. */
#ifdef TDL_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif
#define HUGE ((size_t)1 << 60)

static tdl_time_t soon(tdl_time_t delay) { return tdl_after(delay); }

static void run_fiber(tdl_fiber_fn fn, void *arg)
{
  go(fn, arg);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

/* A connected pair of non-blocking, close-on-exec Unix sockets. */
static void sock_pair(int type, int sv[2])
{
  assert_int_equal(socketpair(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
}

static void close_pair(int sv[2])
{
  tdl_close(sv[0]);
  tdl_close(sv[1]);
}

static void send_str(int fd, const char *s)
{
  assert_int_equal(tdl_net_send_all(fd, s, strlen(s), NULL, soon(LONG_WAIT)), 0);
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + (i >> 11)); }

static void fill_pattern(unsigned char *p, size_t from, size_t n)
{
  for (size_t i = 0; i < n; i++)
    p[i] = pattern(from + i);
}

static bool is_pattern(const unsigned char *p, size_t from, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (p[i] != pattern(from + i))
      return false;
  return true;
}

/* ------------------------------------------------------------------------ */
/* The reader                                                                */
/* ------------------------------------------------------------------------ */

static void *pipelined_writer(void *arg)
{
  int fd = *(int *)arg;
  /* Two requests in one write, then a third split oddly. */
  send_str(fd, "GET /a\r\n\r\nGET /b\r\n\r\nGE");
  tdl_sleep(tdl_after(10 * TDL_MSEC));
  send_str(fd, "T /c\r\n\r");
  tdl_sleep(tdl_after(10 * TDL_MSEC));
  send_str(fd, "\nBODY0123456789");
  tdl_net_shutdown(fd, SHUT_WR);
  return NULL;
}

static void *pipelined_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  go(pipelined_writer, &sv[1]);
  char mem[32];
  tdl_reader r;
  assert_int_equal(tdl_reader_init(&r, sv[0], mem, sizeof mem, sizeof mem), 0);
  const char *want[] = {"GET /a\r\n\r\n", "GET /b\r\n\r\n", "GET /c\r\n\r\n"};
  for (int i = 0; i < 3; i++) {
    ssize_t n = tdl_reader_until(&r, "\r\n\r\n", 4, soon(LONG_WAIT));
    assert_int_equal(n, (ssize_t)strlen(want[i]));
    assert_memory_equal(tdl_reader_data(&r), want[i], (size_t)n);
    tdl_reader_consume(&r, (size_t)n);
  }
  /* A body: 4 bytes buffered or not, then the rest, then EOF. */
  char body[14];
  size_t got = 0;
  assert_int_equal(tdl_reader_read_exactly(&r, body, 4, &got, soon(LONG_WAIT)), 0);
  assert_memory_equal(body, "BODY", 4);
  assert_int_equal(tdl_reader_read_exactly(&r, body, 14, &got, soon(LONG_WAIT)), -EPIPE);
  assert_int_equal(got, 10);
  assert_memory_equal(body, "0123456789", 10);
  assert_int_equal(tdl_reader_fill(&r, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_reader_read(&r, body, 1, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_reader_need(&r, 1, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_reader_until(&r, NULL, 1, 0), -EINVAL);
  assert_int_equal(tdl_reader_until(&r, "\n", 0, 0), -EINVAL);
  assert_int_equal(tdl_reader_read(&r, NULL, 1, 0), -EINVAL);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  close_pair(sv);

  /* A fixed buffer (max == size): consuming makes room; the next fill
   * moves the rest to the front. */
  sock_pair(SOCK_STREAM, sv);
  char big[100];
  memset(big, 'x', sizeof big);
  assert_int_equal(tdl_net_send_all(sv[1], big, sizeof big, NULL, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_reader_init(&r, sv[0], mem, sizeof mem, sizeof mem), 0);
  assert_int_equal(tdl_reader_until(&r, "\r\n", 2, soon(LONG_WAIT)), -EMSGSIZE);
  assert_int_equal(tdl_reader_len(&r), sizeof mem);
  assert_int_equal(tdl_reader_fill(&r, soon(LONG_WAIT)), -EMSGSIZE);
  tdl_reader_consume(&r, 30);
  ssize_t n = tdl_reader_fill(&r, soon(LONG_WAIT));
  assert_true(n > 0 && n <= 30);
  assert_int_equal(tdl_reader_len(&r), 2 + (size_t)n);
  assert_ptr_equal(tdl_reader_data(&r), mem);
  /* A big read skips the buffer once it is empty. */
  tdl_reader_consume(&r, tdl_reader_len(&r));
  char dst[64];
  size_t left = sizeof big - 32 - (size_t)n;
  assert_int_equal(tdl_reader_read_exactly(&r, dst, left, NULL, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_reader_until(&r, "x", 1, soon(10 * TDL_MSEC)), -ETIMEDOUT);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  close_pair(sv);

  /* On a pipe. */
  int p[2];
  t_pipe(p);
  assert_int_equal(write(p[1], "one\ntwo\n", 8), 8);
  assert_int_equal(tdl_reader_init(&r, p[0], mem, sizeof mem, sizeof mem), 0);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 4);
  tdl_reader_consume(&r, 4);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 4);
  assert_memory_equal(tdl_reader_data(&r), "two\n", 4);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  close_pair(p);
  return NULL;
}

static void reader_pipelined_and_fixed(void **state)
{
  (void)state;
  run_fiber(pipelined_body, NULL);
}

#define BIGLINE 100000

static void *bigline_writer(void *arg)
{
  int fd = *(int *)arg;
  char *line = malloc(BIGLINE);
  assert_non_null(line);
  memset(line, 'y', BIGLINE - 1);
  line[BIGLINE - 1] = '\n';
  assert_int_equal(tdl_net_send_all(fd, line, BIGLINE, NULL, soon(LONG_WAIT)), 0);
  send_str(fd, "small\n");
  free(line);
  return NULL;
}

/* A line of 100,000 bytes through a 16-byte initial buffer; `mem` NULL: the
 * reader allocates the initial buffer itself. */
static void grow_and_give_back(char *mem)
{
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  go(bigline_writer, &sv[1]);
  tdl_reader r;
  assert_int_equal(tdl_reader_init(&r, sv[0], mem, 16, 1 << 20), 0);
  assert_int_equal(tdl_reader_capacity(&r), 16);
  const char *home = tdl_reader_data(&r);
  if (mem)
    assert_ptr_equal(home, mem);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), BIGLINE);
  /* Doubling from 16: the first power-of-two multiple that holds it. */
  assert_int_equal(tdl_reader_capacity(&r), 131072);
  const char *d = tdl_reader_data(&r);
  for (size_t i = 0; i < BIGLINE - 1; i++)
    if (d[i] != 'y')
      fail_msg("byte %zu is %d", i, d[i]);
  /* Consumed: what is left fits 16 bytes, so it moves home. */
  tdl_reader_consume(&r, BIGLINE);
  assert_int_equal(tdl_reader_capacity(&r), 16);
  assert_ptr_equal(tdl_reader_data(&r), home);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 6);
  assert_memory_equal(tdl_reader_data(&r), "small\n", 6);
  tdl_reader_consume(&r, 6);
  assert_int_equal(tdl_reader_capacity(&r), 16);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  assert_int_equal(tdl_reader_destroy(&r), 0); /* twice is harmless */
  close_pair(sv);
}

static void *grow_body(void *arg)
{
  (void)arg;
  char mem[16];
  memset(mem, 0x11, sizeof mem);
  grow_and_give_back(mem);
  grow_and_give_back(NULL);
  return NULL;
}

static void reader_grows_and_gives_back(void **state)
{
  (void)state;
  run_fiber(grow_body, NULL);
}

/* A message over the maximum: -EMSGSIZE, and the reader goes on. */
static void *over_max_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  char x[100];
  memset(x, 'x', sizeof x);
  assert_int_equal(tdl_net_send_all(sv[1], x, sizeof x, NULL, soon(LONG_WAIT)), 0);
  send_str(sv[1], "\nok\n");
  tdl_reader r;
  assert_int_equal(tdl_reader_init(&r, sv[0], NULL, 16, 64), 0);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), -EMSGSIZE);
  assert_int_equal(tdl_reader_len(&r), 64);
  assert_int_equal(tdl_reader_capacity(&r), 64);
  assert_int_equal(tdl_reader_fill(&r, soon(LONG_WAIT)), -EMSGSIZE);
  assert_int_equal(tdl_reader_need(&r, 65, soon(LONG_WAIT)), -EMSGSIZE);
  assert_int_equal(tdl_reader_len(&r), 64); /* nothing was dropped */
  /* Skip the oversized message: drop what is buffered, then its rest. */
  tdl_reader_consume(&r, 64);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 37);
  tdl_reader_consume(&r, 37);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 3);
  assert_memory_equal(tdl_reader_data(&r), "ok\n", 3);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  close_pair(sv);
  return NULL;
}

static void reader_message_over_max(void **state)
{
  (void)state;
  run_fiber(over_max_body, NULL);
}

#define BULK_LEN 200000

static void *bulk_writer(void *arg)
{
  int fd = *(int *)arg;
  unsigned char *v = malloc(BULK_LEN);
  assert_non_null(v);
  fill_pattern(v, 0, BULK_LEN);
  char head[32];
  snprintf(head, sizeof head, "$%d\r\n", BULK_LEN);
  send_str(fd, head);
  assert_int_equal(tdl_net_send_all(fd, v, BULK_LEN, NULL, soon(LONG_WAIT)), 0);
  send_str(fd, "\r\n*1\r\n$4\r\nPI");
  free(v);
  tdl_net_shutdown(fd, SHUT_WR);
  return NULL;
}

/* A Redis bulk string: a header line, then a length-prefixed value, parsed in
 * place. */
static void *need_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  go(bulk_writer, &sv[1]);
  char mem[16];
  tdl_reader r;
  assert_int_equal(tdl_reader_init(&r, sv[0], mem, sizeof mem, 1 << 20), 0);
  ssize_t n = tdl_reader_until(&r, "\r\n", 2, soon(LONG_WAIT));
  assert_int_equal(n, 9);
  long len = strtol(tdl_reader_data(&r) + 1, NULL, 10);
  assert_int_equal(len, BULK_LEN);
  tdl_reader_consume(&r, (size_t)n);
  n = tdl_reader_need(&r, (size_t)len + 2, soon(LONG_WAIT));
  assert_true(n >= len + 2);
  assert_true(tdl_reader_capacity(&r) >= (size_t)len + 2);
  assert_true(is_pattern((const unsigned char *)tdl_reader_data(&r), 0, (size_t)len));
  assert_memory_equal(tdl_reader_data(&r) + len, "\r\n", 2);
  /* Already buffered: no read at all. */
  assert_int_equal(tdl_reader_need(&r, (size_t)len, 0), n);
  tdl_reader_consume(&r, (size_t)len + 2);
  assert_int_equal(tdl_reader_capacity(&r), sizeof mem);
  assert_int_equal(tdl_reader_until(&r, "\r\n", 2, soon(LONG_WAIT)), 4);
  tdl_reader_consume(&r, 4);
  assert_int_equal(tdl_reader_until(&r, "\r\n", 2, soon(LONG_WAIT)), 4);
  tdl_reader_consume(&r, 4);
  /* The stream ends inside the value: -EPIPE, what came stays. */
  assert_int_equal(tdl_reader_need(&r, 6, soon(LONG_WAIT)), -EPIPE);
  assert_int_equal(tdl_reader_len(&r), 2);
  assert_memory_equal(tdl_reader_data(&r), "PI", 2);
  assert_int_equal(tdl_reader_need(&r, (1 << 20) + 1, 0), -EMSGSIZE);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  close_pair(sv);
  return NULL;
}

static void reader_need_length_prefixed(void **state)
{
  (void)state;
  run_fiber(need_body, NULL);
}

/* A growth that cannot get memory: -ENOMEM, nothing lost, still usable. */
static void *enomem_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  send_str(sv[1], "abc\n");
  tdl_reader r;
  assert_int_equal(tdl_reader_init(&r, sv[0], NULL, 16, SIZE_MAX), 0);
  assert_int_equal(tdl_reader_need(&r, 4, soon(LONG_WAIT)), 4);
  assert_int_equal(tdl_reader_need(&r, HUGE, soon(LONG_WAIT)), -ENOMEM);
  assert_int_equal(tdl_reader_len(&r), 4);
  assert_int_equal(tdl_reader_capacity(&r), 16);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 4);
  assert_memory_equal(tdl_reader_data(&r), "abc\n", 4);
  assert_int_equal(tdl_reader_destroy(&r), 0);

  tdl_writer w;
  void *room = &room;
  assert_int_equal(tdl_writer_init(&w, sv[1], NULL, 16, SIZE_MAX), 0);
  assert_int_equal(tdl_writer_puts(&w, "kept"), 0);
  assert_int_equal(tdl_writer_reserve(&w, HUGE, &room), -ENOMEM);
  assert_null(room);
  assert_int_equal(tdl_writer_len(&w), 4);
  assert_int_equal(tdl_writer_flush(&w, soon(LONG_WAIT)), 0);
  char got[4];
  assert_int_equal(tdl_net_recv_exactly(sv[0], got, 4, NULL, soon(LONG_WAIT)), 0);
  assert_memory_equal(got, "kept", 4);
  assert_int_equal(tdl_writer_destroy(&w), 0);
  close_pair(sv);
  return NULL;
}

static void allocation_failure_loses_nothing(void **state)
{
  (void)state;
  run_fiber(enomem_body, NULL);
}

typedef struct busy_ctx {
  tdl_reader r;
  tdl_writer w;
  ssize_t result;
} busy_ctx;

static void *parked_until(void *arg)
{
  busy_ctx *b = arg;
  b->result = tdl_reader_until(&b->r, "\n", 1, soon(LONG_WAIT));
  return NULL;
}

static void *parked_flush(void *arg)
{
  busy_ctx *b = arg;
  b->result = tdl_writer_flush(&b->w, soon(LONG_WAIT));
  return NULL;
}

/* While one fiber's fill or flush is parked, the others get -EBUSY. */
static void *busy_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  busy_ctx b = {.result = 1};
  char mem[16], c;
  assert_int_equal(tdl_reader_init(&b.r, sv[0], mem, sizeof mem, 64), 0);
  go(parked_until, &b);
  assert_int_equal(tdl_fiber_yield(), 0); /* it runs until it parks */
  assert_int_equal(b.result, 1);
  assert_int_equal(tdl_reader_fill(&b.r, 0), -EBUSY);
  assert_int_equal(tdl_reader_need(&b.r, 1, 0), -EBUSY);
  assert_int_equal(tdl_reader_read(&b.r, &c, 1, 0), -EBUSY);
  assert_int_equal(tdl_reader_destroy(&b.r), -EBUSY);
  tdl_reader_consume(&b.r, 1); /* nothing buffered: harmless */
  send_str(sv[1], "hi\n");
  while (b.result == 1)
    assert_int_equal(tdl_fiber_yield(), 0);
  assert_int_equal(b.result, 3);
  assert_int_equal(tdl_reader_destroy(&b.r), 0);

  /* A writer with more than the socket holds. */
  size_t big = 4u << 20;
  unsigned char *d = malloc(big);
  assert_non_null(d);
  fill_pattern(d, 0, big);
  assert_int_equal(tdl_writer_init(&b.w, sv[1], NULL, 64, big), 0);
  assert_int_equal(tdl_writer_put(&b.w, d, big), 0);
  b.result = 1;
  go(parked_flush, &b);
  assert_int_equal(tdl_fiber_yield(), 0);
  assert_int_equal(b.result, 1);
  void *room;
  assert_int_equal(tdl_writer_put(&b.w, "x", 1), -EBUSY);
  assert_int_equal(tdl_writer_reserve(&b.w, 1, &room), -EBUSY);
  assert_int_equal(tdl_writer_flush(&b.w, 0), -EBUSY);
  assert_int_equal(tdl_writer_destroy(&b.w), -EBUSY);
  /* Read it all: the flush completes. */
  unsigned char *got = malloc(big);
  assert_non_null(got);
  assert_int_equal(tdl_net_recv_exactly(sv[0], got, big, NULL, soon(LONG_WAIT)), 0);
  while (b.result == 1)
    assert_int_equal(tdl_fiber_yield(), 0);
  assert_int_equal(b.result, 0);
  assert_memory_equal(got, d, big);
  assert_int_equal(tdl_writer_len(&b.w), 0);
  assert_int_equal(tdl_writer_capacity(&b.w), 64);
  assert_int_equal(tdl_writer_destroy(&b.w), 0);
  free(got);
  free(d);
  close_pair(sv);
  return NULL;
}

static void one_fiber_at_a_time(void **state)
{
  (void)state;
  run_fiber(busy_body, NULL);
}

static void *misuse_body(void *arg)
{
  (void)arg;
  char mem[8], c;
  tdl_reader r;
  tdl_writer w;
  assert_int_equal(tdl_reader_init(NULL, 0, mem, 8, 8), -EINVAL);
  assert_int_equal(tdl_reader_init(&r, 0, mem, 0, 8), -EINVAL);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  assert_int_equal(tdl_reader_init(&r, 0, mem, 8, 7), -EINVAL);
  assert_int_equal(tdl_reader_init(&r, -1, mem, 8, 8), -EBADF);
  /* A failed or destroyed reader: every call says -EBADF. */
  assert_int_equal(tdl_reader_fill(&r, 0), -EBADF);
  assert_int_equal(tdl_reader_need(&r, 1, 0), -EBADF);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, 0), -EBADF);
  assert_int_equal(tdl_reader_read(&r, &c, 1, 0), -EBADF);
  tdl_reader_consume(&r, 5);
  assert_int_equal(tdl_reader_len(&r), 0);
  assert_int_equal(tdl_reader_destroy(&r), 0);

  assert_int_equal(tdl_writer_init(NULL, 0, mem, 8, 8), -EINVAL);
  assert_int_equal(tdl_writer_init(&w, 0, NULL, 0, 8), -EINVAL);
  assert_int_equal(tdl_writer_init(&w, 0, mem, 8, 4), -EINVAL);
  assert_int_equal(tdl_writer_init(&w, -1, mem, 8, 8), -EBADF);
  void *room;
  assert_int_equal(tdl_writer_put(&w, "x", 1), -EBADF);
  assert_int_equal(tdl_writer_reserve(&w, 1, &room), -EBADF);
  assert_int_equal(tdl_writer_reserve(&w, 1, NULL), -EINVAL);
  assert_int_equal(tdl_writer_flush(&w, 0), -EBADF);
  assert_int_equal(tdl_writer_destroy(&w), 0);
  return NULL;
}

static void init_errors_and_destroyed(void **state)
{
  (void)state;
  run_fiber(misuse_body, NULL);
}

/* ------------------------------------------------------------------------ */
/* The writer                                                                */
/* ------------------------------------------------------------------------ */

/* Everything the writer can append, read back whole. */
static void *formats_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  char mem[8];
  tdl_writer w;
  assert_int_equal(tdl_writer_init(&w, sv[1], mem, sizeof mem, 4096), 0);
  assert_int_equal(tdl_writer_puts(&w, "+OK\r\n"), 0);
  const int64_t ints[] = {0, 1, -1, 42, -42, 1000000007, INT64_MAX, INT64_MIN};
  char want[512];
  int wl = snprintf(want, sizeof want, "+OK\r\n");
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
    assert_int_equal(tdl_writer_put(&w, ":", 1), 0);
    assert_int_equal(tdl_writer_put_i64(&w, ints[i]), 0);
    assert_int_equal(tdl_writer_put(&w, "\r\n", 2), 0);
    wl += snprintf(want + wl, sizeof want - (size_t)wl, ":%" PRId64 "\r\n", ints[i]);
  }
  assert_int_equal(tdl_writer_put_u64(&w, UINT64_MAX), 0);
  assert_int_equal(tdl_writer_put_u64(&w, 0), 0);
  wl += snprintf(want + wl, sizeof want - (size_t)wl, "%" PRIu64 "0", UINT64_MAX);
  /* Reserve, format in place, commit part of it. */
  void *room;
  assert_int_equal(tdl_writer_reserve(&w, 32, &room), 0);
  assert_non_null(room);
  int k = snprintf(room, 32, "$%d\r\n", 3);
  assert_int_equal(tdl_writer_commit(&w, (size_t)k), 0);
  wl += snprintf(want + wl, sizeof want - (size_t)wl, "$3\r\n");
  assert_int_equal(tdl_writer_commit(&w, tdl_writer_capacity(&w)), -EINVAL);
  /* Nothing and bad arguments. */
  assert_int_equal(tdl_writer_put(&w, NULL, 0), 0);
  assert_int_equal(tdl_writer_put(&w, NULL, 1), -EINVAL);
  assert_int_equal(tdl_writer_puts(&w, NULL), -EINVAL);
  assert_int_equal(tdl_writer_len(&w), (size_t)wl);
  assert_true(tdl_writer_capacity(&w) > sizeof mem);
  assert_int_equal(tdl_writer_flush(&w, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_writer_len(&w), 0);
  assert_int_equal(tdl_writer_capacity(&w), sizeof mem); /* back home */
  assert_int_equal(tdl_writer_flush(&w, 0), 0); /* nothing to send */
  char got[512];
  assert_int_equal(tdl_net_recv_exactly(sv[0], got, (size_t)wl, NULL, soon(LONG_WAIT)), 0);
  assert_memory_equal(got, want, (size_t)wl);
  assert_int_equal(tdl_writer_destroy(&w), 0);
  close_pair(sv);
  return NULL;
}

static void writer_formats(void **state)
{
  (void)state;
  run_fiber(formats_body, NULL);
}

/* On a SOCK_SEQPACKET socket every send() is one record, and a recv() takes
 * one record: a batch that arrives as one record left in one system call. */
static void *batch_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_SEQPACKET, sv);
  tdl_writer w;
  assert_int_equal(tdl_writer_init(&w, sv[1], NULL, 64, 1 << 16), 0);
  size_t total = 0;
  for (int i = 0; i < 100; i++) {
    assert_int_equal(tdl_writer_put(&w, ":", 1), 0);
    assert_int_equal(tdl_writer_put_i64(&w, i), 0);
    assert_int_equal(tdl_writer_puts(&w, "\r\n"), 0);
    total += (size_t)snprintf(NULL, 0, ":%d\r\n", i);
  }
  assert_int_equal(tdl_writer_len(&w), total);
  assert_int_equal(tdl_writer_flush(&w, soon(LONG_WAIT)), 0);
  char buf[4096];
  assert_int_equal(tdl_recv(sv[0], buf, sizeof buf, 0, soon(LONG_WAIT)), (ssize_t)total);
  assert_memory_equal(buf, ":0\r\n:1\r\n:2\r\n", 12);
  assert_memory_equal(buf + total - 5, ":99\r\n", 5);
  assert_int_equal(tdl_recv(sv[0], buf, sizeof buf, 0, 0), -ETIMEDOUT); /* no second record */
  assert_int_equal(tdl_writer_destroy(&w), 0);
  close_pair(sv);
  return NULL;
}

static void writer_batch_is_one_system_call(void **state)
{
  (void)state;
  run_fiber(batch_body, NULL);
}

/* The maximum: -ENOBUFS, nothing appended; a flush makes room. */
static void *max_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  tdl_writer w;
  char a[20], b[13];
  memset(a, 'a', sizeof a);
  memset(b, 'b', sizeof b);
  assert_int_equal(tdl_writer_init(&w, sv[1], NULL, 16, 32), 0);
  assert_int_equal(tdl_writer_put(&w, a, sizeof a), 0);
  assert_int_equal(tdl_writer_capacity(&w), 32);
  assert_int_equal(tdl_writer_put(&w, b, 13), -ENOBUFS);
  assert_int_equal(tdl_writer_put_i64(&w, INT64_MIN), -ENOBUFS);
  assert_int_equal(tdl_writer_len(&w), 20);
  assert_int_equal(tdl_writer_put(&w, b, 12), 0);
  void *room = &room;
  assert_int_equal(tdl_writer_reserve(&w, 1, &room), -ENOBUFS);
  assert_null(room);
  assert_int_equal(tdl_writer_flush(&w, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_writer_capacity(&w), 16);
  assert_int_equal(tdl_writer_put(&w, b, 13), 0);
  assert_int_equal(tdl_writer_flush(&w, soon(LONG_WAIT)), 0);
  char got[45];
  assert_int_equal(tdl_net_recv_exactly(sv[0], got, sizeof got, NULL, soon(LONG_WAIT)), 0);
  assert_memory_equal(got, a, 20);
  assert_memory_equal(got + 20, b, 12);
  assert_memory_equal(got + 32, b, 13);
  assert_int_equal(tdl_writer_destroy(&w), 0);
  close_pair(sv);
  return NULL;
}

static void writer_maximum(void **state)
{
  (void)state;
  run_fiber(max_body, NULL);
}

typedef struct drain_ctx {
  int fd;
  size_t want, got;
  int err;
} drain_ctx;

/* Read want bytes of the pattern, checking each. */
static void *drain(void *arg)
{
  drain_ctx *d = arg;
  static unsigned char buf[65536];
  while (d->got < d->want) {
    size_t n = d->want - d->got < sizeof buf ? d->want - d->got : sizeof buf;
    ssize_t r = tdl_read(d->fd, buf, n, soon(LONG_WAIT));
    if (r <= 0) {
      d->err = r < 0 ? (int)r : -EPIPE;
      return NULL;
    }
    if (!is_pattern(buf, d->got, (size_t)r)) {
      d->err = -EIO;
      return NULL;
    }
    d->got += (size_t)r;
  }
  return NULL;
}

#define CHUNK 65536

/* A peer that stops reading: the flush's deadline passes, the bytes that did
 * not go stay in order, and a later flush sends them once the peer reads. */
static void stalled_peer(int wfd, int rfd)
{
  tdl_writer w;
  unsigned char *chunk = malloc(CHUNK);
  assert_non_null(chunk);
  assert_int_equal(tdl_writer_init(&w, wfd, NULL, 4096, 1 << 20), 0);
  size_t total = 0;
  int e = 0;
  /* Bounded: the kernel's buffers hold a few MiB at most. */
  for (int round = 0; round < 512 && e == 0; round++) {
    fill_pattern(chunk, total, CHUNK);
    assert_int_equal(tdl_writer_put(&w, chunk, CHUNK), 0);
    total += CHUNK;
    e = tdl_writer_flush(&w, soon(20 * TDL_MSEC));
  }
  assert_int_equal(e, -ETIMEDOUT);
  size_t unsent = tdl_writer_len(&w);
  assert_true(unsent > 0 && unsent <= total);
  /* Appending after a timeout is fine: it goes after what is waiting. */
  fill_pattern(chunk, total, 100);
  assert_int_equal(tdl_writer_put(&w, chunk, 100), 0);
  total += 100;
  drain_ctx d = {.fd = rfd, .want = total};
  go(drain, &d);
  assert_int_equal(tdl_writer_flush(&w, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_writer_len(&w), 0);
  assert_int_equal(tdl_writer_capacity(&w), 4096);
  while (d.got < d.want && d.err == 0)
    tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(d.err, 0);
  assert_int_equal(d.got, total);
  assert_int_equal(tdl_writer_destroy(&w), 0);
  free(chunk);
}

static void *stalled_unix_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  stalled_peer(sv[1], sv[0]);
  close_pair(sv);
  return NULL;
}

static void *stalled_tcp_body(void *arg)
{
  (void)arg;
  int lfd = tdl_net_listen_str("localhost:0", 0, 0);
  assert_true(lfd >= 0);
  tdl_addr a;
  assert_int_equal(tdl_net_local_addr(lfd, &a), 0);
  int c = tdl_net_connect(&a, soon(LONG_WAIT));
  assert_true(c >= 0);
  int s = tdl_net_accept(lfd, NULL, soon(LONG_WAIT));
  assert_true(s >= 0);
  stalled_peer(s, c);
  tdl_close(c);
  tdl_close(s);
  tdl_close(lfd);
  return NULL;
}

static void writer_peer_stops_reading_unix(void **state)
{
  (void)state;
  run_fiber(stalled_unix_body, NULL);
}

static void writer_peer_stops_reading_tcp(void **state)
{
  (void)state;
  run_fiber(stalled_tcp_body, NULL);
}

/* The end of the stream: 0 from until and need when the peer closed
 * between messages (and at every later call), -EPIPE when it cut one (its
 * bytes stay buffered), -ECONNRESET when it reset the connection. */
static void *end_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  tdl_reader r;
  assert_int_equal(tdl_reader_init(&r, sv[0], NULL, 16, 64), 0);
  send_str(sv[1], "one\n");
  assert_int_equal(tdl_net_shutdown(sv[1], SHUT_WR), 0);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 4);
  tdl_reader_consume(&r, 4);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_reader_need(&r, 1, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_reader_len(&r), 0);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  close_pair(sv);

  /* Mid-line: the cut line stays buffered, and need says the same. */
  sock_pair(SOCK_STREAM, sv);
  assert_int_equal(tdl_reader_init(&r, sv[0], NULL, 16, 64), 0);
  send_str(sv[1], "one\ntw");
  assert_int_equal(tdl_net_shutdown(sv[1], SHUT_WR), 0);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 4);
  tdl_reader_consume(&r, 4);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), -EPIPE);
  assert_int_equal(tdl_reader_len(&r), 2);
  assert_memory_equal(tdl_reader_data(&r), "tw", 2);
  assert_int_equal(tdl_reader_need(&r, 3, soon(LONG_WAIT)), -EPIPE);
  assert_int_equal(tdl_reader_need(&r, 2, soon(LONG_WAIT)), 2);
  tdl_reader_consume(&r, 2);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  close_pair(sv);

  /* A reset, with part of a line buffered: the reset, not an end. */
  int c, a;
  t_tcp_pair(&c, &a);
  assert_int_equal(fcntl(c, F_SETFL, O_NONBLOCK), 0);
  assert_int_equal(tdl_reader_init(&r, c, NULL, 16, 64), 0);
  assert_int_equal(write(a, "par", 3), 3);
  assert_int_equal(tdl_reader_need(&r, 3, soon(LONG_WAIT)), 3);
  struct linger now = {.l_onoff = 1, .l_linger = 0}; /* close sends a reset */
  assert_int_equal(setsockopt(a, SOL_SOCKET, SO_LINGER, &now, sizeof now), 0);
  assert_int_equal(close(a), 0);
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), -ECONNRESET);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  tdl_close(c);
  return NULL;
}

static void reader_end_of_stream(void **state)
{
  (void)state;
  run_fiber(end_body, NULL);
}

/* A peer that has gone: -EPIPE or -ECONNRESET, never a SIGPIPE (it is at
 * its default, kill, in this binary); the bytes stay. */
static void *gone_body(void *arg)
{
  (void)arg;
  int sv[2];
  sock_pair(SOCK_STREAM, sv);
  tdl_close(sv[0]);
  tdl_writer w;
  assert_int_equal(tdl_writer_init(&w, sv[1], NULL, 16, 64), 0);
  assert_int_equal(tdl_writer_puts(&w, "+PONG\r\n"), 0);
  int e = tdl_writer_flush(&w, soon(LONG_WAIT));
  assert_true(e == -EPIPE || e == -ECONNRESET);
  assert_int_equal(tdl_writer_len(&w), 7);
  assert_int_equal(tdl_writer_destroy(&w), 0);
  tdl_close(sv[1]);
  return NULL;
}

static void writer_peer_gone(void **state)
{
  (void)state;
  struct sigaction sa;
  assert_int_equal(sigaction(SIGPIPE, NULL, &sa), 0);
  assert_ptr_equal(sa.sa_handler, SIG_DFL);
  run_fiber(gone_body, NULL);
}

/* On a pipe: write(); a reader that has gone is -EPIPE once SIGPIPE is
 * ignored (write() on a pipe raises it otherwise, as net.h says). */
static void *pipe_body(void *arg)
{
  (void)arg;
  int p[2];
  t_pipe(p);
  tdl_writer w;
  assert_int_equal(tdl_writer_init(&w, p[1], NULL, 16, 64), 0);
  assert_int_equal(tdl_writer_puts(&w, "hello\n"), 0);
  assert_int_equal(tdl_writer_flush(&w, soon(LONG_WAIT)), 0);
  assert_int_equal(tdl_writer_puts(&w, "again\n"), 0);
  assert_int_equal(tdl_writer_flush(&w, soon(LONG_WAIT)), 0);
  char buf[16];
  assert_int_equal(tdl_net_recv_exactly(p[0], buf, 12, NULL, soon(LONG_WAIT)), 0);
  assert_memory_equal(buf, "hello\nagain\n", 12);
  tdl_close(p[0]);
  assert_int_equal(tdl_writer_puts(&w, "lost"), 0);
  assert_int_equal(tdl_writer_flush(&w, soon(LONG_WAIT)), -EPIPE);
  assert_int_equal(tdl_writer_len(&w), 4);
  assert_int_equal(tdl_writer_destroy(&w), 0);
  tdl_close(p[1]);
  return NULL;
}

static void writer_on_a_pipe(void **state)
{
  (void)state;
  struct sigaction ign = {.sa_handler = SIG_IGN}, old;
  assert_int_equal(sigaction(SIGPIPE, &ign, &old), 0);
  run_fiber(pipe_body, NULL);
  assert_int_equal(sigaction(SIGPIPE, &old, NULL), 0);
}

int main(void)
{
  signal(SIGPIPE, SIG_DFL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(reader_pipelined_and_fixed, setup, teardown),
      cmocka_unit_test_setup_teardown(reader_grows_and_gives_back, setup, teardown),
      cmocka_unit_test_setup_teardown(reader_message_over_max, setup, teardown),
      cmocka_unit_test_setup_teardown(reader_need_length_prefixed, setup, teardown),
      cmocka_unit_test_setup_teardown(allocation_failure_loses_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(reader_end_of_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(one_fiber_at_a_time, setup, teardown),
      cmocka_unit_test_setup_teardown(init_errors_and_destroyed, setup, teardown),
      cmocka_unit_test_setup_teardown(writer_formats, setup, teardown),
      cmocka_unit_test_setup_teardown(writer_batch_is_one_system_call, setup, teardown),
      cmocka_unit_test_setup_teardown(writer_maximum, setup, teardown),
      cmocka_unit_test_setup_teardown(writer_peer_stops_reading_unix, setup, teardown),
      cmocka_unit_test_setup_teardown(writer_peer_stops_reading_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(writer_peer_gone, setup, teardown),
      cmocka_unit_test_setup_teardown(writer_on_a_pipe, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
