/* SPDX-License-Identifier: MIT */
/* Connection tracking (net.h, tdl_conns): the order of eviction and the
 * counts, with a callback and no sockets; then a small line server on
 * loopback: silent clients up to the cap and a new client still served
 * while the oldest silent one is closed; every connection busy and the new
 * one refused; the first-byte and idle deadlines; bad input. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

#define LONG_WAIT T_HANG /* for what must happen: a bound, not a delay */

/* ------------------------------------------------------------------------ */
/* The policy alone                                                          */
/* ------------------------------------------------------------------------ */

static tdl_conn *evicted_log[16];
static int nevicted;

static void record_evict(tdl_conn *c, void *arg)
{
  (void)arg;
  assert_true(tdl_conn_evicted(c));
  evicted_log[nevicted++] = c;
}

static void test_bad_input(void **state)
{
  (void)state;
  tdl_conns cs;
  tdl_conns_options o = {.max = 4};
  assert_int_equal(tdl_conns_init(NULL, L, &o), -EINVAL);
  assert_int_equal(tdl_conns_init(&cs, NULL, &o), -EINVAL);
  assert_int_equal(tdl_conns_init(&cs, L, NULL), -EINVAL);
  o.max = 0; /* a server that takes no connection */
  assert_int_equal(tdl_conns_init(&cs, L, &o), -EINVAL);
  o.max = 4;
  o.first_byte = -5;
  assert_int_equal(tdl_conns_init(&cs, L, &o), -EINVAL);
  o.first_byte = 0;
  o.idle = -2;
  assert_int_equal(tdl_conns_init(&cs, L, &o), -EINVAL);
  o.idle = TDL_FOREVER;
  o.first_byte = TDL_FOREVER;
  assert_int_equal(tdl_conns_init(&cs, L, &o), 0);

  /* Without an evict callback a connection needs a fiber to cancel. */
  tdl_conn c;
  assert_int_equal(tdl_conns_admit(&cs, &c, 0), -EINVAL);
  assert_int_equal(tdl_conns_admit(NULL, &c, 1), -EINVAL);
  assert_int_equal(tdl_conns_admit(&cs, NULL, 1), -EINVAL);
  /* NULL and never-admitted connections: harmless. */
  tdl_conn zero = {0};
  assert_int_equal(tdl_conn_idle(NULL), 0);
  assert_int_equal(tdl_conn_idle(&zero), 0);
  tdl_conn_busy(NULL);
  tdl_conn_busy(&zero);
  tdl_conn_release(NULL);
  tdl_conn_release(&zero);
  assert_false(tdl_conn_evicted(NULL));
  assert_false(tdl_conn_evicted(&zero));
  assert_int_equal(tdl_conns_evict_idle(NULL, 3), 0);
  assert_int_equal(tdl_conns_destroy(NULL), -EINVAL);
  assert_int_equal(tdl_conns_destroy(&cs), 0);

  /* A cap above the fd limit is lowered to what the limit leaves room
   * for; UINT_MAX means "as many as the fds allow". */
  unsigned room = tdl_conns_fd_room();
  assert_true(room > 0);
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  assert_true(room < rl.rlim_cur);
  tdl_conns_stats st;
  o.max = (unsigned)rl.rlim_cur + 1000;
  assert_int_equal(tdl_conns_init(&cs, L, &o), 0);
  tdl_conns_stats_get(&cs, &st);
  assert_int_equal(st.max, room);
  assert_int_equal(tdl_conns_destroy(&cs), 0);
  o.max = UINT_MAX;
  assert_int_equal(tdl_conns_init(&cs, L, &o), 0);
  tdl_conns_stats_get(&cs, &st);
  assert_int_equal(st.max, room);
  assert_int_equal(tdl_conns_destroy(&cs), 0);
  o.max = 3; /* below it: as asked */
  assert_int_equal(tdl_conns_init(&cs, L, &o), 0);
  tdl_conns_stats_get(&cs, &st);
  assert_int_equal(st.max, 3);
  assert_int_equal(tdl_conns_destroy(&cs), 0);

  /* A limit that leaves no room at all. */
  struct rlimit tiny = {.rlim_cur = 20, .rlim_max = rl.rlim_max};
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &tiny), 0);
  assert_int_equal(tdl_conns_fd_room(), 0);
  assert_int_equal(tdl_conns_init(&cs, L, &o), -EMFILE);
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

