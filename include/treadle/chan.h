/*
 * Channels between fibers of one loop (Go's channels, GHC's MVar), and
 * select over channels, fds and unparks.
 * Include <treadle.h>.
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
 * A channel belongs to the fibers of one loop; it is not thread-safe.
 */
#ifndef TREADLE_CHAN_H
#define TREADLE_CHAN_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Fields are private; the struct is public so that it can live in the
 * caller's memory (tdl_chan_init_mem). */
typedef struct tdl_chan {
  size_t elem_size;
  size_t cap;
  size_t head, len;        /* ring buffer of cap values */
  unsigned char *buf;
  tdl__list recvq;         /* waiting fibers, oldest first */
  tdl__list sendq;
  int closed;
  int owned;               /* made by tdl_chan_new or tdl_chan_new_shared */
  struct tdl__xchan *x;    /* a shared channel's state, or NULL */
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
 * treadle; tdl_chan_free it once no fiber of any loop uses it (fibers still
 * parked on it then wake with -EBADF; one in the middle of a call would
 * touch freed memory).
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
TDL_API int tdl_chan_init_mem(tdl_chan *ch, size_t elem_size, size_t capacity, void *buf, size_t buf_len);

/* Free a channel made by tdl_chan_new (NULL: nothing to do).  Fibers still
 * waiting on it wake with -EBADF and do not touch it again.  Buffered values
 * are dropped.  Returns 0, or -EINVAL (nothing done) for a channel made by
 * tdl_chan_init_mem: destroy that one. */
TDL_API int tdl_chan_free(tdl_chan *ch);
/* The same for a channel made by tdl_chan_init_mem: its memory stays the
 * caller's.  Returns 0, or -EINVAL for NULL or a channel of tdl_chan_new. */
TDL_API int tdl_chan_destroy(tdl_chan *ch);

/* Send the elem_size bytes at val.  Returns 0, -EPIPE (closed), -ETIMEDOUT,
 * -ECANCELED, -EBADF (channel destroyed while waiting), -EPERM.
 * Cost: without waiting, a copy and a few stores; handing off to a parked
 * receiver also queues it (no system call). */
TDL_API int tdl_chan_send(tdl_chan *ch, const void *val, tdl_time_t deadline);
/* Receive into val.  Returns 0, -EPIPE (closed and drained), -ETIMEDOUT,
 * -ECANCELED, -EBADF, -EPERM. */
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
  TDL_SELECT_FD,       /* fd ready for events (as tdl_wait_fd) */
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
 * would: an FD clause is tdl_wait_fd (use it when a read or write returned
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
 * deadline: that wait would never end); -ETIMEDOUT; -ECANCELED; -EBADF (a
 * channel was destroyed while waiting); -EBUSY (another fiber waits on an
 * FD clause's fd in that direction); -EPERM (outside a fiber); -ENOMEM
 * (more than 16 clauses and no memory for their wait records).
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

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_CHAN_H */
