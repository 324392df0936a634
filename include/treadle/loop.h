/* SPDX-License-Identifier: MIT */
/*
 * The event loop: fd readiness, timers, wakeups from other threads, signals,
 * deferred callbacks, observers and the watchdog.  Include <treadle.h>, not this
 * file.
 *
 * A loop runs on one thread.  It sleeps in its back end (epoll on Linux, or
 * poll) until an fd it watches is ready, a timer is due, a signal arrives or
 * another thread wakes it.  Every handle below is a caller-owned struct: init
 * it once, start and stop it as often as you like; nothing is allocated.
 */
#ifndef TREADLE_LOOP_H
#define TREADLE_LOOP_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdbool.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdl_loop tdl_loop;

/* ------------------------------------------------------------------------ */
/* Loops                                                                     */
/* ------------------------------------------------------------------------ */

/* Where a loop learns what is ready, and how fiber I/O reaches the kernel.
 * epoll and poll report readiness and fiber I/O makes the system calls
 * itself.  uring keeps an epoll set for watchers (so watchers, timers,
 * signals and wakeups behave exactly as on epoll) and gives fiber I/O
 * (tdl_read, tdl_write, tdl_recv, tdl_send, ..., accept and connect) to the
 * kernel as io_uring operations: a fiber's call queues one and parks, and the
 * loop submits everything queued and collects every completion in one system
 * call per iteration.  Needs Linux 5.19 or later and a treadle built with
 * liburing. */
typedef enum tdl_backend {
  TDL_BACKEND_DEFAULT = 0, /* $TDL_BACKEND if set ("epoll", "poll", "uring" or "auto"), else epoll */
  TDL_BACKEND_EPOLL,
  TDL_BACKEND_POLL,
  TDL_BACKEND_URING, /* io_uring, or fail (see tdl_loop_new) */
  TDL_BACKEND_AUTO,  /* io_uring where it can be set up, else epoll, quietly */
} tdl_backend;

typedef struct tdl_loop_options {
  tdl_backend backend;
  /* Spin before sleeping: when the loop has nothing to do but has a port or
   * a wakeup, it first watches for work from other threads for up to this
   * many nanoseconds (bounded by its next timer) instead of going to sleep
   * at once.  Work that comes then costs the sender no eventfd write and the
   * loop no wake-up from the kernel (a few microseconds each way), at the
   * price of a busy core while it waits.  A fiber of such a loop that waits
   * on a shared channel (tdl_chan_new_shared) while the loop has nothing
   * else to run spins the same way before it parks, bounded by its deadline
   * too: a value or a close that comes then reaches it in place, with no
   * post to its loop (and the loop may spin again once it has parked).
   * 0 (the default): never. */
  tdl_time_t spin;
} tdl_loop_options;

/* Create a loop owned by the calling thread.  opts may be NULL.
 * Errors: -ENOMEM; -EINVAL for an unknown back end or an unknown $TDL_BACKEND;
 * -EMFILE/-ENFILE when the back end's fds cannot be created.  Asking for uring
 * (TDL_BACKEND_URING or $TDL_BACKEND=uring) where it cannot be set up fails
 * with what the kernel said: -ENOSYS (no io_uring, too old a kernel, or
 * treadle built without liburing), -EPERM (kernel.io_uring_disabled, or a
 * seccomp filter such as a container's), -ENOMEM (the locked-memory limit);
 * TDL_BACKEND_AUTO falls back to epoll on any of these.
 * Cost: one allocation and 1-2 system calls. */
TDL_API int tdl_loop_new(tdl_loop **out, const tdl_loop_options *opts);

/* Free a loop (NULL: nothing to do).  Fails with -EBUSY, freeing nothing,
 * while it runs or while any watcher, timer, signal, wakeup or deferred
 * callback is still started on it (stop them first: the caller owns their
 * memory), or any fiber is not released yet: a fiber is released when it has
 * been joined, or has finished after being detached.  Observers do not count, nor
 * does a watchdog: freeing stops it (see tdl_watchdog_stop). */
TDL_API int tdl_loop_free(tdl_loop *loop);

/* The back end's name: "epoll", "poll" or "uring". */
TDL_API const char *tdl_loop_backend(const tdl_loop *loop);

