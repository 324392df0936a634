/* SPDX-License-Identifier: MIT */
/*
 * TLS streams: two record paths over one fd.
 *
 * The handshake runs on OpenSSL's socket BIO on the non-blocking fd, the
 * fiber parked on the fd whenever OpenSSL wants to read or write: OpenSSL
 * moves records into the kernel (kTLS) only for its socket BIO, and decides
 * so at the handshake.  Where kTLS took either direction, the stream stays
 * on the socket BIO.  The one change to it: sends are made with
 * MSG_NOSIGNAL, so a peer that has gone is -EPIPE rather than a SIGPIPE.
 *
 * Otherwise the records after the handshake go through fiber I/O: a BIO
 * whose read and write are tdl_recv and tdl_send on the fd, each with
 * MSG_DONTWAIT (the fiber BIO, one per thread: see the BIOs below).  Then
 * the fd's records come out of the loop's receive-ahead buffers and go out
 * sent behind on uring loops (tdl_fd_readahead, tdl_fd_writebehind), where
 * the socket BIO would make a read(2) and a send(2) of its own per record.
 * Swapping BIOs loses nothing: what OpenSSL read ahead sits in the SSL's
 * buffer, not in the BIO.  Errors of fiber I/O (-ETIMEDOUT, -ECANCELED,
 * -EPIPE...) are kept in the stream and come out of the call as they are.
 * The fiber BIO never waits: on -EAGAIN it tells OpenSSL to retry, and
 * drive parks the fiber on the fd outside OpenSSL, as on the socket path.
 * So no fiber is ever inside OpenSSL while another runs (OpenSSL's SSL
 * object is not re-entrant: a reader parked inside a record and a writer
 * calling SSL_write would be two calls at once on one object).  OpenSSL
 * reads ahead (one read per record or per several, where it would read a
 * record's header and then its body): from the handshake on where the
 * kernel cannot take records (config.c), after it elsewhere, unless kTLS
 * receives.
 *
 * An idle stream must not hold OpenSSL's read buffer (16 KiB and more)
 * while its fiber waits: every wait for readability gives it back first
 * (wait_readable).  A read through fiber I/O, and tdl_tls_wait, wait for
 * the fd from their own small frame (a small stack for
 * tdl_fiber_compact_idle to keep) whenever OpenSSL holds nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "tls/tls_internal.h"

struct tdl_tls {
  SSL *ssl;
  tdl_tls_config *cfg;
  char *name; /* a client's server name, the key of its session */
  /* The words of the last failure (tdl_tls_error): ERROR_CAP bytes taken at
   * the first one, so that a stream that never fails carries none. */
  char *error;
  int fd;
  /* 0, or the error every call gives from now on (a dead handshake or a
   * broken protocol). */
  int dead;
  /* The error of the fiber BIO's last tdl_recv or tdl_send, which drive
   * reads before any other fiber runs. */
  int io_rc;
  /* Fibers parked in a call on the stream (a reader and a writer at
   * most): tdl_tls_free waits for none. */
  uint8_t parked;
  uint8_t ktls; /* TDL_TLS_KTLS_TX | TDL_TLS_KTLS_RX */
  bool handshaken;
  bool eof;      /* close_notify came */
  bool shut;     /* ours went */
  bool resumed;
  bool carried; /* a transport is set for fd (tdl_tls_reader_init) */
  bool fiber_bio; /* records through fiber I/O (see the top) */
  bool rd_eof;    /* the fiber BIO read the peer's end of the stream */
  /* The fiber BIO found the fd empty (or full): drive waits for it. */
  bool again;
  /* The last read of the fd found it empty (EAGAIN, or a short read of the
   * fiber BIO), and no wait for it has ended since: only then may a read
   * wait before it reads.  A wait that ends uses up what the loop saw (on
   * an edge-triggered loop it is not reported again), so a second wait with
   * no read between, or one after a read that left bytes in the socket,
   * would wait for an arrival that has already come. */
  bool drained;
  bool error_lost; /* a failure came and there was no memory for its words */
};

/* An idle connection holds one of these: kept within a 64-byte block of
 * malloc's (56 bytes asked). */
