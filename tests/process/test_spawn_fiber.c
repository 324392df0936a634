/* SPDX-License-Identifier: MIT */
/* Waiting for children from fibers: only the fiber parks, deadlines and
 * cancellation leave the child to the handle, release reaps, and fiber I/O on
 * the child's pipes. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

static tdl_loop *L;
static long ticks; /* advanced by a fiber while others wait: the thread is free */

static int setup(void **state)
{
  (void)state;
  L = t_loop_new();
  ticks = 0;
  return 0;
}

static int teardown(void **state)
{
  (void)state;
  assert_int_equal(tdl_loop_free(L), 0);
  /* No zombie is left behind. */
  siginfo_t si;
  memset(&si, 0, sizeof si);
  assert_int_equal(waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT), -1);
  assert_int_equal(errno, ECHILD);
  return 0;
}

static void go(tdl_fiber_fn fn, void *arg, tdl_fiber_t *out)
{
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, fn, arg, NULL), 0);
  if (out)
    *out = h;
  else
    assert_int_equal(tdl_fiber_detach(L, h), 0);
}

static int spawn_argv(tdl_process *p, const char *const *argv)
{
  tdl_process_options o;
  memset(&o, 0, sizeof o);
  o.argv = argv;
  return tdl_process_spawn(p, &o);
}

/* The child exits only once another fiber has written to its stdin: if the
 * wait blocked the thread, that fiber could never run. */
static int child_stdin = -1;

static void *feed_child(void *arg)
{
  (void)arg;
  while (child_stdin < 0)
    tdl_sleep(tdl_after(TDL_MSEC));
  tdl_sleep(tdl_after(5 * TDL_MSEC));
  assert_int_equal(tdl_write(child_stdin, "go\n", 3, TDL_FOREVER), 3);
  ticks++;
  return NULL;
}

static void *wait_for_exit(void *arg)
{
  (void)arg;
  tdl_process p;
  static const char *const argv[] = {"sh", "-c", "read x; exit 7", NULL};
  tdl_process_options o;
  memset(&o, 0, sizeof o);
  o.argv = argv;
  o.stdio[0].mode = TDL_STDIO_PIPE;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  child_stdin = p.stdin_fd;
  int st = 0;
  assert_int_equal(tdl_process_wait(&p, &st, TDL_FOREVER), 0);
  assert_int_equal(ticks, 1);
  assert_true(tdl_process_exited(st));
  assert_int_equal(tdl_process_exit_code(st), 7);
  tdl_process_destroy(&p);
  child_stdin = -1;
  return NULL;
}

static void only_the_fiber_waits(void **state)
{
  (void)state;
  child_stdin = -1;
  go(feed_child, NULL, NULL);
  go(wait_for_exit, NULL, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void *timeout_then_release(void *arg)
{
  (void)arg;
  tdl_process p;
  static const char *const argv[] = {"sleep", "10", NULL};
  assert_int_equal(spawn_argv(&p, argv), 0);
  assert_int_equal(tdl_process_wait(&p, NULL, tdl_after(5 * TDL_MSEC)), -ETIMEDOUT);
  assert_int_equal(tdl_process_kill(&p, 0), 0); /* still running, still ours */
  tdl_process_destroy(&p);                       /* kills and reaps it */
  return NULL;
}

static void deadline_leaves_child_to_release(void **state)
{
  (void)state;
  go(timeout_then_release, NULL, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static int cancel_rc;
static void *cancelled_waiter(void *arg)
{
  tdl_process *p = arg;
  cancel_rc = tdl_process_wait(p, NULL, TDL_FOREVER);
  tdl_process_destroy(p);
  return NULL;
}

static void *canceller(void *arg)
{
  tdl_fiber_t *victim = arg;
  tdl_sleep(tdl_after(2 * TDL_MSEC));
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), *victim), 0);
  return NULL;
}

static void cancelled_wait_leaves_no_zombie(void **state)
{
  (void)state;
  static tdl_process p;
  static const char *const argv[] = {"sleep", "10", NULL};
  assert_int_equal(spawn_argv(&p, argv), 0);
  static tdl_fiber_t victim;
  go(cancelled_waiter, &p, &victim);
  assert_int_equal(tdl_fiber_detach(L, victim), 0);
  go(canceller, &victim, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(cancel_rc, -ECANCELED);
}

/* Destroying a handle while a fiber waits on it is refused (-EBUSY): the
 * waiter would wake to a handle gone under it.  Nothing changes: the child
 * still runs and the waiter still waits, until the child is killed. */
static tdl_process busy_p;
static int busy_wait_rc = 1;
static void *busy_waiter(void *arg)
{
  (void)arg;
  int st = 0;
  busy_wait_rc = tdl_process_wait(&busy_p, &st, tdl_after(T_HANG));
  assert_true(tdl_process_signaled(st));
  assert_int_equal(tdl_process_term_signal(st), SIGTERM);
  return NULL;
}

static void *busy_destroyer(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_process_destroy(&busy_p), -EBUSY);
  assert_int_equal(tdl_process_kill(&busy_p, 0), 0); /* still ours, still running */
  assert_true(busy_p.pid > 0);
  assert_int_equal(tdl_process_kill(&busy_p, SIGTERM), 0);
  while (busy_wait_rc == 1)
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  assert_int_equal(busy_wait_rc, 0);
  assert_int_equal(tdl_process_destroy(&busy_p), 0);
  assert_int_equal(tdl_process_destroy(&busy_p), 0); /* twice: harmless */
  return NULL;
}

static void destroy_while_waited_is_refused(void **state)
{
  (void)state;
  static const char *const argv[] = {"sleep", "10", NULL};
  assert_int_equal(spawn_argv(&busy_p, argv), 0);
  go(busy_waiter, NULL, NULL);
  go(busy_destroyer, NULL, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_process_destroy(NULL), 0);
}

static void *read_child_output(void *arg)
{
  (void)arg;
  tdl_process p;
  static const char *const argv[] = {"sh", "-c", "sleep 0.02; echo hello from the child", NULL};
  tdl_process_options o;
  memset(&o, 0, sizeof o);
  o.argv = argv;
  o.stdio[1].mode = TDL_STDIO_PIPE;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  char buf[128] = {0};
  size_t got = 0;
  ssize_t n;
  while ((n = tdl_read(p.stdout_fd, buf + got, sizeof buf - 1 - got, TDL_FOREVER)) > 0)
    got += (size_t)n;
  assert_int_equal(n, 0);
  assert_string_equal(buf, "hello from the child\n");
  int st;
  assert_int_equal(tdl_process_wait(&p, &st, TDL_FOREVER), 0);
  assert_int_equal(tdl_process_exit_code(st), 0);
  tdl_process_destroy(&p); /* closes the pipe end with tdl_close */
  return NULL;
}

static void fiber_io_on_child_pipes(void **state)
{
  (void)state;
  /* Twice: the second child's fds reuse the numbers the first one had. */
  go(read_child_output, NULL, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  go(read_child_output, NULL, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(only_the_fiber_waits, setup, teardown),
      cmocka_unit_test_setup_teardown(deadline_leaves_child_to_release, setup, teardown),
      cmocka_unit_test_setup_teardown(cancelled_wait_leaves_no_zombie, setup, teardown),
      cmocka_unit_test_setup_teardown(fiber_io_on_child_pipes, setup, teardown),
      cmocka_unit_test_setup_teardown(destroy_while_waited_is_refused, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
