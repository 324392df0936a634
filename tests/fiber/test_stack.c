/* SPDX-License-Identifier: MIT */
/* Tests for fiber stacks (src/stack.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <treadle.h>

#include "helpers.h"
#include "base/fault.h"
#include "fiber/fiber_internal.h"
#include "fiber/stack.h"
#include "fiber/switch.h"

static size_t page;

/* Lines of /proc/self/maps (one per VMA) or a field of /proc/self/status in
 * KiB, read with plain read(2) so the count does not disturb the heap. */
static size_t slurp(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  size_t len = 0;
  ssize_t r;
  while (len + 1 < cap && (r = read(fd, buf + len, cap - 1 - len)) > 0)
    len += (size_t)r;
  close(fd);
  buf[len] = 0;
  return len;
}

static size_t count_vmas(void) {
  static char buf[1 << 23];
  size_t len = slurp("/proc/self/maps", buf, sizeof buf), n = 0;
  for (size_t i = 0; i < len; i++)
    n += buf[i] == '\n';
  return n;
}

static long status_kb(const char *field) {
  char buf[8192];
  slurp("/proc/self/status", buf, sizeof buf);
  char *p = strstr(buf, field);
  return p ? strtol(p + strlen(field), NULL, 10) : -1;
}

static int setup(void **state) {
  (void)state;
  page = (size_t)sysconf(_SC_PAGESIZE);
  return 0;
}

static void test_get_put_reuse(void **state) {
  (void)state;
  tdl__stack_pool p;
  tdl__stack_stats st;
  assert_int_equal(tdl__stack_pool_init(&p, 4), 0);

  tdl__stack a, b;
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &a), 0);
  assert_non_null(a.lo);
  assert_int_equal(a.size, TDL__STACK_DEFAULT);
  assert_int_equal((uintptr_t)a.lo % page, 0);
  memset(a.lo, 0xa5, a.size); /* all of it is usable */
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.in_use, 1);
  assert_int_equal(st.cached, 0);

  void *lo = a.lo;
  tdl__stack_put(&p, &a);
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.in_use, 0);
  assert_int_equal(st.cached, 1);
  assert_int_equal(st.cached_bytes, TDL__STACK_DEFAULT);

  assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &b), 0);
  assert_ptr_equal(b.lo, lo); /* the cached one came back */
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.cached, 0);
  assert_int_equal(st.in_use, 1);

  /* A different size is not served from another size's cache. */
  tdl__stack c;
  tdl__stack_put(&p, &b);
  assert_int_equal(tdl__stack_get(&p, 2 * TDL__STACK_DEFAULT, &c), 0);
  assert_ptr_not_equal(c.lo, lo);
  assert_int_equal(c.size, 2 * TDL__STACK_DEFAULT);
  tdl__stack_put(&p, &c);
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.cached, 2);

  tdl__stack_pool_destroy(&p);
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.cached, 0);
}

/* put may be given a descriptor that lives inside the stack itself, as the
 * scheduler's fiber control block does. */
static void test_put_descriptor_inside_stack(void **state) {
  (void)state;
  tdl__stack_pool p;
  tdl__stack_pool_init(&p, 4);
  tdl__stack s;
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &s), 0);
  tdl__stack *inside = (tdl__stack *)((char *)s.lo + s.size - sizeof s);
  *inside = s;
  tdl__stack_put(&p, inside);
  tdl__stack again;
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &again), 0);
  assert_ptr_equal(again.lo, s.lo);
  assert_int_equal(again.size, s.size);
  assert_int_equal(again.guard, s.guard);
  tdl__stack_put(&p, &again);
  tdl__stack_pool_destroy(&p);
}

static void test_cache_is_bounded(void **state) {
  (void)state;
  tdl__stack_pool p;
  tdl__stack_stats st;
  tdl__stack s[10];
  tdl__stack_pool_init(&p, 3);
  for (int i = 0; i < 10; i++)
    assert_int_equal(tdl__stack_get(&p, TDL__STACK_MIN, &s[i]), 0);
  for (int i = 0; i < 10; i++)
    tdl__stack_put(&p, &s[i]);
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.cached, 3);
  assert_int_equal(st.in_use, 0);
  tdl__stack_pool_destroy(&p);

  /* max_cached 0: every put unmaps. */
  tdl__stack_pool_init(&p, 0);
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_MIN, &s[0]), 0);
  tdl__stack_put(&p, &s[0]);
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.cached, 0);
  tdl__stack_pool_destroy(&p);
}

