/* SPDX-License-Identifier: MIT */
/* Signals in a storm: while a helper thread sends SIGUSR1 to the loop's
 * thread every few microseconds, every blocking path of treadle completes
 * with exactly the right data or result, or fails only as its header says.
 * The handler is installed without SA_RESTART (so that blocking system calls
 * really fail with EINTR: the first test proves it), with SA_RESTART, and
 * the signal is also sent to the whole process (kill) rather than to the
 * thread.  No header documents -EINTR for any of the calls below, so none
 * may return it; every call has a deadline that the test asserts is never
 * reached, so that a spin or a lost wake-up fails instead of hanging.  Only
 * a hang may reach it (T_HANG): a send_all of everything_at_once waits for
 * its peer, which shares the loop with every other workload, and under
 * valgrind on a loaded machine that takes tens of seconds.
 *
 * The binary is also its own child program: <self> --child MODE ARGS. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
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
#include "process/process_internal.h" /* tdl__spawn_debug */

#define LONG T_HANG /* a deadline no call may reach */
#define DL() tdl_after(LONG)

/* valgrind, qemu-user and ThreadSanitizer run the same paths, on less data
 * and with a slower storm (they serialise, emulate or watch every thread). */
static bool slow(void)
{
#if defined(__SANITIZE_THREAD__)
  return true;
#else
  return RUNNING_ON_VALGRIND || getenv("TDL_QEMU_USER") != NULL;
#endif
}
#define MIB ((size_t)1 << 20)

/* Every stream the test sends is a prefix of one pattern, made once. */
static unsigned char *pattern;
static size_t pattern_len;

static const unsigned char *pattern_at(size_t off, size_t n)
{
  if (!pattern) {
    pattern_len = (slow() ? 2 : 10) * MIB; /* the longest stream */
    pattern = malloc(pattern_len);
    if (!pattern)
      abort();
    for (size_t i = 0; i < pattern_len; i++)
      pattern[i] = (unsigned char)(i ^ (i >> 8) ^ (i >> 17));
  }
  if (off > pattern_len || n > pattern_len - off)
    abort();
  return pattern + off;
}

static void fill(unsigned char *b, size_t off, size_t n) { memcpy(b, pattern_at(off, n), n); }

static bool matches(const unsigned char *b, size_t off, size_t n) { return memcmp(b, pattern_at(off, n), n) == 0; }

/* ---- the child program ------------------------------------------------- */

static char self_exe[PATH_MAX];

static void child_write_all(int fd, const unsigned char *p, size_t n)
{
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      _exit(90);
    p += k;
    n -= (size_t)k;
  }
}

/* exit N | nap MS N (sleep, then exit N) | spew N (N bytes of the pattern) | cat */
static int child_main(int argc, char **argv)
{
  if (strcmp(argv[0], "exit") == 0 && argc == 2)
    return atoi(argv[1]);
  if (strcmp(argv[0], "nap") == 0 && argc == 3) {
    long ms = atol(argv[1]);
    struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
      ;
    return atoi(argv[2]);
  }
  if (strcmp(argv[0], "spew") == 0 && argc == 2) {
    static unsigned char b[65536];
    size_t total = (size_t)atol(argv[1]);
    for (size_t off = 0; off < total; off += sizeof b) {
      size_t n = total - off < sizeof b ? total - off : sizeof b;
      fill(b, off, n);
      child_write_all(1, b, n);
    }
    return 0;
  }
  if (strcmp(argv[0], "cat") == 0 && argc == 1) {
    static unsigned char b[65536];
    ssize_t n;
    while ((n = read(0, b, sizeof b)) > 0 || (n < 0 && errno == EINTR))
      if (n > 0)
        child_write_all(1, b, (size_t)n);
    return n == 0 ? 0 : 91;
  }
  return 92;
}

/* argv for the child, in static storage per slot (fibers run concurrently). */
static const char *const *child(int slot, const char *mode, const char *a1, const char *a2)
{
  static const char *v[8][6];
  const char **a = v[slot];
  a[0] = self_exe;
  a[1] = "--child";
  a[2] = mode;
  a[3] = a1;
  a[4] = a1 ? a2 : NULL;
  a[5] = NULL;
  return a;
}

/* ---- the storm --------------------------------------------------------- */

