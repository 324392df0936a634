/* SPDX-License-Identifier: MIT */
/* Shared channels: ends on different loops. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"

/* Everything a test's fibers share; set before the group starts. */
static struct {
  tdl_chan *a, *b, *local_ch;
  long n;
  long sum[4], count[4], bad[4];
  int results[8];
  int done;
} S;

static long rounds(long full) { return RUNNING_ON_VALGRIND ? full / 20 : full; }

/* The groups' loops spin this long before they sleep (tdl_loop_options.spin),
 * and so do their fibers waiting on a shared channel with nothing else to run. */
static tdl_time_t spin_ns;

static tdl_group *run_group(unsigned loops, tdl_fiber_fn main)
{
  tdl_group *g;
  tdl_loop_options lo = {.spin = spin_ns};
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = loops, .main = main, .loop = &lo}), 0);
  return g;
}

static void finish(tdl_group *g)
{
  assert_int_equal(tdl_group_wait(g, tdl_after(120 * TDL_SEC)), 0);
  assert_int_equal(tdl_group_free(g), 0);
}

/* ---- one producer, one consumer, on two loops ---- */

static void *pipe_main(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  if (me == 0) {
    for (long i = 1; i <= S.n; i++)
      assert_int_equal(tdl_chan_send(S.a, &i, TDL_FOREVER), 0);
    assert_int_equal(tdl_chan_close(S.a), 0);
  } else {
    long v, prev = 0;
    int e;
    while ((e = tdl_chan_recv(S.a, &v, TDL_FOREVER)) == 0) {
      if (v != prev + 1)
        S.bad[1]++; /* one producer: its order is kept */
      prev = v;
      S.sum[1] += v;
      S.count[1]++;
    }
    assert_int_equal(e, -EPIPE);
    tdl_group_stop(tdl_group_self());
  }
  return NULL;
}

static void check_pipe(size_t cap, long n)
{
  memset(&S, 0, sizeof S);
  S.n = n;
  assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), cap), 0);
  finish(run_group(2, pipe_main));
  assert_int_equal(S.count[1], S.n);
  assert_int_equal(S.sum[1], S.n * (S.n + 1) / 2);
  assert_int_equal(S.bad[1], 0);
  assert_int_equal(tdl_chan_free(S.a), 0);
}

static void buffered_across_loops(void **state)
{
  (void)state;
  check_pipe(1024, rounds(300000));
  check_pipe(1, rounds(20000));   /* full and empty all the time */
  check_pipe(1000, rounds(20000)); /* a capacity that is no power of two */
}

static void unbuffered_across_loops(void **state)
{
  (void)state;
  check_pipe(0, rounds(20000));
}

/* ---- two producers and two consumers on four loops ---- */

static void *mpmc_main(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  if (me < 2) {
    for (long i = 1; i <= S.n; i++)
      assert_int_equal(tdl_chan_send(S.a, &i, TDL_FOREVER), 0);
    if (__atomic_add_fetch(&S.done, 1, __ATOMIC_SEQ_CST) == 2)
      assert_int_equal(tdl_chan_close(S.a), 0);
  } else {
    long v;
    while (tdl_chan_recv(S.a, &v, TDL_FOREVER) == 0) {
      S.sum[me] += v;
      S.count[me]++;
    }
    if (__atomic_add_fetch(&S.done, 1, __ATOMIC_SEQ_CST) == 4)
      tdl_group_stop(tdl_group_self());
  }
  return NULL;
}

static void two_by_two(void **state)
{
  (void)state;
  for (size_t cap = 0; cap <= 64; cap += 64) {
    memset(&S, 0, sizeof S);
    S.n = rounds(cap ? 100000 : 10000);
    assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), cap), 0);
    finish(run_group(4, mpmc_main));
    assert_int_equal(S.count[2] + S.count[3], 2 * S.n); /* none lost, none twice */
    assert_int_equal(S.sum[2] + S.sum[3], S.n * (S.n + 1));
    assert_int_equal(tdl_chan_free(S.a), 0);
  }
}

/* ---- close, deadline, cancel across loops ---- */

static tdl_fiber_t victim;

static void *cancel_there(tdl_loop *loop, void *arg)
{
  (void)arg;
  return (void *)(intptr_t)tdl_fiber_cancel(loop, victim);
}

