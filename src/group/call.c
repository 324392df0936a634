/*
 * Call-and-wait on another loop, for fibers.
 *
 * A call is one allocation that travels: the caller posts it to the target
 * loop, the target runs fn and posts it back to the caller's loop, whose
 * callback wakes the caller (or frees the call when the caller has gone).
 * It belongs to exactly one side at a time, so it needs no lock and no count.
 * The one thing both threads read is `abandoned`, which the caller sets when
 * its deadline or a cancel ends the wait, so that a target that has not yet
 * started skips fn.
 */
#include <stdlib.h>
#include <string.h>

#include "fiber/fiber_internal.h"

typedef struct call {
  tdl_post there, back;
  void *(*fn)(tdl_loop *loop, void *arg);
  void *arg;
  void (*drop)(void *arg); /* frees arg once the caller has gone */
  void *result;
  int error;          /* -ESHUTDOWN: the target loop went before fn ran */
  int abandoned;      /* atomic: the caller has gone */
  int arrived;        /* back home (the caller's thread only) */
  tdl_port *home;     /* the caller's loop */
  tdl__fiber *f;      /* the caller, NULL once it has gone (its thread only) */
} call;

/* The caller has gone: whoever holds the call last frees it. */
static void drop(call *c)
{
  if (c->drop)
    c->drop(c->arg);
  free(c);
}

/* Back on the caller's loop (NULL: that loop was freed, so the caller,
 * which would have kept it, has gone). */
static void arrived(tdl_loop *loop, tdl_post *p)
{
  call *c = p->data;
  tdl_port_release(c->home);
  c->home = NULL;
  if (!loop || !c->f) {
    drop(c);
    return;
  }
  c->arrived = 1;
  tdl__wake(c->f, 0);
}

/* On the target loop (NULL: it was freed first). */
static void run_there(tdl_loop *loop, tdl_post *p)
{
  call *c = p->data;
  if (!loop)
    c->error = -ESHUTDOWN;
  else if (!__atomic_load_n(&c->abandoned, __ATOMIC_ACQUIRE))
    c->result = c->fn(loop, c->arg);
  if (tdl_port_post(c->home, &c->back) < 0) { /* the caller's loop has gone */
    tdl_port_release(c->home);
    drop(c);
  }
}

static int call_with(tdl_port *port, void *(*fn)(tdl_loop *, void *), void *arg, void (*drop_arg)(void *),
                     void **result, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e < 0)
    return e;
  if (!port || !fn)
    return -EINVAL;
  call *c = TDL__FAULT_ALLOC(calloc(1, sizeof *c));
  if (!c)
    return -ENOMEM;
  e = tdl_loop_port(&c->home, f->sched->loop);
  if (e < 0) {
    free(c);
    return e;
  }
  c->fn = fn;
  c->arg = arg;
  c->drop = drop_arg;
  c->f = f;
  tdl_post_init(&c->there, run_there, c);
  tdl_post_init(&c->back, arrived, c);
  if ((e = tdl_port_post(port, &c->there)) < 0) {
    tdl_port_release(c->home);
    free(c);
    return e;
  }
  e = tdl__park(f, "call", -1, deadline);
  if (!c->arrived) {
    /* The deadline or a cancel came first: leave; the call finishes (or is
     * skipped) without us and the last to hold it frees it. */
    __atomic_store_n(&c->abandoned, 1, __ATOMIC_RELEASE);
    c->f = NULL;
    return e < 0 ? e : -ECANCELED;
  }
  e = c->error;
  if (result && e == 0)
    *result = c->result;
  free(c);
  return e;
}

int tdl_port_call(tdl_port *port, void *(*fn)(tdl_loop *loop, void *arg), void *arg, void **result,
                  tdl_time_t deadline)
{
  return call_with(port, fn, arg, NULL, result, deadline);
}

/* ---- spawning there ---- */

typedef struct spawn_req {
  tdl_fiber_fn fn;
  void *arg;
  tdl_fiber_options opts;
  char name[24];
} spawn_req;

static void *spawn_there(tdl_loop *loop, void *arg)
{
  spawn_req *r = arg;
  r->opts.detached = true;
  r->opts.name = r->name[0] ? r->name : NULL;
  return (void *)(intptr_t)tdl_fiber_spawn(NULL, loop, r->fn, r->arg, &r->opts);
}

int tdl_port_spawn(tdl_port *port, tdl_fiber_fn fn, void *arg, const tdl_fiber_options *opts,
                   tdl_time_t deadline)
{
  int e = tdl__may_block(NULL);
  if (e < 0)
    return e; /* (-ECANCELED now, so that below it means the call took r) */
  if (!fn)
    return -EINVAL;
  /* A copy of its own: if the caller leaves at its deadline, the target may
   * still read it, and the call frees it then. */
  spawn_req *r = TDL__FAULT_ALLOC(calloc(1, sizeof *r));
  if (!r)
    return -ENOMEM;
  r->fn = fn;
  r->arg = arg;
  if (opts) {
    r->opts = *opts;
    if (opts->name)
      strncpy(r->name, opts->name, sizeof r->name - 1);
  }
  void *res = NULL;
  e = call_with(port, spawn_there, r, free, &res, deadline);
  if (e == -ETIMEDOUT || e == -ECANCELED)
    return e; /* r went with the call */
  free(r);
  return e < 0 ? e : (int)(intptr_t)res;
}