static void test_eviction_order(void **state)
{
  (void)state;
  tdl_conns cs;
  tdl_conns_stats st;
  tdl_conn c[6];
  nevicted = 0;
  assert_int_equal(tdl_conns_init(&cs, L, &(tdl_conns_options){.max = 3, .evict = record_evict}), 0);

  /* Fresh connections wait for their first byte: idle, evictable, with
   * the first-byte deadline (10 s by default) from admission. */
  tdl_time_t now = tdl_now();
  for (int i = 0; i < 3; i++) {
    assert_false(tdl_conns_full(&cs));
    assert_int_equal(tdl_conns_admit(&cs, &c[i], 0), 0);
  }
  assert_true(tdl_conns_full(&cs));
  assert_false(tdl_conns_full(NULL));
  tdl_time_t fb = tdl_conn_idle(&c[0]);
  assert_true(fb >= now + 10 * TDL_SEC && fb <= tdl_now() + 10 * TDL_SEC);
  assert_int_equal(tdl_conn_idle(&c[0]), fb); /* again: the same */
  tdl_conns_stats_get(&cs, &st);
  assert_int_equal(st.open, 3);
  assert_int_equal(st.idle, 3);

  /* c1 is in a request; c3 comes: c0, idle longest, makes room. */
  tdl_conn_busy(&c[1]);
  assert_int_equal(tdl_conns_admit(&cs, &c[3], 0), 0);
  assert_int_equal(nevicted, 1);
  assert_ptr_equal(evicted_log[0], &c[0]);
  assert_true(tdl_conns_full(&cs)); /* c0 still counted, but not against the cap */
  assert_true(tdl_conn_evicted(&c[0]));
  assert_int_equal(tdl_conn_idle(&c[0]), 0); /* a deadline long past */
  tdl_conn_busy(&c[0]);                      /* changes nothing */
  assert_true(tdl_conn_evicted(&c[0]));
  tdl_conns_stats_get(&cs, &st);
  assert_int_equal(st.open, 4); /* c0 still holds its fd until released */
  assert_int_equal(st.idle, 2);
  assert_int_equal(st.evicted, 1);

  /* c1 finishes its request and waits for the next (idle deadline): it
   * is now the newest idle one.  c4 evicts c2, then c3, then c1. */
  tdl_conn_release(&c[0]);
  tdl_time_t id = tdl_conn_idle(&c[1]);
  assert_true(id >= now + 60 * TDL_SEC);
  assert_int_equal(tdl_conns_admit(&cs, &c[4], 0), 0);
  assert_ptr_equal(evicted_log[1], &c[2]);
  assert_int_equal(tdl_conns_admit(&cs, &c[5], 0), 0);
  assert_ptr_equal(evicted_log[2], &c[3]);
  tdl_conn_release(&c[2]);
  tdl_conn_release(&c[3]);

  /* Every connection busy: the next is refused and nothing changes. */
  tdl_conn_busy(&c[1]);
  tdl_conn_busy(&c[4]);
  tdl_conn_busy(&c[5]);
  tdl_conn extra;
  assert_int_equal(tdl_conns_admit(&cs, &extra, 0), -EAGAIN);
  tdl_conns_stats_get(&cs, &st);
  assert_int_equal(st.open, 3);
  assert_int_equal(st.refused, 1);
  assert_int_equal(st.admitted, 6);
  assert_int_equal(nevicted, 3);

  /* A graceful shutdown: evict whatever is idle, oldest first. */
  tdl_conn_idle(&c[5]);
  tdl_conn_idle(&c[1]);
  assert_int_equal(tdl_conns_evict_idle(&cs, 1), 1);
  assert_ptr_equal(evicted_log[3], &c[5]);
  assert_int_equal(tdl_conns_evict_idle(&cs, SIZE_MAX), 1);
  assert_ptr_equal(evicted_log[4], &c[1]);
  assert_int_equal(tdl_conns_evict_idle(&cs, SIZE_MAX), 0);

  assert_int_equal(tdl_conns_destroy(&cs), -EBUSY);
  tdl_conn_release(&c[1]);
  tdl_conn_release(&c[4]);
  tdl_conn_release(&c[5]);
  tdl_conn_release(&c[5]); /* twice: harmless */
  tdl_conns_stats_get(&cs, &st);
  assert_int_equal(st.open, 0);
  assert_int_equal(st.idle, 0);
  assert_int_equal(tdl_conns_destroy(&cs), 0);
}

