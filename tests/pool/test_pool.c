/* SPDX-License-Identifier: MIT */
/* The blocking-work pool: tdl_pool_call and friends (pool.h). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"
#include "loop_fixture.h"

#define LONG T_HANG /* a deadline no test should reach */

static int pool_defaults(void **state)
{
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){0}), 0);
  return setup(state);
}

/* ---- it runs elsewhere, and comes back ---- */

static pthread_t loop_thread;

static void *twice_elsewhere(void *arg)
{
  assert_false(pthread_equal(pthread_self(), loop_thread));
  return (void *)((intptr_t)arg * 2);
}

static void *call_twice(void *arg)
{
  (void)arg;
  for (intptr_t i = 1; i <= 100; i++) {
    void *r = NULL;
    assert_int_equal(tdl_pool_call(TDL_LANE_USER, twice_elsewhere, (void *)i, NULL, &r, tdl_after(LONG)), 0);
    assert_int_equal((intptr_t)r, 2 * i);
  }
  return NULL;
}

static void runs_on_a_pool_thread(void **state)
{
  (void)state;
  loop_thread = pthread_self();
  for (int i = 0; i < 8; i++)
    go(call_twice, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_pool_stats st;
  tdl_pool_stats_get(&st);
  assert_true(st.started_threads >= 1);
  assert_true(st.done >= 800);
  assert_int_equal(st.queued[TDL_LANE_USER], 0);
  assert_int_equal(st.running[TDL_LANE_USER], 0);
}

/* ---- the loop stays responsive ---- */

static int ticks, slow_done; /* ticks: atomic */

static void *sleep_200ms(void *arg)
{
  (void)arg;
  usleep(200 * 1000);
  return NULL;
}

/* Blocks its pool thread until the loop has ticked three times (bounded:
 * a stalled loop never ticks, and the test then fails on the count). */
static void *block_until_ticks(void *arg)
{
  (void)arg;
  for (tdl_time_t end = t_clock() + LONG; __atomic_load_n(&ticks, __ATOMIC_ACQUIRE) < 3 && t_clock() < end;)
    usleep(1000);
  return NULL;
}

static void *slow_caller(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, block_until_ticks, NULL, NULL, NULL, tdl_after(LONG)), 0);
  slow_done = 1;
  return NULL;
}

static void *ticker(void *arg)
{
  (void)arg;
  while (!slow_done) {
    tdl_sleep(tdl_after(10 * TDL_MSEC));
    __atomic_add_fetch(&ticks, 1, __ATOMIC_ACQ_REL);
  }
  return NULL;
}

