/* SPDX-License-Identifier: MIT */
/*
 * Accepting connections on several loops (group.h, tdl_acceptor_*).
 *
 * An acceptor has one slot per serving loop.  tdl_acceptor_serve runs a
 * slot in a fiber of that loop:
 *   reuseport    each slot accepts on a listener of its own (SO_REUSEPORT:
 *                the kernel hashes every connection to one of them);
 *   distribute   slot 0 accepts on the one listener and hands each
 *                connection to the slot with the fewest open, through that
 *                slot's inbox (a shared channel of fds); the other slots
 *                take connections from their inbox.
 * Either way a slot runs each connection's handler in a detached fiber of
 * its own loop.
 *
 * The counts that choose the least-loaded slot are two monotonic counters
 * per slot, each with one writer: `assigned`, by the slot's accepting side
 * (slot 0 in distribute mode, the slot itself in reuseport mode), and
 * `finished`, by the slot's loop when a handler returns (or a queued
 * connection is dropped).  Their difference is the slot's open connections,
 * exact at the moment the acceptor reads it: there is no lag in which a
 * burst of new connections all see the same least-loaded slot.  They sit on
 * separate cache lines, since different threads write them.
 *
 * A handler fiber's argument is a ticket {slot, fd}; tickets are recycled on
 * the slot's loop, so a busy slot allocates none in steady state.
 *
 * Stopping from any thread is shutdown(SHUT_RD) on the listeners (the
 * accepting fibers wake with EINVAL) and a close of the inboxes (their
 * slots take what is queued, then return).
 */
#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/sys.h"
#include "base/thread.h"
#include "fd/fd_internal.h"
#include "group/group_internal.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define BUMP(p) __atomic_fetch_add((p), 1, __ATOMIC_RELEASE)

enum { INBOX_DEFAULT = 1024, TICKETS_CACHED = 1024 };

typedef struct ticket {
  struct slot *slot;
  int fd;
  struct ticket *next;
} ticket;

/* Slot states. */
enum { IDLE, SERVING, DONE };

typedef struct slot {
  _Alignas(64) tdl_acceptor *a;
  unsigned index;
  int lfd;          /* this slot's listener, or -1 */
  tdl_chan *inbox;  /* distribute mode, slots > 0 */
  int state;        /* atomic: IDLE, SERVING, DONE */
  uint64_t assigned; /* atomic; one writer: the accepting side */
  ticket *tickets;  /* recycled; the slot's loop only */
  unsigned ntickets;
  _Alignas(64) uint64_t finished; /* atomic; one writer: the slot's loop */
  tdl__list on_loop; /* in loop->acceptor_slots while it serves (that loop's thread only) */
} slot;

struct tdl_acceptor {
  tdl_acceptor_options o;
  /* Orders tdl_acceptor_stop's shutdown() of a listener against the close
   * of it when its slot returns: shutdown must never reach a reused fd. */
  pthread_mutex_t lock;
  unsigned n;
  tdl_addr addr; /* where the listeners are bound */
  int stopping;  /* atomic */
  unsigned next; /* distribute: where the search for the least loaded starts */
  slot s[];
};

/* ---- handlers ---- */

static void ticket_put(slot *sl, ticket *t)
{
  if (sl->ntickets < TICKETS_CACHED) {
    t->next = sl->tickets;
    sl->tickets = t;
    sl->ntickets++;
  } else {
    free(t);
  }
}

static void *handler_fiber(void *arg)
{
  ticket *t = arg;
  slot *sl = t->slot;
  int fd = t->fd;
  ticket_put(sl, t);
  sl->a->o.handler(fd, sl->a->o.arg);
  BUMP(&sl->finished);
  return NULL;
}

/* Run fd's handler on this slot's loop; on failure close fd.  Either way
 * the connection was counted in `assigned` and now belongs to this slot. */
