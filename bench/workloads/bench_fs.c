/* SPDX-License-Identifier: MIT */
/*
 * fs: C fibers read 4 KiB at random 4 KiB-aligned offsets of an S MiB file
 * that is in the page cache (fs_file.h), N reads in all, through fs.h's
 * tdl_fs_pread.  Keys: us_per_read (wall time over N), cpu_us_per_read
 * (user+sys of the whole process, pool threads included, over N),
 * reads_per_s, and how many reads took each path (direct, pool, nowait_miss:
 * tdl_fs_stats_get over the measured span).
 *
 *   treadle-bench fs [--reads N] [--fibers C] [--file-mib S] [--dir D]
 *                    [--engine auto|pool|direct|uring|floor]
 *
 * --engine picks tdl_fs_set_engine's mode (impl=treadle-fs-<engine>);
 * floor is no treadle at all: one thread calls pread(2) N times, the same
 * offsets drawn from the same C PRNGs in turn (impl=pread), the least a read
 * can cost.
 */
#include <treadle.h>

#include "bench.h"
#include "fs_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
  uint64_t seed;
  unsigned char *buf; /* its own, off the stack: a pool thread may write it */
} reader;

static long reads_left, reads_done;
static int file_fd;
static uint64_t file_blocks;
static const char *impl;

static void *read_loop(void *arg)
{
  reader *r = arg;
  while (reads_left > 0) {
    reads_left--;
    off_t off = fs_offset(&r->seed, file_blocks);
    fs_check(impl, tdl_fs_pread(file_fd, r->buf, FS_BLOCK, off, TDL_FOREVER), r->buf, off);
    reads_done++;
  }
  return NULL;
}

/* n reads by the C fibers on loop; returns when all are done. */
static void run_fibers(tdl_loop *loop, reader *readers, long fibers, long n)
{
  reads_left = n;
  reads_done = 0;
  for (long i = 0; i < fibers; i++) {
    tdl_fiber_t h;
    if (tdl_fiber_spawn(&h, loop, read_loop, &readers[i], &(tdl_fiber_options){.detached = true}) < 0)
      bench_die("fs: spawn");
  }
  int rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  if (rc < 0)
    bench_die("fs: tdl_loop_run: %s", tdl_strerror(rc));
  if (reads_done != n)
    bench_die("fs: %ld of %ld reads done", reads_done, n);
}

static void floor_reads(reader *readers, long fibers, long n)
{
  for (long i = 0; i < n; i++) {
    reader *r = &readers[i % fibers];
    off_t off = fs_offset(&r->seed, file_blocks);
    ssize_t got = pread(file_fd, r->buf, FS_BLOCK, off);
    fs_check(impl, got < 0 ? -errno : got, r->buf, off);
  }
}

static void free_readers(reader *readers, long fibers)
{
  for (long i = 0; i < fibers; i++)
    free(readers[i].buf);
  free(readers);
}

static int engine_of(const char *name, tdl_fs_engine *out)
{
  static const struct {
    const char *name;
    tdl_fs_engine engine;
  } engines[] = {{"auto", TDL_FS_AUTO}, {"pool", TDL_FS_POOL}, {"direct", TDL_FS_DIRECT}, {"uring", TDL_FS_URING}};
  for (size_t i = 0; i < sizeof engines / sizeof engines[0]; i++) {
    if (strcmp(name, engines[i].name) == 0) {
      *out = engines[i].engine;
      return 0;
    }
  }
  return -1;
}

int bench_fs_main(int argc, char **argv)
{
  long reads, fibers, mib;
  fs_parse(argc, argv, &reads, &fibers, &mib);
  const char *ename = bench_opt_str(argc, argv, "engine", "auto");
  bool plain = strcmp(ename, "floor") == 0;
  tdl_fs_engine engine = TDL_FS_AUTO;
  if (!plain && engine_of(ename, &engine) < 0) {
    fprintf(stderr, "fs: --engine auto|pool|direct|uring|floor\n");
    return 2;
  }
  static char impl_buf[64];
  snprintf(impl_buf, sizeof impl_buf, "treadle-fs-%s", ename);
  impl = plain ? "pread" : impl_buf;

  char path[PATH_MAX];
  fs_prepare(argc, argv, mib, path, sizeof path);
  file_fd = open(path, O_RDONLY | O_CLOEXEC);
  if (file_fd < 0)
    bench_die("fs: open %s: %s", path, strerror(errno));
  file_blocks = (uint64_t)mib * (FS_CHUNK / FS_BLOCK);
  reader *readers = calloc((size_t)fibers, sizeof *readers);
  if (!readers)
    bench_die("fs: out of memory");
  for (long i = 0; i < fibers; i++) {
    readers[i].seed = (uint64_t)i + 1;
    if (posix_memalign((void **)&readers[i].buf, FS_BLOCK, FS_BLOCK) != 0)
      bench_die("fs: out of memory");
  }

  bench_span sp;
  if (plain) {
    floor_reads(readers, fibers, fibers); /* the same warm round as the fibers' */
    bench_begin(&sp);
    floor_reads(readers, fibers, reads);
    bench_end(&sp);
    free_readers(readers, fibers);
    close(file_fd);
    fs_report(impl, &sp, reads, fibers, mib, "");
    return 0;
  }

  int rc = tdl_fs_set_engine(engine);
  if (rc < 0)
    bench_die("fs: tdl_fs_set_engine: %s", tdl_strerror(rc));
  tdl_loop *loop;
  /* The uring engine needs a uring loop; the others take $TDL_BACKEND. */
  tdl_loop_options lo = {.backend = engine == TDL_FS_URING ? TDL_BACKEND_URING : TDL_BACKEND_DEFAULT};
  if (tdl_loop_new(&loop, &lo) < 0)
    bench_die("fs: no loop");
  /* Warm: one read per fiber first, so that the pool's threads (engine
   * pool, or auto's misses) exist before the clock starts, as libuv's and
   * Go's do after their first reads. */
  run_fibers(loop, readers, fibers, fibers);
  tdl_fs_stats st0, st1;
  tdl_fs_stats_get(&st0);
  bench_begin(&sp);
  run_fibers(loop, readers, fibers, reads);
  bench_end(&sp);
  tdl_fs_stats_get(&st1);
  if (tdl_loop_free(loop) < 0)
    bench_die("fs: tdl_loop_free");
  free_readers(readers, fibers);
  close(file_fd);
  char paths[160];
  snprintf(paths, sizeof paths, " direct=%llu pool=%llu ring=%llu nowait_miss=%llu",
           (unsigned long long)(st1.direct - st0.direct), (unsigned long long)(st1.pool - st0.pool),
           (unsigned long long)(st1.ring - st0.ring), (unsigned long long)(st1.nowait_miss - st0.nowait_miss));
  fs_report(impl, &sp, reads, fibers, mib, paths);
  return 0;
}
