/* SPDX-License-Identifier: MIT */
/*
 * Timers: a 4-ary min-heap of (deadline, timer) entries with lazy ordering.
 *
 * Most timeouts are cancelled before they are due (a read that completes, a
 * request that answers), so the heap puts off the work of ordering:
 *  - Arming appends an entry to the end of the array, unsorted: O(1), no
 *    comparison, touching only memory that the previous arm touched.
 *  - Cancelling turns the timer's entry into a tombstone (its pointer becomes
 *    NULL): O(1), touching only the timer and its slot.  Nothing is moved.
 *  - Before the loop needs the earliest deadline, order() makes the array a
 *    heap again: a few appended entries are sifted up one by one; a
 *    large batch is folded in with Floyd's bottom-up heap construction (O(n)),
 *    and tombstones are swept out when they outnumber the live entries.
 * So a timer that is armed and cancelled within one loop iteration is never
 * ordered at all, and a burst of arms is ordered in linear time.
 *
 * Entries are 16 bytes and the array is offset so that the four children of a
 * node share one 64-byte cache line.
 *
 * Timers due at the same instant must fire in the order they were armed, but a
 * heap pops equal keys in no particular order; so each iteration pops every
 * due timer into a batch (already sorted by deadline) and sorts runs of equal
 * deadlines by their arming sequence number before firing.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "loop/loop_internal.h"

enum { TIMER_IDLE = 0, TIMER_IN_HEAP = 1, TIMER_DUE = 2 };

/* Entry i's slot in the timer, so that cancel can find it. */
static inline void place(tdl__tentry *h, uint32_t i, tdl__tentry e)
{
  h[i] = e;
  if (e.t)
    e.t->slot = i;
}

static void sift_up(tdl__tentry *h, uint32_t i, tdl__tentry e)
{
  while (i > 0) {
    uint32_t p = (i - 1) / 4;
    if (h[p].at <= e.at)
      break;
    place(h, i, h[p]);
    i = p;
  }
  place(h, i, e);
}

static void sift_down(tdl__tentry *h, uint32_t n, uint32_t i, tdl__tentry e)
{
  for (;;) {
    uint32_t c = 4 * i + 1;
    if (c >= n)
      break;
    uint32_t m = c;
    if (TDL__LIKELY(c + 3 < n)) {
      /* A full set of children: a tournament keeps the comparisons
       * independent of each other. */
      uint32_t a = h[c + 1].at < h[c].at ? c + 1 : c;
      uint32_t b = h[c + 3].at < h[c + 2].at ? c + 3 : c + 2;
      m = h[b].at < h[a].at ? b : a;
    } else {
      for (uint32_t k = c + 1; k < n; k++)
        if (h[k].at < h[m].at)
          m = k;
    }
    if (h[m].at >= e.at)
      break;
    place(h, i, h[m]);
    i = m;
  }
  place(h, i, e);
}

static void heapify(tdl__tentry *h, uint32_t n)
{
  if (n < 2)
    return;
  for (uint32_t i = (n - 2) / 4 + 1; i-- > 0;)
    sift_down(h, n, i, h[i]);
}

/* Drop every tombstone, keeping the order of the rest. */
static void sweep(tdl__timers *ts)
{
  uint32_t j = 0;
  for (uint32_t i = 0; i < ts->n; i++)
    if (ts->heap[i].t)
      place(ts->heap, j++, ts->heap[i]);
  ts->n = j;
  ts->dead = 0;
}

/* Make heap[0, n) a valid heap. */
static void order(tdl__timers *ts)
{
  uint32_t fresh = ts->n - ts->sorted;
  if (ts->dead > 64 && ts->dead > ts->n / 2) {
    sweep(ts);
    heapify(ts->heap, ts->n);
  } else if (fresh > 64 && fresh > ts->sorted / 4) {
    /* Sifting each one up would be O(fresh * log n); rebuilding is O(n). */
    heapify(ts->heap, ts->n);
  } else {
    for (uint32_t i = ts->sorted; i < ts->n; i++)
      sift_up(ts->heap, i, ts->heap[i]);
  }
  ts->sorted = ts->n;
}

static void remove_root(tdl__timers *ts)
{
  tdl__tentry last = ts->heap[--ts->n];
  ts->sorted = ts->n;
  if (ts->n > 0)
    sift_down(ts->heap, ts->n, 0, last);
}