_Static_assert(sizeof(struct tdl_tls) <= 56, "struct tdl_tls grew past 56 bytes");

enum { ERROR_CAP = 200 };

/* Where the words of a failure go, or NULL without memory for them. */
static char *error_room(tdl_tls *s)
{
  if (!s->error && !(s->error = malloc(ERROR_CAP)))
    s->error_lost = true;
  return s->error;
}

/* Say what failed, printf-style. */
__attribute__((format(printf, 2, 3))) static void say(tdl_tls *s, const char *fmt, ...)
{
  char *e = error_room(s);
  if (!e)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e, ERROR_CAP, fmt, ap);
  va_end(ap);
}

/* ---- the BIOs ----
 *
 * The handshake's: a stream's own, of a method made from OpenSSL's socket
 * BIO but that sends go with MSG_NOSIGNAL; it stays where a stream keeps to
 * the socket path.
 *
 * Fiber I/O's: one per thread, shared by every stream that turned to fiber
 * I/O on it, since its state is only the stream it serves, and that is
 * always the one whose call runs (OpenSSL never calls a BIO of a stream
 * but from within a call on that stream, and a thread makes one call at a
 * time: drive names the stream before each).  A BIO with its lock is some
 * 250 bytes that an idle connection would otherwise hold.  A stream that
 * finds another thread's BIO in its SSL (it moved to another loop) takes
 * this thread's. */

static BIO_METHOD *bio_method;   /* the handshake's */
static BIO_METHOD *fiber_method; /* fiber I/O's */
static int (*sock_write)(BIO *, const char *, int);
static pthread_mutex_t bio_lock = PTHREAD_MUTEX_INITIALIZER; /* the setup below */
static atomic_bool bio_ready;
static bool bio_key_made;
static pthread_key_t bio_key;    /* frees a thread's fiber BIO as it ends */
static int ssl_index = -1;
static _Thread_local BIO *t_fiber_bio;

static int bio_write(BIO *b, const char *buf, int len)
{
#ifndef OPENSSL_NO_KTLS
  /* kTLS sends its control records through cmsgs that only OpenSSL's own
   * write knows. */
  if (BIO_get_ktls_send(b))
    return sock_write(b, buf, len);
#endif
  int fd = -1;
  BIO_get_fd(b, &fd);
  ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
  BIO_clear_retry_flags(b);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    BIO_set_retry_write(b);
  return (int)n;
}

/* Errors that lose nothing: OpenSSL is told to try again (its state as
 * after an EAGAIN), and drive returns the error kept in the stream. */
static bool retryable(ssize_t rc)
{
  return rc == -ETIMEDOUT || rc == -ECANCELED || rc == -EPERM || rc == -EBUSY;
}

/* What the fiber BIO tells OpenSSL of a tdl_recv or tdl_send.  -EAGAIN: the
 * fd is empty (or full); OpenSSL is told to retry, and drive waits for the
 * fd. */
static int fiber_result(BIO *b, tdl_tls *s, ssize_t n, bool reading)
{
  BIO_clear_retry_flags(b);
  if (n >= 0) {
    s->io_rc = 0;
    if (n == 0 && reading)
      s->rd_eof = true;
    return (int)n;
  }
  s->again = n == -EAGAIN;
  s->io_rc = s->again ? 0 : (int)n;
  if (s->again || retryable(n)) {
    if (reading)
      BIO_set_retry_read(b);
    else
      BIO_set_retry_write(b);
  }
  return -1;
}

static int fiber_read(BIO *b, char *buf, int len)
{
  tdl_tls *s = BIO_get_data(b);
  ssize_t n = tdl_recv(s->fd, buf, (size_t)len, MSG_DONTWAIT, TDL_FOREVER);
  s->drained = n == -EAGAIN || (n > 0 && n < len);
  return fiber_result(b, s, n, true);
}

static int fiber_write(BIO *b, const char *buf, int len)
{
  tdl_tls *s = BIO_get_data(b);
  return fiber_result(b, s, tdl_send(s->fd, buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT, TDL_FOREVER), false);
}

