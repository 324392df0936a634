/* SPDX-License-Identifier: MIT */
/* Directories and metadata from fibers (fs.h): openat, lstat, fstatat,
 * statx, readdir; the ring's path on uring loops and its fallback. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"
#include "loop_fixture.h"

#ifdef TDL_FAULTS
#include "base/fault.h"
#endif

#define LONG T_HANG /* a deadline no test should reach */

#ifndef STATX_TYPE
/* musl before 1.2.5 declares no struct statx, and its build has no kernel
 * headers: the kernel's, as fs.h says a caller then takes it. */
struct statx_timestamp {
  int64_t tv_sec;
  uint32_t tv_nsec;
  int32_t reserved;
};
struct statx {
  uint32_t stx_mask, stx_blksize;
  uint64_t stx_attributes;
  uint32_t stx_nlink, stx_uid, stx_gid;
  uint16_t stx_mode, pad1;
  uint64_t stx_ino, stx_size, stx_blocks, stx_attributes_mask;
  struct statx_timestamp stx_atime, stx_btime, stx_ctime, stx_mtime;
  uint32_t stx_rdev_major, stx_rdev_minor, stx_dev_major, stx_dev_minor;
  uint64_t spare[14];
};
#define STATX_TYPE 0x1U
#define STATX_MODE 0x2U
#define STATX_SIZE 0x200U
#define STATX_BASIC_STATS 0x7ffU
#endif

/* Each test works in its own directory under the current one. */
static char dir[64];

static int dirs_setup(void **state)
{
  snprintf(dir, sizeof dir, "fs-dirs-%d", (int)getpid());
  assert_int_equal(mkdir(dir, 0755), 0);
  assert_int_equal(tdl_fs_set_engine(TDL_FS_AUTO), 0);
  return setup(state);
}

static int dirs_teardown(void **state)
{
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
  return teardown(state);
}

static const char *at(const char *name)
{
  static char buf[4][128];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, 128, "%s/%s", dir, name);
  return p;
}