typedef enum tdl_loop_mode {
  TDL_LOOP_DEFAULT = 0, /* until nothing is started any more, or tdl_loop_stop() */
  TDL_LOOP_ONCE,        /* one iteration, sleeping until something happens */
  TDL_LOOP_NOWAIT,      /* one iteration, without sleeping */
} tdl_loop_mode;

/* Run the loop.  Returns 0 when nothing is started any more, 1 when it
 * returned with handles still started (tdl_loop_stop(), or ONCE/NOWAIT), -EDEADLK
 * when only parked fibers are left and nothing (fd, timer, wakeup, signal)
 * could ever wake them, or a negative error from the back end (-EINTR never
 * escapes: it is retried).
 * Not reentrant: calling it from one of the loop's own callbacks fails with
 * -EBUSY. */
TDL_API int tdl_loop_run(tdl_loop *loop, tdl_loop_mode mode);

/* Make tdl_loop_run() return after the current iteration.  Callable from inside a
 * callback; has no effect on a later tdl_loop_run(). */
TDL_API void tdl_loop_stop(tdl_loop *loop);

/* True while anything that keeps tdl_loop_run(TDL_LOOP_DEFAULT) going is started. */
TDL_API bool tdl_loop_alive(const tdl_loop *loop);

/* Embedding: an fd that becomes readable when the loop has work, for another
 * loop to watch, or -ENOTSUP for the poll back end.  When it is readable (or
 * tdl_loop_timeout() has passed), call tdl_loop_run(loop, TDL_LOOP_NOWAIT). */
TDL_API int tdl_loop_fd(const tdl_loop *loop);

/* How long, in nanoseconds, the loop would sleep now: 0 when work is pending,
 * -1 (TDL_FOREVER) when only an fd event can wake it. */
TDL_API tdl_time_t tdl_loop_timeout(tdl_loop *loop);

/* ------------------------------------------------------------------------ */
/* Time                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Every time in treadle is a point on one clock, CLOCK_MONOTONIC in
 * nanoseconds.  A loop caches it: read once per iteration (after the back
 * end returns), so reading "now" or arming a timer in a callback or a fiber
 * costs no system call.  The cached value may lag real time by the length of
 * the callback that is running.
 */

/* Now: the cached time of the loop this thread is running (inside one of its
 * callbacks or fibers), else a fresh reading of the clock (no system call:
 * the vDSO).
 * Inside a loop it stands still while a callback or fiber runs: a fiber
 * timing work that does not park (a loop of tdl_chan_try_send) may read
 * the same value before and after.  To measure
 * such work, call tdl_loop_update_time(tdl_fiber_loop()) before each
 * reading, or read CLOCK_MONOTONIC with clock_gettime.
 * Usable anywhere, with or without a loop. */
TDL_API tdl_time_t tdl_now(void);

/* now + delay as a deadline (tdl_now() as above), saturating at
 * TDL_TIME_MAX; a negative delay gives now.  Usable anywhere. */
TDL_API tdl_time_t tdl_after(tdl_time_t delay);

/* Refresh loop's cached time from the clock, so that tdl_now(), tdl_after()
 * and the timers armed next in its callbacks and fibers count from the real
 * time: after a long computation in a callback or a fiber, or to time work
 * that does not park.  Cost: one clock reading. */
TDL_API void tdl_loop_update_time(tdl_loop *loop);

/* ------------------------------------------------------------------------ */
/* I/O watchers                                                              */
/* ------------------------------------------------------------------------ */

/* Events.  READ and WRITE are what a watcher asks for; ERR (an error is
 * pending on the fd) and HUP (the peer hung up or closed its end) are always
 * reported along with them when they happen and need not be asked for. */
#define TDL_READ 0x1u
#define TDL_WRITE 0x2u
#define TDL_ERR 0x4u
#define TDL_HUP 0x8u

typedef struct tdl_io tdl_io;
typedef void (*tdl_io_cb)(tdl_loop *loop, tdl_io *w, unsigned events);

/* An fd watcher.  Fields other than `data` are private. */
struct tdl_io {
  void *data; /* the caller's, untouched by treadle */
  tdl_io_cb cb;
  int fd;
  unsigned events;   /* TDL_READ and/or TDL_WRITE while started */
  unsigned state;    /* private flags */
  uint32_t gen;      /* identifies this initialisation (see tdl_io_init) */
};

