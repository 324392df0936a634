/* SPDX-License-Identifier: MIT */
/* Tests for the context switch (src/switch.h, src/switch_<arch>.S). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

/* A stack walker to test the trampoline's unwind info with: glibc's
 * backtrace().  musl has none, and the walker under it (libgcc's
 * _Unwind_Backtrace) does not link against musl either: Debian's static
 * libgcc_eh.a (gcc 12) calls glibc's _dl_find_object. */
#ifdef __GLIBC__
#include <execinfo.h>
#define HAVE_BACKTRACE 1
#else
#define HAVE_BACKTRACE 0
#define backtrace(frames, n) ((void)(frames), (void)(n), 0)
#endif

#include "helpers.h"
#include "fiber/stack.h"
#include "fiber/switch.h"

static tdl__stack_pool pool;

static int setup(void **state) {
  (void)state;
  return tdl__stack_pool_init(&pool, 16);
}

static int teardown(void **state) {
  (void)state;
  tdl__stack_pool_destroy(&pool);
  return 0;
}

static tdl__stack new_stack(void) {
  tdl__stack s;
  assert_int_equal(tdl__stack_get(&pool, TDL__STACK_DEFAULT, &s), 0);
  return s;
}

/* Failures inside fibers are recorded and asserted on the thread's own
 * stack: cmocka's longjmp out of a fiber would abandon it mid-switch. */
static int fiber_errors;
#define FIBER_CHECK(cond) \
  do {                    \
    if (!(cond))          \
      fiber_errors++;     \
  } while (0)

/* ---- round trips and argument passing ---- */

static tdl__ctx main_ctx, echo_ctx;
static void *echo_first_arg;

static void echo_entry(void *arg) {
  tdl__switch_entered(&echo_ctx);
  echo_first_arg = arg;
  uintptr_t v = (uintptr_t)arg;
  for (;;)
    v = (uintptr_t)tdl__switch(&echo_ctx, &main_ctx, (void *)(v * 2 + 1));
}

static void test_round_trip(void **state) {
  (void)state;
  tdl__stack s = new_stack();
  tdl__ctx_init(&echo_ctx, s.lo, s.size, echo_entry);
  int x;
  void *r = tdl__switch(&main_ctx, &echo_ctx, &x);
  assert_ptr_equal(echo_first_arg, &x);
  assert_int_equal((uintptr_t)r, (uintptr_t)&x * 2 + 1);
  for (uintptr_t i = 0; i < 10000; i++)
    assert_int_equal((uintptr_t)tdl__switch(&main_ctx, &echo_ctx, (void *)i), i * 2 + 1);
  /* A suspended context may simply be abandoned: it holds no resources. */
  tdl__stack_put(&pool, &s);
}

/* ---- a fiber that finishes, and reuse of its stack ---- */

static tdl__ctx once_ctx;
static int once_runs;

static void once_entry(void *arg) {
  tdl__switch_entered(&once_ctx);
  once_runs++;
  tdl__switch_exit(&once_ctx, &main_ctx, (void *)((uintptr_t)arg + 1));
}

static void test_exit_and_reuse(void **state) {
  (void)state;
  for (uintptr_t i = 0; i < 100; i++) {
    tdl__stack s = new_stack();
    tdl__ctx_init(&once_ctx, s.lo, s.size, once_entry);
    assert_int_equal((uintptr_t)tdl__switch(&main_ctx, &once_ctx, (void *)i), i + 1);
    tdl__stack_put(&pool, &s);
  }
  assert_int_equal(once_runs, 100);
}

/* ---- many contexts passing a token around a ring ---- */

enum { RING = 100, ROUNDS = 50 };
static tdl__ctx ring_ctx[RING];
static tdl__stack ring_stack[RING];
static uintptr_t ring_seen[RING];

static void ring_entry(void *arg) {
  /* The fiber learns its index from the token: round 0 starts at i * 0. */
  uintptr_t t = (uintptr_t)arg;
  int i = (int)(t % RING);
  tdl__switch_entered(&ring_ctx[i]);
  for (;;) {
    FIBER_CHECK(t % RING == (uintptr_t)i);
    FIBER_CHECK(t == ring_seen[i] + RING || ring_seen[i] == 0);
    ring_seen[i] = t;
    tdl__ctx *next = i + 1 < RING ? &ring_ctx[i + 1] : &main_ctx;
    t = (uintptr_t)tdl__switch(&ring_ctx[i], next, (void *)(t + 1));
  }
}

