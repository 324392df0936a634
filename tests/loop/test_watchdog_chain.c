/* SPDX-License-Identifier: MIT */
/* The watchdog's call chain of a stall (tdl_watchdog_report_chain): it
 * names the function a fiber or a callback spins in, the default report
 * prints it under its line, it is "" outside a callback, and a program that
 * takes the watchdog's signal over keeps it (the report then says why it
 * has no chain).  The spinning functions end when the report has been
 * seen, so no timing is assumed.  On a loaded machine a stall can be
 * noticed before the spin begins (the loop's own work after its poll took
 * the threshold): that report names no spin, and a stall is reported once
 * per absence from the poll, so the spin then ends and the loop polls again
 * for a new try, up to ATTEMPTS times.  Linked with ENABLE_EXPORTS (-rdynamic) so
 * that dladdr names the test's functions. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#include "loop/loop_internal.h" /* tdl__watchdog_signal */

#define THRESHOLD (20 * TDL_MSEC)

/* Under ThreadSanitizer a signal's handler runs when the thread next enters
 * the sanitizer's runtime (at the spin's atomic load), often with registers
 * inside that runtime, which keeps no frame pointers: there the chain is
 * taken (and its crossing of threads checked) but not what it names. */
#ifdef TDL_TSAN
#define NAMES_CHECKED 0
#else
#define NAMES_CHECKED 1
#endif
#define assert_names(chain, what)                                                                                     \
  do {                                                                                                                \
    if (NAMES_CHECKED)                                                                                                \
      assert_non_null(strstr((chain), (what)));                                                                       \
  } while (0)

#define ATTEMPTS 20

static int spin_stop;      /* the report we wait for came: the spin ends for good */
static int retries;        /* reports that did not name the spin: this try ends */
static const char *want;   /* what that report's chain names; NULL: any report */
static char chain[8192];   /* the report's chain (or the last one, if none did) */
static int reports;

static void capture(const tdl_watchdog_report *r, void *data)
{
  (void)data;
  const char *c = tdl_watchdog_report_chain(r);
  __atomic_add_fetch(&reports, 1, __ATOMIC_ACQ_REL);
  if (__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE))
    return;
  snprintf(chain, sizeof chain, "%s", c);
  if (!want || !NAMES_CHECKED || strstr(c, want))
    __atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
  else
    __atomic_add_fetch(&retries, 1, __ATOMIC_ACQ_REL);
}

static void reset(const char *wanted)
{
  spin_stop = 0;
  retries = 0;
  reports = 0;
  want = wanted;
  chain[0] = '\0';
}

/* Spin until the report came, or one that names no spin (then this try
 * ends), or, should that report have come before the spin began, until a
 * bound far above any threshold (then the try ends too: no report comes
 * twice for one absence from the poll). */
static bool spin_ends(int seen, const struct timespec *t0)
{
  if (__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE) || __atomic_load_n(&retries, __ATOMIC_ACQUIRE) != seen)
    return true;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec - t0->tv_sec > 2;
}

/* Exported and not inlined: the chain must name them. */
/* The spin's own instructions, no call: a library without frame pointers
 * names only the frame the signal interrupted (#0), which must then be the
 * spinning function itself nearly always, even at -O0; the test of the end
 * (a call) comes once every few thousand pauses. */
#if defined(__x86_64__)
#define SPIN_PAUSE() __asm__ volatile("pause" ::: "memory")
#elif defined(__aarch64__)
#define SPIN_PAUSE() __asm__ volatile("yield" ::: "memory")
#else
#define SPIN_PAUSE() __asm__ volatile("" ::: "memory")
#endif
#define SPIN_UNTIL_END(seen, t0)                                                                                      \
  do {                                                                                                                \
    for (;;) {                                                                                                        \
      for (volatile int i_ = 0; i_ < 5000; i_++)                                                                      \
        SPIN_PAUSE();                                                                                                 \
      if (spin_ends((seen), (t0)))                                                                                    \
        break;                                                                                                        \
    }                                                                                                                 \
  } while (0)

