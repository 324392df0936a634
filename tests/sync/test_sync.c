/* SPDX-License-Identifier: MIT */
/* Mutex, condition variable, semaphore, wait group, once: FIFO hand-off,
 * deadlines, cancellation (also in the same instant as a grant), misuse,
 * destroy while in use, a fiber finishing while it holds a mutex, and a
 * seeded randomized test of 200 fibers against invariants. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "helpers.h"
#include "loop_fixture.h"

/* ---- helpers ---- */

static int ev[1024], nev;
static void note(int x)
{
  assert_true(nev < (int)(sizeof ev / sizeof ev[0]));
  ev[nev++] = x;
}
static void expect_events(const int *want, int n)
{
  if (nev != n || memcmp(ev, want, (size_t)n * sizeof *want) != 0) {
    for (int i = 0; i < nev; i++)
      print_message("ev[%d] = %d\n", i, ev[i]);
  }
  assert_int_equal(nev, n);
  for (int i = 0; i < n; i++)
    assert_int_equal(ev[i], want[i]);
}
#define EXPECT(...)                                                    \
  do {                                                                 \
    static const int want_[] = {__VA_ARGS__};                          \
    expect_events(want_, (int)(sizeof want_ / sizeof want_[0]));       \
  } while (0)

static void run_all(void) { assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0); }

static tdl_time_t ms(tdl_time_t n) { return tdl_after(n * TDL_MSEC); }

static void yield_n(int n)
{
  for (int i = 0; i < n; i++)
    assert_int_equal(tdl_fiber_yield(), 0);
}

/* ---- mutex ---- */

static tdl_mutex M;
static tdl_cond C;
static tdl_sem S;
static tdl_waitgroup WG;
static tdl_once O;

static void reset_objects(void)
{
  tdl_mutex_init(&M);
  tdl_cond_init(&C);
  assert_int_equal(tdl_sem_init(&S, 0, 0), 0);
  tdl_waitgroup_init(&WG);
  tdl_once_init(&O);
  nev = 0;
}

static void *locker(void *arg)
{
  int id = (int)(intptr_t)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_true(tdl_mutex_owned(&M));
  note(id);
  yield_n(2);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  assert_false(tdl_mutex_owned(&M));
  return NULL;
}

static void *first_holder(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  note(1);
  go(locker, (void *)2);
  go(locker, (void *)3);
  go(locker, (void *)4);
  yield_n(3); /* they all queue */
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  /* Handed to 2, which has not run yet: no barging, by try_lock or lock. */
  assert_int_equal(tdl_mutex_try_lock(&M), -EBUSY);
  assert_false(tdl_mutex_owned(&M));
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  note(10);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void mutex_fifo_handoff(void **state)
{
  (void)state;
  reset_objects();
  go(first_holder, NULL);
  run_all();
  EXPECT(1, 2, 3, 4, 10);
  assert_int_equal(tdl_mutex_destroy(&M), 0);
}

static void *hold_for(void *arg)
{
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  note(1);
  assert_int_equal(tdl_sleep(ms((tdl_time_t)(intptr_t)arg)), 0);
  note(2);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void *lock_with_deadline(void *arg)
{
  tdl_time_t d = ms((tdl_time_t)(intptr_t)arg);
  int r = tdl_mutex_lock(&M, d);
  assert_int_equal(r, -ETIMEDOUT);
  assert_true(tdl_now() >= d);
  assert_false(tdl_mutex_owned(&M));
  note(3);
  return NULL;
}

static void *lock_forever_note(void *arg)
{
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  note((int)(intptr_t)arg);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  /* Free mutex: a deadline already past does not matter. */
  assert_int_equal(tdl_mutex_lock(&M, tdl_now() - 1), 0);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void mutex_timeout(void **state)
{
  (void)state;
  reset_objects();
  go(hold_for, (void *)20);
  go(lock_with_deadline, (void *)2); /* queued first, gives up */
  go(lock_forever_note, (void *)4);
  run_all();
  EXPECT(1, 3, 2, 4);
  assert_int_equal(tdl_mutex_destroy(&M), 0);
}

static tdl_fiber_t victim;
static void *lock_expect_cancel(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), -ECANCELED);
  assert_false(tdl_mutex_owned(&M));
  note(5);
  /* Sticky: a later lock fails at once even on a free mutex (yield until
   * the holder is gone); trylock and unlock still work. */
  while (M.owner)
    tdl_fiber_yield();
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), -ECANCELED);
  assert_int_equal(tdl_mutex_try_lock(&M), 0);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void *canceller(void *arg)
{
  (void)arg;
  yield_n(2);
  assert_int_equal(tdl_fiber_cancel(L, victim), 0);
  return NULL;
}

static void mutex_cancel(void **state)
{
  (void)state;
  reset_objects();
  go(hold_for, (void *)5);
  victim = go(lock_expect_cancel, NULL);
  go(lock_forever_note, (void *)4);
  go(canceller, NULL);
  run_all();
  EXPECT(1, 5, 2, 4);
}

static tdl_fiber_t waiter_h[8];
static void *unlock_then_cancel(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  waiter_h[0] = go(lock_expect_cancel, NULL);
  waiter_h[1] = go(lock_forever_note, (void *)7);
  yield_n(2);
  /* The hand-off to waiter 0 and its cancellation in the same instant:
   * cancellation wins and the mutex goes on to waiter 1. */
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  assert_int_equal(tdl_fiber_cancel(L, waiter_h[0]), 0);
  note(1);
  return NULL;
}

static void mutex_grant_then_cancel_passes_on(void **state)
{
  (void)state;
  reset_objects();
  go(unlock_then_cancel, NULL);
  run_all();
  EXPECT(1, 5, 7);
  assert_int_equal(tdl_mutex_destroy(&M), 0);
}

static void *hold_until_told(void *arg)
{
  int *flag = arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  while (!*flag)
    tdl_fiber_yield();
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void *mutex_misuser(void *arg)
{
  int *flag = arg;
  assert_int_equal(tdl_mutex_unlock(&M), -EPERM); /* unlocked */
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), -EDEADLK); /* recursive */
  assert_int_equal(tdl_mutex_lock(&M, ms(1)), -EDEADLK);
  assert_int_equal(tdl_mutex_try_lock(&M), -EDEADLK);
  assert_true(tdl_mutex_owned(&M));
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  assert_int_equal(tdl_mutex_unlock(&M), -EPERM); /* twice */
  /* Held by another fiber: not ours to unlock, and it stays held. */
  go(hold_until_told, flag);
  tdl_fiber_yield();
  assert_non_null(M.owner);
  assert_int_equal(tdl_mutex_unlock(&M), -EPERM);
  assert_int_equal(tdl_mutex_try_lock(&M), -EBUSY);
  assert_false(tdl_mutex_owned(&M));
  assert_int_equal(tdl_mutex_destroy(&M), -EBUSY);
  *flag = 1;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  note(1);
  return NULL;
}

static void mutex_misuse(void **state)
{
  (void)state;
  reset_objects();
  /* Outside a fiber. */
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_mutex_try_lock(&M), -EPERM);
  assert_int_equal(tdl_mutex_unlock(&M), -EPERM);
  assert_false(tdl_mutex_owned(&M));
  int flag = 0;
  go(mutex_misuser, &flag);
  run_all();
  EXPECT(1);
  assert_int_equal(tdl_mutex_destroy(&M), 0);
}

/* ---- a fiber that finishes while holding a mutex ---- */

static void *lock_and_return(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  note(1);
  yield_n(2); /* let the others queue */
  return NULL; /* still holding M */
}