static void test_ring(void **state) {
  (void)state;
  fiber_errors = 0;
  for (int i = 0; i < RING; i++) {
    ring_stack[i] = new_stack();
    tdl__ctx_init(&ring_ctx[i], ring_stack[i].lo, ring_stack[i].size, ring_entry);
  }
  uintptr_t t = 0;
  for (int r = 0; r < ROUNDS; r++) {
    uintptr_t back = (uintptr_t)tdl__switch(&main_ctx, &ring_ctx[0], (void *)t);
    assert_int_equal(back, t + RING);
    t = back;
  }
  assert_int_equal(fiber_errors, 0);
  for (int i = 0; i < RING; i++) {
    assert_int_equal(ring_seen[i], (uintptr_t)(ROUNDS - 1) * RING + (uintptr_t)i);
    tdl__stack_put(&pool, &ring_stack[i]);
  }
}

/* ---- FP control state is per context ---- */

#if defined(__x86_64__)
enum { RND_NEAREST = 0, RND_DOWN = 1, RND_UP = 2 };
/* Both units: SSE (MXCSR.RC, bits 13-14) and x87 (control word RC, 10-11). */
static void fp_set_round(unsigned rc) {
  unsigned csr;
  unsigned short cw;
  __asm__ volatile("stmxcsr %0" : "=m"(csr));
  csr = (csr & ~0x6000u) | (rc << 13);
  __asm__ volatile("ldmxcsr %0" : : "m"(csr));
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  cw = (unsigned short)((cw & ~0x0c00u) | (rc << 10));
  __asm__ volatile("fldcw %0" : : "m"(cw));
}
/* Returns the rounding mode, or 99 if the two units disagree. */
static unsigned fp_get_round(void) {
  unsigned csr;
  unsigned short cw;
  __asm__ volatile("stmxcsr %0" : "=m"(csr));
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  unsigned sse = (csr >> 13) & 3, x87 = (cw >> 10) & 3u;
  return sse == x87 ? sse : 99;
}
#elif defined(__aarch64__)
enum { RND_NEAREST = 0, RND_UP = 1, RND_DOWN = 2 };
/* FPCR.RMode, bits 22-23. */
static void fp_set_round(unsigned rc) {
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  fpcr = (fpcr & ~(UINT64_C(3) << 22)) | ((uint64_t)rc << 22);
  __asm__ volatile("msr fpcr, %0" : : "r"(fpcr));
}
static unsigned fp_get_round(void) {
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  return (unsigned)(fpcr >> 22) & 3;
}
#else
#error "no FP control test for this architecture"
#endif

/* 1/3 is inexact, so its rounding shows the mode the hardware really used. */
static double third(void) {
  volatile double one = 1.0, three = 3.0;
  return one / three;
}

static tdl__ctx up_ctx, down_ctx;
static double up_third, down_third;

static void up_entry(void *arg) {
  tdl__switch_entered(&up_ctx);
  (void)arg;
  fp_set_round(RND_UP);
  for (;;) {
    FIBER_CHECK(fp_get_round() == RND_UP);
    up_third = third();
    /* Hop to the other fiber directly, not only via the main context. */
    tdl__switch(&up_ctx, &down_ctx, NULL);
    FIBER_CHECK(fp_get_round() == RND_UP);
    FIBER_CHECK(third() == up_third);
    tdl__switch(&up_ctx, &main_ctx, NULL);
  }
}

static void down_entry(void *arg) {
  tdl__switch_entered(&down_ctx);
  (void)arg;
  fp_set_round(RND_DOWN);
  for (;;) {
    FIBER_CHECK(fp_get_round() == RND_DOWN);
    down_third = third();
    tdl__switch(&down_ctx, &up_ctx, NULL);
  }
}

static void test_fp_control_per_context(void **state) {
  (void)state;
  fiber_errors = 0;
  assert_int_equal(fp_get_round(), RND_NEAREST);
  double nearest = third();
  tdl__stack a = new_stack(), b = new_stack();
  tdl__ctx_init(&up_ctx, a.lo, a.size, up_entry);
  tdl__ctx_init(&down_ctx, b.lo, b.size, down_entry);
  for (int i = 0; i < 100; i++) {
    tdl__switch(&main_ctx, &up_ctx, NULL);
    assert_int_equal(fp_get_round(), RND_NEAREST);
    assert_true(third() == nearest);
  }
  assert_int_equal(fiber_errors, 0);
  /* Valgrind keeps each context's control state but does all SSE arithmetic
   * rounded to nearest, so only the state can be checked there. */
  if (!RUNNING_ON_VALGRIND) {
    assert_true(up_third > down_third);
    assert_true(up_third >= nearest && nearest >= down_third);
  }
  tdl__stack_put(&pool, &a);
  tdl__stack_put(&pool, &b);
}

