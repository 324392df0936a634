/* SPDX-License-Identifier: MIT */
/* The dump on a signal (tdl_fiber_dump_on_signal): every loop of a group
 * writes its fibers and their call chains, and goes on; a stalled loop is
 * named without holding the dump up; signals during fork() and while loops
 * are being freed neither deadlock nor touch freed memory; bad arguments
 * fail and change nothing.  The program is linked with ENABLE_EXPORTS
 * (-rdynamic) so that dladdr names its functions. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#include "base/fault.h"
#include "loop/loop_internal.h" /* tdl__watchdog_signal */

#include <sys/resource.h>

/* A child that ends with _exit or exec never writes gcov's counters: in a
 * coverage build (TDL_COVERAGE) it writes them itself first. */
#ifdef TDL_COVERAGE
void __gcov_dump(void);
#endif
static void child_counters_write(void)
{
#ifdef TDL_COVERAGE
  __gcov_dump();
#endif
}

#define DUMP_SIGNAL SIGUSR1

/* ---- the dump's output, in a file ---- */

static int out_fd(void)
{
  FILE *f = tmpfile();
  assert_non_null(f);
  int fd = dup(fileno(f));
  fclose(f);
  assert_true(fd >= 0);
  return fd;
}

/* What the file holds (NUL-terminated, the caller frees). */
static char *out_text(int fd)
{
  off_t size = lseek(fd, 0, SEEK_END);
  char *s = calloc(1, (size_t)size + 1);
  assert_non_null(s);
  assert_int_equal(pread(fd, s, (size_t)size, 0), size);
  return s;
}

static int count(const char *s, const char *what)
{
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what))
    n++;
  return n;
}

/* Wait (bounded: T_HANG) until the file holds `ends` complete dumps; returns the text. */
static char *wait_dumps(int fd, int ends)
{
  for (tdl_time_t end = t_clock() + T_HANG; t_clock() < end;) {
    char *s = out_text(fd);
    if (count(s, "treadle dump: end\n") >= ends)
      return s;
    free(s);
    usleep(10000);
  }
  fail_msg("no complete dump came");
  return NULL;
}

/* ---- fibers parked in known functions ---- */

/* Exported and not inlined: the chain must name it. */
__attribute__((noinline)) int dump_parks_here(void);
__attribute__((noinline)) int dump_parks_here(void)
{
  int e = tdl_sleep(TDL_FOREVER);
  __asm__ volatile("" ::: "memory"); /* no tail call: this frame stays */
  return e;
}

static void *parker(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)dump_parks_here();
}

static int parked_ready;

static void *group_main(void *arg)
{
  (void)arg;
  char name[24];
  snprintf(name, sizeof name, "parker-%d", tdl_group_index());
  tdl_fiber_t f;
  tdl_fiber_options o = {.name = name};
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), parker, NULL, &o), 0);
  tdl_fiber_yield(); /* let it park */
  __atomic_add_fetch(&parked_ready, 1, __ATOMIC_SEQ_CST);
  void *res;
  int e = tdl_fiber_join(f, &res, TDL_FOREVER); /* the group's stop cancels both */
  assert_true(e == 0 || e == -ECANCELED);
  return NULL;
}

static void test_group_dump(void **state)
{
  (void)state;
  int fd = out_fd();
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd), 0);
  parked_ready = 0;
  tdl_group *g;
  tdl_group_options go = {.loops = 3, .main = group_main};
  assert_int_equal(tdl_group_new(&g, &go), 0);
  while (__atomic_load_n(&parked_ready, __ATOMIC_SEQ_CST) < 3)
    usleep(1000);

  assert_int_equal(kill(getpid(), DUMP_SIGNAL), 0);
  char *s = wait_dumps(fd, 1);
  assert_non_null(strstr(s, "treadle dump (signal 10): 3 loops"));
  assert_int_equal(count(s, " fibers\n"), 3);
  for (int i = 0; i < 3; i++) {
    char want[64];
    snprintf(want, sizeof want, "fiber %d \"parker-%d\" parked on sleep", 2, i);
    assert_non_null(strstr(s, want));
  }
  assert_null(strstr(s, "did not answer"));
#ifdef TDL_FRAME_POINTERS
  /* Each parker's chain goes through the function it parked in. */
  assert_int_equal(count(s, " dump_parks_here+0x"), 3);
  assert_true(count(s, " tdl_sleep+0x") >= 3);
  assert_null(strstr(s, "need treadle built with frame pointers"));
#else
  assert_non_null(strstr(s, "call chains need treadle built with frame pointers"));
  assert_null(strstr(s, "#0 "));
