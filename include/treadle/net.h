/* SPDX-License-Identifier: MIT */
/*
 * Sockets for fibers: addresses, TCP and Unix stream listeners and
 * connections, full-buffer transfers, a buffered reader and writer, UDP,
 * options.  Include <treadle.h>.
 *
 * Everything here is built on the fiber I/O of fiber.h and follows its rules:
 *
 *  - Blocking calls take an absolute deadline on the loop's clock
 *    (TDL_FOREVER: none) that bounds the WHOLE call, not each system call in
 *    it; when it passes the call returns -ETIMEDOUT.
 *  - They are cancellable: on a cancelled fiber they return -ECANCELED.
 *  - Outside a fiber they return -EPERM at once without doing anything.
 *  - One reader fiber and one writer fiber per fd at a time (-EBUSY
 *    otherwise), so two fibers may not accept on one listener at once.
 *  - fds they return are non-blocking and close-on-exec; close them with
 *    tdl_close() (fiber.h), which also wakes fibers still waiting on them.
 *  - No SIGPIPE: writes to a peer that has gone return -EPIPE (or
 *    -ECONNRESET); the process is never signalled.
 *  - The end of a stream (the peer closed it: read() returned 0) between
 *    two messages is an ordinary end, not an error: the calls that return a
 *    length return 0 (tdl_net_recv_until, tdl_reader_fill, _read, _need,
 *    _until); the ones that return 0 for success return -EPIPE with
 *    *got == 0 (tdl_net_recv_exactly, tdl_reader_read_exactly).  An end
 *    inside a message (some of it came, not all) is -EPIPE everywhere:
 *    recv() never reports EPIPE, so when receiving -EPIPE always means
 *    "ended early".  A reset is -ECONNRESET.
 *
 * The calls that do not block (address helpers, tdl_net_listen, tdl_net_udp_bind,
 * the appends of a tdl_writer, options, shutdown) work anywhere, in fibers or
 * not.
 *
 * Names resolve nowhere here: addresses are literals, the wildcard, or
 * "localhost" (no DNS, no /etc/hosts; see tdl_addr_parse).  Host names are
 * dns.h's: tdl_dns_resolve; and tdl_dns_dial connects to any address string,
 * a literal or a name ("10.0.0.7:80", "localhost:80", "db.internal:5432").
 */
#ifndef TREADLE_NET_H
#define TREADLE_NET_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdbool.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Addresses                                                                 */
/* ------------------------------------------------------------------------ */

/* A socket address of any family treadle handles (IPv4, IPv6, Unix) and its
 * length.  Pass &a->u.sa and a->len to the socket API; len 0 means "none". */
typedef struct tdl_addr {
  union {
    struct sockaddr sa;
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
    struct sockaddr_un un;
    struct sockaddr_storage ss;
  } u;
  socklen_t len;
} tdl_addr;

/* Room for any string tdl_addr_format() writes, with its NUL. */
#define TDL_ADDR_STRLEN 440

/*
 * Parse an address as users write them.  Accepted forms (nothing else):
 *   "127.0.0.1:6379"      IPv4 dotted quad (four decimal parts, no leading
 *                         zeros) and port
 *   "[::1]:6379"          IPv6 in brackets and port; "[fe80::1%2]:80" with a
 *                         numeric scope (interface index)
 *   "localhost:6379"      the loopback: 127.0.0.1 (any case of "localhost")
 *   "*:6379", ":6379"     the wildcard (all local addresses): [::]
 *   "unix:/run/app.sock"  Unix socket at a path (relative paths allowed), at
 *                         most 107 bytes
 *   "unix:@name"          Linux abstract Unix name, 1 to 107 bytes (the name
 *                         is exactly the bytes after '@', no trailing NUL)
 * A port is 1 to 5 decimal digits, 0..65535 (0: any, for listening).
 * "0.0.0.0:6379" and "[::]:6379" are literals: exactly that family.
 *
 * The wildcard is the IPv6 one, [::]: tdl_net_listen() and tdl_net_udp_bind()
 * clear IPV6_V6ONLY on it (unless TDL_NET_V6ONLY), so ONE socket takes IPv4
 * and IPv6 clients alike (IPv4 peers then show as [::ffff:a.b.c.d]:port),
 * whatever the machine's net.ipv6.bindv6only says; 0.0.0.0 would silently
 * leave IPv6 clients out.  On a kernel without IPv6, tdl_net_listen_str()
 * falls back to 0.0.0.0.
 *
 * "localhost" needs no resolver: RFC 6761 (section 6.3) lets name APIs map
 * it to the loopback without asking DNS, and treadle does, without reading
 * /etc/hosts either.  tdl_addr_parse() gives 127.0.0.1; tdl_dns_dial()
 * tries 127.0.0.1 and then ::1.  Other host names are refused here: they
 * are resolved by dns.h, on the pool (a lookup blocks).
 *
 * Errors: -EINVAL for NULL arguments or any string not of these forms; *a is
 * then zeroed (len 0).  tdl_addr_parse_error() says what is wrong and where.
 * Cost: pure parsing, no system call, no file read.
 */
TDL_API int tdl_addr_parse(tdl_addr *a, const char *s);

/* Room for any message tdl_addr_parse_error() writes, with its NUL. */
#define TDL_ADDR_ERRLEN 320

/*
 * Why s is not an address, for people: parses s as tdl_addr_parse() does
 * and, when that fails, writes a one-line message naming the string (quoted,
 * cut after 48 bytes, unprintable bytes as \xHH), the problem and its byte
 * offset in s, e.g.
 *   bad address "1.2.3.4:99999": port above 65535 (at offset 8)
 * into buf (cap bytes; cut to fit, always NUL-terminated when cap > 0;
 * TDL_ADDR_ERRLEN always suffices).  buf gets "" when s parses.
 * Returns what tdl_addr_parse(s) returns: 0, or -EINVAL (buf holds why).
 * buf may be NULL when cap is 0.  Cost: a parse and a few copies.
 */
