/* The buffered reader: pipelined messages, growth up to the maximum and
 * back to the initial buffer, messages over the maximum, length-prefixed
 * reads, failed allocations, and one fiber at a time.  Every wait is
 * bounded; nothing here measures time. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

#define LONG_WAIT (5 * TDL_SEC) /* for what must happen: a bound, not a delay */

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
  tdl_sleep_for(10 * TDL_MSEC);
  send_str(fd, "T /c\r\n\r");
  tdl_sleep_for(10 * TDL_MSEC);
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
  assert_int_equal(tdl_reader_until(&r, "\n", 1, soon(LONG_WAIT)), -EPIPE);
  assert_int_equal(tdl_reader_need(&r, 1, soon(LONG_WAIT)), -EPIPE);
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
  ssize_t result;
} busy_ctx;

static void *parked_until(void *arg)
{
  busy_ctx *b = arg;
  b->result = tdl_reader_until(&b->r, "\n", 1, soon(LONG_WAIT));
  return NULL;
}

/* While one fiber's fill is parked, the others get -EBUSY. */
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

  return NULL;
}

static void init_errors_and_destroyed(void **state)
{
  (void)state;
  run_fiber(misuse_body, NULL);
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
      cmocka_unit_test_setup_teardown(one_fiber_at_a_time, setup, teardown),
      cmocka_unit_test_setup_teardown(init_errors_and_destroyed, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
