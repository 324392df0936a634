/* SPDX-License-Identifier: MIT */
/*
 * Compacting idle fibers (tdl_fiber_compact_idle, fiber.h): a fiber parked
 * longer than the loop's threshold has the used top of its stack copied to
 * a heap block sized to fit, and the stack's pages given back to the kernel
 * (MADV_DONTNEED); whatever wakes it copies the frames back to the same
 * addresses first (tdl__wake_idle), so every pointer into the stack still
 * holds.
 *
 * The hazard.  While a fiber is compacted its stack pages read as zeros
 * (MADV_DONTNEED on private anonymous memory) and anything written there is
 * lost when the copy goes back over it.  So nothing may read or write that
 * memory until the restore.  What the rest of treadle reaches of a parked
 * fiber is therefore kept off its stack, or the park is not compacted:
 * - the control block (reached through the handle table, the run queue,
 *   the scheduler's list, the timer heap through its deadline timer, wait
 *   records): a loop that compacts puts the blocks of the fibers it spawns
 *   on the heap (sched.c, spawn); fibers spawned before the option are
 *   never compacted;
 * - wait records: only parks that say so are compacted
 *   (tdl__park_idle): tdl_sleep, tdl_fiber_park (no record), and fiber
 *   I/O's plain wait for readiness (fd/io.c, wait_fd, which parks with
 *   tdl__park_compactable: its record is in the control block's
 *   wait_space).  Not, among
 *   others: channel, lock and select waits (their records sit on the stack
 *   in lists that other fibers, or other loops' threads, change and whose
 *   values they write), joins, calls on other threads (tdl_port_call, the
 *   pool: their results are written by another thread), and every ring
 *   operation of a uring loop (the kernel writes into the buffer, which
 *   may be on the stack, while the fiber is parked);
 * - the restore happens on the loop thread, when the fiber is woken and
 *   before it is runnable (tdl__wake_idle: every waker of those parks: an
 *   unpark, a deadline, a cancel, fd readiness or a close), so before any
 *   code runs on its stack; a wake-up from another thread comes through the
 *   loop's port, and so runs on the loop thread too.
 * A buffer of the fiber's own stack that it handed to someone else before
 * parking (another thread reading it, say) is exactly what must not be:
 * fiber.h says so.
 *
 * Cost without the option: a flag test where tdl_fiber_unpark, a deadline,
 * a cancel and fd readiness wake a fiber, and two stores around fiber I/O's
 * wait for readiness; nothing in the switch.  With it: the loop wakes once a
 * threshold and walks its fibers; a compaction is a malloc, a copy of the
 * frames (under a kilobyte for a fiber parked in tdl_read) and one madvise;
 * a wake-up of a compacted fiber a page fault, a copy and a free.
 */
#include "fiber/fiber_internal.h"

static void compact_one(tdl__sched *s, tdl__fiber *f)
{
  /* The context was saved inside tdl__ctx_switch, which its caller called:
   * nothing lives below the saved stack pointer (a red zone is a leaf
   * function's, and no frame on a parked stack is a leaf), so the copy
   * starts there.  A failure is no error: compacting is an economy, and the
   * fiber stays as it is. */
  char *from = f->ctx.sp;
  if (tdl__stack_stash(&f->stack, from, f->frames_top, &f->compact_copy) < 0)
    return;
  f->compact_from = from;
  f->compacted = 1;
  s->compacted++;
}

/* The walk, once a threshold: a fiber is compacted between one and two
 * thresholds after it parked. */
static void compact_cb(tdl_loop *loop, tdl_timer *t)
{
  tdl__sched *s = t->data;
  tdl_time_t before = loop->now - s->compact_after;
  TDL__LIST_FOREACH(n, &s->all) {
    tdl__fiber *f = TDL__CONTAINER_OF(n, tdl__fiber, all);
    if (f->state == TDL__FIBER_PARKED && f->offstack && !f->compacted && f->parked_at <= before && tdl__park_idle(f))
      compact_one(s, f);
  }
}

static void compact_stop(tdl__sched *s)
{
  if (tdl_timer_active(&s->compact)) {
    tdl_timer_stop(s->loop, &s->compact);
    s->loop->timers_internal--;
  }
}

int tdl_fiber_compact_idle(tdl_loop *loop, tdl_time_t threshold)
{
  TDL__CHECK_THREAD(loop);
  if (threshold != 0 && threshold < TDL_MSEC)
    return -EINVAL;
  tdl__sched *s;
  int e = tdl__sched_get(loop, &s);
  if (e < 0)
    return e;
  compact_stop(s);
  s->compact_after = 0;
  if (threshold == 0)
    return 0; /* the compacted ones are restored as they wake */
  tdl_timer_init(&s->compact, compact_cb, s);
  /* Internal: it keeps no loop alive and hides no deadlock. */
  if ((e = tdl_timer_start(loop, &s->compact, threshold, threshold)) < 0)
    return e;
  loop->timers_internal++;
  s->compact_after = threshold;
  return 0;
}

int tdl_fiber_compacted(tdl_loop *loop, tdl_fiber_t h)
{
  TDL__CHECK_THREAD(loop);
  tdl__fiber *f = tdl__fiber_lookup(loop->sched, h);
  if (!f)
    return -ESRCH;
  if (!f->compacted)
    return 0;
  size_t len = (size_t)(f->frames_top - f->compact_from);
  return len > INT32_MAX ? INT32_MAX : (int)len;
}
