/* SPDX-License-Identifier: MIT */
/*
 * The soak: everything at once in one process, for a while.
 *
 *   soak [SECONDS]        (default 600; `make soak`, SOAK_SECONDS=60 in CI)
 *
 * On the main loop: 100,000 fibers (most of them idle sleepers that wake
 * every 20-60 s), 1,000,000 repeating timers, 9,000 pipes each with a writer
 * and a reader fiber, producer/consumer pairs over channels, a fiber that
 * runs `cat` with tdl_process_run, fibers on the blocking pool.  Beside it a
 * group of two loops: an echo fiber on each behind a pair of shared
 * channels, posts and calls into them from the main loop.
 *
 * Every few seconds it prints RSS (VmRSS) and the fd count.  At the end it
 * stops everything and checks that every message was delivered once and in
 * order, that every timer fired as often as its period says (within one),
 * and that RSS and the fd count were flat after warm-up: the first 20% of
 * the run (at least 10 s) is warm-up; of the samples after it, the last
 * third's highest RSS must be within 10% of the first third's highest, and
 * the last third's highest fd count within 16 of the first third's (spawns
 * hold a few fds while they run).  Exits 0 when all holds, 1 otherwise.
 *
 * Sized for the test machine: 2 cores, RLIMIT_NOFILE 20,000 (the soft limit
 * is raised to the hard one; 9,000 pipes are 18,000 fds, fewer pipes when
 * the limit is lower), vm.max_map_count 65,530 (the stack code maps the
 * stacks past its guard budget without guards).
 */
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <treadle.h>

#define FIBERS 100000
#define TIMERS 1000000
#define PIPES_MAX 9000
#define CHANS 64
#define GROUP_LOOPS 2
#define POOL_FIBERS 4
#define MSG_BURST 4

/* ---- bookkeeping ---- */

static struct {
  int seconds;
  tdl_loop *loop;
  tdl_group *group;
  bool stopping;
  tdl_waitgroup wg; /* every worker fiber */
  int errors;
  int npipes, nidle;
  uint64_t pipe_sent, pipe_recv, chan_sent, chan_recv, x_sent, x_recv, posts_sent, calls, pool_calls, spawns,
    idle_wakes, timer_fires;
  _Atomic uint64_t posts_done;
} S;

static void bad(const char *what, int e)
{
  if (S.errors++ < 20)
    fprintf(stderr, "soak: %s: %s\n", what, e ? tdl_strerror(e) : "wrong value");
}

