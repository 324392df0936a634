/*
 * Wakeups from other threads: the one thread-safe entry into a loop.
 *
 * A sender marks its wakeup pending; the first sender to find the loop's
 * "signalled" flag clear writes the eventfd.  The loop clears the flag before
 * it scans the wakeups, so a send that lands after the scan passed its wakeup
 * sees the flag clear and writes again: no wakeup is lost, and a burst of
 * sends costs one eventfd write.
 */
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "loop/loop_internal.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define XCHG(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)

static void deliver(tdl__list *n, void *loop)
{
  tdl_wakeup *wk = TDL__CONTAINER_OF(n, tdl_wakeup, link);
  if (XCHG(&wk->pending, 0))
    wk->cb(loop, wk);
}

static void on_eventfd(tdl_loop *loop, tdl_io *w, unsigned events)
{
  (void)events;
  uint64_t v;
  while (read(w->fd, &v, sizeof v) == (ssize_t)sizeof v)
    ;
  STORE(&loop->wake_signalled, 0);
  tdl__list_walk(&loop->wakeups, deliver, loop); /* a callback may stop any wakeup */
}

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
  if (loop->wake_fd < 0) {
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0)
      return -errno;
    int e = tdl__io_open_internal(loop, &loop->wake_io, fd, on_eventfd);
    if (e < 0)
      return e;
    loop->wake_fd = fd;
  }
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
  tdl_loop *loop = wk->loop;
  if (XCHG(&loop->wake_signalled, 1))
    return 0;
  uint64_t one = 1;
  int saved = errno; /* may run in a signal handler */
  /* EAGAIN means the counter is saturated: the loop will wake anyway. */
  while (write(loop->wake_fd, &one, sizeof one) < 0 && errno == EINTR)
    ;
  errno = saved;
  return 0;
}

void tdl__wakeup_close(tdl_loop *loop)
{
  if (loop->wake_fd >= 0)
    tdl__io_close_internal(loop, &loop->wake_io);
  loop->wake_fd = -1;
}
