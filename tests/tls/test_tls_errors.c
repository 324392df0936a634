/* SPDX-License-Identifier: MIT */
/*
 * TLS: what tls.h says of refusals and failures.  Servers that ask for a
 * client certificate (ca_file): a client with a good one is served, one
 * without or with one that does not verify is refused; configurations and
 * streams made from bad input; the dead stream after a failed handshake
 * (every call gives the same error); the peer's end during the handshake;
 * calls outside a fiber, and calls that move nothing.  Certificates from
 * tests/tls/make-certs.sh, made at run time.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

#include <treadle/tls.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
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

static char err[512]; /* the last configuration's words */

static tdl_tls_config *config(const tdl_tls_options *o)
{
  tdl_tls_options c = *o;
  c.error = err;
  c.error_cap = sizeof err;
  tdl_tls_config *cfg;
  int rc = tdl_tls_config_new(&cfg, &c);
  if (rc)
    fail_msg("config: %d %s", rc, err);
  return cfg;
}

/* A server of server.pem; with a CA file, it asks for a client certificate. */
static tdl_tls_config *server_cfg(const char *ca, const char *alpn)
{
  return config(&(tdl_tls_options){.role = TDL_TLS_SERVER, .cert_file = P("server.pem"),
                                   .key_file = P("server.key"), .ca_file = ca ? P(ca) : NULL, .alpn = alpn});
}

/* A client trusting the test CA, with a certificate of its own when cert is
 * given (server.key's: server.pem is for clients too). */
static tdl_tls_config *client_cfg(const char *cert)
{
  return config(&(tdl_tls_options){.ca_file = P("ca.pem"), .cert_file = cert ? P(cert) : NULL,
                                   .key_file = cert ? P("server.key") : NULL});
}

static void spair(int sv[2])
{
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
}

/* ---- one end of a connection, in a fiber ---- */

typedef struct end {
  tdl_tls_config *cfg;
  int fd;
  const char *name;
  bool server;
  int hs;        /* the handshake's result */
  ssize_t wr;    /* the client's write of "hello" */
  ssize_t rd;    /* the last read: the server's of the request, the client's of the reply */
  int sd;        /* the shutdown's */
  bool resumed;
  char alpn[32];
  char buf[64];
  char error[256];
  int after[5];  /* a server whose handshake failed: read, write, wait, shutdown, handshake */
  int done;
} end;

static void *run_end(void *arg)
{
  end *e = arg;
  tdl_tls *s;
  tdl_time_t dl = tdl_after(T_HANG);
  assert_int_equal(tdl_tls_new(&s, e->cfg, e->fd, e->name), 0);
  e->hs = tdl_tls_handshake(s, dl);
  e->resumed = tdl_tls_resumed(s);
  tdl_tls_alpn(s, e->alpn, sizeof e->alpn);
  if (e->server) {
    if (e->hs == 0) {
      e->rd = tdl_tls_read(s, e->buf, sizeof e->buf, dl);
      if (e->rd > 0)
        assert_int_equal(tdl_tls_send_all(s, e->buf, (size_t)e->rd, NULL, dl), 0);
      e->sd = tdl_tls_shutdown(s, dl);
    } else {
      /* Dead: every call gives the handshake's error. */
      snprintf(e->error, sizeof e->error, "%s", tdl_tls_error(s));
      e->after[0] = (int)tdl_tls_read(s, e->buf, sizeof e->buf, dl);
      e->after[1] = (int)tdl_tls_write(s, "x", 1, dl);
      e->after[2] = tdl_tls_wait(s, dl);
      e->after[3] = tdl_tls_shutdown(s, dl);
      e->after[4] = tdl_tls_handshake(s, dl);
    }
  } else if (e->hs == 0) {
    e->wr = tdl_tls_write(s, "hello", 5, dl);
    e->rd = tdl_tls_read(s, e->buf, sizeof e->buf, dl);
    if (e->rd > 0) {
      assert_int_equal(tdl_tls_read(s, e->buf + e->rd, sizeof e->buf - (size_t)e->rd, dl), 0);
      e->sd = tdl_tls_shutdown(s, dl);
    }
  }
  if (!e->error[0])
    snprintf(e->error, sizeof e->error, "%s", tdl_tls_error(s));
  assert_int_equal(tdl_tls_free(s), 0);
  assert_int_equal(tdl_close(e->fd), 0);
  e->done = 1;
  return NULL;
}