/*
 * How readiness is reported (read this once; it is what makes watchers cheap).
 *
 * treadle keeps what it has learnt about each fd in a readiness cache, and
 * registers the fd with the kernel at most twice in its life (epoll: first
 * level-triggered for what is wanted, then, once a watcher's stop or a new
 * event shows it is needed, edge-triggered for everything).  So starting and
 * stopping a watcher, or changing its events, costs no system call.
 *
 *  - TDL_READ reports an arrival: the callback runs once each time data (or
 *    EOF) arrives, even if the watcher was stopped when it arrived (it runs
 *    when the watcher is started again).  Read until read() returns EAGAIN.
 *    If you stop reading earlier, call tdl_io_feed(loop, w, TDL_READ) to be
 *    called again on the next iteration.  (While unread data remains the
 *    callback may also be called again, e.g. on the poll back end or before
 *    an epoll registration turns edge-triggered; never depend on either.)
 *  - TDL_WRITE reports a state: the fd is taken to be writable until you say
 *    otherwise, so a started TDL_WRITE watcher's callback runs on every
 *    iteration.  When write() returns EAGAIN, call
 *    tdl_io_blocked(loop, w, TDL_WRITE): the callback then waits until the
 *    kernel reports room.  Stop the watcher when you have nothing to write.
 *
 * One started watcher per fd per loop.
 */

/* Prepare a watcher for fd.  Re-initialise it (after stopping it) when the fd
 * has been closed and the number reused, or to watch another fd.  Never fails;
 * a bad fd is reported by tdl_io_start(). */
TDL_API void tdl_io_init(tdl_io *w, int fd, tdl_io_cb cb, void *data);

/* Start watching for events (TDL_READ, TDL_WRITE or both).  Starting a started
 * watcher changes its events.
 * Errors (the watcher is left as it was): -EINVAL (no or unknown events);
 * -EBADF (fd negative or not open); -EEXIST (another watcher is started on
 * this fd); -EPERM (a file the back end cannot watch, e.g. a regular file on
 * epoll); -ENOMEM.
 * Cost: the first start of a freshly initialised watcher registers the fd (one
 * epoll_ctl); later starts and stops are a few stores. */
TDL_API int tdl_io_start(tdl_loop *loop, tdl_io *w, unsigned events);

/* Stop watching.  Stopping a stopped watcher does nothing.  A stopped watcher
 * may be freed at once, even from inside its own or another watcher's
 * callback; a stopped watcher's pending events are dropped.
 * The fd stays registered with the kernel while it is open, so that a later
 * start costs nothing: close() removes it.  Returns 0 (or -EPERM from a
 * foreign thread with TDL_DEBUG_CHECKS). */
TDL_API int tdl_io_stop(tdl_loop *loop, tdl_io *w);

/* A write (or read) on the watcher's fd returned EAGAIN: forget the cached
 * readiness for those events and wait for the kernel to report it again. */
TDL_API void tdl_io_blocked(tdl_loop *loop, tdl_io *w, unsigned events);

/* Report events on the next iteration as if the kernel had signalled them
 * (e.g. TDL_READ after reading less than everything). */
TDL_API void tdl_io_feed(tdl_loop *loop, tdl_io *w, unsigned events);

/* Whether w is started. */
static inline bool tdl_io_active(const tdl_io *w) { return (w->state & 1u) != 0; }

/*
 * Closing a watched fd.  Stop the watcher, then close().  If the fd is closed
 * while the watcher is started, the kernel forgets it: the watcher is never
 * called again (epoll), or is called once with TDL_ERR (poll); stopping it
 * afterwards is still safe, and so is watching a new fd that reuses the number
 * with a re-initialised watcher.
 */

/* ------------------------------------------------------------------------ */
/* Timers                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct tdl_timer tdl_timer;
typedef void (*tdl_timer_cb)(tdl_loop *loop, tdl_timer *t);

/* A one-shot or repeating timer.  Fields other than `data` are private. */
struct tdl_timer {
  void *data;
  tdl_timer_cb cb;
  tdl_time_t at;     /* deadline while started */
  tdl_time_t repeat; /* 0 for one-shot */
  uint64_t seq;      /* arming order: ties on `at` fire in this order */
  uint32_t slot;     /* where the loop keeps it */
  uint32_t state;
};

/* Prepare t to call cb(loop, t) when it fires; data is the caller's.  Never
 * fails; re-initialise only a stopped timer. */
TDL_API void tdl_timer_init(tdl_timer *t, tdl_timer_cb cb, void *data);

