/* SPDX-License-Identifier: MIT */
/*
 * The fiber scheduler: spawn, switch, park/wake, join, detach, cancel.
 *
 * Switching.  A fiber that parks or yields switches directly to the next
 * runnable fiber; only when none is left (or after a batch of switches, so
 * the loop still polls for I/O) does it switch back to the loop's own
 * context.  A wake therefore costs a queue push, and a hand-off between two
 * fibers one register switch.
 *
 * Memory.  A fiber's control block sits at the top of its stack; stacks come
 * from a per-loop cache (stack.c).  Handles are (slot, generation) pairs into
 * a slot table, so a stale handle is detected without touching a stack that
 * may have been reused or unmapped.
 *
 * A finished detached fiber cannot free the stack it is running on: it marks
 * itself dead and switches away, and whoever runs next releases it.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fiber/fiber_internal.h"

/* DISPATCH_BATCH: fibers run back to back before the loop polls for I/O
 * again (a poll costs a system call; 512 switches take ~10 us).  But fibers
 * that each do real work between switches (a few system calls: 10 us) would
 * keep the loop from its poll, its timers and the rest of its I/O for
 * milliseconds: so every DISPATCH_CHECK switches the clock is read, and the
 * batch ends once DISPATCH_SPAN has passed (see sched_run). */
enum { DISPATCH_BATCH = 512, DISPATCH_CHECK = 128, IO_BUDGET = 64, STACKS_CACHED = 1024 };
#define DISPATCH_SPAN (500 * TDL_USEC)

/* Distinct offsets of the control block below the stack top (see spawn);
 * 16 lines = at most 960 bytes, so an idle fiber's block and first frames
 * still share the stack's top page. */
enum { CACHE_COLOURS = 16 };

/* initial-exec: read on every blocking call; the default model for a shared
 * library would call __tls_get_addr each time. */
_Thread_local tdl__sched *tdl__tl_sched __attribute__((tls_model("initial-exec")));

_Thread_local tdl__list tdl__thread_scheds;

tdl__list tdl__process_scheds;
pthread_mutex_t tdl__process_scheds_lock = PTHREAD_MUTEX_INITIALIZER;
int tdl__dump_armed;

/* A fork in another thread while it held the lock must not leave the
 * child's copy locked for ever. */
static void process_scheds_child(void) { pthread_mutex_init(&tdl__process_scheds_lock, NULL); }
static void process_scheds_once(void) { (void)pthread_atfork(NULL, NULL, process_scheds_child); }
static pthread_once_t process_scheds_ready = PTHREAD_ONCE_INIT;

static void process_scheds_add(tdl__sched *s)
{
  pthread_once(&process_scheds_ready, process_scheds_once);
  pthread_mutex_lock(&tdl__process_scheds_lock);
  tdl__list_push(&tdl__process_scheds, &s->in_process);
  pthread_mutex_unlock(&tdl__process_scheds_lock);
}

static void process_scheds_remove(tdl__sched *s)
{
  pthread_mutex_lock(&tdl__process_scheds_lock);
  tdl__list_remove(&s->in_process);
  pthread_mutex_unlock(&tdl__process_scheds_lock);
}

#if !defined(TDL_ASAN) && !defined(TDL_TSAN) /* sanitizer builds add fields to tdl__ctx */
_Static_assert(offsetof(tdl__fiber, detached) < 64, "a park's fields share the first cache line");
#endif

/* ---- handles ---- */

tdl_fiber_t tdl__fiber_handle(const tdl__fiber *f) { return ((uint64_t)f->gen << 32) | (f->slot + 1); }

tdl__fiber *tdl__fiber_lookup(tdl__sched *s, tdl_fiber_t h)
{
  uint32_t slot = (uint32_t)h - 1, gen = (uint32_t)(h >> 32);
  if (!s || (uint32_t)h == 0 || slot >= s->nslots || s->slots[slot].gen != gen)
    return NULL;
  return s->slots[slot].f;
}

