/*
 * Shared channels: the ends may be on different loops (xchan.c).  chan.c
 * hands every operation on a channel made by tdl_chan_new_shared here;
 * select.c hangs records on them like on a local channel's queues.
 */
#ifndef TDL_SYNC_XCHAN_H
#define TDL_SYNC_XCHAN_H

#include "sync/waitq.h"

/* What a waker tells a waiting record (status). */
enum {
  TDL__X_RETRY = 1, /* buffered: a value or room may be there now: try again */
  TDL__X_MOVED = 0, /* unbuffered: the value moved to or from the record */
  /* or -EPIPE (closed), -EBADF (destroyed) */
};

/* A fiber waiting on a shared channel, on its stack.  The wake comes from
 * any thread: the waker takes `claim`, sets status and delivers: directly
 * when it runs on the waiter's loop, else as a post to that loop. */
typedef struct tdl__xwait {
  tdl__list link;
  tdl__fiber *f;
  tdl_loop *loop;
  tdl__claim *claim;  /* the record's own, or its select's */
  tdl__claim own;
  int clause;         /* a select's clause; 0 for a plain wait */
  void *val;          /* unbuffered: the fiber's value buffer */
  int status;         /* set by the waker */
  int delivered;      /* the wake has arrived (the waiter's thread only) */
  int expecting;      /* counted in its loop's remote waits (tdl__remote_expect) */
  tdl_post post;
} tdl__xwait;

int tdl__xchan_new(tdl_chan *ch, size_t elem_size, size_t capacity);
void tdl__xchan_free(tdl_chan *ch); /* wakes waiters with -EBADF */
int tdl__xchan_send(tdl_chan *ch, const void *val, tdl_time_t deadline);
int tdl__xchan_recv(tdl_chan *ch, void *val, tdl_time_t deadline);
int tdl__xchan_try_send(tdl_chan *ch, const void *val);
int tdl__xchan_try_recv(tdl_chan *ch, void *val);
int tdl__xchan_close(tdl_chan *ch);
size_t tdl__xchan_len(const tdl_chan *ch);

/* select.c: hang w (clause, claim and val set by the caller) on ch's queue
 * for op (TDL_SELECT_RECV / SEND), or take it down; then, for a record
 * whose claim was taken, wait until its wake has arrived.  hang returns 0
 * (hung), 1 (unbuffered: completed at once, w's claim taken and status
 * set), or an error.  ready: whether op could go now (buffered: a value or
 * room; or closed), for the look a buffered select takes after hanging. */
int tdl__xchan_hang(tdl_chan *ch, int op, tdl__xwait *w, tdl__fiber *f);
bool tdl__xchan_ready(tdl_chan *ch, int op);
void tdl__xchan_unhang(tdl_chan *ch, int op, tdl__xwait *w);
void tdl__xchan_await(tdl__xwait *w);

#endif /* TDL_SYNC_XCHAN_H */
