/*
 * tdl_process_spawn, the parent's side: everything that may allocate, search or fail
 * cheaply is done here, before the child exists, so that the child (see
 * spawn_child.c) only rearranges fds and calls execve.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/proc_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

extern char **environ;

int tdl__spawn_debug;

/* ---- the child's stack ------------------------------------------------------ */

/* The child runs only spawn_child.c's few frames and system calls; 64 KiB
 * leaves room for sanitizer builds.  One stack is kept for the next spawn:
 * mapping and faulting in a fresh one costs ~11 us (MEASURED.md), a few
 * percent of a whole spawn.  Concurrent spawns simply map their own. */
#define CHILD_STACK_SIZE (64 * 1024)

static _Atomic(void *) stack_cache;

static void *stack_get(void)
{
  void *s = atomic_exchange(&stack_cache, NULL);
  if (s)
    return s;
  s = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
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

/* ---- environment --------------------------------------------------------------- */

static size_t name_len(const char *entry)
{
  const char *eq = strchr(entry, '=');
  return eq ? (size_t)(eq - entry) : strlen(entry);
}

static int check_env_lists(const tdl_process_options *o)
{
  for (const char *const *e = o->env_set; e && *e; e++)
    if (!strchr(*e, '=') || **e == '=')
      return -EINVAL;
  for (const char *const *e = o->env_unset; e && *e; e++)
    if (**e == '\0' || strchr(*e, '='))
      return -EINVAL;
  return 0;
}

static bool named(const char *entry, const char *name, size_t len)
{
  return strncmp(entry, name, len) == 0 && entry[len] == '=';
}

static bool listed(const char *const *list, const char *entry, bool list_has_values)
{
  size_t len = name_len(entry);
  for (; list && *list; list++) {
    size_t l = list_has_values ? name_len(*list) : strlen(*list);
    if (l == len && strncmp(*list, entry, len) == 0)
      return true;
  }
  return false;
}

/* The child's environment.  Only the edited case allocates (*owned); the
 * strings themselves are never copied. */
static int build_env(const tdl_process_options *o, char *const **envp, char ***owned)
{
  char *const *base = o->env ? (char *const *)o->env : environ;
  *owned = NULL;
  if (!o->env_set && !o->env_unset) {
    *envp = base;
    return 0;
  }
  size_t n = 0, nset = 0;
  for (char *const *e = base; e && *e; e++)
    n++;
  for (const char *const *e = o->env_set; e && *e; e++)
    nset++;
  char **v = malloc((n + nset + 1) * sizeof *v);
  if (!v)
    return -ENOMEM;
  size_t k = 0;
  for (char *const *e = base; e && *e; e++)
    if (!listed(o->env_unset, *e, false) && !listed(o->env_set, *e, true))
      v[k++] = *e;
  for (size_t i = 0; i < nset; i++) /* a later duplicate in env_set wins */
    if (!listed(o->env_set + i + 1, o->env_set[i], true))
      v[k++] = (char *)o->env_set[i];
  v[k] = NULL;
  *envp = v;
  *owned = v;
  return 0;
}

static const char *env_get(char *const *envp, const char *name)
{
  size_t len = strlen(name);
  for (; envp && *envp; envp++)
    if (named(*envp, name, len))
      return *envp + len + 1;
  return NULL;
}

/* ---- PATH search ------------------------------------------------------------------ */

/* execvp's search, done before the child exists.  Like execvp, a match that
 * exists but cannot be executed is skipped and reported as EACCES only if no
 * later entry matches.  Unlike execvp, nothing is ever run through /bin/sh. */
static int resolve(const char *file, const char *path_env, const char *cwd, char *buf, size_t size)
{
  if (file[0] == '\0')
    return -ENOENT;
  if (strchr(file, '/')) {
    if (strlen(file) >= size)
      return -ENAMETOOLONG;
    strcpy(buf, file);
    return 0;
  }
  size_t flen = strlen(file);
  if (flen > NAME_MAX)
    return -ENAMETOOLONG;
  if (!path_env)
    path_env = "/bin:/usr/bin";
  int err = -ENOENT;
  for (const char *dir = path_env;; dir++) {
    const char *end = strchrnul(dir, ':');
    size_t dlen = (size_t)(end - dir);
    /* An empty entry is the working directory; relative entries are taken
     * from the child's working directory, where the child will look. */
    size_t clen = (cwd && (dlen == 0 || dir[0] != '/')) ? strlen(cwd) + 1 : 0;
    if (clen + dlen + 1 + flen < size) {
      char *w = buf;
      if (clen) {
        memcpy(w, cwd, clen - 1);
        w[clen - 1] = '/';
        w += clen;
      }
      memcpy(w, dir, dlen);
      w += dlen;
      if (dlen)
        *w++ = '/';
      memcpy(w, file, flen + 1);
      if (faccessat(AT_FDCWD, buf, X_OK, AT_EACCESS) == 0) {
        struct stat st;
        if (stat(buf, &st) == 0 && S_ISREG(st.st_mode))
          return 0;
        err = -EACCES;
      } else if (errno == EACCES) {
        err = -EACCES;
      }
    }
    if (*end == '\0')
      break;
    dir = end;
  }
  return err;
}

/* ---- tdl_process_spawn ------------------------------------------------------------------- */

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
  return check_env_lists(o);
}