/* Arm at an absolute deadline on the loop's clock (Control.Event style).  A
 * deadline at or before now fires on the next iteration, after the timers
 * already due (any negative deadline other than TDL_FOREVER counts as past).
 * A repeat > 0 re-arms the timer `repeat` ns after each deadline (skipping
 * periods missed while the loop was busy rather than firing a burst); repeat
 * <= 0 is one-shot.  Starting a started timer re-arms it.  Timers due at the
 * same instant fire in the order they were armed.  A timer armed from a timer
 * callback never fires in that same batch.
 * Errors (the timer is left as it was): -EINVAL for TDL_FOREVER (a timer that
 * never fires: just do not start one); -ENOMEM when the heap cannot grow.
 * Cost: O(1), no system call: the entry is appended, and ordered in batches by
 * the loop before it next sleeps (see docs/ARCHITECTURE.md). */
TDL_API int tdl_timer_start_at(tdl_loop *loop, tdl_timer *t, tdl_time_t deadline, tdl_time_t repeat);

/* Arm `delay` ns after the loop's cached now (Control.Timeout style).  A
 * negative delay fires on the next iteration; a deadline past TDL_TIME_MAX is
 * clamped to it (about 292 years of uptime: it never fires in practice). */
TDL_API int tdl_timer_start(tdl_loop *loop, tdl_timer *t, tdl_time_t delay, tdl_time_t repeat);

/* Cancel.  Stopping a stopped timer does nothing; a stopped timer may be freed
 * at once, also from a callback.  Cost: O(1), touches only the timer and its
 * slot. */
TDL_API int tdl_timer_stop(tdl_loop *loop, tdl_timer *t);

/* Whether t is armed (a one-shot timer stops when it fires). */
static inline bool tdl_timer_active(const tdl_timer *t) { return t->state != 0; }

/* ------------------------------------------------------------------------ */
/* Reaching a loop from other threads: wakeups and ports                     */
/* ------------------------------------------------------------------------ */

/*
 * These are the thread-safe entries into a loop.  Both wake the loop's
 * thread only when it sleeps (or is about to): a busy loop finds the work on
 * its next iteration at the cost of one atomic exchange, and wakes coalesce,
 * so that a burst of sends costs at most one eventfd write.
 */

typedef struct tdl_wakeup tdl_wakeup;
typedef void (*tdl_wakeup_cb)(tdl_loop *loop, tdl_wakeup *wk);

struct tdl_wakeup {
  void *data;
  tdl_wakeup_cb cb;
  tdl_loop *loop;
  tdl__list link;
  int pending; /* accessed atomically */
  int started; /* accessed atomically */
};

/* Prepare wk to call cb(loop, wk) on its loop's thread.  Never fails. */
TDL_API void tdl_wakeup_init(tdl_wakeup *wk, tdl_wakeup_cb cb, void *data);
/* Start / stop receiving wakeups (loop thread only).  A started wakeup keeps
 * tdl_loop_run(TDL_LOOP_DEFAULT) running.  Errors: -EMFILE/-ENFILE (the loop's
 * eventfd, created on first use). */
TDL_API int tdl_wakeup_start(tdl_loop *loop, tdl_wakeup *wk);
TDL_API int tdl_wakeup_stop(tdl_loop *loop, tdl_wakeup *wk);
static inline bool tdl_wakeup_active(const tdl_wakeup *wk) { return wk->started != 0; }

/* THREAD-SAFE (and async-signal-safe).  Make wk's callback run on its loop's
 * thread soon.  Sends before the callback runs coalesce into one call.  The
 * wakeup must be started, and must not be stopped concurrently with this call.
 * Errors: -EINVAL if wk is not started. Cost: two atomic exchanges, plus one
 * eventfd write when the loop sleeps. */
TDL_API int tdl_wakeup_send(tdl_wakeup *wk);

/*
 * A port: the address other threads post work to.  It is counted: whoever
 * holds a reference may post, from any thread, even after the loop is gone
 * (the post is then refused), so a post can never touch a freed loop.
 *
 * A post is a caller-owned record: (cb, data), run as cb(loop, post) on the
 * loop's thread, in the order each posting thread posted.  Nothing is
 * allocated per post.  The record is the loop's from a successful post until
 * its callback starts; it may then be posted again or freed.  When the loop
 * is freed with posts still queued, their callbacks run on the freeing thread
 * with loop NULL: "not run, take your record back"; so every successful post
 * gets exactly one call.
 */
