/*
 * Fibers: lightweight threads that block cheaply.  Include <treadle.h>.
 *
 * A fiber is a function running on its own small stack, scheduled by its
 * loop's thread.  When it calls a blocking treadle function (tdl_read,
 * tdl_sleep, tdl_chan_recv, ...) and the call cannot complete at once, the
 * fiber parks and the loop runs other fibers and callbacks until the fd is
 * ready, the deadline passes, or something wakes it.  A switch between fibers
 * saves a few registers (~10 ns); no system call is made.
 *
 * Scheduling: runnable fibers run in FIFO order; a fiber that yields goes to
 * the back.  A fiber runs until it blocks or yields: there is no preemption.
 * To keep one busy fiber from starving the rest, a fiber that makes 64
 * treadle I/O calls in a row without blocking (whether they succeed or fail)
 * yields once.
 *
 * Blocking calls and deadlines: every blocking call takes an absolute
 * deadline (TDL_FOREVER = none; tdl_after(delay) makes one from a delay).  A
 * call whose deadline passes returns -ETIMEDOUT and leaves the fd or object
 * usable; a deadline already past still lets a call that need not wait
 * succeed.  A call on a cancelled fiber returns -ECANCELED.  A blocking call
 * made outside a fiber (from main before the loop runs, or from a callback)
 * returns -EPERM at once; it never blocks the thread.  (The exceptions are
 * spawn.h's tdl_process_wait and tdl_process_run, which outside a fiber
 * block the calling thread, as documented there.)
 *
 * Handles: a tdl_fiber_t names a fiber until it has been joined, or has
 * finished after being detached; then the handle is stale and every call
 * given it returns -ESRCH (handles are never reused for another fiber).
 *
 * Cancellation is sticky: after tdl_fiber_cancel(), the fiber's current and
 * every later blocking call returns -ECANCELED, so that it unwinds; calls
 * that do not block (tdl_close, tdl_fiber_yield) still work.  What the fiber
 * was waiting in is let go at once: an fd it waited on can be read or
 * written by the canceller right away (no -EBUSY until the fiber runs).  A
 * cancelled fiber may still join fibers that are cancelled too, so that it
 * can collect what it started (see tdl_fiber_join).
 */
#ifndef TREADLE_FIBER_H
#define TREADLE_FIBER_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t tdl_fiber_t;

/* Private: something the running fiber holds that must be given back if it
 * finishes holding it (a mutex, a once-function it runs, its fiber-local
 * values).  Linked into the fiber; when the fiber finishes, run(c) is called
 * for each one still linked, the most recently linked first. */
typedef struct tdl__cleanup {
  tdl__list link;
  void (*run)(struct tdl__cleanup *c);
} tdl__cleanup;
typedef void *(*tdl_fiber_fn)(void *arg);

/* Stack sizes are rounded up to whole pages.  The fiber's control block and
 * a cache colour take up to 1.5 KiB of the top. */
#define TDL_STACK_DEFAULT ((size_t)64 * 1024)
#define TDL_STACK_MIN ((size_t)16 * 1024)
#define TDL_STACK_MAX ((size_t)1 << 30)

typedef struct tdl_fiber_options {
  const char *name;  /* for diagnostics; copied (up to 23 bytes). NULL: none */
  size_t stack_size; /* 0: TDL_STACK_DEFAULT */
  bool detached;     /* start detached (as tdl_fiber_detach at once): it
                        releases itself when it finishes; never join it */
} tdl_fiber_options;

/*
 * Start fn(arg) as a new fiber of loop; it first runs on the loop's next
 * iteration (or at the caller's next blocking call or yield, when the caller
 * is a fiber of the same loop).  *out (may be NULL) receives its handle;
 * most servers start each connection's fiber with .detached = true and pass
 * NULL.
 * Errors: -EINVAL (stack size below TDL_STACK_MIN or above TDL_STACK_MAX, or
 * fn NULL); -ENOMEM (no memory for the stack; nothing is left behind).
 * Cost: a few ns with a cached stack, ~11 us for a new one.
 *
 * Stacks: each has a PROT_NONE guard page below it, so an overflow stops the
 * process with a message naming the fiber instead of corrupting memory.  The
 * kernel allows only so many separate mappings (vm.max_map_count): past a
 * quarter of that limit (~16,000 fibers by default), new stacks are mapped
 * without a guard, so that 100,000 and more fibers still fit; an overflow
 * of such a stack goes undetected.  tdl_fiber_stats_get() reports how many.
 */