static int slot_alloc(tdl__sched *s, uint32_t *out)
{
  if (s->free_slot != UINT32_MAX) {
    *out = s->free_slot;
    s->free_slot = s->slots[*out].next_free;
    return 0;
  }
  if (s->nslots == s->slots_cap) {
    uint32_t cap = s->slots_cap ? s->slots_cap * 2 : 256;
    tdl__slot *sl = TDL__FAULT_ALLOC(realloc(s->slots, (size_t)cap * sizeof *sl));
    if (!sl)
      return -ENOMEM;
    s->slots = sl;
    s->slots_cap = cap;
  }
  *out = s->nslots;
  s->slots[*out] = (tdl__slot){NULL, 1, UINT32_MAX};
  s->nslots++;
  return 0;
}

/* ---- the run queue ---- */

static inline tdl__fiber *runq_pop(tdl__sched *s)
{
  tdl__qnode *n = tdl__queue_pop(&s->runq);
  return n ? TDL__CONTAINER_OF(n, tdl__fiber, run) : NULL;
}

/* ---- releasing ---- */

/* The pool's trim, once a period while it caches stacks (stack.h,
 * "Trimming"): memory goes back after a peak without a system call on the
 * spawn and exit paths.  The fd tables that a peak of connections grew
 * shrink back here too, once those fds are closed. */
static void trim_cb(tdl_loop *loop, tdl_timer *t)
{
  tdl__sched *s = t->data;
  TDL__LIST_FOREACH(n, &s->hooks) {
    tdl__sched_client *h = TDL__CONTAINER_OF(n, tdl__sched_client, link);
    if (h->trim)
      h->trim(s, h);
  }
  tdl__fd_tables_trim(loop);
  tdl__timers_trim(&loop->timers);
  if (tdl__stack_pool_trim(&s->pool) == 0) {
    tdl_timer_stop(loop, t);
    loop->timers_internal--;
  }
}

static __attribute__((noinline, cold)) void trim_arm(tdl__sched *s)
{
  if (s->pool.cached && tdl_timer_start(s->loop, &s->trim, TDL__STACK_TRIM_PERIOD, TDL__STACK_TRIM_PERIOD) == 0)
    s->loop->timers_internal++;
}

static void trim_stop(tdl__sched *s)
{
  if (tdl_timer_active(&s->trim)) {
    tdl_timer_stop(s->loop, &s->trim);
    s->loop->timers_internal--;
  }
}

static void release(tdl__sched *s, tdl__fiber *f)
{
  tdl__list_remove(&f->all);
  tdl__slot *sl = &s->slots[f->slot];
  sl->f = NULL;
  sl->gen++; /* every handle to it is now stale */
  if (sl->gen == 0)
    sl->gen = 1;
  sl->next_free = s->free_slot;
  s->free_slot = f->slot;
  s->live--;
  tdl__ctx_destroy(&f->ctx);
  if (f->fls) /* fls.c's values array, if it set one (most fibers set none) */
    free(f->fls);
  /* f lives on that stack, unless offstack: put copies *s before it
   * writes there.  Passed in place, not through a copy here: put loads
   * the descriptor 16 bytes at a time across the two halves that a copy
   * here stores, which no store can be forwarded to (fiber-spawn: that
   * stall was a tenth of its time). */
  bool heap = f->offstack;
  tdl__stack_put(&s->pool, &f->stack);
  if (heap)
    free(f);
  /* Armed once per quiet spell: afterwards a test of one word. */
  if (TDL__UNLIKELY(!tdl_timer_active(&s->trim)))
    trim_arm(s);
}

static inline void reap_dead(tdl__sched *s)
{
  if (TDL__UNLIKELY(s->dead != NULL)) {
    tdl__fiber *d = s->dead;
    s->dead = NULL;
    release(s, d);
  }
}

/* ---- switching ---- */

/* The next runnable fiber, or NULL for the loop when there is none or the
 * batch is used up. */
static inline tdl__fiber *pick_next(tdl__sched *s)
{
  if (!s->dispatch_left)
    return NULL;
  s->dispatch_left--;
  return runq_pop(s);
}

/* Tell the loop's watchdog what runs now: f, or the loop's own code when
 * NULL.  The watchdog thread cannot read f itself (f is on f's stack, which
 * may be reused or unmapped under it), so the name is copied for it. */
static void publish_running(tdl__sched *s, const tdl__fiber *f)
{
  uintptr_t lo = f ? (uintptr_t)f->stack.lo : 0;
  tdl__heartbeat_running(s->loop->watch, f ? f->id : 0, f ? f->name : NULL, lo, f ? lo + f->stack.size : 0);
}

