/* SPDX-License-Identifier: MIT */
/*
 * chat: a line chat server on a group of loops.
 *
 *   chat [ADDR:PORT [LOOPS [WRITE_TIMEOUT_MS]]]
 *        (default 127.0.0.1:7001, 2 loops, 5000 ms; port 0 picks a free one)
 *
 * Prints the address it listens on.  Every line a client writes goes to
 * every other client, whichever loop serves it: one tdl_bcast is the room.
 * Each client has two fibers on its loop, one per direction: the reader
 * sends its lines to the room, the writer receives the room's lines and
 * writes them to the client within WRITE_TIMEOUT_MS.  A client that stops
 * reading is dropped when that deadline passes (or when it falls so far
 * behind that the room no longer keeps the lines it missed: its connection
 * is reset), and nobody
 * else waits for it: a send to the room never waits.  Whichever fiber of a
 * client ends first cancels the other; the last one out closes the socket.
 * SIGINT or SIGTERM stops the group: every fiber is cancelled and unwinds,
 * and the program exits 0.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <treadle.h>
#include <unistd.h>

#define ROOM_LINES 256 /* lines the room keeps for a client that is behind */

typedef struct line {
  uint64_t from;   /* the client that wrote it */
  uint32_t len;
  char text[1020]; /* the longest line accepted, "\n" included */
} line;

typedef struct client {
  int fd;
  uint64_t id;
  tdl_bcast_sub *sub;
  tdl_fiber_t reader, writer;
  int alive; /* of its two fibers (both on its loop: a plain int) */
} client;

static tdl_bcast *room;
static tdl_acceptor *acceptor;
static tdl_time_t write_timeout = 5 * TDL_SEC;
static uint64_t next_id; /* atomic: clients arrive on every loop */

/* One fiber of c is done: stop the other, and the last one frees c. */
static void leave(client *c, tdl_fiber_t other)
{
  tdl_fiber_cancel(tdl_fiber_loop(), other); /* -ESRCH once it has gone: fine */
  if (--c->alive > 0)
    return;
  tdl_bcast_unsubscribe(c->sub); /* nobody is inside its receive now */
  tdl_close(c->fd);
  free(c);
}

/* The room's lines to the client, each within the write deadline. */
static void *to_client(void *arg)
{
  client *c = arg;
  line msg;
  int r;
  while ((r = tdl_bcast_recv(c->sub, &msg, TDL_FOREVER)) >= 0) {
    if (r > 0)
      break; /* it lost r lines: too slow for this room */
    if (msg.from != c->id && (r = tdl_net_send_all(c->fd, msg.text, msg.len, NULL, tdl_after(write_timeout))) < 0)
      break; /* stopped reading, or gone */
  }
  if (r > 0 || r == -ETIMEDOUT) {
    /* Dropped: reset the connection, so that the kernel does not go on
     * holding (and trying to deliver) what was queued for it. */
    struct linger now = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
  }
  leave(c, c->reader);
  return NULL;
}

/* The client's lines to the room.  Runs in the acceptor's fiber. */
static void from_client(int fd, void *arg)
{
  (void)arg;
  client *c = calloc(1, sizeof *c);
  if (!c || tdl_bcast_subscribe(&c->sub, room) < 0) {
    free(c);
    tdl_close(fd);
    return;
  }
  c->fd = fd;
  c->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
  c->reader = tdl_fiber_self();
  c->alive = 2;
  line msg = {.from = c->id};
  msg.len = (uint32_t)snprintf(msg.text, sizeof msg.text, "* you are client %llu on loop %d\n",
                               (unsigned long long)c->id, tdl_group_index());
  tdl_reader in;
  tdl_fiber_options detached = {.name = "to client", .detached = true};
  if (tdl_reader_init(&in, fd, NULL, sizeof msg.text, sizeof msg.text) < 0) {
    tdl_bcast_unsubscribe(c->sub);
    tdl_close(fd);
    free(c);
    return;
  }
  if (tdl_net_send_all(fd, msg.text, msg.len, NULL, tdl_after(write_timeout)) < 0 ||
      tdl_fiber_spawn(&c->writer, tdl_fiber_loop(), to_client, c, &detached) < 0) {
    tdl_reader_destroy(&in);
    tdl_bcast_unsubscribe(c->sub);
    tdl_close(fd);
    free(c);
    return;
  }
  ssize_t n;
  /* -EPIPE at EOF, -EMSGSIZE for a line too long, -ECANCELED when the
   * writer gave up on the client or the group stops. */
  while ((n = tdl_reader_until(&in, "\n", 1, TDL_FOREVER)) > 0) {
    memcpy(msg.text, tdl_reader_data(&in), (size_t)n);
    msg.len = (uint32_t)n;
    tdl_reader_consume(&in, (size_t)n);
    if (tdl_bcast_send(room, &msg) < 0)
      break;
  }
  tdl_reader_destroy(&in);
  leave(c, c->writer);
}

static void *serve(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)tdl_acceptor_serve(acceptor, (unsigned)tdl_group_index());
}

int main(int argc, char **argv)
{
  const char *where = argc > 1 ? argv[1] : "127.0.0.1:7001";
  unsigned loops = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
  if (argc > 3)
    write_timeout = atoi(argv[3]) * TDL_MSEC;
  if (argc > 4 || loops < 1 || loops > 64 || write_timeout <= 0) {
    fprintf(stderr, "usage: chat [ADDR:PORT [LOOPS [WRITE_TIMEOUT_MS]]]\n");
    return 2;
  }
  int e = tdl_bcast_new(&room, sizeof(line), ROOM_LINES);
  if (e == 0)
    e = tdl_acceptor_new(&acceptor, &(tdl_acceptor_options){.listen = where, .loops = loops,
                                                             .mode = TDL_ACCEPTOR_DISTRIBUTE,
                                                             .handler = from_client});
  if (e < 0) {
    fprintf(stderr, "chat: %s: %s\n", where, tdl_strerror(e));
    return 1;
  }
  tdl_group *g;
  e = tdl_group_new(&g, &(tdl_group_options){.loops = loops, .main = serve, .stop_on_signals = true});
  if (e < 0) {
    fprintf(stderr, "chat: %s\n", tdl_strerror(e));
    return 1;
  }
  /* Say "listening" once every loop serves, so that the first clients are
   * spread over all of them. */
  for (unsigned serving = 0, tries = 0; serving < loops && tries < 5000; tries++) {
    tdl_acceptor_stats st;
    serving = 0;
    for (unsigned i = 0; i < loops; i++)
      serving += tdl_acceptor_stats_get(acceptor, i, &st) == 0 && st.serving;
    if (serving < loops)
      usleep(1000);
  }
  tdl_addr self;
  char name[TDL_ADDR_STRLEN];
  if (tdl_acceptor_local_addr(acceptor, &self) == 0 && tdl_addr_format(&self, name, sizeof name) >= 0)
    printf("chat: listening on %s, %u loops\n", name, loops);
  fflush(stdout);
  /* Until SIGINT or SIGTERM: the group cancels every fiber, which unwinds
   * (each client's last fiber closes its socket and unsubscribes). */
  e = tdl_group_wait(g, TDL_FOREVER);
  tdl_group_free(g);
  tdl_acceptor_free(acceptor);
  tdl_bcast_close(room);
  tdl_bcast_free(room);
  if (e < 0)
    fprintf(stderr, "chat: %s\n", tdl_strerror(e));
  return e < 0 ? 1 : 0;
}