static uint32_t rnd(uint32_t *s)
{
  uint32_t x = *s ? *s : 0x9e3779b9u;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

/* A pause of lo..hi ms. */
static int nap(uint32_t *seed, uint32_t lo, uint32_t hi)
{
  return tdl_sleep(tdl_after((tdl_time_t)(lo + rnd(seed) % (hi - lo + 1)) * TDL_MSEC));
}

static tdl_fiber_options small = {.stack_size = TDL_STACK_MIN, .detached = true};
static tdl_fiber_options normal = {.detached = true};

static void spawn_worker(tdl_fiber_fn fn, void *arg, const tdl_fiber_options *o, tdl_fiber_t *out)
{
  tdl_waitgroup_add(&S.wg, 1);
  int e = tdl_fiber_spawn(out, S.loop, fn, arg, o);
  if (e < 0) {
    tdl_waitgroup_add(&S.wg, -1);
    fprintf(stderr, "soak: tdl_fiber_spawn: %s\n", tdl_strerror(e));
    exit(1);
  }
}

/* ---- idle fibers ---- */

static tdl_fiber_t *idle;

static void *idle_fiber(void *arg)
{
  uint32_t seed = (uint32_t)(uintptr_t)arg * 2654435761u + 1;
  while (!S.stopping) {
    int e = nap(&seed, 20000, 60000);
    if (e == -ECANCELED)
      break;
    if (e < 0)
      bad("idle sleep", e);
    S.idle_wakes++;
  }
  tdl_waitgroup_done(&S.wg);
  return NULL;
}

/* ---- pipes ---- */

typedef struct pipe_pair {
  int r, w;
  uint64_t sent, recvd;
} pipe_pair;
static pipe_pair *pipes;

static void *pipe_writer(void *arg)
{
  pipe_pair *p = arg;
  uint32_t seed = (uint32_t)(p - pipes) * 2246822519u + 7;
  nap(&seed, 0, 1000);
  while (!S.stopping) {
    uint64_t burst[MSG_BURST];
    unsigned n = 1 + rnd(&seed) % MSG_BURST;
    for (unsigned i = 0; i < n; i++)
      burst[i] = p->sent + i;
    ssize_t w = tdl_write(p->w, burst, n * sizeof *burst, TDL_FOREVER);
    if (w != (ssize_t)(n * sizeof *burst)) {
      bad("pipe write", w < 0 ? (int)w : 0);
      break;
    }
    p->sent += n;
    S.pipe_sent += n;
    nap(&seed, 200, 2000);
  }
  tdl_close(p->w);
  tdl_waitgroup_done(&S.wg);
  return NULL;
}

static void *pipe_reader(void *arg)
{
  pipe_pair *p = arg;
  uint64_t buf[64];
  for (;;) {
    ssize_t n = tdl_read(p->r, buf, sizeof buf, TDL_FOREVER);
    if (n == 0)
      break;
    if (n < 0 || n % sizeof *buf) {
      bad("pipe read", n < 0 ? (int)n : 0);
      break;
    }
    for (size_t i = 0; i < (size_t)n / sizeof *buf; i++)
      if (buf[i] != p->recvd++)
        bad("pipe message out of order", 0);
    S.pipe_recv += (size_t)n / sizeof *buf;
  }
  tdl_close(p->r);
  tdl_waitgroup_done(&S.wg);
  return NULL;
}

/* ---- channels ---- */

typedef struct chan_pair {
  tdl_chan *ch;
  uint64_t sent, recvd;
} chan_pair;
static chan_pair chans[CHANS];

static void *chan_producer(void *arg)
{
  chan_pair *c = arg;
  uint32_t seed = (uint32_t)(c - chans) * 3266489917u + 3;
  while (!S.stopping) {
    for (int i = 0; i < 8; i++) {
      int e = tdl_chan_send(c->ch, &c->sent, TDL_FOREVER);
      if (e < 0) {
        bad("chan send", e);
        break;
      }
      c->sent++;
      S.chan_sent++;
    }
    nap(&seed, 50, 150);
  }
  tdl_chan_close(c->ch);
  tdl_waitgroup_done(&S.wg);
  return NULL;
}

static void *chan_consumer(void *arg)
{
  chan_pair *c = arg;
  uint64_t v;
  int e;
  while ((e = tdl_chan_recv(c->ch, &v, TDL_FOREVER)) == 0) {
    if (v != c->recvd++)
      bad("chan message out of order", 0);
    S.chan_recv++;
  }
  if (e != -EPIPE)
    bad("chan recv", e);
  tdl_waitgroup_done(&S.wg);
  return NULL;
}

/* ---- spawns ---- */

static void *spawner(void *arg)
{
  (void)arg;
  static const char *const argv[] = {"/bin/cat", NULL};
  uint32_t seed = 11;
  while (!S.stopping) {
    char in[32];
    int len = snprintf(in, sizeof in, "soak %llu\n", (unsigned long long)S.spawns);
    tdl_process_run_result res;
    int e = tdl_process_run(&res, argv, NULL, in, (size_t)len, 4096, tdl_after(30 * TDL_SEC));
    if (e < 0)
      bad("tdl_process_run", e);
    else if (!tdl_process_exited(res.status) || tdl_process_exit_code(res.status) != 0 || res.out_len != (size_t)len ||
             memcmp(res.out, in, (size_t)len) != 0)
      bad("cat's output", 0);
    else
      S.spawns++;
    tdl_process_run_result_destroy(&res);
    nap(&seed, 100, 300);
  }
  tdl_waitgroup_done(&S.wg);
  return NULL;
}

/* ---- the blocking pool ---- */

static void *sum_to(void *arg)
{
  uint64_t n = (uintptr_t)arg, s = 0;
  for (uint64_t i = 1; i <= n; i++)
    s += i;
  struct timespec ts = {0, 1000000}; /* and block a little, as real work would */
  nanosleep(&ts, NULL);
  return (void *)(uintptr_t)s;
}

static void *pool_user(void *arg)
{
  uint32_t seed = (uint32_t)(uintptr_t)arg + 5;
  while (!S.stopping) {
    uint64_t n = 1000 + rnd(&seed) % 1000;
    void *r;
    int e = tdl_pool_call(TDL_LANE_USER, sum_to, (void *)(uintptr_t)n, NULL, &r, tdl_after(30 * TDL_SEC));
    if (e < 0)
      bad("tdl_pool_call", e);
    else if ((uintptr_t)r != n * (n + 1) / 2)
      bad("pool result", 0);
    else
      S.pool_calls++;
    nap(&seed, 10, 30);
  }
  tdl_waitgroup_done(&S.wg);
  return NULL;
}

/* ---- the group: echo over shared channels, posts, calls ---- */

static tdl_chan *xa[GROUP_LOOPS], *xb[GROUP_LOOPS]; /* to the loop, back */

static void *echo_main(void *arg)
{
  (void)arg;
  int i = tdl_group_index();
  uint64_t v;
  int e;
  while ((e = tdl_chan_recv(xa[i], &v, TDL_FOREVER)) == 0)
    if ((e = tdl_chan_send(xb[i], &v, TDL_FOREVER)) < 0)
      break;
  if (e != -EPIPE && e != -ECANCELED)
    bad("echo", e);
  tdl_chan_close(xb[i]);
  return NULL;
}

static void *x_sender(void *arg)
{
  int i = (int)(uintptr_t)arg;
  uint32_t seed = (uint32_t)i + 17;
  uint64_t seq = 0;
  while (!S.stopping) {
    uint64_t back;
    int e = tdl_chan_send(xa[i], &seq, TDL_FOREVER);
    if (e == 0)
      e = tdl_chan_recv(xb[i], &back, TDL_FOREVER);
    if (e < 0) {
      bad("cross-loop channel", e);
      break;
    }
    if (back != seq)
      bad("cross-loop echo", 0);
    seq++;
    S.x_sent++;
    S.x_recv++;
    if (seq % 16 == 0)
      nap(&seed, 1, 10);
  }
  tdl_chan_close(xa[i]);
  tdl_waitgroup_done(&S.wg);
  return NULL;
}

static tdl_post posts[GROUP_LOOPS];
static _Atomic int post_busy[GROUP_LOOPS];

static void on_post(tdl_loop *loop, tdl_post *p)
{
  (void)loop;
  atomic_fetch_add(&S.posts_done, 1);
  atomic_store(&post_busy[p - posts], 0);
}

static void *inc(tdl_loop *loop, void *arg)
{
  (void)loop;
  return (void *)((uintptr_t)arg + 1);
}

static void *poster(void *arg)
{
  (void)arg;
  uint32_t seed = 23;
  uintptr_t k = 0;
  while (!S.stopping) {
    for (int i = 0; i < GROUP_LOOPS; i++) {
      tdl_port *port = tdl_group_port(S.group, (unsigned)i);
      if (!atomic_exchange(&post_busy[i], 1)) {
        int e = tdl_port_post(port, &posts[i]);
        if (e < 0) {
          atomic_store(&post_busy[i], 0);
          bad("tdl_port_post", e);
        } else {
          S.posts_sent++;
        }
      }
      void *r;
      int e = tdl_port_call(port, inc, (void *)k, &r, tdl_after(30 * TDL_SEC));
      if (e < 0)
        bad("tdl_port_call", e);
      else if ((uintptr_t)r != k + 1)
        bad("tdl_port_call's result", 0);
      else
        S.calls++;
      k++;
    }
    nap(&seed, 2, 8);
  }
  tdl_waitgroup_done(&S.wg);
  return NULL;
}

/* ---- timers ---- */

typedef struct stimer {
  tdl_timer t;
  uint32_t fires, period_ms, first_ms;
} stimer;
static stimer *timers;
static tdl_time_t timers_base;

static void on_timer(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  ((stimer *)t)->fires++;
  S.timer_fires++;
}

/* ---- samples ---- */

typedef struct sample {
  double t;
  long rss_kb;
  int fds;
} sample;

static long rss_kb(void)
{
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
      break;
  if (f)
    fclose(f);
  return kb;
}

static int fd_count(void)
{
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (!d)
    return -1;
  while (readdir(d))
    n++;
  closedir(d);
  return n - 3; /* ".", ".." and the DIR's own fd */
}

/* Flat: of the samples after warm-up, the last third's highest is within
 * the allowance of the first third's highest. */
static bool flat(const sample *s, int n, bool rss, long *first, long *last)
{
  int third = n / 3;
  *first = *last = 0;
  if (third < 1)
    return false;
  for (int i = 0; i < third; i++)
    *first = (rss ? s[i].rss_kb : s[i].fds) > *first ? (rss ? s[i].rss_kb : s[i].fds) : *first;
  for (int i = n - third; i < n; i++)
    *last = (rss ? s[i].rss_kb : s[i].fds) > *last ? (rss ? s[i].rss_kb : s[i].fds) : *last;
  return rss ? *last <= *first + *first / 10 : *last <= *first + 16;
}

/* ---- the conductor ---- */

static int verdict = 1;

static void *conductor(void *arg)
{
  (void)arg;
  tdl_time_t t0 = tdl_now();
  tdl_waitgroup_init(&S.wg);

  /* pipes: two fibers each */
  for (int i = 0; i < S.npipes; i++) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
      fprintf(stderr, "soak: pipe %d: %s\n", i, strerror(errno));
      exit(1);
    }
    pipes[i] = (pipe_pair){.r = fds[0], .w = fds[1]};
    spawn_worker(pipe_writer, &pipes[i], &small, NULL);
    spawn_worker(pipe_reader, &pipes[i], &small, NULL);
  }
  for (int i = 0; i < CHANS; i++) {
    if (tdl_chan_new(&chans[i].ch, sizeof(uint64_t), 16) < 0)
      exit(1);
    spawn_worker(chan_producer, &chans[i], &small, NULL);
    spawn_worker(chan_consumer, &chans[i], &small, NULL);
  }
  spawn_worker(spawner, NULL, &normal, NULL);
  for (int i = 0; i < POOL_FIBERS; i++)
    spawn_worker(pool_user, (void *)(uintptr_t)i, &normal, NULL);
  for (int i = 0; i < GROUP_LOOPS; i++)
    spawn_worker(x_sender, (void *)(uintptr_t)i, &normal, NULL);
  spawn_worker(poster, NULL, &normal, NULL);
  for (int i = 0; i < S.nidle; i++)
    spawn_worker(idle_fiber, (void *)(uintptr_t)i, &small, &idle[i]);

  /* timers: periods of 20-120 s, first due somewhere in the first period */
  uint32_t seed = 99;
  timers_base = tdl_after(TDL_SEC);
  for (int i = 0; i < TIMERS; i++) {
    stimer *t = &timers[i];
    t->period_ms = 20000 + rnd(&seed) % 100001;
    t->first_ms = rnd(&seed) % t->period_ms;
    tdl_timer_init(&t->t, on_timer, NULL);
    int e = tdl_timer_start_at(S.loop, &t->t, timers_base + (tdl_time_t)t->first_ms * TDL_MSEC,
                               (tdl_time_t)t->period_ms * TDL_MSEC);
    if (e < 0) {
      fprintf(stderr, "soak: timer %d: %s\n", i, tdl_strerror(e));
      exit(1);
    }
  }
  printf("soak: %d s; %d fibers (%d idle), %d timers, %d pipes, %d channels, %d-loop group; set up in %.1f s\n",
         S.seconds, FIBERS, S.nidle, TIMERS, S.npipes, CHANS, GROUP_LOOPS, (double)(tdl_now() - t0) / TDL_SEC);

  /* sample until the end */
  int every = S.seconds >= 300 ? 5 : 2;
  int nmax = S.seconds / every + 2, n = 0;
  sample *smp = calloc((size_t)nmax, sizeof *smp);
  printf("%8s %10s %7s %12s %10s %9s %9s %7s %7s %9s\n", "t(s)", "RSS(MB)", "fds", "timer fires", "pipe msgs",
         "chan msgs", "x-loop", "spawns", "pool", "idle wakes");
  tdl_time_t end = t0 + (tdl_time_t)S.seconds * TDL_SEC;
  for (tdl_time_t next = t0 + every * TDL_SEC; next <= end && n < nmax; next += every * TDL_SEC) {
    tdl_sleep(next);
    smp[n] = (sample){(double)(tdl_now() - t0) / TDL_SEC, rss_kb(), fd_count()};
    printf("%8.0f %10.1f %7d %12llu %10llu %9llu %9llu %7llu %7llu %9llu\n", smp[n].t, smp[n].rss_kb / 1024.0,
           smp[n].fds, (unsigned long long)S.timer_fires, (unsigned long long)S.pipe_recv,
           (unsigned long long)S.chan_recv, (unsigned long long)S.x_recv, (unsigned long long)S.spawns,
           (unsigned long long)S.pool_calls, (unsigned long long)S.idle_wakes);
    fflush(stdout);
    n++;
  }

  /* timers: each fired as often as its period says, give or take one */
  tdl_time_t now = tdl_now();
  long timer_bad = 0;
  for (int i = 0; i < TIMERS; i++) {
    stimer *t = &timers[i];
    tdl_time_t first = timers_base + (tdl_time_t)t->first_ms * TDL_MSEC;
    int64_t want = now < first ? 0 : (now - first) / ((tdl_time_t)t->period_ms * TDL_MSEC) + 1;
    if ((int64_t)t->fires < want - 1 || (int64_t)t->fires > want)
      timer_bad++;
    tdl_timer_stop(S.loop, &t->t);
  }
  if (timer_bad)
    bad("timers that fired too often or too rarely", 0);

  /* stop everything and wait for every worker */
  S.stopping = true;
  for (int i = 0; i < S.nidle; i++)
    tdl_fiber_cancel(S.loop, idle[i]);
  int e = tdl_waitgroup_wait(&S.wg, tdl_after(120 * TDL_SEC));
  if (e < 0)
    bad("workers did not finish", e);
  for (int i = 0; i < 500 && atomic_load(&S.posts_done) != S.posts_sent; i++)
    tdl_sleep(tdl_after(10 * TDL_MSEC));

  /* accounting */
  uint64_t lost = 0;
  for (int i = 0; i < S.npipes; i++)
    lost += pipes[i].sent != pipes[i].recvd;
  for (int i = 0; i < CHANS; i++) {
    lost += chans[i].sent != chans[i].recvd;
    tdl_chan_free(chans[i].ch);
  }
  if (lost || S.pipe_sent != S.pipe_recv || S.chan_sent != S.chan_recv || S.x_sent != S.x_recv)
    bad("messages lost", 0);
  if (atomic_load(&S.posts_done) != S.posts_sent)
    bad("posts lost", 0);
  printf("soak: messages: pipes %llu/%llu, channels %llu/%llu, cross-loop %llu/%llu, posts %llu/%llu, calls %llu; "
         "timer fires %llu (%ld timers off count); spawns %llu, pool calls %llu\n",
         (unsigned long long)S.pipe_recv, (unsigned long long)S.pipe_sent, (unsigned long long)S.chan_recv,
         (unsigned long long)S.chan_sent, (unsigned long long)S.x_recv, (unsigned long long)S.x_sent,
         (unsigned long long)atomic_load(&S.posts_done), (unsigned long long)S.posts_sent,
         (unsigned long long)S.calls, (unsigned long long)S.timer_fires, timer_bad, (unsigned long long)S.spawns,
         (unsigned long long)S.pool_calls);
  if (!S.spawns || !S.pool_calls || !S.calls || !S.pipe_recv || !S.chan_recv || !S.x_recv)
    bad("some part never ran", 0);

  /* flat after warm-up */
  double warm = S.seconds / 5.0 < 10 ? 10 : S.seconds / 5.0;
  int w = 0;
  while (w < n && smp[w].t < warm)
    w++;
  long r0, r1, f0, f1;
  bool rss_flat = flat(smp + w, n - w, true, &r0, &r1), fds_flat = flat(smp + w, n - w, false, &f0, &f1);
  printf("soak: after %.0f s of warm-up: RSS max %.1f MB in the first third, %.1f MB in the last (%s); fds max %ld, "
         "%ld (%s)\n",
         warm, r0 / 1024.0, r1 / 1024.0, rss_flat ? "flat" : "GROWING", f0, f1, fds_flat ? "flat" : "GROWING");
  if (!rss_flat)
    bad("RSS is not flat", 0);
  if (!fds_flat)
    bad("the fd count is not flat", 0);
  free(smp);
  verdict = S.errors ? 1 : 0;
  printf("soak: %s (%d errors)\n", verdict ? "FAILED" : "passed", S.errors);
  return NULL;
}

