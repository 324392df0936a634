/* SPDX-License-Identifier: MIT */
/*
 * TLS for fibers: a TLS stream made from a connected socket, on OpenSSL 3.
 * Include <treadle/tls.h> after <treadle.h> (treadle.h does not include it)
 * and link libtreadle-tls (pkg-config treadle-tls; CMake
 * treadle::treadle_tls), a library of its own over the shared libtreadle so
 * that a program that never uses TLS never loads libssl.  It is built where
 * OpenSSL 3 is found (Debian: libssl-dev; CMake option TDL_TLS=AUTO|ON|OFF).
 *
 * fiber.h's rules hold: every call that can wait takes an absolute deadline
 * last and returns -ETIMEDOUT when it passes, -ECANCELED on a cancelled
 * fiber, -EPERM outside a fiber.  A stream belongs to its loop; one reading
 * and one writing fiber at a time (-EBUSY otherwise, as fd.h).
 *
 * How it waits.  The handshake runs on OpenSSL's socket BIO: OpenSSL
 * reads and writes the non-blocking socket itself (sends made with
 * MSG_NOSIGNAL: a peer that has gone is -EPIPE, never a SIGPIPE), and when
 * it says it wants to read or to write, the fiber parks on the fd
 * (tdl_fd_blocked, then tdl_fd_wait) until the kernel reports it ready, or
 * the deadline passes.  Because OpenSSL owns the socket then, kernel TLS
 * (below) can take the record layer over at the handshake.  Where it took
 * neither direction, the records after the handshake go through fiber I/O
 * instead (tdl_recv and tdl_send on the fd, never waiting inside OpenSSL:
 * when the fd is empty or full the fiber parks on it as above), so
 * that on a uring loop the fd may receive ahead and send behind (fd.h):
 * records then come out of the loop's buffers and go out with its next
 * submission, no system call of their own.  tdl_tls_fiber_io says which
 * path a stream took.  Turn tdl_fd_readahead and tdl_fd_writebehind on only
 * after tdl_tls_handshake returned, and only where tdl_tls_fiber_io is true:
 * during the handshake, or on the socket BIO, they would take bytes past
 * OpenSSL.  A read parks, when OpenSSL holds nothing, before it asks
 * OpenSSL for a record, and records that OpenSSL has already decrypted are
 * returned first, without parking.  OpenSSL reads ahead (one read per
 * record or per several): from the handshake on where the kernel cannot
 * take records, after it elsewhere (but where kernel TLS receives).
 * The environment variable TREADLE_TLS_BIO=socket, read when a
 * configuration is made, keeps its streams on the socket BIO after the
 * handshake too: it is there to compare the two record paths (the tests
 * run both).
 * OpenSSL's handshake needs stack: run streams in fibers with the default
 * stack (TDL_STACK_DEFAULT) or more.
 *
 * Errors.  Besides the errno values of fiber I/O: -EPROTO (the peer broke
 * the protocol, sent an alert, or sent what is not TLS: plaintext, garbage,
 * a renegotiation), -EKEYREJECTED (the peer's certificate did not verify:
 * expired, self-signed, unknown CA, wrong host name; or a server that asks
 * for client certificates got none), -EPIPE from a read (the
 * peer's end came without close_notify: what was read may be cut short;
 * distinct from 0, the clean end).  tdl_tls_error() says in words what TLS
 * said.  After a handshake that failed or was cut (by its deadline, a
 * cancel, the peer), or an -EPROTO or -EKEYREJECTED, the stream is dead:
 * every call fails with the same error; free it and close the fd.  (-EPERM
 * and -EBUSY refuse the call and change nothing.)  A read or write that timed out or was
 * cancelled loses nothing and may be made again.
 *
 * Kernel TLS.  Where OpenSSL and the kernel offer it (the `tls` module:
 * TCP_ULP "tls"), the record layer moves into the kernel after the
 * handshake, each direction on its own (tdl_tls_ktls says which):
 * encryption then costs no copy through user space.  Where the kernel has
 * no `tls` module, records stay in user space; nothing else changes (a
 * configuration asks the kernel once per process, and OpenSSL then does
 * not try it per connection).
 *
 * Memory.  OpenSSL's read and write buffers (about 34 KiB together) are
 * given back whenever a call finds nothing buffered (SSL_MODE_RELEASE_BUFFERS),
 * and before a read parks.  An idle stream keeps the SSL object with its
 * session and record state (about 14.5 KiB of OpenSSL's), 56 bytes of this
 * library's (after the handshake the BIO is one per thread, shared by its
 * streams), and its fiber's stack: a read or tdl_tls_wait parks in a small
 * frame of its own, so that tdl_fiber_compact_idle keeps little of that
 * stack.  A record that has come in part holds the read buffer until
 * the rest comes.  `bench/run.py --only tls` measures the RSS of an idle
 * HTTPS connection (its idle row), beside nginx's and Go's.
 */