TDL_API int tdl_addr_parse_error(const char *s, char *buf, size_t cap);

/*
 * Write a in the form tdl_addr_parse() reads, NUL-terminated, into buf of
 * cap bytes (TDL_ADDR_STRLEN always suffices).  IPv6 scopes are written as
 * numbers.  An unnamed Unix socket (a client that never bound) is written
 * "unix:", which tdl_addr_parse() rejects.  Bytes of a Unix path or name
 * outside printable ASCII, and backslashes, are written as \xHH, and so is
 * a leading '@' of a path (else it would read as an abstract name); a name
 * is taken up to the end of sun_path whatever a longer length says.  The
 * string is for people and logs; it parses back to the same address
 * whenever the name had no such bytes.
 * Returns the string's length (without the NUL).
 * Errors: -EINVAL (a or buf NULL, a->len 0 or too short for its family);
 * -EAFNOSUPPORT (another family); -ENOSPC (cap too small: buf then holds ""
 * if cap > 0).  Cost: no system call.
 */
TDL_API int tdl_addr_format(const tdl_addr *a, char *buf, size_t cap);

/* Copy a socket address (from getsockname, recvfrom...) into *a.
 * Errors: -EINVAL (NULL, len larger than a sockaddr_storage or too short for
 * its family); -EAFNOSUPPORT (not AF_INET, AF_INET6 or AF_UNIX). */
TDL_API int tdl_addr_from_sockaddr(tdl_addr *a, const struct sockaddr *sa, socklen_t len);

/* The port of an IPv4 or IPv6 address (0..65535); -EAFNOSUPPORT for Unix
 * addresses; -EINVAL for NULL or an empty address. */
TDL_API int tdl_addr_port(const tdl_addr *a);

/* Whether two addresses name the same endpoint: same family and, for IP,
 * same address, port (and IPv6 scope); for Unix, same path or abstract name.
 * Padding and how the length was counted do not matter.  NULL or empty
 * addresses are equal to nothing. */
TDL_API bool tdl_addr_equal(const tdl_addr *x, const tdl_addr *y);

/* The local (getsockname) or remote (getpeername) address of a socket, e.g.
 * the port the kernel picked for a listener bound to port 0.
 * Errors: as the system calls (-EBADF, -ENOTSOCK, -ENOTCONN...), -EINVAL for
 * a NULL out.  Cost: one system call. */
TDL_API int tdl_net_local_addr(int fd, tdl_addr *out);
TDL_API int tdl_net_peer_addr(int fd, tdl_addr *out);

/* ------------------------------------------------------------------------ */
/* Stream listeners and connections (TCP over IPv4/IPv6, Unix stream)        */
/* ------------------------------------------------------------------------ */

/* Flags for tdl_net_listen() and tdl_net_udp_bind().  A flag that does not apply to
 * the address's family is ignored, so a program can pass the same flags
 * whatever address its user configured. */
#define TDL_NET_REUSEPORT 0x1u /* IP: SO_REUSEPORT (several sockets share the
                                  port; the kernel spreads connections) */
#define TDL_NET_V6ONLY 0x2u    /* IPv6: IPV6_V6ONLY ("[::]" then takes no IPv4
                                  connections); without it, treadle clears
                                  IPV6_V6ONLY: "[::]" takes both */
#define TDL_NET_UNLINK 0x4u    /* Unix path: replace a STALE socket file (see
                                  tdl_net_listen) */

/*
 * A listening stream socket on a: non-blocking, close-on-exec; for IP,
 * SO_REUSEADDR is set (a restarted server can bind at once despite old
 * connections in TIME_WAIT); for IPv6, IPV6_V6ONLY is set with
 * TDL_NET_V6ONLY and cleared without it.  backlog <= 0 means SOMAXCONN.
 * Works outside fibers too.  Returns the fd.
 *
 * Unix paths: treadle never removes a file silently.  When the path exists,
 * the call fails with -EADDRINUSE, unless TDL_NET_UNLINK is given and the
 * file is a socket nobody listens on (a probe connect is refused): then it is
 * unlinked and the bind retried once.  A live listener's socket (the probe
 * connects; that listener sees one connection closed at once) and anything
 * that is not a socket are left alone (-EADDRINUSE).  The socket file stays
 * after the listener is closed: unlink it yourself.  Abstract names vanish
 * with the last socket that holds them.
 *
 * The first call also opens the process's accept reserve (see
 * tdl_net_accept); that is one more fd held by the process.
 *
 * Errors: -EINVAL (NULL or empty address, unknown flags); -EAFNOSUPPORT;
 * the errors of socket(), bind() and listen(): -EADDRINUSE, -EACCES,
 * -EADDRNOTAVAIL, -EMFILE...; nothing is left open or created on failure.
 * Cost: 3-5 system calls (plus 2-3 for a stale Unix path).
 */
TDL_API int tdl_net_listen(const tdl_addr *a, int backlog, unsigned flags);

/*
 * tdl_net_listen() on an address string (tdl_addr_parse's forms): the
 * configuration value goes straight in, e.g.
 *   int lfd = tdl_net_listen_str("*:6379", 0, 0);
 * "*:P" and ":P" listen on [::] for both families, or on 0.0.0.0 when the
 * kernel has no IPv6; "localhost:P" on 127.0.0.1 (::1 when there is no IPv4
 * loopback).  One socket either way.  Returns the fd.
 * Errors: -EINVAL (s NULL or not an address: tdl_addr_parse_error(s, ...)
 * says why), then those of tdl_net_listen (of the last address tried; the
 * second is tried only when the first's family is missing: -EAFNOSUPPORT,
 * -EADDRNOTAVAIL).  Cost: a parse and tdl_net_listen's, once or twice.
 */
TDL_API int tdl_net_listen_str(const char *s, int backlog, unsigned flags);

