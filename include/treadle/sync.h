/* SPDX-License-Identifier: MIT */
/*
 * Synchronization between fibers: mutex, condition variable, counting
 * semaphore, wait group, once, channels with select, and broadcasts (at
 * the end).
 * Include <treadle.h>.
 *
 * Memory.  Every lock is a struct the caller owns.  It is ready when
 * zero-filled, when set from its TDL_*_INIT macro, or after its init
 * function; nothing is allocated (but for the _shared forms).  A fiber that must wait links a record
 * that lives on its own stack into the object's queue.  An object must not be
 * moved or freed while it is in use (see the destroy functions).
 *
 * Waiting.  A fiber that cannot go on parks: it costs no CPU until it is woken
 * (no spinning, no polling).  Waiters are served strictly in FIFO order, and
 * by hand-off: whoever releases a mutex, a permit, a signal or the right to
 * run a once-function gives it directly to the oldest waiter, which then owns
 * it before it even runs again.  A fiber arriving later (even with a try-call)
 * cannot take it first, so FIFO order is real; the price is that a fiber that
 * unlocks and locks again at once queues behind the waiters (no "barging").
 *
 * Blocking calls follow fiber.h:
 *   - an absolute deadline on the loop's clock (TDL_FOREVER: none); when it
 *     passes first, the call returns -ETIMEDOUT.  A deadline already past
 *     still lets a call that need not wait succeed.
 *   - sticky cancellation: on a cancelled fiber, a blocking call returns
 *     -ECANCELED at once, even when it could have succeeded without waiting
 *     (as fiber I/O does); a fiber cancelled while it waits wakes with
 *     -ECANCELED.  The non-blocking calls (try_lock, unlock, try_acquire,
 *     release, signal, add, done) still work, so that a cancelled fiber can
 *     unwind: unlock what it holds, give back its permits.
 *   - outside a fiber (in main, in a callback), blocking calls return -EPERM
 *     without doing anything; so do the mutex calls, since a mutex is owned by
 *     a fiber.
 *
 * Nothing is ever lost to a timeout or a cancellation.  A waiter that times
 * out or is cancelled leaves the queue without having taken anything: a
 * release or signal that comes after skips it.  When something was handed to
 * a waiter and the waiter is cancelled before it runs again (both in the same
 * loop iteration), cancellation wins: the call returns -ECANCELED and passes
 * what it was given on to the next waiter (or back to the object).  A
 * deadline timer that fires after the hand-off has no effect: the call
 * succeeds.
 *
 * Signalling from outside fibers.  tdl_cond_signal/broadcast,
 * tdl_sem_release/try_acquire and tdl_waitgroup_add/done work anywhere on the
 * loop's thread, also in I/O and timer callbacks: they wake fibers without
 * blocking.
 *
 * Destroying.  The destroy functions fail with -EBUSY, and change nothing,
 * while the object is in use: a fiber waits on it or holds it, or was woken
 * by it and still has to touch it on its way out (see each function).  Waking
 * the waiters with an error instead would let them touch the object after
 * the caller freed it.  On success the object is reset to its initial state
 * and may be freed or reused.
 *
 * Threads.  These objects are for the fibers of one loop; they are not
 * THREAD-SAFE, except a semaphore, wait group or channel made by its
 * _shared constructor, which fibers of several loops (and, for releasing,
 * any thread) may use at once, and a broadcast, which is always shared.
 * A mutex is for one loop's fibers only: a shared semaphore of one permit
 * excludes across loops (see tdl_mutex).
 */
#ifndef TREADLE_SYNC_H
#define TREADLE_SYNC_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tdl__fiber;

/* ------------------------------------------------------------------------ */
/* Mutex                                                                     */
/* ------------------------------------------------------------------------ */

/*
 * A lock owned by one fiber at a time.  Not recursive.  Unlocking hands the
 * mutex to the oldest waiter (see "Waiting" above).
 *
 * A fiber that finishes while holding mutexes (returns from its function or
 * calls tdl_fiber_exit) does not leave them locked forever: each is released
 * as the fiber finishes and handed to its oldest waiter (or left unlocked),
 * and the next fiber to acquire it, by lock, trylock or cond_wait, gets
 * -EOWNERDEAD instead of 0 (once) while holding it: the data the mutex
 * protects may be half-updated, and it is that fiber's job to repair it.
 * (Each mutex a fiber holds is linked into the fiber's control block; its
 * fiber-local-storage destructors run in the same pass, so a mutex locked
 * by one of them and left locked is released too.)
 *
 * Across loops.  A tdl_mutex is for the fibers of one loop: its hand-off,
 * the dead-owner report and tdl_cond all rest on the owner and its waiters
 * running on one thread, and its struct (a 1.x layout) has no room for a
 * cross-thread lock.  To exclude fibers of several loops, use a shared
 * semaphore of one permit (the same FIFO hand-off; no owner, so no
 * -EDEADLK or -EOWNERDEAD):
 *
 *   tdl_sem lock;
 *   tdl_sem_init_shared(&lock, 1, 1);              // once, before the loops use it
 *   if (tdl_sem_acquire(&lock, deadline) == 0) {   // from a fiber of any loop
 *     ...                                          // the guarded section
 *     tdl_sem_release(&lock);
 *   }
 *   tdl_sem_destroy(&lock);                        // once no fiber uses it
 *
 * While one fiber holds it, fibers of the other loops that want it park;
 * keep the section short and do not park in it on I/O.  Often no lock is
 * needed at all: a shared channel to the fiber that owns the data, or a
 * broadcast (below) for fan-out, says the same with messages.
 */