static void start_handler(slot *sl, tdl_loop *loop, int fd)
{
  ticket *t = sl->tickets;
  if (t) {
    sl->tickets = t->next;
    sl->ntickets--;
  } else if (!(t = TDL__FAULT_ALLOC(malloc(sizeof *t)))) {
    goto fail;
  }
  t->slot = sl;
  t->fd = fd;
  tdl_fiber_t h;
  tdl_fiber_options fo = {.name = "conn", .stack_size = sl->a->o.stack_size, .detached = true};
  if (tdl_fiber_spawn(&h, loop, handler_fiber, t, &fo) == 0)
    return;
  ticket_put(sl, t);
fail:
  tdl_close(fd);
  BUMP(&sl->finished);
}

/* ---- accepting ---- */

/* Distribute: the serving slot with the fewest open connections; ties go
 * round from the slot after the last one chosen. */
static slot *least_loaded(tdl_acceptor *a)
{
  assert(a->n > 0); /* set once, by tdl_acceptor_new (for clang's analyser) */
  slot *best = &a->s[0];
  uint64_t best_load = UINT64_MAX;
  for (unsigned k = 0; k < a->n; k++) {
    slot *sl = &a->s[(a->next + k) % a->n];
    if (LOAD(&sl->state) != SERVING)
      continue;
    uint64_t load = LOAD(&sl->assigned) - LOAD(&sl->finished);
    if (load < best_load) {
      best = sl;
      best_load = load;
    }
  }
  a->next = (best->index + 1) % a->n;
  return best;
}

/* With max_conns: wait until a slot this one may give a connection to
 * (distribute: any serving one; reuseport: itself) has fewer than its share
 * plus the slack open.  Nothing signals a handler's return across loops, so
 * this backs off; it happens only at the cap, where connections in flight
 * are about to evict idle ones and return. */
static int wait_for_room(slot *sl, bool distribute)
{
  tdl_acceptor *a = sl->a;
  uint64_t most = (uint64_t)a->o.max_conns / a->n + TDL_ACCEPTOR_SLACK;
  tdl__backoff b = {TDL_MSEC, 16 * TDL_MSEC};
  while (!LOAD(&a->stopping)) { /* (stopping: the accept fails at once) */
    for (unsigned k = 0; k < a->n; k++) {
      slot *to = distribute ? &a->s[k] : sl;
      if ((to == sl || LOAD(&to->state) == SERVING) && LOAD(&to->assigned) - LOAD(&to->finished) < most)
        return 0;
      if (!distribute)
        break;
    }
    int e = tdl_sleep(tdl_after(tdl__backoff_step(&b)));
    if (e < 0)
      return e;
  }
  return 0;
}

static int accept_loop(slot *sl, tdl_loop *loop)
{
  tdl_acceptor *a = sl->a;
  bool distribute = a->o.mode == TDL_ACCEPTOR_DISTRIBUTE;
  for (;;) {
    if (a->o.max_conns) {
      int e = wait_for_room(sl, distribute);
      if (e < 0)
        return e;
    }
    int fd = tdl_net_accept(sl->lfd, NULL, TDL_FOREVER);
    if (fd < 0) {
      if (fd == -EINVAL && LOAD(&a->stopping))
        return 0; /* tdl_acceptor_stop shut the listener down */
      if (fd == -ECANCELED || fd == -EBADF || fd == -EINVAL || fd == -ENOTSOCK)
        return fd;
      continue; /* -EMFILE and friends: tdl_net_accept has backed off */
    }
    slot *to = distribute ? least_loaded(a) : sl;
    /* Counted before the hand-off, so that its slot's `finished` never runs
     * ahead of `assigned` (this fiber is the one writer of both slots'). */
    BUMP(&to->assigned);
    if (to != sl && tdl_chan_try_send(to->inbox, &fd) < 0) {
      __atomic_fetch_sub(&to->assigned, 1, __ATOMIC_RELEASE);
      BUMP(&sl->assigned); /* its inbox is full or closed: ours after all */
      to = sl;
    }
    if (to == sl)
      start_handler(sl, loop, fd);
  }
}