static void *lock_and_exit(void *arg)
{
  tdl_mutex *m2 = arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_mutex_lock(m2, TDL_FOREVER), 0);
  note(1);
  tdl_fiber_exit(NULL);
  fail();
  return NULL;
}

static void *lock_expect_owner_dead(void *arg)
{
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), -EOWNERDEAD);
  assert_true(tdl_mutex_owned(&M)); /* held despite the error */
  note((int)(intptr_t)arg);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void *late_lockers(void *arg)
{
  tdl_mutex *m2 = arg;
  /* The owner is gone; the first acquisition reports it, once. */
  assert_null(M.owner);
  assert_int_equal(tdl_mutex_try_lock(m2), -EOWNERDEAD);
  assert_int_equal(tdl_mutex_unlock(m2), 0);
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), -EOWNERDEAD);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  assert_int_equal(tdl_mutex_try_lock(m2), 0);
  assert_int_equal(tdl_mutex_unlock(m2), 0);
  note(9);
  return NULL;
}

static void mutex_owner_finishes_holding(void **state)
{
  (void)state;
  reset_objects();
  /* Waiters queued before the owner returns: the first gets it, with
   * -EOWNERDEAD; the next gets a plain 0. */
  go(lock_and_return, NULL);
  go(lock_expect_owner_dead, (void *)2);
  go(lock_forever_note, (void *)3);
  run_all();
  EXPECT(1, 2, 3);
  assert_null(M.owner);
  assert_int_equal(tdl_mutex_destroy(&M), 0);

  /* tdl_fiber_exit holding two mutexes, nobody waiting: both are unlocked,
   * and the next acquisition of each reports it. */
  tdl_mutex m2 = TDL_MUTEX_INIT;
  nev = 0;
  go(lock_and_exit, &m2);
  run_all();
  go(late_lockers, &m2);
  run_all();
  EXPECT(1, 9);
  assert_int_equal(tdl_mutex_destroy(&M), 0);
  assert_int_equal(tdl_mutex_destroy(&m2), 0);
}

/* ---- condition variable ---- */

static void *cond_waiter(void *arg)
{
  int id = (int)(intptr_t)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  note(id);
  assert_int_equal(tdl_cond_wait(&C, &M, TDL_FOREVER), 0);
  assert_true(tdl_mutex_owned(&M));
  note(id + 100);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void *signaller(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_cond_signal(&C), 0); /* nobody waits: lost */
  for (int i = 1; i <= 4; i++)
    go(cond_waiter, (void *)(intptr_t)i);
  yield_n(2);
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_cond_signal(&C), 1);
  assert_int_equal(tdl_cond_signal(&C), 1);
  note(50);
  yield_n(3); /* the signalled fibers cannot run: we hold M */
  note(51);
  assert_int_equal(tdl_cond_destroy(&C), -EBUSY); /* they are still inside */
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  yield_n(3);
  assert_int_equal(tdl_cond_broadcast(&C), 2);
  assert_int_equal(tdl_cond_broadcast(&C), 0);
  return NULL;
}

static void cond_signal_broadcast_fifo(void **state)
{
  (void)state;
  reset_objects();
  go(signaller, NULL);
  run_all();
  EXPECT(1, 2, 3, 4, 50, 51, 101, 102, 103, 104);
  assert_int_equal(tdl_cond_destroy(&C), 0);
  assert_int_equal(tdl_mutex_destroy(&M), 0);
}

static int in_cs, max_in_cs;
static void *cond_counter(void *arg)
{
  int id = (int)(intptr_t)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_cond_wait(&C, &M, TDL_FOREVER), 0);
  in_cs++;
  if (in_cs > max_in_cs)
    max_in_cs = in_cs;
  note(id);
  yield_n(2);
  in_cs--;
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void *broadcaster(void *arg)
{
  (void)arg;
  for (int i = 1; i <= 5; i++)
    go(cond_counter, (void *)(intptr_t)i);
  yield_n(2);
  /* From a fiber not holding M: they take M one after the other, in order. */
  assert_int_equal(tdl_cond_broadcast(&C), 5);
  return NULL;
}

static void cond_broadcast_takes_mutex_in_order(void **state)
{
  (void)state;
  reset_objects();
  in_cs = max_in_cs = 0;
  go(broadcaster, NULL);
  run_all();
  EXPECT(1, 2, 3, 4, 5);
  assert_int_equal(max_in_cs, 1);
}

