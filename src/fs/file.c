/* SPDX-License-Identifier: MIT */
/*
 * File calls for fibers (include/treadle/fs.h): each picks its path.
 *
 * A page-cached 4 KiB pread costs well under a microsecond; handing it to a
 * pool thread and back costs several (a queue, a futex wake when the thread
 * sleeps, a post home).  So a read first asks the kernel for the cached
 * part only (RWF_NOWAIT), which never sleeps, and goes to the pool only when
 * the kernel says EAGAIN (a page is missing) or cannot tell (EOPNOTSUPP).
 * Writes try the same, but ext4 and others refuse buffered RWF_NOWAIT
 * writes outright: after the first such refusal every write goes straight
 * to the pool instead of paying a failing system call first (and where
 * the calls do not exist at all, ENOSYS, as under qemu-user 7.2, every
 * read and write goes to the pool).  Everything
 * that may wait for a disk by nature (fsync, and the calls that walk a
 * path) goes to the pool; fstat and close use only what the fd holds.
 *
 * The pool runs a call through tdl__blocking_run: the call's description
 * stays on the fiber's stack, and a call that a thread has started is
 * waited for even past the deadline, since it writes into the caller's
 * buffer (see fs.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/sys.h"
#include "fd/fd_internal.h"
#include "pool/pool_internal.h"

#ifdef TDL_HAVE_URING
#include <liburing.h>
#endif

/* preadv2/pwritev2 through syscall(): musl (1.2.3, Debian 12) has neither
 * wrapper nor RWF_NOWAIT.  On 64-bit targets the kernel takes the offset
 * whole in pos_l (pos_h is shifted out); -1 is "the file position". */
#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif

static long rw2(long nr, int fd, const struct iovec *iov, int iovcnt, off_t off, int flags)
{
  return syscall(nr, fd, iov, iovcnt, (long)off, 0L, flags);
}

static int engine;              /* tdl_fs_engine (atomic) */
static int buffered_nowait_off; /* a write was refused RWF_NOWAIT (atomic) */
static int nowait_off;          /* no preadv2/pwritev2 at all (ENOSYS: qemu-user) (atomic) */
static _Thread_local tdl_fs_stats stats;

enum op { OP_OPEN, OP_READV, OP_WRITEV, OP_FSYNC, OP_FDATASYNC, OP_STAT, OP_UNLINK, OP_RENAME, OP_MKDIR };

/* One call, described for a pool thread. */
typedef struct call {
  enum op op;
  int fd, flags;
  mode_t mode;
  const char *path, *path2;
  const struct iovec *iov;
  int iovcnt;
  off_t off; /* -1: the file position */
  struct stat *st;
  long ret;  /* the result, or -errno */
} call;

static long sys_result(long r) { return r < 0 ? -errno : r; }

/* On the pool thread (its errno is its own). */
static void *run(void *arg)
{
  call *c = arg;
  long r = -1;
  switch (c->op) {
  case OP_OPEN: r = open(c->path, c->flags | O_CLOEXEC, c->mode); break;
  case OP_READV: r = c->off < 0 ? tdl__sys_readv(c->fd, c->iov, c->iovcnt) : preadv(c->fd, c->iov, c->iovcnt, c->off); break;
  case OP_WRITEV: r = c->off < 0 ? tdl__sys_writev(c->fd, c->iov, c->iovcnt) : pwritev(c->fd, c->iov, c->iovcnt, c->off); break;
  case OP_FSYNC: r = fsync(c->fd); break;
  case OP_FDATASYNC: r = fdatasync(c->fd); break;
  case OP_STAT: r = stat(c->path, c->st); break;
  case OP_UNLINK: r = unlink(c->path); break;
  case OP_RENAME: r = rename(c->path, c->path2); break;
  case OP_MKDIR: r = mkdir(c->path, c->mode); break;
  }
  c->ret = sys_result(r);
  return NULL;
}

static long on_pool(call *c, tdl_time_t deadline)
{
  stats.pool++;
  int e = tdl__blocking_run(TDL_LANE_FILE, run, c, NULL, deadline);
  return e < 0 ? e : c->ret;
}

