/* SPDX-License-Identifier: MIT */
/*
 * The spawn workload of docs/BENCHMARKS.md: start /bin/true K times, one
 * after another, waiting for each; optionally from a parent that has first
 * touched S MiB of heap (fork's cost grows with it, a vfork-style spawn's does
 * not).  Every method runs the same program with the same arguments and
 * environment and checks that each run exited 0.
 *
 *   treadle-bench spawn --count K [--method treadle|popen|fork|vfork|posix_spawn]
 *                       [--parent-mib S]
 */
#include <treadle.h>

#include "bench.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define PROGRAM "/bin/true"

static char *const true_argv[] = {(char *)PROGRAM, NULL};

/* Each returns the child's wait status, or -1 when it could not start one. */

static int run_treadle(void)
{
  static const char *const argv[] = {PROGRAM, NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  tdl_process p;
  int st, r = tdl_process_spawn(&p, &o);
  if (r < 0) {
    fprintf(stderr, "spawn: tdl_process_spawn: %s\n", tdl_strerror(r));
    return -1;
  }
  r = tdl_process_wait(&p, &st, TDL_FOREVER);
  tdl_process_destroy(&p);
  return r < 0 ? -1 : st;
}

static int run_popen(void)
{
  FILE *f = popen(PROGRAM, "r");
  if (!f) {
    fprintf(stderr, "spawn: popen: %s\n", strerror(errno));
    return -1;
  }
  return pclose(f);
}

static int wait_for(pid_t pid)
{
  int st;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) {
      fprintf(stderr, "spawn: waitpid: %s\n", strerror(errno));
      return -1;
    }
  }
  return st;
}

static int run_fork(void)
{
  pid_t pid = fork();
  if (pid == 0) {
    execve(PROGRAM, true_argv, environ);
    _exit(127);
  }
  if (pid < 0) {
    fprintf(stderr, "spawn: fork: %s\n", strerror(errno));
    return -1;
  }
  return wait_for(pid);
}

static int run_vfork(void)
{
  pid_t pid = vfork();
  if (pid == 0) {
    execve(PROGRAM, true_argv, environ);
    _exit(127);
  }
  if (pid < 0) {
    fprintf(stderr, "spawn: vfork: %s\n", strerror(errno));
    return -1;
  }
  return wait_for(pid);
}

static int run_posix_spawn(void)
{
  pid_t pid;
  int r = posix_spawn(&pid, PROGRAM, NULL, NULL, true_argv, environ);
  if (r != 0) {
    fprintf(stderr, "spawn: posix_spawn: %s\n", strerror(r));
    return -1;
  }
  return wait_for(pid);
}

static const struct {
  const char *method, *impl;
  int (*run)(void);
} methods[] = {
    {"treadle", "treadle-spawn", run_treadle}, {"popen", "popen", run_popen},
    {"fork", "fork", run_fork},                {"vfork", "vfork", run_vfork},
    {"posix_spawn", "posix_spawn", run_posix_spawn},
};

int bench_spawn_main(int argc, char **argv)
{
  long count = bench_opt_long(argc, argv, "count", 2000);
  long mib = bench_opt_long(argc, argv, "parent-mib", 0);
  const char *method = bench_opt_str(argc, argv, "method", "treadle");
  if (count <= 0 || mib < 0)
    bench_die("spawn: --count must be > 0 and --parent-mib >= 0");
  int m = -1;
  for (int i = 0; i < (int)(sizeof methods / sizeof methods[0]); i++)
    if (strcmp(method, methods[i].method) == 0)
      m = i;
  if (m < 0)
    bench_die("spawn: unknown --method '%s' (treadle|popen|fork|vfork|posix_spawn)", method);

  /* A big parent: every page touched, so that it is resident and a fork has
   * page tables to copy. */
  volatile char *heap = NULL;
  if (mib > 0) {
    size_t size = (size_t)mib << 20;
    heap = malloc(size);
    if (!heap)
      bench_die("spawn: cannot allocate %ld MiB", mib);
    for (size_t off = 0; off < size; off += 4096)
      heap[off] = (char)off;
  }

  long failed = 0;
  bench_span s;
  bench_begin(&s);
  for (long i = 0; i < count; i++) {
    int st = methods[m].run();
    if (st != 0)
      failed++;
  }
  bench_end(&s);
  if (failed) {
    fprintf(stderr, "spawn: FAILED: %ld of %ld runs of %s did not exit 0\n", failed, count, PROGRAM);
    return 1;
  }
  double cpu = s.user_s + s.sys_s + s.child_user_s + s.child_sys_s;
  bench_result(methods[m].impl, "spawn",
               &s, "count=%ld parent_mib=%ld spawns_per_s=%.1f child_user_s=%.6f child_sys_s=%.6f cpu_us_per_spawn=%.1f",
               count, mib, (double)count / s.wall_s, s.child_user_s, s.child_sys_s, cpu * 1e6 / (double)count);
  free((void *)heap);
  return 0;
}
