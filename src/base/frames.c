/* SPDX-License-Identifier: MIT */
/* Call chains from frame pointers: the walk and the naming of its frames. */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

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

bool tdl__frames_no_record(uintptr_t pc)
{
  Dl_info di;
  if (!dladdr((void *)pc, &di) || !di.dli_saddr || (uintptr_t)di.dli_saddr > pc)
    return false;
  /* The bytes from the function's start up to pc: code that ran. */
  const unsigned char *c = di.dli_saddr;
  size_t ran = pc - (uintptr_t)di.dli_saddr;
#if defined(__x86_64__)
  size_t i = 0;
  if (ran >= 4 && c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa)
    i = 4; /* endbr64 */
  if (ran < i + 4)
    return true; /* interrupted before push %rbp; mov %rsp,%rbp was done */
  bool push = c[i] == 0x55;
  bool mov = c[i + 1] == 0x48 && ((c[i + 2] == 0x89 && c[i + 3] == 0xe5) || (c[i + 2] == 0x8b && c[i + 3] == 0xec));
  return !(push && mov);
#elif defined(__aarch64__)
  /* add x29, sp, #imm (mov x29, sp is its #0 form), after the stp of x29
   * and x30 (and a paciasp or bti before them). */
  for (size_t k = 0; k < 8 && (k + 1) * 4 <= ran; k++) {
    uint32_t insn;
    memcpy(&insn, c + 4 * k, sizeof insn);
    if ((insn & 0xff8003ffu) == 0x910003fdu)
      return false;
  }
  return true;
#else
  (void)c;
  (void)ran;
  return false;
#endif
}

const char *tdl__frames_module(uintptr_t pc)
{
  Dl_info di;
  if (!dladdr((void *)pc, &di) || !di.dli_fname || !di.dli_fname[0])
    return NULL;
  const char *slash = strrchr(di.dli_fname, '/');
  return slash ? slash + 1 : di.dli_fname;
}

bool tdl__frames_in_treadle(uintptr_t pc)
{
  Dl_info di, self;
  if (!dladdr((void *)pc, &di))
    return false;
  if (di.dli_sname)
    return strncmp(di.dli_sname, "tdl_", 4) == 0;
  return dladdr((void *)(uintptr_t)tdl__frames_walk, &self) && self.dli_fbase == di.dli_fbase;
}
