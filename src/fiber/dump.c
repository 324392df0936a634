/* SPDX-License-Identifier: MIT */
/*
 * The dump on a signal: every loop's fibers, with the call chains of those
 * that are not running, written to an fd when a chosen signal arrives.
 *
 * Three contexts, each doing only what it may:
 * - the signal handler writes one byte to a pipe (async-signal-safe, and
 *   nothing else: it may interrupt anything, a fiber switch included);
 * - the dump thread (one per process, every signal blocked) reads the pipe
 *   and asks every loop, through its port, for its block;
 * - each loop writes its own block on its own thread, between iterations,
 *   where its fibers stand still (none runs) and may be read.  Blocks are
 *   written under D.lock, so they do not interleave.
 *
 * A loop that does not answer (stuck in a fiber or a callback, not in
 * tdl_loop_run, or freed meanwhile) must not hold the dump up: the dump
 * thread waits ANSWER_WAIT for all of them together, then writes a line for
 * each one that is missing (with what its watchdog knows, if it has one).
 * A request is counted (the dump thread's reference and the post's), so an
 * answer that comes late, or a post handed back by a loop being freed,
 * finds its request still there, and writes nothing.
 *
 * Reaching a loop.  The dump thread walks tdl__process_scheds under its
 * lock: a scheduler is on the list from its creation until its loop's
 * tdl_loop_free, which takes it off before it closes the port, so a port
 * read there can be posted to.  A loop is reachable once it has a port:
 * loops of a group and every loop whose scheduler is made while the dump is
 * armed have one (tdl__dump_armed, sched.c); another loop gets one only if it
 * uses a port or a wakeup itself.
 *
 * fork().  The child has no dump thread, and shares the pipe with the
 * parent: the handler writes only in the process that armed it (getpid),
 * so the signal sent to a child dumps nothing until the child arms it anew.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/frames.h"
#include "base/fmt.h"
#include "base/sys.h"
#include "base/thread.h"
#include "fiber/fiber_internal.h"

#define ANSWER_WAIT TDL_SEC /* how long the loops have, all together */

enum { PENDING, WRITTEN, HANDED_BACK, ABANDONED };

typedef struct request {
  tdl_post post;
  tdl_loop *loop;  /* to name it; dereferenced only by the loop's own thread */
  int fd;
  int state;       /* under D.lock */
  int refs;        /* under D.lock: the dump thread's, the post's */
} request;

static struct {
  pthread_mutex_t lock;    /* the state below; held while a block is written */
  pthread_cond_t answered; /* a request changed state */
  pthread_mutex_t arm;     /* serialises tdl_fiber_dump_on_signal */
  int fd;                  /* where dumps go; -1: disarmed */
  int signo;
  struct sigaction old;    /* the signal's action before ours */
  int pipe_r, pipe_w;      /* the handler's bytes; made once per process */
  pid_t pid;               /* the process that armed it: the handler's check */
  int stop;                /* atomic: the dump thread is to exit */
  pthread_t thread;
  bool thread_running;
  bool ready;              /* condition made, fork handler installed */
} D = {.lock = PTHREAD_MUTEX_INITIALIZER, .arm = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .pipe_r = -1, .pipe_w = -1};

/* ---- formatting, without stdio ---- */

static char *put_loop(char *p, char *end, const tdl_loop *loop)
{
  p = tdl__put_str(p, end, "loop 0x");
  return tdl__put_uint(p, end, (uint64_t)(uintptr_t)loop, 16);
}

/* ---- a loop's block (its own thread, under D.lock) ---- */

/* The call chain of f, which is not running: from the frame its switch
 * saved, inside its own stack. */
static int fiber_frames(const tdl__fiber *f, uintptr_t *pcs)
{
  uintptr_t lo = (uintptr_t)f->stack.lo, hi = lo + f->stack.size;
  uintptr_t sp = (uintptr_t)f->ctx.sp;
  if (sp < lo || sp > hi - (TDL__CTX_PC_WORD + 1) * sizeof(uintptr_t))
    return 0;
  const uintptr_t *saved = (const uintptr_t *)sp;
  /* Callers' frames lie above the saved sp. */
  return tdl__frames_walk(saved[TDL__CTX_PC_WORD], saved[TDL__CTX_FP_WORD], sp, hi, pcs, TDL__FRAMES_MAX);
}