/* ------------------------------------------------------------------------ */
/* A line server: "ping\n" -> "pong\n", one fiber per connection             */
/* ------------------------------------------------------------------------ */

typedef struct server {
  tdl_conns cs;
  int lfd;
  tdl_addr addr;
  tdl_fiber_t acceptor;
  int timeouts; /* connections closed by their first-byte or idle deadline */
} server;

typedef struct handler {
  server *srv;
  int fd;
} handler;

static void *serve_conn(void *arg)
{
  handler h = *(handler *)arg;
  free(arg);
  tdl_conn c;
  if (tdl_conns_admit(&h.srv->cs, &c, tdl_fiber_self()) < 0) {
    tdl_close(h.fd); /* at the cap, every connection busy */
    return NULL;
  }
  char buf[64];
  size_t len = 0;
  for (;;) {
    ssize_t n = tdl_recv(h.fd, buf + len, sizeof buf - len, 0, len ? TDL_FOREVER : tdl_conn_idle(&c));
    if (n == -ETIMEDOUT)
      h.srv->timeouts++;
    if (n <= 0)
      break;
    tdl_conn_busy(&c); /* a request began */
    len += (size_t)n;
    if (memchr(buf, '\n', len)) {
      if (tdl_net_send_all(h.fd, "pong\n", 5, NULL, tdl_after(LONG_WAIT)) < 0)
        break;
      len = 0;
    } else if (len == sizeof buf) {
      break;
    }
  }
  tdl_conn_release(&c);
  tdl_close(h.fd);
  return NULL;
}

static void *accept_loop(void *arg)
{
  server *s = arg;
  for (;;) {
    int fd = tdl_net_accept(s->lfd, NULL, TDL_FOREVER);
    if (fd == -ECANCELED)
      break;
    if (fd < 0)
      continue;
    handler *h = malloc(sizeof *h);
    assert_non_null(h);
    *h = (handler){s, fd};
    assert_int_equal(tdl_fiber_spawn(NULL, L, serve_conn, h, &(tdl_fiber_options){.detached = true}), 0);
  }
  return NULL;
}

static void server_start(server *s, const tdl_conns_options *o)
{
  memset(s, 0, sizeof *s);
  assert_int_equal(tdl_conns_init(&s->cs, L, o), 0);
  assert_int_equal(tdl_addr_parse(&s->addr, "127.0.0.1:0"), 0);
  s->lfd = tdl_net_listen(&s->addr, 64, 0);
  assert_true(s->lfd >= 0);
  assert_int_equal(tdl_net_local_addr(s->lfd, &s->addr), 0);
  s->acceptor = go(accept_loop, s);
}

/* Close every connection left and wait until the server has released them. */
static void server_stop(server *s)
{
  tdl_conns_stats st;
  tdl_fiber_cancel(L, s->acceptor);
  for (;;) {
    tdl_conns_stats_get(&s->cs, &st);
    if (st.open == 0)
      break;
    tdl_conns_evict_idle(&s->cs, SIZE_MAX);
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  }
  tdl_close(s->lfd);
  assert_int_equal(tdl_conns_destroy(&s->cs), 0);
}

/* Wait (bounded) until the server holds `open` connections. */
static void wait_open(server *s, size_t open)
{
  tdl_time_t end = tdl_after(LONG_WAIT);
  tdl_conns_stats st;
  for (;;) {
    tdl_conns_stats_get(&s->cs, &st);
    if (st.open == open)
      return;
    assert_true(tdl_now() < end);
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  }
}