_Static_assert(sizeof(((tdl__fiber *)0)->name) == TDL__WATCH_NAME, "the watchdog copies whole names");

/* Make next (or the loop, when NULL) the running context; returns where to
 * switch. */
static inline tdl__ctx *enter(tdl__sched *s, tdl__fiber *next)
{
  if (TDL__UNLIKELY(s->loop->watch != NULL))
    publish_running(s, next);
  if (next) {
    next->state = TDL__FIBER_RUNNING;
    s->current = next;
    tdl__running_stack = &next->info;
    return &next->ctx;
  }
  s->current = NULL;
  tdl__running_stack = NULL;
  return &s->loop_ctx;
}

/* Switch from f (which has already been queued, parked or finished) to the
 * next runnable fiber, or to the loop when there is none or the batch is
 * used up.  Returns when f runs again. */
static void switch_out(tdl__sched *s, tdl__fiber *f)
{
  tdl__fiber *next = pick_next(s);
  if (next == f) { /* f yielded and nobody else wanted to run */
    f->state = TDL__FIBER_RUNNING;
    TDL__SCHED_COUNT(s, unswitched);
    return;
  }
  tdl__switch(&f->ctx, enter(s, next), next);
  reap_dead(s);
}

static void lazy_set(tdl__fiber *f, bool lazy); /* park and wake, below */

static _Noreturn void finish(tdl__sched *s, tdl__fiber *f, void *result)
{
  f->result = result; /* before the cleanups: a group fiber's hands it on */
  /* Most recent first; a cleanup may link more (a destructor that locks). */
  tdl__list *n;
  while ((n = tdl__list_pop(&f->cleanups)) != NULL) {
    tdl__cleanup *c = TDL__CONTAINER_OF(n, tdl__cleanup, link);
    c->run(c);
  }
  if (f->timer_lazy) { /* the only way its timer can still be armed */
    tdl_timer_stop(s->loop, &f->timer);
    lazy_set(f, false);
  }
  f->state = TDL__FIBER_DONE;
  s->unfinished--;
  if (f->joiner)
    tdl__wake(f->joiner, 0);
  if (f->detached)
    s->dead = f;
  tdl__fiber *next = pick_next(s);
  TDL__SCHED_COUNT(s, finishes);
  tdl__switch_exit(&f->ctx, enter(s, next), next);
}

static void fiber_entry(void *arg)
{
  tdl__fiber *f = arg;
  tdl__switch_entered(&f->ctx);
  reap_dead(f->sched);
  finish(f->sched, f, f->fn(f->arg));
}

/* The loop's turn to run fibers (called once per loop iteration). */
static void sched_run(tdl_loop *loop)
{
  tdl__sched *s = loop->sched;
  if (tdl__queue_empty(&s->runq))
    return;
  tdl__sched *outer = tdl__tl_sched; /* a callback of another loop may run us */
  tdl__tl_sched = s;
  /* The batch goes in rounds of DISPATCH_CHECK switches; between rounds,
   * back in the loop's context, the clock says whether to go on (the
   * switch path itself stays free of it: a check there cost 8 instructions
   * a switch). */
  tdl_time_t until = loop->now + DISPATCH_SPAN; /* the time of the poll just made */
  unsigned rounds = DISPATCH_BATCH / DISPATCH_CHECK;
  do {
    s->dispatch_left = DISPATCH_CHECK;
    tdl__fiber *f = runq_pop(s);
    TDL__SCHED_COUNT(s, dispatches);
    tdl__switch(&s->loop_ctx, enter(s, f), f);
    reap_dead(s);
  } while (--rounds && !tdl__queue_empty(&s->runq) && tdl__clock_now() < until);
  enter(s, NULL);
  tdl__tl_sched = outer;
}

static bool sched_busy(tdl_loop *loop)
{
  tdl__sched *s = loop->sched;
  return !tdl__queue_empty(&s->runq);
}

/* Fibers that have not finished keep the loop going (finished ones only
 * wait to be joined). */
static bool sched_alive(tdl_loop *loop)
{
  tdl__sched *s = loop->sched;
  return s->unfinished > 0;
}

