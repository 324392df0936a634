/*
 * Shared channels: the ends may be on different loops (xchan.c).  chan.c
 * hands every operation on a channel made by tdl_chan_new_shared here;
 * select.c hangs records on them like on a local channel's queues.
 */
#ifndef TDL_SYNC_XCHAN_H
#define TDL_SYNC_XCHAN_H

#include "fiber/shared_wait.h"

int tdl__xchan_new(tdl_chan *ch, size_t elem_size, size_t capacity);
void tdl__xchan_free(tdl_chan *ch); /* wakes waiters with -EBADF */
int tdl__xchan_send(tdl_chan *ch, const void *val, tdl_time_t deadline);
int tdl__xchan_recv(tdl_chan *ch, void *val, tdl_time_t deadline);
int tdl__xchan_try_send(tdl_chan *ch, const void *val);
int tdl__xchan_try_recv(tdl_chan *ch, void *val);
int tdl__xchan_close(tdl_chan *ch);
size_t tdl__xchan_len(const tdl_chan *ch);

/* select.c: hang w (clause, claim and val set by the caller) on ch's queue
 * for op (TDL_SELECT_RECV / SEND), or take it down.  hang returns 0
 * (hung), 1 (unbuffered: completed at once, w's claim taken and status
 * set), or an error.  ready: whether op could go now (buffered: a value or
 * room; or closed), for the look a buffered select takes after hanging. */
int tdl__xchan_hang(tdl_chan *ch, int op, tdl__xwait *w, tdl__fiber *f);
bool tdl__xchan_ready(tdl_chan *ch, int op);
void tdl__xchan_unhang(tdl_chan *ch, int op, tdl__xwait *w);

#endif /* TDL_SYNC_XCHAN_H */
