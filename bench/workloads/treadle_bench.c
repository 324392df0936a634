/* SPDX-License-Identifier: MIT */
/* treadle-bench: runs one workload of docs/BENCHMARKS.md per call.  The
 * tables below are what the command line accepts and what --help prints: a
 * workload reading an option missing from its table stops with an internal
 * error (bench/common.c), so the two cannot drift apart silently. */
#include <limits.h>
#include <stdint.h>

#include "bench.h"

/* A workload whose file is not built yet links as NULL. */
#pragma weak bench_pipes_main
#pragma weak bench_timers_main
#pragma weak bench_ring_main
#pragma weak bench_spawn_main
#pragma weak bench_fiber_spawn_main
#pragma weak bench_idle_main
#pragma weak bench_chan_main
#pragma weak bench_xchan_main
#pragma weak bench_xping_main
#pragma weak bench_blocking_main
#pragma weak bench_fs_main
#pragma weak bench_fsopen_main
#pragma weak bench_responsive_main
#pragma weak bench_echo_main
#pragma weak bench_echo_stream_main
#pragma weak bench_echo_server_main
#pragma weak bench_uring_floor_main
#pragma weak bench_skew_main
#pragma weak bench_tls_bulk_main

#define COUNT(name, dflt, help) {name, "N", 1, LONG_MAX, help " (default " dflt ")"}