#endif
  free(s);

  /* The program goes on: a second dump, then the group stops as usual. */
  assert_int_equal(kill(getpid(), DUMP_SIGNAL), 0);
  free(wait_dumps(fd, 2));
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  assert_int_equal(tdl_fiber_dump_on_signal(0, -1), 0);
  close(fd);
}

/* ---- a loop that does not answer ---- */


static int spin_stop;

__attribute__((noinline)) void dump_spins_here(void);
__attribute__((noinline)) void dump_spins_here(void)
{
  while (!__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE))
    tdl__cpu_relax();
}

static int spinning;

static void *spinner(void *arg)
{
  (void)arg;
  __atomic_store_n(&spinning, 1, __ATOMIC_RELEASE);
  dump_spins_here();
  return NULL;
}

static void *stalled_thread(void *arg)
{
  (void)arg;
  tdl_loop *loop = t_loop_new();
  tdl_watchdog_options wo = {.threshold = 10 * TDL_SEC, .name = "stuck"}; /* watched, never reported */
  assert_int_equal(tdl_watchdog_start(loop, &wo), 0);
  tdl_fiber_t f;
  tdl_fiber_options o = {.name = "spinner"};
  assert_int_equal(tdl_fiber_spawn(&f, loop, spinner, NULL, &o), 0);
  assert_int_equal(tdl_fiber_detach(loop, f), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  t_loop_free(loop);
  return NULL;
}

static void test_stalled_loop(void **state)
{
  (void)state;
  int fd = out_fd();
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd), 0);
  spin_stop = 0;
  spinning = 0;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, stalled_thread, NULL), 0);
  while (!__atomic_load_n(&spinning, __ATOMIC_ACQUIRE))
    usleep(1000);
  assert_int_equal(kill(getpid(), DUMP_SIGNAL), 0);
  char *s = wait_dumps(fd, 1);
  assert_non_null(strstr(s, " \"stuck\": did not answer within 1000.0 ms: away from its poll for "));
  assert_non_null(strstr(s, ", in fiber 1 \"spinner\"\n"));
  free(s);
  __atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  assert_int_equal(tdl_fiber_dump_on_signal(0, -1), 0);
  close(fd);
}

/* ---- signals during fork() ---- */

static int forks_done;
static int children_bad; /* children that did not exit 0, counted by the
                            forking thread, asserted on the test's */
static int child_status;

static void *child_main(void *arg)
{
  (void)arg;
  tdl_sleep(tdl_after(TDL_MSEC));
  return (void *)1;
}

/* A fiber that forks, again and again; each child makes a loop of its own
 * and raises the signal, which is off there. */
static void *forking_fiber(void *arg)
{
  (void)arg;
  for (int i = 0; i < 20; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      raise(DUMP_SIGNAL);
      void *res = NULL;
      int e = tdl_fiber_main(child_main, NULL, &res);
      if (e != 0 || res != (void *)1)
        _exit(1);
      /* Ends by exec: under valgrind an _exit would check the child for
       * leaks, and find the memory that only the parent's other threads
       * (gone here) pointed to. */
      execl("/bin/true", "true", (char *)NULL);
      _exit(0);
    }
    if (pid < 0) {
      children_bad++;
      continue;
    }
    int st = 0, r;
    /* Poll, so that the loop answers the dumps meanwhile. */
    while ((r = waitpid(pid, &st, WNOHANG)) == 0)
      tdl_sleep(tdl_after(TDL_MSEC));
    if (r != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      children_bad++;
      child_status = st;
    }
  }
  return NULL;
}

static void *forking_thread(void *arg)
{
  (void)arg;
  void *res;
  if (tdl_fiber_main(forking_fiber, NULL, &res) != 0)
    children_bad++;
  __atomic_store_n(&forks_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void test_signal_during_fork(void **state)
{
  (void)state;
  int fd = out_fd();
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd), 0);
  forks_done = 0;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, forking_thread, NULL), 0);
  int sent = 0;
  while (!__atomic_load_n(&forks_done, __ATOMIC_ACQUIRE)) {
    assert_int_equal(kill(getpid(), DUMP_SIGNAL), 0);
    sent++;
    usleep(500);
  }
  pthread_join(t, NULL);
  assert_true(sent > 0);
  if (children_bad)
    fail_msg("%d children failed, the last with status %#x", children_bad, child_status);
  /* One more, now that nothing forks: it completes. */
  char *before = out_text(fd);
  int ends = count(before, "treadle dump: end\n");
  free(before);
  assert_int_equal(kill(getpid(), DUMP_SIGNAL), 0);
  free(wait_dumps(fd, ends + 1));
  assert_int_equal(tdl_fiber_dump_on_signal(0, -1), 0);
  close(fd);
}

