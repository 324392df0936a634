/* SPDX-License-Identifier: MIT */
/*
 * treewalk: read every regular file under a directory, from many fibers,
 * and print a checksum of the tree.
 *
 *   treewalk [--workers N] DIR          (default 16 workers)
 *
 * The recipe fs.h describes.  One fiber walks the tree: it opens each
 * directory below DIR's fd (tdl_fs_openat) and reads it in batches
 * (tdl_fs_readdir), whose entry types say what is a file, a directory or a
 * link without a stat.  It sends each regular file's path into a bounded
 * channel, which N worker fibers drain: each opens, reads and closes one
 * file at a time.  So at most N files are open, however large the tree, and
 * the walk waits when the workers fall behind.  On a uring loop
 * (TDL_BACKEND=uring) the opens are ring operations; elsewhere they, and
 * the directory reads everywhere, take the pool.
 *
 * Symbolic links are counted, not followed; FIFOs, sockets and devices are
 * counted as "other" and never opened.  A file or directory that cannot be
 * read is reported on stderr and the walk goes on; the exit status is then
 * 1.  The checksum is the sum (mod 2^64) over the regular files of the
 * 64-bit FNV-1a of the file's path below DIR, a NUL byte, and its contents:
 * it does not depend on the order in which the files are read.
 *
 * Prints, on stdout, one count a line and the checksum in hexadecimal:
 *   files N       regular files read whole
 *   dirs N        directories read (DIR included)
 *   links N
 *   other N
 *   bytes N       in the files read
 *   errors N
 *   checksum X    16 hexadecimal digits
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <treadle.h>

#define READ_SIZE (64 * 1024)
#define BATCH 64 /* directory entries per tdl_fs_readdir */

typedef struct walk {
  int root;        /* DIR, open */
  tdl_chan *paths; /* char *, malloc'ed, below root: the worker frees it */
  uint64_t files, dirs, links, other, bytes, errors, checksum;
} walk;

static const uint64_t fnv_basis = 0xcbf29ce484222325ULL, fnv_prime = 0x100000001b3ULL;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * fnv_prime;
  return h;
}

static void report(walk *w, const char *path, int err)
{
  fprintf(stderr, "treewalk: %s: %s\n", path, tdl_strerror(err));
  w->errors++;
}

/* One file: its checksum added only when it was read whole. */
static void read_file(walk *w, const char *path, char *buf)
{
  int fd = tdl_fs_openat(w->root, path, O_RDONLY, 0, TDL_FOREVER);
  if (fd < 0) {
    report(w, path, fd);
    return;
  }
  uint64_t h = fnv(fnv_basis, path, strlen(path) + 1), bytes = 0;
  ssize_t n;
  while ((n = tdl_fs_read(fd, buf, READ_SIZE, TDL_FOREVER)) > 0) {
    h = fnv(h, buf, (size_t)n);
    bytes += (uint64_t)n;
  }
  tdl_close(fd);
  if (n < 0) {
    report(w, path, (int)n);
    return;
  }
  w->files++;
  w->bytes += bytes;
  w->checksum += h;
}

static void *worker(void *arg)
{
  walk *w = arg;
  char *buf = malloc(READ_SIZE); /* not on the fiber's 64 KiB stack */
  char *path;
  while (tdl_chan_recv(w->paths, &path, TDL_FOREVER) == 0) {
    if (buf)
      read_file(w, path, buf);
    else
      report(w, path, -ENOMEM);
    free(path);
  }
  free(buf);
  return NULL; /* the channel was closed: the walk is over */
}

/* "dir/name", or "name" below the root ("."). */
static char *join(const char *dir, const char *name)
{
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (!p)
    return NULL;
  if (strcmp(dir, ".") == 0)
    memcpy(p, name, b + 1);
  else {
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
  }
  return p;
}

/* Directories still to read: a stack of paths below the root. */
typedef struct pending {
  char **at;
  size_t n, cap;
} pending;

static int push(pending *s, char *path)
{
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    char **at = realloc(s->at, cap * sizeof *at);
    if (!at)
      return -ENOMEM;
    s->at = at;
    s->cap = cap;
  }
  s->at[s->n++] = path;
  return 0;
}

