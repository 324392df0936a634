/* SPDX-License-Identifier: MIT */
/*
 * The fiber scheduler's internals, shared by sched.c (spawn, switch, park,
 * join), the rest of the fiber layer (fls.c, inspect.c, main.c) and the
 * layers above that park fibers: fiber I/O (fd/), channels, locks, the
 * pool's calls.  Every call of theirs that may park begins with
 * tdl__may_block.
 *
 * The scheduler knows nothing of its clients.  What they need at its edges,
 * they hang on it: a fiber's cleanups (tdl__cleanup, fiber.h) run when it
 * finishes; a scheduler's teardown hooks (tdl__sched_client) run when it is
 * destroyed.
 *
 * The one operation to follow: a fiber that must wait calls tdl__park(),
 * which arms its deadline timer and switches straight to the next runnable
 * fiber (or back to the loop when none is left).  Whoever ends the wait calls
 * tdl__wake(f, result), which queues f; tdl__park() then returns that result
 * in f.
 */
#ifndef TDL_FIBER_INTERNAL_H
#define TDL_FIBER_INTERNAL_H

#include <pthread.h>
#include <sys/uio.h>

#include "loop/loop_internal.h"
#include "fiber/overflow.h"
#include "fiber/stack.h"
#include "fiber/switch.h"

enum { TDL__FIBER_RUNNABLE = 1, TDL__FIBER_RUNNING, TDL__FIBER_PARKED, TDL__FIBER_DONE };

/* The arbiter of a wait that several things may end (a select's clauses,
 * possibly on other threads): the first to take it wins, the others leave
 * it alone, and the waiter closes it when it comes back.  state: 0 open,
 * n + 1 taken by clause n, -1 closed by the waiter. */
typedef struct tdl__claim {
  int state; /* atomic */
} tdl__claim;

