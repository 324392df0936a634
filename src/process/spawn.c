/* SPDX-License-Identifier: MIT */
/*
 * tdl_process_spawn, the parent's side: everything that may allocate, search or fail
 * cheaply is done here, before the child exists, so that the child (see
 * child.c) only rearranges fds and calls execve.  In stages, as in musl's
 * posix_spawn: the checks; the environment and the program (path.c); the
 * child's stdio and the error pipe; the clone, with every signal blocked; the
 * child's verdict from the error pipe; the hand-over to the tdl_process.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/sys.h"
#include "process/process_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int tdl__spawn_debug;

/* ---- the child's stack ------------------------------------------------------ */

/* The child runs only spawn_child.c's few frames and system calls; 64 KiB
 * leaves room for sanitizer builds.  One stack is kept for the next spawn:
 * mapping and faulting in a fresh one costs an mmap, an mprotect and page
 * faults, a few percent of a whole spawn.  Concurrent spawns simply map their own. */
#define CHILD_STACK_SIZE (64 * 1024)

static _Atomic(void *) stack_cache;

static void *stack_get(void)
{
  void *s = atomic_exchange(&stack_cache, NULL);
  if (s)
    return s;
  s = TDL__FAULT_MAP(mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0));
  if (s == MAP_FAILED)
    return NULL;
  /* A guard page: an overflow faults in the child instead of scribbling. */
  (void)mprotect(s, (size_t)sysconf(_SC_PAGESIZE), PROT_NONE);
  return s;
}

static void stack_put(void *s)
{
#if defined(__SANITIZE_ADDRESS__)
  /* A child that exec'd left its frames' redzones poisoned in the shadow. */
  __asan_unpoison_memory_region(s, CHILD_STACK_SIZE);
#endif
  void *old = atomic_exchange(&stack_cache, s);
  if (old)
    munmap(old, CHILD_STACK_SIZE);
}

/* ---- stages of tdl_process_spawn ------------------------------------------------ */

static void no_child(tdl_process *p)
{
  p->pid = 0;
  p->pidfd = -1;
  p->stdin_fd = p->stdout_fd = p->stderr_fd = -1;
  p->tdl__state = TDL__PROC_NONE;
  p->tdl__status = 0;
  p->tdl__cb = NULL;
  p->tdl__loop = NULL;
  p->tdl__unwatch = NULL;
  p->tdl__waiting = 0;
}

static int check_options(const tdl_process_options *o)
{
  if (!o->argv || !o->argv[0])
    return -EINVAL;
  if (o->argc) {
    for (size_t i = 0; i < o->argc; i++)
      if (!o->argv[i])
        return -EINVAL;
    if (o->argv[o->argc])
      return -EINVAL;
  }
  if (o->flags & ~(unsigned)(TDL_PROCESS_SETSID | TDL_PROCESS_SETPGID | TDL_PROCESS_KEEP_SIGMASK |
                             TDL_PROCESS_KEEP_SIGPIPE))
    return -EINVAL;
  for (int i = 0; i < 3; i++) {
    tdl_stdio_mode m = o->stdio[i].mode;
    if ((unsigned)m > TDL_STDIO_STDOUT || (m == TDL_STDIO_STDOUT && i != 2))
      return -EINVAL;
    if (m == TDL_STDIO_FD && (o->stdio[i].fd < 0 || fcntl(o->stdio[i].fd, F_GETFD) < 0))
      return -EBADF;
  }
  return tdl__spawn_check_env(o);
}

/* The fds the parent opens for one spawn. */
typedef struct spawn_fds {
  int pipe[3][2]; /* [i][0] the parent's end, [i][1] the child's */
  int devnull;
  int err[2];     /* the error pipe: the child writes its errno into [1] */
} spawn_fds;

static void close_child_ends(spawn_fds *f)
{
  tdl__proc_close(&f->err[1]);
  for (int i = 0; i < 3; i++)
    tdl__proc_close(&f->pipe[i][1]);
  tdl__proc_close(&f->devnull);
}

