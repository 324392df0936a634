/* SPDX-License-Identifier: MIT */
/*
 * Metrics: one snapshot of a loop, one of the process, gathered from the
 * counters each layer keeps (nothing is counted here), and their Prometheus
 * text.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fault.h"
#include "base/sys.h"
#include "fiber/call.h"
#include "fiber/fiber_internal.h"
#include "group/group_internal.h"
#include "treadle/hook.h"

/* libtreadle-hook's, when it is loaded (it is a library above this one):
 * weak, so that without it the address is NULL. */
#pragma weak tdl_hook_stats_get

/* The sizes of the first version of each struct: the least a caller has. */
#define LOOP_V1 (offsetof(tdl_loop_metrics, stacks_unguarded) + sizeof(uint64_t))
#define PROCESS_V1 (offsetof(tdl_process_metrics, net_accept_shed) + sizeof(uint64_t))

/* Copy what fits of the full snapshot m (whose size field is ours) into
 * the caller's out, zero the rest of out. */
static void hand_out(void *out, size_t out_size, const void *m, size_t m_size)
{
  size_t n = out_size < m_size ? out_size : m_size;
  memcpy((char *)out + sizeof(size_t), (const char *)m + sizeof(size_t), n - sizeof(size_t));
  if (out_size > n)
    memset((char *)out + n, 0, out_size - n);
}

/* ---- a loop ---- */

/* Fibers parked and runnable now: a walk over the loop's fibers (O(fibers):
 * counting them at each park and wake-up would cost the switch path). */
static void by_state(const tdl__sched *s, uint64_t *parked, uint64_t *runnable)
{
  uint64_t p = 0, r = 0;
  TDL__LIST_FOREACH(n, &s->all) {
    const tdl__fiber *f = TDL__CONTAINER_OF(n, const tdl__fiber, all);
    p += f->state == TDL__FIBER_PARKED;
    r += f->state == TDL__FIBER_RUNNABLE;
  }
  *parked = p;
  *runnable = r;
}

static void loop_snapshot(tdl_loop *loop, tdl_loop_metrics *m)
{
  memset(m, 0, sizeof *m);
  m->size = sizeof *m;
#ifdef TDL_METRICS
  m->counted = 1;
#endif
  const tdl__loop_counts *c = &loop->counts;
  m->io_parks = c->io_parks;
  m->ring_submissions = c->ring_submissions;
  m->ring_completions = c->ring_completions;
  tdl__sched *s = loop->sched;
  if (s) {
    m->fibers_running = s->current != NULL;
    m->fibers_finished = s->live - s->unfinished;
    by_state(s, &m->fibers_parked, &m->fibers_runnable);
#ifdef TDL_METRICS
    /* Every park, yield and finish switched once (but a yield with nobody
     * else to run); the loop switched into a fiber at each dispatch.  Every
     * park that began and has not ended is a fiber parked now. */
    m->parks = s->parks;
    m->switches = s->dispatches + s->parks + s->yields + s->finishes - s->unswitched;
    m->wakeups = s->parks - m->fibers_parked;
#endif
    tdl__stack_stats st;
    tdl__stack_pool_stats(&s->pool, &st);
    m->stacks_cached = st.cached;
    m->stacks_cached_bytes = st.cached_bytes;
    m->stacks_unguarded = st.in_use_unguarded;
  }
  m->timers_live = loop->timers.live - loop->timers_internal;
  m->watchers_live = loop->io_started;
  if (loop->port) {
    tdl_port_stats ps;
    tdl_port_stats_get(loop->port, &ps);
    m->port_posts = ps.posts;
    m->port_wakes = ps.wakes;
  }
  tdl__acceptor_loop_counts(loop, &m->acceptor_accepted, &m->acceptor_open);
  if (loop == tdl__tl_loop || pthread_equal(loop->owner, pthread_self())) {
    tdl_fs_stats fs; /* the thread's: its loop's fibers' */
    tdl_fs_stats_get(&fs);
    m->fs_direct = fs.direct;
    m->fs_pool = fs.pool;
    m->fs_nowait_miss = fs.nowait_miss;
    m->fs_ring = fs.ring;
  }
}