typedef struct storm_cfg {
  bool restart;       /* SA_RESTART on the handler */
  bool whole_process; /* kill(getpid()) instead of pthread_kill(loop thread) */
} storm_cfg;

static const storm_cfg thread_eintr = {false, false};
static const storm_cfg thread_restart = {true, false};
static const storm_cfg process_eintr = {false, true};

static const storm_cfg *cfg;
static pthread_t loop_thread, storm_thread;
static atomic_int storm_on;
static atomic_long handled;
static long handled_at_start;
static tdl_loop *L;

static void on_usr1(int sig)
{
  (void)sig;
  atomic_fetch_add_explicit(&handled, 1, memory_order_relaxed);
}

static tdl_time_t mono(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

static void *storm(void *arg)
{
  (void)arg;
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &s, NULL); /* a process-wide signal must go to the loop's thread */
  pid_t self = getpid();
  bool gently = slow();
  while (atomic_load_explicit(&storm_on, memory_order_relaxed)) {
    if (cfg->whole_process)
      kill(self, SIGUSR1);
    else
      pthread_kill(loop_thread, SIGUSR1);
    if (gently) {
      struct timespec ts = {0, 100 * 1000};
      nanosleep(&ts, NULL);
    } else {
      tdl_time_t until = mono() + 3 * TDL_USEC; /* a few µs, without the timer slack of a sleep */
      while (mono() < until)
        ;
    }
  }
  return NULL;
}

static int storm_setup(void **state)
{
  cfg = *state;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = cfg->restart ? SA_RESTART : 0;
  sigemptyset(&sa.sa_mask);
  /* Never put back: a signal still pending after the storm must not kill. */
  assert_int_equal(sigaction(SIGUSR1, &sa, NULL), 0);
  L = t_loop_new();
  loop_thread = pthread_self();
  atomic_store(&handled, 0);
  atomic_store(&storm_on, 1);
  assert_int_equal(pthread_create(&storm_thread, NULL, storm, NULL), 0);
  /* Every test runs inside the storm. */
  while (atomic_load(&handled) == 0) {
    struct timespec ts = {0, 100 * 1000};
    nanosleep(&ts, NULL);
  }
  handled_at_start = atomic_load(&handled);
  return 0;
}

static int storm_teardown(void **state)
{
  (void)state;
  /* Signals kept coming while the test ran (a skipped test may end before
   * the next one). */
  tdl_time_t until = mono() + LONG;
  while (atomic_load(&handled) == handled_at_start && mono() < until) {
    struct timespec ts = {0, 100 * 1000};
    nanosleep(&ts, NULL);
  }
  atomic_store(&storm_on, 0);
  assert_int_equal(pthread_join(storm_thread, NULL), 0);
  assert_true(atomic_load(&handled) > handled_at_start);
  assert_int_equal(tdl_loop_free(L), 0);
  /* No child is left, running or zombie. */
  siginfo_t si;
  memset(&si, 0, sizeof si);
  assert_int_equal(waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT), -1);
  assert_int_equal(errno, ECHILD);
  return 0;
}

/* qemu-user 7.2 cannot emulate treadle's spawning (.ci/aarch64.sh), and
 * ThreadSanitizer does not follow a clone(CLONE_VM) child (the spawn tests
 * are not among the thread tests): these run spawns natively only. */
static bool spawn_ok(void)
{
#if defined(__SANITIZE_THREAD__)
  return false;
#else
  return getenv("TDL_QEMU_USER") == NULL;
#endif
}
#define SKIP_SPAWN_UNDER_TOOLS()                                                                         \
  do {                                                                                                   \
    if (!spawn_ok())                                                                                     \
      T_SKIP("spawns run natively only (qemu-user cannot emulate them, TSan does not follow them)");     \
  } while (0)

static int pending; /* workload fibers still running */

static void go(tdl_fiber_fn fn, void *arg)
{
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, fn, arg, NULL), 0);
  assert_int_equal(tdl_fiber_detach(L, h), 0);
  pending++;
}

static void run_all(void)
{
  /* The loop's own poll is interrupted all along: it never returns -EINTR. */
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(pending, 0);
}

/* ---- the storm really interrupts --------------------------------------- */