/* One fiber's line and chain, in one write. */
static void write_fiber(int fd, const tdl__fiber *f)
{
  char buf[256 + TDL__FRAMES_MAX * 192], *p = buf, *end = buf + sizeof buf;
  tdl_fiber_info in;
  tdl__fiber_info_get(f, &in);
  p = tdl__put_str(p, end, "    ");
  p = tdl__fiber_info_line(p, end, &in);
  if (TDL__HAVE_FRAME_POINTERS && (f->state == TDL__FIBER_PARKED || f->state == TDL__FIBER_RUNNABLE)) {
    uintptr_t pcs[TDL__FRAMES_MAX];
    int n = fiber_frames(f, pcs);
    for (int i = 0; i < n; i++)
      p = tdl__frames_line(p, end, i, pcs[i]);
  }
  (void)tdl__fiber_write_all(fd, buf, (size_t)(p - buf));
}

static void write_block(tdl_loop *loop, int fd)
{
  char head[128], *p = head, *end = head + sizeof head - 1;
  tdl__sched *s = loop->sched;
  p = put_loop(p, end, loop);
  p = tdl__put_str(p, end, " (");
  p = tdl__put_str(p, end, tdl_loop_backend(loop));
  p = tdl__put_str(p, end, "): ");
  p = tdl__put_uint(p, end, s ? s->live : 0, 10);
  p = tdl__put_str(p, end, " fibers\n");
  (void)tdl__fiber_write_all(fd, head, (size_t)(p - head));
  if (!s)
    return;
  TDL__LIST_FOREACH(n, &s->all)
    write_fiber(fd, TDL__CONTAINER_OF(n, tdl__fiber, all));
}

/* Drop one reference, under D.lock; true when r is to be freed. */
static bool unref(request *r) { return --r->refs == 0; }

/* The post's callback: on the loop's thread between iterations, or with loop
 * NULL when the loop was freed before it came to it. */
static void answer(tdl_loop *loop, tdl_post *post)
{
  request *r = post->data;
  pthread_mutex_lock(&D.lock);
  if (!loop) {
    if (r->state == PENDING)
      r->state = HANDED_BACK;
  } else if (r->state == PENDING) {
    write_block(loop, r->fd);
    r->state = WRITTEN;
  }
  pthread_cond_broadcast(&D.answered);
  bool last = unref(r);
  pthread_mutex_unlock(&D.lock);
  if (last)
    free(r);
}

/* ---- the dump thread ---- */

/* Under the process's scheduler lock: a request posted to every reachable
 * loop (up to max).  Returns how many were made; *unreachable counts the
 * loops without a port. */
static int ask_all(request **reqs, int max, int fd, int *unreachable)
{
  int n = 0;
  *unreachable = 0;
  TDL__LIST_FOREACH(node, &tdl__process_scheds) {
    tdl__sched *s = TDL__CONTAINER_OF(node, tdl__sched, in_process);
    tdl_port *port = tdl__remote_port_peek(s->loop);
    if (!port) {
      ++*unreachable;
      continue;
    }
    if (n == max)
      break; // GCOVR_EXCL_LINE: max was counted under the same lock: never reached
    request *r = calloc(1, sizeof *r);
    if (!r)
      break; /* the dump says how many loops it covered */
    r->loop = s->loop;
    r->fd = fd;
    r->refs = 2;
    tdl_post_init(&r->post, answer, r);
    if (tdl_port_post(port, &r->post) < 0) {
      free(r); /* the loop is being freed */
      continue;
    }
    reqs[n++] = r;
  }
  return n;
}

static int count_scheds(void)
{
  int n = 0;
  TDL__LIST_FOREACH(node, &tdl__process_scheds)
    n++;
  return n;
}

/* Under D.lock: whether every request has its answer. */
static bool all_answered(request **reqs, int n)
{
  for (int i = 0; i < n; i++)
    if (reqs[i]->state == PENDING)
      return false;
  return true;
}

/* Under D.lock: the line for a loop that did not write its block. */
static void write_missing(const request *r, int fd, tdl_time_t now)
{
  char line[256], *p = line, *end = line + sizeof line - 1;
  tdl__watch_state ws;
  bool watched = r->state != HANDED_BACK && tdl__watchdog_peek(r->loop, &ws);
  p = put_loop(p, end, r->loop);
  if (watched && ws.name[0]) {
    p = tdl__put_str(p, end, " \"");
    p = tdl__put_str(p, end, ws.name);
    p = tdl__put_str(p, end, "\"");
  }
  if (r->state == HANDED_BACK) {
    p = tdl__put_str(p, end, ": freed before it answered");
  } else {
    p = tdl__put_str(p, end, ": did not answer within ");
    p = tdl__put_ms(p, end, ANSWER_WAIT);
    if (watched && ws.away_since) {
      p = tdl__put_str(p, end, ": away from its poll for ");
      p = tdl__put_ms(p, end, now - ws.away_since);
      if (ws.fiber_id) {
        p = tdl__put_str(p, end, ", in fiber ");
        p = tdl__put_uint(p, end, ws.fiber_id, 10);
        p = tdl__put_str(p, end, " \"");
        p = tdl__put_str(p, end, ws.fiber);
        p = tdl__put_str(p, end, "\"");
      } else {
        p = tdl__put_str(p, end, ", in a callback (no fiber)");
      }
    } else {
      p = tdl__put_str(p, end, " (stuck in a fiber or a callback, or not in tdl_loop_run)");
    }
  }
  *p++ = '\n';
  (void)tdl__fiber_write_all(fd, line, (size_t)(p - line));
}

