/* SPDX-License-Identifier: MIT */
/*
 * What the C peers share beyond bench.h: option parsing, pipe creation, the
 * random draws and the RESULT lines of the pipes and timers workloads.  The
 * draws use the same seeds, in the same order, as ../bench_timers.c, so every
 * implementation gets the very same deadlines and cancel order.
 */
#ifndef TDL_BENCH_PEER_H
#define TDL_BENCH_PEER_H

#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PEER_NS_PER_S 1000000000LL

typedef struct peer_pipes_opts {
  int pipes;
  long messages;
  long delay_us;
  bool watch; /* watch style, else callback */
  const char *backend; /* NULL: the library's default */
} peer_pipes_opts;

/* Returns 0, or the exit status (2) for bad options. */
static inline int peer_pipes_parse(int argc, char **argv, peer_pipes_opts *o)
{
  long pipes = bench_opt_long(argc, argv, "pipes", 1000);
  o->messages = bench_opt_long(argc, argv, "messages", 1000000);
  o->delay_us = bench_opt_long(argc, argv, "delay-us", 0);
  o->backend = bench_opt_str(argc, argv, "backend", NULL);
  const char *style = bench_opt_str(argc, argv, "style", "callback");
  if (pipes < 1 || pipes > 1000000 || o->messages < 1 || o->delay_us < 0) {
    fprintf(stderr, "pipes: need --pipes >= 1, --messages >= 1, --delay-us >= 0\n");
    return 2;
  }
  o->pipes = (int)pipes;
  if (strcmp(style, "callback") == 0) {
    o->watch = false;
  } else if (strcmp(style, "watch") == 0) {
    o->watch = true;
  } else {
    fprintf(stderr, "pipes: style '%s' is not implemented by this peer (callback, watch)\n", style);
    return 2;
  }
  bench_raise_nofile();
  return 0;
}

static inline void peer_pipe(int fds[2])
{
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
    bench_die("pipe2: %s", strerror(errno));
}

/* Checks the counts and prints the RESULT line; returns the exit status. */
static inline int peer_pipes_report(const char *impl, const bench_span *s, const peer_pipes_opts *o, long received,
                                    long started)
{
  if (received != o->messages || started != o->messages) {
    fprintf(stderr, "%s: FAILED: %ld messages received, %ld started, %ld expected\n", impl, received, started,
            o->messages);
    return 1;
  }
  bench_result(impl, "pipes", s, "pipes=%d messages=%ld delay_us=%ld msgs_per_s=%.0f cpu_us_per_msg=%.4f",
               o->pipes, o->messages, o->delay_us, (double)o->messages / s->wall_s,
               (s->user_s + s->sys_s) * 1e6 / (double)o->messages);
  return 0;
}

/* Returns 0, or the exit status (2) for bad options. */
static inline int peer_timers_parse(int argc, char **argv, long *n, bool *fire)
{
  *n = bench_opt_long(argc, argv, "timers", 1000000);
  const char *mode = bench_opt_str(argc, argv, "mode", "add_cancel");
  *fire = strcmp(mode, "fire") == 0;
  if (*n < 1 || *n > UINT32_MAX || (!*fire && strcmp(mode, "add_cancel") != 0)) {
    fprintf(stderr, "timers: need --timers >= 1 and --mode add_cancel|fire\n");
    return 2;
  }
  return 0;
}

/* n delays in ns, uniform over [lo, hi]. */
static inline int64_t *peer_draw_delays(long n, int64_t lo, int64_t hi, uint64_t *seed)
{
  int64_t *d = malloc((size_t)n * sizeof *d);
  if (!d)
    bench_die("out of memory");
  uint64_t span = (uint64_t)(hi - lo) + 1;
  for (long i = 0; i < n; i++)
    d[i] = lo + (int64_t)(bench_rand(seed) % span);
  return d;
}

/* A random permutation of 0..n-1 (Fisher-Yates). */
static inline uint32_t *peer_draw_order(long n, uint64_t *seed)
{
  uint32_t *order = malloc((size_t)n * sizeof *order);
  if (!order)
    bench_die("out of memory");
  for (long i = 0; i < n; i++)
    order[i] = (uint32_t)i;
  for (long i = n - 1; i > 0; i--) {
    long j = (long)(bench_rand(seed) % (uint64_t)(i + 1));
    uint32_t x = order[i];
    order[i] = order[j];
    order[j] = x;
  }
  return order;
}

/* The draws of add_cancel: deadlines over [1 s, 10 s], then the cancel order. */
static inline void peer_draw_add_cancel(long n, int64_t **delay, uint32_t **order)
{
  uint64_t seed = 1;
  *delay = peer_draw_delays(n, 1 * PEER_NS_PER_S, 10 * PEER_NS_PER_S, &seed);
  *order = peer_draw_order(n, &seed);
}

/* The draws of fire: deadlines over [0, 200 ms]. */
static inline int64_t *peer_draw_fire(long n)
{
  uint64_t seed = 2;
  return peer_draw_delays(n, 0, PEER_NS_PER_S / 5, &seed);
}

static inline void peer_add_cancel_report(const char *impl, const bench_span *all, const bench_span *add,
                                          const bench_span *cancel, long n)
{
  /* CPU time, as ../bench_timers.c reports it. */
  bench_result(impl, "timers", all, "timers=%ld mode=add_cancel ns_per_add=%.1f ns_per_cancel=%.1f", n,
               (add->user_s + add->sys_s) * 1e9 / (double)n, (cancel->user_s + cancel->sys_s) * 1e9 / (double)n);
}

static inline int peer_fire_report(const char *impl, const bench_span *s, long n, long fired)
{
  if (fired != n) {
    fprintf(stderr, "%s: FAILED: %ld of %ld timers fired\n", impl, fired, n);
    return 1;
  }
  bench_result(impl, "timers", s, "timers=%ld mode=fire ns_per_timer=%.1f cpu_ns_per_timer=%.1f", n,
               s->wall_s * 1e9 / (double)n, (s->user_s + s->sys_s) * 1e9 / (double)n);
  return 0;
}

#endif
