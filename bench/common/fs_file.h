/* SPDX-License-Identifier: MIT */
/*
 * The file of the fs workload (docs/BENCHMARKS.md), shared by
 * treadle-bench (bench_fs.c) and the C peers (peers/libuv/fs.c); the Go peer
 * (peers/go/fs.go) does the same in Go.  Every implementation reads the very
 * same file: same place, same size, same bytes.
 *
 *   where:  --dir D, else the build directory (the nearest ancestor of the
 *           program's own directory that holds CMakeCache.txt: treadle-bench
 *           and bench-libuv sit in <build>/bench, bench-go in <build>), else
 *           $TMPDIR, else /var/tmp; a default on tmpfs is passed over, since
 *           a tmpfs file is nothing but page cache and there is no cold path
 *           to measure.  The name is treadle-fs-<S>MiB.dat.
 *   what:   the i-th 8-byte word (little-endian) is fs_word(i), so that a
 *           read at offset off must begin with fs_word(off / 8): each read is
 *           checked for its length and for landing where it was asked.
 *   how:    made once by whichever implementation runs first: written to a
 *           temporary name, synced and renamed, so that two that race each
 *           make a whole file and the later rename simply wins.  Then read
 *           once whole on every run, so that it is in the page cache.
 */
#ifndef TDL_BENCH_FS_FILE_H
#define TDL_BENCH_FS_FILE_H

#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <unistd.h>

#define FS_BLOCK 4096
#define FS_CHUNK (1 << 20) /* creation and warming go a MiB at a time */
#define FS_SEED 0x74726561646c65ull /* "treadle" */
#define FS_TMPFS_MAGIC 0x01021994

/* Word i of the file: splitmix64 (bench_rand) at step i, so any word can be
 * computed without the ones before it. */
static inline uint64_t fs_word(uint64_t i)
{
  uint64_t s = FS_SEED + i * 0x9e3779b97f4a7c15ull;
  return bench_rand(&s);
}

/* The next random 4 KiB-aligned offset of a reader whose PRNG state is *seed
 * (reader i, fiber or request or goroutine, starts at seed i + 1). */
static inline off_t fs_offset(uint64_t *seed, uint64_t blocks)
{
  return (off_t)(bench_rand(seed) % blocks) * FS_BLOCK;
}

/* The check after every read: n is its result (bytes, or -errno).  A short
 * read, an error or a block with the wrong contents ends the run without a
 * RESULT line. */
static inline void fs_check(const char *impl, ssize_t n, const unsigned char *buf, off_t off)
{
  if (n != FS_BLOCK)
    bench_die("%s: read at %lld returned %zd%s%s", impl, (long long)off, n, n < 0 ? ": " : "",
              n < 0 ? strerror((int)-n) : "");
  uint64_t w = 0;
  for (int i = 7; i >= 0; i--) /* little-endian, whatever the host */
    w = w << 8 | buf[i];
  if (w != fs_word((uint64_t)off / 8))
    bench_die("%s: read at %lld: wrong data", impl, (long long)off);
}

static inline bool fs_is_tmpfs(const char *dir)
{
  struct statfs sf;
  return statfs(dir, &sf) == 0 && sf.f_type == FS_TMPFS_MAGIC;
}

static inline bool fs_usable_dir(const char *dir)
{
  struct stat st;
  return dir && *dir && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, W_OK) == 0 &&
         !fs_is_tmpfs(dir);
}

/* The build directory (see the top of the file) into out, or false. */
static inline bool fs_build_dir(char *out, size_t size)
{
  char p[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", p, sizeof p - 1);
  if (len <= 0)
    return false;
  p[len] = '\0';
  for (char *slash; (slash = strrchr(p, '/')) != NULL && slash != p;) {
    *slash = '\0';
    char cache[PATH_MAX + 32];
    snprintf(cache, sizeof cache, "%s/CMakeCache.txt", p);
    if (access(cache, F_OK) == 0 && fs_usable_dir(p) && strlen(p) < size) {
      strcpy(out, p);
      return true;
    }
  }
  return false;
}

/* The file's directory: --dir, else the first usable default. */
static inline void fs_dir(int argc, char **argv, char *out, size_t size)
{
  const char *dir = bench_opt_str(argc, argv, "dir", NULL);
  if (dir) {
    if (fs_is_tmpfs(dir))
      fprintf(stderr, "fs: warning: %s is tmpfs: every read is a page-cache hit by construction\n", dir);
  } else if (fs_build_dir(out, size)) {
    return;
  } else if (fs_usable_dir(getenv("TMPDIR"))) {
    dir = getenv("TMPDIR");
  } else if (fs_usable_dir("/var/tmp")) {
    dir = "/var/tmp";
  } else {
    bench_die("fs: no disk-backed directory found for the file: give --dir");
  }
  if (strlen(dir) >= size)
    bench_die("fs: --dir too long");
  strcpy(out, dir);
}

static inline void fs_write_all(int fd, const unsigned char *p, size_t n, const char *path)
{
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      bench_die("fs: write %s: %s", path, w < 0 ? strerror(errno) : "wrote nothing");
    p += w;
    n -= (size_t)w;
  }
}

