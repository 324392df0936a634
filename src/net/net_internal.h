/*
 * What the files of the net layer share: address parsing that also says
 * what kind of host a string named (addr.c, for socket.c's string forms of
 * listen and connect).
 */
#ifndef TDL_NET_INTERNAL_H
#define TDL_NET_INTERNAL_H

#include <stdbool.h>

#include "base/base.h"

/* ---- addr.c ---- */

/* What the host part of a parsed address was. */
enum { TDL__HOST_LITERAL, TDL__HOST_LOCALHOST, TDL__HOST_WILDCARD };

/* tdl_addr_parse(), and which kind of host the string named. */
int tdl__addr_parse_kind(tdl_addr *a, const char *s, int *kind);

/* *a = the loopback (loopback) or wildcard address of family (AF_INET or
 * AF_INET6) with port (host order). */
void tdl__addr_ip(tdl_addr *a, int family, bool loopback, int port);

#endif /* TDL_NET_INTERNAL_H */