static void ping(int fd)
{
  assert_int_equal(tdl_net_send_all(fd, "ping\n", 5, NULL, tdl_after(LONG_WAIT)), 0);
  char buf[5];
  assert_int_equal(tdl_net_recv_exactly(fd, buf, 5, NULL, tdl_after(LONG_WAIT)), 0);
  assert_memory_equal(buf, "pong\n", 5);
}

/* ping, or false when the server closed fd instead of answering. */
static bool pinged(int fd)
{
  int e = tdl_net_send_all(fd, "ping\n", 5, NULL, tdl_after(LONG_WAIT));
  if (e == -EPIPE || e == -ECONNRESET)
    return false;
  assert_int_equal(e, 0);
  char buf[5];
  e = tdl_net_recv_exactly(fd, buf, 5, NULL, tdl_after(LONG_WAIT));
  if (e == -EPIPE || e == -ECONNRESET)
    return false;
  assert_int_equal(e, 0);
  assert_memory_equal(buf, "pong\n", 5);
  return true;
}

/* The deadlines below are short, and a client must beat them: a loaded
 * machine may stop this process for longer meanwhile, and then the server
 * closes first, as it should.  Such a try proves nothing either way: the
 * test tries again with twice the deadline (bounded). */
static tdl_time_t doubled(tdl_time_t d)
{
  assert_true(d < LONG_WAIT / 4);
  return 2 * d;
}

/* The server closed fd: EOF (or a reset) within the bound. */
static void closed_by_server(int fd)
{
  char b;
  ssize_t n = tdl_recv(fd, &b, 1, 0, tdl_after(LONG_WAIT));
  assert_true(n == 0 || n == -ECONNRESET);
}

/* The server has not closed fd (nothing to read, no EOF). */
static void still_open(int fd)
{
  char b;
  assert_int_equal(tdl_recv(fd, &b, 1, 0, tdl_now()), -ETIMEDOUT);
}

enum { CAP = 8 };

static void *at_the_cap(void *arg)
{
  (void)arg;
  server s;
  server_start(&s, &(tdl_conns_options){.max = CAP});
  int silent[CAP];
  for (int i = 0; i < CAP; i++) {
    silent[i] = tdl_net_connect(&s.addr, tdl_after(LONG_WAIT));
    assert_true(silent[i] >= 0);
    wait_open(&s, (size_t)i + 1); /* admitted in this order */
  }
  /* Full of connections that say nothing: a new client is still served... */
  int fresh = tdl_net_connect(&s.addr, tdl_after(LONG_WAIT));
  assert_true(fresh >= 0);
  ping(fresh);
  /* ...because the oldest silent one was closed to make room. */
  closed_by_server(silent[0]);
  for (int i = 1; i < CAP; i++)
    still_open(silent[i]);
  tdl_conns_stats st;
  tdl_conns_stats_get(&s.cs, &st);
  assert_int_equal(st.evicted, 1);
  assert_int_equal(st.refused, 0);
  wait_open(&s, CAP);

  /* The served client, now idle on keep-alive, is the newest idle one: the
   * next newcomers evict silent[1] and silent[2] first, not it. */
  int more[2];
  for (int k = 0; k < 2; k++) {
    more[k] = tdl_net_connect(&s.addr, tdl_after(LONG_WAIT));
    assert_true(more[k] >= 0);
    ping(more[k]);
    closed_by_server(silent[k + 1]);
  }
  ping(fresh);
  still_open(silent[3]);
  tdl_close(more[0]);
  tdl_close(more[1]);
  tdl_close(fresh);
  for (int i = 0; i < CAP; i++)
    tdl_close(silent[i]);
  server_stop(&s);
  return NULL;
}

