/* SPDX-License-Identifier: MIT */
/* tdl_fiber_spawn with the fiber's argument (a void *) and the options
 * swapped: both are pointers that convert silently.  It must not compile. */
#include <treadle.h>

static void *worker(void *arg) { return arg; }

int start(tdl_loop *loop, void *ctx);
int start(tdl_loop *loop, void *ctx)
{
  tdl_fiber_t f;
  return tdl_fiber_spawn(&f, loop, worker, NULL, ctx);
}
