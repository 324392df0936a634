/* SPDX-License-Identifier: MIT */
/* Compacting idle fibers (tdl_fiber_compact_idle): a fiber reading into a
 * buffer on its own stack, sleeping, cancelled, parked deep near its guard,
 * 10,000 at once; the option off; bad input; on a uring loop a ring read in
 * flight is not compacted.  (Wake-ups from another thread racing the
 * compaction: test_compact_race.) */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

#include "base/fault.h"

/* A user timer that keeps L running (and waking) while every fiber is parked
 * for good: the compaction's own timer keeps no loop alive. */
static tdl_timer tick;
static void tick_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
}
static void ticker_on(void)
{
  tdl_timer_init(&tick, tick_cb, NULL);
  assert_int_equal(tdl_timer_start(L, &tick, TDL_MSEC, TDL_MSEC), 0);
}
static void ticker_off(void) { tdl_timer_stop(L, &tick); }

/* Run L until h is compacted (at most `turns` turns); its compacted bytes. */
static int run_until_compacted(tdl_fiber_t h, int turns)
{
  int c = 0;
  for (int i = 0; i < turns && (c = tdl_fiber_compacted(L, h)) == 0; i++)
    assert_true(tdl_loop_run(L, TDL_LOOP_ONCE) >= 0);
  return c;
}

static void run_turns(int turns)
{
  for (int i = 0; i < turns; i++)
    assert_true(tdl_loop_run(L, TDL_LOOP_ONCE) >= 0);
}

static bool on_ring(void) { return strcmp(tdl_loop_backend(L), "uring") == 0; }

/* A fiber's own state, on its stack, that must come back intact. */
#define CANARIES 16
static void canaries_fill(volatile uint64_t *c, uint64_t seed)
{
  for (int i = 0; i < CANARIES; i++)
    c[i] = seed * 0x9e3779b97f4a7c15u + (uint64_t)i;
}
static bool canaries_ok(const volatile uint64_t *c, uint64_t seed)
{
  for (int i = 0; i < CANARIES; i++)
    if (c[i] != seed * 0x9e3779b97f4a7c15u + (uint64_t)i)
      return false;
  return true;
}

/* ---- bad input ---- */

static void *park_forever(void *arg)
{
  volatile uint64_t c[CANARIES];
  canaries_fill(c, (uint64_t)(uintptr_t)arg);
  int e = tdl_fiber_park(TDL_FOREVER);
  assert_true(canaries_ok(c, (uint64_t)(uintptr_t)arg));
  return (void *)(intptr_t)e;
}

static void bad_input(void **state)
{
  (void)state;
  assert_int_equal(tdl_fiber_compact_idle(L, -1), -EINVAL);
  assert_int_equal(tdl_fiber_compact_idle(L, 1), -EINVAL);
  assert_int_equal(tdl_fiber_compact_idle(L, TDL_MSEC - 1), -EINVAL);
  assert_int_equal(tdl_fiber_compacted(L, 0), -ESRCH);
  assert_int_equal(tdl_fiber_compacted(L, (tdl_fiber_t)12345 << 32 | 7), -ESRCH);
  /* A joined fiber's handle is stale. */
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_compact_idle(L, TDL_MSEC), 0);
  assert_int_equal(tdl_fiber_spawn(&h, L, park_forever, (void *)1, NULL), 0);
  ticker_on();
  assert_true(run_until_compacted(h, 1000) > 0);
  assert_int_equal(tdl_fiber_cancel(L, h), 0);
  ticker_off();
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_fiber_compacted(L, h), 0); /* finished, not released yet */
  assert_int_equal(tdl_fiber_compact_idle(L, 0), 0);
  assert_int_equal(tdl_fiber_detach(L, h), 0); /* releases it */
  assert_int_equal(tdl_fiber_compacted(L, h), -ESRCH);
}

/* ---- a read into the fiber's own stack ---- */

struct rd {
  int fd;
  int done;
};

