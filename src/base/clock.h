/* SPDX-License-Identifier: MIT */
/*
 * The one clock: CLOCK_MONOTONIC in nanoseconds, the clock of every deadline.
 */
#ifndef TDL_BASE_CLOCK_H
#define TDL_BASE_CLOCK_H

#include "base/base.h"

/* A fresh reading (the vDSO: no system call, ~20 ns). */
tdl_time_t tdl__clock_now(void);

/* t + d as a deadline: t for d <= 0, saturating at TDL_TIME_MAX (t >= 0). */
static inline tdl_time_t tdl__time_add(tdl_time_t t, tdl_time_t d)
{
  if (d <= 0)
    return t;
  return d > TDL_TIME_MAX - t ? TDL_TIME_MAX : t + d;
}

/* The earlier of two deadlines; TDL_FOREVER is later than every other. */
static inline tdl_time_t tdl__deadline_min(tdl_time_t a, tdl_time_t b)
{
  if (a == TDL_FOREVER)
    return b;
  if (b == TDL_FOREVER)
    return a;
  return a < b ? a : b;
}

/* A pause that doubles from one call to the next, up to a cap: how treadle
 * waits for something nothing signals (a child without a pidfd, a full Unix
 * backlog, an exhausted fd table). */
typedef struct tdl__backoff {
  tdl_time_t next, max;
} tdl__backoff;

static inline tdl_time_t tdl__backoff_step(tdl__backoff *b)
{
  tdl_time_t d = b->next;
  b->next = b->next > b->max / 2 ? b->max : b->next * 2;
  return d;
}

#endif /* TDL_BASE_CLOCK_H */
