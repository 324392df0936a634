/* SPDX-License-Identifier: MIT */
/*
 * Files from fibers.  Include <treadle.h>.
 *
 * A read that misses the page cache, an fsync, an open on a cold directory:
 * called directly in a fiber, each stalls every fiber of the loop.  These
 * calls park only the calling fiber, and keep what is cheap cheap:
 *
 *   reads (read, pread, preadv) first try preadv2(..., RWF_NOWAIT), which
 *     the kernel answers only from the page cache and otherwise refuses with
 *     EAGAIN at once.  A cached read so costs one system call and no
 *     thread; only a miss goes to the blocking-work pool (pool.h,
 *     TDL_LANE_FILE), which adds a hand-off to another thread and back to
 *     the disk's time.
 *   writes (write, pwrite, pwritev) try pwritev2(..., RWF_NOWAIT) the same
 *     way.  Where the file system refuses buffered RWF_NOWAIT writes
 *     (ext4 does, with EOPNOTSUPP) the first refusal is remembered and every
 *     later write goes straight to the pool: a buffered write is usually
 *     quick but can wait on dirty-page throttling for a long time.
 *   open, openat, stat, lstat, fstatat, statx: on a loop whose back end is
 *     uring (loop.h), io_uring operations (IORING_OP_OPENAT, IORING_OP_STATX):
 *     the kernel answers a cached path at once and runs the rest in its own
 *     workers, so no pool thread is taken and nothing waits on the loop's
 *     thread.  Where the kernel refuses the operation, the call runs on the
 *     pool instead, and so do later ones.  On other back ends, the pool.
 *   fsync, fdatasync, readdir, unlink, rename, mkdir always run on the
 *     pool: each may wait for the disk (a journal commit, a directory block).
 *   fstat runs directly: it touches only what the open fd holds (and,
 *     unlike the others, works outside fibers too).  Close a file with
 *     tdl_close (fd.h), which never blocks either.
 *
 * tdl_fs_stats_get says how many calls took each path.
 *
 * Walking a tree.  Open each directory with tdl_fs_open(path, O_RDONLY |
 * O_DIRECTORY) (or tdl_fs_openat below its parent's fd), and read it with
 * tdl_fs_readdir, which returns many entries per pool hop, each with its
 * type: a walk needs no stat but where the file system leaves the type
 * unknown (DT_UNKNOWN: then tdl_fs_fstatat with AT_SYMLINK_NOFOLLOW).
 * Bound the work in flight with a few worker fibers that take paths from a
 * channel (each open file is an fd: a walk with a fiber per file runs out
 * of them).  examples/treewalk/treewalk.c is that recipe, whole.
 *
 * These are for regular files and directories.  Pipes, sockets and
 * terminals have readiness: use tdl_read and friends (fd.h), or a pool
 * thread would be held for as long as the peer stays silent.  (A FIFO
 * opened on the ring for reading does not wait for a writer, as the
 * kernel tries the open without blocking first; for writing, it waits for
 * a reader on the pool.)
 *
 * Deadlines and cancels.  A call that has not started when its deadline
 * passes (or the fiber is cancelled) returns -ETIMEDOUT (-ECANCELED) and
 * did nothing.  A call that has started on a pool thread cannot be stopped,
 * and it writes into the caller's buffer or changes the file: the fiber then
 * waits for it to finish whatever the deadline says, and gets its real
 * result (so that no read is lost and no buffer is written after the call
 * returned).  An operation on the ring is asked to stop, and waited for: it
 * returns -ETIMEDOUT (-ECANCELED) if it stopped, else its real result (an
 * open that completed meanwhile returns its fd, which is the caller's to
 * close).  A deadline already past returns -ETIMEDOUT without a call.
 *
 * Files are opened close-on-exec (O_CLOEXEC is added), as every fd treadle
 * makes.
 *
 * Results and errors are those of the system call, negated: a count, or
 * -ENOENT, -EISDIR, -EACCES, -EBADF, -EINVAL, ...  Reads may return fewer
 * bytes than asked, as read(2) may (a direct read that found only part of
 * the range cached returns that part); 0 is the end of the file.  Also
 * -EPERM: called outside a fiber; -EFAULT: a NULL buffer, path or stat
 * with a non-zero length; -EAGAIN: the pool could start no thread;
 * -ESHUTDOWN: a call that needed a pool thread after tdl_pool_shutdown.
 */
