/* SPDX-License-Identifier: MIT */
/* Metrics: snapshots of a loop, of the process, of a group's loops from
 * other threads while the group stops; their Prometheus text. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"

#define LOOP_METRICS(m) tdl_loop_metrics m = {.size = sizeof m}

/* ---- bad input ---- */

static void *foreign_thread(void *arg)
{
  LOOP_METRICS(m);
  return (void *)(intptr_t)tdl_metrics_loop(arg, &m);
}

static void bad_input(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  LOOP_METRICS(m);
  assert_int_equal(tdl_metrics_loop(NULL, &m), -EINVAL);
  assert_int_equal(tdl_metrics_loop(loop, NULL), -EINVAL);
  m.size = 0;
  assert_int_equal(tdl_metrics_loop(loop, &m), -EINVAL);
  m.size = offsetof(tdl_loop_metrics, stacks_unguarded); /* one field short */
  assert_int_equal(tdl_metrics_loop(loop, &m), -EINVAL);

  tdl_process_metrics p = {.size = sizeof(size_t)};
  assert_int_equal(tdl_metrics_process(NULL), -EINVAL);
  assert_int_equal(tdl_metrics_process(&p), -EINVAL);

  m.size = sizeof m;
  assert_int_equal(tdl_metrics_group(NULL, 0, &m, TDL_FOREVER), -EINVAL);

  char buf[64];
  assert_int_equal(tdl_metrics_write_prometheus(NULL, 64, NULL, &m, 1), -EINVAL);
  assert_int_equal(tdl_metrics_write_prometheus(buf, sizeof buf, NULL, NULL, 1), -EINVAL);
  tdl_loop_metrics small = {.size = 8};
  assert_int_equal(tdl_metrics_write_prometheus(buf, sizeof buf, NULL, &small, 1), -EINVAL);
  assert_int_equal(tdl_metrics_write_prometheus(buf, sizeof buf, &p, NULL, 0), -EINVAL);
  /* Nothing at all is the empty exposition. */
  assert_int_equal(tdl_metrics_write_prometheus(buf, sizeof buf, NULL, NULL, 0), 0);
  assert_string_equal(buf, "");
  assert_int_equal(tdl_metrics_write_prometheus(buf, 0, NULL, NULL, 0), -ENOSPC);

#ifdef TDL_DEBUG_CHECKS
  pthread_t t;
  void *r;
  assert_int_equal(pthread_create(&t, NULL, foreign_thread, loop), 0);
  assert_int_equal(pthread_join(t, &r), 0);
  assert_int_equal((intptr_t)r, -EPERM);
#else
  (void)foreign_thread;
#endif
  t_loop_free(loop);
}

/* A caller built with a later header (a bigger struct): what the library
 * does not know reads 0. */
static void bigger_struct_zeroed(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  struct {
    tdl_loop_metrics m;
    uint64_t later[4];
  } big;
  memset(&big, 0xff, sizeof big);
  big.m.size = sizeof big;
  assert_int_equal(tdl_metrics_loop(loop, &big.m), 0);
  assert_int_equal(big.m.size, sizeof big); /* the caller's, untouched */
  for (int i = 0; i < 4; i++)
    assert_int_equal(big.later[i], 0);
  assert_int_equal(big.m.fibers_parked, 0);
  struct {
    tdl_process_metrics p;
    uint64_t later[2];
  } bigp;
  memset(&bigp, 0xff, sizeof bigp);
  bigp.p.size = sizeof bigp;
  assert_int_equal(tdl_metrics_process(&bigp.p), 0);
  assert_int_equal(bigp.later[0], 0);
  assert_int_equal(bigp.later[1], 0);
  assert_true(bigp.p.rss_bytes > 0);
  assert_true(bigp.p.pool_max_threads > 0);
  t_loop_free(loop);
}

/* ---- a loop's counts ---- */

static int pipe_fds[2];
static tdl_loop_metrics seen_inside;

static void *reader(void *arg)
{
  (void)arg;
  char c;
  assert_int_equal(tdl_read(pipe_fds[0], &c, 1, TDL_FOREVER), 1); /* parks: nothing written yet */
  return NULL;
}

