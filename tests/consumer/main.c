/* SPDX-License-Identifier: MIT */
/* Links against an installed treadle and runs a loop with one timer. */
#include <stdio.h>
#include <treadle.h>

static void fired(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  *(int *)t->data = 1;
}

int main(void)
{
  tdl_loop *loop;
  int done = 0;
  if (tdl_loop_new(&loop, NULL) < 0)
    return 1;
  tdl_timer t;
  tdl_timer_init(&t, fired, &done);
  tdl_timer_start(loop, &t, TDL_MSEC, 0);
  tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  tdl_loop_free(loop);
  printf("consumer: %s\n", done ? "ok" : "timer did not fire");
  return done ? 0 : 1;
}
