/* SPDX-License-Identifier: MIT */
/*
 * pipes --style fiber: one fiber per pipe looping
 *   { write 1 byte; read 1 byte (tries first, parks only on EAGAIN); sleep D }
 * until the shared budget is used, exactly as the Go and tokio peers do it
 * (bench/peers/go/pipes.go explains why the read comes before the sleep).
 * The fibers are spawned inside the timed span, as the peers' goroutines and
 * tasks are.
 */
#include <treadle.h>

#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int bench_pipes_fiber(int pipes, long messages, long delay_us, tdl_backend backend);

typedef struct fiber_run {
  long messages, started, received;
  tdl_time_t delay;
  int failed;
} fiber_run;

typedef struct pipe_fds {
  int rfd, wfd;
  fiber_run *run;
} pipe_fds;

static void *pipe_fiber(void *arg)
{
  pipe_fds *p = arg;
  fiber_run *r = p->run;
  char b = 'x';
  while (r->started < r->messages) {
    r->started++;
    if (tdl_write(p->wfd, &b, 1, TDL_FOREVER) != 1 || tdl_read(p->rfd, &b, 1, TDL_FOREVER) != 1) {
      r->failed = 1;
      break;
    }
    if (r->delay && tdl_sleep(tdl_after(r->delay)) < 0) {
      r->failed = 1;
      break;
    }
    r->received++;
  }
  return NULL;
}

int bench_pipes_fiber(int pipes, long messages, long delay_us, tdl_backend backend)
{
  tdl_loop *loop;
  tdl_loop_options opts = {.backend = backend};
  int rc = tdl_loop_new(&loop, &opts);
  if (rc < 0)
    bench_die("tdl_loop_new: %s", tdl_strerror(rc));
  fiber_run r = {.messages = messages, .delay = delay_us * TDL_USEC};
  pipe_fds *p = calloc((size_t)pipes, sizeof *p);
  if (!p)
    bench_die("out of memory");
  for (int i = 0; i < pipes; i++) {
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
      bench_die("pipe2 (pipe %d of %d): %s", i, pipes, strerror(errno));
    p[i] = (pipe_fds){fds[0], fds[1], &r};
  }

  bench_span s;
  bench_begin(&s);
  tdl_loop_update_time(loop);
  for (int i = 0; i < pipes; i++) {
    tdl_fiber_t h;
    if ((rc = tdl_fiber_spawn(&h, loop, pipe_fiber, &p[i], NULL)) < 0)
      bench_die("tdl_fiber_spawn: %s", tdl_strerror(rc));
    tdl_fiber_detach(loop, h);
  }
  rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  bench_end(&s);

  if (rc < 0 || r.failed || r.received != messages) {
    fprintf(stderr, "treadle-fiber: FAILED: %ld received of %ld (tdl_loop_run %d)\n", r.received, messages, rc);
    return 1;
  }
  bench_result(backend == TDL_BACKEND_URING ? "treadle-fiber-uring" : "treadle-fiber", "pipes", &s, "pipes=%d messages=%ld delay_us=%ld msgs_per_s=%.0f cpu_us_per_msg=%.4f",
               pipes, messages, delay_us, (double)messages / s.wall_s,
               (s.user_s + s.sys_s) * 1e6 / (double)messages);
  for (int i = 0; i < pipes; i++) {
    tdl_close(p[i].rfd);
    tdl_close(p[i].wfd);
  }
  tdl_loop_free(loop);
  free(p);
  return 0;
}
