/* SPDX-License-Identifier: MIT */
/* Waiting for, signalling and releasing a spawned child. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/sys.h"
#include "process/process_internal.h"

#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

int tdl__process_reap(tdl_process *p, int block)
{
  if (p->tdl__state == TDL__PROC_REAPED)
    return 1;
  if (p->tdl__state != TDL__PROC_RUNNING)
    return -ECHILD;
  int st;
  pid_t r;
  /* By pid, never -1: we must not steal other code's children. */
  do
    r = waitpid(p->pid, &st, block ? 0 : WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0)
    return 0;
  if (r < 0) {
    p->tdl__state = TDL__PROC_LOST;
    return -ECHILD;
  }
  p->tdl__state = TDL__PROC_REAPED;
  p->tdl__status = st;
  return 1;
}

/* No pidfd (Linux < 5.3): waitpid(WNOHANG) between naps that back off.
 * nap(until) sleeps until then (the thread, or only the calling fiber).
 * Returns 1 (reaped), -ETIMEDOUT, or the error of reap or nap. */
static int reap_polling(tdl_process *p, tdl_time_t deadline, int (*nap)(tdl_time_t until))
{
  tdl__backoff b = tdl__proc_backoff();
  int r;
  while ((r = tdl__process_reap(p, 0)) == 0) {
    tdl_time_t now = tdl__clock_now(); /* not tdl_now(): a callback's loop time stands still */
    if (deadline != TDL_FOREVER && now >= deadline)
      return -ETIMEDOUT;
    int e = nap(tdl__deadline_min(deadline, tdl__time_add(now, tdl__backoff_step(&b))));
    if (e < 0)
      return e;
  }
  return r;
}

static int nap_thread(tdl_time_t until)
{
  struct timespec ts = {(time_t)(until / TDL_SEC), (long)(until % TDL_SEC)};
  tdl__sys_clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts); /* EINTR: look again */
  return 0;
}

static int nap_fiber(tdl_time_t until) { return tdl_sleep(until); }

static int wait_in_fiber(tdl_process *p, tdl_time_t deadline);

TDL_API int tdl_process_wait(tdl_process *p, int *status, tdl_time_t deadline)
{
  if (!p || p->tdl__state == TDL__PROC_NONE)
    return -EINVAL;
  if (p->tdl__cb)
    return -EBUSY;
  int r;
  if (tdl_fiber_self() != 0) {
    p->tdl__waiting++;
    r = wait_in_fiber(p, deadline);
    p->tdl__waiting--;
  } else if (deadline == TDL_FOREVER) {
    r = tdl__process_reap(p, 1);
  } else if (p->pidfd >= 0) {
    for (;;) {
      tdl_time_t left = deadline - tdl__clock_now();
      if (left < 0)
        left = 0;
      struct pollfd pfd = {p->pidfd, POLLIN, 0};
      struct timespec ts = {(time_t)(left / TDL_SEC), (long)(left % TDL_SEC)};
      int n = tdl__sys_ppoll(&pfd, 1, &ts);
      if (n < 0 && errno != EINTR)
        return -errno;
      if (n > 0 && (r = tdl__process_reap(p, 0)) != 0)
        break;
      if (left == 0)
        return -ETIMEDOUT;
    }
  } else {
    r = reap_polling(p, deadline, nap_thread);
  }
  if (r < 0)
    return r;
  if (status)
    *status = p->tdl__status;
  return 0;
}

static atomic_int no_pidfd_send_signal;

TDL_API int tdl_process_kill(tdl_process *p, int sig)
{
  if (!p || p->tdl__state == TDL__PROC_NONE || sig < 0 || sig >= _NSIG)
    return -EINVAL;
  if (p->tdl__state != TDL__PROC_RUNNING)
    return -ESRCH;
  if (p->pidfd >= 0 && !atomic_load_explicit(&no_pidfd_send_signal, memory_order_relaxed)) {
    if (syscall(SYS_pidfd_send_signal, p->pidfd, sig, NULL, 0) == 0)
      return 0;
    if (errno != ENOSYS)
      /* ESRCH: exited but not reaped, which kill(2) calls success. */
      return errno == ESRCH ? 0 : -errno;
    /* Linux 5.3's pidfd_open without 5.1's pidfd_send_signal does not
     * exist, but valgrind 3.19 has the one and not the other. */
    atomic_store_explicit(&no_pidfd_send_signal, 1, memory_order_relaxed);
  }
  /* The unreaped child holds its pid: it cannot have been reused. */
  if (kill(p->pid, sig) == 0)
    return 0;
  return errno == ESRCH ? 0 : -errno;
}

TDL_API void tdl_process_unwatch(tdl_process *p)
{
  if (p && p->tdl__unwatch)
    p->tdl__unwatch(p);
}

/* Only the calling fiber waits: it parks on the pidfd (readable once the
 * child has exited), or without a pidfd sleeps between waitpid(WNOHANG)
 * checks.  A timed-out or cancelled wait leaves the child running and
 * unreaped: it stays the handle's, and tdl_process_destroy() reaps it.
 * Returns 1 (reaped) or a negative errno. */
static int wait_in_fiber(tdl_process *p, tdl_time_t deadline)
{
  if (p->pidfd < 0)
    return reap_polling(p, deadline, nap_fiber);
  int r;
  while ((r = tdl__process_reap(p, 0)) == 0) {
    int e = tdl_fd_wait(p->pidfd, TDL_READ, deadline);
    if (e < 0)
      return e;
  }
  return r;
}

TDL_API int tdl_process_destroy(tdl_process *p)
{
  /* No child means no fds either; and a zeroed handle's fds read 0: stdin. */
  if (!p || p->tdl__state == TDL__PROC_NONE)
    return 0;
  if (p->tdl__waiting)
    return -EBUSY; /* it would wake to a handle gone under it */
  tdl_process_unwatch(p);
  if (p->tdl__state == TDL__PROC_RUNNING && tdl__process_reap(p, 0) == 0) {
    tdl_process_kill(p, SIGKILL);
    tdl__process_reap(p, 1);
  }
  tdl__proc_close(&p->pidfd);
  tdl__proc_close(&p->stdin_fd);
  tdl__proc_close(&p->stdout_fd);
  tdl__proc_close(&p->stderr_fd);
  p->pid = 0;
  p->tdl__state = TDL__PROC_NONE;
  return 0;
}
