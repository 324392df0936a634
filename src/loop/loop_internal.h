/* SPDX-License-Identifier: MIT */
/*
 * The loop's private state and the interfaces between its parts:
 *   time.c     the cached monotonic time and deadlines
 *   timer.c    the timer heap
 *   io.c       fd watchers and the readiness cache
 *   backend/ the kernel interfaces (one file each), behind tdl__backend
 *   loop.c     loop lifetime and the run loop
 *   defer.c, hook.c  deferred callbacks and hooks
 *   remote.c   wakeups and ports: other threads reach the loop (eventfd)
 *   signal.c   signal watchers (signalfd)
 *   watchdog.c the loop watchdog: a thread that reports loops away from their poll
 */
#ifndef TDL_LOOP_INTERNAL_H
#define TDL_LOOP_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>

#include "base/base.h"
#include "base/clock.h"
#include "base/list.h"

/* ---- misuse detection ---------------------------------------------------- */

#ifdef TDL_DEBUG_CHECKS
#define TDL__CHECK_THREAD(loop)                                  \
  do {                                                           \
    if (!pthread_equal((loop)->owner, pthread_self()))           \
      return -EPERM;                                             \
  } while (0)
#define TDL__CHECK_THREAD_VOID(loop)                             \
  do {                                                           \
    if (!pthread_equal((loop)->owner, pthread_self()))           \
      return;                                                    \
  } while (0)
#else
#define TDL__CHECK_THREAD(loop) ((void)(loop))
#define TDL__CHECK_THREAD_VOID(loop) ((void)(loop))
#endif

/* ---- fd records ------------------------------------------------------------ */

/* What the loop knows about one fd.  Indexed by fd number; owned by the loop,
 * so an event for a watcher that was stopped (and maybe freed) by an earlier
 * callback in the same iteration is caught here without touching the
 * watcher.  16 bytes, the part each event reads; the rest is in tdl__fd_cold,
 * a parallel array, so that the event path brings half as many cache lines
 * in when thousands of fds are busy. */
typedef struct tdl__fd {
  tdl_io *w;            /* the started watcher, or NULL */
  uint32_t reg_gen;     /* bumped per registration; carried in back-end tokens */
  uint8_t ready;        /* readiness cache: TDL_READ | TDL_WRITE | TDL_ERR | TDL_HUP */
  uint8_t flags;        /* TDL__FD_REGISTERED, TDL__FD_QUEUED */
  uint8_t kernel;       /* interest last handed to the back end */
  uint8_t bmode;        /* the back end's own state for this fd, but for: */
} tdl__fd;

/* The rest of an fd's record: read when a watcher is started, blocked or fed
 * (and by the poll back end), never per event on epoll. */
typedef struct tdl__fd_cold {
  const tdl_io *owner;  /* whose registration this is: compared, never dereferenced */
  uint32_t owner_gen;   /* owner's tdl_io.gen when it registered */
  uint32_t bslot;       /* the back end's own index + 1 (poll: slot in its array); 0: none */
} tdl__fd_cold;

/* tdl__fd.flags */
#define TDL__FD_REGISTERED 0x1u /* the back end knows this fd (the back end sets it) */
#define TDL__FD_QUEUED 0x2u     /* the fd is in loop->queue or loop->batch */

/* tdl__fd.bmode is the back end's, except for TDL__FD_LAZY: when the back
 * end sets it, it reports the TDL_READ / TDL_WRITE bits set in bmode without
 * being told again, and tolerates a want that shrank; so while the loop's
 * want stays within those bits, the loop does not call interest().  (epoll
 * sets it; poll, which must drop an fd it should not watch, does not.) */
#define TDL__FD_LAZY 0x40u
/* And TDL__FD_LEVEL: the back end misses no readiness that is already there
 * when a watcher starts wanting it: it reports levels (poll; epoll while the
 * registration is level-triggered), or the change of registration that a
 * wider want makes reports what is ready then (epoll's switch to edges).
 * Only an edge-triggered epoll registration lacks it: there, readiness that
 * was reported once and not acted on is not reported again.  Fiber I/O
 * relies on it to park without first trying a read that would return EAGAIN
 * where no short read has told it the stream is empty (tdl__io_read_empty). */
#define TDL__FD_LEVEL 0x20u