static void other_fibers_run_meanwhile(void **state)
{
  (void)state;
  ticks = slow_done = 0;
  go(slow_caller, NULL);
  go(ticker, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  /* Blocking work that ends only once the loop has ticked meanwhile: had
   * the loop stalled for the call, it would have ticked at most once. */
  assert_true(ticks >= 3);
}

/* ---- deadlines, cancels, abandoned work ---- */

static int gate_open, slow_finished, dropped, never_ran_flag;
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;

static void open_gate(void)
{
  pthread_mutex_lock(&gate_lock);
  gate_open = 1;
  pthread_cond_broadcast(&gate_cond);
  pthread_mutex_unlock(&gate_lock);
}

/* Blocks until the test opens the gate: work that "never returns". */
static void *wait_gate(void *arg)
{
  (void)arg;
  pthread_mutex_lock(&gate_lock);
  while (!gate_open)
    pthread_cond_wait(&gate_cond, &gate_lock);
  pthread_mutex_unlock(&gate_lock);
  __atomic_store_n(&slow_finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void *never_runs(void *arg)
{
  (void)arg;
  __atomic_store_n(&never_ran_flag, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void count_drop(void *arg)
{
  (void)arg;
  __atomic_add_fetch(&dropped, 1, __ATOMIC_ACQ_REL);
}

static void *deadline_while_running(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, wait_gate, NULL, count_drop, NULL, tdl_after(20 * TDL_MSEC)),
                   -ETIMEDOUT);
  assert_int_equal(__atomic_load_n(&slow_finished, __ATOMIC_ACQUIRE), 0); /* it went on without us */
  assert_int_equal(__atomic_load_n(&dropped, __ATOMIC_ACQUIRE), 0);      /* not before the work ends */
  /* The pool stays usable while that thread is stuck. */
  void *r;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, twice_elsewhere, (void *)21, NULL, &r, tdl_after(LONG)), 0);
  assert_int_equal((intptr_t)r, 42);
  open_gate();
  while (__atomic_load_n(&dropped, __ATOMIC_ACQUIRE) == 0)
    tdl_sleep(tdl_after(TDL_MSEC)); /* the drop runs on this loop once the work is done */
  assert_int_equal(__atomic_load_n(&slow_finished, __ATOMIC_ACQUIRE), 1);
  return NULL;
}

static void deadline_returns_at_once_work_finishes_later(void **state)
{
  (void)state;
  loop_thread = pthread_self();
  gate_open = slow_finished = dropped = 0;
  go(deadline_while_running, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(dropped, 1);
}

static void *past_deadline(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, never_runs, NULL, count_drop, NULL, tdl_now() - 1),
                   -ETIMEDOUT);
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, never_runs, NULL, NULL, NULL, 0), -ETIMEDOUT); /* 0 is long past */
  return NULL;
}

static void deadline_already_past(void **state)
{
  (void)state;
  never_ran_flag = dropped = 0;
  go(past_deadline, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  usleep(50 * 1000);
  assert_int_equal(__atomic_load_n(&never_ran_flag, __ATOMIC_ACQUIRE), 0);
  /* Not handed over, and dropped all the same: every failing call drops
   * its argument once, so the caller need not know which way it failed. */
  assert_int_equal(dropped, 1);
}

static tdl_fiber_t blocked;
static int cancel_result;

static void *blocked_caller(void *arg)
{
  (void)arg;
  cancel_result = tdl_pool_call(TDL_LANE_USER, wait_gate, NULL, count_drop, NULL, tdl_after(LONG));
  return NULL;
}

static void *canceller(void *arg)
{
  (void)arg;
  tdl_sleep(tdl_after(20 * TDL_MSEC));
  assert_int_equal(tdl_fiber_cancel(L, blocked), 0);
  tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(cancel_result, -ECANCELED);
  open_gate();
  while (__atomic_load_n(&dropped, __ATOMIC_ACQUIRE) == 0)
    tdl_sleep(tdl_after(TDL_MSEC));
  return NULL;
}

static void cancel_returns_at_once(void **state)
{
  (void)state;
  gate_open = slow_finished = dropped = 0;
  cancel_result = 1;
  blocked = go(blocked_caller, NULL);
  go(canceller, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(dropped, 1);
}

/* With one thread for the lane, the second call waits in the queue; when
 * its deadline passes there, it is skipped, never run. */
static void *first_holds_the_lane(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, wait_gate, NULL, NULL, NULL, tdl_after(LONG)), 0);
  return NULL;
}

/* Wait (bounded) until the pool runs `running` calls of lane and queues
 * `queued` more (however long its threads take to start). */
static void wait_lane(tdl_lane lane, unsigned running, unsigned queued)
{
  tdl_pool_stats st;
  for (tdl_time_t end = tdl_after(LONG);;) {
    tdl_pool_stats_get(&st);
    if (st.running[lane] == running && st.queued[lane] == queued)
      return;
    assert_true(tdl_now() < end);
    tdl_sleep(tdl_after(TDL_MSEC));
  }
}