__attribute__((noinline)) void wd_spins_in_fiber(void);
__attribute__((noinline)) void wd_spins_in_fiber(void)
{
  int seen = __atomic_load_n(&retries, __ATOMIC_ACQUIRE);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  SPIN_UNTIL_END(seen, &t0);
}

__attribute__((noinline)) void wd_spins_in_callback(void);
__attribute__((noinline)) void wd_spins_in_callback(void)
{
  int seen = __atomic_load_n(&retries, __ATOMIC_ACQUIRE);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  SPIN_UNTIL_END(seen, &t0);
}

static void *spin_fiber(void *arg)
{
  (void)arg;
  for (int i = 0; i < ATTEMPTS && !__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE); i++) {
    wd_spins_in_fiber();
    if (!__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE))
      tdl_sleep(tdl_after(TDL_MSEC)); /* back to the poll: the next stall is reported anew */
  }
  return NULL;
}

/* Run loop with a fiber that spins until the report came. */
static void stall_in_fiber(tdl_loop *loop)
{
  tdl_fiber_options o = {.name = "spinner", .detached = true};
  assert_int_equal(tdl_fiber_spawn(NULL, loop, spin_fiber, NULL, &o), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
}

static void test_chain_of_a_fiber(void **state)
{
  (void)state;
  reset(" wd_spins_in_fiber+0x");
  tdl_loop *loop = t_loop_new();
  tdl_watchdog_options wo = {.threshold = THRESHOLD, .cb = capture};
  assert_int_equal(tdl_watchdog_start(loop, &wo), 0);
  stall_in_fiber(loop);
  assert_true(reports >= 1);
  /* Frame #0 is where the fiber was interrupted: in the function. */
  assert_non_null(strstr(chain, "#0 0x"));
  assert_names(chain, " wd_spins_in_fiber+0x");
  assert_null(strstr(chain, "no call chain"));
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  t_loop_free(loop);
}

static int callback_tries;

static void spin_cb(tdl_loop *loop, tdl_timer *t)
{
  wd_spins_in_callback();
  if (!__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE) && ++callback_tries < ATTEMPTS)
    assert_int_equal(tdl_timer_start(loop, t, TDL_MSEC, 0), 0); /* after a poll */
}

static void test_chain_of_a_callback(void **state)
{
  (void)state;
  reset(" wd_spins_in_callback+0x");
  callback_tries = 0;
  tdl_loop *loop = t_loop_new();
  tdl_watchdog_options wo = {.threshold = THRESHOLD, .cb = capture};
  assert_int_equal(tdl_watchdog_start(loop, &wo), 0);
  tdl_timer t;
  tdl_timer_init(&t, spin_cb, NULL);
  assert_int_equal(tdl_timer_start(loop, &t, 0, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_true(reports >= 1);
  assert_names(chain, " wd_spins_in_callback+0x");
#ifdef TDL_FRAME_POINTERS
  /* The walk goes on through the loop's own frames, on the thread's stack,
   * out to tdl_loop_run. */
  assert_names(chain, " tdl_loop_run+0x");
#else
  assert_non_null(strstr(chain, "(the rest of the chain needs treadle built with frame pointers)"));
#endif
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  t_loop_free(loop);
}

/* ---- a stall inside the C library ----
 *
 * A fiber spins in pthread_spin_lock on a lock the test holds: the C
 * library's code, built without frame pointers (as C libraries are, as a
 * rule), is frame #0, and the chain's last line must say that the C library
 * is what lacks them, not treadle.  Each report releases the lock (the
 * spin then ends, and a try that the report did not catch spinning takes
 * it again after a poll); a helper thread releases it should no report
 * come. */

static pthread_spinlock_t libc_lock;

static void capture_and_release(const tdl_watchdog_report *r, void *data)
{
  capture(r, data);
  pthread_spin_unlock(&libc_lock);
}

__attribute__((noinline)) void wd_spins_in_libc(void);
__attribute__((noinline)) void wd_spins_in_libc(void)
{
  pthread_spin_lock(&libc_lock); /* spins in libc until a report releases it; then holds it */
}

static void *libc_spin_fiber(void *arg)
{
  (void)arg;
  for (int i = 0; i < ATTEMPTS && !__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE); i++) {
    wd_spins_in_libc();
    if (!__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE))
      tdl_sleep(tdl_after(TDL_MSEC)); /* back to the poll: the next stall is reported anew */
  }
  return NULL;
}