static void test_bad_sizes(void **state) {
  (void)state;
  tdl__stack_pool p;
  tdl__stack s;
  tdl__stack_pool_init(&p, 4);
  assert_int_equal(tdl__stack_get(&p, 0, &s), -EINVAL);
  assert_int_equal(tdl__stack_get(&p, 1, &s), -EINVAL);
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_MIN - 1, &s), -EINVAL);
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_MAX + 1, &s), -EINVAL);
  assert_int_equal(tdl__stack_get(&p, SIZE_MAX, &s), -EINVAL);
  assert_int_equal(tdl__stack_get(&p, SIZE_MAX - page + 2, &s), -EINVAL);
  /* The bounds themselves are fine; odd sizes are page-rounded. */
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_MIN, &s), 0);
  assert_int_equal(s.size, TDL__STACK_MIN);
  tdl__stack_put(&p, &s);
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_MIN + 1, &s), 0);
  assert_int_equal(s.size, TDL__STACK_MIN + page);
  tdl__stack_put(&p, &s);
  tdl__stack_stats st;
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.in_use, 0);
  tdl__stack_pool_destroy(&p);
}

/* Run fn in a child process; return its wait status. */
static int in_child(void (*fn)(void *), void *arg) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* A fault here is the expected outcome, not a bug to dump core for, and
     * cmocka's own fault handlers (inherited) must not catch it. */
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    fn(arg);
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}

static void touch_below(void *lo) {
  ((volatile char *)lo)[-1] = 1;
}

static void test_guard_page(void **state) {
  (void)state;
  tdl__stack_pool p;
  tdl__stack s;
  tdl__stack_pool_init(&p, 4);
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &s), 0);
  assert_true(s.guard >= page); /* far below the budget: guarded */
  ((volatile char *)s.lo)[0] = 1;
  ((volatile char *)s.lo)[s.size - 1] = 1;
  int status = in_child(touch_below, s.lo);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGSEGV);
  /* The same holds for a stack that went through the cache. */
  tdl__stack_put(&p, &s);
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &s), 0);
  status = in_child(touch_below, s.lo);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
  tdl__stack_put(&p, &s);
  tdl__stack_pool_destroy(&p);
}

/* ---- high-water mark ---- */

static tdl__ctx main_ctx, deep_ctx;

/* Touches at least `bytes` of its stack by recursing through 1 KiB frames. */
static void __attribute__((noinline)) dig(size_t bytes) {
  volatile char frame[1024];
  frame[0] = (char)bytes;
  frame[sizeof frame - 1] = 0;
  if (bytes > sizeof frame)
    dig(bytes - sizeof frame);
  frame[1] = frame[0]; /* not a tail call */
}

static void deep_entry(void *arg) {
  tdl__switch_entered(&deep_ctx);
  for (;;) {
    dig((size_t)(uintptr_t)arg);
    arg = tdl__switch(&deep_ctx, &main_ctx, NULL);
  }
}

static void test_used_high_water(void **state) {
  (void)state;
  tdl__stack_pool p;
  tdl__stack s;
  tdl__stack_pool_init(&p, 4);
  assert_int_equal(tdl__stack_get(&p, 256 * 1024, &s), 0);
  assert_int_equal(tdl__stack_used(&s), 0); /* fresh: nothing touched */

  tdl__ctx_init(&deep_ctx, s.lo, s.size, deep_entry);
  tdl__switch(&main_ctx, &deep_ctx, (void *)(uintptr_t)1024);
  size_t small = tdl__stack_used(&s);
  assert_true(small >= page && small <= 4 * page);

  tdl__switch(&main_ctx, &deep_ctx, (void *)(uintptr_t)(100 * 1024));
  size_t big = tdl__stack_used(&s);
  assert_true(big >= 100 * 1024);
  assert_true(big <= s.size);

  /* A high-water mark: a shallower call afterwards does not lower it. */
  tdl__switch(&main_ctx, &deep_ctx, (void *)(uintptr_t)1024);
  assert_int_equal(tdl__stack_used(&s), big);

  /* Back through the cache the stack keeps its pages (a put makes no
   * system call): the next owner finds them resident. */
  tdl__stack_put(&p, &s);
  tdl__stack again;
  assert_int_equal(tdl__stack_get(&p, 256 * 1024, &again), 0);
  assert_ptr_equal(again.lo, s.lo);
  assert_int_equal(tdl__stack_used(&again), big);
  tdl__stack_put(&p, &again);
  tdl__stack_pool_destroy(&p);
}