typedef struct tdl_mutex {
  struct tdl__fiber *owner;   /* NULL: unlocked */
  tdl__list waiters;          /* oldest first */
  tdl__cleanup held;          /* in the owner's cleanups */
  uint32_t flags;
  uint32_t cond_users;        /* fibers inside tdl_cond_wait with this mutex */
} tdl_mutex;

#define TDL_MUTEX_INIT {NULL, {NULL, NULL}, {{NULL, NULL}, NULL}, 0, 0}

/* Initialize (same as TDL_MUTEX_INIT).  Returns 0.  Cost: a few stores. */
TDL_API void tdl_mutex_init(tdl_mutex *m);

/*
 * Lock m, waiting until the deadline for it if another fiber holds it.
 * Returns 0 (the caller holds m) or:
 *   -EOWNERDEAD  the caller holds m, whose previous owner finished while
 *                holding it (see above);
 *   -EDEADLK     the caller already holds m (nothing changes: no deadlock);
 *   -ETIMEDOUT   the deadline passed first (the caller does not hold m);
 *   -ECANCELED   the fiber is cancelled (does not hold m);
 *   -EPERM       called outside a fiber.
 * Cost: uncontended, a few stores and never a system call; contended, one
 * park, and the unlock that hands it over queues the waiter (its run is
 * one register switch).
 */
TDL_API int tdl_mutex_lock(tdl_mutex *m, tdl_time_t deadline);

/*
 * Lock m if nobody holds it; never waits (works on a cancelled fiber).
 * Returns 0, -EOWNERDEAD (as tdl_mutex_lock: held), -EBUSY (held by another
 * fiber, or handed to a waiter that has not run yet), -EDEADLK (held by the
 * caller), -EPERM (outside a fiber).  Cost: a few ns.
 */
TDL_API int tdl_mutex_try_lock(tdl_mutex *m);

/*
 * Unlock m, handing it to its oldest waiter, if any.  Works on a cancelled
 * fiber.  Returns 0, or -EPERM when the caller is not a fiber holding m (m is
 * then left as it was).  Cost: O(1), plus skipping waiters that timed out or
 * were cancelled and have not run yet (each is skipped once).
 */
TDL_API int tdl_mutex_unlock(tdl_mutex *m);

/* Whether the running fiber holds m (false outside fibers).  Cost: O(1). */
TDL_API bool tdl_mutex_owned(const tdl_mutex *m);

/* Reset m so that it may be freed or used again.
 * Returns 0 (m is reset: it may be freed, or used again), or -EBUSY
 * (nothing done) while m is locked, fibers wait for it, or a fiber is inside
 * tdl_cond_wait with it.  Cost: O(1). */
TDL_API int tdl_mutex_destroy(tdl_mutex *m);

/* ------------------------------------------------------------------------ */
/* Condition variable                                                        */
/* ------------------------------------------------------------------------ */

/*
 * Fibers wait on a condition for a signal, with a mutex held around the test
 * of the predicate.  All fibers waiting at one time must use the same mutex.
 *
 * A signal picks the oldest waiter and moves it to the mutex's queue (it does
 * not run until it can own the mutex), so a broadcast does not wake a herd of
 * fibers that then fight for the mutex: they get it one after another, in
 * the order they started waiting.  A signal with no waiter is lost (a
 * condition variable has no memory).  Waiters must re-check their predicate
 * after waking, as with any condition variable, though treadle never wakes
 * one without a signal, a deadline or a cancellation.
 */
typedef struct tdl_cond {
  tdl__list waiters;          /* oldest first */
  tdl_mutex *mutex;           /* the waiters' mutex, while there are waiters */
  uint32_t inside;            /* fibers inside tdl_cond_wait */
} tdl_cond;

#define TDL_COND_INIT {{NULL, NULL}, NULL, 0}