TDL_API int tdl_fiber_spawn(tdl_loop *loop, tdl_fiber_t *out, tdl_fiber_fn fn, void *arg,
                            const tdl_fiber_options *opts);

/* The running fiber's handle, or 0 outside a fiber. */
TDL_API tdl_fiber_t tdl_fiber_self(void);
/* The loop of the running fiber, or NULL outside a fiber. */
TDL_API tdl_loop *tdl_fiber_loop(void);

/* Let every other runnable fiber run once, then continue.  Returns 0, or
 * -EPERM outside a fiber. */
TDL_API int tdl_fiber_yield(void);

/* End the running fiber with `result` (as if fn returned it).  Outside a
 * fiber it does nothing and returns. */
TDL_API void tdl_fiber_exit(void *result);

/* Wait until fiber f finishes; store its result in *result (may be NULL) and
 * release it (its handle becomes stale).  On a cancelled fiber, join still
 * waits (until the deadline) for an f that is itself cancelled, since f is
 * unwinding; cancel your fibers, then join them, and nothing is left behind.
 * Joining an f that is not cancelled from a cancelled fiber fails with
 * -ECANCELED (it might never end): cancel or detach it.
 * Errors: -EPERM outside a fiber; -ESRCH (stale handle: already joined, or
 * detached and finished); -EINVAL (f is detached, or of another loop);
 * -EDEADLK (f is the caller); -EBUSY (another fiber is joining f);
 * -ETIMEDOUT (f keeps running and stays joinable); -ECANCELED. */
TDL_API int tdl_fiber_join(tdl_fiber_t f, tdl_time_t deadline, void **result);
/* (Join is only for fibers: it parks.  f must be of the caller's loop.) */

/* Let f release itself when it finishes; its handle must not be joined.
 * Callable from anywhere on the loop's thread.
 * Errors: -ESRCH (stale, or not a fiber of loop), -EINVAL (already detached). */
TDL_API int tdl_fiber_detach(tdl_loop *loop, tdl_fiber_t f);

/* Cancel f (see "Cancellation" above).  Cancelling twice is harmless.
 * Callable from anywhere on the loop's thread.
 * Errors: -ESRCH when f has already finished, is stale, or not of loop. */
TDL_API int tdl_fiber_cancel(tdl_loop *loop, tdl_fiber_t f);

/*
 * Park and unpark: the scheduler's own wake-up, for building your own
 * primitives.  Each fiber holds at most one wake-up permit.
 * tdl_fiber_park() consumes the permit and returns 0 at once if there is one;
 * otherwise it parks until tdl_fiber_unpark(), the deadline (-ETIMEDOUT) or a
 * cancel (-ECANCELED).  -EPERM outside a fiber.
 * tdl_fiber_unpark() wakes f if it is parked in tdl_fiber_park(), else gives
 * it the permit (a wake-up before the park is not lost; several collapse into
 * one).  Callable from anywhere on the loop's thread.  Errors: -ESRCH (stale,
 * finished, or not of loop).  Cost: a queue push; the hand-off is one
 * register switch.
 */
TDL_API int tdl_fiber_park(tdl_time_t deadline);
TDL_API int tdl_fiber_unpark(tdl_loop *loop, tdl_fiber_t f);

/* Whether the running fiber has been cancelled. */
TDL_API bool tdl_fiber_cancelled(void);

/* Give main() to treadle: make a loop, run fn(arg) as its first fiber and the
 * loop until nothing is left, store fn's result in *result (may be NULL, and
 * is set only when 0 is returned), free the loop.  Fibers that finished
 * without being joined or detached are released at the end.
 * Returns 0, a tdl_loop_new() or tdl_fiber_spawn() error, or -EDEADLK when
 * fibers were left parked with nothing that could ever wake them: those are
 * then cancelled (their blocking calls return -ECANCELED) and run until they
 * end, and the loop is freed.  Only a fiber that goes on waiting after it is
 * cancelled keeps the loop and its stacks: that one leak is the price of not
 * freeing a stack a fiber still runs on. */
TDL_API int tdl_fiber_main(tdl_fiber_fn fn, void *arg, void **result);

/* ---- sleeping and waiting for fds ---- */

/* Park until the deadline.  Returns 0, -ECANCELED, or -EPERM. */
TDL_API int tdl_sleep(tdl_time_t deadline);
/* tdl_sleep(tdl_after(delay)). */
TDL_API int tdl_sleep_for(tdl_time_t delay);

