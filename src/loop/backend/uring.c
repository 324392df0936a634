/* SPDX-License-Identifier: MIT */
/*
 * The io_uring back end.
 *
 * Readiness is epoll's: the loop's watchers (and through them wakeups,
 * signals, child watchers, and fiber waits on readiness) live in an epoll set
 * exactly as on the epoll back end, and that set's fd is polled through the
 * ring.  What the ring adds is completions: fiber I/O queues its operations
 * here (tdl__ring_sqe) and parks, and each wait submits everything queued and
 * collects every completion in one io_uring_enter.  On a loop busy with
 * fiber I/O that is one system call per iteration where epoll needs one per
 * operation plus the wait.
 *
 * Why not one multishot poll per fd instead of epoll: an io_uring poll holds
 * a reference to the file until it is removed, so a socket the program closes
 * with close() while its registration is kept (treadle keeps registrations
 * lazily, so that stopping a watcher costs nothing) would stay open, its
 * peer never seeing the end.  epoll drops a closed file by itself.
 *
 * The epoll fd is polled with a one-shot POLL_ADD, armed again before each
 * wait after it fired: arming checks readiness at once, so epoll's ready list
 * (level-triggered entries stay on it, and a harvest may leave events behind)
 * can never be missed, where a multishot poll would report only new wake-ups.
 *
 * Receiving ahead (tdl__ring_recv_ahead, for fd/ahead.c): a multishot
 * receive stays armed on a socket and takes its data into the loop's
 * provided buffers, a ring of buffer ids registered with the kernel on first
 * use.  Its completions come while it stays armed (IORING_CQE_F_MORE), so it
 * is counted apart from the operations in flight (ops_background) and tagged
 * in its user_data (the low bit), and the reap tells its owner the flags.
 *
 * Setup asks for SINGLE_ISSUER | DEFER_TASKRUN (completions are posted only
 * when the loop asks, in its own io_uring_enter: no interrupting task work),
 * then COOP_TASKRUN, then nothing; never SQPOLL (a kernel thread spinning
 * for every loop).  The ring's fd is registered, so io_uring_enter skips the
 * fd table.  The completion queue is eight times the submission queue, and
 * the kernel keeps what overflows (IORING_FEAT_NODROP): nothing is lost, it
 * is flushed in by the next enter.
 */
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "loop/loop_internal.h"

enum {
  SQ_ENTRIES = 256,
  CQ_ENTRIES = 8 * SQ_ENTRIES,
  LOCAL_TW_BATCH = 20, /* the kernel's IO_LOCAL_TW_DEFAULT_MAX (see collect) */
};

/* user_data of the epoll fd's poll and of requests whose completion nobody
 * waits for (cancellations).  Operations are pointers, never these; a
 * receive ahead (tdl__msop) is its pointer with the low bit set. */
#define UD_EPOLL ((uint64_t)1)
#define UD_IGNORE ((uint64_t)0)
#define UD_AHEAD ((uint64_t)1)
#define BUF_GROUP 0

/* The provided buffers of receives ahead (made on first use): the ring of
 * free buffer ids the kernel takes from, and the memory. */
typedef struct bufs {
  struct io_uring_buf_ring *ring;
  char *mem;
} bufs;

typedef struct uring_state {
  tdl__epoll ep; /* first: epoll.c's interest and forget work on loop->be_state */
  struct io_uring ring;
  bool ep_armed; /* a poll of ep.epfd is queued or in flight */
  bool ep_ready; /* that poll fired: harvest epoll */
  bool embedded; /* tdl_loop_fd was asked for: keep the ring's fd truthful between runs */
#ifdef TDL_FAULTS
  unsigned drop_next; /* tests: operations to have the kernel drop unrun (tdl__ring_debug_drop) */
#endif
  bufs bufs;
  unsigned counted_head; /* ring.sq.sqe_head when reap last counted submissions */
} uring_state;

static int setup(struct io_uring *ring)
{
  static const unsigned tries[] = {
      IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
      IORING_SETUP_COOP_TASKRUN,
      0,
  };
  int e = -EINVAL;
  for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
    struct io_uring_params p = {.flags = tries[i] | IORING_SETUP_CQSIZE, .cq_entries = CQ_ENTRIES};
    e = TDL__FAULT_NEG(EMFILE, io_uring_queue_init_params(SQ_ENTRIES, ring, &p));
    if (e != -EINVAL)
      break; /* taken, or refused for a reason fewer flags will not change */
  }
  return e;
}