/* A client and a server over a socketpair, to their ends. */
static void run_pair(end *client, end *server)
{
  int sv[2];
  spair(sv);
  server->fd = sv[0];
  server->server = true;
  client->fd = sv[1];
  if (!client->name && client->cfg)
    client->name = "localhost";
  go(run_end, server);
  go(run_end, client);
  assert_true(t_run_until(L, &client->done, 100000));
  assert_true(t_run_until(L, &server->done, 100000));
}

/* ---- client certificates ---- */

static void client_certificate_accepted(void **state)
{
  (void)state;
  end server = {.cfg = server_cfg("ca.pem", NULL)};
  end client = {.cfg = client_cfg("server.pem")};
  run_pair(&client, &server);
  assert_int_equal(server.hs, 0);
  assert_int_equal(client.hs, 0);
  assert_int_equal(server.rd, 5);
  assert_int_equal(client.rd, 5);
  assert_memory_equal(client.buf, "hello", 5);
  assert_int_equal(server.sd, 0);
  assert_string_equal(server.error, "");
  tdl_tls_config_free(server.cfg);
  tdl_tls_config_free(client.cfg);
}

/* A client refused by a server that asks for a certificate.  The server's
 * handshake fails with `want`, said in words with `why`, and its stream is
 * dead; the client (TLS 1.3: its handshake ends before the server has
 * checked its certificate) hears of it as the server's alert, -EPROTO, when
 * it reads. */
static void refused(const char *cert, int want, const char *why)
{
  end server = {.cfg = server_cfg("ca.pem", NULL)};
  end client = {.cfg = client_cfg(cert)};
  run_pair(&client, &server);
  if (server.hs != want || !strstr(server.error, why))
    fail_msg("server: %d '%s', want %d '%s'", server.hs, server.error, want, why);
  for (int i = 0; i < 5; i++)
    assert_int_equal(server.after[i], want);
  assert_int_equal(client.hs, 0);
  assert_true(client.wr == 5 || client.wr == -EPIPE || client.wr == -ECONNRESET);
  if (client.wr == 5) {
    assert_int_equal(client.rd, -EPROTO);
    if (!strstr(client.error, "alert received"))
      fail_msg("client: '%s'", client.error);
  }
  tdl_tls_config_free(server.cfg);
  tdl_tls_config_free(client.cfg);
}

static void client_without_certificate_refused(void **state)
{
  (void)state;
  refused(NULL, -EKEYREJECTED, "certificate verify failed: peer did not return a certificate");
}

static void client_self_signed_refused(void **state)
{
  (void)state;
  refused("selfsigned.pem", -EKEYREJECTED, "self-signed");
}

static void client_expired_refused(void **state)
{
  (void)state;
  refused("expired.pem", -EKEYREJECTED, "expired");
}

/* ---- configurations from bad input ---- */

/* PEM text of a fresh Ed25519 key: a key of another kind than server.pem's
 * (P-256), which OpenSSL files apart from that certificate. */
static char *ed25519_pem(void)
{
  EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  assert_non_null(k);
  BIO *b = BIO_new(BIO_s_mem());
  assert_non_null(b);
  assert_int_equal(PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL), 1);
  char *data;
  long n = BIO_get_mem_data(b, &data);
  char *pem = calloc(1, (size_t)n + 1);
  assert_non_null(pem);
  memcpy(pem, data, (size_t)n);
  BIO_free(b);
  EVP_PKEY_free(k);
  return pem;
}

/* tdl_tls_config_new refuses o with rc, the words saying why; *out is NULL. */
static void refuse_config(tdl_tls_options o, int rc, const char *why)
{
  o.error = err;
  o.error_cap = sizeof err;
  tdl_tls_config *cfg = (tdl_tls_config *)&o;
  int got = tdl_tls_config_new(&cfg, &o);
  if (got != rc || !strstr(err, why))
    fail_msg("%d '%s', want %d '%s'", got, err, rc, why);
  assert_null(cfg);
}

