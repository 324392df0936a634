/* SPDX-License-Identifier: MIT */
/* Fiber stacks: mapping, guards, the per-loop cache.  See stack.h. */
#include "base/fault.h"
#include "base/sys.h"
#include "fiber/stack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#define TDL_HAVE_VALGRIND 1
#endif
#endif
#ifdef TDL_ASAN
#include <sanitizer/asan_interface.h>
#else
#define ASAN_UNPOISON_MEMORY_REGION(lo, size) ((void)(lo), (void)(size))
#endif
#ifndef TDL_HAVE_VALGRIND
#define VALGRIND_STACK_REGISTER(lo, hi) 0u
#define VALGRIND_STACK_DEREGISTER(id) ((void)(id))
#define VALGRIND_MAKE_MEM_UNDEFINED(lo, size) ((void)(lo), (void)(size))
#define VALGRIND_MAKE_MEM_NOACCESS(lo, size) ((void)(lo), (void)(size))
#define RUNNING_ON_VALGRIND 0
#endif
#define VALGRIND_MAX_MAPPINGS 30000

/* Free-list entry of a cached stack, written at the top of the stack itself:
 * the cache's only memory is memory it already holds.  `link` is in a
 * bucket's list; `next` chains the stranded ones. */
typedef struct tdl__stack_node {
  tdl__list link;
  struct tdl__stack_node *next;
  tdl__stack s;
} tdl__stack_node;

/* Guarded stacks mapped by the whole process (every pool), and how many may
 * be: see "Guards" in stack.h. */
static atomic_size_t guarded_mapped;
static atomic_size_t guard_budget;

static size_t read_max_map_count(void) {
  size_t n = 0;
  char buf[32];
  int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t len = tdl__sys_read(fd, buf, sizeof buf);
    tdl__sys_close(fd);
    for (ssize_t i = 0; i < len && buf[i] >= '0' && buf[i] <= '9'; i++)
      n = n * 10 + (size_t)(buf[i] - '0');
  }
  return n ? n : 65530; /* the kernel's default when /proc is unreadable */
}

static size_t get_guard_budget(void) {
  size_t b = atomic_load_explicit(&guard_budget, memory_order_relaxed);
  if (b == 0) {
    /* Racing first calls compute the same value; either store is fine. */
    size_t limit = read_max_map_count();
    /* Valgrind keeps its own table of mappings, which does not grow: 3.19
     * dies ("VG_N_SEGMENTS is too low") after ~14,500 guarded stacks. */
    if (RUNNING_ON_VALGRIND && limit > VALGRIND_MAX_MAPPINGS)
      limit = VALGRIND_MAX_MAPPINGS;
    b = limit / 4;
    if (b == 0)
      b = 1; // GCOVR_EXCL_LINE: only with vm.max_map_count below 4, where no process starts
    atomic_store_explicit(&guard_budget, b, memory_order_relaxed);
  }
  return b;
}

static int reserve_guard(void) {
  size_t budget = get_guard_budget();
  if (atomic_fetch_add_explicit(&guarded_mapped, 1, memory_order_relaxed) < budget)
    return 1;
  atomic_fetch_sub_explicit(&guarded_mapped, 1, memory_order_relaxed);
  return 0;
}

static void release_guard(void) {
  atomic_fetch_sub_explicit(&guarded_mapped, 1, memory_order_relaxed);
}

static size_t guard_bytes(size_t page) {
  return (TDL__STACK_GUARD + page - 1) & ~(page - 1);
}

int tdl__stack_pool_init(tdl__stack_pool *p, size_t max_cached) {
  *p = (tdl__stack_pool){0};
  p->page = (size_t)sysconf(_SC_PAGESIZE);
  p->max_cached = max_cached;
  return 0;
}

#define MAP_FLAGS (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK)

static int stack_map(tdl__stack_pool *p, size_t size, tdl__stack *out) {
  size_t guard = guard_bytes(p->page);
  char *base;

  if (reserve_guard()) {
    base = TDL__FAULT_MAP(mmap(NULL, guard + size, PROT_READ | PROT_WRITE, MAP_FLAGS, -1, 0));
    if (base != MAP_FAILED && mprotect(base, guard, PROT_NONE) == 0)
      goto mapped;
    /* No memory at all, or the guard would split one VMA too many (the
     * budget is a guess at what the rest of the process uses): either way
     * an unguarded stack is still worth a try. */
    if (base != MAP_FAILED)
      munmap(base, guard + size);
    release_guard();
  }
  guard = 0;
  base = TDL__FAULT_MAP(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_FLAGS, -1, 0));
  if (base == MAP_FAILED)
    return errno == ENOMEM || errno == EAGAIN ? -ENOMEM : -errno;

