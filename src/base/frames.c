/* SPDX-License-Identifier: MIT */
/* Call chains from frame pointers: the walk and the naming of its frames. */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include "base/frames.h"
#include "base/fmt.h"

/* Not instrumented by ASan: a frame pointer that some code used as a plain
 * register may point into a redzone of the stack it is checked against,
 * which is mapped memory, and only a wrong frame at worst. */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
__attribute__((no_sanitize("address")))
#endif
#endif
int tdl__frames_walk(uintptr_t pc, uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t *out, int max)
{
  int n = 0;
  if (pc && n < max)
    out[n++] = pc;
  /* Each record must lie wholly inside the stack and above the previous one:
   * stacks grow down, so callers' frames are higher. */
  while (n < max && fp >= lo && fp <= hi - 2 * sizeof(uintptr_t) && fp % sizeof(uintptr_t) == 0) {
    const uintptr_t *rec = (const uintptr_t *)fp;
    uintptr_t next = rec[0], ret = rec[1];
    if (ret == 0)
      break; /* the zero word a fiber's first frame or a thread's start leaves */
    out[n++] = ret;
    if (next <= fp)
      break;
    fp = next;
  }
  return n;
}

static char *put_hex(char *p, char *end, uint64_t v)
{
  p = tdl__put_str(p, end, "0x");
  return tdl__put_uint(p, end, v, 16);
}

/* Whether the module mapped at base is an executable linked at a fixed
 * address, whose addresses addr2line takes as they are (a shared object or
 * a position-independent executable takes offsets). */
static bool fixed_address(const void *base)
{
  const ElfW(Ehdr) *eh = base;
  return eh && eh->e_type == ET_EXEC;
}

char *tdl__frames_line(char *p, char *end, int i, uintptr_t pc)
{
  p = tdl__put_str(p, end, "        #");
  p = tdl__put_uint(p, end, (uint64_t)i, 10);
  p = tdl__put_str(p, end, " ");
  p = put_hex(p, end, pc);
  Dl_info di;
  /* A return address is the instruction after the call, which may be the
   * first of the next function: look up the call itself. */
  if (!dladdr((void *)(pc - 1), &di) || !di.dli_fbase) {
    return tdl__put_str(p, end, " ??\n");
  }
  if (di.dli_sname && di.dli_saddr) {
    p = tdl__put_str(p, end, " ");
    p = tdl__put_str(p, end, di.dli_sname);
    p = tdl__put_str(p, end, "+");
    p = put_hex(p, end, pc - (uintptr_t)di.dli_saddr);
  } else {
    p = tdl__put_str(p, end, " ??");
  }
  p = tdl__put_str(p, end, " (");
  p = tdl__put_str(p, end, di.dli_fname && di.dli_fname[0] ? di.dli_fname : "?");
  p = tdl__put_str(p, end, "+");
  p = put_hex(p, end, fixed_address(di.dli_fbase) ? pc : pc - (uintptr_t)di.dli_fbase);
  return tdl__put_str(p, end, ")\n");
}
