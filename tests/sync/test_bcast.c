/* SPDX-License-Identifier: MIT */
/* Broadcasts: one sender, every subscriber, on one loop and across loops. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"

#define SUBS 6 /* subscribers of the cross-loop tests, two per receiving loop */

/* Everything a test's fibers share; set before the group starts. */
static struct {
  tdl_bcast *b;
  tdl_bcast_sub *sub[SUBS];
  tdl_chan *ack;
  tdl_sem go;
  tdl_waitgroup wg;
  long n;
  long got[SUBS], lost[SUBS], bad[SUBS], last[SUBS];
  int end[SUBS];
  int results[8];
  int done;
} S;

static long rounds(long full) { return RUNNING_ON_VALGRIND ? full / 20 : full; }

static void finish(tdl_group *g)
{
  assert_int_equal(tdl_group_wait(g, tdl_after(120 * TDL_SEC)), 0);
  assert_int_equal(tdl_group_free(g), 0);
}

static tdl_group *run_group(unsigned loops, tdl_fiber_fn main)
{
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = loops, .main = main}), 0);
  return g;
}

static void stop_when_done(int of)
{
  if (__atomic_add_fetch(&S.done, 1, __ATOMIC_SEQ_CST) == of)
    tdl_group_stop(tdl_group_self());
}

/* Receive on subscription i until the end, checking that values come in
 * order and that every gap is the count a lag reported. */
static void drain(int i)
{
  long v, want = S.last[i];
  int r;
  while ((r = tdl_bcast_recv(S.sub[i], &v, TDL_FOREVER)) >= 0) {
    if (r > 0) {
      S.lost[i] += r;
      want += r;
      continue;
    }
    if (v != want)
      S.bad[i]++;
    want = v + 1;
    S.got[i]++;
  }
  S.end[i] = r;
  S.last[i] = want;
}

/* ---- bad input and misuse, on one loop ---- */

static void *inside_recv(void *arg)
{
  long v;
  S.results[0] = tdl_bcast_recv(arg, &v, TDL_FOREVER);
  return NULL;
}

static void *second_receiver(void *arg)
{
  long v;
  /* inside_recv waits on the same subscription: one fiber at a time */
  S.results[1] = tdl_bcast_recv(arg, &v, TDL_FOREVER);
  S.results[2] = tdl_bcast_unsubscribe(arg);
  S.results[3] = tdl_bcast_recv(arg, &v, tdl_after(TDL_MSEC)); /* still inside: refused */
  v = 5;
  S.results[4] = tdl_bcast_send(S.b, &v);
  return NULL;
}

