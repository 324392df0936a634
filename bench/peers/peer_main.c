/* SPDX-License-Identifier: MIT */
/* bench-<peer>: the pipes and timers workloads of docs/BENCHMARKS.md on a
 * peer library, with treadle-bench's command line (see ../bench.h); and
 * blocking and fs where the peer has a pool (libuv). */
#include <limits.h>
#include <stdint.h>

#include "bench.h"

/* A workload this peer does not implement links as NULL. */
#pragma weak bench_blocking_main
#pragma weak bench_fs_main

#ifndef PEER_NAME
#error "PEER_NAME must name the peer library"
#endif

/* The options peer.h and ../fs_file.h read; --help prints these. */
static const bench_opt pipes_opts[] = {
    {"pipes", "N", 1, 1000000, "pipes P, 2 fds each (default 1000)"},
    {"messages", "N", 1, LONG_MAX, "1-byte messages M in all (default 1000000)"},
    {"delay-us", "N", 0, 60000000, "read each byte D microseconds after it arrives, on a timer (default 0)"},
    {"style", "callback|watch", 0, 0, "watchers as meant, or a write watcher per write (default callback)"},
    {"backend", "epoll|poll", 0, 0, "the library's back end, where it offers one (default: its own choice)"},
    {0},
};
static const bench_opt timers_opts[] = {
    {"timers", "N", 1, UINT32_MAX, "timers N (default 1000000)"},
    {"mode", "add_cancel|fire", 0, 0, "add all then cancel all, or add all and let them fire (default add_cancel)"},
    {0},
};
static const bench_opt blocking_opts[] = {
    {"calls", "N", 1, LONG_MAX, "calls N through the library's pool (default 200000)"},
    {"fibers", "N", 1, LONG_MAX, "requests F in flight (default 64)"},
    {0},
};
static const bench_opt fs_opts[] = {
    {"reads", "N", 1, LONG_MAX, "4 KiB random reads N (default 1000000)"},
    {"fibers", "N", 1, LONG_MAX, "reads C in flight (default 64)"},
    {"file-mib", "N", 1, 1L << 20, "size of the file in MiB (default 256)"},
    {"dir", "DIR", 0, 0, "where the file is made (default: the build directory, else $TMPDIR, else /var/tmp)"},
    {0},
};

static const bench_workload workloads[] = {
    {"pipes", bench_pipes_main, "M 1-byte messages through P pipes, each read D us after it arrives", pipes_opts},
    {"timers", bench_timers_main, "add and cancel, or fire, N timers", timers_opts},
    {"blocking", bench_blocking_main, "trivial calls through the library's thread pool", blocking_opts},
    {"fs", bench_fs_main, "random 4 KiB reads of a page-cached file through the library's pool", fs_opts},
};

int main(int argc, char **argv)
{
  return bench_run("bench-" PEER_NAME, workloads, sizeof workloads / sizeof workloads[0], argc, argv);
}
