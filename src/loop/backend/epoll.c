/* SPDX-License-Identifier: MIT */
/*
 * The epoll back end.
 *
 * An fd is registered level-triggered for exactly what is wanted, and is
 * switched to edge-triggered for everything (in, out, hang-up) the first time
 * that is not enough: when the kernel reports something no started watcher
 * wants (a watcher was stopped while its fd stays ready), or when a watcher
 * wants more than was registered.  That switch is one EPOLL_CTL_MOD in the
 * life of the fd; after it, starting and stopping watchers never costs an
 * epoll_ctl, and the loop's readiness cache turns edges into what watchers
 * asked for.
 *
 * Why not edge-triggered from the start: for an fd that is always watched
 * and always ready again soon (a busy connection), level-triggered is cheaper
 * in the kernel.  The item then never leaves epoll's ready list, so the
 * wake-up on each new arrival finds it queued already, where edge-triggered
 * re-queues it on every arrival.  Measured here: 1.04 vs 1.09-1.11 us per
 * message on the pipes workload (P=100, D=0).
 */
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/sys.h"
#include "loop/loop_internal.h"

/* epoll_pwait2 through syscall(): glibc has had a wrapper since 2.35, but
 * musl (1.2.3, Debian 12) has none.  The number is 441 on every architecture;
 * the timespec is the kernel's on 64-bit targets.  A null sigmask makes the
 * kernel ignore the size argument. */
#ifndef SYS_epoll_pwait2
#define SYS_epoll_pwait2 441
#endif

enum { EVENTS_MIN = 64, EVENTS_MAX = 1024 };

typedef tdl__epoll epoll_state;

int tdl__epoll_init(tdl__epoll *s)
{
  s->cap = EVENTS_MIN;
  s->events = TDL__FAULT_ALLOC(malloc(sizeof *s->events * (size_t)s->cap));
  s->epfd = TDL__FAULT_SYS(EMFILE, epoll_create1(EPOLL_CLOEXEC));
  if (!s->events || s->epfd < 0) {
    int e = s->epfd < 0 ? -errno : -ENOMEM;
    if (s->epfd >= 0)
      tdl__sys_close(s->epfd);
    free(s->events);
    return e;
  }
  return 0;
}

void tdl__epoll_destroy(tdl__epoll *s)
{
  tdl__sys_close(s->epfd);
  free(s->events);
}

static int ep_open(tdl_loop *loop)
{
  epoll_state *s = TDL__FAULT_ALLOC(calloc(1, sizeof *s));
  if (!s)
    return -ENOMEM;
  int e = tdl__epoll_init(s);
  if (e < 0) {
    free(s);
    return e;
  }
  loop->be_state = s;
  return 0;
}

static void ep_close(tdl_loop *loop)
{
  tdl__epoll_destroy(loop->be_state);
  free(loop->be_state);
  loop->be_state = NULL;
}

/* rec->bmode: the events the registration reports (which the loop reads,
 * see loop_internal.h), TDL__FD_LEVEL while it is level-triggered (asking
 * for more then switches to edges with an EPOLL_CTL_MOD, which also reports
 * what is ready at that moment), or MODE_ET once edge-triggered. */
enum { MODE_ET = 0x80 };

static uint32_t lt_events(unsigned want)
{
  return ((want & TDL_READ) ? EPOLLIN : 0) | ((want & TDL_WRITE) ? EPOLLOUT : 0);
}

static uint64_t token(int fd, uint32_t gen) { return (uint64_t)(uint32_t)fd | ((uint64_t)gen << 32); }

/* The one switch to edge-triggered, for good. */
static int to_edge(epoll_state *s, int fd, tdl__fd *rec)
{
  struct epoll_event ev = {
      .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
      .data.u64 = token(fd, rec->reg_gen),
  };
  if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
    return -errno;
  rec->bmode = MODE_ET | TDL__FD_LAZY | TDL_READ | TDL_WRITE;
  return 0;
}

