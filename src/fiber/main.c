/* SPDX-License-Identifier: MIT */
/* tdl_fiber_main: a loop for main(), run until nothing is left, then freed. */
#include "fiber/fiber_internal.h"

typedef struct main_box {
  tdl_fiber_fn fn;
  void *arg, *result;
} main_box;

static void *main_trampoline(void *arg)
{
  main_box *b = arg;
  b->result = b->fn(b->arg);
  return NULL;
}

/* Cancel every fiber that has not finished: their blocking calls then fail
 * with -ECANCELED, so that they unwind and end. */
static void cancel_all(tdl_loop *loop)
{
  tdl__sched *s = loop->sched;
  TDL__LIST_FOREACH(n, &s->all) {
    tdl__fiber *f = TDL__CONTAINER_OF(n, tdl__fiber, all);
    if (f->state != TDL__FIBER_DONE)
      tdl_fiber_cancel(loop, tdl__fiber_handle(f));
  }
}

int tdl_fiber_main(tdl_fiber_fn fn, void *arg, void **result)
{
  tdl_loop *loop;
  int e = tdl_loop_new(&loop, NULL);
  if (e < 0)
    return e;
  main_box box = {fn, arg, NULL};
  tdl_fiber_t h;
  e = tdl_fiber_spawn(&h, loop, main_trampoline, &box, &(tdl_fiber_options){.name = "main"});
  if (e < 0) {
    tdl_loop_free(loop);
    return e;
  }
  tdl_fiber_detach(loop, h);
  e = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  if (e == -EDEADLK) {
    /* Parked for good: cancel them so that they unwind and give back their
     * stacks.  A fiber that will not end (it ignores the cancel and keeps
     * waiting) still keeps the loop: it is then leaked with its fibers. */
    cancel_all(loop);
    if (tdl_loop_run(loop, TDL_LOOP_DEFAULT) != 0)
      return -EDEADLK;
  } else if (e < 0) {
    return e;
  } else if (result) {
    *result = box.result;
  }
  /* Finished fibers that were neither joined nor detached cannot be joined
   * any more: give their stacks back. */
  tdl__sched_release_finished(loop->sched);
  int f = tdl_loop_free(loop);
  return e < 0 ? e : f;
}
