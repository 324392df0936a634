/* SPDX-License-Identifier: MIT */
/* The control of check_swaps.py: every way of calling tdl_fiber_spawn and
 * tdl_fiber_join (and a few more) in the right order must compile without
 * a warning, with the argument checks of treadle.h (PARAMETERS) in force:
 * NULL and 0 where a pointer may be NULL, a void * where a typed pointer
 * goes, a function's name or its address, a compound literal with commas,
 * the function itself through a pointer or in parentheses. */
#include <stdint.h>
#include <stdlib.h>

#include <treadle.h>

#ifndef TDL__ARG_CHECKS
#error "the argument checks are not in force"
#endif

static void *worker(void *arg) { return arg; }
static void *(*const worker_ptr)(void *) = worker;

typedef int (*spawn_fn)(tdl_fiber_t *, tdl_loop *, tdl_fiber_fn, void *, const tdl_fiber_options *);
typedef int (*join_fn)(tdl_fiber_t, void **, tdl_time_t);

struct conn {
  int fd;
  tdl_loop *loop;
};

int spawn_and_join(tdl_loop *loop, void *data, struct conn *c);
int spawn_and_join(tdl_loop *loop, void *data, struct conn *c)
{
  tdl_fiber_t f = 0, fs[2] = {0, 0};
  void *result = NULL;
  tdl_fiber_options o = {.name = "worker", .stack_size = TDL_STACK_MIN};
  const tdl_fiber_options *co = &o;
  int e = 0;

  /* out: a tdl_fiber_t *, an element of an array, NULL or 0. */
  e |= tdl_fiber_spawn(&f, loop, worker, NULL, NULL);
  e |= tdl_fiber_spawn(&fs[1], loop, worker, c, &o);
  e |= tdl_fiber_spawn(fs, loop, worker, c, co);
  e |= tdl_fiber_spawn(NULL, loop, worker, data, &(tdl_fiber_options){.detached = true});
  e |= tdl_fiber_spawn(0, loop, worker, data, 0);
  /* A compound literal whose member is not a constant (clang once took the
   * literal inside a check for one at file scope). */
  e |= tdl_fiber_spawn(NULL, loop, worker, data, &(tdl_fiber_options){.stack_size = (size_t)c->fd});
  /* loop: a void * (a callback's data) or a call; fn: its address, a
   * pointer to it, or NULL (the call fails with -EINVAL, but compiles). */
  e |= tdl_fiber_spawn(&f, data, &worker, NULL, NULL);
  e |= tdl_fiber_spawn(&f, c->loop, worker_ptr, c, NULL);
  e |= tdl_fiber_spawn(&f, tdl_fiber_loop(), NULL, NULL, NULL);
  /* arg: any data pointer, an integer made one, the options themselves. */
  e |= tdl_fiber_spawn(&f, loop, worker, (void *)(intptr_t)42, NULL);
  e |= tdl_fiber_spawn(&f, loop, worker, "a string", NULL);
  e |= tdl_fiber_spawn(&f, loop, worker, &o, &o);
  /* A compound literal with two members: the preprocessor cuts it in two. */
  e |= tdl_fiber_spawn(NULL, loop, worker, c, &(tdl_fiber_options){.name = "conn", .detached = true});
  e |= tdl_fiber_spawn(&f, loop, worker, &(struct conn){.fd = 3, .loop = loop}, NULL);
  /* As a statement, in a condition, its result ignored. */
  tdl_fiber_spawn(&f, loop, worker, NULL, NULL);
  if (tdl_fiber_spawn(&f, loop, worker, NULL, NULL) < 0)
    return -1;
  (void)tdl_fiber_spawn(&f, loop, worker, NULL, NULL);
  /* The function itself: its address, through a pointer, in parentheses. */
  spawn_fn sp = &tdl_fiber_spawn;
  spawn_fn sp2 = tdl_fiber_spawn;
  e |= sp(&f, loop, worker, NULL, NULL) | sp2(&f, loop, worker, NULL, NULL);
  e |= (tdl_fiber_spawn)(&f, loop, worker, NULL, NULL);

  /* join: the deadline any number (a constant, a sum, a double), the
   * result NULL, 0, a void ** or a void *. */
  e |= tdl_fiber_join(f, &result, TDL_FOREVER);
  e |= tdl_fiber_join(f, NULL, 0);
  e |= tdl_fiber_join(f, 0, tdl_after(TDL_SEC));
  e |= tdl_fiber_join(fs[0], &result, tdl_now() + 5 * TDL_MSEC);
  e |= tdl_fiber_join(fs[1], (void **)data, tdl_now() + 1.5 * TDL_SEC);
  e |= tdl_fiber_join(tdl_fiber_self(), data, (tdl_time_t)0);
  e |= tdl_fiber_join(0, &result, -1);
  join_fn jp = &tdl_fiber_join;
  e |= jp(f, &result, TDL_FOREVER) | (tdl_fiber_join)(f, &result, TDL_FOREVER);

  /* A few more of the checked calls, with the kinds of arguments they take. */
  char buf[64];
  e |= (int)tdl_read(c->fd, buf, sizeof buf, TDL_FOREVER);
  e |= (int)tdl_write(1, "hello\n", 6, tdl_after(TDL_SEC));
  e |= tdl_fiber_cancel(loop, f) | tdl_fiber_detach(data, f);
  tdl_chan *ch = NULL;
  int v = 1;
  e |= tdl_chan_new(&ch, sizeof v, 4);
  e |= tdl_chan_send(ch, &v, TDL_FOREVER) | tdl_chan_recv(ch, &v, 0) | tdl_chan_try_send(ch, &(int){2});
  return e;
}
