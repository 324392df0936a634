/* SPDX-License-Identifier: MIT */
/* libtreadle-hook: sleep, usleep, nanosleep and clock_nanosleep, and the
 * timeouts of poll, ppoll, select and SO_RCVTIMEO (include/treadle/hook.h).  In a fiber they park it (tdl_sleep) on
 * CLOCK_MONOTONIC and CLOCK_REALTIME, relative or absolute; a cancel ends
 * them early as a signal would (EINTR, the time left); bad arguments get
 * libc's EINVAL; other clocks and every call outside a fiber are libc's.
 * Linked with libtreadle-hook, so every sleep below is the hook's.
 *
 * Timing: the only times asserted are lower bounds that the calls promise
 * (a sleep never ends before what it was asked), read on the kernel's
 * clocks; upper bounds are never asserted.  That a sleep parked its fiber
 * instead of the thread shows in the order fibers finish and in the hook's
 * `slept` count. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "hook_helpers.h"
#include <treadle/hook.h>

static uint64_t slept_count(void)
{
  tdl_hook_stats s;
  tdl_hook_stats_get(&s);
  return s.slept;
}

/* A clock's reading, in ns. */
static tdl_time_t clock_ns(clockid_t c)
{
  struct timespec ts;
  assert_int_equal(clock_gettime(c, &ts), 0);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

static struct timespec ts_of(tdl_time_t ns) { return (struct timespec){(time_t)(ns / TDL_SEC), (long)(ns % TDL_SEC)}; }

/* ---- each kind of sleep parks its fiber ---- */

enum kind { NANOSLEEP, MONO_REL, REAL_REL, MONO_ABS, REAL_ABS, USLEEP, SLEEP, NKINDS };
static const char *const kind_name[NKINDS] = {"nanosleep", "clock_nanosleep(MONOTONIC)", "clock_nanosleep(REALTIME)",
                                              "clock_nanosleep(MONOTONIC, ABSTIME)",
                                              "clock_nanosleep(REALTIME, ABSTIME)", "usleep", "sleep"};

/* Sleep `ns` by `kind` (sleep: whole seconds, rounded down); the call's
 * result as 0 for success.  *clock: the clock the sleep is measured on, and
 * *start its reading before the call (what the lower bound counts from). */
static int sleep_by(enum kind kind, tdl_time_t ns, clockid_t *clock, tdl_time_t *start)
{
  /* An absolute REALTIME deadline is a point on that clock; every other
   * sleep is an interval, measured on the monotonic one. */
  *clock = kind == REAL_ABS ? CLOCK_REALTIME : CLOCK_MONOTONIC;
  *start = clock_ns(*clock);
  struct timespec ts = ts_of(ns), abs = ts_of(*start + ns);
  switch (kind) {
  case NANOSLEEP:
    return nanosleep(&ts, NULL);
  case MONO_REL:
    return clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
  case REAL_REL:
    return clock_nanosleep(CLOCK_REALTIME, 0, &ts, NULL);
  case MONO_ABS:
    return clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &abs, NULL);
  case REAL_ABS:
    return clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &abs, NULL);
  case USLEEP:
    return usleep((useconds_t)(ns / TDL_USEC));
  case SLEEP:
    return (int)sleep((unsigned)(ns / TDL_SEC));
  default:
    fail();
  }
  return -1;
}

typedef struct sleeper {
  enum kind kind;
  tdl_time_t ns;
  int *clock; /* shared: which sleeper ended when */
  int order;
  int result;
  tdl_time_t took; /* on the sleep's own clock */
} sleeper;

static void *sleeper_fiber(void *arg)
{
  sleeper *s = arg;
  clockid_t c;
  tdl_time_t t0;
  s->result = sleep_by(s->kind, s->ns, &c, &t0);
  s->took = clock_ns(c) - t0;
  s->order = ++*s->clock;
  return NULL;
}

static void *parks_main(void *arg)
{
  (void)arg;
  for (int k = 0; k < NKINDS; k++) {
    print_message("      %s\n", kind_name[k]);
    /* The long sleeper starts first: were the sleep to block the thread,
     * it would end first, the short one only after it. */
    int clock = 0;
    tdl_time_t unit = k == SLEEP ? TDL_SEC : TDL_MSEC;
    sleeper longer = {.kind = k, .ns = (k == SLEEP ? 1 : 200) * unit, .clock = &clock};
    sleeper shorter = {.kind = k, .ns = k == SLEEP ? 0 : 2 * unit, .clock = &clock};
    uint64_t before = slept_count();
    tdl_fiber_t a = spawn(sleeper_fiber, &longer), b = spawn(sleeper_fiber, &shorter);
    join(a);
    join(b);
    assert_int_equal(longer.result, 0);
    assert_int_equal(shorter.result, 0);
    assert_int_equal(shorter.order, 1);
    assert_int_equal(longer.order, 2);
    assert_true(longer.took >= longer.ns); /* never shorter than asked */
    assert_int_equal(slept_count() - before, 2);
  }
  return NULL;
}

