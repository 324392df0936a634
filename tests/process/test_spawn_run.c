/* SPDX-License-Identifier: MIT */
/* tdl_process_run (src/process/run.c).  Every test checks afterwards that no fd
 * leaked and that no child, running or zombie, is left. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <treadle.h>

#include "process/process_internal.h"
#include "test_spawn_helper.h"

static tdl_time_t in_ms(long ms) { return mono_now() + ms * TDL_MSEC; }

static void test_capture_both(void **state)
{
  (void)state;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("tag", NULL, NULL), NULL, NULL, 0, 1024, in_ms(60000)), 0);
  assert_true(tdl_process_exited(res.status));
  assert_int_equal(tdl_process_exit_code(res.status), 0);
  assert_string_equal(res.out, "out");
  assert_int_equal(res.out_len, 3);
  assert_string_equal(res.err, "err");
  assert_false(res.out_truncated || res.err_truncated || res.timed_out || res.limit_killed);
  tdl_process_run_result_destroy(&res);
  assert_null(res.out);
  tdl_process_run_result_destroy(&res);
  tdl_process_run_result_destroy(NULL);
}

static void test_exit_status_and_empty_output(void **state)
{
  (void)state;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("exit", "7", NULL), NULL, NULL, 0, 1024, TDL_FOREVER), 0);
  assert_int_equal(tdl_process_exit_code(res.status), 7);
  assert_string_equal(res.out, "");
  assert_string_equal(res.err, "");
  tdl_process_run_result_destroy(&res);
}

/* 4 MiB in and out through cat: input and output are moved at once, or
 * both pipes fill and it deadlocks. */
static void test_input_roundtrip(void **state)
{
  (void)state;
  size_t n = 4 << 20;
  char *in = malloc(n);
  assert_non_null(in);
  for (size_t i = 0; i < n; i++)
    in[i] = (char)('a' + i % 26);
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("cat", NULL, NULL), NULL, in, n, SIZE_MAX, in_ms(60000)), 0);
  assert_int_equal(res.status, 0);
  assert_int_equal(res.in_written, n);
  assert_int_equal(res.out_len, n);
  assert_memory_equal(res.out, in, n);
  tdl_process_run_result_destroy(&res);
  free(in);
}

static void test_empty_input_is_eof(void **state)
{
  (void)state;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("cat", NULL, NULL), NULL, "", 0, 100, in_ms(60000)), 0);
  assert_int_equal(res.status, 0);
  assert_string_equal(res.out, "");
  tdl_process_run_result_destroy(&res);
  /* No input: stdin is /dev/null, never the caller's. */
  assert_int_equal(tdl_process_run(&res, helper("cat", NULL, NULL), NULL, NULL, 0, 100, in_ms(60000)), 0);
  assert_string_equal(res.out, "");
  tdl_process_run_result_destroy(&res);
}

/* Both streams well past a pipe's 64 KiB: drained together, no deadlock. */
static void test_both_streams_large(void **state)
{
  (void)state;
  tdl_process_run_result res;
  assert_int_equal(
      tdl_process_run(&res, helper("spew", "1000000", "700000"), NULL, NULL, 0, SIZE_MAX, in_ms(60000)), 0);
  assert_int_equal(res.status, 0);
  assert_int_equal(res.out_len, 1000000);
  assert_int_equal(res.err_len, 700000);
  assert_int_equal(res.out[999999], 'o');
  assert_int_equal(res.err[0], 'e');
  tdl_process_run_result_destroy(&res);
}

static void test_limit_discards(void **state)
{
  (void)state;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("spew", "1000000", "10"), NULL, NULL, 0, 1000, in_ms(60000)), 0);
  assert_int_equal(res.status, 0); /* ran to the end: the rest was read and dropped */
  assert_int_equal(res.out_len, 1000);
  assert_int_equal(strlen(res.out), 1000);
  assert_true(res.out_truncated);
  assert_int_equal(res.err_len, 10);
  assert_false(res.err_truncated);
  assert_false(res.limit_killed);
  tdl_process_run_result_destroy(&res);
  /* Exactly the limit is not truncation. */
  assert_int_equal(tdl_process_run(&res, helper("spew", "1000", "0"), NULL, NULL, 0, 1000, in_ms(60000)), 0);
  assert_int_equal(res.out_len, 1000);
  assert_false(res.out_truncated);
  tdl_process_run_result_destroy(&res);
  /* A zero limit keeps nothing. */
  assert_int_equal(tdl_process_run(&res, helper("spew", "10", "0"), NULL, NULL, 0, 0, in_ms(60000)), 0);
  assert_int_equal(res.out_len, 0);
  assert_true(res.out_truncated);
  tdl_process_run_result_destroy(&res);
}

