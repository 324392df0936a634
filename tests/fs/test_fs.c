/* SPDX-License-Identifier: MIT */
/* File calls for fibers (fs.h): results, errors, paths taken, deadlines. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"
#include "loop_fixture.h"

#define LONG T_HANG /* a deadline no test should reach */
#define TMPFS_MAGIC_NUMBER 0x01021994 /* linux/magic.h's TMPFS_MAGIC (musl's build has no kernel headers) */

/* Each test works in its own directory under the current one (the build
 * directory: a real file system, where the page cache can be dropped). */
static char dir[64];

static int fs_setup(void **state)
{
  snprintf(dir, sizeof dir, "fs-test-%d", (int)getpid());
  assert_int_equal(mkdir(dir, 0755), 0);
  assert_int_equal(tdl_fs_set_engine(TDL_FS_AUTO), 0);
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){0}), 0);
  return setup(state);
}

static int fs_teardown(void **state)
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

/* ---- the common set, end to end ---- */

static void *round_trip_fiber(void *arg)
{
  (void)arg;
  tdl_time_t d = tdl_after(LONG);
  assert_int_equal(tdl_fs_mkdir(at("sub"), 0755, d), 0);
  int fd = tdl_fs_open(at("sub/a"), O_RDWR | O_CREAT | O_TRUNC, 0644, d);
  assert_true(fd >= 0);
  assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  assert_int_equal(tdl_fs_write(fd, "hello ", 6, d), 6);
  assert_int_equal(tdl_fs_write(fd, "world", 5, d), 5);
  assert_int_equal(tdl_fs_pwrite(fd, "W", 1, 6, d), 1);
  struct iovec wv[2] = {{"!", 1}, {"?", 1}};
  assert_int_equal(tdl_fs_pwritev(fd, wv, 2, 11, d), 2);
  assert_int_equal(tdl_fs_fsync(fd, d), 0);
  assert_int_equal(tdl_fs_fdatasync(fd, d), 0);

  char buf[32] = {0};
  assert_int_equal(tdl_fs_pread(fd, buf, sizeof buf, 0, d), 13);
  assert_memory_equal(buf, "hello World!?", 13);
  char a[5] = {0}, b[8] = {0};
  struct iovec rv[2] = {{a, 5}, {b, 8}};
  assert_int_equal(tdl_fs_preadv(fd, rv, 2, 0, d), 13);
  assert_memory_equal(a, "hello", 5);
  assert_memory_equal(b, " World!?", 8);
  /* tdl_fs_read follows the file position, which the writes left at 11. */
  assert_int_equal(lseek(fd, 6, SEEK_SET), 6);
  memset(buf, 0, sizeof buf);
  assert_int_equal(tdl_fs_read(fd, buf, 5, d), 5);
  assert_memory_equal(buf, "World", 5);
  assert_int_equal(tdl_fs_read(fd, buf, sizeof buf, d), 2);
  assert_int_equal(tdl_fs_read(fd, buf, sizeof buf, d), 0); /* the end */

  struct stat st, fst;
  assert_int_equal(tdl_fs_stat(at("sub/a"), &st, d), 0);
  assert_int_equal(tdl_fs_fstat(fd, &fst), 0);
  assert_int_equal(st.st_size, 13);
  assert_int_equal(st.st_ino, fst.st_ino);
  assert_int_equal(tdl_close(fd), 0);

  assert_int_equal(tdl_fs_rename(at("sub/a"), at("sub/b"), d), 0);
  assert_int_equal(tdl_fs_stat(at("sub/a"), &st, d), -ENOENT);
  assert_int_equal(tdl_fs_stat(at("sub/b"), &st, d), 0);
  assert_int_equal(tdl_fs_rmdir(at("sub"), d), -ENOTEMPTY);
  assert_int_equal(tdl_fs_rmdir(at("sub/b"), d), -ENOTDIR);
  assert_int_equal(tdl_fs_unlink(at("sub/b"), d), 0);
  assert_int_equal(tdl_fs_unlink(at("sub/b"), d), -ENOENT);
  assert_int_equal(tdl_fs_unlink(at("sub"), d), -EISDIR);
  assert_int_equal(tdl_fs_rmdir(at("sub"), d), 0);
  assert_int_equal(tdl_fs_rmdir(at("sub"), d), -ENOENT);
  return NULL;
}

