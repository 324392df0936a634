/* SPDX-License-Identifier: MIT */
/*
 * The key space: byte strings to byte strings, in a chained hash table of
 * one loop (no locks: one fiber runs at a time).  A key may also carry the
 * fibers that wait for it to be written (WAITKEY).
 */
#ifndef KV_STORE_H
#define KV_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <treadle.h>

/* Values up to this size live in their entry (as Redis embeds short strings):
 * a SET of one makes no allocation, a GET reads no line of its own. */
enum { KV_SMALL = 16 };

typedef struct entry {
  struct entry *next;  /* in its bucket */
  char *val;           /* NULL: no value (only waiters); small, or its own allocation */
  size_t vlen;
  struct waiter *waiters; /* fibers waiting for a write */
  size_t klen;
  char small[KV_SMALL];
  char key[];
} entry;

/* A fiber waiting for a key to be written. */
typedef struct waiter {
  struct waiter *next, **pprev;
  tdl_fiber_t fiber;
} waiter;

/* Add w to e's waiters, or take it out again. */
void store_wait(entry *e, waiter *w);
void store_unwait(waiter *w);

int store_init(size_t buckets);
/* The entry of key, or NULL; with create, made (without a value) if missing
 * (NULL: no memory). */
entry *store_find(const char *key, size_t klen, bool create);
/* Give e the value v (copied); wake its waiters.  -ENOMEM keeps the old. */
int store_set(entry *e, const char *v, size_t vlen);
/* Drop e's value (and e, when nobody waits on it).  Returns whether it had
 * one. */
bool store_del(entry *e);
/* e's waiters are gone: drop e if it has no value either. */
void store_forget_if_empty(entry *e);

#endif
