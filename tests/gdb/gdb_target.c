/* SPDX-License-Identifier: MIT */
/*
 * The program test_gdb.py points gdb at (gdb/treadle.py).
 *
 *   gdb_target live      fibers parked in known places: reading a pipe,
 *                        sleeping with a deadline, on a channel, on a mutex,
 *                        in a pool call, one runnable, one on each loop of
 *                        a group of two; the main fiber runs (it blocks its
 *                        thread in a plain read of stdin).  Prints "ready",
 *                        then, once a line comes on stdin, ends every wait
 *                        and checks each fiber got what it waited for:
 *                        prints "done ok" and exits 0, or exits 1.
 *   gdb_target many N    N fibers asleep; "ready"; exits on a line on stdin.
 *   gdb_target overflow  a fiber recurses through its stack's guard page.
 *   gdb_target spin MS   a fiber spins in spin_in_fiber() for MS ms of CPU
 *                        (tests/gdb/test_perf.py samples it with perf).
 *   gdb_target compact   a fiber "idle" parked and compacted
 *                        (tdl_fiber_compact_idle); "ready"; on a line on
 *                        stdin wakes it, checks its stack came back, and
 *                        prints "done ok".
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <treadle.h>

static int data_pipe[2], pool_pipe[2];
static tdl_chan *chan;
static tdl_mutex mutex;
static int group_parked; /* atomic */
static int failures;
static tdl_group *g;

static void check(int ok, const char *what)
{
  if (!ok) {
    fprintf(stderr, "gdb_target: %s\n", what);
    failures++;
  }
}

static void *reader(void *arg)
{
  (void)arg;
  char c = 0;
  ssize_t n = tdl_read(data_pipe[0], &c, 1, TDL_FOREVER);
  check(n == 1 && c == 'x', "reader: tdl_read did not return the byte written");
  return NULL;
}

static void *sleeper(void *arg)
{
  (void)arg;
  int e = tdl_sleep(tdl_after(3600 * TDL_SEC));
  check(e == -ECANCELED, "sleeper: not cancelled");
  return NULL;
}

static void *chan_receiver(void *arg)
{
  (void)arg;
  int v = 0;
  int e = tdl_chan_recv(chan, &v, TDL_FOREVER);
  check(e == 0 && v == 42, "chan-recv: did not receive 42");
  return NULL;
}

static void *mutex_waiter(void *arg)
{
  (void)arg;
  int e = tdl_mutex_lock(&mutex, TDL_FOREVER);
  check(e == 0, "mutex-wait: lock failed");
  if (e == 0)
    tdl_mutex_unlock(&mutex);
  return NULL;
}

static void *blocking_work(void *arg)
{
  (void)arg;
  char c = 0;
  ssize_t n = read(pool_pipe[0], &c, 1); /* a pool thread: a plain read */
  return (void *)(intptr_t)(n == 1 ? c : -1);
}

static void *pool_caller(void *arg)
{
  (void)arg;
  void *r = NULL;
  int e = tdl_pool_call(TDL_LANE_USER, blocking_work, NULL, NULL, &r, TDL_FOREVER);
  check(e == 0 && (intptr_t)r == 'p', "pool-call: wrong result");
  return NULL;
}

static void *runnable(void *arg)
{
  (void)arg;
  return NULL;
}

static void *group_main(void *arg)
{
  (void)arg;
  __atomic_add_fetch(&group_parked, 1, __ATOMIC_SEQ_CST);
  int e = tdl_sleep(tdl_after(3600 * TDL_SEC));
  check(e == -ECANCELED, "group fiber: not cancelled");
  return NULL;
}

static tdl_fiber_t spawn(tdl_fiber_fn fn, const char *name)
{
  tdl_fiber_t f = 0;
  tdl_fiber_options o = {.name = name};
  if (tdl_fiber_spawn(&f, tdl_fiber_loop(), fn, NULL, &o) < 0) {
    fprintf(stderr, "gdb_target: spawn %s failed\n", name);
    exit(1);
  }
  return f;
}