static tdl__ctx inherit_ctx;
static unsigned inherited_round;

static void inherit_entry(void *arg) {
  tdl__switch_entered(&inherit_ctx);
  inherited_round = fp_get_round();
  for (;;)
    arg = tdl__switch(&inherit_ctx, &main_ctx, arg);
}

/* A new context starts with the FP control state current at tdl__ctx_init. */
static void test_fp_control_inherited(void **state) {
  (void)state;
  tdl__stack s = new_stack();
  fp_set_round(RND_UP);
  tdl__ctx_init(&inherit_ctx, s.lo, s.size, inherit_entry);
  fp_set_round(RND_NEAREST);
  tdl__switch(&main_ctx, &inherit_ctx, NULL);
  assert_int_equal(inherited_round, RND_UP);
  assert_int_equal(fp_get_round(), RND_NEAREST);
  tdl__stack_put(&pool, &s);
}

/* ---- callee-saved registers ---- */

/*
 * t_switch_regs(from, to, arg, in, out): load every callee-saved register
 * from in[], call tdl__ctx_switch, and store what the registers hold when it
 * returns into out[].  t_switch_trash(from, to, arg): the same switch with
 * all callee-saved registers set to garbage.  Written in assembly because C
 * cannot name the registers the switch must preserve.
 */
#if defined(__x86_64__)
enum { NREGS = 6 }; /* rbx, rbp, r12, r13, r14, r15 */
__asm__(".text\n"
        ".type t_switch_regs, @function\n"
        "t_switch_regs:\n"
        "  pushq %rbp; pushq %rbx; pushq %r12; pushq %r13; pushq %r14; pushq %r15\n"
        "  pushq %r8\n" /* out; also re-aligns rsp for the call */
        "  movq 0(%rcx), %rbx; movq 8(%rcx), %rbp; movq 16(%rcx), %r12\n"
        "  movq 24(%rcx), %r13; movq 32(%rcx), %r14; movq 40(%rcx), %r15\n"
        "  call tdl__ctx_switch\n"
        "  popq %r8\n"
        "  movq %rbx, 0(%r8); movq %rbp, 8(%r8); movq %r12, 16(%r8)\n"
        "  movq %r13, 24(%r8); movq %r14, 32(%r8); movq %r15, 40(%r8)\n"
        "  popq %r15; popq %r14; popq %r13; popq %r12; popq %rbx; popq %rbp\n"
        "  ret\n"
        ".size t_switch_regs, .-t_switch_regs\n"
        ".type t_switch_trash, @function\n"
        "t_switch_trash:\n"
        "  pushq %rbp; pushq %rbx; pushq %r12; pushq %r13; pushq %r14; pushq %r15\n"
        "  subq $8, %rsp\n"
        "  movq $-1, %rbx; movq $-2, %rbp; movq $-3, %r12\n"
        "  movq $-4, %r13; movq $-5, %r14; movq $-6, %r15\n"
        "  call tdl__ctx_switch\n"
        "  addq $8, %rsp\n"
        "  popq %r15; popq %r14; popq %r13; popq %r12; popq %rbx; popq %rbp\n"
        "  ret\n"
        ".size t_switch_trash, .-t_switch_trash\n");