static void *recv_cancel_close(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  long v = 0;
  if (me == 1) {
    S.results[0] = tdl_chan_recv(S.a, &v, tdl_after(TDL_MSEC)); /* nobody sends */
    victim = tdl_fiber_self();
    __atomic_store_n(&S.done, 1, __ATOMIC_SEQ_CST);
    S.results[1] = tdl_chan_recv(S.a, &v, TDL_FOREVER); /* loop 0 cancels us */
    __atomic_store_n(&S.done, 2, __ATOMIC_SEQ_CST);
  } else if (me == 2) {
    /* Parks on the channel until loop 0 closes it. */
    S.results[2] = tdl_chan_recv(S.a, &v, TDL_FOREVER);
    S.results[3] = (int)v;
    S.results[4] = tdl_chan_recv(S.a, &v, TDL_FOREVER);
    __atomic_store_n(&S.done, 3, __ATOMIC_SEQ_CST);
  } else {
    while (__atomic_load_n(&S.done, __ATOMIC_SEQ_CST) < 1)
      tdl_sleep(tdl_after(TDL_MSEC));
    void *r = NULL;
    assert_int_equal(tdl_port_call(tdl_group_port(tdl_group_self(), 1), cancel_there, NULL, &r, TDL_FOREVER), 0);
    assert_int_equal((intptr_t)r, 0);
    while (__atomic_load_n(&S.done, __ATOMIC_SEQ_CST) < 2)
      tdl_sleep(tdl_after(TDL_MSEC));
    /* The cancelled receiver took nothing: loop 2's gets this one. */
    v = 77;
    assert_int_equal(tdl_chan_send(S.a, &v, TDL_FOREVER), 0);
    assert_int_equal(tdl_chan_close(S.a), 0);
    assert_int_equal(tdl_chan_close(S.a), -EPIPE);
    assert_int_equal(tdl_chan_send(S.a, &v, TDL_FOREVER), -EPIPE);
    while (__atomic_load_n(&S.done, __ATOMIC_SEQ_CST) < 3)
      tdl_sleep(tdl_after(TDL_MSEC));
    tdl_group_stop(tdl_group_self());
  }
  return NULL;
}

static void close_deadline_cancel(void **state)
{
  (void)state;
  for (size_t cap = 0; cap <= 8; cap += 8) {
    memset(&S, 0, sizeof S);
    assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), cap), 0);
    finish(run_group(3, recv_cancel_close));
    assert_int_equal(S.results[0], -ETIMEDOUT);
    assert_int_equal(S.results[1], -ECANCELED);
    assert_int_equal(S.results[2], 0);
    assert_int_equal(S.results[3], 77);
    assert_int_equal(S.results[4], -EPIPE); /* closed while it waited */
    assert_int_equal(tdl_chan_free(S.a), 0);
  }
}

/* ---- select over shared and local channels ---- */

static void *selector(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  if (me == 1) {
    long va = 0, vb = 0, vl = 0;
    tdl_select_op ops[] = {
        {.kind = TDL_SELECT_RECV, .ch = S.a, .val = &va},
        {.kind = TDL_SELECT_RECV, .ch = S.b, .val = &vb},
        {.kind = TDL_SELECT_RECV, .ch = S.local_ch, .val = &vl},
    };
    for (int k = 0; k < 2; k++) {
      int i = tdl_select(ops, 3, tdl_after(T_HANG));
      assert_true(i == 0 || i == 1);
      assert_int_equal(ops[i].result, 0);
      S.results[i] = (int)(i == 0 ? va : vb);
    }
    /* Nothing more comes: the deadline. */
    assert_int_equal(tdl_select(ops, 3, tdl_after(TDL_MSEC)), -ETIMEDOUT);
    tdl_group_stop(tdl_group_self());
  } else {
    long v = 5;
    assert_int_equal(tdl_chan_send(S.b, &v, TDL_FOREVER), 0); /* unbuffered: a hand-off */
    v = 6;
    assert_int_equal(tdl_chan_send(S.a, &v, TDL_FOREVER), 0);
  }
  return NULL;
}

static void select_across_loops(void **state)
{
  (void)state;
  memset(&S, 0, sizeof S);
  assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), 4), 0);
  assert_int_equal(tdl_chan_new_shared(&S.b, sizeof(long), 0), 0);
  /* A local channel of loop 1 that nobody sends on: its clause just waits. */
  assert_int_equal(tdl_chan_new(&S.local_ch, sizeof(long), 0), 0);
  finish(run_group(2, selector));
  assert_int_equal(S.results[0], 6);
  assert_int_equal(S.results[1], 5);
  tdl_chan_free(S.a);
  tdl_chan_free(S.b);
  tdl_chan_free(S.local_ch);
}

