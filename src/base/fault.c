/* SPDX-License-Identifier: MIT */
/* Fault injection for tests (fault.h); compiled only with -DTDL_FAULTS=ON. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/fault.h"

/* 0: disarmed.  Otherwise the number of wrapped calls left before the one
 * that fails; -1 once a sticky countdown has run out. */
static _Atomic long countdown;
static _Atomic bool sticky_mode;
static _Atomic bool fired;
static const char *_Atomic fired_site;

bool tdl__fault(int err, const char *site)
{
  if (atomic_load_explicit(&countdown, memory_order_relaxed) == 0)
    return false;
  long c = atomic_load_explicit(&countdown, memory_order_relaxed);
  for (;;) {
    if (c == 0)
      return false; /* disarmed meanwhile, or another thread took the failure */
    if (c < 0)
      break; /* sticky: every call fails */
    long next = c > 1 ? c - 1 : (atomic_load_explicit(&sticky_mode, memory_order_relaxed) ? -1 : 0);
    if (atomic_compare_exchange_weak_explicit(&countdown, &c, next, memory_order_relaxed, memory_order_relaxed)) {
      if (c > 1)
        return false;
      break;
    }
  }
  atomic_store_explicit(&fired_site, site, memory_order_relaxed);
  if (getenv("TDL_FAULTS_VERBOSE"))
    fprintf(stderr, "treadle: injected fault at %s\n", site);
  atomic_store_explicit(&fired, true, memory_order_relaxed);
  errno = err;
  return true;
}

void tdl__fault_arm(long n, bool sticky)
{
  atomic_store(&countdown, 0);
  if (n <= 0)
    return; /* what the last countdown did stays readable */
  atomic_store(&fired, false);
  atomic_store(&fired_site, NULL);
  atomic_store(&sticky_mode, sticky);
  atomic_store(&countdown, n);
}

bool tdl__fault_fired(void)
{
  return atomic_load(&fired);
}

const char *tdl__fault_site(void)
{
  return atomic_load(&fired_site);
}