/* Park until fd is ready for `events` (TDL_READ and/or TDL_WRITE); returns
 * the ready events (> 0, including TDL_ERR/TDL_HUP when they happened).
 * It makes no system call of its own: readiness that the loop has seen for
 * `events` and that no call has used up since ends the wait (at once, or at
 * the loop's next poll); otherwise it parks until the kernel reports some.
 * For fds that your own calls read and
 * write (sendmsg, a TLS library, ...): after such a call returns EAGAIN,
 * call tdl_fd_blocked() and then this.  Errors:
 * -ETIMEDOUT, -ECANCELED, -EPERM, -EBADF, -EINVAL (no events), or -EBUSY
 * when another fiber already waits for the same direction on this fd (one
 * reader and one writer fiber per fd at a time). */
TDL_API int tdl_wait_fd(int fd, unsigned events, tdl_time_t deadline);
/* Your own call on fd, made outside treadle's I/O calls, has just found it
 * empty (a read returned EAGAIN, or less than asked of a pipe or stream
 * socket) or full (a write returned EAGAIN), for `events` (TDL_READ and/or
 * TDL_WRITE): the readiness the loop saw before is used up, so the next
 * tdl_wait_fd parks until the kernel reports new readiness instead of
 * returning at once.  Call it before the fiber parks or yields (readiness
 * seen after your call is new, and must not be forgotten).  No system call.
 * Returns 0, -EPERM outside a fiber, -EINVAL (no events, or others), -EBADF
 * (fd < 0) or -ENOMEM. */
TDL_API int tdl_fd_blocked(int fd, unsigned events);

/*
 * I/O that parks the fiber instead of the thread.  Each tries the system call
 * first and parks only on EAGAIN, so data that is already there costs no
 * round trip through the loop.  The fd is made non-blocking on first use.
 * Results are the system call's (bytes, or the new fd) or a negative errno;
 * in addition: -ETIMEDOUT, -ECANCELED, -EPERM (outside a fiber), -EBUSY (see
 * tdl_wait_fd).  A partial transfer is returned as such (no retry loop); a
 * timed-out call has transferred nothing.  MSG_DONTWAIT in the flags of
 * tdl_recv, tdl_send, tdl_recvfrom or tdl_sendto means what it means to the
 * kernel: -EAGAIN instead of parking.
 *
 * On a loop whose back end is uring (loop.h), a call that would park is
 * handed to the kernel as an io_uring operation instead, and completes with
 * the data: no second system call.  The kernel may then finish it just as its
 * deadline passes or its fiber is cancelled: the call then returns what it
 * transferred rather than -ETIMEDOUT or -ECANCELED, so nothing is lost.
 * tdl_recvfrom and tdl_sendto wait for readiness on every back end.
 *
 * An fd used with these calls must be closed with tdl_close(), which also
 * wakes any fiber still waiting on it (with -EBADF) and clears what the loop
 * cached about the fd; a plain close() leaves that state behind for a later
 * fd with the same number (and on uring, an operation in flight on it keeps
 * the file open until the operation ends).
 */
TDL_API ssize_t tdl_read(int fd, void *buf, size_t len, tdl_time_t deadline);
TDL_API ssize_t tdl_write(int fd, const void *buf, size_t len, tdl_time_t deadline);
TDL_API ssize_t tdl_readv(int fd, const struct iovec *iov, int iovcnt, tdl_time_t deadline);
TDL_API ssize_t tdl_writev(int fd, const struct iovec *iov, int iovcnt, tdl_time_t deadline);
TDL_API ssize_t tdl_recv(int fd, void *buf, size_t len, int flags, tdl_time_t deadline);
TDL_API ssize_t tdl_send(int fd, const void *buf, size_t len, int flags, tdl_time_t deadline);
TDL_API ssize_t tdl_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
                             socklen_t *addrlen, tdl_time_t deadline);
TDL_API ssize_t tdl_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr,
                           socklen_t addrlen, tdl_time_t deadline);