/* Linux 5.19 or later: cancelling by fd (tdl_close), timed waits without a
 * timeout request (EXT_ARG, 5.11) and no dropped completions (NODROP, 5.5).
 * The cancel flag cannot be probed; IORING_OP_SOCKET came in the same
 * release and can. */
static bool new_enough(struct io_uring *ring)
{
  if (!(ring->features & IORING_FEAT_NODROP) || !(ring->features & IORING_FEAT_EXT_ARG))
    return false;
  struct io_uring_probe *p = io_uring_get_probe_ring(ring);
  bool ok = p && io_uring_opcode_supported(p, IORING_OP_SOCKET);
  io_uring_free_probe(p);
  return ok;
}

/*
 * A ring outlives its loop: the thread keeps one spare for its next uring
 * loop.  Setting a ring up costs several system calls and mappings; and
 * tearing one down makes the kernel finish its exit from a work queue,
 * which then interrupts the thread's next blocking call with EINTR (seen on
 * 6.18: a plain read under SO_RCVTIMEO after tdl_fiber_main returned, with
 * any ring, flags or not).  The spare goes at thread exit (a key's
 * destructor), and a forked child drops what it inherited: that ring's
 * memory is shared with the parent, which still uses it.
 */
static _Thread_local uring_state *t_spare;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static int spare_ok;

static void spare_free(void *p)
{
  uring_state *s = p;
  io_uring_queue_exit(&s->ring);
  free(s);
}

static void spare_forget_in_child(void)
{
  if (t_spare) {
    /* Unmap and close this process's view only (the parent's is its own;
     * unregistering the ring's index fails harmlessly here: the index was
     * the parent task's). */
    io_uring_queue_exit(&t_spare->ring);
    free(t_spare);
    t_spare = NULL;
  }
}

static void spare_init(void)
{
  spare_ok = pthread_key_create(&spare_key, spare_free) == 0 &&
             pthread_atfork(NULL, NULL, spare_forget_in_child) == 0;
}

static int ur_open(tdl_loop *loop)
{
  uring_state *s = t_spare;
  if (s) {
    t_spare = NULL;
    pthread_setspecific(spare_key, NULL);
  } else {
    if (!(s = TDL__FAULT_ALLOC(calloc(1, sizeof *s))))
      return -ENOMEM;
    int e = setup(&s->ring);
    if (e < 0) {
      free(s);
      return e;
    }
    if (!new_enough(&s->ring)) {
      io_uring_queue_exit(&s->ring);
      free(s);
      return -ENOSYS;
    }
    (void)io_uring_register_ring_fd(&s->ring); /* an optimisation only (5.18) */
  }
  int e = tdl__epoll_init(&s->ep);
  if (e < 0) {
    spare_free(s);
    return e;
  }
  s->ep_armed = s->ep_ready = s->embedded = false;
  s->bufs = (bufs){0};
  loop->be_state = s;
  loop->ring = &s->ring;
  return 0;
}

static unsigned reap(tdl_loop *loop, uring_state *s);

static void ur_close(tdl_loop *loop)
{
  uring_state *s = loop->be_state;
  /* Nothing may be left in flight on a ring that is kept: no operation is
   * (tdl_loop_free refuses), only the epoll fd's poll can be. */
  if (s->ep_armed) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    if (!sqe) {
      io_uring_submit(&s->ring);
      sqe = io_uring_get_sqe(&s->ring);
    }
    if (sqe) {
      io_uring_prep_cancel64(sqe, UD_EPOLL, 0);
      io_uring_sqe_set_data64(sqe, UD_IGNORE);
    }
  }
  for (int i = 0; i < 100 && (io_uring_submit_and_get_events(&s->ring), reap(loop, s), s->ep_armed); i++)
    ;
  tdl__epoll_destroy(&s->ep);
  bool clean = !s->ep_armed && loop->ops_background == 0;
  if (s->bufs.ring) {
    /* (Whatever is still armed is ended by the ring's teardown below.) */
    if (io_uring_unregister_buf_ring(&s->ring, BUF_GROUP) < 0)
      clean = false;
    munmap(s->bufs.ring, TDL__BUFS * sizeof(struct io_uring_buf));
    munmap(s->bufs.mem, (size_t)TDL__BUFS * TDL__BUF_SIZE);
    s->bufs = (bufs){0};
  }
  loop->be_state = NULL;
  loop->ring = NULL;
  pthread_once(&spare_once, spare_init);
  if (clean && !t_spare && spare_ok && pthread_setspecific(spare_key, s) == 0)
    t_spare = s;
  else
    spare_free(s);
}