static void *release_at_hang(void *arg)
{
  (void)arg;
  for (tdl_time_t end = t_clock() + T_HANG; !__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE) && t_clock() < end;)
    usleep(10000);
  __atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
  pthread_spin_unlock(&libc_lock);
  return NULL;
}

static void test_chain_of_a_stall_in_libc(void **state)
{
  (void)state;
#if defined(__SANITIZE_THREAD__)
  /* The lock is released by the watchdog's thread, not the one that took
   * it; ThreadSanitizer, which models a spin lock as a mutex, refuses that
   * ("unlock of an unlocked mutex"). */
  T_SKIP("a spin lock released by another thread, which ThreadSanitizer refuses");
#endif
#if !defined(__x86_64__)
  /* On AArch64 (run under qemu-user in CI) the chain of this stall ends
   * with no line on frame pointers: the prologue check of frame #0
   * (base/frames.c) is not proven there yet. */
  T_SKIP("the frame-pointer check of a libc frame is proven on x86-64 only");
#endif
  reset(" pthread_spin_lock+0x");
  assert_int_equal(pthread_spin_init(&libc_lock, PTHREAD_PROCESS_PRIVATE), 0);
  assert_int_equal(pthread_spin_lock(&libc_lock), 0);
  pthread_t guard;
  assert_int_equal(pthread_create(&guard, NULL, release_at_hang, NULL), 0);
  tdl_loop *loop = t_loop_new();
  tdl_watchdog_options wo = {.threshold = THRESHOLD, .cb = capture_and_release};
  assert_int_equal(tdl_watchdog_start(loop, &wo), 0);
  tdl_fiber_options o = {.name = "libc-spinner", .detached = true};
  assert_int_equal(tdl_fiber_spawn(NULL, loop, libc_spin_fiber, NULL, &o), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  t_loop_free(loop);
  __atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
  pthread_join(guard, NULL);
  pthread_spin_unlock(&libc_lock);
  assert_int_equal(pthread_spin_destroy(&libc_lock), 0);
  assert_true(reports >= 1);
  if (!NAMES_CHECKED)
    return;
  /* #0 is the spin, in the C library... */
  const char *f0 = strstr(chain, "        #0 0x");
  assert_non_null(f0);
  assert_non_null(strstr(f0, " pthread_spin_lock+0x"));
  assert_true(strchr(f0, '\n') != NULL && strstr(f0, " pthread_spin_lock+0x") < strchr(f0, '\n'));
  /* ...and the last line says that the C library has no frame pointers
   * (the chain stops there, or left out its caller), whichever way treadle
   * was built; never that treadle lacks them. */
  size_t len = strlen(chain);
  assert_true(len > 1 && chain[len - 1] == '\n');
  const char *last = chain + len - 1;
  while (last > chain && last[-1] != '\n')
    last--;
  assert_true(strncmp(last, "        (", 9) == 0);
  assert_non_null(strstr(last, " built without frame pointers"));
  assert_null(strstr(chain, "needs treadle built with frame pointers"));
}

/* ---- the default report, on stderr ---- */

static int err_fd;

static int count_reports(const char *buf)
{
  int n = 0;
  for (const char *p = buf; (p = strstr(p, "treadle watchdog: ")) != NULL; p++)
    n++;
  return n;
}

/* Ends the spin once the report is in the file; ends a try when a report
 * that does not name the spin is. */
static void *watch_stderr(void *arg)
{
  (void)arg;
  int handled = 0;
  for (tdl_time_t end = t_clock() + T_HANG; !__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE) && t_clock() < end;) {
    char buf[8192] = {0};
    ssize_t n = pread(err_fd, buf, sizeof buf - 1, 0);
    if (n > 0 && strstr(buf, NAMES_CHECKED ? "wd_spins_in_fiber+0x" : "        "))
      break;
    if (n > 0 && count_reports(buf) > handled) {
      handled = count_reports(buf);
      __atomic_add_fetch(&retries, 1, __ATOMIC_ACQ_REL);
    }
    usleep(10000);
  }
  __atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void test_default_report_has_the_chain(void **state)
{
  (void)state;
  reset(NULL);
  FILE *f = tmpfile();
  assert_non_null(f);
  err_fd = fileno(f);
  int saved = dup(2);
  assert_true(saved >= 0);
  assert_int_equal(dup2(err_fd, 2), 2);
  tdl_loop *loop = t_loop_new();
  tdl_watchdog_options wo = {.threshold = THRESHOLD, .name = "net-1"};
  assert_int_equal(tdl_watchdog_start(loop, &wo), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, watch_stderr, NULL), 0);
  stall_in_fiber(loop);
  pthread_join(t, NULL);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  t_loop_free(loop);
  assert_int_equal(dup2(saved, 2), 2);
  close(saved);
  char buf[8192] = {0};
  assert_true(pread(err_fd, buf, sizeof buf - 1, 0) > 0);
  fclose(f);
  /* The line, then the chain under it, in one report (the last one: the
   * earlier ones, if any, came before the spin). */
  const char *line = NULL;
  for (const char *p = buf; (p = strstr(p, "treadle watchdog: loop 0x")) != NULL; p++)
    line = p;
  assert_non_null(line);
  const char *fiber = strstr(line, "\"net-1\" away from its poll for ");
  assert_non_null(fiber);
  const char *nl = strstr(fiber, ", in fiber 1 \"spinner\"\n        #0 0x");
  assert_non_null(nl);
  assert_names(nl, " wd_spins_in_fiber+0x");
}