/* Called when every fiber is in place: a debugger that starts the program
 * itself (qemu-user's gdb stub, which stops it before its first instruction)
 * breaks here instead of attaching after "ready". */
__attribute__((noinline)) void gdb_target_ready(void);
__attribute__((noinline)) void gdb_target_ready(void)
{
  __asm__ volatile("" ::: "memory"); /* not folded away */
}

/* Block this thread (and so its loop) until the driver writes a line. */
static void wait_for_driver(void)
{
  gdb_target_ready();
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  char line[16];
  while (read(STDIN_FILENO, line, sizeof line) < 0 && errno == EINTR) {
  }
}

static void *live_main(void *arg)
{
  (void)arg;
  if (pipe(data_pipe) != 0 || pipe(pool_pipe) != 0 || tdl_chan_new(&chan, sizeof(int), 0) != 0)
    exit(1);
  tdl_mutex_init(&mutex);
  if (tdl_mutex_lock(&mutex, TDL_FOREVER) != 0)
    exit(1);
  tdl_group_options go = {.loops = 2, .main = group_main};
  if (tdl_group_new(&g, &go) != 0)
    exit(1);
  tdl_fiber_t f[6];
  f[0] = spawn(reader, "reader");
  f[1] = spawn(sleeper, "sleeper");
  f[2] = spawn(chan_receiver, "chan-recv");
  f[3] = spawn(mutex_waiter, "mutex-wait");
  f[4] = spawn(pool_caller, "pool-call");
  while (__atomic_load_n(&group_parked, __ATOMIC_SEQ_CST) < 2)
    tdl_sleep(tdl_after(TDL_SEC / 100));
  tdl_sleep(tdl_after(TDL_SEC / 20)); /* every fiber above has parked */
  f[5] = spawn(runnable, "runnable"); /* queued, and the loop is held below */

  wait_for_driver();

  char x = 'x', p = 'p';
  int v = 42;
  check(write(data_pipe[1], &x, 1) == 1, "write to the data pipe");
  check(tdl_fiber_cancel(tdl_fiber_loop(), f[1]) == 0, "cancel the sleeper");
  check(tdl_chan_send(chan, &v, TDL_FOREVER) == 0, "chan send");
  check(tdl_mutex_unlock(&mutex) == 0, "mutex unlock");
  check(write(pool_pipe[1], &p, 1) == 1, "write to the pool pipe");
  for (int i = 0; i < 6; i++)
    check(tdl_fiber_join(f[i], NULL, tdl_after(60 * TDL_SEC)) == 0, "join");
  tdl_chan_free(chan);
  return NULL;
}

static void *asleep(void *arg)
{
  (void)arg;
  tdl_sleep(TDL_FOREVER);
  return NULL;
}

static void *many_main(void *arg)
{
  long n = (long)(intptr_t)arg;
  tdl_fiber_options o = {.stack_size = TDL_STACK_MIN, .detached = true};
  for (long i = 0; i < n; i++) {
    if (tdl_fiber_spawn(NULL, tdl_fiber_loop(), asleep, NULL, &o) != 0) {
      fprintf(stderr, "gdb_target: spawn %ld failed\n", i);
      exit(1);
    }
  }
  tdl_fiber_yield(); /* each runs once and parks */
  wait_for_driver();
  _exit(0);
}

/* Deep enough to pass any guard: each frame takes a kilobyte, and the
 * limit is far beyond any fiber stack. */
static volatile int recurse_limit = 1 << 30;

static int recurse(int depth)
{
  volatile char frame[1024];
  frame[0] = (char)depth;
  if (depth >= recurse_limit)
    return frame[0];
  return recurse(depth + 1) + frame[0];
}

static void *overflower(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)recurse(0);
}

static void *overflow_main(void *arg)
{
  (void)arg;
  tdl_fiber_options o = {.name = "deep"};
  tdl_fiber_t f;
  if (tdl_fiber_spawn(&f, tdl_fiber_loop(), overflower, NULL, &o) != 0)
    exit(1);
  tdl_fiber_join(f, NULL, TDL_FOREVER);
  return NULL;
}

