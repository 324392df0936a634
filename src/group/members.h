/* SPDX-License-Identifier: MIT */
/*
 * A group's state and its loops' (members'), shared by group.c (start, stop)
 * and spawn.c (fibers the group places and its loops steal).
 */
#ifndef TDL_GROUP_MEMBERS_H
#define TDL_GROUP_MEMBERS_H

#include <pthread.h>
#include <signal.h>

#include "fiber/fiber_internal.h"

/* Slots of a loop's queue of group fibers not yet started: a power of two. */
enum { TDL__RING = 256 };

/* One loop's side of group spawning (spawn.c).  The ring is Go's run
 * queue: its owner (the loop's thread) pushes at tail with a store, and
 * the owner and thieves take at head with a compare-and-swap.  The inbox
 * takes fibers other threads place on this loop. */
typedef struct tdl__spawner {
  _Alignas(64) uint32_t head;           /* atomic: next to take */
  uint32_t tail;                        /* atomic: next to fill; the owner's to store */
  tdl_group_fiber *ring[TDL__RING];     /* atomic loads and stores: a thief may read a slot
                                           the owner refills, and its CAS on head then fails */
  _Alignas(64) tdl_group_fiber *inbox;  /* atomic: pushed by other threads, newest first */
  uint32_t posting;                     /* atomic: senders between their check of closed and
                                           their last touch of the loop */
  int closed;                           /* atomic: the loop stops; no more sends */
  _Alignas(64) int64_t load;            /* atomic: group fibers queued or running here */
  int idle;                             /* atomic: found no work, about to sleep */
  int woken;                            /* atomic: a spawner woke it to steal */
  /* The owner's alone. */
  _Alignas(64) tdl_group_fiber *stay, *stay_last; /* TDL_GROUP_SPAWN_STAY fibers, oldest first */
  uint64_t rand;                        /* picks the first victim */
  unsigned ticks;                       /* starts, for the shared queue's turn */
  tdl_observer before, after;           /* around the loop's poll */
  tdl_wakeup kick;                      /* sent to make it steal or take its inbox */
  bool counted;                         /* in the group's running members */
} tdl__spawner;

typedef struct tdl__member {
  tdl_group *g;
  unsigned index;
  int cpu;            /* to pin to, or -1 */
  pthread_t thread;
  tdl_loop *loop;     /* while it runs (atomic) */
  tdl_port *port;     /* the group's reference */
  tdl_wakeup alive;   /* started, never sent: keeps the loop running */
  tdl_post stop;      /* posted once, by tdl_group_stop */
  tdl_signal sig[2];  /* loop 0, with stop_on_signals */
  int result;         /* how its tdl_loop_run ended */
  tdl__spawner sp;
} tdl__member;

struct tdl_group {
  tdl_group_options opts;
  tdl_loop_options loop_opts;
  unsigned n;
  int stopping;       /* atomic */
  pthread_mutex_t lock;
  pthread_cond_t changed;
  unsigned ready, ended, started; /* under lock */
  int start_error;    /* under lock */
  int go;             /* under lock: 1 every loop exists, run; -1 give up */
  bool joined;
  bool mask_changed;
  sigset_t old_mask;
  /* spawn.c */
  int placement;      /* atomic: tdl_group_placement */
  int stealing;       /* atomic: 1 on */
  uint32_t turn;      /* atomic: round robin */
  int nidle;          /* atomic: members idle */
  int waking;         /* atomic: a member was woken to steal and has not looked yet */
  int running;        /* atomic: members whose loop has not ended */
  int used;           /* atomic: tdl_group_spawn was called (until then the loops skip all of it) */
  pthread_mutex_t shared_lock; /* the shared queue: ring overflows */
  tdl_group_fiber *shared, *shared_last;
  uint32_t shared_n;  /* atomic, changed under shared_lock */
  _Alignas(64) tdl__member m[];
};

/* spawn.c (which group.c calls, never the other way), on the member's
 * thread: set its side up once its loop exists
 * (0, or tdl_wakeup_start's error); the stop (refuse sends, end what is
 * queued); the end of its loop (the last one ends the shared queue). */
int tdl__spawner_setup(tdl__member *m, tdl_loop *loop);
void tdl__spawner_stop(tdl__member *m, tdl_loop *loop);
void tdl__spawner_end(tdl__member *m, tdl_loop *loop);
/* The group's side, before its threads start and after they are joined. */
int tdl__spawn_group_init(tdl_group *g);
void tdl__spawn_group_destroy(tdl_group *g);

#endif /* TDL_GROUP_MEMBERS_H */