/* ---- one loop, and outside fibers ---- */

static void *ping(void *arg)
{
  tdl_chan **ch = arg;
  for (long i = 0; i < 1000; i++) {
    long v;
    assert_int_equal(tdl_chan_send(ch[0], &i, TDL_FOREVER), 0);
    assert_int_equal(tdl_chan_recv(ch[1], &v, TDL_FOREVER), 0);
    assert_int_equal(v, i);
  }
  return NULL;
}

static void *pong(void *arg)
{
  tdl_chan **ch = arg;
  long v;
  for (long i = 0; i < 1000; i++) { /* ping's every value, however slowly they come */
    assert_int_equal(tdl_chan_recv(ch[0], &v, tdl_after(T_HANG)), 0);
    assert_int_equal(tdl_chan_send(ch[1], &v, TDL_FOREVER), 0);
  }
  return NULL;
}

static void one_loop_and_misuse(void **state)
{
  (void)state;
  tdl_chan *ch[2];
  assert_int_equal(tdl_chan_new_shared(&ch[0], sizeof(long), 0), 0);
  assert_int_equal(tdl_chan_new_shared(&ch[1], sizeof(long), 2), 0);
  tdl_loop *loop = t_loop_new();
  assert_int_equal(tdl_fiber_spawn(NULL, loop, ping, ch, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_fiber_spawn(NULL, loop, pong, ch, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_loop_free(loop), 0);
  /* Outside fibers: the try calls work, the blocking ones refuse. */
  long v = 1;
  assert_int_equal(tdl_chan_try_send(ch[1], &v), 0);
  assert_int_equal(tdl_chan_try_send(ch[1], &v), 0);
  assert_int_equal(tdl_chan_try_send(ch[1], &v), -EAGAIN); /* full */
  assert_int_equal(tdl_chan_len(ch[1]), 2);
  assert_int_equal(tdl_chan_cap(ch[1]), 2);
  assert_int_equal(tdl_chan_send(ch[1], &v, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_chan_recv(ch[1], &v, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_chan_try_recv(ch[0], &v), -EAGAIN); /* unbuffered, no sender */
  assert_int_equal(tdl_chan_close(ch[1]), 0);
  assert_int_equal(tdl_chan_try_recv(ch[1], &v), 0); /* drained after the close */
  assert_int_equal(tdl_chan_try_recv(ch[1], &v), 0);
  assert_int_equal(tdl_chan_try_recv(ch[1], &v), -EPIPE);
  assert_int_equal(tdl_chan_destroy(ch[0]), -EINVAL); /* made by treadle: free it */
  tdl_chan *bad;
  assert_int_equal(tdl_chan_new_shared(&bad, 0, 4), -EINVAL);
  assert_int_equal(tdl_chan_new_shared(&bad, 1 << 20, 1 << 20), -EINVAL);
  assert_int_equal(tdl_chan_free(ch[0]), 0);
  assert_int_equal(tdl_chan_free(ch[1]), 0);
}

/* ---- spinning loops: waits that end in place ---- */

/* Two fibers on two loops pass one value back and forth over two unbuffered
 * channels: with spinning loops, each wait mostly ends in place (the waker
 * finds the waiter watching its record), and a value never gets lost,
 * doubled or reordered. */
static void *xping_main(void *arg)
{
  (void)arg;
  long v;
  if (tdl_group_index() == 0) {
    for (long i = 1; i <= S.n; i++) {
      assert_int_equal(tdl_chan_send(S.a, &i, TDL_FOREVER), 0);
      assert_int_equal(tdl_chan_recv(S.b, &v, TDL_FOREVER), 0);
      if (v != -i)
        S.bad[0]++;
    }
    assert_int_equal(tdl_chan_close(S.a), 0);
  } else {
    int e;
    while ((e = tdl_chan_recv(S.a, &v, TDL_FOREVER)) == 0) {
      S.count[1]++;
      v = -v;
      assert_int_equal(tdl_chan_send(S.b, &v, TDL_FOREVER), 0);
    }
    assert_int_equal(e, -EPIPE);
    tdl_group_stop(tdl_group_self());
  }
  return NULL;
}

/* A fiber that spins in place is its loop waiting, not a stall: loop 1's
 * watchdog (10 ms) reports nothing while its fiber spins 60 ms for a value
 * (loop 0 sends it after sleeping). */
static int stalls;

static void count_stall(const tdl_watchdog_report *r, void *data)
{
  (void)r;
  (void)data;
  __atomic_add_fetch(&stalls, 1, __ATOMIC_SEQ_CST);
}

static void *watched_main(void *arg)
{
  (void)arg;
  long v = 0;
  if (tdl_group_index() == 1) {
    tdl_watchdog_options wo = {.threshold = 10 * TDL_MSEC, .cb = count_stall};
    assert_int_equal(tdl_watchdog_start(tdl_fiber_loop(), &wo), 0);
    __atomic_store_n(&S.done, 1, __ATOMIC_SEQ_CST);
    S.results[0] = tdl_chan_recv(S.a, &v, tdl_after(T_HANG));
    S.results[1] = (int)v;
    assert_int_equal(tdl_watchdog_stop(tdl_fiber_loop()), 0);
    tdl_group_stop(tdl_group_self());
  } else {
    while (!__atomic_load_n(&S.done, __ATOMIC_SEQ_CST))
      tdl_sleep(tdl_after(TDL_MSEC));
    tdl_sleep(tdl_after(60 * TDL_MSEC));
    v = 42;
    assert_int_equal(tdl_chan_send(S.a, &v, TDL_FOREVER), 0);
  }
  return NULL;
}

static void spinning_loops(void **state)
{
  (void)state;
  spin_ns = 200 * TDL_USEC;
  memset(&S, 0, sizeof S);
  S.n = rounds(100000);
  assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), 0), 0);
  assert_int_equal(tdl_chan_new_shared(&S.b, sizeof(long), 0), 0);
  finish(run_group(2, xping_main));
  assert_int_equal(S.count[1], S.n);
  assert_int_equal(S.bad[0], 0);
  assert_int_equal(tdl_chan_free(S.a), 0);
  assert_int_equal(tdl_chan_free(S.b), 0);
  /* The other tests' traffic, spinning. */
  check_pipe(0, rounds(20000));
  check_pipe(1, rounds(20000));
  two_by_two(state);
  select_across_loops(state);
  /* Spins far longer than anything takes: only a deadline, a post (the
   * cancel, the close's wake, the group's stop) or a value ends a wait. */
  spin_ns = TDL_SEC;
  close_deadline_cancel(state);
  memset(&S, 0, sizeof S);
  assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), 0), 0);
  finish(run_group(2, watched_main));
  assert_int_equal(S.results[0], 0);
  assert_int_equal(S.results[1], 42);
  if (!RUNNING_ON_VALGRIND) /* which runs one thread at a time: any may look stalled */
    assert_int_equal(__atomic_load_n(&stalls, __ATOMIC_SEQ_CST), 0);
  assert_int_equal(tdl_chan_free(S.a), 0);
  spin_ns = 0;
}