/* Take c for clause `who`; false when another was first (or it is closed). */
static inline bool tdl__claim_take(tdl__claim *c, int who)
{
  int open = 0;
  return __atomic_compare_exchange_n(&c->state, &open, who + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* The waiter is back: close c.  Returns the clause that took it, or -1 when
 * none did (the waiter's own deadline or cancel ended the wait). */
static inline int tdl__claim_close(tdl__claim *c)
{
  int open = 0;
  if (__atomic_compare_exchange_n(&c->state, &open, -1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return -1;
  return open - 1;
}

typedef struct tdl__sched tdl__sched;

/* A fiber's control block.  It lives at the top of the fiber's own stack, so
 * an idle fiber costs the one page that holds it and its first frames; on a
 * loop that compacts idle fibers (compact.c) it lives on the heap instead,
 * so that it stays readable while the stack's pages are given back. */
typedef struct tdl__fiber {
  /* Hot: what a park, a wake and a switch touch, in the first cache line
   * (the control block is 64-byte aligned on its stack; with many fibers each hand-off
   * touches another fiber's block). */
  tdl__ctx ctx;
  tdl__sched *sched;
  tdl__qnode run;        /* in the run queue while runnable */
  const char *waits_on;
  tdl_time_t deadline;
  tdl_time_t parked_at;  /* the loop's cached time at the last park (for a
                            debugger: how long it has waited) */
  int wake_result;
  int wait_fd;
  uint8_t state;
  uint8_t cancelled;
  uint8_t io_budget;
  uint8_t permit;        /* tdl_fiber_unpark() before tdl_fiber_park() */
  uint8_t nocancel;      /* in tdl__park_uncancellable(): cancel only marks */
  uint8_t detached;
  uint8_t timer_lazy;    /* `timer` is armed but serves no park (sched.c) */
  uint8_t compacted;     /* its stack's top is in compact_copy (compact.c) */
  /* Cold. */
  uint8_t offstack;      /* this block is on the heap, not on the stack */
  uint8_t compactable;   /* the park it is in may be compacted (compact.c) */
  void *compact_copy;    /* while compacted: [compact_from, frames_top) */
  char *compact_from;
  char *frames_top;      /* offstack: where its first frame begins */
  tdl__list all;         /* in the scheduler's list of unreleased fibers */
  tdl_fiber_fn fn;
  void *arg;
  void *result;
  uint64_t id;
  uint32_t slot, gen;
  struct tdl__fiber *joiner;
  tdl__list cleanups;    /* tdl__cleanup: run when the fiber finishes */
  void (*abort_wait)(struct tdl__fiber *f); /* a cancel or deadline ends the
                                            park: undo the wait at once */
  void *abort_ctx;
  int unpark_result;     /* in a select with a PARK clause: its number; else -1 */
  tdl__claim *unpark_claim; /* and the select that must be taken first, or NULL */
  tdl__cleanup fls_cleanup; /* fls.c's, linked once a value is set */
  uint8_t fls_rounds;    /* fls.c: rounds of destructors run */
  tdl_timer timer;
  tdl__stack stack;
  tdl__stack_info info;
  /* Room for the one wait record that fiber I/O hangs on an fd's state for a
   * plain wait (fd/io.c): here, and not on the stack, it stays readable by
   * the loop while the fiber is compacted. */
  void *wait_space[4];
  void **fls;            /* TDL_FLS_KEYS values, allocated at the first value
                            set (fls.c): most fibers never set one; freed
                            with the fiber (sched.c, release) */
  char name[24];
} tdl__fiber;

/* Where a handle points: its generation must match. */
typedef struct tdl__slot {
  tdl__fiber *f;
  uint32_t gen;
  uint32_t next_free;
} tdl__slot;

typedef struct tdl__sched_client tdl__sched_client;

/* Something a client of the scheduler hung on it, run when it is destroyed
 * (fd/io.c's per-fd state). */
struct tdl__sched_client {
  tdl__list link;
  void (*destroy)(tdl__sched *s, tdl__sched_client *h);
  /* Optional (NULL: none): give back what a peak grew, once a second while
   * the scheduler trims its stack cache (fiber I/O's per-fd table). */
  void (*trim)(tdl__sched *s, tdl__sched_client *h);
};

struct tdl__sched {
  tdl_loop *loop;
  tdl__ctx loop_ctx;     /* the loop's own (thread) context while fibers run */
  tdl__fiber *current;   /* NULL while the loop's own code runs */
  tdl__queue runq;       /* runnable fibers, oldest first */
  tdl__list all;         /* every unreleased fiber */
  size_t live;           /* fibers not yet released */
  size_t unfinished;     /* fibers that have not finished */
  unsigned dispatch_left;/* switches left before the loop polls again */
  /* Metrics (TDL_METRICS; metrics/ reads them).  A hand-off between
   * fibers counts one thing, the park, which costs nothing measurable; an
   * increment at each switch and at each wake-up as well cost the ring
   * benchmark measurably (read-modify-writes of one line on both sides of the
   * stack switch).  So the switches are derived: each park, yield and
   * finish switches once (but a yield that finds nobody else to run), and
   * the loop switches into a fiber once per dispatch; and the wake-ups are
   * the parks less the fibers parked now, found by walking the fibers. */
  uint64_t parks, dispatches, yields, finishes, unswitched;
  tdl__fiber *dead;      /* finished and detached: release once off its stack */
  uint64_t next_id;
  tdl__slot *slots;
  uint32_t nslots, slots_cap, free_slot;
  tdl__stack_pool pool;
  tdl_timer trim;        /* trims the pool while it caches stacks (internal:
                            it does not keep the loop alive) */
  tdl__list on_thread;   /* in tdl__thread_scheds */
  tdl__list in_process;  /* in tdl__process_scheds */
  tdl__list hooks;       /* tdl__sched_client, run at destruction */
  void *io;              /* fd/io.c's state, opaque here */
  tdl_time_t compact_after; /* tdl_fiber_compact_idle's threshold; 0: off */
  tdl_timer compact;     /* its walk, once a threshold (internal) */
  size_t compacted;      /* fibers compacted now */
  int overflow_ready;
};

/* Every scheduler of the process, whatever its thread, for what looks at
 * all fibers from outside their loops: the gdb script (which reads this
 * list from a live process or a core file: its name and the layout of
 * tdl__sched and tdl__fiber are the script's interface) and the dump on a
 * signal.  Changed under tdl__process_scheds_lock, which a forked child
 * gets back unlocked. */
extern tdl__list tdl__process_scheds;
extern pthread_mutex_t tdl__process_scheds_lock;

#ifdef TDL_METRICS
#define TDL__SCHED_COUNT(s, field) ((void)((s)->field++))
#else
#define TDL__SCHED_COUNT(s, field) ((void)(s))
#endif

/* The scheduler of the fiber running on this thread (or of the loop whose
 * fibers are being dispatched); NULL otherwise. */
extern _Thread_local tdl__sched *tdl__tl_sched __attribute__((tls_model("initial-exec")));

static inline tdl__fiber *tdl__self(void)
{
  tdl__sched *s = tdl__tl_sched;
  return s ? s->current : NULL;
}

/* The checks every call that may park makes first: 0 with *out (when out
 * is not NULL) the running fiber, -EPERM outside a fiber, -ECANCELED in a
 * cancelled one (whose next park would fail anyway: fail before doing
 * anything).  Callers that check arguments in between compare with
 * -EPERM. */
static inline int tdl__may_block(tdl__fiber **out)
{
  tdl__fiber *f = tdl__self();
  if (out)
    *out = f;
  if (!f)
    return -EPERM;
  return f->cancelled ? -ECANCELED : 0;
}

/* The same, and -ETIMEDOUT once the deadline has passed by the clock: for
 * calls that hand work to another thread, which a deadline already past
 * must not start. */
static inline int tdl__may_block_until(tdl__fiber **out, tdl_time_t deadline)
{
  int e = tdl__may_block(out);
  if (e == 0 && deadline != TDL_FOREVER && deadline <= tdl__clock_now())
    return -ETIMEDOUT;
  return e;
}

/* Every scheduler created on this thread, so that tdl_close() called outside
 * a fiber can still clear what the loops of this thread know about an fd. */
extern _Thread_local tdl__list tdl__thread_scheds;

/* The scheduler of loop, created on first use (-ENOMEM). */
int tdl__sched_get(tdl_loop *loop, tdl__sched **out);

/* Park the running fiber until tdl__wake() or the deadline (-ETIMEDOUT).
 * `what` names the wait for tdl_fiber_dump (a static string).  Returns the
 * waker's result, -ETIMEDOUT, or -ECANCELED (also at once, without parking,
 * when the fiber is already cancelled).  A deadline already past returns
 * -ETIMEDOUT without parking. */
int tdl__park(tdl__fiber *f, const char *what, int fd, tdl_time_t deadline);

/* Park with no deadline until tdl__wake(), even if the fiber is or gets
 * cancelled meanwhile (the cancel is remembered, for the next park).  For
 * waits that must end in a known state, e.g. retaking a mutex. */
int tdl__park_uncancellable(tdl__fiber *f, const char *what);
/* The same with a deadline (-ETIMEDOUT). */
int tdl__park_nocancel(tdl__fiber *f, const char *what, tdl_time_t deadline);

/* Queue f (runnable) at the back of the run queue. */
static inline void tdl__runq_push(tdl__sched *s, tdl__fiber *f)
{
  f->state = TDL__FIBER_RUNNABLE;
  tdl__queue_push(&s->runq, &f->run);
}

/* End f's park with `result`.  Returns whether f was parked (and is now
 * queued); a fiber already woken, running or finished is left alone.
 * Inline: every channel hand-off and lock release calls it. */
static inline bool tdl__wake(tdl__fiber *f, int result)
{
  if (f->state != TDL__FIBER_PARKED)
    return false;
  f->wake_result = result;
  tdl__runq_push(f->sched, f);
  return true;
}

/* Park as tdl__park, and let the loop compact f while it waits (compact.c):
 * for waits whose every record that others reach is off f's stack, and
 * into whose stack nothing is written until f runs again. */
int tdl__park_compactable(tdl__fiber *f, const char *what, int fd, tdl_time_t deadline);

/* Whether f's park may be compacted: tdl_fiber_park, tdl_sleep, or a
 * tdl__park_compactable. */
bool tdl__park_idle(const tdl__fiber *f);

/* Put f's stack back as it was before compaction (in sched.c, which
 * tdl__wake_idle's callers stand on; compact.c compacts). */
void tdl__compact_restore(tdl__sched *s, tdl__fiber *f);

/* tdl__wake, for the wakers of the parks that may be compacted
 * (tdl__park_compactable): it puts f's stack back first (compact.c), on the
 * loop thread, before f is runnable and anything can touch that stack.
 * Every path that can end such a park wakes with it (tdl_fiber_unpark, a
 * deadline or a cancel, fd readiness or close); the switch into a fiber
 * tests nothing. */
static inline bool tdl__wake_idle(tdl__fiber *f, int result)
{
  if (!tdl__wake(f, result))
    return false;
  if (TDL__UNLIKELY(f->compacted))
    tdl__compact_restore(f->sched, f);
  return true;
}

/* Link c into f's cleanups (c->run set by the caller), or take it out again
 * once what it stands for has been given back. */
static inline void tdl__cleanup_add(tdl__fiber *f, tdl__cleanup *c) { tdl__list_push_front(&f->cleanups, &c->link); }
static inline void tdl__cleanup_del(tdl__cleanup *c)
{
  if (tdl__list_linked(&c->link))
    tdl__list_remove(&c->link);
}

/* Run h->destroy(s, h) when s is destroyed. */
static inline void tdl__sched_client_add(tdl__sched *s, tdl__sched_client *h) { tdl__list_push(&s->hooks, &h->link); }

/* Called by fiber I/O after an operation that did not block: every
 * IO_BUDGET-th in a row yields (fiber.h).  A call made with MSG_DONTWAIT
 * spends without ever switching: its caller may be inside a library that
 * is not re-entrant (OpenSSL under libtreadle-tls's BIO), where another
 * fiber running meanwhile would call it again.  The yield it would owe is
 * taken by the fiber's next call that may switch (the budget stops at 1). */
void tdl__io_budget_spend(tdl__fiber *f);
static inline void tdl__io_budget_spend_nowait(tdl__fiber *f)
{
  if (f->io_budget > 1)
    f->io_budget--;
}
static inline void tdl__io_budget_spend_as(tdl__fiber *f, bool nowait)
{
  if (nowait)
    tdl__io_budget_spend_nowait(f);
  else
    tdl__io_budget_spend(f);
}

/* The fiber a handle names, or NULL when stale (or s is NULL). */
tdl__fiber *tdl__fiber_lookup(tdl__sched *s, tdl_fiber_t h);
tdl_fiber_t tdl__fiber_handle(const tdl__fiber *f);

/* Release every finished fiber nobody can join any more (tdl_fiber_main's
 * end): neither joined nor detached, they would keep their stacks. */
void tdl__sched_release_finished(tdl__sched *s);

/* inspect.c: what tdl_fiber_foreach says of f, and tdl_fiber_dump's line
 * for it (without stdio, so that it neither allocates nor takes a lock),
 * appended at p up to end; and a write of all of buf to fd (-1 on an error:
 * there is nowhere to report it). */
void tdl__fiber_info_get(const tdl__fiber *f, tdl_fiber_info *in);
char *tdl__fiber_info_line(char *p, char *end, const tdl_fiber_info *in);
int tdl__fiber_write_all(int fd, const char *buf, size_t len);

/* Set (atomically) by dump.c while a dump on a signal is armed: a new
 * scheduler then opens its loop's port at once, for the dump to reach it. */
extern int tdl__dump_armed;

#endif /* TDL_FIBER_INTERNAL_H */