/* tdl_io.state bits */
#define TDL__IO_ACTIVE 0x1u   /* must stay bit 0: tdl_io_active() tests it */
#define TDL__IO_INTERNAL 0x4u /* loop machinery: does not keep the loop alive */

/* ---- back ends -------------------------------------------------------------- */

/*
 * A back end tells the loop which fds are ready.  It learns which fds to watch
 * through interest(), and reports through tdl__fd_report() from inside wait().
 * Callbacks never run inside wait(): events only queue fds, so a back end
 * never sees its own state change under its feet.
 */
typedef struct tdl__backend {
  const char *name;
  int (*open)(tdl_loop *loop);
  void (*close)(tdl_loop *loop);
  /* The loop wants to hear about `want` (TDL_READ/TDL_WRITE bits; 0 = nothing
   * now) on fd.  Registers the fd on first use (TDL__FD_REGISTERED, rec->reg_gen
   * are the back end's to set).  Returns 0 or a negative errno (-EBADF, -EPERM,
   * -ENOMEM), in which case nothing is registered. */
  int (*interest)(tdl_loop *loop, int fd, tdl__fd *rec, unsigned want);
  /* Forget fd (TDL__FD_REGISTERED is set): the loop is done with it. */
  void (*forget)(tdl_loop *loop, int fd, tdl__fd *rec);
  /* Sleep up to timeout_ns (-1: no limit, 0: do not sleep); report events. */
  int (*wait)(tdl_loop *loop, tdl_time_t timeout_ns);
  /* A pollable fd that is readable when wait() would not sleep, or -ENOTSUP. */
  int (*pollable_fd)(const tdl_loop *loop);
} tdl__backend;

extern const tdl__backend tdl__backend_epoll;
extern const tdl__backend tdl__backend_poll;
#ifdef TDL_HAVE_URING
extern const tdl__backend tdl__backend_uring;
#endif

/* epoll.c's parts that the uring back end reuses: it keeps an epoll set for
 * watchers, hangs it first in its own state (so interest and forget work on
 * it unchanged) and polls that set's fd through its ring. */
struct epoll_event;
typedef struct tdl__epoll {
  int epfd;
  int cap;
  struct epoll_event *events;
} tdl__epoll;
int tdl__epoll_init(tdl__epoll *s);
void tdl__epoll_destroy(tdl__epoll *s);
int tdl__epoll_interest(tdl_loop *loop, int fd, tdl__fd *rec, unsigned want);
void tdl__epoll_forget(tdl_loop *loop, int fd, tdl__fd *rec);
/* The epoll back end's wait, on loop->be_state. */
int tdl__epoll_wait(tdl_loop *loop, tdl_time_t timeout_ns);
/* Report what is ready now without sleeping.  Returns the number of events,
 * or a negative errno. */
int tdl__epoll_harvest(tdl_loop *loop, tdl__epoll *s);

/* ---- completions: operations the kernel runs (the uring back end) ------------ */

/*
 * An operation submitted to the loop's ring, owned by whoever submitted it
 * (fiber I/O keeps it on the fiber's stack).  done() runs on the loop's
 * thread, from inside the back end's wait, exactly once per operation, with
 * the kernel's result (a count or a negative errno); after it returns the
 * loop never touches op again.  Like a report of readiness, done() must only
 * record and queue (wake a fiber), never run user code.
 */
typedef struct tdl__op_base tdl__op; /* loop.h: { void (*done)(tdl__op *op, int res); } */

struct io_uring;
struct io_uring_sqe;
/* The loop's ring, or NULL when its back end is not uring. */
static inline struct io_uring *tdl__loop_ring(const tdl_loop *loop);
/* A submission entry for op, to be filled in by the caller (io_uring_prep_*
 * then nothing else: user_data is op, set here).  It goes to the kernel with
 * the loop's next wait, in one system call with everything else queued.  A
 * full submission queue is submitted at once to make room.  NULL (with
 * *err = -EBUSY/-ENOMEM/...) when even that fails; then op is not in flight. */
struct io_uring_sqe *tdl__ring_sqe(tdl_loop *loop, tdl__op *op, int *err);
#ifdef TDL_FAULTS
/* Tests: the kernel drops the next n operations unrun (-ECANCELED, as io-wq
 * does to work it cannot find a worker thread for), so that the retry of an
 * -ECANCELED nobody asked for can be seen to happen.  Only in a build with
 * fault injection (base/fault.h): other builds carry nothing of it. */
