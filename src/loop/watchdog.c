/* SPDX-License-Identifier: MIT */
/*
 * The loop watchdog: one thread for the process that reports watched loops
 * which have been away from their poll for longer than their threshold.
 *
 * What crosses threads.  The loop's thread publishes, in the tdl__heartbeat
 * at the head of its loop's record (loop_internal.h), when it left its poll
 * and, through the scheduler, which fiber runs; it only stores there.  The
 * watchdog thread only loads the heartbeat, and reads nothing else of the
 * loop: not the loop (it may be freed), not a fiber (its control block is on
 * its stack, which may be reused or unmapped once it ends).  The rest of a
 * record (options, what was reported) is under the watchdog's lock.
 *
 * Lifetime.  A record is linked in the watchdog's list from start to stop.
 * The watchdog thread checks records under the lock and calls a callback
 * without it, with the record marked `in_report`; stop (and tdl_loop_free,
 * and a start that replaces options) wait under the lock until no report is
 * in progress, then unlink.  So the thread never looks at a freed record,
 * a callback never runs after its stop returned, and a record stays linked
 * (its list neighbours valid) while its callback runs.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "base/frames.h"
#include "base/fmt.h"
#include "base/sys.h"
#include "base/thread.h"
#include "loop/loop_internal.h"

enum {
  CHECKS_PER_THRESHOLD = 4,       /* look every quarter of the smallest threshold */
  SEQ_TRIES = 8,                  /* attempts at a consistent copy of the running fiber */
};
#define MIN_PERIOD TDL_MSEC       /* a tiny threshold must not make the thread spin */

typedef struct tdl__watch {
  /* The loop thread's stores, alone on their cache line (see tdl__heartbeat). */
  _Alignas(64) tdl__heartbeat hb;
  /* The watchdog's: under W.lock. */
  _Alignas(64) tdl__list link; /* in W.watched */
  tdl_loop *loop;              /* reported, never dereferenced by the watchdog thread */
  tdl_time_t threshold;
  tdl_watchdog_cb cb;
  void *data;
  tdl_time_t reported;         /* away_since of the stall last reported */
  bool in_report;              /* its callback runs, without the lock */
  char name[TDL__WATCH_NAME];
  /* The loop's thread, for the call chain of a stall (set at the first
   * start, on that thread): whom to signal, and its own stack. */
  pthread_t owner;
  pid_t tid;
  uintptr_t thread_lo, thread_hi;
} tdl__watch;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t tick;    /* the watchdog thread sleeps here between looks */
  pthread_cond_t idle;    /* a report ended: stop and start wait on it */
  tdl__list watched;      /* tdl__watch */
  bool thread_running;
  bool ready;             /* conditions made, fork handlers installed */
} W = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Set on the watchdog thread: its callbacks must not wait for themselves. */
static _Thread_local bool on_watchdog_thread;

/* ---- the call chain of a stall ----
 *
 * The stuck code runs on the loop's thread, and only that thread can read
 * its registers: the watchdog thread sends it a real-time signal, whose
 * handler walks the frame pointers from the interrupted registers, within
 * the stack the interrupted sp is on (the running fiber's, published in the
 * heartbeat, or the thread's own), into S.pcs, and says it is done; the
 * watchdog thread waits SAMPLE_WAIT for that, then names the frames
 * (dladdr, which a handler may not call) before the callback runs.
 *
 * The signal: the highest real-time signal whose action is the default when
 * the first watchdog starts (programs number theirs up from SIGRTMIN),
 * installed with SA_RESTART (an interrupted system call goes on).  It
 * runs on the interrupted stack (it needs a few hundred bytes), not on the
 * thread's alternate stack, which comes and goes with the thread's
 * schedulers (fiber/overflow.c).  It is sent only to a loop found stalled, and only while its
 * action is still treadle's: a program that installs its own handler on it
 * later keeps it, and reports then say that no chain could be taken.
 *
 * S is the watchdog thread's, under W.lock (one sample at a time), but for
 * `state`, which the handler takes (ARMED to TAKEN) so that a signal that
 * comes after the watchdog thread gave up on it (the loop's thread had it
 * blocked) writes nothing. */
#define SAMPLE_WAIT (50 * TDL_MSEC)
enum { SAMPLE_IDLE, SAMPLE_ARMED, SAMPLE_TAKEN, SAMPLE_DONE };

