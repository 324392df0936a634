/* SPDX-License-Identifier: MIT */
/* fork() in a process with a running loop, fibers parked on I/O and timers,
 * pool threads and a group of loops, from a fiber, from a plain callback
 * and from the main thread outside the loop.  The child either execs a
 * program, or does what treadle.h ("fork()") allows without exec: a new loop
 * with fibers, timers, fiber I/O (also on an inherited fd the parent's loop
 * watches), sockets, the pool, files, spawning.  Either way the parent's
 * loop, fibers, pool and group go on untouched.  Nothing forbidden there is
 * tested.
 *
 * The binary is also its own child program: <self> --child MODE. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#define LONG T_HANG /* a deadline no call may reach */
#define DL() tdl_after(LONG)

extern char **environ;

/* ThreadSanitizer (it says so and dies) and qemu-user 7.2 (its plugin core
 * asserts) cannot start threads in the child of a multi-threaded fork;
 * qemu-user cannot emulate treadle's spawning (.ci/aarch64.sh), nor does
 * ThreadSanitizer follow it (the spawn tests are not among the thread
 * tests).  There the child leaves the pool out, makes its file calls on its
 * own thread, and does not spawn. */
static bool under_tools(void)
{
#if defined(__SANITIZE_THREAD__)
  return true;
#else
  return getenv("TDL_QEMU_USER") != NULL;
#endif
}
static bool child_threads_ok(void) { return !under_tools(); }
static bool spawn_ok(void) { return !under_tools(); }

static char self_exe[PATH_MAX];

/* ---- the world the parent runs when it forks ---------------------------- */

static tdl_loop *L;
static int P[2];       /* a pipe: a fiber of L is parked reading P[0] */
static int S[2];       /* a socketpair: a fiber of L is parked reading S[0] */
static atomic_int gate; /* a pool thread waits for it */
static int world_done;
static long fiber_ticks, timer_ticks, ticks_at_fork, timer_ticks_at_fork;
static int child_reaped;
static tdl_timer tick_timer;
static int read_ok, recv_ok, pool_ok;
static tdl_group *G;
#define GROUP_LOOPS 2
static atomic_long group_ticks;
static long group_ticks_at_fork;

static void *reader(void *arg)
{
  (void)arg;
  char b[8] = {0};
  read_ok = tdl_read(P[0], b, sizeof b, DL()) == 5 && memcmp(b, "after", 5) == 0;
  return NULL;
}

static void *receiver(void *arg)
{
  (void)arg;
  char b[4];
  recv_ok = tdl_net_recv_exactly(S[0], b, 4, NULL, DL()) == 0 && memcmp(b, "ping", 4) == 0;
  return NULL;
}

static void *ticker(void *arg)
{
  (void)arg;
  while (!world_done) {
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
    fiber_ticks++;
  }
  return NULL;
}

static void on_tick(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  timer_ticks++;
}

static void *wait_gate(void *arg)
{
  while (!atomic_load(&gate)) {
    struct timespec ts = {0, 200 * 1000};
    nanosleep(&ts, NULL);
  }
  return arg;
}

static void *pool_caller(void *arg)
{
  (void)arg;
  void *r = NULL;
  pool_ok = tdl_pool_call(TDL_LANE_USER, wait_gate, (void *)42, NULL, &r, DL()) == 0 && (intptr_t)r == 42;
  return NULL;
}

static void *group_main(void *arg)
{
  (void)arg;
  while (tdl_sleep(tdl_after(TDL_MSEC)) == 0)
    atomic_fetch_add(&group_ticks, 1);
  return NULL; /* cancelled: the group stops */
}

static void go(tdl_fiber_fn fn, void *arg, size_t stack)
{
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, fn, arg, &(tdl_fiber_options){.stack_size = stack, .detached = true}),
                   0);
  (void)h;
}

