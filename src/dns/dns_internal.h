/* SPDX-License-Identifier: MIT */
/*
 * What the files of the dns layer share: checking host and service strings
 * and reading the literal ones (name.c, no system call but if_nametoindex),
 * and trying a list of addresses under one deadline (dial.c, exposed for
 * the tests with the per-attempt floor as a parameter).
 */
#ifndef TDL_DNS_INTERNAL_H
#define TDL_DNS_INTERNAL_H

#include "base/base.h"

/* tdl__dns_service_parse: a service name, to be looked up. */
#define TDL__DNS_SERVICE_NAMED 65536

/* The port of service: NULL is 0, "0".."65535" is that number; a service
 * name (1 to 32 letters, digits and '-', a letter among them) is
 * TDL__DNS_SERVICE_NAMED.  -EINVAL for anything else (empty too). */
int tdl__dns_service_parse(const char *service);

/* What host is.  A literal (IPv4, IPv6 with an optional scope) or
 * "localhost": its addresses of `family` (AF_UNSPEC, AF_INET, AF_INET6),
 * port 0, go to lit, and their count (1 or 2) is returned.  A well-formed
 * host name to look up: 0.  Errors: -EINVAL (NULL, not a host), -ENXIO (a
 * literal of the other family), -ENODEV (a scope naming no interface). */
int tdl__dns_host_parse(const char *host, int family, tdl_addr lit[2]);

/* getaddrinfo's status (and, for EAI_SYSTEM, its errno) as a negative
 * errno value: the table of dns.h (resolve.c). */
int tdl__dns_eai_errno(int status, int sys_errno);

/* Connect to a[0..n) in turn under deadline, each attempt getting
 * max(remaining / addresses left, min(floor, remaining)); tdl_dns_dial's
 * rules for which error is returned.  n > 0; in a fiber. */
int tdl__dns_dial_addrs(const tdl_addr *a, size_t n, tdl_time_t floor, tdl_time_t deadline);
/* The deadline of one attempt made at `now` with `left` addresses (this one
 * included) still to try: its share of what remains, at least the floor
 * (or all that remains).  Pure: the tests check it to the nanosecond. */
tdl_time_t tdl__dns_attempt_deadline(tdl_time_t now, tdl_time_t deadline, size_t left, tdl_time_t floor);

#endif /* TDL_DNS_INTERNAL_H */