static void config_bad_input(void **state)
{
  (void)state;
  refuse_config((tdl_tls_options){.role = (tdl_tls_role)7}, -EINVAL, "unknown role 7");
  char long_alpn[300];
  memset(long_alpn, 'a', sizeof long_alpn - 1);
  long_alpn[sizeof long_alpn - 1] = '\0';
  refuse_config((tdl_tls_options){.alpn = long_alpn}, -EINVAL, "longer than 255");
  refuse_config((tdl_tls_options){.alpn = "h2,"}, -EINVAL, "ALPN list \"h2,\"");
  refuse_config((tdl_tls_options){.alpn = ""}, -EINVAL, "ALPN list");
  /* Certificate text that is not PEM. */
  refuse_config((tdl_tls_options){.role = TDL_TLS_SERVER, .cert_pem = "not PEM", .key_file = P("server.key")},
                -EINVAL, "certificate text");
  /* A certificate file that is not there (named). */
  refuse_config((tdl_tls_options){.role = TDL_TLS_SERVER, .cert_file = P("none.pem"), .key_file = P("server.key")},
                -ENOENT, "none.pem");
  /* A key without a certificate, and one that is not a key. */
  refuse_config((tdl_tls_options){.key_file = P("server.key")}, -EINVAL, "a certificate needs its key");
  refuse_config((tdl_tls_options){.key_file = P("broken.pem")}, -EINVAL, "not a PEM private key");
  refuse_config((tdl_tls_options){.cert_file = P("server.pem")}, -EINVAL, "a certificate needs its key");
  /* A key of another kind than the certificate's: it does not match. */
  char *ed = ed25519_pem();
  refuse_config((tdl_tls_options){.role = TDL_TLS_SERVER, .cert_file = P("server.pem"), .key_pem = ed}, -EINVAL,
                "does not match certificate");
  char certpem[8192] = {0};
  FILE *f = fopen(P("server.pem"), "r");
  assert_non_null(f);
  assert_true(fread(certpem, 1, sizeof certpem - 1, f) > 0);
  fclose(f);
  refuse_config((tdl_tls_options){.role = TDL_TLS_SERVER, .cert_pem = certpem, .key_pem = ed}, -EINVAL,
                "key (text) does not match certificate (text)");
  free(ed);
  /* A CA file without certificates, for a client and for a server. */
  refuse_config((tdl_tls_options){.ca_file = P("broken.pem")}, -EINVAL, "no PEM certificates");
  refuse_config((tdl_tls_options){.role = TDL_TLS_SERVER, .cert_file = P("server.pem"), .key_file = P("server.key"),
                                  .ca_file = P("broken.pem")},
                -EINVAL, "broken.pem");
  /* Without words asked for, the same errors. */
  tdl_tls_config *cfg;
  assert_int_equal(tdl_tls_config_new(&cfg, &(tdl_tls_options){.key_file = P("broken.pem")}), -EINVAL);
  assert_null(cfg);
  /* A reload refused keeps the configuration; opts NULL is a verifying
   * client, which a server's configuration cannot become. */
  tdl_tls_config *s = server_cfg(NULL, NULL);
  assert_int_equal(tdl_tls_config_reload(s, NULL), -EINVAL);
  tdl_tls_config_free(s);
  /* opts NULL: a verifying client of the system's store, which must name
   * its server. */
  assert_int_equal(tdl_tls_config_new(&cfg, NULL), 0);
  assert_int_equal(tdl_tls_config_reload(cfg, NULL), 0);
  tdl_tls *t = (tdl_tls *)cfg;
  assert_int_equal(tdl_tls_new(&t, cfg, 0, NULL), -EINVAL);
  assert_null(t);
  tdl_tls_config_free(cfg);
}