/* Run the completions the ring holds.  Operations are told; the epoll
 * fd's poll only sets a flag, so that this can run from a fiber too (when
 * room is needed in the submission queue): epoll is harvested by the wait. */
static unsigned reap(tdl_loop *loop, uring_state *s)
{
  unsigned total = 0;
  for (;;) {
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&s->ring, head, cqe)
    {
      n++;
      uint64_t ud = cqe->user_data;
      if (ud == UD_EPOLL) {
        s->ep_armed = false;
        s->ep_ready = true;
      } else if (ud & UD_AHEAD) {
        tdl__msop *m = (tdl__msop *)(uintptr_t)(ud & ~UD_AHEAD);
        if (!(cqe->flags & IORING_CQE_F_MORE))
          loop->ops_background--;
        m->cqe(m, cqe->res, cqe->flags);
      } else if (ud != UD_IGNORE && ud != LIBURING_UDATA_TIMEOUT) {
        tdl__op *op = (tdl__op *)(uintptr_t)ud;
        loop->ops_inflight--;
        op->done(op, cqe->res);
      }
    }
    io_uring_cq_advance(&s->ring, n);
    total += n;
    /* What did not fit is held by the kernel (NODROP) until an enter
     * flushes it in. */
    if (!io_uring_cq_has_overflow(&s->ring) || io_uring_get_events(&s->ring) < 0)
      break;
  }
#ifdef TDL_METRICS
  /* sqe_head counts the entries handed to the kernel (liburing's running
   * count, 32 bits): what went since the last reap, counted per reap
   * rather than per entry. */
  unsigned head = s->ring.sq.sqe_head;
  TDL__COUNT(loop, ring_submissions, (unsigned)(head - s->counted_head));
  s->counted_head = head;
  TDL__COUNT(loop, ring_completions, total);
#endif
  return total;
}

/* Have the epoll set's fd polled by the ring, unless it is already. */
static void arm_epoll(uring_state *s)
{
  if (s->ep_armed)
    return;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
  if (!sqe) {
    io_uring_submit(&s->ring);
    sqe = io_uring_get_sqe(&s->ring);
  }
  if (sqe) {
    io_uring_prep_poll_add(sqe, s->ep.epfd, POLLIN);
    io_uring_sqe_set_data64(sqe, UD_EPOLL);
    s->ep_armed = true;
  }
}

/* Submit what is queued and have the kernel post every completion it has,
 * without waiting.  Since Linux 6.13 one io_uring_enter on a DEFER_TASKRUN
 * ring completes at most max(20, min_complete) operations and keeps the rest
 * for later, so a loop that asked for "any" would collect 20 per iteration
 * (measured: 20,000 reads ready at once took 1,000 iterations): ask for as
 * many as are in flight, with a timeout of zero. */
static int collect(tdl_loop *loop, uring_state *s)
{
  unsigned in_flight = loop->ops_inflight + s->ep_armed;
  if (in_flight <= LOCAL_TW_BATCH)
    return io_uring_submit_and_get_events(&s->ring);
  struct io_uring_cqe *cqe;
  struct __kernel_timespec zero = {0, 0};
  return io_uring_submit_and_wait_timeout(&s->ring, &cqe, in_flight, &zero, NULL);
}

static int ur_wait(tdl_loop *loop, tdl_time_t timeout_ns)
{
  uring_state *s = loop->be_state;
  /* Nothing for the ring to do: epoll's own wait costs what it costs on the
   * epoll back end (the ring's poll of the epoll fd would add a request per
   * iteration to a loop of watchers). */
  if (loop->ops_inflight == 0 && io_uring_sq_ready(&s->ring) == 0 && !s->embedded)
    return tdl__epoll_wait(loop, timeout_ns);
  if (loop->io_started > 0)
    arm_epoll(s);
  int e;
  if (timeout_ns == 0) {
    e = collect(loop, s);
  } else {
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = {.tv_sec = timeout_ns / TDL_SEC, .tv_nsec = timeout_ns % TDL_SEC};
    e = io_uring_submit_and_wait_timeout(&s->ring, &cqe, 1, timeout_ns > 0 ? &ts : NULL, NULL);
  }
  if (e < 0 && e != -ETIME && e != -EINTR && e != -EBUSY && e != -EAGAIN)
    return e;
  /* A sleeping wait ends with the kernel's first batch (see collect): when
   * that was a full one, more are likely behind it. */
  if (reap(loop, s) >= LOCAL_TW_BATCH && timeout_ns != 0 && loop->ops_inflight > 0) {
    (void)collect(loop, s);
    reap(loop, s);
  }
  if (s->ep_ready) {
    s->ep_ready = false;
    e = tdl__epoll_harvest(loop, &s->ep);
    if (e < 0)
      return e;
  }
  if (TDL__UNLIKELY(s->embedded)) {
    /* An outer loop polls the ring's fd until this loop runs again. */
    arm_epoll(s);
    io_uring_submit(&s->ring);
  }
  return 0;
}

