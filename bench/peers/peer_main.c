/* bench-<peer>: the pipes and timers workloads of shared/BENCHMARKS.md on a
 * peer library, with treadle-bench's command line (see ../bench.h); and
 * blocking and fs where the peer has a pool (libuv). */
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* A workload this peer does not implement links as NULL. */
#pragma weak bench_blocking_main
#pragma weak bench_fs_main

#ifndef PEER_NAME
#error "PEER_NAME must name the peer library"
#endif

int main(int argc, char **argv)
{
  if (argc >= 2 && strcmp(argv[1], "pipes") == 0)
    return bench_pipes_main(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "timers") == 0)
    return bench_timers_main(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "blocking") == 0 && bench_blocking_main)
    return bench_blocking_main(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "fs") == 0 && bench_fs_main)
    return bench_fs_main(argc - 1, argv + 1);
  fprintf(stderr, "usage: bench-" PEER_NAME " pipes --pipes P --messages M --delay-us D --style callback|watch\n"
                  "       bench-" PEER_NAME " timers --timers N --mode add_cancel|fire\n");
  return 2;
}
