/* SPDX-License-Identifier: MIT */
/*
 * memcheck's client requests where valgrind's headers are installed, no-ops
 * elsewhere (musl and cross builds).  Used where the kernel writes memory
 * memcheck cannot see: completions of io_uring reads.
 */
#ifndef TDL_BASE_MEMCHECK_H
#define TDL_BASE_MEMCHECK_H

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define TDL_HAVE_MEMCHECK 1
#endif
#endif
#ifndef TDL_HAVE_MEMCHECK
#define VALGRIND_MAKE_MEM_DEFINED(p, n) ((void)(p), (void)(n))
#endif

#endif