static int inbox_loop(slot *sl, tdl_loop *loop)
{
  int fd;
  int e;
  while ((e = tdl_chan_recv(sl->inbox, &fd, TDL_FOREVER)) == 0)
    start_handler(sl, loop, fd);
  return e == -EPIPE ? 0 : e; /* closed and drained: stopped */
}

/* ---- the API ---- */

static void close_inboxes(tdl_acceptor *a)
{
  for (unsigned i = 0; i < a->n; i++)
    if (a->s[i].inbox)
      tdl_chan_close(a->s[i].inbox); /* -EPIPE when already closed */
}

int tdl_acceptor_serve(tdl_acceptor *a, unsigned index)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (!a || index >= a->n)
    return -EINVAL;
  slot *sl = &a->s[index];
  int expect = IDLE;
  if (!__atomic_compare_exchange_n(&sl->state, &expect, SERVING, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return expect == SERVING ? -EBUSY : -ESHUTDOWN;
  tdl_loop *loop = f->sched->loop;
  tdl__list_push(&loop->acceptor_slots, &sl->on_loop);
  int e;
  if (sl->lfd >= 0) {
    e = accept_loop(sl, loop);
    if (a->o.mode == TDL_ACCEPTOR_DISTRIBUTE)
      close_inboxes(a); /* nothing more comes: the other slots drain and return */
    pthread_mutex_lock(&a->lock);
    tdl_close(sl->lfd);
    sl->lfd = -1;
    pthread_mutex_unlock(&a->lock);
  } else {
    e = inbox_loop(sl, loop);
  }
  tdl__list_remove(&sl->on_loop);
  STORE(&sl->state, DONE);
  return e;
}

void tdl__acceptor_loop_counts(tdl_loop *loop, uint64_t *accepted, uint64_t *open)
{
  *accepted = *open = 0;
  TDL__LIST_FOREACH(node, &loop->acceptor_slots) {
    const slot *sl = TDL__CONTAINER_OF(node, slot, on_loop);
    uint64_t finished = LOAD(&sl->finished); /* first, as in tdl_acceptor_stats_get */
    uint64_t assigned = LOAD(&sl->assigned);
    *accepted += assigned;
    *open += assigned - finished;
  }
}

void tdl_acceptor_stop(tdl_acceptor *a)
{
  if (!a || __atomic_exchange_n(&a->stopping, 1, __ATOMIC_ACQ_REL))
    return;
  /* shutdown() wakes an accepting fiber with EINVAL; the slot then closes
   * its listener (under the lock, so that this never meets a reused fd). */
  pthread_mutex_lock(&a->lock);
  for (unsigned i = 0; i < a->n; i++)
    if (a->s[i].lfd >= 0)
      shutdown(a->s[i].lfd, SHUT_RD);
  pthread_mutex_unlock(&a->lock);
  close_inboxes(a);
}

int tdl_acceptor_stats_get(const tdl_acceptor *a, unsigned index, tdl_acceptor_stats *out)
{
  if (!a || !out || index >= a->n)
    return -EINVAL;
  const slot *sl = &a->s[index];
  uint64_t finished = LOAD(&sl->finished); /* first: open never reads as negative */
  uint64_t assigned = LOAD(&sl->assigned);
  out->accepted = assigned;
  out->open = assigned - finished;
  out->serving = LOAD(&sl->state) == SERVING;
  return 0;
}

unsigned tdl_acceptor_size(const tdl_acceptor *a) { return a ? a->n : 0; }

int tdl_acceptor_local_addr(const tdl_acceptor *a, tdl_addr *out)
{
  if (!a || !out)
    return -EINVAL;
  *out = a->addr;
  return 0;
}

static void release(tdl_acceptor *a)
{
  for (unsigned i = 0; i < a->n; i++) {
    slot *sl = &a->s[i];
    if (sl->lfd >= 0)
      tdl__sys_close(sl->lfd);
    if (sl->inbox)
      tdl_chan_free(sl->inbox);
    ticket *t;
    while ((t = sl->tickets) != NULL) {
      sl->tickets = t->next;
      free(t);
    }
  }
  pthread_mutex_destroy(&a->lock);
  free(a);
}

int tdl_acceptor_free(tdl_acceptor *a)
{
  if (!a)
    return 0;
  for (unsigned i = 0; i < a->n; i++)
    if (LOAD(&a->s[i].state) == SERVING)
      return -EBUSY;
  /* Connections still queued for a slot that no longer serves: closed. */
  for (unsigned i = 0; i < a->n; i++) {
    slot *sl = &a->s[i];
    int fd;
    while (sl->inbox && tdl_chan_try_recv(sl->inbox, &fd) == 0) {
      tdl__sys_close(fd);
      BUMP(&sl->finished);
    }
  }
  for (unsigned i = 0; i < a->n; i++)
    if (LOAD(&a->s[i].assigned) != LOAD(&a->s[i].finished))
      return -EBUSY; /* a handler still runs */
  release(a);
  return 0;
}

/* Listen for every slot that accepts.  With reuseport the first listener
 * fixes the address (its port, when the string asked for port 0) and the
 * others bind exactly that. */
static int open_listeners(tdl_acceptor *a)
{
  const tdl_acceptor_options *o = &a->o;
  bool reuse = o->mode == TDL_ACCEPTOR_REUSEPORT;
  int lfd = tdl_net_listen_str(o->listen, o->backlog, reuse ? TDL_NET_REUSEPORT : 0);
  if (lfd < 0)
    return lfd;
  a->s[0].lfd = lfd;
  tdl_addr at;
  int e = tdl_net_local_addr(lfd, &at);
  if (e < 0)
    return e;
  a->addr = at;
  if (!reuse)
    return 0;
  for (unsigned i = 1; i < a->n; i++) {
    /* Same family and wildcard as the first: IPV6_V6ONLY as it has it. */
    int v6only = 0;
    socklen_t len = sizeof v6only;
    if (at.u.sa.sa_family == AF_INET6)
      getsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &len);
    int fd = tdl_net_listen(&at, o->backlog, TDL_NET_REUSEPORT | (v6only ? TDL_NET_V6ONLY : 0));
    if (fd < 0)
      return fd;
    a->s[i].lfd = fd;
  }
  return 0;
}