/* Read one directory: its files go to the workers, its directories on s. */
static void read_dir(walk *w, const char *dir, pending *s, tdl_fs_dirent *ents)
{
  int fd = tdl_fs_openat(w->root, dir, O_RDONLY | O_DIRECTORY, 0, TDL_FOREVER);
  if (fd < 0) {
    report(w, dir, fd);
    return;
  }
  w->dirs++;
  int n;
  while ((n = tdl_fs_readdir(fd, ents, BATCH, TDL_FOREVER)) > 0) {
    for (int i = 0; i < n; i++) {
      unsigned char type = ents[i].type;
      char *path = join(dir, ents[i].name);
      if (!path) {
        report(w, ents[i].name, -ENOMEM);
        continue;
      }
      if (type == DT_UNKNOWN) { /* the file system does not say: ask */
        struct stat st;
        int e = tdl_fs_fstatat(fd, ents[i].name, &st, AT_SYMLINK_NOFOLLOW, TDL_FOREVER);
        if (e < 0) {
          report(w, path, e);
          free(path);
          continue;
        }
        type = S_ISREG(st.st_mode) ? DT_REG : S_ISDIR(st.st_mode) ? DT_DIR : S_ISLNK(st.st_mode) ? DT_LNK : DT_FIFO;
      }
      int e = 0;
      if (type == DT_REG)
        e = tdl_chan_send(w->paths, &path, TDL_FOREVER); /* waits while the workers are busy */
      else if (type == DT_DIR)
        e = push(s, path);
      else {
        if (type == DT_LNK)
          w->links++;
        else
          w->other++;
        free(path);
      }
      if (e < 0) {
        report(w, path, e);
        free(path);
      }
    }
  }
  if (n < 0)
    report(w, dir, n);
  tdl_close(fd);
}

typedef struct args {
  const char *dir;
  int workers;
  walk w;
  int error; /* one that stopped the walk from starting */
} args;

static void *walk_tree(void *arg)
{
  args *a = arg;
  walk *w = &a->w;
  w->root = tdl_fs_open(a->dir, O_RDONLY | O_DIRECTORY, 0, TDL_FOREVER);
  if (w->root < 0) {
    a->error = w->root;
    return NULL;
  }
  tdl_fiber_t *fibers = calloc((size_t)a->workers, sizeof *fibers);
  tdl_fs_dirent *ents = malloc(BATCH * sizeof *ents);
  int e = fibers && ents ? tdl_chan_new(&w->paths, sizeof(char *), 2 * (size_t)a->workers) : -ENOMEM;
  int started = 0;
  while (e == 0 && started < a->workers) {
    e = tdl_fiber_spawn(&fibers[started], tdl_fiber_loop(), worker, w, NULL);
    if (e == 0)
      started++;
  }
  if (e < 0) {
    a->error = e;
  } else {
    pending s = {0};
    char *top = join(".", ".");
    if (!top || push(&s, top) < 0) {
      free(top);
      a->error = -ENOMEM;
    }
    while (s.n > 0) {
      char *dir = s.at[--s.n];
      read_dir(w, dir, &s, ents);
      free(dir);
    }
    free(s.at);
  }
  if (w->paths)
    tdl_chan_close(w->paths); /* the workers finish what is queued, then stop */
  for (int i = 0; i < started; i++)
    tdl_fiber_join(fibers[i], NULL, TDL_FOREVER);
  tdl_chan_free(w->paths);
  free(ents);
  free(fibers);
  tdl_close(w->root);
  return NULL;
}

int main(int argc, char **argv)
{
  args a = {.workers = 16};
  int i = 1;
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: treewalk [--workers N] DIR\n");
    return 0;
  }
  if (argc > 2 && strcmp(argv[1], "--workers") == 0) {
    char *end;
    long n = strtol(argv[2], &end, 10);
    if (end == argv[2] || *end || n < 1 || n > 4096) {
      fprintf(stderr, "treewalk: --workers \"%s\": wants 1 to 4096\n", argv[2]);
      return 2;
    }
    a.workers = (int)n;
    i = 3;
  }
  if (i != argc - 1) {
    fprintf(stderr, "usage: treewalk [--workers N] DIR\n");
    return 2;
  }
  a.dir = argv[i];
  int e = tdl_fiber_main(walk_tree, &a, NULL);
  if (e == 0)
    e = a.error;
  if (e < 0) {
    fprintf(stderr, "treewalk: %s: %s\n", a.dir, tdl_strerror(e));
    return 1;
  }
  printf("files %" PRIu64 "\ndirs %" PRIu64 "\nlinks %" PRIu64 "\nother %" PRIu64 "\nbytes %" PRIu64
         "\nerrors %" PRIu64 "\nchecksum %016" PRIx64 "\n",
         a.w.files, a.w.dirs, a.w.links, a.w.other, a.w.bytes, a.w.errors, a.w.checksum);
  return a.w.errors ? 1 : 0;
}
