/* SPDX-License-Identifier: MIT */
/* fs (docs/BENCHMARKS.md) on libuv: uv_fs_read of 4 KiB at random offsets
 * of the workload's file (../../fs_file.h), C requests in flight on libuv's
 * pool (each one's callback issues the next), N reads in all.  libuv 1.44
 * (Debian 12) runs every file request on its thread pool; UV_THREADPOOL_SIZE
 * is libuv's (default 4) unless set. */
#include <stdint.h>
#include <stdlib.h>
#include <uv.h>

#include "fs_file.h"
#include "../peer.h"

typedef struct fs_req {
  uv_fs_t req; /* first: the callback gets &req */
  uint64_t seed;
  off_t off;
  uv_buf_t buf;
} fs_req;

static long reads_left, reads_done;
static uv_loop_t loop;
static uv_file file;
static uint64_t file_blocks;

static void on_read(uv_fs_t *req);

static void issue(fs_req *r)
{
  if (reads_left <= 0)
    return;
  reads_left--;
  r->off = fs_offset(&r->seed, file_blocks);
  int rc = uv_fs_read(&loop, &r->req, file, &r->buf, 1, r->off, on_read);
  if (rc < 0)
    bench_die("uv_fs_read: %s", uv_strerror(rc));
}

static void on_read(uv_fs_t *req)
{
  fs_req *r = (fs_req *)req;
  ssize_t n = req->result; /* bytes, or a negative errno as libuv's UV_E* are */
  uv_fs_req_cleanup(req);
  fs_check("libuv", n, (const unsigned char *)r->buf.base, r->off);
  reads_done++;
  issue(r);
}

static void run(long n, long fibers, fs_req *reqs)
{
  reads_left = n;
  reads_done = 0;
  for (long i = 0; i < fibers; i++)
    issue(&reqs[i]);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (reads_done != n)
    bench_die("fs: %ld of %ld reads done", reads_done, n);
}

int bench_fs_main(int argc, char **argv)
{
  long reads, fibers, mib;
  fs_parse(argc, argv, &reads, &fibers, &mib);
  char path[PATH_MAX];
  fs_prepare(argc, argv, mib, path, sizeof path);
  file = open(path, O_RDONLY | O_CLOEXEC);
  if (file < 0)
    bench_die("fs: open %s: %s", path, strerror(errno));
  file_blocks = (uint64_t)mib * (FS_CHUNK / FS_BLOCK);
  int rc = uv_loop_init(&loop);
  if (rc < 0)
    bench_die("uv_loop_init: %s", uv_strerror(rc));
  fs_req *reqs = calloc((size_t)fibers, sizeof *reqs);
  if (!reqs)
    bench_die("out of memory");
  for (long i = 0; i < fibers; i++) {
    void *buf;
    if (posix_memalign(&buf, FS_BLOCK, FS_BLOCK) != 0)
      bench_die("out of memory");
    reqs[i].seed = (uint64_t)i + 1;
    reqs[i].buf = uv_buf_init(buf, FS_BLOCK);
  }
  run(fibers, fibers, reqs); /* warm: the pool's threads exist */
  bench_span sp;
  bench_begin(&sp);
  run(reads, fibers, reqs);
  bench_end(&sp);
  for (long i = 0; i < fibers; i++)
    free(reqs[i].buf.base);
  free(reqs);
  uv_loop_close(&loop);
  close(file);
  fs_report("libuv", &sp, reads, fibers, mib, "");
  return 0;
}