/* Make the file under its temporary name and rename it into place. */
static inline void fs_create(const char *path, long mib)
{
  char tmp[PATH_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    bench_die("fs: create %s: %s", tmp, strerror(errno));
  unsigned char *chunk = malloc(FS_CHUNK);
  if (!chunk)
    bench_die("fs: out of memory");
  fprintf(stderr, "fs: writing %s (%ld MiB)\n", path, mib);
  uint64_t word = 0;
  for (long c = 0; c < mib; c++) {
    for (size_t at = 0; at < FS_CHUNK; at += 8, word++) {
      uint64_t w = fs_word(word);
      for (int i = 0; i < 8; i++)
        chunk[at + (size_t)i] = (unsigned char)(w >> (8 * i));
    }
    fs_write_all(fd, chunk, FS_CHUNK, tmp);
  }
  free(chunk);
  /* Synced before the rename, so that a crash never leaves a file of the
   * right name and size with holes where the data should be. */
  if (fdatasync(fd) != 0 || close(fd) != 0)
    bench_die("fs: sync %s: %s", tmp, strerror(errno));
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    bench_die("fs: rename %s: %s", tmp, strerror(e));
  }
}

/* Find or make the file, read it once whole, and return its path in out. */
static inline void fs_prepare(int argc, char **argv, long mib, char *out, size_t size)
{
  char dir[PATH_MAX];
  fs_dir(argc, argv, dir, sizeof dir);
  if ((size_t)snprintf(out, size, "%s/treadle-fs-%ldMiB.dat", dir, mib) >= size)
    bench_die("fs: path too long");
  struct stat st;
  if (stat(out, &st) != 0 || st.st_size != (off_t)mib * FS_CHUNK)
    fs_create(out, mib);
  int fd = open(out, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    bench_die("fs: open %s: %s", out, strerror(errno));
  unsigned char *chunk = malloc(FS_CHUNK);
  if (!chunk)
    bench_die("fs: out of memory");
  off_t total = 0;
  for (;;) {
    ssize_t n = read(fd, chunk, FS_CHUNK);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      bench_die("fs: read %s: %s", out, strerror(errno));
    if (n == 0)
      break;
    total += n;
  }
  free(chunk);
  close(fd);
  if (total != (off_t)mib * FS_CHUNK)
    bench_die("fs: %s has %lld bytes, expected %lld", out, (long long)total, (long long)mib * FS_CHUNK);
}

/* Options every implementation takes: --reads N --fibers C --file-mib S. */
static inline void fs_parse(int argc, char **argv, long *reads, long *fibers, long *mib)
{
  *reads = bench_opt_long(argc, argv, "reads", 1000000);
  *fibers = bench_opt_long(argc, argv, "fibers", 64);
  *mib = bench_opt_long(argc, argv, "file-mib", 256);
  if (*reads < 1 || *fibers < 1 || *mib < 1 || *mib > (1L << 20)) {
    fprintf(stderr, "fs: need --reads >= 1, --fibers >= 1, --file-mib >= 1\n");
    exit(2);
  }
}

/* The RESULT line; extra ("" or " key=value ...") goes after the common keys. */
static inline void fs_report(const char *impl, const bench_span *s, long reads, long fibers, long mib,
                             const char *extra)
{
  bench_result(impl, "fs", s, "reads=%ld fibers=%ld file_mib=%ld us_per_read=%.3f cpu_us_per_read=%.3f reads_per_s=%.0f%s",
               reads, fibers, mib, s->wall_s * 1e6 / (double)reads, (s->user_s + s->sys_s) * 1e6 / (double)reads,
               (double)reads / s->wall_s, extra);
}

#endif
