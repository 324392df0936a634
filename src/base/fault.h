/* SPDX-License-Identifier: MIT */
/*
 * Fault injection for tests (docs/ARCHITECTURE.md, "Injected faults").
 *
 * Every call in the library that takes a resource (memory, a mapping, an fd,
 * a process, a thread) is wrapped in one of the macros below.  In a build with
 * -DTDL_FAULTS=ON a test can arm a countdown: the Nth wrapped call from then
 * on fails as its real call would (NULL or MAP_FAILED or -1 with errno set,
 * or the error number for pthread_create) without being made.  A test walks N
 * from 1 upwards until a scenario runs without reaching its Nth call, and
 * checks at every N that the failure came back to the caller as an error,
 * with nothing leaked and the loop still usable.
 *
 * Without TDL_FAULTS the macros are the bare calls: no code, no data.
 *
 * With $TDL_FAULTS_VERBOSE set, each injected failure is reported on stderr
 * with its file and line.
 *
 * The countdown is process-wide (an atomic), not per thread: a pool thread's
 * or a group member's allocation counts as much as the caller's.
 */
#ifndef TDL_BASE_FAULT_H
#define TDL_BASE_FAULT_H

#include <errno.h>
#include <stdbool.h>

#ifdef TDL_FAULTS

/* True when this call is the one to fail (errno is then `err`).  Cheap when
 * nothing is armed: one relaxed load. */
bool tdl__fault(int err, const char *site);

/* The `n`th wrapped call from now fails (n >= 1); with `sticky`, so does
 * every later one until tdl__fault_arm(0, false).  n == 0 disarms, keeping
 * what tdl__fault_fired reports. */
void tdl__fault_arm(long n, bool sticky);
/* Whether the armed failure has happened since the last arm. */
bool tdl__fault_fired(void);
/* "file:line" of the call that failed last, or NULL. */
const char *tdl__fault_site(void);

#define TDL__FAULT_STR2(x) #x
#define TDL__FAULT_STR(x) TDL__FAULT_STR2(x)
#define TDL__FAULT_HERE(err) tdl__fault(err, __FILE__ ":" TDL__FAULT_STR(__LINE__))

/* Allocation: malloc, calloc, realloc, aligned_alloc (NULL, ENOMEM). */
#define TDL__FAULT_ALLOC(call) (TDL__FAULT_HERE(ENOMEM) ? NULL : (call))
/* mmap, mremap (MAP_FAILED, ENOMEM). */
#define TDL__FAULT_MAP(call) (TDL__FAULT_HERE(ENOMEM) ? MAP_FAILED : (call))
/* A call that returns -1 and sets errno: fd creation, clone, syscall(). */
#define TDL__FAULT_SYS(err, call) (TDL__FAULT_HERE(err) ? -1 : (call))
/* A call that returns an error number: pthread_create. */
#define TDL__FAULT_ERR(err, call) (TDL__FAULT_HERE(err) ? (err) : (call))
/* A call that returns a negated error number: liburing's. */
#define TDL__FAULT_NEG(err, call) (TDL__FAULT_HERE(err) ? -(err) : (call))

#else

#define TDL__FAULT_ALLOC(call) (call)
#define TDL__FAULT_MAP(call) (call)
#define TDL__FAULT_SYS(err, call) (call)
#define TDL__FAULT_ERR(err, call) (call)
#define TDL__FAULT_NEG(err, call) (call)

#endif /* TDL_FAULTS */

#endif /* TDL_BASE_FAULT_H */
