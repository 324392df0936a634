/* SPDX-License-Identifier: MIT */
/* The loop's child watcher, tdl_process_watch (src/spawn_watch.c), on the
 * back end named by $TDL_BACKEND.  Every test checks afterwards that no fd
 * leaked and that no child, running or zombie, is left. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <treadle.h>

#include <poll.h>

#include "process/process_internal.h"
#include "test_spawn_helper.h"


static tdl_loop *new_loop(void)
{
  tdl_loop *loop = NULL;
  assert_int_equal(tdl_loop_new(&loop, NULL), 0);
  return loop;
}

static void spawn_helper(tdl_process *p, const char *mode, const char *arg)
{
  const char *argv[] = {self_exe, "--child", mode, arg, NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  assert_int_equal(tdl_process_spawn(p, &o), 0);
}

static int calls, last_status;

static void on_exit_cb(tdl_loop *loop, tdl_process *p, int status)
{
  (void)loop;
  calls++;
  last_status = status;
  /* Reaped before the call: wait returns the same status at once. */
  int st = -1;
  assert_int_equal(tdl_process_wait(p, &st, 0), 0);
  assert_int_equal(st, status);
}

static void test_watch_exit(void **state)
{
  (void)state;
  tdl_loop *loop = new_loop();
  tdl_process p;
  spawn_helper(&p, "exit", "5");
  calls = 0;
  assert_int_equal(tdl_process_watch(loop, &p, on_exit_cb), 0);
  assert_true(tdl_loop_alive(loop));
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(calls, 1);
  assert_true(tdl_process_exited(last_status));
  assert_int_equal(tdl_process_exit_code(last_status), 5);
  tdl_process_destroy(&p);
  assert_int_equal(tdl_loop_free(loop), 0);
}

static void test_watch_after_exit(void **state)
{
  (void)state;
  tdl_loop *loop = new_loop();
  tdl_process p;
  spawn_helper(&p, "exit", "9");
  struct pollfd pfd = {p.pidfd, POLLIN, 0};
  assert_int_equal(poll(&pfd, 1, 10000), 1); /* already a zombie */
  calls = 0;
  assert_int_equal(tdl_process_watch(loop, &p, on_exit_cb), 0);
  assert_int_equal(calls, 0); /* never called from inside watch() */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(calls, 1);
  assert_int_equal(tdl_process_exit_code(last_status), 9);
  tdl_process_destroy(&p);
  assert_int_equal(tdl_loop_free(loop), 0);
}

static int exited_mask;

static void on_exit_mask(tdl_loop *loop, tdl_process *p, int status)
{
  (void)loop;
  (void)p;
  assert_true(tdl_process_exited(status));
  exited_mask |= 1 << tdl_process_exit_code(status);
}

static void many_children(void)
{
  tdl_loop *loop = new_loop();
  tdl_process p[8];
  char code[8][4];
  for (int i = 0; i < 8; i++) {
    snprintf(code[i], sizeof code[i], "%d", i);
    spawn_helper(&p[i], "exit", code[i]);
    assert_int_equal(tdl_process_watch(loop, &p[i], on_exit_mask), 0);
  }
  exited_mask = 0;
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(exited_mask, 0xff);
  for (int i = 0; i < 8; i++)
    tdl_process_destroy(&p[i]);
  assert_int_equal(tdl_loop_free(loop), 0);
}

static void test_many_children(void **state)
{
  (void)state;
  many_children();
}

static void test_many_children_sigchld(void **state)
{
  (void)state;
  tdl__spawn_debug = TDL__DEBUG_NO_PIDFD;
  many_children();
}

static void on_exit_release(tdl_loop *loop, tdl_process *p, int status)
{
  (void)loop;
  calls++;
  last_status = status;
  tdl_process_destroy(p);
  free(p);
}

