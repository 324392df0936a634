/* SPDX-License-Identifier: MIT */
/*
 * Metrics: what a loop and the process are doing, in one snapshot each, and
 * in the Prometheus text format.  Include <treadle.h>.
 *
 *   tdl_loop_metrics m = {.size = sizeof m};
 *   tdl_metrics_loop(tdl_fiber_loop(), &m);          // on the loop's thread
 *   tdl_metrics_group(g, 2, &m, tdl_after(TDL_SEC)); // loop 2 of a group, from anywhere
 *   tdl_process_metrics p = {.size = sizeof p};
 *   tdl_metrics_process(&p);
 *   int n = tdl_metrics_write_prometheus(buf, sizeof buf, &p, &m, 1);
 *
 * One source of truth: the calls of each subsystem that report counts
 * (tdl_fiber_stats_get, tdl_port_stats_get, tdl_pool_stats_get,
 * tdl_fs_stats_get, tdl_acceptor_stats_get, tdl_net_stats_get,
 * tdl_hook_stats_get) read the same counters as these snapshots, which only
 * gather them in one place.
 *
 * GROWING
 *   Both structs begin with `size`, which the caller sets to sizeof the
 *   struct it has (`.size = sizeof m`).  A call fills the fields that fit in
 *   that size and zeroes the rest of it, so a program built with these
 *   headers runs with a later library that counts more, and a program built
 *   with later headers gets zeros for what an older library does not count.
 *   A size smaller than this first version of the struct is -EINVAL.  New
 *   fields are only ever added at the end.
 *
 * COUNTING
 *   The counters a loop keeps for this are plain increments on its own
 *   data, on its own thread: no atomic, no shared line.  A fiber hand-off
 *   increments one (the park); switches are derived from parks, yields,
 *   finishes and the loop's dispatches, and wake-ups are the parks less
 *   the fibers parked at the snapshot, because an increment at every
 *   switch and wake-up cost the switch path far more than it is worth.  A
 *   library built with -DTDL_METRICS=OFF keeps none of them (switches,
 *   parks, wakeups, io_parks, ring_submissions, ring_completions read 0 and
 *   `counted` says so).  Fibers by state are found by walking the loop's
 *   fibers, in every build.  Every other field reads the subsystem's own
 *   count, kept in every build.
 *   Counters only grow (until their loop or the process ends); gauges are
 *   values at the moment of the snapshot.
 */
#ifndef TREADLE_METRICS_H
#define TREADLE_METRICS_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One loop at one moment.  Gauges unless marked "counter". */
typedef struct tdl_loop_metrics {
  size_t size;               /* the caller's: sizeof(tdl_loop_metrics) */
  uint64_t counted;          /* 1: the library keeps the loop's own counters (TDL_METRICS); 0: they read 0 */
  /* Fibers not yet released, by state (they add up to tdl_fiber_stats.live). */
  uint64_t fibers_running;   /* 1 when the snapshot is taken from a fiber, else 0 */
  uint64_t fibers_runnable;  /* queued to run */
  uint64_t fibers_parked;    /* waiting (I/O, a lock, a channel, a sleep...) */
  uint64_t fibers_finished;  /* returned, not yet joined or released */
  uint64_t switches;         /* counter: context switches, fiber to fiber and to and from the loop */
  uint64_t parks;            /* counter: waits that parked a fiber */
  uint64_t wakeups;          /* counter: of those, ended (by their event, a deadline or a cancel) */
  uint64_t io_parks;         /* counter: of the parks, fiber I/O calls (fd.h, net.h, fs.h, the hook)
                                that found their fd not ready or waited for the ring */
  uint64_t ring_submissions; /* counter: io_uring entries handed to the kernel (uring loops) */
  uint64_t ring_completions; /* counter: io_uring completions taken (uring loops) */
  uint64_t timers_live;      /* started timers, fibers' deadlines included, not the loop's own */
  uint64_t watchers_live;    /* started fd watchers, fiber I/O's included */
  uint64_t port_posts;       /* counter: posts accepted by the loop's port (tdl_port_stats) */
  uint64_t port_wakes;       /* counter: of those, the ones that woke the loop */
  uint64_t acceptor_accepted;/* counter: connections given to the acceptor slots this loop serves */
  uint64_t acceptor_open;    /* of those, not yet ended (tdl_acceptor_stats, summed over the slots) */
  uint64_t fs_direct;        /* counter: file calls on the loop's thread (tdl_fs_stats) */
  uint64_t fs_pool;          /* counter: file calls run on the pool */
  uint64_t fs_nowait_miss;   /* counter: reads or writes refused by RWF_NOWAIT first */
  uint64_t fs_ring;          /* counter: file calls run on the ring */
  uint64_t stacks_cached;    /* stacks kept for reuse (tdl_fiber_stats) */
  uint64_t stacks_cached_bytes; /* their usable bytes (address space, mostly not resident) */
  uint64_t stacks_unguarded; /* stacks in use without a guard page */
} tdl_loop_metrics;