#ifndef TREADLE_TLS_H
#define TREADLE_TLS_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Configurations ---- */

/* Which end of the handshake a configuration's streams take. */
typedef enum tdl_tls_role {
  TDL_TLS_CLIENT = 0,
  TDL_TLS_SERVER = 1,
} tdl_tls_role;

/* Protocol versions, as on the wire (tdl_tls_options.min_version,
 * tdl_tls_version). */
#define TDL_TLS_VERSION_1_2 0x0303
#define TDL_TLS_VERSION_1_3 0x0304

/* Directions that kernel TLS carries (tdl_tls_ktls). */
#define TDL_TLS_KTLS_TX 1u
#define TDL_TLS_KTLS_RX 2u

/*
 * What a configuration holds.  A zero-filled struct is a verifying client
 * that trusts the system's store, with TLS 1.2 at least and session
 * resumption on.
 * - cert_file, key_file: the certificate chain (PEM, the leaf first) and its
 *   private key (PEM).  A server needs them; a client may give them (a
 *   client certificate).  Or cert_pem and key_pem: the same, as
 *   NUL-terminated PEM text in memory (taking precedence over the files).
 * - ca_file: a PEM file of certificates to trust instead of the system's
 *   store (a client verifies its server with them; a server given one asks
 *   for and verifies a client certificate).
 * - insecure: a client does not verify the server's certificate at all.
 *   Verification, host name included, is on unless this says otherwise.
 * - alpn: the application protocols, comma-separated, preferred first
 *   ("h2,http/1.1"): a client offers them; a server picks the first of its
 *   own that the client offers, and goes on without ALPN when none matches.
 * - min_version: TDL_TLS_VERSION_1_2 (0: the same) or TDL_TLS_VERSION_1_3.
 * - no_resumption: neither resume sessions nor offer to (a server issues no
 *   tickets, a client keeps no sessions).  A client keeps the last session
 *   of each server name (up to 32 names), and OpenSSL resumes only sessions
 *   of streams that ended with tdl_tls_shutdown.
 * - no_ktls: keep records in user space even where the kernel could take them.
 * - error, error_cap: where a failure of tdl_tls_config_new or
 *   tdl_tls_config_reload is said in words (naming the file), NUL-terminated
 *   and cut to error_cap bytes; NULL: nowhere.
 * - reserved: zero (room for later options without changing the layout).
 */
typedef struct tdl_tls_options {
  tdl_tls_role role;
  const char *cert_file;
  const char *key_file;
  const char *cert_pem;
  const char *key_pem;
  const char *ca_file;
  bool insecure;
  bool no_resumption;
  bool no_ktls;
  const char *alpn;
  int min_version;
  char *error;
  size_t error_cap;
  uintptr_t reserved[4];
} tdl_tls_options;

/* A configuration: an SSL_CTX and what it was made from, shared by every
 * stream made from it, on any loop.  Private. */
typedef struct tdl_tls_config tdl_tls_config;

/*
 * Make a configuration from opts (NULL: a verifying client).  Files are
 * read now.  THREAD-SAFE: one configuration serves the streams of every loop
 * of a group.  Errors (opts->error says which file, and why): -ENOENT,
 * -EACCES (a file cannot be opened), -EINVAL (a file or text that is not
 * PEM, a key that does not match its certificate, a server without a
 * certificate, a bad ALPN list or version, reserved not zero), -ENOMEM.
 * Cost: reading the files and the system's trust store (a client that
 * verifies against it): make one per program, not one per connection.
 */
TDL_API int tdl_tls_config_new(tdl_tls_config **out, const tdl_tls_options *opts);

