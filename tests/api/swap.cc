/* SPDX-License-Identifier: MIT */
/* In C++ the swapped calls of swap_*.c are errors without any macro: a
 * pointer does not convert to another, to an integer, or between data and
 * functions.  Each must fail (check_swaps.py compiles them one by one). */
#include <treadle.h>

static void *worker(void *arg) { return arg; }

int swapped(tdl_loop *loop, void *ctx);
int swapped(tdl_loop *loop, void *ctx)
{
  tdl_fiber_t f = 0;
  void *result = nullptr;
  (void)ctx;
  (void)result;
#if SWAP == 1
  return tdl_fiber_spawn(loop, &f, worker, nullptr, nullptr);
#elif SWAP == 2
  return tdl_fiber_spawn(&f, loop, ctx, worker, nullptr);
#elif SWAP == 3
  return tdl_fiber_spawn(&f, loop, worker, nullptr, ctx);
#elif SWAP == 4
  return tdl_fiber_join(f, TDL_FOREVER, &result);
#elif SWAP == 5
  return tdl_fiber_join(&result, f, TDL_FOREVER);
#else
  return tdl_fiber_spawn(&f, loop, worker, nullptr, nullptr) | tdl_fiber_join(f, &result, TDL_FOREVER);
#endif
}