#elif defined(__aarch64__)
enum { NREGS = 19 }; /* x19-x29, d8-d15 */
__asm__(".text\n"
        ".type t_switch_regs, %function\n"
        "t_switch_regs:\n"
        "  stp x29, x30, [sp, #-176]!\n"
        "  stp x19, x20, [sp, #16]; stp x21, x22, [sp, #32]; stp x23, x24, [sp, #48]\n"
        "  stp x25, x26, [sp, #64]; stp x27, x28, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]; stp d10, d11, [sp, #112]\n"
        "  stp d12, d13, [sp, #128]; stp d14, d15, [sp, #144]\n"
        "  str x4, [sp, #160]\n"
        "  ldp x19, x20, [x3, #0]; ldp x21, x22, [x3, #16]; ldp x23, x24, [x3, #32]\n"
        "  ldp x25, x26, [x3, #48]; ldp x27, x28, [x3, #64]; ldr x29, [x3, #80]\n"
        "  ldp d8, d9, [x3, #88]; ldp d10, d11, [x3, #104]\n"
        "  ldp d12, d13, [x3, #120]; ldp d14, d15, [x3, #136]\n"
        "  bl tdl__ctx_switch\n"
        "  ldr x4, [sp, #160]\n"
        "  stp x19, x20, [x4, #0]; stp x21, x22, [x4, #16]; stp x23, x24, [x4, #32]\n"
        "  stp x25, x26, [x4, #48]; stp x27, x28, [x4, #64]; str x29, [x4, #80]\n"
        "  stp d8, d9, [x4, #88]; stp d10, d11, [x4, #104]\n"
        "  stp d12, d13, [x4, #120]; stp d14, d15, [x4, #136]\n"
        "  ldp x19, x20, [sp, #16]; ldp x21, x22, [sp, #32]; ldp x23, x24, [sp, #48]\n"
        "  ldp x25, x26, [sp, #64]; ldp x27, x28, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]; ldp d10, d11, [sp, #112]\n"
        "  ldp d12, d13, [sp, #128]; ldp d14, d15, [sp, #144]\n"
        "  ldp x29, x30, [sp], #176\n"
        "  ret\n"
        ".size t_switch_regs, .-t_switch_regs\n"
        ".type t_switch_trash, %function\n"
        "t_switch_trash:\n"
        "  stp x29, x30, [sp, #-160]!\n"
        "  stp x19, x20, [sp, #16]; stp x21, x22, [sp, #32]; stp x23, x24, [sp, #48]\n"
        "  stp x25, x26, [sp, #64]; stp x27, x28, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]; stp d10, d11, [sp, #112]\n"
        "  stp d12, d13, [sp, #128]; stp d14, d15, [sp, #144]\n"
        "  mov x19, #-1; mov x20, #-2; mov x21, #-3; mov x22, #-4; mov x23, #-5\n"
        "  mov x24, #-6; mov x25, #-7; mov x26, #-8; mov x27, #-9; mov x28, #-10\n"
        "  mov x29, #-11\n"
        "  fmov d8, x19; fmov d9, x20; fmov d10, x21; fmov d11, x22\n"
        "  fmov d12, x23; fmov d13, x24; fmov d14, x25; fmov d15, x26\n"
        "  bl tdl__ctx_switch\n"
        "  ldp x19, x20, [sp, #16]; ldp x21, x22, [sp, #32]; ldp x23, x24, [sp, #48]\n"
        "  ldp x25, x26, [sp, #64]; ldp x27, x28, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]; ldp d10, d11, [sp, #112]\n"
        "  ldp d12, d13, [sp, #128]; ldp d14, d15, [sp, #144]\n"
        "  ldp x29, x30, [sp], #160\n"
        "  ret\n"
        ".size t_switch_trash, .-t_switch_trash\n");
#endif
void *t_switch_regs(tdl__ctx *from, tdl__ctx *to, void *arg, const uint64_t *in, uint64_t *out);
void *t_switch_trash(tdl__ctx *from, tdl__ctx *to, void *arg);

static tdl__ctx trash_ctx;

static void trash_entry(void *arg) {
  tdl__switch_entered(&trash_ctx);
  for (;;) {
    tdl__asan_leave(&trash_ctx, &main_ctx);
    arg = t_switch_trash(&trash_ctx, &main_ctx, arg);
    tdl__asan_arrive(&trash_ctx);
  }
}

static void test_callee_saved_registers(void **state) {
  (void)state;
  tdl__stack s = new_stack();
  tdl__ctx_init(&trash_ctx, s.lo, s.size, trash_entry);
  uint64_t in[NREGS], out[NREGS];
  uint64_t x = UINT64_C(0x9e3779b97f4a7c15);
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < NREGS; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      in[i] = x;
    }
    memset(out, 0, sizeof out);
    tdl__asan_leave(&main_ctx, &trash_ctx);
    void *r = t_switch_regs(&main_ctx, &trash_ctx, (void *)(uintptr_t)round, in, out);
    tdl__asan_arrive(&main_ctx);
    assert_int_equal((uintptr_t)r, (uintptr_t)round);
    for (int i = 0; i < NREGS; i++)
      assert_int_equal(out[i], in[i]);
  }
  tdl__stack_put(&pool, &s);
}

/* The same property as C code sees it: values the compiler keeps in
 * registers across a switch survive it. */