static void release_in_callback(void)
{
  tdl_loop *loop = new_loop();
  tdl_process *p = malloc(sizeof *p);
  assert_non_null(p);
  spawn_helper(p, "sleep", NULL);
  calls = 0;
  assert_int_equal(tdl_process_watch(loop, p, on_exit_release), 0);
  assert_int_equal(tdl_process_kill(p, SIGTERM), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(calls, 1);
  assert_int_equal(tdl_process_term_signal(last_status), SIGTERM);
  assert_int_equal(tdl_loop_free(loop), 0);
}

static void test_release_in_callback(void **state)
{
  (void)state;
  release_in_callback();
}

static void test_release_in_callback_sigchld(void **state)
{
  (void)state;
  tdl__spawn_debug = TDL__DEBUG_NO_PIDFD;
  release_in_callback();
}

static void on_timer_kill(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  assert_int_equal(tdl_process_kill(t->data, SIGKILL), 0);
}

static void test_kill_from_timer(void **state)
{
  (void)state;
  tdl_loop *loop = new_loop();
  tdl_process p;
  spawn_helper(&p, "sleep", NULL);
  tdl_timer t;
  tdl_timer_init(&t, on_timer_kill, &p);
  assert_int_equal(tdl_timer_start(loop, &t, 20 * TDL_MSEC, 0), 0);
  calls = 0;
  assert_int_equal(tdl_process_watch(loop, &p, on_exit_cb), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(calls, 1);
  assert_int_equal(tdl_process_term_signal(last_status), SIGKILL);
  tdl_process_destroy(&p);
  assert_int_equal(tdl_loop_free(loop), 0);
}

static void unwatch_and_misuse(void)
{
  tdl_loop *loop = new_loop();
  tdl_process p;
  spawn_helper(&p, "sleep", NULL);
  assert_int_equal(tdl_process_watch(NULL, &p, on_exit_cb), -EINVAL);
  assert_int_equal(tdl_process_watch(loop, NULL, on_exit_cb), -EINVAL);
  assert_int_equal(tdl_process_watch(loop, &p, NULL), -EINVAL);
  assert_int_equal(tdl_process_watch(loop, &p, on_exit_cb), 0);
  assert_int_equal(tdl_process_watch(loop, &p, on_exit_cb), -EINVAL); /* twice */
  assert_int_equal(tdl_process_wait(&p, NULL, 0), -EBUSY);
  tdl_process_unwatch(&p);
  tdl_process_unwatch(&p); /* twice is harmless */
  assert_false(tdl_loop_alive(loop));
  assert_int_equal(tdl_loop_free(loop), 0);
  assert_int_equal(tdl_process_wait(&p, NULL, 0), -ETIMEDOUT);

  /* Watched again on a new loop, then released while watched: the watcher
   * stops and the child is killed and reaped. */
  loop = new_loop();
  assert_int_equal(tdl_process_watch(loop, &p, on_exit_cb), 0);
  tdl_process_destroy(&p);
  assert_false(tdl_loop_alive(loop));
  assert_int_equal(tdl_process_watch(loop, &p, on_exit_cb), -EINVAL); /* no child */

  spawn_helper(&p, "exit", "0");
  assert_int_equal(tdl_process_wait(&p, NULL, TDL_FOREVER), 0);
  assert_int_equal(tdl_process_watch(loop, &p, on_exit_cb), -EINVAL); /* reaped */
  tdl_process_destroy(&p);
  assert_int_equal(tdl_loop_free(loop), 0);
}

static void test_unwatch_and_misuse(void **state)
{
  (void)state;
  unwatch_and_misuse();
}

static void test_unwatch_and_misuse_sigchld(void **state)
{
  (void)state;
  tdl__spawn_debug = TDL__DEBUG_NO_PIDFD;
  unwatch_and_misuse();
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(int argc, char **argv)
{
  int r = spawn_helper_main(argc, argv);
  if (r >= 0)
    return r;
  const struct CMUnitTest tests[] = {
      T(test_watch_exit),
      T(test_watch_after_exit),
      T(test_many_children),
      T(test_many_children_sigchld),
      T(test_release_in_callback),
      T(test_release_in_callback_sigchld),
      T(test_kill_from_timer),
      T(test_unwatch_and_misuse),
      T(test_unwatch_and_misuse_sigchld),
  };
  return cmocka_run_group_tests_name("spawn_watch", tests, NULL, NULL);
}