/* Initialize (same as TDL_COND_INIT).  Returns 0. */
TDL_API void tdl_cond_init(tdl_cond *c);

/*
 * Atomically unlock m (which the caller must hold) and wait for a signal on c
 * until the deadline; then lock m again.
 *
 * What the caller holds afterwards: m, in every case but -EPERM (where it did
 * not hold m to begin with).  Put differently, the caller holds m after the
 * call exactly when it held it before.  The deadline and cancellation bound
 * the wait for the signal only: taking m back always waits as long as it
 * takes (like pthread_cond_timedwait), even on a cancelled fiber, so that the
 * caller's unlock path stays the same whatever the result.
 *
 * Returns:
 *   0            signalled (the signal beats a deadline that passed while the
 *                fiber waited to take m back);
 *   -ETIMEDOUT   the deadline passed first (also at once, without unlocking
 *                m, when it had already passed);
 *   -ECANCELED   the fiber is cancelled (at once, m never unlocked, when it
 *                was cancelled before the call; otherwise after taking m
 *                back);
 *   -EOWNERDEAD  m was taken back from a fiber that finished holding it (see
 *                tdl_mutex);
 *   -EPERM       outside a fiber, or the caller does not hold m;
 *   -EINVAL      other fibers wait on c with a different mutex (nothing
 *                changes; the caller still holds m).
 * A call that returns anything but 0 consumed no signal: one that reached it
 * is passed on to the next waiter.
 * Cost: an unlock and one park.  A signal that finds m locked moves the
 * waiter to m's queue without waking it, so it runs once, owning m.
 */
TDL_API int tdl_cond_wait(tdl_cond *c, tdl_mutex *m, tdl_time_t deadline);

/* Wake the oldest waiter of c, skipping fibers that timed out or were
 * cancelled.  Need not hold the mutex; callable outside fibers.  Returns the
 * number of fibers woken (0 or 1).  Cost: O(1) plus skipped waiters. */
TDL_API int tdl_cond_signal(tdl_cond *c);

/* Wake every waiter of c, in FIFO order.  Returns how many (capped at
 * INT_MAX).  Cost: O(waiters). */
TDL_API int tdl_cond_broadcast(tdl_cond *c);

/* Reset c so that it may be freed or used again.
 * Returns 0, or -EBUSY (nothing done) while a fiber is inside tdl_cond_wait
 * on c, including fibers already signalled that are still waiting to take
 * their mutex back.  Cost: O(1). */
TDL_API int tdl_cond_destroy(tdl_cond *c);

/* ------------------------------------------------------------------------ */
/* Counting semaphore                                                        */
/* ------------------------------------------------------------------------ */

/* A count of permits between 0 and a maximum.  Not owned: any fiber or
 * callback may release.  Permits still taken by a fiber that finishes are not
 * given back. */
typedef struct tdl_sem {
  uint32_t value;             /* permits available */
  uint32_t max;               /* 0: TDL_SEM_VALUE_MAX */
  tdl__list waiters;          /* oldest first */
  uint32_t inside;            /* fibers inside tdl_sem_acquire that parked */
  struct tdl__sync_shared *shared; /* a shared semaphore's state, or NULL */
} tdl_sem;

#define TDL_SEM_VALUE_MAX UINT32_MAX
/* A semaphore with `value` permits that may hold at most `max` (0: no limit
 * but TDL_SEM_VALUE_MAX).  A zero-filled tdl_sem has no permits, no limit. */
#define TDL_SEM_INIT(value, max) {(value), (max), {NULL, NULL}, 0, NULL}

/* Initialize with `value` permits and at most `max` (0: TDL_SEM_VALUE_MAX).
 * Returns 0, or -EINVAL when value > max (s is then not touched). */
TDL_API int tdl_sem_init(tdl_sem *s, uint32_t value, uint32_t max);

/*
 * A semaphore shared by the fibers of several loops (threads): every call
 * below is then THREAD-SAFE, acquire from a fiber of any loop, release and
 * try_acquire from any thread.  Its state is allocated: tdl_sem_destroy it.
 * A permit released while fibers wait goes to the oldest of them, whatever
 * its loop.  A semaphore of one permit is the way to exclude across loops:
 * tdl_mutex stays for the fibers of one loop (its hand-off, dead-owner and
 * condition-variable guarantees rest on one thread).
 * Errors: -EINVAL (value > max), -ENOMEM.
 */
TDL_API int tdl_sem_init_shared(tdl_sem *s, uint32_t value, uint32_t max);

/* Take one permit, waiting until the deadline if there is none.
 * Returns 0, -ETIMEDOUT, -ECANCELED, -EPERM (outside a fiber).  A call that
 * fails took no permit.  Cost: O(1), no system call; one park when it must
 * wait. */