mapped:
  out->lo = base + guard;
  out->size = size;
  out->guard = guard;
  out->vg_id = VALGRIND_STACK_REGISTER(out->lo, (char *)out->lo + size);
  p->in_use++;
  if (!guard)
    p->in_use_unguarded++;
  return 0;
}

/* 0 on success; -1 if the kernel kept the mapping (munmap fails with ENOMEM
 * when punching a hole in a merged VMA would exceed vm.max_map_count). */
static int stack_unmap(const tdl__stack *s) {
  if (munmap((char *)s->lo - s->guard, s->guard + s->size) != 0)
    return -1;
  VALGRIND_STACK_DEREGISTER(s->vg_id);
  if (s->guard)
    release_guard();
  return 0;
}

/* Lowest resident page in [lo, hi) (page-aligned bounds), or NULL. */
static char *lowest_resident(char *lo, char *hi, size_t page) {
  unsigned char vec[256];
  while (lo < hi) {
    size_t pages = (size_t)(hi - lo) / page;
    if (pages > sizeof vec)
      pages = sizeof vec;
    if (mincore(lo, pages * page, vec) != 0)
      return NULL; // GCOVR_EXCL_LINE: mincore of a live stack's own mapping cannot fail
    for (size_t i = 0; i < pages; i++)
      if (vec[i] & 1)
        return lo + i * page;
    lo += pages * page;
  }
  return NULL;
}

size_t tdl__stack_used(const tdl__stack *s) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char *hi = (char *)s->lo + s->size;
  char *low = lowest_resident(s->lo, hi, page);
  return low ? (size_t)(hi - low) : 0;
}

/* Give back what the last owner touched below the top page (which holds
 * the node), for a stack the kernel would not unmap (see put). */
static void stack_release_pages(const tdl__stack *s, size_t page) {
  madvise(s->lo, s->size - page, MADV_DONTNEED);
}

static tdl__stack_bucket *find_bucket(tdl__stack_pool *p, size_t size, int create) {
  tdl__stack_bucket *empty = NULL;
  for (int i = 0; i < TDL__STACK_BUCKETS; i++) {
    tdl__stack_bucket *b = &p->bucket[i];
    if (b->size == size)
      return b;
    if (!empty && (b->size == 0 || b->n == 0))
      empty = b;
  }
  if (create && empty) {
    empty->size = size;
    empty->low = 0;
    return empty;
  }
  return NULL;
}

static tdl__stack_node *node_of(const tdl__stack *s) {
  uintptr_t top = (uintptr_t)s->lo + s->size;
  return (tdl__stack_node *)((top - sizeof(tdl__stack_node)) & ~(uintptr_t)15);
}

static void push_stranded(tdl__stack_node **list, const tdl__stack *s) {
  tdl__stack_node *n = node_of(s);
  n->s = *s;
  n->next = *list;
  *list = n;
}

int tdl__stack_get(tdl__stack_pool *p, size_t size, tdl__stack *out) {
  if (size < TDL__STACK_MIN || size > TDL__STACK_MAX)
    return -EINVAL;
  size = (size + p->page - 1) & ~(p->page - 1);

  tdl__stack_bucket *b = find_bucket(p, size, 0);
  if (b && b->n) {
    /* Off the front (the hottest), guarded first; the node's own links are
     * left as they are: the stack's new owner overwrites them. */
    tdl__list *head = b->guarded.next ? &b->guarded : &b->unguarded;
    tdl__list *l = head->next, *q = l->next;
    head->next = q;
    q->prev = head;
    if (q == head)
      head->next = head->prev = NULL;
    *out = TDL__CONTAINER_OF(l, tdl__stack_node, link)->s;
    if (--b->n < b->low)
      b->low = b->n;
    p->cached--;
    p->cached_bytes -= size;
    p->in_use++;
    if (!out->guard)
      p->in_use_unguarded++;
    return 0;
  }
  return stack_map(p, size, out);
}

void tdl__stack_claim(const tdl__stack *s, void *from) {
  char *top = (char *)s->lo + s->size;
  (void)VALGRIND_MAKE_MEM_UNDEFINED(from, (size_t)(top - (char *)from));
}