static void dump(void)
{
  pthread_mutex_lock(&D.lock);
  int fd = D.fd;
  int signo = D.signo;
  pthread_mutex_unlock(&D.lock);
  if (fd < 0)
    return;

  /* D.lock first: the loops answer under it, and must find the header
   * written. */
  pthread_mutex_lock(&D.lock);
  pthread_mutex_lock(&tdl__process_scheds_lock);
  int max = count_scheds(), unreachable = 0, n = 0;
  request **reqs = max ? calloc((size_t)max, sizeof *reqs) : NULL;
  if (reqs)
    n = ask_all(reqs, max, fd, &unreachable);
  pthread_mutex_unlock(&tdl__process_scheds_lock);

  char head[256], *p = head, *end = head + sizeof head - 1;
  p = tdl__put_str(p, end, "treadle dump (signal ");
  p = tdl__put_uint(p, end, (uint64_t)signo, 10);
  p = tdl__put_str(p, end, "): ");
  p = tdl__put_uint(p, end, (uint64_t)n, 10);
  p = tdl__put_str(p, end, " loops");
  if (unreachable) {
    p = tdl__put_str(p, end, ", and ");
    p = tdl__put_uint(p, end, (uint64_t)unreachable, 10);
    p = tdl__put_str(p, end, " made before the dump was armed that have no port");
  }
  if (max && !reqs)
    p = tdl__put_str(p, end, " (no memory to ask them)");
  if (!TDL__HAVE_FRAME_POINTERS)
    p = tdl__put_str(p, end, "; call chains need treadle built with frame pointers (TDL_FRAME_POINTERS)");
  *p++ = '\n';

  (void)tdl__fiber_write_all(fd, head, (size_t)(p - head));
  tdl_time_t until = tdl__clock_now() + ANSWER_WAIT;
  struct timespec ts = {.tv_sec = until / TDL_SEC, .tv_nsec = until % TDL_SEC};
  while (!all_answered(reqs, n) && pthread_cond_timedwait(&D.answered, &D.lock, &ts) == 0)
    ;
  tdl_time_t now = tdl__clock_now();
  for (int i = 0; i < n; i++) {
    request *r = reqs[i];
    if (r->state != WRITTEN)
      write_missing(r, fd, now);
    if (r->state == PENDING)
      r->state = ABANDONED; /* a late answer writes nothing */
  }
  static const char done[] = "treadle dump: end\n";
  (void)tdl__fiber_write_all(fd, done, sizeof done - 1);
  for (int i = 0; i < n; i++)
    if (!unref(reqs[i]))
      reqs[i] = NULL; /* its post still holds it */
  pthread_mutex_unlock(&D.lock);
  for (int i = 0; i < n; i++)
    free(reqs[i]);
  free(reqs);
}

static void *dump_main(void *arg)
{
  (void)arg;
  for (;;) {
    char bytes[64]; /* signals that came meanwhile make one dump */
    ssize_t r = tdl__sys_read(D.pipe_r, bytes, sizeof bytes);
    if (r < 0 && errno == EINTR)
      continue; // GCOVR_EXCL_LINE: the thread blocks every signal: its read is never interrupted
    if (r <= 0 || __atomic_load_n(&D.stop, __ATOMIC_ACQUIRE))
      return NULL;
    dump();
  }
}

/* ---- the handler ---- */

static void on_signal(int signo)
{
  (void)signo;
  int saved = errno;
  /* A full pipe already holds a dump to come. */
  if (getpid() == __atomic_load_n(&D.pid, __ATOMIC_RELAXED)) {
    char one = 1;
    ssize_t ignored = tdl__sys_write(__atomic_load_n(&D.pipe_w, __ATOMIC_RELAXED), &one, 1);
    (void)ignored;
  }
  errno = saved;
}

/* ---- arming ---- */

static void after_fork_child(void)
{
  pthread_mutex_init(&D.lock, NULL);
  pthread_mutex_init(&D.arm, NULL);
  /* No dump thread here, and the pipe is the parent's. */
  D.thread_running = false;
  __atomic_store_n(&tdl__dump_armed, 0, __ATOMIC_RELAXED);
  if (D.pipe_r >= 0) {
    tdl__sys_close(D.pipe_r);
    tdl__sys_close(D.pipe_w);
  }
  D.pipe_r = D.pipe_w = -1;
  D.fd = -1;
}