/* Busy on the CPU in a fiber, in a function of our own that perf's samples
 * must show above fiber_entry and the switch's trampoline. */
__attribute__((noinline)) uint64_t spin_in_fiber(long ms);
__attribute__((noinline)) uint64_t spin_in_fiber(long ms)
{
  struct timespec t0, t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  uint64_t x = 88172645463325252u;
  do {
    for (int i = 0; i < 100000; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
  return x;
}

static void *spinner(void *arg)
{
  uint64_t x = spin_in_fiber((long)(intptr_t)arg);
  __asm__ volatile("" ::: "memory"); /* a call, not a tail jump: its frame stays */
  return (void *)(uintptr_t)x;
}

static void *spin_main(void *arg)
{
  tdl_fiber_options o = {.name = "spinner"};
  tdl_fiber_t f;
  void *x;
  if (tdl_fiber_spawn(&f, tdl_fiber_loop(), spinner, arg, &o) != 0 ||
      tdl_fiber_join(f, &x, TDL_FOREVER) != 0)
    exit(1);
  printf("spun %lx\n", (unsigned long)(uintptr_t)x);
  return NULL;
}

static void *idle_fiber(void *arg)
{
  (void)arg;
  volatile unsigned mark[8];
  for (unsigned i = 0; i < 8; i++)
    mark[i] = 0xc0de0000u + i;
  tdl_fiber_park(TDL_FOREVER);
  for (unsigned i = 0; i < 8; i++)
    check(mark[i] == 0xc0de0000u + i, "compacted stack restored");
  return NULL;
}

static void *compact_main(void *arg)
{
  (void)arg;
  tdl_loop *loop = tdl_fiber_loop();
  check(tdl_fiber_compact_idle(loop, TDL_MSEC) == 0, "compact_idle");
  tdl_fiber_options o = {.name = "idle"};
  tdl_fiber_t f;
  if (tdl_fiber_spawn(&f, loop, idle_fiber, NULL, &o) != 0)
    exit(1);
  for (int i = 0; i < 10000 && tdl_fiber_compacted(loop, f) <= 0; i++)
    tdl_sleep(tdl_after(TDL_MSEC));
  check(tdl_fiber_compacted(loop, f) > 0, "compacted");
  wait_for_driver();
  tdl_fiber_unpark(loop, f);
  tdl_fiber_join(f, NULL, TDL_FOREVER);
  return NULL;
}

int main(int argc, char **argv)
{
  /* Let a debugger attach whatever ptrace_scope says (Yama). */
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  const char *mode = argc > 1 ? argv[1] : "live";
  int e;
  if (strcmp(mode, "live") == 0) {
    e = tdl_fiber_main(live_main, NULL, NULL);
    tdl_group_stop(g);
    check(tdl_group_wait(g, tdl_after(60 * TDL_SEC)) == 0, "group wait");
    tdl_group_free(g);
    tdl_pool_shutdown(tdl_after(60 * TDL_SEC));
    if (e != 0 || failures) {
      fprintf(stderr, "gdb_target: %s, %d failures\n", tdl_strerror(e), failures);
      return 1;
    }
    printf("done ok\n");
    return 0;
  }
  if (strcmp(mode, "many") == 0 && argc > 2) {
    e = tdl_fiber_main(many_main, (void *)(intptr_t)atol(argv[2]), NULL);
    return e == 0 ? 0 : 1;
  }
  if (strcmp(mode, "overflow") == 0) {
    e = tdl_fiber_main(overflow_main, NULL, NULL);
    return 1; /* not reached: the overflow kills the process */
  }
  if (strcmp(mode, "spin") == 0 && argc > 2) {
    e = tdl_fiber_main(spin_main, (void *)(intptr_t)atol(argv[2]), NULL);
    return e == 0 ? 0 : 1;
  }
  if (strcmp(mode, "compact") == 0) {
    e = tdl_fiber_main(compact_main, NULL, NULL);
    if (e != 0 || failures)
      return 1;
    printf("done ok\n");
    return 0;
  }
  fprintf(stderr, "usage: gdb_target live | many N | overflow | spin MS | compact\n");
  return 2;
}