static void storm_interrupts_blocking_calls(void **state)
{
  (void)state;
  /* poll() is never restarted after a handler, SA_RESTART or not. */
  errno = 0;
  assert_int_equal(poll(NULL, 0, (int)(LONG / TDL_MSEC)), -1);
  assert_int_equal(errno, EINTR);
  if (cfg->restart)
    return;
  /* Without SA_RESTART even a read of a blocking pipe fails. */
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  char c;
  errno = 0;
  assert_int_equal(read(p[0], &c, 1), -1);
  assert_int_equal(errno, EINTR);
  close(p[0]);
  close(p[1]);
}

/* ---- fiber I/O: a pipe and a socketpair -------------------------------- */

static size_t stream_total(void) { return (slow() ? 1 : 10) * MIB; }

/* Write stream_total() bytes of the pattern to fd in uneven pieces, then
 * close it. */
static void *pipe_writer(void *arg)
{
  int fd = *(int *)arg;
  size_t total = stream_total(), off = 0, piece = 1;
  unsigned char *b = malloc(65536);
  assert_non_null(b);
  while (off < total) {
    size_t n = piece < total - off ? piece : total - off;
    fill(b, off, n);
    ssize_t k = tdl_write(fd, b, n, DL());
    assert_true(k > 0); /* not -EINTR, not -ETIMEDOUT */
    off += (size_t)k;
    piece = piece * 3 % 65521 + 1;
  }
  free(b);
  assert_int_equal(tdl_close(fd), 0);
  pending--;
  return NULL;
}

/* Read until EOF: exactly stream_total() bytes of the pattern must come. */
static void *pipe_reader(void *arg)
{
  int fd = *(int *)arg;
  size_t off = 0;
  unsigned char *b = malloc(65536);
  assert_non_null(b);
  for (;;) {
    ssize_t k = tdl_read(fd, b, 65536, DL());
    assert_true(k >= 0);
    if (k == 0)
      break;
    assert_true(matches(b, off, (size_t)k));
    off += (size_t)k;
  }
  free(b);
  assert_int_equal(off, stream_total());
  assert_int_equal(tdl_close(fd), 0);
  pending--;
  return NULL;
}

/* Socketpair halves: each end sends and receives stream_total() at once. */
static int sp[2];
static int sp_closing;

static void *sock_sender(void *arg)
{
  int fd = sp[(intptr_t)arg];
  size_t total = stream_total(), piece = MIB;
  unsigned char *b = malloc(piece);
  assert_non_null(b);
  for (size_t off = 0; off < total; off += piece) {
    size_t n = piece < total - off ? piece : total - off, sent = 0;
    fill(b, off, n);
    assert_int_equal(tdl_net_send_all(fd, b, n, &sent, DL()), 0);
    assert_int_equal(sent, n);
  }
  free(b);
  if (++sp_closing == 4) {
    assert_int_equal(tdl_close(sp[0]), 0);
    assert_int_equal(tdl_close(sp[1]), 0);
  }
  pending--;
  return NULL;
}

static void *sock_receiver(void *arg)
{
  int fd = sp[(intptr_t)arg];
  size_t total = stream_total(), piece = 65536 + 7;
  unsigned char *b = malloc(piece);
  assert_non_null(b);
  for (size_t off = 0; off < total; off += piece) {
    size_t n = piece < total - off ? piece : total - off, got = 0;
    assert_int_equal(tdl_net_recv_exactly(fd, b, n, &got, DL()), 0);
    assert_int_equal(got, n);
    assert_true(matches(b, off, n));
  }
  free(b);
  if (++sp_closing == 4) {
    assert_int_equal(tdl_close(sp[0]), 0);
    assert_int_equal(tdl_close(sp[1]), 0);
  }
  pending--;
  return NULL;
}

static int pp[2];

static void start_streams(void)
{
  t_pipe(pp);
  go(pipe_writer, &pp[1]);
  go(pipe_reader, &pp[0]);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  sp_closing = 0;
  go(sock_sender, (void *)0);
  go(sock_receiver, (void *)1);
  go(sock_sender, (void *)1);
  go(sock_receiver, (void *)0);
}

static void pipes_and_sockets(void **state)
{
  (void)state;
  start_streams();
  run_all();
}

/* ---- sleeps and timers -------------------------------------------------- */

