/* SPDX-License-Identifier: MIT */
/*
 * Starting programs without a shell, waiting for them, capturing their output.
 * Include <treadle.h>, not this file.  Linux only.
 *
 * A program is started the way musl's posix_spawn and Go's os/exec start one:
 * the parent resolves the program in PATH, builds the environment and opens
 * the pipes, then clone(CLONE_VM|CLONE_VFORK) runs a child on a small private
 * stack that only rearranges fds, resets signals and calls execve().  The
 * parent's page tables are never copied, so the cost does not grow with the
 * parent's size (a 2 GiB parent spawns as fast as a small one), and there is
 * no shell: argv reaches the program exactly as given, nothing is parsed.
 * This is the way to start a program from a process with loops: fork()
 * there leaves the child little it may do (see "fork()" in treadle.h).
 *
 * WHO REAPS (no zombie is ever left behind by treadle):
 *  - tdl_process_wait() reaps the child when it has exited;
 *  - a child watcher (tdl_process_watch) reaps it before calling back;
 *  - tdl_process_destroy() on a child that nobody has reaped yet kills it
 *    with SIGKILL and reaps it (it blocks for the few microseconds the kernel
 *    takes to tear it down).  To let a program outlive your handle, make it
 *    daemonize itself, or keep the handle and wait for it later;
 *  - a failed tdl_process_spawn() has reaped whatever child it started;
 *  - tdl_process_run() reaps its child before it returns, whatever ends it.
 *  A fiber whose wait is cancelled or times out leaves the child to whoever
 *  releases the handle, by the same rule.
 *  The library reaps by pid (waitpid) only, never with waitpid(-1): code
 *  elsewhere in the process that reaps every child (waitpid(-1, ...), or
 *  SIGCHLD set to SIG_IGN) steals the status, and treadle then reports
 *  -ECHILD.
 *
 * Requirements: Linux >= 5.3 for pidfds (child exit as a readable fd; signals
 * without a pid-reuse race); on older kernels treadle falls back to waitpid
 * and SIGCHLD and says so nowhere but in tdl_process.pidfd == -1.  close_range()
 * (>= 5.11 for the close-on-exec form) is used where present, else the child
 * walks /proc/self/fd.
 */
#ifndef TREADLE_SPAWN_H
#define TREADLE_SPAWN_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

/* What one of the child's fds 0, 1, 2 is connected to. */
typedef enum tdl_stdio_mode {
  TDL_STDIO_DEFAULT = 0, /* tdl_process_spawn: inherit; tdl_process_run: see there */
  TDL_STDIO_INHERIT,     /* the parent's fd of the same number */
  TDL_STDIO_NULL,        /* /dev/null, opened read-write */
  TDL_STDIO_PIPE,        /* a new pipe; the parent's end is returned in
                            tdl_process.stdin_fd/stdout_fd/stderr_fd,
                            O_NONBLOCK | O_CLOEXEC (ready for a loop) */
  TDL_STDIO_FD,          /* the caller's open fd `fd` (dup'ed in the child;
                            the caller's fd is left untouched) */
  TDL_STDIO_STDOUT,      /* stderr only: wherever the child's stdout goes
                            (2>&1) */
} tdl_stdio_mode;

typedef struct tdl_stdio {
  tdl_stdio_mode mode;
  int fd; /* for TDL_STDIO_FD */
} tdl_stdio;

/* Flags of tdl_process_options.flags. */
#define TDL_PROCESS_SETSID 0x1u       /* the child starts a new session (setsid) */
#define TDL_PROCESS_SETPGID 0x2u      /* the child joins process group `pgid`
                                       (0: a new group led by the child) */
#define TDL_PROCESS_KEEP_SIGMASK 0x4u /* the child keeps the calling thread's
                                       signal mask (default: empty mask) */
#define TDL_PROCESS_KEEP_SIGPIPE 0x8u /* keep SIGPIPE ignored in the child if it
                                       is ignored here (default: SIG_DFL) */

/*
 * What to run and how.  Zero-initialise, then set what you need: the zero
 * value inherits stdin/stdout/stderr, environment and working directory.
 * Nothing is kept after the call returns: strings and arrays need only live
 * until then.
 */
