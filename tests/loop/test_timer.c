/* SPDX-License-Identifier: MIT */
/* Timers: firing, order, cancel, re-arm, clamping, a million at once, and a
 * randomized check of the lazy heap against a simple model. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>


#include "helpers.h"

typedef struct rec {
  int fired;
  tdl_time_t seen_now;
  int order;
} rec;

static int fire_count;

static void record_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  rec *r = t->data;
  r->fired++;
  r->seen_now = tdl_now();
  r->order = fire_count++;
}

static void one_shot_fires_once_not_early(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  rec r = {0};
  tdl_timer t;
  tdl_timer_init(&t, record_cb, &r);
  tdl_time_t deadline = tdl_after(2 * TDL_MSEC);
  assert_int_equal(tdl_timer_start_at(loop, &t, deadline, 0), 0);
  assert_true(tdl_timer_active(&t));
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(r.fired, 1);
  assert_true(r.seen_now >= deadline);
  assert_false(tdl_timer_active(&t));
  t_loop_free(loop);
}

static void stop_after_three(tdl_loop *loop, tdl_timer *t)
{
  rec *r = t->data;
  if (++r->fired == 3)
    tdl_timer_stop(loop, t);
}

static void repeating_timer(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  rec r = {0};
  tdl_timer t;
  tdl_timer_init(&t, stop_after_three, &r);
  assert_int_equal(tdl_timer_start(loop, &t, TDL_MSEC, TDL_MSEC), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(r.fired, 3);
  t_loop_free(loop);
}

static void equal_deadlines_fire_in_arming_order(void **state)
{
  (void)state;
  enum { N = 3000 };
  tdl_loop *loop = t_loop_new();
  static tdl_timer t[N];
  static rec r[N];
  memset(r, 0, sizeof r);
  fire_count = 0;
  /* Arm in a scrambled index order, all at one deadline, with unrelated
   * earlier and later timers mixed in so the heap really reorders. */
  tdl_time_t d = tdl_after(3 * TDL_MSEC);
  int order[N];
  for (int i = 0; i < N; i++)
    order[i] = (int)(((long)i * 7919) % N);
  for (int i = 0; i < N; i++) {
    int k = order[i];
    tdl_timer_init(&t[k], record_cb, &r[k]);
    tdl_time_t at = (k % 3 == 0) ? d : d + (k % 2 ? 1 : -1) * (tdl_time_t)(k % 97) * 1000;
    assert_int_equal(tdl_timer_start_at(loop, &t[k], at, 0), 0);
  }
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  int last = -1;
  tdl_time_t last_at = 0;
  for (int i = 0; i < N; i++) {
    int k = order[i];
    assert_int_equal(r[k].fired, 1);
    if (k % 3 == 0) {
      assert_true(r[k].order > last); /* arming order among the equal ones */
      last = r[k].order;
    }
  }
  /* And every timer fired in deadline order overall. */
  int by_order[N];
  for (int k = 0; k < N; k++)
    by_order[r[k].order] = k;
  for (int i = 0; i < N; i++) {
    assert_true(t[by_order[i]].at >= last_at);
    last_at = t[by_order[i]].at;
  }
  t_loop_free(loop);
}