static long fiber_ctrl(BIO *b, int cmd, long num, void *ptr)
{
  (void)num, (void)ptr;
  tdl_tls *s = BIO_get_data(b);
  switch (cmd) {
  case BIO_CTRL_FLUSH:
    return 1; /* what was sent behind goes with the loop's next submission */
  case BIO_CTRL_EOF:
    /* OpenSSL tells a truncated stream from a retry by this. */
    return s && s->rd_eof;
  default:
    return 0;
  }
}

static int fiber_create(BIO *b)
{
  BIO_set_init(b, 1);
  return 1;
}

static void bio_thread_end(void *b)
{
  BIO_free(b); /* the thread's reference; streams hold their own */
}

/* This thread's fiber BIO, serving s; NULL without memory. */
static BIO *fiber_bio(tdl_tls *s)
{
  BIO *b = t_fiber_bio;
  if (!b) {
    if (!(b = BIO_new(fiber_method))) {
      ERR_clear_error();
      return NULL;
    }
    if (pthread_setspecific(bio_key, b) != 0) {
      BIO_free(b);
      return NULL;
    }
    t_fiber_bio = b;
  }
  BIO_set_data(b, s);
  return b;
}

/* Make this thread's fiber BIO s's and point it at s: false without memory.
 * The SSL drops its BIO (the stream's socket BIO, or another thread's
 * fiber BIO) for it. */
static bool take_fiber_bio(tdl_tls *s)
{
  BIO *b = fiber_bio(s);
  if (!b)
    return false;
  if (SSL_get_rbio(s->ssl) != b) {
    BIO_up_ref(b);
    SSL_set_bio(s->ssl, b, b);
  }
  return true;
}

/* The BIO methods, the thread key and the SSL index, made by the first
 * stream.  What fails (no memory) is made by the next stream: a failure is
 * not kept for the life of the process. */
static bool bio_setup(void)
{
  if (atomic_load_explicit(&bio_ready, memory_order_acquire))
    return true;
  pthread_mutex_lock(&bio_lock);
  if (!fiber_method) {
    BIO_METHOD *f = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "treadle fiber");
    if (f && BIO_meth_set_read(f, fiber_read) && BIO_meth_set_write(f, fiber_write) &&
        BIO_meth_set_ctrl(f, fiber_ctrl) && BIO_meth_set_create(f, fiber_create))
      fiber_method = f;
    else
      BIO_meth_free(f);
  }
  if (!bio_key_made)
    bio_key_made = pthread_key_create(&bio_key, bio_thread_end) == 0;
  if (!bio_method) {
    const BIO_METHOD *sock = BIO_s_socket();
    BIO_METHOD *m = BIO_meth_new(BIO_TYPE_SOCKET, "treadle socket");
    if (m) {
      sock_write = BIO_meth_get_write(sock);
      BIO_meth_set_write(m, bio_write);
      BIO_meth_set_read(m, BIO_meth_get_read(sock));
      BIO_meth_set_puts(m, BIO_meth_get_puts(sock));
      BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(sock));
      BIO_meth_set_create(m, BIO_meth_get_create(sock));
      BIO_meth_set_destroy(m, BIO_meth_get_destroy(sock));
      bio_method = m;
    }
  }
  if (ssl_index < 0)
    ssl_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
  bool ok = fiber_method && bio_key_made && bio_method && ssl_index >= 0;
  if (ok)
    atomic_store_explicit(&bio_ready, true, memory_order_release);
  pthread_mutex_unlock(&bio_lock);
  return ok;
}

int tdl__tls_new_session(SSL *ssl, SSL_SESSION *sess)
{
  tdl_tls *s = SSL_get_ex_data(ssl, ssl_index);
  if (!s || !s->name)
    return 0;
  tdl__tls_session_keep(s->cfg, s->name, sess);
  return 1; /* the reference is ours now */
}

/* ---- streams ---- */

