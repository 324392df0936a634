/* SPDX-License-Identifier: MIT */
/*
 * The helper threads treadle starts for itself (the loop watchdog's, the
 * pool's), which run until they decide to exit and which nobody joins.
 */
#ifndef TDL_BASE_THREAD_H
#define TDL_BASE_THREAD_H

#include "base/base.h"

/* Start a thread running fn(arg), detached (it exits on its own; nobody
 * joins it), with every signal blocked and a 256 KiB stack.  Returns 0, or
 * -EAGAIN when it could not be made. */
int tdl__thread_start(void *(*fn)(void *arg), void *arg);

#endif /* TDL_BASE_THREAD_H */