int tdl_acceptor_new(tdl_acceptor **out, const tdl_acceptor_options *o)
{
  if (!out)
    return -EINVAL;
  *out = NULL;
  if (!o || !o->listen || !o->handler || o->loops > TDL_GROUP_MAX ||
      (o->mode != TDL_ACCEPTOR_REUSEPORT && o->mode != TDL_ACCEPTOR_DISTRIBUTE))
    return -EINVAL;
  cpu_set_t set;
  unsigned n = o->loops ? o->loops : tdl__cpus(&set); /* as a group's loops = 0 */
  tdl_acceptor *a = TDL__FAULT_ALLOC(calloc(1, sizeof *a + n * sizeof(slot)));
  if (!a)
    return -ENOMEM;
  a->o = *o;
  a->o.loops = n;
  a->n = n;
  pthread_mutex_init(&a->lock, NULL);
  for (unsigned i = 0; i < a->n; i++) {
    a->s[i].a = a;
    a->s[i].index = i;
    a->s[i].lfd = -1;
  }
  int e = open_listeners(a);
  size_t cap = o->inbox ? o->inbox : INBOX_DEFAULT;
  for (unsigned i = 1; e == 0 && i < a->n && o->mode == TDL_ACCEPTOR_DISTRIBUTE; i++)
    e = tdl_chan_new_shared(&a->s[i].inbox, sizeof(int), cap);
  if (e < 0) {
    release(a);
    return e;
  }
  *out = a;
  return 0;
}
