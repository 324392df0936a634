/* SPDX-License-Identifier: MIT */
/* tdl_process_run (src/process/run.c) from fibers: only the calling fiber waits,
 * the loop's other fibers run meanwhile; deadlines, limits and SIGPIPE as
 * outside fibers; a cancelled call kills and reaps the child.  Every test
 * checks afterwards that no fd leaked, that no child is left and that the
 * loop has nothing started (it frees). */
#include <fcntl.h>
#include <pthread.h>

#include "helpers.h"
#include "process/process_internal.h"
#include "test_spawn_helper.h"

static tdl_loop *L;

static int fsetup(void **state)
{
  setup(state);
  L = t_loop_new();
  return 0;
}

static int fteardown(void **state)
{
  assert_int_equal(tdl_loop_free(L), 0);
  return teardown(state);
}

static tdl_fiber_t go(tdl_fiber_fn fn, void *arg)
{
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, fn, arg, NULL), 0);
  assert_int_equal(tdl_fiber_detach(L, h), 0);
  return h;
}

static void run_loop(void) { assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0); }

/* ---- the other fibers run ------------------------------------------------- */

/* The child's stdin is a pipe only another fiber of the loop writes to and
 * closes, after ticking a few times: if tdl_process_run blocked the thread,
 * that fiber could never run and the child never exit. */
static int gate[2] = {-1, -1};
static int ticks;

static void *gatekeeper(void *arg)
{
  (void)arg;
  for (int i = 0; i < 3; i++) {
    ticks++;
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  }
  assert_int_equal(tdl_write(gate[1], "go", 2, TDL_FOREVER), 2);
  assert_int_equal(tdl_close(gate[1]), 0);
  gate[1] = -1;
  return NULL;
}

static void *run_behind_gate(void *arg)
{
  (void)arg;
  tdl_process_run_options o = {0};
  o.spawn.stdio[0].mode = TDL_STDIO_FD;
  o.spawn.stdio[0].fd = gate[0];
  tdl_process_run_result res;
  /* A deadline only so that a thread that blocks fails instead of hanging. */
  assert_int_equal(tdl_process_run(&res, helper("cat", NULL, NULL), &o, NULL, 0, 100, tdl_after(T_HANG)), 0);
  assert_int_equal(ticks, 3); /* the gatekeeper ran to its end meanwhile */
  assert_int_equal(res.status, 0);
  assert_string_equal(res.out, "go");
  tdl_process_run_result_destroy(&res);
  return NULL;
}

static void other_fibers_run(int debug)
{
  tdl__spawn_debug = debug;
  ticks = 0;
  /* Blocking: the child's cat reads it (our end is never read here). */
  assert_int_equal(pipe2(gate, O_CLOEXEC), 0);
  go(run_behind_gate, NULL);
  go(gatekeeper, NULL);
  run_loop();
  assert_int_equal(close(gate[0]), 0);
  gate[0] = -1;
}

static void test_other_fibers_run(void **state)
{
  (void)state;
  other_fibers_run(0);
}

static void test_other_fibers_run_no_pidfd(void **state)
{
  (void)state;
  other_fibers_run(TDL__DEBUG_NO_PIDFD);
}

/* ---- two runs at once, moving more than a pipe holds ---------------------- */

static void *roundtrip(void *arg)
{
  size_t n = *(size_t *)arg;
  char *in = malloc(n);
  assert_non_null(in);
  for (size_t i = 0; i < n; i++)
    in[i] = (char)('a' + i % 26);
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("cat", NULL, NULL), NULL, in, n, SIZE_MAX, TDL_FOREVER), 0);
  assert_int_equal(res.status, 0);
  assert_int_equal(res.in_written, n);
  assert_int_equal(res.out_len, n);
  assert_memory_equal(res.out, in, n);
  tdl_process_run_result_destroy(&res);
  free(in);
  return NULL;
}

static void *spew(void *arg)
{
  (void)arg;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("spew", "300000", "200000"), NULL, NULL, 0, 1000, TDL_FOREVER),
                   0);
  assert_int_equal(res.status, 0);
  assert_int_equal(res.out_len, 1000);
  assert_true(res.out_truncated && res.err_truncated);
  tdl_process_run_result_destroy(&res);
  return NULL;
}

static void test_two_runs_at_once(void **state)
{
  (void)state;
  size_t n = 1 << 20;
  go(roundtrip, &n);
  go(spew, NULL);
  run_loop();
}

/* ---- deadlines and limits --------------------------------------------------- */

typedef struct deadline_case {
  const char *mode;
  tdl_time_t grace;
  int signal; /* what ended the child */
} deadline_case;

static void *run_to_deadline(void *arg)
{
  const deadline_case *c = arg;
  tdl_process_run_options o = {0};
  o.kill_grace = c->grace;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper(c->mode, NULL, NULL), &o, NULL, 0, 100, tdl_after(20 * TDL_MSEC)),
                   -ETIMEDOUT);
  assert_true(res.timed_out);
  assert_true(tdl_process_signaled(res.status));
  assert_int_equal(tdl_process_term_signal(res.status), c->signal);
  assert_non_null(res.out);
  tdl_process_run_result_destroy(&res);
  return NULL;
}