static void stream_bad_input(void **state)
{
  (void)state;
  tdl_tls_config *c = client_cfg(NULL);
  tdl_tls *s = (tdl_tls *)c;
  assert_int_equal(tdl_tls_new(NULL, c, 0, "localhost"), -EINVAL);
  /* An fd that is not open. */
  int sv[2];
  spair(sv);
  int gone = dup(sv[0]);
  assert_true(gone >= 0);
  close(gone);
  assert_int_equal(tdl_tls_new(&s, c, gone, "localhost"), -EBADF);
  assert_null(s);
  /* A server name longer than DNS allows (255 bytes). */
  char name[300];
  memset(name, 'a', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  assert_int_equal(tdl_tls_new(&s, c, sv[1], name), -EINVAL);
  assert_null(s);
  /* A blocking fd is made non-blocking. */
  int fl = fcntl(sv[1], F_GETFL);
  assert_int_equal(fcntl(sv[1], F_SETFL, fl & ~O_NONBLOCK), 0);
  assert_int_equal(tdl_tls_new(&s, c, sv[1], "localhost"), 0);
  assert_true(fcntl(sv[1], F_GETFL) & O_NONBLOCK);
  /* Outside a fiber a call that would wait is refused (-EPERM) and changes
   * nothing: the stream is not dead for it. */
  assert_int_equal(tdl_tls_wait(s, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_tls_write(s, "x", 1, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_tls_wait(NULL, TDL_FOREVER), -EINVAL);
  tdl_reader r;
  tdl_writer w;
  assert_int_equal(tdl_tls_reader_init(&r, NULL, NULL, 16, 64), -EINVAL);
  assert_int_equal(tdl_tls_writer_init(&w, NULL, NULL, 16, 64), -EINVAL);
  assert_false(tdl_tls_resumed(NULL));
  assert_int_equal(tdl_tls_version(NULL), 0);
  assert_int_equal(tdl_tls_ktls(NULL), 0);
  assert_int_equal(tdl_tls_alpn(NULL, NULL, 0), 0);
  assert_int_equal(tdl_tls_free(s), 0);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  tdl_tls_config_free(c);
}

/* ---- the handshake's end ---- */

/* A client of plain OpenSSL over memory BIOs, TLS 1.2, run by hand in a
 * fiber: it sends its hello and reads the server's flight, then, where its
 * key exchange would go, a close_notify alert (plaintext before the change
 * of keys). */
typedef struct quitter {
  int fd;
  int done;
} quitter;

static void *run_quitter(void *arg)
{
  quitter *q = arg;
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  assert_non_null(ctx);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
  assert_int_equal(SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION), 1);
  SSL *ssl = SSL_new(ctx);
  BIO *in = BIO_new(BIO_s_mem()), *out = BIO_new(BIO_s_mem());
  assert_true(ssl && in && out);
  SSL_set_bio(ssl, in, out);
  SSL_set_connect_state(ssl);
  char buf[16384];
  assert_true(SSL_do_handshake(ssl) <= 0); /* the hello, in out */
  int n = BIO_read(out, buf, sizeof buf);
  assert_true(n > 0);
  assert_int_equal(tdl_net_send_all(q->fd, buf, (size_t)n, NULL, tdl_after(T_HANG)), 0);
  /* The server's flight ends with ServerHelloDone (type 14, length 0). */
  size_t got = 0;
  while (got < 4 || memcmp(buf + got - 4, "\x0e\x00\x00\x00", 4) != 0) {
    ssize_t r = tdl_read(q->fd, buf + got, sizeof buf - got, tdl_after(T_HANG));
    assert_true(r > 0);
    got += (size_t)r;
  }
  static const char alert[] = "\x15\x03\x03\x00\x02\x01\x00"; /* warning, close_notify */
  assert_int_equal(tdl_net_send_all(q->fd, alert, sizeof alert - 1, NULL, tdl_after(T_HANG)), 0);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  q->done = 1;
  return NULL;
}

/* A peer that ends with close_notify before the handshake is done: -EPIPE,
 * said so, and the stream is dead. */
static void close_notify_during_handshake(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  end server = {.cfg = server_cfg(NULL, NULL), .fd = sv[0], .server = true};
  quitter q = {.fd = sv[1]};
  go(run_quitter, &q);
  go(run_end, &server);
  assert_true(t_run_until(L, &server.done, 100000));
  assert_true(t_run_until(L, &q.done, 100000));
  if (server.hs != -EPIPE)
    fail_msg("%d '%s'", server.hs, server.error);
  if (!strstr(server.error, "peer closed during the handshake"))
    fail_msg("'%s'", server.error);
  for (int i = 0; i < 5; i++)
    assert_int_equal(server.after[i], -EPIPE);
  tdl_close(sv[1]);
  tdl_tls_config_free(server.cfg);
}

/* ---- sessions and ALPN ---- */

/* A client that does not verify and names no server keeps no session (a
 * session is kept by server name), nor does one told not to resume: the
 * second handshake is a full one again. */
static void sessions_not_kept(void **state)
{
  (void)state;
  tdl_tls_config *scfg = server_cfg(NULL, NULL);
  tdl_tls_config *anon = config(&(tdl_tls_options){.insecure = true});
  tdl_tls_config *nores = config(&(tdl_tls_options){.ca_file = P("ca.pem"), .no_resumption = true});
  tdl_tls_config *cfgs[] = {anon, nores};
  const char *names[] = {NULL, "localhost"};
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 2; i++) {
      end server = {.cfg = scfg};
      end client = {.cfg = cfgs[c], .name = names[c]};
      int sv[2];
      spair(sv);
      server.fd = sv[0];
      server.server = true;
      client.fd = sv[1];
      go(run_end, &server);
      go(run_end, &client);
      assert_true(t_run_until(L, &client.done, 100000));
      assert_true(t_run_until(L, &server.done, 100000));
      assert_int_equal(client.hs, 0);
      assert_int_equal(client.rd, 5);
      assert_false(client.resumed);
      assert_false(server.resumed);
    }
  tdl_tls_config_free(scfg);
  tdl_tls_config_free(anon);
  tdl_tls_config_free(nores);
}

/* A server goes on without ALPN when none of its names is offered; a name
 * is cut to the caller's buffer, its length returned whole. */
static void alpn_no_match_and_cut(void **state)
{
  (void)state;
  tdl_tls_config *h2 = server_cfg(NULL, "h2");
  tdl_tls_config *http = config(&(tdl_tls_options){.ca_file = P("ca.pem"), .alpn = "http/1.1"});
  end server = {.cfg = h2};
  end client = {.cfg = http};
  run_pair(&client, &server);
  assert_int_equal(client.hs, 0);
  assert_int_equal(client.rd, 5);
  assert_string_equal(client.alpn, "");
  assert_string_equal(server.alpn, "");
  tdl_tls_config_free(h2);
  tdl_tls_config_free(http);
}

/* ---- calls that move nothing, calls outside a fiber ---- */

typedef struct quiet {
  tdl_tls_config *scfg, *ccfg;
  int sfd, cfd;
  tdl_tls *s, *c;
  int stage, done;
  char alpn[4];
  int alpn_len;
} quiet;

static void *quiet_server(void *arg)
{
  quiet *q = arg;
  tdl_time_t dl = tdl_after(T_HANG);
  assert_int_equal(tdl_tls_new(&q->s, q->scfg, q->sfd, NULL), 0);
  assert_int_equal(tdl_tls_handshake(q->s, dl), 0);
  q->alpn_len = tdl_tls_alpn(q->s, q->alpn, sizeof q->alpn);
  /* Nothing to read, nothing to write: 0, and no wait. */
  assert_int_equal(tdl_tls_read(q->s, q->alpn, 0, tdl_now() - 1), 0);
  assert_int_equal(tdl_tls_write(q->s, "", 0, tdl_now() - 1), 0);
  struct iovec none[3] = {{NULL, 0}, {(void *)"", 0}, {NULL, 0}};
  assert_int_equal(tdl_tls_writev(q->s, none, 3, tdl_now() - 1), 0);
  /* Gathering stops before a buffer that would not fit with the others;
   * empty ones in between are skipped. */
  static char big[3000];
  memset(big, 'b', sizeof big);
  struct iovec iov[4] = {{(void *)"ab", 2}, {NULL, 0}, {(void *)"cd", 2}, {big, sizeof big}};
  assert_int_equal(tdl_tls_writev(q->s, iov, 4, dl), 4);
  /* Wait for the client's bytes: they are in the socket, not yet read. */
  assert_int_equal(tdl_tls_wait(q->s, dl), 0);
  q->stage = 1;
  return NULL;
}

static void *quiet_client(void *arg)
{
  quiet *q = arg;
  tdl_time_t dl = tdl_after(T_HANG);
  assert_int_equal(tdl_tls_new(&q->c, q->ccfg, q->cfd, "localhost"), 0);
  assert_int_equal(tdl_tls_handshake(q->c, dl), 0);
  char buf[8];
  assert_int_equal(tdl_tls_read(q->c, buf, sizeof buf, dl), 4);
  assert_memory_equal(buf, "abcd", 4);
  assert_int_equal(tdl_tls_write(q->c, "ping", 4, dl), 4);
  q->done = 1;
  return NULL;
}

static void *quiet_read(void *arg)
{
  quiet *q = arg;
  char buf[8];
  assert_int_equal(tdl_tls_read(q->s, buf, sizeof buf, tdl_after(T_HANG)), 4);
  assert_memory_equal(buf, "ping", 4);
  q->stage = 2;
  return NULL;
}

static void nothing_moved_and_outside_a_fiber(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  quiet q = {.scfg = server_cfg(NULL, "http/1.1"), .ccfg = config(&(tdl_tls_options){.ca_file = P("ca.pem"),
                                                                                    .alpn = "http/1.1"}),
             .sfd = sv[0], .cfd = sv[1]};
  go(quiet_server, &q);
  go(quiet_client, &q);
  assert_true(t_run_until(L, &q.done, 100000));
  assert_true(t_run_until(L, &q.stage, 100000));
  assert_int_equal(q.alpn_len, 8);
  assert_string_equal(q.alpn, "htt");
  /* An error some other code left in OpenSSL's queue of this thread fails
   * no call of the stream. */
  ERR_raise(ERR_LIB_SSL, SSL_R_BAD_LENGTH);
  /* Outside a fiber, the bytes in the socket: the read that would take
   * them through fiber I/O is refused, and loses nothing... */
  if (tdl_tls_fiber_io(q.s)) {
    assert_int_equal(tdl_tls_read(q.s, q.alpn, sizeof q.alpn, TDL_FOREVER), -EPERM);
    assert_non_null(strstr(tdl_tls_error(q.s), "Operation not permitted"));
  }
  /* ...a fiber then reads them. */
  q.stage = 0;
  go(quiet_read, &q);
  assert_true(t_run_until(L, &q.stage, 100000));
  assert_int_equal(q.stage, 2);
  assert_int_equal(tdl_tls_free(q.s), 0);
  assert_int_equal(tdl_tls_free(q.c), 0);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  tdl_tls_config_free(q.scfg);
  tdl_tls_config_free(q.ccfg);
}

/* ---- the peer gone ---- */

typedef struct gone {
  tdl_tls_config *scfg, *ccfg;
  int sfd, cfd;
  tdl_tls *s;
  int ready, sd, done;
  ssize_t wr;
} gone;

static void *gone_server(void *arg)
{
  gone *g = arg;
  assert_int_equal(tdl_tls_new(&g->s, g->scfg, g->sfd, NULL), 0);
  assert_int_equal(tdl_tls_handshake(g->s, tdl_after(T_HANG)), 0);
  g->ready = 1;
  return NULL;
}

static void *gone_client(void *arg)
{
  gone *g = arg;
  tdl_tls *c;
  assert_int_equal(tdl_tls_new(&c, g->ccfg, g->cfd, "localhost"), 0);
  assert_int_equal(tdl_tls_handshake(c, tdl_after(T_HANG)), 0);
  assert_int_equal(tdl_tls_free(c), 0);
  assert_int_equal(tdl_close(g->cfd), 0);
  g->done = 1;
  return NULL;
}

static void *gone_shutdown(void *arg)
{
  gone *g = arg;
  g->sd = tdl_tls_shutdown(g->s, tdl_after(T_HANG));
  g->wr = tdl_tls_write(g->s, "x", 1, tdl_after(T_HANG));
  g->ready = 2;
  return NULL;
}

/* A shutdown after the peer closed its socket: -EPIPE (or -ECONNRESET);
 * a write after it, as after any shutdown, -EPIPE, the stream not dead. */
static void shutdown_peer_gone(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  gone g = {.scfg = server_cfg(NULL, NULL), .ccfg = client_cfg(NULL), .sfd = sv[0], .cfd = sv[1]};
  go(gone_server, &g);
  go(gone_client, &g);
  assert_true(t_run_until(L, &g.ready, 100000));
  assert_true(t_run_until(L, &g.done, 100000));
  go(gone_shutdown, &g);
  while (g.ready != 2)
    assert_true(tdl_loop_run(L, TDL_LOOP_ONCE) >= 0);
  assert_true(g.sd == -EPIPE || g.sd == -ECONNRESET);
  if (g.wr != -EPIPE || strcmp(tdl_tls_error(g.s), "write after shutdown") != 0)
    fail_msg("write: %zd '%s'", g.wr, tdl_tls_error(g.s));
  assert_int_equal(tdl_tls_free(g.s), 0);
  tdl_close(sv[0]);
  tdl_tls_config_free(g.scfg);
  tdl_tls_config_free(g.ccfg);
}

/* ---- deadlines that pass ---- */

enum { BULK = 256 * 1024 };

typedef struct slow {
  tdl_tls_config *scfg, *ccfg;
  int sfd, cfd;
  tdl_tls *s, *c;
  int sent_rc, rd_rc, wait_rc, reading, done;
  size_t sent, got;
  bool mismatch;
} slow;

static unsigned char pattern(size_t k)
{
  return (unsigned char)(k * 13 + 5 + (k >> 10));
}

static void *slow_server(void *arg)
{
  slow *w = arg;
  static unsigned char bulk[BULK];
  for (size_t i = 0; i < BULK; i++)
    bulk[i] = pattern(i);
  assert_int_equal(tdl_tls_new(&w->s, w->scfg, w->sfd, NULL), 0);
  assert_int_equal(tdl_tls_handshake(w->s, tdl_after(T_HANG)), 0);
  /* Nothing comes: a read and a wait end at their deadline. */
  char b[8];
  w->rd_rc = (int)tdl_tls_read(w->s, b, sizeof b, tdl_after(TDL_MSEC));
  w->wait_rc = tdl_tls_wait(w->s, tdl_after(TDL_MSEC));
  /* The client does not read yet: the socket fills and the deadline
   * passes with part of it sent, *sent saying how much. */
  w->sent_rc = tdl_tls_send_all(w->s, bulk, BULK, &w->sent, tdl_after(20 * TDL_MSEC));
  w->reading = 1;
  /* The rest, from the same bytes on, as tls.h asks: the first buffer
   * alone when it is large (no gathering). */
  struct iovec iov[2] = {{bulk + w->sent, BULK - w->sent}, {NULL, 0}};
  size_t off = w->sent;
  while (off < BULK) {
    ssize_t n = tdl_tls_writev(w->s, iov, 2, tdl_after(T_HANG));
    assert_true(n > 0);
    off += (size_t)n;
    iov[0].iov_base = bulk + off;
    iov[0].iov_len = BULK - off;
  }
  assert_int_equal(tdl_tls_shutdown(w->s, tdl_after(T_HANG)), 0);
  return NULL;
}

static void *slow_client(void *arg)
{
  slow *w = arg;
  assert_int_equal(tdl_tls_new(&w->c, w->ccfg, w->cfd, "localhost"), 0);
  assert_int_equal(tdl_tls_handshake(w->c, tdl_after(T_HANG)), 0);
  while (!w->reading)
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  static unsigned char buf[16384];
  ssize_t n;
  while ((n = tdl_tls_read(w->c, buf, sizeof buf, tdl_after(T_HANG))) > 0) {
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] != pattern(w->got + (size_t)i))
        w->mismatch = true;
    w->got += (size_t)n;
  }
  assert_int_equal(n, 0);
  w->done = 1;
  return NULL;
}