int main(int argc, char **argv)
{
  S.seconds = argc > 1 ? atoi(argv[1]) : 600;
  if (S.seconds < 30) {
    fprintf(stderr, "usage: soak [SECONDS >= 30]\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);

  /* As many pipes as the fd limit allows, up to 9,000, leaving 400 fds for
   * the rest (loops, spawns, /proc reads). */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  long room = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 1 << 20;
  S.npipes = (int)((room - 400) / 2 < PIPES_MAX ? (room - 400) / 2 : PIPES_MAX);
  if (S.npipes < 100) {
    fprintf(stderr, "soak: RLIMIT_NOFILE %ld is too low\n", room);
    return 2;
  }
  S.nidle = FIBERS - 2 * S.npipes - 2 * CHANS - 1 - POOL_FIBERS - GROUP_LOOPS - 1 - 1;
  pipes = calloc((size_t)S.npipes, sizeof *pipes);
  idle = calloc((size_t)S.nidle, sizeof *idle);
  timers = calloc(TIMERS, sizeof *timers);
  if (!pipes || !idle || !timers)
    return 1;

  for (int i = 0; i < GROUP_LOOPS; i++) {
    if (tdl_chan_new_shared(&xa[i], sizeof(uint64_t), 4) < 0 || tdl_chan_new_shared(&xb[i], sizeof(uint64_t), 4) < 0)
      return 1;
    tdl_post_init(&posts[i], on_post, NULL);
  }
  int e = tdl_group_new(&S.group, &(tdl_group_options){.loops = GROUP_LOOPS, .main = echo_main});
  if (e < 0) {
    fprintf(stderr, "soak: tdl_group_new: %s\n", tdl_strerror(e));
    return 1;
  }
  if ((e = tdl_loop_new(&S.loop, NULL)) < 0) {
    fprintf(stderr, "soak: tdl_loop_new: %s\n", tdl_strerror(e));
    return 1;
  }
  tdl_fiber_t c;
  if ((e = tdl_fiber_spawn(&c, S.loop, conductor, NULL, &normal)) < 0 ||
      (e = tdl_loop_run(S.loop, TDL_LOOP_DEFAULT)) < 0) {
    fprintf(stderr, "soak: main loop: %s\n", tdl_strerror(e));
    return 1;
  }
  tdl_group_stop(S.group);
  if ((e = tdl_group_wait(S.group, tdl_after(60 * TDL_SEC))) < 0 || (e = tdl_group_free(S.group)) < 0) {
    fprintf(stderr, "soak: group: %s\n", tdl_strerror(e));
    return 1;
  }
  if ((e = tdl_loop_free(S.loop)) < 0) {
    fprintf(stderr, "soak: tdl_loop_free: %s\n", tdl_strerror(e));
    return 1;
  }
  for (int i = 0; i < GROUP_LOOPS; i++) {
    tdl_chan_free(xa[i]);
    tdl_chan_free(xb[i]);
  }
  free(pipes);
  free(idle);
  free(timers);
  return verdict;
}
