/* SPDX-License-Identifier: MIT */
/*
 * pipes --style ops: the callback style on completions (loop.h, tdl_op), for
 * uring loops.  Each pipe has a write and a read operation: when a message
 * starts, the write of its byte and the read that takes it are queued
 * together, so that the loop submits both in one io_uring_enter and the
 * kernel completes both there (the write puts the byte in, the read after it
 * finds it).  With D > 0 the read's callback starts the pipe's timer and the
 * message ends when it fires: the byte is taken at arrival rather than after
 * the delay, which changes nothing the workload counts (one message in
 * flight per pipe, one timer per delayed message).
 */
#include <treadle.h>

#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int bench_pipes_ops(int pipes, long messages, long delay_us);

typedef struct ops_run ops_run;

typedef struct ops_pipe {
  tdl_op rd, wr;
  tdl_timer delay;
  int rfd, wfd;
  char in;
  ops_run *run;
} ops_pipe;

struct ops_run {
  tdl_loop *loop;
  tdl_time_t delay;
  long messages, started, received;
};

static void read_done(tdl_loop *loop, tdl_op *op, ssize_t r);

static void write_done(tdl_loop *loop, tdl_op *op, ssize_t r)
{
  (void)loop;
  (void)op;
  if (r != 1)
    bench_die("write: %s", r < 0 ? strerror((int)-r) : "short write");
}

/* Start the pipe's next message, if the budget has one. */
static void next(ops_run *run, ops_pipe *p)
{
  if (run->started >= run->messages)
    return;
  run->started++;
  int e = tdl_op_write(run->loop, &p->wr, p->wfd, "x", 1, write_done);
  if (e == 0)
    e = tdl_op_read(run->loop, &p->rd, p->rfd, &p->in, 1, read_done);
  if (e < 0)
    bench_die("tdl_op: %s", tdl_strerror(e));
}

static void arrived(ops_run *run, ops_pipe *p)
{
  if (++run->received == run->messages)
    tdl_loop_stop(run->loop);
  else
    next(run, p);
}

static void delay_done(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  ops_pipe *p = t->data;
  arrived(p->run, p);
}

static void read_done(tdl_loop *loop, tdl_op *op, ssize_t r)
{
  ops_pipe *p = op->data;
  if (r != 1)
    bench_die("read: %s", r < 0 ? strerror((int)-r) : "unexpected EOF");
  if (p->run->delay > 0) {
    int e = tdl_timer_start(loop, &p->delay, p->run->delay, 0);
    if (e < 0)
      bench_die("tdl_timer_start: %s", tdl_strerror(e));
    return;
  }
  arrived(p->run, p);
}

int bench_pipes_ops(int pipes, long messages, long delay_us)
{
  ops_run run = {.delay = delay_us * TDL_USEC, .messages = messages};
  tdl_loop_options opts = {.backend = TDL_BACKEND_URING};
  int e = tdl_loop_new(&run.loop, &opts);
  if (e < 0)
    bench_die("pipes --style ops needs io_uring: %s", tdl_strerror(e));
  ops_pipe *p = calloc((size_t)pipes, sizeof *p);
  if (!p)
    bench_die("out of memory");
  for (int i = 0; i < pipes; i++) {
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
      bench_die("pipe2 (pipe %d of %d): %s", i, pipes, strerror(errno));
    p[i] = (ops_pipe){.rfd = fds[0], .wfd = fds[1], .run = &run};
    tdl_op_init(&p[i].rd, &p[i]);
    tdl_op_init(&p[i].wr, &p[i]);
    tdl_timer_init(&p[i].delay, delay_done, &p[i]);
  }

  bench_span s;
  bench_begin(&s);
  tdl_loop_update_time(run.loop);
  for (int i = 0; i < pipes; i++)
    next(&run, &p[i]);
  e = tdl_loop_run(run.loop, TDL_LOOP_DEFAULT);
  bench_end(&s);

  if (e < 0 || run.received != messages) {
    fprintf(stderr, "treadle-ops-uring: FAILED: %ld received of %ld (tdl_loop_run %d)\n", run.received, messages, e);
    return 1;
  }
  bench_result("treadle-ops-uring", "pipes", &s, "pipes=%d messages=%ld delay_us=%ld msgs_per_s=%.0f cpu_us_per_msg=%.4f",
               pipes, messages, delay_us, (double)messages / s.wall_s, (s.user_s + s.sys_s) * 1e6 / (double)messages);
  /* The stop left the other pipes' reads in flight: end them first. */
  for (int i = 0; i < pipes; i++) {
    tdl_op_cancel(run.loop, &p[i].rd);
    tdl_timer_stop(run.loop, &p[i].delay);
  }
  tdl_loop_run(run.loop, TDL_LOOP_DEFAULT);
  for (int i = 0; i < pipes; i++) {
    close(p[i].rfd);
    close(p[i].wfd);
  }
  tdl_loop_free(run.loop);
  free(p);
  return 0;
}