/* Set once a kernel refuses CLONE_PIDFD (Linux < 5.2): later spawns go
 * straight to pidfd_open. */
static atomic_int clone_pidfd_refused;

TDL_API int tdl_process_spawn(tdl_process *p, const tdl_process_options *o)
{
  if (!p)
    return -EINVAL;
  p->pid = 0;
  p->pidfd = -1;
  p->stdin_fd = p->stdout_fd = p->stderr_fd = -1;
  p->tdl__state = TDL__PROC_NONE;
  p->tdl__status = 0;
  p->tdl__cb = NULL;
  p->tdl__loop = NULL;
  p->tdl__unwatch = NULL;
  if (!o)
    return -EINVAL;
  int r = check_options(o);
  if (r < 0)
    return r;

  char *const *envp;
  char **owned_env;
  r = build_env(o, &envp, &owned_env);
  if (r < 0)
    return r;

  char path[PATH_MAX];
  const char *path_env = owned_env || o->env ? env_get(envp, "PATH") : getenv("PATH");
  r = resolve(o->file ? o->file : o->argv[0], path_env, o->cwd, path, sizeof path);
  if (r < 0) {
    free(owned_env);
    return r;
  }

  tdl__child_args a;
  a.path = path;
  a.argv = (char *const *)o->argv;
  a.envp = envp;
  a.cwd = o->cwd;
  a.merge_stderr = 0;
  a.flags = o->flags;
  a.pgid = o->pgid;
  a.debug = tdl__spawn_debug;

  /* pipes[i][0] is the parent's end, pipes[i][1] the child's. */
  int pipes[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
  int devnull = -1, errpipe[2] = {-1, -1};
  void *stack = NULL;
  for (int i = 0; i < 3; i++) {
    a.src[i] = -1;
    switch (o->stdio[i].mode) {
    case TDL_STDIO_DEFAULT:
    case TDL_STDIO_INHERIT:
      break;
    case TDL_STDIO_NULL:
      if (devnull < 0 && (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
        r = -errno;
        goto out;
      }
      a.src[i] = devnull;
      break;
    case TDL_STDIO_PIPE: {
      int fds[2];
      if (pipe2(fds, O_CLOEXEC) < 0) {
        r = -errno;
        goto out;
      }
      pipes[i][0] = i == 0 ? fds[1] : fds[0];
      pipes[i][1] = i == 0 ? fds[0] : fds[1];
      /* Only the parent's end: the child gets an ordinary blocking fd. */
      if (fcntl(pipes[i][0], F_SETFL, O_NONBLOCK) < 0) {
        r = -errno;
        goto out;
      }
      a.src[i] = pipes[i][1];
      break;
    }
    case TDL_STDIO_FD:
      a.src[i] = o->stdio[i].fd;
      break;
    case TDL_STDIO_STDOUT:
      a.merge_stderr = 1;
      break;
    }
  }
  if (pipe2(errpipe, O_CLOEXEC) < 0) {
    r = -errno;
    goto out;
  }
  a.err_fd = errpipe[1];
  if (!(stack = stack_get())) {
    r = -ENOMEM;
    goto out;
  }

  /* Blocked across the clone so that no handler of ours runs in the child
   * before it has reset them; the child sets its own mask before exec.  The
   * raw call also blocks the two signals libc keeps for itself, which
   * pthread_sigmask() would leave open. */
  sigset_t all, old;
  memset(&all, 0xff, sizeof all); /* sigfillset() leaves libc's two out */
  sigemptyset(&old);
  syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, &old, TDL__KSIGSET_SIZE);
  if (o->flags & TDL_PROCESS_KEEP_SIGMASK)
    a.mask = old;
  else
    sigemptyset(&a.mask);

  int pidfd = -1, pid, clone_err = 0;
  int want_pidfd = !(a.debug & TDL__DEBUG_NO_PIDFD);
  int flags = CLONE_VM | CLONE_VFORK | SIGCHLD;
  if (want_pidfd && !atomic_load_explicit(&clone_pidfd_refused, memory_order_relaxed)) {
    pid = clone(tdl__spawn_child, (char *)stack + CHILD_STACK_SIZE, flags | CLONE_PIDFD, &a, &pidfd);
    if (pid < 0 && errno == EINVAL) {
      atomic_store_explicit(&clone_pidfd_refused, 1, memory_order_relaxed);
      pidfd = -1;
      pid = clone(tdl__spawn_child, (char *)stack + CHILD_STACK_SIZE, flags, &a);
    }
  } else {
    pid = clone(tdl__spawn_child, (char *)stack + CHILD_STACK_SIZE, flags, &a);
  }
  if (pid < 0)
    clone_err = errno;
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, TDL__KSIGSET_SIZE);

  /* The child has exec'd or exited (CLONE_VFORK); under a tracer that turns
   * the clone into a fork, the read below waits for it instead. */
  tdl__proc_close(&errpipe[1]);
  for (int i = 0; i < 3; i++)
    tdl__proc_close(&pipes[i][1]);
  tdl__proc_close(&devnull);
  if (pid < 0) {
    r = -clone_err;
    goto out;
  }

  int child_err = 0;
  ssize_t n;
  do
    n = read(errpipe[0], &child_err, sizeof child_err);
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof child_err) {
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
      ;
    tdl__proc_close(&pidfd);
    r = -child_err;
    goto out;
  }

  /* Kernels before 5.2 refuse CLONE_PIDFD, and a tracer that rewrites the
   * clone may not hand the fd back: pidfd_open (Linux >= 5.3) covers both;
   * without it, no pidfd. */
  if (pidfd < 0 && want_pidfd)
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  p->pid = pid;
  p->pidfd = pidfd < 0 ? -1 : pidfd;
  p->stdin_fd = pipes[0][0];
  p->stdout_fd = pipes[1][0];
  p->stderr_fd = pipes[2][0];
  pipes[0][0] = pipes[1][0] = pipes[2][0] = -1;
  p->tdl__state = TDL__PROC_RUNNING;
  r = 0;

out:
  for (int i = 0; i < 3; i++) {
    tdl__proc_close(&pipes[i][0]);
    tdl__proc_close(&pipes[i][1]);
  }
  tdl__proc_close(&devnull);
  tdl__proc_close(&errpipe[0]);
  tdl__proc_close(&errpipe[1]);
  if (stack)
    stack_put(stack);
  free(owned_env);
  return r;
}