/* The heap lives in its own mapping: growing it is an mremap, which moves
 * page-table entries instead of copying the whole array, and keeps the page
 * alignment the cache-line layout relies on.
 *
 * `cap` counts the entries that are ready to be written, `mapped` those the
 * mapping holds.  Entries are made ready a stretch at a time with
 * MADV_POPULATE_WRITE: one system call fills the stretch's pages in a kernel
 * loop, where appending into untouched memory would take a page fault per
 * 4 KiB (a million timers: 4096 faults; add went from 12.7 to 10.3 ns here).
 * The stretch is bounded, so memory is committed no more than
 * POPULATE_BYTES ahead of use.  Where the call is missing (Linux < 5.14) it
 * fails harmlessly and pages fault in on first write as before. */
enum { HEAP_OFFSET = 3 }; /* entries before heap[0]: heap[1] starts a cache line */
#define POPULATE_BYTES ((size_t)2 << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* ThreadSanitizer does not follow mremap: the range a move leaves keeps its
 * access history, and when another loop's heap is later moved there, the
 * two threads' accesses look like a race.  It follows mmap and munmap, so
 * its builds move the heap by copying. */
#ifdef TDL_TSAN
#define MOVE_BY_COPY 1
#else
#define MOVE_BY_COPY 0
#endif

static size_t heap_bytes(uint32_t cap) { return ((size_t)cap + HEAP_OFFSET) * sizeof(tdl__tentry); }

