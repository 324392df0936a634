/* SPDX-License-Identifier: MIT */
/* Tests for stack-overflow diagnosis (src/overflow.h).  Every fault happens
 * in a forked child; the parent checks how it died and what it printed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "fiber/overflow.h"
#include "fiber/stack.h"
#include "fiber/switch.h"

/* ---- running a child with stderr captured ---- */

typedef struct child_result {
  int status;
  char err[4096];
} child_result;

static void run_child(void (*fn)(void), child_result *res) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    /* The faults are the point: cmocka's inherited handlers must not see
     * them.  (Under ASan this also removes ASan's handler: the child's
     * "previous handler" is then the default action, as in a plain build.) */
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    fn();
    _exit(0);
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t r;
  while (len + 1 < sizeof res->err &&
         ((r = read(fds[0], res->err + len, sizeof res->err - 1 - len)) > 0 ||
          (r < 0 && errno == EINTR)))
    if (r > 0)
      len += (size_t)r;
  res->err[len] = 0;
  close(fds[0]);
  assert_int_equal(waitpid(pid, &res->status, 0), pid);
}

static void assert_died_of(const child_result *res, int sig) {
  if (!WIFSIGNALED(res->status) || WTERMSIG(res->status) != sig)
    fail_msg("child status %#x, expected death by signal %d; stderr:\n%s", res->status, sig,
             res->err);
}

/* ---- a fiber that overflows ---- */

static tdl__ctx main_ctx, fiber_ctx;
static tdl__stack_info fiber_info;
static volatile int depth_limit = 1 << 30;

static int __attribute__((noinline)) recurse(int n) {
  volatile char frame[200];
  frame[0] = (char)n;
  if (n >= depth_limit)
    return 0;
  return recurse(n + 1) + frame[0]; /* not a tail call */
}

static void overflow_entry(void *arg) {
  tdl__switch_entered(&fiber_ctx);
  recurse((int)(uintptr_t)arg);
  _exit(20); /* unreachable: the stack is far too small for that depth */
}

/* Start a fiber on a fresh stack the way the scheduler will: describe it,
 * publish the description, switch. */
static void run_overflowing_fiber(uint64_t id, const char *name) {
  static tdl__stack_pool pool;
  tdl__stack s;
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  tdl__stack_pool_init(&pool, 4);
  if (tdl__stack_get(&pool, TDL__STACK_DEFAULT, &s) != 0 || s.guard == 0)
    _exit(11);
  tdl__stack_info_init(&fiber_info, &s, id, name);
  tdl__ctx_init(&fiber_ctx, s.lo, s.size, overflow_entry);
  tdl__running_stack = &fiber_info;
  tdl__switch(&main_ctx, &fiber_ctx, NULL);
  _exit(12);
}

static void child_overflow_named(void) {
  run_overflowing_fiber(7, "worker");
}

static void test_overflow_reported(void **state) {
  (void)state;
  child_result res;
  run_child(child_overflow_named, &res);
  assert_died_of(&res, SIGSEGV);
  const char *want = "treadle: fiber 7 \"worker\" overflowed its 65536-byte stack (fault at 0x";
  char *line = strstr(res.err, want);
  if (!line)
    fail_msg("no overflow line in child's stderr:\n%s", res.err);
  /* Exactly one line, complete. */
  char *nl = strchr(line, '\n');
  assert_non_null(nl);
  assert_memory_equal(nl - 1, ")", 1);
  assert_null(strstr(nl, "treadle:"));
}

static void child_overflow_unnamed(void) {
  run_overflowing_fiber(UINT64_MAX, NULL);
}

static void test_overflow_unnamed(void **state) {
  (void)state;
  child_result res;
  run_child(child_overflow_unnamed, &res);
  assert_died_of(&res, SIGSEGV);
  if (!strstr(res.err, "treadle: fiber 18446744073709551615 overflowed its 65536-byte stack"))
    fail_msg("no overflow line in child's stderr:\n%s", res.err);
}

/* ---- faults that are not ours ---- */

static char *prot_none_page(void) {
  char *p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    _exit(30);
  return p;
}