/*
 * Accept a connection on listener lfd; return its fd (non-blocking,
 * close-on-exec) and store the peer's address in *peer (may be NULL).
 * Parks until a connection arrives or the deadline passes.
 *
 * Errors that concern only the connection being accepted (it reset or
 * aborted before it was accepted, a firewall refused it, a network error
 * pending on it) are skipped: the call goes on waiting for the next one.
 *
 * Running out of fds (-EMFILE, -ENFILE) is where naive accept loops spin:
 * the listener stays readable while the process cannot take the connection.
 * tdl_net_accept instead
 *   1. sheds the pending connections: it closes the process's reserve fd
 *      (a /dev/null fd held for this purpose), accepts and at once closes up
 *      to 64 pending connections (their clients see an orderly close, not a
 *      hang), and reopens the reserve;
 *   2. sleeps a back-off (10 ms, doubling on each consecutive exhaustion up
 *      to 160 ms, reset by a successful accept; never past the deadline);
 *   3. returns -EMFILE or -ENFILE.
 * The error is transient: call again.  A loop that simply retries costs a
 * few system calls per back-off period, not a spinning core, and accepts
 * again as soon as fds are free.  (The application may also react, e.g. by
 * closing idle connections.)  Without a reserve (another thread holds it at
 * that moment, or it could never be opened) step 1 is skipped and the
 * pending connections wait in the backlog.
 * -ENOBUFS and -ENOMEM back off the same way (no shedding) and are returned.
 *
 * Other errors: -ETIMEDOUT, -ECANCELED, -EPERM (outside a fiber), -EBUSY
 * (another fiber accepts on lfd), -EBADF, -ENOTSOCK, -EINVAL (not
 * listening).  On error *peer has len 0.
 * Cost: one accept4() when a connection is waiting; otherwise a park.
 */
TDL_API int tdl_net_accept(int lfd, tdl_addr *peer, tdl_time_t deadline);

/*
 * The accept reserve: one fd on /dev/null, process-wide, held so that
 * tdl_net_accept can shed connections when the process is out of fds.
 * tdl_net_listen() and tdl_net_accept() open it on first use.  on = false closes
 * it and stops them from reopening it (e.g. before counting fds); on = true
 * opens it (if not yet open) and lets them keep it.  Returns 0, or the error
 * of open(2) (-EMFILE...).  THREAD-SAFE.
 */
TDL_API int tdl_net_accept_reserve(bool on);

/* What the accept reserve has done since the process started; the same
 * counts as tdl_metrics_process's net_* fields (metrics.h).  THREAD-SAFE. */
typedef struct tdl_net_stats {
  uint64_t accept_exhausted; /* tdl_net_accept calls that found no fd free */
  uint64_t accept_shed;      /* connections accepted and closed at once */
} tdl_net_stats;
TDL_API void tdl_net_stats_get(tdl_net_stats *out);

/*
 * Connect a new stream socket to a (TCP, or Unix stream) and return its fd
 * (non-blocking, close-on-exec), once the connection is established.
 * A Unix listener whose backlog is full makes the kernel refuse at once
 * (EAGAIN); tdl_net_connect retries then, backing off from 1 ms to 50 ms,
 * until the deadline.  A TCP connection to a loopback port nobody listens on
 * that the kernel turned into a connection to itself ("self-connect") is
 * closed and reported as -ECONNREFUSED.
 * Errors: -ECONNREFUSED, -ENETUNREACH, -EHOSTUNREACH, -ENOENT (no such Unix
 * path), -EACCES, -ETIMEDOUT, -ECANCELED, -EPERM (outside a fiber; nothing is
 * created), -EINVAL (NULL or empty address), -EAFNOSUPPORT, -EMFILE...
 * On every error nothing is left open.
 * Cost: socket() + connect() + one park until the handshake ends (none for
 * Unix sockets) + one getsockname() for the self-connect check (TCP).
 */
TDL_API int tdl_net_connect(const tdl_addr *a, tdl_time_t deadline);

/* ------------------------------------------------------------------------ */
/* Whole-buffer transfers on stream sockets                                  */
/* ------------------------------------------------------------------------ */

/*
 * Send all len bytes of buf, parking as often as needed.  *sent (may be
 * NULL) always receives the number of bytes handed to the kernel, on success
 * (len) and on failure alike, so the caller never loses track.
 * Returns 0 when everything went.
 * Errors: -EPIPE or -ECONNRESET (the peer has gone; never a SIGPIPE);
 * -ETIMEDOUT, -ECANCELED (some bytes may have gone: see *sent); -EPERM;
 * -EBUSY; -EBADF, -ENOTSOCK...; -EINVAL (buf NULL with len > 0).
 * Cost: one send() per kernel buffer's worth.
 */
TDL_API int tdl_net_send_all(int fd, const void *buf, size_t len, size_t *sent, tdl_time_t deadline);

/* The same for a gather list (e.g. headers and body in one system call):
 * sends every byte of iov[0..iovcnt) in order.  Uses sendmsg() with
 * MSG_NOSIGNAL (writev() would raise SIGPIPE).  *sent counts bytes across
 * the whole list.  The array itself is not modified.
 * Errors: as tdl_net_send_all; -EINVAL for iovcnt < 0, iov NULL with
 * iovcnt > 0, or a total length that overflows. */
TDL_API int tdl_net_send_allv(int fd, const struct iovec *iov, int iovcnt, size_t *sent, tdl_time_t deadline);

/*
 * Receive exactly n bytes into buf.  *got (may be NULL) always receives the
 * number of bytes stored.  Returns 0 when n bytes came.
 * Errors: -EPIPE when the stream ended (orderly EOF) before n bytes: recv()
 * itself never reports EPIPE, so -EPIPE always means "ended early"; *got == 0
 * then tells a close between messages from one inside a message.
 * -ECONNRESET (the peer reset the connection); -ETIMEDOUT; -ECANCELED;
 * -EPERM; -EBUSY; -EBADF...; -EINVAL (buf NULL with n > 0).
 * Cost: one read() per arrival; works on any fd (pipes too).
 */