int tdl_tls_new(tdl_tls **out, tdl_tls_config *cfg, int fd, const char *server_name)
{
  if (!out)
    return -EINVAL;
  *out = NULL;
  if (!cfg || fd < 0)
    return -EINVAL;
  if (cfg->role == TDL_TLS_CLIENT && cfg->verify && !server_name)
    return -EINVAL;
  if (!bio_setup()) {
    ERR_clear_error();
    return -ENOMEM;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0)
    return -EBADF;
  if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return -EBADF; // GCOVR_EXCL_LINE: F_SETFL of O_NONBLOCK on an fd F_GETFL just read cannot fail
  tdl_tls *s = calloc(1, sizeof *s);
  if (!s)
    return -ENOMEM;
  s->fd = fd;
  s->cfg = cfg;
  if (server_name && cfg->role == TDL_TLS_CLIENT && !(s->name = strdup(server_name))) {
    free(s);
    return -ENOMEM;
  }
  SSL *ssl = tdl__tls_config_ssl(cfg);
  BIO *bio = ssl ? BIO_new(bio_method) : NULL;
  if (!bio) {
    SSL_free(ssl);
    free(s->name);
    free(s);
    ERR_clear_error();
    return -ENOMEM;
  }
  BIO_set_fd(bio, fd, BIO_NOCLOSE);
  SSL_set_bio(ssl, bio, bio);
  SSL_set_ex_data(ssl, ssl_index, s);
  s->ssl = ssl;
  if (cfg->role == TDL_TLS_SERVER) {
    SSL_set_accept_state(ssl);
  } else {
    SSL_set_connect_state(ssl);
    if (server_name) {
      /* An address literal is checked against the certificate's IP
       * addresses and, as RFC 6066 says, never sent as SNI. */
      bool ip = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name) == 1;
      ERR_clear_error();
      int ok = 1;
      if (!ip) {
        ok = SSL_set_tlsext_host_name(ssl, server_name) == 1;
        if (ok && cfg->verify)
          ok = SSL_set1_host(ssl, server_name) == 1;
      }
      if (!ok) {
        SSL_free(ssl);
        free(s->name);
        free(s);
        ERR_clear_error();
        return -EINVAL;
      }
      tdl__tls_session_resume(cfg, ssl, server_name);
    }
  }
  tdl__tls_config_ref(cfg);
  *out = s;
  return 0;
}

int tdl_tls_free(tdl_tls *s)
{
  if (!s)
    return 0;
  if (s->parked)
    return -EBUSY;
  if (s->carried)
    tdl_net_transport_set(s->fd, NULL, NULL);
  SSL_free(s->ssl);
  tdl__tls_config_unref(s->cfg);
  free(s->name);
  free(s->error);
  free(s);
  return 0;
}

/* The words for a failure: what we know first, then OpenSSL's queue. */
static void note(tdl_tls *s, const char *what)
{
  char *e = error_room(s);
  if (!e) {
    ERR_clear_error();
    return;
  }
  int n = snprintf(e, ERROR_CAP, "%s", what);
  size_t len = n < 0 ? 0 : (size_t)n >= ERROR_CAP ? ERROR_CAP - 1 : (size_t)n;
  if (len + 2 < ERROR_CAP) {
    size_t mark = len;
    memcpy(e + len, ": ", 3);
    len += 2;
    if (!tdl__tls_errors(e, ERROR_CAP, &len))
      e[mark] = '\0';
  } else {
    ERR_clear_error(); // GCOVR_EXCL_LINE: every `what` is a short constant, far under ERROR_CAP
  }
}

/* What a failed SSL call means: TDL_READ or TDL_WRITE to wait for, 0 for a
 * clean end, or an error (the words noted). */
