/* SPDX-License-Identifier: MIT */
/*
 * TLS streams in one process: a client and a server fiber on one loop, over
 * socketpairs and loopback TCP, with the certificates tests/tls/make-certs.sh
 * makes at run time.  Each run on each back end.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

#include <treadle/tls.h>

#include <openssl/ssl.h>

static char dir[64];
static char path_buf[16][128];
static int path_n;

/* dir/name, valid for the test. */
static const char *P(const char *name)
{
  char *p = path_buf[path_n++ % 16];
  snprintf(p, sizeof path_buf[0], "%s/%s", dir, name);
  return p;
}

static int group_setup(void **state)
{
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/tdl-tls-XXXXXX");
  if (!mkdtemp(dir))
    return -1;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "sh %s %s", TDL_MAKE_CERTS, dir);
  return system(cmd) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static tdl_tls_config *server_cfg(const char *cert)
{
  char err[256];
  tdl_tls_options o = {.role = TDL_TLS_SERVER, .cert_file = P(cert), .key_file = P("server.key"),
                       .alpn = "h2,http/1.1", .error = err, .error_cap = sizeof err};
  tdl_tls_config *cfg;
  int rc = tdl_tls_config_new(&cfg, &o);
  if (rc)
    fail_msg("server config: %s", err);
  return cfg;
}

static tdl_tls_config *client_cfg(bool insecure)
{
  char err[256];
  tdl_tls_options o = {.ca_file = P("ca.pem"), .insecure = insecure, .alpn = "http/1.1",
                       .error = err, .error_cap = sizeof err};
  tdl_tls_config *cfg;
  int rc = tdl_tls_config_new(&cfg, &o);
  if (rc)
    fail_msg("client config: %s", err);
  return cfg;
}

/* Whether this run keeps records on OpenSSL's socket BIO (tls.h). */
static bool socket_bio(void)
{
  const char *v = getenv("TREADLE_TLS_BIO");
  return v && strcmp(v, "socket") == 0;
}

static void spair(int sv[2])
{
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
}

/* ---- configurations: bad input ---- */

static void config_errors(void **state)
{
  (void)state;
  char err[512];
  tdl_tls_config *cfg = (tdl_tls_config *)1;
  tdl_tls_options o = {.role = TDL_TLS_SERVER, .cert_file = P("server.pem"), .key_file = P("missing.key"),
                       .error = err, .error_cap = sizeof err};
  assert_int_equal(tdl_tls_config_new(&cfg, &o), -ENOENT);
  assert_null(cfg);
  assert_non_null(strstr(err, "missing.key"));

  o.key_file = P("other.key"); /* not server.pem's key */
  assert_int_equal(tdl_tls_config_new(&cfg, &o), -EINVAL);
  assert_non_null(strstr(err, "other.key"));

  o.key_file = P("server.key");
  o.cert_file = P("broken.pem");
  assert_int_equal(tdl_tls_config_new(&cfg, &o), -EINVAL);
  assert_non_null(strstr(err, "broken.pem"));

  o.cert_file = P("server.key"); /* a key where the certificate goes */
  assert_int_equal(tdl_tls_config_new(&cfg, &o), -EINVAL);
  assert_non_null(strstr(err, "server.key"));

  /* A key path that cannot be read as a file (a directory): named. */
  o.cert_file = P("server.pem");
  o.key_file = dir;
  assert_true(tdl_tls_config_new(&cfg, &o) < 0);
  assert_null(cfg);
  assert_non_null(strstr(err, dir));

  /* Unreadable: root reads every file, so only where the test is not root. */
  if (geteuid() != 0) {
    char copy[160];
    snprintf(copy, sizeof copy, "cp %s %s && chmod 000 %s", P("server.key"), P("locked.key"), P("locked.key"));
    assert_int_equal(system(copy), 0);
    o.cert_file = P("server.pem");
    o.key_file = P("locked.key");
    assert_int_equal(tdl_tls_config_new(&cfg, &o), -EACCES);
    assert_non_null(strstr(err, "locked.key"));
  }

  tdl_tls_options none = {.role = TDL_TLS_SERVER, .error = err, .error_cap = sizeof err};
  assert_int_equal(tdl_tls_config_new(&cfg, &none), -EINVAL);
  assert_non_null(strstr(err, "certificate"));

  tdl_tls_options bad = {.alpn = "h2,,x", .error = err, .error_cap = sizeof err};
  assert_int_equal(tdl_tls_config_new(&cfg, &bad), -EINVAL);
  bad.alpn = NULL;
  bad.min_version = 0x0301;
  assert_int_equal(tdl_tls_config_new(&cfg, &bad), -EINVAL);
  bad.min_version = 0;
  bad.reserved[0] = 1;
  assert_int_equal(tdl_tls_config_new(&cfg, &bad), -EINVAL);
  bad.reserved[0] = 0;
  bad.ca_file = P("nothing-here.pem");
  assert_int_equal(tdl_tls_config_new(&cfg, &bad), -ENOENT);
  assert_non_null(strstr(err, "nothing-here.pem"));
  assert_int_equal(tdl_tls_config_new(NULL, NULL), -EINVAL);

  /* A tiny error buffer is cut, never overrun. */
  char tiny[4] = "xyz";
  o = (tdl_tls_options){.role = TDL_TLS_SERVER, .cert_file = P("server.pem"), .key_file = P("x"),
                        .error = tiny, .error_cap = 3};
  assert_int_equal(tdl_tls_config_new(&cfg, &o), -ENOENT);
  assert_int_equal(strlen(tiny), 2);

  /* The same identity from memory. */
  static char certpem[8192], keypem[4096];
  FILE *f = fopen(P("server.pem"), "r");
  assert_non_null(f);
  certpem[fread(certpem, 1, sizeof certpem - 1, f)] = '\0';
  fclose(f);
  f = fopen(P("server.key"), "r");
  assert_non_null(f);
  keypem[fread(keypem, 1, sizeof keypem - 1, f)] = '\0';
  fclose(f);
  tdl_tls_options mem = {.role = TDL_TLS_SERVER, .cert_pem = certpem, .key_pem = keypem};
  assert_int_equal(tdl_tls_config_new(&cfg, &mem), 0);
  tdl_tls_config_free(cfg);
  mem.key_pem = "garbage";
  assert_int_equal(tdl_tls_config_new(&cfg, &mem), -EINVAL);
  tdl_tls_config_free(NULL);

  /* A verifying client must name its server. */
  tdl_tls_config *c = client_cfg(false);
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, c, 0, NULL), -EINVAL);
  assert_int_equal(tdl_tls_new(&s, NULL, 0, "localhost"), -EINVAL);
  assert_int_equal(tdl_tls_new(&s, c, -1, "localhost"), -EINVAL);
  assert_int_equal(tdl_tls_free(NULL), 0);
  tdl_tls_config_free(c);
}

/* ---- one client, one server ---- */

typedef struct peer {
  tdl_tls_config *cfg;
  int fd;
  const char *name;
  tdl_time_t deadline;
  int hs;        /* the handshake's result */
  ssize_t got;   /* the last read's */
  char buf[256];
  char error[256];
  char alpn[32];
  int version;
  unsigned ktls;
  bool resumed;
  bool fiber_io;
  int done;
  /* what to do after the handshake */
  enum { ECHO_ONE, SEND_HELLO, READ_ONLY, NOTHING, SEND_TWO, SEND_CLOSE, DROP } act;
} peer;

static void after(peer *p, tdl_tls *s)
{
  p->version = tdl_tls_version(s);
  p->ktls = tdl_tls_ktls(s);
  p->fiber_io = tdl_tls_fiber_io(s);
  p->resumed = tdl_tls_resumed(s);
  tdl_tls_alpn(s, p->alpn, sizeof p->alpn);
  switch (p->act) {
  case ECHO_ONE:
    p->got = tdl_tls_read(s, p->buf, sizeof p->buf, p->deadline);
    if (p->got > 0)
      assert_int_equal(tdl_tls_send_all(s, p->buf, (size_t)p->got, NULL, p->deadline), 0);
    assert_int_equal(tdl_tls_shutdown(s, p->deadline), 0);
    break;
  case SEND_HELLO:
    assert_int_equal(tdl_tls_write(s, "hello", 5, p->deadline), 5);
    p->got = tdl_tls_read(s, p->buf, sizeof p->buf, p->deadline);
    if (p->got > 0) { /* and then the clean end, and ours */
      assert_int_equal(tdl_tls_read(s, p->buf + p->got, sizeof p->buf - (size_t)p->got, p->deadline), 0);
      assert_int_equal(tdl_tls_shutdown(s, p->deadline), 0);
    }
    break;
  case READ_ONLY:
    p->got = tdl_tls_read(s, p->buf, sizeof p->buf, p->deadline);
    break;
  case SEND_TWO: {
    /* Two records at once; then wait for the end. */
    char rec[100];
    memset(rec, 'a', sizeof rec);
    struct iovec iov[2] = {{rec, 60}, {rec, 40}};
    assert_int_equal(tdl_tls_writev(s, iov, 2, p->deadline), 100);
    memset(rec, 'b', sizeof rec);
    assert_int_equal(tdl_tls_write(s, rec, sizeof rec, p->deadline), 100);
    p->got = tdl_tls_read(s, p->buf, sizeof p->buf, p->deadline);
    break;
  }
  case SEND_CLOSE:
    assert_int_equal(tdl_tls_write(s, "bye", 3, p->deadline), 3);
    assert_int_equal(tdl_tls_shutdown(s, p->deadline), 0);
    assert_int_equal(tdl_tls_shutdown(s, p->deadline), 0);
    assert_int_equal(tdl_tls_write(s, "x", 1, p->deadline), -EPIPE);
    break;
  case DROP:
    assert_int_equal(tdl_tls_write(s, "partial", 7, p->deadline), 7);
    break;
  case NOTHING:
    break;
  }
}