TDL_API int tdl_net_recv_exactly(int fd, void *buf, size_t n, size_t *got, tdl_time_t deadline);

/*
 * Receive into buf until the bytes delim[0..delim_len) have arrived (they
 * are stored and counted), or cap bytes have arrived without them.
 * It never consumes a byte past the delimiter: it looks at the data with
 * MSG_PEEK and then takes exactly what belongs to the message, so what
 * follows stays in the socket for the next call.  The price is two system
 * calls per arrival, and fd must be a stream socket.  For many small
 * messages, use a tdl_reader (below), which buffers instead.
 * Returns the message's length including the delimiter (> 0), or 0 when the
 * stream ended before a byte of it came.  *got (may be NULL) always
 * receives the number of bytes stored and consumed.
 * Errors: -EMSGSIZE (cap bytes consumed and stored, no delimiter);
 * -EPIPE (EOF after some bytes, before the delimiter; *got bytes were
 * stored); -EINVAL (delim
 * NULL or delim_len 0, buf NULL with cap > 0); -ENOTSOCK; -ECONNRESET,
 * -ETIMEDOUT, -ECANCELED, -EPERM, -EBUSY...
 */
TDL_API ssize_t tdl_net_recv_until(int fd, void *buf, size_t cap, const void *delim, size_t delim_len,
                               size_t *got, tdl_time_t deadline);

/* ------------------------------------------------------------------------ */
/* Buffered reader and writer                                                */
/* ------------------------------------------------------------------------ */

/* Private: the fd and growable buffer of tdl_reader and tdl_writer
 * (src/net/netbuf.c). */
typedef struct tdl__netbuf {
  unsigned char *p;    /* the block in use: home, or a grown one from malloc */
  size_t cap;          /* its size */
  size_t start, end;   /* the live bytes: p[start..end) */
  unsigned char *home; /* the initial block, kept until destroyed */
  size_t home_cap, max;
  int fd;              /* -1 when not set up or destroyed */
  bool home_owned;     /* home came from malloc */
  bool busy;           /* a read or send into or from the block is parked */
} tdl__netbuf;

/*
 * A read buffer over an fd, for protocols parsed in place (an HTTP head, a
 * Redis command) and for keeping the bytes read past a message (pipelined
 * requests).  The buffered bytes are tdl_reader_data(r)[0 .. tdl_reader_len(r));
 * they stay there until consumed.  Works on any fd (read()), socket or
 * pipe, or through a transport set for the fd (tdl_net_transport_set: TLS).
 * Fields are private.
 *
 * Memory.  The reader starts with an initial buffer of `size` bytes (the
 * caller's memory, or allocated by tdl_reader_init) and keeps it until
 * tdl_reader_destroy.  When a message does not fit (tdl_reader_until finds
 * no delimiter in a full buffer, tdl_reader_need asks for more than fits),
 * the bytes move to a larger buffer from malloc, doubling up to `max`.  The
 * largest message is therefore `max` bytes; larger ones fail with -EMSGSIZE.
 * As soon as what is still buffered after a consume (or read) fits the
 * initial buffer, it moves back there and the grown buffer is freed: an idle
 * connection holds only its initial buffer, whatever it once received.
 * Costs: a growth copies the buffered bytes once (a large block is remapped
 * by realloc rather than copied); going back copies at most `size` bytes.
 * A stream of messages each a little larger than `size` pays a malloc and a
 * free per message: size the initial buffer for the usual message.
 *
 * Pointers.  tdl_reader_data(), and every pointer into the buffered bytes
 * (e.g. to the message tdl_reader_until found), stays valid only until the
 * next call on the reader that may read or consume: tdl_reader_fill, _need,
 * _until, _read, _read_exactly, _consume, _destroy.  Any of them may move the
 * bytes (to the front, to a grown buffer, back home).  Offsets from
 * tdl_reader_data() stay right across fills, until a consume.
 *
 * One fiber at a time.  While a fill is parked in read(), another fiber's
 * fill, need, until or read that would have to read returns -EBUSY (one that
 * the buffered bytes answer succeeds), tdl_reader_destroy returns -EBUSY,
 * and consume drops bytes without moving any.
 */
typedef struct tdl_reader {
  tdl__netbuf b;
  bool eof; /* read() returned 0 */
} tdl_reader;

/*
 * Set r up to read fd with an initial buffer of size bytes: mem[0..size),
 * which must stay valid until tdl_reader_destroy and remains the caller's,
 * or, when mem is NULL, a block of size bytes allocated now.  The buffer
 * grows up to max bytes (max == size: never).  Nothing is read yet.
 * Errors: -EINVAL (r NULL, size 0, max < size), -EBADF (fd < 0), -ENOMEM
 * (mem NULL and no memory).  On error nothing is held and
 * tdl_reader_destroy(r) is harmless.  Cost: one malloc when mem is NULL.
 */
TDL_API int tdl_reader_init(tdl_reader *r, int fd, void *mem, size_t size, size_t max);

/* Free what the reader allocated (a grown buffer; the initial one when
 * tdl_reader_init allocated it).  The caller's memory stays theirs, the fd
 * stays open, the buffered bytes are dropped.  Later calls on r fail with
 * -EBADF until it is set up again.  Errors: -EBUSY (a fill is parked on it;
 * nothing changes).  Cost: up to two free(). */
TDL_API int tdl_reader_destroy(tdl_reader *r);

/* The buffered bytes: tdl_reader_len(r) of them at tdl_reader_data(r)
 * (valid until the next call that may read or consume; see above). */
