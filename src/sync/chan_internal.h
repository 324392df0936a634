/* SPDX-License-Identifier: MIT */
/*
 * Shared channels: the ends may be on different loops (chan_shared.c).  chan.c
 * hands every operation on a channel made by tdl_chan_new_shared here;
 * select.c hangs records on them like on a local channel's queues.
 */
#ifndef TDL_SYNC_XCHAN_H
#define TDL_SYNC_XCHAN_H

#include "fiber/shared_wait.h"

int tdl__chan_shared_new(tdl_chan *ch, size_t elem_size, size_t capacity);
int tdl__chan_shared_free(tdl_chan *ch); /* -EBUSY while fibers wait on it or others hold references */
int tdl__chan_shared_retain(tdl_chan *ch);
void tdl__chan_shared_release(tdl_chan *ch); /* the last one closes and frees (now, or as the last waiter leaves) */
int tdl__chan_shared_send(tdl_chan *ch, const void *val, tdl_time_t deadline);
int tdl__chan_shared_recv(tdl_chan *ch, void *val, tdl_time_t deadline);
int tdl__chan_shared_try_send(tdl_chan *ch, const void *val);
int tdl__chan_shared_try_recv(tdl_chan *ch, void *val);
int tdl__chan_shared_close(tdl_chan *ch);
size_t tdl__chan_shared_len(const tdl_chan *ch);

/* select.c: hang w (clause, claim and val set by the caller) on ch's queue
 * for op (TDL_SELECT_RECV / SEND), or take it down.  hang returns 0
 * (hung), 1 (unbuffered: completed at once, w's claim taken and status
 * set), or an error.  ready: whether op could go now (buffered: a value or
 * room; or closed), for the look a buffered select takes after hanging. */
int tdl__chan_shared_hang(tdl_chan *ch, int op, tdl__shared_wait *w, tdl__fiber *f);
bool tdl__chan_shared_ready(tdl_chan *ch, int op);
/* Count a call among ch's users (on), or stop (off): a call that waits and
 * may come back to ch after a wake (a select) holds it from its first wait
 * to its return, so that tdl_chan_free refuses meanwhile. */
void tdl__chan_shared_use(tdl_chan *ch, bool on);
void tdl__chan_shared_unhang(tdl_chan *ch, int op, tdl__shared_wait *w);

#endif /* TDL_SYNC_XCHAN_H */
