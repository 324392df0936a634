/* SPDX-License-Identifier: MIT */
/*
 * Several loops in one process: a loop per thread, work passed between them.
 * Include <treadle.h>.
 *
 * treadle keeps its rule: a loop, its watchers and its fibers belong to one
 * thread, and a fiber never changes thread behind the program's back (C
 * compilers keep the address of errno and of other thread-locals across
 * calls, so a stackful fiber moved to another thread would use the old
 * thread's).  Every core is used by running a loop on each, and the loops
 * talk by posting to each other's ports (loop.h): messages, not locks.
 *
 * A group starts N loops on N threads and runs a main fiber on each; it
 * stops them in order (each loop's fibers are cancelled, so that they unwind
 * and the loop ends) and joins the threads.  One-loop programs need none of
 * this.
 *
 * Fan-out, the first multi-loop program most people write (a chat room, a
 * pub-sub server): connections spread over the loops by an acceptor (below),
 * and every message to every connection, whichever loop serves it, through
 * one broadcast (sync.h: a send never waits; a subscriber that falls behind
 * is told).  Each connection has a fiber per direction, on its loop:
 *
 *   static tdl_bcast *room;                      // tdl_bcast_new(&room, sizeof(line), 256)
 *   static void handle(int fd, void *arg) {      // the acceptor's fiber: the reader
 *     client *c = ...;                           // fd, c->sub from tdl_bcast_subscribe(&c->sub, room)
 *     tdl_fiber_spawn(&c->writer, tdl_fiber_loop(), to_client, c, &detached);
 *     while (a line arrives on fd before the deadline)
 *       tdl_bcast_send(room, &line);             // never waits for the slow ones
 *     tdl_fiber_cancel(tdl_fiber_loop(), c->writer);  // the last of the two frees c
 *   }
 *   // to_client: tdl_bcast_recv(c->sub, &line, TDL_FOREVER), then write it
 *   // within a deadline; a client that stops reading misses it and is
 *   // dropped (sync.h shows that loop).
 *   tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = serve, .stop_on_signals = true});
 *   tdl_group_wait(g, TDL_FOREVER);              // SIGTERM: every fiber unwinds
 *
 * examples/chat/chat.c is the whole program.  Across loops, lock with a
 * shared semaphore of one permit, not a tdl_mutex (sync.h says why), and
 * let the loops that share a channel hold references to it
 * (tdl_chan_retain, tdl_chan_release).
 */
#ifndef TREADLE_GROUP_H
#define TREADLE_GROUP_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdl_group tdl_group;

/* The most loops a group may have. */
#define TDL_GROUP_MAX 1024

typedef struct tdl_group_options {
  /* Loops (threads): 0 means one per CPU in the process's affinity mask
   * (sched_getaffinity).  More loops than CPUs is allowed (they share). */
  unsigned loops;
  /* Pin loop i's thread to the i-th CPU of the affinity mask (needs loops <=
   * CPUs in the mask). */
  bool pin;
  /* Started as a fiber on every loop: main(arg).  tdl_group_index() tells
   * it which loop it is on.  NULL: no fiber (post work to the loops). */
  tdl_fiber_fn main;
  void *arg;
  /* Every loop is made with these (NULL: defaults). */
  const tdl_loop_options *loop;
  /* SIGINT and SIGTERM stop the group as tdl_group_stop() does.  They are
   * blocked in the calling thread (and so in the group's threads) until
   * tdl_group_free, and read by loop 0. */
  bool stop_on_signals;
  /* Called on each loop's thread when the group stops, before its fibers
   * are cancelled: stop what keeps the loop alive besides fibers (your
   * watchers, timers).  NULL: nothing. */
  void (*on_stop)(tdl_loop *loop, void *arg);
} tdl_group_options;

/*
 * Start a group: make its loops, each on a thread of its own, and start
 * main on each.  Returns once every loop exists (or none does).  *out is
 * written when the loops already run: inside them use tdl_group_self(),
 * not the variable *out points to (a data race).
 * Errors: -EINVAL (more than TDL_GROUP_MAX loops; pin with more loops than
 * CPUs; opts NULL); -EAGAIN (no thread could be made); the errors of
 * tdl_loop_new and tdl_loop_port from the threads; -ENOMEM.  (A main that
 * cannot be spawned is not among these: tdl_group_wait reports it.)
 * On error nothing is left running.
 */
