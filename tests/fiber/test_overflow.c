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
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "base/fault.h"
#include "fiber/overflow.h"
#include "fiber/stack.h"
#include "fiber/switch.h"

/* gcov writes a process's counters when it exits; these children die of a
 * signal instead, so a coverage build (TDL_COVERAGE) would never hear of the
 * fault handler, which only they run.  There a child starts with its counters
 * zeroed and, where a handler of the test runs after treadle's (the chained
 * tests below), writes them out before the death that follows. */
#ifdef TDL_COVERAGE
void __gcov_dump(void);
void __gcov_reset(void);
#endif

static void child_counters_reset(void) {
#ifdef TDL_COVERAGE
  __gcov_reset();
#endif
}

static void child_counters_write(void) {
#ifdef TDL_COVERAGE
  __gcov_dump();
#endif
}

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
    child_counters_reset();
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

/* ---- treadle's handler under a program's own ----
 *
 * A program (a crash reporter, a language runtime) that installs its own
 * SIGSEGV handler after treadle's, and hands each fault on to the handler
 * it replaced, as a well-behaved one does.  treadle's must then do what it
 * does when the kernel calls it directly: report an overflow of the running
 * fiber, or pass a fault that is not its own on to the handler before it;
 * and the fault stays fatal.  (The program's handler is also where a
 * coverage build writes the child's counters: after treadle's returned.) */

static struct sigaction replaced; /* treadle's, as the program found it */

static void program_handler(int sig, siginfo_t *si, void *uc) {
  replaced.sa_sigaction(sig, si, uc);
  child_counters_write();
  /* Returning runs the faulting access again, under whatever treadle's
   * handler left in place; a signal sent with kill() and raised again
   * there is delivered once this handler returns. */
}

/* Called in a child after tdl__overflow_thread_init. */
static void install_program_handler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = program_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK; /* an overflowed stack has no room left */
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &replaced) != 0 || !(replaced.sa_flags & SA_SIGINFO))
    _exit(41);
}

static bool chained; /* the child puts the program's handler over treadle's */

/* Start a fiber on a fresh stack the way the scheduler will: describe it,
 * publish the description, switch. */
