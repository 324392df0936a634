/* SPDX-License-Identifier: MIT */
/*
 * Transports: the slot through which a higher layer (TLS) carries the
 * buffered reader's and writer's bytes for an fd, so that net never calls
 * it.  tdl_reader and tdl_writer keep their layout (the ABI): the
 * transport is found by the fd, in a table of two levels whose chunks are
 * made once and never move, so that a look-up needs no lock; each entry is
 * written only by the thread whose loop uses that fd.  A process that never
 * sets one pays one load per fill or flush (`transports`).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "net/net_internal.h"

enum { CHUNK = 1024, CHUNKS = 4096 }; /* fds up to 4 Mi */

typedef struct entry {
  const tdl_net_transport *t;
  void *ctx;
} entry;

static _Atomic(entry *) chunks[CHUNKS];
static atomic_uint transports;

int tdl_net_transport_set(int fd, const tdl_net_transport *t, void *ctx)
{
  if (fd < 0 || (size_t)fd / CHUNK >= CHUNKS)
    return -EBADF;
  if (t && (!t->read || !t->write))
    return -EINVAL;
  _Atomic(entry *) *slot = &chunks[fd / CHUNK];
  entry *c = atomic_load_explicit(slot, memory_order_acquire);
  if (!c) {
    if (!t)
      return 0;
    entry *fresh = calloc(CHUNK, sizeof *fresh);
    if (!fresh)
      return -ENOMEM;
    /* Another thread may have made it meanwhile: keep theirs. */
    if (!atomic_compare_exchange_strong_explicit(slot, &c, fresh, memory_order_acq_rel, memory_order_acquire))
      free(fresh);
    else
      c = fresh;
  }
  entry *e = &c[fd % CHUNK];
  if (t && !e->t)
    atomic_fetch_add_explicit(&transports, 1, memory_order_relaxed);
  else if (!t && e->t)
    atomic_fetch_sub_explicit(&transports, 1, memory_order_relaxed);
  e->t = t;
  e->ctx = t ? ctx : NULL;
  return 0;
}

const tdl_net_transport *tdl__net_transport(int fd, void **ctx)
{
  if (atomic_load_explicit(&transports, memory_order_relaxed) == 0 || fd < 0 ||
      (size_t)fd / CHUNK >= CHUNKS)
    return NULL;
  entry *c = atomic_load_explicit(&chunks[fd / CHUNK], memory_order_acquire);
  if (!c || !c[fd % CHUNK].t)
    return NULL;
  *ctx = c[fd % CHUNK].ctx;
  return c[fd % CHUNK].t;
}