static void test_outside_a_callback(void **state)
{
  (void)state;
  tdl_watchdog_report r;
  memset(&r, 0, sizeof r);
  assert_string_equal(tdl_watchdog_report_chain(&r), "");
  assert_string_equal(tdl_watchdog_report_chain(NULL), "");
}

/* ---- a program that takes the signal over (last: it stays taken) ---- */

static volatile sig_atomic_t own_ran;
static void own_handler(int sig)
{
  (void)sig;
  own_ran = 1;
}

static void test_program_takes_the_signal(void **state)
{
  (void)state;
  reset(NULL);
  tdl_loop *loop = t_loop_new();
  tdl_watchdog_options wo = {.threshold = THRESHOLD, .cb = capture};
  assert_int_equal(tdl_watchdog_start(loop, &wo), 0);
  int sig = tdl__watchdog_signal();
  assert_true(sig >= SIGRTMIN && sig <= SIGRTMAX);
  struct sigaction sa = {.sa_handler = own_handler};
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(sig, &sa, NULL), 0);
  stall_in_fiber(loop);
  assert_true(reports >= 1);
  assert_string_equal(chain, "        (no call chain: the program took over the watchdog's signal)\n");
  /* The program's handler is the one that runs. */
  own_ran = 0;
  raise(sig);
  assert_int_equal(own_ran, 1);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  t_loop_free(loop);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_of_a_fiber),
      cmocka_unit_test(test_chain_of_a_callback),
      cmocka_unit_test(test_chain_of_a_stall_in_libc),
      cmocka_unit_test(test_default_report_has_the_chain),
      cmocka_unit_test(test_outside_a_callback),
      cmocka_unit_test(test_program_takes_the_signal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