/* ---- freeing a shared channel in use ---- */

/* A fiber waits on the channel (on the same loop, so that the test knows
 * when it waits); freeing it meanwhile is refused (-EBUSY) and changes
 * nothing.  A close wakes the waiter; until the waiter has run again and
 * left (a buffered one tries the ring once more), the free is still
 * refused. */
static tdl_loop *one_loop(void)
{
  tdl_loop *loop;
  assert_int_equal(tdl_loop_new(&loop, NULL), 0);
  return loop;
}

static void *waiting_receiver(void *arg)
{
  (void)arg;
  long v;
  S.results[0] = tdl_chan_recv(S.a, &v, tdl_after(60 * TDL_SEC));
  S.done++;
  return NULL;
}

static void *waiting_selector(void *arg)
{
  (void)arg;
  long v;
  tdl_select_op op = {.kind = TDL_SELECT_RECV, .ch = S.a, .val = &v};
  S.results[1] = tdl_select(&op, 1, tdl_after(60 * TDL_SEC));
  S.results[2] = op.result;
  S.done++;
  return NULL;
}

static void *freer(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_chan_free(S.a), -EBUSY); /* two fibers wait on it */
  assert_int_equal(tdl_chan_len(S.a), 0);        /* still a channel */
  assert_int_equal(tdl_chan_close(S.a), 0);
  assert_int_equal(tdl_chan_free(S.a), -EBUSY); /* woken, not yet gone */
  while (S.done < 2)
    assert_int_equal(tdl_fiber_yield(), 0);
  assert_int_equal(tdl_chan_free(S.a), 0);
  S.a = NULL;
  return NULL;
}