int tdl_metrics_loop(tdl_loop *loop, tdl_loop_metrics *out)
{
  if (!loop || !out || out->size < LOOP_V1)
    return -EINVAL;
  TDL__CHECK_THREAD(loop);
  tdl_loop_metrics m;
  loop_snapshot(loop, &m);
  hand_out(out, out->size, &m, sizeof m);
  return 0;
}

/* ---- the process ---- */

static uint64_t rss_bytes(void)
{
  int fd = TDL__FAULT_SYS(EMFILE, open("/proc/self/statm", O_RDONLY | O_CLOEXEC));
  if (fd < 0)
    return 0;
  char buf[128];
  ssize_t n = tdl__sys_read(fd, buf, sizeof buf - 1);
  tdl__sys_close(fd);
  if (n <= 0)
    return 0;
  buf[n] = 0;
  /* "size resident shared ...", in pages */
  const char *p = buf;
  while (*p && *p != ' ')
    p++;
  uint64_t pages = 0;
  for (p++; *p >= '0' && *p <= '9'; p++)
    pages = pages * 10 + (uint64_t)(*p - '0');
  long page = sysconf(_SC_PAGESIZE);
  return pages * (uint64_t)(page > 0 ? page : 4096);
}

int tdl_metrics_process(tdl_process_metrics *out)
{
  if (!out || out->size < PROCESS_V1)
    return -EINVAL;
  tdl_process_metrics m = {.size = sizeof m};
  m.rss_bytes = rss_bytes();
  tdl_pool_stats ps;
  tdl_pool_stats_get(&ps);
  m.pool_threads = ps.threads;
  m.pool_idle = ps.idle;
  m.pool_max_threads = ps.max_threads;
  for (unsigned i = 0; i < TDL_LANES; i++) {
    m.pool_queued[i] = ps.queued[i];
    m.pool_running[i] = ps.running[i];
  }
  m.pool_done = ps.done;
  m.pool_threads_started = ps.started_threads;
  if (tdl_hook_stats_get) {
    tdl_hook_stats hs;
    tdl_hook_stats_get(&hs);
    m.hook_parks = hs.parked;
    m.hook_sleeps = hs.slept;
    m.hook_fds_made_nonblocking = hs.fds_made_nonblocking;
  }
  tdl_net_stats ns;
  tdl_net_stats_get(&ns);
  m.net_accept_exhausted = ns.accept_exhausted;
  m.net_accept_shed = ns.accept_shed;
  hand_out(out, out->size, &m, sizeof m);
  return 0;
}

/* ---- a group's loop, from anywhere ---- */

/* From a fiber: a travelling call (fiber/call.h), freed through `c` when
 * its caller has left. */
typedef struct fiber_req {
  tdl__call c;
  tdl_post there;
  int error;
  tdl_loop_metrics m;
} fiber_req;
_Static_assert(offsetof(fiber_req, c) == 0, "the call is freed through c");

static void fiber_req_there(tdl_loop *loop, tdl_post *p)
{
  fiber_req *r = p->data;
  if (!loop)
    r->error = -ESHUTDOWN;
  else if (!tdl__call_abandoned(&r->c))
    loop_snapshot(loop, &r->m);
  tdl__call_return(&r->c);
}

static int from_fiber(tdl__fiber *f, tdl_port *port, tdl_loop_metrics *out, tdl_time_t deadline)
{
  fiber_req *r = TDL__FAULT_ALLOC(calloc(1, sizeof *r));
  if (!r)
    return -ENOMEM;
  int e = tdl__call_init(&r->c, f, NULL, NULL);
  if (e < 0) {
    free(r);
    return e;
  }
  tdl_post_init(&r->there, fiber_req_there, r);
  if ((e = tdl_port_post(port, &r->there)) < 0) {
    tdl__call_unsent(&r->c);
    free(r);
    return e;
  }
  if ((e = tdl__call_wait(&r->c, "metrics", deadline)) < 0)
    return e; /* r is freed once it is back */
  e = r->error;
  if (e == 0)
    hand_out(out, out->size, &r->m, sizeof r->m);
  free(r);
  return e;
}

/* From a thread that runs no loop: the thread waits on a condition
 * variable; whichever side lets go of the request last frees it. */