static void *reader(void *arg)
{
  struct rd *r = arg;
  char buf[300];
  memset(buf, 'x', sizeof buf);
  char *volatile self = buf; /* a pointer on the stack to the stack */
  volatile uint64_t c[CANARIES];
  canaries_fill(c, 77);
  ssize_t n = tdl_read(r->fd, self, sizeof buf, TDL_FOREVER);
  assert_int_equal(n, 5);
  assert_ptr_equal(self, buf);
  assert_memory_equal(buf, "hello", 5);
  assert_int_equal(buf[5], 'x');
  assert_int_equal(buf[sizeof buf - 1], 'x');
  assert_true(canaries_ok(c, 77));
  r->done = 1;
  return NULL;
}

static void read_into_own_stack(void **state)
{
  (void)state;
  int p[2];
  t_pipe(p);
  assert_int_equal(tdl_fiber_compact_idle(L, TDL_MSEC), 0);
  struct rd r = {.fd = p[0]};
  tdl_fiber_t h = go(reader, &r);
  ticker_on();
  if (on_ring()) {
    /* The read is a ring operation in flight: the kernel may write the
     * buffer on the stack at any time, so the park is never compacted. */
    run_turns(30);
    assert_int_equal(tdl_fiber_compacted(L, h), 0);
  } else {
    int c = run_until_compacted(h, 1000);
    assert_true(c > 0 && c < 4096);
  }
  assert_int_equal(write(p[1], "hello", 5), 5);
  ticker_off();
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(r.done, 1);
  close(p[0]);
  close(p[1]);
}

/* Cancelled while compacted in tdl_read: the wait is let go at once (the
 * record the cancel unhangs is off the stack), the fd is usable. */
static void *reader_cancelled(void *arg)
{
  struct rd *r = arg;
  char buf[64];
  volatile uint64_t c[CANARIES];
  canaries_fill(c, 5);
  assert_int_equal(tdl_read(r->fd, buf, sizeof buf, TDL_FOREVER), -ECANCELED);
  assert_true(canaries_ok(c, 5));
  r->done = 1;
  return NULL;
}

static void *read_one(void *arg)
{
  struct rd *r = arg;
  char b;
  assert_int_equal(tdl_read(r->fd, &b, 1, TDL_FOREVER), 1);
  r->done = 2;
  return NULL;
}

static void cancel_compacted(void **state)
{
  (void)state;
  assert_int_equal(tdl_fiber_compact_idle(L, TDL_MSEC), 0);
  ticker_on();
  /* Parked in tdl_fiber_park. */
  tdl_fiber_t h = go(park_forever, (void *)9);
  assert_true(run_until_compacted(h, 1000) > 0);
  assert_int_equal(tdl_fiber_cancel(L, h), 0);
  run_turns(3);
  assert_int_equal(tdl_fiber_compacted(L, h), -ESRCH); /* finished and released */

  /* Parked in tdl_read (not compacted on a uring loop, where it is a ring
   * operation: the cancel is the same). */
  int p[2];
  t_pipe(p);
  struct rd r = {.fd = p[0]};
  h = go(reader_cancelled, &r);
  if (!on_ring())
    assert_true(run_until_compacted(h, 1000) > 0);
  else
    run_turns(3);
  assert_int_equal(tdl_fiber_cancel(L, h), 0);
  struct rd r2 = {.fd = p[0]}; /* the fd is free for another reader at once */
  go(read_one, &r2);
  assert_int_equal(write(p[1], "z", 1), 1);
  ticker_off();
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(r.done, 1);
  assert_int_equal(r2.done, 2);
  close(p[0]);
  close(p[1]);
}

/* ---- sleeping ---- */

static int sleeper_seen; /* the loop saw the sleeper compacted */

static void *sleeper(void *arg)
{
  (void)arg;
  volatile uint64_t c[CANARIES];
  canaries_fill(c, 3);
  int rounds = 0;
  /* Each sleep is far longer than the threshold; the loop sees it
   * compacted in one of them, whatever the machine's speed. */
  while (!sleeper_seen && rounds < 100) {
    assert_int_equal(tdl_sleep(tdl_after(30 * TDL_MSEC)), 0);
    assert_true(canaries_ok(c, 3));
    rounds++;
  }
  return (void *)(intptr_t)rounds;
}