/* A stack larger than one mincore() call looks at (256 pages): the mark is
 * found past the first call's pages. */
static void test_used_large_stack(void **state) {
  (void)state;
  tdl__stack_pool p;
  tdl__stack s;
  tdl__stack_pool_init(&p, 4);
  assert_int_equal(tdl__stack_get(&p, 512 * page, &s), 0);
  assert_int_equal(tdl__stack_used(&s), 0);
  ((volatile char *)s.lo)[300 * page] = 1;
  assert_int_equal(tdl__stack_used(&s), s.size - 300 * page);
  ((volatile char *)s.lo)[10 * page] = 1;
  assert_int_equal(tdl__stack_used(&s), s.size - 10 * page);
  tdl__stack_put(&p, &s);
  tdl__stack_pool_destroy(&p);
}

/* ---- stashing (compaction) ---- */

static void fill_frames(char *from, char *top) {
  for (char *c = from; c < top; c++)
    *c = (char)((uintptr_t)c * 31);
}

static bool frames_intact(const char *from, const char *top) {
  for (const char *c = from; c < top; c++)
    if (*c != (char)((uintptr_t)c * 31))
      return false;
  return true;
}

/* A stash that fails (no memory for the copy, or pages the kernel will not
 * drop) returns -ENOMEM and leaves the stack as it was, frames and all, and
 * *copy untouched; one that succeeds is undone by unstash. */
static void test_stash_failure_keeps_stack(void **state) {
  (void)state;
  tdl__stack_pool p;
  tdl__stack s;
  tdl__stack_pool_init(&p, 4);
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &s), 0);
  char *top = (char *)s.lo + s.size - 64, *from = top - 3 * page - 100;
  fill_frames(from, top);
  void *copy = &p;
#ifdef TDL_FAULTS
  tdl__fault_arm(1, false);
  assert_int_equal(tdl__stack_stash(&s, from, top, &copy), -ENOMEM);
  tdl__fault_arm(0, false);
  assert_true(tdl__fault_fired());
  assert_ptr_equal(copy, &p);
  assert_true(frames_intact(from, top));
#endif
  /* Locked pages: madvise refuses to drop them (EINVAL).  mlock needs
   * RLIMIT_MEMLOCK room, which some environments do not give; under
   * AddressSanitizer mlock does nothing and says 0. */
#if defined(__SANITIZE_ADDRESS__)
  bool locked = false;
  const char *why = "AddressSanitizer's mlock does nothing";
#else
  bool locked = mlock(s.lo, page) == 0;
  const char *why = locked ? "" : strerror(errno);
#endif
  if (locked) {
    assert_int_equal(tdl__stack_stash(&s, from, top, &copy), -ENOMEM);
    assert_ptr_equal(copy, &p);
    assert_true(frames_intact(from, top));
    assert_int_equal(munlock(s.lo, page), 0);
  } else {
    print_message("      (mlock refused: %s; the madvise failure is not tested)\n", why);
  }
  assert_int_equal(tdl__stack_stash(&s, from, top, &copy), 0);
  assert_ptr_not_equal(copy, &p);
  assert_int_equal(tdl__stack_used(&s), 0); /* every page given back */
  tdl__stack_unstash(from, top, copy);
  assert_true(frames_intact(from, top));
  tdl__stack_put(&p, &s);
  tdl__stack_pool_destroy(&p);
}

/* ---- trimming ---- */

static void test_trim_follows_demand(void **state) {
  (void)state;
  enum { N = 40 };
  tdl__stack_pool p;
  tdl__stack_stats st;
  tdl__stack s[N];
  tdl__stack_pool_init(&p, 64);
  assert_int_equal(tdl__stack_pool_trim(&p), 0); /* empty: nothing to do */

  /* A peak of N, all put back: the first trim keeps them (they were in use
   * during the period, not cached through it). */
  for (int i = 0; i < N; i++) {
    assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &s[i]), 0);
    memset(s[i].lo, 1, s[i].size); /* every page resident */
  }
  for (int i = 0; i < N; i++)
    tdl__stack_put(&p, &s[i]);
  assert_int_equal(tdl__stack_pool_trim(&p), N);

  /* A steady demand of 4 per period: the 4 hottest stay, the cold excess
   * halves every period (rounded up) down to nothing but those. */
  size_t expect = N;
  for (int period = 0; period < 20; period++) {
    for (int k = 0; k < 4; k++)
      assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &s[k]), 0);
    for (int k = 3; k >= 0; k--)
      tdl__stack_put(&p, &s[k]);
    size_t unused = expect - 4;
    expect -= (unused + 1) / 2;
    assert_int_equal(tdl__stack_pool_trim(&p), expect);
  }
  assert_int_equal(expect, 4);
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.cached, 4);
  assert_int_equal(st.trimmed, N - 4);
  assert_int_equal(st.in_use, 0);

  /* The hottest were kept: the ones just put back are handed out again. */
  void *hot = s[0].lo;
  assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &s[0]), 0);
  assert_ptr_equal(s[0].lo, hot);
  tdl__stack_put(&p, &s[0]);

  /* No demand at all: everything goes, one halving at a time. */
  while (tdl__stack_pool_trim(&p) > 0)
    ;
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.cached, 0);
  assert_int_equal(st.cached_bytes, 0);
  assert_int_equal(st.trimmed, N);
  /* The unmapped stacks took their guards with them. */
  assert_int_equal(st.guarded_mapped, 0);
  tdl__stack_pool_destroy(&p);
}