/* The "previous" handler: says so, then lets the fault kill the process.
 * (Dying rather than exiting keeps the verdict independent of an exit code
 * Valgrind would override for the deliberate bad access.) */
static void on_segv_previous(int sig, siginfo_t *si, void *uc) {
  (void)si;
  (void)uc;
  static const char msg[] = "previous handler ran\n";
  ssize_t r = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)r;
  signal(sig, SIG_DFL);
}

/* A fault outside any guard, with a fiber description published, goes to
 * the handler that was installed before treadle's. */
static void child_foreign_fault_chained(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv_previous;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  static const tdl__stack_info fake = {.guard_lo = (const char *)4096,
                                       .guard_hi = (const char *)8192,
                                       .id = 1,
                                       .name = "x",
                                       .size = 1};
  tdl__running_stack = &fake;
  *(volatile char *)prot_none_page() = 1;
  _exit(31);
}

static void test_foreign_fault_chained(void **state) {
  (void)state;
  child_result res;
  run_child(child_foreign_fault_chained, &res);
  assert_died_of(&res, SIGSEGV);
  assert_non_null(strstr(res.err, "previous handler ran\n"));
  assert_null(strstr(res.err, "treadle:"));
}

/* With no previous handler, a foreign fault gets the default action, and
 * treadle says nothing. */
static void child_foreign_fault_default(void) {
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  *(volatile char *)prot_none_page() = 1;
  _exit(31);
}

static void test_foreign_fault_default(void **state) {
  (void)state;
  child_result res;
  run_child(child_foreign_fault_default, &res);
  assert_died_of(&res, SIGSEGV);
  assert_null(strstr(res.err, "treadle:"));
}

/* SIGSEGV sent with kill() carries no fault address: never claimed, even
 * while a fiber runs, and still fatal. */
static void child_killed(void) {
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  static const tdl__stack_info fake = {.guard_lo = NULL,
                                       .guard_hi = (const char *)UINTPTR_MAX,
                                       .id = 1,
                                       .name = "x",
                                       .size = 1};
  tdl__running_stack = &fake;
  kill(getpid(), SIGSEGV);
  _exit(31);
}

static void test_kill_not_claimed(void **state) {
  (void)state;
  child_result res;
  run_child(child_killed, &res);
  assert_died_of(&res, SIGSEGV);
  assert_null(strstr(res.err, "treadle:"));
}

/* ---- per-thread setup ---- */

static void *altstack_thread(void *arg) {
  (void)arg;
  stack_t before, during, after;
  sigaltstack(NULL, &before);
  if (tdl__overflow_thread_init() != 0)
    return "init failed";
  if (tdl__overflow_thread_init() != 0) /* nested */
    return "nested init failed";
  sigaltstack(NULL, &during);
  if (during.ss_flags & SS_DISABLE)
    return "no alternate signal stack after init";
  if (during.ss_size < 16384)
    return "alternate signal stack too small";
  tdl__overflow_thread_cleanup();
  sigaltstack(NULL, &after);
  if (after.ss_sp != during.ss_sp || (after.ss_flags & SS_DISABLE))
    return "inner cleanup removed the signal stack";
  tdl__overflow_thread_cleanup();
  sigaltstack(NULL, &after);
  /* Back to what the thread had: none, or (under ASan) ASan's own. */
  if ((after.ss_flags & SS_DISABLE) != (before.ss_flags & SS_DISABLE))
    return "cleanup did not restore the thread's signal stack state";
  if (!(before.ss_flags & SS_DISABLE) && after.ss_sp != before.ss_sp)
    return "cleanup replaced a signal stack it did not install";
  return NULL;
}

static void test_thread_init_cleanup(void **state) {
  (void)state;
  pthread_t t;
  void *err;
  assert_int_equal(pthread_create(&t, NULL, altstack_thread, NULL), 0);
  assert_int_equal(pthread_join(t, &err), 0);
  if (err)
    fail_msg("%s", (const char *)err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_overflow_reported),
      cmocka_unit_test(test_overflow_unnamed),
      cmocka_unit_test(test_foreign_fault_chained),
      cmocka_unit_test(test_foreign_fault_default),
      cmocka_unit_test(test_kill_not_claimed),
      cmocka_unit_test(test_thread_init_cleanup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