static void *sleeper(void *arg)
{
  (void)arg;
  int n = slow() ? 20 : 200;
  for (int i = 0; i < n; i++) {
    tdl_time_t d = tdl_after((i % 7) * 50 * TDL_USEC);
    assert_int_equal(tdl_sleep(d), 0);
    assert_true(tdl_now() >= d); /* woken by its timer, never early */
  }
  tdl_time_t d = tdl_after(30 * TDL_MSEC); /* one long sleep: many polls interrupted */
  assert_int_equal(tdl_sleep(d), 0);
  assert_true(tdl_now() >= d);
  /* A deadline that is meant to pass: the documented -ETIMEDOUT, on time. */
  d = tdl_after(2 * TDL_MSEC);
  assert_int_equal(tdl_fiber_park(d), -ETIMEDOUT);
  assert_true(tdl_now() >= d);
  pending--;
  return NULL;
}

static int ticks;
static tdl_time_t tick_due;

static void on_tick(tdl_loop *loop, tdl_timer *t)
{
  assert_true(tdl_now() >= tick_due);
  tick_due += TDL_MSEC;
  if (++ticks == 20)
    assert_int_equal(tdl_timer_stop(loop, t), 0);
}

static tdl_timer tick_timer;

static void start_timers(void)
{
  go(sleeper, NULL);
  go(sleeper, NULL);
  ticks = 0;
  tdl_timer_init(&tick_timer, on_tick, NULL);
  tick_due = tdl_now() + TDL_MSEC;
  assert_int_equal(tdl_timer_start_at(L, &tick_timer, tick_due, TDL_MSEC), 0);
}

static void sleeps_and_timers(void **state)
{
  (void)state;
  start_timers();
  run_all();
  assert_int_equal(ticks, 20);
}

/* ---- connect and accept on loopback ------------------------------------- */

static int lfd = -1;
static tdl_addr laddr;

static int conns(void) { return slow() ? 20 : 200; }

static void *acceptor(void *arg)
{
  (void)arg;
  for (int i = 0; i < conns(); i++) {
    tdl_addr peer;
    int fd = tdl_net_accept(lfd, &peer, DL());
    assert_true(fd >= 0);
    assert_true(peer.len > 0);
    uint32_t v;
    assert_int_equal(tdl_net_recv_exactly(fd, &v, sizeof v, NULL, DL()), 0);
    v = ~v;
    assert_int_equal(tdl_net_send_all(fd, &v, sizeof v, NULL, DL()), 0);
    assert_int_equal(tdl_close(fd), 0);
  }
  assert_int_equal(tdl_close(lfd), 0);
  lfd = -1;
  pending--;
  return NULL;
}

static void *connector(void *arg)
{
  (void)arg;
  for (uint32_t i = 0; i < (uint32_t)conns(); i++) {
    int fd = tdl_net_connect(&laddr, DL());
    assert_true(fd >= 0);
    assert_int_equal(tdl_net_send_all(fd, &i, sizeof i, NULL, DL()), 0);
    uint32_t v = 0;
    assert_int_equal(tdl_net_recv_exactly(fd, &v, sizeof v, NULL, DL()), 0);
    assert_int_equal(v, ~i);
    /* Then the acceptor closes: EOF, not an error. */
    char c;
    assert_int_equal(tdl_read(fd, &c, 1, DL()), 0);
    assert_int_equal(tdl_close(fd), 0);
  }
  pending--;
  return NULL;
}

static void start_connections(void)
{
  lfd = tdl_net_listen_str("127.0.0.1:0", 0, 0);
  assert_true(lfd >= 0);
  assert_int_equal(tdl_net_local_addr(lfd, &laddr), 0);
  go(acceptor, NULL);
  go(connector, NULL);
}

static void connect_and_accept(void **state)
{
  (void)state;
  start_connections();
  run_all();
}

/* ---- spawn, wait, run ---------------------------------------------------- */

