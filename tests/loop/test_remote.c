/* SPDX-License-Identifier: MIT */
/* Ports: posts from other threads, and what happens around a loop's end. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"

/* ---- order, loss and the thread a post runs on ---- */

enum { PRODUCERS = 2 };

typedef struct order {
  pthread_t loop_thread;
  uint64_t next[PRODUCERS]; /* the sequence number expected next, per producer */
  uint64_t ran, wrong_thread, out_of_order;
  uint64_t total;
  tdl_loop *loop;
} order;

typedef struct msg {
  tdl_post post;
  int producer;
  uint64_t seq;
  order *o;
} msg;

static void on_msg(tdl_loop *loop, tdl_post *p)
{
  msg *m = p->data;
  order *o = m->o;
  assert_non_null(loop);
  if (!pthread_equal(pthread_self(), o->loop_thread))
    o->wrong_thread++;
  if (m->seq != o->next[m->producer])
    o->out_of_order++;
  o->next[m->producer] = m->seq + 1;
  if (++o->ran == o->total)
    tdl_loop_stop(loop);
}

typedef struct producer {
  tdl_port *port;
  msg *msgs;
  size_t n;
  int id;
  int refused;
} producer;

static void *produce(void *arg)
{
  producer *pr = arg;
  for (size_t i = 0; i < pr->n; i++)
    if (tdl_port_post(pr->port, &pr->msgs[i].post) != 0)
      pr->refused++;
  return NULL;
}

/* The loop stays busy (a deferred callback that queues itself again) while
 * the producers post: nothing lost, each producer's order kept, every post
 * run on the loop's thread. */
static void requeue(tdl_loop *loop, tdl_defer *d)
{
  order *o = d->data;
  if (o->ran < o->total)
    tdl_defer_queue(loop, d);
}

static void million_posts_from_two_threads(void **state)
{
  (void)state;
  size_t per = RUNNING_ON_VALGRIND ? 25000 : 500000;
  order o = {.loop_thread = pthread_self(), .total = per * PRODUCERS};
  o.loop = t_loop_new();
  tdl_port *port;
  assert_int_equal(tdl_loop_port(&port, o.loop), 0);
  producer pr[PRODUCERS];
  pthread_t th[PRODUCERS];
  for (int k = 0; k < PRODUCERS; k++) {
    pr[k] = (producer){.port = tdl_port_ref(port), .n = per, .id = k};
    pr[k].msgs = calloc(per, sizeof(msg));
    assert_non_null(pr[k].msgs);
    for (size_t i = 0; i < per; i++) {
      tdl_post_init(&pr[k].msgs[i].post, on_msg, &pr[k].msgs[i]);
      pr[k].msgs[i].producer = k;
      pr[k].msgs[i].seq = i;
      pr[k].msgs[i].o = &o;
    }
  }
  tdl_defer busy;
  tdl_defer_init(&busy, requeue, &o);
  tdl_defer_queue(o.loop, &busy);
  for (int k = 0; k < PRODUCERS; k++)
    assert_int_equal(pthread_create(&th[k], NULL, produce, &pr[k]), 0);
  assert_true(tdl_loop_run(o.loop, TDL_LOOP_DEFAULT) >= 0); /* until the last post */
  for (int k = 0; k < PRODUCERS; k++) {
    pthread_join(th[k], NULL);
    assert_int_equal(pr[k].refused, 0);
  }
  assert_int_equal(o.ran, o.total);
  assert_int_equal(o.wrong_thread, 0);
  assert_int_equal(o.out_of_order, 0);
  tdl_port_stats st;
  tdl_port_stats_get(port, &st);
  assert_int_equal(st.posts, o.total);
  assert_true(st.wakes <= st.posts);
  tdl_defer_cancel(o.loop, &busy);
  assert_int_equal(tdl_loop_free(o.loop), 0);
  for (int k = 0; k < PRODUCERS; k++) {
    tdl_port_release(pr[k].port);
    free(pr[k].msgs);
  }
  tdl_port_release(port);
}

/* ---- a sleeping loop is woken; a parked fiber is not a deadlock ---- */

typedef struct wake_case {
  tdl_port *port;
  tdl_post post;
  tdl_fiber_t fiber;
  int fiber_result;
  pid_t loop_tid; /* the thread that runs the loop */
} wake_case;

/* Whether thread tid of this process sits in a system call a loop sleeps
 * in (/proc/self/task/TID/syscall begins with its number); -1: the kernel
 * does not say. */
static int asleep_in_poll(pid_t tid)
{
  char path[64], buf[128];
  snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return -1;
  buf[n] = 0;
  if (buf[0] < '0' || buf[0] > '9')
    return 0; /* "running" */
  long nr = strtol(buf, NULL, 10);
  return
#ifdef SYS_epoll_wait
      nr == SYS_epoll_wait ||
#endif
#ifdef SYS_epoll_pwait2
      nr == SYS_epoll_pwait2 ||
#endif
#ifdef SYS_poll
      nr == SYS_poll ||
#endif
#ifdef SYS_io_uring_enter
      nr == SYS_io_uring_enter ||
#endif
      nr == SYS_epoll_pwait || nr == SYS_ppoll;
}

static void unpark_it(tdl_loop *loop, tdl_post *p)
{
  wake_case *w = p->data;
  assert_int_equal(tdl_fiber_unpark(loop, w->fiber), 0);
}