static struct {
  int signo;          /* atomic: 0 until chosen, -1 when none was free */
  bool lost;          /* the program took the signal over */
  int probing, probed; /* atomic: choose_signal's trial delivery */
  int state;          /* atomic */
  pid_t tid;          /* atomic: the thread that must answer */
  const tdl__heartbeat *hb;
  uintptr_t thread_lo, thread_hi;
  uintptr_t pcs[TDL__FRAMES_MAX];
  int n;
  bool walked;        /* the walk went from the interrupted frame pointer (not pc alone) */
  /* What the callback of the report in progress can ask for
   * (tdl_watchdog_report_chain): the watchdog thread's alone. */
  const tdl_watchdog_report *report;
  char chain[TDL__FRAMES_MAX * 192 + 128];
} S;

static void on_sample(int signo, siginfo_t *si, void *ucv)
{
  (void)signo;
  (void)si;
  if (__atomic_load_n(&S.probing, __ATOMIC_RELAXED)) {
    __atomic_store_n(&S.probed, 1, __ATOMIC_RELAXED);
    return;
  }
  if ((pid_t)syscall(SYS_gettid) != __atomic_load_n(&S.tid, __ATOMIC_RELAXED))
    return; /* raised at another thread (by the program) */
  int armed = SAMPLE_ARMED;
  if (!__atomic_compare_exchange_n(&S.state, &armed, SAMPLE_TAKEN, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return;
  const ucontext_t *uc = ucv;
#if defined(__x86_64__)
  uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP], fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP],
            sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
  uintptr_t pc = (uintptr_t)uc->uc_mcontext.pc, fp = (uintptr_t)uc->uc_mcontext.regs[29],
            sp = (uintptr_t)uc->uc_mcontext.sp;
#endif
  /* The running fiber's stack, unless the loop is between the stores of a
   * switch (the handler runs on that same thread: what it reads is whole). */
  uintptr_t lo = 0, hi = 0;
  uint32_t seq = __atomic_load_n(&S.hb->seq, __ATOMIC_RELAXED);
  if (!(seq & 1)) {
    lo = __atomic_load_n(&S.hb->stack_lo, __ATOMIC_RELAXED);
    hi = __atomic_load_n(&S.hb->stack_hi, __ATOMIC_RELAXED);
  }
  if (!(sp >= lo && sp < hi)) {
    lo = S.thread_lo;
    hi = S.thread_hi;
  }
  /* Callers' frames lie above sp; below it a thread's stack may not even be
   * mapped. */
  S.walked = sp >= lo && sp < hi;
  if (S.walked)
    S.n = tdl__frames_walk(pc, fp, sp, hi, S.pcs, TDL__FRAMES_MAX);
  else
    S.n = tdl__frames_walk(pc, 0, 0, 0, S.pcs, 1);
  __atomic_store_n(&S.state, SAMPLE_DONE, __ATOMIC_RELEASE);
}

/* Whether sig, with on_sample installed, reaches this thread: an emulator
 * may accept a handler for a signal it never delivers (qemu-user keeps the
 * last two real-time signals for itself).  One trial, to the calling
 * thread, with sig unblocked meanwhile; raise() delivers it before it
 * returns. */
static bool delivered(int sig)
{
  sigset_t one, old;
  sigemptyset(&one);
  sigaddset(&one, sig);
  __atomic_store_n(&S.probed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&S.probing, 1, __ATOMIC_RELAXED);
  pthread_sigmask(SIG_UNBLOCK, &one, &old);
  raise(sig);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  __atomic_store_n(&S.probing, 0, __ATOMIC_RELAXED);
  return __atomic_load_n(&S.probed, __ATOMIC_RELAXED) != 0;
}

/* Under W.lock, once: choose and install the signal. */
static void choose_signal(void)
{
  if (__atomic_load_n(&S.signo, __ATOMIC_RELAXED))
    return;
  int chosen = -1;
  for (int sig = SIGRTMAX; sig >= SIGRTMIN; sig--) {
    struct sigaction cur, sa;
    if (sigaction(sig, NULL, &cur) < 0 || (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL)
      continue;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sample;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) < 0)
      continue;
    if (delivered(sig)) {
      chosen = sig;
      break;
    }
    sigaction(sig, &cur, NULL);
  }
  __atomic_store_n(&S.signo, chosen, __ATOMIC_RELAXED);
}

int tdl__watchdog_signal(void)
{
  int sig = __atomic_load_n(&S.signo, __ATOMIC_RELAXED);
  return sig > 0 ? sig : 0;
}

