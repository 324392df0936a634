/* SPDX-License-Identifier: MIT */
/*
 * Growing a table indexed by fd number (the loop's fd records, fiber I/O's
 * per-fd state).  Fd numbers are dense but the tables double: growing by
 * realloc and zeroing the new half writes every page of it, so a process
 * whose highest fd is 18,000 kept 32,768 records resident, most never used
 * (about 65 bytes per fd in use with the two tables together).  A new
 * table from calloc, large enough to be a mapping of its own, is zero pages
 * the kernel has not given it yet: only what is copied over and what is
 * used later is ever resident.
 */
#ifndef TDL_BASE_TABLE_H
#define TDL_BASE_TABLE_H

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* A zeroed block of new_bytes that begins with the old_bytes of old, which
 * it frees; NULL without memory (old is then left as it was). */
static inline void *tdl__table_grow(void *old, size_t old_bytes, size_t new_bytes)
{
  void *p = TDL__FAULT_ALLOC(calloc(1, new_bytes));
  if (!p)
    return NULL;
  if (old_bytes)
    memcpy(p, old, old_bytes);
  free(old);
  return p;
}

#endif /* TDL_BASE_TABLE_H */