TDL_API int tdl_group_new(tdl_group **out, const tdl_group_options *opts);

/* The number of loops.  THREAD-SAFE. */
TDL_API unsigned tdl_group_size(const tdl_group *g);

/* Loop i's port, for tdl_port_post / tdl_port_call / tdl_port_spawn; the
 * group holds it until tdl_group_free (take tdl_port_ref to keep it longer).
 * NULL when i is out of range.  THREAD-SAFE. */
TDL_API tdl_port *tdl_group_port(tdl_group *g, unsigned i);

/* Loop i itself, to tell loops apart and for its THREAD-SAFE calls; any
 * other call on it must be made on its own thread.  NULL when i is out of
 * range or the loop has ended.  THREAD-SAFE. */
TDL_API tdl_loop *tdl_group_loop(tdl_group *g, unsigned i);

/* Inside a group's loop (a fiber or a callback on its thread): the group
 * and the loop's index; NULL and -1 elsewhere. */
TDL_API tdl_group *tdl_group_self(void);
TDL_API int tdl_group_index(void);

/* Stop every loop in order: on_stop, then cancel its fibers; a loop ends
 * when nothing is left on it.  Returns at once (tdl_group_wait waits).
 * Stopping twice is harmless.  THREAD-SAFE; async-signal-safe. */
TDL_API void tdl_group_stop(tdl_group *g);

/* Wait until every loop has ended and its thread is joined, or the deadline
 * passes (-ETIMEDOUT: still running).  Returns 0, or the first error a loop
 * ended with (its tdl_loop_run's, e.g. -EDEADLK; or tdl_fiber_spawn's when
 * its main could not start, e.g. -ENOMEM, which stopped the group).  It blocks the calling
 * thread: call it from a thread that runs no loop (main); from a fiber or a
 * loop callback it fails with -EPERM. */
TDL_API int tdl_group_wait(tdl_group *g, tdl_time_t deadline);

/* Free a group that has ended (after tdl_group_wait returned 0 or an error
 * other than -ETIMEDOUT); -EBUSY while a loop still runs.  Restores the
 * signal mask that stop_on_signals changed.  Ports taken with tdl_port_ref
 * stay valid (posts to them get -ESHUTDOWN). */
TDL_API int tdl_group_free(tdl_group *g);

/*
 * From a fiber, work on another loop:
 *
 * tdl_port_call runs fn(loop, arg) as a callback on the port's loop and
 * parks the calling fiber until its result comes back (into *result, may be
 * NULL).  At the deadline or on a cancel the call returns -ETIMEDOUT or
 * -ECANCELED at once; fn still runs if it has not yet started (a call whose
 * caller has gone is skipped if it has not started yet) and its result is
 * dropped.  Errors: also -ESHUTDOWN (the loop is gone, or went before fn
 * ran), -EPERM (outside a fiber), -ENOMEM.  Cost: one allocation, two posts
 * (wakes only for sleeping loops).
 *
 * tdl_port_spawn starts fn(arg) as a detached fiber on the port's loop and
 * returns once it is started there: 0, or tdl_fiber_spawn's error there,
 * or the errors of tdl_port_call.
 */
TDL_API int tdl_port_call(tdl_port *port, void *(*fn)(tdl_loop *loop, void *arg), void *arg, void **result,
                          tdl_time_t deadline);
TDL_API int tdl_port_spawn(tdl_port *port, tdl_fiber_fn fn, void *arg, const tdl_fiber_options *opts,
                           tdl_time_t deadline);

/* ------------------------------------------------------------------------ */
/* Fibers placed by the group                                                */
/* ------------------------------------------------------------------------ */