typedef struct tdl_process_options {
  /* The argument vector, NULL-terminated; argv[0] is the program unless
   * `file` is set.  Passed to the program as is: no shell, no splitting. */
  const char *const *argv;
  /* 0, or the number of arguments: then argv[0..argc-1] must all be non-NULL
   * and argv[argc] NULL, so that a NULL in the wrong place is caught. */
  size_t argc;
  /* The program to execute, if not argv[0].  A name without '/' is searched
   * in PATH (the child's PATH when `env`, `env_set` or `env_unset` changes it;
   * "/bin:/usr/bin" when PATH is unset) by the parent, before the child
   * exists; a name with '/' is used as is, relative to the child's working
   * directory.  Never run through /bin/sh, even when execve fails with
   * ENOEXEC. */
  const char *file;
  /* The environment, "NAME=value" strings, NULL-terminated: NULL inherits the
   * process's environ; non-NULL replaces it. */
  const char *const *env;
  /* Then: "NAME=value" entries to add or override, and NAMEs to remove
   * (NULL-terminated; NULL for none).  If a name is in both, env_set wins. */
  const char *const *env_set;
  const char *const *env_unset;
  /* The child's working directory (NULL: the parent's).  A relative PATH
   * entry is searched relative to it. */
  const char *cwd;
  /* stdio[0], [1], [2]: the child's stdin, stdout, stderr. */
  tdl_stdio stdio[3];
  unsigned flags; /* TDL_PROCESS_* */
  int pgid;       /* with TDL_PROCESS_SETPGID */
} tdl_process_options;

/* ------------------------------------------------------------------------ */
/* Processes                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct tdl_process tdl_process;
typedef void (*tdl_process_cb)(tdl_loop *loop, tdl_process *p, int status);

/*
 * A started child.  Caller-owned: tdl_process_spawn() fills it in.  The public fields
 * may be read; stdin_fd/stdout_fd/stderr_fd may also be taken (close the fd
 * yourself and set the field to -1).  Everything else is private.
 */
struct tdl_process {
  void *data;    /* the caller's; tdl_process_spawn() leaves it alone */
  int pid;       /* the child's pid; 0 when there is no child */
  int pidfd;     /* the child's pidfd (close-on-exec), or -1 */
  int stdin_fd;  /* parent ends of TDL_STDIO_PIPE streams, else -1 */
  int stdout_fd;
  int stderr_fd;
  /* private */
  int tdl__state;
  int tdl__status;
  int tdl__waiting; /* fibers inside tdl_process_wait on it */
  tdl_process_cb tdl__cb;
  tdl_loop *tdl__loop;
  void (*tdl__unwatch)(tdl_process *p);
  union {
    tdl_io io; /* watching the pidfd */
    struct {
      tdl_signal sig; /* no pidfd: SIGCHLD */
      tdl_defer check;
    } chld;
  } tdl__w;
};

/*
 * Start a program.  p is filled in (all fields but `data`; it must not hold a
 * child: release that first); on failure p holds no child (pid 0, fds -1) and
 * tdl_process_destroy(p) is harmless.
 *
 * The child: its fds 0-2 as asked; every other fd closed (close_range, or a
 * walk of /proc/self/fd); every signal that has a handler here reset to
 * SIG_DFL, SIGPIPE reset to SIG_DFL (unless TDL_PROCESS_KEEP_SIGPIPE), other
 * ignored signals left ignored (as nohup expects); the signal mask empty
 * (or the caller's with TDL_PROCESS_KEEP_SIGMASK); then setsid/setpgid, the
 * working directory, and execve.  All signals are blocked in the calling
 * thread across the clone, so no handler of the parent ever runs in the
 * child.  Safe to call from several threads at once.
 *
 * Errors, returned by this call (the child's exec errors included; none is
 * disguised as exit status 127), with no child left behind and no fd leaked:
 *  -EINVAL   p, o or argv NULL; argv empty; argc given and argv[0..argc-1]
 *            holds a NULL or argv[argc] is not NULL; an env_set entry without
 *            '=' or with an empty name; an env_unset name empty or holding
 *            '='; a stdio mode out of range, TDL_STDIO_STDOUT for fd 0 or 1;
 *            an unknown flag
 *  -EBADF    a TDL_STDIO_FD fd that is not open
 *  -ENOENT   the program (or a path component, or cwd) does not exist, or
 *            is not found in PATH; an empty program name
 *  -EACCES   not executable (or a PATH match that is not executable, when no
 *            executable one exists), or search permission denied
 *  -ENOEXEC  not a recognised executable format (e.g. a script without #!)
 *  -E2BIG    argv + environment too large; -ENAMETOOLONG; -ENOTDIR; -ELOOP;
 *            -ETXTBSY; -EISDIR ... anything else execve or chdir returns
 *  -EPERM    setsid/setpgid refused
 *  -EMFILE, -ENFILE  out of fds (pipes, /dev/null, the pidfd)
 *  -EAGAIN   out of processes (RLIMIT_NPROC, pid_max, cgroup pids.max)
 *  -ENOMEM
 * Cost: 7 system calls in the parent (3 more per pipe, 1 for /dev/null) plus
 * the kernel's clone and exec, whatever the parent's size; in the child one
 * per signal (64) to inspect dispositions, one per reset, and a few for the
 * fds; waiting and releasing add 2 (wait4, close of the pidfd).
 */