#ifndef TREADLE_FS_H
#define TREADLE_FS_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* open(2) on the ring or the pool (above): returns the fd (O_CLOEXEC
 * added), or -ENOENT, -EACCES, -EISDIR, -EMFILE...; -EFAULT for a NULL
 * path; and the errors common to these calls (above: -EPERM, -ETIMEDOUT,
 * -ECANCELED, -EAGAIN). */
TDL_API int tdl_fs_open(const char *path, int flags, mode_t mode, tdl_time_t deadline);
/* openat(2): as tdl_fs_open, with a relative path resolved below the
 * directory open as dirfd (AT_FDCWD: the current directory).  Returns the
 * fd.  Errors: as tdl_fs_open, and -EBADF (dirfd is no fd, and the path is
 * relative), -ENOTDIR (dirfd is not a directory). */
TDL_API int tdl_fs_openat(int dirfd, const char *path, int flags, mode_t mode, tdl_time_t deadline);

/* read(2), pread(2), preadv(2): an RWF_NOWAIT attempt answered from the
 * page cache, else the pool.  Returns the bytes read (fewer than asked when
 * only part was cached, or at the end of the file; 0 there).  Errors: those
 * of the system calls (-EBADF, -EISDIR, -EINVAL...), -EFAULT (buf or iov
 * NULL with a non-zero length), and the common ones above. */
TDL_API ssize_t tdl_fs_read(int fd, void *buf, size_t n, tdl_time_t deadline);
TDL_API ssize_t tdl_fs_pread(int fd, void *buf, size_t n, off_t off, tdl_time_t deadline);
TDL_API ssize_t tdl_fs_preadv(int fd, const struct iovec *iov, int iovcnt, off_t off, tdl_time_t deadline);

/* write(2), pwrite(2), pwritev(2): an RWF_NOWAIT attempt where the file
 * system takes one, else the pool.  Returns the bytes written.  Errors: those
 * of the system calls (-EBADF, -ENOSPC, -EFBIG, -EDQUOT...), -EFAULT, and the
 * common ones above. */
TDL_API ssize_t tdl_fs_write(int fd, const void *buf, size_t n, tdl_time_t deadline);
TDL_API ssize_t tdl_fs_pwrite(int fd, const void *buf, size_t n, off_t off, tdl_time_t deadline);
TDL_API ssize_t tdl_fs_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off, tdl_time_t deadline);

/* fsync(2), fdatasync(2) on the pool.  Returns 0.  Errors: -EIO, -ENOSPC,
 * -EBADF, -EINVAL (an fd that cannot be synced), and the common ones above. */
TDL_API int tdl_fs_fsync(int fd, tdl_time_t deadline);
TDL_API int tdl_fs_fdatasync(int fd, tdl_time_t deadline);

/* stat(2), lstat(2) (a symbolic link itself, not what it names) on the
 * ring or the pool (above).  Return 0 with *st filled in.  Errors: -ENOENT,
 * -EACCES, -ENOTDIR, -ELOOP..., -EFAULT (path or st NULL), the common ones
 * above. */
TDL_API int tdl_fs_stat(const char *path, struct stat *st, tdl_time_t deadline);
TDL_API int tdl_fs_lstat(const char *path, struct stat *st, tdl_time_t deadline);
/* fstatat(2): a relative path resolved below dirfd (AT_FDCWD: the current
 * directory); flags: AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH (path "": dirfd
 * itself), AT_NO_AUTOMOUNT.  Returns 0 with *st filled in.  Errors: as
 * tdl_fs_stat, and -EBADF (dirfd), -EINVAL (another flag). */
TDL_API int tdl_fs_fstatat(int dirfd, const char *path, struct stat *st, int flags, tdl_time_t deadline);

/* statx(2): what `mask` asks for (STATX_BASIC_STATS, STATX_BTIME, ...; the
 * kernel says in stx_mask what it filled in), of path below dirfd, with
 * flags as tdl_fs_fstatat's and AT_STATX_SYNC_AS_STAT, AT_STATX_FORCE_SYNC,
 * AT_STATX_DONT_SYNC.  struct statx comes with <sys/stat.h> (and
 * _GNU_SOURCE) from glibc 2.28 and musl 1.2.5; with an older libc, from
 * <linux/stat.h>.  Returns 0 with *stx filled in.  Errors: as
 * tdl_fs_fstatat, and -EFAULT (stx NULL), -ENOSYS (a kernel before 4.11). */