/* (Accepting and connecting are in net.h: tdl_net_accept, tdl_net_connect.) */
/*
 * Receive ahead on a connected stream socket (uring loops only): the kernel
 * keeps one multishot receive armed on fd and receives into the loop's
 * buffers (2 KiB each, 2,048 per loop, mapped when first asked for and
 * touched as used) whenever data comes; fd's reads (tdl_read, tdl_recv,
 * tdl_readv, tdl_recvfrom) then copy out of those, and park only when
 * nothing is there.  No request per read: for many connections of small
 * requests and replies it saves the kernel work of a receive request each
 * time (docs/PERFORMANCE.md); for bulk transfers it only adds a copy.
 * A read that times out or is cancelled loses nothing (what came stays for
 * the next read).  At most 16 KiB is held per fd: then receiving ahead
 * pauses, so TCP's flow control still reaches the peer, and resumes once a
 * read has taken it all.  When the loop's buffers run out, a read is made
 * directly into the caller's buffer instead; on a kernel without multishot
 * receives (before Linux 6.0) every read is.
 * While it is on:
 * - read fd only with treadle's calls: a read(2), or a library reading the
 *   socket itself, would miss or reorder what was received ahead;
 * - close fd with tdl_close (a plain close() leaves the socket open, its
 *   peer unaware, until the peer closes its end);
 * - tdl_recv honours MSG_PEEK, MSG_WAITALL and MSG_DONTWAIT; MSG_OOB and
 *   MSG_ERRQUEUE are made as usual; other flags get -EOPNOTSUPP.  (A
 *   MSG_WAITALL read gathers until it is full, but comes back short, as
 *   partial transfers do above, where receiving ahead paused for want of
 *   buffers.)  One reader at a time: another fiber's read or tdl_wait_fd
 *   for reading gets -EBUSY meanwhile.  tdl_wait_fd(fd, TDL_READ) waits
 *   for what is received (or accepted) ahead; a wait for TDL_READ |
 *   TDL_WRITE at once polls the socket, which does not see what the armed
 *   request has already taken: wait for one direction at a time.
 * The request is armed only when a read finds the stream empty (a short
 * read, or EAGAIN); until then reads are ordinary receives, so a
 * connection that brings its request and closes after the answer costs no
 * more than without.
 * On a listening socket it accepts ahead: one multishot accept takes each
 * connection as it comes (non-blocking, close-on-exec), and tdl_net_accept
 * returns them in arrival order without a system call (the peer's address
 * then comes from getpeername(); a peer that has already reset leaves its
 * length 0).  It is armed when an accept finds no connection waiting, and
 * paused once 32 accepted connections wait to be taken (a burst the kernel
 * had already queued is taken whole: the listen backlog bounds it), so
 * that the backlog, not the fd table, holds the rest.  The kernel's errors
 * (EMFILE...) reach the next accept, after the connections before them.
 * The same rules hold: accept only with treadle's calls, close the
 * listener with tdl_close (which closes the connections still queued: their
 * peers see them closed, as for a backlog that goes with its listener), one
 * acceptor at a time (-EBUSY).
 * Turning it off stops receiving (or accepting) ahead; what was received is
 * still read first.  Returns 0, -EPERM (outside a fiber), -EBADF,
 * -ENOTSOCK, -EPROTOTYPE (not a stream socket), -ENOTSUP (the loop's back
 * end is not uring), -EBUSY (a fiber is reading or accepting on fd right
 * now), -ENOMEM, or what the kernel said when asked to register the
 * buffers.  On a kernel without multishot accepts (before Linux 5.19)
 * accepts are ordinary ones.
 */
TDL_API int tdl_fd_readahead(int fd, bool on);
/*
 * Send behind on a connected stream socket (uring loops only): a tdl_send
 * of up to 8 KiB copies the data into a buffer of the loop's and returns
 * its length at once; the loop hands it to the kernel as a send request
 * with its next io_uring_enter, together with everything else it submits
 * and waits for.  No system call per send: for many connections of small
 * requests and replies (HTTP, RPC) that is the last system call per
 * request gone; for bulk transfers it only adds a copy.  What was sent
 * behind always goes out before what is sent after it:
 * - tdl_send, tdl_net_send_all and tdl_writer_flush queue behind it (a
 *   send of more than 8 KiB, or one that finds the buffer full, waits until
 *   the buffer has gone, within its own deadline, then is made as usual);
 *   tdl_write, tdl_writev, tdl_sendto, tdl_net_send_allv and a tdl_send
 *   with flags other than MSG_NOSIGNAL, MSG_MORE and MSG_DONTWAIT first
 *   wait until it has gone; a MSG_DONTWAIT send that does not fit gets
 *   -EAGAIN.  Any other write of fd (a library's own send(2)) must call
 *   tdl_fd_flush first.
 * - Errors come later: a send behind that fails (the peer reset: -EPIPE,
 *   -ECONNRESET; or its deadline passed: -ETIMEDOUT) drops what is held,
 *   and the next send, write or tdl_fd_flush on fd returns that error,
 *   once.
 * - Deadlines carry over: data held is given up (and its error kept) when
 *   the latest deadline of the sends that put it there passes.
 * - tdl_close does not wait and drops nothing: what is held still goes,
 *   and the socket is closed (its peer sees the end) once it has gone or
 *   its deadline passed; the fd number is free at once.
 * - The buffer (8 KiB, kept by the loop for reuse) is held only while data
 *   waits: an idle connection costs none.
 * Turning it off makes later sends ordinary ones once what is held has
 * gone.  Returns 0, -EPERM (outside a fiber), -EBADF, -ENOTSOCK,
 * -EPROTOTYPE (not a stream socket), -EINVAL (a listener), -ENOTSUP (the loop's
 * back end is not uring), -ENOMEM.
 */