static void *run_peer(void *arg)
{
  peer *p = arg;
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, p->cfg, p->fd, p->name), 0);
  assert_int_equal(tdl_tls_fd(s), p->fd);
  p->hs = tdl_tls_handshake(s, p->deadline);
  if (p->hs == 0)
    after(p, s);
  snprintf(p->error, sizeof p->error, "%s", tdl_tls_error(s));
  assert_int_equal(tdl_tls_free(s), 0);
  assert_int_equal(tdl_close(p->fd), 0);
  p->done = 1;
  return NULL;
}

static void run_pair(peer *client, peer *server)
{
  go(run_peer, server);
  go(run_peer, client);
  assert_true(t_run_until(L, &client->done, 100000));
  assert_true(t_run_until(L, &server->done, 100000));
}

static void handshake_and_echo(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  peer server = {.cfg = server_cfg("server.pem"), .fd = sv[0], .deadline = tdl_after(T_HANG), .act = ECHO_ONE};
  peer client = {.cfg = client_cfg(false), .fd = sv[1], .name = "localhost", .deadline = tdl_after(T_HANG),
                 .act = SEND_HELLO};
  run_pair(&client, &server);
  assert_int_equal(server.hs, 0);
  assert_int_equal(client.hs, 0);
  assert_int_equal(client.got, 5);
  assert_memory_equal(client.buf, "hello", 5);
  assert_string_equal(client.alpn, "http/1.1");
  assert_string_equal(server.alpn, "http/1.1");
  assert_int_equal(client.version, TDL_TLS_VERSION_1_3);
  assert_int_equal(server.ktls, 0); /* a Unix socket: no kernel TLS */
  /* So the records went through fiber I/O, unless told to use the socket BIO. */
  assert_int_equal(client.fiber_io, !socket_bio());
  assert_int_equal(server.fiber_io, !socket_bio());
  assert_string_equal(client.error, "");
  tdl_tls_config_free(server.cfg);
  tdl_tls_config_free(client.cfg);
}

/* What the kernel says to TCP_ULP "tls" on a connected TCP socket: 0 where it
 * has the module, else its errno (ENOENT). */
static int ulp_probe(void)
{
  int a, b;
  t_tcp_pair(&a, &b);
  int rc = setsockopt(a, IPPROTO_TCP, TCP_ULP, "tls", sizeof "tls") == 0 ? 0 : errno;
  close(a);
  close(b);
  return rc;
}

static void ktls_or_fallback(void **state)
{
  (void)state;
  int probe = ulp_probe();
  int a, b;
  t_tcp_pair(&a, &b);
  peer server = {.cfg = server_cfg("server.pem"), .fd = b, .deadline = tdl_after(T_HANG), .act = ECHO_ONE};
  peer client = {.cfg = client_cfg(false), .fd = a, .name = "127.0.0.1", .deadline = tdl_after(T_HANG),
                 .act = SEND_HELLO};
  run_pair(&client, &server);
  assert_int_equal(client.hs, 0);
  assert_int_equal(client.got, 5);
  if (probe != 0) {
    /* No `tls` module: records stay in user space, and the stream says so. */
    assert_int_equal(client.ktls, 0);
    assert_int_equal(server.ktls, 0);
  } else {
    assert_true(client.ktls & TDL_TLS_KTLS_TX);
  }
  /* kTLS in either direction keeps the socket BIO. */
  assert_int_equal(client.fiber_io, client.ktls == 0 && !socket_bio());
  assert_int_equal(server.fiber_io, server.ktls == 0 && !socket_bio());
  tdl_tls_config_free(server.cfg);
  tdl_tls_config_free(client.cfg);
}

/* Refused certificates, and accepted ones when verification is off. */
static void refuse(const char *cert, const char *name, const char *why)
{
  for (int insecure = 0; insecure < 2; insecure++) {
    int sv[2];
    spair(sv);
    peer server = {.cfg = server_cfg(cert), .fd = sv[0], .deadline = tdl_after(T_HANG), .act = ECHO_ONE};
    peer client = {.cfg = client_cfg(insecure), .fd = sv[1], .name = name, .deadline = tdl_after(T_HANG),
                   .act = SEND_HELLO};
    run_pair(&client, &server);
    if (insecure) {
      assert_int_equal(client.hs, 0);
      assert_int_equal(client.got, 5);
    } else {
      assert_int_equal(client.hs, -EKEYREJECTED);
      if (!strstr(client.error, why))
        fail_msg("'%s' does not say '%s'", client.error, why);
      assert_int_not_equal(server.hs, 0); /* the client's alert ended it */
    }
    tdl_tls_config_free(server.cfg);
    tdl_tls_config_free(client.cfg);
  }
}

static void bad_certificates(void **state)
{
  (void)state;
  refuse("expired.pem", "localhost", "expired");
  refuse("wronghost.pem", "localhost", "mismatch");
  refuse("selfsigned.pem", "localhost", "self-signed");
  refuse("server.pem", "127.0.0.2", "mismatch");
}

/* ---- a raw peer: plaintext, garbage, silence, truncation ---- */

typedef struct raw {
  int fd;
  const char *bytes;
  size_t len;
  bool one_by_one;
  bool close_after;
  int done;
} raw;

static void *run_raw(void *arg)
{
  raw *r = arg;
  for (size_t i = 0; i < r->len;) {
    size_t n = r->one_by_one ? 1 : r->len - i;
    ssize_t w = tdl_write(r->fd, r->bytes + i, n, TDL_FOREVER);
    assert_true(w > 0);
    i += (size_t)w;
    if (r->one_by_one)
      tdl_fiber_yield();
  }
  if (r->close_after)
    tdl_net_shutdown(r->fd, SHUT_WR);
  r->done = 1;
  return NULL;
}

static void plaintext_to_server(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  peer server = {.cfg = server_cfg("server.pem"), .fd = sv[0], .deadline = tdl_after(T_HANG), .act = ECHO_ONE};
  static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  raw r = {.fd = sv[1], .bytes = req, .len = sizeof req - 1};
  go(run_raw, &r);
  go(run_peer, &server);
  assert_true(t_run_until(L, &server.done, 100000));
  assert_true(t_run_until(L, &r.done, 100000));
  assert_int_equal(server.hs, -EPROTO);
  if (!strstr(server.error, "not TLS"))
    fail_msg("'%s'", server.error);
  assert_int_equal(tdl_close(sv[1]), 0);
  tdl_tls_config_free(server.cfg);
}

static void silent_client_cut_at_deadline(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  peer server = {.cfg = server_cfg("server.pem"), .fd = sv[0], .deadline = tdl_after(50 * TDL_MSEC), .act = ECHO_ONE};
  /* Half a ClientHello: a record header and a few bytes of it. */
  static const char half[] = "\x16\x03\x01\x02\x00\x01\x00\x01";
  raw r = {.fd = sv[1], .bytes = half, .len = sizeof half - 1};
  go(run_raw, &r);
  go(run_peer, &server);
  assert_true(t_run_until(L, &server.done, 100000));
  assert_int_equal(server.hs, -ETIMEDOUT);
  assert_int_equal(tdl_close(sv[1]), 0);
  tdl_tls_config_free(server.cfg);
}

/* A client's bytes relayed to the server one at a time. */
typedef struct relay {
  int from, to;
  int done;
} relay;

static void *run_relay(void *arg)
{
  relay *r = arg;
  char c;
  for (;;) {
    ssize_t n = tdl_read(r->from, &c, 1, TDL_FOREVER);
    if (n <= 0)
      break;
    /* The far end may have gone already (its close_notify crossed ours). */
    if (tdl_send(r->to, &c, 1, MSG_NOSIGNAL, TDL_FOREVER) != 1)
      break;
    tdl_fiber_yield();
  }
  tdl_net_shutdown(r->to, SHUT_WR);
  r->done = 1;
  return NULL;
}

static void hello_one_byte_at_a_time(void **state)
{
  (void)state;
  /* client c2r[0] | c2r[1] relay r2s[0] | r2s[1] server: one relay fiber per
   * direction, each passing one byte at a time. */
  int c2r[2], r2s[2];
  spair(c2r);
  spair(r2s);
  relay fwd = {.from = c2r[1], .to = r2s[0]};
  relay rev = {.from = r2s[0], .to = c2r[1]};
  peer server = {.cfg = server_cfg("server.pem"), .fd = r2s[1], .deadline = tdl_after(T_HANG), .act = ECHO_ONE};
  peer client = {.cfg = client_cfg(false), .fd = c2r[0], .name = "localhost", .deadline = tdl_after(T_HANG),
                 .act = SEND_HELLO};
  go(run_relay, &fwd);
  go(run_relay, &rev);
  run_pair(&client, &server);
  assert_int_equal(server.hs, 0);
  assert_int_equal(client.hs, 0);
  assert_int_equal(client.got, 5);
  assert_true(t_run_until(L, &fwd.done, 100000));
  assert_true(t_run_until(L, &rev.done, 100000));
  tdl_close(c2r[1]);
  tdl_close(r2s[0]);
  tdl_tls_config_free(server.cfg);
  tdl_tls_config_free(client.cfg);
}

