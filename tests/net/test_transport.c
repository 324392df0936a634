/* SPDX-License-Identifier: MIT */
/*
 * The transport slot of the buffered reader and writer
 * (tdl_net_transport_set): a transport that flips every byte (x ^ 0xff)
 * carries both; clearing it goes back to plain fiber I/O.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

typedef struct flip {
  int fd;
  int reads, writes;
} flip;

static ssize_t flip_read(void *ctx, void *buf, size_t len, tdl_time_t deadline)
{
  flip *f = ctx;
  f->reads++;
  ssize_t n = tdl_read(f->fd, buf, len, deadline);
  for (ssize_t i = 0; i < n; i++)
    ((unsigned char *)buf)[i] ^= 0xff;
  return n;
}

static ssize_t flip_write(void *ctx, const void *buf, size_t len, tdl_time_t deadline)
{
  flip *f = ctx;
  f->writes++;
  unsigned char tmp[64];
  if (len > sizeof tmp)
    len = sizeof tmp; /* partial writes: the writer's flush goes on */
  for (size_t i = 0; i < len; i++)
    tmp[i] = ((const unsigned char *)buf)[i] ^ 0xff;
  return tdl_write(f->fd, tmp, len, deadline);
}

static const tdl_net_transport flipper = {flip_read, flip_write};

typedef struct ctx {
  int a, b;
  int done;
} ctx;

static void *run(void *arg)
{
  ctx *c = arg;
  flip fa = {.fd = c->a};
  assert_int_equal(tdl_net_transport_set(c->a, &flipper, &fa), 0);
  tdl_writer w;
  assert_int_equal(tdl_writer_init(&w, c->a, NULL, 16, 1024), 0);
  static const char line[] = "a line longer than sixty-four bytes, so that the flush takes more than one write\n";
  assert_int_equal(tdl_writer_puts(&w, line), 0);
  assert_int_equal(tdl_writer_flush(&w, tdl_after(T_HANG)), 0);
  assert_true(fa.writes >= 2);
  /* On the wire: flipped. */
  char raw[128];
  assert_int_equal(tdl_net_recv_exactly(c->b, raw, sizeof line - 1, NULL, tdl_after(T_HANG)), 0);
  assert_int_equal((unsigned char)raw[0], (unsigned char)('a' ^ 0xff));
  /* Back the other way: flipped bytes come out plain through the reader. */
  for (size_t i = 0; i < sizeof line - 1; i++)
    raw[i] = (char)(line[i] ^ 0xff);
  assert_int_equal(tdl_net_send_all(c->b, raw, sizeof line - 1, NULL, tdl_after(T_HANG)), 0);
  tdl_reader r;
  assert_int_equal(tdl_reader_init(&r, c->a, NULL, 32, 1024), 0);
  ssize_t n = tdl_reader_until(&r, "\n", 1, tdl_after(T_HANG));
  assert_int_equal(n, sizeof line - 1);
  assert_memory_equal(tdl_reader_data(&r), line, sizeof line - 1);
  assert_true(fa.reads >= 1);
  tdl_reader_consume(&r, (size_t)n);
  /* Cleared: plain again. */
  assert_int_equal(tdl_net_transport_set(c->a, NULL, NULL), 0);
  assert_int_equal(tdl_net_send_all(c->b, "plain\n", 6, NULL, tdl_after(T_HANG)), 0);
  int reads = fa.reads;
  assert_int_equal(tdl_reader_until(&r, "\n", 1, tdl_after(T_HANG)), 6);
  assert_memory_equal(tdl_reader_data(&r), "plain\n", 6);
  assert_int_equal(fa.reads, reads);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  assert_int_equal(tdl_writer_destroy(&w), 0);
  c->done = 1;
  return NULL;
}

static void carried(void **state)
{
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  ctx c = {.a = sv[0], .b = sv[1]};
  go(run, &c);
  assert_true(t_run_until(L, &c.done, 100000));
  tdl_close(sv[0]);
  tdl_close(sv[1]);
}

static void bad_input(void **state)
{
  (void)state;
  tdl_net_transport half = {flip_read, NULL};
  assert_int_equal(tdl_net_transport_set(-1, &flipper, NULL), -EBADF);
  assert_int_equal(tdl_net_transport_set(1 << 30, &flipper, NULL), -EBADF);
  assert_int_equal(tdl_net_transport_set(3, &half, NULL), -EINVAL);
  /* Clearing what was never set is harmless. */
  assert_int_equal(tdl_net_transport_set(5000, NULL, NULL), 0);
  assert_int_equal(tdl_net_transport_set(3, NULL, NULL), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(carried, setup, teardown),
    cmocka_unit_test(bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