/* ---- signals while loops stop and are freed ---- */

static int churn_done;
static int churn_error; /* the threads' first failure, asserted on the test's */

static void *short_fiber(void *arg)
{
  (void)arg;
  for (int i = 0; i < 3; i++)
    tdl_fiber_yield();
  return NULL;
}

/* Loops made, run and freed over and over, each with a few fibers. */
static void *churning_thread(void *arg)
{
  (void)arg;
  for (int i = 0; i < 300; i++) {
    tdl_loop *loop = NULL;
    tdl_fiber_options o = {.name = "short", .detached = true};
    int e = tdl_loop_new(&loop, NULL);
    for (int j = 0; j < 3 && e == 0; j++)
      e = tdl_fiber_spawn(NULL, loop, short_fiber, NULL, &o);
    if (e == 0)
      e = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
    if (e == 0)
      e = tdl_loop_free(loop);
    if (e != 0)
      __atomic_store_n(&churn_error, e, __ATOMIC_RELAXED);
  }
  __atomic_add_fetch(&churn_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void test_signal_while_loops_are_freed(void **state)
{
  (void)state;
  int fd = out_fd();
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd), 0);
  churn_done = 0;
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, churning_thread, NULL), 0);
  while (__atomic_load_n(&churn_done, __ATOMIC_ACQUIRE) < 2) {
    assert_int_equal(kill(getpid(), DUMP_SIGNAL), 0);
    usleep(200);
  }
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  assert_int_equal(churn_error, 0);
  char *before = out_text(fd);
  int ends = count(before, "treadle dump: end\n");
  free(before);
  assert_int_equal(kill(getpid(), DUMP_SIGNAL), 0);
  char *s = wait_dumps(fd, ends + 1);
  /* Every loop is gone: the last dump found none (its header, then its end). */
  const char *last = s, *p;
  while ((p = strstr(last + 1, "treadle dump (signal ")) != NULL)
    last = p;
  const char *eol = strchr(last, '\n');
  assert_non_null(eol);
  assert_non_null(strstr(last, "): 0 loops"));
  assert_true(strstr(last, "): 0 loops") < eol);
  assert_string_equal(eol + 1, "treadle dump: end\n");
  free(s);
  assert_int_equal(tdl_fiber_dump_on_signal(0, -1), 0);
  close(fd);
}

/* ---- bad input and misuse ---- */

static volatile sig_atomic_t own_handler_ran;
static void own_handler(int sig)
{
  (void)sig;
  own_handler_ran = 1;
}

static void test_bad_input(void **state)
{
  (void)state;
  int fd = out_fd();
  int bad[] = {-1, 0x7fff, NSIG, SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT, SIGPIPE,
               SIGCHLD};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(tdl_fiber_dump_on_signal(bad[i], fd), -EINVAL);

  /* The watchdog's own signal, once it has one. */
  tdl_loop *loop = t_loop_new();
  assert_int_equal(tdl_watchdog_start(loop, NULL), 0);
  int wsig = tdl__watchdog_signal();
  if (wsig)
    assert_int_equal(tdl_fiber_dump_on_signal(wsig, fd), -EINVAL);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  t_loop_free(loop);

  /* fds that cannot be written. */
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, -1), -EBADF);
  int closed = dup(fd);
  close(closed);
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, closed), -EBADF);
  int ro = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_true(ro >= 0);
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, ro), -EBADF);
  close(ro);

  /* A failed call changed nothing: the program's handler still runs. */
  struct sigaction sa = {.sa_handler = own_handler}, old;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(DUMP_SIGNAL, &sa, &old), 0);
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, -1), -EBADF);
  own_handler_ran = 0;
  raise(DUMP_SIGNAL);
  assert_int_equal(own_handler_ran, 1);

  /* Armed, the handler is treadle's; off again, the program's is back.
   * Turning off twice is harmless. */
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd), 0);
  own_handler_ran = 0;
  raise(DUMP_SIGNAL);
  free(wait_dumps(fd, 1));
  assert_int_equal(own_handler_ran, 0);
  /* Arming another signal gives the first one back. */
  assert_int_equal(tdl_fiber_dump_on_signal(SIGUSR2, fd), 0);
  raise(DUMP_SIGNAL);
  assert_int_equal(own_handler_ran, 1);
  assert_int_equal(tdl_fiber_dump_on_signal(0, -1), 0);
  assert_int_equal(tdl_fiber_dump_on_signal(0, -1), 0);
  assert_int_equal(sigaction(DUMP_SIGNAL, &old, NULL), 0);
  close(fd);
}