/* After a handshake, the client side's fd is written raw: garbage, or a cut
 * record; or the server drops the connection without close_notify. */
typedef struct rawafter {
  tdl_tls_config *cfg;
  int fd;
  const char *bytes;
  size_t len;
  int done;
} rawafter;

static void *run_client_then_raw(void *arg)
{
  rawafter *r = arg;
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, r->cfg, r->fd, "localhost"), 0);
  assert_int_equal(tdl_tls_handshake(s, tdl_after(T_HANG)), 0);
  assert_int_equal(tdl_tls_free(s), 0);
  assert_int_equal(tdl_write(r->fd, r->bytes, r->len, TDL_FOREVER), (ssize_t)r->len);
  tdl_net_shutdown(r->fd, SHUT_WR);
  r->done = 1;
  return NULL;
}

static void after_handshake(const char *bytes, size_t len, ssize_t want, const char *why)
{
  int sv[2];
  spair(sv);
  peer server = {.cfg = server_cfg("server.pem"), .fd = sv[0], .deadline = tdl_after(T_HANG), .act = READ_ONLY};
  rawafter c = {.cfg = client_cfg(false), .fd = sv[1], .bytes = bytes, .len = len};
  go(run_peer, &server);
  go(run_client_then_raw, &c);
  assert_true(t_run_until(L, &server.done, 100000));
  assert_true(t_run_until(L, &c.done, 100000));
  assert_int_equal(server.hs, 0);
  assert_int_equal(server.got, want);
  if (!strstr(server.error, why))
    fail_msg("'%s' does not say '%s'", server.error, why);
  tdl_close(sv[1]);
  tdl_tls_config_free(server.cfg);
  tdl_tls_config_free(c.cfg);
}

static void garbage_after_handshake(void **state)
{
  (void)state;
  static const char junk[] = "\x01\x02\x03\x04\x05 this is not a record, just bytes";
  after_handshake(junk, sizeof junk - 1, -EPROTO, "");
}

static void truncated_record(void **state)
{
  (void)state;
  /* An application-data record header that promises 100 bytes; 10 come. */
  static const char cut[] = "\x17\x03\x03\x00\x64" "0123456789";
  after_handshake(cut, sizeof cut - 1, -EPIPE, "close_notify");
}

static void close_without_close_notify(void **state)
{
  (void)state;
  after_handshake("", 0, -EPIPE, "close_notify");
}

static void clean_end(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  peer server = {.cfg = server_cfg("server.pem"), .fd = sv[0], .deadline = tdl_after(T_HANG), .act = SEND_CLOSE};
  peer client = {.cfg = client_cfg(false), .fd = sv[1], .name = "localhost", .deadline = tdl_after(T_HANG),
                 .act = READ_ONLY};
  run_pair(&client, &server);
  assert_int_equal(client.got, 3);
  tdl_tls_config_free(server.cfg);
  tdl_tls_config_free(client.cfg);

  /* read after read: bye, then 0 (the clean end), then 0 again. */
  spair(sv);
  server = (peer){.cfg = server_cfg("server.pem"), .fd = sv[0], .deadline = tdl_after(T_HANG), .act = SEND_CLOSE};
  client = (peer){.cfg = client_cfg(false), .fd = sv[1], .name = "localhost", .deadline = tdl_after(T_HANG),
                  .act = SEND_HELLO};
  run_pair(&client, &server);
  assert_int_equal(client.hs, 0);
  assert_int_equal(client.got, 3); /* and SEND_HELLO asserted the 0 after it */
  tdl_tls_config_free(server.cfg);
  tdl_tls_config_free(client.cfg);
}

/* ---- pending records are read without parking ---- */

typedef struct pend {
  tdl_tls_config *cfg;
  int fd;
  size_t pending_after_first;
  ssize_t second;
  ssize_t third;
  int done;
} pend;

static void *run_pending_client(void *arg)
{
  pend *p = arg;
  tdl_tls *s;
  char buf[256];
  assert_int_equal(tdl_tls_new(&s, p->cfg, p->fd, "localhost"), 0);
  assert_int_equal(tdl_tls_handshake(s, tdl_after(T_HANG)), 0);
  /* Wait until both records have surely arrived: read 10 bytes of the first. */
  assert_int_equal(tdl_tls_read(s, buf, 10, tdl_after(T_HANG)), 10);
  p->pending_after_first = tdl_tls_pending(s);
  /* A deadline already past: only what need not wait can succeed. */
  p->second = tdl_tls_read(s, buf, sizeof buf, tdl_now() - 1);
  p->third = tdl_tls_read(s, buf, sizeof buf, tdl_after(T_HANG));
  assert_int_equal(tdl_tls_write(s, "k", 1, tdl_after(T_HANG)), 1);
  assert_int_equal(tdl_tls_free(s), 0);
  tdl_close(p->fd);
  p->done = 1;
  return NULL;
}

static void pending_without_parking(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  peer server = {.cfg = server_cfg("server.pem"), .fd = sv[0], .deadline = tdl_after(T_HANG), .act = SEND_TWO};
  pend c = {.cfg = client_cfg(false), .fd = sv[1]};
  go(run_peer, &server);
  go(run_pending_client, &c);
  assert_true(t_run_until(L, &c.done, 100000));
  assert_true(t_run_until(L, &server.done, 100000));
  assert_int_equal(c.pending_after_first, 90);
  assert_int_equal(c.second, 90);
  assert_int_equal(c.third, 100);
  tdl_tls_config_free(server.cfg);
  tdl_tls_config_free(c.cfg);
}

/* ---- cancel mid-handshake and mid-read ---- */

static void cancel_mid_handshake(void **state)
{
  (void)state;
  int base = t_count_fds();
  int sv[2];
  spair(sv);
  peer server = {.cfg = server_cfg("server.pem"), .fd = sv[0], .deadline = TDL_FOREVER, .act = READ_ONLY};
  /* Half a hello, then silence: the server parks inside the handshake. */
  static const char half[] = "\x16\x03\x01\x02\x00\x01\x00\x01";
  raw r = {.fd = sv[1], .bytes = half, .len = sizeof half - 1};
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, L, run_peer, &server, NULL), 0);
  go(run_raw, &r);
  for (int i = 0; i < 50; i++)
    tdl_loop_run(L, TDL_LOOP_NOWAIT);
  assert_int_equal(server.done, 0);
  assert_int_equal(tdl_fiber_cancel(L, f), 0);
  assert_int_equal(tdl_fiber_detach(L, f), 0);
  assert_true(t_run_until(L, &server.done, 100000));
  assert_int_equal(server.hs, -ECANCELED);
  tdl_close(sv[1]);
  tdl_tls_config_free(server.cfg);
  assert_int_equal(t_count_fds(), base);
}

/* A read parked on a live connection, cancelled: -ECANCELED, and the stream
 * keeps its place (the next read gets the data). */
typedef struct midread {
  tdl_tls_config *cfg;
  int fd;
  ssize_t first, second;
  int parked, done;
  char buf[16];
} midread;

static void *run_midread(void *arg)
{
  midread *m = arg;
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, m->cfg, m->fd, NULL), 0);
  assert_int_equal(tdl_tls_handshake(s, tdl_after(T_HANG)), 0);
  m->parked = 1;
  m->first = tdl_tls_read(s, m->buf, sizeof m->buf, TDL_FOREVER);
  m->done = 1;
  /* A cancelled fiber's later waits fail too: the stream is freed here. */
  assert_int_equal(tdl_tls_free(s), 0);
  return NULL;
}

static void *run_client_waits(void *arg)
{
  peer *p = arg;
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, p->cfg, p->fd, "localhost"), 0);
  p->hs = tdl_tls_handshake(s, tdl_after(T_HANG));
  /* Stay until told. */
  while (!p->done)
    tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(tdl_tls_free(s), 0);
  p->done = 2;
  return NULL;
}

static void cancel_mid_read(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  midread m = {.cfg = server_cfg("server.pem"), .fd = sv[0]};
  peer client = {.cfg = client_cfg(false), .fd = sv[1]};
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, L, run_midread, &m, NULL), 0);
  go(run_client_waits, &client);
  assert_true(t_run_until(L, &m.parked, 100000));
  for (int i = 0; i < 20; i++)
    tdl_loop_run(L, TDL_LOOP_NOWAIT);
  assert_int_equal(m.done, 0);
  assert_int_equal(tdl_fiber_cancel(L, f), 0);
  assert_int_equal(tdl_fiber_detach(L, f), 0);
  assert_true(t_run_until(L, &m.done, 100000));
  assert_int_equal(m.first, -ECANCELED);
  client.done = 1;
  int two = 0;
  while (client.done != 2 && two++ < 100000)
    tdl_loop_run(L, TDL_LOOP_ONCE);
  assert_int_equal(client.hs, 0);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  tdl_tls_config_free(m.cfg);
  tdl_tls_config_free(client.cfg);
}

