/* Waiting for, signalling and releasing a spawned child. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc/proc_internal.h"

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

static void sleep_ns(tdl_time_t ns)
{
  struct timespec ts = {(time_t)(ns / TDL_SEC), (long)(ns % TDL_SEC)};
  nanosleep(&ts, NULL);
}

static int wait_in_fiber(tdl_process *p, tdl_time_t deadline, int *status);

TDL_API int tdl_process_wait(tdl_process *p, tdl_time_t deadline, int *status)
{
  if (!p || p->tdl__state == TDL__PROC_NONE)
    return -EINVAL;
  if (p->tdl__cb)
    return -EBUSY;
  if (tdl_fiber_self() != 0)
    return wait_in_fiber(p, deadline, status);
  /* Outside a fiber: the thread blocks. */
  int r;
  if (deadline == TDL_FOREVER) {
    r = tdl__process_reap(p, 1);
  } else if (p->pidfd >= 0) {
    for (;;) {
      tdl_time_t left = deadline - tdl__clock_now();
      if (left < 0)
        left = 0;
      struct pollfd pfd = {p->pidfd, POLLIN, 0};
      struct timespec ts = {(time_t)(left / TDL_SEC), (long)(left % TDL_SEC)};
      int n = ppoll(&pfd, 1, &ts, NULL);
      if (n < 0 && errno != EINTR)
        return -errno;
      if (n > 0 && (r = tdl__process_reap(p, 0)) != 0)
        break;
      if (left == 0)
        return -ETIMEDOUT;
    }
  } else {
    /* No pidfd (Linux < 5.3): poll waitpid with a backoff. */
    tdl_time_t nap = TDL_MSEC;
    for (;;) {
      if ((r = tdl__process_reap(p, 0)) != 0)
        break;
      tdl_time_t left = deadline - tdl__clock_now();
      if (left <= 0)
        return -ETIMEDOUT;
      sleep_ns(left < nap ? left : nap);
      if (nap < 20 * TDL_MSEC)
        nap *= 2;
    }
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
 * unreaped: it stays the handle's, and tdl_process_destroy() reaps it. */
static int wait_in_fiber(tdl_process *p, tdl_time_t deadline, int *status)
{
  int r;
  tdl_time_t nap = TDL_MSEC;
  while ((r = tdl__process_reap(p, 0)) == 0) {
    int e;
    if (p->pidfd >= 0) {
      e = tdl_wait_fd(p->pidfd, TDL_READ, deadline);
    } else {
      tdl_time_t until = tdl_after(nap);
      e = tdl_sleep(deadline != TDL_FOREVER && deadline < until ? deadline : until);
      if (e == 0 && deadline != TDL_FOREVER && deadline <= tdl_loop_now(tdl_fiber_loop()) &&
          (r = tdl__process_reap(p, 0)) == 0)
        e = -ETIMEDOUT;
      if (nap < 20 * TDL_MSEC)
        nap *= 2;
    }
    if (e < 0)
      return e;
  }
  if (r < 0)
    return r;
  if (status)
    *status = p->tdl__status;
  return 0;
}

static void close_tdl(int *fd)
{
  if (*fd >= 0) {
    tdl_close(*fd);
    *fd = -1;
  }
}

TDL_API void tdl_process_destroy(tdl_process *p)
{
  if (!p)
    return;
  tdl_process_unwatch(p);
  if (p->tdl__state == TDL__PROC_RUNNING && tdl__process_reap(p, 0) == 0) {
    tdl_process_kill(p, SIGKILL);
    tdl__process_reap(p, 1);
  }
  /* tdl_close: fibers may have waited on any of these, and a loop keeps state
   * per fd number that must not outlive the file. */
  close_tdl(&p->pidfd);
  close_tdl(&p->stdin_fd);
  close_tdl(&p->stdout_fd);
  close_tdl(&p->stderr_fd);
  p->pid = 0;
  p->tdl__state = TDL__PROC_NONE;
}