/*
 * tdl_group_spawn starts fn(arg) as a fiber of the group, not of a loop: the
 * group's placement picks the loop it is queued on, and until it starts it
 * may still move.  A loop that runs out of work (its runnable fibers done,
 * about to sleep in its poll) first takes fibers that another loop of the
 * group has queued but not started, half of that loop's queue at a time:
 * one fiber spawning 20,000 CPU-bound fibers keeps every loop busy.
 *
 * What a group fiber may assume about its thread: nothing until it starts;
 * from its first instruction on, it stays on the loop that started it, as
 * every fiber does (treadle.h, THREADS), so its thread-locals, errno and
 * tdl_group_index() do not change under it.  Only a fiber that has not
 * started moves: it has run no code and cached no thread's address.  Its
 * struct and stack come from the loop that starts it, which also frees
 * them.  A fiber spawned with TDL_GROUP_SPAWN_STAY starts on the loop the
 * placement picked, never on another.
 *
 * Placement (tdl_group_set_placement):
 *   TDL_GROUP_LEAST_LOADED  the default: the loop with the fewest group
 *       fibers queued or running, among the caller's loop (from a thread
 *       outside the group: a loop taken in turn) and up to three others in
 *       turn (comparing every loop would read a line of each per spawn); a
 *       tie goes to the caller's loop;
 *   TDL_GROUP_ROUND_ROBIN   the loops in turn;
 *   TDL_GROUP_CALLER        the caller's loop (from a thread outside the
 *       group: the loops in turn); only stealing spreads them.
 * Stealing (tdl_group_set_stealing) is on by default; off, a fiber starts
 * where it was placed.
 *
 * Cost of a spawn: one allocation (the fiber's descriptor: fn, arg,
 * options, its result); on the caller's own loop, a store into that loop's
 * queue (a ring of 256 that other loops take from with a compare-and-swap;
 * when full, half of it goes to the group's shared queue, under a lock),
 * and a wake-up of a sleeping loop only when one sleeps and none is already
 * being woken; on another loop, a compare-and-swap into its inbox and, if
 * it sleeps, a wake-up.  Starting it costs what tdl_fiber_spawn costs on the
 * loop that starts it.
 *
 * When the group stops (tdl_group_stop), no group fiber starts any more:
 * those queued end without running, and their joins return -ESHUTDOWN (a
 * detached one is freed; what its arg holds is the caller's to give back:
 * join the fibers whose arg must be freed).  Running ones are cancelled
 * with the loop's other fibers.  By the time tdl_group_wait returns, every
 * group fiber has ended; handles outlive the group (join them before or
 * after tdl_group_free).
 */

/* A handle to a group fiber, for joining and cancelling it from any loop.
 * Valid until it is joined (successfully, or with an error other than
 * -ETIMEDOUT, -ECANCELED, -EBUSY, -EDEADLK, -EPERM) or detached. */
typedef struct tdl_group_fiber tdl_group_fiber;

/* tdl_group_spawn flags. */
#define TDL_GROUP_SPAWN_STAY 0x1u /* start on the loop the placement picks; never stolen */

typedef enum tdl_group_placement {
  TDL_GROUP_LEAST_LOADED = 0,
  TDL_GROUP_ROUND_ROBIN = 1,
  TDL_GROUP_CALLER = 2,
} tdl_group_placement;

/*
 * Queue fn(arg) as a fiber of group g (see above).  opts as for
 * tdl_fiber_spawn (name, stack size, detached).  *out (NULL, or
 * opts->detached: no handle, the fiber is detached) receives the handle.
 * From any thread: a fiber or callback of a group loop (the caller's loop
 * is the one of the thread), or any other thread.  THREAD-SAFE.
 * Errors: -EINVAL (g or fn NULL, unknown flags, a stack size out of
 * range); -ESHUTDOWN (the group is stopping or has stopped); -ENOMEM.
 */
TDL_API int tdl_group_spawn(tdl_group_fiber **out, tdl_group *g, tdl_fiber_fn fn, void *arg,
                            const tdl_fiber_options *opts, unsigned flags);

/*
 * From a fiber of any loop (of the group or not): wait until gf has ended,
 * store fn's result (or tdl_fiber_exit's) in *result (may be NULL) and
 * release the handle.  Returns 0 when it ran; -ESHUTDOWN when the group
 * stopped before it started; tdl_fiber_spawn's error (-ENOMEM) when the
 * loop that was to start it could not; in these cases too the handle is
 * released.  As for tdl_fiber_join, a cancelled caller still waits for a gf
 * that is cancelled too.  Errors that leave gf joinable: -EPERM (outside a
 * fiber), -EINVAL (gf NULL), -EBUSY (another fiber joins it), -EDEADLK (gf
 * is the caller), -ETIMEDOUT, -ECANCELED.
 */