struct statx;
TDL_API int tdl_fs_statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *stx,
                         tdl_time_t deadline);

/* One entry of a directory, as tdl_fs_readdir fills it in. */
typedef struct tdl_fs_dirent {
  uint64_t ino;       /* its inode number */
  unsigned char type; /* DT_REG, DT_DIR, DT_LNK, ... (<dirent.h>), or DT_UNKNOWN: the file system
                         does not say (then ask tdl_fs_fstatat) */
  char name[256];     /* its name, NUL-terminated */
} tdl_fs_dirent;

/* Read the next entries of the directory open as fd (tdl_fs_open with
 * O_RDONLY | O_DIRECTORY) into entries[0..n): one getdents64(2) on the
 * pool for as many as fit.  "." and ".." are left out.  The position is
 * the fd's: the next call goes on where this one stopped, and lseek(fd, 0,
 * SEEK_SET) starts again; entries created or removed meanwhile may be seen
 * or not, but no other entry is seen twice or missed.  Nothing is
 * allocated.  Returns how many it filled in (1 to n), and 0 at the end of
 * the directory.  Errors: -EBADF (fd), -ENOTDIR (fd is not a directory),
 * -EINVAL (n is 0), -EFAULT (entries NULL), -ENOENT (the directory was
 * removed), and the common ones above.  (One call fills in at most 2^20
 * entries, whatever n says: a count must fit the int it returns.) */
TDL_API int tdl_fs_readdir(int fd, tdl_fs_dirent *entries, size_t n, tdl_time_t deadline);
/* fstat(2), on the calling thread, in fibers or not.  Returns 0.  Errors:
 * -EBADF, -EFAULT (st NULL). */
TDL_API int tdl_fs_fstat(int fd, struct stat *st);
/* unlink(2), rename(2), mkdir(2), rmdir(2) on the pool.  Return 0.
 * Errors: those of the system calls (-ENOENT, -EEXIST, -EACCES, -EISDIR,
 * -ENOTEMPTY, -ENOTDIR...), -EFAULT (a NULL path), and the common ones
 * above. */
TDL_API int tdl_fs_unlink(const char *path, tdl_time_t deadline);
TDL_API int tdl_fs_rename(const char *from, const char *to, tdl_time_t deadline);
TDL_API int tdl_fs_mkdir(const char *path, mode_t mode, tdl_time_t deadline);
TDL_API int tdl_fs_rmdir(const char *path, tdl_time_t deadline);

/* How the calls are made.  AUTO (the default) is described above; on a
 * loop whose back end is uring (loop.h), a read or write the page cache
 * cannot answer at once goes to the kernel as an io_uring operation instead
 * of the pool, and so do opens and stats (fsync, readdir and the calls
 * that change a directory still take the pool).  POOL sends every call to
 * the pool (libuv's and tokio's way, for comparison); DIRECT makes every
 * call on the loop's thread (Go's way without its hand-off: a miss stalls
 * the loop; for measurements); URING sends every read and write to the
 * ring, without trying the page cache first (-ENOTSUP on other back ends),
 * and opens and stats as AUTO does.  THREAD-SAFE; it applies to the calls that start afterwards.
 * -EINVAL for another value. */
typedef enum tdl_fs_engine { TDL_FS_AUTO = 0, TDL_FS_POOL = 1, TDL_FS_DIRECT = 2, TDL_FS_URING = 3 } tdl_fs_engine;
TDL_API int tdl_fs_set_engine(tdl_fs_engine engine);

typedef struct tdl_fs_stats {
  uint64_t direct;      /* calls made on the loop's thread (reads the page cache answered, fstat) */
  uint64_t pool;        /* calls run on the pool (and opens or stats the ring refused, then ran there) */
  uint64_t nowait_miss; /* reads or writes first refused by RWF_NOWAIT (then run on the pool or the ring) */
  uint64_t ring;        /* reads, writes, opens and stats run as io_uring operations (uring loops) */
} tdl_fs_stats;

/* The calling thread's counts (its loop's fibers'), since it started; the
 * same counts as tdl_metrics_loop's fs_* fields (metrics.h). */
TDL_API void tdl_fs_stats_get(tdl_fs_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_FS_H */