TDL_API int tdl_sem_acquire(tdl_sem *s, tdl_time_t deadline);

/* Take one permit if one is free; never waits; callable anywhere.
 * Returns 0 or -EAGAIN.  A permit being handed to a waiter is not free.
 * Cost: O(1). */
TDL_API int tdl_sem_try_acquire(tdl_sem *s);

/* Give one permit back: to the oldest waiter if there is one, otherwise to
 * the count.  Callable anywhere.  Returns 0, or -EOVERFLOW (nothing done) when
 * the count is already at its maximum.  Cost: O(1) plus skipped waiters. */
TDL_API int tdl_sem_release(tdl_sem *s);

/* The number of permits available now.  Cost: O(1). */
TDL_API uint32_t tdl_sem_value(const tdl_sem *s);

/* Reset s so that it may be freed or used again (a shared one's state is
 * freed).  Returns 0 (s keeps its maximum, with no permits), or -EBUSY (nothing done)
 * while a fiber is inside tdl_sem_acquire on s: waiting, or handed a permit
 * it has not yet returned with.  Cost: O(1). */
TDL_API int tdl_sem_destroy(tdl_sem *s);

/* ------------------------------------------------------------------------ */
/* Wait group                                                                */
/* ------------------------------------------------------------------------ */

/* A counter of outstanding tasks; fibers wait until it is zero (Go's
 * sync.WaitGroup). */
typedef struct tdl_waitgroup {
  int64_t count;
  tdl__list waiters;          /* oldest first */
  struct tdl__sync_shared *shared; /* a shared wait group's state, or NULL */
} tdl_waitgroup;

#define TDL_WAITGROUP_INIT {0, {NULL, NULL}, NULL}

/* A wait group shared by several loops: add and done are THREAD-SAFE from
 * any thread, wait from a fiber of any loop.  Its state is allocated:
 * tdl_waitgroup_destroy it.  Errors: -ENOMEM. */
TDL_API int tdl_waitgroup_init_shared(tdl_waitgroup *wg);

/* Initialize with a count of 0.  Returns 0. */
TDL_API void tdl_waitgroup_init(tdl_waitgroup *wg);

/* Add delta (may be negative) to the count; when it reaches zero, wake every
 * waiter (FIFO order).  Callable anywhere.  Returns 0, or (nothing done)
 * -EINVAL when the count would go below zero, -EOVERFLOW past INT64_MAX.
 * Cost: O(1), O(waiters) when it reaches zero. */
TDL_API int tdl_waitgroup_add(tdl_waitgroup *wg, int64_t delta);

/* tdl_waitgroup_add(wg, -1). */
TDL_API int tdl_waitgroup_done(tdl_waitgroup *wg);

/* Wait until the count is zero (returns at once when it is).  Returns 0,
 * -ETIMEDOUT, -ECANCELED, -EPERM (outside a fiber).  Cost: O(1); one park
 * when it must wait. */
TDL_API int tdl_waitgroup_wait(tdl_waitgroup *wg, tdl_time_t deadline);

/* The current count.  Cost: O(1). */
TDL_API int64_t tdl_waitgroup_count(const tdl_waitgroup *wg);

/* Reset wg so that it may be freed or used again (a shared one's state is
 * freed).  Returns 0, or -EBUSY (nothing done) while fibers wait on wg.
 * Cost: O(1). */
TDL_API int tdl_waitgroup_destroy(tdl_waitgroup *wg);

/* ------------------------------------------------------------------------ */
/* Once                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Run an initialization function exactly once, successfully, however many
 * fibers race to do it.  The first caller runs fn(arg) in its own fiber;
 * callers that come while it runs park until it is over.
 *
 * fn returns 0 (or any value >= 0) on success: the once is then done, every
 * waiter returns 0, and every later call returns 0 at once without calling
 * anything.  fn returns a negative errno on failure: the once is not done; the
 * runner's call returns fn's error, and the oldest waiter (if any) becomes
 * the next runner and calls its own fn(arg) (like C++ call_once when the
 * function throws).  If none waits, the next caller tries again.
 *
 * Cancellation of the fiber running fn: fn is not interrupted (nothing can
 * be), but its blocking calls fail with -ECANCELED from then on.  What fn
 * returns decides, as above: typically it fails, the once stays not done and
 * the next waiter retries; if fn completes anyway, the once is done.  A fiber
 * that finishes inside fn (tdl_fiber_exit) counts as a failure: the next
 * waiter runs fn.
 */
typedef struct tdl_once {
  struct tdl__fiber *runner;  /* the fiber running (or about to run) fn */
  tdl__list waiters;          /* oldest first */
  tdl__cleanup held;          /* in the runner's cleanups */
  int state;                  /* 0: not done, 1: running, 2: done */
} tdl_once;

