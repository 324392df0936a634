/* SPDX-License-Identifier: MIT */
/*
 * nanosleep, clock_nanosleep, usleep and sleep in a fiber: park until the
 * time has passed; a cancel cuts the sleep short, as a signal does.
 */
#include <errno.h>

#include "hook/hook_internal.h"

/* Park until `until`; the nanoseconds left when a cancel cut it short. */
static tdl_time_t nap(tdl_time_t until)
{
  TDL__HOOK_COUNT(slept);
  if (tdl_sleep(until) == 0)
    return 0;
  tdl_time_t left = until - tdl_now();
  return left > 0 ? left : 1;
}

TDL__HOOK int nanosleep(const struct timespec *req, struct timespec *rem)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber())
    return tdl__hook_real.nanosleep(req, rem);
  if (!req || req->tv_nsec < 0 || req->tv_nsec >= 1000000000L || req->tv_sec < 0) {
    errno = EINVAL;
    return -1;
  }
  tdl_time_t left = nap(tdl__hook_after(tdl__hook_ts_ns(req)));
  if (!left)
    return 0;
  if (rem) {
    rem->tv_sec = (time_t)(left / TDL_SEC);
    rem->tv_nsec = (long)(left % TDL_SEC);
  }
  errno = EINTR;
  return -1;
}

TDL__HOOK int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req, struct timespec *rem)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber() || (clock != CLOCK_MONOTONIC && clock != CLOCK_REALTIME))
    return tdl__hook_real.clock_nanosleep(clock, flags, req, rem);
  if (!req || req->tv_nsec < 0 || req->tv_nsec >= 1000000000L || req->tv_sec < 0)
    return EINVAL;
  tdl_time_t t = tdl__hook_ts_ns(req);
  tdl_time_t until;
  if (!(flags & TIMER_ABSTIME)) {
    until = tdl__hook_after(t);
  } else if (clock == CLOCK_MONOTONIC) {
    until = t; /* treadle's clock */
  } else {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    until = tdl__hook_after(t - ((tdl_time_t)now.tv_sec * TDL_SEC + now.tv_nsec)); /* the clock read after `now` */
  }
  tdl_time_t left = nap(until);
  if (!left)
    return 0;
  if (rem && !(flags & TIMER_ABSTIME)) {
    rem->tv_sec = (time_t)(left / TDL_SEC);
    rem->tv_nsec = (long)(left % TDL_SEC);
  }
  return EINTR;
}

TDL__HOOK int usleep(useconds_t us)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber())
    return tdl__hook_real.usleep(us);
  if (nap(tdl__hook_after((tdl_time_t)us * TDL_USEC))) {
    errno = EINTR;
    return -1;
  }
  return 0;
}

TDL__HOOK unsigned sleep(unsigned s)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber())
    return tdl__hook_real.sleep(s);
  tdl_time_t left = nap(tdl__hook_after((tdl_time_t)s * TDL_SEC));
  return (unsigned)((left + TDL_SEC - 1) / TDL_SEC);
}