TDL_API int tdl_process_spawn(tdl_process *p, const tdl_process_options *o);

/*
 * Decoding a status.  A status is a waitpid()-style int (the W* macros of
 * <sys/wait.h> work on it too): the child either exited with a code or was
 * terminated by a signal.
 */
static inline bool tdl_process_exited(int status) { return (status & 0x7f) == 0; }
static inline int tdl_process_exit_code(int status) { return (status >> 8) & 0xff; }
static inline bool tdl_process_signaled(int status) { return (status & 0x7f) != 0; }
static inline int tdl_process_term_signal(int status) { return status & 0x7f; }
static inline bool tdl_process_core_dumped(int status) { return (status & 0x80) != 0; }

/*
 * Wait until the child has exited or the deadline (absolute, CLOCK_MONOTONIC
 * ns: the loop clock; TDL_FOREVER for none; a past deadline only looks)
 * passes.  On success the child is reaped, *status (if status is not NULL)
 * holds how it ended, and later calls return the same status at once.
 *
 * From a fiber, only that fiber waits: it parks on the pidfd (without a
 * pidfd it sleeps between checks, 1 to 20 ms apart) and the loop runs on.
 * Outside a fiber the calling thread blocks: poll() on the pidfd (waitpid
 * directly for TDL_FOREVER; without a pidfd, waitpid(WNOHANG) polled with a
 * backoff of 1 to 20 ms).
 * Errors: -ETIMEDOUT (the child is still running and still yours);
 * -ECANCELED (from a cancelled fiber: likewise, the child is still yours and
 * tdl_process_destroy() reaps it);
 * -EINVAL (p NULL or holds no child); -EBUSY (a watcher is started on p);
 * -ECHILD (someone else reaped the child: see WHO REAPS).
 */
TDL_API int tdl_process_wait(tdl_process *p, int *status, tdl_time_t deadline);

/*
 * Send a signal (0 only checks).  Uses pidfd_send_signal when there is a
 * pidfd, and the pid otherwise; either way the signal cannot reach another
 * process that reused the pid, since the pid stays taken until the child is
 * reaped.  Signalling a child that has exited but is not yet reaped succeeds
 * and does nothing.  Errors: -EINVAL (bad p or signal); -ESRCH (already
 * reaped); -EPERM.
 */
TDL_API int tdl_process_kill(tdl_process *p, int sig);

/*
 * Call cb(loop, p, status) from the loop once the child has exited; the child
 * is reaped just before the call (status is -ECHILD if someone else reaped
 * it: see WHO REAPS).  Built on an I/O watcher on the pidfd
 * (readable when the child exits; one arrival, which is all it needs), or,
 * without a pidfd, on a SIGCHLD signal watcher (then only one loop in the
 * process may watch children).  The watcher keeps the loop alive.  The
 * callback may release and free p.
 * Errors: -EINVAL (NULL argument, p holds no child, already reaped, or
 * watched already); the errors of tdl_io_start / tdl_signal_start.
 */
TDL_API int tdl_process_watch(tdl_loop *loop, tdl_process *p, tdl_process_cb cb);

/* Stop watching (the child stays unreaped and yours).  Does nothing if p is
 * not watched. */
TDL_API void tdl_process_unwatch(tdl_process *p);

/*
 * Give back what p holds: stop its watcher, close its pidfd and the pipe
 * ends still held in stdin_fd/stdout_fd/stderr_fd, and, if the child has not
 * been reaped, kill it (SIGKILL) and reap it.  Afterwards p holds no child.
 * Returns 0 (also for a released or never-spawned, zeroed, p, or NULL), or
 * -EBUSY, changing nothing, while a fiber waits in tdl_process_wait on p.
 */
TDL_API int tdl_process_destroy(tdl_process *p);