#define TDL_ONCE_INIT {NULL, {NULL, NULL}, {{NULL, NULL}, NULL}, 0}

/* Initialize (not done).  Returns 0. */
TDL_API void tdl_once_init(tdl_once *o);

/*
 * Make sure fn has run successfully on o (see above); wait until the
 * deadline for a run in progress in another fiber.  All callers should pass
 * the same fn and arg; a waiter that becomes the runner calls its own.
 * Returns 0 (done), fn's negative result (this fiber ran fn and it failed),
 * -ETIMEDOUT, -ECANCELED (the fiber is cancelled, also when already done),
 * -EDEADLK (called from within fn on the same o), -EINVAL (fn NULL), -EPERM
 * (outside a fiber).  Cost: done, a load and a compare; otherwise fn, or one
 * park.
 */
TDL_API int tdl_once_call(tdl_once *o, int (*fn)(void *arg), void *arg, tdl_time_t deadline);

/* Whether fn has run successfully on o.  Cost: O(1). */
TDL_API bool tdl_once_done(const tdl_once *o);

/* Reset o so that it may be freed or used again.
 * Returns 0 (o is reset to not done), or -EBUSY (nothing done) while fn runs
 * or fibers wait on o.  Cost: O(1). */
TDL_API int tdl_once_destroy(tdl_once *o);

/* ------------------------------------------------------------------------ */
/* Channels                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * Channels between fibers (Go's channels, GHC's MVar), and select over
 * channels, fds and unparks.
 *
 * A channel carries values of one fixed size, copied in on send and out on
 * receive.  Capacity 0 makes a rendezvous: a send completes when a receiver
 * takes the value.  Capacity n buffers up to n values.  Waiting fibers queue
 * in FIFO order; a value goes straight from a sender's buffer to a waiting
 * receiver's without passing through the channel.
 *
 * Closing: receivers first drain what is buffered, then get -EPIPE; sends on
 * a closed channel fail with -EPIPE (nothing is delivered); fibers waiting
 * when the channel closes wake with -EPIPE.
 *
 * Blocking calls follow fiber.h: an absolute deadline (-ETIMEDOUT), sticky
 * cancellation (-ECANCELED: a cancelled sender's value is not delivered), and
 * -EPERM when called outside a fiber.  The try_ variants never block and work
 * anywhere on the loop's thread (in callbacks too).
 *
 * A channel belongs to the fibers of one loop; it is not thread-safe, except
 * a channel made by tdl_chan_new_shared (below).
 */

/* Fields are private; the struct is public so that it can live in the
 * caller's memory (tdl_chan_init). */
typedef struct tdl_chan {
  size_t elem_size;
  size_t cap;
  size_t head, len;        /* ring buffer of cap values */
  unsigned char *buf;
  tdl__list recvq;         /* waiting fibers, oldest first */
  tdl__list sendq;
  int closed;
  int owned;               /* made by tdl_chan_new or tdl_chan_new_shared */
  struct tdl__chan_shared *shared; /* a shared channel's state, or NULL */
} tdl_chan;

/* Largest elem_size * capacity accepted (1 GiB). */
#define TDL_CHAN_MAX_BYTES ((size_t)1 << 30)

/* A channel in memory treadle allocates.  Errors: -EINVAL (elem_size 0, or
 * elem_size * capacity overflowing or above TDL_CHAN_MAX_BYTES); -ENOMEM. */
TDL_API int tdl_chan_new(tdl_chan **out, size_t elem_size, size_t capacity);

/*
 * A shared channel: its ends may be on different loops (threads).  The same
 * calls as for any channel (send, recv, try_send, try_recv, close, select,
 * free), with the same results, deadlines and cancellation, and all of them
 * THREAD-SAFE on it; a fiber that waits parks only itself.  Made only by
 * treadle, with one reference, its maker's.  Its lifetime is handled in one
 * of two ways:
 *   - by its owner: tdl_chan_free it once no fiber of any loop uses it.  It
 *     refuses with -EBUSY, changing nothing, while a call that waited is
 *     still inside it (parked, or woken and not yet returned; but for an
 *     unbuffered send or receive whose value was handed over, which touches
 *     the channel no more once woken) or another reference is held; a call
 *     that did not wait is not counted, so the owner must know that no loop
 *     still calls on it;
 *   - by references (tdl_chan_retain, tdl_chan_release, below): each loop
 *     or fiber that calls on it holds one, and the last release frees it.
 *     This is the one to use when several loops use a channel and none of
 *     them knows which is the last.
 *
 *
 * How it differs inside: buffered, the values go through a lock-free ring
 * and a waiter is woken to try again rather than handed the value, so a
 * fiber that did not wait may take it first (waiters are woken oldest
 * first, but FIFO between waiting and arriving fibers is not promised, as
 * it is for local channels).  A send that completes without waiting, and a
 * receive, cost no lock and no system call; waking a fiber of another loop
 * is a post to that loop (an eventfd write only if it sleeps).  Unbuffered,
 * the sender's value is handed to the receiver under a spinlock.
 * Errors: as tdl_chan_new.
 */
