/* SPDX-License-Identifier: MIT */
/* Stack-overflow diagnosis: the fault handler.  See overflow.h. */
#include "fiber/overflow.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/fault.h"
#include "base/sys.h"

_Thread_local const tdl__stack_info *tdl__running_stack
    __attribute__((tls_model("initial-exec")));

static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static int install_err;
static struct sigaction prev_segv, prev_bus;

static _Thread_local unsigned init_depth;
static _Thread_local char *altstack_map; /* our mapping, NULL if not ours */
static _Thread_local size_t altstack_maplen;

/* ---- async-signal-safe formatting: no stdio, no locale, no malloc ---- */

static char *put_str(char *p, char *end, const char *s) {
  while (*s && p < end)
    *p++ = *s++;
  return p;
}

static char *put_dec(char *p, char *end, uint64_t v) {
  char tmp[20];
  int n = 0;
  do
    tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  while (n > 0 && p < end)
    *p++ = tmp[--n];
  return p;
}

static char *put_hex(char *p, char *end, uintptr_t v) {
  char tmp[2 * sizeof v];
  int n = 0;
  do
    tmp[n++] = "0123456789abcdef"[v & 15];
  while ((v >>= 4) != 0);
  p = put_str(p, end, "0x");
  while (n > 0 && p < end)
    *p++ = tmp[--n];
  return p;
}

/* The name is caller-supplied: clip it and keep the line one line. */
static char *put_name(char *p, char *end, const char *name) {
  enum { MAX_NAME = 64 };
  int i = 0;
  for (; i < MAX_NAME && name[i] && p < end; i++) {
    unsigned char c = (unsigned char)name[i];
    *p++ = (c < 0x20 || c > 0x7e || c == '"') ? '?' : (char)c;
  }
  if (name[i])
    p = put_str(p, end, "...");
  return p;
}

static void report(const tdl__stack_info *st, const void *addr) {
  char buf[256];
  char *p = buf, *end = buf + sizeof buf - 1;
  p = put_str(p, end, "treadle: fiber ");
  p = put_dec(p, end, st->id);
  if (st->name) {
    p = put_str(p, end, " \"");
    p = put_name(p, end, st->name);
    p = put_str(p, end, "\"");
  }
  p = put_str(p, end, " overflowed its ");
  p = put_dec(p, end, st->size);
  p = put_str(p, end, "-byte stack (fault at ");
  p = put_hex(p, end, (uintptr_t)addr);
  p = put_str(p, end, ")");
  *p++ = '\n';
  /* One write so concurrent output cannot split the line; nothing useful can
   * be done if it fails. */
  ssize_t r = tdl__sys_write(STDERR_FILENO, buf, (size_t)(p - buf));
  (void)r;
}

/* Hand a fault we do not own to whoever was there before us, as faithfully
 * as a handler can (their sa_mask and SA_RESETHAND are not replayed). */
static void chain(int sig, siginfo_t *si, void *uc) {
  const struct sigaction *old = sig == SIGBUS ? &prev_bus : &prev_segv;
  if (old->sa_flags & SA_SIGINFO) {
    old->sa_sigaction(sig, si, uc);
    return;
  }
  if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
    old->sa_handler(sig);
    return;
  }
  if (old->sa_handler == SIG_IGN && si->si_code <= 0)
    return; /* sent with kill(): ignoring it is what would have happened */
  /* Default action (or a real fault while "ignored", which the kernel turns
   * into the default action): put the old disposition back and let the
   * faulting instruction run again, or re-send a signal that came from
   * kill().  It stays blocked until this handler returns. */
  sigaction(sig, old, NULL);
  if (si->si_code <= 0)
    raise(sig);
}

static void on_fault(int sig, siginfo_t *si, void *uc) {
  int saved_errno = errno;
  const tdl__stack_info *st = tdl__running_stack;
  const char *addr = si->si_addr;

  /* si_code > 0: raised by the kernel for this access, so si_addr is real. */
  if (st && si->si_code > 0 && addr >= st->guard_lo && addr < st->guard_hi) {
    report(st, addr);
    /* Die of the original signal, with the original core dump: restore the
     * default action and return; the faulting access repeats. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
  } else {
    chain(sig, si, uc);
  }
  errno = saved_errno;
}

static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &prev_segv) != 0 || sigaction(SIGBUS, &sa, &prev_bus) != 0)
    install_err = -errno; // GCOVR_EXCL_LINE: sigaction of SIGSEGV and SIGBUS with a valid handler cannot fail
}

/* The handler only formats one line, but it may chain to a foreign handler
 * (or, under ASan, to ASan's reporter), which wants room. */
static size_t altstack_size(void) {
  size_t want = 64 * 1024;
#ifdef _SC_SIGSTKSZ
  long k = sysconf(_SC_SIGSTKSZ);
  if (k > 0 && (size_t)k > want)
    want = (size_t)k;
#endif
  return want;
}

int tdl__overflow_thread_init(void) {
  pthread_once(&install_once, install);
  if (install_err)
    return install_err; // GCOVR_EXCL_LINE: install cannot fail (above)
  if (init_depth++ > 0)
    return 0;

  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0) {
    /* GCOVR_EXCL_START: reading the thread's signal stack cannot fail */
    init_depth = 0;
    return -errno;
    /* GCOVR_EXCL_STOP */
  }
  if (!(cur.ss_flags & SS_DISABLE))
    return 0; /* the thread already has one (maybe ASan's): share it */

  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t size = (altstack_size() + page - 1) & ~(page - 1);
  /* A guard page below, so a handler that overflows the signal stack faults
   * instead of scribbling over whatever is mapped beneath it. */
  char *map = TDL__FAULT_MAP(mmap(NULL, page + size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0));
  if (map == MAP_FAILED) {
    init_depth = 0;
    return -ENOMEM;
  }
  if (mprotect(map, page, PROT_NONE) != 0) {
    int err = -errno;
    munmap(map, page + size);
    init_depth = 0;
    return err == -EAGAIN ? -ENOMEM : err;
  }
  stack_t ss = {.ss_sp = map + page, .ss_size = size, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0) {
    /* GCOVR_EXCL_START: cannot fail: the stack is fresh and large enough
     * (ENOMEM), the flags 0 (EINVAL), and the thread is not running on a
     * signal stack (EPERM: it has none, SS_DISABLE above) */
    int err = -errno;
    munmap(map, page + size);
    init_depth = 0;
    return err;
    /* GCOVR_EXCL_STOP */
  }
  altstack_map = map;
  altstack_maplen = page + size;
  return 0;
}

void tdl__overflow_thread_cleanup(void) {
  if (init_depth == 0 || --init_depth > 0)
    return;
  if (!altstack_map)
    return;
  /* Disable it only if it is still ours: someone may have installed their
   * own since, and theirs must stay.  Either way ours is no longer used. */
  stack_t cur;
  if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE) &&
      (char *)cur.ss_sp >= altstack_map && (char *)cur.ss_sp < altstack_map + altstack_maplen) {
    stack_t off = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
  }
  munmap(altstack_map, altstack_maplen);
  altstack_map = NULL;
  altstack_maplen = 0;
}