static void *second_gives_up(void *arg)
{
  (void)arg;
  wait_lane(TDL_LANE_USER, 1, 0); /* the first call holds the lane's thread */
  tdl_pool_stats st;
  tdl_pool_stats_get(&st);
  assert_int_equal(st.running[TDL_LANE_USER], 1);
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, never_runs, NULL, count_drop, NULL, tdl_after(20 * TDL_MSEC)),
                   -ETIMEDOUT);
  tdl_pool_stats_get(&st);
  assert_int_equal(st.queued[TDL_LANE_USER], 1); /* still queued, abandoned */
  open_gate();
  while (__atomic_load_n(&dropped, __ATOMIC_ACQUIRE) == 0)
    tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(__atomic_load_n(&never_ran_flag, __ATOMIC_ACQUIRE), 0);
  return NULL;
}

static void queued_work_abandoned_is_skipped(void **state)
{
  (void)state;
  gate_open = slow_finished = dropped = never_ran_flag = 0;
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){.lane_max = {1, 0, 0}}), 0);
  go(first_holds_the_lane, NULL);
  go(second_gives_up, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

/* ---- lanes and caps ---- */

static void *name_lane_call(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_pool_call(TDL_LANE_NAME, wait_gate, NULL, NULL, NULL, tdl_after(LONG)), 0);
  return NULL;
}

static void *file_lane_meanwhile(void *arg)
{
  (void)arg;
  wait_lane(TDL_LANE_NAME, 1, 2); /* one call holds the lane's thread */
  tdl_pool_stats st;
  tdl_pool_stats_get(&st);
  assert_int_equal(st.running[TDL_LANE_NAME], 1); /* its cap */
  assert_int_equal(st.queued[TDL_LANE_NAME], 2);
  void *r;
  /* The name lane is full and waiting; the file lane is not held up. */
  assert_int_equal(tdl_pool_call(TDL_LANE_FILE, twice_elsewhere, (void *)5, NULL, &r, tdl_after(LONG)), 0);
  assert_int_equal((intptr_t)r, 10);
  open_gate();
  return NULL;
}

static void a_full_lane_does_not_starve_another(void **state)
{
  (void)state;
  loop_thread = pthread_self();
  gate_open = 0;
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){.max_threads = 4, .lane_max = {0, 0, 1}}), 0);
  for (int i = 0; i < 3; i++)
    go(name_lane_call, NULL);
  go(file_lane_meanwhile, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static int finished_calls;

static void *short_call(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, sleep_200ms, NULL, NULL, NULL, tdl_after(LONG)), 0);
  finished_calls++;
  return NULL;
}

static void at_the_cap_calls_queue_and_none_is_lost(void **state)
{
  (void)state;
  finished_calls = 0;
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){.max_threads = 2}), 0);
  for (int i = 0; i < 6; i++)
    go(short_call, NULL);
  tdl_loop_run(L, TDL_LOOP_NOWAIT); /* all six submitted */
  tdl_pool_stats st;
  tdl_pool_stats_get(&st);
  assert_true(st.running[TDL_LANE_USER] <= 2); /* threads of earlier tests may idle still: the cap holds */
  assert_int_equal(st.running[TDL_LANE_USER] + st.queued[TDL_LANE_USER], 6);
  assert_true(st.queued[TDL_LANE_USER] >= 4);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(finished_calls, 6);
}

static void *one_call(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, twice_elsewhere, (void *)1, NULL, NULL, tdl_after(LONG)), 0);
  return NULL;
}

static void idle_threads_exit(void **state)
{
  (void)state;
  loop_thread = pthread_self();
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){.idle_exit = 20 * TDL_MSEC}), 0);
  go(one_call, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_pool_stats st;
  for (tdl_time_t end = t_clock() + T_HANG; t_clock() < end;) {
    tdl_pool_stats_get(&st);
    if (st.threads == 0)
      break;
    usleep(1000);
  }
  assert_int_equal(st.threads, 0);
}

/* Calls that block get threads beyond the few that run quick calls: 16 at
 * once, each waiting until all 16 run together (so none can finish before
 * the pool has grown to 16). */
enum { TOGETHER = 16 };
static int together_now, together_max;