static void close_all(spawn_fds *f)
{
  close_child_ends(f);
  for (int i = 0; i < 3; i++)
    tdl__proc_close(&f->pipe[i][0]);
  tdl__proc_close(&f->err[0]);
}

/* A pipe for the child's fd i. */
static int open_pipe(spawn_fds *f, int i)
{
  int fds[2];
  if (TDL__FAULT_SYS(EMFILE, pipe2(fds, O_CLOEXEC)) < 0)
    return -errno;
  f->pipe[i][0] = i == 0 ? fds[1] : fds[0];
  f->pipe[i][1] = i == 0 ? fds[0] : fds[1];
  /* Only the parent's end: the child gets an ordinary blocking fd. */
  if (tdl__sys_fcntl(f->pipe[i][0], F_SETFL, O_NONBLOCK) < 0)
    return -errno;
  return 0;
}

/* The child's fds 0-2 (a->src, a->merge_stderr), and the error pipe. */
static int open_stdio(const tdl_process_options *o, tdl__child_args *a, spawn_fds *f)
{
  int r;
  a->merge_stderr = 0;
  for (int i = 0; i < 3; i++) {
    a->src[i] = -1;
    switch (o->stdio[i].mode) {
    case TDL_STDIO_DEFAULT:
    case TDL_STDIO_INHERIT:
      break;
    case TDL_STDIO_NULL:
      if (f->devnull < 0 && (f->devnull = TDL__FAULT_SYS(EMFILE, open("/dev/null", O_RDWR | O_CLOEXEC))) < 0)
        return -errno;
      a->src[i] = f->devnull;
      break;
    case TDL_STDIO_PIPE:
      if ((r = open_pipe(f, i)) < 0)
        return r;
      a->src[i] = f->pipe[i][1];
      break;
    case TDL_STDIO_FD:
      a->src[i] = o->stdio[i].fd;
      break;
    case TDL_STDIO_STDOUT:
      a->merge_stderr = 1;
      break;
    }
  }
  if (TDL__FAULT_SYS(EMFILE, pipe2(f->err, O_CLOEXEC)) < 0)
    return -errno;
  a->err_fd = f->err[1];
  return 0;
}

/* Set once a kernel refuses CLONE_PIDFD (Linux < 5.2): later spawns go
 * straight to pidfd_open. */
static atomic_int clone_pidfd_refused;

/* Start the child on `stack`; *pidfd gets its pidfd if the kernel hands one
 * back.  Returns the pid or -errno.  Once it returns, the child has exec'd
 * or exited (CLONE_VFORK). */
static int clone_child(tdl__child_args *a, void *stack, unsigned flags, int *pidfd)
{
  /* Blocked across the clone so that no handler of ours runs in the child
   * before it has reset them; the child sets its own mask before exec.  The
   * raw call also blocks the two signals libc keeps for itself, which
   * pthread_sigmask() would leave open. */
  sigset_t all, old;
  memset(&all, 0xff, sizeof all); /* sigfillset() leaves libc's two out */
  sigemptyset(&old);
  syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, &old, TDL__KSIGSET_SIZE);
  if (flags & TDL_PROCESS_KEEP_SIGMASK)
    a->mask = old;
  else
    sigemptyset(&a->mask);

  char *top = (char *)stack + CHILD_STACK_SIZE;
  int cf = CLONE_VM | CLONE_VFORK | SIGCHLD, pid;
  *pidfd = -1;
  if (!(a->debug & TDL__DEBUG_NO_PIDFD) && !atomic_load_explicit(&clone_pidfd_refused, memory_order_relaxed)) {
    pid = TDL__FAULT_SYS(EAGAIN, clone(tdl__spawn_child, top, cf | CLONE_PIDFD, a, pidfd));
    if (pid < 0 && errno == EINVAL) {
      atomic_store_explicit(&clone_pidfd_refused, 1, memory_order_relaxed);
      *pidfd = -1;
      pid = TDL__FAULT_SYS(EAGAIN, clone(tdl__spawn_child, top, cf, a));
    }
  } else {
    pid = TDL__FAULT_SYS(EAGAIN, clone(tdl__spawn_child, top, cf, a));
  }
  if (pid < 0)
    pid = -errno;
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, TDL__KSIGSET_SIZE);
  return pid;
}