static void deadlines_pass(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  int small = 4096;
  assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  slow w = {.scfg = server_cfg(NULL, NULL), .ccfg = client_cfg(NULL), .sfd = sv[0], .cfd = sv[1]};
  go(slow_server, &w);
  go(slow_client, &w);
  assert_true(t_run_until(L, &w.done, 1000000));
  assert_int_equal(w.rd_rc, -ETIMEDOUT);
  assert_int_equal(w.wait_rc, -ETIMEDOUT);
  assert_int_equal(w.sent_rc, -ETIMEDOUT);
  assert_true(w.sent < BULK);
  assert_non_null(strstr(tdl_tls_error(w.s), "while waiting for the peer"));
  assert_int_equal(w.got, BULK);
  assert_false(w.mismatch);
  assert_int_equal(tdl_tls_free(w.s), 0);
  assert_int_equal(tdl_tls_free(w.c), 0);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  tdl_tls_config_free(w.scfg);
  tdl_tls_config_free(w.ccfg);
}

/* ---- a write after the peer's clean end, the peer gone ---- */

typedef struct ended {
  tdl_tls_config *scfg, *ccfg;
  int sfd, cfd;
  ssize_t rd, wr;
  int client_done, done;
} ended;

static void *ended_client(void *arg)
{
  ended *e = arg;
  tdl_tls *c;
  assert_int_equal(tdl_tls_new(&c, e->ccfg, e->cfd, "localhost"), 0);
  assert_int_equal(tdl_tls_handshake(c, tdl_after(T_HANG)), 0);
  assert_int_equal(tdl_tls_shutdown(c, tdl_after(T_HANG)), 0);
  assert_int_equal(tdl_tls_free(c), 0);
  assert_int_equal(tdl_close(e->cfd), 0);
  e->client_done = 1;
  return NULL;
}

