/* SPDX-License-Identifier: MIT */
/* Shared test helpers.  Every test binary includes this after cmocka.h. */
#ifndef TDL_TEST_HELPERS_H
#define TDL_TEST_HELPERS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <treadle.h>

/* RUNNING_ON_VALGRIND: valgrind's client request where its header is
 * installed (make test), else 0.  A musl build (scripts/test-musl.sh) sees
 * musl's headers only, and never runs under valgrind. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

/* The bound of a wait for something that must happen (bytes that were
 * sent, a fiber that was cancelled, a thread that was started, a child that
 * exits): a bound, never a delay, that only a hang reaches.  No test may
 * depend on how fast the machine is: valgrind runs 20-50 times slower than
 * a native run, `make test` runs two valgrind runs at once on a two-core
 * machine, and whatever else the machine does stretches both.  Below
 * ctest's TIMEOUT (120 s), so that a hang fails on its own line. */
#define T_HANG (60 * TDL_SEC)
/* CLOCK_MONOTONIC, in ns: what a bound is read against where tdl_now() is
 * a loop's cached time that stands still (a fiber that blocks its thread
 * while it polls for something). */
tdl_time_t t_clock(void);

/* A loop on the back end named by $TDL_BACKEND (ctest runs each test binary
 * once per back end). Fails the test on error. */
tdl_loop *t_loop_new(void);
/* Frees the loop, asserting that nothing was left started. */
void t_loop_free(tdl_loop *loop);
/* A non-blocking, close-on-exec pipe; fails the test on error. */
void t_pipe(int fds[2]);
/* A TCP connection over loopback: *connected is the end that connected,
 * *accepted the end a listener accepted (both blocking, close-on-exec). */
void t_tcp_pair(int *connected, int *accepted);
/* A loopback TCP socket bound to `port` (0: any) of family's loopback
 * address, not listening and without SO_REUSEADDR: a connect there is
 * refused, and while it is held no other socket of any process, listener or
 * source port, can take that address.  Returns the fd, or -errno
 * (-EADDRINUSE when the port is taken, -EAFNOSUPPORT without IPv6). */
int t_hold_port(int family, int port);
/* A port refused on both loopbacks, held as above on 127.0.0.1 and, where
 * IPv6 is up, on ::1; held[] receives the fds (-1 for none).  Tests run in
 * parallel: a port merely closed again may be another test's listener by the
 * time it is dialled.  Returns the port; t_port_release closes held[]. */
int t_refusing_port(int held[2]);
void t_port_release(int held[2]);
/* Number of open fds of this process (from /proc/self/fd). */
int t_count_fds(void);
/* Read system calls this process has made (/proc/self/io syscr), or -1
 * where the kernel keeps no task I/O accounting.  Each call reads that file,
 * which the next call counts (two calls in a row tell how much). */
long t_reads_made(void);
/* Run tdl_loop_run(loop, ONCE) until *flag becomes non-zero, at most `iterations`
 * times; returns the flag. */
int t_run_until(tdl_loop *loop, const int *flag, int iterations);
/* Skip the running test, saying why on a line of its own first (cmocka's
 * skip() prints only "SKIPPED"): why is a string literal, printf's format. */
#define T_SKIP(...)                                                      \
  do {                                                                   \
    print_message("      skipped: " __VA_ARGS__);                        \
    print_message("\n");                                                 \
    skip();                                                              \
  } while (0)
/* A loop on the uring back end, or NULL where io_uring is refused (ENOSYS,
 * EPERM, ENOMEM): T_RING_LOOP then skips the test. */
tdl_loop *t_ring_loop(void);
#define T_RING_LOOP(loop)                                                \
  tdl_loop *loop = t_ring_loop();                                        \
  if (!loop) {                                                           \
    T_SKIP("io_uring is refused here (ENOSYS, EPERM or ENOMEM)");        \
    return;                                                              \
  }
/* Spawn fn(arg) on loop, detached; fails the test on error. */
void t_spawn(tdl_loop *loop, tdl_fiber_fn fn, void *arg);

#endif
