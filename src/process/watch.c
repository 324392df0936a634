/* SPDX-License-Identifier: MIT */
/*
 * The loop's child watcher.  Kept apart from the rest of spawn so that only
 * this file needs the loop: release reaches it through p->tdl__unwatch.
 */
#include <errno.h>
#include <signal.h>

#include "process/process_internal.h"

static void unwatch(tdl_process *p)
{
  if (p->pidfd >= 0) {
    tdl_io_stop(p->tdl__loop, &p->tdl__w.io);
  } else {
    tdl_signal_stop(p->tdl__loop, &p->tdl__w.chld.sig);
    tdl_defer_cancel(p->tdl__loop, &p->tdl__w.chld.check);
  }
  p->tdl__cb = NULL;
  p->tdl__loop = NULL;
  p->tdl__unwatch = NULL;
}

static void check(tdl_loop *loop, tdl_process *p)
{
  int r = tdl__process_reap(p, 0);
  if (r == 0)
    return;
  tdl_process_cb cb = p->tdl__cb;
  unwatch(p);
  /* Last: the callback may release and free p. */
  cb(loop, p, r > 0 ? p->tdl__status : r);
}

static void on_pidfd(tdl_loop *loop, tdl_io *w, unsigned events)
{
  (void)events;
  check(loop, w->data);
}

static void on_sigchld(tdl_loop *loop, tdl_signal *s, int signum)
{
  (void)signum;
  check(loop, s->data);
}

static void on_check(tdl_loop *loop, tdl_defer *d) { check(loop, d->data); }

TDL_API int tdl_process_watch(tdl_loop *loop, tdl_process *p, tdl_process_cb cb)
{
  if (!loop || !p || !cb || p->tdl__state != TDL__PROC_RUNNING || p->tdl__cb)
    return -EINVAL;
  int r;
  if (p->pidfd >= 0) {
    tdl_io_init(&p->tdl__w.io, p->pidfd, on_pidfd, p);
    if ((r = tdl_io_start(loop, &p->tdl__w.io, TDL_READ)) < 0)
      return r;
    /* The child may have exited before the fd was registered: look once on
     * the next iteration rather than trust the back end to report a level. */
    tdl_io_feed(loop, &p->tdl__w.io, TDL_READ);
  } else {
    /* Each watcher gets every SIGCHLD and checks its own pid, so coalesced
     * signals lose nothing; the deferred check covers an exit that happened
     * before the signal watcher was started. */
    tdl_signal_init(&p->tdl__w.chld.sig, on_sigchld, p);
    if ((r = tdl_signal_start(loop, &p->tdl__w.chld.sig, SIGCHLD)) < 0)
      return r;
    tdl_defer_init(&p->tdl__w.chld.check, on_check, p);
    if ((r = tdl_defer_queue(loop, &p->tdl__w.chld.check)) < 0) {
      tdl_signal_stop(loop, &p->tdl__w.chld.sig);
      return r;
    }
  }
  p->tdl__cb = cb;
  p->tdl__loop = loop;
  p->tdl__unwatch = unwatch;
  return 0;
}