enum { WAIT_NONE = 0 };
static int outcome(tdl_tls *s, int ret, int sys_errno, unsigned *wait)
{
  *wait = WAIT_NONE;
  int e = SSL_get_error(s->ssl, ret);
  switch (e) {
  case SSL_ERROR_WANT_READ:
    *wait = TDL_READ;
    return 0;
  case SSL_ERROR_WANT_WRITE:
    *wait = TDL_WRITE;
    return 0;
  case SSL_ERROR_ZERO_RETURN:
    s->eof = true;
    return 0;
  case SSL_ERROR_SYSCALL:
    if (s->io_rc < 0 && ERR_peek_error() == 0) {
      say(s, "%s", tdl_strerror(s->io_rc));
      return s->io_rc;
    }
    if (ERR_peek_error() == 0) {
      if (sys_errno == 0 || sys_errno == EAGAIN) {
        note(s, "peer closed without close_notify");
        return -EPIPE;
      }
      say(s, "%s", strerror(sys_errno));
      return -sys_errno;
    }
    break;
  default:
    break;
  }
  unsigned long first = ERR_peek_error();
  if (ERR_GET_LIB(first) == ERR_LIB_SSL && ERR_GET_REASON(first) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    ERR_clear_error();
    say(s, "peer closed without close_notify (truncated)");
    return -EPIPE;
  }
  long v = SSL_get_verify_result(s->ssl);
  if (v != X509_V_OK) {
    ERR_clear_error();
    say(s, "certificate verify failed: %s", X509_verify_cert_error_string(v));
    return -EKEYREJECTED;
  }
  /* A server that asks for a client certificate (ca_file) and gets none
   * refuses it as it refuses one that does not verify. */
  if (ERR_GET_LIB(first) == ERR_LIB_SSL && (ERR_GET_REASON(first) == SSL_R_CERTIFICATE_VERIFY_FAILED ||
                                            ERR_GET_REASON(first) == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)) {
    note(s, "certificate verify failed");
    return -EKEYREJECTED;
  }
  const char *kind = "TLS protocol error";
  if (ERR_GET_LIB(first) == ERR_LIB_SSL && ERR_GET_REASON(first) >= SSL_AD_REASON_OFFSET)
    kind = "alert received";
  else if (ERR_GET_LIB(first) == ERR_LIB_SSL &&
           (ERR_GET_REASON(first) == SSL_R_HTTP_REQUEST || ERR_GET_REASON(first) == SSL_R_HTTPS_PROXY_REQUEST ||
            ERR_GET_REASON(first) == SSL_R_WRONG_VERSION_NUMBER))
    kind = "not TLS";
  note(s, kind);
  return -EPROTO;
}

/* One call of OpenSSL's, made again after each wait until it is done. */
typedef int (*ssl_fn)(tdl_tls *s, void *buf, size_t len, size_t *done);

static int do_handshake(tdl_tls *s, void *buf, size_t len, size_t *done)
{
  (void)buf, (void)len, (void)done;
  return SSL_do_handshake(s->ssl);
}

static int do_read(tdl_tls *s, void *buf, size_t len, size_t *done)
{
  return SSL_read_ex(s->ssl, buf, len, done);
}

static int do_write(tdl_tls *s, void *buf, size_t len, size_t *done)
{
  return SSL_write_ex(s->ssl, buf, len, done);
}

static int do_shutdown(tdl_tls *s, void *buf, size_t len, size_t *done)
{
  (void)buf, (void)len, (void)done;
  int r = SSL_shutdown(s->ssl);
  /* 0: ours went, the peer's has not come, which we do not wait for. */
  return r >= 0 ? 1 : r;
}

/* Wait until the fd is readable, or the deadline.  OpenSSL sets up its read
 * buffer (16 KiB and more) before it finds the socket empty, and would hold
 * it while the fiber waits, which for an idle connection is forever: it is
 * given back first.  Nothing is lost: OpenSSL asks to read only when it
 * holds no record to give, and a read waits first only when OpenSSL holds
 * nothing (a record that came in part keeps the read buffer: then
 * SSL_free_buffers does nothing).  The price is a malloc and a free per
 * wait, which a wait (a trip through the loop) dwarfs. */
static int wait_readable(tdl_tls *s, tdl_time_t deadline)
{
  SSL_free_buffers(s->ssl);
  s->parked++;
  int rc = tdl_fd_wait(s->fd, TDL_READ, deadline);
  s->parked--;
  if (rc < 0)
    say(s, "%s while waiting for the peer", tdl_strerror(rc));
  else
    s->drained = false; /* what the loop saw is this stream's now (see drained) */
  return rc;
}

