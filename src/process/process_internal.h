/* SPDX-License-Identifier: MIT */
/*
 * The process layer's private interfaces:
 *   spawn.c   tdl_process_spawn: checks, fds, the clone
 *   path.c    the child's environment and program (PATH search)
 *   child.c   what the child runs between clone and execve
 *   wait.c    wait, kill, release
 *   watch.c   the loop's child watcher
 *   run.c     tdl_process_run
 */
#ifndef TDL_SPAWN_INT_H
#define TDL_SPAWN_INT_H

#include <signal.h>

#include "base/base.h"
#include "base/clock.h"

/* tdl_process.tdl__state */
enum {
  TDL__PROC_NONE = 0, /* no child: never spawned, failed, or released */
  TDL__PROC_RUNNING,  /* spawned, not reaped */
  TDL__PROC_REAPED,   /* reaped; tdl__status holds how it ended */
  TDL__PROC_LOST,     /* someone else reaped it (waitpid said ECHILD) */
};

/* Everything the child needs, prepared by the parent.  Lives on the parent's
 * stack: the parent is suspended (CLONE_VFORK) while the child uses it. */
typedef struct tdl__child_args {
  const char *path;        /* resolved program */
  char *const *argv;
  char *const *envp;
  const char *cwd;
  int src[3];              /* fd to dup onto 0, 1, 2; -1 to leave it */
  int merge_stderr;        /* dup2(1, 2) after arranging 0 and 1 */
  int err_fd;              /* write end of the close-on-exec error pipe */
  unsigned flags;          /* TDL_PROCESS_* */
  int pgid;
  int debug;               /* tdl__spawn_debug, copied */
  sigset_t mask;           /* the mask to exec with */
} tdl__child_args;

/* path.c.  -EINVAL for an env_set entry without '=' or with an empty name,
 * or an env_unset name that is empty or holds '='. */
int tdl__spawn_check_env(const tdl_process_options *o);
/* The child's environment in *envp, and in *owned what to free() once the
 * child has exec'd (NULL unless env_set or env_unset edit it). */
int tdl__spawn_env(const tdl_process_options *o, char *const **envp, char ***owned);
/* The program to execute (o->file, else argv[0]) into buf: a name without
 * '/' is searched in the PATH of envp, the child's environment.  Returns 0,
 * -ENOENT, -EACCES or -ENAMETOOLONG. */
int tdl__spawn_resolve(const tdl_process_options *o, char *const *envp, char *buf, size_t size);

/* The kernel's sigset is 64 bits; glibc's sigset_t is larger. */
#define TDL__KSIGSET_SIZE 8

/* The child's entry point (runs on the private stack, shares our memory). */
int tdl__spawn_child(void *arg);

/* Test hooks (hidden; the tests link the static library):
 * TDL__DEBUG_NO_CLOSE_RANGE makes the child act as if close_range() were
 * missing, TDL__DEBUG_NO_PROC as if /proc were not mounted too, and
 * TDL__DEBUG_NO_PIDFD makes tdl_process_spawn act as if the kernel had no pidfds. */
#define TDL__DEBUG_NO_CLOSE_RANGE 0x1
#define TDL__DEBUG_NO_PROC 0x2
#define TDL__DEBUG_NO_PIDFD 0x4
extern int tdl__spawn_debug;

/* Reap p's child if it has exited (block = 0) or once it exits (block = 1).
 * Returns 1 when reaped (p->tdl__state is then REAPED), 0 when still running,
 * or a negative errno (-ECHILD). */
int tdl__process_reap(tdl_process *p, int block);

/* How proc waits for an exit nothing signals (no pidfd): waitpid(WNOHANG)
 * checks 1 ms apart at first, backing off to 20 ms. */
static inline tdl__backoff tdl__proc_backoff(void) { return (tdl__backoff){TDL_MSEC, 20 * TDL_MSEC}; }

/* Close *fd if it is open and mark it closed.  Always tdl_close: a loop or a
 * fiber may have watched the fd, and what a loop knows about an fd number
 * must not outlive the file (a later fd with that number would inherit it). */
static inline void tdl__proc_close(int *fd)
{
  if (*fd >= 0) {
    tdl_close(*fd);
    *fd = -1;
  }
}

#endif