static void *cond_timeout_waiter(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  /* Already past: at once, M never released. */
  assert_int_equal(tdl_cond_wait(&C, &M, tdl_now() - 1), -ETIMEDOUT);
  assert_true(tdl_mutex_owned(&M));
  note(1);
  go(hold_for, (void *)10); /* takes M while we wait, past our deadline */
  tdl_time_t d = ms(2);
  assert_int_equal(tdl_cond_wait(&C, &M, d), -ETIMEDOUT);
  assert_true(tdl_mutex_owned(&M)); /* taken back, after the holder let go */
  assert_true(tdl_now() >= d);
  note(3);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void cond_timeout_retakes_mutex(void **state)
{
  (void)state;
  reset_objects();
  go(cond_timeout_waiter, NULL);
  run_all();
  EXPECT(1, 1, 2, 3); /* hold_for notes 1 then 2 */
  assert_int_equal(tdl_cond_destroy(&C), 0);
}

static void *cond_cancel_victim(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  note(1);
  int r = tdl_cond_wait(&C, &M, TDL_FOREVER);
  assert_int_equal(r, -ECANCELED);
  assert_true(tdl_mutex_owned(&M)); /* the same unlock path as for 0 */
  note(3);
  /* Cancelled before the call: at once, M never released. */
  assert_int_equal(tdl_cond_wait(&C, &M, TDL_FOREVER), -ECANCELED);
  assert_true(tdl_mutex_owned(&M));
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void *cancel_while_holding(void *arg)
{
  (void)arg;
  yield_n(2);
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_fiber_cancel(L, victim), 0);
  /* The victim needs M back before it can return. */
  yield_n(3);
  note(2);
  /* The signal is not consumed by the cancelled fiber: it reaches the
   * second waiter. */
  assert_int_equal(tdl_cond_signal(&C), 1);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void cond_cancel(void **state)
{
  (void)state;
  reset_objects();
  victim = go(cond_cancel_victim, NULL);
  go(cond_waiter, (void *)10);
  go(cancel_while_holding, NULL);
  run_all();
  EXPECT(1, 10, 2, 3, 110);
  assert_int_equal(tdl_cond_destroy(&C), 0);
}

static void *cond_victim2(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  note(1);
  assert_int_equal(tdl_cond_wait(&C, &M, TDL_FOREVER), -ECANCELED);
  assert_true(tdl_mutex_owned(&M));
  note(3);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void *signal_then_cancel(void *arg)
{
  (void)arg;
  yield_n(2);
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_cond_signal(&C), 1);       /* to the victim... */
  assert_int_equal(tdl_fiber_cancel(L, victim), 0); /* ...cancelled at once */
  note(2);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void cond_signal_then_cancel_passes_on(void **state)
{
  (void)state;
  reset_objects();
  victim = go(cond_victim2, NULL);
  go(cond_waiter, (void *)10);
  go(signal_then_cancel, NULL);
  run_all();
  /* The victim returns -ECANCELED and hands its signal to waiter 10. */
  EXPECT(1, 10, 2, 3, 110);
  assert_int_equal(tdl_cond_destroy(&C), 0);
}

static void *signal_and_hold(void *arg)
{
  (void)arg;
  yield_n(1);
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_cond_signal(&C), 1);
  /* The waiter's deadline passes while it waits for M: the signal wins. */
  assert_int_equal(tdl_sleep(ms(6)), 0);
  note(2);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void *cond_wait_2ms(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  note(1);
  assert_int_equal(tdl_cond_wait(&C, &M, ms(2)), 0);
  note(3);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void cond_signal_beats_timeout(void **state)
{
  (void)state;
  reset_objects();
  go(cond_wait_2ms, NULL);
  go(signal_and_hold, NULL);
  run_all();
  EXPECT(1, 2, 3);
}

static void *cond_misuser(void *arg)
{
  (void)arg;
  tdl_mutex m2 = TDL_MUTEX_INIT;
  assert_int_equal(tdl_cond_wait(&C, &M, TDL_FOREVER), -EPERM); /* not held */
  int flag = 0;
  go(hold_until_told, &flag);
  tdl_fiber_yield();
  assert_int_equal(tdl_cond_wait(&C, &M, TDL_FOREVER), -EPERM); /* another's */
  flag = 1;
  go(cond_waiter, (void *)1); /* waits on C with M */
  yield_n(3);
  assert_int_equal(tdl_mutex_lock(&m2, TDL_FOREVER), 0);
  assert_int_equal(tdl_cond_wait(&C, &m2, TDL_FOREVER), -EINVAL); /* other mutex */
  assert_true(tdl_mutex_owned(&m2));
  assert_int_equal(tdl_mutex_unlock(&m2), 0);
  assert_int_equal(tdl_cond_destroy(&C), -EBUSY);
  assert_int_equal(tdl_cond_signal(&C), 1);
  assert_int_equal(tdl_cond_destroy(&C), -EBUSY); /* still inside, taking M */
  yield_n(3);
  assert_int_equal(tdl_cond_destroy(&C), 0);
  assert_int_equal(tdl_mutex_destroy(&m2), 0);
  return NULL;
}

static void cond_misuse(void **state)
{
  (void)state;
  reset_objects();
  assert_int_equal(tdl_cond_wait(&C, &M, TDL_FOREVER), -EPERM); /* no fiber */
  assert_int_equal(tdl_cond_signal(&C), 0);
  assert_int_equal(tdl_cond_broadcast(&C), 0);
  go(cond_misuser, NULL);
  run_all();
  EXPECT(1, 101);
}

/* ---- semaphore ---- */

static void *sem_taker(void *arg)
{
  int id = (int)(intptr_t)arg;
  assert_int_equal(tdl_sem_acquire(&S, TDL_FOREVER), 0);
  note(id);
  return NULL;
}

static void *sem_driver(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_sem_acquire(&S, TDL_FOREVER), 0);
  assert_int_equal(tdl_sem_acquire(&S, TDL_FOREVER), 0);
  assert_int_equal(tdl_sem_value(&S), 0);
  assert_int_equal(tdl_sem_try_acquire(&S), -EAGAIN);
  for (int i = 1; i <= 3; i++)
    go(sem_taker, (void *)(intptr_t)i);
  yield_n(2);
  assert_int_equal(tdl_sem_destroy(&S), -EBUSY);
  assert_int_equal(tdl_sem_release(&S), 0);
  /* Handed to taker 1, which has not run: nothing to take. */
  assert_int_equal(tdl_sem_value(&S), 0);
  assert_int_equal(tdl_sem_try_acquire(&S), -EAGAIN);
  assert_int_equal(tdl_sem_release(&S), 0);
  assert_int_equal(tdl_sem_release(&S), 0);
  return NULL;
}

static void sem_fifo_and_overflow(void **state)
{
  (void)state;
  reset_objects();
  tdl_sem bad;
  assert_int_equal(tdl_sem_init(&bad, 3, 2), -EINVAL);
  assert_int_equal(tdl_sem_init(&S, 2, 2), 0);
  go(sem_driver, NULL);
  run_all();
  EXPECT(1, 2, 3);
  /* All three releases went to the takers. */
  assert_int_equal(tdl_sem_value(&S), 0);
  assert_int_equal(tdl_sem_release(&S), 0); /* outside a fiber */
  assert_int_equal(tdl_sem_release(&S), 0);
  assert_int_equal(tdl_sem_release(&S), -EOVERFLOW);
  assert_int_equal(tdl_sem_value(&S), 2);
  assert_int_equal(tdl_sem_try_acquire(&S), 0);
  assert_int_equal(tdl_sem_value(&S), 1);
  assert_int_equal(tdl_sem_destroy(&S), 0);

  /* A zero-filled semaphore: no permits, no limit below TDL_SEM_VALUE_MAX. */
  tdl_sem z;
  memset(&z, 0, sizeof z);
  assert_int_equal(tdl_sem_try_acquire(&z), -EAGAIN);
  z.value = TDL_SEM_VALUE_MAX - 1;
  assert_int_equal(tdl_sem_release(&z), 0);
  assert_int_equal(tdl_sem_release(&z), -EOVERFLOW);
  tdl_sem st = TDL_SEM_INIT(1, 1);
  assert_int_equal(tdl_sem_try_acquire(&st), 0);
  assert_int_equal(tdl_sem_try_acquire(&st), -EAGAIN);
}

static void *sem_timeout_taker(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_sem_acquire(&S, ms(1)), -ETIMEDOUT);
  note(1);
  return NULL;
}

static void *sem_cancel_taker(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_sem_acquire(&S, TDL_FOREVER), -ECANCELED);
  note(2);
  return NULL;
}

static void *sem_late_release(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_sleep(ms(5)), 0);
  assert_int_equal(tdl_fiber_cancel(L, victim), 0);
  tdl_fiber_yield();
  /* Both gone without taking anything: this permit goes to taker 3. */
  assert_int_equal(tdl_sem_release(&S), 0);
  assert_int_equal(tdl_sem_value(&S), 0);
  return NULL;
}

static void *sem_grant_then_cancel(void *arg)
{
  (void)arg;
  victim = go(sem_cancel_taker, NULL);
  go(sem_taker, (void *)7);
  yield_n(2);
  assert_int_equal(tdl_sem_release(&S), 0);         /* to the victim... */
  assert_int_equal(tdl_fiber_cancel(L, victim), 0); /* ...cancelled at once */
  yield_n(3);
  /* The victim passed the permit on to taker 7. */
  assert_int_equal(tdl_sem_value(&S), 0);
  victim = go(sem_cancel_taker, NULL);
  yield_n(2);
  assert_int_equal(tdl_sem_release(&S), 0);
  assert_int_equal(tdl_fiber_cancel(L, victim), 0);
  yield_n(3);
  /* Nobody else waited: the permit went back to the count. */
  assert_int_equal(tdl_sem_value(&S), 1);
  return NULL;
}

static void sem_timeout_and_cancel_take_nothing(void **state)
{
  (void)state;
  reset_objects();
  go(sem_timeout_taker, NULL);
  victim = go(sem_cancel_taker, NULL);
  go(sem_taker, (void *)3);
  go(sem_late_release, NULL);
  run_all();
  EXPECT(1, 2, 3);

  nev = 0;
  go(sem_grant_then_cancel, NULL);
  run_all();
  EXPECT(2, 7, 2);
  assert_int_equal(tdl_sem_destroy(&S), 0);
}

/* ---- wait group ---- */

static void *wg_worker(void *arg)
{
  assert_int_equal(tdl_sleep(ms((tdl_time_t)(intptr_t)arg)), 0);
  note((int)(intptr_t)arg);
  assert_int_equal(tdl_waitgroup_done(&WG), 0);
  return NULL;
}

static void *wg_waiter(void *arg)
{
  assert_int_equal(tdl_waitgroup_wait(&WG, TDL_FOREVER), 0);
  assert_int_equal(tdl_waitgroup_count(&WG), 0);
  note((int)(intptr_t)arg);
  return NULL;
}

