/* SPDX-License-Identifier: MIT */
/*
 * # Fan-out across loops: one publisher, subscribers on every loop
 *
 * A pub-sub server, a chat room, a price feed: one source, and every
 * consumer gets every message, whichever loop (thread) it runs on.  A
 * broadcast (`tdl_bcast`, sync.h) is that object:
 *
 * - every call on it is THREAD-SAFE, so the publisher and the subscribers
 *   may be fibers of different loops of a group, or plain threads;
 * - a send never waits: the broadcast keeps the last `capacity` values, and
 *   a slow subscriber cannot hold up the publisher or anybody else;
 * - a subscriber that fell more than `capacity` values behind is told how
 *   many it lost (its receive returns that count, > 0, instead of a value),
 *   and decides: go on from the oldest value kept, or give up (a server
 *   would drop that client);
 * - closing it ends every subscriber with -EPIPE once it has read what is
 *   left.
 *
 * Subscribe before the values you want are sent: a subscription sees what is
 * sent after it was made.  Here each loop subscribes once, then counts
 * `tdl_bcast_send`'s result (the subscribers it reached) to know when to
 * start.  Values are copied in and out (a struct here), so no subscriber
 * ever sees memory another is writing.
 *
 * The program runs a group of two loops: loop 0 publishes 10,000 ticks;
 * each loop has a subscriber that keeps up, and loop 1 also a slow one
 * that sleeps between receives and so falls behind.  It checks the
 * broadcast's promise for each: every tick was received in order, or
 * reported lost; none went missing without a word.  (How many each loses
 * depends on the machine: the slow one many, the others none unless their
 * thread is held up for longer than a burst takes to fill the ring.)  A
 * group's loops run until it is stopped: the last subscriber to finish
 * stops it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <treadle.h>

#define TICKS 10000
#define KEPT 256 /* values the broadcast keeps: how far a subscriber may lag */

typedef struct tick {
  long seq;
  double price;
} tick;

static tdl_bcast *feed;
static atomic_int subscribed; /* subscriptions made, of the three */
static atomic_int accounted;  /* subscribers that saw every tick or were told it was lost */
static atomic_int finished;   /* subscribers done */
static atomic_long lost[3];   /* ticks each subscriber was told it lost */

typedef struct reader {
  tdl_bcast_sub *sub;
  int id;
  tdl_time_t pause; /* between receives: 0, or a slow consumer's */
} reader;

static void *consume(void *arg)
{
  reader *rd = arg;
  tick t;
  long next = 0; /* the tick expected next */
  int r;
  while ((r = tdl_bcast_recv(rd->sub, &t, TDL_FOREVER)) >= 0) {
    if (r > 0) { /* fell behind: r ticks were overwritten; go on with the oldest kept */
      atomic_fetch_add(&lost[rd->id], r);
      next += r;
      continue;
    }
    if (t.seq != next)
      break; /* a tick missing and not reported: never happens */
    next++;
    if (rd->pause)
      tdl_sleep(tdl_after(rd->pause));
  }
  if (r == -EPIPE && next == TICKS) /* closed, and every tick read or reported lost */
    atomic_fetch_add(&accounted, 1);
  tdl_bcast_unsubscribe(rd->sub);
  if (atomic_fetch_add(&finished, 1) + 1 == 3)
    tdl_group_stop(tdl_group_self()); /* the last one out ends the program */
  return NULL;
}

static reader readers[3];

static void subscriber(int id, tdl_time_t pause)
{
  reader *rd = &readers[id];
  *rd = (reader){.id = id, .pause = pause};
  if (tdl_bcast_subscribe(&rd->sub, feed) == 0 &&
      tdl_fiber_spawn(NULL, tdl_fiber_loop(), consume, rd, &(tdl_fiber_options){.detached = true}) == 0)
    atomic_fetch_add(&subscribed, 1);
}

static void *loop_main(void *arg) /* on each loop of the group */
{
  (void)arg;
  subscriber(tdl_group_index(), 0); /* a consumer that keeps up, on each loop */
  if (tdl_group_index() == 1)
    subscriber(2, 20 * TDL_USEC); /* and a slow one */
  if (tdl_group_index() != 0)
    return NULL;
  while (atomic_load(&subscribed) < 3) /* loop 1's subscriptions may not be made yet */
    tdl_fiber_yield();
  for (long i = 0; i < TICKS; i++) {
    tdl_bcast_send(feed, &(tick){.seq = i, .price = 100.0 + (double)(i % 17)});
    if (i % 64 == 63)
      tdl_sleep(tdl_after(100 * TDL_USEC)); /* ticks come in bursts, as a feed's do */
  }
  tdl_bcast_close(feed);
  return NULL;
}

int main(void)
{
  int e = tdl_bcast_new(&feed, sizeof(tick), KEPT);
  tdl_group *g = NULL;
  if (e == 0)
    e = tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = loop_main});
  if (e == 0)
    e = tdl_group_wait(g, tdl_after(30 * TDL_SEC));
  if (e == 0)
    e = tdl_group_free(g);
  if (e == 0)
    e = tdl_bcast_free(feed); /* every subscription is gone */
  printf("fanout: %s; of %d ticks, the subscribers were told they lost %ld, %ld and %ld (the slow one)\n",
         tdl_strerror(e), TICKS, atomic_load(&lost[0]), atomic_load(&lost[1]), atomic_load(&lost[2]));
  return e == 0 && atomic_load(&accounted) == 3 ? 0 : 1;
}
