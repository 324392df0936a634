/* SPDX-License-Identifier: MIT */
/*
 * libtreadle-hook's insides: libc's blocking calls, parking the fiber
 * instead of the thread (include/treadle/hook.h says what the user sees).
 *
 * Each interposed function asks first whether it runs in a fiber; outside
 * one it is libc's function (resolved once with dlsym(RTLD_NEXT)), except
 * on an fd this library made non-blocking underneath, where EAGAIN turns
 * into a poll(2) and a retry, as the blocking fd would have done.
 *
 *   hook.c    libc's functions, the child of a fork, the statistics
 *   state.c   the user's view of each fd
 *   io.c      read, write, send, recv, ..., accept, connect: try, and wait on EAGAIN
 *   poll.c    poll, ppoll, select, pselect: park on every watchable fd at once
 *   fd.c      close, dup, fcntl, ioctl, setsockopt, and the calls that make fds
 *   sleep.c   the sleeps
 *   names.c   getaddrinfo, getnameinfo, gethostbyname*: libc's function on
 *             the pool's name lane
 *
 * Per fd (a table by fd number, in chunks made on first use and never
 * freed, so a look-up takes no lock): what kind of file it is (a socket or
 * pipe can be waited for; a character or anonymous file can be polled while
 * non-blocking; anything else passes through), the user's
 * O_NONBLOCK, whether we set O_NONBLOCK underneath, whether treadle's
 * fiber I/O knows it (then close goes through tdl_close), and the
 * SO_RCVTIMEO/SO_SNDTIMEO the user set.  The table is the user's view of
 * the fd; treadle's own view is fiber I/O's, and treadle's own calls never
 * come here (src/base/sys.h).
 */
#ifndef TDL_HOOK_INTERNAL_H
#define TDL_HOOK_INTERNAL_H

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "treadle/hook.h"

/* The address arguments as libc declares them: glibc (with _GNU_SOURCE)
 * uses transparent unions (types, or macros without it), which an
 * interposed definition must match; musl plain pointers. */
#ifdef __GLIBC__
#define TDL__SA_ARG __SOCKADDR_ARG
#define TDL__CSA_ARG __CONST_SOCKADDR_ARG
#define TDL__IOCTL_REQ unsigned long
#else
#define TDL__SA_ARG struct sockaddr *
#define TDL__CSA_ARG const struct sockaddr *
#define TDL__IOCTL_REQ int
#endif

/* An interposed function: exported, unlike everything else here. */
#define TDL__HOOK __attribute__((visibility("default")))

/* Everything declared from here on is the library's own: its files reach
 * each other's data without going through the GOT, as one file's would. */
#pragma GCC visibility push(hidden)

/* ---- libc's functions (hook.c) ---- */

extern struct tdl__hook_libc {
  ssize_t (*read)(int, void *, size_t);
  ssize_t (*write)(int, const void *, size_t);
  ssize_t (*readv)(int, const struct iovec *, int);
  ssize_t (*writev)(int, const struct iovec *, int);
  ssize_t (*recv)(int, void *, size_t, int);
  ssize_t (*send)(int, const void *, size_t, int);
  ssize_t (*recvfrom)(int, void *, size_t, int, TDL__SA_ARG, socklen_t *);
  ssize_t (*sendto)(int, const void *, size_t, int, TDL__CSA_ARG, socklen_t);
  ssize_t (*recvmsg)(int, struct msghdr *, int);
  ssize_t (*sendmsg)(int, const struct msghdr *, int);
  int (*accept)(int, TDL__SA_ARG, socklen_t *);
  int (*accept4)(int, TDL__SA_ARG, socklen_t *, int);
  int (*connect)(int, TDL__CSA_ARG, socklen_t);
  int (*poll)(struct pollfd *, nfds_t, int);
  int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
  int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
  int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
  int (*ioctl)(int, TDL__IOCTL_REQ, ...);
  int (*getaddrinfo)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
  int (*getnameinfo)(const struct sockaddr *, socklen_t, char *, socklen_t, char *, socklen_t, int);
  int (*gethostbyname2_r)(const char *, int, struct hostent *, char *, size_t, struct hostent **, int *);
  int (*gethostbyname_r)(const char *, struct hostent *, char *, size_t, struct hostent **, int *);
  struct hostent *(*gethostbyname)(const char *);
  struct hostent *(*gethostbyname2)(const char *, int);
  int (*close)(int);
  int (*fcntl)(int, int, ...);
  int (*fcntl64)(int, int, ...);
  int (*setsockopt)(int, int, int, const void *, socklen_t);
  int (*socket)(int, int, int);
  int (*socketpair)(int, int, int, int[2]);
  int (*pipe)(int[2]);
  int (*pipe2)(int[2], int);
  int (*dup)(int);
  int (*dup2)(int, int);
  int (*dup3)(int, int, int);
  unsigned (*sleep)(unsigned);
  int (*usleep)(useconds_t);
  int (*nanosleep)(const struct timespec *, struct timespec *);
  int (*clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);
} tdl__hook_real;