/* Fiber I/O under OpenSSL is made with MSG_DONTWAIT, which never switches
 * fibers (fd.h): were it to yield, another fiber could call OpenSSL on the
 * same SSL (its reader and writer) or take the thread's fiber BIO for its
 * own stream while this call is still inside.  The yield that keeps a busy
 * fiber from starving the rest (fiber.h) is then owed: a read pays it in
 * its wait (tdl_fd_wait), and a writer whose socket never fills, which
 * makes no wait, pays it here, outside OpenSSL, once per WRITE_BUDGET
 * writes without a wait. */
enum { WRITE_BUDGET = 64 };
static _Thread_local unsigned t_unparked_writes;

/* Run fn until it is done (1, *done set), the stream ended (0), or it
 * failed (< 0). */
static int drive(tdl_tls *s, ssl_fn fn, void *buf, size_t len, size_t *done, tdl_time_t deadline)
{
  for (;;) {
    /* This thread's fiber BIO serves s for this call (see the BIOs). */
    if (s->fiber_bio && !take_fiber_bio(s)) {
      say(s, "no memory for a BIO");
      return -ENOMEM;
    }
    /* SSL_get_error reads the thread's error queue, which must hold nothing
     * from before the call.  Peeking is cheaper than a clear (which walks
     * all sixteen slots), and the queue is nearly always empty. */
    if (ERR_peek_error() != 0)
      ERR_clear_error();
    errno = 0;
    s->io_rc = 0;
    s->again = false;
    int r = fn(s, buf, len, done);
    int sys_errno = errno;
    if (r > 0)
      return 1;
    unsigned wait;
    int rc = outcome(s, r, sys_errno, &wait);
    if (!wait)
      return rc;
    if (s->io_rc < 0) {
      /* Fiber I/O failed: OpenSSL was told to try again. */
      say(s, "%s while waiting for the peer", tdl_strerror(s->io_rc));
      return s->io_rc;
    }
    if (wait == TDL_READ) {
      /* The socket BIO asks to read again only after EAGAIN.  The fiber
       * BIO may have read a record that was no data (a ticket, a key
       * update) without emptying the fd: then read again, not wait. */
      if (!s->fiber_bio)
        s->drained = true;
      else if (!s->drained)
        continue;
    }
    /* OpenSSL found the socket empty (or full): what the loop saw before is
     * used up.  Decrypted records are never left behind here: OpenSSL
     * asks to read only when it has none to give.  (On fiber I/O
     * without `again`, OpenSSL read a record that was not data, and
     * tdl_fd_wait knows what is there, received ahead or not.) */
    rc = s->fiber_bio && !s->again ? 0 : tdl_fd_blocked(s->fd, wait);
    if (rc < 0)
      return rc;
    if (wait == TDL_READ) {
      rc = wait_readable(s, deadline);
    } else {
      t_unparked_writes = 0;
      s->parked++;
      rc = tdl_fd_wait(s->fd, TDL_WRITE, deadline);
      s->parked--;
      if (rc < 0)
        say(s, "%s while waiting for the peer", tdl_strerror(rc));
    }
    if (rc < 0)
      return rc;
  }
}

static int handshake(tdl_tls *s, tdl_time_t deadline)
{
  if (s->dead)
    return s->dead;
  if (s->handshaken)
    return 0;
  size_t none;
  int rc = drive(s, do_handshake, NULL, 0, &none, deadline);
  if (rc == 1) {
    s->handshaken = true;
    s->resumed = SSL_session_reused(s->ssl) == 1;
#ifndef OPENSSL_NO_KTLS
    s->ktls = (uint8_t)((BIO_get_ktls_send(SSL_get_wbio(s->ssl)) ? TDL_TLS_KTLS_TX : 0) |
                        (BIO_get_ktls_recv(SSL_get_rbio(s->ssl)) ? TDL_TLS_KTLS_RX : 0));
#endif
    if (!(s->ktls & TDL_TLS_KTLS_RX))
      SSL_set_read_ahead(s->ssl, 1);
    /* Records through fiber I/O from here (see the top), the stream's own
     * BIO freed.  What OpenSSL has read ahead is in the SSL's buffer, not
     * in the BIO: nothing is lost.  Without memory for this thread's fiber
     * BIO, the stream stays on its socket BIO, which works. */
    if (s->ktls == 0 && !s->cfg->socket_bio && take_fiber_bio(s))
      s->fiber_bio = true;
    return 0;
  }
  if (rc == 0) {
    say(s, "peer closed during the handshake");
    rc = -EPIPE;
  }
  /* A handshake cut by its deadline, a cancel or the peer is not taken up
   * again; one refused a wait (-EPERM outside a fiber, -EBUSY while another
   * fiber waits in it) has lost nothing and may be called again. */
  if (rc != -EPERM && rc != -EBUSY)
    s->dead = rc;
  return rc;
}