static void *wg_timeout_waiter(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_waitgroup_wait(&WG, ms(1)), -ETIMEDOUT);
  note(90);
  return NULL;
}

static void *wg_cancel_waiter(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_waitgroup_wait(&WG, TDL_FOREVER), -ECANCELED);
  note(91);
  return NULL;
}

static void *wg_driver(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_waitgroup_wait(&WG, TDL_FOREVER), 0); /* zero: at once */
  assert_int_equal(tdl_waitgroup_add(&WG, 3), 0);
  go(wg_waiter, (void *)100);
  go(wg_waiter, (void *)101);
  go(wg_timeout_waiter, NULL);
  victim = go(wg_cancel_waiter, NULL);
  go(wg_worker, (void *)2);
  go(wg_worker, (void *)4);
  go(wg_worker, (void *)6);
  yield_n(2);
  assert_int_equal(tdl_waitgroup_destroy(&WG), -EBUSY);
  assert_int_equal(tdl_fiber_cancel(L, victim), 0);
  return NULL;
}

static void tick_done(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  note(50);
  assert_int_equal(tdl_waitgroup_done(&WG), 0); /* from a callback */
}

static void waitgroup_basics(void **state)
{
  (void)state;
  reset_objects();
  assert_int_equal(tdl_waitgroup_wait(&WG, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_waitgroup_add(&WG, -1), -EINVAL); /* negative */
  assert_int_equal(tdl_waitgroup_count(&WG), 0);
  assert_int_equal(tdl_waitgroup_done(&WG), -EINVAL);
  assert_int_equal(tdl_waitgroup_add(&WG, INT64_MAX), 0);
  assert_int_equal(tdl_waitgroup_add(&WG, 1), -EOVERFLOW);
  assert_int_equal(tdl_waitgroup_add(&WG, INT64_MIN), -EINVAL);
  assert_int_equal(tdl_waitgroup_count(&WG), INT64_MAX);
  assert_int_equal(tdl_waitgroup_add(&WG, -INT64_MAX), 0);
  assert_int_equal(tdl_waitgroup_count(&WG), 0);

  go(wg_driver, NULL);
  run_all();
  EXPECT(91, 90, 2, 4, 6, 100, 101);
  assert_int_equal(tdl_waitgroup_count(&WG), 0);

  /* Done from a timer callback wakes the waiter. */
  nev = 0;
  assert_int_equal(tdl_waitgroup_add(&WG, 1), 0);
  go(wg_waiter, (void *)100);
  tdl_timer t;
  tdl_timer_init(&t, tick_done, NULL);
  assert_int_equal(tdl_timer_start(L, &t, TDL_MSEC, 0), 0);
  run_all();
  EXPECT(50, 100);
  assert_int_equal(tdl_waitgroup_destroy(&WG), 0);
}

/* ---- once ---- */

static int once_calls;
static int once_fail_first;
static int once_init(void *arg)
{
  int *calls = arg;
  (*calls)++;
  note(1000 + *calls);
  int r = tdl_sleep(ms(2)); /* others arrive and park meanwhile */
  if (r < 0)
    return r;
  if (once_fail_first && *calls == 1)
    return -EIO;
  return 0;
}

static void *once_caller(void *arg)
{
  int id = (int)(intptr_t)arg;
  int r = tdl_once_call(&O, once_init, &once_calls, TDL_FOREVER);
  note(r < 0 ? -id : id);
  assert_true(r == 0 || r == -EIO || r == -ECANCELED);
  return NULL;
}

static void once_runs_once(void **state)
{
  (void)state;
  reset_objects();
  once_calls = 0;
  once_fail_first = 0;
  for (int i = 1; i <= 5; i++)
    go(once_caller, (void *)(intptr_t)i);
  run_all();
  EXPECT(1001, 1, 2, 3, 4, 5);
  assert_int_equal(once_calls, 1);
  assert_true(tdl_once_done(&O));
  go(once_caller, (void *)6); /* done: fn is not called again */
  run_all();
  assert_int_equal(once_calls, 1);
  assert_int_equal(ev[nev - 1], 6);
  assert_int_equal(tdl_once_destroy(&O), 0);
  assert_false(tdl_once_done(&O));
}

static void once_failure_passes_to_next_waiter(void **state)
{
  (void)state;
  reset_objects();
  once_calls = 0;
  once_fail_first = 1;
  for (int i = 1; i <= 4; i++)
    go(once_caller, (void *)(intptr_t)i);
  run_all();
  /* 1 runs fn, which fails: 1 gets -EIO; 2, the oldest waiter, runs it again. */
  EXPECT(1001, -1, 1002, 2, 3, 4);
  assert_int_equal(once_calls, 2);
  assert_true(tdl_once_done(&O));
}

static void *cancel_runner(void *arg)
{
  (void)arg;
  tdl_fiber_yield();
  assert_int_equal(tdl_fiber_cancel(L, victim), 0);
  return NULL;
}

static void once_runner_cancelled(void **state)
{
  (void)state;
  reset_objects();
  once_calls = 0;
  once_fail_first = 0;
  victim = go(once_caller, (void *)1);
  go(once_caller, (void *)2);
  go(once_caller, (void *)3);
  go(cancel_runner, NULL);
  run_all();
  /* The runner's sleep fails with -ECANCELED, fn returns it, the once is not
   * done, and waiter 2 runs fn. */
  EXPECT(1001, -1, 1002, 2, 3);
  assert_true(tdl_once_done(&O));
}

static int stubborn_init(void *arg)
{
  (void)arg;
  note(1000);
  assert_int_equal(tdl_sleep(ms(2)), -ECANCELED);
  return 0; /* completes anyway */
}

static void *stubborn_caller(void *arg)
{
  int id = (int)(intptr_t)arg;
  assert_int_equal(tdl_once_call(&O, stubborn_init, NULL, TDL_FOREVER), 0);
  note(id);
  return NULL;
}

static int exiting_init(void *arg)
{
  (void)arg;
  note(2000);
  tdl_fiber_yield();
  tdl_fiber_exit(NULL);
  return 0;
}

static void *exiting_caller(void *arg)
{
  (void)arg;
  tdl_once_call(&O, exiting_init, NULL, TDL_FOREVER);
  fail();
  return NULL;
}

static void once_runner_cancelled_but_completes_or_exits(void **state)
{
  (void)state;
  reset_objects();
  victim = go(stubborn_caller, (void *)1);
  go(stubborn_caller, (void *)2);
  go(cancel_runner, NULL);
  run_all();
  EXPECT(1000, 1, 2);
  assert_true(tdl_once_done(&O));

  /* The runner's fiber finishes inside fn: the next waiter runs fn. */
  reset_objects();
  once_calls = 0;
  once_fail_first = 0;
  go(exiting_caller, NULL);
  go(once_caller, (void *)2);
  go(once_caller, (void *)3);
  run_all();
  EXPECT(2000, 1001, 2, 3);
  assert_true(tdl_once_done(&O));
}

static int recursive_init(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_once_call(&O, recursive_init, NULL, TDL_FOREVER), -EDEADLK);
  assert_int_equal(tdl_once_destroy(&O), -EBUSY);
  tdl_fiber_yield();
  return 0;
}

static void *once_timeout_caller(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_once_call(&O, recursive_init, NULL, tdl_now() - 1), -ETIMEDOUT);
  note(7);
  return NULL;
}

static void *once_misuser(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_once_call(&O, NULL, NULL, TDL_FOREVER), -EINVAL);
  go(once_timeout_caller, NULL);
  assert_int_equal(tdl_once_call(&O, recursive_init, NULL, TDL_FOREVER), 0);
  note(8);
  return NULL;
}

