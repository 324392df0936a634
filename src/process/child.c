/* SPDX-License-Identifier: MIT */
/*
 * The child side of tdl_process_spawn: from clone(CLONE_VM|CLONE_VFORK) to execve.
 *
 * This runs on a private stack in the parent's address space while the parent
 * is suspended, so it may only make system calls: no malloc, no stdio, no
 * locks, nothing that touches state the parent relies on.  Everything goes
 * through syscall() so that no libc or sanitizer wrapper runs here.  It never
 * calls a noreturn function either: it returns, and clone's trampoline exits.
 * Any failure is written to the error pipe (close-on-exec, so a successful
 * exec closes it empty) and the child exits 127.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "process/process_internal.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static int fail(int err_fd, int err)
{
  syscall(SYS_write, err_fd, &err, sizeof err);
  return 127;
}

/* The child shares the parent's handlers' code and data: a handler running
 * here could corrupt the parent.  Handlers go back to SIG_DFL (exec would do
 * that too, but a signal may arrive between the unblocking and the exec). */
static void reset_signals(unsigned flags)
{
  for (int sig = 1; sig < _NSIG; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP)
      continue;
    /* handler, flags, restorer, mask: large enough for every architecture's
     * struct k_sigaction; only the handler (first) is looked at. */
    unsigned long old[4] = {0, 0, 0, 0};
    if (syscall(SYS_rt_sigaction, sig, NULL, old, TDL__KSIGSET_SIZE) != 0)
      continue;
    uintptr_t h = old[0];
    if (h == (uintptr_t)SIG_DFL)
      continue;
    if (h == (uintptr_t)SIG_IGN && (sig != SIGPIPE || (flags & TDL_PROCESS_KEEP_SIGPIPE)))
      continue;
    unsigned long dfl[4] = {0, 0, 0, 0};
    syscall(SYS_rt_sigaction, sig, dfl, NULL, TDL__KSIGSET_SIZE);
  }
}

struct dirent64_hdr {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[];
};

/* close_range() is missing (Linux < 5.9): close what /proc/self/fd lists, or
 * every number up to the fd limit when /proc is not mounted.  Closing while
 * listing is safe: the listing's position is an fd number. */
static void close_fds_slowly(int keep, int debug)
{
  int dfd = -1;
  if (!(debug & TDL__DEBUG_NO_PROC))
    dfd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    _Alignas(8) char buf[1024];
    long n;
    while ((n = syscall(SYS_getdents64, dfd, buf, sizeof buf)) > 0) {
      for (long off = 0; off < n;) {
        struct dirent64_hdr *d = (struct dirent64_hdr *)(void *)(buf + off);
        off += d->reclen;
        int fd = 0;
        const char *s = d->name;
        if (*s < '0' || *s > '9')
          continue;
        while (*s >= '0' && *s <= '9')
          fd = fd * 10 + (*s++ - '0');
        if (fd >= 3 && fd != keep && fd != dfd)
          syscall(SYS_close, fd);
      }
    }
    syscall(SYS_close, dfd);
    return;
  }
  struct rlimit rl;
  long max = 65536;
  if (syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < (rlim_t)max)
    max = (long)rl.rlim_cur;
  for (long fd = 3; fd < max; fd++)
    if (fd != keep)
      syscall(SYS_close, fd);
}

static void close_other_fds(int keep, int debug)
{
  if (!(debug & TDL__DEBUG_NO_CLOSE_RANGE)) {
    /* Linux >= 5.11: mark everything close-on-exec in one call; the error
     * pipe stays usable until the exec. */
    if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) == 0)
      return;
    /* Linux 5.9, 5.10: close around the error pipe (keep >= 3). */
    if ((keep == 3 || syscall(SYS_close_range, 3u, (unsigned)keep - 1, 0u) == 0) &&
        syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0u) == 0)
      return;
  }
  close_fds_slowly(keep, debug);
}

int tdl__spawn_child(void *arg)
{
  const tdl__child_args *a = arg;
  int err_fd = a->err_fd;
  int src[3] = {a->src[0], a->src[1], a->src[2]};

  /* Everything below dup2()s onto 0-2: move the error pipe above them. */
  if (err_fd < 3) {
    int fd = (int)syscall(SYS_fcntl, err_fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
      return fail(err_fd, errno);
    err_fd = fd;
  }

  reset_signals(a->flags);

  if ((a->flags & TDL_PROCESS_SETSID) && syscall(SYS_setsid) < 0)
    return fail(err_fd, errno);
  if ((a->flags & TDL_PROCESS_SETPGID) && syscall(SYS_setpgid, 0, a->pgid) < 0)
    return fail(err_fd, errno);

  /* A source among 0-2 that is not its own target could be overwritten by an
   * earlier dup2 (stdout <-> stderr swaps): move those out of the way first. */
  for (int i = 0; i < 3; i++) {
    if (src[i] >= 0 && src[i] < 3 && src[i] != i) {
      int fd = (int)syscall(SYS_fcntl, src[i], F_DUPFD_CLOEXEC, 3);
      if (fd < 0)
        return fail(err_fd, errno);
      src[i] = fd;
    }
  }
  for (int i = 0; i < 3; i++) {
    if (src[i] < 0)
      continue;
    long r = src[i] == i ? syscall(SYS_fcntl, i, F_SETFD, 0) : syscall(SYS_dup3, src[i], i, 0);
    if (r < 0)
      return fail(err_fd, errno);
  }
  if (a->merge_stderr && syscall(SYS_dup3, 1, 2, 0) < 0)
    return fail(err_fd, errno);

  if (a->cwd && syscall(SYS_chdir, a->cwd) < 0)
    return fail(err_fd, errno);

  close_other_fds(err_fd, a->debug);

  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &a->mask, NULL, TDL__KSIGSET_SIZE);
  syscall(SYS_execve, a->path, a->argv, a->envp);
  return fail(err_fd, errno);
}