#ifdef TDL_FAULTS
void tdl__ring_debug_drop(tdl_loop *loop, unsigned n)
{
  ((uring_state *)loop->be_state)->drop_next = n;
}

/* For tdl__ring_debug_drop: a request that fails (a read of fd -1), linked
 * before the next operation, so that the kernel completes that operation
 * with -ECANCELED without running it, as it does when io-wq cannot start a
 * worker thread for it. */
static __attribute__((noinline, cold)) void drop_next_op(uring_state *s)
{
  if (io_uring_sq_space_left(&s->ring) < 2)
    return; /* the pair must go in one submission; try the next operation */
  s->drop_next--;
  struct io_uring_sqe *x = io_uring_get_sqe(&s->ring);
  io_uring_prep_read(x, -1, NULL, 0, 0);
  x->flags |= IOSQE_IO_LINK;
  io_uring_sqe_set_data64(x, UD_IGNORE);
}
#endif

struct io_uring_sqe *tdl__ring_sqe(tdl_loop *loop, tdl__op *op, int *err)
{
  uring_state *s = loop->be_state;
#ifdef TDL_FAULTS
  if (TDL__UNLIKELY(s->drop_next > 0))
    drop_next_op(s);
#endif
  struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
  if (TDL__UNLIKELY(!sqe)) {
    /* The submission queue is full: hand it to the kernel now.  When the
     * kernel cannot take it (a backlog of completions), collect them and
     * try once more. */
    int e;
    while ((e = io_uring_submit(&s->ring)) == -EINTR) /* a signal: no reason to fail the call */
      ;
    if (e == -EBUSY || e == -EAGAIN) {
      reap(loop, s);
      while ((e = io_uring_submit(&s->ring)) == -EINTR)
        ;
    }
    sqe = io_uring_get_sqe(&s->ring);
    if (!sqe) {
      *err = e < 0 ? e : -EBUSY;
      return NULL;
    }
  }
  io_uring_sqe_set_data(sqe, op);
  loop->ops_inflight++;
  return sqe;
}

/* A request whose own completion nobody waits for; it goes with the next
 * submission, or now when the queue is full. */
static struct io_uring_sqe *side_sqe(uring_state *s)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
  if (!sqe) {
    io_uring_submit(&s->ring);
    sqe = io_uring_get_sqe(&s->ring);
  }
  return sqe;
}

void tdl__ring_cancel(tdl_loop *loop, tdl__op *op)
{
  uring_state *s = loop->be_state;
  struct io_uring_sqe *sqe = side_sqe(s);
  if (!sqe)
    return; /* the queue stays full only while the kernel refuses work; the op still completes */
  io_uring_prep_cancel(sqe, op, 0);
  io_uring_sqe_set_data64(sqe, UD_IGNORE);
  /* Now, not with the next wait: whoever cancelled (or the timer's owner)
   * may use the fd before the loop polls again, and the operation must not
   * take what they read or write meanwhile.  One system call per deadline
   * or cancel that hits an operation in flight. */
  io_uring_submit(&s->ring);
}

void tdl__ring_cancel_fd(tdl_loop *loop, int fd)
{
  uring_state *s = loop->be_state;
  struct io_uring_sqe *sqe = side_sqe(s);
  if (!sqe)
    return;
  /* Now, not with the next wait: the caller closes fd next, and a cancel
   * by fd finds the file through the fd table. */
  io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data64(sqe, UD_IGNORE);
  io_uring_submit(&s->ring);
}

void tdl__ring_submit(tdl_loop *loop)
{
  uring_state *s = loop->be_state;
  while (io_uring_submit(&s->ring) == -EINTR)
    ;
}

/* ---- receiving ahead (loop_internal.h) ---- */

/* Register the loop's provided buffers: every buffer id handed to the
 * kernel at once.  The memory is mapped, not touched: a buffer costs a page
 * only once the kernel has received into it. */