static void *ended_server(void *arg)
{
  ended *e = arg;
  tdl_tls *s;
  assert_int_equal(tdl_tls_new(&s, e->scfg, e->sfd, NULL), 0);
  assert_int_equal(tdl_tls_handshake(s, tdl_after(T_HANG)), 0);
  char b[8];
  e->rd = tdl_tls_read(s, b, sizeof b, tdl_after(T_HANG));
  while (!e->client_done)
    assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  e->wr = tdl_tls_write(s, "late", 4, tdl_after(T_HANG));
  assert_int_equal(tdl_tls_free(s), 0);
  e->done = 1;
  return NULL;
}

static void write_after_peer_ended(void **state)
{
  (void)state;
  int sv[2];
  spair(sv);
  ended e = {.scfg = server_cfg(NULL, NULL), .ccfg = client_cfg(NULL), .sfd = sv[0], .cfd = sv[1]};
  go(ended_server, &e);
  go(ended_client, &e);
  assert_true(t_run_until(L, &e.done, 100000));
  assert_int_equal(e.rd, 0);     /* the clean end */
  assert_int_equal(e.wr, -EPIPE); /* and nobody there */
  tdl_close(sv[0]);
  tdl_tls_config_free(e.scfg);
  tdl_tls_config_free(e.ccfg);
}

