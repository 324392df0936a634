/* SPDX-License-Identifier: MIT */
/* base/frames.h: the walk of frame records (on stacks built here, record by
 * record) and the naming of frames (against dladdr's view of this program,
 * which exports its functions: tests/CMakeLists.txt). */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "base/frames.h"
#include <treadle.h>

/* A function with no frame-pointer prologue: nops, then a return.  The same
 * mnemonics assemble on x86-64 and AArch64; exported, so dladdr knows where
 * it starts. */
__asm__(".text\n"
        ".globl tdl_test_frameless\n"
        ".type tdl_test_frameless, %function\n"
        "tdl_test_frameless:\n"
        "  nop\n  nop\n  nop\n  nop\n  nop\n  nop\n  nop\n  nop\n"
        "  ret\n"
        ".size tdl_test_frameless, .-tdl_test_frameless\n");
void tdl_test_frameless(void);
uintptr_t test_frames_callee(void);
uintptr_t test_frames_with_frame(void);

/* Exported (not static): the return address into it, a pc past its
 * prologue, is what a walk finds in a caller's record. */
__attribute__((noinline)) uintptr_t test_frames_callee(void)
{
  return (uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0));
}
/* A function that makes a frame record and calls test_frames_callee: in
 * assembly, for its prologue to be there whatever the compiler and its
 * flags (a clang Release build omits frame pointers, per function too). */
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl test_frames_with_frame\n"
        ".type test_frames_with_frame, %function\n"
        "test_frames_with_frame:\n"
        "  push %rbp\n"
        "  mov %rsp, %rbp\n"
        "  call test_frames_callee\n"
        "  pop %rbp\n"
        "  ret\n"
        ".size test_frames_with_frame, .-test_frames_with_frame\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl test_frames_with_frame\n"
        ".type test_frames_with_frame, %function\n"
        "test_frames_with_frame:\n"
        "  stp x29, x30, [sp, #-16]!\n"
        "  mov x29, sp\n"
        "  bl test_frames_callee\n"
        "  ldp x29, x30, [sp], #16\n"
        "  ret\n"
        ".size test_frames_with_frame, .-test_frames_with_frame\n");
#endif

/* The return address into its caller, a static function (the tests
 * here): not exported, so dladdr finds its module but no name. */
static __attribute__((noinline)) uintptr_t unexported(void)
{
  return (uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0));
}

/* A stack of words where records are laid by hand: rec(i, next, ret) puts
 * the record {&words[next], ret} at words[i]. */
enum { WORDS = 64 };
static uintptr_t words[WORDS] __attribute__((aligned(16)));
#define AT(i) ((uintptr_t)&words[i])
static void rec(int i, int next, uintptr_t ret)
{
  words[i] = next < 0 ? 0 : AT(next);
  words[i + 1] = ret;
}
#define LO AT(0)
#define HI AT(WORDS)

static void walk_follows_records_up_the_stack(void **state)
{
  (void)state;
  memset(words, 0, sizeof words);
  rec(4, 10, 0x1111);
  rec(10, 20, 0x2222);
  rec(20, 30, 0); /* a fiber's first frame: its return address is 0 */
  uintptr_t out[8];
  assert_int_equal(tdl__frames_walk(0xabc, AT(4), LO, HI, out, 8), 3);
  assert_int_equal(out[0], 0xabc);
  assert_int_equal(out[1], 0x1111);
  assert_int_equal(out[2], 0x2222);
  /* No pc: the chain alone. */
  assert_int_equal(tdl__frames_walk(0, AT(4), LO, HI, out, 8), 2);
  assert_int_equal(out[0], 0x1111);
  /* max cuts it, and nothing is written past it. */
  out[2] = 0x5555;
  assert_int_equal(tdl__frames_walk(0xabc, AT(4), LO, HI, out, 2), 2);
  assert_int_equal(out[1], 0x1111);
  assert_int_equal(out[2], 0x5555);
  assert_int_equal(tdl__frames_walk(0xabc, AT(4), LO, HI, out, 0), 0);
  assert_int_equal(tdl__frames_walk(0, AT(4), LO, HI, out, 1), 1);
  assert_int_equal(out[0], 0x1111);
}

static void walk_reads_nothing_outside_the_stack(void **state)
{
  (void)state;
  memset(words, 0, sizeof words);
  uintptr_t out[8];
  /* A frame pointer below the stack, above it, at its last word (the record
   * would end past hi), or misaligned: the pc alone. */
  assert_int_equal(tdl__frames_walk(0xabc, LO - 16, LO, HI, out, 8), 1);
  assert_int_equal(tdl__frames_walk(0xabc, HI, LO, HI, out, 8), 1);
  assert_int_equal(tdl__frames_walk(0xabc, AT(WORDS - 1), LO, HI, out, 8), 1);
  assert_int_equal(tdl__frames_walk(0xabc, AT(4) + 3, LO, HI, out, 8), 1);
  /* A record that points to itself, or down the stack: its return address,
   * then the end (a loop would never end; callers' frames are higher). */
  rec(8, 8, 0x1111);
  assert_int_equal(tdl__frames_walk(0, AT(8), LO, HI, out, 8), 1);
  assert_int_equal(out[0], 0x1111);
  rec(12, 2, 0x2222);
  rec(2, 30, 0x3333); /* never reached */
  assert_int_equal(tdl__frames_walk(0, AT(12), LO, HI, out, 8), 1);
  assert_int_equal(out[0], 0x2222);
  /* A record pointing out of the stack: the walk stops there. */
  rec(16, 0, 0x4444);
  words[16] = HI + 64;
  assert_int_equal(tdl__frames_walk(0, AT(16), LO, HI, out, 8), 1);
  assert_int_equal(out[0], 0x4444);
}