void tdl__ring_debug_drop(tdl_loop *loop, unsigned n);
#endif
/* Ask the kernel to end op early (it completes with -ECANCELED, or with its
 * real result if it finished first): done() still comes, later. */
void tdl__ring_cancel(tdl_loop *loop, tdl__op *op);
/* End every operation in flight on fd now, before the caller closes it (an
 * operation holds the file open, so close() alone would not end it). */
void tdl__ring_cancel_fd(tdl_loop *loop, int fd);
/* Hand what is queued to the kernel now, not with the next wait (an
 * operation that names an fd about to be closed must take its file first). */
void tdl__ring_submit(tdl_loop *loop);

/*
 * Receiving ahead: a multishot receive that stays armed on a stream socket
 * and posts a completion each time data comes, the data in one of the
 * loop's provided buffers (a buffer ring registered with the kernel on first
 * use).  Its owner (fd/ahead.c) queues the buffers and gives each back
 * once it is copied out.  Such a request is in the background: it is not in
 * ops_inflight (it neither keeps the loop alive nor counts as a completion
 * to wait for), and whoever arms one must cancel it and see its last
 * completion (flags without IORING_CQE_F_MORE) before freeing it.
 */
typedef struct tdl__msop tdl__msop;
struct tdl__msop {
  /* From inside the back end's wait, like tdl__op's done(): res is the
   * byte count (> 0, the data in buffer `flags >> IORING_CQE_BUFFER_SHIFT`),
   * 0 at end of stream, or a negative errno; flags are the completion's. */
  void (*cqe)(tdl__msop *op, int res, unsigned flags);
};
/* Provided buffers: TDL__BUFS buffers of TDL__BUF_SIZE bytes per loop. */
enum { TDL__BUFS = 2048, TDL__BUF_SIZE = 2048 };
/* Set the loop's buffers up (once): 0, -ENOMEM, or what registering the
 * buffer ring said. */
int tdl__ring_bufs_ready(tdl_loop *loop);
/* Arm a multishot receive on fd for op (the buffers are ready); it goes
 * with the next submission.  -EBUSY: no submission entry. */
int tdl__ring_recv_ahead(tdl_loop *loop, tdl__msop *op, int fd);
/* Arm a multishot accept on the listener fd for op (each completion's res
 * is a new fd, non-blocking and close-on-exec, or a negative errno).
 * -EBUSY: no submission entry. */
int tdl__ring_accept_ahead(tdl_loop *loop, tdl__msop *op, int fd);
/* Ask the kernel to end op now; its last completion comes later. */
void tdl__ring_cancel_ahead(tdl_loop *loop, tdl__msop *op);
/* Buffer bid's memory, and giving it back to the kernel. */
char *tdl__ring_buf(tdl_loop *loop, unsigned bid);
void tdl__ring_buf_put(tdl_loop *loop, unsigned bid);
/* Wait until every background request has had its last completion (after
 * their owner cancelled them all): for tearing down.  Gives up after a
 * second (a kernel that never answers), returning -ETIMEDOUT. */
int tdl__ring_settle_ahead(tdl_loop *loop);

/* ---- timers -------------------------------------------------------------------- */

typedef struct tdl__tentry {
  tdl_time_t at;
  tdl_timer *t; /* NULL: cancelled (a tombstone) */
} tdl__tentry;

typedef struct tdl__timers {
  tdl__tentry *heap;   /* 4-ary min-heap on `at`, children of i at 4i+1..4i+4 */
  void *heap_mem;      /* allocation behind heap (heap is offset for alignment) */
  uint32_t n;          /* entries, tombstones included */
  uint32_t cap;        /* entries ready to be written (see grow() in timer.c) */
  uint32_t mapped;     /* entries the mapping holds */
  uint32_t sorted;     /* heap[0, sorted) is a valid heap; the rest is appended */
  uint32_t dead;       /* tombstones */
  uint32_t live;       /* started timers (heap + due batch) */
  uint64_t seq;        /* arming counter, for FIFO order among equal deadlines */
  tdl_timer **due;     /* the batch being fired */
  uint32_t due_n, due_cap;
  tdl_timer **scratch; /* for ordering runs of equal deadlines */
  uint32_t scratch_cap;
} tdl__timers;

