/* SPDX-License-Identifier: MIT */
/* The one clock (see clock.h). */
#include <time.h>

#include "base/clock.h"

/* CLOCK_MONOTONIC goes through the vDSO (no system call).  The COARSE variant
 * is cheaper still but ticks every 4 ms here, which would quantize 1 ms timers
 * to 4 ms. */
tdl_time_t tdl__clock_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}