static void *sleeper(void *arg)
{
  (void)arg;
  tdl_sleep(tdl_after(TDL_MSEC));
  return NULL;
}

static void *looker(void *arg)
{
  tdl_loop *loop = arg;
  tdl_fiber_yield(); /* the others run first, and park */
  seen_inside.size = sizeof seen_inside;
  assert_int_equal(tdl_metrics_loop(loop, &seen_inside), 0);
  assert_int_equal(tdl_write(pipe_fds[1], "x", 1, TDL_FOREVER), 1);
  return NULL;
}

static void loop_counts(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  t_pipe(pipe_fds);
  LOOP_METRICS(before);
  assert_int_equal(tdl_metrics_loop(loop, &before), 0);
  assert_int_equal(before.fibers_running + before.fibers_runnable + before.fibers_parked + before.fibers_finished,
                   0);
  tdl_fiber_t r, s[3], l;
  assert_int_equal(tdl_fiber_spawn(&r, loop, reader, NULL, NULL), 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_fiber_spawn(&s[i], loop, sleeper, NULL, NULL), 0);
  assert_int_equal(tdl_fiber_spawn(&l, loop, looker, loop, NULL), 0);
  LOOP_METRICS(queued);
  assert_int_equal(tdl_metrics_loop(loop, &queued), 0);
  assert_int_equal(queued.fibers_runnable, 5);
  assert_int_equal(queued.fibers_running, 0); /* from outside the fibers */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);

  /* Seen by the looker: itself running, the reader and the sleepers parked. */
  assert_int_equal(seen_inside.fibers_running, 1);
  assert_int_equal(seen_inside.fibers_parked, 4);
  assert_int_equal(seen_inside.fibers_runnable, 0);
  assert_int_equal(seen_inside.timers_live, 3); /* the sleepers' */

  LOOP_METRICS(after);
  assert_int_equal(tdl_metrics_loop(loop, &after), 0);
  assert_int_equal(after.fibers_finished, 5); /* not joined yet */
  assert_int_equal(after.fibers_parked + after.fibers_runnable + after.fibers_running, 0);
  assert_int_equal(after.timers_live, 0);
  if (after.counted) {
    assert_true(after.switches >= 10); /* five fibers in and out, the looker twice */
    assert_int_equal(after.parks, 4);
    assert_int_equal(after.wakeups, 4);
    assert_int_equal(after.io_parks, 1);
    if (strcmp(tdl_loop_backend(loop), "uring") == 0) {
      assert_true(after.ring_submissions > 0); /* at least the poll of its epoll set */
      assert_true(after.ring_completions > 0);
    } else {
      assert_int_equal(after.ring_submissions, 0);
    }
  } else {
    assert_int_equal(after.switches + after.parks + after.wakeups + after.io_parks, 0);
  }
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_fiber_detach(loop, s[i]), 0); /* finished: released now */
  assert_int_equal(tdl_fiber_detach(loop, r), 0);
  assert_int_equal(tdl_fiber_detach(loop, l), 0);
  assert_int_equal(tdl_metrics_loop(loop, &after), 0);
  assert_int_equal(after.fibers_finished, 0);
  /* The same counts as the subsystem's own call: one source. */
  tdl_fiber_stats fs;
  tdl_fiber_stats_get(loop, &fs);
  assert_int_equal(after.stacks_cached, fs.stacks_cached);
  assert_int_equal(after.stacks_unguarded, fs.unguarded);
  assert_true(after.stacks_cached_bytes >= after.stacks_cached * 4096);
  assert_int_equal(fs.live, 0);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  t_loop_free(loop);
}

/* ---- the Prometheus text ---- */

typedef struct family {
  char name[96];
  char type[16];
} family;

/* A small reader of the exposition format: every sample's name was
 * declared by a TYPE line before it, labels are name="value" pairs, no
 * series twice, every name treadle_*, counters end in _total.  Returns the
 * number of samples; fails the test otherwise. */
