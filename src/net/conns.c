/* SPDX-License-Identifier: MIT */
/*
 * Connection tracking (net.h, tdl_conns): a cap below the fd limit, the
 * first-byte and idle deadlines, and eviction of the connection idle
 * longest when a new one needs room.
 *
 * A connection is in one of three states: IDLE (waiting for a request, its
 * first or the next: linked at the back of the set's idle list, so the
 * front is the one idle longest), BUSY (in a request: in no list) or
 * EVICTED (told to close: in no list, still counted until released).
 * Every transition is a list link or unlink and a few counters: no timer,
 * no allocation.  Deadlines are not enforced here but handed to the
 * caller's wait, which is where a fiber already sleeps.
 */
#include <errno.h>
#include <limits.h>
#include <sys/resource.h>

#include "base/clock.h"
#include "base/list.h"
#include "net/net_internal.h"

enum { CONN_OFF = 0, CONN_IDLE, CONN_BUSY, CONN_EVICTED };

#define FIRST_BYTE_DEFAULT (10 * TDL_SEC)
#define IDLE_DEFAULT (60 * TDL_SEC)

unsigned tdl_conns_fd_room(void)
{
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 0;
  rlim_t lim = rl.rlim_cur;
  if (lim == RLIM_INFINITY || lim > UINT_MAX)
    lim = UINT_MAX;
  if (lim < 128)
    return 0;
  rlim_t spare = lim / 8 < 64 ? 64 : lim / 8;
  return (unsigned)(lim - spare);
}

static bool delay_ok(tdl_time_t d) { return d >= 0 || d == TDL_FOREVER; }

int tdl_conns_init(tdl_conns *cs, tdl_loop *loop, const tdl_conns_options *o)
{
  if (!cs || !loop || !o || o->max == 0 || !delay_ok(o->first_byte) || !delay_ok(o->idle))
    return -EINVAL;
  unsigned room = tdl_conns_fd_room();
  if (room == 0)
    return -EMFILE;
  *cs = (tdl_conns){
      .loop = loop,
      .max = o->max < room ? o->max : room,
      .first_byte = o->first_byte ? o->first_byte : FIRST_BYTE_DEFAULT,
      .idle_delay = o->idle ? o->idle : IDLE_DEFAULT,
      .evict = o->evict,
      .arg = o->arg,
  };
  return 0;
}

int tdl_conns_destroy(tdl_conns *cs)
{
  if (!cs)
    return -EINVAL;
  if (cs->open)
    return -EBUSY;
  cs->loop = NULL;
  return 0;
}

static void idle_unlink(tdl_conn *c)
{
  tdl__list_remove(&c->link);
  c->set->idle_n--;
}

static void idle_link(tdl_conn *c, tdl_time_t deadline)
{
  c->state = CONN_IDLE;
  c->deadline = deadline;
  tdl__list_push(&c->set->idle, &c->link);
  c->set->idle_n++;
}

/* Tell the connection idle longest to close. */
static void evict_oldest(tdl_conns *cs)
{
  tdl_conn *c = TDL__CONTAINER_OF(tdl__list_first(&cs->idle), tdl_conn, link);
  idle_unlink(c);
  c->state = CONN_EVICTED;
  cs->evicting++;
  cs->evicted++;
  if (cs->evict)
    cs->evict(c, cs->arg);
  else
    tdl_fiber_cancel(cs->loop, c->fiber); /* -ESRCH: its fiber is gone already */
}

int tdl_conns_admit(tdl_conns *cs, tdl_conn *c, tdl_fiber_t fiber)
{
  if (!cs || !c || (!fiber && !cs->evict))
    return -EINVAL;
  if (cs->open - cs->evicting >= cs->max) {
    if (cs->idle_n == 0) {
      cs->refused++;
      return -EAGAIN;
    }
    evict_oldest(cs);
  }
  *c = (tdl_conn){.set = cs, .fiber = fiber};
  cs->open++;
  cs->admitted++;
  idle_link(c, cs->first_byte == TDL_FOREVER ? TDL_FOREVER
                                               : tdl__time_add(tdl_now(), cs->first_byte));
  return 0;
}

tdl_time_t tdl_conn_idle(tdl_conn *c)
{
  if (!c || !c->set || c->state == CONN_EVICTED)
    return 0;
  if (c->state == CONN_IDLE)
    return c->deadline;
  tdl_conns *cs = c->set;
  idle_link(c, cs->idle_delay == TDL_FOREVER ? TDL_FOREVER
                                             : tdl__time_add(tdl_now(), cs->idle_delay));
  return c->deadline;
}

void tdl_conn_busy(tdl_conn *c)
{
  if (!c || !c->set || c->state != CONN_IDLE)
    return;
  idle_unlink(c);
  c->state = CONN_BUSY;
}

bool tdl_conn_evicted(const tdl_conn *c) { return c && c->set && c->state == CONN_EVICTED; }

void tdl_conn_release(tdl_conn *c)
{
  if (!c || !c->set)
    return;
  tdl_conns *cs = c->set;
  if (c->state == CONN_IDLE)
    idle_unlink(c);
  else if (c->state == CONN_EVICTED)
    cs->evicting--;
  cs->open--;
  c->set = NULL;
  c->state = CONN_OFF;
}

bool tdl_conns_full(const tdl_conns *cs) { return cs && cs->open - cs->evicting >= cs->max; }

size_t tdl_conns_evict_idle(tdl_conns *cs, size_t n)
{
  size_t done = 0;
  while (cs && done < n && cs->idle_n > 0) {
    evict_oldest(cs);
    done++;
  }
  return done;
}

void tdl_conns_stats_get(const tdl_conns *cs, tdl_conns_stats *out)
{
  *out = (tdl_conns_stats){
      .max = cs->max,
      .open = cs->open,
      .idle = cs->idle_n,
      .admitted = cs->admitted,
      .evicted = cs->evicted,
      .refused = cs->refused,
  };
}