static int setup(void **state)
{
  (void)state;
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){0}), 0);
  L = t_loop_new();
  t_pipe(P);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, S), 0);
  atomic_store(&gate, 0);
  world_done = 0;
  fiber_ticks = timer_ticks = ticks_at_fork = timer_ticks_at_fork = 0;
  child_reaped = 0;
  read_ok = recv_ok = pool_ok = 0;
  go(reader, NULL, 0);
  go(receiver, NULL, 0);
  go(ticker, NULL, 0);
  go(pool_caller, NULL, 0);
  tdl_timer_init(&tick_timer, on_tick, NULL);
  assert_int_equal(tdl_timer_start(L, &tick_timer, TDL_MSEC, TDL_MSEC), 0);
  atomic_store(&group_ticks, 0);
  assert_int_equal(tdl_group_new(&G, &(tdl_group_options){.loops = GROUP_LOOPS, .main = group_main}), 0);
  return 0;
}

/* After the child has ended: the parent's world still works.  On the loop's
 * thread (a fiber, a callback or main); nothing here blocks. */
static void wake_the_world(bool child_wrote)
{
  if (child_wrote) {
    /* What the child's new loop wrote to the inherited S[0]. */
    char b[16] = {0};
    assert_int_equal(read(S[1], b, sizeof b), 10);
    assert_memory_equal(b, "from-child", 10);
  }
  assert_int_equal(write(P[1], "after", 5), 5);
  assert_int_equal(write(S[1], "ping", 4), 4);
  atomic_store(&gate, 1);
  child_reaped = 1;
}

static void *finisher(void *arg)
{
  (void)arg;
  /* The parent's fibers and timers go on after the fork. */
  while (!child_reaped || fiber_ticks <= ticks_at_fork + 2 || timer_ticks <= timer_ticks_at_fork + 2)
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  world_done = 1;
  assert_int_equal(tdl_timer_stop(L, &tick_timer), 0);
  return NULL;
}

static int teardown(void **state)
{
  (void)state;
  /* The group's loops kept running through the fork. */
  tdl_time_t until = tdl_after(LONG);
  while (atomic_load(&group_ticks) <= group_ticks_at_fork + 2 && tdl_now() < until) {
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  assert_true(atomic_load(&group_ticks) > group_ticks_at_fork + 2);
  tdl_group_stop(G);
  assert_int_equal(tdl_group_wait(G, DL()), 0);
  assert_int_equal(tdl_group_free(G), 0);
  assert_int_equal(read_ok, 1);
  assert_int_equal(recv_ok, 1);
  assert_int_equal(pool_ok, 1);
  assert_int_equal(tdl_close(P[0]), 0);
  assert_int_equal(tdl_close(P[1]), 0);
  assert_int_equal(tdl_close(S[0]), 0);
  assert_int_equal(tdl_close(S[1]), 0);
  assert_int_equal(tdl_loop_free(L), 0);
  siginfo_t si;
  memset(&si, 0, sizeof si);
  assert_int_equal(waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT), -1);
  assert_int_equal(errno, ECHILD);
  return 0;
}

/* ---- the child ----------------------------------------------------------- */

/* No cmocka in the child: its failure would unwind into the parent's copy of
 * the test runner.  A failed check says where, and exits non-zero. */
static _Noreturn void child_fail(int line)
{
  char msg[64];
  int n = snprintf(msg, sizeof msg, "fork child: check at line %d failed\n", line);
  if (write(2, msg, (size_t)n) < 0)
    _exit(2);
  _exit(1);
}
#define CHECK(x)                                                                                         \
  do {                                                                                                   \
    if (!(x))                                                                                            \
      child_fail(__LINE__);                                                                              \
  } while (0)

enum child_mode { EXEC, NEW_LOOP };

static _Noreturn void child_exec(void)
{
  const char *prog = access("/bin/true", X_OK) == 0 ? "/bin/true" : "/usr/bin/true";
  char *argv[] = {(char *)"true", NULL};
  execve(prog, argv, environ);
  _exit(127);
}

/* Two fibers of the new loop pass a counter back and forth through a pipe. */
static int cp[2][2];