extern atomic_bool tdl__hook_resolved;
void tdl__hook_resolve(void);

/* Every entry point starts here: something may call read() before our
 * constructor has run (another library's constructor). */
#define TDL__HOOK_READY()                                                                \
  do {                                                                                   \
    if (TDL__UNLIKELY(!atomic_load_explicit(&tdl__hook_resolved, memory_order_acquire))) \
      tdl__hook_resolve();                                                               \
  } while (0)

/* ---- the child of a fork (hook.c) ---- */

extern bool tdl__hook_forked;           /* this process is a child of a fork */
extern tdl_loop *tdl__hook_forked_loop; /* the loop the fork came from, or NULL */

/* Whether the caller is a fiber the hook may park. */
static inline bool tdl__hook_in_fiber(void)
{
  tdl_loop *loop = tdl_fiber_loop(); /* NULL outside a fiber */
  return loop != NULL && (TDL__LIKELY(!tdl__hook_forked) || loop != tdl__hook_forked_loop);
}

/* A cancelled fiber's calls that could wait are refused before they do
 * anything, also those that would not have had to wait (data already
 * there, a send that fits): fiber.h promises that every blocking call after
 * a cancel fails, and a library that carries on after its read failed must
 * not get a request to the peer afterwards.  true, with errno ECANCELED,
 * when the running fiber has been cancelled. */
static inline bool tdl__hook_refused(void)
{
  if (TDL__LIKELY(!tdl_fiber_cancelled()))
    return false;
  errno = ECANCELED;
  return true;
}

/* ---- statistics (hook.c) ---- */

extern _Atomic uint64_t tdl__hook_parked, tdl__hook_slept, tdl__hook_nonblocking;
#define TDL__HOOK_COUNT(c) atomic_fetch_add_explicit(&tdl__hook_##c, 1, memory_order_relaxed)

/* ---- the user's view of each fd (state.c) ---- */

/* TDL__HFD_POLLABLE: a character device or an anonymous file (terminal,
 * eventfd, timerfd, ...): the loop can watch it, but the hook does not wait
 * for its reads and writes, and poll parks on it only while the user keeps
 * it non-blocking (O_NONBLOCK set under a terminal would show in every
 * process sharing it).  TDL__HFD_OTHER: regular files, directories, block
 * devices (always ready). */
enum { TDL__HFD_UNKNOWN, TDL__HFD_OTHER, TDL__HFD_POLLABLE, TDL__HFD_WAITABLE };

typedef struct tdl__hfd {
  uint8_t kind;      /* TDL__HFD_*: a socket or pipe is TDL__HFD_WAITABLE */
  uint8_t user_nb;   /* the user's O_NONBLOCK */
  uint8_t our_nb;    /* we set O_NONBLOCK underneath (hidden from F_GETFL) */
  uint8_t in_fio;    /* treadle's fiber I/O has state for it: close with tdl_close */
  uint8_t stream;    /* a pipe or stream socket: a short read empties it */
  uint8_t empty;     /* in a fiber, the last read was short: the next parks first */
  /* Closed outside a fiber while fiber I/O had state for it: the loop that
   * has it is another thread's, so the number's next use in a fiber makes
   * its own loop forget it first (tdl_fd_forget), lest a new file with the
   * number be taken for the old one.  Kept across the reset of a close. */
  uint8_t stale;
  /* A hooked call on it was cut by a cancel (tdl_fiber_cancel) in a fiber:
   * the library using it may be in the middle of an exchange, so every
   * later call on it fails (ECONNABORTED; poll reports POLLERR), also one
   * that passes through (tdl__hfd_passes_cut), until it is closed, and no
   * later request reads an earlier one's reply.  Every number of the same
   * file is cut too (the same connection), made before the cut or after;
   * close clears it. */
  uint8_t cut;
  /* A number dup'd from it or it from another (duped in fd.c): a cut looks
   * for the others sharing its file only then, so that a cut costs no
   * system call for the connections no one dup'd. */
  uint8_t dupped;
  /* In a fiber, a read of the user's that passed through (a non-blocking
   * fd: libpq's, MariaDB's) found the stream empty (EAGAIN, or a short
   * read), and told fiber I/O so (tdl_fd_blocked): a poll for reading that
   * follows parks first instead of looking (poll.c's poll_drained).  A
   * poll in a fiber that may wait clears it. */
  uint8_t drained;
  tdl_time_t rcvtimeo, sndtimeo; /* as durations; 0: none */
} tdl__hfd;

/* A cancel cut a hooked call on fd: mark it cut if it is a connected
 * stream socket (a pipe, say a fiber's stdout, a socketpair or a listener
 * has no exchange to cut).  errno is kept. */
void tdl__hfd_cut(int fd, tdl__hfd *h);
/* A call on an fd cut by a cancel (tdl__hfd.cut) fails: true, errno set. */
static inline bool tdl__hfd_is_cut(const tdl__hfd *h)
{
  if (TDL__LIKELY(!h->cut))
    return false;
  errno = ECONNABORTED;
  return true;
}