int tdl_tls_handshake(tdl_tls *s, tdl_time_t deadline)
{
  if (!s)
    return -EINVAL;
  return handshake(s, deadline);
}

/* A broken protocol makes the stream unusable; a timeout or a cancel does
 * not (OpenSSL keeps its place). */
static int failed(tdl_tls *s, int rc)
{
  if (rc == -EPROTO || rc == -EKEYREJECTED)
    s->dead = rc;
  return rc;
}

ssize_t tdl_tls_read(tdl_tls *s, void *buf, size_t len, tdl_time_t deadline)
{
  if (!s || (!buf && len))
    return -EINVAL;
  int rc = handshake(s, deadline);
  if (rc < 0)
    return rc;
  if (s->eof || len == 0)
    return 0;
  if (s->fiber_bio && s->drained && !SSL_has_pending(s->ssl)) {
    /* See the top: park here, not in tdl_read under SSL_read.  On a uring
     * loop that receives ahead this returns at once when bytes were
     * received. */
    rc = wait_readable(s, deadline);
    if (rc < 0)
      return rc;
  }
  size_t n = 0;
  rc = drive(s, do_read, buf, len, &n, deadline);
  if (rc == 1)
    return (ssize_t)n;
  return rc == 0 ? 0 : failed(s, rc);
}

int tdl_tls_wait(tdl_tls *s, tdl_time_t deadline)
{
  if (!s)
    return -EINVAL;
  int rc = handshake(s, deadline);
  if (rc < 0)
    return rc;
  /* Not drained: the fd may hold bytes, and a read finds out (at worst it
   * waits after all). */
  if (s->eof || !s->drained || SSL_has_pending(s->ssl))
    return 0;
  /* 0, as tls.h says: not tdl_fd_wait's ready events. */
  rc = wait_readable(s, deadline);
  return rc < 0 ? rc : 0;
}

ssize_t tdl_tls_write(tdl_tls *s, const void *buf, size_t len, tdl_time_t deadline)
{
  if (!s || (!buf && len))
    return -EINVAL;
  int rc = handshake(s, deadline);
  if (rc < 0)
    return rc;
  /* Also after a shutdown that failed or timed out: OpenSSL counts its
   * close_notify as sent from the first try on, and would refuse the write
   * as a protocol error. */
  if (s->shut || (SSL_get_shutdown(s->ssl) & SSL_SENT_SHUTDOWN)) {
    say(s, "write after shutdown");
    return -EPIPE;
  }
  if (len == 0)
    return 0;
  size_t n = 0;
  rc = drive(s, do_write, (void *)buf, len, &n, deadline);
  if (rc == 1) {
    if (s->fiber_bio && ++t_unparked_writes >= WRITE_BUDGET) {
      t_unparked_writes = 0;
      (void)tdl_fiber_yield(); /* outside OpenSSL (above drive) */
    }
    return (ssize_t)n;
  }
  return rc == 0 ? -EPIPE : failed(s, rc);
}

ssize_t tdl_tls_writev(tdl_tls *s, const struct iovec *iov, int iovcnt, tdl_time_t deadline)
{
  enum { GATHER = 2048 };
  if (!s || iovcnt < 0 || (!iov && iovcnt))
    return -EINVAL;
  int i = 0;
  while (i < iovcnt && iov[i].iov_len == 0)
    i++;
  if (i == iovcnt)
    return tdl_tls_write(s, "", 0, deadline);
  if (iov[i].iov_len >= GATHER)
    return tdl_tls_write(s, iov[i].iov_base, iov[i].iov_len, deadline);
  char buf[GATHER];
  size_t n = 0;
  for (; i < iovcnt && n + iov[i].iov_len <= GATHER; i++) {
    if (iov[i].iov_len)
      memcpy(buf + n, iov[i].iov_base, iov[i].iov_len);
    n += iov[i].iov_len;
  }
  return tdl_tls_write(s, buf, n, deadline);
}

