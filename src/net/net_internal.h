/* SPDX-License-Identifier: MIT */
/*
 * What the files of the net layer share: the growable buffer under
 * tdl_reader and tdl_writer (netbuf.c), the "exactly n bytes" loop
 * (stream.c), and address parsing that also says what kind of host a string
 * named (addr.c, for socket.c's string forms of listen and connect).
 */
#ifndef TDL_NET_INTERNAL_H
#define TDL_NET_INTERNAL_H

#include <stdbool.h>
#include <sys/types.h>

#include "base/base.h"

/* ---- the growable buffer (netbuf.c) ---- */

/* Set b up over fd with home mem[0..size) (the caller's) or, when mem is
 * NULL, a block of size bytes from malloc.  Errors: -EBADF (fd < 0), -EINVAL
 * (size 0, max < size), -ENOMEM; b is then empty with fd -1 (destroying it
 * is harmless). */
int tdl__netbuf_init(tdl__netbuf *b, int fd, void *mem, size_t size, size_t max);

/* Free what b allocated; leave it empty with fd -1.  The caller's home
 * memory stays theirs.  Errors: -EBUSY (b->busy; nothing changes). */
int tdl__netbuf_destroy(tdl__netbuf *b);

/* Make at least n bytes of contiguous room after the live bytes, moving them
 * to the front or growing the block (doubling, up to max) as needed.  The
 * live bytes may move; their count never changes.  The caller has checked
 * that b is not busy.
 * Errors: -EMSGSIZE (live + n > max), -ENOMEM; b is unchanged then. */
int tdl__netbuf_room(tdl__netbuf *b, size_t n);

/* Drop the first n live bytes (all when n is larger).  Unless b is busy (a
 * parked read or send holds a pointer into the block: nothing may move), a
 * grown block whose live bytes fit home again is given back and they move
 * home. */
void tdl__netbuf_drop(tdl__netbuf *b, size_t n);

static inline size_t tdl__netbuf_len(const tdl__netbuf *b) { return b->end - b->start; }

/* Whether an I/O call or a change may start on b: 0, -EBUSY (another fiber's
 * call is parked on it), -EBADF (not set up, or destroyed). */
static inline int tdl__netbuf_usable(const tdl__netbuf *b)
{
  if (b->busy)
    return -EBUSY;
  return b->fd < 0 ? -EBADF : 0;
}

/* ---- transport.c ---- */

/* The transport set for fd (tdl_net_transport_set) and its context, or NULL:
 * the reader and writer then use fiber I/O on fd itself. */
const tdl_net_transport *tdl__net_transport(int fd, void **ctx);

/* ---- stream.c ---- */

/* One transfer of up to len bytes at buf: > 0 bytes moved, 0 at the end of
 * the stream, or a negative error. */
typedef ssize_t (*tdl__step_fn)(void *ctx, void *buf, size_t len, tdl_time_t deadline);

/* Step until n bytes have moved; *done (may be NULL) always gets the count.
 * An end of stream before n is -EPIPE. */
int tdl__net_exactly(tdl__step_fn step, void *ctx, void *buf, size_t n, size_t *done, tdl_time_t deadline);

/* ---- addr.c ---- */

/* What the host part of a parsed address was. */
enum { TDL__HOST_LITERAL, TDL__HOST_LOCALHOST, TDL__HOST_WILDCARD };

/* tdl_addr_parse(), and which kind of host the string named. */
int tdl__addr_parse_kind(tdl_addr *a, const char *s, int *kind);

/* *a = the loopback (loopback) or wildcard address of family (AF_INET or
 * AF_INET6) with port (host order). */
void tdl__addr_ip(tdl_addr *a, int family, bool loopback, int port);

/* Connect to an address string of tdl_addr_parse's forms (no host names):
 * "localhost" tries 127.0.0.1 then ::1, the wildcard means the local host; the
 * one deadline covers both tries.  tdl_dns_dial's path for literals. */
int tdl__net_dial_literal(const char *s, tdl_time_t deadline);

#endif /* TDL_NET_INTERNAL_H */