/*
 * Replace what cfg holds by what opts says (the role must stay), while
 * serving: streams made afterwards use the new certificate and settings,
 * streams already made keep the old ones, which are freed with the last of
 * them.  When opts fails (a missing file, a key that does not match), cfg
 * keeps serving what it had, and the error is returned and said in
 * opts->error.  THREAD-SAFE.  Errors as tdl_tls_config_new, and -EINVAL
 * (cfg NULL, another role).
 */
TDL_API int tdl_tls_config_reload(tdl_tls_config *cfg, const tdl_tls_options *opts);

/* Give up the caller's reference to cfg (NULL: nothing to do); it is freed
 * when the last stream made from it is freed too.  THREAD-SAFE. */
TDL_API void tdl_tls_config_free(tdl_tls_config *cfg);

/* ---- Streams ---- */

/* A TLS stream over one connected socket.  Private. */
typedef struct tdl_tls tdl_tls;

/*
 * Make a stream over fd, a connected stream socket, for cfg's role.
 * server_name: a client's server name, sent as SNI and checked against the
 * server's certificate (a DNS name, or an IP address literal, which is
 * checked against the certificate's addresses and not sent); NULL for a
 * server.  The fd stays the caller's (made non-blocking): tdl_tls_free
 * leaves it open, close it with tdl_close after.  Nothing is sent yet.
 * Errors: -EINVAL (cfg NULL, fd < 0, a verifying client without a
 * server_name), -EBADF, -ENOMEM.  Cost: one SSL object (a few KiB).
 */
TDL_API int tdl_tls_new(tdl_tls **out, tdl_tls_config *cfg, int fd, const char *server_name);

/*
 * Free s (NULL: nothing to do) without sending anything: call
 * tdl_tls_shutdown first for a clean end.  The fd stays open.  Errors:
 * -EBUSY (a fiber is parked in a call on s; nothing changes).
 */
TDL_API int tdl_tls_free(tdl_tls *s);

/*
 * Run the handshake to its end: verify the peer (a client, unless told
 * otherwise), agree on the version and ALPN.  The deadline bounds all of
 * it: a peer that sends nothing, or half a hello, is cut at the deadline
 * with -ETIMEDOUT.  Reads and writes run it first by themselves when it was
 * not run; call it to know the peer before the first byte, or to bound it
 * alone.  Returns 0 (also when it was done before).  Errors: -ETIMEDOUT,
 * -ECANCELED, -EPERM, -EKEYREJECTED, -EPROTO (also plaintext sent to a
 * server), -ECONNRESET, -EPIPE (the peer closed during it).
 */
TDL_API int tdl_tls_handshake(tdl_tls *s, tdl_time_t deadline);

/*
 * Read up to len bytes of application data: what OpenSSL has already
 * decrypted first (no system call), else one record's worth, parking while
 * none has come.  Returns the count (> 0), 0 when the peer ended cleanly
 * (close_notify; and at every later call), or -EPIPE when it ended
 * without close_notify (truncation), and the errors of tdl_tls_handshake.
 */
TDL_API ssize_t tdl_tls_read(tdl_tls *s, void *buf, size_t len, tdl_time_t deadline);

/*
 * Wait until a read would not wait for the peer: OpenSSL holds bytes of
 * the stream (decrypted, or read ahead), the fd is readable, or the stream
 * has ended.  Runs the handshake first if it was not run.  It takes no
 * buffer of the caller's: a server's connection between requests waits
 * here, with no buffer taken and in a small frame (see Memory), then takes
 * a buffer and reads.  A record that has come only in part
 * makes the fd readable: the read then waits for the rest.  Returns 0, or
 * -ETIMEDOUT, -ECANCELED, -EPERM (outside a fiber), -EINVAL (s NULL), and
 * the errors of tdl_tls_handshake when it ran it.
 */
TDL_API int tdl_tls_wait(tdl_tls *s, tdl_time_t deadline);

/*
 * Write up to len bytes as TLS records; returns the count written (> 0),
 * less than len when the kernel's buffer filled after a record went (like
 * write(2)); tdl_tls_send_all writes everything.  A write that returns
 * -ETIMEDOUT or -ECANCELED may have left a record half sent: the next
 * write must start with the same bytes (at least as many), as OpenSSL
 * requires; tdl_tls_send_all does so.  Errors: -EPIPE, -ECONNRESET (the
 * peer has gone), the errors of tdl_tls_handshake.
 * tdl_tls_writev writes the buffers in order, gathering small ones (up to
 * 2 KiB together, copied on the stack: no allocation) into one record.
 */
