/* SPDX-License-Identifier: MIT */
/*
 * libtreadle-hook's ground (hook_internal.h): libc's functions under the
 * interposed ones, the child of a fork, and what the library reports
 * (include/treadle/hook.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "hook/hook_internal.h"

/* ---- libc's functions ---- */

struct tdl__hook_libc tdl__hook_real;
atomic_bool tdl__hook_resolved;

/* (memcpy: ISO C has no cast from dlsym's void * to a function pointer.) */
#define RESOLVE(name)                             \
  do {                                            \
    void *p_ = dlsym(RTLD_NEXT, #name);           \
    memcpy(&tdl__hook_real.name, &p_, sizeof p_); \
  } while (0)

/* Idempotent: two threads that race here store the same values. */
__attribute__((noinline)) void tdl__hook_resolve(void)
{
  RESOLVE(read);
  RESOLVE(write);
  RESOLVE(readv);
  RESOLVE(writev);
  RESOLVE(recv);
  RESOLVE(send);
  RESOLVE(recvfrom);
  RESOLVE(sendto);
  RESOLVE(recvmsg);
  RESOLVE(sendmsg);
  RESOLVE(accept);
  RESOLVE(accept4);
  RESOLVE(connect);
  RESOLVE(poll);
  RESOLVE(ppoll);
  RESOLVE(select);
  RESOLVE(pselect);
  RESOLVE(ioctl);
  RESOLVE(getaddrinfo);
  RESOLVE(getnameinfo);
  RESOLVE(gethostbyname2_r);
  RESOLVE(gethostbyname_r);
  RESOLVE(gethostbyname);
  RESOLVE(gethostbyname2);
  RESOLVE(close);
  RESOLVE(fcntl);
  RESOLVE(fcntl64);
  RESOLVE(setsockopt);
  RESOLVE(socket);
  RESOLVE(socketpair);
  RESOLVE(pipe);
  RESOLVE(pipe2);
  RESOLVE(dup);
  RESOLVE(dup2);
  RESOLVE(dup3);
  RESOLVE(sleep);
  RESOLVE(usleep);
  RESOLVE(nanosleep);
  RESOLVE(clock_nanosleep);
  if (!tdl__hook_real.fcntl64)
    tdl__hook_real.fcntl64 = tdl__hook_real.fcntl;
  atomic_store_explicit(&tdl__hook_resolved, true, memory_order_release);
}

/* ---- fork ----
 * The child of a fork has the thread that forked, inside the fiber or
 * callback that forked if it was in one, on a loop that is the parent's
 * (treadle.h: that fiber makes no blocking call, and no loop inherited may
 * be touched: they share the parent's epoll instance).  So there the hook
 * is out of the way: calls of that fiber are libc's (the EAGAIN of an fd
 * made non-blocking underneath still turns into a poll(2)), and close() of
 * an fd fiber I/O knew is close(2), not tdl_close (whose EPOLL_CTL_DEL
 * would take the parent's registration away).  Fibers of loops the child
 * makes afterwards are hooked as usual. */
bool tdl__hook_forked;
tdl_loop *tdl__hook_forked_loop;

static void at_fork_child(void)
{
  tdl__hook_forked = true; /* one thread now: no other can look */
  tdl__hook_forked_loop = tdl_fiber_self() ? tdl_fiber_loop() : NULL;
}

static __attribute__((constructor)) void hook_init(void)
{
  tdl__hook_resolve();
  (void)pthread_atfork(NULL, NULL, at_fork_child);
}

/* ---- statistics ---- */

_Atomic uint64_t tdl__hook_parked, tdl__hook_slept, tdl__hook_nonblocking;

int tdl_hook_active(void)
{
  TDL__HOOK_READY();
  return tdl__hook_real.read && tdl__hook_real.close && tdl__hook_real.fcntl ? 1 : -ENOSYS;
}

void tdl_hook_stats_get(tdl_hook_stats *out)
{
  if (!out)
    return;
  out->parked = atomic_load_explicit(&tdl__hook_parked, memory_order_relaxed);
  out->slept = atomic_load_explicit(&tdl__hook_slept, memory_order_relaxed);
  out->fds_made_nonblocking = atomic_load_explicit(&tdl__hook_nonblocking, memory_order_relaxed);
}