static void *meet_the_others(void *arg)
{
  (void)arg;
  int n = __atomic_add_fetch(&together_now, 1, __ATOMIC_ACQ_REL);
  int m = __atomic_load_n(&together_max, __ATOMIC_ACQUIRE);
  while (n > m && !__atomic_compare_exchange_n(&together_max, &m, n, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
  for (tdl_time_t end = t_clock() + T_HANG;
       __atomic_load_n(&together_max, __ATOMIC_ACQUIRE) < TOGETHER && t_clock() < end;)
    usleep(1000);
  __atomic_sub_fetch(&together_now, 1, __ATOMIC_ACQ_REL);
  return NULL;
}

static void *together_call(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, meet_the_others, NULL, NULL, NULL, tdl_after(LONG)), 0);
  return NULL;
}

static void blocked_calls_get_more_threads(void **state)
{
  (void)state;
  together_now = together_max = 0;
  for (int i = 0; i < TOGETHER; i++)
    go(together_call, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(together_max, TOGETHER);
  tdl_pool_stats st;
  tdl_pool_stats_get(&st);
  assert_true(st.threads >= TOGETHER);
}

/* ---- the elastic rule: N calls in flight start at most N threads ---- */

enum { IN_FLIGHT = 33 };
static int in_flight_results;

static void *gated_call(void *arg)
{
  (void)arg;
  if (tdl_pool_call(TDL_LANE_USER, wait_gate, NULL, NULL, NULL, tdl_after(LONG)) == 0)
    in_flight_results++;
  return NULL;
}

/* Polls (outside any fiber) until the pool runs `running` calls of the user
 * lane, running L meanwhile so that every fiber has handed its call over. */
static void wait_running(unsigned running)
{
  tdl_pool_stats st;
  for (;;) {
    tdl_loop_run(L, TDL_LOOP_NOWAIT);
    tdl_pool_stats_get(&st);
    if (st.running[TDL_LANE_USER] == running)
      return;
    usleep(1000);
  }
}

static void calls_in_flight_start_no_more_threads_than_calls(void **state)
{
  (void)state;
  /* From an empty pool, so that its count of threads is this test's. */
  assert_int_equal(tdl_pool_shutdown(tdl_after(LONG)), 0);
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){0}), 0);
  tdl_pool_stats st;
  tdl_pool_stats_get(&st);
  assert_int_equal(st.threads, 0);
  assert_int_equal(st.max_threads, 64); /* the documented default */
  uint64_t before = st.started_threads;
  gate_open = in_flight_results = 0;
  for (int i = 0; i < IN_FLIGHT; i++)
    go(gated_call, NULL);
  /* Every call runs at once (none can finish before the gate opens): each
   * got a thread, and no thread was started for nothing. */
  wait_running(IN_FLIGHT);
  tdl_pool_stats_get(&st);
  assert_int_equal(st.queued[TDL_LANE_USER], 0);
  assert_true(st.threads <= IN_FLIGHT);
  assert_true(st.started_threads - before <= IN_FLIGHT);
  open_gate();
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(in_flight_results, IN_FLIGHT);
}

/* ---- shutdown ---- */

static void *one_call_ok(void *arg)
{
  void *r = NULL;
  *(int *)arg = tdl_pool_call(TDL_LANE_USER, twice_elsewhere, (void *)3, NULL, &r, tdl_after(LONG));
  if ((intptr_t)r != 6)
    *(int *)arg = -1000;
  return NULL;
}