static void test_silent_clients_at_the_cap(void **state)
{
  (void)state;
  go(at_the_cap, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void *all_busy(void *arg)
{
  (void)arg;
  server s;
  server_start(&s, &(tdl_conns_options){.max = 2});
  int c[2];
  for (int i = 0; i < 2; i++) {
    c[i] = tdl_net_connect(&s.addr, tdl_after(LONG_WAIT));
    assert_true(c[i] >= 0);
    /* Half a request: busy, not evictable. */
    assert_int_equal(tdl_net_send_all(c[i], "pi", 2, NULL, tdl_after(LONG_WAIT)), 0);
  }
  tdl_conns_stats st;
  for (;;) { /* until both are busy */
    tdl_conns_stats_get(&s.cs, &st);
    if (st.open == 2 && st.idle == 0)
      break;
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  }
  int late = tdl_net_connect(&s.addr, tdl_after(LONG_WAIT));
  assert_true(late >= 0);
  closed_by_server(late); /* refused: closed at once */
  tdl_conns_stats_get(&s.cs, &st);
  assert_int_equal(st.refused, 1);
  assert_int_equal(st.evicted, 0);
  /* The busy ones finish their requests undisturbed. */
  for (int i = 0; i < 2; i++) {
    assert_int_equal(tdl_net_send_all(c[i], "ng\n", 3, NULL, tdl_after(LONG_WAIT)), 0);
    char buf[5];
    assert_int_equal(tdl_net_recv_exactly(c[i], buf, 5, NULL, tdl_after(LONG_WAIT)), 0);
    assert_memory_equal(buf, "pong\n", 5);
  }
  tdl_close(late);
  for (int i = 0; i < 2; i++)
    tdl_close(c[i]);
  server_stop(&s);
  return NULL;
}

static void test_all_busy_refuses(void **state)
{
  (void)state;
  go(all_busy, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void *first_byte(void *arg)
{
  (void)arg;
  for (tdl_time_t fb = 50 * TDL_MSEC;; fb = doubled(fb)) {
    server s;
    /* A short first-byte deadline, no idle limit. */
    server_start(&s, &(tdl_conns_options){.max = 16, .first_byte = fb, .idle = TDL_FOREVER});
    int silent = tdl_net_connect(&s.addr, tdl_after(LONG_WAIT));
    assert_true(silent >= 0);
    wait_open(&s, 1);
    int talker = tdl_net_connect(&s.addr, tdl_after(LONG_WAIT));
    assert_true(talker >= 0);
    if (!pinged(talker)) { /* the talker's first byte came after its deadline */
      tdl_close(silent);
      tdl_close(talker);
      server_stop(&s);
      continue;
    }
    /* The one that never spoke is closed at its first-byte deadline... */
    closed_by_server(silent);
    assert_int_equal(s.timeouts, 1);
    /* ...while the one that did waits for its next request without limit,
     * though its own first-byte deadline has passed too by now. */
    assert_int_equal(tdl_sleep(tdl_after(fb + fb / 5)), 0);
    still_open(talker);
    ping(talker);
    tdl_close(silent);
    tdl_close(talker);
    server_stop(&s);
    return NULL;
  }
}

static void test_first_byte_deadline(void **state)
{
  (void)state;
  go(first_byte, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void *idle_deadline(void *arg)
{
  (void)arg;
  for (tdl_time_t idle = 50 * TDL_MSEC;; idle = doubled(idle)) {
    server s;
    server_start(&s, &(tdl_conns_options){.max = 16, .idle = idle});
    int c = tdl_net_connect(&s.addr, tdl_after(LONG_WAIT));
    assert_true(c >= 0);
    bool served = pinged(c) && pinged(c); /* else this client was idle for longer meanwhile */
    if (served) {
      closed_by_server(c); /* idle too long between requests */
      assert_int_equal(s.timeouts, 1);
    }
    tdl_close(c);
    server_stop(&s);
    if (served)
      return NULL;
  }
}

static void test_idle_deadline(void **state)
{
  (void)state;
  go(idle_deadline, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
      cmocka_unit_test_setup_teardown(test_eviction_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_silent_clients_at_the_cap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_all_busy_refuses, setup, teardown),
      cmocka_unit_test_setup_teardown(test_first_byte_deadline, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idle_deadline, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