/* What the child reported through the error pipe (read end `fd`; the write
 * ends are closed): 0 when it exec'd, else its -errno, after reaping it. */
static int exec_error(int fd, int pid)
{
  /* Under a tracer that turns the clone into a fork, this read is what
   * waits for the child. */
  int child_err = 0;
  ssize_t n;
  do
    n = tdl__sys_read(fd, &child_err, sizeof child_err);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof child_err)
    return 0;
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  return -child_err;
}

/* Hand the running child and the parent's pipe ends over to p. */
static void publish(tdl_process *p, int pid, int pidfd, spawn_fds *f, bool want_pidfd)
{
  /* Kernels before 5.2 refuse CLONE_PIDFD, and a tracer that rewrites the
   * clone may not hand the fd back: pidfd_open (Linux >= 5.3) covers both;
   * without it, no pidfd. */
  if (pidfd < 0 && want_pidfd)
    pidfd = (int)TDL__FAULT_SYS(EMFILE, syscall(SYS_pidfd_open, pid, 0));
  p->pid = pid;
  p->pidfd = pidfd < 0 ? -1 : pidfd;
  p->stdin_fd = f->pipe[0][0];
  p->stdout_fd = f->pipe[1][0];
  p->stderr_fd = f->pipe[2][0];
  f->pipe[0][0] = f->pipe[1][0] = f->pipe[2][0] = -1;
  p->tdl__state = TDL__PROC_RUNNING;
}

/* ---- tdl_process_spawn ------------------------------------------------------------------- */

/* Everything but the checks and the environment: fds, the clone, the
 * child's verdict.  Closes every fd it opened but those handed to p. */
static int start(tdl_process *p, const tdl_process_options *o, tdl__child_args *a)
{
  spawn_fds f = {{{-1, -1}, {-1, -1}, {-1, -1}}, -1, {-1, -1}};
  int r = open_stdio(o, a, &f);
  void *stack = NULL;
  if (r == 0 && !(stack = stack_get()))
    r = -ENOMEM;
  int pid = -1, pidfd = -1;
  if (r == 0 && (pid = clone_child(a, stack, o->flags, &pidfd)) < 0)
    r = pid;
  close_child_ends(&f);
  if (r == 0 && (r = exec_error(f.err[0], pid)) < 0)
    tdl__proc_close(&pidfd);
  if (r == 0)
    publish(p, pid, pidfd, &f, !(a->debug & TDL__DEBUG_NO_PIDFD));
  close_all(&f);
  if (stack)
    stack_put(stack);
  return r;
}

TDL_API int tdl_process_spawn(tdl_process *p, const tdl_process_options *o)
{
  if (!p)
    return -EINVAL;
  no_child(p);
  if (!o)
    return -EINVAL;
  int r = check_options(o);
  if (r < 0)
    return r;
  tdl__child_args a;
  char **owned_env;
  if ((r = tdl__spawn_env(o, &a.envp, &owned_env)) < 0)
    return r;
  char path[PATH_MAX];
  if ((r = tdl__spawn_resolve(o, a.envp, path, sizeof path)) == 0) {
    a.path = path;
    a.argv = (char *const *)o->argv;
    a.cwd = o->cwd;
    a.flags = o->flags;
    a.pgid = o->pgid;
    a.debug = tdl__spawn_debug;
    r = start(p, o, &a);
  }
  free(owned_env);
  return r;
}