static void once_misuse(void **state)
{
  (void)state;
  reset_objects();
  assert_int_equal(tdl_once_call(&O, recursive_init, NULL, TDL_FOREVER), -EPERM);
  go(once_misuser, NULL);
  run_all();
  EXPECT(7, 8);
  assert_int_equal(tdl_once_destroy(&O), 0);
}

/* ---- outside fibers ---- */

static void *outside_waiters(void *arg)
{
  int id = (int)(intptr_t)arg;
  int r;
  switch (id) {
  case 1:
    r = tdl_sem_acquire(&S, TDL_FOREVER);
    break;
  case 2:
    assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
    r = tdl_cond_wait(&C, &M, TDL_FOREVER);
    assert_int_equal(tdl_mutex_unlock(&M), 0);
    break;
  default:
    r = tdl_waitgroup_wait(&WG, TDL_FOREVER);
    break;
  }
  assert_int_equal(r, 0);
  note(id);
  return NULL;
}

static void wake_from_callback(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  assert_int_equal(tdl_sem_release(&S), 0);
  assert_int_equal(tdl_cond_signal(&C), 1);
  assert_int_equal(tdl_waitgroup_done(&WG), 0);
}

static void outside_fibers(void **state)
{
  (void)state;
  reset_objects();
  /* Every blocking call refuses at once. */
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_mutex_try_lock(&M), -EPERM);
  assert_int_equal(tdl_mutex_unlock(&M), -EPERM);
  assert_int_equal(tdl_cond_wait(&C, &M, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_sem_acquire(&S, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_waitgroup_wait(&WG, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_once_call(&O, recursive_init, NULL, TDL_FOREVER), -EPERM);
  assert_false(tdl_once_done(&O));
  /* Non-blocking ones work, and wake fibers from a callback. */
  assert_int_equal(tdl_waitgroup_add(&WG, 1), 0);
  for (int i = 1; i <= 3; i++)
    go(outside_waiters, (void *)(intptr_t)i);
  tdl_timer t;
  tdl_timer_init(&t, wake_from_callback, NULL);
  assert_int_equal(tdl_timer_start(L, &t, TDL_MSEC, 0), 0);
  run_all();
  EXPECT(1, 2, 3);
}

/* ---- destroy with waiters, static initializers ---- */

static tdl_mutex g_m = TDL_MUTEX_INIT;
static tdl_cond g_c = TDL_COND_INIT;
static tdl_sem g_s = TDL_SEM_INIT(0, 1);
static tdl_waitgroup g_wg = TDL_WAITGROUP_INIT;
static tdl_once g_o = TDL_ONCE_INIT;

static int g_once_fn(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_once_destroy(&g_o), -EBUSY);
  return 0;
}

static void *g_waiter(void *arg)
{
  switch ((int)(intptr_t)arg) {
  case 0:
    assert_int_equal(tdl_mutex_lock(&g_m, ms(2)), -ETIMEDOUT);
    break;
  case 1:
    assert_int_equal(tdl_mutex_lock(&g_m, TDL_FOREVER), 0);
    assert_int_equal(tdl_cond_wait(&g_c, &g_m, ms(2)), -ETIMEDOUT);
    assert_int_equal(tdl_mutex_unlock(&g_m), 0);
    break;
  case 2:
    assert_int_equal(tdl_sem_acquire(&g_s, ms(2)), -ETIMEDOUT);
    break;
  default:
    assert_int_equal(tdl_waitgroup_wait(&g_wg, ms(2)), -ETIMEDOUT);
    break;
  }
  return NULL;
}

static void *g_driver(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_once_call(&g_o, g_once_fn, NULL, TDL_FOREVER), 0);
  assert_int_equal(tdl_waitgroup_add(&g_wg, 1), 0);
  go(g_waiter, (void *)1);
  yield_n(2);
  assert_int_equal(tdl_mutex_lock(&g_m, TDL_FOREVER), 0);
  for (int i = 0; i < 4; i++)
    if (i != 1)
      go(g_waiter, (void *)(intptr_t)i);
  yield_n(2);
  /* Each refuses while fibers wait (or hold): nothing changes. */
  assert_int_equal(tdl_mutex_destroy(&g_m), -EBUSY);
  assert_int_equal(tdl_cond_destroy(&g_c), -EBUSY);
  assert_int_equal(tdl_sem_destroy(&g_s), -EBUSY);
  assert_int_equal(tdl_waitgroup_destroy(&g_wg), -EBUSY);
  assert_int_equal(tdl_sleep(ms(4)), 0);
  /* The waiters timed out; the cond waiter waits for g_m. */
  assert_int_equal(tdl_mutex_destroy(&g_m), -EBUSY);
  assert_int_equal(tdl_cond_destroy(&g_c), -EBUSY);
  assert_int_equal(tdl_sem_destroy(&g_s), 0);
  assert_int_equal(tdl_waitgroup_destroy(&g_wg), 0);
  assert_int_equal(tdl_mutex_unlock(&g_m), 0);
  yield_n(3);
  assert_int_equal(tdl_cond_destroy(&g_c), 0);
  assert_int_equal(tdl_mutex_destroy(&g_m), 0);
  assert_int_equal(tdl_once_destroy(&g_o), 0);
  note(1);
  return NULL;
}

static void destroy_while_in_use(void **state)
{
  (void)state;
  nev = 0;
  go(g_driver, NULL);
  run_all();
  EXPECT(1);
}

/* ---- more corners ---- */

static void *self_cancelled(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_fiber_cancel(L, tdl_fiber_self()), 0);
  /* Blocking calls fail at once, even those that would not have to wait. */
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), -ECANCELED);
  assert_int_equal(tdl_sem_acquire(&S, TDL_FOREVER), -ECANCELED);
  assert_int_equal(tdl_waitgroup_wait(&WG, TDL_FOREVER), -ECANCELED);
  assert_int_equal(tdl_once_call(&O, recursive_init, NULL, TDL_FOREVER), -ECANCELED);
  assert_false(tdl_once_done(&O));
  /* The non-blocking ones work, so that the fiber can unwind. */
  assert_int_equal(tdl_mutex_try_lock(&M), 0);
  assert_int_equal(tdl_cond_wait(&C, &M, TDL_FOREVER), -ECANCELED);
  assert_true(tdl_mutex_owned(&M));
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  assert_int_equal(tdl_sem_try_acquire(&S), 0);
  assert_int_equal(tdl_sem_release(&S), 0);
  assert_int_equal(tdl_waitgroup_add(&WG, 1), 0);
  assert_int_equal(tdl_waitgroup_done(&WG), 0);
  assert_int_equal(tdl_cond_signal(&C), 0);
  note(1);
  return NULL;
}

static void cancelled_fiber_blocking_calls_fail_at_once(void **state)
{
  (void)state;
  reset_objects();
  assert_int_equal(tdl_sem_release(&S), 0); /* a permit is there */
  go(self_cancelled, NULL);
  run_all();
  EXPECT(1);
  assert_int_equal(tdl_sem_value(&S), 1);
}

static int fail_init(void *arg)
{
  (*(int *)arg)++;
  return -EAGAIN;
}

static int ok_init(void *arg)
{
  (*(int *)arg)++;
  return 0;
}

static void *once_retry_driver(void *arg)
{
  (void)arg;
  int calls = 0;
  assert_int_equal(tdl_once_call(&O, fail_init, &calls, TDL_FOREVER), -EAGAIN);
  assert_false(tdl_once_done(&O));
  assert_null(O.runner);
  assert_int_equal(tdl_once_call(&O, fail_init, &calls, TDL_FOREVER), -EAGAIN);
  assert_int_equal(tdl_once_call(&O, ok_init, &calls, TDL_FOREVER), 0);
  assert_int_equal(tdl_once_call(&O, ok_init, &calls, TDL_FOREVER), 0);
  assert_int_equal(calls, 3);
  note(1);
  return NULL;
}