TDL_API int tdl_group_fiber_join(tdl_group_fiber *gf, void **result, tdl_time_t deadline);

/* Cancel gf, from any thread: as tdl_fiber_cancel (its blocking calls
 * return -ECANCELED), at once on its own loop, else through that loop's
 * port; one not yet started starts cancelled.  Twice is harmless.
 * THREAD-SAFE.  Errors: -EINVAL (NULL), -ESRCH (it has ended). */
TDL_API int tdl_group_fiber_cancel(tdl_group_fiber *gf);

/* Let gf release itself when it ends; the handle must not be used again.
 * THREAD-SAFE.  Errors: -EINVAL (NULL). */
TDL_API int tdl_group_fiber_detach(tdl_group_fiber *gf);

/* How later spawns into g are placed (default TDL_GROUP_LEAST_LOADED), and
 * whether loops steal queued fibers from each other (default true).
 * THREAD-SAFE: they take effect for the spawns and steals that follow.
 * Errors: -EINVAL (g NULL, an unknown placement). */
TDL_API int tdl_group_set_placement(tdl_group *g, tdl_group_placement placement);
TDL_API int tdl_group_set_stealing(tdl_group *g, bool on);

/* ------------------------------------------------------------------------ */
/* Accepting connections on several loops                                   */
/* ------------------------------------------------------------------------ */

/*
 * An acceptor spreads a listening address's connections over N loops
 * ("slots" 0..N-1, usually a group's loops) and runs a handler for each in
 * a detached fiber of the loop that takes it:
 *
 *   static void handle(int fd, void *arg) { ...; tdl_close(fd); }
 *   static void *loop_main(void *arg) {          // a group's main, on every loop
 *     return (void *)(intptr_t)tdl_acceptor_serve(arg, (unsigned)tdl_group_index());
 *   }
 *   tdl_acceptor_new(&a, &(tdl_acceptor_options){.listen = "*:8080", // a slot per CPU
 *                    .mode = TDL_ACCEPTOR_DISTRIBUTE, .handler = handle});
 *   tdl_group_new(&g, &(tdl_group_options){.loops = tdl_acceptor_size(a),
 *                 .main = loop_main, .arg = a, ...});
 *
 * Two ways to spread them:
 *   TDL_ACCEPTOR_REUSEPORT    a listener per slot, bound with SO_REUSEPORT;
 *       the kernel hashes each connection (its addresses and ports) to one.
 *       Nothing is shared between loops, but the hash knows nothing of
 *       load: with few clients it can leave a loop idle.
 *   TDL_ACCEPTOR_DISTRIBUTE   one listener; slot 0 accepts every connection
 *       and hands it to the serving slot with the fewest open connections
 *       (ties in turn), through that slot's inbox (a shared channel);
 *       slot 0 takes its own share directly.  A connection costs slot 0 one
 *       accept and the other loop a wake-up if it sleeps.
 * Each slot's counts are visible to any thread (tdl_acceptor_stats_get).
 */
typedef enum tdl_acceptor_mode {
  TDL_ACCEPTOR_REUSEPORT = 1,
  TDL_ACCEPTOR_DISTRIBUTE = 2,
} tdl_acceptor_mode;

typedef struct tdl_acceptor tdl_acceptor;

/* Runs in a detached fiber of the loop that serves the connection; owns fd
 * (tdl_close it).  tdl_group_index() tells a group's loops apart, for
 * per-loop state. */
typedef void (*tdl_acceptor_fn)(int fd, void *arg);

typedef struct tdl_acceptor_options {
  const char *listen;    /* an address as tdl_net_listen_str reads it ("*:8080") */
  unsigned loops;        /* slots: up to TDL_GROUP_MAX; 0 means one per CPU
                            in the affinity mask, as for a group
                            (tdl_acceptor_size says how many) */
  tdl_acceptor_mode mode;
  int backlog;           /* per listener; <= 0: SOMAXCONN */
  tdl_acceptor_fn handler;
  void *arg;             /* handler's second argument */
  size_t stack_size;     /* of the handlers' fibers; 0: TDL_STACK_DEFAULT */
  size_t inbox;          /* distribute: connections queued per slot at most
                            (0: 1024); a full inbox's connection is taken
                            by slot 0 instead */
  unsigned max_conns;    /* 0: no limit.  Else a slot is given no more than
                            max_conns / loops + TDL_ACCEPTOR_SLACK connections
                            open at once (handed over, handler not returned):
                            while every slot it may give one to has that
                            many, accepting backs off (1 ms doubling to
                            16 ms) and the next connections wait in the
                            listener's backlog.  Meant with a tdl_conns of
                            max_conns / loops on each loop (net.h), whose
                            handlers evict idle connections to make room:
                            the slack is for the connections between the
                            accept and the handler's tdl_conns_admit, and for
                            the evicted ones not yet closed, so that a burst
                            of accepts cannot run the process out of fds
                            (they stay within max_conns + loops x slack). */
} tdl_acceptor_options;