static void sleep_compacted(void **state)
{
  (void)state;
  sleeper_seen = 0;
  assert_int_equal(tdl_fiber_compact_idle(L, TDL_MSEC), 0);
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, sleeper, NULL, NULL), 0);
  while (tdl_fiber_compacted(L, h) >= 0 && !sleeper_seen) {
    if (tdl_fiber_compacted(L, h) > 0)
      sleeper_seen = 1;
    assert_true(tdl_loop_run(L, TDL_LOOP_ONCE) >= 0);
  }
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(sleeper_seen, 1);
  assert_int_equal(tdl_fiber_detach(L, h), 0);
}

/* ---- deep frames, near the guard ---- */

enum { DEEP = 20, FRAME = 512 };
static int deep_result = 1;

static __attribute__((noinline)) int descend(int depth)
{
  volatile char frame[FRAME];
  for (int i = 0; i < FRAME; i++)
    frame[i] = (char)(depth * 31 + i);
  int r = 0;
  if (depth < DEEP)
    r = descend(depth + 1);
  else
    r = tdl_fiber_park(TDL_FOREVER);
  for (int i = 0; i < FRAME; i++)
    if (frame[i] != (char)(depth * 31 + i))
      return -1000 - depth;
  return r;
}

static void *deep(void *arg)
{
  (void)arg;
  deep_result = descend(0);
  return NULL;
}

static void deep_near_guard(void **state)
{
  (void)state;
  deep_result = 1;
  assert_int_equal(tdl_fiber_compact_idle(L, TDL_MSEC), 0);
  tdl_fiber_options o = {.stack_size = TDL_STACK_MIN, .detached = true};
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, deep, NULL, &o), 0);
  ticker_on();
  int c = run_until_compacted(h, 1000);
  /* Most of the 16 KiB stack is in the copy: its frames reach down close to
   * the guard, which stays as it was. */
  assert_true(c > DEEP * FRAME);
  assert_true(c <= (int)TDL_STACK_MIN);
  assert_int_equal(tdl_fiber_unpark(L, h), 0);
  ticker_off();
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(deep_result, 0); /* every frame came back */
}

/* ---- the option off ---- */

