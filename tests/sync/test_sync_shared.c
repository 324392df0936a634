/* SPDX-License-Identifier: MIT */
/* The semaphore and wait group shared between loops. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
  /* woken_before_destroy */
  tdl_sem *hsem;       /* on the heap: freed as soon as destroy lets it */
  tdl_waitgroup *hwg;
  int variant;         /* 1: the waiter is cancelled; 2: a wait group, else a semaphore */
  tdl_fiber_t waiting;
  int done, bad;
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

/* ---- destroy before a woken waiter runs again ---- */

/* A fiber of loop 1 waits (a semaphore's permit, or a wait group's zero);
 * loop 0 ends its wait (the wake is posted to loop 1), then destroys the
 * object and frees its memory as soon as destroy lets it, while another
 * fiber of loop 1 keeps the thread busy (and may cancel the waiter before
 * it runs again).  A waiter handed a permit still has to touch the
 * semaphore on its way out (cancelled, it passes the permit on): destroy
 * must refuse until it returned.  A wait group's woken waiter touches
 * nothing more: destroy goes at once.  Sequenced by S.stage, not by time:
 * 1 the waiter is parked (the busy fiber runs only after it), 2 its wait
 * is ended, 3 the busy fiber has cancelled it (or not), 4 loop 0 has tried
 * to destroy, 5 the waiter has returned. */
static void *waits_on_it(void *arg)
{
  (void)arg;
  S.results[0] = S.variant & 2 ? tdl_waitgroup_wait(S.hwg, TDL_FOREVER) : tdl_sem_acquire(S.hsem, TDL_FOREVER);
  return NULL;
}

static tdl_time_t clock_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

/* Spin (never park nor yield: the woken fiber must not run) until stage;
 * the bound only keeps a broken run from hanging. */
static void spin_until(int stage)
{
  tdl_time_t until = clock_ns() + 60 * TDL_SEC;
  while (__atomic_load_n(&S.stage, __ATOMIC_SEQ_CST) < stage)
    if (clock_ns() > until) {
      __atomic_add_fetch(&S.bad, 1, __ATOMIC_SEQ_CST);
      return;
    }
}

static void *keeps_loop_busy(void *arg)
{
  (void)arg;
  __atomic_store_n(&S.stage, 1, __ATOMIC_SEQ_CST); /* waits_on_it ran first, and parked */
  spin_until(2);
  S.results[1] = S.variant & 1 ? tdl_fiber_cancel(tdl_fiber_loop(), S.waiting) : 0;
  __atomic_store_n(&S.stage, 3, __ATOMIC_SEQ_CST);
  spin_until(4);
  return NULL;
}

static void wait_stage(int stage)
{
  while (__atomic_load_n(&S.stage, __ATOMIC_SEQ_CST) < stage)
    tdl_sleep(tdl_after(TDL_MSEC));
}

/* Destroy, and free the memory at once when destroy lets it. */
static int destroy_and_free(void)
{
  int e;
  if (S.variant & 2) {
    if ((e = tdl_waitgroup_destroy(S.hwg)) == 0) {
      free(S.hwg);
      S.hwg = NULL;
    }
  } else {
    S.results[6] = (int)tdl_sem_value(S.hsem);
    if ((e = tdl_sem_destroy(S.hsem)) == 0) {
      free(S.hsem);
      S.hsem = NULL;
    }
  }
  return e;
}

static void *woken_main(void *arg)
{
  (void)arg;
  if (tdl_group_index() == 1) {
    if (tdl_fiber_spawn(&S.waiting, tdl_fiber_loop(), waits_on_it, NULL, NULL) < 0 ||
        tdl_fiber_spawn(NULL, tdl_fiber_loop(), keeps_loop_busy, NULL, &(tdl_fiber_options){.detached = true}) < 0 ||
        tdl_fiber_join(S.waiting, NULL, TDL_FOREVER) < 0)
      __atomic_add_fetch(&S.bad, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&S.stage, 5, __ATOMIC_SEQ_CST);
  } else {
    wait_stage(1);
    S.results[2] = S.variant & 2 ? tdl_waitgroup_done(S.hwg) : tdl_sem_release(S.hsem);
    __atomic_store_n(&S.stage, 2, __ATOMIC_SEQ_CST);
    wait_stage(3);
    S.results[3] = destroy_and_free();
    __atomic_store_n(&S.stage, 4, __ATOMIC_SEQ_CST);
    if (S.results[3] == -EBUSY) { /* once the waiter returned */
      wait_stage(5);
      S.results[4] = destroy_and_free();
    }
  }
  if (__atomic_add_fetch(&S.done, 1, __ATOMIC_SEQ_CST) == 2)
    tdl_group_stop(tdl_group_self());
  return NULL;
}

static void woken_before_destroy(void **state)
{
  (void)state;
  /* The cancelled waiter first: it is the one that touches the semaphore
   * on its way out. */
  static const int variants[] = {1, 0, 3, 2};
  for (size_t k = 0; k < sizeof variants / sizeof variants[0]; k++) {
    int variant = variants[k];
    memset(&S, 0, sizeof S);
    S.variant = variant;
    if (variant & 2) {
      assert_non_null(S.hwg = malloc(sizeof *S.hwg));
      assert_int_equal(tdl_waitgroup_init_shared(S.hwg), 0);
      assert_int_equal(tdl_waitgroup_add(S.hwg, 1), 0);
    } else {
      assert_non_null(S.hsem = malloc(sizeof *S.hsem));
      assert_int_equal(tdl_sem_init_shared(S.hsem, 0, 0), 0);
    }
    tdl_group *g;
    assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = woken_main}), 0);
    finish(g);
    assert_int_equal(S.bad, 0);
    assert_int_equal(S.results[1], 0);
    assert_int_equal(S.results[2], 0);
    assert_int_equal(S.results[0], variant & 1 ? -ECANCELED : 0);
    if (variant & 2) {
      assert_int_equal(S.results[3], 0); /* the woken waiter touches nothing more */
    } else {
      assert_int_equal(S.results[3], -EBUSY); /* handed a permit, not yet returned */
      assert_int_equal(S.results[4], 0);
      assert_int_equal(S.results[6], variant & 1 ? 1 : 0); /* cancelled, it passed the permit back */
    }
    assert_null(S.hsem);
    assert_null(S.hwg);
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_permit_excludes),
      cmocka_unit_test(from_a_plain_thread),
      cmocka_unit_test(cancel_and_misuse),
      cmocka_unit_test(woken_before_destroy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