void tdl__stack_put(tdl__stack_pool *p, const tdl__stack *s) {
  const tdl__stack st = *s; /* *s may sit in the memory reused below */
  tdl__stack_bucket *b = NULL;

  /* Frames of a fiber that ended inside a call (every fiber does) leave
   * ASan's redzone poison behind; the next owner must start clean. */
  ASAN_UNPOISON_MEMORY_REGION(st.lo, st.size);

  p->in_use--;
  if (!st.guard)
    p->in_use_unguarded--;
  if (p->cached < p->max_cached)
    b = find_bucket(p, st.size, 1);
  if (!b && stack_unmap(&st) == 0)
    return;

  if (!b) {
    /* The kernel would not unmap it (see stack_unmap).  Keep it, without
     * its pages, and retry when the pool is destroyed rather than lose
     * track of it. */
    stack_release_pages(&st, p->page);
    push_stranded(&p->stranded, &st);
    return;
  }
  tdl__stack_node *n = node_of(&st);
  n->s = st;
  tdl__list_push_front(st.guard ? &b->guarded : &b->unguarded, &n->link);
  b->n++;
  p->cached++;
  p->cached_bytes += st.size;
}

/* Take the coldest stack of b (unguarded first: gets take guarded ones
 * first, so those are the ones left longest) and unmap it. */
static void trim_one(tdl__stack_pool *p, tdl__stack_bucket *b) {
  tdl__list *head = !tdl__list_empty(&b->unguarded) ? &b->unguarded : &b->guarded;
  tdl__list *l = head->prev; /* the back: the least recently put back */
  tdl__list_remove(l);
  tdl__stack st = TDL__CONTAINER_OF(l, tdl__stack_node, link)->s;
  b->n--;
  p->cached--;
  p->cached_bytes -= st.size;
  if (stack_unmap(&st) != 0) {
    stack_release_pages(&st, p->page);
    push_stranded(&p->stranded, &st);
  }
}

size_t tdl__stack_pool_trim(tdl__stack_pool *p) {
  for (int i = 0; i < TDL__STACK_BUCKETS; i++) {
    tdl__stack_bucket *b = &p->bucket[i];
    size_t unused = b->low < b->n ? b->low : b->n;
    for (size_t k = (unused + 1) / 2; k > 0; k--) {
      trim_one(p, b);
      p->trimmed++;
    }
    b->low = b->n;
  }
  return p->cached;
}

/* Unmap every stack on the stranded list; the kernel's refusals stay on it,
 * the only record left of them. */
static void unmap_stranded(tdl__stack_node **list) {
  tdl__stack_node *n = *list, *keep = NULL;
  while (n) {
    tdl__stack_node *next = n->next;
    tdl__stack st = n->s;
    if (stack_unmap(&st) != 0) {
      n->next = keep;
      keep = n;
    }
    n = next;
  }
  *list = keep;
}

void tdl__stack_pool_destroy(tdl__stack_pool *p) {
  for (int i = 0; i < TDL__STACK_BUCKETS; i++) {
    tdl__stack_bucket *b = &p->bucket[i];
    while (b->n)
      trim_one(p, b);
    *b = (tdl__stack_bucket){0};
  }
  unmap_stranded(&p->stranded);
  p->cached = 0;
  p->cached_bytes = 0;
}

void tdl__stack_pool_stats(const tdl__stack_pool *p, tdl__stack_stats *out) {
  out->in_use = p->in_use;
  out->in_use_unguarded = p->in_use_unguarded;
  out->cached = p->cached;
  out->cached_bytes = p->cached_bytes;
  out->trimmed = p->trimmed;
  out->guarded_mapped = atomic_load_explicit(&guarded_mapped, memory_order_relaxed);
  out->guard_budget = get_guard_budget();
}

int tdl__stack_stash(const tdl__stack *s, char *from, char *top, void **copy) {
  size_t len = (size_t)(top - from);
  void *c = TDL__FAULT_ALLOC(malloc(len));
  if (!c)
    return -ENOMEM;
  /* ASan poisons the redzones of live frames; the copy takes them as they
   * are (the restored frames are then checked less, not wrongly). */
  ASAN_UNPOISON_MEMORY_REGION(from, len);
  memcpy(c, from, len);
  /* The whole stack, not only the frames: pages that deeper calls touched
   * before are given back too. */
  if (madvise(s->lo, s->size, MADV_DONTNEED) != 0) {
    free(c);
    return -ENOMEM;
  }
  /* Up to the frames' top only: above it (the cache's node, when the stack
   * is put back) nothing lives while the fiber does. */
  (void)VALGRIND_MAKE_MEM_NOACCESS(s->lo, (size_t)(top - (char *)s->lo));
  *copy = c;
  return 0;
}

void tdl__stack_unstash(char *from, char *top, void *copy) {
  size_t len = (size_t)(top - from);
  (void)VALGRIND_MAKE_MEM_UNDEFINED(from, len);
  memcpy(from, copy, len); /* the pages fault back in, zeroed */
  free(copy);
}