void tdl__timers_init(tdl__timers *ts);
void tdl__timers_destroy(tdl__timers *ts);
/* Give back the pages of heap entries made ready and not in use, when they
 * come to 256 KiB or more (after a peak of timers).  Cost: one madvise. */
void tdl__timers_trim(tdl__timers *ts);
/* Fire every timer due at or before loop->now. */
void tdl__timers_run(tdl_loop *loop);
/* The earliest deadline, or TDL_FOREVER when no timer is started. */
tdl_time_t tdl__timers_next(tdl_loop *loop);

/* ---- the watchdog's heartbeat ----------------------------------------------------- */

enum { TDL__WATCH_NAME = 24 }; /* bytes of a fiber's name, NUL included (tdl__fiber.name) */

/*
 * What a watched loop's thread tells the watchdog thread (watchdog.c): when it
 * left its poll, and what runs now.  The loop's thread only stores (relaxed,
 * or release where the sequence lock needs it), never reads back, never calls
 * the kernel; the watchdog thread only loads.  It starts a record that
 * watchdog.c allocates cache-line aligned, so these stores share a line with
 * nothing else the loop or the watchdog writes.
 *
 * The running fiber's name is copied here on every switch because the
 * watchdog thread may not read the fiber itself: a fiber's control block is on
 * its stack, which is reused or unmapped once the fiber ends.
 */
typedef struct tdl__heartbeat {
  tdl_time_t away_since;  /* the loop's time when it left its poll; 0: at its poll, or not running */
  uint32_t seq;           /* odd while the two below change: a sequence lock */
  uint64_t fiber_id;      /* the running fiber's id; 0: the loop's own code (a callback) */
  uint64_t fiber_name[TDL__WATCH_NAME / 8]; /* and its name, NUL-padded */
  /* and its stack [lo, hi), or 0, 0: read only by the loop's own thread, in
   * the handler that takes the call chain of a stall (watchdog.c), which
   * trusts them only while seq is even */
  uintptr_t stack_lo, stack_hi;
} tdl__heartbeat;

/* From the scheduler, at every switch while the loop is watched: fiber `id`
 * (name: TDL__WATCH_NAME bytes, stack [lo, hi)) runs now, or for id 0 the
 * loop's own code. */
static inline void tdl__heartbeat_running(tdl__heartbeat *hb, uint64_t id, const char *name, uintptr_t lo,
                                          uintptr_t hi)
{
  uint64_t words[TDL__WATCH_NAME / 8] = {0};
  if (name)
    memcpy(words, name, sizeof words);
  uint32_t seq = __atomic_load_n(&hb->seq, __ATOMIC_RELAXED);
  __atomic_store_n(&hb->seq, seq + 1, __ATOMIC_RELAXED);
  /* Release stores (plain stores on x86): a reader that sees any of them
   * also sees the odd count before it, so it never takes a torn name. */
  __atomic_store_n(&hb->fiber_id, id, __ATOMIC_RELEASE);
  for (int i = 0; i < TDL__WATCH_NAME / 8; i++)
    __atomic_store_n(&hb->fiber_name[i], words[i], __ATOMIC_RELEASE);
  __atomic_store_n(&hb->stack_lo, lo, __ATOMIC_RELEASE);
  __atomic_store_n(&hb->stack_hi, hi, __ATOMIC_RELEASE);
  __atomic_store_n(&hb->seq, seq + 2, __ATOMIC_RELEASE);
}

/* tdl_loop_free: stop the loop's watchdog, if it has one. */
void tdl__watchdog_close(tdl_loop *loop);

/* What the watchdog knows of a loop now, for a dump that the loop did not
 * answer: its name, when it left its poll (0: at its poll, or not running)
 * and which fiber runs (id 0: a callback). */
typedef struct tdl__watch_state {
  char name[TDL__WATCH_NAME];
  tdl_time_t away_since;
  uint64_t fiber_id;
  char fiber[TDL__WATCH_NAME];
} tdl__watch_state;
/* From any thread: false when loop is not watched.  loop is compared, never
 * dereferenced. */
bool tdl__watchdog_peek(const tdl_loop *loop, tdl__watch_state *out);
/* The real-time signal the watchdog interrupts a stalled loop's thread with
 * to take its call chain, or 0 (none chosen yet, or none was free). */
