/* SPDX-License-Identifier: MIT */
/*
 * The helper threads treadle starts for itself: the loop watchdog's, which
 * runs until it decides to exit and which nobody joins, and the pool's,
 * which tdl_pool_shutdown joins so that a program can end with none left;
 * and the CPUs the process may run on, which "one per CPU" means
 * everywhere.
 */
#ifndef TDL_BASE_THREAD_H
#define TDL_BASE_THREAD_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>

#include "base/base.h"

/* Start a thread running fn(arg), detached (it exits on its own; nobody
 * joins it), with every signal blocked and a 256 KiB stack.  Returns 0, or
 * -EAGAIN when it could not be made. */
int tdl__thread_start(void *(*fn)(void *arg), void *arg);

/* The same, joinable: *t is the thread, which the caller must join (or
 * detach) once fn has returned, or its stack stays mapped. */
int tdl__thread_start_joinable(pthread_t *t, void *(*fn)(void *arg), void *arg);

/* The CPUs of the calling thread's affinity mask (sched_getaffinity) into
 * *set, and how many there are: at least 1 (then *set may be empty) when
 * the mask cannot be read. */
unsigned tdl__cpus(cpu_set_t *set);

#endif /* TDL_BASE_THREAD_H */