static void shutdown_with_idle_threads_twice_and_again(void **state)
{
  (void)state;
  loop_thread = pthread_self();
  int e = 1;
  go(one_call_ok, &e);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(e, 0);
  tdl_pool_stats st;
  tdl_pool_stats_get(&st);
  assert_true(st.threads >= 1); /* idle, for idle_exit */
  assert_int_equal(tdl_pool_shutdown(tdl_after(LONG)), 0);
  tdl_pool_stats_get(&st);
  assert_int_equal(st.threads, 0);
  assert_int_equal(st.idle, 0);
  /* Twice: nothing left to do, and a past deadline does not matter. */
  assert_int_equal(tdl_pool_shutdown(0), 0);
  assert_int_equal(tdl_pool_shutdown(TDL_FOREVER), 0);
  /* configure opens it again. */
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){0}), 0);
  e = 1;
  go(one_call_ok, &e);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(e, 0);
}

static int shut_results[3];

static void *running_call(void *arg)
{
  (void)arg;
  shut_results[0] = tdl_pool_call(TDL_LANE_USER, wait_gate, NULL, count_drop, NULL, tdl_after(LONG));
  return NULL;
}

static void *queued_call(void *arg)
{
  shut_results[(intptr_t)arg] = tdl_pool_call(TDL_LANE_USER, never_runs, NULL, count_drop, NULL, tdl_after(LONG));
  return NULL;
}

static int after_result, file_result;

static void *call_after_shutdown(void *arg)
{
  (void)arg;
  after_result = tdl_pool_call(TDL_LANE_USER, never_runs, NULL, count_drop, NULL, tdl_after(LONG));
  /* unlink is on the pool on every back end (opens and stats go to the
   * ring on uring loops); unclosed, this one would say -ENOENT. */
  file_result = tdl_fs_unlink("/nonexistent/treadle-test", tdl_after(LONG));
  return NULL;
}

static void shutdown_with_queued_and_running_work(void **state)
{
  (void)state;
  gate_open = slow_finished = dropped = never_ran_flag = 0;
  memset(shut_results, 1, sizeof shut_results);
  /* One thread: the first call runs (held at the gate), two wait. */
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){.max_threads = 1}), 0);
  go(running_call, NULL);
  wait_running(1);
  go(queued_call, (void *)1);
  go(queued_call, (void *)2);
  tdl_loop_run(L, TDL_LOOP_NOWAIT);
  tdl_pool_stats st;
  tdl_pool_stats_get(&st);
  assert_int_equal(st.queued[TDL_LANE_USER], 2);
  /* The running call cannot end before the gate opens: the deadline
   * passes; the queued ones are skipped meanwhile. */
  assert_int_equal(tdl_pool_shutdown(tdl_after(20 * TDL_MSEC)), -ETIMEDOUT);
  tdl_pool_stats_get(&st);
  assert_int_equal(st.queued[TDL_LANE_USER], 0);
  assert_int_equal(st.running[TDL_LANE_USER], 1);
  assert_true(st.threads >= 1);
  /* Their callers hear -ESHUTDOWN and their arguments are dropped; fn
   * never ran. */
  while (shut_results[1] == 0x01010101 || shut_results[2] == 0x01010101)
    tdl_loop_run(L, TDL_LOOP_ONCE);
  assert_int_equal(shut_results[1], -ESHUTDOWN);
  assert_int_equal(shut_results[2], -ESHUTDOWN);
  assert_int_equal(dropped, 2);
  assert_int_equal(__atomic_load_n(&never_ran_flag, __ATOMIC_ACQUIRE), 0);
  /* Closed: new work is refused (and its argument dropped), also the
   * file calls that need a pool thread. */
  go(call_after_shutdown, NULL);
  tdl_loop_run(L, TDL_LOOP_NOWAIT);
  assert_int_equal(after_result, -ESHUTDOWN);
  assert_int_equal(file_result, -ESHUTDOWN);
  assert_int_equal(dropped, 3);
  /* The running call ends; a second shutdown waits for it and joins. */
  open_gate();
  assert_int_equal(tdl_pool_shutdown(tdl_after(LONG)), 0);
  tdl_pool_stats_get(&st);
  assert_int_equal(st.threads, 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(shut_results[0], 0);
  assert_int_equal(dropped, 3);
}

static int in_fiber_result;

