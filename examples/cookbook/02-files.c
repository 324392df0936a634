/* SPDX-License-Identifier: MIT */
/*
 * # Files and directories from many fibers
 *
 * A file read that misses the page cache, an open in a cold directory, an
 * fsync: called directly in a fiber, each stalls every fiber of the loop.
 * The `tdl_fs_*` calls (fs.h) park only the calling fiber: a read the page
 * cache can answer costs one system call and no thread; what must wait runs
 * on the pool's file lane, or, on a loop with the io_uring back end, in the
 * kernel (opens and stats too).
 *
 * - Read a directory with `tdl_fs_readdir`: many entries per call, each
 *   with its type, so a walk needs no stat per entry.
 * - Bound what is open at once: every open file is an fd.  Here a semaphore
 *   of 16 permits is taken before each open and given back after the
 *   close, and no fiber waits for a permit while it holds one (a directory
 *   is read whole and closed before its subdirectories are walked), so the
 *   walk cannot deadlock on its own bound.
 * - A fiber per directory, a wait group to know when all are done.
 * - One deadline for the whole job, passed to every call.
 * - A program that is done with the pool shuts it down
 *   (`tdl_pool_shutdown`), so that it ends with no thread left running.
 *
 * The program makes a tree of 13 directories and 260 files with the same
 * calls, walks it counting files, bytes and lines, checks the counts
 * against what it wrote, and removes the tree.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <treadle.h>

#define FANOUT 3        /* subdirectories per directory */
#define DEPTH 2         /* levels below the top */
#define FILES 20        /* files per directory */
#define MAX_OPEN 16     /* files and directories open at once */

static tdl_time_t deadline;
static tdl_sem open_files;
static tdl_waitgroup walkers;
static long n_dirs, n_files, n_bytes, n_lines, n_errors; /* one loop: no atomics */

static void count_file(const char *path)
{
  char buf[4096];
  ssize_t n;
  if (tdl_sem_acquire(&open_files, deadline) < 0) {
    n_errors++;
    return;
  }
  int fd = tdl_fs_open(path, O_RDONLY, 0, deadline);
  if (fd < 0) {
    n_errors++;
  } else {
    while ((n = tdl_fs_read(fd, buf, sizeof buf, deadline)) > 0) {
      n_bytes += n;
      for (ssize_t i = 0; i < n; i++)
        n_lines += buf[i] == '\n';
    }
    n_errors += n < 0;
    n_files++;
    tdl_close(fd);
  }
  tdl_sem_release(&open_files);
}

static void *walk(void *arg) /* a fiber per directory; owns the path */
{
  char *dir = arg;
  tdl_fs_dirent ents[32];
  size_t n_kept = 0;
  tdl_fs_dirent *kept = NULL; /* the whole directory, read before anything else is opened */
  int n = -1, fd = -1;
  if (tdl_sem_acquire(&open_files, deadline) == 0) {
    fd = tdl_fs_open(dir, O_RDONLY | O_DIRECTORY, 0, deadline);
    while (fd >= 0 && (n = tdl_fs_readdir(fd, ents, 32, deadline)) > 0) {
      tdl_fs_dirent *more = realloc(kept, (n_kept + (size_t)n) * sizeof *kept);
      if (!more)
        break;
      kept = more;
      memcpy(kept + n_kept, ents, (size_t)n * sizeof *ents);
      n_kept += (size_t)n;
    }
    if (fd >= 0)
      tdl_close(fd);
    tdl_sem_release(&open_files);
  }
  n_errors += n != 0;
  n_dirs++;
  for (size_t i = 0; i < n_kept; i++) {
    char *path;
    if (asprintf(&path, "%s/%s", dir, kept[i].name) < 0) {
      n_errors++;
      continue;
    }
    if (kept[i].type == DT_DIR) { /* DT_UNKNOWN would need tdl_fs_fstatat: not on the usual file systems */
      tdl_waitgroup_add(&walkers, 1);
      if (tdl_fiber_spawn(NULL, tdl_fiber_loop(), walk, path, &(tdl_fiber_options){.detached = true}) == 0)
        continue;
      tdl_waitgroup_done(&walkers);
      n_errors++;
    } else if (kept[i].type == DT_REG) {
      count_file(path);
    }
    free(path);
  }
  free(kept);
  free(dir);
  tdl_waitgroup_done(&walkers);
  return NULL;
}

/* ---- making and removing the tree, with the same calls ---- */

static long made_bytes, made_lines;

/* dir/<kind><i> into path[256]. */
static int entry(char *path, const char *dir, char kind, int i)
{
  return snprintf(path, 256, "%s/%c%d", dir, kind, i) < 256 ? 0 : -ENAMETOOLONG;
}

static int make_tree(const char *dir, int depth)
{
  char path[256], text[256] = "";
  int e = tdl_fs_mkdir(dir, 0755, deadline);
  for (int i = 0; e == 0 && i < FILES && (e = entry(path, dir, 'f', i)) == 0; i++) {
    int fd = tdl_fs_open(path, O_WRONLY | O_CREAT | O_EXCL, 0644, deadline);
    size_t len = strlen(strcat(text, "a line\n")); /* file i holds i + 1 lines */
    e = fd < 0 ? fd : tdl_fs_write(fd, text, len, deadline) == (ssize_t)len ? 0 : -EIO;
    made_bytes += (long)len, made_lines += i + 1;
    if (fd >= 0)
      tdl_close(fd);
  }
  for (int i = 0; e == 0 && depth < DEPTH && i < FANOUT; i++)
    if ((e = entry(path, dir, 'd', i)) == 0)
      e = make_tree(path, depth + 1);
  return e;
}

static void remove_tree(const char *dir, int depth)
{
  char path[256];
  for (int i = 0; i < FILES; i++)
    if (entry(path, dir, 'f', i) == 0)
      tdl_fs_unlink(path, deadline);
  for (int i = 0; depth < DEPTH && i < FANOUT; i++)
    if (entry(path, dir, 'd', i) == 0)
      remove_tree(path, depth + 1);
  tdl_fs_rmdir(dir, deadline);
}

static void *program(void *arg)
{
  const char *top = arg;
  deadline = tdl_after(30 * TDL_SEC);
  if (make_tree(top, 0) < 0)
    return (void *)1;
  tdl_sem_init(&open_files, MAX_OPEN, MAX_OPEN);
  tdl_waitgroup_init(&walkers);
  tdl_waitgroup_add(&walkers, 1);
  int e = tdl_fiber_spawn(NULL, tdl_fiber_loop(), walk, strdup(top), &(tdl_fiber_options){.detached = true});
  if (e == 0)
    e = tdl_waitgroup_wait(&walkers, deadline);
  remove_tree(top, 0);
  printf("files: %s; %ld directories, %ld files, %ld bytes, %ld lines, %ld errors\n", tdl_strerror(e), n_dirs,
         n_files, n_bytes, n_lines, n_errors);
  return (void *)(intptr_t)(e < 0 || n_errors || n_dirs != 13 || n_files != 13 * FILES || n_bytes != made_bytes ||
                            n_lines != made_lines);
}

int main(void)
{
  char top[64];
  snprintf(top, sizeof top, "/tmp/treadle-files-%d", (int)getpid());
  void *failed = (void *)1;
  int e = tdl_fiber_main(program, top, &failed);
  if (e == 0)
    e = tdl_pool_shutdown(tdl_after(5 * TDL_SEC)); /* the pool's threads are joined */
  if (e < 0)
    fprintf(stderr, "files: %s\n", tdl_strerror(e));
  return e == 0 && !failed ? 0 : 1;
}
