/* SPDX-License-Identifier: MIT */
/* Fibers placed by a group, and loops that steal the ones not yet started. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)

/* Smaller counts where each fiber costs much more (valgrind, TSan). */
static int scaled(int n, int small)
{
#ifdef TDL_TSAN
  (void)n;
  return small;
#else
  return RUNNING_ON_VALGRIND ? small : n;
#endif
}

/* Block this loop's thread (not just the fiber) until *v reaches want:
 * while it spins, only the other loops can run what it queued. */
static void spin_until(const int *v, int want)
{
  while (LOAD(v) < want)
    sched_yield();
}

/* Wait, as a fiber, until *v reaches want. */
static void park_until(const int *v, int want)
{
  while (LOAD(v) < want)
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
}

/* Run scenario(arg) as loop 0's main of a two-loop group (loop 1's main
 * returns at once), then wait for the group to end and free it. */
typedef struct scenario {
  void (*fn)(tdl_group *g, void *arg);
  void *arg;
} scenario;

static void *scenario_main(void *arg)
{
  scenario *sc = arg;
  if (tdl_group_index() == 0) {
    sc->fn(tdl_group_self(), sc->arg);
    tdl_group_stop(tdl_group_self());
  }
  return NULL;
}

static void run_scenario(void (*fn)(tdl_group *g, void *arg), void *arg)
{
  scenario sc = {fn, arg};
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = scenario_main, .arg = &sc}), 0);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
}

/* ---- a fiber that says where it ran ---- */

typedef struct rec {
  int where;   /* tdl_group_index() at its start, -2 if it never ran */
  int runs;    /* atomic */
  int *count;  /* atomic: fibers that ran */
  int cancelled;
} rec;

static void *record(void *arg)
{
  rec *r = arg;
  r->where = tdl_group_index();
  ADD(&r->runs, 1);
  ADD(r->count, 1);
  return r;
}

/* Records where it ran, then waits to be cancelled. */
static void *record_and_wait(void *arg)
{
  rec *r = arg;
  r->where = tdl_group_index();
  ADD(&r->runs, 1);
  ADD(r->count, 1);
  r->cancelled = tdl_sleep(TDL_FOREVER) == -ECANCELED;
  assert_int_equal(tdl_group_index(), r->where); /* it never moved */
  return r;
}

/* ---- bad input and misuse ---- */

static void *nothing(void *arg) { return arg; }

static void *exits(void *arg)
{
  tdl_fiber_exit(arg);
  return NULL;
}

static void *joins_itself(void *arg)
{
  tdl_group_fiber **me = arg;
  while (!LOAD(me))
    tdl_fiber_yield();
  return (void *)(intptr_t)tdl_group_fiber_join(LOAD(me), NULL, TDL_FOREVER);
}