/* ---- reload ---- */

static void reload_keeps_old_on_failure(void **state)
{
  (void)state;
  tdl_tls_config *scfg = server_cfg("server.pem");
  char err[256];
  tdl_tls_options broken = {.role = TDL_TLS_SERVER, .cert_file = P("broken.pem"), .key_file = P("server.key"),
                            .error = err, .error_cap = sizeof err};
  assert_int_equal(tdl_tls_config_reload(scfg, &broken), -EINVAL);
  assert_non_null(strstr(err, "broken.pem"));
  tdl_tls_options missing = broken;
  missing.cert_file = P("server.pem");
  missing.key_file = P("gone.key");
  assert_int_equal(tdl_tls_config_reload(scfg, &missing), -ENOENT);
  tdl_tls_options client_role = {.role = TDL_TLS_CLIENT};
  assert_int_equal(tdl_tls_config_reload(scfg, &client_role), -EINVAL);
  assert_int_equal(tdl_tls_config_reload(NULL, &client_role), -EINVAL);

  /* Still the old, valid certificate. */
  int sv[2];
  spair(sv);
  peer server = {.cfg = scfg, .fd = sv[0], .deadline = tdl_after(T_HANG), .act = ECHO_ONE};
  peer client = {.cfg = client_cfg(false), .fd = sv[1], .name = "localhost", .deadline = tdl_after(T_HANG),
                 .act = SEND_HELLO};
  run_pair(&client, &server);
  assert_int_equal(client.hs, 0);

  tdl_tls_config_free(scfg);
  tdl_tls_config_free(client.cfg);
}

static void reload_swaps(void **state)
{
  (void)state;
  tdl_tls_config *scfg = server_cfg("server.pem");
  int early_sv[2];
  spair(early_sv);
  /* A stream made now, before the reload, keeps the old SSL_CTX. */
  tdl_tls *early;
  assert_int_equal(tdl_tls_new(&early, scfg, early_sv[0], NULL), 0);
  tdl_tls_options expired = {.role = TDL_TLS_SERVER, .cert_file = P("expired.pem"), .key_file = P("server.key")};
  assert_int_equal(tdl_tls_config_reload(scfg, &expired), 0);
  assert_int_equal(tdl_tls_free(early), 0); /* the old SSL_CTX goes with it */

  int sv[2];
  spair(sv);
  peer server = {.cfg = scfg, .fd = sv[0], .deadline = tdl_after(T_HANG), .act = ECHO_ONE};
  peer client = {.cfg = client_cfg(false), .fd = sv[1], .name = "localhost", .deadline = tdl_after(T_HANG),
                 .act = SEND_HELLO};
  run_pair(&client, &server);
  assert_int_equal(client.hs, -EKEYREJECTED);
  assert_non_null(strstr(client.error, "expired"));
  tdl_close(early_sv[0]);
  tdl_close(early_sv[1]);
  tdl_tls_config_free(scfg);
  tdl_tls_config_free(client.cfg);
}

/* ---- session resumption ---- */

static void resumption(void **state)
{
  (void)state;
  tdl_tls_config *scfg = server_cfg("server.pem");
  tdl_tls_config *ccfg = client_cfg(false);
  bool resumed[2];
  for (int i = 0; i < 2; i++) {
    int sv[2];
    spair(sv);
    peer server = {.cfg = scfg, .fd = sv[0], .deadline = tdl_after(T_HANG), .act = ECHO_ONE};
    peer client = {.cfg = ccfg, .fd = sv[1], .name = "localhost", .deadline = tdl_after(T_HANG),
                   .act = SEND_HELLO};
    run_pair(&client, &server);
    assert_int_equal(client.hs, 0);
    assert_int_equal(client.got, 5);
    resumed[i] = client.resumed;
    assert_int_equal(server.resumed, client.resumed);
  }
  assert_false(resumed[0]);
  assert_true(resumed[1]);
  tdl_tls_config_free(scfg);
  tdl_tls_config_free(ccfg);
}

/* ---- net.h's reader and writer over a stream ---- */

typedef struct lines {
  tdl_tls_config *cfg;
  int fd;
  const char *name;
  int served;
  ssize_t last;
  char got[64];
  int done;
} lines;

/* A line echo server on the buffered reader and writer. */
static void *run_line_server(void *arg)
{
  lines *l = arg;
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, l->cfg, l->fd, NULL), 0);
  tdl_reader r;
  tdl_writer w;
  assert_int_equal(tdl_tls_reader_init(&r, s, NULL, 16, 4096), 0);
  assert_int_equal(tdl_tls_writer_init(&w, s, NULL, 16, 4096), 0);
  ssize_t n;
  while ((n = tdl_reader_until(&r, "\n", 1, tdl_after(T_HANG))) > 0) {
    assert_int_equal(tdl_writer_put(&w, tdl_reader_data(&r), (size_t)n), 0);
    tdl_reader_consume(&r, (size_t)n);
    l->served++;
    if (tdl_reader_len(&r) == 0)
      assert_int_equal(tdl_writer_flush(&w, tdl_after(T_HANG)), 0);
  }
  l->last = n;
  assert_int_equal(tdl_tls_shutdown(s, tdl_after(T_HANG)), 0);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  assert_int_equal(tdl_writer_destroy(&w), 0);
  assert_int_equal(tdl_tls_free(s), 0);
  tdl_close(l->fd);
  l->done = 1;
  return NULL;
}

static void *run_line_client(void *arg)
{
  lines *l = arg;
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, l->cfg, l->fd, l->name), 0);
  /* Three lines in one write: pipelined, more than one record's worth
   * read by the server's reader in pieces of 16 bytes. */
  static const char three[] = "one\ntwo, a longer line than sixteen bytes\nthree\n";
  assert_int_equal(tdl_tls_send_all(s, three, sizeof three - 1, NULL, tdl_after(T_HANG)), 0);
  tdl_reader r;
  assert_int_equal(tdl_tls_reader_init(&r, s, NULL, 64, 64), 0);
  assert_int_equal(tdl_reader_need(&r, sizeof three - 1, tdl_after(T_HANG)), sizeof three - 1);
  assert_memory_equal(tdl_reader_data(&r), three, sizeof three - 1);
  tdl_reader_consume(&r, sizeof three - 1);
  assert_int_equal(tdl_tls_shutdown(s, tdl_after(T_HANG)), 0);
  /* The server's clean end: 0. */
  assert_int_equal(tdl_reader_fill(&r, tdl_after(T_HANG)), 0);
  assert_int_equal(tdl_reader_destroy(&r), 0);
  assert_int_equal(tdl_tls_free(s), 0);
  tdl_close(l->fd);
  l->done = 1;
  return NULL;
}

static void reader_writer_over_tls(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  lines server = {.cfg = server_cfg("server.pem"), .fd = sv[0]};
  lines client = {.cfg = client_cfg(false), .fd = sv[1], .name = "localhost"};
  go(run_line_server, &server);
  go(run_line_client, &client);
  assert_true(t_run_until(L, &client.done, 100000));
  assert_true(t_run_until(L, &server.done, 100000));
  assert_int_equal(server.served, 3);
  assert_int_equal(server.last, 0); /* the client's close_notify */
  tdl_tls_config_free(server.cfg);
  tdl_tls_config_free(client.cfg);
}

/* ---- two fibers in one handshake ---- */

typedef struct two {
  tdl_tls *s;
  int first, second;
  int done;
} two;

static void *run_first(void *arg)
{
  two *t = arg;
  t->first = tdl_tls_handshake(t->s, tdl_after(T_HANG));
  t->done++;
  return NULL;
}

static void *run_second(void *arg)
{
  two *t = arg;
  /* The first is parked reading the client's hello: this one is refused,
   * and the stream is not hurt by it. */
  t->second = tdl_tls_handshake(t->s, tdl_after(T_HANG));
  t->done++;
  return NULL;
}

static void second_fiber_in_handshake(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  tdl_tls_config *scfg = server_cfg("server.pem");
  two t = {0};
  assert_int_equal(tdl_tls_new(&t.s, scfg, sv[0], NULL), 0);
  go(run_first, &t);
  go(run_second, &t);
  for (int i = 0; i < 10 && t.done < 1; i++)
    tdl_loop_run(L, TDL_LOOP_NOWAIT);
  assert_int_equal(t.second, -EBUSY);
  assert_int_equal(tdl_tls_free(t.s), -EBUSY); /* the first is parked in it */
  peer client = {.cfg = client_cfg(false), .fd = sv[1], .name = "localhost", .deadline = tdl_after(T_HANG),
                 .act = NOTHING};
  go(run_peer, &client);
  assert_true(t_run_until(L, &client.done, 100000));
  while (t.done < 2)
    tdl_loop_run(L, TDL_LOOP_ONCE);
  assert_int_equal(t.first, 0);
  assert_int_equal(client.hs, 0);
  assert_int_equal(tdl_tls_free(t.s), 0);
  tdl_close(sv[0]);
  tdl_tls_config_free(scfg);
  tdl_tls_config_free(client.cfg);
}

