/* The loop's cached time and deadlines made from it. */
#include "loop/loop_internal.h"

tdl_time_t tdl_now(const tdl_loop *loop) { return loop->now; }

tdl_time_t tdl_now_update(tdl_loop *loop)
{
  loop->now = tdl__clock_now();
  return loop->now;
}

tdl_time_t tdl_after(const tdl_loop *loop, tdl_time_t delay)
{
  if (delay <= 0)
    return loop->now;
  if (delay > TDL_TIME_MAX - loop->now)
    return TDL_TIME_MAX;
  return loop->now + delay;
}