static void free_in_use_is_refused(void **state)
{
  (void)state;
  for (size_t cap = 0; cap <= 4; cap += 4) {
    memset(&S, 0, sizeof S);
    assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), cap), 0);
    tdl_loop *loop = one_loop();
    tdl_fiber_options detached = {.detached = true};
    assert_int_equal(tdl_fiber_spawn(NULL, loop, waiting_receiver, NULL, &detached), 0);
    assert_int_equal(tdl_fiber_spawn(NULL, loop, waiting_selector, NULL, &detached), 0);
    assert_int_equal(tdl_fiber_spawn(NULL, loop, freer, NULL, &detached), 0);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    assert_int_equal(tdl_loop_free(loop), 0);
    assert_null(S.a);
    assert_int_equal(S.results[0], -EPIPE);
    assert_int_equal(S.results[1], 0);  /* the clause won... */
    assert_int_equal(S.results[2], -EPIPE); /* ...with the close */
  }
}


/* ---- references: the last release frees, also while a call is inside ---- */

/* Each loop holds a reference: loop 0 sends, closes and releases; loop 1
 * receives (a plain receive, or a select) until the close, then releases.  Whichever goes last frees; the test's own
 * reference went before either began. */
static void *refs_main(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  long v;
  if (me == 0) {
    for (long i = 1; i <= S.n; i++)
      if (tdl_chan_send(S.a, &i, TDL_FOREVER) < 0)
        S.bad[0]++;
    S.results[0] = tdl_chan_close(S.a) | tdl_chan_release(S.a);
  } else {
    int e;
    for (;;) {
      if (S.count[1] % 2) {
        tdl_select_op op = {.kind = TDL_SELECT_RECV, .ch = S.a, .val = &v};
        e = tdl_select(&op, 1, TDL_FOREVER);
        e = e < 0 ? e : op.result;
      } else {
        e = tdl_chan_recv(S.a, &v, TDL_FOREVER);
      }
      if (e < 0)
        break;
      S.sum[1] += v;
      S.count[1]++;
    }
    S.results[1] = e;
    S.results[2] = tdl_chan_release(S.a);
  }
  if (__atomic_add_fetch(&S.done, 1, __ATOMIC_SEQ_CST) == 2)
    tdl_group_stop(tdl_group_self());
  return NULL;
}

/* A receiver on loop 1 waits holding no reference of its own; the last
 * reference goes from loop 0 (or from loop 1 itself) while it is parked:
 * the release closes the channel, the receiver wakes with -EPIPE, and the
 * channel is freed as it leaves. */
static void *orphan_receiver(void *arg)
{
  (void)arg;
  long v;
  S.results[3] = tdl_chan_recv(S.a, &v, TDL_FOREVER);
  return NULL;
}

static void *last_releaser(void *arg)
{
  (void)arg;
  /* orphan_receiver ran first on this loop and is parked now */
  long go = 1;
  if (S.n == 0)
    S.results[4] = tdl_chan_release(S.a);
  else
    S.results[4] = tdl_chan_send(S.b, &go, TDL_FOREVER);
  return NULL;
}

static void *orphan_main(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  if (me == 1) {
    tdl_fiber_options detached = {.detached = true};
    tdl_fiber_t r;
    if (tdl_fiber_spawn(&r, tdl_fiber_loop(), orphan_receiver, NULL, NULL) < 0 ||
        tdl_fiber_spawn(NULL, tdl_fiber_loop(), last_releaser, NULL, &detached) < 0)
      S.bad[1]++;
    else if (tdl_fiber_join(r, NULL, TDL_FOREVER) < 0)
      S.bad[1]++;
  } else {
    long go;
    if (S.n && (tdl_chan_recv(S.b, &go, TDL_FOREVER) < 0 || tdl_chan_release(S.a) < 0))
      S.bad[0]++;
  }
  if (__atomic_add_fetch(&S.done, 1, __ATOMIC_SEQ_CST) == 2)
    tdl_group_stop(tdl_group_self());
  return NULL;
}

