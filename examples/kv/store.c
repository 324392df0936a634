/* SPDX-License-Identifier: MIT */
/* The key space (store.h). */
#include "store.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static entry **table;
static size_t nbuckets, count;

/* FNV-1a: keys are short, and the table is one process's. */
static size_t hash(const char *k, size_t n)
{
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
  return (size_t)h;
}

int store_init(size_t buckets)
{
  nbuckets = buckets;
  table = calloc(nbuckets, sizeof *table);
  return table ? 0 : -ENOMEM;
}

static void grow(void)
{
  size_t n = nbuckets * 2;
  entry **t = calloc(n, sizeof *t);
  if (!t)
    return; /* longer chains, still correct */
  for (size_t i = 0; i < nbuckets; i++) {
    for (entry *e = table[i], *next; e; e = next) {
      next = e->next;
      size_t b = hash(e->key, e->klen) & (n - 1);
      e->next = t[b];
      t[b] = e;
    }
  }
  free(table);
  table = t;
  nbuckets = n;
}

entry *store_find(const char *key, size_t klen, bool create)
{
  size_t b = hash(key, klen) & (nbuckets - 1);
  for (entry *e = table[b]; e; e = e->next)
    if (e->klen == klen && memcmp(e->key, key, klen) == 0)
      return e;
  if (!create)
    return NULL;
  entry *e = calloc(1, sizeof *e + klen);
  if (!e)
    return NULL;
  memcpy(e->key, key, klen);
  e->klen = klen;
  e->next = table[b];
  table[b] = e;
  if (++count > nbuckets)
    grow();
  return e;
}

/* e's value, when it has an allocation of its own, is given back. */
static void drop_value(entry *e)
{
  if (e->val != e->small)
    free(e->val);
  e->val = NULL;
}

static void unlink_entry(entry *e)
{
  size_t b = hash(e->key, e->klen) & (nbuckets - 1);
  for (entry **pp = &table[b]; *pp; pp = &(*pp)->next) {
    if (*pp == e) {
      *pp = e->next;
      break;
    }
  }
  count--;
  drop_value(e);
  free(e);
}

int store_set(entry *e, const char *v, size_t vlen)
{
  if (vlen <= KV_SMALL) {
    drop_value(e);
    memcpy(e->small, v, vlen);
    e->val = e->small;
  } else {
    char *copy = malloc(vlen);
    if (!copy)
      return -ENOMEM;
    memcpy(copy, v, vlen);
    drop_value(e);
    e->val = copy;
  }
  e->vlen = vlen;
  /* A write wakes every fiber waiting for it; each removes itself. */
  for (waiter *w = e->waiters; w; w = w->next)
    tdl_fiber_unpark(tdl_fiber_loop(), w->fiber);
  return 0;
}

bool store_del(entry *e)
{
  if (!e->val)
    return false;
  drop_value(e);
  store_forget_if_empty(e);
  return true;
}

void store_forget_if_empty(entry *e)
{
  if (!e->val && !e->waiters)
    unlink_entry(e);
}

void store_wait(entry *e, waiter *w)
{
  w->next = e->waiters;
  if (w->next)
    w->next->pprev = &w->next;
  w->pprev = &e->waiters;
  e->waiters = w;
}

void store_unwait(waiter *w)
{
  *w->pprev = w->next;
  if (w->next)
    w->next->pprev = w->pprev;
}
