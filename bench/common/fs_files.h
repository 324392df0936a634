/* SPDX-License-Identifier: MIT */
/*
 * The files of the fsopen workload (docs/BENCHMARKS.md), shared by
 * treadle-bench's drivers (bench_fsopen.c); the Go peer (peers/go/fsopen.go)
 * does the same in Go.  Every implementation opens the very same files.
 *
 *   where:  the directory treadle-fsopen-<N> in the fs workload's directory
 *           (fs_file.h: --dir, else the build directory, ...).
 *   what:   N files f00000, f00001, ...; file i holds fsopen_size(i) bytes
 *           (64 to 4096), byte j of it being fsopen_byte(i, j): a read of
 *           file i is checked for its length and its first and last bytes.
 *   how:    made once by whichever implementation runs first, in a
 *           temporary directory renamed into place whole (a racing second
 *           maker finds the name taken and removes its own); then every file
 *           is read once on every run, so that all are in the page cache.
 */
#ifndef TDL_BENCH_FS_FILES_H
#define TDL_BENCH_FS_FILES_H

#include "fs_file.h"

#define FSOPEN_MAX 4096 /* the largest file, and the read asked for */

static inline size_t fsopen_size(long i) { return 64 + (size_t)((i * 1009) % (FSOPEN_MAX - 63)); }
static inline unsigned char fsopen_byte(long i, size_t j) { return (unsigned char)(i * 131 + (long)j * 7); }

/* Whether what a read of file i returned is the file. */
static inline bool fsopen_good(long i, const unsigned char *buf, ssize_t got)
{
  size_t n = fsopen_size(i);
  return got == (ssize_t)n && buf[0] == fsopen_byte(i, 0) && buf[n - 1] == fsopen_byte(i, n - 1);
}

static inline void fsopen_create(const char *dir, long files)
{
  char tmp[PATH_MAX + 64], path[PATH_MAX + 96];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dir, (long)getpid());
  if (mkdir(tmp, 0755) != 0)
    bench_die("fsopen: mkdir %s: %s", tmp, strerror(errno));
  fprintf(stderr, "fsopen: writing %ld files in %s\n", files, dir);
  unsigned char buf[FSOPEN_MAX];
  for (long i = 0; i < files; i++) {
    snprintf(path, sizeof path, "%s/f%05ld", tmp, i);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      bench_die("fsopen: create %s: %s", path, strerror(errno));
    size_t n = fsopen_size(i);
    for (size_t j = 0; j < n; j++)
      buf[j] = fsopen_byte(i, j);
    fs_write_all(fd, buf, n, path);
    close(fd);
  }
  if (rename(tmp, dir) != 0) {
    int e = errno;
    char cmd[PATH_MAX + 100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0 || (e != EEXIST && e != ENOTEMPTY))
      bench_die("fsopen: rename %s: %s", tmp, strerror(e));
  }
}

/* Find or make the files, read each once, and return their paths: paths[i]
 * is file i's (free(paths[0]), then free(paths)). */
static inline char **fsopen_prepare(int argc, char **argv, long files)
{
  char top[PATH_MAX], dir[PATH_MAX + 32];
  fs_dir(argc, argv, top, sizeof top);
  snprintf(dir, sizeof dir, "%s/treadle-fsopen-%ld", top, files);
  struct stat st;
  char last[PATH_MAX + 64];
  snprintf(last, sizeof last, "%s/f%05ld", dir, files - 1);
  if (stat(last, &st) != 0 || st.st_size != (off_t)fsopen_size(files - 1))
    fsopen_create(dir, files);
  size_t each = strlen(dir) + 8;
  char **paths = malloc((size_t)files * sizeof *paths);
  char *all = malloc((size_t)files * each);
  if (!paths || !all)
    bench_die("fsopen: out of memory");
  unsigned char buf[FSOPEN_MAX];
  for (long i = 0; i < files; i++) {
    paths[i] = all + (size_t)i * each;
    snprintf(paths[i], each, "%s/f%05ld", dir, i);
    int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
    ssize_t got = fd < 0 ? -1 : pread(fd, buf, sizeof buf, 0);
    if (!fsopen_good(i, buf, got))
      bench_die("fsopen: %s is not what it should be", paths[i]);
    close(fd);
  }
  return paths;
}

static inline void fsopen_parse(int argc, char **argv, long *opens, long *fibers, long *files)
{
  *opens = bench_opt_long(argc, argv, "opens", 200000);
  *fibers = bench_opt_long(argc, argv, "fibers", 64);
  *files = bench_opt_long(argc, argv, "files", 1000);
  if (*opens < 1 || *fibers < 1 || *files < 1 || *files > 99999) {
    fprintf(stderr, "fsopen: need --opens >= 1, --fibers >= 1, --files 1 to 99999\n");
    exit(2);
  }
}

static inline void fsopen_report(const char *impl, const bench_span *s, long opens, long fibers, long files,
                                 const char *extra)
{
  bench_result(impl, "fsopen", s,
               "opens=%ld fibers=%ld files=%ld us_per_open=%.3f cpu_us_per_open=%.3f opens_per_s=%.0f%s", opens,
               fibers, files, s->wall_s * 1e6 / (double)opens, (s->user_s + s->sys_s) * 1e6 / (double)opens,
               (double)opens / s->wall_s, extra);
}

#endif
