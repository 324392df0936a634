/* SPDX-License-Identifier: MIT */
/* tdl_fiber_join with its deadline before its result, the result NULL: the
 * deadline is never a pointer, not even NULL.  It must not compile. */
#include <treadle.h>

int wait_for(tdl_fiber_t f);
int wait_for(tdl_fiber_t f)
{
  return tdl_fiber_join(f, tdl_after(TDL_SEC), NULL);
}
