/* SPDX-License-Identifier: MIT */
/* tdl_fiber_join with the handle and the result swapped.  It must not
 * compile. */
#include <treadle.h>

int wait_for(tdl_fiber_t f);
int wait_for(tdl_fiber_t f)
{
  void *result;
  return tdl_fiber_join(&result, f, TDL_FOREVER);
}