static void option_off(void **state)
{
  (void)state;
  ticker_on();
  /* Never asked: nothing is compacted. */
  tdl_fiber_t a = go(park_forever, (void *)11);
  run_turns(20);
  assert_int_equal(tdl_fiber_compacted(L, a), 0);
  /* Asked after a was spawned: a stays as it is (its control block is on
   * its stack), b is compacted. */
  assert_int_equal(tdl_fiber_compact_idle(L, TDL_MSEC), 0);
  tdl_fiber_t b = go(park_forever, (void *)12);
  assert_true(run_until_compacted(b, 1000) > 0);
  assert_int_equal(tdl_fiber_compacted(L, a), 0);
  /* Off again: b is restored when it wakes, and not compacted again. */
  assert_int_equal(tdl_fiber_compact_idle(L, 0), 0);
  assert_true(tdl_fiber_compacted(L, b) > 0);
  assert_int_equal(tdl_fiber_unpark(L, b), 0);
  run_turns(1);
  assert_int_equal(tdl_fiber_compacted(L, b), -ESRCH); /* it finished */
  tdl_fiber_t c = go(park_forever, (void *)13);
  run_turns(20);
  assert_int_equal(tdl_fiber_compacted(L, c), 0);
  assert_int_equal(tdl_fiber_unpark(L, a), 0);
  assert_int_equal(tdl_fiber_unpark(L, c), 0);
  ticker_off();
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

/* ---- 10,000 compacted, all woken ---- */

enum { MANY = 10000 };
static int many_ok;

static void *many_one(void *arg)
{
  volatile uint64_t c[CANARIES];
  uint64_t seed = (uint64_t)(uintptr_t)arg;
  canaries_fill(c, seed);
  char *volatile self = (char *)c;
  assert_int_equal(tdl_fiber_park(TDL_FOREVER), 0);
  if (canaries_ok(c, seed) && self == (char *)c)
    many_ok++;
  return NULL;
}

static void many_compacted(void **state)
{
  (void)state;
  static tdl_fiber_t h[MANY];
  many_ok = 0;
  assert_int_equal(tdl_fiber_compact_idle(L, TDL_MSEC), 0);
  for (int i = 0; i < MANY; i++)
    h[i] = go(many_one, (void *)(uintptr_t)(i + 1));
  ticker_on();
  int compacted = 0;
  for (tdl_time_t end = t_clock() + T_HANG; compacted < MANY && t_clock() < end;) {
    assert_true(tdl_loop_run(L, TDL_LOOP_ONCE) >= 0);
    compacted = 0;
    for (int i = 0; i < MANY; i++)
      compacted += tdl_fiber_compacted(L, h[i]) > 0;
  }
  assert_int_equal(compacted, MANY);
  for (int i = 0; i < MANY; i++)
    assert_int_equal(tdl_fiber_unpark(L, h[i]), 0);
  ticker_off();
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(many_ok, MANY);
}

#ifdef TDL_FAULTS
/* Without memory for its scheduler or its timer, turning compaction on
 * fails with -ENOMEM and leaves it off; with memory back, it works. */
static void compact_on_under_faults(void **state)
{
  (void)state;
  long n = 1;
  for (;; n++) {
    tdl_loop *loop = t_loop_new();
    tdl__fault_arm(n, false);
    int e = tdl_fiber_compact_idle(loop, TDL_MSEC);
    bool fired = tdl__fault_fired();
    tdl__fault_arm(0, false);
    /* A fault some step gets over (none here needs what failed) is no
     * error. */
    if (fired)
      assert_true(e == 0 || e == -ENOMEM);
    else
      assert_int_equal(e, 0);
    t_loop_free(loop);
    if (!fired)
      break;
  }
  assert_true(n > 1);
}

/* A compaction without memory for the copy of the frames is no error: the
 * fiber stays as it is, is compacted at a later turn, and wakes intact. */
static void compact_without_memory(void **state)
{
  (void)state;
  assert_int_equal(tdl_fiber_compact_idle(L, 20 * TDL_MSEC), 0);
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, park_forever, (void *)5, NULL), 0);
  ticker_on();
  /* Parked, and the ticker fired (the loop has its table of due timers),
   * long before the threshold. */
  run_turns(2);
  assert_int_equal(tdl_fiber_compacted(L, h), 0);
  bool refused = false;
  for (int i = 0; i < 10000 && !refused; i++) {
    /* Every turn with its first allocation failing, until the compaction's. */
    tdl__fault_arm(1, false);
    assert_true(tdl_loop_run(L, TDL_LOOP_ONCE) >= 0);
    tdl__fault_arm(0, false);
    const char *site = tdl__fault_site();
    refused = tdl__fault_fired() && site && strstr(site, "stack.c");
    if (!refused)
      assert_int_equal(tdl_fiber_compacted(L, h), 0);
  }
  assert_true(refused);
  assert_int_equal(tdl_fiber_compacted(L, h), 0);
  assert_true(run_until_compacted(h, 1000) > 0);
  assert_int_equal(tdl_fiber_cancel(L, h), 0); /* it checks its canaries as it wakes */
  ticker_off();
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_fiber_detach(L, h), 0);
}
#endif

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(bad_input, setup, teardown),
      cmocka_unit_test_setup_teardown(read_into_own_stack, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_compacted, setup, teardown),
      cmocka_unit_test_setup_teardown(sleep_compacted, setup, teardown),
      cmocka_unit_test_setup_teardown(deep_near_guard, setup, teardown),
      cmocka_unit_test_setup_teardown(option_off, setup, teardown),
      cmocka_unit_test_setup_teardown(many_compacted, setup, teardown),
#ifdef TDL_FAULTS
      cmocka_unit_test(compact_on_under_faults),
      cmocka_unit_test_setup_teardown(compact_without_memory, setup, teardown),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