static void *ping_pong(void *arg)
{
  intptr_t me = (intptr_t)arg;
  for (int i = 0; i < 100; i++) {
    int v = -1;
    if (me == 0) {
      CHECK(tdl_write(cp[0][1], &i, sizeof i, DL()) == sizeof i);
      CHECK(tdl_read(cp[1][0], &v, sizeof v, DL()) == sizeof v && v == i + 1000);
    } else {
      CHECK(tdl_read(cp[0][0], &v, sizeof v, DL()) == sizeof v && v == i);
      v += 1000;
      CHECK(tdl_write(cp[1][1], &v, sizeof v, DL()) == sizeof v);
    }
  }
  return NULL;
}

static void *child_twice(void *arg) { return (void *)((intptr_t)arg * 2); }

static tdl_addr child_laddr;
static int child_lfd;

static void *child_acceptor(void *arg)
{
  (void)arg;
  int fd = tdl_net_accept(child_lfd, NULL, DL());
  CHECK(fd >= 0);
  char b[5];
  CHECK(tdl_net_recv_exactly(fd, b, 5, NULL, DL()) == 0 && memcmp(b, "hello", 5) == 0);
  CHECK(tdl_net_send_all(fd, "world", 5, NULL, DL()) == 0);
  CHECK(tdl_close(fd) == 0);
  return NULL;
}

/* The new loop's first fiber: everything the documentation allows. */
static void *child_fiber_main(void *arg)
{
  (void)arg;
  tdl_loop *loop = tdl_fiber_loop();
  CHECK(loop != NULL && loop != L);

  /* Fibers, fiber I/O, joins. */
  CHECK(pipe2(cp[0], O_CLOEXEC) == 0 && pipe2(cp[1], O_CLOEXEC) == 0);
  tdl_fiber_t a, b;
  CHECK(tdl_fiber_spawn(&a, loop, ping_pong, (void *)0, NULL) == 0);
  CHECK(tdl_fiber_spawn(&b, loop, ping_pong, (void *)1, NULL) == 0);
  CHECK(tdl_fiber_join(a, NULL, DL()) == 0 && tdl_fiber_join(b, NULL, DL()) == 0);
  for (int i = 0; i < 2; i++)
    CHECK(tdl_close(cp[i][0]) == 0 && tdl_close(cp[i][1]) == 0);

  /* Timers. */
  tdl_time_t d = tdl_after(2 * TDL_MSEC);
  CHECK(tdl_sleep(d) == 0 && tdl_now() >= d);
  CHECK(tdl_fiber_park(tdl_after(TDL_MSEC)) == -ETIMEDOUT);

  /* An inherited fd that the parent's loop watches: this loop registers it
   * in its own back end, writes, and forgets it with tdl_close (in a fiber
   * of this loop, which touches no other loop). */
  CHECK(tdl_fd_wait(S[0], TDL_WRITE, DL()) & TDL_WRITE);
  CHECK(tdl_write(S[0], "from-child", 10, DL()) == 10);
  CHECK(tdl_close(S[0]) == 0);

  /* Sockets on loopback. */
  child_lfd = tdl_net_listen_str("127.0.0.1:0", 0, 0);
  CHECK(child_lfd >= 0 && tdl_net_local_addr(child_lfd, &child_laddr) == 0);
  tdl_fiber_t acc;
  CHECK(tdl_fiber_spawn(&acc, loop, child_acceptor, NULL, NULL) == 0);
  int fd = tdl_net_connect(&child_laddr, DL());
  CHECK(fd >= 0);
  CHECK(tdl_net_send_all(fd, "hello", 5, NULL, DL()) == 0);
  char w[5];
  CHECK(tdl_net_recv_exactly(fd, w, 5, NULL, DL()) == 0 && memcmp(w, "world", 5) == 0);
  CHECK(tdl_close(fd) == 0 && tdl_fiber_join(acc, NULL, DL()) == 0 && tdl_close(child_lfd) == 0);

  /* The pool, which starts again empty. */
  if (child_threads_ok()) {
    tdl_pool_stats st;
    tdl_pool_stats_get(&st);
    CHECK(st.threads == 0);
    for (intptr_t i = 0; i < 10; i++) {
      void *r = NULL;
      CHECK(tdl_pool_call(TDL_LANE_USER, child_twice, (void *)i, NULL, &r, DL()) == 0 && (intptr_t)r == 2 * i);
    }
  } else {
    CHECK(tdl_fs_set_engine(TDL_FS_DIRECT) == 0); /* files on this thread */
  }

  /* Files. */
  char path[64];
  snprintf(path, sizeof path, "/tmp/tdl-fork-XXXXXX");
  int tmp = mkstemp(path);
  CHECK(tmp >= 0);
  close(tmp);
  int ffd = tdl_fs_open(path, O_RDWR, 0, DL());
  CHECK(ffd >= 0);
  CHECK(tdl_fs_pwrite(ffd, "file data", 9, 0, DL()) == 9);
  CHECK(tdl_fs_fsync(ffd, DL()) == 0);
  char fb[16] = {0};
  CHECK(tdl_fs_pread(ffd, fb, sizeof fb, 0, DL()) == 9 && memcmp(fb, "file data", 9) == 0);
  CHECK(tdl_close(ffd) == 0 && tdl_fs_unlink(path, DL()) == 0);

  /* Spawning, waiting, capturing. */
  if (spawn_ok()) {
    static const char *argv_exit[] = {self_exe, "--child", "exit7", NULL};
    tdl_process p;
    CHECK(tdl_process_spawn(&p, &(tdl_process_options){.argv = argv_exit}) == 0);
    int status = -1;
    CHECK(tdl_process_wait(&p, &status, DL()) == 0 && tdl_process_exited(status) && tdl_process_exit_code(status) == 7);
    tdl_process_destroy(&p);
    static const char *argv_say[] = {self_exe, "--child", "say", NULL};
    tdl_process_run_result r;
    CHECK(tdl_process_run(&r, argv_say, NULL, NULL, 0, 100, DL()) == 0);
    CHECK(tdl_process_exited(r.status) && tdl_process_exit_code(r.status) == 0 && strcmp(r.out, "said") == 0);
    tdl_process_run_result_destroy(&r);
  }
  return NULL;
}

