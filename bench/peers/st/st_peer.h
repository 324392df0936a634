/* SPDX-License-Identifier: MIT */
/* What the files of bench-st share (st_main.c says what the peer is). */
#ifndef TDL_BENCH_ST_PEER_H
#define TDL_BENCH_ST_PEER_H

#include <st.h>

/* st_set_eventsys (ALT, else POLL) and st_init: every workload first. */
void st_peer_init(void);
/* The event system in use ("epoll", "poll", ...), for the RESULT line. */
extern const char *st_peer_eventsys;

int st_ring_main(int argc, char **argv);
int st_chan_main(int argc, char **argv);
int st_fiber_spawn_main(int argc, char **argv);
int st_idle_main(int argc, char **argv);
int st_echo_server_main(int argc, char **argv);
int st_http_server_main(int argc, char **argv);

/* A listening socket on LISTEN_AT (an IPv4 HOST:PORT; port 0: a free one,
 * stored in *port), backlog SOMAXCONN: the servers' (st_echo.c).  WHAT names
 * the workload in the message of a failure, which exits. */
st_netfd_t st_peer_listen(const char *what, const char *listen_at, int *port);

#endif
