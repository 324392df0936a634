/* SPDX-License-Identifier: MIT */
/*
 * The benchmark harness shared by treadle-bench and every C peer under
 * bench/peers/.  Each workload is a function `int bench_<name>_main(int argc,
 * char **argv)` (argv[0] is the workload name) that does its setup, brackets
 * the work with bench_begin()/bench_end(), checks its own result and prints one
 * RESULT line with bench_result().  It returns 0, or non-zero (printing no
 * RESULT line) when its correctness check fails.  See docs/BENCHMARKS.md.
 */
#ifndef TDL_BENCH_H
#define TDL_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/resource.h>

typedef struct bench_span {
  struct timespec t0;
  struct rusage self0, child0;
  double wall_s, user_s, sys_s;   /* RUSAGE_SELF deltas */
  double child_user_s, child_sys_s; /* RUSAGE_CHILDREN deltas */
} bench_span;

void bench_begin(bench_span *s);
void bench_end(bench_span *s);

/* VmHWM and VmRSS from /proc/self/status, in KiB (-1 if unreadable). */
long bench_peak_rss_kb(void);
long bench_rss_kb(void);

/* Prints "RESULT impl=<impl> bench=<bench> <keys> wall_s=.. user_s=.. sys_s=..
 * peak_rss_kb=..\n" on stdout.  keys_fmt is printf-style ("pipes=%d ..."). */
void bench_result(const char *impl, const char *bench, const bench_span *s, const char *keys_fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Option parsing: "--name value" or "--name=value" pairs after argv[0].  Each
 * returns the default when the option is absent; a malformed value makes the
 * program exit(2) with a message on stderr (the driver is a program, not the
 * library).  Under bench_run(), reading an option the workload did not declare
 * is a bug in the driver: it exits 1 saying so. */
long bench_opt_long(int argc, char **argv, const char *name, long dflt);
const char *bench_opt_str(int argc, char **argv, const char *name, const char *dflt);

/* One option of a workload, for checking a command line and printing --help. */
typedef struct bench_opt {
  const char *name; /* without the dashes; NULL ends a list */
  const char *arg;  /* "N" (an integer in [min, max]), choices "a|b|c" (one of them), or any
                       other word for a free string ("DIR") */
  long min, max;    /* the range of an "N" */
  const char *help; /* one line, with the default */
} bench_opt;

typedef struct bench_workload {
  const char *name;
  int (*main)(int argc, char **argv); /* NULL: not built into this program */
  const char *summary;
  const bench_opt *opts;
} bench_workload;

/* A driver's main(): `prog WORKLOAD [--option value]...` against a table of
 * n workloads.  `prog --help` prints every workload and its options on stdout
 * and returns 0, as does `prog WORKLOAD --help` for one workload (without
 * running it).  No workload, an unknown or unbuilt workload, an unknown
 * option, an option without its value, a stray argument, a number out of its
 * range and a choice not among the listed ones each print one line naming it
 * on stderr and return 2.  Otherwise returns what the workload's main returns,
 * called with argv[0] the workload's name. */
int bench_run(const char *prog, const bench_workload *w, size_t n, int argc, char **argv);

/* Fatal error in a benchmark program: message on stderr, exit(1). */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* A small, fast PRNG (splitmix64) so every implementation draws the same kind
 * of random numbers without libc's rand(). */
static inline uint64_t bench_rand(uint64_t *state)
{
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Raise RLIMIT_NOFILE's soft limit to the hard limit (pipes need 2 fds each). */
void bench_raise_nofile(void);

/* Workloads of treadle-bench (defined in bench/workloads/bench_<name>.c). */
int bench_pipes_main(int argc, char **argv);
int bench_timers_main(int argc, char **argv);
int bench_ring_main(int argc, char **argv);
int bench_spawn_main(int argc, char **argv);
int bench_fiber_spawn_main(int argc, char **argv);
int bench_idle_main(int argc, char **argv);
int bench_chan_main(int argc, char **argv);
int bench_xchan_main(int argc, char **argv);
int bench_skew_main(int argc, char **argv);
int bench_xping_main(int argc, char **argv);
int bench_blocking_main(int argc, char **argv);
int bench_fs_main(int argc, char **argv);
int bench_fsopen_main(int argc, char **argv);
int bench_responsive_main(int argc, char **argv);
int bench_echo_main(int argc, char **argv);
int bench_echo_stream_main(int argc, char **argv);
int bench_echo_server_main(int argc, char **argv);
int bench_uring_floor_main(int argc, char **argv); /* built where liburing is */
int bench_tls_bulk_main(int argc, char **argv);    /* built where libtreadle-tls is */

#endif