TDL_API ssize_t tdl_tls_write(tdl_tls *s, const void *buf, size_t len, tdl_time_t deadline);
TDL_API ssize_t tdl_tls_writev(tdl_tls *s, const struct iovec *iov, int iovcnt, tdl_time_t deadline);

/* Write all len bytes, as tdl_net_send_all: 0, or an error of
 * tdl_tls_write with *sent (may be NULL) the count that went. */
TDL_API int tdl_tls_send_all(tdl_tls *s, const void *buf, size_t len, size_t *sent, tdl_time_t deadline);

/*
 * End the stream cleanly: send close_notify (a peer that reads then sees
 * the clean end, 0), without waiting for the peer's.  Later writes fail
 * with -EPIPE, also after a shutdown that failed or timed out; reads still
 * return what the peer sends until its end.
 * Returns 0 (also when done before, or when the handshake never ran, which
 * sends nothing).  Errors: -ETIMEDOUT, -ECANCELED, -EPERM, -EPIPE,
 * -ECONNRESET, -EPROTO.
 */
TDL_API int tdl_tls_shutdown(tdl_tls *s, tdl_time_t deadline);

/* ---- Buffered reading and writing ---- */

/*
 * Set up a tdl_reader (tdl_writer) over s, as tdl_reader_init
 * (tdl_writer_init) over its fd: mem, size and max mean the same, and every
 * call of net.h's reader (writer) then works on s's decrypted bytes, with
 * s's errors (-EPIPE for a truncated stream; a fill's 0 is the clean end).
 * The stream is carried by a transport set for its fd
 * (tdl_net_transport_set), which tdl_tls_free clears: destroy the reader
 * and writer with tdl_reader_destroy (tdl_writer_destroy) before freeing s.
 * Errors: those of tdl_reader_init (tdl_writer_init), -EINVAL (s NULL),
 * -ENOMEM.
 */
TDL_API int tdl_tls_reader_init(tdl_reader *r, tdl_tls *s, void *mem, size_t size, size_t max);
TDL_API int tdl_tls_writer_init(tdl_writer *w, tdl_tls *s, void *mem, size_t size, size_t max);

/* ---- What was agreed, and what went wrong ---- */

/* What TLS said about the last failure on s, in words a user can act on
 * ("certificate verify failed: certificate has expired", "alert received:
 * handshake failure", "peer closed without close_notify"...); "" when no
 * call has failed.  Valid until the next call on s. */
TDL_API const char *tdl_tls_error(const tdl_tls *s);

/* The ALPN protocol agreed on, copied to buf as a NUL-terminated string (cut
 * to cap bytes).  Returns its length, 0 when none was agreed (or before the
 * handshake), -EINVAL (buf NULL with cap > 0). */
TDL_API int tdl_tls_alpn(const tdl_tls *s, char *buf, size_t cap);

/* The protocol version in use (TDL_TLS_VERSION_1_2 or _1_3), 0 before the
 * handshake. */
TDL_API int tdl_tls_version(const tdl_tls *s);

/* Which directions kernel TLS carries (TDL_TLS_KTLS_TX, TDL_TLS_KTLS_RX), 0
 * when records are made in user space (before the handshake, where the
 * kernel has no `tls` module, with no_ktls, or for a cipher the kernel
 * lacks). */
TDL_API unsigned tdl_tls_ktls(const tdl_tls *s);

/* Whether the stream's records go through fiber I/O (tdl_read, tdl_send on
 * its fd): true after the handshake where kernel TLS took neither direction
 * and TREADLE_TLS_BIO is not "socket"; false before the handshake.  Only
 * then may its fd receive ahead and send behind (fd.h). */
TDL_API bool tdl_tls_fiber_io(const tdl_tls *s);

/* Whether the handshake resumed an earlier session (no certificate was
 * sent). */
TDL_API bool tdl_tls_resumed(const tdl_tls *s);

/* Bytes already decrypted and waiting, that a read returns at once. */
TDL_API size_t tdl_tls_pending(const tdl_tls *s);

/* The fd the stream was made over. */
TDL_API int tdl_tls_fd(const tdl_tls *s);

#ifdef __cplusplus
}
#endif

/* The argument checks of these functions (treadle.h, PARAMETERS). */
#include "private/checks.h"

#endif /* TREADLE_TLS_H */