static inline const char *tdl_reader_data(const tdl_reader *r) { return (const char *)r->b.p + r->b.start; }
static inline size_t tdl_reader_len(const tdl_reader *r) { return r->b.end - r->b.start; }
/* The size of the buffer in use: the initial size, or more while grown. */
static inline size_t tdl_reader_capacity(const tdl_reader *r) { return r->b.cap; }

/* Drop the first n buffered bytes (all of them when n is larger).  Cost: no
 * copy, except going back to the initial buffer (at most size bytes) when a
 * grown one is given back. */
TDL_API void tdl_reader_consume(tdl_reader *r, size_t n);

/* Read once more into the free part of the buffer, first moving the buffered
 * bytes to the front, or growing, when too little is free.  Returns the
 * number of bytes added (> 0), 0 at EOF (and at every later call), or an
 * error: -EMSGSIZE (max bytes are buffered: consume some first), -ENOMEM
 * (could not grow; nothing is lost), -ETIMEDOUT, -ECANCELED, -EPERM, -EBUSY,
 * -EBADF, -ECONNRESET...  Cost: at most one read(). */
TDL_API ssize_t tdl_reader_fill(tdl_reader *r, tdl_time_t deadline);

/* Fill until at least n bytes are buffered, growing at once to hold them:
 * for a length-prefixed message, parsed in place at tdl_reader_data() next.
 * Returns the number of bytes buffered (>= n), or 0 when the stream ended
 * with nothing buffered (the peer closed between messages).
 * Errors: -EMSGSIZE (n > max: returned at once, nothing is read); -EPIPE
 * (EOF with fewer than n bytes buffered, but some: what came is still
 * buffered); the errors of tdl_reader_fill.
 * Cost: one read() per arrival; none when n bytes are already buffered. */
TDL_API ssize_t tdl_reader_need(tdl_reader *r, size_t n, tdl_time_t deadline);

/* Fill until the buffered bytes contain delim[0..delim_len).  Returns the
 * length of the message (> 0): the delimiter ends at tdl_reader_data(r) +
 * that length.  Nothing is consumed: parse it, then tdl_reader_consume() it.
 * Returns 0 when the stream ended with nothing buffered: the peer closed
 * between messages (loop while the result is > 0).
 * Already buffered bytes are searched first without any system call, and no
 * byte is searched twice.
 * Errors: -EMSGSIZE (max bytes are buffered and hold no delimiter: the
 * message is larger than max; the bytes stay buffered, so the caller may
 * consume them to skip it, answer, or close; nothing else is affected);
 * -ENOMEM (could not grow; nothing lost); -EPIPE (EOF with bytes buffered
 * and no delimiter among them: the last message was cut; they are still
 * buffered); -EINVAL (delim NULL or delim_len 0); the
 * other errors of tdl_reader_fill. */
TDL_API ssize_t tdl_reader_until(tdl_reader *r, const void *delim, size_t delim_len, tdl_time_t deadline);

/* Like read(): up to len bytes into dst, buffered bytes first; when none are
 * buffered, one read() (straight into dst when len is at least the buffer's
 * capacity).  Never grows the buffer.  Returns the count (> 0 when
 * len > 0), 0 at EOF, or the errors of tdl_reader_fill (-EMSGSIZE and
 * -ENOMEM excepted), -EINVAL (dst NULL with len > 0). */
TDL_API ssize_t tdl_reader_read(tdl_reader *r, void *dst, size_t len, tdl_time_t deadline);

/* Exactly n bytes into dst, buffered bytes first.  As tdl_net_recv_exactly:
 * returns 0, or -EPIPE for an early EOF (*got == 0: the stream ended
 * before the message began), other errors as tdl_reader_read;
 * *got (may be NULL) always receives the count stored. */
TDL_API int tdl_reader_read_exactly(tdl_reader *r, void *dst, size_t n, size_t *got, tdl_time_t deadline);

/*
 * A write buffer over an fd: answers are appended with no system call and
 * leave together at the next tdl_writer_flush().  The unsent bytes are
 * contiguous, so a flush the kernel takes whole is ONE send(): a pipelined
 * batch of answers leaves in one system call.  Fields are private.
 *
 * Memory: as tdl_reader's (an initial buffer, the caller's or allocated;
 * growth by doubling up to max; the grown buffer is given back as soon as
 * the unsent bytes fit the initial one again, e.g. after a flush).
 *
 * The maximum: appending never blocks and never flushes on its own.  An
 * append that would take the unsent bytes past max fails with -ENOBUFS and
 * appends nothing: flush, then append again.  A piece larger than max never
 * fits: flush, then send it with tdl_net_send_all().
 *
 * Pointers: a pointer from tdl_writer_reserve() stays valid until the next
 * call on the writer.
 *
 * Signals.  On a socket, a flush is send() with MSG_NOSIGNAL: a peer that has
 * gone is -EPIPE or -ECONNRESET, never a SIGPIPE.  On anything else (a pipe,
 * a terminal, a file: the first flush finds out, from send()'s ENOTSOCK, and
 * uses write() from then on) the kernel raises SIGPIPE when a pipe's reader
 * has gone, as for any write(); a program writing to pipes that wants -EPIPE
 * instead ignores SIGPIPE (signal(SIGPIPE, SIG_IGN)).
 *
 * One fiber at a time.  While a flush is parked, appends, reserve, flush and
 * tdl_writer_destroy from other fibers return -EBUSY.
 */
typedef struct tdl_writer {
  tdl__netbuf b;
  bool not_socket; /* send() said ENOTSOCK: write() */
} tdl_writer;

/* Set w up to write to fd; mem, size and max as tdl_reader_init.  Errors:
 * -EINVAL, -EBADF, -ENOMEM as tdl_reader_init (destroy is then harmless). */
TDL_API int tdl_writer_init(tdl_writer *w, int fd, void *mem, size_t size, size_t max);

/* Free what the writer allocated.  Unsent bytes are dropped (flush first);
 * the fd stays open; later calls fail with -EBADF.  Errors: -EBUSY (a flush
 * is parked on it; nothing changes). */