static void once_failure_without_waiters_retries(void **state)
{
  (void)state;
  reset_objects();
  go(once_retry_driver, NULL);
  run_all();
  EXPECT(1);
  assert_true(tdl_once_done(&O));
}

static tdl_fiber_t victim4;
static int turn_init(void *arg)
{
  (void)arg;
  once_calls++;
  note(1000 + once_calls);
  tdl_fiber_yield(); /* the others park */
  return once_calls == 1 ? -EIO : 0;
}

static void *turn_caller(void *arg)
{
  int id = (int)(intptr_t)arg;
  int r = tdl_once_call(&O, turn_init, NULL, TDL_FOREVER);
  note(r == 0 ? id : -id);
  /* Whatever our call handed to the oldest waiter (the turn to run fn, or
   * the news that it is done), that waiter is cancelled before it runs. */
  if (id == 1)
    assert_int_equal(tdl_fiber_cancel(L, victim), 0);
  if (id == 3)
    assert_int_equal(tdl_fiber_cancel(L, victim4), 0);
  return NULL;
}

static void *turn_victim(void *arg)
{
  int id = (int)(intptr_t)arg;
  assert_int_equal(tdl_once_call(&O, turn_init, NULL, TDL_FOREVER), -ECANCELED);
  note(-id);
  return NULL;
}

static void once_grant_then_cancel(void **state)
{
  (void)state;
  reset_objects();
  once_calls = 0;
  go(turn_caller, (void *)1);            /* runs fn, which fails */
  victim = go(turn_victim, (void *)2);   /* gets the turn, cancelled: passes it on */
  go(turn_caller, (void *)3);            /* runs fn, which succeeds */
  victim4 = go(turn_victim, (void *)4);  /* woken as done, cancelled */
  go(turn_caller, (void *)5);
  run_all();
  EXPECT(1001, -1, -2, 1002, 3, -4, 5);
  assert_int_equal(once_calls, 2);
}

static void *lock_three_unlock_two_exit(void *arg)
{
  tdl_mutex *m = arg;
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_mutex_lock(&m[i], TDL_FOREVER), 0);
  assert_int_equal(tdl_mutex_unlock(&m[1]), 0); /* from the middle of its list */
  assert_int_equal(tdl_mutex_unlock(&m[2]), 0);
  note(1);
  return NULL; /* holding m[0] */
}

static void *lock_three_after(void *arg)
{
  tdl_mutex *m = arg;
  assert_int_equal(tdl_mutex_lock(&m[0], TDL_FOREVER), -EOWNERDEAD);
  assert_int_equal(tdl_mutex_lock(&m[1], TDL_FOREVER), 0);
  assert_int_equal(tdl_mutex_lock(&m[2], TDL_FOREVER), 0);
  for (int i = 2; i >= 0; i--)
    assert_int_equal(tdl_mutex_unlock(&m[i]), 0);
  note(2);
  return NULL;
}

static void mutex_unlock_out_of_order_then_finish(void **state)
{
  (void)state;
  reset_objects();
  tdl_mutex m[3] = {TDL_MUTEX_INIT, TDL_MUTEX_INIT, TDL_MUTEX_INIT};
  go(lock_three_unlock_two_exit, m);
  run_all();
  go(lock_three_after, m);
  run_all();
  EXPECT(1, 2);
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_mutex_destroy(&m[i]), 0);
}

static void *cond_timeout_alone(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_cond_wait(&C, &M, ms(1)), -ETIMEDOUT); /* M was free: taken at once */
  assert_true(tdl_mutex_owned(&M));
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  note(1);
  return NULL;
}

static void cond_timeout_with_free_mutex(void **state)
{
  (void)state;
  reset_objects();
  go(cond_timeout_alone, NULL);
  run_all();
  EXPECT(1);
  assert_int_equal(tdl_cond_destroy(&C), 0);
  assert_int_equal(tdl_mutex_destroy(&M), 0);
}

/* A deadline and a release in the same instant: the releaser's timer was
 * armed first, so it runs first, while the waiter has been woken by its own
 * timer but has not run yet.  The release must skip it. */
static tdl_time_t D;

/* A deadline shared by fibers that have yet to start: far enough ahead that
 * they all park before it passes, also under valgrind. */
static tdl_time_t shared_deadline(void) { return ms(RUNNING_ON_VALGRIND ? 300 : 20); }

static void *si_mutex_holder(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_sleep(D), 0); /* armed before the waiter's deadline */
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  note(1);
  return NULL;
}

static void *si_sem_releaser(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_sleep(D), 0);
  assert_int_equal(tdl_sem_release(&S), 0);
  note(1);
  return NULL;
}

static void *si_signaller(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_sleep(D), 0);
  assert_int_equal(tdl_cond_signal(&C), 1);
  note(1);
  return NULL;
}

static void *si_waiter(void *arg)
{
  int kind = (int)(intptr_t)arg % 10, forever = (int)(intptr_t)arg >= 10;
  tdl_time_t d = forever ? TDL_FOREVER : D;
  int r;
  if (kind == 0) {
    r = tdl_mutex_lock(&M, d);
    if (r == 0)
      assert_int_equal(tdl_mutex_unlock(&M), 0);
  } else if (kind == 1) {
    r = tdl_sem_acquire(&S, d);
  } else {
    assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
    r = tdl_cond_wait(&C, &M, d);
    assert_int_equal(tdl_mutex_unlock(&M), 0);
  }
  assert_int_equal(r, forever ? 0 : -ETIMEDOUT);
  note(forever ? 3 : 2);
  return NULL;
}

static void timeout_and_release_in_same_instant(void **state)
{
  (void)state;
  static tdl_fiber_fn const releasers[] = {si_mutex_holder, si_sem_releaser, si_signaller};
  for (int kind = 0; kind < 3; kind++) {
    reset_objects();
    D = shared_deadline();
    go(releasers[kind], NULL);
    go(si_waiter, (void *)(intptr_t)kind);        /* deadline D: times out */
    go(si_waiter, (void *)(intptr_t)(kind + 10)); /* no deadline: gets it */
    run_all();
    /* The timed-out waiter was already runnable when the release came, and
     * was skipped.  (The cond's timed-out waiter must then take M back from
     * the signalled one, which the signal handed M to: it returns last.) */
    if (kind < 2)
      EXPECT(1, 2, 3);
    else
      EXPECT(1, 3, 2);
    assert_int_equal(tdl_sem_value(&S), 0);
    assert_int_equal(tdl_mutex_destroy(&M), 0);
    assert_int_equal(tdl_cond_destroy(&C), 0);
  }
}

static void *wg_done_then_cancel(void *arg)
{
  (void)arg;
  victim = go(wg_cancel_waiter, NULL);
  yield_n(2);
  assert_int_equal(tdl_waitgroup_done(&WG), 0);     /* wakes the waiter... */
  assert_int_equal(tdl_fiber_cancel(L, victim), 0); /* ...cancelled at once */
  return NULL;
}

static void waitgroup_wake_then_cancel(void **state)
{
  (void)state;
  reset_objects();
  assert_int_equal(tdl_waitgroup_add(&WG, 1), 0);
  go(wg_done_then_cancel, NULL);
  run_all();
  EXPECT(91); /* -ECANCELED, as every blocking call of a cancelled fiber */
  assert_int_equal(tdl_waitgroup_destroy(&WG), 0);
}

/* Destroy in the window where a fiber has been woken but has not returned. */
static void *dw_cond_waiter(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_cond_wait(&C, &M, D), -ETIMEDOUT);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  note(2);
  return NULL;
}

