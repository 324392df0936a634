/* SPDX-License-Identifier: MIT */
/*
 * Host names for fibers: resolve a name under a deadline, and dial
 * "host:port" trying each address in turn.  Include <treadle.h>.
 *
 * A name is looked up with the C library's getaddrinfo(), so /etc/hosts,
 * /etc/nsswitch.conf and /etc/resolv.conf are honoured exactly as for any
 * other program on the machine.  getaddrinfo() blocks, so it runs on a
 * thread of the blocking-work pool (pool.h), in the TDL_LANE_NAME lane (at
 * most half the pool's threads by default: a slow DNS server cannot hold up
 * file calls).  Only the calling fiber parks.
 *
 *   tdl_addr a[8];
 *   int n = tdl_dns_resolve("db.internal", "5432", AF_UNSPEC, a, 8, tdl_after(2 * TDL_SEC));
 *   int fd = tdl_dns_dial("db.internal:5432", tdl_after(5 * TDL_SEC));
 *
 * The cheap path.  IP literals ("10.0.0.7", "::1", "fe80::1%eth0") and
 * "localhost" need no lookup: they are answered at once on the calling
 * thread, with no pool thread, no file read and no DNS, as long as the port
 * is a number (or absent).  "localhost" is the loopback without reading
 * /etc/hosts (RFC 6761, 6.3; as tdl_addr_parse does): 127.0.0.1, then ::1.
 *
 * Deadlines.  A deadline that passes, or a cancel, returns -ETIMEDOUT or
 * -ECANCELED to the fiber at once.  getaddrinfo() itself cannot be stopped:
 * a lookup already running finishes in the background on its pool thread and
 * its answer is thrown away (the pool frees it); one still queued is never
 * started.  The pool stays usable meanwhile.  glibc's own patience for DNS
 * is set in resolv.conf (options timeout:N attempts:N) or $RES_OPTIONS.
 *
 * Errors of a lookup.  getaddrinfo()'s EAI_* codes become negative errno
 * values, the same way everywhere in this header:
 *   EAI_NONAME, EAI_NODATA,   -ENXIO        no such name, or it has no
 *   EAI_ADDRFAMILY                          address (of the family asked)
 *   EAI_AGAIN                 -EAGAIN       no answer now (a DNS server is
 *                                           unreachable or said "try later");
 *                                           trying later may succeed
 *   EAI_FAIL                  -EIO          the name servers failed for good
 *   EAI_MEMORY                -ENOMEM
 *   EAI_SYSTEM                -errno        the thread's errno (-EIO if none),
 *                                           except ETIMEDOUT: -EAGAIN, and
 *                                           ECANCELED: -EIO; -ETIMEDOUT and
 *                                           -ECANCELED always mean the caller's
 *                                           deadline and cancel
 *   EAI_SERVICE               -ENOENT       the service name is not known for
 *                                           TCP (not in /etc/services)
 *   EAI_FAMILY                -EAFNOSUPPORT
 *   anything else             -EIO
 * tdl_strerror() names them; there is no separate message table.
 *
 * What is not here: Happy Eyeballs (RFC 8305: racing IPv6 and IPv4
 * connections) — addresses are tried one after another, in getaddrinfo()'s
 * order; SRV and other record types; a resolver of treadle's own (a c-ares
 * back end would only be worth it if it measured better than a pool thread).
 */
#ifndef TREADLE_DNS_H
#define TREADLE_DNS_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The longest host name accepted, in bytes (a trailing dot not counted). */
#define TDL_DNS_NAME_MAX 253

