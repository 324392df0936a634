/* SPDX-License-Identifier: MIT */
/*
 * Loop lifetime and the run loop.
 *
 * One iteration:
 *   1. run deferred callbacks queued before this iteration
 *   2. run runnable fibers (when the fiber scheduler is attached)
 *   3. before-poll hooks
 *   4. ask the back end for events, sleeping until the next timer unless work
 *      is already waiting (pending watchers, deferred callbacks, fibers, due
 *      timers)
 *   5. refresh the cached time; after-poll hooks
 *   6. run the watchers that became pending, then the callbacks of completed
 *      operations (op.c)
 *   7. fire due timers
 * TDL_LOOP_ONCE and TDL_LOOP_NOWAIT run exactly one iteration, so a timer armed
 * from a callback never fires within the same call.
 */
#include <stdlib.h>
#include <string.h>

#include "loop/loop_internal.h"

/* What was asked for: the option, or $TDL_BACKEND for the default. */
static int asked_backend(tdl_backend which, tdl_backend *out)
{
  if (which != TDL_BACKEND_DEFAULT) {
    if (which < TDL_BACKEND_EPOLL || which > TDL_BACKEND_AUTO)
      return -EINVAL;
    *out = which;
    return 0;
  }
  static const struct {
    const char *name;
    tdl_backend be;
  } names[] = {{"epoll", TDL_BACKEND_EPOLL}, {"poll", TDL_BACKEND_POLL}, {"uring", TDL_BACKEND_URING},
               {"auto", TDL_BACKEND_AUTO}};
  const char *env = getenv("TDL_BACKEND");
  *out = TDL_BACKEND_EPOLL;
  if (!env || !*env)
    return 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strcmp(env, names[i].name) == 0) {
      *out = names[i].be;
      return 0;
    }
  }
  return -EINVAL;
}

/* Open the back end that was asked for on loop; AUTO tries uring first and
 * takes epoll, quietly, where the kernel refuses it. */
static int open_backend(tdl_loop *loop, tdl_backend which)
{
  if (which == TDL_BACKEND_URING || which == TDL_BACKEND_AUTO) {
#ifdef TDL_HAVE_URING
    loop->be = &tdl__backend_uring;
    int e = loop->be->open(loop);
    if (e == 0 || which == TDL_BACKEND_URING)
      return e;
#else
    if (which == TDL_BACKEND_URING)
      return -ENOSYS;
#endif
  }
  loop->be = which == TDL_BACKEND_POLL ? &tdl__backend_poll : &tdl__backend_epoll;
  return loop->be->open(loop);
}

int tdl_loop_new(tdl_loop **out, const tdl_loop_options *opts)
{
  *out = NULL;
  tdl_backend which;
  int err = asked_backend(opts ? opts->backend : TDL_BACKEND_DEFAULT, &which);
  if (err < 0)
    return err;
  tdl_loop *loop = TDL__FAULT_ALLOC(calloc(1, sizeof *loop));
  if (!loop)
    return -ENOMEM;
  loop->spin = opts && opts->spin > 0 ? opts->spin : 0;
  loop->owner = pthread_self();
  loop->wake_fd = -1;
  loop->sig_fd = -1;
  sigemptyset(&loop->sig_mask);
  sigemptyset(&loop->sig_restore);
  tdl__timers_init(&loop->timers);
  err = open_backend(loop, which);
  if (err < 0) {
    free(loop);
    return err;
  }
  loop->now = tdl__clock_now();
  *out = loop;
  return 0;
}

bool tdl_loop_alive(const tdl_loop *loop)
{
  return loop->active > 0 || loop->timers.live > loop->timers_internal || !tdl__list_empty(&loop->defers) ||
         loop->ops_inflight > 0 || tdl__ops_pending(loop) ||
         (loop->sched_alive && loop->sched_alive((tdl_loop *)loop));
}

int tdl_loop_free(tdl_loop *loop)
{
  if (!loop)
    return 0;
  TDL__CHECK_THREAD(loop);
  if (loop->running || tdl_loop_alive(loop))
    return -EBUSY;
  if (loop->sched_destroy && loop->sched_destroy(loop) < 0)
    return -EBUSY; /* finished fibers not yet joined own their stacks */
  tdl__watchdog_close(loop); /* waits for a report in progress on the watchdog thread */
  tdl__signal_close(loop);
  tdl__remote_close(loop);
  loop->be->close(loop);
  tdl__timers_destroy(&loop->timers);
  free(loop->fds);
  free(loop->fdc);
  free(loop->queue);
  free(loop->batch);
  free(loop);
  return 0;
}