TDL_API int tdl_writer_destroy(tdl_writer *w);

/* Bytes appended and not yet sent. */
static inline size_t tdl_writer_len(const tdl_writer *w) { return w->b.end - w->b.start; }
/* The size of the buffer in use: the initial size, or more while grown. */
static inline size_t tdl_writer_capacity(const tdl_writer *w) { return w->b.cap; }

/* Append n bytes of p.  Errors (nothing is appended): -ENOBUFS (the unsent
 * bytes would exceed max), -ENOMEM (could not grow), -EBUSY, -EBADF,
 * -EINVAL (p NULL with n > 0).  Cost: a memcpy, and a growth now and then. */
TDL_API int tdl_writer_put(tdl_writer *w, const void *p, size_t n);
/* Append the string s without its NUL; -EINVAL for NULL; as tdl_writer_put. */
TDL_API int tdl_writer_puts(tdl_writer *w, const char *s);
/* Append v in decimal: "-" for negatives, no padding, no plus sign, no
 * locale (INT64_MIN included).  Errors as tdl_writer_put.  Cost: no printf,
 * one division by ten per digit. */
TDL_API int tdl_writer_put_i64(tdl_writer *w, int64_t v);
TDL_API int tdl_writer_put_u64(tdl_writer *w, uint64_t v);

/* Room to format in place: *room = n writable bytes at the end of the
 * unsent ones (growing as an append would).  Write up to n bytes there, then
 * tdl_writer_commit() how many were written; until then they are not part
 * of the output.  Errors as tdl_writer_put, and -EINVAL (room NULL); *room is
 * NULL on error. */
TDL_API int tdl_writer_reserve(tdl_writer *w, size_t n, void **room);
/* Add n bytes written at the reserved room to the output.  Errors: -EINVAL
 * (n larger than the room; nothing is added). */
TDL_API int tdl_writer_commit(tdl_writer *w, size_t n);

/*
 * Send every unsent byte, parking while the kernel's buffer is full, until
 * all went or the deadline passed.  Returns 0: nothing is left unsent.
 * Errors: -ETIMEDOUT (the peer does not read fast enough) and -ECANCELED:
 * what did not go stays buffered, in order, and a later flush continues with
 * it (tdl_writer_len says how much); -EPIPE or -ECONNRESET (the peer has
 * gone: the bytes will never go); -EPERM (outside a fiber), -EBUSY, -EBADF...
 * Cost: one system call when the kernel takes everything; one per kernel
 * buffer's worth otherwise; none when nothing is buffered.
 */
TDL_API int tdl_writer_flush(tdl_writer *w, tdl_time_t deadline);

/*
 * A transport: how the reader and the writer of an fd move its bytes when a
 * layer above net carries them (TLS: tls.h's tdl_tls_reader_init and
 * tdl_tls_writer_init set one).  read and write behave as tdl_read and
 * tdl_write (bytes moved, 0 at the end of the stream, or a negative errno;
 * a deadline last) on ctx.
 */
typedef struct tdl_net_transport {
  ssize_t (*read)(void *ctx, void *buf, size_t len, tdl_time_t deadline);
  ssize_t (*write)(void *ctx, const void *buf, size_t len, tdl_time_t deadline);
} tdl_net_transport;

/*
 * Carry the bytes of every tdl_reader and tdl_writer on fd through t (both
 * of its functions set) with ctx, from their next fill or flush on; t NULL:
 * through fiber I/O on fd again.  The reader and writer keep their layout:
 * the transport is found by the fd, so set it (and clear it, before fd is
 * closed) from the thread whose loop uses fd; t must stay valid while set.
 * Returns 0, -EBADF (fd < 0 or beyond 4 Mi), -EINVAL (a function missing),
 * -ENOMEM.  Cost: a look-up of a table per fill and flush, none in a
 * process that has never set one.
 */
TDL_API int tdl_net_transport_set(int fd, const tdl_net_transport *t, void *ctx);

/* ------------------------------------------------------------------------ */
/* Datagrams (UDP; also Unix datagram sockets)                               */
/* ------------------------------------------------------------------------ */

/* A datagram socket bound to a (port 0: the kernel picks; read it back with
 * tdl_net_local_addr).  Flags as tdl_net_listen (TDL_NET_REUSEPORT,
 * TDL_NET_V6ONLY, TDL_NET_UNLINK).  Works outside fibers.  Returns the fd.
 * Errors: as tdl_net_listen. */
TDL_API int tdl_net_udp_bind(const tdl_addr *a, unsigned flags);

/* Send one datagram of len bytes to `to` (NULL: the connected peer).
 * Returns len.  Errors: -EMSGSIZE (too large for one datagram),
 * -ECONNREFUSED (an earlier datagram was refused), -ETIMEDOUT, -ECANCELED,
 * -EPERM, -EBUSY, -EINVAL (to given with len 0), -EDESTADDRREQ...
 * Cost: one sendto(). */
TDL_API ssize_t tdl_net_udp_send(int fd, const void *buf, size_t len, const tdl_addr *to, tdl_time_t deadline);

/* Receive one datagram into buf; its sender goes to *from (may be NULL;
 * from->len is 0 when the sender has no address: an unbound Unix socket).
 * Returns its length.  A datagram longer than len is cut: buf holds its first
 * len bytes, the rest is lost, and the call returns -EMSGSIZE.
 * Errors: -EMSGSIZE, -ETIMEDOUT, -ECANCELED, -EPERM, -EBUSY, -ECONNREFUSED...
 * Cost: one recvfrom() when a datagram is waiting. */
TDL_API ssize_t tdl_net_udp_recv(int fd, void *buf, size_t len, tdl_addr *from, tdl_time_t deadline);

/* ------------------------------------------------------------------------ */
/* Shutdown and options (no blocking; usable anywhere)                       */
/* ------------------------------------------------------------------------ */

