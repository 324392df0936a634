/* SPDX-License-Identifier: MIT */
/*
 * The user's view of each fd (hook_internal.h): a table by fd number, in
 * chunks of 1024 made on first use and never freed, so that a look-up takes
 * no lock.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "hook/hook_internal.h"

_Atomic(tdl__hfd *) tdl__hfd_chunks[TDL__HFD_NCHUNKS];

tdl__hfd *tdl__hfd_at(int fd)
{
  tdl__hfd *h = tdl__hfd_peek(fd);
  if (h || (unsigned)fd >= TDL__HFD_CHUNK * TDL__HFD_NCHUNKS)
    return h;
  tdl__hfd *c = calloc(TDL__HFD_CHUNK, sizeof *c), *none = NULL;
  if (!c)
    return NULL; // GCOVR_EXCL_LINE: calloc fails only without memory (no fault-injection site here)
  if (!atomic_compare_exchange_strong(&tdl__hfd_chunks[(unsigned)fd >> TDL__HFD_CHUNK_BITS], &none, c)) {
    free(c); /* another thread was quicker */
    c = none;
  }
  return &c[(unsigned)fd & (TDL__HFD_CHUNK - 1)];
}

/* In a fiber: a number closed outside one is forgotten by this fiber's
 * loop before its first use as a new file. */
static void forget_if_stale(int fd, tdl__hfd *h)
{
  if (h->stale && tdl__hook_in_fiber()) {
    (void)tdl_fd_forget(fd);
    h->stale = 0;
  }
}

int tdl__hfd_made(int fd)
{
  tdl__hfd *h = fd >= 0 ? tdl__hfd_peek(fd) : NULL;
  if (h) {
    forget_if_stale(fd, h);
    bool stale = h->stale;
    memset(h, 0, sizeof *h);
    h->stale = stale;
  }
  return fd;
}

void tdl__hfd_classify(int fd, tdl__hfd *h)
{
  struct stat st;
  if (fstat(fd, &st) < 0)
    return; /* stays unknown; the call itself reports EBADF */
  int fl = tdl__hook_real.fcntl(fd, F_GETFL);
  if (fl < 0)
    return;
  h->user_nb = (fl & O_NONBLOCK) != 0;
  h->our_nb = 0;
  if (S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode)) {
    h->kind = TDL__HFD_WAITABLE;
    int type = 0;
    socklen_t tl = sizeof type;
    h->stream = S_ISFIFO(st.st_mode) ||
                (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM);
  }
  else if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode))
    h->kind = TDL__HFD_OTHER;
  else
    h->kind = TDL__HFD_POLLABLE;
}

tdl__hfd *tdl__hfd_hooked_slow(int fd)
{
  tdl__hfd *h = tdl__hfd_at(fd);
  if (!h)
    return NULL;
  forget_if_stale(fd, h);
  if (h->kind == TDL__HFD_UNKNOWN)
    tdl__hfd_classify(fd, h);
  if (h->kind != TDL__HFD_WAITABLE || h->user_nb)
    return NULL;
  if (!h->our_nb) {
    int fl = tdl__hook_real.fcntl(fd, F_GETFL);
    if (fl < 0)
      return NULL;
    if (!(fl & O_NONBLOCK)) {
      if (tdl__hook_real.fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return NULL;
      TDL__HOOK_COUNT(nonblocking);
    }
    h->our_nb = 1;
  }
  return h;
}

bool tdl__hfd_nonblocking_underneath(int fd, const tdl__hfd *h)
{
  if (h->our_nb)
    return true;
  int fl = tdl__hook_real.fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}

/* The numbers dup'd of fd's file, before the cut or after, are the same
 * connection: cut them too.  A socket's inode names its file. */
static void cut_the_other_numbers(int fd)
{
  struct stat st, other;
  if (fstat(fd, &st) < 0)
    return;
  for (size_t c = 0; c < TDL__HFD_NCHUNKS; c++) {
    tdl__hfd *chunk = atomic_load_explicit(&tdl__hfd_chunks[c], memory_order_acquire);
    for (size_t i = 0; chunk && i < TDL__HFD_CHUNK; i++) {
      int n = (int)(c * TDL__HFD_CHUNK + i);
      if (chunk[i].dupped && !chunk[i].cut && n != fd && fstat(n, &other) == 0 &&
          other.st_dev == st.st_dev && other.st_ino == st.st_ino)
        chunk[i].cut = 1;
    }
  }
}

void tdl__hfd_cut(int fd, tdl__hfd *h)
{
  int e = errno; /* the caller's (ECANCELED), which the looks below must keep */
  int type = 0, acc = 0;
  socklen_t tl = sizeof type, al = sizeof acc;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM &&
      getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) == 0 && !acc) {
    /* A socketpair (a Unix-domain connection whose peer has no name) is a
     * pipe by another name, as often as not a library's wakeup channel that
     * its poll waits on beside the connection (curl_multi_poll's): cut, it
     * would report POLLERR to every later poll, and the library spin. */
    /* (getpeername writes the family; set before for clang's analyser, which
     * does not see a write through glibc's transparent-union argument.) */
    struct sockaddr_un peer = {.sun_family = AF_UNSPEC};
    socklen_t pl = sizeof peer;
    bool pair = getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 && peer.sun_family == AF_UNIX &&
                pl <= offsetof(struct sockaddr_un, sun_path);
    if (!pair) {
      h->cut = 1;
      if (h->dupped)
        cut_the_other_numbers(fd);
    }
  }
  errno = e;
}