TDL_API int tdl_chan_new_shared(tdl_chan **out, size_t elem_size, size_t capacity);

/* A channel in the caller's memory: ch, and buf of buf_len >= elem_size *
 * capacity bytes (buf may be NULL when capacity is 0).
 * Errors: -EINVAL (as tdl_chan_new, or buf too small). */
TDL_API int tdl_chan_init(tdl_chan *ch, size_t elem_size, size_t capacity, void *buf, size_t buf_len);

/* Free a channel made by tdl_chan_new or tdl_chan_new_shared (NULL: nothing
 * to do).  Buffered values are dropped.  Returns 0, or (nothing done)
 * -EBUSY while a fiber waits on it or was woken by it and has not returned
 * yet (close it, let them return, then free), and for a shared channel
 * also while another reference is held (tdl_chan_retain); -EINVAL for a
 * channel made by tdl_chan_init: destroy that one. */
TDL_API int tdl_chan_free(tdl_chan *ch);

/*
 * References to a shared channel, for several loops that use it and none of
 * which knows which finishes last (as ports have: tdl_port_ref and
 * tdl_port_release).  tdl_chan_new_shared's channel has one reference, its
 * maker's.  Take one (tdl_chan_retain) for every fiber or loop that will
 * call on it, before handing it the pointer; each gives its own back with
 * tdl_chan_release once it makes no more calls on it.
 *
 * The last release closes the channel (waking every waiter: receivers
 * drain what is buffered, then get -EPIPE, as for tdl_chan_close) and frees
 * it.  Releasing never waits and never refuses: a call that waited and is
 * still inside (a fiber woken by the close that has not yet returned, a
 * select between its wake and its return) is counted, and the last such
 * call to leave frees the channel on its way out, on its own thread.  A
 * call made by a fiber that holds no reference (and that no holder waits
 * for) is a use after free, as for any freed object: the count covers only
 * calls that waited, so that a send or receive that need not wait stays a
 * lock-free ring access.
 *
 * Both THREAD-SAFE, callable from any thread (also outside fibers).
 * Returns 0, or -EINVAL (nothing done) for NULL or a channel that is not
 * shared (its owner frees it: tdl_chan_free, tdl_chan_destroy), and
 * tdl_chan_retain -EOVERFLOW when 2^32 - 1 references are held.  Cost: one
 * atomic operation; the last release, a close and the frees.
 */
TDL_API int tdl_chan_retain(tdl_chan *ch);
TDL_API int tdl_chan_release(tdl_chan *ch);
/* The same for a channel made by tdl_chan_init: its memory stays the
 * caller's.  Returns 0, or -EINVAL for NULL or a channel of tdl_chan_new. */
TDL_API int tdl_chan_destroy(tdl_chan *ch);

/* Send the elem_size bytes at val.  Returns 0, -EPIPE (closed), -ETIMEDOUT,
 * -ECANCELED, -EPERM.  (A channel cannot be freed or destroyed while a
 * fiber waits on it: see tdl_chan_free.)
 * Cost: without waiting, a copy and a few stores; handing off to a parked
 * receiver also queues it (no system call). */
TDL_API int tdl_chan_send(tdl_chan *ch, const void *val, tdl_time_t deadline);
/* Receive into val.  Returns 0, -EPIPE (closed and drained), -ETIMEDOUT,
 * -ECANCELED, -EPERM. */
TDL_API int tdl_chan_recv(tdl_chan *ch, void *val, tdl_time_t deadline);

/* Non-blocking forms: -EAGAIN when the call would have to wait. */
TDL_API int tdl_chan_try_send(tdl_chan *ch, const void *val);
TDL_API int tdl_chan_try_recv(tdl_chan *ch, void *val);

/* Close.  Errors: -EPIPE when already closed. */
TDL_API int tdl_chan_close(tdl_chan *ch);

/* Buffered values (of a shared channel: at one moment, as seen from here)
 * and capacity. */
TDL_API size_t tdl_chan_len(const tdl_chan *ch);
static inline size_t tdl_chan_cap(const tdl_chan *ch) { return ch->cap; }

/* ------------------------------------------------------------------------ */
/* Select: wait for the first of channel operations, fds, an unpark          */
/* ------------------------------------------------------------------------ */

