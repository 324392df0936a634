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
 * On a uring loop, opens and stats are ring operations instead: the kernel
 * tries them without blocking and hands what would block to its io-wq
 * workers, which is a pool hop with no queue, futex or post of ours.
 *
 * The pool runs a call through tdl__blocking_run: the call's description
 * stays on the fiber's stack, and a call that a thread has started is
 * waited for even past the deadline, since it writes into the caller's
 * buffer (see fs.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/fault.h"
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

/* The kernel's struct statx (include/uapi/linux/stat.h), whose layout is
 * ABI: musl before 1.2.5 declares none, and the conversion to struct stat
 * needs the fields.  A caller's struct statx is the same 256 bytes. */
typedef struct kstatx_time {
  int64_t tv_sec;
  uint32_t tv_nsec;
  int32_t reserved;
} kstatx_time;
typedef struct kstatx {
  uint32_t mask, blksize;
  uint64_t attributes;
  uint32_t nlink, uid, gid;
  uint16_t mode, pad1;
  uint64_t ino, size, blocks, attributes_mask;
  kstatx_time atime, btime, ctime, mtime;
  uint32_t rdev_major, rdev_minor, dev_major, dev_minor;
  uint64_t spare[14];
} kstatx;
_Static_assert(sizeof(kstatx) == 256, "struct statx is 256 bytes");
#ifdef STATX_TYPE
_Static_assert(sizeof(struct statx) == sizeof(kstatx), "the libc's struct statx is the kernel's");
#endif
#ifndef STATX_BASIC_STATS
#define STATX_BASIC_STATS 0x7ffU
#endif
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif
#ifndef AT_NO_AUTOMOUNT
#define AT_NO_AUTOMOUNT 0x800
#endif
#ifndef SYS_statx /* a libc older than the call: the kernel's number */
#if defined(__x86_64__)
#define SYS_statx 332
#elif defined(__aarch64__)
#define SYS_statx 291
#endif
#endif

static int engine;              /* tdl_fs_engine (atomic) */
static int buffered_nowait_off; /* a write was refused RWF_NOWAIT (atomic) */
static int nowait_off;          /* no preadv2/pwritev2 at all (ENOSYS: qemu-user) (atomic) */
static _Thread_local tdl_fs_stats stats;

enum op { OP_OPEN, OP_READV, OP_WRITEV, OP_FSYNC, OP_FDATASYNC, OP_STAT, OP_STATX, OP_READDIR, OP_UNLINK, OP_RENAME,
  OP_MKDIR, OP_RMDIR };

/* One call, described for a pool thread. */
typedef struct call {
  enum op op;
  int fd, flags; /* OPEN, STAT, STATX: fd is the directory (AT_FDCWD) */
  mode_t mode;
  unsigned mask; /* STATX */
  const char *path, *path2;
  const struct iovec *iov;
  int iovcnt;
  off_t off; /* -1: the file position */
  struct stat *st;
  kstatx *stx;
  tdl_fs_dirent *ents; /* READDIR: room for iovcnt of them */
  long ret;  /* the result, or -errno */
} call;

static long sys_result(long r) { return r < 0 ? -errno : r; }

/* ---- reading a directory ---- */

/* getdents64's record (struct linux_dirent64: glibc has no header for it,
 * musl's differs in name). */
typedef struct kdirent {
  uint64_t ino;
  int64_t off; /* the position after this entry, as lseek takes it */
  uint16_t reclen;
  uint8_t type;
  char name[];
} kdirent;

/* The smallest record: its header and a one-byte name with its NUL, to
 * the kernel's 8-byte alignment. */
#define KDIRENT_MIN 24
/* The largest: a 255-byte name. */
#define KDIRENT_MAX ((offsetof(kdirent, name) + 256 + 7) & ~(size_t)7)

/* Fill c->ents from getdents64, with no buffer of our own: the records are
 * read into the tail of the caller's array, KDIRENT_MIN bytes per entry of
 * room, and unpacked forwards in place.  Record i starts at least
 * KDIRENT_MIN * i bytes into the tail, which begins where n entries less
 * that much end: entry i, written from the front, ends before record i+1
 * begins, so nothing is overwritten before it is read; and as many records
 * as the tail holds are never more than n.  Below that room (a short array
 * could not take a record with a long name), a small buffer of its own, and
 * lseek back to the first record it could not return. */
static long read_dir(call *c)
{
  size_t n = (size_t)c->iovcnt;
  tdl_fs_dirent *out = c->ents;
  _Alignas(8) char small[KDIRENT_MAX + KDIRENT_MIN * 4];
  char *raw = small;
  size_t room = sizeof small;
  if (n >= (KDIRENT_MAX + 8) / KDIRENT_MIN) {
    /* The tail, its start rounded up to the records' alignment (which
     * only makes it smaller, and the argument above stronger). */
    uintptr_t end = (uintptr_t)(out + n);
    uintptr_t start = (end - n * KDIRENT_MIN + 7) & ~(uintptr_t)7;
    raw = (char *)start;
    room = end - start;
  }
  for (;;) {
    long got = syscall(SYS_getdents64, c->fd, raw, room);
    if (got <= 0)
      return got < 0 ? -errno : 0;
    size_t k = 0;
    int64_t resume = 0; /* the position after the last record taken or skipped */
    for (long at = 0; at < got;) {
      kdirent *d = (kdirent *)(raw + at);
      /* The header first: writing entry k may overwrite it. */
      uint64_t ino = d->ino;
      int64_t off = d->off;
      uint8_t type = d->type;
      size_t len = d->reclen;
      if (d->name[0] == '.' && (d->name[1] == '\0' || (d->name[1] == '.' && d->name[2] == '\0'))) {
        at += (long)len;
        resume = off;
        continue;
      }
      if (k == n) { /* only from the small buffer: give the rest back */
        if (lseek(c->fd, resume, SEEK_SET) < 0)
          return -errno;
        break;
      }
      size_t nl = strnlen(d->name, len - offsetof(kdirent, name));
      memmove(out[k].name, d->name, nl);
      out[k].name[nl] = '\0';
      out[k].ino = ino;
      out[k].type = type;
      k++;
      at += (long)len;
      resume = off;
    }
    if (k > 0)
      return (long)k;
    /* only "." and "..": read on */
  }
}

/* On the pool thread (its errno is its own). */
static void *run(void *arg)
{
  call *c = arg;
  long r = -1;
  switch (c->op) {
  case OP_OPEN: r = openat(c->fd, c->path, c->flags | O_CLOEXEC, c->mode); break;
  case OP_READV: r = c->off < 0 ? tdl__sys_readv(c->fd, c->iov, c->iovcnt) : preadv(c->fd, c->iov, c->iovcnt, c->off); break;
  case OP_WRITEV: r = c->off < 0 ? tdl__sys_writev(c->fd, c->iov, c->iovcnt) : pwritev(c->fd, c->iov, c->iovcnt, c->off); break;
  case OP_FSYNC: r = fsync(c->fd); break;
  case OP_FDATASYNC: r = fdatasync(c->fd); break;
  case OP_STAT: r = fstatat(c->fd, c->path, c->st, c->flags); break;
#ifdef SYS_statx
  case OP_STATX: r = syscall(SYS_statx, c->fd, c->path, c->flags, c->mask, c->stx); break;
#else
  case OP_STATX: errno = ENOSYS; break;
#endif
  case OP_READDIR: c->ret = read_dir(c); return NULL;
  case OP_UNLINK: r = unlink(c->path); break;
  case OP_RENAME: r = rename(c->path, c->path2); break;
  case OP_MKDIR: r = mkdir(c->path, c->mode); break;
  case OP_RMDIR: r = rmdir(c->path); break;
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

#ifdef TDL_HAVE_URING
/* Whether this kernel's rings run opens (0) and stats (1): 0 not known yet,
 * 1 yes, -1 no (the probe said so, or an operation was refused).  The
 * kernel is the same for every loop (atomic). */
static int ring_has[2];
static const uint8_t ring_code[2] = {IORING_OP_OPENAT, IORING_OP_STATX};

static bool ring_takes(tdl_loop *loop, int which)
{
  int v = __atomic_load_n(&ring_has[which], __ATOMIC_RELAXED);
  if (v == 0) {
    struct io_uring_probe *p = io_uring_get_probe_ring(tdl__loop_ring(loop));
    v = p && io_uring_opcode_supported(p, ring_code[which]) ? 1 : -1;
    io_uring_free_probe(p);
    if (!p)
      return false; /* no memory for the probe: ask again next time */
    __atomic_store_n(&ring_has[which], v, __ATOMIC_RELAXED);
  }
  return v > 0;
}

/* An open or a stat as a ring operation.  A stat is a statx whose result
 * is converted, as the libc's fstatat does on newer architectures. */
static long path_on_ring(tdl__fiber *f, call *c, tdl_time_t deadline)
{
  tdl__list ops = {0};
  kstatx kx;
  tdl__uop u = {.fd = c->fd, .path = c->path, .flags = c->flags};
  if (c->op == OP_OPEN) {
    u.code = IORING_OP_OPENAT;
    u.flags = c->flags | O_CLOEXEC;
    u.len = c->mode;
  } else {
    u.code = IORING_OP_STATX;
    u.addr = c->op == OP_STATX ? (void *)c->stx : (void *)&kx;
    u.len = c->op == OP_STATX ? c->mask : STATX_BASIC_STATS;
  }
  bool closed;
  long r = tdl__fd_ring_io(f, &ops, &u, c->op == OP_OPEN ? "file open" : "file stat", deadline, &closed);
  if (r == 0 && c->op == OP_STAT) {
    struct stat *st = c->st;
    memset(st, 0, sizeof *st);
    st->st_dev = makedev(kx.dev_major, kx.dev_minor);
    st->st_ino = kx.ino;
    st->st_mode = kx.mode;
    st->st_nlink = kx.nlink;
    st->st_uid = kx.uid;
    st->st_gid = kx.gid;
    st->st_rdev = makedev(kx.rdev_major, kx.rdev_minor);
    /* cppcheck-suppress uninitvar ; the ring's STATX wrote kx (u.addr) */
    st->st_size = (off_t)kx.size;
    st->st_blksize = kx.blksize;
    st->st_blocks = (blkcnt_t)kx.blocks;
    st->st_atim = (struct timespec){kx.atime.tv_sec, kx.atime.tv_nsec};
    st->st_mtim = (struct timespec){kx.mtime.tv_sec, kx.mtime.tv_nsec};
    st->st_ctim = (struct timespec){kx.ctime.tv_sec, kx.ctime.tv_nsec};
  }
  return r;
}
#endif

/* A call on a path, or readdir: on the ring where it can be, else the
 * pool (or the loop's thread, DIRECT). */
static long by_engine(call *c, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block_until(&f, deadline);
  if (e < 0)
    return e;
  int how = __atomic_load_n(&engine, __ATOMIC_RELAXED);
  if (how == TDL_FS_DIRECT)
    return direct(c);
#ifdef TDL_HAVE_URING
  int which = c->op == OP_OPEN ? 0 : c->op == OP_STAT || c->op == OP_STATX ? 1 : -1;
  if (which >= 0 && how != TDL_FS_POOL && tdl__loop_ring(f->sched->loop) && ring_takes(f->sched->loop, which)) {
    /* A kernel without the operation says EINVAL (or EOPNOTSUPP), as it
     * does for bad flags: the pool tells which it was, and a refusal is
     * remembered.  (Fault injection stands for such a kernel.) */
    long r = TDL__FAULT_NEG(EINVAL, path_on_ring(f, c, deadline));
    /* The ring tries an open without blocking first, which a FIFO opened
     * for writing with no reader yet answers with ENXIO, not EAGAIN: the
     * pool's open waits for the reader, as open(2) does. */
    if (r == -ENXIO && c->op == OP_OPEN && !(c->flags & O_NONBLOCK))
      return on_pool(c, deadline);
    if (r != -EINVAL && r != -EOPNOTSUPP) {
      stats.ring++;
      return r;
    }
    long p = on_pool(c, deadline);
    if (p != r)
      __atomic_store_n(&ring_has[which], -1, __ATOMIC_RELAXED);
    return p;
  }
#endif
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
  return tdl_fs_openat(AT_FDCWD, path, flags, mode, deadline);
}

int tdl_fs_openat(int dirfd, const char *path, int flags, mode_t mode, tdl_time_t deadline)
{
  if (!path)
    return -EFAULT;
  return (int)by_engine(&(call){.op = OP_OPEN, .fd = dirfd, .path = path, .flags = flags, .mode = mode}, deadline);
}

int tdl_fs_fsync(int fd, tdl_time_t deadline) { return (int)by_engine(&(call){.op = OP_FSYNC, .fd = fd}, deadline); }

int tdl_fs_fdatasync(int fd, tdl_time_t deadline)
{
  return (int)by_engine(&(call){.op = OP_FDATASYNC, .fd = fd}, deadline);
}

int tdl_fs_stat(const char *path, struct stat *st, tdl_time_t deadline)
{
  return tdl_fs_fstatat(AT_FDCWD, path, st, 0, deadline);
}

int tdl_fs_lstat(const char *path, struct stat *st, tdl_time_t deadline)
{
  return tdl_fs_fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW, deadline);
}

int tdl_fs_fstatat(int dirfd, const char *path, struct stat *st, int flags, tdl_time_t deadline)
{
  if (!path || !st)
    return -EFAULT;
  /* Only fstatat's flags: statx would take its sync flags too, and the
   * two paths must refuse the same calls. */
  if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT))
    return -EINVAL;
  return (int)by_engine(&(call){.op = OP_STAT, .fd = dirfd, .path = path, .st = st, .flags = flags}, deadline);
}

int tdl_fs_statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *stx, tdl_time_t deadline)
{
  if (!path || !stx)
    return -EFAULT;
  return (int)by_engine(
      &(call){.op = OP_STATX, .fd = dirfd, .path = path, .flags = flags, .mask = mask, .stx = (kstatx *)(void *)stx},
      deadline);
}

int tdl_fs_readdir(int fd, tdl_fs_dirent *entries, size_t n, tdl_time_t deadline)
{
  if (!entries)
    return -EFAULT;
  if (n == 0)
    return -EINVAL;
  /* A count returned is an int: more than INT_MAX entries at once would
   * not fit, nor the records' room in a long. */
  if (n > 1u << 20)
    n = 1u << 20;
  return (int)by_engine(&(call){.op = OP_READDIR, .fd = fd, .ents = entries, .iovcnt = (int)n}, deadline);
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

int tdl_fs_rmdir(const char *path, tdl_time_t deadline)
{
  if (!path)
    return -EFAULT;
  return (int)by_engine(&(call){.op = OP_RMDIR, .path = path}, deadline);
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