TDL_API int tdl_fd_writebehind(int fd, bool on);
/* Wait until everything sent behind on fd (tdl_fd_writebehind) has been
 * handed to the kernel.  Returns 0, the error a send behind met (once),
 * -ETIMEDOUT, -ECANCELED, -EBADF (closed meanwhile), -EBUSY (another
 * fiber is writing fd and waits), -EPERM (outside a fiber).  On an fd that
 * does not send behind: 0 at once. */
TDL_API int tdl_fd_flush(int fd, tdl_time_t deadline);
/* Wake fibers waiting on fd (they get -EBADF), forget it, close it.  Usable
 * outside fibers too (it then clears the fd in every loop of the calling
 * thread).  Returns 0 or close()'s error.
 * Close never blocks, with one exception that is the kernel's: a socket
 * whose SO_LINGER is on with a non-zero time makes close(2) wait, even on a
 * non-blocking socket, until its unsent data is acknowledged or that time
 * passes, and the whole loop waits with it (measured: 2 s for {1, 2} with a
 * peer that does not read).  Linger with a time of 0 (a reset) does not
 * wait; for a bounded graceful close, use tdl_net_shutdown(fd, SHUT_WR) and
 * read until the end under a deadline, then tdl_close. */
TDL_API int tdl_close(int fd);

/* ---- fiber-local storage ---- */

typedef unsigned tdl_fls_key;
#define TDL_FLS_KEYS 16

/* Make a key (process-wide; at most TDL_FLS_KEYS).  dtor, if not NULL, is
 * called with a fiber's non-NULL value when that fiber finishes.
 * Errors: -EAGAIN when all keys are taken. */
TDL_API int tdl_fls_key_create(tdl_fls_key *key, void (*dtor)(void *));
/* Errors: -EPERM outside a fiber; -EINVAL for a key never created. */
TDL_API int tdl_fls_set(tdl_fls_key key, void *value);
/* NULL outside a fiber or when unset. */
TDL_API void *tdl_fls_get(tdl_fls_key key);

/* ---- looking inside ---- */

typedef struct tdl_fiber_info {
  tdl_fiber_t handle;
  uint64_t id;           /* small number for people, in spawn order */
  const char *name;      /* "" when unnamed */
  const char *state;     /* "running", "runnable", "parked", "finished" */
  const char *waits_on;  /* what a parked fiber waits for ("read", "sleep", "chan"...) or "" */
  int fd;                /* the fd it waits on, or -1 */
  tdl_time_t deadline;   /* its deadline, or TDL_FOREVER */
  size_t stack_size;     /* usable bytes */
  size_t stack_used;     /* high-water mark: bytes of the stack ever touched (page granular);
                            a stack reused from the loop's cache counts what its earlier
                            fibers touched too, until the cache's trim returns it */
  bool guarded;          /* its stack has a guard page */
} tdl_fiber_info;

/* Call fn for every fiber of loop that has not been released; stop early when
 * fn returns non-zero.  Returns the number of fibers visited. */
TDL_API int tdl_fiber_foreach(tdl_loop *loop, int (*fn)(const tdl_fiber_info *info, void *ctx), void *ctx);
/* Write one line per fiber to fd (e.g. 2), async-unsafe but allocation-free. */
TDL_API int tdl_fiber_dump(tdl_loop *loop, int fd);

typedef struct tdl_fiber_stats {
  size_t live;             /* fibers not yet released */
  size_t unguarded;        /* of their stacks, how many have no guard page */
  size_t stacks_cached;    /* stacks kept for reuse: those of recently ended fibers, as they
                              were (no system call on exit); once a second the loop unmaps
                              half of those that stayed unused through the whole second, so
                              the cache follows recent demand and an idle loop keeps none */
} tdl_fiber_stats;
/* loop's fiber and stack counts, at this moment.  Cost: O(1). */
TDL_API void tdl_fiber_stats_get(tdl_loop *loop, tdl_fiber_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_FIBER_H */
