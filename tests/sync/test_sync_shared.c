/* SPDX-License-Identifier: MIT */
/* The semaphore and wait group shared between loops. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"

static struct {
  tdl_sem sem;
  tdl_waitgroup wg;
  long counter; /* guarded by sem */
  long rounds;
  int results[8];
  int stage;
} S;

static void finish(tdl_group *g)
{
  assert_int_equal(tdl_group_wait(g, tdl_after(120 * TDL_SEC)), 0);
  assert_int_equal(tdl_group_free(g), 0);
}

/* ---- one permit: mutual exclusion across loops ---- */

static void *adder(void *arg)
{
  (void)arg;
  for (long i = 0; i < S.rounds; i++) {
    assert_int_equal(tdl_sem_acquire(&S.sem, TDL_FOREVER), 0);
    long v = S.counter; /* a read-modify-write that a race would tear */
    if ((i & 63) == 0)
      tdl_fiber_yield(); /* others of this loop run meanwhile: they wait */
    S.counter = v + 1;
    assert_int_equal(tdl_sem_release(&S.sem), 0);
  }
  if (tdl_waitgroup_done(&S.wg) == 0 && tdl_waitgroup_count(&S.wg) == 0)
    tdl_group_stop(tdl_group_self());
  return NULL;
}

static void *two_adders(void *arg)
{
  tdl_fiber_spawn(NULL, tdl_fiber_loop(), adder, arg, &(tdl_fiber_options){.detached = true});
  return adder(arg);
}

static void one_permit_excludes(void **state)
{
  (void)state;
  memset(&S, 0, sizeof S);
  S.rounds = RUNNING_ON_VALGRIND ? 2000 : 50000;
  assert_int_equal(tdl_sem_init_shared(&S.sem, 1, 1), 0);
  assert_int_equal(tdl_waitgroup_init_shared(&S.wg), 0);
  assert_int_equal(tdl_waitgroup_add(&S.wg, 4), 0);
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = two_adders}), 0);
  finish(g);
  assert_int_equal(S.counter, 4 * S.rounds);
  assert_int_equal(tdl_sem_value(&S.sem), 1);
  assert_int_equal(tdl_sem_release(&S.sem), -EOVERFLOW); /* max 1 */
  assert_int_equal(tdl_sem_destroy(&S.sem), 0);
  assert_int_equal(tdl_waitgroup_destroy(&S.wg), 0);
}

/* ---- permits and counts from a thread that runs no loop ---- */

static void *waiter(void *arg)
{
  (void)arg;
  S.results[0] = tdl_sem_acquire(&S.sem, tdl_after(60 * TDL_SEC));   /* a permit from the thread */
  S.results[1] = tdl_sem_acquire(&S.sem, tdl_after(TDL_MSEC));       /* none more: the deadline */
  S.results[2] = tdl_waitgroup_wait(&S.wg, tdl_after(60 * TDL_SEC)); /* done by the thread */
  __atomic_store_n(&S.stage, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void *plain_thread(void *arg)
{
  (void)arg;
  usleep(10000);
  assert_int_equal(tdl_sem_release(&S.sem), 0);
  usleep(10000);
  assert_int_equal(tdl_waitgroup_done(&S.wg), 0);
  return NULL;
}

static void from_a_plain_thread(void **state)
{
  (void)state;
  memset(&S, 0, sizeof S);
  assert_int_equal(tdl_sem_init_shared(&S.sem, 0, 0), 0);
  assert_int_equal(tdl_waitgroup_init_shared(&S.wg), 0);
  assert_int_equal(tdl_waitgroup_add(&S.wg, 1), 0);
  tdl_loop *loop = t_loop_new();
  assert_int_equal(tdl_fiber_spawn(NULL, loop, waiter, NULL, &(tdl_fiber_options){.detached = true}), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, plain_thread, NULL), 0);
  /* Only a parked fiber waiting for another thread: not a deadlock. */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  pthread_join(th, NULL);
  assert_int_equal(S.results[0], 0);
  assert_int_equal(S.results[1], -ETIMEDOUT);
  assert_int_equal(S.results[2], 0);
  assert_int_equal(tdl_loop_free(loop), 0);
  assert_int_equal(tdl_sem_destroy(&S.sem), 0);
  assert_int_equal(tdl_waitgroup_destroy(&S.wg), 0);
}

/* ---- cancel, destroy while in use, misuse ---- */

static tdl_fiber_t parked;

static void *parks_on_sem(void *arg)
{
  (void)arg;
  S.results[0] = tdl_sem_acquire(&S.sem, TDL_FOREVER);
  return NULL;
}

static void *checks(void *arg)
{
  (void)arg;
  tdl_fiber_yield(); /* the other fiber parks */
  assert_int_equal(tdl_sem_destroy(&S.sem), -EBUSY);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), parked), 0);
  tdl_fiber_yield();
  assert_int_equal(S.results[0], -ECANCELED);
  assert_int_equal(tdl_sem_value(&S.sem), 0); /* it took nothing */
  assert_int_equal(tdl_sem_try_acquire(&S.sem), -EAGAIN);
  assert_int_equal(tdl_sem_release(&S.sem), 0);
  assert_int_equal(tdl_sem_try_acquire(&S.sem), 0);
  return NULL;
}

static void cancel_and_misuse(void **state)
{
  (void)state;
  memset(&S, 0, sizeof S);
  tdl_sem bad;
  assert_int_equal(tdl_sem_init_shared(&bad, 5, 2), -EINVAL);
  assert_int_equal(tdl_sem_init_shared(&S.sem, 0, 0), 0);
  tdl_loop *loop = t_loop_new();
  assert_int_equal(tdl_fiber_spawn(&parked, loop, parks_on_sem, NULL, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_fiber_spawn(NULL, loop, checks, NULL, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_loop_free(loop), 0);
  /* Outside a fiber: acquire refuses, the rest works. */
  assert_int_equal(tdl_sem_acquire(&S.sem, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_sem_destroy(&S.sem), 0);
  assert_int_equal(tdl_waitgroup_init_shared(&S.wg), 0);
  assert_int_equal(tdl_waitgroup_add(&S.wg, -1), -EINVAL);
  assert_int_equal(tdl_waitgroup_add(&S.wg, INT64_MAX), 0);
  assert_int_equal(tdl_waitgroup_add(&S.wg, 1), -EOVERFLOW);
  assert_int_equal(tdl_waitgroup_count(&S.wg), INT64_MAX);
  assert_int_equal(tdl_waitgroup_wait(&S.wg, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_waitgroup_destroy(&S.wg), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_permit_excludes),
      cmocka_unit_test(from_a_plain_thread),
      cmocka_unit_test(cancel_and_misuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