typedef struct tdl_port tdl_port;
typedef struct tdl_post tdl_post;
typedef void (*tdl_post_cb)(tdl_loop *loop, tdl_post *p);

struct tdl_post {
  void *data;      /* the caller's */
  tdl_post_cb cb;
  tdl_post *next;  /* private */
  int queued;      /* private, accessed atomically */
};

/* Prepare the record p to run cb(loop, p) when posted.  Never fails. */
TDL_API void tdl_post_init(tdl_post *p, tdl_post_cb cb, void *data);

/* A new reference to loop's port, made on first use (loop thread only).
 * Errors: -ENOMEM; -EMFILE/-ENFILE (the loop's eventfd). */
TDL_API int tdl_loop_port(tdl_port **out, tdl_loop *loop);

/* THREAD-SAFE.  Another reference to the same port. */
TDL_API tdl_port *tdl_port_ref(tdl_port *port);

/* THREAD-SAFE.  Drop a reference (NULL: nothing to do); the last one frees
 * the port. */
TDL_API void tdl_port_release(tdl_port *port);

/* THREAD-SAFE.  Queue p for the port's loop.  Returns 0, or (p is then still
 * the caller's and its callback will not run): -ESHUTDOWN when the loop has
 * been freed or is being freed; -EBUSY when p is queued already; -EINVAL for
 * a NULL argument or callback.  Cost: one compare-and-swap and one atomic
 * exchange; one eventfd write when the loop sleeps. */
TDL_API int tdl_port_post(tdl_port *port, tdl_post *p);

typedef struct tdl_port_stats {
  uint64_t posts; /* accepted by tdl_port_post */
  uint64_t wakes; /* of those, how many wrote the eventfd to wake the loop */
} tdl_port_stats;
/* THREAD-SAFE.  The port's counts since it was made, at one moment; the same
 * counts as tdl_metrics_loop's port_* fields (metrics.h). */
TDL_API void tdl_port_stats_get(const tdl_port *port, tdl_port_stats *out);

/* ------------------------------------------------------------------------ */
/* Signals (signalfd)                                                        */
/* ------------------------------------------------------------------------ */

typedef struct tdl_signal tdl_signal;
typedef void (*tdl_signal_cb)(tdl_loop *loop, tdl_signal *s, int signum);

struct tdl_signal {
  void *data;
  tdl_signal_cb cb;
  tdl__list link; /* linked while started */
  int signum;
};

/* Prepare s to call cb(loop, s, signum).  Never fails. */
TDL_API void tdl_signal_init(tdl_signal *s, tdl_signal_cb cb, void *data);

/* Deliver signum to s's callback on the loop.  The signal is blocked in the
 * calling thread while any watcher of it is started, and unblocked again when
 * the last one stops (unless it was blocked before).  Block it in every other
 * thread too (create threads after starting, or block it yourself), or the
 * kernel may deliver it to a thread that is not listening.  Several watchers
 * of one signal each get it.  A signal that arrives several times before the
 * loop reads it may be reported once.
 * Errors: -EINVAL (bad number, SIGKILL, SIGSTOP); -EBUSY if another loop in
 * the process watches the same signal; -EMFILE/-ENFILE. */
TDL_API int tdl_signal_start(tdl_loop *loop, tdl_signal *s, int signum);
TDL_API int tdl_signal_stop(tdl_loop *loop, tdl_signal *s);
static inline bool tdl_signal_active(const tdl_signal *s) { return s->link.next != NULL; }

/* ------------------------------------------------------------------------ */
/* Deferred callbacks and observers                                          */
/* ------------------------------------------------------------------------ */

typedef struct tdl_defer tdl_defer;
typedef void (*tdl_defer_cb)(tdl_loop *loop, tdl_defer *d);

struct tdl_defer {
  void *data;
  tdl_defer_cb cb;
  tdl__list link; /* linked while queued */
};

/* Prepare d to call cb(loop, d).  Never fails. */
TDL_API void tdl_defer_init(tdl_defer *d, tdl_defer_cb cb, void *data);
/* Run d's callback once, on the next iteration (callbacks queued during an
 * iteration never run in that same iteration).  Queuing a queued callback
 * does nothing.  Cost: O(1). */