/* A loop made and run by hand, without tdl_fiber_main: a timer and a watcher. */
static int raw_fired, raw_read;

static void raw_timer_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  raw_fired++;
}

static void raw_io_cb(tdl_loop *loop, tdl_io *w, unsigned events)
{
  char c;
  if ((events & TDL_READ) && read(w->fd, &c, 1) == 1 && c == 'x')
    raw_read++;
  tdl_io_stop(loop, w);
}

static void child_raw_loop(void)
{
  tdl_loop *loop = NULL;
  CHECK(tdl_loop_new(&loop, NULL) == 0);
  int p[2];
  CHECK(pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0 && write(p[1], "x", 1) == 1);
  tdl_io w;
  tdl_io_init(&w, p[0], raw_io_cb, NULL);
  CHECK(tdl_io_start(loop, &w, TDL_READ) == 0);
  tdl_timer t;
  tdl_timer_init(&t, raw_timer_cb, NULL);
  CHECK(tdl_timer_start(loop, &t, TDL_MSEC, 0) == 0);
  CHECK(tdl_loop_run(loop, TDL_LOOP_DEFAULT) == 0);
  CHECK(raw_fired == 1 && raw_read == 1);
  CHECK(tdl_loop_free(loop) == 0);
  close(p[0]);
  close(p[1]);
}

/* In the child, wherever fork() returned: exec, or the allowed work, and
 * never back into the inherited loop. */
static _Noreturn void be_the_child(enum child_mode mode)
{
  if (mode == EXEC)
    child_exec();
  void *r = (void *)1;
  CHECK(tdl_fiber_main(child_fiber_main, NULL, &r) == 0 && r == NULL);
  child_raw_loop();
  _exit(0);
}

/* ---- forking ------------------------------------------------------------- */

static void expect_exit_0(int status)
{
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static pid_t do_fork(enum child_mode mode)
{
  ticks_at_fork = fiber_ticks;
  timer_ticks_at_fork = timer_ticks;
  group_ticks_at_fork = atomic_load(&group_ticks);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0)
    be_the_child(mode);
  return pid;
}

