/* SPDX-License-Identifier: MIT */
/*
 * Fiber-local storage: TDL_FLS_KEYS process-wide keys, a value per key in
 * an array that a fiber allocates when it first sets a value (most fibers
 * never do, and an idle compacted fiber keeps its control block on the
 * heap: 128 bytes in each would be paid for nothing), freed with the fiber;
 * destructors run as the fiber finishes (through the fiber's cleanups, once
 * it has set a value).
 */
#include <pthread.h>
#include <stdlib.h>

#include "fiber/fiber_internal.h"

/* Rounds of destructors at most, when destructors set values again (as
 * pthread's PTHREAD_DESTRUCTOR_ITERATIONS). */
enum { FLS_ROUNDS = 4 };

static void (*fls_dtor[TDL_FLS_KEYS])(void *);
static unsigned fls_keys; /* keys handed out (atomic) */

int tdl_fls_key_new(tdl_fls_key_t *key, void (*dtor)(void *))
{
  /* Rare, and the destructor must be in place before the key is visible to
   * other threads' fibers: a lock, and publication with release order. */
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&lock);
  unsigned k = __atomic_load_n(&fls_keys, __ATOMIC_RELAXED);
  if (k < TDL_FLS_KEYS) {
    fls_dtor[k] = dtor;
    __atomic_store_n(&fls_keys, k + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&lock);
  if (k >= TDL_FLS_KEYS)
    return -EAGAIN;
  *key = k;
  return 0;
}

/* The fiber finishes: call each destructor with its non-NULL value. */
static void run_dtors(tdl__cleanup *c)
{
  tdl__fiber *f = TDL__CONTAINER_OF(c, tdl__fiber, fls_cleanup);
  f->fls_rounds++;
  if (!f->fls)
    return;
  for (unsigned k = 0; k < TDL_FLS_KEYS; k++) {
    void *v = f->fls[k];
    f->fls[k] = NULL;
    if (v && fls_dtor[k])
      fls_dtor[k](v);
  }
}

int tdl_fls_set(tdl_fls_key_t key, void *value)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (key >= __atomic_load_n(&fls_keys, __ATOMIC_ACQUIRE))
    return -EINVAL;
  if (!f->fls) {
    if (!value)
      return 0; /* unset already */
    if (!(f->fls = TDL__FAULT_ALLOC(calloc(TDL_FLS_KEYS, sizeof *f->fls))))
      return -ENOMEM;
  }
  f->fls[key] = value;
  if (value && !tdl__list_linked(&f->fls_cleanup.link) && f->fls_rounds < FLS_ROUNDS) {
    f->fls_cleanup.run = run_dtors;
    tdl__cleanup_add(f, &f->fls_cleanup);
  }
  return 0;
}

void *tdl_fls_get(tdl_fls_key_t key)
{
  tdl__fiber *f = tdl__self();
  return f && f->fls && key < TDL_FLS_KEYS ? f->fls[key] : NULL;
}