/* ---- misuse ---- */

static void *run_bad_args(void *arg)
{
  tdl_tls *s = arg;
  char b[4];
  assert_int_equal(tdl_tls_read(s, NULL, 4, TDL_FOREVER), -EINVAL);
  assert_int_equal(tdl_tls_write(s, NULL, 4, TDL_FOREVER), -EINVAL);
  assert_int_equal(tdl_tls_writev(s, NULL, 1, TDL_FOREVER), -EINVAL);
  assert_int_equal(tdl_tls_send_all(NULL, b, 4, NULL, TDL_FOREVER), -EINVAL);
  assert_int_equal(tdl_tls_handshake(NULL, TDL_FOREVER), -EINVAL);
  assert_int_equal(tdl_tls_shutdown(NULL, TDL_FOREVER), -EINVAL);
  return NULL;
}

static void misuse(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  tdl_tls_config *scfg = server_cfg("server.pem");
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, scfg, sv[0], NULL), 0);
  /* Outside a fiber: a call that would park is refused. */
  char b[4];
  assert_int_equal(tdl_tls_handshake(s, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_tls_read(s, b, sizeof b, TDL_FOREVER), -EPERM); /* refused again, not dead */
  assert_int_equal(tdl_tls_version(s), 0);
  assert_int_equal(tdl_tls_alpn(s, b, sizeof b), 0);
  assert_string_equal(b, "");
  assert_int_equal(tdl_tls_alpn(s, NULL, 4), -EINVAL);
  assert_int_equal(tdl_tls_shutdown(s, TDL_FOREVER), 0); /* no handshake yet: nothing to end */
  assert_false(tdl_tls_fiber_io(s)); /* before the handshake: the socket BIO */
  go(run_bad_args, s);
  for (int i = 0; i < 5; i++)
    tdl_loop_run(L, TDL_LOOP_NOWAIT);
  assert_int_equal(tdl_tls_free(s), 0);
  assert_int_equal(tdl_tls_pending(NULL), 0);
  assert_int_equal(tdl_tls_fd(NULL), -EINVAL);
  assert_false(tdl_tls_fiber_io(NULL));
  assert_string_equal(tdl_tls_error(NULL), "");
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  tdl_tls_config_free(scfg);
}

/* ---- the record path after the handshake ---- */

/* A client of plain OpenSSL over memory BIOs, run by hand in a fiber: the
 * test decides which bytes go out in which write (tdl_tls cannot). */
typedef struct memclient {
  SSL_CTX *ctx;
  SSL *ssl;
  BIO *in, *out;
  int fd;
} memclient;

static void mc_init(memclient *m, int fd)
{
  m->ctx = SSL_CTX_new(TLS_client_method());
  assert_non_null(m->ctx);
  SSL_CTX_set_verify(m->ctx, SSL_VERIFY_NONE, NULL);
  m->ssl = SSL_new(m->ctx);
  m->in = BIO_new(BIO_s_mem());
  m->out = BIO_new(BIO_s_mem());
  assert_true(m->ssl && m->in && m->out);
  SSL_set_bio(m->ssl, m->in, m->out);
  SSL_set_connect_state(m->ssl);
  m->fd = fd;
}

static void mc_free(memclient *m)
{
  SSL_free(m->ssl);
  SSL_CTX_free(m->ctx);
}

/* Send, in one write, everything the client has made so far. */
static void mc_flush(memclient *m)
{
  char buf[16384];
  int n = BIO_read(m->out, buf, sizeof buf);
  if (n > 0)
    assert_int_equal(tdl_net_send_all(m->fd, buf, (size_t)n, NULL, tdl_after(T_HANG)), 0);
}

static void mc_feed(memclient *m)
{
  char buf[16384];
  ssize_t got = tdl_read(m->fd, buf, sizeof buf, tdl_after(T_HANG));
  assert_true(got > 0);
  assert_int_equal(BIO_write(m->in, buf, (int)got), (int)got);
}

/* The handshake up to the client's Finished, which is left unsent. */
static void mc_handshake(memclient *m)
{
  for (;;) {
    int r = SSL_do_handshake(m->ssl);
    if (r == 1)
      return;
    assert_int_equal(SSL_get_error(m->ssl, r), SSL_ERROR_WANT_READ);
    mc_flush(m);
    mc_feed(m);
  }
}

typedef struct together {
  tdl_tls_config *cfg;
  int sfd, cfd;
  ssize_t got;
  bool fiber_io;
  int tickets; /* the client got, before the reply */
  char req[32], reply[32];
  int server_done, client_done;
} together;

static void *together_server(void *arg)
{
  together *t = arg;
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, t->cfg, t->sfd, NULL), 0);
  assert_int_equal(tdl_tls_handshake(s, tdl_after(T_HANG)), 0);
  t->fiber_io = tdl_tls_fiber_io(s);
  t->got = tdl_tls_read(s, t->req, sizeof t->req, tdl_after(T_HANG));
  assert_int_equal(tdl_tls_write(s, "ok", 2, tdl_after(T_HANG)), 2);
  assert_int_equal(tdl_tls_free(s), 0);
  t->server_done = 1;
  return NULL;
}

static int ticket_idx = -1;

static int count_ticket(SSL *ssl, SSL_SESSION *sess)
{
  (void)sess;
  together *t = SSL_get_ex_data(ssl, ticket_idx);
  t->tickets++;
  return 0; /* not kept: OpenSSL frees it */
}

static void *together_client(void *arg)
{
  together *t = arg;
  memclient m;
  mc_init(&m, t->cfd);
  if (ticket_idx < 0)
    ticket_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
  SSL_set_ex_data(m.ssl, ticket_idx, t);
  SSL_CTX_set_session_cache_mode(m.ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(m.ctx, count_ticket);
  mc_handshake(&m);
  /* The request joins the Finished in the client's buffer: one write. */
  assert_int_equal(SSL_write(m.ssl, "GET /", 5), 5);
  mc_flush(&m);
  int n;
  while ((n = SSL_read(m.ssl, t->reply, sizeof t->reply - 1)) <= 0) {
    assert_int_equal(SSL_get_error(m.ssl, n), SSL_ERROR_WANT_READ);
    mc_feed(&m);
  }
  t->reply[n] = '\0';
  mc_free(&m);
  t->client_done = 1;
  return NULL;
}

/* The request in the segment of the client's Finished: the server's swap of
 * BIOs at the end of its handshake loses none of it. */
static void request_with_finished(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  together t = {.cfg = server_cfg("server.pem"), .sfd = sv[0], .cfd = sv[1]};
  go(together_server, &t);
  go(together_client, &t);
  assert_true(t_run_until(L, &t.server_done, 100000));
  assert_true(t_run_until(L, &t.client_done, 100000));
  assert_int_equal(t.fiber_io, !socket_bio());
  assert_int_equal(t.got, 5);
  assert_memory_equal(t.req, "GET /", 5);
  assert_string_equal(t.reply, "ok");
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  tdl_tls_config_free(t.cfg);
}

/* A server that resumes nothing issues no tickets (TLS 1.3 would send two
 * stateful ones by default): a server that resumes does. */
static void no_resumption_no_tickets(void **state)
{
  (void)state;
  char err[256];
  for (int resume = 0; resume < 2; resume++) {
    tdl_tls_options o = {.role = TDL_TLS_SERVER, .cert_file = P("server.pem"), .key_file = P("server.key"),
                         .no_resumption = !resume, .error = err, .error_cap = sizeof err};
    int sv[2];
    spair(sv);
    together t = {.sfd = sv[0], .cfd = sv[1]};
    assert_int_equal(tdl_tls_config_new(&t.cfg, &o), 0);
    go(together_server, &t);
    go(together_client, &t);
    assert_true(t_run_until(L, &t.server_done, 100000));
    assert_true(t_run_until(L, &t.client_done, 100000));
    assert_string_equal(t.reply, "ok");
    if (resume)
      assert_true(t.tickets > 0);
    else
      assert_int_equal(t.tickets, 0);
    tdl_close(sv[0]);
    tdl_close(sv[1]);
    tdl_tls_config_free(t.cfg);
  }
}

typedef struct halfrec {
  tdl_tls_config *cfg;
  int sfd, cfd;
  tdl_tls *s;
  char rec[64];
  size_t rec_len;
  ssize_t idle, mid, cancelled, last;
  char buf[32];
  int client_done, stage, reading, cancel_done, last_done;
} halfrec;

/* The client: handshake, then one record ("ping") kept for the test to
 * send in two halves. */
static void *halfrec_client(void *arg)
{
  halfrec *h = arg;
  memclient m;
  mc_init(&m, h->cfd);
  mc_handshake(&m);
  mc_flush(&m);
  assert_int_equal(SSL_write(m.ssl, "ping", 4), 4);
  int n = BIO_read(m.out, h->rec, sizeof h->rec);
  assert_true(n > 4);
  h->rec_len = (size_t)n;
  mc_free(&m);
  h->client_done = 1;
  return NULL;
}

static void *halfrec_server(void *arg)
{
  halfrec *h = arg;
  assert_int_equal(tdl_tls_new(&h->s, h->cfg, h->sfd, NULL), 0);
  assert_int_equal(tdl_tls_handshake(h->s, tdl_after(T_HANG)), 0);
  /* Nothing sent: the deadline passes while the read waits for the fd. */
  h->idle = tdl_tls_read(h->s, h->buf, sizeof h->buf, tdl_after(20 * TDL_MSEC));
  h->stage = 1;
  while (h->stage != 2)
    tdl_sleep(tdl_after(TDL_MSEC));
  /* Half a record came: the deadline passes inside the record. */
  h->mid = tdl_tls_read(h->s, h->buf, sizeof h->buf, tdl_after(20 * TDL_MSEC));
  h->stage = 3;
  return NULL;
}

static void *halfrec_cancelled(void *arg)
{
  halfrec *h = arg;
  h->reading = 1;
  h->cancelled = tdl_tls_read(h->s, h->buf, sizeof h->buf, TDL_FOREVER);
  h->cancel_done = 1;
  return NULL;
}

static void *halfrec_last(void *arg)
{
  halfrec *h = arg;
  h->last = tdl_tls_read(h->s, h->buf, sizeof h->buf, tdl_after(T_HANG));
  h->last_done = 1;
  return NULL;
}

/* A read cut by its deadline or a cancel, before a record or inside one,
 * loses nothing: a later read returns the record whole. */
static void read_cut_and_resumed(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  halfrec h = {.cfg = server_cfg("server.pem"), .sfd = sv[0], .cfd = sv[1]};
  go(halfrec_server, &h);
  go(halfrec_client, &h);
  assert_true(t_run_until(L, &h.client_done, 100000));
  h.stage = 0;
  while (h.stage != 1 && tdl_loop_run(L, TDL_LOOP_ONCE) >= 0)
    ;
  assert_int_equal(h.idle, -ETIMEDOUT);
  assert_non_null(strstr(tdl_tls_error(h.s), "timed out"));
  size_t half = h.rec_len / 2;
  assert_int_equal(write(sv[1], h.rec, half), (ssize_t)half);
  h.stage = 2;
  while (h.stage != 3 && tdl_loop_run(L, TDL_LOOP_ONCE) >= 0)
    ;
  assert_int_equal(h.mid, -ETIMEDOUT);
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, L, halfrec_cancelled, &h, NULL), 0);
  assert_true(t_run_until(L, &h.reading, 100000));
  for (int i = 0; i < 10; i++)
    tdl_loop_run(L, TDL_LOOP_NOWAIT);
  assert_int_equal(h.cancel_done, 0);
  assert_int_equal(tdl_tls_free(h.s), -EBUSY); /* a fiber is parked in it */
  assert_int_equal(tdl_fiber_cancel(L, f), 0);
  assert_int_equal(tdl_fiber_detach(L, f), 0);
  assert_true(t_run_until(L, &h.cancel_done, 100000));
  assert_int_equal(h.cancelled, -ECANCELED);
  /* The rest of the record: the next read has it whole. */
  assert_int_equal(write(sv[1], h.rec + half, h.rec_len - half), (ssize_t)(h.rec_len - half));
  go(halfrec_last, &h);
  assert_true(t_run_until(L, &h.last_done, 100000));
  assert_int_equal(h.last, 4);
  assert_memory_equal(h.buf, "ping", 4);
  assert_int_equal(tdl_tls_free(h.s), 0);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  tdl_tls_config_free(h.cfg);
}