static void test_deadline(void **state)
{
  (void)state;
  static const deadline_case cases[] = {
      {"sleep", 0, SIGTERM},
      {"sleep", -1, SIGKILL},
      {"ignterm", 10 * TDL_MSEC, SIGKILL},
  };
  for (int debug = 0; debug <= TDL__DEBUG_NO_PIDFD; debug += TDL__DEBUG_NO_PIDFD) {
    tdl__spawn_debug = debug;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      /* Ignored here, so ignored in the child from its first instruction:
       * the deadline cannot beat a slow start to the helper's signal(). */
      void (*old)(int) = signal(SIGTERM, strcmp(cases[i].mode, "ignterm") == 0 ? SIG_IGN : SIG_DFL);
      go(run_to_deadline, (void *)&cases[i]);
      run_loop();
      signal(SIGTERM, old);
    }
  }
}

static void *limit_kills(void *arg)
{
  (void)arg;
  tdl_process_run_options o = {0};
  o.flags = TDL_PROCESS_RUN_KILL_ON_LIMIT;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("yes", NULL, NULL), &o, NULL, 0, 100000, TDL_FOREVER), 0);
  assert_true(res.limit_killed && res.out_truncated);
  assert_int_equal(res.out_len, 100000);
  assert_int_equal(tdl_process_term_signal(res.status), SIGKILL);
  tdl_process_run_result_destroy(&res);
  return NULL;
}

static void test_limit_kills(void **state)
{
  (void)state;
  go(limit_kills, NULL);
  run_loop();
}

/* The child exits without reading 1 MiB of input: the write to its closed
 * stdin fails with EPIPE, and SIGPIPE (fatal here) never reaches us. */
static void *ignored_input(void *arg)
{
  (void)arg;
  size_t n = 1 << 20;
  char *in = calloc(1, n);
  assert_non_null(in);
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("readnone", NULL, NULL), NULL, in, n, 100, TDL_FOREVER), 0);
  assert_int_equal(res.status, 0);
  assert_true(res.in_written < n);
  tdl_process_run_result_destroy(&res);
  free(in);
  return NULL;
}

static void test_sigpipe_kept_from_caller(void **state)
{
  (void)state;
  signal(SIGPIPE, SIG_DFL);
  go(ignored_input, NULL);
  run_loop();
  sigset_t s;
  sigpending(&s);
  assert_false(sigismember(&s, SIGPIPE));
  pthread_sigmask(SIG_SETMASK, NULL, &s);
  assert_false(sigismember(&s, SIGPIPE));
}

/* ---- cancellation -------------------------------------------------------------- */

static int cancel_rc;
static tdl_process_run_result cancel_res;

static void *cancelled_run(void *arg)
{
  const char *mode = arg;
  tdl_process_run_options o = {0};
  o.spawn.flags = TDL_PROCESS_SETPGID; /* the whole group is killed */
  memset(&cancel_res, 0xff, sizeof cancel_res);
  cancel_rc = tdl_process_run(&cancel_res, helper(mode, NULL, NULL), &o, "in", 2, 100, TDL_FOREVER);
  return NULL;
}

static void *canceller(void *arg)
{
  /* Runs once the runner has spawned its child and parked. */
  assert_int_equal(tdl_fiber_cancel(L, *(tdl_fiber_t *)arg), 0);
  return NULL;
}

static void cancel_mid_run(const char *mode, int debug)
{
  tdl__spawn_debug = debug;
  cancel_rc = 0;
  static tdl_fiber_t victim;
  victim = go(cancelled_run, (void *)mode);
  go(canceller, &victim);
  run_loop();
  assert_int_equal(cancel_rc, -ECANCELED);
  assert_null(cancel_res.out);
  assert_null(cancel_res.err);
  assert_int_equal(cancel_res.status, 0);
  assert_false(cancel_res.timed_out);
}

static void test_cancel_mid_run(void **state)
{
  (void)state;
  cancel_mid_run("sleep", 0);
  cancel_mid_run("ignterm", 0);
  cancel_mid_run("grandsleep", 0);
  cancel_mid_run("sleep", TDL__DEBUG_NO_PIDFD);
}

static void *cancel_self_then_run(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_fiber_cancel(L, tdl_fiber_self()), 0);
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("exit", "0", NULL), NULL, NULL, 0, 100, TDL_FOREVER), -ECANCELED);
  assert_null(res.out);
  return NULL;
}

static void test_cancelled_fiber_starts_nothing(void **state)
{
  (void)state;
  go(cancel_self_then_run, NULL);
  run_loop();
}

/* ---- outside a fiber, from a callback of a running loop ----------------------- */

static int from_callback_done;

static void run_from_timer(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  tdl_process_run_result res;
  assert_int_equal(tdl_process_run(&res, helper("tag", NULL, NULL), NULL, NULL, 0, 100, tdl_after(60 * TDL_SEC)), 0);
  assert_string_equal(res.out, "out");
  assert_string_equal(res.err, "err");
  tdl_process_run_result_destroy(&res);
  from_callback_done = 1;
}

static void test_from_a_callback(void **state)
{
  (void)state;
  tdl_timer t;
  tdl_timer_init(&t, run_from_timer, NULL);
  assert_int_equal(tdl_timer_start(L, &t, 0, 0), 0);
  from_callback_done = 0;
  run_loop();
  assert_true(from_callback_done);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fsetup, fteardown)

int main(int argc, char **argv)
{
  int r = spawn_helper_main(argc, argv);
  if (r >= 0)
    return r;
  const struct CMUnitTest tests[] = {
      T(test_other_fibers_run),
      T(test_other_fibers_run_no_pidfd),
      T(test_two_runs_at_once),
      T(test_deadline),
      T(test_limit_kills),
      T(test_sigpipe_kept_from_caller),
      T(test_cancel_mid_run),
      T(test_cancelled_fiber_starts_nothing),
      T(test_from_a_callback),
  };
  return cmocka_run_group_tests_name("spawn_run_fiber", tests, NULL, NULL);
}