static void run_fiber(void *(*fn)(void *))
{
  go(fn, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static bool uring(void) { return strcmp(tdl_loop_backend(tdl_fiber_loop()), "uring") == 0; }

static void make_file(const char *path, const char *text)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

/* ---- openat and the stats, end to end ---- */

/* What the ring's statx, converted, and the pool's fstatat both say. */
static void same_stat(const struct stat *a, const struct stat *b)
{
  assert_int_equal(a->st_dev, b->st_dev);
  assert_int_equal(a->st_ino, b->st_ino);
  assert_int_equal(a->st_mode, b->st_mode);
  assert_int_equal(a->st_nlink, b->st_nlink);
  assert_int_equal(a->st_uid, b->st_uid);
  assert_int_equal(a->st_gid, b->st_gid);
  assert_int_equal(a->st_size, b->st_size);
  assert_int_equal(a->st_mtim.tv_sec, b->st_mtim.tv_sec);
  assert_int_equal(a->st_mtim.tv_nsec, b->st_mtim.tv_nsec);
}

static void *metadata_fiber(void *arg)
{
  (void)arg;
  tdl_time_t d = tdl_after(LONG);
  tdl_fs_stats s0, s1;
  int dfd = tdl_fs_open(dir, O_RDONLY | O_DIRECTORY, 0, d);
  assert_true(dfd >= 0);

  /* openat: below dfd, close-on-exec; the ring's way on uring loops. */
  tdl_fs_stats_get(&s0);
  int fd = tdl_fs_openat(dfd, "f", O_RDWR | O_CREAT | O_EXCL, 0640, d);
  tdl_fs_stats_get(&s1);
  assert_true(fd >= 0);
  assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  if (uring()) {
    assert_int_equal(s1.ring, s0.ring + 1);
    assert_int_equal(s1.pool, s0.pool);
  } else {
    assert_int_equal(s1.pool, s0.pool + 1);
    assert_int_equal(s1.ring, s0.ring);
  }
  assert_int_equal(tdl_fs_write(fd, "twelve bytes", 12, d), 12);
  assert_int_equal(tdl_fs_openat(dfd, "f", O_RDWR | O_CREAT | O_EXCL, 0640, d), -EEXIST);
  assert_int_equal(tdl_fs_openat(dfd, "missing", O_RDONLY, 0, d), -ENOENT);

  /* fstatat, stat, lstat agree with the libc's, and with each other. */
  struct stat want, st;
  assert_int_equal(fstat(fd, &want), 0);
  tdl_fs_stats_get(&s0);
  assert_int_equal(tdl_fs_fstatat(dfd, "f", &st, 0, d), 0);
  tdl_fs_stats_get(&s1);
  assert_int_equal(uring() ? s1.ring - s0.ring : s1.pool - s0.pool, 1);
  same_stat(&st, &want);
  assert_int_equal(st.st_size, 12);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(tdl_fs_stat(at("f"), &st, d), 0);
  same_stat(&st, &want);
  assert_int_equal(tdl_fs_lstat(at("f"), &st, d), 0);
  same_stat(&st, &want);

  /* A symbolic link: stat follows it, lstat and NOFOLLOW do not. */
  assert_int_equal(symlinkat("f", dfd, "link"), 0);
  struct stat lwant;
  assert_int_equal(fstatat(dfd, "link", &lwant, AT_SYMLINK_NOFOLLOW), 0);
  assert_int_equal(tdl_fs_stat(at("link"), &st, d), 0);
  same_stat(&st, &want);
  assert_int_equal(tdl_fs_lstat(at("link"), &st, d), 0);
  assert_true(S_ISLNK(st.st_mode));
  same_stat(&st, &lwant);
  assert_int_equal(tdl_fs_fstatat(dfd, "link", &st, AT_SYMLINK_NOFOLLOW, d), 0);
  assert_true(S_ISLNK(st.st_mode));
  /* AT_EMPTY_PATH: the directory itself. */
  struct stat dwant;
  assert_int_equal(fstat(dfd, &dwant), 0);
  assert_int_equal(tdl_fs_fstatat(dfd, "", &st, AT_EMPTY_PATH, d), 0);
  same_stat(&st, &dwant);
  assert_int_equal(tdl_fs_fstatat(dfd, "", &st, 0, d), -ENOENT);

  /* statx: what the mask asks for, and the links as fstatat's flags say. */
  struct statx sx;
  memset(&sx, 0xa5, sizeof sx);
  tdl_fs_stats_get(&s0);
  assert_int_equal(tdl_fs_statx(dfd, "f", 0, STATX_BASIC_STATS, &sx, d), 0);
  tdl_fs_stats_get(&s1);
  assert_int_equal(uring() ? s1.ring - s0.ring : s1.pool - s0.pool, 1);
  assert_true((sx.stx_mask & STATX_BASIC_STATS) == STATX_BASIC_STATS);
  assert_int_equal(sx.stx_size, 12);
  assert_int_equal(sx.stx_ino, want.st_ino);
  assert_int_equal(sx.stx_mode, want.st_mode);
  assert_int_equal(tdl_fs_statx(dfd, "link", AT_SYMLINK_NOFOLLOW, STATX_TYPE, &sx, d), 0);
  assert_true(S_ISLNK(sx.stx_mode));
  assert_int_equal(tdl_fs_statx(dfd, "link", 0, STATX_TYPE | STATX_SIZE, &sx, d), 0);
  assert_true(S_ISREG(sx.stx_mode));
  assert_int_equal(sx.stx_size, 12);
  assert_int_equal(tdl_fs_statx(AT_FDCWD, at("missing"), 0, STATX_TYPE, &sx, d), -ENOENT);

  /* The other engines take the pool's or the thread's way on every back end. */
  assert_int_equal(tdl_fs_set_engine(TDL_FS_POOL), 0);
  tdl_fs_stats_get(&s0);
  int fd2 = tdl_fs_openat(dfd, "f", O_RDONLY, 0, d);
  assert_true(fd2 >= 0);
  assert_int_equal(tdl_fs_lstat(at("f"), &st, d), 0);
  tdl_fs_stats_get(&s1);
  assert_int_equal(s1.pool, s0.pool + 2);
  assert_int_equal(s1.ring, s0.ring);
  assert_int_equal(tdl_close(fd2), 0);
  assert_int_equal(tdl_fs_set_engine(TDL_FS_DIRECT), 0);
  tdl_fs_stats_get(&s0);
  assert_int_equal(tdl_fs_fstatat(dfd, "f", &st, 0, d), 0);
  assert_int_equal(st.st_size, 12);
  tdl_fs_stats_get(&s1);
  assert_int_equal(s1.direct, s0.direct + 1);
  assert_int_equal(tdl_fs_set_engine(TDL_FS_AUTO), 0);

  assert_int_equal(tdl_close(fd), 0);
  assert_int_equal(tdl_close(dfd), 0);
  return NULL;
}

static void metadata(void **state)
{
  (void)state;
  run_fiber(metadata_fiber);
}

/* ---- bad input and misuse ---- */

static void *bad_input_fiber(void *arg)
{
  (void)arg;
  tdl_time_t d = tdl_after(LONG);
  struct stat st;
  struct statx sx;
  tdl_fs_dirent ents[4];
  make_file(at("plain"), "x");
  int dfd = tdl_fs_open(dir, O_RDONLY | O_DIRECTORY, 0, d);
  assert_true(dfd >= 0);
  int ffd = tdl_fs_open(at("plain"), O_RDONLY, 0, d);
  assert_true(ffd >= 0);

  /* NULL pointers. */
  assert_int_equal(tdl_fs_openat(dfd, NULL, O_RDONLY, 0, d), -EFAULT);
  assert_int_equal(tdl_fs_lstat(NULL, &st, d), -EFAULT);
  assert_int_equal(tdl_fs_lstat(dir, NULL, d), -EFAULT);
  assert_int_equal(tdl_fs_fstatat(dfd, NULL, &st, 0, d), -EFAULT);
  assert_int_equal(tdl_fs_fstatat(dfd, "plain", NULL, 0, d), -EFAULT);
  assert_int_equal(tdl_fs_statx(dfd, NULL, 0, STATX_TYPE, &sx, d), -EFAULT);
  assert_int_equal(tdl_fs_statx(dfd, "plain", 0, STATX_TYPE, NULL, d), -EFAULT);
  assert_int_equal(tdl_fs_readdir(dfd, NULL, 4, d), -EFAULT);

  /* Bad directory fds: none, and a file. */
  assert_int_equal(tdl_fs_openat(-5, "plain", O_RDONLY, 0, d), -EBADF);
  assert_int_equal(tdl_fs_fstatat(9999, "plain", &st, 0, d), -EBADF);
  assert_int_equal(tdl_fs_statx(-7, "plain", 0, STATX_TYPE, &sx, d), -EBADF);
  assert_int_equal(tdl_fs_openat(ffd, "x", O_RDONLY, 0, d), -ENOTDIR);
  assert_int_equal(tdl_fs_fstatat(ffd, "x", &st, 0, d), -ENOTDIR);
  assert_int_equal(tdl_fs_statx(ffd, "x", 0, STATX_TYPE, &sx, d), -ENOTDIR);
  /* An absolute path ignores dirfd, as openat(2) says. */
  char abs[4096];
  assert_non_null(realpath(at("plain"), abs));
  int fd = tdl_fs_openat(-5, abs, O_RDONLY, 0, d);
  assert_true(fd >= 0);
  assert_int_equal(tdl_close(fd), 0);

  /* Bad flags, on whichever path. */
  assert_int_equal(tdl_fs_fstatat(dfd, "plain", &st, 0x40000000, d), -EINVAL);
  assert_int_equal(tdl_fs_statx(dfd, "plain", 0x40000000, STATX_TYPE, &sx, d), -EINVAL);
  assert_int_equal(tdl_fs_openat(dfd, "t", O_TMPFILE | O_RDONLY, 0600, d), -EINVAL); /* O_TMPFILE needs write */
  /* On the ring, those EINVALs were the caller's, not a refusal: the ring
   * still takes opens and stats. */
  tdl_fs_stats s0, s1;
  tdl_fs_stats_get(&s0);
  fd = tdl_fs_openat(dfd, "plain", O_RDONLY, 0, d);
  assert_true(fd >= 0);
  assert_int_equal(tdl_close(fd), 0);
  assert_int_equal(tdl_fs_statx(dfd, "plain", 0, STATX_TYPE, &sx, d), 0);
  tdl_fs_stats_get(&s1);
  assert_int_equal(uring() ? s1.ring - s0.ring : s1.pool - s0.pool, 2);

  /* readdir: no room, a file, no fd. */
  assert_int_equal(tdl_fs_readdir(dfd, ents, 0, d), -EINVAL);
  assert_int_equal(tdl_fs_readdir(ffd, ents, 4, d), -ENOTDIR);
  assert_int_equal(tdl_fs_readdir(-1, ents, 4, d), -EBADF);
  assert_int_equal(tdl_close(ffd), 0);
  assert_int_equal(tdl_fs_readdir(ffd, ents, 4, d), -EBADF);

  /* Loops and missing parents. */
  assert_int_equal(symlinkat("loop", dfd, "loop"), 0);
  assert_int_equal(tdl_fs_stat(at("loop"), &st, d), -ELOOP);
  assert_int_equal(tdl_fs_lstat(at("loop"), &st, d), 0);
  assert_int_equal(tdl_fs_lstat(at("none/x"), &st, d), -ENOENT);
  assert_int_equal(tdl_fs_lstat(at("plain/x"), &st, d), -ENOTDIR);
  assert_int_equal(tdl_close(dfd), 0);
  return NULL;
}

static void bad_input(void **state)
{
  (void)state;
  run_fiber(bad_input_fiber);
}

static void outside_a_fiber(void **state)
{
  (void)state;
  struct stat st;
  struct statx sx;
  tdl_fs_dirent e;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  assert_true(dfd >= 0);
  assert_int_equal(tdl_fs_openat(dfd, "x", O_RDONLY | O_CREAT, 0644, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_fs_lstat(dir, &st, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_fs_fstatat(dfd, "", &st, AT_EMPTY_PATH, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_fs_statx(dfd, "", AT_EMPTY_PATH, STATX_TYPE, &sx, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_fs_readdir(dfd, &e, 1, TDL_FOREVER), -EPERM);
  assert_int_equal(faccessat(dfd, "x", F_OK, 0), -1); /* nothing was done */
  close(dfd);
}

/* ---- deadlines and cancels: nothing is done ---- */

static void *past_fiber(void *arg)
{
  (void)arg;
  struct stat st;
  struct statx sx;
  tdl_fs_dirent e;
  tdl_time_t past = tdl_now() - 1;
  int dfd = tdl_fs_open(dir, O_RDONLY | O_DIRECTORY, 0, tdl_after(LONG));
  assert_true(dfd >= 0);
  assert_int_equal(tdl_fs_openat(dfd, "new", O_RDWR | O_CREAT, 0644, past), -ETIMEDOUT);
  assert_int_equal(tdl_fs_lstat(dir, &st, past), -ETIMEDOUT);
  assert_int_equal(tdl_fs_fstatat(dfd, "", &st, AT_EMPTY_PATH, past), -ETIMEDOUT);
  assert_int_equal(tdl_fs_statx(dfd, "", AT_EMPTY_PATH, STATX_TYPE, &sx, past), -ETIMEDOUT);
  assert_int_equal(tdl_fs_readdir(dfd, &e, 1, past), -ETIMEDOUT);
  assert_int_equal(faccessat(dfd, "new", F_OK, 0), -1);
  assert_int_equal(tdl_close(dfd), 0);
  return NULL;
}

static void deadline_past(void **state)
{
  (void)state;
  run_fiber(past_fiber);
}

static int cancelled_checked;

static void *cancelled_fiber(void *arg)
{
  (void)arg;
  struct stat st;
  struct statx sx;
  tdl_fs_dirent e;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  assert_true(dfd >= 0);
  /* Parked until the test cancels it; cancellation is sticky. */
  assert_int_equal(tdl_sleep(tdl_after(LONG)), -ECANCELED);
  assert_int_equal(tdl_fs_openat(dfd, "new", O_RDWR | O_CREAT, 0644, tdl_after(LONG)), -ECANCELED);
  assert_int_equal(tdl_fs_lstat(dir, &st, tdl_after(LONG)), -ECANCELED);
  assert_int_equal(tdl_fs_statx(dfd, "", AT_EMPTY_PATH, STATX_TYPE, &sx, tdl_after(LONG)), -ECANCELED);
  assert_int_equal(tdl_fs_readdir(dfd, &e, 1, tdl_after(LONG)), -ECANCELED);
  assert_int_equal(faccessat(dfd, "new", F_OK, 0), -1);
  close(dfd);
  cancelled_checked = 1;
  return NULL;
}

static void *canceller(void *arg)
{
  tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(tdl_fiber_cancel(L, (tdl_fiber_t)(uintptr_t)arg), 0);
  return NULL;
}

static void cancelled(void **state)
{
  (void)state;
  cancelled_checked = 0;
  tdl_fiber_t f = go(cancelled_fiber, NULL);
  go(canceller, (void *)(uintptr_t)f);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_true(cancelled_checked);
}

/* ---- a FIFO opened for writing waits for its reader, on every back end ---- */

static int fifo_fd = -2;

static void *fifo_writer(void *arg)
{
  (void)arg;
  fifo_fd = tdl_fs_open(at("fifo"), O_WRONLY, 0, tdl_after(LONG));
  return NULL;
}

static void *fifo_reader(void *arg)
{
  (void)arg;
  tdl_sleep(tdl_after(20 * TDL_MSEC)); /* the writer's open is under way */
  assert_int_equal(fifo_fd, -2);
  int r = open(at("fifo"), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  assert_true(r >= 0);
  while (fifo_fd == -2)
    tdl_sleep(tdl_after(TDL_MSEC));
  assert_true(fifo_fd >= 0);
  assert_int_equal(tdl_write(fifo_fd, "x", 1, tdl_after(LONG)), 1);
  char c;
  assert_int_equal(read(r, &c, 1), 1);
  assert_int_equal(c, 'x');
  close(r);
  assert_int_equal(tdl_close(fifo_fd), 0);
  return NULL;
}

static void fifo_open_waits(void **state)
{
  (void)state;
  assert_int_equal(mkfifo(at("fifo"), 0644), 0);
  fifo_fd = -2;
  go(fifo_writer, NULL);
  go(fifo_reader, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

/* ---- readdir ---- */

#define MANY 2000

/* Read the whole directory `fd`, n entries at a time: every name e0000 to
 * e(MANY-1) exactly once, nothing else but `also` (NULL: nothing). */
static void read_all(int fd, size_t n, const char *also, unsigned char also_type)
{
  static tdl_fs_dirent ents[64];
  static unsigned char seen[MANY];
  memset(seen, 0, sizeof seen);
  int also_seen = 0, total = 0, r;
  assert_true(n <= 64);
  while ((r = tdl_fs_readdir(fd, ents, n, tdl_after(LONG))) > 0) {
    assert_true((size_t)r <= n);
    for (int i = 0; i < r; i++) {
      const tdl_fs_dirent *e = &ents[i];
      assert_true(strcmp(e->name, ".") != 0 && strcmp(e->name, "..") != 0);
      total++;
      if (also && strcmp(e->name, also) == 0) {
        also_seen++;
        assert_true(e->type == also_type || e->type == DT_UNKNOWN);
        continue;
      }
      assert_int_equal(strlen(e->name), 5);
      assert_int_equal(e->name[0], 'e');
      int k = atoi(e->name + 1);
      assert_true(k >= 0 && k < MANY);
      assert_int_equal(seen[k], 0);
      seen[k] = 1;
      assert_true(e->type == DT_REG || e->type == DT_UNKNOWN);
      if (k % 97 == 0) { /* the inode is the file's */
        struct stat st;
        assert_int_equal(fstatat(fd, e->name, &st, 0), 0);
        assert_int_equal(e->ino, st.st_ino);
      }
    }
  }
  assert_int_equal(r, 0);
  assert_int_equal(tdl_fs_readdir(fd, ents, n, tdl_after(LONG)), 0); /* and stays at the end */
  for (int k = 0; k < MANY; k++)
    assert_int_equal(seen[k], 1);
  assert_int_equal(also_seen, also ? 1 : 0);
  assert_int_equal(total, MANY + (also ? 1 : 0));
}

static void *large_fiber(void *arg)
{
  (void)arg;
  assert_int_equal(mkdir(at("big"), 0755), 0);
  int bfd = open(at("big"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  assert_true(bfd >= 0);
  for (int k = 0; k < MANY; k++) {
    char name[16];
    snprintf(name, sizeof name, "e%04d", k);
    int f = openat(bfd, name, O_WRONLY | O_CREAT, 0644);
    assert_true(f >= 0);
    close(f);
  }
  close(bfd);
  tdl_fs_stats s0, s1;
  int fd = tdl_fs_open(at("big"), O_RDONLY | O_DIRECTORY, 0, tdl_after(LONG));
  assert_true(fd >= 0);
  /* Batches from the caller's array (64), from the small buffer with the
   * rest given back (5, 1), and after a rewind. */
  tdl_fs_stats_get(&s0);
  read_all(fd, 64, NULL, 0);
  tdl_fs_stats_get(&s1);
  assert_true(s1.pool - s0.pool <= MANY / 64 * 2 + 4); /* many entries per pool hop */
  assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
  read_all(fd, 5, NULL, 0);
  assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
  read_all(fd, 1, NULL, 0);
  assert_int_equal(tdl_close(fd), 0);

  /* A directory, a link and a long name among them, with their types. */
  assert_int_equal(mkdir(at("big/sub"), 0755), 0);
  fd = tdl_fs_open(at("big"), O_RDONLY | O_DIRECTORY, 0, tdl_after(LONG));
  assert_true(fd >= 0);
  read_all(fd, 12, "sub", DT_DIR);
  assert_int_equal(tdl_close(fd), 0);
  assert_int_equal(rmdir(at("big/sub")), 0);
  assert_int_equal(symlink("e0001", at("big/lnk")), 0);
  fd = tdl_fs_open(at("big"), O_RDONLY | O_DIRECTORY, 0, tdl_after(LONG));
  assert_true(fd >= 0);
  read_all(fd, 3, "lnk", DT_LNK);
  assert_int_equal(tdl_close(fd), 0);
  assert_int_equal(unlink(at("big/lnk")), 0);
  char longname[256];
  memset(longname, 'L', 255);
  longname[255] = '\0';
  char path[512];
  snprintf(path, sizeof path, "%s/%s", at("big"), longname);
  make_file(path, "");
  fd = tdl_fs_open(at("big"), O_RDONLY | O_DIRECTORY, 0, tdl_after(LONG));
  assert_true(fd >= 0);
  read_all(fd, 1, longname, DT_REG);
  assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
  read_all(fd, 12, longname, DT_REG); /* the least room taken in place: one longest record */
  assert_int_equal(tdl_close(fd), 0);
  return NULL;
}

static void readdir_large(void **state)
{
  (void)state;
  run_fiber(large_fiber);
}

static void *empty_fiber(void *arg)
{
  (void)arg;
  tdl_fs_dirent e[2];
  assert_int_equal(mkdir(at("empty"), 0755), 0);
  int fd = tdl_fs_open(at("empty"), O_RDONLY | O_DIRECTORY, 0, tdl_after(LONG));
  assert_true(fd >= 0);
  assert_int_equal(tdl_fs_readdir(fd, e, 2, tdl_after(LONG)), 0); /* "." and ".." only */
  /* A directory removed while open: ENOENT, or the end. */
  assert_int_equal(rmdir(at("empty")), 0);
  assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
  int r = tdl_fs_readdir(fd, e, 2, tdl_after(LONG));
  assert_true(r == 0 || r == -ENOENT);
  assert_int_equal(tdl_close(fd), 0);
  return NULL;
}

static void readdir_empty(void **state)
{
  (void)state;
  run_fiber(empty_fiber);
}

/* ---- the ring refuses: the pool, and from then on ---- */

#ifdef TDL_FAULTS
/* In a child: what it learns (the ring refused) stays with the process. */
static int refused_result;

static void *refused_fiber(void *arg)
{
  (void)arg;
  tdl_time_t d = tdl_after(LONG);
  tdl_fs_stats s0, s1;
  struct stat st;
  refused_result = 1;
  /* Known to work first: the ring's way. */
  tdl_fs_stats_get(&s0);
  int fd = tdl_fs_openat(AT_FDCWD, at("r"), O_RDWR | O_CREAT, 0644, d);
  tdl_fs_stats_get(&s1);
  if (fd < 0 || s1.ring != s0.ring + 1)
    return NULL;
  tdl_close(fd);
  refused_result = 2;
  /* The kernel refuses the open (injected): the pool opens it. */
  tdl_fs_stats_get(&s0);
  tdl__fault_arm(1, false);
  fd = tdl_fs_openat(AT_FDCWD, at("r"), O_RDONLY, 0, d);
  bool fired = tdl__fault_fired();
  tdl__fault_arm(0, false);
  tdl_fs_stats_get(&s1);
  if (!fired || fd < 0 || s1.pool != s0.pool + 1 || s1.ring != s0.ring)
    return NULL;
  tdl_close(fd);
  refused_result = 3;
  /* And every later open, without asking the ring; stats still take it. */
  tdl_fs_stats_get(&s0);
  fd = tdl_fs_openat(AT_FDCWD, at("r"), O_RDONLY, 0, d);
  int e = tdl_fs_stat(at("r"), &st, d);
  tdl_fs_stats_get(&s1);
  if (fd < 0 || e != 0 || s1.pool != s0.pool + 1 || s1.ring != s0.ring + 1)
    return NULL;
  tdl_close(fd);
  refused_result = 4;
  /* A stat refused: the pool's answer. */
  tdl__fault_arm(1, false);
  e = tdl_fs_lstat(at("r"), &st, d);
  fired = tdl__fault_fired();
  tdl__fault_arm(0, false);
  if (!fired || e != 0 || !S_ISREG(st.st_mode))
    return NULL;
  refused_result = 5;
  tdl_fs_stats_get(&s0);
  e = tdl_fs_stat(at("r"), &st, d);
  tdl_fs_stats_get(&s1);
  if (e != 0 || s1.pool != s0.pool + 1 || s1.ring != s0.ring)
    return NULL;
  refused_result = 0;
  return NULL;
}

static void ring_refused(void **state)
{
  (void)state;
  if (strcmp(tdl_loop_backend(L), "uring") != 0)
    T_SKIP("only on the uring back end");
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    tdl_loop *loop = t_loop_new();
    tdl_fiber_t h;
    if (tdl_fiber_spawn(&h, loop, refused_fiber, NULL, NULL) < 0 || tdl_fiber_detach(loop, h) < 0)
      _exit(20);
    if (tdl_loop_run(loop, TDL_LOOP_DEFAULT) < 0)
      _exit(21);
    _exit(refused_result);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}
#endif

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(metadata, dirs_setup, dirs_teardown),
      cmocka_unit_test_setup_teardown(bad_input, dirs_setup, dirs_teardown),
      cmocka_unit_test_setup_teardown(outside_a_fiber, dirs_setup, dirs_teardown),
      cmocka_unit_test_setup_teardown(deadline_past, dirs_setup, dirs_teardown),
      cmocka_unit_test_setup_teardown(cancelled, dirs_setup, dirs_teardown),
      cmocka_unit_test_setup_teardown(fifo_open_waits, dirs_setup, dirs_teardown),
      cmocka_unit_test_setup_teardown(readdir_large, dirs_setup, dirs_teardown),
      cmocka_unit_test_setup_teardown(readdir_empty, dirs_setup, dirs_teardown),
#ifdef TDL_FAULTS
      cmocka_unit_test_setup_teardown(ring_refused, dirs_setup, dirs_teardown),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