static int bufs_setup(uring_state *s)
{
  size_t ring_bytes = TDL__BUFS * sizeof(struct io_uring_buf);
  size_t mem_bytes = (size_t)TDL__BUFS * TDL__BUF_SIZE;
  void *r = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED)
    return -ENOMEM;
  void *m = mmap(NULL, mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    munmap(r, ring_bytes);
    return -ENOMEM;
  }
  struct io_uring_buf_ring *br = r;
  io_uring_buf_ring_init(br);
  struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)br, .ring_entries = TDL__BUFS, .bgid = BUF_GROUP};
  int e = TDL__FAULT_NEG(ENOMEM, io_uring_register_buf_ring(&s->ring, &reg, 0));
  if (e < 0) {
    munmap(r, ring_bytes);
    munmap(m, mem_bytes);
    return e;
  }
  for (unsigned i = 0; i < TDL__BUFS; i++)
    io_uring_buf_ring_add(br, (char *)m + (size_t)i * TDL__BUF_SIZE, TDL__BUF_SIZE, (unsigned short)i,
                          io_uring_buf_ring_mask(TDL__BUFS), (int)i);
  io_uring_buf_ring_advance(br, TDL__BUFS);
  s->bufs.ring = br;
  s->bufs.mem = m;
  return 0;
}

int tdl__ring_bufs_ready(tdl_loop *loop)
{
  uring_state *s = loop->be_state;
  return s->bufs.ring ? 0 : bufs_setup(s);
}

int tdl__ring_recv_ahead(tdl_loop *loop, tdl__msop *op, int fd)
{
  uring_state *s = loop->be_state;
  struct io_uring_sqe *sqe = side_sqe(s);
  if (!sqe)
    return -EBUSY;
  io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = BUF_GROUP;
  io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op | UD_AHEAD);
  loop->ops_background++;
  return 0;
}

int tdl__ring_accept_ahead(tdl_loop *loop, tdl__msop *op, int fd)
{
  uring_state *s = loop->be_state;
  struct io_uring_sqe *sqe = side_sqe(s);
  if (!sqe)
    return -EBUSY;
  io_uring_prep_multishot_accept(sqe, fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op | UD_AHEAD);
  loop->ops_background++;
  return 0;
}

void tdl__ring_cancel_ahead(tdl_loop *loop, tdl__msop *op)
{
  uring_state *s = loop->be_state;
  struct io_uring_sqe *sqe = side_sqe(s);
  if (!sqe)
    return;
  io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)op | UD_AHEAD, 0);
  io_uring_sqe_set_data64(sqe, UD_IGNORE);
  /* Now, and have the kernel run the cancelled request's completion too
   * (deferred task work, on this ring): until then it holds the socket
   * open, and a socket its owner closed must close now, not at the loop's
   * next wait, which may never come.  The completion is reaped later. */
  io_uring_submit_and_get_events(&s->ring);
}

char *tdl__ring_buf(tdl_loop *loop, unsigned bid)
{
  uring_state *s = loop->be_state;
  return s->bufs.mem + (size_t)bid * TDL__BUF_SIZE;
}

void tdl__ring_buf_put(tdl_loop *loop, unsigned bid)
{
  uring_state *s = loop->be_state;
  io_uring_buf_ring_add(s->bufs.ring, tdl__ring_buf(loop, bid), TDL__BUF_SIZE, (unsigned short)bid,
                        io_uring_buf_ring_mask(TDL__BUFS), 0);
  io_uring_buf_ring_advance(s->bufs.ring, 1);
}

int tdl__ring_settle_ahead(tdl_loop *loop)
{
  uring_state *s = loop->be_state;
  tdl_time_t until = tdl__clock_now() + TDL_SEC;
  while (loop->ops_background > 0) {
    if (tdl__clock_now() >= until)
      return -ETIMEDOUT;
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
    (void)io_uring_submit_and_wait_timeout(&s->ring, &cqe, 1, &ts, NULL);
    reap(loop, s);
  }
  return 0;
}

/* The ring's fd is readable while completions wait (the kernel counts the
 * deferred ones too), and readiness reaches the ring through the epoll fd's
 * poll, which an outer loop cannot arm: arm it now, and submit everything
 * queued, so that the fd tells the truth. */
static int ur_fd(const tdl_loop *loop)
{
  uring_state *s = loop->be_state;
  s->embedded = true;
  arm_epoll(s);
  io_uring_submit(&s->ring);
  return s->ring.ring_fd;
}

const tdl__backend tdl__backend_uring = {
    .name = "uring",
    .open = ur_open,
    .close = ur_close,
    .interest = tdl__epoll_interest,
    .forget = tdl__epoll_forget,
    .wait = ur_wait,
    .pollable_fd = ur_fd,
};