/* ------------------------------------------------------------------------ */
/* Run and capture: the popen replacement that cannot be injected or hang    */
/* ------------------------------------------------------------------------ */

/* Flags of tdl_process_run_options.flags. */
#define TDL_PROCESS_RUN_KILL_ON_LIMIT 0x1u /* SIGKILL the child as soon as a captured
                                      stream passes `limit` (default: keep
                                      reading and discard the rest) */

typedef struct tdl_process_run_options {
  /* argv is taken from tdl_process_run's argument; the rest applies.  stdio:
   *  [0] DEFAULT: a pipe fed with `input` if input is not NULL, else
   *      /dev/null; any other mode is used as given (-EINVAL with input
   *      non-NULL, and PIPE is refused: use input);
   *  [1], [2] DEFAULT or PIPE: captured; any other mode as given (then that
   *      stream is not captured).
   * With TDL_PROCESS_SETSID or TDL_PROCESS_SETPGID (pgid 0), the deadline's
   * signals go to the child's whole process group. */
  tdl_process_options spawn;
  /* Between SIGTERM at the deadline and SIGKILL: 0 means 1 s; negative means
   * SIGKILL at the deadline without SIGTERM. */
  tdl_time_t kill_grace;
  unsigned flags; /* TDL_PROCESS_RUN_* */
} tdl_process_run_options;

typedef struct tdl_process_run_result {
  int status;         /* how the child ended (tdl_process_exited() ...) */
  char *out, *err;    /* captured stdout/stderr, NUL-terminated (malloc'd;
                         "" when empty; NULL when that stream was not
                         captured or the call failed) */
  size_t out_len, err_len;
  bool out_truncated; /* the child wrote more than `limit` bytes to it */
  bool err_truncated;
  bool timed_out;     /* the deadline passed: the child was signalled */
  bool limit_killed;  /* killed by TDL_PROCESS_RUN_KILL_ON_LIMIT */
  size_t in_written;  /* bytes of input the child's stdin accepted (less than
                         input_len if it closed stdin or exited early) */
} tdl_process_run_result;

/*
 * Run argv (see tdl_process_options.argv), write `input` (input_len bytes; NULL
 * for none) to its stdin and close it, capture stdout and stderr (both drained
 * at once, so neither pipe can fill and deadlock the child; at most `limit`
 * bytes of each are kept and the rest is read and discarded, or the child is
 * killed with TDL_PROCESS_RUN_KILL_ON_LIMIT), and wait until it exits.  At the
 * deadline the child gets SIGTERM, and SIGKILL after opts->kill_grace.  Once
 * the child has exited, what is already in the pipes is read and the call
 * returns: a grandchild that keeps a pipe open cannot hold it up.  SIGPIPE
 * raised by writing to a child that stopped reading is kept from the caller
 * (blocked around each write only: other fibers share the thread's mask).
 * opts may be NULL.
 *
 * In a fiber only that fiber waits, as fiber.h promises: its loop watches
 * the pipes, the pidfd and the deadline, and runs the other fibers and
 * callbacks meanwhile.  Outside a fiber (main, another thread, a loop
 * callback) the calling thread blocks: the same watchers run on a private
 * loop of the call's own, freed before it returns.
 * Cancelling the fiber ends the call at once: the child (and its group,
 * as at the deadline) gets SIGKILL and is reaped, and the call returns
 * -ECANCELED with result empty.  A fiber already cancelled starts nothing.
 *
 * *result is always initialised; call tdl_process_run_result_destroy() after every call.
 * Returns 0 when the child exited before the deadline (whatever its status),
 * -ETIMEDOUT when the deadline passed (the child has been killed and reaped,
 * result->timed_out is set and result holds its status and the output read
 * so far), or an error with no child left and result empty: tdl_process_spawn's
 * errors, -EINVAL (argv or result NULL, a bad stdio choice), -ECANCELED,
 * -ECHILD (someone else reaped the child: see WHO REAPS), -ENOMEM, and,
 * outside a fiber, tdl_loop_new's errors.
 */
TDL_API int tdl_process_run(tdl_process_run_result *result, const char *const *argv, const tdl_process_run_options *opts,
                            const void *input, size_t input_len, size_t limit, tdl_time_t deadline);

/* Free what a tdl_process_run_result holds and zero it.  NULL is accepted. */
TDL_API void tdl_process_run_result_destroy(tdl_process_run_result *result);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_SPAWN_H */