static int check_exposition(const char *text, int *loops_seen)
{
  static family fams[128];
  static char series[1024][160];
  int nfam = 0, nser = 0, samples = 0;
  *loops_seen = -1;
  const char *p = text;
  while (*p) {
    const char *eol = strchr(p, '\n');
    assert_non_null(eol); /* every line ends */
    char line[512];
    size_t len = (size_t)(eol - p);
    assert_true(len > 0 && len < sizeof line);
    memcpy(line, p, len);
    line[len] = 0;
    p = eol + 1;
    if (strncmp(line, "# HELP ", 7) == 0) {
      assert_non_null(strchr(line + 7, ' ')); /* a name, then text */
      continue;
    }
    if (strncmp(line, "# TYPE ", 7) == 0) {
      assert_true(nfam < 128);
      family *f = &fams[nfam++];
      assert_int_equal(sscanf(line + 7, "%95s %15s", f->name, f->type), 2);
      assert_true(strcmp(f->type, "counter") == 0 || strcmp(f->type, "gauge") == 0);
      assert_int_equal(strncmp(f->name, "treadle_", 8), 0);
      size_t n = strlen(f->name);
      bool total = n > 6 && strcmp(f->name + n - 6, "_total") == 0;
      assert_int_equal(total, strcmp(f->type, "counter") == 0);
      for (int k = 0; k < nfam - 1; k++)
        assert_string_not_equal(fams[k].name, f->name); /* one group per family */
      continue;
    }
    assert_true(line[0] != '#');
    /* name{labels} value */
    char *sp = strrchr(line, ' ');
    assert_non_null(sp);
    *sp = 0;
    const char *value = sp + 1;
    assert_true(*value >= '0' && *value <= '9');
    for (const char *v = value; *v; v++)
      assert_true(*v >= '0' && *v <= '9');
    char *brace = strchr(line, '{');
    size_t nlen = brace ? (size_t)(brace - line) : strlen(line);
    /* Declared by the last TYPE line (samples follow their family). */
    assert_true(nfam > 0);
    assert_int_equal(strlen(fams[nfam - 1].name), nlen);
    assert_memory_equal(fams[nfam - 1].name, line, nlen);
    for (size_t k = 0; k < nlen; k++)
      assert_true((line[k] >= 'a' && line[k] <= 'z') || line[k] == '_' || (line[k] >= '0' && line[k] <= '9'));
    if (brace) {
      const char *q = brace + 1;
      for (;;) {
        const char *name = q;
        while ((*q >= 'a' && *q <= 'z') || *q == '_')
          q++;
        assert_true(q > name);
        assert_int_equal(*q++, '=');
        assert_int_equal(*q++, '"');
        const char *val = q;
        while (*q && *q != '"' && *q != '\\' && *q != '\n')
          q++;
        assert_int_equal(*q++, '"');
        if (strncmp(name, "loop=", 5) == 0) {
          int idx = atoi(val);
          if (idx > *loops_seen)
            *loops_seen = idx;
        }
        if (*q == ',') {
          q++;
          continue;
        }
        assert_int_equal(*q++, '}');
        assert_int_equal(*q, 0);
        break;
      }
    }
    assert_true(nser < 1024);
    for (int k = 0; k < nser; k++)
      assert_string_not_equal(series[k], line);
    assert_true(strlen(line) < sizeof series[0]);
    strcpy(series[nser++], line);
    samples++;
  }
  return samples;
}

