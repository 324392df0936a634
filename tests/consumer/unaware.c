/* SPDX-License-Identifier: MIT */
/* A program that calls nothing of libtreadle-hook itself, as one whose
 * blocking calls are made inside another library (libpq's poll, say):
 * linked with the hook as the README says, with the linker's --as-needed
 * (Debian's default), the hook must still be loaded, so that a fiber's
 * usleep() becomes a fiber sleep (counted in the process metrics).  The
 * program's own usleep would be a reference to the hook's; it finds the
 * function at run time instead, as a library's call does. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <treadle.h>

static void *nap(void *arg)
{
  int (*sleep_us)(useconds_t);
  void *sym = dlsym(RTLD_DEFAULT, "usleep");
  memcpy(&sleep_us, &sym, sizeof sleep_us); /* (ISO C has no cast from an object pointer) */
  (void)arg;
  if (sleep_us)
    sleep_us(1000);
  return NULL;
}

int main(void)
{
  tdl_process_metrics before = {.size = sizeof before}, after = {.size = sizeof after};
  if (tdl_metrics_process(&before) != 0 || tdl_fiber_main(nap, NULL, NULL) != 0 || tdl_metrics_process(&after) != 0)
    return 1;
  int ok = after.hook_sleeps > before.hook_sleeps;
  printf("unaware consumer: %s\n", ok ? "hooked" : "usleep was not hooked: the hook was dropped at link time");
  return ok ? 0 : 1;
}