/* shutdown(2): how is SHUT_RD, SHUT_WR or SHUT_RDWR.  SHUT_WR sends EOF to
 * the peer while the socket can still read.  In a fiber, on an fd that
 * sends behind (tdl_fd_writebehind), SHUT_WR and SHUT_RDWR first wait until
 * what is held has gone (within its sends' deadlines), and return the error
 * a send behind met, if one did.
 * Errors: -EINVAL (another how), -ENOTCONN, -EBADF, -ENOTSOCK. */
TDL_API int tdl_net_shutdown(int fd, int how);

/* TCP_NODELAY: send small segments at once instead of waiting to coalesce
 * them (Nagle).  Errors: those of setsockopt (-EOPNOTSUPP on a Unix socket,
 * -ENOTSOCK, -EBADF). */
TDL_API int tdl_net_nodelay(int fd, bool on);

/* TCP_QUICKACK: acknowledge at once instead of delaying ACKs.  A hint: Linux
 * returns to delayed ACKs on its own, so set it again after reads if it
 * matters.  Errors: as tdl_net_nodelay. */
TDL_API int tdl_net_quickack(int fd, bool on);

/* SO_KEEPALIVE with, when > 0, TCP_KEEPIDLE (idle_s: seconds of silence
 * before the first probe), TCP_KEEPINTVL (interval_s between probes) and
 * TCP_KEEPCNT (count of unanswered probes before the connection is dropped
 * with -ETIMEDOUT); 0 keeps the system default for that one.  on = false
 * turns keep-alive off and ignores the rest.
 * Errors: -EINVAL (a negative value); -EOPNOTSUPP (not a TCP socket, e.g.
 * a Unix one); -ENOTSOCK, -EBADF; keep-alive is only switched on when every
 * value was set.  Cost: 2-5 system calls. */
TDL_API int tdl_net_keepalive(int fd, bool on, int idle_s, int interval_s, int count);


/* ------------------------------------------------------------------------ */
/* Connection tracking: a cap, first-byte and idle deadlines, eviction       */
/* ------------------------------------------------------------------------ */

/*
 * What a server needs so that idle connections cannot lock it out: one host
 * that opens thousands of sockets and sends nothing would otherwise hold fds
 * until the process has none left, and every new client fails.  A
 * tdl_conns is a per-loop set of connections with
 *
 *   a cap         at most `max` connections admitted at once, below the
 *                 process's fd limit (see tdl_conns_fd_room);
 *   a first-byte  a connection that has sent nothing is given `first_byte`
 *   deadline      from its admission, not the (long) idle time of a
 *                 keep-alive connection;
 *   eviction      at the cap, a new connection takes the place of the
 *                 connection that has been idle longest (waiting for its
 *                 first request, or for its next one on keep-alive): that
 *                 one is closed, as nginx closes its "reusable" connections.
 *                 Only when every admitted connection is in the middle of a
 *                 request is the new one refused.
 *
 * Fibers.  Each connection is a tdl_conn in the caller's per-connection state
 * (nothing is allocated); its handler fiber tells the set when it waits for a
 * request and when one began:
 *
 *   tdl_conn c;                                  // in the handler fiber
 *   if (tdl_conns_admit(&set, &c, tdl_fiber_self()) < 0) { tdl_close(fd); return; }
 *   for (;;) {
 *     tdl_time_t dl = tdl_conn_idle(&c);         // waiting: evictable
 *     n = tdl_recv(fd, buf, cap, 0, dl);         // -ETIMEDOUT: first byte or idle
 *     if (n <= 0) break;                         // -ECANCELED: evicted
 *     tdl_conn_busy(&c);                         // a request began
 *     ... read the rest of it (its own deadline), answer ...
 *   }
 *   tdl_conn_release(&c);
 *   tdl_close(fd);
 *
 * The set arms no timer: the deadline of the wait is the one tdl_conn_idle
 * returns.  Evicting a connection cancels its fiber (tdl_fiber_cancel), which
 * wakes it at once from the read it is parked in with -ECANCELED; it then
 * closes its fd and releases itself.  A server that does not run a fiber
 * per connection gives an `evict` callback instead.  Every transition is
 * O(1): the idle connections are a list, oldest first.
 *
 * Idle is what the set was last told: a connection whose request has just
 * arrived, while its fiber has not run yet to call tdl_conn_busy, is still
 * idle and may be evicted; its client sees the connection closed before an
 * answer, which HTTP clients take as the usual end of an idle keep-alive
 * connection (they retry), as with nginx.
 *
 * Counting.  A connection counts against the cap from its admission until
 * its release.  An evicted one stays counted until it is released (its fd
 * is still open); the connection that evicted it is admitted at once, so the
 * open fds may pass `max` by the evicted connections whose fibers have not
 * run yet, and by connections accepted and not yet admitted: an accept loop
 * keeps both to a few by yielding while the set is full (tdl_conns_full).
 *
 * Threads: a set and its connections belong to the loop given at init.
 */
typedef struct tdl_conns tdl_conns;

/* One connection of a set.  Fields are private. */
typedef struct tdl_conn {
  tdl__list link;      /* in the set's idle list while idle */
  tdl_conns *set;      /* NULL: not admitted (or released) */
  tdl_fiber_t fiber;
  tdl_time_t deadline; /* while idle: when its wait ends */
  int state;
} tdl_conn;

/* Told to close c (an `evict` callback): on the loop's thread, from inside
 * tdl_conns_admit or tdl_conns_evict_idle.  c is out of the idle list and
 * tdl_conn_evicted(c) is true; it stays counted until tdl_conn_release(c). */
typedef void (*tdl_conn_evict_cb)(tdl_conn *c, void *arg);