static void *spawner(void *arg)
{
  (void)arg;
  int n = slow() ? 5 : 10;
  for (int i = 0; i < n; i++) {
    char code[8];
    snprintf(code, sizeof code, "%d", i % 50);
    tdl_process p;
    tdl_process_options o;
    memset(&o, 0, sizeof o);
    o.argv = child(0, "exit", code, NULL);
    assert_int_equal(tdl_process_spawn(&p, &o), 0);
    int st = -1;
    assert_int_equal(tdl_process_wait(&p, &st, DL()), 0);
    assert_true(tdl_process_exited(st));
    assert_int_equal(tdl_process_exit_code(st), i % 50);
    tdl_process_destroy(&p);
  }
  /* A child that takes a while: the fiber stays parked on its pidfd, or,
   * as on kernels without pidfds, sleeps between checks. */
  for (int debug = 0; debug <= TDL__DEBUG_NO_PIDFD; debug += TDL__DEBUG_NO_PIDFD) {
    tdl_process p;
    tdl_process_options o;
    memset(&o, 0, sizeof o);
    o.argv = child(0, "nap", "30", "3");
    tdl__spawn_debug = debug; /* for this spawn only: it does not park */
    assert_int_equal(tdl_process_spawn(&p, &o), 0);
    tdl__spawn_debug = 0;
    int st = -1;
    assert_int_equal(tdl_process_wait(&p, &st, DL()), 0);
    assert_true(tdl_process_exited(st));
    assert_int_equal(tdl_process_exit_code(st), 3);
    tdl_process_destroy(&p);
  }
  pending--;
  return NULL;
}

static size_t spew_total(void) { return (slow() ? 1 : 4) * MIB; }

static void *capturer(void *arg)
{
  (void)arg;
  char n[24];
  snprintf(n, sizeof n, "%zu", spew_total());
  tdl_process_run_result r;
  assert_int_equal(tdl_process_run(&r, child(1, "spew", n, NULL), NULL, NULL, 0, 2 * spew_total(), DL()), 0);
  assert_true(tdl_process_exited(r.status));
  assert_int_equal(tdl_process_exit_code(r.status), 0);
  assert_false(r.timed_out);
  assert_false(r.out_truncated);
  assert_int_equal(r.out_len, spew_total());
  assert_true(matches((unsigned char *)r.out, 0, r.out_len));
  assert_int_equal(r.err_len, 0);
  tdl_process_run_result_destroy(&r);
  pending--;
  return NULL;
}

/* Input written to the child's stdin while signals come: cat gives it back. */
static void *feeder(void *arg)
{
  (void)arg;
  size_t len = (slow() ? 1 : 2) * MIB;
  unsigned char *in = malloc(len);
  assert_non_null(in);
  fill(in, 0, len);
  tdl_process_run_result r;
  assert_int_equal(tdl_process_run(&r, child(2, "cat", NULL, NULL), NULL, in, len, 2 * len, DL()), 0);
  assert_true(tdl_process_exited(r.status));
  assert_int_equal(tdl_process_exit_code(r.status), 0);
  assert_int_equal(r.in_written, len);
  assert_int_equal(r.out_len, len);
  assert_memory_equal(r.out, in, len);
  tdl_process_run_result_destroy(&r);
  free(in);
  pending--;
  return NULL;
}

static void start_processes(void)
{
  go(spawner, NULL);
  go(capturer, NULL);
  go(feeder, NULL);
}

static void spawn_wait_and_run(void **state)
{
  (void)state;
  SKIP_SPAWN_UNDER_TOOLS();
  start_processes();
  run_all();
}

/* ---- files and the blocking pool ---------------------------------------- */

static char file_path[64];

static void *file_worker(void *arg)
{
  (void)arg;
  size_t total = (slow() ? 1 : 8) * MIB, piece = 65536;
  unsigned char *b = malloc(piece);
  assert_non_null(b);
  int fd = tdl_fs_open(file_path, O_RDWR | O_TRUNC, 0, DL());
  assert_true(fd >= 0);
  for (size_t off = 0; off < total;) {
    size_t n = piece < total - off ? piece : total - off;
    fill(b, off, n);
    ssize_t k = tdl_fs_pwrite(fd, b, n, (off_t)off, DL());
    if (k <= 0)
      fail_msg("tdl_fs_pwrite of %zu at %zu: %zd (%s)", n, off, k, tdl_strerror((int)k));
    off += (size_t)k;
  }
  assert_int_equal(tdl_fs_fsync(fd, DL()), 0);
  for (size_t off = 0; off < total;) {
    ssize_t k = tdl_fs_pread(fd, b, piece, (off_t)off, DL());
    if (k <= 0)
      fail_msg("tdl_fs_pread of %zu at %zu: %zd (%s)", piece, off, k, tdl_strerror((int)k));
    assert_true(matches(b, off, (size_t)k));
    off += (size_t)k;
  }
  assert_int_equal(tdl_fs_pread(fd, b, piece, (off_t)total, DL()), 0); /* the end */
  struct stat st;
  assert_int_equal(tdl_fs_stat(file_path, &st, DL()), 0);
  assert_int_equal(st.st_size, (off_t)total);
  assert_int_equal(tdl_close(fd), 0);
  assert_int_equal(tdl_fs_unlink(file_path, DL()), 0);
  free(b);
  pending--;
  return NULL;
}

