/* SPDX-License-Identifier: MIT */
/*
 * What the condition variable needs of the mutex (mutex.c): taking it,
 * giving it up, and the owner-died report.
 */
#ifndef TDL_SYNC_INTERNAL_H
#define TDL_SYNC_INTERNAL_H

#include "fiber/waitq.h"

/* f becomes m's owner (m is unlocked, or handed over). */
void tdl__mutex_take(tdl_mutex *m, tdl__fiber *f);
/* The owner gives m up: to its oldest live waiter, or unlocked. */
void tdl__mutex_release(tdl_mutex *m);
/* The caller has just come to own m: 0, or -EOWNERDEAD (reported once). */
int tdl__mutex_acquired(tdl_mutex *m);

/* sync_shared.c: the shared semaphore and wait group (s->shared, wg->shared). */
int tdl__sem_shared_acquire(tdl_sem *s, tdl_time_t deadline);
int tdl__sem_shared_try_acquire(tdl_sem *s);
int tdl__sem_shared_release(tdl_sem *s);
uint32_t tdl__sem_shared_value(const tdl_sem *s);
int tdl__sem_shared_destroy(tdl_sem *s);
int tdl__waitgroup_shared_add(tdl_waitgroup *wg, int64_t delta);
int tdl__waitgroup_shared_wait(tdl_waitgroup *wg, tdl_time_t deadline);
int64_t tdl__waitgroup_shared_count(const tdl_waitgroup *wg);
int tdl__waitgroup_shared_destroy(tdl_waitgroup *wg);

#endif /* TDL_SYNC_INTERNAL_H */