static int sched_destroy(tdl_loop *loop)
{
  tdl__sched *s = loop->sched;
  if (!s)
    return 0;
  if (s->live)
    return -EBUSY;
  tdl__list_remove(&s->on_thread);
  process_scheds_remove(s);
  tdl__list *n;
  while ((n = tdl__list_pop(&s->hooks)) != NULL) {
    tdl__sched_client *h = TDL__CONTAINER_OF(n, tdl__sched_client, link);
    h->destroy(s, h);
  }
  trim_stop(s);
  if (tdl_timer_active(&s->compact)) { /* compact.c's walk */
    tdl_timer_stop(loop, &s->compact);
    loop->timers_internal--;
  }
  tdl__stack_pool_destroy(&s->pool);
  if (s->overflow_ready)
    tdl__overflow_thread_cleanup();
  free(s->slots);
  free(s);
  loop->sched = NULL;
  return 0;
}

/* The loop's watchdog was started: later switches publish themselves. */
static void sched_watched(tdl_loop *loop)
{
  tdl__sched *s = loop->sched;
  if (s)
    publish_running(s, s->current);
}

int tdl__sched_get(tdl_loop *loop, tdl__sched **out)
{
  if (loop->sched) {
    *out = loop->sched;
    return 0;
  }
  tdl__sched *s = TDL__FAULT_ALLOC(calloc(1, sizeof *s));
  if (!s)
    return -ENOMEM;
  s->loop = loop;
  s->free_slot = UINT32_MAX;
  tdl__stack_pool_init(&s->pool, STACKS_CACHED);
  tdl_timer_init(&s->trim, trim_cb, s);
  /* Without it an overflow is a plain segfault; fibers still work. */
  s->overflow_ready = tdl__overflow_thread_init() == 0;
  tdl__list_push(&tdl__thread_scheds, &s->on_thread);
  /* While a dump on a signal is armed, the loop gets its port now (before
   * the dump can find it), so that the dump can reach it; without one it is
   * only unreachable, which the dump says. */
  if (__atomic_load_n(&tdl__dump_armed, __ATOMIC_RELAXED))
    (void)tdl__remote_open(loop);
  process_scheds_add(s);
  loop->sched = s;
  loop->sched_run = sched_run;
  loop->sched_busy = sched_busy;
  loop->sched_alive = sched_alive;
  loop->sched_destroy = sched_destroy;
  loop->sched_watched = sched_watched;
  *out = s;
  return 0;
}

/* ---- park and wake ---- */

/* Here, not in compact.c, which stands on the scheduler: tdl__wake_idle
 * calls it. */
__attribute__((noinline, cold)) void tdl__compact_restore(tdl__sched *s, tdl__fiber *f)
{
  tdl__stack_unstash(f->compact_from, f->frames_top, f->compact_copy);
  f->compact_copy = NULL;
  f->compacted = 0;
  s->compacted--;
}

/* End f's park early (deadline, cancel) with result, and let whatever it
 * waits in undo its wait at once. */
static void abort_park(tdl__fiber *f, int result)
{
  if (tdl__wake_idle(f, result) && f->abort_wait)
    f->abort_wait(f);
}

/* A timed park's timer is not stopped when the park ends: the next timed
 * park usually comes long before it would fire (a server's read deadline,
 * renewed at every request) and then takes it over for nothing, where a stop
 * and a start cost a tombstone and an entry in the timer heap, and the
 * ordering of both (httpd: 1.1 % of its CPU on one core).  A timer left so
 * is "lazy": it serves no park, counts among the loop's internal timers (it
 * keeps no loop alive and hides no deadlock), and when it fires it lapses.
 * The price is at most one early wake-up of the loop per fiber and deadline
 * period, when a lazy timer fires, or one that fired before the deadline of
 * the park that took it over is armed again for the rest. */
static void lazy_set(tdl__fiber *f, bool lazy)
{
  f->timer_lazy = lazy;
  if (lazy)
    f->sched->loop->timers_internal++;
  else
    f->sched->loop->timers_internal--;
}

