/* SPDX-License-Identifier: MIT */
/*
 * Signal watchers on a signalfd.
 *
 * A signal can be read from a signalfd only while it is blocked, so the first
 * watcher of a signal blocks it in the calling thread and the last one
 * unblocks it again, unless it was blocked before.  A process-wide table
 * records which loop owns each signal: two loops reading one signal would
 * steal it from each other.
 */
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "base/sys.h"
#include "loop/loop_internal.h"

static pthread_mutex_t owners_lock = PTHREAD_MUTEX_INITIALIZER;
static tdl_loop *owners[_NSIG];

typedef struct delivery {
  tdl_loop *loop;
  int signum;
} delivery;

static void deliver(tdl__list *n, void *ctx)
{
  delivery *d = ctx;
  tdl_signal *s = TDL__CONTAINER_OF(n, tdl_signal, link);
  if (s->signum == d->signum)
    s->cb(d->loop, s, d->signum);
}

static void on_signalfd(tdl_loop *loop, tdl_io *w, unsigned events)
{
  (void)events;
  struct signalfd_siginfo si[16];
  ssize_t n;
  while ((n = tdl__sys_read(w->fd, si, sizeof si)) > 0) {
    for (size_t i = 0; i < (size_t)n / sizeof si[0]; i++) {
      delivery d = {loop, (int)si[i].ssi_signo};
      tdl__list_walk(&loop->sigs, deliver, &d); /* a callback may stop any watcher */
    }
  }
}

void tdl_signal_init(tdl_signal *s, tdl_signal_cb cb, void *data)
{
  memset(s, 0, sizeof *s);
  s->cb = cb;
  s->data = data;
}

static int update_fd(tdl_loop *loop)
{
  if (loop->sig_fd >= 0)
    return signalfd(loop->sig_fd, &loop->sig_mask, 0) < 0 ? -errno : 0;
  int fd = TDL__FAULT_SYS(EMFILE, signalfd(-1, &loop->sig_mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (fd < 0)
    return -errno;
  int e = tdl__io_open_internal(loop, &loop->sig_io, fd, on_signalfd);
  if (e < 0)
    return e;
  loop->sig_fd = fd;
  return 0;
}

int tdl_signal_start(tdl_loop *loop, tdl_signal *s, int signum)
{
  TDL__CHECK_THREAD(loop);
  if (signum <= 0 || signum >= _NSIG || signum == SIGKILL || signum == SIGSTOP)
    return -EINVAL;
  if (tdl__list_linked(&s->link)) {
    if (s->signum == signum)
      return 0;
    tdl_signal_stop(loop, s);
  }
  /* A count, not a look through loop->sigs: that list may be being walked,
   * with the walk's marker in it (tdl__list_walk). */
  if (loop->sig_watchers[signum] == 0) {
    pthread_mutex_lock(&owners_lock);
    bool taken = owners[signum] && owners[signum] != loop;
    if (!taken)
      owners[signum] = loop;
    pthread_mutex_unlock(&owners_lock);
    if (taken)
      return -EBUSY;

    sigset_t one, old;
    sigemptyset(&one);
    sigaddset(&one, signum);
    pthread_sigmask(SIG_BLOCK, &one, &old);
    if (!sigismember(&old, signum))
      sigaddset(&loop->sig_restore, signum);
    sigaddset(&loop->sig_mask, signum);
    int e = update_fd(loop);
    if (e < 0) {
      sigdelset(&loop->sig_mask, signum);
      if (sigismember(&loop->sig_restore, signum)) {
        sigdelset(&loop->sig_restore, signum);
        pthread_sigmask(SIG_UNBLOCK, &one, NULL);
      }
      pthread_mutex_lock(&owners_lock);
      owners[signum] = NULL;
      pthread_mutex_unlock(&owners_lock);
      return e;
    }
  }
  s->signum = signum;
  loop->sig_watchers[signum]++;
  tdl__list_push(&loop->sigs, &s->link);
  loop->active++;
  return 0;
}

int tdl_signal_stop(tdl_loop *loop, tdl_signal *s)
{
  TDL__CHECK_THREAD(loop);
  if (!tdl__list_linked(&s->link))
    return 0;
  tdl__list_remove(&s->link);
  loop->active--;
  int signum = s->signum;
  if (--loop->sig_watchers[signum] > 0)
    return 0;
  /* The last watcher of signum: stop reading it and give it back. */
  sigdelset(&loop->sig_mask, signum);
  if (loop->sig_fd >= 0)
    signalfd(loop->sig_fd, &loop->sig_mask, 0);
  if (sigismember(&loop->sig_restore, signum)) {
    sigdelset(&loop->sig_restore, signum);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signum);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  }
  pthread_mutex_lock(&owners_lock);
  if (owners[signum] == loop)
    owners[signum] = NULL;
  pthread_mutex_unlock(&owners_lock);
  return 0;
}

void tdl__signal_close(tdl_loop *loop)
{
  if (loop->sig_fd >= 0)
    tdl__io_close_internal(loop, &loop->sig_io);
  loop->sig_fd = -1;
}
