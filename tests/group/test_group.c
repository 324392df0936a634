/* SPDX-License-Identifier: MIT */
/* Groups of loops, and calls between them. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"

static int cpus(void)
{
  cpu_set_t set;
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  return CPU_COUNT(&set);
}

/* ---- start, cross calls, stop ---- */

static int seen[2];
static int cancelled_mains;

static void *square_there(tdl_loop *loop, void *arg)
{
  (void)loop;
  intptr_t v = (intptr_t)arg;
  assert_int_equal(tdl_group_index(), 1); /* runs on loop 1's thread */
  return (void *)(v * v);
}

static void *spawned_there(void *arg)
{
  int *flag = arg;
  assert_int_equal(tdl_group_index(), 1);
  __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void *two_mains(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  assert_true(me == 0 || me == 1);
  tdl_group *G = tdl_group_self();
  assert_non_null(G);
  __atomic_add_fetch(&seen[me], 1, __ATOMIC_SEQ_CST);
  if (me == 0) {
    void *r = NULL;
    assert_int_equal(tdl_port_call(tdl_group_port(G, 1), square_there, (void *)7, &r, tdl_after(T_HANG)), 0);
    assert_int_equal((intptr_t)r, 49);
    static int flag;
    assert_int_equal(tdl_port_spawn(tdl_group_port(G, 1), spawned_there, &flag, &(tdl_fiber_options){.name = "x"},
                                     tdl_after(T_HANG)),
                     0);
    while (!__atomic_load_n(&flag, __ATOMIC_SEQ_CST))
      tdl_sleep(tdl_after(TDL_MSEC));
    assert_int_equal(tdl_group_wait(G, TDL_FOREVER), -EPERM); /* it would block this loop */
    tdl_group_stop(G);
  }
  /* Parked until the stop cancels us. */
  if (tdl_sleep(TDL_FOREVER) == -ECANCELED)
    __atomic_add_fetch(&cancelled_mains, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void two_loops_call_and_stop(void **state)
{
  (void)state;
  memset(seen, 0, sizeof seen);
  cancelled_mains = 0;
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = two_mains}), 0);
  assert_int_equal(tdl_group_size(g), 2);
  assert_null(tdl_group_port(g, 2));
  assert_null(tdl_group_loop(g, 2));
  assert_null(tdl_group_self()); /* not a loop of the group */
  assert_int_equal(tdl_group_index(), -1);
  /* Loop 0's main calls loop 1, spawns there, then stops the group. */
  assert_int_equal(tdl_group_wait(g, tdl_after(60 * TDL_SEC)), 0);
  assert_int_equal(seen[0], 1);
  assert_int_equal(seen[1], 1);
  assert_int_equal(cancelled_mains, 2); /* the stop cancelled both mains */
  assert_int_equal(tdl_group_free(g), 0);
}

/* ---- sizes ---- */

static void sizes_and_misuse(void **state)
{
  (void)state;
  tdl_group *g = NULL;
  assert_int_equal(tdl_group_new(&g, NULL), -EINVAL);
  assert_int_equal(tdl_group_new(NULL, &(tdl_group_options){0}), -EINVAL);
  /* 0 loops: one per CPU of the affinity mask. */
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 0}), 0);
  assert_int_equal((int)tdl_group_size(g), cpus());
  assert_int_equal(tdl_group_free(g), -EBUSY); /* still running */
  assert_int_equal(tdl_group_wait(g, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  tdl_group_stop(g);
  tdl_group_stop(g); /* twice: harmless */
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  /* More loops than CPUs: they share; pinned, it cannot be. */
  int n = cpus() + 2;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = (unsigned)n, .pin = true}), -EINVAL);
  assert_null(g);
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = (unsigned)n}), 0);
  assert_int_equal((int)tdl_group_size(g), n);
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = TDL_GROUP_MAX + 1}), -EINVAL);
  /* Pinned, as many as CPUs. */
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.pin = true}), 0);
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  assert_int_equal(tdl_group_free(NULL), 0);
}

/* ---- after the end: refused, not a use after free ---- */

static int ran_posts;