static void *dw_destroyer(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_sleep(D), 0); /* runs before the timed-out waiter */
  /* The waiter is off every queue and M is free, yet it is about to take M
   * back: both refuse. */
  assert_null(M.owner);
  assert_int_equal(tdl_mutex_destroy(&M), -EBUSY);
  assert_int_equal(tdl_cond_destroy(&C), -EBUSY);
  note(1);
  yield_n(2);
  assert_int_equal(tdl_mutex_destroy(&M), 0);
  assert_int_equal(tdl_cond_destroy(&C), 0);
  /* A permit handed to a waiter that is cancelled before it runs: the waiter
   * still has to pass it on, so the semaphore is in use. */
  victim = go(sem_cancel_taker, NULL);
  yield_n(2);
  assert_int_equal(tdl_sem_release(&S), 0);
  assert_int_equal(tdl_fiber_cancel(L, victim), 0);
  assert_null(S.waiters.next);
  assert_int_equal(tdl_sem_destroy(&S), -EBUSY);
  yield_n(2);
  assert_int_equal(tdl_sem_value(&S), 1); /* passed back to the count */
  assert_int_equal(tdl_sem_destroy(&S), 0);
  assert_int_equal(tdl_sem_value(&S), 0);
  note(3);
  return NULL;
}

static void destroy_refused_until_woken_fibers_return(void **state)
{
  (void)state;
  reset_objects();
  D = shared_deadline();
  go(dw_destroyer, NULL);
  go(dw_cond_waiter, NULL);
  run_all();
  EXPECT(1, 2, 2, 3); /* sem_cancel_taker notes 2 too */
}

static void *od_cond_waiter(void *arg)
{
  int id = (int)(intptr_t)arg;
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  int r = tdl_cond_wait(&C, &M, TDL_FOREVER);
  assert_true(tdl_mutex_owned(&M));
  note(r == 0 ? id : r == -EOWNERDEAD ? -id : 999);
  assert_int_equal(tdl_mutex_unlock(&M), 0);
  return NULL;
}

static void *signal_and_die(void *arg)
{
  (void)arg;
  yield_n(2);
  assert_int_equal(tdl_mutex_lock(&M, TDL_FOREVER), 0);
  assert_int_equal(tdl_cond_signal(&C), 1); /* waiter 1 now waits for M */
  note(0);
  return NULL; /* finishes holding M */
}

static void cond_wait_reports_owner_dead_and_passes_signal(void **state)
{
  (void)state;
  reset_objects();
  go(od_cond_waiter, (void *)1);
  go(od_cond_waiter, (void *)2);
  go(signal_and_die, NULL);
  run_all();
  /* 1 gets M with -EOWNERDEAD and passes its signal to 2. */
  EXPECT(0, -1, 2);
  assert_int_equal(tdl_cond_destroy(&C), 0);
  assert_int_equal(tdl_mutex_destroy(&M), 0);
}

/* ---- randomized ---- */

enum { RFIBERS = 200, ROPS = 40, RPERMITS = 3 };