/*
 * From a fiber: the addresses of host, for TCP.
 *
 * host: an IPv4 literal (dotted quad), an IPv6 literal without brackets
 *   (with an optional scope: "%3" or "%eth0"), "localhost" (any case,
 *   optionally "localhost."), or a host name: 1 to 253 bytes (plus an
 *   optional trailing dot) of labels of 1 to 63 letters, digits, '-' or '_',
 *   separated by dots, whose last label is not all digits.  Short IPv4
 *   forms that inet_aton() takes ("127.1", "0x7f.1") are refused rather than
 *   read as addresses.
 * service: NULL (port 0), a port number "0".."65535", or a service name of
 *   /etc/services (1 to 32 letters, digits and '-', a letter among them;
 *   looked up on a pool thread, even for a literal host).
 * family: AF_UNSPEC (both), AF_INET or AF_INET6.
 * out: room for cap addresses.  They are stored in getaddrinfo()'s order
 *   (RFC 6724: the ones most likely to work first), without duplicates,
 *   with the port in each; the first cap of them when there are more.
 *
 * Returns the count stored (1..cap).
 * Errors, before any thread is used: -EINVAL (host, out NULL; cap 0; host
 *   or service not of the forms above: empty, too long, a label over 63
 *   bytes, spaces or control characters...); -EAFNOSUPPORT (another family);
 *   -ENXIO (a literal of the other family than the one asked for); -ENODEV
 *   (a scope naming no interface).  Then, for a lookup on a pool thread:
 *   -EPERM (outside a fiber); -ECANCELED (the fiber is or gets cancelled);
 *   -ETIMEDOUT (the deadline passed);
 *   the lookup errors of the table above (-ENXIO, -EAGAIN, -EIO, -ENOENT,
 *   -ENOMEM...); and the pool's: -ENOMEM, -EAGAIN (no thread could be
 *   started), -ESHUTDOWN (after tdl_pool_shutdown).  On error, out is left
 *   as it was.
 * Cost: the cheap path (see above) parses, with no system call except
 *   if_nametoindex() for a named scope, and works in fibers or not; a
 *   lookup costs one allocation, a pool round trip and getaddrinfo() (a
 *   file read for /etc/hosts; DNS queries when the name is not there), plus
 *   a comparison of each address with those kept (duplicates).
 * Thread: the fiber's loop's thread.
 */
TDL_API int tdl_dns_resolve(const char *host, const char *service, int family, tdl_addr *out, size_t cap,
                            tdl_time_t deadline);

/* At most this many of a name's addresses are tried by tdl_dns_dial. */
#define TDL_DNS_DIAL_MAX 16

/*
 * From a fiber: connect to an address string and return the connected fd
 * (non-blocking, close-on-exec), like Go's net.Dial.  The one way to connect
 * to a string, be it a literal or a name.
 *
 * hostport: an address as tdl_addr_parse (net.h) reads it ("127.0.0.1:80",
 *   "[::1]:80", "localhost:80", "*:80", "unix:/run/app.sock"...), which is
 *   connected to at once, with no lookup and no pool thread: "localhost" and
 *   the wildcard (the local host, as the kernel reads a connect to 0.0.0.0) try
 *   127.0.0.1 and then ::1, both under the one deadline; or "NAME:PORT",
 *   "[IPV6%ifname]:PORT" and "HOST:SERVICE", with host and port as
 *   tdl_dns_resolve takes them (a colon separates the port; an IPv6 literal
 *   goes in brackets).
 *
 * A name is resolved (AF_UNSPEC) and its addresses, at most the first
 * TDL_DNS_DIAL_MAX, are tried one after another with tdl_net_connect, all
 * under the one deadline: resolving and every attempt.  So that one address
 * that never answers (its packets are dropped) cannot use up the whole
 * deadline, each attempt gets a share of the time that remains: remaining
 * / addresses still to try, but at least 2 s (all of it when less than 2 s
 * remain); the last one gets all that remains.  When an attempt's share runs
 * out, the next address is tried.  The first connection made wins; nothing
 * else is left open, on success or on error.  A deadline of TDL_FOREVER
 * gives each attempt as long as the kernel tries (about two minutes for an
 * address that never answers).  No racing of families (Happy Eyeballs).
 *
 * Returns the fd.
 * Errors: -EPERM (outside a fiber) and -ECANCELED, checked first; -EINVAL
 *   (hostport NULL, no ':' and port, a bad host or port); the errors of
 *   tdl_dns_resolve (-ENXIO: no such name...); -ETIMEDOUT when the whole
 *   deadline passes and -ECANCELED on a cancel, which end the call at once;
 *   otherwise, when every address failed, the error of the first one tried,
 *   unless that one only says its family is missing here (-EAFNOSUPPORT,
 *   -EADDRNOTAVAIL, -ENETUNREACH): then the first error that says more
 *   (-ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT for an attempt whose share ran
 *   out...).  A literal that is refused or unreachable on 127.0.0.1 is tried on
 *   ::1 the same way.
 * Cost: tdl_dns_resolve's, then tdl_net_connect's per address tried.
 * Thread: the fiber's loop's thread.
 */
TDL_API int tdl_dns_dial(const char *hostport, tdl_time_t deadline);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_DNS_H */