static void run_overflowing_fiber(uint64_t id, const char *name) {
  static tdl__stack_pool pool;
  tdl__stack s;
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  if (chained)
    install_program_handler();
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

/* ---- the same, with a program's handler over treadle's ---- */

static void test_chained_overflow_reported(void **state) {
  (void)state;
  chained = true;
  child_result res;
  run_child(child_overflow_named, &res);
  chained = false;
  assert_died_of(&res, SIGSEGV);
  if (!strstr(res.err, "treadle: fiber 7 \"worker\" overflowed its 65536-byte stack (fault at 0x"))
    fail_msg("no overflow line in child's stderr:\n%s", res.err);
}

/* A name is the caller's: it is clipped to 64 bytes ("..." after), and
 * what would break the line or its quotes (control bytes, non-ASCII, a
 * double quote) is written as '?'. */
static void child_overflow_odd_name(void) {
  static char name[80];
  memcpy(name, "a\"b\tc\x7f\xc3", 7);
  memset(name + 7, 'x', 70);
  run_overflowing_fiber(0, name);
}

static void test_chained_overflow_odd_name(void **state) {
  (void)state;
  chained = true;
  child_result res;
  run_child(child_overflow_odd_name, &res);
  chained = false;
  assert_died_of(&res, SIGSEGV);
  char want[160];
  snprintf(want, sizeof want, "treadle: fiber 0 \"a?b?c??%.57s...\" overflowed its 65536-byte stack (fault at 0x",
           "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
  if (!strstr(res.err, want))
    fail_msg("want '%s' in child's stderr:\n%s", want, res.err);
}

static void test_chained_overflow_unnamed(void **state) {
  (void)state;
  chained = true;
  child_result res;
  run_child(child_overflow_unnamed, &res);
  chained = false;
  assert_died_of(&res, SIGSEGV);
  if (!strstr(res.err, "treadle: fiber 18446744073709551615 overflowed its 65536-byte stack (fault at 0x"))
    fail_msg("no overflow line in child's stderr:\n%s", res.err);
}

/* A fault outside the guard, no handler before treadle's: the default
 * action, and not a word from treadle. */
static void child_chained_foreign_default(void) {
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  install_program_handler();
  *(volatile char *)prot_none_page() = 1;
  _exit(31);
}

static void test_chained_foreign_default(void **state) {
  (void)state;
  child_result res;
  run_child(child_chained_foreign_default, &res);
  assert_died_of(&res, SIGSEGV);
  assert_null(strstr(res.err, "treadle:"));
}

/* kill() while a fiber runs: not claimed, still fatal. */
static void child_chained_killed(void) {
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  install_program_handler();
  static const tdl__stack_info fake = {.guard_lo = NULL, .guard_hi = (const char *)UINTPTR_MAX, .id = 1, .size = 1};
  tdl__running_stack = &fake;
  kill(getpid(), SIGSEGV);
  _exit(31);
}

static void test_chained_kill_default(void **state) {
  (void)state;
  child_result res;
  run_child(child_chained_killed, &res);
  assert_died_of(&res, SIGSEGV);
  assert_null(strstr(res.err, "treadle:"));
}

/* A foreign fault with a SA_SIGINFO handler before treadle's: that one runs. */
static void child_chained_foreign_previous(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv_previous;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  install_program_handler();
  *(volatile char *)prot_none_page() = 1;
  _exit(31);
}

static void test_chained_foreign_previous(void **state) {
  (void)state;
  child_result res;
  run_child(child_chained_foreign_previous, &res);
  assert_died_of(&res, SIGSEGV);
  assert_non_null(strstr(res.err, "previous handler ran\n"));
  assert_null(strstr(res.err, "treadle:"));
}

/* A handler before treadle's that takes the signal number only (no
 * SA_SIGINFO) is called with it, once. */
static void on_segv_plain(int sig) {
  static const char msg[] = "plain handler ran\n";
  ssize_t r = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)r;
  signal(sig, SIG_DFL);
}

static void child_previous_plain(void) {
  signal(SIGSEGV, on_segv_plain);
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  install_program_handler();
  *(volatile char *)prot_none_page() = 1;
  _exit(31);
}

static void test_previous_plain_handler(void **state) {
  (void)state;
  child_result res;
  run_child(child_previous_plain, &res);
  assert_died_of(&res, SIGSEGV);
  const char *ran = strstr(res.err, "plain handler ran\n");
  assert_non_null(ran);
  assert_null(strstr(ran + 1, "plain handler ran\n"));
  assert_null(strstr(res.err, "treadle:"));
}

/* SIGSEGV ignored before treadle's handler came: a SIGSEGV sent with
 * kill() is ignored, as it would have been, and the process lives on... */
static void child_ignored_kill(void) {
  signal(SIGSEGV, SIG_IGN);
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  install_program_handler();
  kill(getpid(), SIGSEGV);
  static const char msg[] = "lived on\n";
  ssize_t r = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)r;
  child_counters_write();
  _exit(0);
}

static void test_ignored_kill_ignored(void **state) {
  (void)state;
  child_result res;
  run_child(child_ignored_kill, &res);
  if (!WIFEXITED(res.status) || WEXITSTATUS(res.status) != 0)
    fail_msg("child status %#x, expected exit 0; stderr:\n%s", res.status, res.err);
  assert_non_null(strstr(res.err, "lived on\n"));
  assert_null(strstr(res.err, "treadle:"));
}

/* ...but a real fault cannot be ignored: the kernel's default action. */
static void child_ignored_fault(void) {
  signal(SIGSEGV, SIG_IGN);
  if (tdl__overflow_thread_init() != 0)
    _exit(10);
  install_program_handler();
  *(volatile char *)prot_none_page() = 1;
  _exit(31);
}