static void references(void **state)
{
  (void)state;
  /* misuse */
  tdl_chan *local;
  assert_int_equal(tdl_chan_retain(NULL), -EINVAL);
  assert_int_equal(tdl_chan_release(NULL), -EINVAL);
  assert_int_equal(tdl_chan_new(&local, sizeof(long), 1), 0);
  assert_int_equal(tdl_chan_retain(local), -EINVAL); /* its owner frees it */
  assert_int_equal(tdl_chan_release(local), -EINVAL);
  assert_int_equal(tdl_chan_free(local), 0);
  assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), 4), 0);
  assert_int_equal(tdl_chan_retain(S.a), 0);
  assert_int_equal(tdl_chan_free(S.a), -EBUSY); /* another reference is held */
  assert_int_equal(tdl_chan_release(S.a), 0);
  long v = 3;
  assert_int_equal(tdl_chan_try_send(S.a, &v), 0); /* still open, still a channel */
  assert_int_equal(tdl_chan_release(S.a), 0);      /* the last: freed, a value inside */

  /* releases racing sends, receives and selects on two loops */
  for (size_t cap = 0; cap <= 64; cap += 64) {
    memset(&S, 0, sizeof S);
    S.n = rounds(cap ? 50000 : 5000);
    assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), cap), 0);
    assert_int_equal(tdl_chan_retain(S.a), 0);
    assert_int_equal(tdl_chan_retain(S.a), 0);
    tdl_group *g = run_group(2, refs_main);
    assert_int_equal(tdl_chan_release(S.a), 0); /* from this thread, while they run */
    finish(g);
    assert_int_equal(S.bad[0], 0);
    assert_int_equal(S.results[0], 0);
    assert_int_equal(S.results[2], 0);
    /* received all, then -EPIPE */
    assert_int_equal(S.results[1], -EPIPE);
    assert_int_equal(S.count[1], S.n);
    assert_int_equal(S.sum[1], S.n * (S.n + 1) / 2);
  }

  /* the last release while a fiber without a reference is parked on it,
   * from its own loop (n 0) and from another (n 1) */
  for (long n = 0; n < 2; n++) {
    for (size_t cap = 0; cap <= 4; cap += 4) {
      memset(&S, 0, sizeof S);
      S.n = n;
      assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), cap), 0);
      assert_int_equal(tdl_chan_new_shared(&S.b, sizeof(long), 1), 0);
      finish(run_group(2, orphan_main));
      assert_int_equal(S.bad[0], 0);
      assert_int_equal(S.bad[1], 0);
      assert_int_equal(S.results[3], -EPIPE);
      assert_int_equal(S.results[4], 0);
      assert_int_equal(tdl_chan_free(S.b), 0);
    }
  }
}

/* ---- the channel goes before a woken call runs again ---- */

/* A fiber of loop 1 that holds no reference waits on the channel (a
 * receive, a send, or a select's clause); loop 0 completes its wait (the
 * wake is posted to loop 1) and then lets go of the channel, by the last
 * release or by its owner's free, while another fiber of loop 1 keeps the
 * thread busy: the woken call runs again only after that, and must touch
 * nothing of a channel that is gone (a free must refuse while it would).
 * Sequenced by S.done, not by time: 1 when the waiter is parked (the busy
 * fiber runs only after it), 2 when loop 0 has let go, 3 when the woken call
 * has returned.  S.n's bits: 1 the waiter sends (else it receives), 2
 * through a select, 4 the owner frees (else the last release). */
static void *woken_orphan(void *arg)
{
  (void)arg;
  long v = S.n & 1 ? 42 : 0;
  int op = S.n & 1 ? TDL_SELECT_SEND : TDL_SELECT_RECV;
  if (S.n & 2) {
    tdl_select_op sel = {.kind = op, .ch = S.a, .val = &v};
    int i = tdl_select(&sel, 1, TDL_FOREVER);
    S.results[0] = i < 0 ? i : sel.result;
  } else {
    S.results[0] = op == TDL_SELECT_SEND ? tdl_chan_send(S.a, &v, TDL_FOREVER) : tdl_chan_recv(S.a, &v, TDL_FOREVER);
  }
  S.results[1] = (int)v;
  return NULL;
}

static tdl_time_t clock_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

/* Keeps loop 1 from running the woken fiber until loop 0 has let go; never
 * parks nor yields (the bound only keeps a broken run from hanging). */