TDL_API int tdl_defer_queue(tdl_loop *loop, tdl_defer *d);
/* Unqueue; does nothing if not queued.  Cost: O(1). */
TDL_API int tdl_defer_cancel(tdl_loop *loop, tdl_defer *d);
/* Whether d is queued. */
static inline bool tdl_defer_active(const tdl_defer *d) { return d->link.next != NULL; }

typedef enum tdl_observer_kind {
  TDL_OBSERVER_BEFORE_POLL, /* just before the loop may sleep */
  TDL_OBSERVER_AFTER_POLL,  /* just after it woke, before callbacks run */
} tdl_observer_kind;

typedef struct tdl_observer tdl_observer;
typedef void (*tdl_observer_cb)(tdl_loop *loop, tdl_observer *o);

struct tdl_observer {
  void *data;
  tdl_observer_cb cb;
  tdl__list link; /* linked while started */
  int kind;
};

/*
 * An observer: a callback the loop runs on every iteration at one point
 * around its poll (libuv's prepare and check handles), e.g. to flush what
 * the iteration's callbacks buffered just before the loop may sleep.
 */

/* Prepare o to call cb(loop, o).  Never fails. */
TDL_API void tdl_observer_init(tdl_observer *o, tdl_observer_cb cb, void *data);
/* Call o on every iteration at the given point.  Observers do not keep the
 * loop alive.  Errors: -EINVAL for an unknown kind. */
TDL_API int tdl_observer_start(tdl_loop *loop, tdl_observer *o, tdl_observer_kind kind);
TDL_API int tdl_observer_stop(tdl_loop *loop, tdl_observer *o);
static inline bool tdl_observer_active(const tdl_observer *o) { return o->link.next != NULL; }

/* ------------------------------------------------------------------------ */
/* Watchdog: finding the call that blocks a loop                             */
/* ------------------------------------------------------------------------ */

/*
 * A loop that does not come back to its poll cannot serve anything else: a
 * blocking call (a read of a regular file, a lock, a sleep, a DNS look-up)
 * or a long computation in a callback or a fiber stalls every fiber of the
 * loop.  The watchdog reports it: when a watched loop has been away from its
 * poll for longer than a threshold, a callback is called with the loop, the
 * fiber that was running (or none: a plain callback) and how long.
 *
 * "Away" is the time from the loop's leaving its poll (the back end returned,
 * or tdl_loop_run started) to its coming back (ready to poll again, even
 * without sleeping).  Sleeping or spinning in the poll is not away, and
 * neither is time outside tdl_loop_run (a loop that is not running is not
 * stalled).  A stall is reported once, when it is noticed; a later stall,
 * after the loop has polled again, is reported again.
 *
 * One thread per process watches every watched loop.  It is started with the
 * first watchdog, looks every quarter of the smallest threshold (not more
 * often than every millisecond), and exits when no loop is watched.  Reports
 * come up to that much after the threshold.  After fork() the child has no
 * watchdog thread, and must not start one if loops were watched at the
 * fork: it would watch them again, and they are the parent's (see "fork()"
 * in treadle.h).
 *
 * Off by default.  Off, it costs a test of a pointer on each side of the
 * poll and at each fiber switch.  On, it costs two stores per iteration and
 * a copy of the running fiber's name (a few stores) per fiber switch, and
 * never a system call on the loop's thread: it uses the loop's cached time.
 */

#define TDL_WATCHDOG_THRESHOLD (100 * TDL_MSEC) /* the default threshold */

/* A stall, as reported.  The strings are valid during the callback only. */
typedef struct tdl_watchdog_report {
  /* The stalled loop, to tell loops apart.  It is not freed while the
   * callback runs (freeing it waits for the callback), but it belongs to its
   * own thread: use it with THREAD-SAFE calls only. */
  tdl_loop *loop;
  const char *loop_name;  /* tdl_watchdog_options.name, or "" */
  /* The fiber that was running when the stall was noticed ("" if it has no
   * name), or NULL when the loop was in its own code: a callback of a
   * watcher, timer, observer, deferred callback or post. */
  const char *fiber;
  uint64_t fiber_id;      /* that fiber's id (tdl_fiber_info.id), 0 for a callback */
  tdl_time_t since;       /* when the loop left its poll (the loop's time) */
  tdl_time_t away;        /* how long it had been away when noticed: >= threshold */
  tdl_time_t threshold;
} tdl_watchdog_report;

