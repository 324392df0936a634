/* SPDX-License-Identifier: MIT */
/* The loop itself: run modes, stop, reentrancy, deferred callbacks, hooks,
 * embedding, back-end selection, several loops on several threads, wakeups
 * and signals. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

static void nothing_started_returns_at_once(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  assert_false(tdl_loop_alive(loop));
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 0); /* does not sleep forever */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 0);
  assert_int_equal(tdl_loop_run(loop, (tdl_loop_mode)42), -EINVAL);
  t_loop_free(loop);
}

static void stop_cb(tdl_loop *loop, tdl_timer *t)
{
  (*(int *)t->data)++;
  tdl_loop_stop(loop);
}

static void stop_from_callback(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int n = 0;
  tdl_timer t, keep;
  tdl_timer_init(&t, stop_cb, &n);
  tdl_timer_init(&keep, stop_cb, &n);
  assert_int_equal(tdl_timer_start(loop, &t, 0, TDL_MSEC), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 1); /* stopped, still alive */
  assert_int_equal(n, 1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 1); /* a stop does not stick */
  assert_int_equal(n, 2);
  tdl_timer_stop(loop, &t);
  t_loop_free(loop);
}

static void reenter_cb(tdl_loop *loop, tdl_timer *t)
{
  *(int *)t->data = tdl_loop_run(loop, TDL_LOOP_NOWAIT);
}

