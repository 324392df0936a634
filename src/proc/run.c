/*
 * tdl_process_run: spawn, feed stdin, drain stdout and stderr together, and
 * enforce the deadline, all from one poll() loop on the pipes and the pidfd.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/proc_internal.h"

#define DEFAULT_GRACE TDL_SEC
#define SCRATCH_SIZE (64 * 1024)
#define MIN_GROW (16 * 1024)
/* Reads per stream per wakeup: a child that writes without pause must not
 * starve the other stream, the deadline or the exit check. */
#define READS_PER_WAKE 16
/* Reads of what is left in a pipe once the child has exited: bounded, since a
 * grandchild may go on writing into it. */
#define READS_AFTER_EXIT 256

typedef struct capture {
  int fd;
  char *buf;
  size_t len, cap; /* buf holds cap + 1 bytes */
  bool on;         /* this stream is captured */
  bool truncated;
} capture;

typedef struct run {
  tdl_process p;
  capture out, err;
  const char *input;
  size_t input_len, in_written;
  size_t limit;
  char *scratch;
  bool group; /* signal the child's process group too */
} run;

static int grow(capture *c, size_t limit)
{
  size_t want = c->len + (c->len < MIN_GROW ? MIN_GROW : c->len);
  if (want < c->len || want > limit)
    want = limit;
  if (want == SIZE_MAX)
    want--;
  char *b = realloc(c->buf, want + 1);
  if (!b)
    return -ENOMEM;
  c->buf = b;
  c->cap = want;
  return 0;
}

/* Read what the pipe has, up to `reads` reads.  Returns 0 or -ENOMEM. */
static int drain(run *x, capture *c, int reads)
{
  while (c->fd >= 0 && reads-- > 0) {
    char *dst;
    size_t room;
    if (c->len < x->limit) {
      if (c->len == c->cap) {
        int r = grow(c, x->limit);
        if (r < 0)
          return r;
      }
      dst = c->buf + c->len;
      room = c->cap - c->len;
    } else {
      if (!x->scratch && !(x->scratch = malloc(SCRATCH_SIZE)))
        return -ENOMEM;
      dst = x->scratch;
      room = SCRATCH_SIZE;
    }
    ssize_t n = read(c->fd, dst, room);
    if (n > 0) {
      if (dst == x->scratch)
        c->truncated = true;
      else
        c->len += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return 0;
    } else {
      tdl__proc_close(&c->fd); /* EOF; any other error ends the stream too */
    }
  }
  return 0;
}

static void feed(run *x)
{
  while (x->p.stdin_fd >= 0 && x->in_written < x->input_len) {
    ssize_t n = write(x->p.stdin_fd, x->input + x->in_written, x->input_len - x->in_written);
    if (n >= 0)
      x->in_written += (size_t)n;
    else if (errno == EAGAIN)
      return;
    else if (errno != EINTR)
      break; /* EPIPE: the child closed its stdin or exited */
  }
  tdl__proc_close(&x->p.stdin_fd); /* all written, or the child stopped reading */
}

static void signal_child(run *x, int sig)
{
  tdl_process_kill(&x->p, sig);
  /* The group's id is the unreaped child's pid: it cannot have been reused. */
  if (x->group)
    kill(-x->p.pid, sig);
}

static int finish_capture(capture *c, char **out, size_t *out_len, bool *truncated)
{
  if (!c->on)
    return 0;
  if (!c->buf && !(c->buf = malloc(1)))
    return -ENOMEM;
  c->buf[c->len] = '\0';
  *out = c->buf;
  *out_len = c->len;
  *truncated = c->truncated;
  c->buf = NULL;
  return 0;
}

/* Blocks SIGPIPE around our writes to the child's stdin and consumes the one
 * a write to a closed pipe raises, unless the caller had one pending. */
typedef struct sigpipe_guard {
  sigset_t old;
  bool active, was_pending;
} sigpipe_guard;

static void sigpipe_block(sigpipe_guard *g)
{
  sigset_t s, pending;
  sigemptyset(&s);
  sigaddset(&s, SIGPIPE);
  sigpending(&pending);
  g->was_pending = sigismember(&pending, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &s, &g->old);
  g->active = true;
}

