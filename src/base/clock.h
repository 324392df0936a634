/*
 * The one clock: CLOCK_MONOTONIC in nanoseconds, the clock of every deadline.
 */
#ifndef TDL_BASE_CLOCK_H
#define TDL_BASE_CLOCK_H

#include "base/base.h"

/* A fresh reading (the vDSO: no system call, ~20 ns). */
tdl_time_t tdl__clock_now(void);

#endif /* TDL_BASE_CLOCK_H */
