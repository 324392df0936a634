/* SPDX-License-Identifier: MIT */
/*
 * Fiber stacks at the kernel's limit on mappings (vm.max_map_count, stack.h
 * "Guards"): there mmap fails unless the new mapping merges with a
 * neighbour, mprotect fails where it would split one, and so does munmap
 * of a stack in the middle of merged unguarded ones.  A stack the kernel
 * will not unmap must be kept (its pages given back) and unmapped when the
 * pool is destroyed once the kernel allows it; a guard the kernel refuses
 * must not be left half made; the overflow handler's signal stack fails
 * with -ENOMEM and leaves the thread as it was.
 *
 * All of it in a child process, which takes its own map count to the limit
 * by splitting a read-only region page by page (each split costs a mapping
 * or two) until mprotect is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "fiber/overflow.h"
#include "fiber/stack.h"

/* The child ends with _exit; in a coverage build (TDL_COVERAGE) it writes
 * gcov's counters itself first. */
#ifdef TDL_COVERAGE
void __gcov_dump(void);
void __gcov_reset(void);
#endif

static void child_exit(int code)
{
#ifdef TDL_COVERAGE
  __gcov_dump();
#endif
  _exit(code);
}

static size_t page;

static size_t max_map_count(void)
{
  char buf[32] = {0};
  int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  return n > 0 ? (size_t)strtoul(buf, NULL, 10) : 0;
}

/* ---- the filler ---- */

static char *fill;          /* read-only; its odd pages are made PROT_NONE */
static size_t fill_pages, fill_split;
enum { SPARES = 16 };
static char *spare[SPARES]; /* two read-only pages each: one split costs one */
static bool spare_split[SPARES];

/* Take the process to the limit: split until the kernel refuses.  A split
 * in the middle of the filler costs two mappings, so when the kernel refuses
 * one there may be one left: a spare's split, which costs one, takes it. */
static void to_limit(void)
{
  for (;;) {
    if (2 * fill_split + 2 >= fill_pages)
      child_exit(30); /* the filler is too small */
    if (mprotect(fill + (2 * fill_split + 1) * page, page, PROT_NONE) != 0)
      break;
    fill_split++;
  }
  if (errno != ENOMEM)
    child_exit(31);
  for (int i = 0; i < SPARES; i++)
    if (!spare_split[i]) {
      if (mprotect(spare[i], page, PROT_NONE) == 0)
        spare_split[i] = true;
      else if (errno != ENOMEM)
        child_exit(32);
      return;
    }
  child_exit(33);
}

/* Whether [lo, lo + len) is mapped; *resident: how many of its pages are in
 * memory. */
static bool mapped(const void *lo, size_t len, size_t *resident)
{
  static unsigned char vec[1024];
  size_t pages = len / page;
  if (pages > sizeof vec)
    child_exit(34);
  if (mincore((void *)lo, len, vec) != 0)
    return false;
  *resident = 0;
  for (size_t i = 0; i < pages; i++)
    *resident += vec[i] & 1;
  return true;
}

/* ---- the child ---- */

enum { MAX_GUARDED = 40000 };
static tdl__stack guarded[MAX_GUARDED];