const char *tdl_loop_backend(const tdl_loop *loop) { return loop->be->name; }

int tdl_loop_fd(const tdl_loop *loop) { return loop->be->pollable_fd(loop); }

void tdl_loop_stop(tdl_loop *loop) { loop->stop_flag = 1; }

static bool has_work(tdl_loop *loop)
{
  return loop->stop_flag || tdl__io_has_pending(loop) || tdl__ops_pending(loop) || !tdl__list_empty(&loop->defers) ||
         tdl__remote_has_work(loop) || (loop->sched_busy && loop->sched_busy(loop));
}

tdl_time_t tdl_loop_timeout(tdl_loop *loop)
{
  if (has_work(loop))
    return 0;
  tdl_time_t next = tdl__timers_next(loop);
  if (next == TDL_FOREVER)
    return TDL_FOREVER;
  return next > loop->now ? next - loop->now : 0;
}

/* ---- running ---- */

int tdl_loop_run(tdl_loop *loop, tdl_loop_mode mode)
{
  TDL__CHECK_THREAD(loop);
  if (loop->running)
    return -EBUSY;
  if (mode != TDL_LOOP_DEFAULT && mode != TDL_LOOP_ONCE && mode != TDL_LOOP_NOWAIT)
    return -EINVAL;
  loop->running = 1;
  loop->stop_flag = 0;
  loop->now = tdl__clock_now();
  tdl__heartbeat_away(loop); /* from here until its first poll, the loop's code runs */
  tdl_loop *outer = tdl__tl_loop; /* a callback of another loop may run this one */
  tdl__tl_loop = loop;
  tdl__remote_busy(loop, true);
  int err = 0;
  for (;;) {
    tdl__defer_run(loop);
    if (loop->sched_run)
      loop->sched_run(loop);
    tdl__observers_run(loop, TDL_OBSERVER_BEFORE_POLL);

    bool alive = tdl_loop_alive(loop);
    if (mode == TDL_LOOP_DEFAULT && (loop->stop_flag || !alive))
      break;
    tdl_time_t timeout = 0;
    if (mode != TDL_LOOP_NOWAIT && alive && !loop->stop_flag)
      timeout = tdl_loop_timeout(loop);
    if (timeout != 0 && alive && loop->active == 0 && loop->timers.live == loop->timers_internal &&
        loop->ops_inflight == 0 &&
        !tdl__remote_expected(loop)) {
      /* Only parked fibers keep the loop alive, and nothing is left that
       * could wake one (no fd, timer, wakeup, signal, nor a port that other
       * threads hold): sleeping would never end (or only until an internal
       * timer, which wakes no fiber). */
      err = -EDEADLK;
      break;
    }
    tdl__heartbeat_home(loop); /* at its poll: a spin or a sleep is not a stall */
    if (timeout != 0 && loop->spin > 0 && tdl__remote_spin(loop, timeout))
      timeout = 0; /* work came while it spun */
    if (timeout != 0 && !tdl__remote_may_sleep(loop))
      timeout = 0; /* another thread left work meanwhile */
    /* With no fd to poll and no time to sleep, asking the kernel is a wasted
     * system call (fibers handing off to each other hit this constantly).
     * The eventfd of wakeups and ports needs no polling: their senders raise
     * a flag the loop reads.  Operations queued for the ring, or in flight on
     * it, do need the kernel. */
    if (timeout != 0 || loop->io_started > (loop->wake_fd >= 0) || loop->ops_inflight)
      err = loop->be->wait(loop, timeout);
    if (timeout != 0)
      tdl__remote_busy(loop, true);
    loop->now = tdl__clock_now();
    tdl__heartbeat_away(loop);
    tdl__observers_run(loop, TDL_OBSERVER_AFTER_POLL);
    if (err < 0)
      break;
    tdl__io_run_pending(loop);
    tdl__ops_run(loop);
    tdl__remote_run(loop);
    tdl__timers_run(loop);
    if (mode != TDL_LOOP_DEFAULT)
      break;
  }
  tdl__remote_busy(loop, false);
  tdl__heartbeat_home(loop); /* time outside tdl_loop_run is the caller's, not a stall */
  tdl__tl_loop = outer;
  loop->running = 0;
  loop->stop_flag = 0;
  if (err < 0)
    return err;
  return tdl_loop_alive(loop) ? 1 : 0;
}