static void misuse(void **state)
{
  (void)state;
  tdl_bcast *b;
  tdl_bcast_sub *s;
  long v = 1;
  assert_int_equal(tdl_bcast_new(NULL, 8, 4), -EINVAL);
  b = (tdl_bcast *)&v;
  assert_int_equal(tdl_bcast_new(&b, 0, 4), -EINVAL);
  assert_null(b);
  assert_int_equal(tdl_bcast_new(&b, 8, 0), -EINVAL);
  assert_int_equal(tdl_bcast_new(&b, 8, SIZE_MAX / 4), -EINVAL);
  assert_int_equal(tdl_bcast_new(&b, TDL_CHAN_MAX_BYTES, 2), -EINVAL);
  assert_int_equal(tdl_bcast_new(&b, sizeof v, 4), 0);
  assert_int_equal(tdl_bcast_send(NULL, &v), -EINVAL);
  assert_int_equal(tdl_bcast_send(b, NULL), -EINVAL);
  assert_int_equal(tdl_bcast_send(b, &v), 0); /* nobody listens: not an error */
  assert_int_equal(tdl_bcast_subscribe(NULL, b), -EINVAL);
  assert_int_equal(tdl_bcast_subscribe(&s, NULL), -EINVAL);
  assert_int_equal(tdl_bcast_subscribe(&s, b), 0);
  assert_int_equal(tdl_bcast_try_recv(s, &v), -EAGAIN); /* sent before it subscribed */
  assert_int_equal(tdl_bcast_try_recv(NULL, &v), -EINVAL);
  assert_int_equal(tdl_bcast_try_recv(s, NULL), -EINVAL);
  assert_int_equal(tdl_bcast_recv(NULL, &v, TDL_FOREVER), -EINVAL);
  assert_int_equal(tdl_bcast_recv(s, &v, TDL_FOREVER), -EPERM); /* outside a fiber */
  assert_int_equal(tdl_bcast_free(b), -EBUSY);                 /* subscribed */
  assert_int_equal(tdl_bcast_close(NULL), -EINVAL);
  assert_int_equal(tdl_bcast_unsubscribe(NULL), 0);

  /* One fiber at a time per subscription; unsubscribe refused while one is
   * inside; a send wakes the parked one. */
  memset(&S, 0, sizeof S);
  S.b = b;
  tdl_loop *loop = t_loop_new();
  tdl_fiber_options detached = {.detached = true};
  assert_int_equal(tdl_fiber_spawn(NULL, loop, inside_recv, s, &detached), 0);
  assert_int_equal(tdl_fiber_spawn(NULL, loop, second_receiver, s, &detached), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  t_loop_free(loop);
  assert_int_equal(S.results[1], -EBUSY);
  assert_int_equal(S.results[2], -EBUSY);
  assert_int_equal(S.results[3], -EBUSY);
  assert_int_equal(S.results[4], 1);
  assert_int_equal(S.results[0], 0);

  assert_int_equal(tdl_bcast_close(b), 0);
  assert_int_equal(tdl_bcast_close(b), -EPIPE);
  assert_int_equal(tdl_bcast_send(b, &v), -EPIPE);
  tdl_bcast_sub *late = (tdl_bcast_sub *)&v;
  assert_int_equal(tdl_bcast_subscribe(&late, b), -EPIPE);
  assert_null(late);
  assert_int_equal(tdl_bcast_try_recv(s, &v), -EPIPE); /* read everything */
  assert_int_equal(tdl_bcast_unsubscribe(s), 0);
  assert_int_equal(tdl_bcast_free(b), 0);
  assert_int_equal(tdl_bcast_free(NULL), 0);
}

/* ---- lagging, told exactly, on one thread ---- */

static void lag_is_counted(void **state)
{
  (void)state;
  tdl_bcast *b;
  tdl_bcast_sub *s, *t;
  assert_int_equal(tdl_bcast_new(&b, sizeof(long), 4), 0);
  assert_int_equal(tdl_bcast_subscribe(&s, b), 0);
  assert_int_equal(tdl_bcast_subscribe(&t, b), 0);
  for (long i = 0; i < 10; i++)
    assert_int_equal(tdl_bcast_send(b, &i), 2);
  long v = -1;
  assert_int_equal(tdl_bcast_try_recv(s, &v), 6); /* 0..5 overwritten */
  assert_int_equal(v, -1);                        /* and val untouched */
  for (long i = 6; i < 10; i++) {
    assert_int_equal(tdl_bcast_try_recv(s, &v), 0);
    assert_int_equal(v, i);
  }
  assert_int_equal(tdl_bcast_try_recv(s, &v), -EAGAIN);
  /* t lags on its own cursor; s read everything and does not */
  v = 10;
  assert_int_equal(tdl_bcast_send(b, &v), 2);
  assert_int_equal(tdl_bcast_try_recv(s, &v), 0);
  assert_int_equal(v, 10);
  assert_int_equal(tdl_bcast_try_recv(t, &v), 7);
  assert_int_equal(tdl_bcast_try_recv(t, &v), 0);
  assert_int_equal(v, 7);
  assert_int_equal(tdl_bcast_unsubscribe(t), 0);
  v = 11;
  assert_int_equal(tdl_bcast_send(b, &v), 1); /* t no longer counts */
  /* closed: what is kept is still read, then -EPIPE */
  assert_int_equal(tdl_bcast_close(b), 0);
  assert_int_equal(tdl_bcast_try_recv(s, &v), 0);
  assert_int_equal(v, 11);
  assert_int_equal(tdl_bcast_try_recv(s, &v), -EPIPE);
  assert_int_equal(tdl_bcast_unsubscribe(s), 0);
  assert_int_equal(tdl_bcast_free(b), 0);
}

/* ---- every subscriber on every loop gets every value ---- */

static void *fanout_main(int me)
{
  if (me == 0) {
    for (long i = 0; i < S.n; i++)
      if (tdl_bcast_send(S.b, &i) != SUBS)
        S.results[0]++;
    S.results[1] = tdl_bcast_close(S.b);
    stop_when_done(1 + SUBS);
    return NULL;
  }
  drain(2 * (me - 1)); /* and second_sub the other of this loop's two */
  stop_when_done(1 + SUBS);
  return NULL;
}

static void *second_sub(void *arg)
{
  drain((int)(intptr_t)arg);
  stop_when_done(1 + SUBS);
  return NULL;
}

static void *fanout_main2(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  if (me > 0) {
    tdl_fiber_options detached = {.detached = true};
    if (tdl_fiber_spawn(NULL, tdl_fiber_loop(), second_sub, (void *)(intptr_t)(2 * (me - 1) + 1), &detached) < 0)
      S.results[3]++;
  }
  return fanout_main(me);
}

static void fanout_across_loops(void **state)
{
  (void)state;
  for (int big = 0; big < 2; big++) {
    memset(&S, 0, sizeof S);
    /* big: room for every value, so nobody may lose any; small: a ring of
     * 8, so subscribers lag, and what they get and lose adds up */
    S.n = rounds(20000);
    assert_int_equal(tdl_bcast_new(&S.b, sizeof(long), big ? (size_t)S.n : 8), 0);
    for (int i = 0; i < SUBS; i++)
      assert_int_equal(tdl_bcast_subscribe(&S.sub[i], S.b), 0);
    finish(run_group(4, fanout_main2));
    assert_int_equal(S.results[0], 0);
    assert_int_equal(S.results[1], 0);
    assert_int_equal(S.results[2], 0);
    assert_int_equal(S.results[3], 0);
    for (int i = 0; i < SUBS; i++) {
      assert_int_equal(S.end[i], -EPIPE);
      assert_int_equal(S.bad[i], 0);
      assert_int_equal(S.got[i] + S.lost[i], S.n);
      assert_int_equal(S.last[i], S.n);
      if (big)
        assert_int_equal(S.lost[i], 0);
      assert_int_equal(tdl_bcast_unsubscribe(S.sub[i]), 0);
    }
    assert_int_equal(tdl_bcast_free(S.b), 0);
  }
}

/* ---- a subscriber that does not read does not slow the others ---- */

static void *slow_main(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  long v;
  if (me == 0) {
    /* Send in lockstep with the fast subscriber: it acknowledges each
     * value, so it never lags.  The slow one reads nothing meanwhile; had
     * a send waited for it, this would never end. */
    for (long i = 0; i < S.n; i++) {
      if (tdl_bcast_send(S.b, &i) != 2 || tdl_chan_recv(S.ack, &v, TDL_FOREVER) < 0 || v != i)
        S.results[0]++;
    }
    S.results[1] = tdl_bcast_close(S.b);
    S.results[2] = tdl_sem_release(&S.go);
  } else if (me == 1) {
    int r;
    while ((r = tdl_bcast_recv(S.sub[0], &v, TDL_FOREVER)) == 0) {
      S.got[0]++;
      if (tdl_chan_send(S.ack, &v, TDL_FOREVER) < 0)
        S.bad[0]++;
    }
    S.end[0] = r;
  } else {
    S.results[3] = tdl_sem_acquire(&S.go, TDL_FOREVER); /* until the sender is done */
    drain(1);
  }
  stop_when_done(3);
  return NULL;
}

static void slow_subscriber_lags(void **state)
{
  (void)state;
  memset(&S, 0, sizeof S);
  S.n = rounds(5000);
  assert_int_equal(tdl_bcast_new(&S.b, sizeof(long), 16), 0);
  assert_int_equal(tdl_chan_new_shared(&S.ack, sizeof(long), 0), 0);
  assert_int_equal(tdl_sem_init_shared(&S.go, 0, 1), 0);
  assert_int_equal(tdl_bcast_subscribe(&S.sub[0], S.b), 0);
  assert_int_equal(tdl_bcast_subscribe(&S.sub[1], S.b), 0);
  finish(run_group(3, slow_main));
  for (int i = 0; i < 4; i++)
    assert_int_equal(S.results[i], 0);
  assert_int_equal(S.got[0], S.n); /* the fast one got everything */
  assert_int_equal(S.bad[0], 0);
  assert_int_equal(S.end[0], -EPIPE);
  assert_int_equal(S.lost[1], S.n - 16); /* the slow one is told what it lost */
  assert_int_equal(S.got[1], 16);        /* and gets what is kept, in order */
  assert_int_equal(S.bad[1], 0);
  assert_int_equal(S.end[1], -EPIPE);
  for (int i = 0; i < 2; i++)
    assert_int_equal(tdl_bcast_unsubscribe(S.sub[i]), 0);
  assert_int_equal(tdl_bcast_free(S.b), 0);
  assert_int_equal(tdl_chan_free(S.ack), 0);
  assert_int_equal(tdl_sem_destroy(&S.go), 0);
}

/* ---- subscribing and unsubscribing while sends go on ---- */

static void *churn_main(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  if (me == 0) {
    /* until each churner has subscribed once: then both meet the sends */
    S.results[2] = tdl_waitgroup_wait(&S.wg, TDL_FOREVER);
    for (long i = 0; i < S.n; i++) {
      if (tdl_bcast_send(S.b, &i) < 0)
        S.results[0]++;
      if (i % 64 == 0)
        tdl_fiber_yield();
    }
    S.results[1] = tdl_bcast_close(S.b);
  } else {
    tdl_bcast_sub *s;
    int e;
    bool first = true;
    while ((e = tdl_bcast_subscribe(&s, S.b)) == 0) {
      if (first && tdl_waitgroup_done(&S.wg) < 0)
        S.bad[me]++;
      first = false;
      long v, prev = -1;
      int r;
      /* a few values, in order, then leave */
      for (int k = 0; k < 5 && (r = tdl_bcast_recv(s, &v, TDL_FOREVER)) >= 0; k++) {
        if (r == 0) {
          if (v <= prev)
            S.bad[me]++;
          prev = v;
          S.got[me]++;
        }
      }
      if (tdl_bcast_unsubscribe(s) < 0)
        S.bad[me]++;
      S.last[me]++;
    }
    S.end[me] = e;
  }
  stop_when_done(3);
  return NULL;
}

static void subscribe_racing_sends(void **state)
{
  (void)state;
  memset(&S, 0, sizeof S);
  S.n = rounds(50000);
  assert_int_equal(tdl_bcast_new(&S.b, sizeof(long), 32), 0);
  assert_int_equal(tdl_waitgroup_init_shared(&S.wg), 0);
  assert_int_equal(tdl_waitgroup_add(&S.wg, 2), 0);
  finish(run_group(3, churn_main));
  assert_int_equal(S.results[0], 0);
  assert_int_equal(S.results[1], 0);
  assert_int_equal(S.results[2], 0);
  assert_int_equal(tdl_waitgroup_destroy(&S.wg), 0);
  for (int i = 1; i < 3; i++) {
    assert_int_equal(S.bad[i], 0);
    assert_int_equal(S.end[i], -EPIPE); /* it ends with the close */
    assert_true(S.last[i] > 0);
  }
  assert_int_equal(tdl_bcast_free(S.b), 0); /* every subscription ended */
}

/* ---- closing wakes parked subscribers; deadlines and cancels ---- */

static tdl_fiber_t victim;

static void *cancel_there(tdl_loop *loop, void *arg)
{
  (void)arg;
  return (void *)(intptr_t)tdl_fiber_cancel(loop, victim);
}

static void *close_main(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  long v;
  if (me == 1) {
    S.results[0] = tdl_bcast_recv(S.sub[0], &v, tdl_after(TDL_MSEC)); /* nobody sends */
    victim = tdl_fiber_self();
    __atomic_store_n(&S.results[7], 1, __ATOMIC_SEQ_CST);
    S.results[1] = tdl_bcast_recv(S.sub[0], &v, TDL_FOREVER); /* cancelled from loop 0 */
    S.results[2] = tdl_bcast_try_recv(S.sub[0], &v);           /* still works */
    S.results[6] = tdl_bcast_unsubscribe(S.sub[0]);
    S.sub[0] = NULL;
  } else if (me == 2) {
    S.results[3] = tdl_bcast_recv(S.sub[1], &v, TDL_FOREVER); /* woken by the close */
  } else {
    while (!__atomic_load_n(&S.results[7], __ATOMIC_SEQ_CST))
      tdl_sleep(tdl_after(TDL_MSEC));
    void *r = NULL;
    S.results[4] = tdl_port_call(tdl_group_port(tdl_group_self(), 1), cancel_there, NULL, &r, TDL_FOREVER);
    S.results[5] = tdl_bcast_close(S.b) | (int)(intptr_t)r;
  }
  stop_when_done(3);
  return NULL;
}

static void close_deadline_cancel(void **state)
{
  (void)state;
  memset(&S, 0, sizeof S);
  assert_int_equal(tdl_bcast_new(&S.b, sizeof(long), 4), 0);
  assert_int_equal(tdl_bcast_subscribe(&S.sub[0], S.b), 0);
  assert_int_equal(tdl_bcast_subscribe(&S.sub[1], S.b), 0);
  finish(run_group(3, close_main));
  assert_int_equal(S.results[0], -ETIMEDOUT);
  assert_int_equal(S.results[1], -ECANCELED);
  assert_true(S.results[2] == -EAGAIN || S.results[2] == -EPIPE);
  assert_int_equal(S.results[3], -EPIPE);
  assert_int_equal(S.results[4], 0);
  assert_int_equal(S.results[5], 0);
  assert_int_equal(S.results[6], 0);
  assert_int_equal(tdl_bcast_free(S.b), -EBUSY); /* sub[1] still subscribed */
  assert_int_equal(tdl_bcast_unsubscribe(S.sub[1]), 0);
  assert_int_equal(tdl_bcast_free(S.b), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(misuse),
      cmocka_unit_test(lag_is_counted),
      cmocka_unit_test(fanout_across_loops),
      cmocka_unit_test(slow_subscriber_lags),
      cmocka_unit_test(subscribe_racing_sends),
      cmocka_unit_test(close_deadline_cancel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
