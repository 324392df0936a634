/*
 * Spawn's private interfaces:
 *   spawn.c        tdl_process_spawn: checks, PATH search, environment, fds, the clone
 *   spawn_child.c  what the child runs between clone and execve
 *   spawn_wait.c   wait, kill, release
 *   spawn_watch.c  the loop's child watcher (the only part that needs a loop)
 *   spawn_run.c    tdl_process_run
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

#endif
