/* SPDX-License-Identifier: MIT */
/* tdl_fiber_join with its deadline before its result (the order of the API
 * before 1.0): GCC 12 only warned (int-conversion), and the program crashed
 * at run time.  It must not compile. */
#include <treadle.h>

int wait_for(tdl_fiber_t f, void **result);
int wait_for(tdl_fiber_t f, void **result)
{
  return tdl_fiber_join(f, TDL_FOREVER, result);
}
