/* SPDX-License-Identifier: MIT */
/* treadle's own threads (thread.h). */
#include <pthread.h>
#include <signal.h>

#include "base/thread.h"

/* The threads run the user's code (a pool call, a watchdog report): room
 * for it, but not the 8 MiB of a default stack each. */
#define STACK (256 * 1024)

static int start(pthread_t *t, bool detached, void *(*fn)(void *arg), void *arg)
{
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, detached ? PTHREAD_CREATE_DETACHED : PTHREAD_CREATE_JOINABLE);
  pthread_attr_setstacksize(&a, STACK);
  /* Signals blocked from its first instruction (the new thread inherits the
   * mask): a loop's signal watcher reads them from its own thread, and a
   * handler must not run on a thread its program does not know of. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int e = TDL__FAULT_ERR(EAGAIN, pthread_create(t, &a, fn, arg));
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&a);
  return e == 0 ? 0 : -EAGAIN;
}

int tdl__thread_start(void *(*fn)(void *arg), void *arg)
{
  pthread_t t;
  return start(&t, true, fn, arg);
}

int tdl__thread_start_joinable(pthread_t *t, void *(*fn)(void *arg), void *arg)
{
  return start(t, false, fn, arg);
}

unsigned tdl__cpus(cpu_set_t *set)
{
  CPU_ZERO(set);
  if (sched_getaffinity(0, sizeof *set, set) == 0 && CPU_COUNT(set) > 0)
    return (unsigned)CPU_COUNT(set);
  CPU_ZERO(set);
  return 1;
}