static void *busy_until_gone(void *arg)
{
  (void)arg;
  __atomic_store_n(&S.done, 1, __ATOMIC_SEQ_CST); /* woken_orphan ran first, and parked */
  tdl_time_t until = clock_ns() + 60 * TDL_SEC;
  while (__atomic_load_n(&S.done, __ATOMIC_SEQ_CST) < 2)
    if (clock_ns() > until) {
      S.bad[1]++;
      break;
    }
  return NULL;
}

static void *woken_main(void *arg)
{
  (void)arg;
  if (tdl_group_index() == 1) {
    tdl_fiber_options detached = {.detached = true};
    tdl_fiber_t r;
    if (tdl_fiber_spawn(&r, tdl_fiber_loop(), woken_orphan, NULL, NULL) < 0 ||
        tdl_fiber_spawn(NULL, tdl_fiber_loop(), busy_until_gone, NULL, &detached) < 0 ||
        tdl_fiber_join(r, NULL, TDL_FOREVER) < 0)
      S.bad[1]++;
    __atomic_store_n(&S.done, 3, __ATOMIC_SEQ_CST);
  } else {
    while (__atomic_load_n(&S.done, __ATOMIC_SEQ_CST) < 1)
      tdl_sleep(tdl_after(TDL_MSEC));
    /* The waiter waits: this completes at once (unbuffered: a hand-off
     * into its record; buffered: the ring, and a wake to try again). */
    long v = 7;
    S.results[2] = S.n & 1 ? tdl_chan_recv(S.a, &v, TDL_FOREVER) : tdl_chan_send(S.a, &v, TDL_FOREVER);
    S.results[3] = (int)v;
    S.results[4] = S.n & 4 ? tdl_chan_free(S.a) : tdl_chan_release(S.a);
    __atomic_store_n(&S.done, 2, __ATOMIC_SEQ_CST);
    if (S.results[4] == -EBUSY) { /* still counted: free it once it returned */
      while (__atomic_load_n(&S.done, __ATOMIC_SEQ_CST) < 3)
        tdl_sleep(tdl_after(TDL_MSEC));
      S.results[5] = tdl_chan_free(S.a);
    }
  }
  if (__atomic_add_fetch(&S.count[0], 1, __ATOMIC_SEQ_CST) == 2)
    tdl_group_stop(tdl_group_self());
  return NULL;
}

static void channel_gone_before_woken_call_runs(void **state)
{
  (void)state;
  for (size_t cap = 0; cap <= 4; cap += 4) {
    for (long n = 0; n < 8; n++) {
      memset(&S, 0, sizeof S);
      S.n = n;
      assert_int_equal(tdl_chan_new_shared(&S.a, sizeof(long), cap), 0);
      long fill = 1;
      for (size_t i = 0; i < cap && (n & 1); i++) /* a buffered sender waits for room */
        assert_int_equal(tdl_chan_try_send(S.a, &fill), 0);
      finish(run_group(2, woken_main));
      assert_int_equal(S.bad[1], 0);
      assert_int_equal(S.results[2], 0);
      assert_int_equal(S.results[3], n & 1 ? (cap ? 1 : 42) : 7);
      if (n & 1 && cap && !(n & 4))
        assert_int_equal(S.results[0], -EPIPE); /* woken to try again, it finds the release's close */
      else
        assert_int_equal(S.results[0], 0);
      if (!(n & 1))
        assert_int_equal(S.results[1], 7); /* received, also buffered (sent before any close) */
      if (!(n & 4)) {
        assert_int_equal(S.results[4], 0);
      } else if (!cap && !(n & 2)) {
        /* Handed its value, the woken call is done with the channel: it is
         * not counted, and the free goes at once. */
        assert_int_equal(S.results[4], 0);
      } else {
        /* A select, or a buffered call, comes back to the channel after its
         * wake: counted until it returns. */
        assert_int_equal(S.results[4], -EBUSY);
        assert_int_equal(S.results[5], 0);
      }
    }
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(buffered_across_loops),
      cmocka_unit_test(unbuffered_across_loops),
      cmocka_unit_test(two_by_two),
      cmocka_unit_test(close_deadline_cancel),
      cmocka_unit_test(select_across_loops),
      cmocka_unit_test(one_loop_and_misuse),
      cmocka_unit_test(free_in_use_is_refused),
      cmocka_unit_test(references),
      cmocka_unit_test(channel_gone_before_woken_call_runs),
      cmocka_unit_test(spinning_loops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