/* Direct on this thread, errno kept as the caller left it. */
static long direct(call *c)
{
  int saved = errno;
  stats.direct++;
  run(c);
  errno = saved;
  return c->ret;
}

static long by_engine(call *c, tdl_time_t deadline)
{
  int e = tdl__may_block_until(NULL, deadline);
  if (e < 0)
    return e;
  if (__atomic_load_n(&engine, __ATOMIC_RELAXED) == TDL_FS_DIRECT)
    return direct(c);
  return on_pool(c, deadline);
}

/* ---- reads and writes: the page cache first ---- */

/* preadv2/pwritev2 with RWF_NOWAIT: the result, or 1 (as "go to the pool")
 * when the kernel would have waited or cannot promise not to. */
static long try_nowait(call *c, bool *to_pool)
{
  int saved = errno;
  long r, e;
  do { /* a signal's EINTR is no reason to fail the call (no header allows it) */
    r = rw2(c->op == OP_READV ? SYS_preadv2 : SYS_pwritev2, c->fd, c->iov, c->iovcnt, c->off, RWF_NOWAIT);
    e = r < 0 ? -errno : r;
  } while (e == -EINTR);
  errno = saved;
  *to_pool = e == -EAGAIN || e == -EOPNOTSUPP || e == -ENOSYS;
  if (e == -EOPNOTSUPP && c->op == OP_WRITEV)
    __atomic_store_n(&buffered_nowait_off, 1, __ATOMIC_RELAXED);
  if (e == -ENOSYS)
    __atomic_store_n(&nowait_off, 1, __ATOMIC_RELAXED);
  return e;
}

#ifdef TDL_HAVE_URING
/* On a uring loop: the kernel reads or writes (from its own workers where
 * the file would block), and only the fiber waits: no pool thread, no
 * hand-off.  A deadline or cancel asks it to stop; a transfer already under
 * way finishes and is returned (fs.h). */
static ssize_t on_ring(call *c, tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  tdl__list ops = {0}; /* this call's only: files have no fiber-I/O state */
  bool reading = c->op == OP_READV;
  bool one = c->iovcnt == 1; /* one buffer: a plain request, no iovec array for the kernel to copy in */
  tdl__uop u = {.code = one ? (reading ? IORING_OP_READ : IORING_OP_WRITE)
                            : (reading ? IORING_OP_READV : IORING_OP_WRITEV),
                .fd = c->fd,
                .addr = one ? c->iov[0].iov_base : (void *)(uintptr_t)c->iov,
                .len = one ? c->iov[0].iov_len : (size_t)c->iovcnt,
                .at = c->off >= 0,
                .off = (uint64_t)c->off};
  bool closed;
  stats.ring++;
  return tdl__fd_ring_io(f, &ops, &u, reading ? "file read" : "file write", deadline, &closed);
}
#endif

static ssize_t transfer(enum op op, int fd, const struct iovec *iov, int iovcnt, off_t off, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block_until(&f, deadline);
  if (e < 0)
    return e;
  call c = {.op = op, .fd = fd, .iov = iov, .iovcnt = iovcnt, .off = off};
  int how = __atomic_load_n(&engine, __ATOMIC_RELAXED);
#ifdef TDL_HAVE_URING
  bool ring = tdl__loop_ring(f->sched->loop) != NULL;
#else
  bool ring = false;
#endif
  if (how == TDL_FS_URING && !ring)
    return -ENOTSUP;
  if (how == TDL_FS_DIRECT) {
    long r = direct(&c);
    tdl__io_budget_spend(f);
    return r;
  }
  bool nowait = how == TDL_FS_AUTO && !__atomic_load_n(&nowait_off, __ATOMIC_RELAXED) &&
                (op == OP_READV || !__atomic_load_n(&buffered_nowait_off, __ATOMIC_RELAXED));
  if (how == TDL_FS_URING)
    nowait = false;
  if (nowait) {
    bool to_pool;
    long r = try_nowait(&c, &to_pool);
    if (!to_pool) {
      stats.direct++;
      tdl__io_budget_spend(f); /* a fiber reading a cached file must yield too */
      return r;
    }
    stats.nowait_miss++;
  }
#ifdef TDL_HAVE_URING
  if (ring && how != TDL_FS_POOL)
    return on_ring(&c, deadline);
#endif
  return on_pool(&c, deadline);
}

