/* SPDX-License-Identifier: MIT */
/*
 * bench-st: the State Threads peer (Debian's libst-dev, the C library of
 * SRS) of treadle-bench's fiber workloads (docs/BENCHMARKS.md), with the
 * same command line and the same RESULT line (../../common/bench.h):
 *
 *   bench-st ring  --threads 503 --hops T [--via wake]
 *   bench-st chan  --hops T
 *   bench-st fiber-spawn --fibers N --batch B [--stack S]
 *   bench-st idle  --fibers F [--park chan|read] [--stack S]
 *   bench-st echo-server [--listen ADDR]   (prints PORT n, serves until stdin ends)
 *   bench-st http-server [--listen ADDR]   (the same for HTTP: st_http.c)
 *
 * Every workload runs in the process's one thread, the primordial ST
 * thread, with the threads it creates.  State Threads has no channel: a
 * wake-up or a hand-over is an st_cond_t and a flag or a slot, which is how
 * ST programs (SRS's among them) do it.  The event system is the best this
 * build of the library has: ST_EVENTSYS_ALT (epoll, in SRS's fork) where it
 * was compiled in, else poll(2) (Debian's 1.9 has no epoll); select(2), the
 * default, cannot watch the thousands of fds of idle and echo.  impl is "st";
 * the event system is the key eventsys=.  A run that fails its own check
 * exits 1 without a RESULT line.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <st.h>

#include "bench.h"
#include "st_peer.h"

static const bench_opt ring_opts[] = {
    {"threads", "N", 2, 1000000, "threads in the ring (default 503)"},
    {"hops", "N", 1, LONG_MAX, "token passes T (default 10000000)"},
    {"via", "wake", 0, 0, "an st_cond_t and a flag per thread, signalled by its predecessor (default wake)"},
    {0},
};
static const bench_opt chan_opts[] = {
    {"hops", "N", 1, LONG_MAX, "ping-pong hops T through a one-value slot and its st_cond_t (default 10000000)"},
    {0},
};
static const bench_opt spawn_opts[] = {
    {"fibers", "N", 1, LONG_MAX, "threads N to create and join in all (default 1000000)"},
    {"batch", "N", 1, 1000000, "threads B created before the first of them is joined (default 1000)"},
    {"stack", "N", 0, 1L << 30, "stack size in bytes (default 0: ST's default, 64 KiB)"},
    {0},
};
static const bench_opt idle_opts[] = {
    {"fibers", "N", 1, LONG_MAX, "threads F, each blocked for good (default 100000)"},
    {"park", "chan|read", 0, 0,
     "where each waits: st_cond_wait on one shared condition variable, or st_read on a pipe of its own "
     "(default chan)"},
    {"stack", "N", 0, 1L << 30, "stack size in bytes (default 0: ST's default, 64 KiB)"},
    {0},
};
static const bench_opt echo_server_opts[] = {
    {"listen", "ADDR", 0, 0, "where to listen, IPv4 HOST:PORT (default 127.0.0.1:0: a free port, printed as PORT n)"},
    {0},
};

static const bench_opt http_server_opts[] = {
    {"listen", "ADDR", 0, 0, "where to listen, IPv4 HOST:PORT (default 127.0.0.1:0: a free port, printed as PORT n)"},
    {0},
};

static const bench_workload workloads[] = {
    {"ring", st_ring_main, "a token passed around a ring of threads", ring_opts},
    {"chan", st_chan_main, "two threads ping-pong a value through a slot and a condition variable", chan_opts},
    {"fiber-spawn", st_fiber_spawn_main, "create and join N threads, B at a time", spawn_opts},
    {"idle", st_idle_main, "memory per blocked thread", idle_opts},
    {"echo-server", st_echo_server_main, "the echo server of treadle-bench echo, until stdin ends (not timed itself)",
     echo_server_opts},
    {"http-server", st_http_server_main,
     "a keep-alive HTTP/1.1 server answering GET / with \"Hello, World!\", until stdin ends (not timed itself)",
     http_server_opts},
};

const char *st_peer_eventsys = "?";

void st_peer_init(void)
{
  /* Before st_init: the fd limit ST takes for itself is read there. */
  bench_raise_nofile();
  /* ALT is accepted, and leaves the choice unmade, where it was not built in. */
  if ((st_set_eventsys(ST_EVENTSYS_ALT) < 0 || st_get_eventsys() < 0) && st_set_eventsys(ST_EVENTSYS_POLL) < 0)
    bench_die("st_set_eventsys: neither ALT nor POLL");
  if (st_init() < 0)
    bench_die("st_init failed");
  st_peer_eventsys = st_get_eventsys_name();
}

int main(int argc, char **argv)
{
  return bench_run("bench-st", workloads, sizeof workloads / sizeof workloads[0], argc, argv);
}
