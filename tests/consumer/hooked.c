/* SPDX-License-Identifier: MIT */
/* Links against an installed libtreadle-hook: a fiber's plain usleep()
 * becomes a fiber sleep. */
#define _DEFAULT_SOURCE /* usleep, under -std=c11 */
#include <stdio.h>
#include <unistd.h>
#include <treadle.h>
#include <treadle/hook.h>

static void *nap(void *arg)
{
  (void)arg;
  usleep(1000);
  return NULL;
}

int main(void)
{
  if (tdl_hook_active() != 1) {
    printf("hooked consumer: the hooks are not in place\n");
    return 1;
  }
  tdl_hook_stats before, after;
  tdl_hook_stats_get(&before);
  if (tdl_fiber_main(nap, NULL, NULL) != 0)
    return 1;
  tdl_hook_stats_get(&after);
  int ok = after.slept > before.slept;
  printf("hooked consumer: %s\n", ok ? "ok" : "usleep was not hooked");
  return ok ? 0 : 1;
}