static ssize_t one(enum op op, int fd, const void *buf, size_t n, off_t off, tdl_time_t deadline)
{
  struct iovec iov = {(void *)(uintptr_t)buf, n};
  return transfer(op, fd, &iov, 1, off, deadline);
}

ssize_t tdl_fs_read(int fd, void *buf, size_t n, tdl_time_t deadline) { return one(OP_READV, fd, buf, n, -1, deadline); }

ssize_t tdl_fs_write(int fd, const void *buf, size_t n, tdl_time_t deadline)
{
  return one(OP_WRITEV, fd, buf, n, -1, deadline);
}

/* An explicit offset must be one: -1 would mean "the file position" to
 * preadv2. */
ssize_t tdl_fs_pread(int fd, void *buf, size_t n, off_t off, tdl_time_t deadline)
{
  return off < 0 ? -EINVAL : one(OP_READV, fd, buf, n, off, deadline);
}

ssize_t tdl_fs_pwrite(int fd, const void *buf, size_t n, off_t off, tdl_time_t deadline)
{
  return off < 0 ? -EINVAL : one(OP_WRITEV, fd, buf, n, off, deadline);
}

ssize_t tdl_fs_preadv(int fd, const struct iovec *iov, int iovcnt, off_t off, tdl_time_t deadline)
{
  return off < 0 ? -EINVAL : transfer(OP_READV, fd, iov, iovcnt, off, deadline);
}

ssize_t tdl_fs_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off, tdl_time_t deadline)
{
  return off < 0 ? -EINVAL : transfer(OP_WRITEV, fd, iov, iovcnt, off, deadline);
}

/* ---- the rest ---- */

int tdl_fs_open(const char *path, int flags, mode_t mode, tdl_time_t deadline)
{
  if (!path)
    return -EFAULT;
  return (int)by_engine(&(call){.op = OP_OPEN, .path = path, .flags = flags, .mode = mode}, deadline);
}

int tdl_fs_fsync(int fd, tdl_time_t deadline) { return (int)by_engine(&(call){.op = OP_FSYNC, .fd = fd}, deadline); }

int tdl_fs_fdatasync(int fd, tdl_time_t deadline)
{
  return (int)by_engine(&(call){.op = OP_FDATASYNC, .fd = fd}, deadline);
}

int tdl_fs_stat(const char *path, struct stat *st, tdl_time_t deadline)
{
  if (!path || !st)
    return -EFAULT;
  return (int)by_engine(&(call){.op = OP_STAT, .path = path, .st = st}, deadline);
}

int tdl_fs_unlink(const char *path, tdl_time_t deadline)
{
  if (!path)
    return -EFAULT;
  return (int)by_engine(&(call){.op = OP_UNLINK, .path = path}, deadline);
}

int tdl_fs_rename(const char *from, const char *to, tdl_time_t deadline)
{
  if (!from || !to)
    return -EFAULT;
  return (int)by_engine(&(call){.op = OP_RENAME, .path = from, .path2 = to}, deadline);
}

int tdl_fs_mkdir(const char *path, mode_t mode, tdl_time_t deadline)
{
  if (!path)
    return -EFAULT;
  return (int)by_engine(&(call){.op = OP_MKDIR, .path = path, .mode = mode}, deadline);
}

int tdl_fs_fstat(int fd, struct stat *st)
{
  if (!st)
    return -EFAULT;
  int saved = errno;
  int r = fstat(fd, st) < 0 ? -errno : 0;
  errno = saved;
  stats.direct++;
  return r;
}

int tdl_fs_set_engine(tdl_fs_engine e)
{
  if (e != TDL_FS_AUTO && e != TDL_FS_POOL && e != TDL_FS_DIRECT && e != TDL_FS_URING)
    return -EINVAL;
  __atomic_store_n(&engine, (int)e, __ATOMIC_RELAXED);
  return 0;
}

void tdl_fs_stats_get(tdl_fs_stats *out)
{
  if (out)
    *out = stats;
}