/* Whether the signal's action is still treadle's. */
static bool signal_ours(int sig)
{
  struct sigaction cur;
  return sigaction(sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sample;
}

static const char *sample_text(const char *why)
{
  char *p = S.chain, *end = S.chain + sizeof S.chain - 1;
  static const char *const pre = "        (no call chain: ";
  for (const char *q = pre; *q && p < end; q++)
    *p++ = *q;
  for (const char *q = why; *q && p < end; q++)
    *p++ = *q;
  if (p < end)
    *p++ = ')';
  *p++ = '\n';
  *p = '\0';
  return S.chain;
}

/* Under the lock: take w's loop's call chain into S.pcs (S.n frames), or
 * say in S.chain why not (S.n = -1). */
static void sample(tdl__watch *w)
{
  S.n = -1;
  int sig = __atomic_load_n(&S.signo, __ATOMIC_RELAXED);
  if (sig <= 0) {
    sample_text("no real-time signal was free");
    return;
  }
  if (S.lost || !signal_ours(sig)) {
    S.lost = true;
    sample_text("the program took over the watchdog's signal");
    return;
  }
  __atomic_store_n(&S.tid, w->tid, __ATOMIC_RELAXED);
  S.hb = &w->hb;
  S.thread_lo = w->thread_lo;
  S.thread_hi = w->thread_hi;
  S.n = 0;
  __atomic_store_n(&S.state, SAMPLE_ARMED, __ATOMIC_RELEASE);
  if (pthread_kill(w->owner, sig) != 0) {
    __atomic_store_n(&S.state, SAMPLE_IDLE, __ATOMIC_RELAXED);
    S.n = -1;
    sample_text("the loop's thread could not be signalled");
    return;
  }
  tdl_time_t until = tdl__clock_now() + SAMPLE_WAIT;
  while (__atomic_load_n(&S.state, __ATOMIC_ACQUIRE) == SAMPLE_ARMED && tdl__clock_now() < until) {
    struct timespec ms = {0, TDL_MSEC};
    nanosleep(&ms, NULL);
  }
  int armed = SAMPLE_ARMED;
  if (__atomic_compare_exchange_n(&S.state, &armed, SAMPLE_IDLE, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    S.n = -1;
    sample_text("the loop's thread did not answer the watchdog's signal (blocked?)");
    return;
  }
  while (__atomic_load_n(&S.state, __ATOMIC_ACQUIRE) != SAMPLE_DONE)
    tdl__cpu_relax(); /* the handler is a few loads from done */
  __atomic_store_n(&S.state, SAMPLE_IDLE, __ATOMIC_RELAXED);
}

/* The line under a chain of `shown` frames that says what is missing from
 * it, if something is that frame pointers would have given:
 *   - frame #0 made no frame record (its code keeps no frame pointer, or
 *     the walk could not go on from it), and it is not treadle's: the
 *     library or program it is in (libc, as a rule) is built without frame
 *     pointers.  With #0 alone shown, the chain stops there; with more, the
 *     walk went on from its caller's record and left that caller out;
 *   - else, in a treadle without frame pointers (only #0 shown: the walk
 *     would go through treadle's frames), that.
 * Nothing when the chain is whole, or where it merely ends in code that
 * keeps no frame pointers below the stalled code (a thread's start in
 * libc). */
static char *put_missing(char *p, char *end, int shown)
{
  if (S.n < 1)
    return p;
  uintptr_t pc = S.pcs[0];
  bool bare = tdl__frames_no_record(pc) || (S.walked && S.n == 1);
  bool ours = tdl__frames_in_treadle(pc);
  if (!TDL__HAVE_FRAME_POINTERS && (ours || !bare))
    return tdl__put_str(p, end, "        (the rest of the chain needs treadle built with frame pointers)\n");
  if (!bare || ours)
    return p;
  const char *module = tdl__frames_module(pc);
  if (!module)
    module = "code";
  if (shown == 1) {
    p = tdl__put_str(p, end, "        (the chain stops in ");
    p = tdl__put_str(p, end, module);
    return tdl__put_str(p, end, ", which is built without frame pointers)\n");
  }
  p = tdl__put_str(p, end, "        (");
  p = tdl__put_str(p, end, module);
  return tdl__put_str(p, end, " is built without frame pointers: the caller of #0 is missing from the chain)\n");
}

/* Without the lock, on the watchdog thread: S.pcs named into S.chain. */
static void name_sample(void)
{
  if (S.n < 0)
    return;
  char *p = S.chain, *end = S.chain + sizeof S.chain - 1;
  /* Without frame pointers in treadle, only the interrupted pc is sure: the
   * walk goes through treadle's frames. */
  int n = TDL__HAVE_FRAME_POINTERS ? S.n : (S.n > 1 ? 1 : S.n);
  for (int i = 0; i < n; i++)
    p = tdl__frames_line(p, end, i, S.pcs[i]);
  p = put_missing(p, end, n);
  *p = '\0';
}

const char *tdl_watchdog_report_chain(const tdl_watchdog_report *r)
{
  if (!on_watchdog_thread || !r || r != S.report)
    return "";
  return S.chain;
}

/* ---- reading a heartbeat (watchdog thread, under the lock) ---- */

/* A consistent copy of what runs on the loop: false when the loop kept
 * switching fibers meanwhile (it is not stuck in one; look again later). */
static bool read_running(const tdl__heartbeat *hb, uint64_t *id, char name[TDL__WATCH_NAME])
{
  for (int i = 0; i < SEQ_TRIES; i++) {
    uint32_t before = __atomic_load_n(&hb->seq, __ATOMIC_ACQUIRE);
    if (before & 1)
      continue;
    uint64_t words[TDL__WATCH_NAME / 8];
    *id = __atomic_load_n(&hb->fiber_id, __ATOMIC_ACQUIRE);
    for (int w = 0; w < TDL__WATCH_NAME / 8; w++)
      words[w] = __atomic_load_n(&hb->fiber_name[w], __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&hb->seq, __ATOMIC_ACQUIRE) == before) {
      memcpy(name, words, TDL__WATCH_NAME);
      name[TDL__WATCH_NAME - 1] = '\0';
      return true;
    }
  }
  return false;
}

/* Whether w's loop is stalled and not yet reported for this stall; if so,
 * fills r (its strings point into w and fiber) and marks the stall reported. */
static bool stall_to_report(tdl__watch *w, tdl_time_t now, tdl_watchdog_report *r, char fiber[TDL__WATCH_NAME])
{
  tdl_time_t since = __atomic_load_n(&w->hb.away_since, __ATOMIC_RELAXED);
  if (since == 0 || since == w->reported || now - since < w->threshold)
    return false;
  uint64_t id;
  if (!read_running(&w->hb, &id, fiber))
    return false;
  if (__atomic_load_n(&w->hb.away_since, __ATOMIC_ACQUIRE) != since)
    return false; /* it came back while we looked */
  w->reported = since;
  *r = (tdl_watchdog_report){
      .loop = w->loop,
      .loop_name = w->name,
      .fiber = id ? fiber : NULL,
      .fiber_id = id,
      .since = since,
      .away = now - since,
      .threshold = w->threshold,
  };
  return true;
}

/* ---- the default report: one line, one write(2), no stdio, no allocation ---- */

static void report_to_stderr(const tdl_watchdog_report *r, void *data)
{
  (void)data;
  char line[192 + sizeof S.chain], *p = line, *end = line + sizeof line - 1;
  p = tdl__put_str(p, end, "treadle watchdog: loop 0x");
  p = tdl__put_uint(p, end, (uint64_t)(uintptr_t)r->loop, 16);
  if (r->loop_name[0]) {
    p = tdl__put_str(p, end, " \"");
    p = tdl__put_str(p, end, r->loop_name);
    p = tdl__put_str(p, end, "\"");
  }
  p = tdl__put_str(p, end, " away from its poll for ");
  p = tdl__put_ms(p, end, r->away);
  if (r->fiber) {
    p = tdl__put_str(p, end, ", in fiber ");
    p = tdl__put_uint(p, end, r->fiber_id, 10);
    if (r->fiber[0]) {
      p = tdl__put_str(p, end, " \"");
      p = tdl__put_str(p, end, r->fiber);
      p = tdl__put_str(p, end, "\"");
    }
  } else {
    p = tdl__put_str(p, end, ", in a callback (no fiber)");
  }
  if (p < end)
    *p++ = '\n';
  p = tdl__put_str(p, end, tdl_watchdog_report_chain(r));
  /* One write, so that the report is not split by other output; a failure
   * has nowhere to be reported. */
  ssize_t ignored = tdl__sys_write(STDERR_FILENO, line, (size_t)(p - line));
  (void)ignored;
}

/* ---- the watchdog thread ---- */

/* Under the lock: call w's callback without the lock, w marked meanwhile so
 * that nobody unlinks or changes it. */
static void report(tdl__watch *w, const tdl_watchdog_report *r)
{
  w->in_report = true;
  tdl_watchdog_cb cb = w->cb ? w->cb : report_to_stderr;
  void *data = w->data;
  sample(w);
  pthread_mutex_unlock(&W.lock);
  name_sample();
  S.report = r;
  cb(r, data);
  S.report = NULL;
  pthread_mutex_lock(&W.lock);
  w->in_report = false;
  pthread_cond_broadcast(&W.idle);
}

/* Under the lock. */
static void check_all(void)
{
  tdl_time_t now = tdl__clock_now();
  for (tdl__list *n = tdl__list_first(&W.watched); n; n = tdl__list_next(&W.watched, n)) {
    tdl__watch *w = TDL__CONTAINER_OF(n, tdl__watch, link);
    tdl_watchdog_report r;
    char fiber[TDL__WATCH_NAME];
    if (stall_to_report(w, now, &r, fiber)) {
      report(w, &r); /* w stays linked meanwhile, so n->next is still valid */
      now = tdl__clock_now();
    }
  }
}

/* Under the lock: how long to sleep between looks. */
static tdl_time_t period(void)
{
  tdl_time_t smallest = TDL_TIME_MAX;
  TDL__LIST_FOREACH(n, &W.watched) {
    tdl__watch *w = TDL__CONTAINER_OF(n, tdl__watch, link);
    if (w->threshold < smallest)
      smallest = w->threshold;
  }
  tdl_time_t p = smallest / CHECKS_PER_THRESHOLD;
  return p < MIN_PERIOD ? MIN_PERIOD : p;
}

/* Under the lock: sleep until `until` (CLOCK_MONOTONIC) or a signal on tick. */
static void sleep_until(tdl_time_t until)
{
  struct timespec ts = {.tv_sec = until / TDL_SEC, .tv_nsec = until % TDL_SEC};
  pthread_cond_timedwait(&W.tick, &W.lock, &ts);
}

static void *watchdog_main(void *arg)
{
  (void)arg;
  on_watchdog_thread = true;
  pthread_mutex_lock(&W.lock);
  while (!tdl__list_empty(&W.watched)) {
    check_all();
    if (tdl__list_empty(&W.watched))
      break;
    sleep_until(tdl__time_add(tdl__clock_now(), period()));
  }
  /* No loop is watched: exit, and let the next start make a new thread. */
  W.thread_running = false;
  pthread_mutex_unlock(&W.lock);
  return NULL;
}

/* Under the lock: start the thread.  0 or -EAGAIN. */
static int start_thread(void)
{
  int e = tdl__thread_start(watchdog_main, NULL);
  if (e == 0)
    W.thread_running = true;
  return e;
}

/* ---- fork() ---- */

/* The child must not inherit the lock held, and has no watchdog thread: a
 * report in progress in the parent is not one in the child. */
static void before_fork(void) { pthread_mutex_lock(&W.lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&W.lock); }

static void init_conds(void)
{
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines on the one clock */
  pthread_cond_init(&W.tick, &ca);
  pthread_cond_init(&W.idle, &ca);
  pthread_condattr_destroy(&ca);
}

static void after_fork_child(void)
{
  pthread_mutex_init(&W.lock, NULL);
  init_conds();
  W.thread_running = false;
  TDL__LIST_FOREACH(n, &W.watched)
    TDL__CONTAINER_OF(n, tdl__watch, link)->in_report = false;
}

/* Under the lock. */
static void ready(void)
{
  if (W.ready)
    return;
  init_conds();
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  choose_signal();
  W.ready = true;
}

/* ---- the loop's side (its thread) ---- */

/* Under the lock: the watchdog thread runs.  0 or -EAGAIN. */
static int ensure_thread(void)
{
  ready();
  return W.thread_running ? 0 : start_thread();
}

/* Under the lock: until w's callback (if running) has returned. */
static void wait_no_report(tdl__watch *w)
{
  while (w->in_report)
    pthread_cond_wait(&W.idle, &W.lock);
}

/* Under the lock. */
static void set_options(tdl__watch *w, const tdl_watchdog_options *opts)
{
  w->threshold = opts && opts->threshold ? opts->threshold : TDL_WATCHDOG_THRESHOLD;
  w->cb = opts ? opts->cb : NULL;
  w->data = opts ? opts->data : NULL;
  memset(w->name, 0, sizeof w->name);
  if (opts && opts->name)
    strncpy(w->name, opts->name, sizeof w->name - 1);
}

static int check_caller(tdl_loop *loop)
{
  if (!loop)
    return -EINVAL;
  if (on_watchdog_thread)
    return -EDEADLK; /* stop would wait for the callback that calls it */
  TDL__CHECK_THREAD(loop);
  return 0;
}

/* A first watchdog for loop.  The heartbeat is filled in before the record is
 * linked, so the watchdog thread never sees it half made. */
static int watch_new(tdl_loop *loop, const tdl_watchdog_options *opts)
{
  tdl__watch *w = TDL__FAULT_ALLOC(aligned_alloc(64, sizeof *w)); /* sizeof is a multiple of 64 */
  if (!w)
    return -ENOMEM;
  memset(w, 0, sizeof *w);
  w->loop = loop;
  set_options(w, opts);
  w->owner = pthread_self();
  w->tid = (pid_t)syscall(SYS_gettid);
  pthread_attr_t attr;
  if (pthread_getattr_np(w->owner, &attr) == 0) {
    void *lo;
    size_t size;
    if (pthread_attr_getstack(&attr, &lo, &size) == 0) {
      w->thread_lo = (uintptr_t)lo;
      w->thread_hi = (uintptr_t)lo + size;
    }
    pthread_attr_destroy(&attr);
  }
  /* Started from inside the loop: this iteration began at loop->now. */
  w->hb.away_since = loop->running ? loop->now : 0;
  loop->watch = &w->hb;
  if (loop->sched_watched)
    loop->sched_watched(loop); /* the fiber running now, if any */
  pthread_mutex_lock(&W.lock);
  int e = ensure_thread();
  if (e == 0) {
    tdl__list_push(&W.watched, &w->link);
    pthread_cond_signal(&W.tick); /* its threshold may be the smallest now */
  }
  pthread_mutex_unlock(&W.lock);
  if (e < 0) {
    loop->watch = NULL;
    free(w);
  }
  return e;
}

int tdl_watchdog_start(tdl_loop *loop, const tdl_watchdog_options *opts)
{
  int e = check_caller(loop);
  if (e < 0)
    return e;
  if (opts && opts->threshold < 0)
    return -EINVAL;
  if (!loop->watch)
    return watch_new(loop, opts);
  tdl__watch *w = TDL__CONTAINER_OF(loop->watch, tdl__watch, hb);
  pthread_mutex_lock(&W.lock);
  e = ensure_thread(); /* none in a child after fork() */
  if (e == 0) {
    wait_no_report(w);
    set_options(w, opts);
    pthread_cond_signal(&W.tick);
  }
  pthread_mutex_unlock(&W.lock);
  return e;
}

void tdl__watchdog_close(tdl_loop *loop)
{
  if (!loop->watch)
    return;
  tdl__watch *w = TDL__CONTAINER_OF(loop->watch, tdl__watch, hb);
  loop->watch = NULL; /* the loop's thread stores into it no more */
  pthread_mutex_lock(&W.lock);
  wait_no_report(w);
  tdl__list_remove(&w->link);
  if (tdl__list_empty(&W.watched))
    pthread_cond_signal(&W.tick); /* the thread exits now rather than at its next look */
  pthread_mutex_unlock(&W.lock);
  free(w);
}

bool tdl__watchdog_peek(const tdl_loop *loop, tdl__watch_state *out)
{
  bool found = false;
  pthread_mutex_lock(&W.lock);
  TDL__LIST_FOREACH(n, &W.watched) {
    tdl__watch *w = TDL__CONTAINER_OF(n, tdl__watch, link);
    if (w->loop != loop)
      continue;
    memcpy(out->name, w->name, sizeof out->name);
    out->away_since = __atomic_load_n(&w->hb.away_since, __ATOMIC_ACQUIRE);
    if (!read_running(&w->hb, &out->fiber_id, out->fiber)) {
      out->fiber_id = 0;
      out->fiber[0] = '\0';
    }
    found = true;
    break;
  }
  pthread_mutex_unlock(&W.lock);
  return found;
}

int tdl_watchdog_stop(tdl_loop *loop)
{
  int e = check_caller(loop);
  if (e < 0)
    return e;
  tdl__watchdog_close(loop);
  return 0;
}
