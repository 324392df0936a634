/*
 * What the condition variable needs of the mutex (mutex.c): taking it,
 * giving it up, and the owner-died report.
 */
#ifndef TDL_SYNC_INTERNAL_H
#define TDL_SYNC_INTERNAL_H

#include "sync/waitq.h"

/* f becomes m's owner (m is unlocked, or handed over). */
void tdl__mutex_take(tdl_mutex *m, tdl__fiber *f);
/* The owner gives m up: to its oldest live waiter, or unlocked. */
void tdl__mutex_release(tdl_mutex *m);
/* The caller has just come to own m: 0, or -EOWNERDEAD (reported once). */
int tdl__mutex_acquired(tdl_mutex *m);

#endif /* TDL_SYNC_INTERNAL_H */