static void prometheus_text(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  tdl_loop_metrics m[3];
  for (int i = 0; i < 3; i++) {
    m[i] = (tdl_loop_metrics){.size = sizeof m[i]};
    assert_int_equal(tdl_metrics_loop(loop, &m[i]), 0);
  }
  m[2].switches = 18446744073709551615ull; /* the largest value is written whole */
  tdl_process_metrics p = {.size = sizeof p};
  assert_int_equal(tdl_metrics_process(&p), 0);
  static char buf[65536];
  int len = tdl_metrics_write_prometheus(buf, sizeof buf, &p, m, 3);
  assert_true(len > 0);
  assert_int_equal(strlen(buf), (size_t)len);
  int loops_seen;
  int samples = check_exposition(buf, &loops_seen);
  assert_int_equal(loops_seen, 2);
  assert_true(samples > 3 * 20);
  assert_non_null(strstr(buf, "# TYPE treadle_fiber_switches_total counter\n"));
  assert_non_null(strstr(buf, "treadle_fiber_switches_total{loop=\"2\"} 18446744073709551615\n"));
  assert_non_null(strstr(buf, "treadle_fibers{loop=\"1\",state=\"parked\"} 0\n"));
  assert_non_null(strstr(buf, "treadle_pool_queued{lane=\"file\"} "));
  assert_non_null(strstr(buf, "# TYPE treadle_resident_memory_bytes gauge\n"));

  /* Every buffer too small by any amount: -ENOSPC and the empty string. */
  static char small[65536];
  for (int cap = 0; cap <= len; cap++) {
    memset(small, 'x', sizeof small);
    assert_int_equal(tdl_metrics_write_prometheus(small, (size_t)cap, &p, m, 3), -ENOSPC);
    if (cap > 0)
      assert_int_equal(small[0], 0);
    assert_int_equal(small[cap], 'x'); /* nothing written beyond cap */
  }
  assert_int_equal(tdl_metrics_write_prometheus(small, (size_t)len + 1, &p, m, 3), len);
  assert_string_equal(small, buf);

  /* Only loops, only the process. */
  len = tdl_metrics_write_prometheus(buf, sizeof buf, NULL, m, 1);
  assert_true(len > 0);
  check_exposition(buf, &loops_seen);
  assert_int_equal(loops_seen, 0);
  assert_null(strstr(buf, "treadle_pool_"));
  len = tdl_metrics_write_prometheus(buf, sizeof buf, &p, NULL, 0);
  assert_true(len > 0);
  check_exposition(buf, &loops_seen);
  assert_int_equal(loops_seen, -1);
  t_loop_free(loop);
}

/* ---- a group's loops, from other threads, while it stops ---- */

enum { LOOPS = 3 };

static void *idle_main(void *arg)
{
  (void)arg;
  tdl_fiber_t f;
  tdl_fiber_spawn(&f, tdl_fiber_loop(), sleeper, NULL, &(tdl_fiber_options){.detached = true});
  tdl_sleep(TDL_FOREVER); /* until the stop cancels it */
  return NULL;
}

static void *watcher_main(void *arg)
{
  (void)arg;
  tdl_group *g = tdl_group_self();
  unsigned me = (unsigned)tdl_group_index();
  /* From a fiber: every loop, until the stop cancels this fiber. */
  for (;;) {
    for (unsigned i = 0; i < LOOPS; i++) {
      LOOP_METRICS(m);
      int e = tdl_metrics_group(g, i, &m, tdl_after(T_HANG));
      if (e == -ECANCELED)
        return NULL;
      if (e != 0 && e != -ESHUTDOWN)
        fprintf(stderr, "watcher: loop %u: %d\n", i, e);
      assert_true(e == 0 || e == -ESHUTDOWN);
      if (e == 0 && i == me)
        assert_int_equal(m.fibers_running, 1); /* its own loop: taken here, in this fiber */
      if (e == 0 && i != me)
        assert_int_equal(m.fibers_running, 0); /* taken in a post, outside that loop's fibers */
    }
    /* Once the others are gone every call returns at once: let this loop
     * poll (its port: the readers' snapshots, the stop). */
    if (tdl_sleep(tdl_after(100 * TDL_USEC)) == -ECANCELED)
      return NULL;
  }
}

static void *main_for(void *arg)
{
  return tdl_group_index() == 0 ? watcher_main(arg) : idle_main(arg);
}

static int reader_stop;
static int reader_ok, reader_gone;

static void *group_reader(void *arg)
{
  tdl_group *g = arg;
  while (!__atomic_load_n(&reader_stop, __ATOMIC_ACQUIRE)) {
    for (unsigned i = 0; i < LOOPS; i++) {
      LOOP_METRICS(m);
      int e = tdl_metrics_group(g, i, &m, tdl_after(T_HANG));
      if (e != 0 && e != -ESHUTDOWN)
        fprintf(stderr, "reader: loop %u: %d\n", i, e);
      assert_true(e == 0 || e == -ESHUTDOWN);
      __atomic_add_fetch(e == 0 ? &reader_ok : &reader_gone, 1, __ATOMIC_RELAXED);
    }
  }
  return NULL;
}

