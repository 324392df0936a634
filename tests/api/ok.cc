/* SPDX-License-Identifier: MIT */
/* C++ includes treadle.h too (its extern "C" blocks): the right calls
 * compile without a warning; the argument checks are C's (C++ refuses the
 * swaps on its own: swap.cc). */
#include <treadle.h>

#ifdef TDL__ARG_CHECKS
#error "C++ gets no argument-check macros"
#endif

static void *worker(void *arg) { return arg; }

int spawn_and_join(tdl_loop *loop);
int spawn_and_join(tdl_loop *loop)
{
  tdl_fiber_t f = 0;
  void *result = nullptr;
  tdl_fiber_options o = {};
  o.name = "worker";
  int e = tdl_fiber_spawn(&f, loop, worker, nullptr, &o);
  e |= tdl_fiber_spawn(nullptr, loop, worker, &o, NULL);
  e |= tdl_fiber_join(f, &result, TDL_FOREVER);
  e |= tdl_fiber_join(f, nullptr, 0);
  int (*sp)(tdl_fiber_t *, tdl_loop *, tdl_fiber_fn, void *, const tdl_fiber_options *) = &tdl_fiber_spawn;
  return e | sp(&f, loop, worker, nullptr, nullptr);
}