/* What a clause waits for. */
enum {
  TDL_SELECT_RECV = 1, /* a value from ch into val */
  TDL_SELECT_SEND,     /* the value at val into ch */
  TDL_SELECT_FD,       /* fd ready for events (as tdl_fd_wait) */
  TDL_SELECT_PARK,     /* tdl_fiber_unpark() of the selecting fiber (its
                          permit, if it has one, is taken at once) */
};

typedef struct tdl_select_op {
  int kind;        /* TDL_SELECT_* */
  tdl_chan *ch;    /* RECV, SEND: the channel; NULL switches the clause off */
  void *val;       /* RECV: where the value goes; SEND: the value */
  int fd;          /* FD: the fd; negative switches the clause off */
  unsigned events; /* FD: TDL_READ and/or TDL_WRITE */
  int result;      /* out, for the clause that won: RECV, SEND 0 or -EPIPE
                      (closed); FD the ready events (> 0, TDL_ERR/TDL_HUP
                      included) or -EBADF (tdl_close()d while waiting);
                      PARK 0 */
} tdl_select_op;

/*
 * Wait until one of the n clauses can complete, complete exactly that one,
 * and return its index (ops[i].result says how it went).  When several are
 * ready, one is picked at random, so no clause starves.  A deadline already
 * past still lets a ready clause win.  Each clause waits as its own call
 * would: an FD clause is tdl_fd_wait (use it when a read or write returned
 * EAGAIN, or a buffered reader ran dry; it costs no system call), a PARK
 * clause is tdl_fiber_park.  So a server can wait for its client to send or
 * hang up AND for another fiber's word, without a helper fiber:
 *
 *   tdl_select_op ops[] = {
 *     {.kind = TDL_SELECT_FD, .fd = client, .events = TDL_READ},
 *     {.kind = TDL_SELECT_PARK},
 *   };
 *   int i = tdl_select(ops, 2, tdl_after(30 * TDL_SEC));
 *
 * Errors: -EINVAL (ops NULL with n > 0, an unknown kind, FD events 0 or
 * unknown, the same channel and direction twice, the same fd and direction
 * twice, two PARK clauses, or no clause that could ever complete and no
 * deadline: that wait would never end); -ETIMEDOUT; -ECANCELED; -EBUSY
 * (another fiber waits on an FD clause's fd in that direction); -EPERM
 * (outside a fiber); -ENOMEM (more than 16 clauses and no memory for their
 * wait records).
 * Cost: O(n) to check; O(n) more to park and unpark; O(n^2) comparisons to
 * reject duplicated clauses; no system call for the FD clauses.
 */
TDL_API int tdl_select(tdl_select_op *ops, size_t n, tdl_time_t deadline);

/* The non-blocking select: complete one clause that can go now and return
 * its index, or -EAGAIN when none can.  Works anywhere on the loop's thread
 * (in callbacks too), like the other try_ calls; there an FD clause asks the
 * kernel (one poll()), and a PARK clause takes the fiber's permit (none
 * outside a fiber).  Errors: -EINVAL as above. */
TDL_API int tdl_try_select(tdl_select_op *ops, size_t n);

/* ------------------------------------------------------------------------ */
/* Broadcast: one sender, every subscriber, on any loop                      */
/* ------------------------------------------------------------------------ */