static void misuse_scenario(tdl_group *g, void *arg)
{
  (void)arg;
  tdl_group_fiber *gf = (tdl_group_fiber *)1;
  assert_int_equal(tdl_group_spawn(&gf, NULL, nothing, NULL, NULL, 0), -EINVAL);
  assert_null(gf);
  assert_int_equal(tdl_group_spawn(&gf, g, NULL, NULL, NULL, 0), -EINVAL);
  assert_int_equal(tdl_group_spawn(&gf, g, nothing, NULL, NULL, 0x80), -EINVAL);
  assert_int_equal(tdl_group_spawn(&gf, g, nothing, NULL, &(tdl_fiber_options){.stack_size = 1024}, 0), -EINVAL);
  assert_int_equal(tdl_group_spawn(&gf, g, nothing, NULL, &(tdl_fiber_options){.stack_size = TDL_STACK_MAX + 1}, 0),
                   -EINVAL);
  assert_int_equal(tdl_group_set_placement(g, (tdl_group_placement)7), -EINVAL);
  assert_int_equal(tdl_group_set_placement(NULL, TDL_GROUP_CALLER), -EINVAL);
  assert_int_equal(tdl_group_set_stealing(NULL, true), -EINVAL);
  assert_int_equal(tdl_group_fiber_join(NULL, NULL, TDL_FOREVER), -EINVAL);
  assert_int_equal(tdl_group_fiber_cancel(NULL), -EINVAL);
  assert_int_equal(tdl_group_fiber_detach(NULL), -EINVAL);

  /* A result comes back, also through tdl_fiber_exit; a cancel after the
   * end is -ESRCH; a past deadline does not wait. */
  tdl_group_fiber *a, *b;
  assert_int_equal(tdl_group_spawn(&a, g, nothing, (void *)11, &(tdl_fiber_options){.name = "a"}, 0), 0);
  assert_int_equal(tdl_group_spawn(&b, g, exits, (void *)22, NULL, TDL_GROUP_SPAWN_STAY), 0);
  void *r = NULL;
  assert_int_equal(tdl_group_fiber_join(a, &r, TDL_FOREVER), 0);
  assert_ptr_equal(r, (void *)11);
  tdl_sleep(tdl_after(10 * TDL_MSEC)); /* b may end meanwhile, or not */
  assert_int_equal(tdl_group_fiber_join(b, &r, TDL_FOREVER), 0);
  assert_ptr_equal(r, (void *)22);

  /* Joining itself; a second joiner; a cancel of an ended fiber. */
  static tdl_group_fiber *self_ref;
  STORE(&self_ref, NULL);
  tdl_group_fiber *s;
  assert_int_equal(tdl_group_set_placement(g, TDL_GROUP_CALLER), 0);
  assert_int_equal(tdl_group_spawn(&s, g, joins_itself, &self_ref, NULL, TDL_GROUP_SPAWN_STAY), 0);
  STORE(&self_ref, s);
  assert_int_equal(tdl_group_fiber_join(s, &r, TDL_FOREVER), 0);
  assert_int_equal((intptr_t)r, -EDEADLK);

  int count = 0;
  rec w = {.where = -2, .count = &count};
  tdl_group_fiber *c;
  assert_int_equal(tdl_group_spawn(&c, g, record_and_wait, &w, NULL, 0), 0);
  park_until(&count, 1);
  assert_int_equal(tdl_group_fiber_join(c, NULL, tdl_after(TDL_MSEC)), -ETIMEDOUT); /* still joinable */
  assert_int_equal(tdl_group_fiber_cancel(c), 0);
  assert_int_equal(tdl_group_fiber_cancel(c), 0); /* twice: harmless */
  assert_int_equal(tdl_group_fiber_join(c, &r, TDL_FOREVER), 0);
  assert_ptr_equal(r, &w);
  assert_true(w.cancelled);

  /* Detached, with no handle. */
  assert_int_equal(tdl_group_spawn(NULL, g, nothing, NULL, NULL, 0), 0);
  assert_int_equal(tdl_group_spawn(&gf, g, nothing, NULL, &(tdl_fiber_options){.detached = true}, 0), 0);
  assert_null(gf);
  tdl_group_fiber *d;
  assert_int_equal(tdl_group_spawn(&d, g, nothing, NULL, NULL, 0), 0);
  assert_int_equal(tdl_group_fiber_detach(d), 0);

  /* After the stop, nothing starts. */
  tdl_group_stop(g);
  assert_int_equal(tdl_group_spawn(&gf, g, nothing, NULL, NULL, 0), -ESHUTDOWN);
}

static void misuse(void **state)
{
  (void)state;
  assert_int_equal(tdl_group_fiber_join((tdl_group_fiber *)8, NULL, TDL_FOREVER), -EPERM); /* outside a fiber */
  run_scenario(misuse_scenario, NULL);
}

/* ---- placement ---- */

typedef struct placement_case {
  tdl_group_placement how;
  int where[4];
} placement_case;

static void placement_scenario(tdl_group *g, void *arg)
{
  placement_case *pc = arg;
  assert_int_equal(tdl_group_set_placement(g, pc->how), 0);
  int count = 0;
  rec r[4];
  tdl_group_fiber *gf[4];
  for (int i = 0; i < 4; i++) {
    r[i] = (rec){.where = -2, .count = &count};
    /* Stay: where they start is where the placement put them. */
    assert_int_equal(tdl_group_spawn(&gf[i], g, record_and_wait, &r[i], NULL, TDL_GROUP_SPAWN_STAY), 0);
  }
  park_until(&count, 4);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(tdl_group_fiber_cancel(gf[i]), 0);
    assert_int_equal(tdl_group_fiber_join(gf[i], NULL, TDL_FOREVER), 0);
    pc->where[i] = r[i].where;
    assert_int_equal(r[i].runs, 1);
  }
}

