/* SPDX-License-Identifier: MIT */
/* Compacting idle fibers (tdl_fiber_compact_idle) while another thread
 * wakes them through the loop's port: every wake-up, whether it finds the
 * fiber compacted or resident, resumes it with its stack intact.  Apart
 * from test_compact so that ThreadSanitizer runs it (label threads) without
 * that one's 10,000 fibers. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

static tdl_timer tick;
static void tick_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
}

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

/* ---- wake-ups from another thread racing the compaction ---- */

enum { RACERS = 32, ROUNDS = 40 };

static tdl_fiber_t racer_h[RACERS];
static tdl_post racer_post[RACERS];
static atomic_int racer_round[RACERS]; /* the round each is about to park in, + 1 */
static atomic_int seen_compacted;      /* times the loop saw one compacted */
static atomic_int racers_done;
static int racers_ok;

static void *racer(void *arg)
{
  int i = (int)(intptr_t)arg;
  volatile uint64_t c[CANARIES];
  canaries_fill(c, (uint64_t)i + 100);
  for (int r = 0; r < ROUNDS; r++) {
    atomic_store(&racer_round[i], r + 1);
    assert_int_equal(tdl_fiber_park(TDL_FOREVER), 0);
    if (!canaries_ok(c, (uint64_t)i + 100))
      return NULL;
  }
  racers_ok++;
  atomic_fetch_add(&racers_done, 1);
  return NULL;
}

static void unpark_cb(tdl_loop *loop, tdl_post *p)
{
  if (loop)
    assert_int_equal(tdl_fiber_unpark(loop, *(tdl_fiber_t *)p->data), 0);
}

static void *waker_thread(void *arg)
{
  tdl_port *port = arg;
  struct timespec ms = {0, 1000000};
  for (int r = 0; r < ROUNDS; r++) {
    /* Every racer is about to park in round r (a wake-up before the park
     * is kept as its permit: the same)... */
    for (int i = 0; i < RACERS; i++)
      for (int k = 0; k < 5000 && atomic_load(&racer_round[i]) < r + 1; k++)
        nanosleep(&ms, NULL);
    /* ...and on odd rounds, wait until the loop has compacted some, so that
     * both the compacted and the resident path race the wake-ups. */
    int seen = atomic_load(&seen_compacted);
    for (int k = 0; (r & 1) && k < 5000 && atomic_load(&seen_compacted) == seen; k++)
      nanosleep(&ms, NULL);
    for (int i = 0; i < RACERS; i++)
      while (tdl_port_post(port, &racer_post[i]) == -EBUSY)
        nanosleep(&ms, NULL);
  }
  return NULL;
}

static void wake_from_thread(void **state)
{
  (void)state;
  racers_ok = 0;
  atomic_store(&seen_compacted, 0);
  atomic_store(&racers_done, 0);
  assert_int_equal(tdl_fiber_compact_idle(L, TDL_MSEC), 0);
  for (int i = 0; i < RACERS; i++) {
    atomic_store(&racer_round[i], 0);
    racer_h[i] = go(racer, (void *)(intptr_t)i);
    tdl_post_init(&racer_post[i], unpark_cb, &racer_h[i]);
  }
  tdl_port *port;
  assert_int_equal(tdl_loop_port(&port, L), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, waker_thread, port), 0);
  tdl_timer_init(&tick, tick_cb, NULL);
  assert_int_equal(tdl_timer_start(L, &tick, TDL_MSEC, TDL_MSEC), 0);
  for (int turn = 0; turn < 1000000 && atomic_load(&racers_done) < RACERS; turn++) {
    assert_true(tdl_loop_run(L, TDL_LOOP_ONCE) >= 0);
    for (int i = 0; i < RACERS; i++)
      if (tdl_fiber_compacted(L, racer_h[i]) > 0) {
        atomic_fetch_add(&seen_compacted, 1);
        break;
      }
  }
  tdl_timer_stop(L, &tick);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_port_release(port);
  assert_int_equal(racers_ok, RACERS);
  assert_true(atomic_load(&seen_compacted) > 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(wake_from_thread, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