static void *shutdown_in_fiber(void *arg)
{
  (void)arg;
  in_fiber_result = tdl_pool_shutdown(tdl_after(LONG));
  return NULL;
}

static void *shutdown_on_pool_thread(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)tdl_pool_shutdown(tdl_after(LONG));
}

static void *shutdown_from_pool_work(void *arg)
{
  (void)arg;
  void *r = NULL;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, shutdown_on_pool_thread, NULL, NULL, &r, tdl_after(LONG)), 0);
  *(int *)arg = (int)(intptr_t)r;
  return NULL;
}

static void shutdown_refused_in_a_loop_and_on_a_pool_thread(void **state)
{
  (void)state;
  in_fiber_result = 1;
  go(shutdown_in_fiber, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(in_fiber_result, -EPERM);
  int e = 1;
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, shutdown_from_pool_work, &e, NULL), 0);
  assert_int_equal(tdl_fiber_detach(L, h), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(e, -EDEADLK);
  /* Neither closed the pool. */
  e = 1;
  go(one_call_ok, &e);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(e, 0);
}

/* ---- misuse ---- */

static void *misuse_in_fiber(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, NULL, NULL, NULL, NULL, LONG), -EINVAL);
  assert_int_equal(tdl_pool_call((tdl_lane)3, never_runs, NULL, NULL, NULL, tdl_after(LONG)), -EINVAL);
  assert_int_equal(tdl_pool_call((tdl_lane)-1, never_runs, NULL, NULL, NULL, tdl_after(LONG)), -EINVAL);
  assert_int_equal(tdl_pool_call((tdl_lane)9, never_runs, NULL, count_drop, NULL, tdl_after(LONG)), -EINVAL);
  assert_int_equal(dropped, 1);
  tdl_fiber_cancel(tdl_fiber_loop(), tdl_fiber_self());
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, never_runs, NULL, count_drop, NULL, tdl_after(LONG)), -ECANCELED);
  assert_int_equal(dropped, 2);
  return NULL;
}

static void misuse(void **state)
{
  (void)state;
  never_ran_flag = dropped = 0;
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, never_runs, NULL, NULL, NULL, TDL_FOREVER), -EPERM); /* outside a fiber */
  assert_int_equal(tdl_pool_call(TDL_LANE_USER, never_runs, NULL, count_drop, NULL, TDL_FOREVER), -EPERM);
  assert_int_equal(dropped, 1);
  dropped = 0;
  assert_int_equal(tdl_pool_configure(NULL), -EINVAL);
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){.max_threads = 4, .lane_max = {5, 0, 0}}), -EINVAL);
  tdl_pool_stats_get(NULL);
  go(misuse_in_fiber, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(never_ran_flag, 0);
}

/* ---- from every loop of a group ---- */

enum { GROUP_LOOPS = 3, GROUP_CALLS = 200 };
static int group_ok[GROUP_LOOPS], group_finished;

static void *echo(void *arg) { return arg; }

/* Each loop's fibers call through the one pool and get their own results
 * back, on their own loop's thread. */
static void *group_caller(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  pthread_t mine = pthread_self();
  int ok = 1;
  for (intptr_t i = 0; i < GROUP_CALLS; i++) {
    void *r = NULL;
    intptr_t want = me * 100000 + i;
    ok &= tdl_pool_call(TDL_LANE_USER, echo, (void *)want, NULL, &r, tdl_after(LONG)) == 0 && (intptr_t)r == want;
    ok &= pthread_equal(pthread_self(), mine) != 0;
  }
  group_ok[me] = ok;
  return NULL;
}