static void deadline_cb(tdl_loop *loop, tdl_timer *t)
{
  tdl__fiber *f = t->data;
  if (f->timer_lazy) {
    lazy_set(f, false);
    return;
  }
  if (f->deadline > loop->now) { /* taken over from an earlier park: armed again for the rest */
    int e = tdl_timer_start_at(loop, t, f->deadline, 0);
    if (e < 0)
      abort_park(f, e); /* as a park whose timer cannot be armed */
    return;
  }
  abort_park(f, -ETIMEDOUT);
}

/* f's timer, for a park until deadline: a lazy one that fires no later is
 * taken over as it is. */
static int deadline_arm(tdl__sched *s, tdl__fiber *f, tdl_time_t deadline)
{
  if (f->timer_lazy) {
    lazy_set(f, false);
    if (f->timer.at <= deadline)
      return 0;
  }
  return tdl_timer_start_at(s->loop, &f->timer, deadline, 0);
}

/* The park of both forms: cancellable or not (then a cancel only marks). */
static int park(tdl__fiber *f, const char *what, int fd, tdl_time_t deadline, bool nocancel)
{
  tdl__sched *s = f->sched;
  bool timed = deadline != TDL_FOREVER;
  if (timed) {
    if (deadline <= s->loop->now)
      return -ETIMEDOUT;
    int e = deadline_arm(s, f, deadline);
    if (e < 0)
      return e; /* parking without the timer could wait forever */
  }
  /* What it waits on is only read while it is parked (tdl_fiber_foreach), and
   * every waker sets wake_result: nothing needs clearing afterwards. */
  f->state = TDL__FIBER_PARKED;
  f->waits_on = what;
  f->wait_fd = fd;
  f->deadline = deadline;
  f->parked_at = s->loop->now;
  f->io_budget = IO_BUDGET;
  TDL__SCHED_COUNT(s, parks);
  if (nocancel) {
    f->nocancel = 1;
    switch_out(s, f);
    f->nocancel = 0;
  } else {
    switch_out(s, f);
  }
  if (timed && tdl_timer_active(&f->timer))
    lazy_set(f, true); /* not stopped: see lazy_set */
  return f->wake_result;
}

int tdl__park(tdl__fiber *f, const char *what, int fd, tdl_time_t deadline)
{
  if (f->cancelled)
    return -ECANCELED;
  return park(f, what, fd, deadline, false);
}

int tdl__park_compactable(tdl__fiber *f, const char *what, int fd, tdl_time_t deadline)
{
  if (f->cancelled)
    return -ECANCELED;
  f->compactable = 1;
  int e = park(f, what, fd, deadline, false);
  f->compactable = 0;
  return e;
}

int tdl__park_nocancel(tdl__fiber *f, const char *what, tdl_time_t deadline)
{
  return park(f, what, -1, deadline, true);
}

int tdl__park_uncancellable(tdl__fiber *f, const char *what) { return park(f, what, -1, TDL_FOREVER, true); }

void tdl__io_budget_spend(tdl__fiber *f)
{
  if (--f->io_budget == 0) {
    f->io_budget = IO_BUDGET;
    tdl__runq_push(f->sched, f);
    switch_out(f->sched, f);
  }
}

/* ---- the public API ---- */

/* Zero a control block on its stack (64-byte aligned) with plain vector
 * stores: GCC's memset of this size on x86-64 is `rep stos`, whose start-up
 * costs more than the stores, and whose stores a later load of the block
 * cannot take its value from (fiber-spawn: 13 % of the time in the stos,
 * and as much again in the first read after it; 6 % less CPU per fiber
 * without). */
typedef uint64_t tdl__line __attribute__((vector_size(16), aligned(16)));

static inline void zero_block(tdl__fiber *f)
{
  /* Up to the next 16 bytes: the block's place is 64-byte aligned and
   * ends at most at the 64-byte aligned top, so that much is its own. */
  tdl__line *p = (tdl__line *)(void *)f;
#pragma GCC unroll 64
  for (size_t i = 0; i < (sizeof *f + sizeof *p - 1) / sizeof *p; i++)
    p[i] = (tdl__line){0, 0};
}