/* The process at one moment. */
typedef struct tdl_process_metrics {
  size_t size;               /* the caller's: sizeof(tdl_process_metrics) */
  uint64_t rss_bytes;        /* resident memory (/proc/self/statm); 0 when it cannot be read */
  uint64_t pool_threads;     /* the pool's threads (tdl_pool_stats) */
  uint64_t pool_idle;        /* of those, waiting for work */
  uint64_t pool_max_threads;
  uint64_t pool_queued[TDL_LANES];  /* per lane: calls waiting for a thread */
  uint64_t pool_running[TDL_LANES]; /* per lane: calls running */
  uint64_t pool_done;        /* counter: calls finished or skipped */
  uint64_t pool_threads_started; /* counter */
  uint64_t hook_parks;       /* counter: hooked calls that parked a fiber (tdl_hook_stats; 0
                                without libtreadle-hook) */
  uint64_t hook_sleeps;      /* counter: sleeps and poll naps made tdl_sleep */
  uint64_t hook_fds_made_nonblocking; /* counter */
  uint64_t net_accept_exhausted; /* counter: accepts that found no fd free (tdl_net_stats) */
  uint64_t net_accept_shed;  /* counter: connections accepted and closed at once */
} tdl_process_metrics;

/*
 * Fill *out with loop's metrics now (out->size set by the caller).  Call on
 * the loop's thread (a fiber or a callback of it, or between runs).
 * Errors: -EINVAL (loop or out NULL, out->size too small), -EPERM (another
 * thread, in builds with TDL_DEBUG_CHECKS).  Cost: O(fibers): a few dozen
 * loads and a walk over the loop's fibers, one cache line of each.
 */
TDL_API int tdl_metrics_loop(tdl_loop *loop, tdl_loop_metrics *out);

/*
 * Fill *out with the process's metrics now (out->size set by the caller).
 * THREAD-SAFE.  Errors: -EINVAL (out NULL or out->size too small).  Cost:
 * the pool's lock, and an open, a read and a close of /proc/self/statm.
 */
TDL_API int tdl_metrics_process(tdl_process_metrics *out);

/*
 * Loop i of group g's metrics, taken on that loop's thread: the snapshot
 * goes there as a post to its port and comes back.  From a fiber (of
 * another loop) the fiber parks meanwhile; from a thread that runs no loop
 * (main) the thread waits; on loop i's own thread it is tdl_metrics_loop.
 * THREAD-SAFE, and safe against the group stopping: a loop that has ended,
 * or ends before the post runs, is -ESHUTDOWN, never a use after free (g
 * itself must not be freed meanwhile).  Errors: -EINVAL (g or out NULL,
 * out->size too small, i out of range); -ESHUTDOWN; -ETIMEDOUT at the
 * deadline (what was posted is dropped when it runs); -ECANCELED (a
 * cancelled fiber); -EPERM from a loop's callback outside a fiber, which
 * would block its loop; -ENOMEM.  Cost: one allocation, two posts.
 */
TDL_API int tdl_metrics_group(tdl_group *g, unsigned i, tdl_loop_metrics *out, tdl_time_t deadline);

/*
 * Write p (may be NULL) and the n snapshots loops[0..n-1] (loops[i] labelled
 * loop="i"; the array's stride is loops[0].size) to buf in the Prometheus
 * text exposition format 0.0.4: every metric named treadle_..., with its
 * `# HELP` and `# TYPE` lines, counters ending in _total, bytes in bytes.
 * Returns the length written (a NUL follows it), or -ENOSPC when buf
 * (cap bytes) is too small, in which case buf holds the empty string, never
 * a part; -EINVAL for buf NULL, loops NULL with n > 0, or a size too small.
 * Never allocates.  THREAD-SAFE.  Cost: O(n), about 3 KiB plus 2 KiB per
 * loop of text.
 */
TDL_API int tdl_metrics_write_prometheus(char *buf, size_t cap, const tdl_process_metrics *p,
                                         const tdl_loop_metrics *loops, unsigned n);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_METRICS_H */
