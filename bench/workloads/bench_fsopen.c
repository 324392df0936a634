/* SPDX-License-Identifier: MIT */
/*
 * fsopen: C fibers open, read (up to 4 KiB, from offset 0) and close small
 * files that are in the page cache (fs_files.h), N opens in all, taking the
 * files in turn: what a program that checksums a tree does per file.
 * Through fs.h: tdl_fs_open, tdl_fs_pread, tdl_close.  Keys: us_per_open
 * (wall time over N), cpu_us_per_open (user+sys of the whole process, pool
 * threads included, over N), opens_per_s, and how many calls took each path
 * (direct, pool, ring: tdl_fs_stats_get over the measured span).
 *
 *   treadle-bench fsopen [--opens N] [--fibers C] [--files F] [--dir D]
 *                        [--backend epoll|uring] [--engine auto|pool|floor]
 *
 * impl=treadle-fsopen-<backend> for the engine auto, treadle-fsopen-pool for
 * the engine pool (every call on the pool: libuv's way); floor is no
 * treadle: one thread calls open, pread and close N times (impl=threads).
 */
#include <treadle.h>

#include "bench.h"
#include "fs_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long opens_left, opens_done, files;
static char **paths;
static const char *impl;

static void one(long i, unsigned char *buf)
{
  int fd = tdl_fs_open(paths[i], O_RDONLY, 0, TDL_FOREVER);
  if (fd < 0)
    bench_die("%s: open %s: %s", impl, paths[i], tdl_strerror(fd));
  ssize_t got = tdl_fs_pread(fd, buf, FSOPEN_MAX, 0, TDL_FOREVER);
  if (!fsopen_good(i, buf, got))
    bench_die("%s: read %s returned %zd, or the wrong bytes", impl, paths[i], got);
  int e = tdl_close(fd);
  if (e < 0)
    bench_die("%s: close: %s", impl, tdl_strerror(e));
}

static void *opener(void *arg)
{
  unsigned char *buf = arg;
  while (opens_left > 0) {
    long i = opens_done++ % files; /* the next file: the fibers take them in turn */
    opens_left--;
    one(i, buf);
  }
  return NULL;
}

static void run_fibers(tdl_loop *loop, unsigned char *bufs, long fibers, long n)
{
  opens_left = n;
  opens_done = 0;
  for (long i = 0; i < fibers; i++) {
    tdl_fiber_t h;
    if (tdl_fiber_spawn(&h, loop, opener, bufs + (size_t)i * FSOPEN_MAX, &(tdl_fiber_options){.detached = true}) <
        0)
      bench_die("fsopen: spawn");
  }
  int rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  if (rc < 0)
    bench_die("fsopen: tdl_loop_run: %s", tdl_strerror(rc));
  if (opens_done != n)
    bench_die("fsopen: %ld of %ld opens done", opens_done, n);
}

static void floor_opens(unsigned char *buf, long n)
{
  for (long k = 0; k < n; k++) {
    long i = k % files;
    int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      bench_die("threads: open %s: %s", paths[i], strerror(errno));
    ssize_t got = pread(fd, buf, FSOPEN_MAX, 0);
    if (!fsopen_good(i, buf, got))
      bench_die("threads: read %s returned %zd, or the wrong bytes", paths[i], got);
    close(fd);
  }
}

int bench_fsopen_main(int argc, char **argv)
{
  long opens, fibers;
  fsopen_parse(argc, argv, &opens, &fibers, &files);
  const char *ename = bench_opt_str(argc, argv, "engine", "auto");
  const char *bname = bench_opt_str(argc, argv, "backend", "epoll");
  bool plain = strcmp(ename, "floor") == 0;
  tdl_fs_engine engine = TDL_FS_AUTO;
  if (strcmp(ename, "pool") == 0)
    engine = TDL_FS_POOL;
  else if (!plain && strcmp(ename, "auto") != 0) {
    fprintf(stderr, "fsopen: --engine auto|pool|floor\n");
    return 2;
  }
  tdl_backend backend = TDL_BACKEND_EPOLL;
  if (strcmp(bname, "uring") == 0)
    backend = TDL_BACKEND_URING;
  else if (strcmp(bname, "epoll") != 0) {
    fprintf(stderr, "fsopen: --backend epoll|uring\n");
    return 2;
  }
  static char impl_buf[64];
  snprintf(impl_buf, sizeof impl_buf, "treadle-fsopen-%s", engine == TDL_FS_POOL ? "pool" : bname);
  impl = plain ? "threads" : impl_buf;

  paths = fsopen_prepare(argc, argv, files);
  unsigned char *bufs = malloc((size_t)fibers * FSOPEN_MAX); /* off the stacks: a pool thread may write them */
  if (!bufs)
    bench_die("fsopen: out of memory");

  bench_span sp;
  char extra[160] = "";
  if (plain) {
    floor_opens(bufs, files < opens ? files : opens); /* the same warm round as the fibers' */
    bench_begin(&sp);
    floor_opens(bufs, opens);
    bench_end(&sp);
  } else {
    int rc = tdl_fs_set_engine(engine);
    if (rc < 0)
      bench_die("fsopen: tdl_fs_set_engine: %s", tdl_strerror(rc));
    tdl_loop *loop;
    rc = tdl_loop_new(&loop, &(tdl_loop_options){.backend = backend});
    if (rc == -ENOSYS || rc == -EPERM || rc == -ENOMEM) {
      fprintf(stderr, "fsopen: no %s loop here (%s)\n", bname, tdl_strerror(rc));
      return 77;
    }
    if (rc < 0)
      bench_die("fsopen: no loop: %s", tdl_strerror(rc));
    /* Warm: the pool's threads (and the ring's workers) exist before the
     * clock starts, as Go's threads do after its warm round. */
    run_fibers(loop, bufs, fibers, fibers);
    tdl_fs_stats st0, st1;
    tdl_fs_stats_get(&st0);
    bench_begin(&sp);
    run_fibers(loop, bufs, fibers, opens);
    bench_end(&sp);
    tdl_fs_stats_get(&st1);
    if (tdl_loop_free(loop) < 0)
      bench_die("fsopen: tdl_loop_free");
    snprintf(extra, sizeof extra, " direct=%llu pool=%llu ring=%llu", (unsigned long long)(st1.direct - st0.direct),
             (unsigned long long)(st1.pool - st0.pool), (unsigned long long)(st1.ring - st0.ring));
  }
  free(bufs);
  free(paths[0]);
  free(paths);
  fsopen_report(impl, &sp, opens, fibers, files, extra);
  return 0;
}