int tdl_fiber_spawn(tdl_fiber_t *out, tdl_loop *loop, tdl_fiber_fn fn, void *arg, const tdl_fiber_options *opts)
{
  TDL__CHECK_THREAD(loop);
  if (out)
    *out = 0;
  if (!fn)
    return -EINVAL;
  size_t size = opts && opts->stack_size ? opts->stack_size : TDL_STACK_DEFAULT;
  if (size < TDL_STACK_MIN || size > TDL_STACK_MAX)
    return -EINVAL;
  tdl__sched *s;
  int e = tdl__sched_get(loop, &s);
  if (e < 0)
    return e;
  uint32_t slot;
  /* The grown table is in s->slots: GCC's stale-pointer leak (base.h). */
  TDL__ANALYZER_IGNORE("-Wanalyzer-malloc-leak")
  if ((e = slot_alloc(s, &slot)) < 0)
    return e;
  TDL__ANALYZER_END
  tdl__stack st;
  if ((e = tdl__stack_get(&s->pool, size, &st)) < 0) {
    s->slots[slot].next_free = s->free_slot;
    s->free_slot = slot;
    return e;
  }
  /* The control block takes the top of the stack, cache-line aligned, moved
   * down by a "colour" of 0 to CACHE_COLOURS-1 cache lines.  Stack tops are
   * page-aligned, so without it every fiber's control block and hot frames
   * would land in the same few cache sets and evict each other (ring --via
   * wake, 503 fibers: 21.3 ns per hop without, 17.6 ns with). */
  uintptr_t top = (uintptr_t)st.lo + st.size - (uintptr_t)(s->next_id % CACHE_COLOURS) * 64;
  tdl__fiber *f;
  if (TDL__UNLIKELY(s->compact_after)) {
    /* Compactable: the block goes on the heap, the frames start at top.
     * malloc's 16-byte alignment, not a cache line's: the hot fields may
     * straddle two lines, but aligned_alloc's rounding would cost each
     * idle fiber, which is what compaction is for, some 30 bytes more. */
    f = TDL__FAULT_ALLOC(malloc(sizeof *f));
    if (!f) {
      tdl__stack_put(&s->pool, &st);
      s->slots[slot].next_free = s->free_slot;
      s->free_slot = slot;
      return -ENOMEM;
    }
    memset(f, 0, sizeof *f);
    f->offstack = 1;
    top &= ~(uintptr_t)63;
    f->frames_top = (char *)top;
    tdl__stack_claim(&st, (char *)top - TDL__CTX_PREPARE_BYTES);
  } else {
    f = (tdl__fiber *)((top - sizeof(tdl__fiber)) & ~(uintptr_t)63);
    tdl__stack_claim(&st, (char *)f - TDL__CTX_PREPARE_BYTES);
    zero_block(f);
    top = (uintptr_t)f;
  }
  f->sched = s;
  f->fn = fn;
  f->arg = arg;
  f->id = ++s->next_id;
  f->slot = slot;
  f->gen = s->slots[slot].gen;
  f->stack = st;
  f->wait_fd = -1;
  f->deadline = TDL_FOREVER;
  f->io_budget = IO_BUDGET;
  f->unpark_result = -1;
  f->detached = opts && opts->detached;
  /* Whether it is named is read from opts, not from f->name: a load of
   * what the zeroing just stored would wait for those stores to land. */
  bool named = opts && opts->name && opts->name[0];
  if (named)
    strncpy(f->name, opts->name, sizeof f->name - 1);
  tdl__stack_info_init(&f->info, &st, f->id, named ? f->name : NULL);
  tdl_timer_init(&f->timer, deadline_cb, f);
  tdl__ctx_init(&f->ctx, st.lo, (size_t)(top - (uintptr_t)st.lo), fiber_entry);
  s->slots[slot].f = f;
  tdl__list_push(&s->all, &f->all);
  s->live++;
  s->unfinished++;
  tdl__runq_push(s, f);
  if (out)
    *out = tdl__fiber_handle(f);
  return 0;
}

tdl_fiber_t tdl_fiber_self(void)
{
  tdl__fiber *f = tdl__self();
  return f ? tdl__fiber_handle(f) : 0;
}

tdl_loop *tdl_fiber_loop(void)
{
  tdl__fiber *f = tdl__self();
  return f ? f->sched->loop : NULL;
}

int tdl_fiber_yield(void)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  tdl__runq_push(f->sched, f);
  TDL__SCHED_COUNT(f->sched, yields);
  switch_out(f->sched, f);
  return 0;
}