#define TDL__HFD_CHUNK_BITS 10
#define TDL__HFD_CHUNK ((size_t)1 << TDL__HFD_CHUNK_BITS)
#define TDL__HFD_NCHUNKS ((size_t)1 << 10) /* fds up to 2^20 */
extern _Atomic(tdl__hfd *) tdl__hfd_chunks[TDL__HFD_NCHUNKS];

/* fd's state if its chunk exists, else NULL. */
static inline tdl__hfd *tdl__hfd_peek(int fd)
{
  if ((unsigned)fd >= TDL__HFD_CHUNK * TDL__HFD_NCHUNKS)
    return NULL;
  tdl__hfd *c = atomic_load_explicit(&tdl__hfd_chunks[(unsigned)fd >> TDL__HFD_CHUNK_BITS], memory_order_acquire);
  return c ? &c[(unsigned)fd & (TDL__HFD_CHUNK - 1)] : NULL;
}

/* A call that passes through (on an fd the user made non-blocking, with
 * MSG_DONTWAIT, ...) on an fd cut by a cancel fails all the same: libpq,
 * libcurl and MariaDB Connector/C keep their sockets non-blocking, and a
 * read that went to the kernel would hand them the cancelled request's
 * reply.  true, errno set (ECANCELED in the cancelled fiber itself, as its
 * other calls fail). */
static inline bool tdl__hfd_passes_cut(int fd)
{
  const tdl__hfd *h = tdl__hfd_peek(fd);
  if (TDL__LIKELY(!h || !h->cut))
    return false;
  errno = tdl__hook_in_fiber() && tdl_fiber_cancelled() ? ECANCELED : ECONNABORTED;
  return true;
}

/* fd's state, its chunk made on first use; NULL out of range or memory. */
tdl__hfd *tdl__hfd_at(int fd);

/* A call that makes a file returned fd (or failed, fd < 0): the number is a
 * new file's, whose state starts afresh (in a fiber, its loop forgets a
 * number closed outside one).  Returns fd. */
int tdl__hfd_made(int fd);

/* Look at fd the first time: its kind and the user's O_NONBLOCK. */
void tdl__hfd_classify(int fd, tdl__hfd *h);

/* In a fiber: fd's state when calls on it are ours to wait for (a socket or
 * pipe the user left blocking), made non-blocking underneath; NULL when the
 * call passes through.  The first look is inline: an fd whose kind is
 * known, that is not stale, and that the user made non-blocking (libpq's,
 * libcurl's) or that is already non-blocking underneath is answered
 * without a call; the rest (first use, a stale number, O_NONBLOCK still
 * to set) goes to tdl__hfd_hooked_slow. */
tdl__hfd *tdl__hfd_hooked_slow(int fd);
static inline tdl__hfd *tdl__hfd_hooked(int fd)
{
  tdl__hfd *h = tdl__hfd_peek(fd);
  if (TDL__LIKELY(h && h->kind != TDL__HFD_UNKNOWN && !h->stale)) {
    if (h->kind != TDL__HFD_WAITABLE || h->user_nb)
      return NULL;
    if (h->our_nb)
      return h;
  }
  return tdl__hfd_hooked_slow(fd);
}

/* Outside a fiber: fd's state when it is a socket or pipe the user wants
 * blocking, which we may have made non-blocking underneath, through this
 * number or another sharing its file (a dup): then EAGAIN must become a
 * wait (io.c's wait_ready tells that from a blocking fd's own timeout);
 * else NULL. */
static inline tdl__hfd *tdl__hfd_blocking_under(int fd)
{
  tdl__hfd *h = tdl__hfd_peek(fd);
  return h && h->kind == TDL__HFD_WAITABLE && !h->user_nb ? h : NULL;
}

/* The user wants fd blocking, yet the file is non-blocking: that is ours,
 * set through this number or another that shares the file. */
bool tdl__hfd_nonblocking_underneath(int fd, const tdl__hfd *h);

#pragma GCC visibility pop

/* A timespec as nanoseconds (tv_sec >= 0), saturating at TDL_TIME_MAX. */
static inline tdl_time_t tdl__hook_ts_ns(const struct timespec *ts)
{
  return ts->tv_sec > INT64_MAX / TDL_SEC - 1 ? TDL_TIME_MAX : (tdl_time_t)ts->tv_sec * TDL_SEC + ts->tv_nsec;
}

/* now + ns as the deadline of a timeout the user gave (a sleep, a poll's,
 * SO_RCVTIMEO's), now read from the clock: in a fiber tdl_now() is the
 * loop's cached time, as old as the running fiber's turn, which a
 * computation may have made long, and a timeout counted from it would end
 * early (the kernel's lasts at least what was asked, from the call). */
static inline tdl_time_t tdl__hook_after(tdl_time_t ns)
{
  tdl_loop *loop = tdl_fiber_loop();
  if (loop)
    tdl_loop_update_time(loop);
  return tdl_after(ns);
}

#endif /* TDL_HOOK_INTERNAL_H */
