/* SPDX-License-Identifier: MIT */
/*
 * Call-and-wait on another loop, for fibers.
 *
 * A call travels (fiber/call.h): the caller posts it to the target loop,
 * the target runs fn, unless the caller has left, and sends it home.
 */
#include <stdlib.h>
#include <string.h>

#include "fiber/call.h"

typedef struct call {
  tdl__call c; /* first: a call its caller left is freed through it */
  tdl_post there;
  void *(*fn)(tdl_loop *loop, void *arg);
  void *result;
  int error;   /* -ESHUTDOWN: the target loop went before fn ran */
} call;
_Static_assert(offsetof(call, c) == 0, "the call is freed through c");

/* On the target loop (NULL: it was freed first). */
static void run_there(tdl_loop *loop, tdl_post *p)
{
  call *c = p->data;
  if (!loop)
    c->error = -ESHUTDOWN;
  else if (!tdl__call_abandoned(&c->c))
    c->result = c->fn(loop, c->c.arg);
  tdl__call_return(&c->c);
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
  e = tdl__call_init(&c->c, f, arg, drop_arg);
  if (e < 0) {
    free(c);
    return e;
  }
  c->fn = fn;
  tdl_post_init(&c->there, run_there, c);
  if ((e = tdl_port_post(port, &c->there)) < 0) {
    tdl__call_unsent(&c->c);
    free(c);
    return e;
  }
  if ((e = tdl__call_wait(&c->c, "call", deadline)) < 0)
    return e; /* the call finishes (or is skipped) without us */
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
  /* GCC's analyser has call_with's own tdl__may_block say -ECANCELED after
   * the one above said 0, before the call took r; but nothing between them
   * parks, and only this thread cancels its fibers. */
  TDL__ANALYZER_IGNORE("-Wanalyzer-malloc-leak")
  if (e == -ETIMEDOUT || e == -ECANCELED)
    return e; /* r went with the call */
  TDL__ANALYZER_END
  free(r);
  return e < 0 ? e : (int)(intptr_t)res;
}