static void test_sleeps_park_the_fiber(void **state)
{
  (void)state;
  run_main(parks_main, NULL);
}

/* ---- a sleep lasts what it was asked, counted from the call ---- */

/* A fiber that ran a while without parking (a computation) reads the loop's
 * time as of when it started (loop.h: tdl_now() is cached): a sleep must
 * still last what it asks from the moment it is called, as libc's does,
 * also while other fibers keep the loop turning (a ticker here), each turn
 * of which reads the clock again and runs the timers then due. */
static void busy(tdl_time_t ns)
{
  tdl_time_t end = clock_ns(CLOCK_MONOTONIC) + ns;
  while (clock_ns(CLOCK_MONOTONIC) < end) {
  }
}

static void *ticker(void *arg)
{
  const int *done = arg;
  while (!*done)
    tdl_sleep(tdl_after(TDL_MSEC));
  return NULL;
}

static void *after_busy_main(void *arg)
{
  (void)arg;
  int done = 0;
  tdl_fiber_t t = spawn(ticker, &done);
  for (int k = 0; k < NKINDS; k++) {
    if (k == SLEEP)
      continue; /* a second at a time: the same path as nanosleep's */
    print_message("      %s\n", kind_name[k]);
    tdl_sleep(tdl_after(TDL_MSEC)); /* a fresh turn of the loop */
    busy(30 * TDL_MSEC);
    clockid_t c;
    tdl_time_t t0, ns = 20 * TDL_MSEC;
    assert_int_equal(sleep_by(k, ns, &c, &t0), 0);
    assert_true(clock_ns(c) - t0 >= ns);
  }
  done = 1;
  join(t);
  return NULL;
}

/* The same for a timeout the user gives a wait: poll's, ppoll's,
 * select's, SO_RCVTIMEO's on a read.  Nothing comes: each must wait its
 * whole timeout from the call. */
static void *timeouts_after_busy_main(void *arg)
{
  (void)arg;
  int done = 0;
  tdl_fiber_t t = spawn(ticker, &done);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const tdl_time_t ns = 20 * TDL_MSEC;
  for (int k = 0; k < 4; k++) {
    tdl_sleep(tdl_after(TDL_MSEC)); /* a fresh turn of the loop */
    busy(30 * TDL_MSEC);
    tdl_time_t t0 = clock_ns(CLOCK_MONOTONIC);
    char b;
    if (k == 0) {
      struct pollfd p = {.fd = sv[0], .events = POLLIN};
      assert_int_equal(poll(&p, 1, (int)(ns / TDL_MSEC)), 0);
    } else if (k == 1) {
      struct pollfd p = {.fd = sv[0], .events = POLLIN};
      struct timespec ts = {0, ns};
      assert_int_equal(ppoll(&p, 1, &ts, NULL), 0);
    } else if (k == 2) {
      fd_set rd;
      FD_ZERO(&rd);
      FD_SET(sv[0], &rd);
      struct timeval tv = {0, ns / TDL_USEC};
      assert_int_equal(select(sv[0] + 1, &rd, NULL, NULL, &tv), 0);
    } else {
      struct timeval tv = {0, ns / TDL_USEC};
      assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
      assert_int_equal(read(sv[0], &b, 1), -1);
      assert_int_equal(errno, EAGAIN);
    }
    assert_true(clock_ns(CLOCK_MONOTONIC) - t0 >= ns);
  }
  close(sv[0]);
  close(sv[1]);
  done = 1;
  join(t);
  return NULL;
}

static void test_timeouts_last_from_the_call(void **state)
{
  (void)state;
  run_main(timeouts_after_busy_main, NULL);
}

static void test_sleep_lasts_from_the_call(void **state)
{
  (void)state;
  run_main(after_busy_main, NULL);
}

/* ---- absolute deadlines already past, zero sleeps ---- */

static void *past_main(void *arg)
{
  (void)arg;
  struct timespec zero = {0, 0}, past = {1, 0}; /* 1 s after each clock's origin */
  assert_int_equal(clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &past, NULL), 0);
  assert_int_equal(clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &past, NULL), 0);
  assert_int_equal(clock_nanosleep(CLOCK_MONOTONIC, 0, &zero, NULL), 0);
  assert_int_equal(nanosleep(&zero, NULL), 0);
  assert_int_equal(usleep(0), 0);
  assert_int_equal(sleep(0), 0u);
  return NULL;
}

static void test_past_and_zero(void **state)
{
  (void)state;
  run_main(past_main, NULL);
}

/* ---- bad arguments: libc's EINVAL, nothing slept ---- */