static void *twice(void *arg) { return (void *)((intptr_t)arg * 2); }

static void *nap_on_pool(void *arg)
{
  struct timespec ts = {0, 200 * 1000};
  nanosleep(&ts, NULL); /* the pool's threads block signals: no EINTR there */
  return arg;
}

static void *pool_worker(void *arg)
{
  (void)arg;
  int n = slow() ? 50 : 500;
  for (intptr_t i = 0; i < n; i++) {
    void *r = NULL;
    assert_int_equal(tdl_pool_call(TDL_LANE_USER, i % 10 ? twice : nap_on_pool, (void *)i, NULL, &r, DL()), 0);
    assert_int_equal((intptr_t)r, i % 10 ? 2 * i : i);
  }
  pending--;
  return NULL;
}

static void start_files_and_pool(void)
{
  snprintf(file_path, sizeof file_path, "/tmp/tdl-storm-XXXXXX");
  int fd = mkstemp(file_path);
  assert_true(fd >= 0);
  close(fd);
  go(file_worker, NULL);
  go(pool_worker, NULL);
  go(pool_worker, NULL);
}

static void files_and_pool(void **state)
{
  (void)state;
  start_files_and_pool();
  run_all();
}

/* ---- waits outside a fiber: the thread blocks (ppoll, waitpid) ---------- */

static void waits_outside_a_fiber(void **state)
{
  (void)state;
  SKIP_SPAWN_UNDER_TOOLS();
  /* With a pidfd, and as on kernels without (waitpid polled between naps). */
  for (int debug = 0; debug <= TDL__DEBUG_NO_PIDFD; debug += TDL__DEBUG_NO_PIDFD) {
    tdl__spawn_debug = debug;
    tdl_process_options o;
    memset(&o, 0, sizeof o);
    o.argv = child(0, "nap", "30", "5");
    /* TDL_FOREVER: waitpid, which SA_RESTART restarts and else fails. */
    tdl_process p;
    assert_int_equal(tdl_process_spawn(&p, &o), 0);
    assert_int_equal(p.pidfd >= 0, debug == 0);
    int st = -1;
    assert_int_equal(tdl_process_wait(&p, &st, TDL_FOREVER), 0);
    assert_true(tdl_process_exited(st));
    assert_int_equal(tdl_process_exit_code(st), 5);
    tdl_process_destroy(&p);
    /* A deadline: ppoll on the pidfd (never restarted), or naps. */
    assert_int_equal(tdl_process_spawn(&p, &o), 0);
    st = -1;
    assert_int_equal(tdl_process_wait(&p, &st, DL()), 0);
    assert_true(tdl_process_exited(st));
    assert_int_equal(tdl_process_exit_code(st), 5);
    tdl_process_destroy(&p);
    /* A deadline that passes: the documented -ETIMEDOUT, not early; then
     * destroy kills the child and reaps it (waitpid again). */
    o.argv = child(0, "nap", "10000", "0");
    assert_int_equal(tdl_process_spawn(&p, &o), 0);
    tdl_time_t d = tdl_after(20 * TDL_MSEC);
    assert_int_equal(tdl_process_wait(&p, NULL, d), -ETIMEDOUT);
    assert_true(tdl_now() >= d);
    tdl_process_destroy(&p);
    /* Run and capture on the call's private loop. */
    char n[24];
    snprintf(n, sizeof n, "%zu", spew_total());
    tdl_process_run_result r;
    assert_int_equal(tdl_process_run(&r, child(1, "spew", n, NULL), NULL, NULL, 0, 2 * spew_total(), DL()), 0);
    assert_int_equal(tdl_process_exit_code(r.status), 0);
    assert_int_equal(r.out_len, spew_total());
    assert_true(matches((unsigned char *)r.out, 0, r.out_len));
    tdl_process_run_result_destroy(&r);
  }
  tdl__spawn_debug = 0;
}