int tdl__watchdog_signal(void);

/* ---- counters (metrics/, tdl_loop_metrics) ------------------------------------------ */

/* What a loop counts for its metrics, only on its own thread: plain
 * increments, read by a snapshot on that thread.  Without TDL_METRICS
 * nothing increments them (their cost can be measured: the option). */
typedef struct tdl__loop_counts {
  /* (switches, parks and wake-ups are the scheduler's: fiber/sched.c) */
  uint64_t io_parks;         /* fd/: of the parks, fiber I/O's */
  uint64_t ring_submissions; /* backend/uring.c: entries the kernel took, completions reaped */
  uint64_t ring_completions;
} tdl__loop_counts;

#ifdef TDL_METRICS
#define TDL__COUNT(loop, field, n) ((void)((loop)->counts.field += (n)))
#else
#define TDL__COUNT(loop, field, n) ((void)(loop))
#endif

/* ---- the loop ------------------------------------------------------------------ */

struct tdl_loop {
  tdl_time_t now;
  const tdl__backend *be;
  void *be_state;

  tdl__fd *fds;        /* nfds records, by fd number */
  tdl__fd_cold *fdc;   /* and their cold halves */
  uint32_t nfds;

  /* fds whose watcher may have something to report, in arrival order, each
   * at most once (TDL__FD_QUEUED).  The queue takes new entries while the
   * batch (the previous queue) is being run; both hold nfds entries.  Entries
   * are fd numbers, not watchers: a watcher stopped and freed while its fd is
   * queued is never touched again. */
  int *queue, *batch;
  uint32_t queue_n;

  tdl__timers timers;
  /* Of the started timers, how many are the loop machinery's own (the
   * scheduler's stack trim): they fire, but do not keep the loop alive. */
  uint32_t timers_internal;

  tdl__list defers;   /* queued tdl_defer, oldest first */
  tdl__list hooks[2]; /* started tdl_observer, by tdl_observer_kind */

  uint32_t active;   /* started handles that keep tdl_loop_run going (not timers) */
  uint32_t io_started; /* started watchers, internal ones included */
  int running;
  int stop_flag;
  tdl_time_t spin;   /* tdl_loop_options.spin */
  pthread_t owner;

  /* remote.c: wakeups and ports, the thread-safe entries.  What other
   * threads write is in the port, on a cache line of its own. */
  int wake_fd;        /* the port's eventfd, or -1 */
  tdl_io wake_io;
  tdl__list wakeups;  /* started tdl_wakeup */
  struct tdl_port *port; /* made on first use; other threads hold references */
  int remote_waits;   /* fibers waiting for a wake from another thread */

  /* signal.c */
  int sig_fd;
  tdl_io sig_io;
  sigset_t sig_mask;     /* signals this loop reads */
  sigset_t sig_restore;  /* of those, the ones to unblock when their last watcher stops */
  tdl__list sigs;        /* all started signal watchers */
  uint32_t sig_watchers[_NSIG]; /* of them, how many per signal */

  /* uring.c: the ring (NULL on other back ends), and how many operations
   * are in flight on it: each stands for a parked fiber that only its
   * completion can wake, so while some are, the loop is not deadlocked and
   * must ask the kernel even when it does not sleep. */
  struct io_uring *ring;
  uint32_t ops_inflight;
  uint32_t ops_background; /* armed receives ahead (tdl__msop), not in ops_inflight */
  tdl__list ops_done; /* op.c: completed tdl_op, oldest first, their callbacks due */

  /* The fiber scheduler, when fibers are used (fiber.c).  run() runs the
   * runnable fibers; busy() says whether some are runnable (poll must not
   * sleep); alive() whether any exist. */
  void *sched;
  void (*sched_run)(tdl_loop *loop);
  bool (*sched_busy)(tdl_loop *loop);
  bool (*sched_alive)(tdl_loop *loop);
  int (*sched_destroy)(tdl_loop *loop); /* -EBUSY while fibers are unreleased */
  /* A watchdog was started: publish what runs now (the scheduler publishes
   * every later switch itself, through tdl__heartbeat_running). */
  void (*sched_watched)(tdl_loop *loop);

  /* watchdog.c: the heartbeat of this loop's watchdog, or NULL when it has
   * none (the only cost of the watchdog when off: a test of this pointer per
   * iteration and per fiber switch).  Set and cleared on the loop's thread. */
  tdl__heartbeat *watch;