/* Trimming returns the memory: RSS falls back after a peak. */
static void test_trim_returns_memory(void **state) {
  (void)state;
  if (RUNNING_ON_VALGRIND)
    T_SKIP("under valgrind RSS shows valgrind's own shadow memory");
  enum { N = 256 };
  tdl__stack_pool p;
  static tdl__stack s[N];
  tdl__stack_pool_init(&p, N);
  long before = status_kb("VmRSS:");
  for (int i = 0; i < N; i++) {
    assert_int_equal(tdl__stack_get(&p, TDL__STACK_DEFAULT, &s[i]), 0);
    memset(s[i].lo, 1, s[i].size);
  }
  for (int i = 0; i < N; i++)
    tdl__stack_put(&p, &s[i]);
  long peak = status_kb("VmRSS:");
  long held = (long)(N * TDL__STACK_DEFAULT / 1024);
  assert_true(peak - before >= held / 2); /* the cache kept the pages */
  while (tdl__stack_pool_trim(&p) > 0)
    ;
  long after = status_kb("VmRSS:");
#if defined(__SANITIZE_ADDRESS__)
  /* ASan's shadow of the stacks (an eighth of them, written when a put
   * unpoisons a stack) stays resident after they are unmapped. */
  assert_true(after - before < held / 3);
#else
  assert_true(after - before < held / 8);
#endif
  tdl__stack_pool_destroy(&p);
}

/* A loop trims its own cache on a timer that does not keep it alive. */
static void *quick(void *arg) { return arg; }
static void *nap(void *arg) {
  tdl_sleep(tdl_after((tdl_time_t)(uintptr_t)arg));
  return NULL;
}
static void *park_forever(void *arg) {
  (void)arg;
  tdl_fiber_park(TDL_FOREVER);
  return NULL;
}

static void *joiner(void *arg) {
  return (void *)(intptr_t)tdl_fiber_join(*(tdl_fiber_t *)arg, NULL, TDL_FOREVER);
}

