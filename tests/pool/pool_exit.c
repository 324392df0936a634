/* SPDX-License-Identifier: MIT */
/*
 * A program that uses the pool (its own calls, file calls and a name
 * lookup, several at once so that several threads start), shuts the pool
 * down and exits.  tests/CMakeLists.txt runs it under valgrind, which must
 * find nothing lost, "possibly" included: the pool's threads are joined.
 * With the argument "no-shutdown" it exits without tdl_pool_shutdown, and
 * valgrind must then fail (the idle threads' memory is possibly lost),
 * which shows that the first run can fail.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <treadle.h>

enum { CALLERS = 8 };
/* For what must happen: a bound, not a delay (as tests/helpers.h's T_HANG). */
#define HANG (60 * TDL_SEC)

static void *twice(void *arg) { return (void *)((intptr_t)arg * 2); }

static void *caller(void *arg)
{
  int *ok = arg;
  for (intptr_t i = 0; i < 20; i++) {
    void *r = NULL;
    if (tdl_pool_call(TDL_LANE_USER, twice, (void *)i, NULL, &r, tdl_after(HANG)) != 0 ||
        (intptr_t)r != 2 * i)
      return NULL;
  }
  struct stat st;
  if (tdl_fs_stat("/", &st, tdl_after(HANG)) != 0)
    return NULL;
  tdl_addr a[4];
  if (tdl_dns_resolve("localhost", "80", AF_INET, a, 4, tdl_after(HANG)) < 1)
    return NULL;
  (*ok)++;
  return NULL;
}

static void *program(void *arg)
{
  (void)arg;
  int ok = 0;
  tdl_fiber_t f[CALLERS];
  for (int i = 0; i < CALLERS; i++)
    if (tdl_fiber_spawn(&f[i], tdl_fiber_loop(), caller, &ok, NULL) < 0)
      return (void *)1;
  for (int i = 0; i < CALLERS; i++)
    tdl_fiber_join(f[i], NULL, TDL_FOREVER);
  return ok == CALLERS ? NULL : (void *)1;
}

int main(int argc, char **argv)
{
  void *failed = (void *)1;
  if (tdl_fiber_main(program, NULL, &failed) != 0 || failed) {
    fprintf(stderr, "pool_exit: the pool's calls failed\n");
    return 2;
  }
  if (argc > 1 && strcmp(argv[1], "no-shutdown") == 0)
    return 0;
  int e = tdl_pool_shutdown(tdl_after(HANG));
  if (e != 0) {
    fprintf(stderr, "pool_exit: tdl_pool_shutdown: %s\n", tdl_strerror(e));
    return 3;
  }
  return 0;
}
