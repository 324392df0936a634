/* SPDX-License-Identifier: MIT */
/* tdl_fiber_spawn with its loop and its out-parameter swapped (the order of
 * the API before 1.0): GCC 12 only warned, and the program crashed at run
 * time.  It must not compile (check_swaps.py). */
#include <treadle.h>

static void *worker(void *arg) { return arg; }

int start(tdl_loop *loop);
int start(tdl_loop *loop)
{
  tdl_fiber_t f;
  return tdl_fiber_spawn(loop, &f, worker, NULL, NULL);
}