static uint64_t splitmix(uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static unsigned below(uint64_t *s, unsigned n) { return (unsigned)(splitmix(s) % n); }

static struct {
  bool cancels;
  uint64_t seed;
  int in_cs, sem_holders, finished;
  uint64_t lock_ticket, lock_last;   /* successful locks return in call order */
  uint64_t cond_ticket, cond_last;   /* so do signalled cond waits */
  uint64_t sem_ticket, sem_last;     /* and acquires that had to wait */
  long signalled, cond_ok, cond_timeouts, cancelled_ops, timeouts, calls, returns, cancels_sent;
  tdl_fiber_t h[RFIBERS];
  bool blocked[RFIBERS]; /* inside a blocking call: the chaos fiber's targets */
  bool done[RFIBERS];
} R;

static tdl_time_t rdeadline(uint64_t *s)
{
  switch (below(s, 4)) {
  case 0: return TDL_FOREVER;
  case 1: return tdl_now() - 1;
  case 2: return tdl_after((tdl_time_t)below(s, 100) * TDL_USEC);
  default: return tdl_after((tdl_time_t)below(s, 1500) * TDL_USEC);
  }
}

/* Enter the critical section (the caller has just got M). */
static void cs_enter(void)
{
  assert_true(tdl_mutex_owned(&M));
  assert_int_equal(R.in_cs, 0);
  R.in_cs = 1;
}
static void cs_leave(void)
{
  assert_int_equal(R.in_cs, 1);
  R.in_cs = 0;
}

/* Evaluate a blocking call of worker idx, marked as blocked meanwhile. */
#define BLOCKING(call) (R.blocked[idx] = true, r_tmp = (call), R.blocked[idx] = false, r_tmp)

static void count_result(int r)
{
  R.returns++;
  if (r == -ECANCELED)
    R.cancelled_ops++;
  else if (r == -ETIMEDOUT)
    R.timeouts++;
}

/* Returns false when the fiber was cancelled and should stop. */
static bool r_locked_section(uint64_t *s, int idx)
{
  int r_tmp;
  unsigned what = below(s, 200);
  switch (what < 10 ? 0 : what < 11 ? 1 : what < 90 ? 2 : 3) {
  case 0:
    R.signalled += tdl_cond_signal(&C);
    break;
  case 1:
    R.signalled += tdl_cond_broadcast(&C);
    break;
  case 2: {
    uint64_t t = ++R.cond_ticket;
    cs_leave();
    R.calls++;
    tdl_time_t d = below(s, 8) == 0 ? TDL_FOREVER : rdeadline(s);
    bool past = d != TDL_FOREVER && d <= tdl_now();
    int r = BLOCKING(tdl_cond_wait(&C, &M, d));
    count_result(r);
    if (r == -ETIMEDOUT && !past)
      R.cond_timeouts++;
    cs_enter(); /* M is held after every result here */
    if (r == 0) {
      assert_true(t > R.cond_last);
      R.cond_last = t;
      R.cond_ok++;
    } else {
      assert_true(r == -ETIMEDOUT || r == -ECANCELED);
      if (r == -ECANCELED)
        return false;
    }
    break;
  }
  default:
    yield_n((int)below(s, 3));
    break;
  }
  return true;
}

static void *r_worker(void *arg)
{
  int idx = (int)(intptr_t)arg;
  uint64_t s = R.seed ^ (0x100000001b3ull * (uint64_t)(idx + 1));
  bool alive = true;
  int r_tmp;
  for (int op = 0; op < ROPS && alive; op++) {
    unsigned what = below(&s, 100);
    if (what < 45) {
      uint64_t t = ++R.lock_ticket;
      R.calls++;
      tdl_time_t d = rdeadline(&s);
      int r = BLOCKING(tdl_mutex_lock(&M, d));
      count_result(r);
      if (r < 0) {
        assert_true(r == -ETIMEDOUT || r == -ECANCELED);
        assert_false(tdl_mutex_owned(&M));
        alive = r != -ECANCELED;
        continue;
      }
      assert_true(t > R.lock_last);
      R.lock_last = t;
      cs_enter();
      for (int k = (int)below(&s, 3); k >= 0 && alive; k--)
        alive = r_locked_section(&s, idx);
      cs_leave();
      assert_int_equal(tdl_mutex_unlock(&M), 0);
    } else if (what < 80) {
      bool waits = tdl_sem_value(&S) == 0;
      uint64_t t = waits ? ++R.sem_ticket : 0;
      R.calls++;
      tdl_time_t d = rdeadline(&s);
      int r = BLOCKING(tdl_sem_acquire(&S, d));
      count_result(r);
      if (r < 0) {
        assert_true(r == -ETIMEDOUT || r == -ECANCELED);
        alive = r != -ECANCELED;
        continue;
      }
      if (waits) {
        assert_true(t > R.sem_last);
        R.sem_last = t;
      }
      R.sem_holders++;
      assert_true(R.sem_holders <= RPERMITS);
      assert_true(R.sem_holders + (int)tdl_sem_value(&S) <= RPERMITS);
      yield_n((int)below(&s, 4));
      R.sem_holders--;
      assert_int_equal(tdl_sem_release(&S), 0);
    } else if (what < 82) {
      R.signalled += below(&s, 20) ? tdl_cond_signal(&C) : tdl_cond_broadcast(&C);
    } else if (what < 95) {
      yield_n((int)below(&s, 5));
    } else {
      tdl_time_t d = tdl_after((tdl_time_t)below(&s, 300) * TDL_USEC);
      int r = BLOCKING(tdl_sleep(d));
      alive = r == 0;
    }
  }
  assert_false(tdl_mutex_owned(&M));
  R.done[idx] = true;
  R.finished++;
  return NULL;
}

/* Broadcasts every 2 ms so that waits without a deadline end.  When the
 * run has cancellations, cancels workers, mostly ones blocked in a call
 * (including ones just handed what they waited for), about one in three in
 * all. */
static void *r_chaos(void *arg)
{
  (void)arg;
  uint64_t s = R.seed ^ 0xc4a05ull;
  tdl_time_t last = tdl_now();
  for (unsigned round = 0; R.finished < RFIBERS; round++) {
    tdl_fiber_yield();
    if (tdl_now() - last >= 2 * TDL_MSEC) {
      R.signalled += tdl_cond_broadcast(&C);
      last = tdl_now();
    }
    if (round % 64 == 63)
      assert_int_equal(tdl_sleep(tdl_after(100 * TDL_USEC)), 0);
    if (!R.cancels || below(&s, 8) != 0)
      continue;
    for (int tries = 0; tries < 8; tries++) {
      int i = (int)below(&s, RFIBERS);
      if (R.done[i] || (!R.blocked[i] && tries < 7))
        continue;
      int e = tdl_fiber_cancel(L, R.h[i]);
      assert_int_equal(e, 0);
      R.cancels_sent++;
      break;
    }
    if (R.cancels_sent >= RFIBERS / 3)
      R.cancels = false; /* let the rest finish their work */
  }
  return NULL;
}

static void randomized(bool cancels, uint64_t default_seed)
{
  reset_objects();
  memset(&R, 0, sizeof R);
  const char *env = getenv("TDL_SYNC_SEED");
  R.seed = env ? strtoull(env, NULL, 0) : default_seed;
  R.cancels = cancels;
  print_message("randomized: seed %llu (TDL_SYNC_SEED=%llu reproduces each fiber's operations)%s\n",
                (unsigned long long)R.seed, (unsigned long long)R.seed, cancels ? ", with cancellation" : "");
  assert_int_equal(tdl_sem_init(&S, RPERMITS, RPERMITS), 0);
  for (int i = 0; i < RFIBERS; i++)
    R.h[i] = go(r_worker, (void *)(intptr_t)i);
  go(r_chaos, NULL);
  run_all();

  assert_int_equal(R.finished, RFIBERS);
  assert_int_equal(R.calls, R.returns); /* every waiter came back, once */
  assert_int_equal(R.in_cs, 0);
  assert_int_equal(R.sem_holders, 0);
  /* Nothing lost, nothing duplicated. */
  assert_int_equal(tdl_sem_value(&S), RPERMITS);
  if (cancels)
    assert_true(R.cond_ok <= R.signalled && R.cancels_sent > 0);
  else
    assert_int_equal(R.cond_ok, R.signalled); /* each signal woke exactly one */
  assert_int_equal(tdl_mutex_destroy(&M), 0);
  assert_int_equal(tdl_cond_destroy(&C), 0);
  assert_int_equal(tdl_sem_destroy(&S), 0);
  print_message("randomized: %ld calls, %ld timeouts (%ld of parked cond waits), %ld cancels sent, "
                "%ld calls cancelled, %ld signals, %ld signalled waits\n",
                R.calls, R.timeouts, R.cond_timeouts, R.cancels_sent, R.cancelled_ops, R.signalled, R.cond_ok);
  assert_true(R.timeouts > 0);
  assert_true(R.cond_ok > 0);
  assert_true(R.cond_timeouts > 0);
  if (cancels)
    assert_true(R.cancelled_ops > RFIBERS / 10);
}

static void randomized_with_cancellation(void **state)
{
  (void)state;
  randomized(true, 0x5eed5eedull);
}

static void randomized_without_cancellation(void **state)
{
  (void)state;
  randomized(false, 0xfeedbeefull);
}

int main(int argc, char **argv)
{
  (void)argc;
  (void)argv;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(mutex_fifo_handoff, setup, teardown),
      cmocka_unit_test_setup_teardown(mutex_timeout, setup, teardown),
      cmocka_unit_test_setup_teardown(mutex_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(mutex_grant_then_cancel_passes_on, setup, teardown),
      cmocka_unit_test_setup_teardown(mutex_misuse, setup, teardown),
      cmocka_unit_test_setup_teardown(mutex_owner_finishes_holding, setup, teardown),
      cmocka_unit_test_setup_teardown(cond_signal_broadcast_fifo, setup, teardown),
      cmocka_unit_test_setup_teardown(cond_broadcast_takes_mutex_in_order, setup, teardown),
      cmocka_unit_test_setup_teardown(cond_timeout_retakes_mutex, setup, teardown),
      cmocka_unit_test_setup_teardown(cond_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(cond_signal_then_cancel_passes_on, setup, teardown),
      cmocka_unit_test_setup_teardown(cond_signal_beats_timeout, setup, teardown),
      cmocka_unit_test_setup_teardown(cond_misuse, setup, teardown),
      cmocka_unit_test_setup_teardown(sem_fifo_and_overflow, setup, teardown),
      cmocka_unit_test_setup_teardown(sem_timeout_and_cancel_take_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(waitgroup_basics, setup, teardown),
      cmocka_unit_test_setup_teardown(once_runs_once, setup, teardown),
      cmocka_unit_test_setup_teardown(once_failure_passes_to_next_waiter, setup, teardown),
      cmocka_unit_test_setup_teardown(once_runner_cancelled, setup, teardown),
      cmocka_unit_test_setup_teardown(once_runner_cancelled_but_completes_or_exits, setup, teardown),
      cmocka_unit_test_setup_teardown(once_misuse, setup, teardown),
      cmocka_unit_test_setup_teardown(outside_fibers, setup, teardown),
      cmocka_unit_test_setup_teardown(destroy_while_in_use, setup, teardown),
      cmocka_unit_test_setup_teardown(cancelled_fiber_blocking_calls_fail_at_once, setup, teardown),
      cmocka_unit_test_setup_teardown(once_failure_without_waiters_retries, setup, teardown),
      cmocka_unit_test_setup_teardown(once_grant_then_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(mutex_unlock_out_of_order_then_finish, setup, teardown),
      cmocka_unit_test_setup_teardown(cond_timeout_with_free_mutex, setup, teardown),
      cmocka_unit_test_setup_teardown(timeout_and_release_in_same_instant, setup, teardown),
      cmocka_unit_test_setup_teardown(waitgroup_wake_then_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(destroy_refused_until_woken_fibers_return, setup, teardown),
      cmocka_unit_test_setup_teardown(cond_wait_reports_owner_dead_and_passes_signal, setup, teardown),
      cmocka_unit_test_setup_teardown(randomized_with_cancellation, setup, teardown),
      cmocka_unit_test_setup_teardown(randomized_without_cancellation, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
