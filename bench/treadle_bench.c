/* treadle-bench: runs one workload of ../shared/BENCHMARKS.md per call. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* A workload whose file is not built yet links as NULL. */
#pragma weak bench_pipes_main
#pragma weak bench_timers_main
#pragma weak bench_ring_main
#pragma weak bench_spawn_main
#pragma weak bench_idle_main
#pragma weak bench_chan_main
#pragma weak bench_xchan_main
#pragma weak bench_xping_main
#pragma weak bench_blocking_main
#pragma weak bench_fs_main
#pragma weak bench_responsive_main

static const struct {
  const char *name;
  int (*main)(int, char **);
} workloads[] = {
    {"pipes", bench_pipes_main}, {"timers", bench_timers_main}, {"ring", bench_ring_main},
    {"spawn", bench_spawn_main}, {"idle", bench_idle_main},     {"chan", bench_chan_main},
    {"xchan", bench_xchan_main}, {"xping", bench_xping_main}, {"blocking", bench_blocking_main},
    {"fs", bench_fs_main},       {"responsive", bench_responsive_main},
};

int main(int argc, char **argv)
{
  if (argc >= 2) {
    for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++) {
      if (strcmp(argv[1], workloads[i].name) == 0) {
        if (!workloads[i].main) {
          fprintf(stderr, "treadle-bench: workload '%s' is not built\n", argv[1]);
          return 2;
        }
        return workloads[i].main(argc - 1, argv + 1);
      }
    }
  }
  fprintf(stderr, "usage: treadle-bench pipes|timers|ring|spawn|idle|chan|xchan|xping|blocking|fs|responsive [options]\n"
                  "       (see ../shared/BENCHMARKS.md)\n");
  return 2;
}