static void placement(void **state)
{
  (void)state;
  /* Least loaded: a tie stays on the caller's loop, so 0, 1, 0, 1. */
  placement_case ll = {.how = TDL_GROUP_LEAST_LOADED};
  run_scenario(placement_scenario, &ll);
  assert_int_equal(ll.where[0], 0);
  assert_int_equal(ll.where[1], 1);
  assert_int_equal(ll.where[2], 0);
  assert_int_equal(ll.where[3], 1);
  placement_case rr = {.how = TDL_GROUP_ROUND_ROBIN};
  run_scenario(placement_scenario, &rr);
  for (int i = 0; i < 4; i++)
    assert_int_equal(rr.where[i], i % 2);
  placement_case caller = {.how = TDL_GROUP_CALLER};
  run_scenario(placement_scenario, &caller);
  for (int i = 0; i < 4; i++)
    assert_int_equal(caller.where[i], 0);
}

/* ---- stealing ---- */

typedef struct steal_case {
  bool stealing;
  int n;
  int on_loop[2];
} steal_case;

static void steal_scenario(tdl_group *g, void *arg)
{
  steal_case *sc = arg;
  assert_int_equal(tdl_group_set_placement(g, TDL_GROUP_CALLER), 0);
  assert_int_equal(tdl_group_set_stealing(g, sc->stealing), 0);
  int count = 0;
  rec *r = calloc((size_t)sc->n, sizeof *r);
  tdl_group_fiber **gf = calloc((size_t)sc->n, sizeof *gf);
  assert_non_null(r);
  assert_non_null(gf);
  for (int i = 0; i < sc->n; i++) {
    r[i] = (rec){.where = -2, .count = &count};
    assert_int_equal(tdl_group_spawn(&gf[i], g, record, &r[i], NULL, 0), 0);
  }
  if (sc->stealing)
    spin_until(&count, sc->n); /* loop 0 runs none: loop 1 must take them all */
  for (int i = 0; i < sc->n; i++) {
    void *res;
    assert_int_equal(tdl_group_fiber_join(gf[i], &res, TDL_FOREVER), 0);
    assert_ptr_equal(res, &r[i]);
    assert_int_equal(r[i].runs, 1);
    sc->on_loop[r[i].where]++;
  }
  free(r);
  free(gf);
}

static void stealing_on_and_off(void **state)
{
  (void)state;
  steal_case on = {.stealing = true, .n = scaled(2000, 200)};
  run_scenario(steal_scenario, &on);
  assert_int_equal(on.on_loop[1], on.n); /* loop 0's thread was blocked throughout */
  steal_case off = {.stealing = false, .n = scaled(2000, 200)};
  run_scenario(steal_scenario, &off);
  assert_int_equal(off.on_loop[0], off.n);
}

/* Stay fibers are not stolen, even with loop 0 blocked while loop 1 steals
 * every fiber queued around them. */
static void stay_scenario(tdl_group *g, void *arg)
{
  (void)arg;
  assert_int_equal(tdl_group_set_placement(g, TDL_GROUP_CALLER), 0);
  enum { N = 64 };
  int stay_count = 0, moving_count = 0;
  rec stay[N], moving[N];
  tdl_group_fiber *sf[N], *mf[N];
  for (int i = 0; i < N; i++) {
    stay[i] = (rec){.where = -2, .count = &stay_count};
    moving[i] = (rec){.where = -2, .count = &moving_count};
    assert_int_equal(tdl_group_spawn(&sf[i], g, record, &stay[i], NULL, TDL_GROUP_SPAWN_STAY), 0);
    assert_int_equal(tdl_group_spawn(&mf[i], g, record, &moving[i], NULL, 0), 0);
  }
  spin_until(&moving_count, N);
  assert_int_equal(LOAD(&stay_count), 0);
  for (int i = 0; i < N; i++) {
    assert_int_equal(tdl_group_fiber_join(sf[i], NULL, TDL_FOREVER), 0);
    assert_int_equal(tdl_group_fiber_join(mf[i], NULL, TDL_FOREVER), 0);
    assert_int_equal(stay[i].where, 0);
    assert_int_equal(moving[i].where, 1);
  }
}

static void stay_never_moves(void **state)
{
  (void)state;
  run_scenario(stay_scenario, NULL);
}