static const bench_opt pipes_opts[] = {
    {"pipes", "N", 1, 1000000, "pipes P, 2 fds each (default 1000)"},
    COUNT("messages", "1000000", "1-byte messages M in all"),
    {"delay-us", "N", 0, 60000000, "read each byte D microseconds after it arrives, on a timer (default 0)"},
    {"style", "fiber|callback|watch|ops", 0, 0,
     "a fiber per pipe, watchers, or (uring) completions of tdl_op reads and writes (default fiber)"},
    {"backend", "epoll|poll|uring", 0, 0, "the loop's back end (default: $TDL_BACKEND, else epoll)"},
    {"loops", "N", 0, 1024, "split the pipes over N loops on N threads, callback style (default 0: one loop)"},
    {0},
};
static const bench_opt timers_opts[] = {
    {"timers", "N", 1, UINT32_MAX, "timers N (default 1000000)"},
    {"mode", "add_cancel|fire", 0, 0, "add all then cancel all, or add all and let them fire (default add_cancel)"},
    {0},
};
static const bench_opt ring_opts[] = {
    {"threads", "N", 2, 1000000, "fibers in the ring (default 503)"},
    COUNT("hops", "10000000", "token passes T"),
    {"via", "wake|chan", 0, 0, "park/unpark, or an unbuffered channel per neighbour (default wake)"},
    {0},
};
static const bench_opt spawn_opts[] = {
    COUNT("count", "2000", "runs of /bin/true K, one after another"),
    {"method", "treadle|popen|fork|vfork|posix_spawn", 0, 0, "how to start it (default treadle)"},
    {"parent-mib", "N", 0, 1L << 20, "touch this many MiB of heap first (default 0)"},
    {0},
};
static const bench_opt fiber_spawn_opts[] = {
    COUNT("fibers", "1000000", "fibers N to start and join in all"),
    {"batch", "N", 1, 1000000, "fibers B started before the first of them is joined (default 1000)"},
    {"stack", "N", 0, LONG_MAX, "stack size in bytes (default 0: treadle's default)"},
    {0},
};
static const bench_opt idle_opts[] = {
    COUNT("fibers", "100000", "fibers F, each blocked on a channel"),
    {"stack", "N", 0, LONG_MAX, "stack size in bytes (default 0: treadle's default)"},
    {"park", "chan|read|park", 0, 0, "where each waits: a channel receive, tdl_read on a pipe of its own, "
                                     "tdl_fiber_park (default chan)"},
    {"compact-ms", "T", 0, 1000000, "compact fibers idle for T ms, and measure once all are (default 0: off)"},
    {0},
};
static const bench_opt chan_opts[] = {
    COUNT("hops", "10000000", "ping-pong hops T over one unbuffered channel"),
    {0},
};
static const bench_opt xchan_opts[] = {
    COUNT("hops", "10000000", "messages T from a fiber on one loop to a fiber on another"),
    {"spin", "N", 0, LONG_MAX, "nanoseconds each loop spins before it sleeps (default 0)"},
    {0},
};
static const bench_opt xping_opts[] = {
    COUNT("hops", "1000000", "round trips T between fibers on two loops"),
    {"spin", "N", 0, LONG_MAX, "nanoseconds each loop spins before it sleeps (default 0)"},
    {"floor", "0|1|2", 0, 2,
     "no treadle: two pinned threads passing a counter, 1 spinning on two cache lines, 2 each asleep "
     "in read(2) on an eventfd until the other writes it (the floors)"},
    {0},
};
static const bench_opt skew_opts[] = {
    COUNT("tasks", "20000", "fibers N, all spawned by one fiber on loop 0"),
    COUNT("iters", "100000", "xorshift64 rounds I each fiber runs"),
    {"loops", "N", 1, 1024, "loops L in the group (default 2)"},
    {0},
};
static const bench_opt blocking_opts[] = {
    COUNT("calls", "200000", "calls N through the blocking-work pool"),
    COUNT("fibers", "64", "fibers F making them"),
    {0},
};
static const bench_opt fs_opts[] = {
    COUNT("reads", "1000000", "4 KiB random reads N"),
    COUNT("fibers", "64", "fibers C reading"),
    {"file-mib", "N", 1, 1L << 20, "size of the file in MiB (default 256)"},
    {"dir", "DIR", 0, 0, "where the file is made (default: the build directory, else $TMPDIR, else /var/tmp)"},
    {"engine", "auto|pool|direct|uring|floor", 0, 0, "tdl_fs engine, or floor: a plain pread loop (default auto)"},
    {0},
};
static const bench_opt fsopen_opts[] = {
    COUNT("opens", "200000", "open, read, close N times in all"),
    COUNT("fibers", "64", "fibers C doing it"),
    {"files", "N", 1, 99999, "small files F, taken in turn (default 1000)"},
    {"dir", "DIR", 0, 0, "where the files are made (default: the build directory, else $TMPDIR, else /var/tmp)"},
    {"backend", "epoll|uring", 0, 0, "the loop's back end (default epoll)"},
    {"engine", "auto|pool|floor", 0, 0, "tdl_fs engine, or floor: one plain thread looping (default auto)"},
    {0},
};
static const bench_opt responsive_opts[] = {
    COUNT("fibers", "64", "fibers F making blocking calls"),
    {"call-ms", "N", 0, 60000, "length of each blocking call in ms (default 10)"},
    {"seconds", "N", 1, 86400, "how long to run (default 3)"},
    {"mode", "pool|direct", 0, 0, "calls through tdl_blocking, or made in the fibers (default pool)"},
    {0},
};
static const bench_opt echo_opts[] = {
    {"port", "N", 1, 65535, "the echo server's port P (required)"},
    {"host", "ADDR", 0, 0, "the echo server's address, an IP literal (default 127.0.0.1)"},
    {"conns", "N", 1, 1000000, "connections C (default 1000)"},
    COUNT("messages", "1000000", "round trips M in all"),
    {"size", "N", 1, 16L << 20, "bytes B per message (default 64)"},
    {"backend", "epoll|poll|uring", 0, 0, "the client loop's back end (default: $TDL_BACKEND, else epoll)"},
    {"sync", "N", 0, 1, "1: print READY once connected, start the clock at a line on stdin (default 0)"},
    {"readahead", "yes|no", 0, 0, "on uring, receive ahead on each connection (tdl_fd_readahead; default yes)"},
    {0},
};
static const bench_opt echo_stream_opts[] = {
    {"port", "N", 1, 65535, "the echo server's port P (required)"},
    {"host", "ADDR", 0, 0, "the echo server's address, an IP literal (default 127.0.0.1)"},
    {"seconds", "N", 1, 86400, "how long to stream (default 5)"},
    {"size", "N", 1, 16L << 20, "bytes B per message (default 512)"},
    {"backend", "epoll|poll|uring", 0, 0, "the client loop's back end (default: $TDL_BACKEND, else epoll)"},
    {0},
};
static const bench_opt echo_server_opts[] = {
    {"listen", "ADDR", 0, 0, "where to listen (default 127.0.0.1:0: a free port, printed as PORT n)"},
    {"backend", "epoll|poll|uring", 0, 0, "the loop's back end (default: $TDL_BACKEND, else epoll)"},
    {"readahead", "yes|no", 0, 0, "on uring, receive ahead on each connection (tdl_fd_readahead; default yes)"},
    {"writebehind", "yes|no", 0, 0, "on uring, send behind on each connection (tdl_fd_writebehind; default yes)"},
    {0},
};
static const bench_opt uring_floor_opts[] = {
    {"listen", "ADDR", 0, 0, "where to listen (default 127.0.0.1:0: a free port, printed as PORT n)"},
    {"mode", "echo|http", 0, 0,
     "echo what arrives, or answer every request head as httpd answers GET / (default echo)"},
    {"recv", "single|multishot|inc", 0, 0,
     "one receive per connection into its 16 KiB buffer, a multishot receive from a provided-buffer ring, or "
     "the same from a ring of buffers consumed incrementally (Linux 6.12; default single)"},
    {"accept", "multishot|single|eager", 0, 0,
     "one multishot accept, one accept request at a time, or accept4 until EAGAIN and then an accept request "
     "(treadle's way; default multishot)"},
    {"send", "plain|ring", 0, 0,
     "answer with send(2), or with a send request on the ring (needs --recv multishot; default plain)"},
    {0},
};
static const bench_opt tls_bulk_opts[] = {
    {"bytes", "N", 1, LONG_MAX, "bytes B over one TLS 1.3 connection (default 1073741824: 1 GiB)"},
    {"chunk", "N", 1, 1L << 20, "bytes per write, and the reader's buffer (default 16384: one record)"},
    {"ktls", "yes|no", 0, 0, "let the kernel make the records where it can (default no: user space)"},
    {0},
};

