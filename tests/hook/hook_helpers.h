/* SPDX-License-Identifier: MIT */
/* Helpers of the libtreadle-hook tests (tests/hook/).  Each test includes
 * this after helpers.h.  Static inline: a test that uses only some of them
 * builds without unused-function warnings.  The raw_* calls go past the hook
 * (a system call of their own), so that a test can compare the hook's answer
 * with the kernel's or act on an fd behind the hook's back. */
#ifndef TDL_TEST_HOOK_HELPERS_H
#define TDL_TEST_HOOK_HELPERS_H

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include <treadle/hook.h>

/* The kernel's flags of fd. */
static inline int raw_getfl(int fd) { return (int)syscall(SYS_fcntl, fd, F_GETFL, 0); }

/* The kernel's close, which the hook does not see. */
static inline int raw_close(int fd) { return (int)syscall(SYS_close, fd); }

/* The kernel's select. */
static inline int raw_select(int n, void *r, void *w, void *e, struct timeval *tv)
{
#ifdef SYS_select
  return (int)syscall(SYS_select, n, r, w, e, tv);
#else /* AArch64 has only pselect6, with a timespec and no mask */
  struct timespec ts, *tsp = NULL;
  if (tv) {
    ts = (struct timespec){tv->tv_sec, tv->tv_usec * 1000};
    tsp = &ts;
  }
  return (int)syscall(SYS_pselect6, n, r, w, e, tsp, NULL);
#endif
}

/* fn(arg) as the first fiber of a loop of its own (tdl_fiber_main), run
 * until nothing is left; returns what fn returned. */
static inline void *run_main(tdl_fiber_fn fn, void *arg)
{
  void *res = NULL;
  assert_int_equal(tdl_fiber_main(fn, arg, &res), 0);
  return res;
}

/* fn(arg) in a fiber of the running one's loop, joinable. */
static inline tdl_fiber_t spawn(tdl_fiber_fn fn, void *arg)
{
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), fn, arg, NULL), 0);
  return f;
}

/* Joined within the bound only a hang reaches: a hang fails the test
 * instead of blocking it until ctest's timeout. */
static inline void join(tdl_fiber_t f) { assert_int_equal(tdl_fiber_join(f, NULL, tdl_after(T_HANG)), 0); }

static inline void cancel(tdl_fiber_t f) { assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), f), 0); }

/* How many times the hook parked a fiber so far (tdl_hook_stats). */
static inline uint64_t parked(void)
{
  tdl_hook_stats s;
  tdl_hook_stats_get(&s);
  return s.parked;
}

/* The user's SO_RCVTIMEO or SO_SNDTIMEO (name) on fd: ms milliseconds. */
static inline void set_timeo(int fd, int name, long ms)
{
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  assert_int_equal(setsockopt(fd, SOL_SOCKET, name, &tv, sizeof tv), 0);
}

static inline void close_pair(int p[2])
{
  assert_int_equal(close(p[0]), 0);
  assert_int_equal(close(p[1]), 0);
}

#endif