/* The spawner joins and cancels fibers loop 1 stole. */
static void join_cancel_scenario(tdl_group *g, void *arg)
{
  (void)arg;
  assert_int_equal(tdl_group_set_placement(g, TDL_GROUP_CALLER), 0);
  enum { N = 16 };
  int count = 0;
  rec r[N];
  tdl_group_fiber *gf[N];
  for (int i = 0; i < N; i++) {
    r[i] = (rec){.where = -2, .count = &count};
    assert_int_equal(tdl_group_spawn(&gf[i], g, record_and_wait, &r[i], NULL, 0), 0);
  }
  spin_until(&count, N); /* all started on loop 1, each waiting */
  for (int i = 0; i < N; i++) {
    assert_int_equal(r[i].where, 1);
    assert_int_equal(tdl_group_fiber_join(gf[i], NULL, tdl_after(TDL_MSEC)), -ETIMEDOUT);
    assert_int_equal(tdl_group_fiber_cancel(gf[i]), 0);
  }
  for (int i = 0; i < N; i++) {
    void *res = NULL;
    assert_int_equal(tdl_group_fiber_join(gf[i], &res, TDL_FOREVER), 0);
    assert_ptr_equal(res, &r[i]);
    assert_true(r[i].cancelled);
  }
}

static void join_and_cancel_stolen(void **state)
{
  (void)state;
  run_scenario(join_cancel_scenario, NULL);
}

/* ---- stopping and freeing mid-stealing ---- */

static unsigned work(unsigned rounds)
{
  uint64_t x = rounds | 1;
  for (unsigned i = 0; i < rounds; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return (unsigned)x;
}

static int stopper_ran;

static void *busy_record(void *arg)
{
  rec *r = arg;
  (void)work(2000);
  return record(r);
}

/* Stops the group from the thief's loop, as the first fiber it stole. */
static void *stop_from_thief(void *arg)
{
  tdl_group_stop(tdl_group_self());
  STORE(&stopper_ran, 1);
  return busy_record(arg);
}

typedef struct stop_case {
  int which; /* 0: the spawner's loop stops first; 1: the thief's */
  int n;
  rec *r;
  tdl_group_fiber **gf;
  int spawned;
  int published; /* atomic */
  tdl_group *g;
  int ran, shut;
} stop_case;

static void *stop_main(void *arg)
{
  stop_case *sc = arg;
  tdl_group *g = tdl_group_self();
  if (tdl_group_index() != 0)
    return NULL;
  assert_int_equal(tdl_group_set_placement(g, TDL_GROUP_CALLER), 0);
  static int count;
  STORE(&count, 0);
  for (int i = 0; i < sc->n; i++) {
    sc->r[i] = (rec){.where = -2, .count = &count};
    tdl_fiber_fn fn = sc->which == 1 && i == 0 ? stop_from_thief : busy_record;
    int e = tdl_group_spawn(&sc->gf[i], g, fn, &sc->r[i], NULL, 0);
    if (e == -ESHUTDOWN && sc->which == 1)
      break; /* the thief stopped the group already */
    assert_int_equal(e, 0);
    sc->spawned = i + 1;
  }
  STORE(&sc->published, 1);
  if (sc->which == 0) {
    spin_until(&count, 1); /* loop 1 has begun stealing */
    tdl_group_stop(g);     /* loop 0's stop comes first */
  } else {
    spin_until(&stopper_ran, 1); /* loop 1 stole, and stops */
  }
  return NULL;
}

/* Joins every handle from a loop outside the group. */
static void *join_all(void *arg)
{
  stop_case *sc = arg;
  park_until(&sc->published, 1);
  for (int i = 0; i < sc->spawned; i++) {
    int e = tdl_group_fiber_join(sc->gf[i], NULL, TDL_FOREVER);
    assert_true(e == 0 || e == -ESHUTDOWN);
    assert_int_equal(sc->r[i].runs, e == 0 ? 1 : 0); /* run once, or never */
    if (e == 0)
      sc->ran++;
    else
      sc->shut++;
  }
  return NULL;
}

static void stop_case_run(int which)
{
  stop_case sc = {.which = which, .n = scaled(4000, 400)};
  STORE(&stopper_ran, 0);
  sc.r = calloc((size_t)sc.n, sizeof *sc.r);
  sc.gf = calloc((size_t)sc.n, sizeof *sc.gf);
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = stop_main, .arg = &sc}), 0);
  assert_int_equal(tdl_fiber_main(join_all, &sc, NULL), 0);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  assert_int_equal(sc.ran + sc.shut, sc.spawned);
  assert_true(sc.ran >= 1);
  free(sc.r);
  free(sc.gf);
}

