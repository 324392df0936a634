/* SPDX-License-Identifier: MIT */
/*
 * hello: two fibers play ping-pong over channels.
 *
 *   hello [ROUNDS]        (default 3)
 *
 * tdl_fiber_main makes a loop and runs the first fiber on it; that fiber
 * starts a second one, and the two hand a counter back and forth through two
 * unbuffered channels: each send waits until the other fiber receives, so
 * the lines come out strictly in turn, with no lock and no thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <treadle.h>

typedef struct table {
  tdl_chan *to_pong, *to_ping; /* capacity 0: a send meets a receive */
  int rounds;
} table;

static void *pong(void *arg)
{
  table *t = arg;
  int ball;
  /* Receive until ping closes its channel (-EPIPE), answering each ball. */
  while (tdl_chan_recv(t->to_pong, &ball, TDL_FOREVER) == 0) {
    printf("pong %d\n", ball);
    if (tdl_chan_send(t->to_ping, &ball, TDL_FOREVER) < 0)
      return "pong: send failed";
  }
  return NULL;
}

static void *ping(void *arg)
{
  table *t = arg;
  tdl_fiber_t other;
  if (tdl_fiber_spawn(&other, tdl_fiber_loop(), pong, t, &(tdl_fiber_options){.name = "pong"}) < 0)
    return "ping: cannot start pong";
  int ball = 1;
  const char *failed = NULL;
  for (int i = 0; i < t->rounds && !failed; i++) {
    printf("ping %d\n", ball);
    /* Every wait has a deadline: a partner that stopped answering cannot hang us. */
    if (tdl_chan_send(t->to_pong, &ball, tdl_after(TDL_SEC)) < 0 ||
        tdl_chan_recv(t->to_ping, &ball, tdl_after(TDL_SEC)) < 0)
      failed = "ping: pong did not answer";
    else
      ball++;
  }
  tdl_chan_close(t->to_pong); /* pong's receive now fails with -EPIPE: it returns */
  void *pong_failed = NULL;
  tdl_fiber_join(other, &pong_failed, TDL_FOREVER);
  return failed ? (void *)failed : pong_failed;
}

int main(int argc, char **argv)
{
  table t = {.rounds = argc > 1 ? atoi(argv[1]) : 3};
  if (t.rounds < 1) {
    fprintf(stderr, "usage: hello [ROUNDS]   (ROUNDS: 1 or more)\n");
    return 2;
  }
  int e;
  if ((e = tdl_chan_new(&t.to_pong, sizeof(int), 0)) < 0 || (e = tdl_chan_new(&t.to_ping, sizeof(int), 0)) < 0) {
    fprintf(stderr, "hello: %s\n", tdl_strerror(e));
    return 1;
  }
  void *failed = NULL;
  e = tdl_fiber_main(ping, &t, &failed);
  tdl_chan_free(t.to_pong);
  tdl_chan_free(t.to_ping);
  if (e < 0 || failed) {
    fprintf(stderr, "hello: %s\n", e < 0 ? tdl_strerror(e) : (const char *)failed);
    return 1;
  }
  return 0;
}