/* ---- receiving ahead and sending behind (uring loops) ---- */

enum { BULK = 1 << 20, SMALL = 3000 };

typedef struct bulk {
  tdl_tls_config *scfg, *ccfg;
  int sfd, cfd;
  tdl_tls *c;
  size_t expect, got;
  bool mismatch;
  int ahead; /* what tdl_fd_readahead said on the client */
  int server_done, writer_done, reader_done, client_ready;
  char sbuf[16384], rbuf[16384], wbuf[65536];
} bulk;

static unsigned char pattern(size_t k)
{
  return (unsigned char)(k * 7 + 3 + (k >> 12));
}

/* Receive ahead and send behind where the records go through fiber I/O. */
static int turn_on(tdl_tls *s)
{
  if (!tdl_tls_fiber_io(s))
    return -ENOTSUP;
  int rc = tdl_fd_readahead(tdl_tls_fd(s), true);
  if (rc == 0)
    rc = tdl_fd_writebehind(tdl_tls_fd(s), true);
  return rc;
}

static void *bulk_server(void *arg)
{
  bulk *b = arg;
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, b->scfg, b->sfd, NULL), 0);
  assert_int_equal(tdl_tls_handshake(s, tdl_after(T_HANG)), 0);
  int on = turn_on(s);
  assert_true(on == 0 || (on == -ENOTSUP && socket_bio()));
  ssize_t n;
  while ((n = tdl_tls_read(s, b->sbuf, sizeof b->sbuf, tdl_after(30 * TDL_SEC))) > 0)
    assert_int_equal(tdl_tls_send_all(s, b->sbuf, (size_t)n, NULL, tdl_after(30 * TDL_SEC)), 0);
  assert_int_equal(n, 0);
  assert_int_equal(tdl_tls_shutdown(s, tdl_after(T_HANG)), 0);
  assert_int_equal(tdl_tls_free(s), 0);
  b->server_done = 1;
  return NULL;
}

static void *bulk_writer(void *arg)
{
  bulk *b = arg;
  size_t k = 0;
  while (k < BULK) {
    size_t n = sizeof b->wbuf < BULK - k ? sizeof b->wbuf : BULK - k;
    for (size_t i = 0; i < n; i++)
      b->wbuf[i] = (char)pattern(k + i);
    assert_int_equal(tdl_tls_send_all(b->c, b->wbuf, n, NULL, tdl_after(30 * TDL_SEC)), 0);
    k += n;
  }
  /* Then many small records, one write each. */
  for (size_t i = 0; i < SMALL; i++) {
    size_t n = i % 61 + 1;
    for (size_t j = 0; j < n; j++)
      b->wbuf[j] = (char)pattern(k + j);
    assert_int_equal(tdl_tls_write(b->c, b->wbuf, n, tdl_after(30 * TDL_SEC)), (ssize_t)n);
    k += n;
  }
  assert_int_equal(tdl_tls_shutdown(b->c, tdl_after(T_HANG)), 0);
  b->writer_done = 1;
  return NULL;
}

static void *bulk_client(void *arg)
{
  bulk *b = arg;
  assert_int_equal(tdl_tls_new(&b->c, b->ccfg, b->cfd, "localhost"), 0);
  assert_int_equal(tdl_tls_handshake(b->c, tdl_after(T_HANG)), 0);
  b->ahead = turn_on(b->c);
  b->client_ready = 1;
  ssize_t n;
  while ((n = tdl_tls_read(b->c, b->rbuf, sizeof b->rbuf, tdl_after(30 * TDL_SEC))) > 0) {
    for (ssize_t i = 0; i < n; i++)
      if ((unsigned char)b->rbuf[i] != pattern(b->got + (size_t)i))
        b->mismatch = true;
    b->got += (size_t)n;
  }
  assert_int_equal(n, 0);
  b->reader_done = 1;
  return NULL;
}

/* 1 MiB each way, then thousands of small records, echoed, with a reading
 * and a writing fiber on the client. */
static void readahead_writebehind_echo(void **state)
{
  (void)state;
  T_RING_LOOP(ring);
  int sv[2];
  spair(sv);
  static bulk b;
  memset(&b, 0, sizeof b);
  b.scfg = server_cfg("server.pem");
  b.ccfg = client_cfg(false);
  b.sfd = sv[0];
  b.cfd = sv[1];
  b.expect = BULK;
  for (size_t i = 0; i < SMALL; i++)
    b.expect += i % 61 + 1;
  t_spawn(ring, bulk_server, &b);
  t_spawn(ring, bulk_client, &b);
  assert_true(t_run_until(ring, &b.client_ready, 100000));
  assert_true(b.ahead == 0 || (b.ahead == -ENOTSUP && socket_bio()));
  t_spawn(ring, bulk_writer, &b);
  assert_true(t_run_until(ring, &b.writer_done, 10000000));
  assert_true(t_run_until(ring, &b.reader_done, 10000000));
  assert_true(t_run_until(ring, &b.server_done, 10000000));
  assert_int_equal(b.got, b.expect);
  assert_false(b.mismatch);
  assert_int_equal(tdl_tls_free(b.c), 0);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  tdl_tls_config_free(b.scfg);
  tdl_tls_config_free(b.ccfg);
  assert_int_equal(tdl_loop_free(ring), 0);
}

/* ---- fiber I/O under OpenSSL ---- */

/* The fiber BIO's tdl_send and tdl_recv must never switch fibers inside
 * OpenSSL, not even for fiber.h's fairness yield: a fiber that ran
 * meanwhile would take the thread's fiber BIO for its own stream, and the
 * rest of the record OpenSSL was sending would go down the other stream's
 * socket.  Set up so that the yield falls there: the writer has made 63
 * I/O calls in a row (fiber.h: the 64th yields), its socket takes less
 * than a record, and another stream's reader is ready to run. */
typedef struct midrecord {
  tdl_tls *s1, *c1, *s2, *c2;
  int pipe_w;
  char rec[16384];
  char got[16384];
  size_t n1;
  ssize_t w, r2;
  int wrote, read1, read2;
} midrecord;