int tdl_tls_send_all(tdl_tls *s, const void *buf, size_t len, size_t *sent, tdl_time_t deadline)
{
  size_t done = 0;
  int rc = 0;
  if (!s || (!buf && len)) {
    rc = -EINVAL;
  } else {
    while (done < len) {
      ssize_t n = tdl_tls_write(s, (const char *)buf + done, len - done, deadline);
      if (n < 0) {
        rc = (int)n;
        break;
      }
      done += (size_t)n;
    }
  }
  if (sent)
    *sent = done;
  return rc;
}

int tdl_tls_shutdown(tdl_tls *s, tdl_time_t deadline)
{
  if (!s)
    return -EINVAL;
  if (s->shut || (!s->handshaken && !s->dead))
    return 0;
  if (s->dead)
    return s->dead;
  size_t none;
  int rc = drive(s, do_shutdown, NULL, 0, &none, deadline);
  if (rc == 1 || rc == 0) {
    s->shut = true;
    return 0;
  }
  return failed(s, rc);
}

const char *tdl_tls_error(const tdl_tls *s)
{
  if (!s)
    return "";
  if (s->error)
    return s->error;
  return s->error_lost ? "a TLS call failed (no memory for its words)" : "";
}

int tdl_tls_alpn(const tdl_tls *s, char *buf, size_t cap)
{
  if (!buf && cap)
    return -EINVAL;
  const unsigned char *p = NULL;
  unsigned n = 0;
  if (s && s->handshaken)
    SSL_get0_alpn_selected(s->ssl, &p, &n);
  if (cap) {
    size_t c = n < cap ? n : cap - 1;
    if (c)
      memcpy(buf, p, c);
    buf[c] = '\0';
  }
  return (int)n;
}

int tdl_tls_version(const tdl_tls *s)
{
  return s && s->handshaken ? SSL_version(s->ssl) : 0;
}

unsigned tdl_tls_ktls(const tdl_tls *s)
{
  return s ? s->ktls : 0;
}

bool tdl_tls_fiber_io(const tdl_tls *s)
{
  return s && s->fiber_bio;
}

bool tdl_tls_resumed(const tdl_tls *s)
{
  return s && s->resumed;
}

size_t tdl_tls_pending(const tdl_tls *s)
{
  return s ? (size_t)SSL_pending(s->ssl) : 0;
}

int tdl_tls_fd(const tdl_tls *s)
{
  return s ? s->fd : -EINVAL;
}

/* ---- the reader and writer of net.h, carried through the stream ---- */

static ssize_t carry_read(void *ctx, void *buf, size_t len, tdl_time_t deadline)
{
  return tdl_tls_read(ctx, buf, len, deadline);
}

static ssize_t carry_write(void *ctx, const void *buf, size_t len, tdl_time_t deadline)
{
  return tdl_tls_write(ctx, buf, len, deadline);
}

static const tdl_net_transport carrier = {carry_read, carry_write};

static int carry(tdl_tls *s)
{
  if (!s)
    return -EINVAL;
  int rc = tdl_net_transport_set(s->fd, &carrier, s);
  if (rc == 0)
    s->carried = true;
  return rc;
}

int tdl_tls_reader_init(tdl_reader *r, tdl_tls *s, void *mem, size_t size, size_t max)
{
  int rc = carry(s);
  if (rc < 0)
    return rc;
  return tdl_reader_init(r, s->fd, mem, size, max);
}

int tdl_tls_writer_init(tdl_writer *w, tdl_tls *s, void *mem, size_t size, size_t max)
{
  int rc = carry(s);
  if (rc < 0)
    return rc;
  return tdl_writer_init(w, s->fd, mem, size, max);
}