/* Called on the watchdog thread, never on the loop's: the loop's thread is
 * the one that is stuck.  So it must not touch the loop other than through
 * THREAD-SAFE calls (tdl_wakeup_send, tdl_port_post), nor wait for the loop's
 * thread: stopping the watchdog or freeing the loop waits for the callback to
 * return.  Callbacks of all loops run one at a time on that one thread: a
 * slow one delays the watching of every loop.  It may not call
 * tdl_watchdog_start or _stop (-EDEADLK). */
typedef void (*tdl_watchdog_cb)(const tdl_watchdog_report *r, void *data);

typedef struct tdl_watchdog_options {
  tdl_time_t threshold;   /* report a loop away from its poll longer than this (ns); 0: TDL_WATCHDOG_THRESHOLD */
  /* NULL: the default report, one line on stderr, then the call chain
   * (tdl_watchdog_report_chain), written with one write(2):
   *   treadle watchdog: loop 0x55d0c0a8e2a0 "net-1" away from its poll for 312.4 ms, in fiber 3 "worker"
   *           #0 0x5581b2c3d1f0 checksum+0x20 (/usr/bin/server+0x21f0)
   *           #1 ...
   * ("in a callback (no fiber)" when no fiber was running). */
  tdl_watchdog_cb cb;
  void *data;             /* passed to cb */
  const char *name;       /* the loop's name in reports, copied (up to 23 bytes); NULL: none */
} tdl_watchdog_options;

/* Watch loop (opts may be NULL: every default).  Starting the watchdog of a
 * loop that has one replaces its options; once the call returns the old
 * callback is not running and will not be called again.  A stall already
 * reported is not reported again under the new options.  Callable before the
 * loop runs, or from one of its callbacks or fibers (then the current
 * iteration is watched from when it began).
 * Loop thread only.
 * Errors: -EINVAL (loop NULL, threshold negative); -ENOMEM; -EAGAIN (the
 * watchdog thread could not be started); -EDEADLK (called from a watchdog
 * callback); -EPERM (another thread, with TDL_DEBUG_CHECKS).  On an error
 * nothing changed.
 * Cost: one allocation; the first watchdog of the process starts the watchdog
 * thread; may wait for a report in progress. */
TDL_API int tdl_watchdog_start(tdl_loop *loop, const tdl_watchdog_options *opts);

/* Stop watching loop.  Once it returns, the callback is not running and will
 * not be called again for this loop (so its data may be freed); if a report
 * is in progress, it waits for it.  Stopping a loop that is not watched does
 * nothing.  tdl_loop_free stops the watchdog itself.
 * Loop thread only.
 * Errors: -EINVAL (loop NULL); -EDEADLK (called from a watchdog callback);
 * -EPERM (another thread, with TDL_DEBUG_CHECKS). */
TDL_API int tdl_watchdog_stop(tdl_loop *loop);

/*
 * The call chain of the code that stalled r's loop (the fiber or the
 * callback), as text: one line per frame, innermost first, as in a dump on
 * a signal (fiber.h, tdl_fiber_dump_on_signal):
 *           #0 0x5581b2c3d1f0 checksum+0x20 (/usr/bin/server+0x21f0)
 * or one line "(no call chain: why)" when it could not be taken.  Valid
 * during the callback only; "" for any other r or outside a callback.
 *
 * How.  When it finds a loop stalled, the watchdog thread interrupts the
 * loop's thread with a real-time signal whose handler reads the
 * interrupted registers and walks the frame pointers from them, within the
 * stack it runs on (the fiber's, or the thread's own for a callback); it
 * waits up to 50 ms for that, then names the frames, and calls the
 * callback.  Frame #0 is where the code was interrupted; the rest needs
 * frame pointers, and a last line in parentheses says which are missing:
 *           (libc.so.6 is built without frame pointers: the caller of #0 is missing from the chain)
 * when frame #0 is code that keeps none, as the C library's, as a rule (a
 * spin in pthread_spin_lock, a blocking read(2)): the walk then takes its
 * caller's frame for its own and leaves that caller out, or, when it cannot
 * go on from there, "(the chain stops in libc.so.6, which is built without
 * frame pointers)".  A library built with TDL_FRAME_POINTERS=OFF gives frame
 * #0 alone, and says "(the rest of the chain needs treadle built with frame
 * pointers)" unless #0 is such code.  Whether code keeps frame pointers
 * is read from the start of its function, which is known only when its
 * module exports it: a #0 in a function it does not export gets no such
 * line unless the walk stopped there.
 *
 * The signal is the highest real-time signal (SIGRTMAX downwards) whose
 * action was still the default when the process's first watchdog started,
 * and which a trial raise() showed delivered (an emulator may keep some);
 * treadle installs its handler on it (SA_RESTART: a system call it
 * interrupts goes on), and sends it only to a loop's thread found stalled.
 * A program that installs its own handler on that signal afterwards keeps
 * it: the watchdog then sends it no more, and says so here.  A thread that
 * blocks the signal gives no chain ("did not answer").  After fork() the
 * handler stays installed.
 */