/* A signal the C library keeps for itself (glibc's and musl's 32 and 33,
 * under SIGRTMIN): -EINVAL, and nothing changed, armed or not. */
static void test_signal_kept_by_libc(void **state)
{
  (void)state;
  int fd = out_fd();
  /* Not armed: the program's handler stays. */
  struct sigaction sa = {.sa_handler = own_handler}, old;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(DUMP_SIGNAL, &sa, &old), 0);
  for (int sig = 32; sig <= 33; sig++)
    assert_int_equal(tdl_fiber_dump_on_signal(sig, fd), -EINVAL);
  own_handler_ran = 0;
  raise(DUMP_SIGNAL);
  assert_int_equal(own_handler_ran, 1);
  /* Armed: it stays armed on its signal and fd. */
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd), 0);
  assert_int_equal(tdl_fiber_dump_on_signal(32, fd), -EINVAL);
  own_handler_ran = 0;
  raise(DUMP_SIGNAL);
  free(wait_dumps(fd, 1));
  assert_int_equal(own_handler_ran, 0);
  assert_int_equal(tdl_fiber_dump_on_signal(0, -1), 0);
  assert_int_equal(sigaction(DUMP_SIGNAL, &old, NULL), 0);
  close(fd);
}

#ifdef TDL_FAULTS
/* The dump's thread cannot be started: -EAGAIN, nothing changed; the next
 * call starts it. */
static void test_thread_start_fails(void **state)
{
  (void)state;
  int fd = out_fd();
  struct sigaction sa = {.sa_handler = own_handler}, old;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(DUMP_SIGNAL, &sa, &old), 0);
  tdl__fault_arm(1, false);
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd), -EAGAIN);
  tdl__fault_arm(0, false);
  assert_true(tdl__fault_fired());
  own_handler_ran = 0;
  raise(DUMP_SIGNAL);
  assert_int_equal(own_handler_ran, 1);
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd), 0);
  raise(DUMP_SIGNAL);
  free(wait_dumps(fd, 1));
  assert_int_equal(tdl_fiber_dump_on_signal(0, -1), 0);
  assert_int_equal(sigaction(DUMP_SIGNAL, &old, NULL), 0);
  close(fd);
}
#endif

/* ---- loops that cannot or do not answer ---- */

static int in_callback, callback_stop;

static void stuck_callback(tdl_loop *loop, tdl_timer *t)
{
  (void)loop, (void)t;
  __atomic_store_n(&in_callback, 1, __ATOMIC_RELEASE);
  while (!__atomic_load_n(&callback_stop, __ATOMIC_ACQUIRE))
    tdl__cpu_relax();
}

static void *quick_fiber(void *arg)
{
  return arg;
}

/* A loop that is reachable (its first fiber came while the dump was armed)
 * and watched, stuck in a timer's callback. */
static void *callback_thread(void *arg)
{
  (void)arg;
  tdl_loop *loop = t_loop_new();
  tdl_watchdog_options wo = {.threshold = 10 * TDL_SEC, .name = "in-timer"};
  assert_int_equal(tdl_watchdog_start(loop, &wo), 0);
  assert_int_equal(tdl_fiber_spawn(NULL, loop, quick_fiber, NULL, &(tdl_fiber_options){.detached = true}), 0);
  tdl_timer t;
  tdl_timer_init(&t, stuck_callback, NULL);
  assert_int_equal(tdl_timer_start(loop, &t, 0, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  t_loop_free(loop);
  return NULL;
}

/* In one dump: a loop made before the dump was armed (no port: counted in
 * the header, not asked), a reachable loop whose thread does not run it
 * (named as not answering, no watchdog to say more), and a watched loop
 * stuck in a callback (named with how long it has been away, in no fiber). */
static void test_loops_that_do_not_answer(void **state)
{
  (void)state;
  tdl_loop *before = t_loop_new();
  assert_int_equal(tdl_fiber_spawn(NULL, before, quick_fiber, NULL, &(tdl_fiber_options){.detached = true}), 0);
  int fd = out_fd();
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd), 0);
  tdl_loop *idle = t_loop_new();
  assert_int_equal(tdl_fiber_spawn(NULL, idle, quick_fiber, NULL, &(tdl_fiber_options){.detached = true}), 0);
  in_callback = callback_stop = 0;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, callback_thread, NULL), 0);
  while (!__atomic_load_n(&in_callback, __ATOMIC_ACQUIRE))
    usleep(1000);
  assert_int_equal(kill(getpid(), DUMP_SIGNAL), 0);
  char *s = wait_dumps(fd, 1);
  assert_non_null(strstr(s, "treadle dump (signal 10): 2 loops, and 1 made before the dump was armed that have no port"));
  char want[128];
  snprintf(want, sizeof want, "loop 0x%llx: did not answer within 1000.0 ms (stuck in a fiber or a callback, or not in tdl_loop_run)\n",
           (unsigned long long)(uintptr_t)idle);
  if (!strstr(s, want))
    fail_msg("no '%s' in:\n%s", want, s);
  const char *cb = strstr(s, " \"in-timer\": did not answer within 1000.0 ms: away from its poll for ");
  assert_non_null(cb);
  const char *why = strstr(cb, ", in a callback (no fiber)\n");
  assert_non_null(why);
  assert_true(why < strchr(cb, '\n'));
  assert_null(strstr(s, "fibers\n")); /* no loop wrote its block */
  free(s);
  __atomic_store_n(&callback_stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  assert_int_equal(tdl_fiber_dump_on_signal(0, -1), 0);
  assert_int_equal(tdl_loop_run(idle, TDL_LOOP_DEFAULT), 0);
  t_loop_free(idle);
  assert_int_equal(tdl_loop_run(before, TDL_LOOP_DEFAULT), 0);
  t_loop_free(before);
  close(fd);
}