static void *late_poster(void *arg)
{
  wake_case *w = arg;
  /* Let the loop fall asleep first (bounded: T_HANG), however long it
   * takes to get there; where the kernel does not say, a guess. */
  int asleep;
  for (tdl_time_t end = t_clock() + T_HANG; (asleep = asleep_in_poll(w->loop_tid)) == 0 && t_clock() < end;)
    usleep(1000);
  if (asleep < 0)
    usleep(20000);
  assert_int_equal(tdl_port_post(w->port, &w->post), 0);
  return NULL;
}

static void *park_for_a_post(void *arg)
{
  wake_case *w = arg;
  w->fiber_result = tdl_fiber_park(TDL_FOREVER);
  return NULL;
}

static void sleeping_loop_is_woken(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  wake_case w = {.fiber_result = 1, .loop_tid = (pid_t)syscall(SYS_gettid)};
  assert_int_equal(tdl_loop_port(&w.port, loop), 0); /* held by "another thread" */
  tdl_post_init(&w.post, unpark_it, &w);
  assert_int_equal(tdl_fiber_spawn(&w.fiber, loop, park_for_a_post, &w, &(tdl_fiber_options){.detached = true}), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, late_poster, &w), 0);
  /* Only a parked fiber and a port others hold: not -EDEADLK, a sleep. */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  pthread_join(th, NULL);
  assert_int_equal(w.fiber_result, 0);
  tdl_port_stats st;
  tdl_port_stats_get(w.port, &st);
  assert_int_equal(st.wakes, 1); /* the loop slept: the post woke it */
  assert_int_equal(tdl_loop_free(loop), 0);
  tdl_port_release(w.port);
}

/* ---- the end of a loop ---- */

static int handed_back, ran;

static void count_post(tdl_loop *loop, tdl_post *p)
{
  (void)p;
  if (loop)
    ran++;
  else
    handed_back++;
}

static void freed_loop_hands_posts_back(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  tdl_port *port;
  assert_int_equal(tdl_loop_port(&port, loop), 0);
  tdl_post p[3];
  handed_back = ran = 0;
  for (int i = 0; i < 3; i++) {
    tdl_post_init(&p[i], count_post, NULL);
    assert_int_equal(tdl_port_post(port, &p[i]), 0);
  }
  assert_int_equal(tdl_port_post(port, &p[0]), -EBUSY); /* queued already */
  assert_int_equal(tdl_loop_free(loop), 0);
  assert_int_equal(ran, 0);
  assert_int_equal(handed_back, 3); /* each exactly once, loop NULL */
  /* The port outlives the loop: a post is refused, not a use after free. */
  assert_int_equal(tdl_port_post(port, &p[0]), -ESHUTDOWN);
  assert_int_equal(handed_back, 3); /* a refused post is never called */
  tdl_port_release(port);
}

static void repost_from_its_callback(tdl_loop *loop, tdl_post *p)
{
  int *left = p->data;
  tdl_port *port;
  assert_int_equal(tdl_loop_port(&port, loop), 0);
  if (--*left > 0)
    assert_int_equal(tdl_port_post(port, p), 0); /* the record is ours again */
  tdl_port_release(port);
}

static void post_misuse_and_reuse(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  tdl_port *port;
  assert_int_equal(tdl_loop_port(&port, loop), 0);
  tdl_post p;
  tdl_post_init(&p, NULL, NULL);
  assert_int_equal(tdl_port_post(port, &p), -EINVAL); /* no callback */
  assert_int_equal(tdl_port_post(NULL, &p), -EINVAL);
  assert_int_equal(tdl_port_post(port, NULL), -EINVAL);
  int left = 5;
  tdl_post_init(&p, repost_from_its_callback, &left);
  assert_int_equal(tdl_port_post(port, &p), 0);
  while (left > 0)
    assert_true(tdl_loop_run(loop, TDL_LOOP_NOWAIT) >= 0);
  tdl_port_release(NULL);
  tdl_port_release(port);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* A loop that is not running (embedded in another) is told through its fd. */
static void embedded_loop_fd_becomes_readable(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int fd = tdl_loop_fd(loop);
  if (fd < 0) {
    assert_int_equal(tdl_loop_free(loop), 0);
    T_SKIP("the poll back end has no fd to embed");
  }
  tdl_port *port;
  assert_int_equal(tdl_loop_port(&port, loop), 0);
  tdl_post p;
  ran = 0;
  tdl_post_init(&p, count_post, NULL);
  struct pollfd pfd = {fd, POLLIN, 0};
  assert_int_equal(poll(&pfd, 1, 0), 0);
  assert_int_equal(tdl_port_post(port, &p), 0);
  assert_int_equal(poll(&pfd, 1, 1000), 1);
  assert_int_equal(tdl_loop_timeout(loop), 0);
  tdl_loop_run(loop, TDL_LOOP_NOWAIT);
  assert_int_equal(ran, 1);
  tdl_port_release(port);
  assert_int_equal(tdl_loop_free(loop), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(million_posts_from_two_threads),
      cmocka_unit_test(sleeping_loop_is_woken),
      cmocka_unit_test(freed_loop_hands_posts_back),
      cmocka_unit_test(post_misuse_and_reuse),
      cmocka_unit_test(embedded_loop_fd_becomes_readable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
