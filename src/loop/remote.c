/* SPDX-License-Identifier: MIT */
/*
 * Reaching a loop from other threads: wakeups and ports.
 *
 * Waking only a loop that will not look.  A sender leaves its work where the
 * loop will look and raises a flag there: a post pushes itself onto the
 * port's queue (its head is the flag: the push onto an empty queue raised
 * it), a wakeup sets its own pending flag and then the port's `pending`.
 * It writes the eventfd only when it was the one to raise the flag AND the
 * loop is not busy.  A loop is
 * busy while tdl_loop_run goes round without sleeping; before it sleeps it
 * clears busy and then looks at the queue and `pending`; both sides use sequentially
 * consistent operations, so either the sender sees it idle or the loop sees
 * the flag: no work is left unseen, and a burst of sends costs at most one
 * write.  A loop outside tdl_loop_run (embedded in another, or not running
 * yet) is not busy: its eventfd, and so its tdl_loop_fd, becomes readable.
 * The loop clears `pending` before it looks at the wakeups, and empties the
 * queue in one exchange, so a send that lands after that raises its flag
 * again.
 *
 * The port's queue is a lock-free stack that posters push onto (one
 * compare-and-swap) and the loop takes whole (one exchange), reversing it:
 * each thread's posts run in the order it posted them.
 *
 * A port outlives its loop: the loop holds one reference and posters their
 * own.  Freeing the loop closes the port, waits until no poster is between
 * its check of `closed` and its last touch of the loop, and hands every post
 * still queued back to its owner (callback with loop NULL).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/sys.h"
#include "loop/loop_internal.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define XCHG(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)

/* Two cache lines.  The first is what a loop that spins reads over and
 * over and what makes work visible to it: the queue's head and the flags.
 * A post moves that line to the sender once and back to the loop once (a
 * hop between two loops is a handful of such moves: each counts).  The
 * second is the senders' bookkeeping, which the loop does not touch while it
 * runs.  The loop holds one reference; posters hold their own. */
struct tdl_port {
  _Alignas(64) tdl_post *head; /* pushed posts, newest first (atomic) */
  int pending;        /* atomic: a wakeup was sent */
  int busy;           /* atomic: tdl_loop_run goes round and will look at the
                         queue and `pending` before it sleeps */
  int signalled;      /* atomic: an eventfd write is outstanding */
  _Alignas(64) tdl_loop *loop; /* valid while !closed, for posters counted in `posting` */
  uint32_t refs;      /* atomic */
  uint32_t posting;   /* posters inside tdl_port_post (atomic) */
  int closed;         /* atomic */
  int fd;             /* the loop's eventfd */
  uint64_t posts, wakes; /* atomic */
};

/* ---- the loop's side ---- */

static void on_eventfd(tdl_loop *loop, tdl_io *w, unsigned events)
{
  (void)events;
  uint64_t v;
  while (tdl__sys_read(w->fd, &v, sizeof v) == (ssize_t)sizeof v)
    ;
  STORE(&loop->port->signalled, 0); /* the next send to an idle loop writes again */
}

/* The port and the eventfd under it, made on first use (of a port or a
 * wakeup). */