static void test_limit_kills(void **state)
{
  (void)state;
  tdl_process_run_options o = {0};
  o.flags = TDL_PROCESS_RUN_KILL_ON_LIMIT;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("yes", NULL, NULL), &o, NULL, 0, 100000, in_ms(60000)), 0);
  assert_true(res.limit_killed);
  assert_true(res.out_truncated);
  assert_int_equal(res.out_len, 100000);
  assert_true(tdl_process_signaled(res.status));
  assert_int_equal(tdl_process_term_signal(res.status), SIGKILL);
  assert_false(res.timed_out);
  tdl_process_run_result_destroy(&res);
}

static void test_child_closes_stdout_early(void **state)
{
  (void)state;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("closeout", NULL, NULL), NULL, NULL, 0, 100, in_ms(60000)), 0);
  assert_int_equal(res.status, 0);
  assert_string_equal(res.out, "");
  assert_string_equal(res.err, "done");
  tdl_process_run_result_destroy(&res);
}

static void test_deadline_sigterm(void **state)
{
  (void)state;
  tdl_process_run_result res;
  tdl_time_t t0 = mono_now();
  assert_int_equal(tdl_process_run(&res, helper("sleep", NULL, NULL), NULL, NULL, 0, 100, t0 + 200 * TDL_MSEC),
                   -ETIMEDOUT);
  tdl_time_t dt = mono_now() - t0;
  assert_true(dt >= 200 * TDL_MSEC); /* never before the deadline */
  assert_true(res.timed_out);
  assert_true(tdl_process_signaled(res.status));
  assert_int_equal(tdl_process_term_signal(res.status), SIGTERM);
  assert_non_null(res.out);
  tdl_process_run_result_destroy(&res);
}

static void test_deadline_ignores_sigterm(void **state)
{
  (void)state;
  tdl_process_run_options o = {0};
  o.kill_grace = 300 * TDL_MSEC;
  tdl_process_run_result res;
  /* Ignored here, so ignored in the child from the first instruction (an
   * ignored signal stays ignored across tdl_process_spawn and exec): the deadline
   * cannot beat a slow start (valgrind) to the helper's own signal(). */
  void (*old)(int) = signal(SIGTERM, SIG_IGN);
  tdl_time_t t0 = mono_now();
  int r = tdl_process_run(&res, helper("ignterm", NULL, NULL), &o, NULL, 0, 100, t0 + 200 * TDL_MSEC);
  signal(SIGTERM, old);
  assert_int_equal(r, -ETIMEDOUT);
  tdl_time_t dt = mono_now() - t0;
  assert_true(dt >= 500 * TDL_MSEC); /* the deadline, then the whole grace */
  assert_true(res.timed_out);
  assert_int_equal(tdl_process_term_signal(res.status), SIGKILL);
  tdl_process_run_result_destroy(&res);
}

static void test_deadline_sigkill_at_once(void **state)
{
  (void)state;
  tdl_process_run_options o = {0};
  o.kill_grace = -1;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("ignterm", NULL, NULL), &o, NULL, 0, 100, in_ms(100)),
                   -ETIMEDOUT);
  assert_int_equal(tdl_process_term_signal(res.status), SIGKILL);
  tdl_process_run_result_destroy(&res);
  /* A deadline already past: killed at once. */
  assert_int_equal(tdl_process_run(&res, helper("sleep", NULL, NULL), &o, NULL, 0, 100, 0), -ETIMEDOUT);
  assert_int_equal(tdl_process_term_signal(res.status), SIGKILL);
  tdl_process_run_result_destroy(&res);
}

static void test_group_is_killed(void **state)
{
  (void)state;
  /* The child forks a grandchild that sleeps forever holding the pipes; with
   * a new process group the deadline's signal reaches both. */
  tdl_process_run_options o = {0};
  o.spawn.flags = TDL_PROCESS_SETPGID;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("grandsleep", NULL, NULL), &o, NULL, 0, 100, in_ms(200)),
                   -ETIMEDOUT);
  assert_int_equal(tdl_process_term_signal(res.status), SIGTERM);
  tdl_process_run_result_destroy(&res);
}

static void test_grandchild_holding_pipe_does_not_block(void **state)
{
  (void)state;
  tdl_process_run_result res;
  tdl_time_t t0 = mono_now();
  assert_int_equal(tdl_process_run(&res, helper("grandhold", NULL, NULL), NULL, NULL, 0, 100, in_ms(60000)), 0);
  assert_true(mono_now() - t0 < 2500 * TDL_MSEC); /* the grandchild holds on for 3 s */
  assert_string_equal(res.out, "hi");
  assert_int_equal(res.status, 0);
  tdl_process_run_result_destroy(&res);
}