TDL_API const char *tdl_watchdog_report_chain(const tdl_watchdog_report *r);

/* ------------------------------------------------------------------------ */
/* Operations: reads and writes the kernel completes (uring back end)       */
/* ------------------------------------------------------------------------ */

/*
 * The completion counterpart of a watcher, for callback code on a loop whose
 * back end is uring: instead of hearing that an fd is ready and then making
 * the call, hand the call to the kernel and hear when it is done.  The loop
 * submits every operation queued by its callbacks in one system call per
 * iteration and collects the completions in the same call, so a read that
 * finds data, or a write that finds room, costs no system call of its own.
 *
 * A tdl_op is the caller's memory, as a watcher is; so is the buffer, which
 * the kernel reads or writes until the callback runs: neither may be freed or
 * reused before then.  The callback is called exactly once per successful
 * submission, from the loop's thread after its wait (never from inside a
 * tdl_op_* call), with the result of the system call: a count, 0 for end of
 * file, or a negative errno (-ECANCELED after tdl_op_cancel, unless the
 * operation had finished first; an operation the kernel drops before it
 * begins, as io-wq does when it cannot start a worker thread, is submitted
 * again instead of ending with an -ECANCELED nobody asked for).  It may submit the same op again.  An op in
 * flight keeps the loop running, and tdl_loop_free refuses (-EBUSY) while
 * one is.  One op per direction per fd at a time is what makes sense (the
 * kernel orders several, but their data interleave as it pleases).
 * Loop thread only.
 */
typedef struct tdl_op tdl_op;
typedef void (*tdl_op_cb)(tdl_loop *loop, tdl_op *op, ssize_t result);

/* The part of a tdl_op the loop's back end sees (private). */
struct tdl__op_base {
  void (*done)(struct tdl__op_base *op, int result);
};

struct tdl_op {
  struct tdl__op_base base_; /* private, first */
  tdl__list link_;           /* private: completed, waiting for its callback */
  tdl_op_cb cb;
  void *data;                /* the caller's */
  tdl_loop *loop_;           /* private */
  void *buf_;                /* private: what it was submitted with */
  ssize_t result_;           /* private */
  unsigned state_;           /* private */
  int fd_;                   /* private */
  unsigned len_;             /* private */
  unsigned char code_;       /* private: read or write */
  unsigned char asked_;      /* private: tdl_op_cancel was called */
};

/* Prepare op (once, or again when it is not active); data is the caller's. */
TDL_API void tdl_op_init(tdl_op *op, void *data);

/* Read up to len bytes from fd into buf (the file position, as read(2)), or
 * write len bytes of buf.  cb is called once with the result.  Returns 0, or:
 * -ENOTSUP (the loop's back end is not uring), -EBUSY (op is in flight),
 * -EINVAL (cb or op NULL), -EPERM (another thread, with TDL_DEBUG_CHECKS),
 * or the ring's error when even a submission to make room failed (-EBUSY,
 * -ENOMEM); on an error nothing was submitted and cb will not be called.
 * Cost: no system call (the loop submits with its next wait). */
TDL_API int tdl_op_read(tdl_loop *loop, tdl_op *op, int fd, void *buf, size_t len, tdl_op_cb cb);
TDL_API int tdl_op_write(tdl_loop *loop, tdl_op *op, int fd, const void *buf, size_t len, tdl_op_cb cb);

/* Ask the kernel to end op early.  Its callback still comes, once, with
 * -ECANCELED or, if the operation finished first, its real result.  Returns
 * 0, or -ENOENT when op is not in flight (its callback may be pending, or
 * done).  Cost: one system call (the cancel goes to the kernel at once). */
TDL_API int tdl_op_cancel(tdl_loop *loop, tdl_op *op);

/* Whether op is submitted and its callback has not run yet. */
TDL_API bool tdl_op_active(const tdl_op *op);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_LOOP_H */