typedef struct thread_req {
  tdl_post there;
  pthread_mutex_t lock;
  pthread_cond_t done_cv;
  int holders; /* under lock: the caller, the loop */
  bool done;
  int error;
  tdl_loop_metrics m;
} thread_req;

static void thread_req_let_go(thread_req *r)
{
  pthread_mutex_lock(&r->lock);
  bool last = --r->holders == 0;
  pthread_mutex_unlock(&r->lock);
  if (last) {
    pthread_cond_destroy(&r->done_cv);
    pthread_mutex_destroy(&r->lock);
    free(r);
  }
}

static void thread_req_there(tdl_loop *loop, tdl_post *p)
{
  thread_req *r = p->data;
  pthread_mutex_lock(&r->lock);
  bool wanted = r->holders == 2;
  pthread_mutex_unlock(&r->lock);
  int error = -ESHUTDOWN;
  tdl_loop_metrics m;
  if (loop && wanted) {
    loop_snapshot(loop, &m);
    error = 0;
  }
  pthread_mutex_lock(&r->lock);
  if (error == 0)
    r->m = m; /* cppcheck-suppress uninitStructMember ; loop_snapshot wrote m where error is 0 */
  r->error = error;
  r->done = true;
  pthread_cond_signal(&r->done_cv);
  pthread_mutex_unlock(&r->lock);
  thread_req_let_go(r);
}

static int from_thread(tdl_port *port, tdl_loop_metrics *out, tdl_time_t deadline)
{
  thread_req *r = TDL__FAULT_ALLOC(calloc(1, sizeof *r));
  if (!r)
    return -ENOMEM;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int e = pthread_cond_init(&r->done_cv, &ca);
  pthread_condattr_destroy(&ca);
  if (e != 0) {
    free(r);
    return -e;
  }
  pthread_mutex_init(&r->lock, NULL);
  r->holders = 2;
  tdl_post_init(&r->there, thread_req_there, r);
  if ((e = tdl_port_post(port, &r->there)) < 0) {
    r->holders = 1;
    thread_req_let_go(r);
    return e;
  }
  struct timespec ts = {.tv_sec = deadline / TDL_SEC, .tv_nsec = deadline % TDL_SEC};
  pthread_mutex_lock(&r->lock);
  e = 0;
  while (!r->done && e == 0)
    e = deadline == TDL_FOREVER ? pthread_cond_wait(&r->done_cv, &r->lock)
                                : pthread_cond_timedwait(&r->done_cv, &r->lock, &ts);
  if (r->done) {
    e = r->error;
    if (e == 0)
      hand_out(out, out->size, &r->m, sizeof r->m);
  } else {
    e = -ETIMEDOUT;
  }
  pthread_mutex_unlock(&r->lock);
  thread_req_let_go(r);
  return e;
}

int tdl_metrics_group(tdl_group *g, unsigned i, tdl_loop_metrics *out, tdl_time_t deadline)
{
  if (!g || !out || out->size < LOOP_V1 || i >= tdl_group_size(g))
    return -EINVAL;
  if (tdl_group_self() == g && (unsigned)tdl_group_index() == i)
    return tdl_metrics_loop(tdl__tl_loop, out);
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e == -ECANCELED)
    return e;
  if (!f && tdl__tl_loop)
    return -EPERM; /* a loop's callback: waiting would block that loop */
  if (deadline != TDL_FOREVER && deadline <= tdl__clock_now())
    return -ETIMEDOUT;
  tdl_port *port = tdl_group_port(g, i);
  return f ? from_fiber(f, port, out, deadline) : from_thread(port, out, deadline);
}

/* ---- the Prometheus text ---- */

typedef struct out {
  char *p, *end; /* end: the last byte, kept for the NUL */
  bool full;
} out;

static void put(out *o, const char *s)
{
  size_t n = strlen(s);
  if (o->full || (size_t)(o->end - o->p) < n) {
    o->full = true;
    return;
  }
  memcpy(o->p, s, n);
  o->p += n;
}