static void counted(tdl_loop *loop, tdl_post *p)
{
  (void)p;
  if (loop)
    __atomic_add_fetch(&ran_posts, 1, __ATOMIC_SEQ_CST);
}

static void posts_after_the_end(void **state)
{
  (void)state;
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 1}), 0);
  tdl_port *port = tdl_port_ref(tdl_group_port(g, 0));
  tdl_post p;
  tdl_post_init(&p, counted, NULL);
  ran_posts = 0;
  assert_int_equal(tdl_port_post(port, &p), 0);
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  /* Run before the loop ended, or handed back at its end: never lost. */
  assert_false(__atomic_load_n(&p.queued, __ATOMIC_SEQ_CST));
  assert_int_equal(tdl_port_post(port, &p), -ESHUTDOWN);
  tdl_port_release(port);
}

/* A thread-affine call on a group's loop from another thread. */
static void foreign_thread_is_refused(void **state)
{
  (void)state;
#ifdef TDL_DEBUG_CHECKS
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 1}), 0);
  tdl_timer t;
  tdl_timer_init(&t, NULL, NULL);
  assert_int_equal(tdl_timer_start(tdl_group_loop(g, 0), &t, TDL_SEC, 0), -EPERM);
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
#else
  T_SKIP("a build without TDL_DEBUG_CHECKS (a Release build) does not check the thread");
#endif
}

/* ---- SIGTERM stops a group that asked for it ---- */

static void *wait_for_the_end(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)tdl_sleep(TDL_FOREVER);
}

static void signal_stops_the_group(void **state)
{
  (void)state;
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = wait_for_the_end,
                                                             .stop_on_signals = true}),
                   0);
  assert_int_equal(kill(getpid(), SIGTERM), 0); /* blocked here: loop 0 reads it */
  assert_int_equal(tdl_group_wait(g, tdl_after(T_HANG)), 0);
  assert_int_equal(tdl_group_free(g), 0);
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  assert_false(sigismember(&now, SIGTERM)); /* the mask is back */
}

/* ---- a call whose caller gives up ---- */

static int gave_up; /* atomic */

static void *slow_there(tdl_loop *loop, void *arg)
{
  (void)loop;
  (void)arg;
  /* Blocks that loop's thread until the caller has given up: its deadline
   * comes first, however slowly either thread runs (bounded: a caller that
   * never hears its deadline fails on its own). */
  for (tdl_time_t end = t_clock() + T_HANG; !__atomic_load_n(&gave_up, __ATOMIC_ACQUIRE) && t_clock() < end;)
    usleep(1000);
  return (void *)1;
}

static void *impatient(void *arg)
{
  tdl_group *g = arg;
  __atomic_store_n(&gave_up, 0, __ATOMIC_RELEASE);
  assert_int_equal(tdl_port_call(tdl_group_port(g, 0), slow_there, NULL, NULL, tdl_after(5 * TDL_MSEC)), -ETIMEDOUT);
  __atomic_store_n(&gave_up, 1, __ATOMIC_RELEASE);
  /* The call finishes over there and its result is dropped; the loops go on. */
  void *r = NULL;
  assert_int_equal(tdl_port_call(tdl_group_port(g, 0), slow_there, NULL, &r, tdl_after(T_HANG)), 0);
  assert_int_equal((intptr_t)r, 1);
  tdl_group_stop(g);
  return NULL;
}

static void caller_gives_up(void **state)
{
  (void)state;
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2}), 0);
  /* A fiber on a loop of this thread calls the group's loop 0. */
  tdl_loop *l;
  assert_int_equal(tdl_loop_new(&l, NULL), 0);
  assert_int_equal(tdl_fiber_spawn(NULL, l, impatient, g, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(l, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_loop_free(l), 0);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  /* Outside a fiber, a call is refused. */
  assert_int_equal(tdl_port_call(NULL, slow_there, NULL, NULL, TDL_FOREVER), -EPERM);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_loops_call_and_stop),
      cmocka_unit_test(sizes_and_misuse),
      cmocka_unit_test(posts_after_the_end),
      cmocka_unit_test(foreign_thread_is_refused),
      cmocka_unit_test(signal_stops_the_group),
      cmocka_unit_test(caller_gives_up),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
