/* SPDX-License-Identifier: MIT */
/*
 * Call chains from frame pointers (internal): the walk, which is
 * async-signal-safe, and the naming of each return address, which is not.
 *
 * A frame record is two words at the frame pointer: the caller's frame
 * pointer, then the return address into the caller (x86-64: rbp; AArch64:
 * x29, with x30 saved beside it).  A walk starts from a pc and a frame
 * pointer (a parked fiber's saved context, or the registers a signal
 * interrupted) and reads only inside the stack [lo, hi) it is given: a
 * frame pointer outside it, misaligned, or not above the one before ends
 * the walk, so a frame built without a frame pointer (its register then
 * holds anything) cuts the chain short but never makes it read stray
 * memory.
 */
#ifndef TDL_BASE_FRAMES_H
#define TDL_BASE_FRAMES_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

/* The most frames a chain keeps: deeper ones are cut (a recursion would
 * otherwise fill a dump). */
enum { TDL__FRAMES_MAX = 32 };

/* Whether the library was built with frame pointers (TDL_FRAME_POINTERS):
 * without them a walk stops at the first treadle frame, so a chain is not
 * worth printing. */
#ifdef TDL_FRAME_POINTERS
#define TDL__HAVE_FRAME_POINTERS true
#else
#define TDL__HAVE_FRAME_POINTERS false
#endif

/* Walk from pc and fp on the stack [lo, hi): out[0] = pc (when not 0), then
 * each record's return address, up to max.  Returns how many.
 * Async-signal-safe: loads only, inside [lo, hi). */
int tdl__frames_walk(uintptr_t pc, uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t *out, int max);

/* Append, at p (up to end), the line of frame i:
 *   "        #2 0x00005581b2c3 tdl_sleep+0x4a (/usr/lib/libtreadle.so.2+0x1f2c3)\n"
 * where the function is named when its module exports it, and the module and
 * the pc's offset in it are given whatever it is, for `addr2line -e module
 * offset` (static functions are not in the dynamic symbol table).
 * Not async-signal-safe (dladdr).  Returns the new p. */
char *tdl__frames_line(char *p, char *end, int i, uintptr_t pc);

/* Whether the function that pc is in (an interrupted pc, not a return
 * address) had made no frame record of its own at pc: its code starts with
 * no frame-pointer prologue (x86-64: [endbr64] push %rbp; mov %rsp,%rbp --
 * AArch64: mov x29, sp among its first instructions), or pc comes before
 * that prologue's end.  A walk from such a frame takes its caller's record
 * for its own, and so leaves the caller out (or stops).  false when it
 * cannot be told: the function's module does not export it (its start is
 * unknown), or another architecture.  Reads code only between the
 * function's start and pc.  Not async-signal-safe (dladdr). */
bool tdl__frames_no_record(uintptr_t pc);

/* The file name, without its directory, of the module pc is in ("libc.so.6"),
 * or NULL when none is known.  Not async-signal-safe (dladdr). */
const char *tdl__frames_module(uintptr_t pc);

/* Whether pc is in treadle's own code: a function whose exported name
 * starts with tdl_, or, for one not exported, the module treadle is in (a
 * program linked with the static library: the program).  Not
 * async-signal-safe (dladdr). */
bool tdl__frames_in_treadle(uintptr_t pc);

#endif /* TDL_BASE_FRAMES_H */