static void on_stop_check(tdl_loop *loop, void *arg)
{
  (void)loop;
  (void)arg;
  /* A loop's callback outside a fiber may not wait for another loop. */
  tdl_group *g = tdl_group_self();
  unsigned me = (unsigned)tdl_group_index();
  LOOP_METRICS(m);
  assert_int_equal(tdl_metrics_group(g, (me + 1) % LOOPS, &m, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_metrics_group(g, me, &m, TDL_FOREVER), 0); /* its own: fine */
  assert_int_equal(tdl_metrics_group(g, LOOPS, &m, TDL_FOREVER), -EINVAL);
}

static void group_racing_shutdown(void **state)
{
  (void)state;
  int rounds = RUNNING_ON_VALGRIND ? 3 : 20;
  for (int round = 0; round < rounds; round++) {
    tdl_group *g;
    assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = LOOPS, .main = main_for,
                                                             .on_stop = on_stop_check}),
                     0);
    __atomic_store_n(&reader_stop, 0, __ATOMIC_RELEASE);
    pthread_t readers[2];
    for (int k = 0; k < 2; k++)
      assert_int_equal(pthread_create(&readers[k], NULL, group_reader, g), 0);
    /* Some snapshots from here too, before the stop. */
    for (unsigned i = 0; i < LOOPS; i++) {
      LOOP_METRICS(m);
      assert_int_equal(tdl_metrics_group(g, i, &m, tdl_after(T_HANG)), 0);
      assert_true(m.fibers_parked + m.fibers_runnable >= 1);
    }
    if (round & 1)
      usleep(1000);
    tdl_group_stop(g); /* the loops end, and are freed, one by one */
    assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
    /* Every loop is gone: -ESHUTDOWN, from here and from the readers. */
    LOOP_METRICS(m);
    assert_int_equal(tdl_metrics_group(g, 1, &m, tdl_after(T_HANG)), -ESHUTDOWN);
    __atomic_store_n(&reader_stop, 1, __ATOMIC_RELEASE);
    for (int k = 0; k < 2; k++)
      assert_int_equal(pthread_join(readers[k], NULL), 0);
    assert_int_equal(tdl_group_free(g), 0);
  }
  assert_true(__atomic_load_n(&reader_ok, __ATOMIC_RELAXED) > 0);
}

/* A deadline already past, and one that passes while the loop is busy:
 * -ETIMEDOUT, and the snapshot that comes later is dropped. */
static int busy_go;

static void *busy_main(void *arg)
{
  (void)arg;
  if (tdl_group_index() == 1) {
    while (!__atomic_load_n(&busy_go, __ATOMIC_ACQUIRE))
      usleep(1000); /* keeps loop 1 away from its port */
  }
  tdl_sleep(TDL_FOREVER);
  return NULL;
}

static void group_deadline(void **state)
{
  (void)state;
  __atomic_store_n(&busy_go, 0, __ATOMIC_RELEASE);
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = busy_main}), 0);
  LOOP_METRICS(m);
  assert_int_equal(tdl_metrics_group(g, 0, &m, tdl_now() - 1), -ETIMEDOUT);
  assert_int_equal(tdl_metrics_group(g, 1, &m, tdl_after(20 * TDL_MSEC)), -ETIMEDOUT);
  __atomic_store_n(&busy_go, 1, __ATOMIC_RELEASE);
  assert_int_equal(tdl_metrics_group(g, 1, &m, tdl_after(T_HANG)), 0);
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_input),
      cmocka_unit_test(bigger_struct_zeroed),
      cmocka_unit_test(loop_counts),
      cmocka_unit_test(prometheus_text),
      cmocka_unit_test(group_racing_shutdown),
      cmocka_unit_test(group_deadline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