/* From a fiber the parent waits without blocking its loop. */
static void fiber_reap(pid_t pid, enum child_mode mode)
{
  int status;
  pid_t r;
  tdl_time_t until = DL();
  while ((r = waitpid(pid, &status, WNOHANG)) == 0 && tdl_now() < until)
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  assert_int_equal(r, pid);
  expect_exit_0(status);
  wake_the_world(mode == NEW_LOOP);
}

/* (a) from a fiber, while the others are parked. */
static void *forking_fiber(void *arg)
{
  enum child_mode mode = (enum child_mode)(intptr_t)arg;
  assert_int_equal(tdl_sleep(tdl_after(5 * TDL_MSEC)), 0); /* everyone is parked, the pool thread is busy */
  fiber_reap(do_fork(mode), mode);
  return NULL;
}

static void from_a_fiber(enum child_mode mode)
{
  go(forking_fiber, (void *)(intptr_t)mode, 256 * 1024);
  go(finisher, NULL, 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void fiber_forks_child_execs(void **state)
{
  (void)state;
  from_a_fiber(EXEC);
}

static void fiber_forks_child_makes_a_loop(void **state)
{
  (void)state;
  from_a_fiber(NEW_LOOP);
}

/* (b) from a plain callback: a timer's. */
static pid_t cb_pid;
static enum child_mode cb_mode;

static void *cb_reaper(void *arg)
{
  (void)arg;
  fiber_reap(cb_pid, cb_mode);
  return NULL;
}

static void forking_timer_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  assert_int_equal(tdl_fiber_self(), 0); /* a callback, not a fiber */
  cb_pid = do_fork(cb_mode);
  go(cb_reaper, NULL, 0);
}

static void from_a_callback(enum child_mode mode)
{
  cb_mode = mode;
  tdl_timer t;
  tdl_timer_init(&t, forking_timer_cb, NULL);
  assert_int_equal(tdl_timer_start(L, &t, 5 * TDL_MSEC, 0), 0);
  go(finisher, NULL, 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void callback_forks_child_execs(void **state)
{
  (void)state;
  from_a_callback(EXEC);
}

static void callback_forks_child_makes_a_loop(void **state)
{
  (void)state;
  from_a_callback(NEW_LOOP);
}

/* (c) from the main thread, between runs of the loop. */
static void from_main(enum child_mode mode)
{
  /* Run until the fibers are parked and the pool thread is busy. */
  tdl_time_t until = tdl_after(5 * TDL_MSEC);
  while (tdl_now() < until)
    assert_int_equal(tdl_loop_run(L, TDL_LOOP_ONCE), 1);
  pid_t pid = do_fork(mode);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  expect_exit_0(status);
  wake_the_world(mode == NEW_LOOP);
  go(finisher, NULL, 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void main_forks_child_execs(void **state)
{
  (void)state;
  from_main(EXEC);
}

static void main_forks_child_makes_a_loop(void **state)
{
  (void)state;
  from_main(NEW_LOOP);
}

int main(int argc, char **argv)
{
  if (argc == 3 && strcmp(argv[1], "--child") == 0) {
    if (strcmp(argv[2], "exit7") == 0)
      return 7;
    if (strcmp(argv[2], "say") == 0)
      return write(1, "said", 4) == 4 ? 0 : 1;
    return 2;
  }
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  if (n <= 0)
    return 2;
  self_exe[n] = '\0';
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(fiber_forks_child_execs, setup, teardown),
      cmocka_unit_test_setup_teardown(fiber_forks_child_makes_a_loop, setup, teardown),
      cmocka_unit_test_setup_teardown(callback_forks_child_execs, setup, teardown),
      cmocka_unit_test_setup_teardown(callback_forks_child_makes_a_loop, setup, teardown),
      cmocka_unit_test_setup_teardown(main_forks_child_execs, setup, teardown),
      cmocka_unit_test_setup_teardown(main_forks_child_makes_a_loop, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