static int notify_open(tdl_loop *loop)
{
  if (loop->port)
    return 0;
  tdl_port *port = TDL__FAULT_ALLOC(aligned_alloc(64, (sizeof *port + 63) & ~(size_t)63));
  if (!port)
    return -ENOMEM;
  memset(port, 0, sizeof *port);
  int fd = TDL__FAULT_SYS(EMFILE, eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (fd < 0) {
    free(port);
    return -errno;
  }
  port->loop = loop;
  port->refs = 1; /* the loop's */
  port->fd = fd;
  port->busy = loop->running; /* made from a callback or a fiber: it runs */
  /* Published: a dump on a signal reads it from another thread
   * (tdl__remote_port_peek). */
  __atomic_store_n(&loop->port, port, __ATOMIC_RELEASE);
  int e = tdl__io_open_internal(loop, &loop->wake_io, fd, on_eventfd);
  if (e < 0) {
    __atomic_store_n(&loop->port, NULL, __ATOMIC_RELEASE);
    free(port);
    return e;
  }
  loop->wake_fd = fd;
  return 0;
}

bool tdl__remote_may_sleep(tdl_loop *loop)
{
  tdl_port *port = loop->port;
  if (!port)
    return true;
  /* An exchange, not a store: a seq_cst store then a seq_cst load of
   * another flag is enough in C11, and AArch64's stlr/ldar keep that order,
   * but qemu-user emulates those on x86 as barrier-store, load-barrier,
   * which lets the load pass the store: loops slept on posted work there.
   * A read-modify-write is a full barrier everywhere (and ThreadSanitizer,
   * which models no fences, understands it). */
  XCHG(&port->busy, 0);
  if (!LOAD(&port->pending) && !LOAD(&port->head))
    return true;
  STORE(&port->busy, 1);
  return false;
}

bool tdl__remote_spin(tdl_loop *loop, tdl_time_t timeout)
{
  if (!loop->port)
    return false; /* nothing but this thread could bring work */
  tdl_time_t span = timeout >= 0 && timeout < loop->spin ? timeout : loop->spin;
  tdl_time_t until = tdl__clock_now() + span;
  do {
    for (int i = 0; i < 64; i++) {
      if (tdl__remote_has_work(loop))
        return true;
      tdl__cpu_relax();
    }
  } while (tdl__clock_now() < until);
  return false;
}

void tdl__remote_busy(tdl_loop *loop, bool busy)
{
  if (loop->port)
    STORE(&loop->port->busy, busy);
}

static void deliver(tdl__list *n, void *loop)
{
  tdl_wakeup *wk = TDL__CONTAINER_OF(n, tdl_wakeup, link);
  if (XCHG(&wk->pending, 0))
    wk->cb(loop, wk);
}

/* Take the port's queue, oldest first. */
static tdl_post *take_all(tdl_port *port)
{
  tdl_post *p = XCHG(&port->head, NULL), *fifo = NULL;
  while (p) {
    tdl_post *next = p->next;
    p->next = fifo;
    fifo = p;
    p = next;
  }
  return fifo;
}

/* Run (loop) or hand back (NULL) every post of the list. */
static void run_posts(tdl_post *p, tdl_loop *loop)
{
  while (p) {
    tdl_post *next = p->next;
    p->next = NULL;
    /* The owner's again: its callback may post it anew (its compare-and-swap
     * sees this release; no full fence needed). */
    __atomic_store_n(&p->queued, 0, __ATOMIC_RELEASE);
    p->cb(loop, p);
    p = next;
  }
}

void tdl__remote_run(tdl_loop *loop)
{
  tdl_port *port = loop->port;
  if (!port)
    return;
  if (__atomic_load_n(&port->pending, __ATOMIC_ACQUIRE)) {
    STORE(&port->pending, 0);
    tdl__list_walk(&loop->wakeups, deliver, loop); /* a callback may stop any wakeup */
  }
  if (__atomic_load_n(&port->head, __ATOMIC_ACQUIRE))
    run_posts(take_all(port), loop);
}

bool tdl__remote_has_work(const tdl_loop *loop)
{
  tdl_port *port = loop->port;
  return port && (__atomic_load_n(&port->head, __ATOMIC_ACQUIRE) || __atomic_load_n(&port->pending, __ATOMIC_ACQUIRE));
}

bool tdl__remote_expected(const tdl_loop *loop)
{
  return loop->remote_waits > 0 || (loop->port && LOAD(&loop->port->refs) > 1);
}

int tdl__remote_expect(tdl_loop *loop)
{
  int e = notify_open(loop);
  if (e == 0)
    loop->remote_waits++;
  return e;
}

void tdl__remote_unexpect(tdl_loop *loop) { loop->remote_waits--; }

int tdl__remote_open(tdl_loop *loop) { return notify_open(loop); }

tdl_port *tdl__remote_port_peek(tdl_loop *loop) { return __atomic_load_n(&loop->port, __ATOMIC_ACQUIRE); }

/* ---- the senders' side ---- */

/* This sender raised a flag the loop looks at (the queue's, or `pending`):
 * wake the loop if it sleeps.  Returns whether this send wrote the eventfd. */
static bool notify(tdl_port *port)
{
  if (LOAD(&port->busy))
    return false; /* it will look before it sleeps */
  if (XCHG(&port->signalled, 1))
    return false;
  uint64_t one = 1;
  int saved = errno; /* may run in a signal handler */
  /* EAGAIN means the counter is saturated: the loop will wake anyway. */
  while (tdl__sys_write(port->fd, &one, sizeof one) < 0 && errno == EINTR)
    ;
  errno = saved;
  return true;
}

/* ---- wakeups ---- */

void tdl_wakeup_init(tdl_wakeup *wk, tdl_wakeup_cb cb, void *data)
{
  memset(wk, 0, sizeof *wk);
  wk->cb = cb;
  wk->data = data;
}

int tdl_wakeup_start(tdl_loop *loop, tdl_wakeup *wk)
{
  TDL__CHECK_THREAD(loop);
  if (LOAD(&wk->started))
    return 0;
  int e = notify_open(loop);
  if (e < 0)
    return e;
  wk->loop = loop;
  STORE(&wk->pending, 0);
  tdl__list_push(&loop->wakeups, &wk->link);
  STORE(&wk->started, 1);
  loop->active++;
  return 0;
}

int tdl_wakeup_stop(tdl_loop *loop, tdl_wakeup *wk)
{
  TDL__CHECK_THREAD(loop);
  if (!LOAD(&wk->started))
    return 0;
  tdl__list_remove(&wk->link);
  STORE(&wk->started, 0);
  loop->active--;
  return 0;
}

int tdl_wakeup_send(tdl_wakeup *wk)
{
  if (!LOAD(&wk->started))
    return -EINVAL;
  if (XCHG(&wk->pending, 1))
    return 0; /* already on its way */
  tdl_port *port = wk->loop->port;
  if (!XCHG(&port->pending, 1))
    notify(port); /* else raised already: whoever raised it wakes the loop */
  return 0;
}

/* ---- ports ---- */

void tdl_post_init(tdl_post *p, tdl_post_cb cb, void *data)
{
  memset(p, 0, sizeof *p);
  p->cb = cb;
  p->data = data;
}

int tdl_loop_port(tdl_port **out, tdl_loop *loop)
{
  TDL__CHECK_THREAD(loop);
  *out = NULL;
  int e = notify_open(loop);
  if (e < 0)
    return e;
  *out = tdl_port_ref(loop->port);
  return 0;
}

tdl_port *tdl_port_ref(tdl_port *port)
{
  ADD(&port->refs, 1);
  return port;
}

void tdl_port_release(tdl_port *port)
{
  if (port && ADD(&port->refs, -1) == 0)
    free(port);
}

int tdl_port_post(tdl_port *port, tdl_post *p)
{
  if (!port || !p || !p->cb)
    return -EINVAL;
  int idle = 0;
  if (!__atomic_compare_exchange_n(&p->queued, &idle, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
    return -EBUSY;
  ADD(&port->posting, 1);
  if (LOAD(&port->closed)) {
    ADD(&port->posting, -1);
    STORE(&p->queued, 0);
    return -ESHUTDOWN;
  }
  tdl_post *head = LOAD(&port->head);
  do
    p->next = head;
  while (!__atomic_compare_exchange_n(&port->head, &head, p, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  ADD(&port->posts, 1);
  /* Pushed onto an empty queue: this post raised the flag. */
  if (!head && notify(port))
    ADD(&port->wakes, 1);
  ADD(&port->posting, -1); /* the last touch of the loop */
  return 0;
}

void tdl_port_stats_get(const tdl_port *port, tdl_port_stats *out)
{
  out->posts = LOAD(&port->posts);
  out->wakes = LOAD(&port->wakes);
}

/* ---- teardown ---- */

void tdl__remote_close(tdl_loop *loop)
{
  tdl_port *port = loop->port;
  if (port) {
    STORE(&port->closed, 1);
    while (LOAD(&port->posting))
      sched_yield(); /* a poster is a few instructions from done */
    run_posts(take_all(port), NULL); /* "not run": their owners take them back */
    loop->port = NULL;
    tdl_port_release(port);
  }
  if (loop->wake_fd >= 0)
    tdl__io_close_internal(loop, &loop->wake_io);
  loop->wake_fd = -1;
}