  tdl__loop_counts counts;
  /* group/acceptor.c: the acceptor slots served on this loop, linked and
   * unlinked on its thread; a metrics snapshot sums their counts. */
  tdl__list acceptor_slots;
};

static inline struct io_uring *tdl__loop_ring(const tdl_loop *loop) { return loop->ring; }

/* The loop reached its poll, or left tdl_loop_run: it is not away. */
static inline void tdl__heartbeat_home(tdl_loop *loop)
{
  if (TDL__UNLIKELY(loop->watch != NULL))
    __atomic_store_n(&loop->watch->away_since, 0, __ATOMIC_RELAXED);
}

/* The loop's code runs again since t (a clock reading). */
static inline void tdl__heartbeat_away_at(tdl_loop *loop, tdl_time_t t)
{
  if (TDL__UNLIKELY(loop->watch != NULL))
    __atomic_store_n(&loop->watch->away_since, t, __ATOMIC_RELAXED);
}

/* The loop left its poll at loop->now, just read from the clock. */
static inline void tdl__heartbeat_away(tdl_loop *loop) { tdl__heartbeat_away_at(loop, loop->now); }

/* A back end's report, from inside wait(), that fd (whose record is r, under
 * the registration it reports for) is ready for `bits`.  Inline: this runs
 * once per event.  Whether a watcher wants the bits is decided when the queue
 * is run, which reads the watcher then, not now.  The fd is appended to
 * queue[*queued]: loop->queue and loop->queue_n, which a back end reporting
 * many events may keep in locals and store back afterwards (the stores
 * through r would otherwise make the compiler reload them for every event). */
static inline void tdl__fd_report(tdl__fd *r, int fd, unsigned bits, int *queue, uint32_t *queued)
{
  r->ready |= (uint8_t)bits;
  if (r->w && !(r->flags & TDL__FD_QUEUED)) {
    r->flags |= TDL__FD_QUEUED;
    queue[(*queued)++] = fd;
  }
}

/* Whether a read on w's fd is known to find nothing: w made the fd's
 * registration, the back end reports reads as a level for it, and no read,
 * error or hang-up is cached.  Then parking until the loop reports the fd
 * costs no system call and loses nothing: a level is reported as soon as a
 * watcher wants it. */
static inline bool tdl__io_read_empty(const tdl_loop *loop, const tdl_io *w)
{
  uint32_t fd = (uint32_t)w->fd;
  if (fd >= loop->nfds)
    return false;
  const tdl__fd *r = &loop->fds[fd];
  const tdl__fd_cold *c = &loop->fdc[fd];
  return (r->flags & TDL__FD_REGISTERED) && (r->bmode & TDL__FD_LEVEL) &&
         !(r->ready & (TDL_READ | TDL_ERR | TDL_HUP)) && c->owner == w && c->owner_gen == w->gen;
}

/* From inside w's callback: stop w, and keep `keep` (arrivals just
 * reported to it) cached as ready for its fd: tdl_io_stop, then
 * tdl_io_feed, in one look-up (fiber I/O's wake of its last waiter). */
void tdl__io_stop_keeping(tdl_loop *loop, tdl_io *w, unsigned keep);

/* The events of `events` (and TDL_ERR/TDL_HUP) that the loop has cached as
 * ready for w's fd, if w made its registration; 0 otherwise. */
static inline unsigned tdl__io_cached(const tdl_loop *loop, const tdl_io *w, unsigned events)
{
  uint32_t fd = (uint32_t)w->fd; /* (a negative fd is past nfds) */
  if (fd >= loop->nfds || loop->fdc[fd].owner != w || loop->fdc[fd].owner_gen != w->gen)
    return 0;
  return loop->fds[fd].ready & (events | TDL_ERR | TDL_HUP);
}

/* Before a wait for `events` on w's fd: what it may take as ready now.
 * Where the loop misses nothing that is ready when a wait starts (the fd is
 * registered with reads reported as a level, TDL__FD_LEVEL, or not
 * registered yet, or not by w: a first registration reports what is
 * there), nothing: what was cached of `events` is dropped as stale, so
 * that the wait waits.  On an edge-triggered registration, readiness
 * reported once is not reported again, so what is cached is what there is
 * to go on: those of `events`, TDL_ERR, and TDL_HUP when `events` has
 * TDL_READ (a hang-up tells a writer nothing); it stays cached (it lasts
 * until a call says otherwise, tdl_io_blocked: a second wait with nothing
 * done between must see it again).  No system call. */