static void test_ignored_fault_fatal(void **state) {
  (void)state;
  child_result res;
  run_child(child_ignored_fault, &res);
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

/* A thread that has an alternate signal stack of its own (a runtime's, a
 * sanitizer's) keeps it: init uses it as it is, cleanup leaves it there. */
static void *own_altstack_thread(void *arg) {
  (void)arg;
  static char mem[64 * 1024];
  stack_t mine = {.ss_sp = mem, .ss_size = sizeof mem, .ss_flags = 0}, before, cur;
  if (sigaltstack(&mine, &before) != 0)
    return "sigaltstack failed";
  char *why = NULL;
  if (tdl__overflow_thread_init() != 0)
    why = "init failed";
  else if (sigaltstack(NULL, &cur) != 0 || cur.ss_sp != mem || (cur.ss_flags & SS_DISABLE))
    why = "init replaced the thread's signal stack";
  tdl__overflow_thread_cleanup();
  if (!why && (sigaltstack(NULL, &cur) != 0 || cur.ss_sp != mem || (cur.ss_flags & SS_DISABLE)))
    why = "cleanup removed the thread's own signal stack";
  if (before.ss_flags & SS_DISABLE)
    before = (stack_t){.ss_flags = SS_DISABLE};
  sigaltstack(&before, NULL);
  return why;
}

static void test_thread_keeps_own_altstack(void **state) {
  (void)state;
  pthread_t t;
  void *err;
  assert_int_equal(pthread_create(&t, NULL, own_altstack_thread, NULL), 0);
  assert_int_equal(pthread_join(t, &err), 0);
  if (err)
    fail_msg("%s", (const char *)err);
}

#ifdef TDL_FAULTS
/* No memory for the signal stack: -ENOMEM, the thread is left as it was,
 * and a later call (memory back) succeeds. */
static void *altstack_enomem_thread(void *arg) {
  (void)arg;
  stack_t before, cur;
  sigaltstack(NULL, &before);
  if (!(before.ss_flags & SS_DISABLE))
    return (void *)"skip"; /* it has one (ASan's): init maps nothing */
  tdl__fault_arm(1, false);
  int e = tdl__overflow_thread_init();
  tdl__fault_arm(0, false);
  if (e != -ENOMEM)
    return (void *)"init did not fail with -ENOMEM";
  sigaltstack(NULL, &cur);
  if (!(cur.ss_flags & SS_DISABLE))
    return (void *)"a failed init left a signal stack";
  tdl__overflow_thread_cleanup(); /* nothing to undo: harmless */
  if (tdl__overflow_thread_init() != 0)
    return (void *)"init after the failure failed";
  sigaltstack(NULL, &cur);
  if (cur.ss_flags & SS_DISABLE)
    return (void *)"no signal stack after init";
  tdl__overflow_thread_cleanup();
  sigaltstack(NULL, &cur);
  if (!(cur.ss_flags & SS_DISABLE))
    return (void *)"cleanup left the signal stack";
  return NULL;
}

static void test_thread_init_enomem(void **state) {
  (void)state;
  pthread_t t;
  void *err;
  assert_int_equal(pthread_create(&t, NULL, altstack_enomem_thread, NULL), 0);
  assert_int_equal(pthread_join(t, &err), 0);
  if (err && strcmp(err, "skip") == 0)
    T_SKIP("the thread has an alternate signal stack already (a sanitizer's)");
  else if (err)
    fail_msg("%s", (const char *)err);
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_overflow_reported),
      cmocka_unit_test(test_overflow_unnamed),
      cmocka_unit_test(test_foreign_fault_chained),
      cmocka_unit_test(test_foreign_fault_default),
      cmocka_unit_test(test_kill_not_claimed),
      cmocka_unit_test(test_chained_overflow_reported),
      cmocka_unit_test(test_chained_overflow_odd_name),
      cmocka_unit_test(test_chained_overflow_unnamed),
      cmocka_unit_test(test_chained_foreign_default),
      cmocka_unit_test(test_chained_kill_default),
      cmocka_unit_test(test_chained_foreign_previous),
      cmocka_unit_test(test_previous_plain_handler),
      cmocka_unit_test(test_ignored_kill_ignored),
      cmocka_unit_test(test_ignored_fault_fatal),
      /* Last: these install treadle's handler in this process, which the
       * children above must each install for themselves. */
      cmocka_unit_test(test_thread_init_cleanup),
      cmocka_unit_test(test_thread_keeps_own_altstack),
#ifdef TDL_FAULTS
      cmocka_unit_test(test_thread_init_enomem),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