/* See tdl_acceptor_options.max_conns. */
#define TDL_ACCEPTOR_SLACK 32u

/*
 * Make an acceptor and its listener(s), in any thread.  With reuseport and
 * port 0 the first listener picks the port and the others share it.
 * Errors: -EINVAL (NULL out, opts, listen or handler; loops above
 * TDL_GROUP_MAX; an unknown mode; listen not an address:
 * tdl_addr_parse_error says why); tdl_net_listen's (-EADDRINUSE...);
 * -ENOMEM.  Nothing is left open on failure.
 */
TDL_API int tdl_acceptor_new(tdl_acceptor **out, const tdl_acceptor_options *opts);

/* The number of slots (tdl_acceptor_options.loops, or the CPUs it stood
 * for when 0): the loops a group serving every slot needs.  0 for NULL.
 * THREAD-SAFE. */
TDL_API unsigned tdl_acceptor_size(const tdl_acceptor *a);

/* The address the listeners are bound to (with the port the kernel picked
 * for port 0) into *out.  Returns 0, or -EINVAL for a NULL argument.
 * THREAD-SAFE. */
TDL_API int tdl_acceptor_local_addr(const tdl_acceptor *a, tdl_addr *out);

/*
 * Serve slot `index` from a fiber of the loop that is to run its
 * connections: accept (reuseport; distribute, slot 0) or take handed-over
 * connections (distribute, other slots), and start the handler for each.
 * Returns 0 once stopped (tdl_acceptor_stop; the slot's listener is closed
 * and, for an inbox, what was queued has been started), -ECANCELED when the
 * fiber is cancelled (say, by tdl_group_stop), or -EBADF / -ENOTSOCK when
 * the listener was closed behind its back.  It does not wait for handlers
 * still running.  A slot serves once: a second call while it serves is
 * -EBUSY, after it returned -ESHUTDOWN.  Other errors: -EPERM (outside a
 * fiber), -EINVAL (a NULL acceptor, index >= loops).  In distribute mode,
 * slot 0 must serve for any connection to arrive; slots that do not serve
 * are given none; when slot 0 returns, the other slots return too.
 */
TDL_API int tdl_acceptor_serve(tdl_acceptor *a, unsigned index);

/* Stop accepting, on every slot: accepting fibers wake and their serve
 * returns 0 (connections already accepted are still handled).  Handlers
 * keep running: ending them is the application's business (or
 * tdl_group_stop's).  Twice is harmless.  THREAD-SAFE (not
 * async-signal-safe: from a signal, use a tdl_signal watcher). */
TDL_API void tdl_acceptor_stop(tdl_acceptor *a);

typedef struct tdl_acceptor_stats {
  uint64_t accepted; /* connections given to the slot, ever */
  uint64_t open;     /* of those, not yet ended: queued, or a handler that has not returned */
  bool serving;      /* tdl_acceptor_serve runs for it */
} tdl_acceptor_stats;

/* Slot index's counts, at one moment; tdl_metrics_loop's acceptor_* fields
 * (metrics.h) are their sums over the slots a loop serves.  THREAD-SAFE.
 * Errors: -EINVAL. */
TDL_API int tdl_acceptor_stats_get(const tdl_acceptor *a, unsigned index, tdl_acceptor_stats *out);

/* Free an acceptor whose slots no longer serve and whose handlers have all
 * returned; connections still queued for a slot that does not serve are
 * closed first.  -EBUSY (nothing freed) while a slot serves or a handler
 * runs.  NULL: 0.  Any thread. */
TDL_API int tdl_acceptor_free(tdl_acceptor *a);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_GROUP_H */
