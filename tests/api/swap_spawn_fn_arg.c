/* SPDX-License-Identifier: MIT */
/* tdl_fiber_spawn with the fiber's function and its argument swapped: GCC 12
 * said nothing at all (a void * and a function pointer convert silently
 * without -Wpedantic).  It must not compile. */
#include <treadle.h>

static void *worker(void *arg) { return arg; }

int start(tdl_loop *loop, void *ctx);
int start(tdl_loop *loop, void *ctx)
{
  tdl_fiber_t f;
  return tdl_fiber_spawn(&f, loop, ctx, worker, NULL);
}