typedef struct tdl_conns_options {
  unsigned max;            /* most connections at once; see tdl_conns_init */
  tdl_time_t first_byte;   /* from admission until the first request begins:
                              0: 10 s; TDL_FOREVER: no limit */
  tdl_time_t idle;         /* between requests on a kept-alive connection:
                              0: 60 s; TDL_FOREVER: no limit */
  tdl_conn_evict_cb evict; /* NULL: cancel the connection's fiber */
  void *arg;               /* evict's second argument */
} tdl_conns_options;

/* A set of connections.  Embed it or allocate it; fields are private. */
struct tdl_conns {
  tdl_loop *loop;
  tdl__list idle;          /* idle connections, oldest first */
  unsigned max;
  size_t open, idle_n, evicting;
  tdl_time_t first_byte, idle_delay;
  tdl_conn_evict_cb evict;
  void *arg;
  uint64_t admitted, evicted, refused;
};

/* The most connections the process's fd limit leaves room for: the soft
 * RLIMIT_NOFILE less a spare of 1/8 of it (at least 64) for listeners,
 * files, pipes, the loop's own fds, and the connections in flight that no
 * set counts (accepted and not yet admitted, evicted and not yet closed: an
 * accept loop outruns its handlers in a burst); 0 when the limit is below
 * 128.  Read afresh on each call.  Cost: one getrlimit(). */
TDL_API unsigned tdl_conns_fd_room(void);

/*
 * Set cs up, empty, on loop (whose thread alone may use it).
 * o->max is the cap.  0 is refused (-EINVAL): a server that may hold no
 * connection is a mistake, not a policy.  A cap above tdl_conns_fd_room()
 * (e.g. UINT_MAX: "as many as the fds allow") is lowered to it, since the
 * eviction that keeps a server reachable must happen before accept runs
 * out of fds; tdl_conns_stats_get() tells the cap in force.  The limit is
 * read here only: raise RLIMIT_NOFILE before, not after.
 * Errors: -EINVAL (cs, loop or o NULL; max 0; a delay negative other than
 * TDL_FOREVER); -EMFILE (the fd limit leaves no room: tdl_conns_fd_room()
 * is 0).  Cost: one getrlimit().
 */
TDL_API int tdl_conns_init(tdl_conns *cs, tdl_loop *loop, const tdl_conns_options *o);

/* Forget the set.  Errors: -EBUSY while connections are admitted (nothing
 * changes): release them first. */
TDL_API int tdl_conns_destroy(tdl_conns *cs);

/*
 * Admit c (the caller's memory, not admitted yet; its contents are ignored)
 * into cs, as a connection waiting for its first request: idle, with the
 * first-byte deadline from now.  `fiber` is the fiber that serves it (the
 * one to cancel on eviction), or 0 when cs has an evict callback.
 * At the cap, the connection idle longest is evicted to make room (see the
 * set's comment) and c is admitted.
 * Errors: -EAGAIN (at the cap and no connection idle: every one is busy with
 * a request; c is not admitted: close its fd, or answer 503 and close);
 * -EINVAL (cs or c NULL, fiber 0 without an evict callback).
 * Cost: O(1) (and one tdl_fiber_cancel or evict call when evicting).
 */
TDL_API int tdl_conns_admit(tdl_conns *cs, tdl_conn *c, tdl_fiber_t fiber);

/*
 * c waits for a request (its first, or the next one on a kept-alive
 * connection): it joins the idle connections, the newest, and may be
 * evicted.  Returns the deadline for that wait: the first-byte deadline
 * while no request has begun on c, else now + the idle delay (TDL_FOREVER
 * when that delay is); when the wait times out, close the connection
 * quietly.  Calling it again while c is idle changes nothing and returns
 * the same deadline.  On an evicted connection it returns 0, a deadline
 * long past: the wait times out at once.  NULL or released: 0.
 * Cost: O(1), no system call (the loop's cached time).
 */
TDL_API tdl_time_t tdl_conn_idle(tdl_conn *c);

/* A request has begun on c (its first bytes arrived): c leaves the idle
 * connections and cannot be evicted until the next tdl_conn_idle.  Does
 * nothing on an evicted, released or NULL c.  Cost: O(1). */
TDL_API void tdl_conn_busy(tdl_conn *c);

/* Whether c was evicted (it should close now).  False for NULL. */
TDL_API bool tdl_conn_evicted(const tdl_conn *c);

/* c leaves its set (call it once, when the connection closes, before c's
 * memory goes).  A released (or never admitted, zeroed) c, or NULL: nothing
 * happens.  Cost: O(1). */
TDL_API void tdl_conn_release(tdl_conn *c);

/* Whether cs is at its cap: the next admission evicts a connection (or is
 * refused).  An accept loop that starts each connection's handler in a
 * fiber of its own should then yield (tdl_fiber_yield) after starting one,
 * so that the handler is admitted, and the connection it evicts closed,
 * before the loop accepts more: that keeps the fds in use within the cap
 * and a connection or two.  False for NULL. */
TDL_API bool tdl_conns_full(const tdl_conns *cs);

/* Evict up to n connections, those idle longest first (n = SIZE_MAX: every
 * idle one; e.g. a graceful shutdown, or memory pressure).  Returns how
 * many were evicted.  Cost: O(1) per connection evicted. */
TDL_API size_t tdl_conns_evict_idle(tdl_conns *cs, size_t n);

typedef struct tdl_conns_stats {
  unsigned max;       /* the cap in force */
  size_t open;        /* admitted and not released (evicted ones included) */
  size_t idle;        /* of those, waiting for a request */
  uint64_t admitted;  /* since init */
  uint64_t evicted;   /* of those, evicted to make room (or by evict_idle) */
  uint64_t refused;   /* admissions refused: at the cap with none idle */
} tdl_conns_stats;
/* Copy cs's counts into *out (cs and out not NULL).  Cost: a few loads. */
TDL_API void tdl_conns_stats_get(const tdl_conns *cs, tdl_conns_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_NET_H */