static void run_is_not_reentrant(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int rc = 0;
  tdl_timer t;
  tdl_timer_init(&t, reenter_cb, &rc);
  assert_int_equal(tdl_timer_start(loop, &t, 0, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(rc, -EBUSY);
  t_loop_free(loop);
}

/* ---- deferred callbacks ---- */

static int defer_log[16], defer_n;

static void defer_cb(tdl_loop *loop, tdl_defer *d)
{
  (void)loop;
  defer_log[defer_n++] = (int)(intptr_t)d->data;
}

static tdl_defer later;
static void defer_requeue_cb(tdl_loop *loop, tdl_defer *d)
{
  defer_cb(loop, d);
  tdl_defer_queue(loop, &later); /* must wait for the next iteration */
}

static void deferred_callbacks(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  defer_n = 0;
  tdl_defer a, b, c;
  tdl_defer_init(&a, defer_requeue_cb, (void *)1);
  tdl_defer_init(&b, defer_cb, (void *)2);
  tdl_defer_init(&c, defer_cb, (void *)3);
  tdl_defer_init(&later, defer_cb, (void *)4);
  assert_int_equal(tdl_defer_queue(loop, &a), 0);
  assert_int_equal(tdl_defer_queue(loop, &a), 0); /* twice = once */
  assert_int_equal(tdl_defer_queue(loop, &b), 0);
  assert_int_equal(tdl_defer_queue(loop, &c), 0);
  assert_int_equal(tdl_defer_cancel(loop, &b), 0);
  assert_int_equal(tdl_defer_cancel(loop, &b), 0);
  assert_true(tdl_loop_alive(loop));
  assert_int_equal(tdl_loop_timeout(loop), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1); /* `later` still queued */
  assert_int_equal(defer_n, 2);
  assert_int_equal(defer_log[0], 1);
  assert_int_equal(defer_log[1], 3);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(defer_n, 3);
  assert_int_equal(defer_log[2], 4);
  t_loop_free(loop);
}

/* ---- hooks ---- */

static int before_calls, after_calls;
static void before_cb(tdl_loop *loop, tdl_observer *h)
{
  before_calls++;
  if (before_calls == 3)
    tdl_observer_stop(loop, h); /* a hook may stop itself */
}
static void after_cb(tdl_loop *loop, tdl_observer *h)
{
  (void)loop;
  (void)h;
  after_calls++;
}
static void tick(tdl_loop *loop, tdl_timer *t)
{
  if (++*(int *)t->data == 5)
    tdl_timer_stop(loop, t);
}

static void hooks_run_around_poll(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  before_calls = after_calls = 0;
  tdl_observer hb, ha;
  tdl_observer_init(&hb, before_cb, NULL);
  tdl_observer_init(&ha, after_cb, NULL);
  assert_int_equal(tdl_observer_start(loop, &hb, (tdl_observer_kind)7), -EINVAL);
  assert_int_equal(tdl_observer_start(loop, &hb, TDL_OBSERVER_BEFORE_POLL), 0);
  assert_int_equal(tdl_observer_start(loop, &ha, TDL_OBSERVER_AFTER_POLL), 0);
  assert_false(tdl_loop_alive(loop)); /* hooks alone do not keep it alive */
  int ticks = 0;
  tdl_timer t;
  tdl_timer_init(&t, tick, &ticks);
  assert_int_equal(tdl_timer_start(loop, &t, 0, 100 * TDL_USEC), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(ticks, 5);
  assert_int_equal(before_calls, 3);
  assert_true(after_calls >= 5);
  tdl_observer_stop(loop, &ha);
  tdl_observer_stop(loop, &ha);
  t_loop_free(loop);
}

/* ---- embedding ---- */

static void noop_io(tdl_loop *loop, tdl_io *w, unsigned ev)
{
  (void)loop;
  (void)ev;
  (*(int *)w->data)++;
}

static void pollable_fd_for_embedding(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int fd = tdl_loop_fd(loop);
  if (strcmp(tdl_loop_backend(loop), "poll") == 0) {
    assert_int_equal(fd, -ENOTSUP);
    t_loop_free(loop);
    return;
  }
  assert_true(fd >= 0);
  int p[2];
  t_pipe(p);
  int calls = 0;
  tdl_io w;
  tdl_io_init(&w, p[0], noop_io, &calls);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(tdl_loop_timeout(loop), TDL_FOREVER);
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  assert_int_equal(poll(&pf, 1, 0), 0); /* nothing yet */
  assert_int_equal(write(p[1], "x", 1), 1);
  assert_int_equal(poll(&pf, 1, 1000), 1); /* the outer loop sees work */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(calls, 1);
  tdl_io_stop(loop, &w);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

static void backend_selection(void **state)
{
  (void)state;
  tdl_loop *loop;
  tdl_loop_options o = {.backend = TDL_BACKEND_POLL};
  assert_int_equal(tdl_loop_new(&loop, &o), 0);
  assert_string_equal(tdl_loop_backend(loop), "poll");
  t_loop_free(loop);
  o.backend = TDL_BACKEND_EPOLL;
  assert_int_equal(tdl_loop_new(&loop, &o), 0);
  assert_string_equal(tdl_loop_backend(loop), "epoll");
  t_loop_free(loop);
  o.backend = (tdl_backend)99;
  assert_int_equal(tdl_loop_new(&loop, &o), -EINVAL);
  assert_null(loop);

  char *saved = getenv("TDL_BACKEND") ? strdup(getenv("TDL_BACKEND")) : NULL;
  setenv("TDL_BACKEND", "kqueue-on-linux", 1);
  assert_int_equal(tdl_loop_new(&loop, NULL), -EINVAL);
  assert_null(loop);
  if (saved) {
    setenv("TDL_BACKEND", saved, 1);
    free(saved);
  } else {
    unsetenv("TDL_BACKEND");
  }
  assert_int_equal(tdl_loop_free(NULL), 0);
}

static void strerror_names_errors(void **state)
{
  (void)state;
  assert_string_equal(tdl_strerror(0), "success");
  assert_true(strlen(tdl_strerror(-EBADF)) > 0);
  assert_string_equal(tdl_strerror(-EBADF), tdl_strerror(EBADF));
  assert_non_null(tdl_strerror(-100000));
}

/* ---- several loops, several threads, wakeups ---- */

typedef struct worker {
  tdl_loop *loop;
  tdl_wakeup wk;
  volatile int ready;
  int last_seen;
  int target;
  int calls;
} worker;

static int shared_value; /* written by the main thread before each send */

static void wake_cb(tdl_loop *loop, tdl_wakeup *wk)
{
  worker *w = wk->data;
  w->calls++;
  w->last_seen = __atomic_load_n(&shared_value, __ATOMIC_SEQ_CST);
  if (w->last_seen == w->target)
    tdl_wakeup_stop(loop, wk);
}

static void *worker_main(void *arg)
{
  worker *w = arg;
  assert_int_equal(tdl_loop_new(&w->loop, NULL), 0);
  tdl_wakeup_init(&w->wk, wake_cb, w);
  assert_int_equal(tdl_wakeup_start(w->loop, &w->wk), 0);
  __atomic_store_n(&w->ready, 1, __ATOMIC_SEQ_CST);
  assert_int_equal(tdl_loop_run(w->loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_loop_free(w->loop), 0);
  return NULL;
}

static void wakeups_from_another_thread(void **state)
{
  (void)state;
  enum { SENDS = 100000 };
  worker w = {.target = SENDS};
  shared_value = 0;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, worker_main, &w), 0);
  while (!__atomic_load_n(&w.ready, __ATOMIC_SEQ_CST))
    usleep(100);
  for (int i = 1; i <= SENDS; i++) {
    __atomic_store_n(&shared_value, i, __ATOMIC_SEQ_CST);
    assert_int_equal(tdl_wakeup_send(&w.wk), 0);
  }
  pthread_join(th, NULL); /* returns only if the last value was seen */
  assert_int_equal(w.last_seen, SENDS);
  assert_true(w.calls >= 1 && w.calls <= SENDS); /* sends coalesce */
}

static void wakeup_misuse(void **state)
{
  (void)state;
  tdl_wakeup wk;
  tdl_wakeup_init(&wk, wake_cb, NULL);
  assert_int_equal(tdl_wakeup_send(&wk), -EINVAL); /* not started */
  tdl_loop *loop = t_loop_new();
  assert_int_equal(tdl_wakeup_start(loop, &wk), 0);
  assert_int_equal(tdl_wakeup_start(loop, &wk), 0);
  assert_int_equal(tdl_loop_free(loop), -EBUSY);
  assert_int_equal(tdl_wakeup_stop(loop, &wk), 0);
  assert_int_equal(tdl_wakeup_stop(loop, &wk), 0);
  assert_int_equal(tdl_wakeup_send(&wk), -EINVAL);
  t_loop_free(loop);
}

/* ---- signals ---- */

static int sig_calls[2];
static void sig_cb(tdl_loop *loop, tdl_signal *s, int signum)
{
  (void)loop;
  assert_int_equal(signum, s->signum);
  sig_calls[(int)(intptr_t)s->data]++;
}

static bool blocked(int signum)
{
  sigset_t cur;
  pthread_sigmask(SIG_BLOCK, NULL, &cur);
  return sigismember(&cur, signum);
}

static void signals_are_delivered_and_mask_restored(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  sig_calls[0] = sig_calls[1] = 0;
  assert_false(blocked(SIGUSR1));
  tdl_signal a, b;
  tdl_signal_init(&a, sig_cb, (void *)0);
  tdl_signal_init(&b, sig_cb, (void *)1);
  assert_int_equal(tdl_signal_start(loop, &a, SIGUSR1), 0);
  assert_int_equal(tdl_signal_start(loop, &b, SIGUSR1), 0);
  assert_true(blocked(SIGUSR1));
  raise(SIGUSR1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(sig_calls[0], 1);
  assert_int_equal(sig_calls[1], 1);
  tdl_signal_stop(loop, &a);
  assert_true(blocked(SIGUSR1)); /* b still listens */
  tdl_signal_stop(loop, &b);
  assert_false(blocked(SIGUSR1)); /* the last one gives it back */
  assert_int_equal(tdl_signal_stop(loop, &b), 0);

  /* A signal the caller had blocked stays blocked. */
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &one, NULL);
  assert_int_equal(tdl_signal_start(loop, &a, SIGUSR2), 0);
  tdl_signal_stop(loop, &a);
  assert_true(blocked(SIGUSR2));
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  t_loop_free(loop);
}

static void signal_misuse(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new(), *other = t_loop_new();
  tdl_signal s, s2;
  tdl_signal_init(&s, sig_cb, (void *)0);
  tdl_signal_init(&s2, sig_cb, (void *)0);
  assert_int_equal(tdl_signal_start(loop, &s, 0), -EINVAL);
  assert_int_equal(tdl_signal_start(loop, &s, -3), -EINVAL);
  assert_int_equal(tdl_signal_start(loop, &s, 100000), -EINVAL);
  assert_int_equal(tdl_signal_start(loop, &s, SIGKILL), -EINVAL);
  assert_int_equal(tdl_signal_start(loop, &s, SIGSTOP), -EINVAL);
  assert_false(tdl_signal_active(&s));
  assert_int_equal(tdl_signal_start(loop, &s, SIGUSR1), 0);
  assert_int_equal(tdl_signal_start(other, &s2, SIGUSR1), -EBUSY);
  assert_int_equal(tdl_loop_free(loop), -EBUSY);
  tdl_signal_stop(loop, &s);
  assert_int_equal(tdl_signal_start(other, &s2, SIGUSR1), 0); /* free now */
  tdl_signal_stop(other, &s2);
  t_loop_free(loop);
  t_loop_free(other);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(nothing_started_returns_at_once),
      cmocka_unit_test(stop_from_callback),
      cmocka_unit_test(run_is_not_reentrant),
      cmocka_unit_test(deferred_callbacks),
      cmocka_unit_test(hooks_run_around_poll),
      cmocka_unit_test(pollable_fd_for_embedding),
      cmocka_unit_test(backend_selection),
      cmocka_unit_test(strerror_names_errors),
      cmocka_unit_test(wakeups_from_another_thread),
      cmocka_unit_test(wakeup_misuse),
      cmocka_unit_test(signals_are_delivered_and_mask_restored),
      cmocka_unit_test(signal_misuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