/* ---- after fork ---- */

/* In the child the dump is off: the signal writes nothing, to the parent's
 * fd or anywhere, until the child arms it anew, which needs a pipe of its
 * own (-EMFILE without a free fd, nothing changed) and then works. */
static int forked_child(int parent_fd)
{
  raise(DUMP_SIGNAL);
  usleep(20000);
  char *s = out_text(parent_fd);
  bool wrote = strstr(s, "treadle dump") != NULL;
  free(s);
  if (wrote)
    return 1;
  int fd = out_fd();
  struct rlimit lim, none;
  getrlimit(RLIMIT_NOFILE, &lim);
  none = lim;
  /* No fd free under the limit: the lowest free one is the limit. */
  none.rlim_cur = 0;
  while (fcntl((int)none.rlim_cur, F_GETFD) >= 0)
    none.rlim_cur++;
  if (setrlimit(RLIMIT_NOFILE, &none) != 0)
    return 2;
  int e = tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd);
  setrlimit(RLIMIT_NOFILE, &lim);
  if (e != -EMFILE)
    return 3;
  raise(DUMP_SIGNAL);
  usleep(20000);
  if (lseek(fd, 0, SEEK_END) != 0)
    return 4;
  if (tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd) != 0)
    return 5;
  raise(DUMP_SIGNAL);
  for (tdl_time_t end = t_clock() + T_HANG; t_clock() < end; usleep(1000)) {
    s = out_text(fd);
    bool done = strstr(s, "treadle dump (signal 10): 0 loops") && strstr(s, "treadle dump: end\n");
    free(s);
    if (done)
      return tdl_fiber_dump_on_signal(0, -1) == 0 ? 0 : 6;
  }
  return 7;
}

static void test_after_fork(void **state)
{
  (void)state;
#if defined(__SANITIZE_THREAD__)
  T_SKIP("ThreadSanitizer starts no thread in a child forked from a process with threads");
#endif
  if (getenv("TDL_QEMU_USER"))
    T_SKIP("qemu-user's emulation of a fork from threads fails its own asserts now and then");
  int fd = out_fd();
  assert_int_equal(tdl_fiber_dump_on_signal(DUMP_SIGNAL, fd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int rc = forked_child(fd);
    child_counters_write();
    if (rc == 0)
      execl("/bin/true", "true", (char *)NULL); /* as in test_signal_during_fork */
    _exit(rc);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("child status %#x", st);
  /* The parent's own dump still works, and the child wrote nothing here. */
  char *s = out_text(fd);
  assert_null(strstr(s, "treadle dump"));
  free(s);
  assert_int_equal(kill(getpid(), DUMP_SIGNAL), 0);
  free(wait_dumps(fd, 1));
  assert_int_equal(tdl_fiber_dump_on_signal(0, -1), 0);
  close(fd);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_group_dump),
      cmocka_unit_test(test_stalled_loop),
      cmocka_unit_test(test_signal_during_fork),
      cmocka_unit_test(test_signal_while_loops_are_freed),
      cmocka_unit_test(test_signal_kept_by_libc),
#ifdef TDL_FAULTS
      cmocka_unit_test(test_thread_start_fails),
#endif
      cmocka_unit_test(test_loops_that_do_not_answer),
      cmocka_unit_test(test_after_fork),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