static void *group_main(void *arg)
{
  (void)arg;
  tdl_fiber_t h[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(tdl_fiber_spawn(&h[i], tdl_fiber_loop(), group_caller, NULL, NULL), 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(tdl_fiber_join(h[i], NULL, TDL_FOREVER), 0);
  if (__atomic_add_fetch(&group_finished, 1, __ATOMIC_ACQ_REL) == GROUP_LOOPS)
    tdl_group_stop(tdl_group_self()); /* the last loop done stops them all */
  return NULL;
}

static void from_every_loop_of_a_group(void **state)
{
  (void)state;
  memset(group_ok, 0, sizeof group_ok);
  group_finished = 0;
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = GROUP_LOOPS, .main = group_main}), 0);
  assert_int_equal(tdl_group_wait(g, tdl_after(LONG)), 0);
  assert_int_equal(tdl_group_free(g), 0);
  for (int i = 0; i < GROUP_LOOPS; i++)
    assert_int_equal(group_ok[i], 1);
}

/* ---- fork, exit ---- */

static void *child_main(void *arg)
{
  (void)arg;
  void *r = NULL;
  if (tdl_pool_call(TDL_LANE_USER, twice_elsewhere, (void *)4, NULL, &r, tdl_after(LONG)) != 0 || (intptr_t)r != 8)
    return (void *)1;
  return NULL;
}

/* Neither ThreadSanitizer (it says so and dies) nor qemu-user 7.2 (its
 * plugin core asserts) can start threads in the child of a multi-threaded
 * fork: these two run in the native builds. */
#if defined(__SANITIZE_THREAD__)
#define SKIP_UNDER_TOOLS() T_SKIP("ThreadSanitizer cannot start threads in the child of a multi-threaded fork")
#else
#define SKIP_UNDER_TOOLS()                                                                               \
  do {                                                                                                  \
    if (getenv("TDL_QEMU_USER"))                                                                        \
      T_SKIP("qemu-user cannot start threads in the child of a multi-threaded fork");                  \
  } while (0)
#endif

static void fork_while_threads_exist(void **state)
{
  (void)state;
  SKIP_UNDER_TOOLS();
  loop_thread = pthread_self();
  gate_open = 0;
  go(blocked_caller, NULL); /* a pool thread is busy in the parent */
  tdl_loop_run(L, TDL_LOOP_NOWAIT);
  usleep(20 * 1000);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* The child: an empty pool, which works. */
    tdl_pool_stats st;
    tdl_pool_stats_get(&st);
    if (st.threads != 0 || st.running[TDL_LANE_USER] != 0)
      _exit(2);
    loop_thread = pthread_self();
    void *failed = (void *)1;
    if (tdl_fiber_main(child_main, NULL, &failed) != 0)
      _exit(3);
    _exit(failed ? 4 : 0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  open_gate();
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void *abandon_and_return(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)tdl_pool_call(TDL_LANE_USER, wait_gate, NULL, NULL, NULL, tdl_after(20 * TDL_MSEC));
}

/* A process may end while pool work still runs (it is abandoned with its
 * thread). */
static void exit_with_work_in_flight(void **state)
{
  (void)state;
  SKIP_UNDER_TOOLS();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    gate_open = 0;
    void *r = NULL;
    if (tdl_fiber_main(abandon_and_return, NULL, &r) != 0 || (intptr_t)r != -ETIMEDOUT)
      _exit(3);
    exit(0); /* with wait_gate still blocked on a pool thread */
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(runs_on_a_pool_thread, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(other_fibers_run_meanwhile, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(deadline_returns_at_once_work_finishes_later, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(deadline_already_past, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(cancel_returns_at_once, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(queued_work_abandoned_is_skipped, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(a_full_lane_does_not_starve_another, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(blocked_calls_get_more_threads, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(at_the_cap_calls_queue_and_none_is_lost, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(idle_threads_exit, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(misuse, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(from_every_loop_of_a_group, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(fork_while_threads_exist, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(exit_with_work_in_flight, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(calls_in_flight_start_no_more_threads_than_calls, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(shutdown_with_idle_threads_twice_and_again, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(shutdown_with_queued_and_running_work, pool_defaults, teardown),
      cmocka_unit_test_setup_teardown(shutdown_refused_in_a_loop_and_on_a_pool_thread, pool_defaults, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