static void stop_spawner_loop_mid_steal(void **state)
{
  (void)state;
  stop_case_run(0);
}

static void stop_thief_loop_mid_steal(void **state)
{
  (void)state;
  stop_case_run(1);
}

/* Spawned from a thread outside the group, then the group stopped, waited
 * for and freed with fibers still queued; the handles are joined after. */
static void *outside_fiber(void *arg)
{
  (void)work(1000);
  return record(arg);
}

static void free_group_with_queued(void **state)
{
  (void)state;
  stop_case sc = {.n = scaled(20000, 1000)};
  int count = 0, detached_count = 0;
  sc.r = calloc((size_t)sc.n, sizeof *sc.r);
  rec *dr = calloc((size_t)sc.n, sizeof *dr);
  sc.gf = calloc((size_t)sc.n, sizeof *sc.gf);
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2}), 0);
  for (int i = 0; i < sc.n; i++) {
    sc.r[i] = (rec){.where = -2, .count = &count};
    dr[i] = (rec){.where = -2, .count = &detached_count};
    assert_int_equal(tdl_group_spawn(&sc.gf[i], g, outside_fiber, &sc.r[i], NULL, 0), 0);
    /* and as many detached: freed whether they ran or not */
    assert_int_equal(tdl_group_spawn(NULL, g, outside_fiber, &dr[i], NULL, 0), 0);
  }
  tdl_group_stop(g);
  assert_int_equal(tdl_group_spawn(NULL, g, outside_fiber, NULL, NULL, 0), -ESHUTDOWN);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  /* The handles outlive the group: each fiber ran once, or ended unrun. */
  sc.published = 1;
  sc.spawned = sc.n;
  assert_int_equal(tdl_fiber_main(join_all, &sc, NULL), 0);
  assert_int_equal(sc.ran + sc.shut, sc.n);
  for (int i = 0; i < sc.n; i++)
    assert_true(dr[i].runs <= 1);
  free(sc.r);
  free(dr);
  free(sc.gf);
}

/* ---- 1,000,000 spawns from two loops at once ---- */

static uint8_t *million_runs;
static int million_done;

static void *tick(void *arg)
{
  __atomic_add_fetch(&million_runs[(uintptr_t)arg], 1, __ATOMIC_RELAXED);
  ADD(&million_done, 1);
  return NULL;
}

typedef struct million_case {
  int per_loop;
} million_case;

static void *million_main(void *arg)
{
  million_case *mc = arg;
  tdl_group *g = tdl_group_self();
  int me = tdl_group_index();
  for (int i = 0; i < mc->per_loop; i++) {
    assert_int_equal(tdl_group_spawn(NULL, g, tick, (void *)(uintptr_t)(me * mc->per_loop + i), NULL, 0), 0);
    if (i % 4096 == 4095)
      while (i + 1 - LOAD(&million_done) > 100000)
        tdl_fiber_yield(); /* bound what is queued at once (memory), not the rate */
  }
  if (me == 0) { /* loop 1's main just returns: its loop runs on */
    park_until(&million_done, 2 * mc->per_loop);
    tdl_group_stop(g);
  }
  return NULL;
}

static void million_spawns(void **state)
{
  (void)state;
  million_case mc = {.per_loop = scaled(500000, 10000)};
  million_runs = calloc((size_t)(2 * mc.per_loop), 1);
  assert_non_null(million_runs);
  STORE(&million_done, 0);
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = million_main, .arg = &mc}), 0);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  for (int i = 0; i < 2 * mc.per_loop; i++)
    if (million_runs[i] != 1)
      fail_msg("fiber %d ran %d times", i, million_runs[i]);
  free(million_runs);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(misuse),
      cmocka_unit_test(placement),
      cmocka_unit_test(stealing_on_and_off),
      cmocka_unit_test(stay_never_moves),
      cmocka_unit_test(join_and_cancel_stolen),
      cmocka_unit_test(stop_spawner_loop_mid_steal),
      cmocka_unit_test(stop_thief_loop_mid_steal),
      cmocka_unit_test(free_group_with_queued),
      cmocka_unit_test(million_spawns),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
