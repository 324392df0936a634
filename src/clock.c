/* Time: the loop's cached monotonic clock. */
#include <time.h>

#include "loop_internal.h"

/* CLOCK_MONOTONIC goes through the vDSO (no system call).  The COARSE variant
 * is cheaper still but ticks every 4 ms here, which would quantize 1 ms timers
 * to 4 ms. */
tdl_time_t tdl__clock_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

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