static void test_child_ignores_input(void **state)
{
  (void)state;
  /* SIGPIPE keeps its default (fatal) action here: if the write to the
   * closed pipe raised it in this process, the test binary would die. */
  signal(SIGPIPE, SIG_DFL);
  size_t n = 1 << 20;
  char *in = calloc(1, n);
  assert_non_null(in);
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("readnone", NULL, NULL), NULL, in, n, 100, in_ms(60000)), 0);
  assert_int_equal(res.status, 0);
  assert_true(res.in_written < n);
  tdl_process_run_result_destroy(&res);
  free(in);
  sigset_t pending;
  sigpending(&pending);
  assert_false(sigismember(&pending, SIGPIPE));
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, NULL, &mask);
  assert_false(sigismember(&mask, SIGPIPE));
}

static void test_stdio_choices(void **state)
{
  (void)state;
  tdl_process_run_options o = {0};
  o.spawn.stdio[2].mode = TDL_STDIO_STDOUT;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("tag", NULL, NULL), &o, NULL, 0, 100, in_ms(60000)), 0);
  assert_string_equal(res.out, "outerr");
  assert_null(res.err);
  tdl_process_run_result_destroy(&res);

  o.spawn.stdio[2].mode = TDL_STDIO_DEFAULT;
  o.spawn.stdio[1].mode = TDL_STDIO_NULL;
  assert_int_equal(tdl_process_run(&res, helper("tag", NULL, NULL), &o, NULL, 0, 100, in_ms(60000)), 0);
  assert_null(res.out);
  assert_string_equal(res.err, "err");
  tdl_process_run_result_destroy(&res);
}

static void test_bad_input(void **state)
{
  (void)state;
  tdl_process_run_result res;
  memset(&res, 0xff, sizeof res);
  assert_int_equal(tdl_process_run(&res, NULL, NULL, NULL, 0, 100, TDL_FOREVER), -EINVAL);
  assert_null(res.out);
  assert_int_equal(tdl_process_run(NULL, helper("tag", NULL, NULL), NULL, NULL, 0, 100, TDL_FOREVER), -EINVAL);
  tdl_process_run_options o = {0};
  o.spawn.stdio[0].mode = TDL_STDIO_NULL;
  assert_int_equal(tdl_process_run(&res, helper("cat", NULL, NULL), &o, "x", 1, 100, TDL_FOREVER), -EINVAL);
  o.spawn.stdio[0].mode = TDL_STDIO_PIPE;
  assert_int_equal(tdl_process_run(&res, helper("cat", NULL, NULL), &o, NULL, 0, 100, TDL_FOREVER), -EINVAL);
  o.spawn.stdio[0].mode = TDL_STDIO_DEFAULT;
  o.flags = 0x80;
  assert_int_equal(tdl_process_run(&res, helper("cat", NULL, NULL), &o, NULL, 0, 100, TDL_FOREVER), -EINVAL);
  const char *empty[] = {NULL};
  assert_int_equal(tdl_process_run(&res, empty, NULL, NULL, 0, 100, TDL_FOREVER), -EINVAL);
  const char *missing[] = {"/nonexistent/prog", NULL};
  assert_int_equal(tdl_process_run(&res, missing, NULL, "in", 2, 100, TDL_FOREVER), -ENOENT);
  assert_null(res.out);
  assert_null(res.err);
  tdl_process_run_result_destroy(&res);
}

static void test_no_pidfd(void **state)
{
  (void)state;
  tdl__spawn_debug = TDL__DEBUG_NO_PIDFD;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("cat", NULL, NULL), NULL, "hello", 5, 100, in_ms(60000)), 0);
  assert_string_equal(res.out, "hello");
  tdl_process_run_result_destroy(&res);
  assert_int_equal(tdl_process_run(&res, helper("closeout", NULL, NULL), NULL, NULL, 0, 100, in_ms(60000)), 0);
  assert_string_equal(res.err, "done");
  tdl_process_run_result_destroy(&res);
  assert_int_equal(tdl_process_run(&res, helper("sleep", NULL, NULL), NULL, NULL, 0, 100, in_ms(100)),
                   -ETIMEDOUT);
  assert_int_equal(tdl_process_term_signal(res.status), SIGTERM);
  tdl_process_run_result_destroy(&res);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(int argc, char **argv)
{
  int r = spawn_helper_main(argc, argv);
  if (r >= 0)
    return r;
  const struct CMUnitTest tests[] = {
      T(test_capture_both),
      T(test_exit_status_and_empty_output),
      T(test_input_roundtrip),
      T(test_empty_input_is_eof),
      T(test_both_streams_large),
      T(test_limit_discards),
      T(test_limit_kills),
      T(test_child_closes_stdout_early),
      T(test_deadline_sigterm),
      T(test_deadline_ignores_sigterm),
      T(test_deadline_sigkill_at_once),
      T(test_group_is_killed),
      T(test_grandchild_holding_pipe_does_not_block),
      T(test_child_ignores_input),
      T(test_stdio_choices),
      T(test_bad_input),
      T(test_no_pidfd),
  };
  return cmocka_run_group_tests_name("spawn_run", tests, NULL, NULL);
}
