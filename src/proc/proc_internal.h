/*
 * The process layer's private interfaces:
 *   spawn.c   tdl_process_spawn: checks, fds, the clone
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
  unsigned flags;          /* TDL_SPAWN_* */
  int pgid;
  int debug;               /* tdl__spawn_debug, copied */
  sigset_t mask;           /* the mask to exec with */
} tdl__child_args;

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