static tdl__ctx busy_ctx;

static void busy_entry(void *arg) {
  tdl__switch_entered(&busy_ctx);
  uint64_t junk = (uintptr_t)arg;
  for (;;) {
    junk = junk * 6364136223846793005u + 1442695040888963407u;
    arg = tdl__switch(&busy_ctx, &main_ctx, (void *)(uintptr_t)junk);
  }
}

static uint64_t mix(uint64_t a, uint64_t b) {
  return (a ^ (b >> 3)) * 0xff51afd7ed558ccdu + b;
}

static uint64_t chain(int hops, int do_switch) {
  uint64_t a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7, h = 8;
  for (int i = 0; i < hops; i++) {
    a = mix(a, h);
    b = mix(b, a);
    c = mix(c, b);
    d = mix(d, c);
    if (do_switch)
      tdl__switch(&main_ctx, &busy_ctx, (void *)(uintptr_t)i);
    e = mix(e, d);
    f = mix(f, e);
    g = mix(g, f);
    h = mix(h, g);
  }
  return a ^ b ^ c ^ d ^ e ^ f ^ g ^ h;
}

static void test_values_survive_switches(void **state) {
  (void)state;
  tdl__stack s = new_stack();
  tdl__ctx_init(&busy_ctx, s.lo, s.size, busy_entry);
  assert_int_equal(chain(50, 1), chain(50, 0));
  tdl__stack_put(&pool, &s);
}

/* ---- the stack a new context starts on ---- */

static tdl__ctx align_ctx;
static uintptr_t align_frame, align_local;

static void align_entry(void *arg) {
  tdl__switch_entered(&align_ctx);
  _Alignas(16) volatile char local[16];
  local[0] = 1;
  /* With a frame pointer, the frame address is the stack pointer at entry
   * minus the pushed return address (x86-64) or the frame record's own
   * 16-byte-aligned address (AArch64): 16-aligned exactly when the psABI's
   * entry alignment holds. */
  align_frame = (uintptr_t)__builtin_frame_address(0);
  align_local = (uintptr_t)local;
  for (;;)
    arg = tdl__switch(&align_ctx, &main_ctx, arg);
}

static void test_entry_alignment(void **state) {
  (void)state;
  /* Every offset of lo and size: tdl__ctx_prepare must align by itself. */
  for (size_t skew = 0; skew < 16; skew++) {
    tdl__stack s = new_stack();
    char *lo = (char *)s.lo + skew;
    size_t size = s.size - 2 * skew;
    tdl__ctx_init(&align_ctx, lo, size, align_entry);
    tdl__switch(&main_ctx, &align_ctx, NULL);
    assert_int_equal(align_frame % 16, 0);
    assert_int_equal(align_local % 16, 0);
    assert_true(align_local >= (uintptr_t)lo && align_local < (uintptr_t)lo + size);
    /* It starts at the top: nothing but the initial frame above it. */
    assert_true((uintptr_t)lo + size - align_frame <= 256);
    tdl__stack_put(&pool, &s);
  }
}

/* Backtraces from a fiber end at the trampoline instead of wandering off. */
static tdl__ctx bt_ctx;
static int bt_depth;

static void bt_entry(void *arg) {
  tdl__switch_entered(&bt_ctx);
  void *frames[64];
  bt_depth = backtrace(frames, 64);
  for (;;)
    arg = tdl__switch(&bt_ctx, &main_ctx, arg);
}

static void test_backtrace_terminates(void **state) {
  (void)state;
  if (!HAVE_BACKTRACE) {
    print_message("skipped: no stack walker under musl (see HAVE_BACKTRACE)\n");
    skip();
  }
  tdl__stack s = new_stack();
  tdl__ctx_init(&bt_ctx, s.lo, s.size, bt_entry);
  tdl__switch(&main_ctx, &bt_ctx, NULL);
  /* bt_entry and the trampoline, perhaps a libc frame: never the 64 a
   * runaway walk would fill. */
  assert_in_range(bt_depth, 1, 8);
  tdl__stack_put(&pool, &s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_exit_and_reuse),
      cmocka_unit_test(test_ring),
      cmocka_unit_test(test_fp_control_per_context),
      cmocka_unit_test(test_fp_control_inherited),
      cmocka_unit_test(test_callee_saved_registers),
      cmocka_unit_test(test_values_survive_switches),
      cmocka_unit_test(test_entry_alignment),
      cmocka_unit_test(test_backtrace_terminates),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