/* What each call says to a bad timespec: nanosleep -1 with errno, and
 * clock_nanosleep the error number, on either clock. */
static void check_einval(const struct timespec *bad)
{
  errno = 0;
  assert_int_equal(nanosleep(bad, NULL), -1);
  assert_int_equal(errno, EINVAL);
  assert_int_equal(clock_nanosleep(CLOCK_MONOTONIC, 0, bad, NULL), EINVAL);
  assert_int_equal(clock_nanosleep(CLOCK_REALTIME, 0, bad, NULL), EINVAL);
  assert_int_equal(clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, bad, NULL), EINVAL);
}

static const struct timespec bad_ts[] = {{0, 1000000000L}, {0, -1}, {-1, 0}};

static void *einval_main(void *arg)
{
  (void)arg;
  uint64_t before = slept_count();
  for (size_t i = 0; i < sizeof bad_ts / sizeof bad_ts[0]; i++)
    check_einval(&bad_ts[i]);
  assert_int_equal(slept_count(), before);
  return NULL;
}

static void test_bad_timespec_einval(void **state)
{
  (void)state;
  run_main(einval_main, NULL);
  /* libc says the same outside a fiber. */
  for (size_t i = 0; i < sizeof bad_ts / sizeof bad_ts[0]; i++)
    check_einval(&bad_ts[i]);
}

/* ---- other clocks are libc's ---- */

static void *other_clock_main(void *arg)
{
  int *libc_says = arg;
  uint64_t before = slept_count();
  struct timespec ts = {0, 1000};
  /* No such clock, and a thread's CPU clock (which cannot be slept on):
   * libc's answers, the same as outside a fiber. */
  assert_int_equal(clock_nanosleep((clockid_t)0x7fff, 0, &ts, NULL), libc_says[0]);
  assert_int_equal(clock_nanosleep(CLOCK_THREAD_CPUTIME_ID, 0, &ts, NULL), libc_says[1]);
  assert_int_equal(slept_count(), before); /* not the hook's sleep */
  return NULL;
}

static void test_other_clocks_pass_through(void **state)
{
  (void)state;
  struct timespec ts = {0, 1000};
  int libc_says[2] = {clock_nanosleep((clockid_t)0x7fff, 0, &ts, NULL),
                      clock_nanosleep(CLOCK_THREAD_CPUTIME_ID, 0, &ts, NULL)};
  assert_int_not_equal(libc_says[0], 0);
  assert_int_not_equal(libc_says[1], 0);
  run_main(other_clock_main, libc_says);
}

/* ---- a cancel ends a sleep as a signal would ---- */

typedef struct cut {
  enum kind kind;
  int r;          /* the call's result */
  int err;        /* errno after it (nanosleep, usleep) */
  struct timespec rem;
  int again_r;    /* the same call again, cancelled before it starts */
  struct timespec again_rem;
} cut;

#define LONG_S 10 /* asked of each sleep the cancel cuts */
static const struct timespec unset_rem = {-7, -7};

static int cut_call(enum kind kind, struct timespec *rem, int *err)
{
  struct timespec ts = {LONG_S, 0};
  struct timespec abs = ts_of(clock_ns(kind == REAL_ABS ? CLOCK_REALTIME : CLOCK_MONOTONIC) + LONG_S * TDL_SEC);
  int r = -100;
  errno = 0;
  switch (kind) {
  case NANOSLEEP:
    r = nanosleep(&ts, rem);
    break;
  case MONO_REL:
    r = clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, rem);
    break;
  case REAL_REL:
    r = clock_nanosleep(CLOCK_REALTIME, 0, &ts, rem);
    break;
  case MONO_ABS:
    r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &abs, rem);
    break;
  case REAL_ABS:
    r = clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &abs, rem);
    break;
  case USLEEP:
    r = usleep(LONG_S * 1000000u);
    break;
  case SLEEP:
    r = (int)sleep(LONG_S);
    break;
  default:
    fail();
  }
  *err = errno;
  return r;
}

static void *cut_fiber(void *arg)
{
  cut *c = arg;
  c->rem = c->again_rem = unset_rem;
  c->r = cut_call(c->kind, &c->rem, &c->err);
  int e;
  c->again_r = cut_call(c->kind, &c->again_rem, &e); /* sticky: at once */
  return NULL;
}

/* The time left, as a blocking call reports it: more than nothing, no more
 * than was asked. */
static void check_rem(const struct timespec *rem)
{
  assert_true(rem->tv_nsec >= 0 && rem->tv_nsec < 1000000000L);
  assert_true(rem->tv_sec > 0 || rem->tv_nsec > 0);
  assert_true(rem->tv_sec < LONG_S || (rem->tv_sec == LONG_S && rem->tv_nsec == 0));
}