/*
 * A broadcast keeps the last `capacity` values sent and a cursor per
 * subscriber: every subscriber receives every value sent after it
 * subscribed, in order, unless it falls more than `capacity` values behind
 * (tokio's broadcast; what Go programs build from a channel per subscriber
 * and a select with a default).
 *
 *   - A send never waits, for nobody: it overwrites the oldest value.  A
 *     slow subscriber cannot slow the sender or the other subscribers.
 *   - A subscriber that fell behind is told, once, how many values it lost:
 *     its next receive returns that count (> 0) instead of a value, and the
 *     one after returns the oldest value still kept.  It decides: go on
 *     (tolerate the gap), or drop the client it serves.
 *   - Closing: sends fail with -EPIPE; each subscriber still receives what
 *     it had not read (and is still kept), then -EPIPE; subscribers parked
 *     when it closes wake.
 *
 * It is always shared (there is no local form): every call is THREAD-SAFE,
 * sends from any thread (a fiber, a callback, a thread with no loop),
 * subscribing and unsubscribing too, at any time, also while a send is in
 * progress; receives from a fiber of any loop.  Fanning out across loops is
 * what it is for, and on one loop the same object costs only an
 * uncontended spinlock per call.
 *
 * Values are copied in on send and out on receive (elem_size bytes, as a
 * channel's), so nothing is shared by pointer behind the program's back.
 * For lines of text, make the element hold the line (a length and up to
 * the longest line you accept: struct {uint32_t len; char text[1020];}).
 * A value that is a pointer is copied as a pointer: a cell is overwritten
 * without telling anybody, so nothing can tell when every subscriber is
 * done with what it points to; what values point to must then outlive the
 * broadcast (constant data, or memory freed after tdl_bcast_free).
 *
 * A subscriber that must also wait on an fd (the socket of the client it
 * serves) uses a fiber per direction, as tdl_select takes channels and fds
 * but not subscriptions: one fiber reads the socket and sends, the other
 * receives and writes to the socket with a deadline (a client that stops
 * reading is dropped there); the one that ends first ends the other
 * (tdl_fiber_cancel).  examples/chat/chat.c
 * is that program, and group.h opens with its shape:
 *
 *   static void *to_client(void *arg) {           // the writer fiber
 *     client *c = arg;
 *     line msg;
 *     int r;
 *     while ((r = tdl_bcast_recv(c->sub, &msg, TDL_FOREVER)) >= 0) {
 *       if (r > 0)
 *         break;                                  // lost r lines: too slow, drop it
 *       if (msg.from != c->id && tdl_net_send_all(c->fd, msg.text, msg.len, NULL, tdl_after(5 * TDL_SEC)) < 0)
 *         break;                                  // stopped reading: drop it
 *     }
 *     tdl_fiber_cancel(tdl_fiber_loop(), c->reader);  // the reader ends too
 *     return NULL;                                // (the last of the two frees c)
 *   }
 *
 * Cost: a send is one copy and a few stores under the broadcast's
 * spinlock, no allocation, plus a wake for each parked subscriber (a post
 * to its loop; a system call only if that loop sleeps); a receive that
 * need not wait is a copy under the spinlock.
 */
typedef struct tdl_bcast tdl_bcast;
typedef struct tdl_bcast_sub tdl_bcast_sub;

/* A broadcast of values of elem_size bytes that keeps the last capacity of
 * them.  Errors: -EINVAL (out NULL, elem_size or capacity 0, elem_size *
 * capacity above TDL_CHAN_MAX_BYTES), -ENOMEM. */
TDL_API int tdl_bcast_new(tdl_bcast **out, size_t elem_size, size_t capacity);

/* Free b (NULL: nothing to do).  Returns 0, or -EBUSY (nothing done) while
 * any subscription exists: unsubscribe them first (closing wakes their
 * receivers).  THREAD-SAFE, but no call on b may be in progress or come
 * after. */
TDL_API int tdl_bcast_free(tdl_bcast *b);

/* Send the elem_size bytes at val to every subscriber, overwriting the
 * oldest value kept; never waits, callable anywhere.  Returns the number of
 * subscribers it was sent to (>= 0: 0 is no error, nobody listens), or
 * -EPIPE (closed), -EINVAL (b or val NULL).  THREAD-SAFE.  Cost: see
 * above. */
TDL_API int tdl_bcast_send(tdl_bcast *b, const void *val);

/* Close b: see above.  Returns 0, -EPIPE (already closed), -EINVAL (NULL).
 * THREAD-SAFE. */
TDL_API int tdl_bcast_close(tdl_bcast *b);

/* Subscribe to b: *out receives every value sent from now on.  Errors:
 * -EINVAL (NULL), -EPIPE (b is closed), -ENOMEM.  THREAD-SAFE.  Cost: one
 * allocation. */
TDL_API int tdl_bcast_subscribe(tdl_bcast_sub **out, tdl_bcast *b);

/* End a subscription and free it (NULL: nothing to do); sends no longer
 * count it.  Returns 0, or -EBUSY (nothing done) while a fiber is inside
 * tdl_bcast_recv on it: cancel that fiber, or let it return, first.
 * THREAD-SAFE. */
TDL_API int tdl_bcast_unsubscribe(tdl_bcast_sub *s);

/*
 * Receive the next value of subscription s into val, waiting until the
 * deadline for one to be sent.  One fiber at a time per subscription.
 * Returns:
 *   0            a value, in val;
 *   > 0          s fell behind: that many values were overwritten before
 *                it read them (capped at INT_MAX); val is not written, and
 *                the next call returns the oldest value kept;
 *   -EPIPE       b is closed, and s has read everything kept;
 *   -ETIMEDOUT, -ECANCELED, -EPERM (outside a fiber), as fiber.h says;
 *   -EBUSY       another fiber is inside a receive on s;
 *   -EINVAL      s or val NULL.
 * Cost: see above; one park when it must wait.
 */
TDL_API int tdl_bcast_recv(tdl_bcast_sub *s, void *val, tdl_time_t deadline);

/* The same without waiting (-EAGAIN: nothing new yet); callable from any
 * thread, also outside fibers. */
TDL_API int tdl_bcast_try_recv(tdl_bcast_sub *s, void *val);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_SYNC_H */