int tdl__epoll_interest(tdl_loop *loop, int fd, tdl__fd *rec, unsigned want)
{
  epoll_state *s = loop->be_state;
  if (rec->flags & TDL__FD_REGISTERED) {
    if ((rec->bmode & MODE_ET) || !(want & ~rec->bmode & (TDL_READ | TDL_WRITE)))
      return 0; /* a narrower want is left to the report that shows it */
    return to_edge(s, fd, rec);
  }
  if (want == 0)
    return 0;
  uint32_t gen = rec->reg_gen + 1;
  struct epoll_event ev = {.events = lt_events(want), .data.u64 = token(fd, gen)};
  if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
    /* EEXIST: this file is still in the set under an older token (a watcher
     * was replaced without the fd being closed); take it over. */
    if (errno != EEXIST || epoll_ctl(s->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
      return -errno;
  }
  rec->reg_gen = gen;
  rec->flags |= TDL__FD_REGISTERED;
  rec->bmode = (uint8_t)(TDL__FD_LAZY | TDL__FD_LEVEL | (want & (TDL_READ | TDL_WRITE)));
  return 0;
}

void tdl__epoll_forget(tdl_loop *loop, int fd, tdl__fd *rec)
{
  epoll_state *s = loop->be_state;
  /* Fails harmlessly (EBADF, ENOENT) when the fd was closed meanwhile. */
  epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
  rec->reg_gen++; /* events still queued under the old token are dropped */
  rec->bmode = 0;
}

static inline unsigned to_bits(uint32_t e)
{
  _Static_assert(EPOLLIN == 1 && TDL_READ == 1 && EPOLLOUT == 4 && TDL_WRITE == 2, "bit layout");
  unsigned b = (e & EPOLLIN) | ((e & EPOLLOUT) >> 1);
  if (TDL__UNLIKELY(e & (EPOLLERR | EPOLLHUP | EPOLLRDHUP))) {
    if (e & EPOLLERR)
      b |= TDL_ERR | TDL_READ | TDL_WRITE; /* the next read/write returns the error */
    if (e & (EPOLLHUP | EPOLLRDHUP))
      b |= TDL_HUP | TDL_READ; /* a read returns EOF */
  }
  return b;
}

/* The grown array is in s->events: GCC's stale-pointer leak (base.h), which
 * it reports at the closing brace. */
TDL__ANALYZER_IGNORE("-Wanalyzer-malloc-leak")
static void epoll_report(tdl_loop *loop, tdl__epoll *s, int n)
{
  /* Once per event: keep this loop short, with the tables in locals. */
  const struct epoll_event *events = s->events;
  tdl__fd *fds = loop->fds;
  uint32_t nfds = loop->nfds;
  int *queue = loop->queue;
  uint32_t queued = loop->queue_n;
  for (int i = 0; i < n; i++) {
    uint64_t tok = events[i].data.u64;
    uint32_t fd = (uint32_t)tok;
    if (TDL__UNLIKELY(fd >= nfds))
      continue;
    tdl__fd *rec = &fds[fd];
    if (TDL__UNLIKELY(rec->reg_gen != (uint32_t)(tok >> 32)))
      continue; /* from a registration that has since been replaced */
    unsigned bits = to_bits(events[i].events);
    /* Level-triggered and reporting what nobody wants (or an error or
     * hang-up, which level-triggering would repeat on every wait): this fd
     * needs edges from now on, or the loop would spin on it.  (rec->kernel
     * never holds ERR or HUP.)  That includes a poll that does not sleep,
     * because fibers are still queued to run, and reports again the levels
     * of the fds those fibers were woken for and have not read yet: each
     * repeat costs the kernel a poll of the file (with a thousand fibers
     * queued, five per message were measured), where edges cost one
     * EPOLL_CTL_MOD for good.  Fiber I/O parks without a read after a short
     * one on edges too (fd/io.c). */
    unsigned unwanted = bits & ~rec->kernel;
    if (TDL__UNLIKELY(unwanted) && !(rec->bmode & MODE_ET) && (rec->flags & TDL__FD_REGISTERED))
      to_edge(s, (int)fd, rec);
    tdl__fd_report(rec, (int)fd, bits, queue, &queued);
  }
  loop->queue_n = queued;
  if (n == s->cap && s->cap < EVENTS_MAX) {
    struct epoll_event *ev = TDL__FAULT_ALLOC(realloc(s->events, sizeof *ev * (size_t)s->cap * 2));
    if (ev) {
      s->events = ev;
      s->cap *= 2;
    }
  }
}
TDL__ANALYZER_END

int tdl__epoll_wait(tdl_loop *loop, tdl_time_t timeout_ns)
{
  epoll_state *s = loop->be_state;
  int n;
  if (timeout_ns <= 0) {
    n = epoll_wait(s->epfd, s->events, s->cap, timeout_ns < 0 ? -1 : 0);
  } else {
    /* epoll_pwait2 (Linux 5.11) sleeps with nanosecond resolution; epoll_wait
     * would round a 1 ms timer's wait up to whole milliseconds.  Where it is
     * missing (old kernels, valgrind) remember that and round up instead. */
    static int no_pwait2;
    n = -1;
    if (!__atomic_load_n(&no_pwait2, __ATOMIC_RELAXED)) {
      struct timespec ts = {.tv_sec = timeout_ns / TDL_SEC, .tv_nsec = timeout_ns % TDL_SEC};
      n = (int)syscall(SYS_epoll_pwait2, s->epfd, s->events, s->cap, &ts, NULL, 0);
      if (n < 0 && errno == ENOSYS)
        __atomic_store_n(&no_pwait2, 1, __ATOMIC_RELAXED);
    }
    if (__atomic_load_n(&no_pwait2, __ATOMIC_RELAXED)) {
      tdl_time_t ms = (timeout_ns + TDL_MSEC - 1) / TDL_MSEC;
      n = epoll_wait(s->epfd, s->events, s->cap, ms > INT32_MAX ? INT32_MAX : (int)ms);
    }
  }
  if (n < 0)
    return errno == EINTR ? 0 : -errno;
  epoll_report(loop, s, n);
  return 0;
}

int tdl__epoll_harvest(tdl_loop *loop, tdl__epoll *s)
{
  int n = epoll_wait(s->epfd, s->events, s->cap, 0);
  if (n < 0)
    return errno == EINTR ? 0 : -errno;
  epoll_report(loop, s, n);
  return n;
}

static int ep_fd(const tdl_loop *loop)
{
  const epoll_state *s = loop->be_state;
  return s->epfd;
}

const tdl__backend tdl__backend_epoll = {
    .name = "epoll",
    .open = ep_open,
    .close = ep_close,
    .interest = tdl__epoll_interest,
    .forget = tdl__epoll_forget,
    .wait = tdl__epoll_wait,
    .pollable_fd = ep_fd,
};