static void round_trip(void **state)
{
  (void)state;
  run_fiber(round_trip_fiber);
}

/* ---- bad input ---- */

static void *errors_fiber(void *arg)
{
  (void)arg;
  tdl_time_t d = tdl_after(LONG);
  char buf[16] = {0};
  struct stat st;
  assert_int_equal(tdl_fs_open(at("missing"), O_RDONLY, 0, d), -ENOENT);
  assert_int_equal(tdl_fs_open(at("missing/x"), O_RDONLY, 0, d), -ENOENT);
  assert_int_equal(tdl_fs_open(NULL, O_RDONLY, 0, d), -EFAULT);
  assert_int_equal(tdl_fs_stat(NULL, &st, d), -EFAULT);
  assert_int_equal(tdl_fs_stat(dir, NULL, d), -EFAULT);
  assert_int_equal(tdl_fs_fstat(0, NULL), -EFAULT);
  assert_int_equal(tdl_fs_unlink(NULL, d), -EFAULT);
  assert_int_equal(tdl_fs_rename(NULL, "x", d), -EFAULT);
  assert_int_equal(tdl_fs_mkdir(NULL, 0755, d), -EFAULT);
  assert_int_equal(tdl_fs_rmdir(NULL, d), -EFAULT);
  assert_int_equal(tdl_fs_mkdir(dir, 0755, d), -EEXIST);

  /* A directory opened for reading: reads say EISDIR. */
  int dfd = tdl_fs_open(dir, O_RDONLY | O_DIRECTORY, 0, d);
  assert_true(dfd >= 0);
  assert_int_equal(tdl_fs_read(dfd, buf, sizeof buf, d), -EISDIR);
  assert_int_equal(tdl_fs_pread(dfd, buf, sizeof buf, 0, d), -EISDIR);
  assert_int_equal(tdl_fs_open(dir, O_WRONLY, 0, d), -EISDIR);
  assert_int_equal(tdl_close(dfd), 0);

  /* A closed fd, and one that never was. */
  int fd = tdl_fs_open(at("f"), O_RDWR | O_CREAT, 0644, d);
  assert_true(fd >= 0);
  assert_int_equal(tdl_close(fd), 0);
  assert_int_equal(tdl_fs_read(fd, buf, sizeof buf, d), -EBADF);
  assert_int_equal(tdl_fs_pwrite(fd, buf, sizeof buf, 0, d), -EBADF);
  assert_int_equal(tdl_fs_fsync(fd, d), -EBADF);
  assert_int_equal(tdl_fs_fstat(fd, &st), -EBADF);
  assert_int_equal(tdl_close(fd), -EBADF);
  assert_int_equal(tdl_fs_read(-1, buf, sizeof buf, d), -EBADF);
  assert_int_equal(tdl_close(-1), -EBADF);

  /* Offsets must be offsets: -1 would mean "the file position". */
  fd = tdl_fs_open(at("f"), O_RDWR, 0, d);
  assert_true(fd >= 0);
  assert_int_equal(tdl_fs_pread(fd, buf, 1, -1, d), -EINVAL);
  assert_int_equal(tdl_fs_pwrite(fd, buf, 1, -5, d), -EINVAL);
  struct iovec v = {buf, 1};
  assert_int_equal(tdl_fs_preadv(fd, &v, 1, -1, d), -EINVAL);
  assert_int_equal(tdl_fs_pwritev(fd, &v, 1, -1, d), -EINVAL);
  assert_int_equal(tdl_fs_preadv(fd, &v, -1, 0, d), -EINVAL);
  /* Written to a read-only fd. */
  int ro = tdl_fs_open(at("f"), O_RDONLY, 0, d);
  assert_true(ro >= 0);
  assert_int_equal(tdl_fs_write(ro, "x", 1, d), -EBADF);
  assert_int_equal(tdl_close(ro), 0);
  assert_int_equal(tdl_close(fd), 0);
  return NULL;
}