static void put_u64(out *o, uint64_t v)
{
  char tmp[24], *q = tmp + sizeof tmp;
  *--q = 0;
  do {
    *--q = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  put(o, q);
}

enum { COUNTER, GAUGE };

typedef struct family {
  const char *name; /* after treadle_ */
  int type;
  const char *help;
  size_t off;        /* the field's offset in its struct */
  const char *label; /* an extra label (fibers' state), or NULL */
  const char *value; /* its value */
} family;

#define L(field) offsetof(tdl_loop_metrics, field)
#define P(field) offsetof(tdl_process_metrics, field)

/* Rows with the same name follow each other: one HELP and TYPE for them. */
static const family loop_families[] = {
    {"fibers", GAUGE, "Fibers not yet released, by state.", L(fibers_running), "state", "running"},
    {"fibers", GAUGE, "", L(fibers_runnable), "state", "runnable"},
    {"fibers", GAUGE, "", L(fibers_parked), "state", "parked"},
    {"fibers", GAUGE, "", L(fibers_finished), "state", "finished"},
    {"fiber_switches_total", COUNTER, "Context switches between fibers and the loop.", L(switches), NULL, NULL},
    {"fiber_parks_total", COUNTER, "Waits that parked a fiber.", L(parks), NULL, NULL},
    {"fiber_wakeups_total", COUNTER, "Parks that ended (event, deadline or cancel).", L(wakeups), NULL, NULL},
    {"io_parks_total", COUNTER, "Fiber I/O calls that parked.", L(io_parks), NULL, NULL},
    {"ring_submissions_total", COUNTER, "io_uring entries handed to the kernel.", L(ring_submissions), NULL,
     NULL},
    {"ring_completions_total", COUNTER, "io_uring completions taken.", L(ring_completions), NULL, NULL},
    {"timers", GAUGE, "Started timers, fiber deadlines included.", L(timers_live), NULL, NULL},
    {"watchers", GAUGE, "Started fd watchers.", L(watchers_live), NULL, NULL},
    {"port_posts_total", COUNTER, "Posts accepted by the loop's port.", L(port_posts), NULL, NULL},
    {"port_wakes_total", COUNTER, "Posts that woke the loop.", L(port_wakes), NULL, NULL},
    {"acceptor_accepted_total", COUNTER, "Connections given to the acceptor slots the loop serves.",
     L(acceptor_accepted), NULL, NULL},
    {"acceptor_open", GAUGE, "Of those, not yet ended.", L(acceptor_open), NULL, NULL},
    {"fs_calls_total", COUNTER, "File calls, by the path they took.", L(fs_direct), "path", "direct"},
    {"fs_calls_total", COUNTER, "", L(fs_pool), "path", "pool"},
    {"fs_calls_total", COUNTER, "", L(fs_ring), "path", "ring"},
    {"fs_nowait_misses_total", COUNTER, "Reads or writes RWF_NOWAIT refused first.", L(fs_nowait_miss), NULL,
     NULL},
    {"stacks_cached", GAUGE, "Fiber stacks kept for reuse.", L(stacks_cached), NULL, NULL},
    {"stacks_cached_bytes", GAUGE, "Their usable bytes.", L(stacks_cached_bytes), NULL, NULL},
    {"stacks_unguarded", GAUGE, "Fiber stacks in use without a guard page.", L(stacks_unguarded), NULL, NULL},
};

static const family process_families[] = {
    {"resident_memory_bytes", GAUGE, "Resident memory of the process.", P(rss_bytes), NULL, NULL},
    {"pool_threads", GAUGE, "Pool threads, by what they do.", P(pool_idle), "state", "idle"},
    {"pool_threads", GAUGE, "", P(pool_threads), "state", "all"},
    {"pool_max_threads", GAUGE, "The most threads the pool may have.", P(pool_max_threads), NULL, NULL},
    {"pool_queued", GAUGE, "Pool calls waiting for a thread, by lane.", P(pool_queued[TDL_LANE_USER]), "lane",
     "user"},
    {"pool_queued", GAUGE, "", P(pool_queued[TDL_LANE_FILE]), "lane", "file"},
    {"pool_queued", GAUGE, "", P(pool_queued[TDL_LANE_NAME]), "lane", "name"},
    {"pool_running", GAUGE, "Pool calls running, by lane.", P(pool_running[TDL_LANE_USER]), "lane", "user"},
    {"pool_running", GAUGE, "", P(pool_running[TDL_LANE_FILE]), "lane", "file"},
    {"pool_running", GAUGE, "", P(pool_running[TDL_LANE_NAME]), "lane", "name"},
    {"pool_calls_done_total", COUNTER, "Pool calls finished or skipped.", P(pool_done), NULL, NULL},
    {"pool_threads_started_total", COUNTER, "Pool threads started.", P(pool_threads_started), NULL, NULL},
    {"hook_parks_total", COUNTER, "Hooked calls that parked a fiber.", P(hook_parks), NULL, NULL},
    {"hook_sleeps_total", COUNTER, "Sleeps the hook turned into fiber sleeps.", P(hook_sleeps), NULL, NULL},
    {"hook_fds_made_nonblocking_total", COUNTER, "Fds the hook set O_NONBLOCK underneath.",
     P(hook_fds_made_nonblocking), NULL, NULL},
    {"net_accept_exhausted_total", COUNTER, "Accepts that found no fd free.", P(net_accept_exhausted), NULL,
     NULL},
    {"net_accept_shed_total", COUNTER, "Connections accepted and closed at once.", P(net_accept_shed), NULL,
     NULL},
};
_Static_assert(TDL_LANES == 3, "one row per lane above");

static void put_head(out *o, const family *f)
{
  put(o, "# HELP treadle_");
  put(o, f->name);
  put(o, " ");
  put(o, f->help);
  put(o, "\n# TYPE treadle_");
  put(o, f->name);
  put(o, f->type == COUNTER ? " counter\n" : " gauge\n");
}

static void put_sample(out *o, const family *f, const char *loop_index, uint64_t v)
{
  put(o, "treadle_");
  put(o, f->name);
  if (loop_index || f->label) {
    put(o, "{");
    if (loop_index) {
      put(o, "loop=\"");
      put(o, loop_index);
      put(o, f->label ? "\"," : "\"");
    }
    if (f->label) {
      put(o, f->label);
      put(o, "=\"");
      put(o, f->value);
      put(o, "\"");
    }
    put(o, "}");
  }
  put(o, " ");
  put_u64(o, v);
  put(o, "\n");
}

static uint64_t field(const void *base, size_t off) { uint64_t v; memcpy(&v, (const char *)base + off, sizeof v); return v; }

int tdl_metrics_write_prometheus(char *buf, size_t cap, const tdl_process_metrics *p,
                                 const tdl_loop_metrics *loops, unsigned n)
{
  if (!buf || (n && !loops))
    return -EINVAL;
  size_t stride = n ? loops->size : 0;
  if ((p && p->size < PROCESS_V1) || (n && stride < LOOP_V1))
    return -EINVAL;
  if (cap == 0)
    return -ENOSPC;
  out o = {buf, buf + cap - 1, false};
  if (p) {
    tdl_process_metrics pm = {.size = sizeof pm};
    hand_out(&pm, sizeof pm, p, p->size);
    for (size_t k = 0; k < sizeof process_families / sizeof process_families[0]; k++) {
      const family *f = &process_families[k];
      if (f->help[0])
        put_head(&o, f);
      put_sample(&o, f, NULL, field(&pm, f->off));
    }
  }
  for (size_t k = 0; n && k < sizeof loop_families / sizeof loop_families[0]; k++) {
    const family *f = &loop_families[k];
    if (f->help[0])
      put_head(&o, f);
    for (unsigned i = 0; i < n; i++) {
      const tdl_loop_metrics *l = (const tdl_loop_metrics *)(const void *)((const char *)loops + (size_t)i * stride);
      tdl_loop_metrics lm = {.size = sizeof lm};
      hand_out(&lm, sizeof lm, l, stride);
      char idx[16], *q = idx + sizeof idx;
      unsigned v = i;
      *--q = 0;
      do {
        *--q = (char)('0' + v % 10);
        v /= 10;
      } while (v);
      put_sample(&o, f, q, field(&lm, f->off));
    }
  }
  if (o.full) {
    buf[0] = 0;
    return -ENOSPC;
  }
  *o.p = 0;
  size_t len = (size_t)(o.p - buf);
  return len > INT32_MAX ? -ENOSPC : (int)len;
}