static const bench_workload workloads[] = {
    {"pipes", bench_pipes_main, "M 1-byte messages through P pipes, each read D us after it arrives", pipes_opts},
    {"timers", bench_timers_main, "add and cancel, or fire, N timers", timers_opts},
    {"ring", bench_ring_main, "a token passed around a ring of fibers", ring_opts},
    {"spawn", bench_spawn_main, "start /bin/true K times, waiting for each", spawn_opts},
    {"fiber-spawn", bench_fiber_spawn_main, "start and join N fibers, B at a time", fiber_spawn_opts},
    {"idle", bench_idle_main, "memory per blocked fiber", idle_opts},
    {"chan", bench_chan_main, "two fibers ping-pong over an unbuffered channel", chan_opts},
    {"xchan", bench_xchan_main, "a shared channel of capacity 1024 between two loops", xchan_opts},
    {"xping", bench_xping_main, "round trips over unbuffered shared channels between two loops", xping_opts},
    {"skew", bench_skew_main, "one fiber spawns N CPU-bound fibers into a group of L loops", skew_opts},
    {"blocking", bench_blocking_main, "trivial calls through the blocking-work pool", blocking_opts},
    {"fs", bench_fs_main, "random 4 KiB reads of a page-cached file", fs_opts},
    {"fsopen", bench_fsopen_main, "open, read and close small page-cached files", fsopen_opts},
    {"responsive", bench_responsive_main, "a 1 ms timer's lateness while fibers make blocking calls",
     responsive_opts},
    {"echo", bench_echo_main, "C connections to an echo server, M round trips of B bytes (the client)", echo_opts},
    {"echo-stream", bench_echo_stream_main,
     "one connection to an echo server, B-byte messages streamed both ways at once for S seconds (the client)",
     echo_stream_opts},
    {"echo-server", bench_echo_server_main, "the echo server of echo, until stdin ends (not timed itself)",
     echo_server_opts},
    {"uring-floor", bench_uring_floor_main,
     "no treadle: an echo or HTTP server on liburing directly, one thread, until stdin ends (the floor)",
     uring_floor_opts},
    {"tls-bulk", bench_tls_bulk_main,
     "B bytes over one loopback TLS 1.3 connection between two loops, and its CPU per byte (built with TLS)",
     tls_bulk_opts},
};

int main(int argc, char **argv)
{
  return bench_run("treadle-bench", workloads, sizeof workloads / sizeof workloads[0], argc, argv);
}