static void sigpipe_restore(sigpipe_guard *g)
{
  if (!g->active)
    return;
  sigset_t s, pending;
  sigemptyset(&s);
  sigaddset(&s, SIGPIPE);
  sigpending(&pending);
  if (!g->was_pending && sigismember(&pending, SIGPIPE)) {
    struct timespec zero = {0, 0};
    sigtimedwait(&s, NULL, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static int setup(const char *const *argv, const tdl_process_run_options *opts, const void *input,
                 tdl_process_options *so, run *x)
{
  *so = opts ? opts->spawn : (tdl_process_options){0};
  so->argv = argv;
  if (opts && (opts->flags & ~TDL_PROCESS_RUN_KILL_ON_LIMIT))
    return -EINVAL;
  tdl_stdio *s = so->stdio;
  if (input) {
    if (s[0].mode != TDL_STDIO_DEFAULT)
      return -EINVAL;
    s[0].mode = TDL_STDIO_PIPE;
  } else if (s[0].mode == TDL_STDIO_PIPE) {
    return -EINVAL;
  } else if (s[0].mode == TDL_STDIO_DEFAULT) {
    s[0].mode = TDL_STDIO_NULL;
  }
  for (int i = 1; i < 3; i++) {
    if (s[i].mode == TDL_STDIO_DEFAULT)
      s[i].mode = TDL_STDIO_PIPE;
  }
  x->out.on = s[1].mode == TDL_STDIO_PIPE;
  x->err.on = s[2].mode == TDL_STDIO_PIPE;
  x->group = (so->flags & TDL_PROCESS_SETSID) || ((so->flags & TDL_PROCESS_SETPGID) && so->pgid == 0);
  return 0;
}

TDL_API int tdl_process_run(const char *const *argv, const tdl_process_run_options *opts, const void *input,
                            size_t input_len, size_t limit, tdl_time_t deadline, tdl_process_run_result *result)
{
  if (!result)
    return -EINVAL;
  memset(result, 0, sizeof *result);
  if (!argv)
    return -EINVAL;

  run x;
  memset(&x, 0, sizeof x);
  x.out.fd = x.err.fd = -1;
  x.input = input;
  x.input_len = input ? input_len : 0;
  x.limit = limit;
  tdl_process_options so;
  int r = setup(argv, opts, input, &so, &x);
  if (r < 0)
    return r;
  tdl_time_t grace = opts && opts->kill_grace ? opts->kill_grace : DEFAULT_GRACE;
  bool kill_on_limit = opts && (opts->flags & TDL_PROCESS_RUN_KILL_ON_LIMIT);

  sigpipe_guard guard = {.active = false};
  if (x.input_len > 0)
    sigpipe_block(&guard);
  if ((r = tdl_process_spawn(&x.p, &so)) < 0) {
    sigpipe_restore(&guard);
    return r;
  }
  x.out.fd = x.p.stdout_fd;
  x.err.fd = x.p.stderr_fd;
  x.p.stdout_fd = x.p.stderr_fd = -1; /* ours to close now */
  if (x.input_len == 0)
    tdl__proc_close(&x.p.stdin_fd);

  enum { RUNNING, TERM_SENT, KILL_SENT } phase = RUNNING;
  bool timed_out = false, limit_killed = false, exited = false;
  tdl_time_t kill_at = 0;
  tdl__backoff nap = tdl__proc_backoff();
  for (;;) {
    struct pollfd pfd[4];
    int n = 0, i_in = -1, i_out = -1, i_err = -1, i_pid = -1;
    if (x.p.stdin_fd >= 0)
      pfd[i_in = n++] = (struct pollfd){x.p.stdin_fd, POLLOUT, 0};
    if (x.out.fd >= 0)
      pfd[i_out = n++] = (struct pollfd){x.out.fd, POLLIN, 0};
    if (x.err.fd >= 0)
      pfd[i_err = n++] = (struct pollfd){x.err.fd, POLLIN, 0};
    if (x.p.pidfd >= 0)
      pfd[i_pid = n++] = (struct pollfd){x.p.pidfd, POLLIN, 0};

    tdl_time_t now = tdl__clock_now(), wake = TDL_FOREVER;
    if (phase == RUNNING && deadline != TDL_FOREVER)
      wake = deadline;
    else if (phase == TERM_SENT)
      wake = kill_at;
    if (x.p.pidfd < 0 && (wake == TDL_FOREVER || wake > now + nap.next))
      wake = now + tdl__backoff_step(&nap); /* no pidfd: look at waitpid now and then */
    struct timespec ts, *tsp = NULL;
    if (wake != TDL_FOREVER) {
      tdl_time_t left = wake > now ? wake - now : 0;
      ts = (struct timespec){(time_t)(left / TDL_SEC), (long)(left % TDL_SEC)};
      tsp = &ts;
    }
    /* TODO(fiber): inside a fiber this wait is what parks the fiber
     * (watchers on the same fds, woken through the fiber's loop) instead of
     * blocking the thread; the rest of this loop stays as it is. */
    int k = ppoll(pfd, (nfds_t)n, tsp, NULL);
    if (k < 0 && errno != EINTR) {
      r = -errno;
      break;
    }
    if (k > 0) {
      if (i_in >= 0 && pfd[i_in].revents)
        feed(&x);
      if (i_out >= 0 && pfd[i_out].revents && (r = drain(&x, &x.out, READS_PER_WAKE)) < 0)
        break;
      if (i_err >= 0 && pfd[i_err].revents && (r = drain(&x, &x.err, READS_PER_WAKE)) < 0)
        break;
    }
    if ((i_pid < 0 || (k > 0 && pfd[i_pid].revents)) && (r = tdl__process_reap(&x.p, 0)) != 0) {
      if (r < 0)
        break;
      exited = true;
      break;
    }
    r = 0;
    if (kill_on_limit && !limit_killed && (x.out.truncated || x.err.truncated)) {
      limit_killed = true;
      signal_child(&x, SIGKILL);
      phase = KILL_SENT;
    }
    now = tdl__clock_now();
    if (phase == RUNNING && deadline != TDL_FOREVER && now >= deadline) {
      timed_out = true;
      if (grace < 0) {
        signal_child(&x, SIGKILL);
        phase = KILL_SENT;
      } else {
        signal_child(&x, SIGTERM);
        kill_at = grace > TDL_TIME_MAX - now ? TDL_TIME_MAX : now + grace;
        phase = TERM_SENT;
      }
    } else if (phase == TERM_SENT && now >= kill_at) {
      signal_child(&x, SIGKILL);
      phase = KILL_SENT;
    }
  }

  if (exited) {
    /* Whatever the child wrote before it exited is in the pipes now. */
    if ((r = drain(&x, &x.out, READS_AFTER_EXIT)) == 0)
      r = drain(&x, &x.err, READS_AFTER_EXIT);
  }
  if (r == 0 && exited) {
    result->status = x.p.tdl__status;
    result->timed_out = timed_out;
    result->limit_killed = limit_killed;
    result->in_written = x.in_written;
    if ((r = finish_capture(&x.out, &result->out, &result->out_len, &result->out_truncated)) == 0)
      r = finish_capture(&x.err, &result->err, &result->err_len, &result->err_truncated);
    if (r == 0 && timed_out)
      r = -ETIMEDOUT;
  }
  if (r < 0 && r != -ETIMEDOUT && r != -ECHILD)
    tdl_process_run_result_destroy(result);
  tdl_process_destroy(&x.p); /* kills and reaps if we broke out early */
  tdl__proc_close(&x.out.fd);
  tdl__proc_close(&x.err.fd);
  free(x.out.buf);
  free(x.err.buf);
  free(x.scratch);
  sigpipe_restore(&guard);
  return r;
}

TDL_API void tdl_process_run_result_destroy(tdl_process_run_result *result)
{
  if (!result)
    return;
  free(result->out);
  free(result->err);
  memset(result, 0, sizeof *result);
}