static void negative_delay_fires_next_iteration(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  rec r = {0};
  tdl_timer t;
  tdl_timer_init(&t, record_cb, &r);
  assert_int_equal(tdl_timer_start(loop, &t, -5 * TDL_SEC, 0), 0);
  assert_int_equal(r.fired, 0); /* never from inside start */
  assert_int_equal(tdl_loop_timeout(loop), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 0);
  assert_int_equal(r.fired, 1);
  /* A negative absolute deadline counts as past, too. */
  assert_int_equal(tdl_timer_start_at(loop, &t, -42, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 0);
  assert_int_equal(r.fired, 2);
  t_loop_free(loop);
}

static void far_deadlines_are_clamped(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  assert_int_equal(tdl_after(TDL_TIME_MAX), TDL_TIME_MAX);
  assert_int_equal(tdl_after(TDL_TIME_MAX - 1), TDL_TIME_MAX);
  rec r = {0};
  tdl_timer t;
  tdl_timer_init(&t, record_cb, &r);
  assert_int_equal(tdl_timer_start(loop, &t, TDL_TIME_MAX, 0), 0);
  assert_int_equal(t.at, TDL_TIME_MAX);
  assert_true(tdl_loop_timeout(loop) > 100 * TDL_SEC);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(r.fired, 0);
  /* A huge repeat does not overflow either. */
  assert_int_equal(tdl_timer_start(loop, &t, 0, TDL_TIME_MAX), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(r.fired, 1);
  assert_true(tdl_timer_active(&t));
  tdl_timer_stop(loop, &t);
  assert_int_equal(tdl_timer_start_at(loop, &t, TDL_FOREVER, 0), -EINVAL);
  assert_false(tdl_timer_active(&t));
  t_loop_free(loop);
}

static void cancel_and_rearm(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  rec a = {0}, b = {0};
  tdl_timer ta, tb;
  tdl_timer_init(&ta, record_cb, &a);
  tdl_timer_init(&tb, record_cb, &b);
  assert_int_equal(tdl_timer_stop(loop, &ta), 0); /* never started */
  assert_int_equal(tdl_timer_start(loop, &ta, TDL_MSEC, 0), 0);
  assert_int_equal(tdl_timer_stop(loop, &ta), 0);
  assert_int_equal(tdl_timer_stop(loop, &ta), 0);
  /* Re-arming a started timer moves it, without a second firing. */
  /* (The first deadline is far off, so only a broken re-arm reaches it.) */
  assert_int_equal(tdl_timer_start(loop, &tb, 10 * TDL_SEC, 0), 0);
  tdl_time_t old = tb.at;
  tdl_time_t d = tdl_after(TDL_MSEC);
  assert_int_equal(tdl_timer_start_at(loop, &tb, d, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(a.fired, 0);
  assert_int_equal(b.fired, 1);
  assert_true(b.seen_now >= d && b.seen_now < old);
  t_loop_free(loop);
}

/* A callback that stops (and frees) another timer due in the same batch. */
typedef struct killer {
  tdl_timer *victim;
  int victim_fired;
} killer;

static void victim_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  killer *k = t->data;
  k->victim_fired++;
}

static void killer_cb(tdl_loop *loop, tdl_timer *t)
{
  killer *k = t->data;
  tdl_timer_stop(loop, k->victim);
  free(k->victim);
  k->victim = NULL;
}

static void stop_due_timer_from_callback(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  killer k = {0};
  tdl_timer tk;
  k.victim = malloc(sizeof *k.victim);
  tdl_timer_init(&tk, killer_cb, &k);
  tdl_timer_init(k.victim, victim_cb, &k);
  tdl_time_t d = tdl_after(TDL_MSEC);
  assert_int_equal(tdl_timer_start_at(loop, &tk, d, 0), 0); /* armed first: fires first */
  assert_int_equal(tdl_timer_start_at(loop, k.victim, d, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(k.victim_fired, 0);
  t_loop_free(loop);
}

static void self_free_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (*(int *)t->data)++;
  free(t);
}

static void callback_frees_its_timer(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int fired = 0;
  tdl_timer *t = malloc(sizeof *t);
  tdl_timer_init(t, self_free_cb, &fired);
  assert_int_equal(tdl_timer_start(loop, t, 0, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(fired, 1);
  t_loop_free(loop);
}

static void rearm_in_own_callback_cb(tdl_loop *loop, tdl_timer *t)
{
  rec *r = t->data;
  if (++r->fired < 5)
    assert_int_equal(tdl_timer_start(loop, t, -1, 0), 0); /* next iteration, not this batch */
}

static void rearm_in_own_callback(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  rec r = {0};
  tdl_timer t;
  tdl_timer_init(&t, rearm_in_own_callback_cb, &r);
  assert_int_equal(tdl_timer_start(loop, &t, 0, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(r.fired, 1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(r.fired, 5);
  t_loop_free(loop);
}

static void a_million_active(void **state)
{
  (void)state;
  /* The full count natively; valgrind checks the same code on fewer. */
  const int N = RUNNING_ON_VALGRIND ? 50000 : 1000000;
  tdl_loop *loop = t_loop_new();
  tdl_timer *t = calloc(N, sizeof *t);
  assert_non_null(t);
  uint64_t seed = 1;
  tdl_time_t min = TDL_TIME_MAX;
  for (int i = 0; i < N; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    tdl_time_t delay = TDL_SEC + (tdl_time_t)(seed >> 33) % (9 * TDL_SEC);
    tdl_timer_init(&t[i], record_cb, NULL);
    assert_int_equal(tdl_timer_start(loop, &t[i], delay, 0), 0);
    if (t[i].at < min)
      min = t[i].at;
  }
  /* The loop is not running: its cached time, which the timers count from
   * and tdl_loop_timeout measures against, stays put; derive it once. */
  tdl_time_t to = tdl_loop_timeout(loop), cached = min - to;
  assert_true(to >= TDL_SEC && to < 10 * TDL_SEC);
  /* Cancel half, in a scattered order; the earliest must follow. */
  for (int i = 0; i < N; i += 2)
    tdl_timer_stop(loop, &t[(int)(((long)i * 7919) % N)]);
  min = TDL_TIME_MAX;
  for (int i = 0; i < N; i++)
    if (tdl_timer_active(&t[i]) && t[i].at < min)
      min = t[i].at;
  assert_int_equal(cached + tdl_loop_timeout(loop), min);
  for (int i = 0; i < N; i++)
    tdl_timer_stop(loop, &t[i]);
  assert_false(tdl_loop_alive(loop));
  assert_int_equal(tdl_loop_timeout(loop), TDL_FOREVER);
  t_loop_free(loop);
  free(t);
}

/* Randomized: arm, re-arm and cancel at random, then run everything out and
 * check each timer fired exactly when its model says, in deadline order. */
enum { M = 4000 };
static tdl_timer mt[M];
static struct {
  int armed;
  tdl_time_t at;
  int fired;
  tdl_time_t fired_at_deadline;
} model[M];
static tdl_time_t model_last;

static void model_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  int i = (int)(t - mt);
  assert_true(model[i].armed);
  assert_int_equal(t->at, model[i].at);
  assert_true(t->at >= model_last);
  model_last = t->at;
  model[i].armed = 0;
  model[i].fired++;
}

static void randomized_against_model(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  memset(model, 0, sizeof model);
  model_last = 0;
  uint64_t s = 42;
  tdl_time_t base = tdl_now() + 5 * TDL_MSEC;
  for (int i = 0; i < M; i++)
    tdl_timer_init(&mt[i], model_cb, NULL);
  for (int round = 0; round < 40; round++) {
    for (int op = 0; op < 2000; op++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      int i = (int)((s >> 33) % M);
      int kind = (int)((s >> 20) % 3);
      if (kind < 2) {
        tdl_time_t at = base + (tdl_time_t)((s >> 40) % 64) * 100000; /* many ties */
        assert_int_equal(tdl_timer_start_at(loop, &mt[i], at, 0), 0);
        model[i].armed = 1;
        model[i].at = at;
      } else {
        tdl_timer_stop(loop, &mt[i]);
        model[i].armed = 0;
      }
    }
    /* Make the loop order the heap now and then, between bursts. */
    if (round % 3 == 0)
      (void)tdl_loop_timeout(loop);
  }
  int expect_fired[M];
  for (int i = 0; i < M; i++)
    expect_fired[i] = model[i].fired + (model[i].armed ? 1 : 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  for (int i = 0; i < M; i++)
    assert_int_equal(model[i].fired, expect_fired[i]);
  t_loop_free(loop);
}

static void free_with_active_timer_is_refused(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  tdl_timer t;
  tdl_timer_init(&t, record_cb, NULL);
  assert_int_equal(tdl_timer_start(loop, &t, TDL_SEC, 0), 0);
  assert_int_equal(tdl_loop_free(loop), -EBUSY);
  tdl_timer_stop(loop, &t);
  t_loop_free(loop);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_shot_fires_once_not_early),
      cmocka_unit_test(repeating_timer),
      cmocka_unit_test(equal_deadlines_fire_in_arming_order),
      cmocka_unit_test(negative_delay_fires_next_iteration),
      cmocka_unit_test(far_deadlines_are_clamped),
      cmocka_unit_test(cancel_and_rearm),
      cmocka_unit_test(stop_due_timer_from_callback),
      cmocka_unit_test(callback_frees_its_timer),
      cmocka_unit_test(rearm_in_own_callback),
      cmocka_unit_test(a_million_active),
      cmocka_unit_test(randomized_against_model),
      cmocka_unit_test(free_with_active_timer_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
