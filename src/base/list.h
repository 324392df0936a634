/* SPDX-License-Identifier: MIT */
/*
 * The one intrusive list: circular, doubly linked, through a head node (and,
 * at the end, the one-way queue the run queue uses).
 *
 * Every queue in treadle is one of these: waiters of a channel or a lock, the
 * run queue, every fiber of a loop, deferred callbacks, hooks, wakeups,
 * signal watchers, what a fiber holds.  The node (tdl__list, declared in
 * treadle.h so that public structs can embed it) is two pointers inside the
 * caller's struct; nothing is ever allocated.
 *
 * An empty list is a zeroed head, never a head pointing at itself: so a
 * zero-filled struct holds empty lists, and an object may be copied or moved
 * while its lists are empty.  A node that is not in a list is zeroed too, so
 * tdl__list_linked() tells whether it is in one, and removing a node needs
 * no head: when the last node leaves, the head is the only one left in the
 * circle and is zeroed.
 *
 * Cost: every operation is O(1) and touches only the node, its neighbours
 * and (when the list becomes empty or non-empty) the head.
 */
#ifndef TDL_BASE_LIST_H
#define TDL_BASE_LIST_H

#include <assert.h>
#include <stdbool.h>

#include "base/base.h"

static inline bool tdl__list_empty(const tdl__list *head) { return head->next == NULL; }

/* Whether a node is in a list. */
static inline bool tdl__list_linked(const tdl__list *n) { return n->next != NULL; }

/* Put n between p and q (neighbours in a circle). */
static inline void tdl__list_link_(tdl__list *p, tdl__list *n, tdl__list *q)
{
  /* A node of a list has both neighbours: clang's analyser cannot follow
   * the circle and would take them for NULL. */
  assert(p && q);
  n->prev = p;
  n->next = q;
  p->next = n;
  q->prev = n;
}

/* Append n (not in a list) at the back. */
static inline void tdl__list_push(tdl__list *head, tdl__list *n)
{
  if (!head->next)
    head->next = head->prev = head;
  tdl__list_link_(head->prev, n, head);
}

/* Insert n (not in a list) at the front. */
static inline void tdl__list_push_front(tdl__list *head, tdl__list *n)
{
  if (!head->next)
    head->next = head->prev = head;
  tdl__list_link_(head, n, head->next);
}

/* Insert n (not in a list) right after pos, a node of a list. */
static inline void tdl__list_insert_after(tdl__list *pos, tdl__list *n) { tdl__list_link_(pos, n, pos->next); }

/* Take n out of its list (it must be in one). */
static inline void tdl__list_remove(tdl__list *n)
{
  tdl__list *p = n->prev, *q = n->next;
  assert(p && q); /* n is in a list: as in tdl__list_link_ */
  p->next = q;
  q->prev = p;
  if (p == q) /* only the head is left: the list is empty now */
    p->next = p->prev = NULL;
  n->next = n->prev = NULL;
}

/* The first node, or NULL. */
static inline tdl__list *tdl__list_first(const tdl__list *head) { return head->next; }

/* The node after n, or NULL at the end. */
static inline tdl__list *tdl__list_next(const tdl__list *head, const tdl__list *n)
{
  return n->next == head ? NULL : n->next;
}

/* Remove and return the first node, or NULL. */
static inline tdl__list *tdl__list_pop(tdl__list *head)
{
  tdl__list *n = head->next;
  if (n)
    tdl__list_remove(n);
  return n;
}

/* Move every node of from to the back of to; from becomes empty. */
static inline void tdl__list_splice(tdl__list *to, tdl__list *from)
{
  if (!from->next)
    return;
  if (!to->next) {
    to->next = from->next;
    to->prev = from->prev;
  } else {
    to->prev->next = from->next;
    from->next->prev = to->prev;
    to->prev = from->prev;
  }
  to->next->prev = to;
  to->prev->next = to;
  from->next = from->prev = NULL;
}

/* The struct of `type` whose tdl__list `member` is n (NULL stays NULL); n
 * is evaluated once. */
#define TDL__LIST_ENTRY(n, type, member)                                   \
  __extension__({                                                        \
    tdl__list *n_ = (n);                                                 \
    n_ ? TDL__CONTAINER_OF(n_, type, member) : (type *)NULL;             \
  })

/* for (each node n of head): n may not be removed inside the body; see
 * tdl__list_walk for a walk that tolerates any change. */
#define TDL__LIST_FOREACH(n, head) for (tdl__list *n = (head)->next; n && n != (head); n = n->next)

/*
 * Call fn(n, ctx) for each node of head in order, where fn may remove any
 * node (n included) or add nodes: a marker node on the caller's stack keeps
 * the walk's place.  Nodes added behind the marker during the walk are
 * visited too.  While fn runs the marker is in the list, and it is no
 * caller's struct: code that fn reaches must not iterate head itself
 * (TDL__LIST_FOREACH would hand it the marker); keep a count instead.
 */
static inline void tdl__list_walk(tdl__list *head, void (*fn)(tdl__list *n, void *ctx), void *ctx)
{
  tdl__list mark = {NULL, NULL};
  for (tdl__list *n = head->next; n && n != head;) {
    tdl__list_insert_after(n, &mark);
    fn(n, ctx);
    n = mark.next;
    tdl__list_remove(&mark);
  }
}

/*
 * And its one-way sibling for the hottest FIFO, the run queue, where nothing
 * is ever removed from the middle: a singly linked queue through a
 * tdl__qnode, push at the back, pop at the front, a zeroed head empty.  (A
 * fiber hand-off pushes and pops once each: 141 instructions per hop on the
 * ring workload with this, 158 with the doubly linked list.)
 */
typedef struct tdl__qnode {
  struct tdl__qnode *next;
} tdl__qnode;

typedef struct tdl__queue {
  tdl__qnode *head, *tail;
} tdl__queue;

static inline bool tdl__queue_empty(const tdl__queue *q) { return q->head == NULL; }

static inline void tdl__queue_push(tdl__queue *q, tdl__qnode *n)
{
  n->next = NULL;
  if (q->tail)
    q->tail->next = n;
  else
    q->head = n;
  q->tail = n;
}

static inline tdl__qnode *tdl__queue_pop(tdl__queue *q)
{
  tdl__qnode *n = q->head;
  if (n) {
    q->head = n->next;
    if (!q->head)
      q->tail = NULL;
  }
  return n;
}

#endif /* TDL_BASE_LIST_H */