/* A group's loops (their threads take a process-wide signal too) and
 * tdl_group_wait, which blocks the main thread until they end. */
#define GROUP_LOOPS 2
static atomic_int group_finished;
static int group_ok[GROUP_LOOPS];

static void *group_main(void *arg)
{
  (void)arg;
  int me = tdl_group_index(), ok = 1, n = slow() ? 5 : 20;
  for (intptr_t i = 0; i < n; i++) {
    tdl_time_t d = tdl_after(TDL_MSEC);
    void *r = NULL;
    ok &= tdl_sleep(d) == 0 && tdl_now() >= d;
    ok &= tdl_pool_call(TDL_LANE_USER, twice, (void *)i, NULL, &r, DL()) == 0 && (intptr_t)r == 2 * i;
  }
  group_ok[me] = ok;
  if (atomic_fetch_add(&group_finished, 1) + 1 == GROUP_LOOPS)
    tdl_group_stop(tdl_group_self()); /* the last one done stops them all */
  return NULL;
}

static void group_wait_outside_a_fiber(void **state)
{
  (void)state;
  memset(group_ok, 0, sizeof group_ok);
  atomic_store(&group_finished, 0);
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = GROUP_LOOPS, .main = group_main}), 0);
  assert_int_equal(tdl_group_wait(g, DL()), 0);
  assert_int_equal(tdl_group_free(g), 0);
  for (int i = 0; i < GROUP_LOOPS; i++)
    assert_int_equal(group_ok[i], 1);
}

/* The loop's own poll with nothing but a timer: it sleeps in epoll_wait or
 * ppoll, is interrupted again and again, and wakes for the timer only. */
static int fired;
static tdl_time_t fire_at;

static void on_fire(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  assert_true(tdl_now() >= fire_at);
  fired++;
}

static void loop_poll_alone(void **state)
{
  (void)state;
  tdl_timer t;
  tdl_timer_init(&t, on_fire, NULL);
  fired = 0;
  fire_at = tdl_now() + 50 * TDL_MSEC;
  assert_int_equal(tdl_timer_start_at(L, &t, fire_at, 0), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(fired, 1);
  /* ONCE returns after one iteration, interrupted or not, and never fails. */
  fire_at = tdl_now() + 20 * TDL_MSEC;
  assert_int_equal(tdl_timer_start_at(L, &t, fire_at, 0), 0);
  while (fired == 1)
    assert_true(tdl_loop_run(L, TDL_LOOP_ONCE) >= 0);
  assert_int_equal(fired, 2);
}

/* ---- everything at once ------------------------------------------------- */

static void everything_at_once(void **state)
{
  (void)state;
  start_streams();
  start_timers();
  start_connections();
  if (spawn_ok())
    start_processes();
  start_files_and_pool();
  run_all();
  assert_int_equal(ticks, 20);
}

#define STORM(fn, c)                                                                                     \
  {                                                                                                      \
    #fn " (" #c ")", fn, storm_setup, storm_teardown, (void *)&c                                         \
  }
#define STORMS(fn) STORM(fn, thread_eintr), STORM(fn, thread_restart), STORM(fn, process_eintr)

int main(int argc, char **argv)
{
  if (argc >= 3 && strcmp(argv[1], "--child") == 0)
    return child_main(argc - 2, argv + 2);
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  if (n <= 0)
    return 2;
  self_exe[n] = '\0';
  const struct CMUnitTest tests[] = {
      STORMS(storm_interrupts_blocking_calls),
      STORMS(pipes_and_sockets),
      STORMS(sleeps_and_timers),
      STORMS(connect_and_accept),
      STORMS(spawn_wait_and_run),
      STORMS(files_and_pool),
      STORMS(waits_outside_a_fiber),
      STORMS(group_wait_outside_a_fiber),
      STORMS(loop_poll_alone),
      STORMS(everything_at_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