static void errors_are_returned(void **state)
{
  (void)state;
  run_fiber(errors_fiber);
}

/* EACCES: root passes permission checks, so the check runs in a child that
 * gives up root when it has it. */
static void *eacces_fiber(void *arg)
{
  (void)arg;
  int fd = tdl_fs_open(at("locked"), O_RDONLY, 0, tdl_after(LONG));
  /* _exit: a forked child of a threaded process runs no exit-time work
   * (LeakSanitizer there saw the parent's threads and reported false leaks). */
  _exit(fd == -EACCES ? 0 : 10);
}

static void permission_denied(void **state)
{
  (void)state;
  int fd = open(at("locked"), O_CREAT | O_WRONLY, 0);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(chmod(dir, 0777), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0))
      _exit(20);
    /* On this thread: the child of a multi-threaded process should not
     * start threads when ThreadSanitizer or qemu-user watch it. */
    if (tdl_fs_set_engine(TDL_FS_DIRECT) < 0)
      _exit(23);
    tdl_loop *loop = t_loop_new();
    tdl_fiber_t h;
    if (tdl_fiber_spawn(&h, loop, eacces_fiber, NULL, NULL) < 0)
      _exit(21);
    tdl_loop_run(loop, TDL_LOOP_DEFAULT);
    _exit(22);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void misuse_outside_a_fiber(void **state)
{
  (void)state;
  char buf[4];
  struct stat st;
  assert_int_equal(tdl_fs_open(dir, O_RDONLY, 0, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_fs_pread(0, buf, 4, 0, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_fs_fsync(0, TDL_FOREVER), -EPERM);
  /* fstat and close need no fiber. */
  int fd = open(dir, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(tdl_fs_fstat(fd, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(tdl_close(fd), 0);
  assert_int_equal(tdl_fs_set_engine((tdl_fs_engine)7), -EINVAL);
  assert_int_equal(tdl_fs_set_engine((tdl_fs_engine)-1), -EINVAL);
}

/* ---- which path each call took ---- */

static int on_tmpfs(void)
{
  struct statfs s;
  return statfs(dir, &s) == 0 && s.f_type == TMPFS_MAGIC_NUMBER;
}

static bool uring(void) { return strcmp(tdl_loop_backend(tdl_fiber_loop()), "uring") == 0; }

static void *paths_fiber(void *arg)
{
  (void)arg;
  tdl_time_t d = tdl_after(LONG);
  static char page[65536];
  memset(page, 'p', sizeof page);
  int fd = tdl_fs_open(at("cached"), O_RDWR | O_CREAT, 0644, d);
  assert_true(fd >= 0);
  assert_int_equal(tdl_fs_pwrite(fd, page, sizeof page, 0, d), (ssize_t)sizeof page);
  char buf[4096];

  /* In the page cache: answered on the loop's thread. */
  tdl_fs_stats s0, s1;
  tdl_fs_stats_get(&s0);
  assert_int_equal(tdl_fs_pread(fd, buf, sizeof buf, 4096, d), (ssize_t)sizeof buf);
  tdl_fs_stats_get(&s1);
  assert_int_equal(s1.direct, s0.direct + 1);
  assert_int_equal(s1.pool, s0.pool);

  /* Evicted (clean pages can be dropped): refused by RWF_NOWAIT, read on
   * the pool, and the data are right. */
  if (!on_tmpfs()) {
    assert_int_equal(fdatasync(fd), 0);
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    memset(buf, 0, sizeof buf);
    tdl_fs_stats_get(&s0);
    assert_int_equal(tdl_fs_pread(fd, buf, sizeof buf, 8192, d), (ssize_t)sizeof buf);
    tdl_fs_stats_get(&s1);
    assert_int_equal(s1.nowait_miss, s0.nowait_miss + 1);
    if (uring()) /* the kernel reads it, not a pool thread */
      assert_int_equal(s1.ring, s0.ring + 1);
    else
      assert_int_equal(s1.pool, s0.pool + 1);
    assert_int_equal(buf[0], 'p');
    assert_int_equal(buf[4095], 'p');
  }

  /* Engine POOL: everything on the pool; DIRECT: nothing. */
  assert_int_equal(tdl_fs_set_engine(TDL_FS_POOL), 0);
  tdl_fs_stats_get(&s0);
  assert_int_equal(tdl_fs_pread(fd, buf, sizeof buf, 0, d), (ssize_t)sizeof buf);
  tdl_fs_stats_get(&s1);
  assert_int_equal(s1.pool, s0.pool + 1);
  assert_int_equal(s1.direct, s0.direct);
  assert_int_equal(tdl_fs_set_engine(TDL_FS_DIRECT), 0);
  tdl_pool_stats p0, p1;
  tdl_pool_stats_get(&p0);
  assert_int_equal(tdl_fs_pread(fd, buf, sizeof buf, 0, d), (ssize_t)sizeof buf);
  assert_int_equal(tdl_fs_fsync(fd, d), 0);
  tdl_pool_stats_get(&p1);
  assert_int_equal(p1.done, p0.done);
  /* URING: every read and write to the ring, or -ENOTSUP off uring. */
  assert_int_equal(tdl_fs_set_engine(TDL_FS_URING), 0);
  tdl_fs_stats_get(&s0);
  memset(buf, 0, sizeof buf);
  ssize_t r = tdl_fs_pread(fd, buf, sizeof buf, 4096, d);
  tdl_fs_stats_get(&s1);
  if (uring()) {
    assert_int_equal(r, (ssize_t)sizeof buf);
    assert_int_equal(buf[100], 'p');
    assert_int_equal(s1.ring, s0.ring + 1);
    assert_int_equal(tdl_fs_pwrite(fd, "q", 1, 5, d), 1);
    assert_int_equal(tdl_fs_pread(fd, buf, 2, 4, d), 2);
    assert_memory_equal(buf, "pq", 2);
    /* One buffer goes as a plain read or write, several as one vectored
     * request: both ways land where they should. */
    char w1[] = "xy", w2[] = "zw", r1[3], r2[3];
    struct iovec wv[2] = {{w1, 2}, {w2, 2}}, rv[2] = {{r1, 3}, {r2, 3}};
    tdl_fs_stats_get(&s0);
    assert_int_equal(tdl_fs_pwritev(fd, wv, 2, 8, d), 4);
    assert_int_equal(tdl_fs_preadv(fd, rv, 2, 7, d), 6);
    tdl_fs_stats_get(&s1);
    assert_int_equal(s1.ring, s0.ring + 2);
    assert_memory_equal(r1, "pxy", 3);
    assert_memory_equal(r2, "zwp", 3);
  } else {
    assert_int_equal(r, -ENOTSUP);
  }
  assert_int_equal(tdl_fs_set_engine(TDL_FS_AUTO), 0);
  assert_int_equal(tdl_close(fd), 0);
  return NULL;
}

/* preadv2 with RWF_NOWAIT exists (qemu-user 7.2 has no preadv2, and glibc
 * then says EOPNOTSUPP: every read goes to the pool). */
/* Whether preadv2 takes RWF_NOWAIT for a regular file here: asked of a
 * file in the test's directory, as the library asks of the files it reads
 * (a directory is refused with EOPNOTSUPP on ext4, where files are not). */
static int have_preadv2(void)
{
  char b = 0;
  struct iovec v = {&b, 1};
  int d = open(dir, O_RDONLY);
  assert_true(d >= 0);
  int fd = openat(d, "probe", O_RDWR | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "p", 1), 1);
  int r = (int)syscall(SYS_preadv2, fd, &v, 1, 0L, 0L, 0x8 /* RWF_NOWAIT */);
  int e = errno;
  close(fd);
  unlinkat(d, "probe", 0);
  close(d);
  return !(r < 0 && (e == ENOSYS || e == EOPNOTSUPP));
}

static void paths_taken(void **state)
{
  (void)state;
  if (!have_preadv2())
    T_SKIP("no preadv2 with RWF_NOWAIT here: every read goes to the pool");
  if (on_tmpfs())
    fprintf(stderr, "(on tmpfs: the page-cache miss is not checked)\n");
  run_fiber(paths_fiber);
}

/* A fiber reading a cached file back to back still lets the others run. */
static int reader_done, other_ran_before;

static void *busy_reader(void *arg)
{
  (void)arg;
  int fd = open(dir, O_RDONLY);
  assert_true(fd >= 0);
  int f = openat(fd, "r", O_RDWR | O_CREAT, 0644);
  assert_true(f >= 0);
  assert_int_equal(write(f, "abcd", 4), 4);
  char c;
  for (int i = 0; i < 1000; i++)
    assert_int_equal(tdl_fs_pread(f, &c, 1, i % 4, TDL_FOREVER), 1);
  reader_done = 1;
  close(f);
  close(fd);
  return NULL;
}

static void *other(void *arg)
{
  (void)arg;
  other_ran_before = !reader_done;
  return NULL;
}

static void cached_reads_yield(void **state)
{
  (void)state;
  reader_done = other_ran_before = 0;
  go(busy_reader, NULL);
  go(other, NULL); /* queued behind the reader */
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_true(reader_done);
  assert_true(other_ran_before);
}

/* ---- deadlines and cancels ---- */

static int gate_open;
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;

static void *wait_gate(void *arg)
{
  (void)arg;
  pthread_mutex_lock(&gate_lock);
  while (!gate_open)
    pthread_cond_wait(&gate_cond, &gate_lock);
  pthread_mutex_unlock(&gate_lock);
  return NULL;
}

static void open_gate(void)
{
  pthread_mutex_lock(&gate_lock);
  gate_open = 1;
  pthread_cond_broadcast(&gate_cond);
  pthread_mutex_unlock(&gate_lock);
}

static int hog_result = 1;

static void *hog_file_lane(void *arg)
{
  (void)arg;
  hog_result = tdl_pool_call(TDL_LANE_FILE, wait_gate, NULL, NULL, NULL, tdl_after(LONG));
  return NULL;
}

static void *queued_fiber(void *arg)
{
  (void)arg;
  struct stat st;
  /* Past already: nothing is done. */
  assert_int_equal(tdl_fs_unlink(at("keep"), tdl_now() - 1), -ETIMEDOUT);
  assert_int_equal(stat(at("keep"), &st), 0);
  /* The file lane is held (cap 1) by a call that never returns: this one
   * queues, its deadline passes, it is withdrawn, and never runs. */
  tdl_pool_stats p;
  /* Let the hog take the lane's one thread (however long the thread takes
   * to start on a loaded machine). */
  for (tdl_time_t end = tdl_after(T_HANG); tdl_now() < end;) {
    tdl_pool_stats_get(&p);
    if (p.running[TDL_LANE_FILE] == 1)
      break;
    tdl_sleep(tdl_after(TDL_MSEC));
  }
  assert_int_equal(p.running[TDL_LANE_FILE], 1);
  assert_int_equal(tdl_fs_unlink(at("keep"), tdl_after(20 * TDL_MSEC)), -ETIMEDOUT);
  tdl_pool_stats_get(&p);
  assert_int_equal(p.queued[TDL_LANE_FILE], 0);
  open_gate();
  /* The pool goes on: and the withdrawn unlink never ran. */
  assert_int_equal(tdl_fs_stat(at("keep"), &st, tdl_after(LONG)), 0);
  return NULL;
}

static void deadline_before_start(void **state)
{
  (void)state;
  gate_open = 0;
  int fd = open(at("keep"), O_CREAT | O_WRONLY, 0644);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(tdl_fs_set_engine(TDL_FS_POOL), 0);
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){.lane_max = {0, 1, 0}}), 0);
  go(hog_file_lane, NULL);
  go(queued_fiber, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(hog_result, 0);
  assert_int_equal(tdl_fs_set_engine(TDL_FS_AUTO), 0);
}

/* A call that has started is waited for past its deadline and through a
 * cancel: it writes into the caller's buffer.  A FIFO makes a read that
 * starts on a pool thread and blocks there until the test writes. */
static int fifo_w = -1, reader_done, withdrawn;
static tdl_time_t reader_deadline, read_wait;
static ssize_t started_result[2];
static char started_buf[2][8];

static void *read_fifo(void *arg)
{
  intptr_t i = (intptr_t)arg;
  int fd = tdl_fs_open(at("fifo"), O_RDONLY, 0, tdl_after(LONG));
  assert_true(fd >= 0);
  /* Long enough for a pool thread to take the read, mostly; the writer
   * checks that one did before the deadline passed (else the test tries
   * again with a longer one). */
  reader_deadline = tdl_after(read_wait);
  started_result[i] = tdl_fs_read(fd, started_buf[i], 4, reader_deadline);
  reader_done = 1;
  tdl_close(fd);
  return NULL;
}

static void *write_later(void *arg)
{
  tdl_fiber_t reader = (tdl_fiber_t)(uintptr_t)arg;
  /* Both ends open (the opens ran on the pool), then the read running on
   * a pool thread: the only file-lane work left. */
  while (fifo_w < 0 || !reader_deadline)
    tdl_sleep(tdl_after(TDL_MSEC));
  tdl_pool_stats p;
  for (;;) {
    tdl_pool_stats_get(&p);
    if (reader_done) {
      /* Its deadline passed before a pool thread took it (a slow machine):
       * withdrawn, never run, as it should be; no read runs on the lane. */
      assert_int_equal(p.running[TDL_LANE_FILE], 0);
      assert_int_equal(started_result[reader ? 1 : 0], -ETIMEDOUT);
      withdrawn = 1;
      return NULL;
    }
    if (p.running[TDL_LANE_FILE] >= 1)
      break;
    tdl_sleep(tdl_after(TDL_MSEC));
  }
  tdl_sleep(reader_deadline + 20 * TDL_MSEC); /* now the deadline has passed */
  assert_false(reader_done);
  if (reader)
    assert_int_equal(tdl_fiber_cancel(L, reader), 0);
  tdl_sleep(tdl_after(20 * TDL_MSEC));
  assert_int_equal(write(fifo_w, "data", 4), 4);
  return NULL;
}

static void *open_fifo_writer(void *arg)
{
  (void)arg;
  /* Opening a FIFO for writing waits for a reader: on the pool too. */
  fifo_w = tdl_fs_open(at("fifo"), O_WRONLY, 0, tdl_after(LONG));
  assert_true(fifo_w >= 0);
  return NULL;
}

static void started_call_is_waited_for(void **state)
{
  (void)state;
  /* The pool's way (on uring a FIFO read would be a ring operation, which a
   * deadline does stop, as test_ring's reads show). */
  assert_int_equal(tdl_fs_set_engine(TDL_FS_POOL), 0);
  read_wait = 300 * TDL_MSEC;
  for (intptr_t i = 0; i < 2; i++) {
    fifo_w = -1;
    reader_done = withdrawn = 0;
    reader_deadline = 0;
    assert_int_equal(mkfifo(at("fifo"), 0644), 0);
    tdl_fiber_t r = go(read_fifo, (void *)i);
    go(open_fifo_writer, NULL);
    go(write_later, (void *)(uintptr_t)(i ? r : 0)); /* the second time, also a cancel */
    assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
    close(fifo_w);
    unlink(at("fifo"));
    if (withdrawn) { /* again, with twice the time for a thread to take it */
      assert_true(read_wait < LONG);
      read_wait *= 2;
      i--;
      continue;
    }
    assert_int_equal(started_result[i], 4);
    assert_memory_equal(started_buf[i], "data", 4);
  }
  assert_int_equal(tdl_fs_set_engine(TDL_FS_AUTO), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(round_trip, fs_setup, fs_teardown),
      cmocka_unit_test_setup_teardown(errors_are_returned, fs_setup, fs_teardown),
      cmocka_unit_test_setup_teardown(permission_denied, fs_setup, fs_teardown),
      cmocka_unit_test_setup_teardown(misuse_outside_a_fiber, fs_setup, fs_teardown),
      cmocka_unit_test_setup_teardown(paths_taken, fs_setup, fs_teardown),
      cmocka_unit_test_setup_teardown(cached_reads_yield, fs_setup, fs_teardown),
      cmocka_unit_test_setup_teardown(deadline_before_start, fs_setup, fs_teardown),
      cmocka_unit_test_setup_teardown(started_call_is_waited_for, fs_setup, fs_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