static void a_frameless_function_has_no_record(void **state)
{
  (void)state;
  uintptr_t start = (uintptr_t)tdl_test_frameless;
  /* No prologue at all. */
  assert_true(tdl__frames_no_record(start + 8));
  /* A function with a prologue: before it ends, no record yet; after, one. */
  uintptr_t with = (uintptr_t)test_frames_with_frame;
  assert_true(tdl__frames_no_record(with));
  assert_true(tdl__frames_no_record(with + 1));
  assert_false(tdl__frames_no_record(test_frames_with_frame()));
  /* Where no exported function starts, it cannot be told: false. */
  int local;
  assert_false(tdl__frames_no_record((uintptr_t)&local));
  assert_false(tdl__frames_no_record(unexported()));
}

static void modules_are_named_by_their_file(void **state)
{
  (void)state;
  const char *self = tdl__frames_module(test_frames_with_frame());
  assert_non_null(self);
  assert_string_equal(self, "test_frames");
  const char *libc = tdl__frames_module((uintptr_t)dladdr); /* libc, or musl's loader */
  assert_non_null(libc);
  assert_null(strchr(libc, '/'));
  assert_string_not_equal(libc, "test_frames");
  int local;
  assert_null(tdl__frames_module((uintptr_t)&local));
}

static void treadle_code_is_told_apart(void **state)
{
  (void)state;
  assert_true(tdl__frames_in_treadle((uintptr_t)tdl_loop_new + 1)); /* exported, tdl_ */
  assert_false(tdl__frames_in_treadle(test_frames_with_frame()));  /* exported, another name */
  assert_false(tdl__frames_in_treadle((uintptr_t)dladdr));         /* another module */
  int local;
  assert_false(tdl__frames_in_treadle((uintptr_t)&local));
  /* Not exported, in the module treadle is linked into: taken for
   * treadle's, as frames.h says. */
  assert_true(tdl__frames_in_treadle(unexported()));
}

static void lines_name_function_module_and_offset(void **state)
{
  (void)state;
  char buf[512];
  uintptr_t pc = test_frames_with_frame();
  Dl_info di;
  assert_true(dladdr((void *)(pc - 1), &di));
  char *end = tdl__frames_line(buf, buf + sizeof buf, 7, pc);
  *end = '\0';
  char want[512];
  /* A program linked at a fixed address: the pc as it is; else an offset. */
  bool fixed = ((const ElfW(Ehdr) *)di.dli_fbase)->e_type == ET_EXEC;
  snprintf(want, sizeof want, "        #7 0x%lx test_frames_with_frame+0x%lx (%s+0x%lx)\n", (unsigned long)pc,
           (unsigned long)(pc - (uintptr_t)di.dli_saddr), di.dli_fname,
           (unsigned long)(fixed ? pc : pc - (uintptr_t)di.dli_fbase));
  assert_string_equal(buf, want);
  /* Not exported: the module and offset still, for addr2line. */
  pc = unexported();
  end = tdl__frames_line(buf, buf + sizeof buf, 0, pc);
  *end = '\0';
  assert_non_null(strstr(buf, " ?? ("));
  assert_non_null(strstr(buf, "test_frames+0x"));
  /* Outside every module: the address alone. */
  int local;
  end = tdl__frames_line(buf, buf + sizeof buf, 12, (uintptr_t)&local);
  *end = '\0';
  snprintf(want, sizeof want, "        #12 0x%lx ??\n", (unsigned long)(uintptr_t)&local);
  assert_string_equal(buf, want);
}

static void lines_stop_at_the_end_of_the_buffer(void **state)
{
  (void)state;
  char buf[64];
  for (size_t room = 0; room < 40; room++) {
    memset(buf, '#', sizeof buf);
    char *end = tdl__frames_line(buf, buf + room, 123456, test_frames_with_frame());
    assert_true(end == buf + room); /* the line is longer: filled, no further */
    assert_int_equal(buf[room], '#');
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(walk_follows_records_up_the_stack),
      cmocka_unit_test(walk_reads_nothing_outside_the_stack),
      cmocka_unit_test(a_frameless_function_has_no_record),
      cmocka_unit_test(modules_are_named_by_their_file),
      cmocka_unit_test(treadle_code_is_told_apart),
      cmocka_unit_test(lines_name_function_module_and_offset),
      cmocka_unit_test(lines_stop_at_the_end_of_the_buffer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