void tdl_fiber_exit(void *result)
{
  tdl__fiber *f = tdl__self();
  if (f)
    finish(f->sched, f, result);
}

/* What a fiber parked in tdl_fiber_park waits on (unpark compares it). */
static const char park_reason[] = "park";
static const char sleep_reason[] = "sleep";

/* The parks that may be compacted (compact.c): those of tdl_fiber_park and
 * tdl_sleep, told by what they wait on (no store on their path), and those
 * that say so (tdl__park_compactable). */
bool tdl__park_idle(const tdl__fiber *f)
{
  return f->compactable || f->waits_on == park_reason || f->waits_on == sleep_reason;
}

int tdl_fiber_park(tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (f->permit) {
    f->permit = 0;
    return 0;
  }
  return tdl__park(f, park_reason, -1, deadline);
}

int tdl_sleep(tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  int e = tdl__park(f, sleep_reason, -1, deadline);
  return e == -ETIMEDOUT ? 0 : e;
}

int tdl_fiber_unpark(tdl_loop *loop, tdl_fiber_t h)
{
  TDL__CHECK_THREAD(loop);
  tdl__fiber *f = tdl__fiber_lookup(loop->sched, h);
  if (!f || f->state == TDL__FIBER_DONE)
    return -ESRCH;
  if (f->state == TDL__FIBER_PARKED) {
    if (f->waits_on == park_reason) {
      tdl__wake_idle(f, 0);
      return 0;
    }
    /* A select with a PARK clause: it must win the select's claim. */
    if (f->unpark_result >= 0 && (!f->unpark_claim || tdl__claim_take(f->unpark_claim, f->unpark_result))) {
      tdl__wake(f, f->unpark_result);
      return 0;
    }
  }
  f->permit = 1;
  return 0;
}

bool tdl_fiber_cancelled(void)
{
  tdl__fiber *f = tdl__self();
  return f && f->cancelled;
}

int tdl_fiber_join(tdl_fiber_t h, void **result, tdl_time_t deadline)
{
  tdl__fiber *self = tdl__self();
  if (!self)
    return -EPERM;
  tdl__sched *s = self->sched;
  tdl__fiber *f = tdl__fiber_lookup(s, h);
  if (!f)
    return -ESRCH;
  if (f == self)
    return -EDEADLK;
  if (f->detached)
    return -EINVAL;
  if (f->joiner)
    return -EBUSY;
  if (f->state != TDL__FIBER_DONE) {
    /* A cancelled fiber may still wait for one that is cancelled too (it
     * unwinds soon), so that it can collect what it started. */
    if (self->cancelled && !f->cancelled)
      return -ECANCELED;
    f->joiner = self;
    int e = self->cancelled ? tdl__park_nocancel(self, "join", deadline) : tdl__park(self, "join", -1, deadline);
    f->joiner = NULL;
    if (e < 0 && f->state != TDL__FIBER_DONE)
      return e;
  }
  if (result)
    *result = f->result;
  release(s, f);
  return 0;
}

int tdl_fiber_detach(tdl_loop *loop, tdl_fiber_t h)
{
  TDL__CHECK_THREAD(loop);
  tdl__sched *s = loop->sched;
  tdl__fiber *f = tdl__fiber_lookup(s, h);
  if (!f)
    return -ESRCH;
  if (f->detached)
    return -EINVAL;
  f->detached = 1;
  if (f->state == TDL__FIBER_DONE)
    release(s, f);
  return 0;
}

int tdl_fiber_cancel(tdl_loop *loop, tdl_fiber_t h)
{
  TDL__CHECK_THREAD(loop);
  tdl__fiber *f = tdl__fiber_lookup(loop->sched, h);
  if (!f || f->state == TDL__FIBER_DONE)
    return -ESRCH;
  f->cancelled = 1;
  if (!f->nocancel)
    abort_park(f, -ECANCELED);
  return 0;
}

void tdl__sched_release_finished(tdl__sched *s)
{
  if (!s)
    return;
  for (tdl__list *n = tdl__list_first(&s->all), *next; n; n = next) {
    next = tdl__list_next(&s->all, n);
    tdl__fiber *f = TDL__CONTAINER_OF(n, tdl__fiber, all);
    if (f->state == TDL__FIBER_DONE && !f->joiner)
      release(s, f);
  }
}
