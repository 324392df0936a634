/* SPDX-License-Identifier: MIT */
/* tdl_fiber_spawn with its loop and its out-parameter swapped, its options a
 * compound literal with two members (which the preprocessor cuts in two):
 * the leading arguments are still checked.  It must not compile. */
#include <treadle.h>

static void *worker(void *arg) { return arg; }

int start(tdl_loop *loop);
int start(tdl_loop *loop)
{
  tdl_fiber_t f;
  return tdl_fiber_spawn(loop, &f, worker, NULL, &(tdl_fiber_options){.name = "w", .detached = true});
}