static void *midrecord_other(void *arg)
{
  midrecord *m = arg;
  char buf[64];
  m->r2 = tdl_tls_read(m->s2, buf, sizeof buf, tdl_after(T_HANG)); /* parks: nothing comes */
  m->read2 = 1;
  return NULL;
}

static void *midrecord_end(void *arg)
{
  midrecord *m = arg;
  assert_int_equal(tdl_tls_shutdown(m->c2, tdl_after(T_HANG)), 0);
  return NULL;
}

static void *midrecord_reader(void *arg)
{
  midrecord *m = arg;
  while (m->n1 < sizeof m->rec) {
    ssize_t n = tdl_tls_read(m->c1, m->got + m->n1, sizeof m->got - m->n1, tdl_after(T_HANG));
    if (n <= 0)
      break;
    m->n1 += (size_t)n;
  }
  m->read1 = 1;
  return NULL;
}

static void *midrecord_writer(void *arg)
{
  midrecord *m = arg;
  assert_int_equal(tdl_fiber_spawn(NULL, L, midrecord_other, m, &(tdl_fiber_options){.detached = true}), 0);
  for (int i = 0; i < 63; i++)
    assert_int_equal(tdl_write(m->pipe_w, "x", 1, TDL_FOREVER), 1);
  m->w = tdl_tls_send_all(m->s1, m->rec, sizeof m->rec, NULL, tdl_after(T_HANG));
  m->wrote = 1;
  return NULL;
}

typedef struct hs_one {
  tdl_tls **s;
  tdl_tls_config *cfg;
  int fd;
  const char *name;
  int done;
} hs_one;

static void *hs_run(void *arg)
{
  hs_one *h = arg;
  assert_int_equal(tdl_tls_new(h->s, h->cfg, h->fd, h->name), 0);
  assert_int_equal(tdl_tls_handshake(*h->s, tdl_after(T_HANG)), 0);
  h->done = 1;
  return NULL;
}

static void no_switch_inside_a_record(void **state)
{
  (void)state;
  if (socket_bio())
    T_SKIP("records on OpenSSL's socket BIO (TREADLE_TLS_BIO=socket): no fiber BIO to test");
  static midrecord m;
  memset(&m, 0, sizeof m);
  tdl_tls_config *scfg = server_cfg("server.pem"), *ccfg = client_cfg(false);
  int sv1[2], sv2[2], pp[2];
  spair(sv1);
  spair(sv2);
  assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
  m.pipe_w = pp[1];
  static hs_one h[4];
  h[0] = (hs_one){.s = &m.s1, .cfg = scfg, .fd = sv1[0]};
  h[1] = (hs_one){.s = &m.c1, .cfg = ccfg, .fd = sv1[1], .name = "localhost"};
  h[2] = (hs_one){.s = &m.s2, .cfg = scfg, .fd = sv2[0]};
  h[3] = (hs_one){.s = &m.c2, .cfg = ccfg, .fd = sv2[1], .name = "localhost"};
  for (int i = 0; i < 4; i++)
    t_spawn(L, hs_run, &h[i]);
  for (int i = 0; i < 4; i++)
    assert_true(t_run_until(L, &h[i].done, 100000));
  assert_true(tdl_tls_fiber_io(m.s1));
  /* Room for less than a record: the first send of it is short. */
  int size = 4096;
  assert_int_equal(setsockopt(sv1[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof size), 0);
  for (size_t i = 0; i < sizeof m.rec; i++)
    m.rec[i] = (char)pattern(i);
  int before = -1; /* the other stream's client has its session tickets waiting */
  assert_int_equal(ioctl(sv2[1], FIONREAD, &before), 0);
  t_spawn(L, midrecord_writer, &m);
  t_spawn(L, midrecord_reader, &m);
  assert_true(t_run_until(L, &m.wrote, 100000));
  assert_int_equal(m.w, 0);
  assert_true(t_run_until(L, &m.read1, 100000));
  assert_int_equal(m.n1, sizeof m.rec);
  assert_memory_equal(m.got, m.rec, sizeof m.rec);
  /* Nothing of it went to the other stream. */
  int queued = -1;
  assert_int_equal(ioctl(sv2[1], FIONREAD, &queued), 0);
  assert_int_equal(queued, before);
  assert_false(m.read2);
  t_spawn(L, midrecord_end, &m); /* the other reader hears its end */
  assert_true(t_run_until(L, &m.read2, 100000));
  assert_int_equal(m.r2, 0);
  tdl_tls *all[] = {m.s1, m.c1, m.s2, m.c2};
  for (int i = 0; i < 4; i++)
    assert_int_equal(tdl_tls_free(all[i]), 0);
  int fds[] = {sv1[0], sv1[1], sv2[0], sv2[1], pp[0], pp[1]};
  for (int i = 0; i < 6; i++)
    tdl_close(fds[i]);
  tdl_tls_config_free(scfg);
  tdl_tls_config_free(ccfg);
}

/* A burst far larger than OpenSSL reads at once, all in the socket before
 * the server reads, and then nothing more from the peer: the server reads
 * it in small reads, each after a tdl_tls_wait.  On an edge-triggered loop
 * the burst is reported once; a wait that ends uses that up, so neither a
 * second wait with no read between nor a read after one that left bytes in
 * the socket may wait for the loop again: they would wait for ever.  (The
 * server first sends more than its socket holds: its fd then waits to
 * write, and the epoll back end reports it by edges from there on.) */
enum { BURST = 192 * 1024, FIRST = 64 * 1024 };

typedef struct burst {
  int sfd, cfd;
  tdl_tls_config *scfg, *ccfg;
  tdl_tls *c;
  int sent, server_ready, done;
  size_t got;
  bool mismatch;
  ssize_t last;
} burst;

static void *burst_client(void *arg)
{
  burst *b = arg;
  static unsigned char buf[BURST];
  assert_int_equal(tdl_tls_new(&b->c, b->ccfg, b->cfd, "localhost"), 0);
  assert_int_equal(tdl_tls_handshake(b->c, tdl_after(T_HANG)), 0);
  size_t first = 0;
  while (first < FIRST) {
    ssize_t n = tdl_tls_read(b->c, buf, FIRST - first, tdl_after(T_HANG));
    assert_true(n > 0);
    first += (size_t)n;
  }
  for (size_t i = 0; i < BURST; i++)
    buf[i] = pattern(i);
  assert_int_equal(tdl_tls_send_all(b->c, buf, BURST, NULL, tdl_after(T_HANG)), 0);
  b->sent = 1;
  return NULL;
}

static void *burst_server(void *arg)
{
  burst *b = arg;
  char buf[1000];
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, b->scfg, b->sfd, NULL), 0);
  assert_int_equal(tdl_tls_handshake(s, tdl_after(T_HANG)), 0);
  static char first[FIRST];
  assert_int_equal(tdl_tls_send_all(s, first, sizeof first, NULL, tdl_after(T_HANG)), 0);
  b->server_ready = 1;
  /* Until the whole burst is in the socket. */
  while (!b->sent)
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  while (b->got < BURST) {
    int w = tdl_tls_wait(s, tdl_after(T_HANG));
    if (w < 0) {
      b->last = w;
      break;
    }
    if ((b->got / sizeof buf) % 3 == 0 && (w = tdl_tls_wait(s, tdl_after(T_HANG))) < 0) {
      b->last = w; /* a second wait, no read between */
      break;
    }
    ssize_t n = tdl_tls_read(s, buf, sizeof buf, tdl_after(T_HANG));
    b->last = n;
    if (n <= 0)
      break;
    for (ssize_t i = 0; i < n; i++)
      if ((unsigned char)buf[i] != pattern(b->got + (size_t)i))
        b->mismatch = true;
    b->got += (size_t)n;
  }
  assert_int_equal(tdl_tls_free(s), 0);
  b->done = 1;
  return NULL;
}

static void burst_read_after_waits(void **state)
{
  (void)state;
  static burst b;
  int sv[2];
  spair(sv);
  /* Room for the whole burst in the socket (a Unix socket's is the
   * sender's buffer). */
  int size = 4 * BURST, small = 4096;
  assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &size, sizeof size), 0);
  assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  b = (burst){.sfd = sv[0], .cfd = sv[1], .scfg = server_cfg("server.pem"), .ccfg = client_cfg(false)};
  t_spawn(L, burst_server, &b);
  t_spawn(L, burst_client, &b);
  assert_true(t_run_until(L, &b.done, 1000000));
  assert_int_equal(b.got, BURST);
  assert_true(b.last > 0); /* neither a wait nor a read failed (-ETIMEDOUT) */
  assert_false(b.mismatch);
  assert_int_equal(tdl_tls_free(b.c), 0);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  tdl_tls_config_free(b.scfg);
  tdl_tls_config_free(b.ccfg);
}

/* ---- memory of idle streams ---- */

/* OpenSSL's allocations, counted: how many of at least 16 KiB (a record
 * buffer) are live.  Set up in main, before OpenSSL allocates anything. */
static bool counting;
static long big_live;
enum { BIG = 16384, HDR = 16 };