static void at_the_limit(void)
{
#ifdef TDL_COVERAGE
  __gcov_reset(); /* only what the child runs */
#endif
  size_t maps = max_map_count();
  if (maps == 0 || maps > 200000)
    _exit(77); /* unknown, or too many mappings to reach in a test */
  fill_pages = maps + 1024;
  fill = mmap(NULL, fill_pages * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (fill == MAP_FAILED)
    child_exit(20);
  for (int i = 0; i < SPARES; i++)
    if ((spare[i] = mmap(NULL, 2 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED)
      child_exit(21);

  /* p caches nothing: a put unmaps.  q caches. */
  tdl__stack_pool p, q;
  tdl__stack_pool_init(&p, 0);
  tdl__stack_pool_init(&q, 16);
  tdl__stack_stats st;
  tdl__stack_pool_stats(&p, &st);
  if (st.guard_budget < st.guarded_mapped + 3 || st.guard_budget - st.guarded_mapped > MAX_GUARDED)
    child_exit(22);
  /* Guarded stacks until the budget is spent, the last two of sizes that
   * leave holes the tests below fill: 52 KiB and its 16 KiB guard make the
   * 68 KiB of the overflow handler's signal stack and its guard page. */
  size_t n = st.guard_budget - st.guarded_mapped, ng = 0;
  for (; ng < n; ng++) {
    size_t size = ng == n - 2 ? 52 * 1024 : TDL__STACK_DEFAULT;
    if (tdl__stack_get(&p, size, &guarded[ng]) != 0 || guarded[ng].guard == 0)
      child_exit(23);
  }
  tdl__stack *g_alt = &guarded[n - 2], *g_last = &guarded[n - 1];
  /* Past the budget: unguarded stacks, which merge with their neighbours. */
  tdl__stack u[3], v[3];
  for (int i = 0; i < 3; i++)
    if (tdl__stack_get(&p, TDL__STACK_DEFAULT, &u[i]) != 0 || u[i].guard != 0)
      child_exit(24);
  for (int i = 0; i < 3; i++)
    if (tdl__stack_get(&q, TDL__STACK_DEFAULT, &v[i]) != 0 || v[i].guard != 0)
      child_exit(25);
  memset(u[1].lo, 1, u[1].size);
  memset(v[1].lo, 1, v[1].size);
  tdl__stack_put(&q, &v[1]); /* cached */
  tdl__stack_pool_stats(&q, &st);
  if (st.cached != 1)
    child_exit(26);

  to_limit();

  /* A put the kernel refuses to unmap (u[1] sits between u[0] and u[2] in
   * one mapping): the stack is no longer in use, stays mapped, and its
   * pages but the top one (the pool's record of it) are given back. */
  tdl__stack u1 = u[1];
  tdl__stack_pool_stats(&p, &st);
  size_t in_use = st.in_use;
  tdl__stack_put(&p, &u[1]);
  tdl__stack_pool_stats(&p, &st);
  if (st.in_use != in_use - 1 || st.cached != 0)
    child_exit(40);
  size_t resident = 0;
  if (!mapped(u1.lo, u1.size, &resident))
    child_exit(41); /* unmapped after all: the limit was not reached */
  if (resident > 1)
    child_exit(42);

  /* The overflow handler's signal stack: the kernel refuses its guard page
   * (or the mapping itself): -ENOMEM, and the thread has none after it. */
  tdl__stack_put(&p, g_alt); /* a whole mapping: unmapped, two mappings freed */
  to_limit();
  stack_t cur;
  sigaltstack(NULL, &cur);
  bool had = !(cur.ss_flags & SS_DISABLE); /* a sanitizer's: then none is made */
  int e = tdl__overflow_thread_init();
  if (had) {
    if (e != 0)
      child_exit(50);
    tdl__overflow_thread_cleanup();
  } else {
    if (e != -ENOMEM)
      child_exit(51);
    sigaltstack(NULL, &cur);
    if (!(cur.ss_flags & SS_DISABLE))
      child_exit(52);
  }

  /* A stack whose guard the kernel refuses (in the hole of the last two
   * guarded stacks, merged with u[0] below it: a mapping that costs
   * nothing, whose guard would split it) is not handed out guarded: an
   * unguarded one, or -ENOMEM when even that would take a mapping; the
   * guard budget is as it was. */
  tdl__stack_put(&p, g_last);
  to_limit();
  tdl__stack_pool_stats(&p, &st);
  size_t guards = st.guarded_mapped;
  tdl__stack x;
  int r = tdl__stack_get(&p, 132 * 1024, &x);
  tdl__stack_pool_stats(&p, &st);
  if (r == 0) {
    if (x.guard != 0 || st.guarded_mapped != guards)
      child_exit(60);
    tdl__stack_put(&p, &x);
  } else if (r != -ENOMEM || st.guarded_mapped != guards) {
    child_exit(61);
  }

  /* Destroyed at the limit: q's cached stack cannot be unmapped either;
   * both pools keep what the kernel refused... */
  tdl__stack v1 = v[1];
  tdl__stack_pool_destroy(&q);
  tdl__stack_pool_destroy(&p);
  tdl__stack_pool_stats(&q, &st);
  if (st.cached != 0)
    child_exit(70);
  if (!mapped(v1.lo, v1.size, &resident) || resident > 1 || !mapped(u1.lo, u1.size, &resident))
    child_exit(71);

  /* ...and unmap it when destroyed again, the limit gone. */
  if (munmap(fill, fill_pages * page) != 0)
    child_exit(72);
  tdl__stack_pool_destroy(&q);
  tdl__stack_pool_destroy(&p);
  if (mapped(v1.lo, v1.size, &resident) || mapped(u1.lo, u1.size, &resident))
    child_exit(73);

  /* What is still in use goes back as usual. */
  tdl__stack_put(&p, &u[0]);
  tdl__stack_put(&p, &u[2]);
  tdl__stack_put(&q, &v[0]);
  tdl__stack_put(&q, &v[2]);
  for (size_t i = 0; i < n - 2; i++)
    tdl__stack_put(&p, &guarded[i]);
  tdl__stack_pool_destroy(&p);
  tdl__stack_pool_destroy(&q);
  tdl__stack_pool_stats(&p, &st);
  if (st.in_use != 0 || st.guarded_mapped != 0)
    child_exit(74);
  child_exit(0);
}

static void test_at_the_map_limit(void **state)
{
  (void)state;
  if (RUNNING_ON_VALGRIND || getenv("TDL_QEMU_USER"))
    T_SKIP("valgrind and qemu-user map on their own behalf: the process's count is not its own");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  T_SKIP("the sanitizer maps its own shadow and bookkeeping, and dies when the count is used up");
#endif
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0)
    at_the_limit();
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
    T_SKIP("vm.max_map_count unknown or above 200000");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("child status %#x (exit codes: see at_the_limit)", status);
}

int main(void)
{
  page = (size_t)sysconf(_SC_PAGESIZE);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_at_the_map_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