static void *cancel_main(void *arg)
{
  (void)arg;
  for (int k = 0; k < NKINDS; k++) {
    print_message("      %s\n", kind_name[k]);
    cut c = {.kind = k};
    tdl_fiber_t f = spawn(cut_fiber, &c);
    assert_int_equal(tdl_fiber_yield(), 0); /* f is asleep */
    assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), f), 0);
    join(f);
    switch (k) {
    case NANOSLEEP:
      assert_int_equal(c.r, -1);
      assert_int_equal(c.err, EINTR);
      check_rem(&c.rem);
      assert_int_equal(c.again_r, -1);
      check_rem(&c.again_rem);
      break;
    case MONO_REL:
    case REAL_REL:
      assert_int_equal(c.r, EINTR);
      check_rem(&c.rem);
      assert_int_equal(c.again_r, EINTR);
      check_rem(&c.again_rem);
      break;
    case MONO_ABS:
    case REAL_ABS:
      /* An absolute sleep leaves *rem alone, as clock_nanosleep(2) says. */
      assert_int_equal(c.r, EINTR);
      assert_memory_equal(&c.rem, &unset_rem, sizeof unset_rem);
      assert_int_equal(c.again_r, EINTR);
      assert_memory_equal(&c.again_rem, &unset_rem, sizeof unset_rem);
      break;
    case USLEEP:
      assert_int_equal(c.r, -1);
      assert_int_equal(c.err, EINTR);
      assert_int_equal(c.again_r, -1);
      break;
    case SLEEP:
      /* The seconds left, rounded up: at least one, at most all. */
      assert_true(c.r >= 1 && c.r <= LONG_S);
      assert_true(c.again_r >= 1 && c.again_r <= LONG_S);
      break;
    default:
      fail();
    }
  }
  return NULL;
}

static void test_cancel_interrupts(void **state)
{
  (void)state;
  run_main(cancel_main, NULL);
}

/* A sleep with no rem to fill, and the longest one there is (the deadline
 * saturates: the sleep lasts until the cancel). */
typedef struct huge {
  int r, err;
  struct timespec rem;
} huge;

static void *huge_fiber(void *arg)
{
  huge *h = arg;
  struct timespec ts = {(time_t)INT64_MAX, 999999999L};
  h->r = nanosleep(&ts, &h->rem);
  h->err = errno;
  struct timespec ten = {LONG_S, 0};
  assert_int_equal(nanosleep(&ten, NULL), -1); /* no rem: still EINTR */
  assert_int_equal(errno, EINTR);
  assert_int_equal(clock_nanosleep(CLOCK_MONOTONIC, 0, &ten, NULL), EINTR);
  return NULL;
}

static void *huge_main(void *arg)
{
  (void)arg;
  huge h = {0};
  tdl_fiber_t f = spawn(huge_fiber, &h);
  assert_int_equal(tdl_fiber_yield(), 0);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), f), 0);
  join(f);
  assert_int_equal(h.r, -1);
  assert_int_equal(h.err, EINTR);
  assert_true(h.rem.tv_sec > 100L * 365 * 24 * 3600); /* centuries left */
  return NULL;
}

static void test_longest_sleep(void **state)
{
  (void)state;
  run_main(huge_main, NULL);
}

/* ---- outside a fiber: libc's sleeps, the thread blocks ---- */

static void test_outside_a_fiber(void **state)
{
  (void)state;
  uint64_t before = slept_count();
  struct timespec ts = {0, 2 * 1000 * 1000}, rem = unset_rem;
  tdl_time_t t0 = clock_ns(CLOCK_MONOTONIC);
  assert_int_equal(nanosleep(&ts, &rem), 0);
  assert_int_equal(clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL), 0);
  struct timespec abs = ts_of(clock_ns(CLOCK_REALTIME) + 2 * TDL_MSEC);
  assert_int_equal(clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &abs, NULL), 0);
  assert_true(clock_ns(CLOCK_REALTIME) >= (tdl_time_t)abs.tv_sec * TDL_SEC + abs.tv_nsec);
  assert_int_equal(usleep(2000), 0);
  assert_int_equal(sleep(0), 0u);
  assert_true(clock_ns(CLOCK_MONOTONIC) - t0 >= 6 * TDL_MSEC);
  assert_int_equal(slept_count(), before); /* none of them was the hook's */
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sleeps_park_the_fiber),
      cmocka_unit_test(test_sleep_lasts_from_the_call),
      cmocka_unit_test(test_timeouts_last_from_the_call),
      cmocka_unit_test(test_past_and_zero),
      cmocka_unit_test(test_bad_timespec_einval),
      cmocka_unit_test(test_other_clocks_pass_through),
      cmocka_unit_test(test_cancel_interrupts),
      cmocka_unit_test(test_longest_sleep),
      cmocka_unit_test(test_outside_a_fiber),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