static void *count_malloc(size_t n, const char *file, int line)
{
  (void)file, (void)line;
  unsigned char *p = malloc(n + HDR);
  if (!p)
    return NULL;
  memcpy(p, &n, sizeof n);
  if (n >= BIG)
    __atomic_add_fetch(&big_live, 1, __ATOMIC_RELAXED);
  return p + HDR;
}

static void count_free(void *ptr, const char *file, int line)
{
  (void)file, (void)line;
  if (!ptr)
    return;
  unsigned char *p = (unsigned char *)ptr - HDR;
  size_t n;
  memcpy(&n, p, sizeof n);
  if (n >= BIG)
    __atomic_sub_fetch(&big_live, 1, __ATOMIC_RELAXED);
  free(p);
}

static void *count_realloc(void *ptr, size_t n, const char *file, int line)
{
  if (!ptr)
    return count_malloc(n, file, line);
  void *q = count_malloc(n, file, line);
  if (!q)
    return NULL;
  size_t old;
  memcpy(&old, (unsigned char *)ptr - HDR, sizeof old);
  memcpy(q, ptr, old < n ? old : n);
  count_free(ptr, file, line);
  return q;
}

enum { IDLE_PAIRS = 100 };

typedef struct idler {
  tdl_tls_config *cfg;
  const char *name;
  int fd;
  bool use_wait; /* park in tdl_tls_wait, then read */
  tdl_tls *s;
  ssize_t got;
  int waited; /* what tdl_tls_wait returned: 0 (not the fd's ready events) */
  int reading, pushed, done;
  char buf[64];
} idler;

static void *run_idler(void *arg)
{
  idler *d = arg;
  assert_int_equal(tdl_tls_new(&d->s, d->cfg, d->fd, d->name), 0);
  assert_int_equal(tdl_tls_handshake(d->s, tdl_after(T_HANG)), 0);
  d->reading = 1;
  int w = d->use_wait ? tdl_tls_wait(d->s, TDL_FOREVER) : 0;
  d->waited = w;
  d->got = w < 0 ? w : tdl_tls_read(d->s, d->buf, sizeof d->buf, TDL_FOREVER);
  d->done = 1;
  return NULL;
}

static void *push(void *arg)
{
  idler *d = arg;
  assert_int_equal(tdl_tls_send_all(d->s, "pushed", 6, NULL, tdl_after(T_HANG)), 0);
  d->pushed = 1;
  return NULL;
}

/* Streams parked in tdl_tls_read or tdl_tls_wait, on either side, hold no
 * record buffer; nor after a write to a stream whose reader waits (a push),
 * and the pushed bytes are read. */
static void idle_streams_hold_no_buffer(void **state)
{
  (void)state;
  if (!counting) {
    T_SKIP("OpenSSL had allocated before main (a preloaded library): its allocations cannot be counted");
    return;
  }
  long before = __atomic_load_n(&big_live, __ATOMIC_RELAXED);
  tdl_tls_config *scfg = server_cfg("server.pem");
  tdl_tls_config *ccfg = client_cfg(false);
  static idler d[2 * IDLE_PAIRS];
  static tdl_fiber_t f[2 * IDLE_PAIRS];
  for (int i = 0; i < IDLE_PAIRS; i++) {
    int sv[2];
    spair(sv);
    d[2 * i] = (idler){.cfg = scfg, .fd = sv[0], .use_wait = i % 2};
    d[2 * i + 1] = (idler){.cfg = ccfg, .fd = sv[1], .name = "localhost", .use_wait = i % 3 == 0};
  }
  for (int i = 0; i < 2 * IDLE_PAIRS; i++)
    assert_int_equal(tdl_fiber_spawn(&f[i], L, run_idler, &d[i], NULL), 0);
  for (int i = 0; i < 2 * IDLE_PAIRS; i++)
    assert_true(t_run_until(L, &d[i].reading, 100000));
  for (int i = 0; i < 50; i++)
    tdl_loop_run(L, TDL_LOOP_NOWAIT);
  long live = __atomic_load_n(&big_live, __ATOMIC_RELAXED) - before;
  /* Each would hold one (17 KiB and more) if parked with its buffer. */
  assert_true(live < IDLE_PAIRS / 10);
  /* Half the servers push to their clients while their own readers idle. */
  for (int i = 0; i < IDLE_PAIRS; i += 2)
    assert_int_equal(tdl_fiber_spawn(NULL, L, push, &d[2 * i], &(tdl_fiber_options){.detached = true}), 0);
  for (int i = 0; i < IDLE_PAIRS; i += 2) {
    assert_true(t_run_until(L, &d[2 * i].pushed, 100000));
    assert_true(t_run_until(L, &d[2 * i + 1].done, 100000));
    assert_int_equal(d[2 * i + 1].got, 6);
    assert_int_equal(d[2 * i + 1].waited, 0); /* tdl_tls_wait returned 0 (or did not run) */
    assert_memory_equal(d[2 * i + 1].buf, "pushed", 6);
  }
  live = __atomic_load_n(&big_live, __ATOMIC_RELAXED) - before;
  assert_true(live < IDLE_PAIRS / 10);
  for (int i = 0; i < 2 * IDLE_PAIRS; i++) {
    bool pushed_to = i % 2 && (i / 2) % 2 == 0;
    assert_int_equal(d[i].done, pushed_to);
    if (!pushed_to)
      assert_int_equal(tdl_fiber_cancel(L, f[i]), 0);
    assert_int_equal(tdl_fiber_detach(L, f[i]), 0);
  }
  for (int i = 0; i < 2 * IDLE_PAIRS; i++) {
    assert_true(t_run_until(L, &d[i].done, 100000));
    bool pushed_to = i % 2 && (i / 2) % 2 == 0;
    assert_int_equal(d[i].got, pushed_to ? 6 : -ECANCELED);
    assert_int_equal(tdl_tls_free(d[i].s), 0);
    tdl_close(d[i].fd);
  }
  tdl_tls_config_free(scfg);
  tdl_tls_config_free(ccfg);
}

int main(void)
{
  /* Run with libtreadle-hook preloaded (ctest's test_tls_hooked): make sure
   * it is, so that the run cannot pass without it. */
  if (getenv("TDL_TEST_HOOKED")) {
    /* Through memcpy: ISO C has no cast from an object pointer to a
     * function pointer. */
    void *sym = dlsym(RTLD_DEFAULT, "tdl_hook_active");
    int (*active)(void) = NULL;
    if (sym)
      memcpy(&active, &sym, sizeof active);
    if (!active || active() != 1) {
      fprintf(stderr, "test_tls: TDL_TEST_HOOKED, but libtreadle-hook is not active\n");
      return 1;
    }
  }
  /* Before OpenSSL allocates anything (idle_streams_hold_no_buffer). */
  counting = CRYPTO_set_mem_functions(count_malloc, count_realloc, count_free) == 1;
  const struct CMUnitTest tests[] = {
    /* First: OpenSSL seeds its generator and takes its locks for the first
     * time inside these fibers (with the hook preloaded, the test that
     * these never park or deadlock there). */
    cmocka_unit_test_setup_teardown(handshake_and_echo, setup, teardown),
    cmocka_unit_test(config_errors),
    cmocka_unit_test_setup_teardown(ktls_or_fallback, setup, teardown),
    cmocka_unit_test_setup_teardown(bad_certificates, setup, teardown),
    cmocka_unit_test_setup_teardown(plaintext_to_server, setup, teardown),
    cmocka_unit_test_setup_teardown(silent_client_cut_at_deadline, setup, teardown),
    cmocka_unit_test_setup_teardown(hello_one_byte_at_a_time, setup, teardown),
    cmocka_unit_test_setup_teardown(garbage_after_handshake, setup, teardown),
    cmocka_unit_test_setup_teardown(truncated_record, setup, teardown),
    cmocka_unit_test_setup_teardown(close_without_close_notify, setup, teardown),
    cmocka_unit_test_setup_teardown(clean_end, setup, teardown),
    cmocka_unit_test_setup_teardown(pending_without_parking, setup, teardown),
    cmocka_unit_test_setup_teardown(cancel_mid_handshake, setup, teardown),
    cmocka_unit_test_setup_teardown(cancel_mid_read, setup, teardown),
    cmocka_unit_test_setup_teardown(reload_keeps_old_on_failure, setup, teardown),
    cmocka_unit_test_setup_teardown(reload_swaps, setup, teardown),
    cmocka_unit_test_setup_teardown(resumption, setup, teardown),
    cmocka_unit_test_setup_teardown(no_resumption_no_tickets, setup, teardown),
    cmocka_unit_test_setup_teardown(reader_writer_over_tls, setup, teardown),
    cmocka_unit_test_setup_teardown(second_fiber_in_handshake, setup, teardown),
    cmocka_unit_test_setup_teardown(misuse, setup, teardown),
    cmocka_unit_test_setup_teardown(request_with_finished, setup, teardown),
    cmocka_unit_test_setup_teardown(read_cut_and_resumed, setup, teardown),
    cmocka_unit_test(readahead_writebehind_echo),
    cmocka_unit_test_setup_teardown(no_switch_inside_a_record, setup, teardown),
    cmocka_unit_test_setup_teardown(burst_read_after_waits, setup, teardown),
    cmocka_unit_test_setup_teardown(idle_streams_hold_no_buffer, setup, teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