/* Under D.arm: the pipe and the fork handler, once per process. */
static int ready(void)
{
  if (!D.ready) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&D.answered, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_atfork(NULL, NULL, after_fork_child) != 0)
      return -ENOMEM;
    D.ready = true;
  }
  if (D.pipe_r < 0) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
      return -errno;
    /* The handler must never block; the thread does, on its end. */
    if (tdl__sys_fcntl(fds[1], F_SETFL, O_NONBLOCK) < 0) {
      /* GCOVR_EXCL_START: setting O_NONBLOCK on a pipe just made cannot fail */
      int e = -errno;
      tdl__sys_close(fds[0]);
      tdl__sys_close(fds[1]);
      return e;
      /* GCOVR_EXCL_STOP */
    }
    D.pipe_r = fds[0];
    __atomic_store_n(&D.pipe_w, fds[1], __ATOMIC_RELAXED);
  }
  return 0;
}

/* Signals whose handler must not return (the faults, which would only come
 * again), that cannot be caught, or that treadle or the kernel raise on
 * their own (SIGPIPE on any write to a closed pipe, SIGCHLD for programs). */
static bool refused(int signo)
{
  switch (signo) {
  case SIGKILL: case SIGSTOP: case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE:
  case SIGTRAP: case SIGSYS: case SIGABRT: case SIGPIPE: case SIGCHLD:
    return true;
  default:
    return signo <= 0 || signo >= NSIG || signo == tdl__watchdog_signal();
  }
}

static int check_fd(int fd)
{
  int fl = tdl__sys_fcntl(fd, F_GETFL, 0);
  if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY)
    return -EBADF;
  return 0;
}

/* Under D.arm. */
static void stop_thread(void)
{
  if (!D.thread_running)
    return;
  __atomic_store_n(&D.stop, 1, __ATOMIC_RELEASE);
  char one = 1;
  ssize_t ignored = tdl__sys_write(D.pipe_w, &one, 1);
  (void)ignored;
  pthread_join(D.thread, NULL);
  D.thread_running = false;
  __atomic_store_n(&D.stop, 0, __ATOMIC_RELAXED);
}

/* Under D.arm: give the signal back its old action. */
static void disarm(void)
{
  if (D.signo)
    sigaction(D.signo, &D.old, NULL);
  __atomic_store_n(&tdl__dump_armed, 0, __ATOMIC_RELAXED);
  stop_thread();
  pthread_mutex_lock(&D.lock);
  D.fd = -1;
  D.signo = 0;
  pthread_mutex_unlock(&D.lock);
}

/* Under D.arm: signo's action is ours, the thread runs. */
static int arm(int signo, int fd)
{
  int e = ready();
  if (e < 0)
    return e;
  if (!D.thread_running) {
    /* Bytes left from before (a signal after the last disarm) are not a
     * request for this dump. */
    char drain[64];
    (void)tdl__sys_fcntl(D.pipe_r, F_SETFL, O_NONBLOCK);
    while (tdl__sys_read(D.pipe_r, drain, sizeof drain) > 0)
      ;
    (void)tdl__sys_fcntl(D.pipe_r, F_SETFL, 0);
    if ((e = tdl__thread_start_joinable(&D.thread, dump_main, NULL)) < 0)
      return e;
    D.thread_running = true;
  }
  __atomic_store_n(&D.pid, getpid(), __ATOMIC_RELAXED);
  if (signo != D.signo) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* a write needs little stack: the interrupted one */
    sigfillset(&sa.sa_mask); /* one handler at a time, whatever comes */
    if (sigaction(signo, &sa, &old) < 0)
      return -errno; /* a signal the C library keeps for itself */
    if (D.signo)
      sigaction(D.signo, &D.old, NULL);
    D.old = old;
  }
  pthread_mutex_lock(&D.lock);
  D.fd = fd;
  D.signo = signo;
  pthread_mutex_unlock(&D.lock);
  __atomic_store_n(&tdl__dump_armed, 1, __ATOMIC_RELAXED);
  return 0;
}

int tdl_fiber_dump_on_signal(int signo, int fd)
{
  if (signo != 0 && refused(signo))
    return -EINVAL;
  if (signo != 0 && check_fd(fd) < 0)
    return -EBADF;
  pthread_mutex_lock(&D.arm);
  int e = 0;
  if (signo == 0)
    disarm();
  else if ((e = arm(signo, fd)) < 0 && !D.signo)
    stop_thread(); /* a first arming that failed leaves nothing running */
  pthread_mutex_unlock(&D.arm);
  return e;
}
