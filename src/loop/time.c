/* SPDX-License-Identifier: MIT */
/* The loop's cached time, and deadlines made from it. */
#include "loop/loop_internal.h"

/* initial-exec: read by every tdl_now()/tdl_after(); see tdl__tl_sched. */
_Thread_local tdl_loop *tdl__tl_loop __attribute__((tls_model("initial-exec")));

tdl_time_t tdl_now(void)
{
  tdl_loop *loop = tdl__tl_loop;
  return loop ? loop->now : tdl__clock_now();
}

tdl_time_t tdl_after(tdl_time_t delay) { return tdl__time_add(tdl_now(), delay); }

void tdl_loop_update_time(tdl_loop *loop) { loop->now = tdl__clock_now(); }