unsigned tdl__io_wait_ready(tdl_loop *loop, tdl_io *w, unsigned events);

/* After reporting: let the loop re-state its interest in fd (poll back end,
 * which asks for writability only until it is seen). */
void tdl__fd_refresh(tdl_loop *loop, int fd);
/* Drop the back end's registration of fd and everything cached about it. */
void tdl__fd_forget(tdl_loop *loop, int fd);
/* Run the watchers of the fds queued before this call. */
void tdl__io_run_pending(tdl_loop *loop);
static inline bool tdl__io_has_pending(const tdl_loop *loop) { return loop->queue_n != 0; }
/* Make room for fd in the fd table (and the queues).  0 or -ENOMEM. */
int tdl__fd_reserve(tdl_loop *loop, int fd);
/* Shrink the fd table (and the queues) back when the fds in use, after a
 * peak, need a quarter of it or less: what a peak of connections grew is
 * given back once they have gone.  Call between iterations' I/O runs (a
 * timer callback: the scheduler's trim).  Cost: a scan down from the top to
 * the highest fd in use, and four reallocs when it shrinks. */
void tdl__fd_tables_trim(tdl_loop *loop);

/* The loop this thread is running (inside tdl_loop_run), or NULL. */
extern _Thread_local tdl_loop *tdl__tl_loop __attribute__((tls_model("initial-exec")));

/* The loop's own fds (eventfd, signalfd): w watches fd for TDL_READ without
 * keeping the loop alive.  On failure fd is closed.  Returns 0 or the error
 * of tdl_io_start. */
int tdl__io_open_internal(tdl_loop *loop, tdl_io *w, int fd, tdl_io_cb cb);
/* Stop w, forget its fd and close it. */
void tdl__io_close_internal(tdl_loop *loop, tdl_io *w);

/* defer.c, hook.c: run what is queued / started. */
void tdl__defer_run(tdl_loop *loop);
void tdl__observers_run(tdl_loop *loop, int kind);

/* remote.c: what other threads left for the loop.  may_sleep says the loop
 * is about to sleep (false: work came, do not); busy(true) that it runs and
 * will look, busy(false) that it will not; run runs wakeups and posts; has_work whether some wait;
 * expected whether other threads hold the loop's port (so a post may come);
 * close refuses further posts, hands back the queued ones, frees the fd. */
bool tdl__remote_may_sleep(tdl_loop *loop);
/* Spin (the loop still busy) up to loop->spin, and at most timeout (-1:
 * none), watching for work from other threads; returns whether it came. */
bool tdl__remote_spin(tdl_loop *loop, tdl_time_t timeout);
void tdl__remote_busy(tdl_loop *loop, bool busy);
void tdl__remote_run(tdl_loop *loop);
bool tdl__remote_has_work(const tdl_loop *loop);
bool tdl__remote_expected(const tdl_loop *loop);
/* A fiber is about to wait for a wake from another thread (a post to this
 * loop's port, made here if need be: 0 or its errors), or is done waiting:
 * while some wait, parked fibers are not a deadlock.  Loop thread only. */
int tdl__remote_expect(tdl_loop *loop);
void tdl__remote_unexpect(tdl_loop *loop);
void tdl__remote_close(tdl_loop *loop);
/* The port and its eventfd, made now rather than on first use (loop thread;
 * -ENOMEM, -EMFILE/-ENFILE), so that other threads can reach the loop. */
int tdl__remote_open(tdl_loop *loop);
/* From any thread, while the loop cannot be freed: its port, or NULL when it
 * has none yet.  No reference is taken. */
struct tdl_port *tdl__remote_port_peek(tdl_loop *loop);

/* op.c: run the callbacks of completed tdl_op. */
void tdl__ops_run(tdl_loop *loop);
static inline bool tdl__ops_pending(const tdl_loop *loop) { return !tdl__list_empty(&loop->ops_done); }

/* signal.c: release the fd it created. */
void tdl__signal_close(tdl_loop *loop);

#endif /* TDL_LOOP_INTERNAL_H */
