/* SPDX-License-Identifier: MIT */
/* What the files of bench-st share (st_main.c says what the peer is). */
#ifndef TDL_BENCH_ST_PEER_H
#define TDL_BENCH_ST_PEER_H

/* st_set_eventsys (ALT, else POLL) and st_init: every workload first. */
void st_peer_init(void);
/* The event system in use ("epoll", "poll", ...), for the RESULT line. */
extern const char *st_peer_eventsys;

int st_ring_main(int argc, char **argv);
int st_chan_main(int argc, char **argv);
int st_fiber_spawn_main(int argc, char **argv);
int st_idle_main(int argc, char **argv);
int st_echo_server_main(int argc, char **argv);

#endif