static void test_loop_trims_when_idle(void **state) {
  (void)state;
  enum { N = 64 };
  tdl_loop *loop;
  tdl_fiber_stats st;
  assert_int_equal(tdl_loop_new(&loop, NULL), 0);
  for (int i = 0; i < N; i++)
    assert_int_equal(tdl_fiber_spawn(NULL, loop, quick, NULL, &(tdl_fiber_options){.detached = true}), 0);
  /* The fibers are gone and their stacks cached: nothing keeps the loop
   * running, not even the trim timer that is now armed. */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_false(tdl_loop_alive(loop));
  tdl_fiber_stats_get(loop, &st);
  assert_int_equal(st.stacks_cached, N);

  /* Only a parked fiber that nothing can wake: a deadlock, reported at
   * once, not after the trims have emptied the cache. */
  tdl_fiber_t parked;
  assert_int_equal(tdl_fiber_spawn(&parked, loop, park_forever, NULL, NULL), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), -EDEADLK);
  tdl_fiber_stats_get(loop, &st);
  assert_true(st.stacks_cached > N / 2);
  assert_int_equal(tdl_fiber_cancel(loop, parked), 0);
  assert_int_equal(tdl_fiber_spawn(NULL, loop, joiner, &parked, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);

  /* While a fiber sleeps through a few periods, the idle stacks go back.
   * (Timers fire in deadline order, so the trims due before the wake-up
   * have run when it comes, however late.) */
  assert_int_equal(tdl_fiber_spawn(NULL, loop, nap, (void *)(uintptr_t)(3 * TDL__STACK_TRIM_PERIOD), &(tdl_fiber_options){.detached = true}),
                   0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  tdl_fiber_stats_get(loop, &st);
  assert_true(st.stacks_cached <= N / 2);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* The same trim gives back the fd tables and timer heap a peak grew. */
static void ignore_io(tdl_loop *loop, tdl_io *w, unsigned ev) {
  (void)loop;
  (void)w;
  (void)ev;
}

static void *read_pipe(void *arg) {
  int *p = arg;
  char b;
  /* A watcher makes the loop's own record of the fd (fiber I/O may not:
   * on io_uring reads go through the ring). */
  tdl_io w;
  tdl_io_init(&w, p[0], ignore_io, NULL);
  assert_int_equal(tdl_io_start(tdl_fiber_loop(), &w, TDL_READ), 0);
  assert_int_equal(tdl_io_stop(tdl_fiber_loop(), &w), 0);
  assert_int_equal(tdl_read(p[0], &b, 1, tdl_after(10 * TDL_MSEC)), -ETIMEDOUT);
  tdl_close(p[0]);
  tdl_close(p[1]);
  return NULL;
}

static void fired(tdl_loop *loop, tdl_timer *t) {
  (void)loop;
  (*(int *)t->data)++;
}

static void test_loop_gives_tables_back(void **state) {
  (void)state;
  enum { TIMERS = 40000 };
  static tdl_timer timers[TIMERS];
  int nfired = 0;
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  int n = rl.rlim_cur > 4200 ? 2000 : (int)(rl.rlim_cur - 200) / 2;
  int(*p)[2] = calloc((size_t)n, sizeof *p);
  assert_non_null(p);
  tdl_loop *loop;
  assert_int_equal(tdl_loop_new(&loop, NULL), 0);
  for (int i = 0; i < n; i++) {
    assert_int_equal(pipe2(p[i], O_CLOEXEC), 0);
    assert_int_equal(tdl_fiber_spawn(NULL, loop, read_pipe, p[i], &(tdl_fiber_options){.detached = true}), 0);
  }
  for (int i = 0; i < TIMERS; i++) {
    tdl_timer_init(&timers[i], fired, &nfired);
    assert_int_equal(tdl_timer_start(loop, &timers[i], TDL_MSEC, 0), 0);
  }
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(nfired, TIMERS);
  uint32_t peak_fds = loop->nfds, peak_timers = loop->timers.cap;
  assert_true(peak_fds >= (uint32_t)(2 * n));
  /* Idle through a few periods (a sleeper keeps the loop running). */
  assert_int_equal(tdl_fiber_spawn(NULL, loop, nap, (void *)(uintptr_t)(3 * TDL__STACK_TRIM_PERIOD), &(tdl_fiber_options){.detached = true}),
                   0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_true(loop->nfds <= peak_fds / 4);
  assert_true(loop->nfds >= 64);
  assert_true(peak_timers >= TIMERS);
  assert_true(loop->timers.cap < peak_timers / 2); /* the heap's unused pages went back */
  /* And they grow again as before. */
  int q[2];
  assert_int_equal(pipe2(q, O_CLOEXEC), 0);
  int hi = fcntl(q[0], F_DUPFD_CLOEXEC, 3 * n);
  assert_true(hi >= 3 * n);
  int hp[2] = {hi, q[1]};
  assert_int_equal(tdl_fiber_spawn(NULL, loop, read_pipe, hp, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  close(q[0]);
  assert_int_equal(tdl_loop_free(loop), 0);
  free(p);
}

/* ---- 100,000 stacks at once ---- */

static void test_hundred_thousand(void **state) {
  (void)state;
  /* Under Valgrind, its own bookkeeping (a linear list of registered stacks,
   * a segment table) makes this quadratic: ~2 minutes for 100,000.  The
   * property is treadle's and is checked natively; Valgrind checks the same
   * code on fewer stacks (still past the guard budget it gets there). */
  const int N = RUNNING_ON_VALGRIND ? 10000 : 100000;
  tdl__stack_pool p;
  tdl__stack_stats st;
  tdl__stack *s = calloc(N, sizeof *s);
  assert_non_null(s);
  tdl__stack_pool_init(&p, 1024);
  size_t vmas_before = count_vmas();

  for (int i = 0; i < N; i++) {
    int r = tdl__stack_get(&p, TDL__STACK_DEFAULT, &s[i]);
    if (r != 0)
      fail_msg("stack %d of %d: %d", i, N, r);
    /* The scheduler's control block lives in the top page. */
    ((volatile char *)s[i].lo)[s[i].size - 1] = (char)i;
  }
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.in_use, N);
  /* Guards while the budget lasts (other tests' stacks are all put back). */
  assert_true(st.guard_budget > 0);
  assert_true(st.guarded_mapped <= st.guard_budget);
  assert_true(st.in_use - st.in_use_unguarded <= st.guarded_mapped);
  assert_true(st.in_use_unguarded >= (size_t)N - st.guard_budget);
  /* Everything fits in the kernel's map count with room to spare: each
   * guarded stack costs 2 VMAs, the unguarded ones merge. */
  size_t vmas = count_vmas() - vmas_before;
  assert_true(vmas <= 2 * st.guarded_mapped + 1000);
  assert_true(vmas < 65530 / 2 + 1000);

  for (int i = 0; i < N; i++)
    assert_int_equal(((volatile char *)s[i].lo)[s[i].size - 1], (char)i);
  for (int i = 0; i < N; i++)
    tdl__stack_put(&p, &s[i]);
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.in_use, 0);
  assert_int_equal(st.in_use_unguarded, 0);
  assert_int_equal(st.cached, 1024);
  tdl__stack_pool_destroy(&p);
  tdl__stack_pool_stats(&p, &st);
  assert_int_equal(st.guarded_mapped, 0);
  assert_true(count_vmas() <= vmas_before + 2);
  free(s);
}

/* ---- running out of memory ---- */

static void enomem_child(void *arg) {
  (void)arg;
  enum { MAX = 4096 };
  static tdl__stack s[MAX];
  tdl__stack_pool p;
  tdl__stack_pool_init(&p, 16);
  long vm_before = status_kb("VmSize:");
  size_t vmas_before = count_vmas();

  /* Room for a few dozen stacks more than the process has now. */
  struct rlimit lim;
  lim.rlim_cur = lim.rlim_max = (rlim_t)vm_before * 1024 + 4 * 1024 * 1024;
  if (setrlimit(RLIMIT_AS, &lim) != 0)
    _exit(10);
  /* qemu-user keeps RLIMIT_AS to itself (its own allocations would break):
   * no limit, nothing to test. */
  void *probe = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe != MAP_FAILED)
    _exit(77);

  int n = 0, r = 0;
  while (n < MAX && (r = tdl__stack_get(&p, TDL__STACK_DEFAULT, &s[n])) == 0)
    n++;
  if (r != -ENOMEM)
    _exit(11);
  if (n == 0 || n == MAX)
    _exit(12);
  /* A huge stack fails the same way, cleanly. */
  tdl__stack big;
  if (tdl__stack_get(&p, TDL__STACK_MAX, &big) != -ENOMEM)
    _exit(13);
  /* Still usable: give one back, get one again. */
  tdl__stack_put(&p, &s[--n]);
  if (tdl__stack_get(&p, TDL__STACK_DEFAULT, &s[n++]) != 0)
    _exit(14);

  while (n > 0)
    tdl__stack_put(&p, &s[--n]);
  tdl__stack_pool_destroy(&p);
  tdl__stack_stats st;
  tdl__stack_pool_stats(&p, &st);
  if (st.in_use != 0 || st.cached != 0)
    _exit(15);
  /* Nothing left mapped. */
  if (status_kb("VmSize:") != vm_before)
    _exit(16);
  if (count_vmas() != vmas_before)
    _exit(17);
}

static void test_enomem(void **state) {
  (void)state;
  int status = in_child(enomem_child, NULL);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77)
    T_SKIP("RLIMIT_AS is not enforced here");
  assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_get_put_reuse),
      cmocka_unit_test(test_put_descriptor_inside_stack),
      cmocka_unit_test(test_cache_is_bounded),
      cmocka_unit_test(test_bad_sizes),
      cmocka_unit_test(test_guard_page),
      cmocka_unit_test(test_used_high_water),
      cmocka_unit_test(test_used_large_stack),
      cmocka_unit_test(test_stash_failure_keeps_stack),
      cmocka_unit_test(test_trim_follows_demand),
      cmocka_unit_test(test_trim_returns_memory),
      cmocka_unit_test(test_loop_trims_when_idle),
      cmocka_unit_test(test_loop_gives_tables_back),
      cmocka_unit_test(test_hundred_thousand),
      cmocka_unit_test(test_enomem),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