static int map_more(tdl__timers *ts)
{
  uint32_t mapped = ts->mapped ? ts->mapped * 2 : 4096 / sizeof(tdl__tentry) - HEAP_OFFSET;
  if (mapped <= ts->mapped || mapped > UINT32_MAX / 4)
    return -ENOMEM;
  void *mem;
  if (ts->heap_mem && !MOVE_BY_COPY)
    mem = TDL__FAULT_MAP(mremap(ts->heap_mem, heap_bytes(ts->mapped), heap_bytes(mapped), MREMAP_MAYMOVE));
  else
    mem = TDL__FAULT_MAP(mmap(NULL, heap_bytes(mapped), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED)
    return -ENOMEM;
  if (ts->heap_mem && MOVE_BY_COPY) {
    memcpy(mem, ts->heap_mem, heap_bytes(ts->cap));
    munmap(ts->heap_mem, heap_bytes(ts->mapped));
  }
  /* No MADV_HUGEPAGE.  It was faster when 2 MiB pages came cheap (7.8 ns
   * per add), but a guest that hands free memory back to its hypervisor
   * (free page reporting, as on the benchmark VM) gives back exactly the
   * 2 MiB blocks a huge page needs, and faulting one in then costs the host
   * too: 14-20 ns per add inside long benchmark runs.  4 KiB pages filled by
   * the populate below measured 10-11 ns in both conditions; firing (which
   * sifts) did not change. */
  ts->heap_mem = mem;
  ts->heap = (tdl__tentry *)mem + HEAP_OFFSET;
  ts->mapped = mapped;
  return 0;
}

/* Make more entries ready: the next stretch of the mapping, mapping more
 * first when it is used up. */
static int grow(tdl__timers *ts)
{
  if (ts->cap == ts->mapped) {
    int r = map_more(ts);
    if (r < 0)
      return r;
  }
  size_t per = POPULATE_BYTES / sizeof(tdl__tentry);
  uint32_t next = ts->mapped - ts->cap > per ? ts->cap + (uint32_t)per : ts->mapped;
  uintptr_t from = ((uintptr_t)ts->heap_mem + heap_bytes(ts->cap)) & ~(uintptr_t)4095;
  uintptr_t to = (uintptr_t)ts->heap_mem + heap_bytes(next);
  madvise((void *)from, to - from, MADV_POPULATE_WRITE);
  ts->cap = next;
  return 0;
}

void tdl__timers_init(tdl__timers *ts) { memset(ts, 0, sizeof *ts); }

void tdl__timers_destroy(tdl__timers *ts)
{
  if (ts->heap_mem)
    munmap(ts->heap_mem, heap_bytes(ts->mapped));
  free(ts->due);
  free(ts->scratch);
  memset(ts, 0, sizeof *ts);
}

void tdl__timers_trim(tdl__timers *ts)
{
  /* Entries [n, cap) are ready and unused: after a peak of timers, give
   * their pages back (the mapping stays; grow() makes them ready again). */
  uintptr_t from = ((uintptr_t)ts->heap_mem + heap_bytes(ts->n) + 4095) & ~(uintptr_t)4095;
  uintptr_t to = ((uintptr_t)ts->heap_mem + heap_bytes(ts->cap)) & ~(uintptr_t)4095;
  if (!ts->heap_mem || to <= from || to - from < 4 * POPULATE_BYTES / 32)
    return;
  if (madvise((void *)from, to - from, MADV_DONTNEED) == 0)
    ts->cap = (uint32_t)((from - (uintptr_t)ts->heap_mem) / sizeof(tdl__tentry) - HEAP_OFFSET);
}

void tdl_timer_init(tdl_timer *t, tdl_timer_cb cb, void *data)
{
  memset(t, 0, sizeof *t);
  t->cb = cb;
  t->data = data;
}

static void unlink_timer(tdl__timers *ts, tdl_timer *t)
{
  if (t->state == TIMER_IN_HEAP) {
    uint32_t s = t->slot;
    if (s == ts->n - 1 && s >= ts->sorted) {
      ts->n--; /* the newest unsorted entry: just drop it */
    } else {
      ts->heap[s].t = NULL;
      ts->dead++;
    }
  } else if (t->state == TIMER_DUE) {
    ts->due[t->slot] = NULL;
  }
  t->state = TIMER_IDLE;
  ts->live--;
}

static inline void arm(tdl__timers *ts, tdl_timer *t, tdl_time_t at)
{
  t->at = at;
  t->seq = ++ts->seq;
  t->state = TIMER_IN_HEAP;
  t->slot = ts->n;
  ts->heap[ts->n++] = (tdl__tentry){at, t};
  ts->live++;
}

/* Re-arming a started timer, or a full heap: out of the way of the common
 * case, so that the fast path needs no stack frame. */
static __attribute__((noinline, cold)) int start_slow(tdl__timers *ts, tdl_timer *t, tdl_time_t at, tdl_time_t repeat)
{
  if (ts->n == ts->cap && t->state == TIMER_IDLE) {
    int r = grow(ts);
    if (r < 0)
      return r; /* the timer is left as it was */
  }
  if (t->state != TIMER_IDLE)
    unlink_timer(ts, t); /* its entry becomes a tombstone: room is not needed */
  if (ts->n == ts->cap) {
    int r = grow(ts);
    if (r < 0)
      return r;
  }
  t->repeat = repeat > 0 ? repeat : 0;
  arm(ts, t, at);
  return 0;
}

static inline int start(tdl_loop *loop, tdl_timer *t, tdl_time_t at, tdl_time_t repeat)
{
  tdl__timers *ts = &loop->timers;
  if (at < 0)
    at = 0;
  if (TDL__UNLIKELY(t->state != TIMER_IDLE || ts->n == ts->cap))
    return start_slow(ts, t, at, repeat);
  t->repeat = repeat > 0 ? repeat : 0;
  arm(ts, t, at);
  return 0;
}

int tdl_timer_start_at(tdl_loop *loop, tdl_timer *t, tdl_time_t deadline, tdl_time_t repeat)
{
  TDL__CHECK_THREAD(loop);
  if (deadline == TDL_FOREVER)
    return -EINVAL;
  return start(loop, t, deadline, repeat);
}

int tdl_timer_start(tdl_loop *loop, tdl_timer *t, tdl_time_t delay, tdl_time_t repeat)
{
  TDL__CHECK_THREAD(loop);
  return start(loop, t, tdl__time_add(loop->now, delay), repeat);
}

int tdl_timer_stop(tdl_loop *loop, tdl_timer *t)
{
  TDL__CHECK_THREAD(loop);
  if (t->state != TIMER_IDLE)
    unlink_timer(&loop->timers, t);
  return 0;
}

tdl_time_t tdl__timers_next(tdl_loop *loop)
{
  tdl__timers *ts = &loop->timers;
  if (ts->live == 0 || ts->n == 0)
    return TDL_FOREVER;
  if (ts->sorted != ts->n || ts->dead > ts->n / 2)
    order(ts);
  while (ts->n && !ts->heap[0].t) {
    remove_root(ts);
    ts->dead--;
  }
  return ts->n ? ts->heap[0].at : TDL_FOREVER;
}

/* Equal deadlines fire in arming order.  The batch is sorted by deadline;
 * only runs of equal deadlines need sorting, by sequence number. */
static int by_seq(const void *a, const void *b)
{
  uint64_t x = (*(tdl_timer *const *)a)->seq, y = (*(tdl_timer *const *)b)->seq;
  return x < y ? -1 : x > y;
}

/* Timers armed together (the usual source of equal deadlines: the same
 * cached "now" plus the same delay) have nearly consecutive sequence
 * numbers, so a run is placed by counting: seq - min indexes a scratch
 * array.  A run whose numbers are spread too thin falls back to qsort. */
static void sort_run(tdl__timers *ts, tdl_timer **run, uint32_t k)
{
  if (k < 8) {
    for (uint32_t i = 1; i < k; i++) {
      tdl_timer *t = run[i];
      uint32_t j = i;
      for (; j > 0 && run[j - 1]->seq > t->seq; j--)
        run[j] = run[j - 1];
      run[j] = t;
    }
    return;
  }
  uint64_t lo = run[0]->seq, hi = lo;
  for (uint32_t i = 1; i < k; i++) {
    uint64_t q = run[i]->seq;
    lo = q < lo ? q : lo;
    hi = q > hi ? q : hi;
  }
  uint64_t range = hi - lo + 1;
  if (range > 4 * (uint64_t)k || range > UINT32_MAX) {
    qsort(run, k, sizeof *run, by_seq);
    return;
  }
  if (range > ts->scratch_cap) {
    tdl_timer **sc = TDL__FAULT_ALLOC(realloc(ts->scratch, (size_t)range * sizeof *sc));
    if (!sc) {
      qsort(run, k, sizeof *run, by_seq);
      return;
    }
    ts->scratch = sc;
    ts->scratch_cap = (uint32_t)range;
  }
  memset(ts->scratch, 0, (size_t)range * sizeof *ts->scratch);
  for (uint32_t i = 0; i < k; i++)
    ts->scratch[run[i]->seq - lo] = run[i];
  uint32_t j = 0;
  for (uint64_t q = 0; q < range; q++)
    if (ts->scratch[q])
      run[j++] = ts->scratch[q];
}

static void sort_ties(tdl__timers *ts, tdl_timer **due, uint32_t n)
{
  for (uint32_t i = 0; i < n;) {
    uint32_t j = i + 1;
    while (j < n && due[j]->at == due[i]->at)
      j++;
    if (j - i > 1)
      sort_run(ts, due + i, j - i);
    i = j;
  }
}

void tdl__timers_run(tdl_loop *loop)
{
  tdl__timers *ts = &loop->timers;
  tdl_time_t now = loop->now;
  if (tdl__timers_next(loop) > now || ts->n == 0)
    return;

  /* Pop everything due into the batch.  When the batch's first allocation
   * fails, a few timers go through `spare` instead: without it nothing would
   * fire while memory is short, and the loop would spin on a due timer. */
  tdl_timer *spare[32];
  uint32_t k = 0;
  while (ts->n && ts->heap[0].at <= now) {
    tdl__tentry e = ts->heap[0];
    if (!e.t) {
      remove_root(ts);
      ts->dead--;
      continue;
    }
    if (k == ts->due_cap) {
      if (ts->due == spare)
        break;
      uint32_t cap = ts->due_cap ? ts->due_cap * 2 : 64;
      tdl_timer **due = TDL__FAULT_ALLOC(realloc(ts->due, (size_t)cap * sizeof *due));
      if (due) {
        ts->due = due;
        ts->due_cap = cap;
      } else if (k > 0) {
        break; /* fire what we have; the rest stays in the heap for next time */
      } else {
        ts->due = spare; /* never allocated (k == due_cap == 0): nothing to keep */
        ts->due_cap = sizeof spare / sizeof *spare;
      }
    }
    remove_root(ts);
    ts->due[k] = e.t;
    k++;
  }
  sort_ties(ts, ts->due, k);
  for (uint32_t i = 0; i < k; i++) {
    ts->due[i]->state = TIMER_DUE;
    ts->due[i]->slot = i;
  }
  ts->due_n = k;

  for (uint32_t i = 0; i < k; i++) {
    tdl_timer *t = ts->due[i];
    if (!t)
      continue; /* stopped by an earlier callback of this batch */
    ts->due[i] = NULL;
    t->state = TIMER_IDLE;
    ts->live--;
    if (t->repeat) {
      /* Re-arm before the callback, so that it may stop or restart the timer;
       * periods missed while the loop was busy are skipped, not replayed. */
      tdl_time_t r = t->repeat, next = tdl__time_add(t->at, r);
      if (next <= now) {
        tdl_time_t missed = (now - next) / r + 1;
        next = missed > (TDL_TIME_MAX - next) / r ? TDL_TIME_MAX : next + missed * r;
      }
      if (ts->n < ts->cap || grow(ts) == 0)
        arm(ts, t, next);
      else
        t->repeat = 0; /* out of memory: it becomes one-shot */
    }
    t->cb(loop, t);
  }
  ts->due_n = 0;
  if (ts->due == spare) {
    ts->due = NULL;
    ts->due_cap = 0;
  }
}