/* ---- streams on another thread's loop ---- */

typedef struct other {
  tdl_tls_config *scfg, *ccfg;
  end server, client;
} other;

static void *other_thread(void *arg)
{
  other *o = arg;
  tdl_loop *loop = t_loop_new();
  int sv[2];
  spair(sv);
  o->server = (end){.cfg = o->scfg, .fd = sv[0], .server = true};
  o->client = (end){.cfg = o->ccfg, .fd = sv[1], .name = "localhost"};
  t_spawn(loop, run_end, &o->server);
  t_spawn(loop, run_end, &o->client);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  t_loop_free(loop);
  return NULL; /* the thread's fiber BIO goes with it */
}

static void streams_on_another_thread(void **state)
{
  (void)state;
  other o = {.scfg = server_cfg(NULL, NULL), .ccfg = client_cfg(NULL)};
  for (int i = 0; i < 2; i++) {
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, other_thread, &o), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(o.client.hs, 0);
    assert_int_equal(o.client.rd, 5);
    assert_memory_equal(o.client.buf, "hello", 5);
  }
  tdl_tls_config_free(o.scfg);
  tdl_tls_config_free(o.ccfg);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(client_certificate_accepted, setup, teardown),
    cmocka_unit_test_setup_teardown(client_without_certificate_refused, setup, teardown),
    cmocka_unit_test_setup_teardown(client_self_signed_refused, setup, teardown),
    cmocka_unit_test_setup_teardown(client_expired_refused, setup, teardown),
    cmocka_unit_test(config_bad_input),
    cmocka_unit_test_setup_teardown(stream_bad_input, setup, teardown),
    cmocka_unit_test_setup_teardown(close_notify_during_handshake, setup, teardown),
    cmocka_unit_test_setup_teardown(sessions_not_kept, setup, teardown),
    cmocka_unit_test_setup_teardown(alpn_no_match_and_cut, setup, teardown),
    cmocka_unit_test_setup_teardown(nothing_moved_and_outside_a_fiber, setup, teardown),
    cmocka_unit_test_setup_teardown(shutdown_peer_gone, setup, teardown),
    cmocka_unit_test_setup_teardown(deadlines_pass, setup, teardown),
    cmocka_unit_test_setup_teardown(write_after_peer_ended, setup, teardown),
    cmocka_unit_test(streams_on_another_thread),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
