/* SPDX-License-Identifier: MIT */
/*
 * TLS without memory: the Nth allocation fails, N = 1, 2, ... until a
 * scenario runs through without reaching it (as tests/base/test_faults.c
 * walks treadle's own fault points).  Allocations are those of OpenSSL
 * (CRYPTO_set_mem_functions) and of libtreadle-tls and libtreadle, linked
 * statically here so that ld's --wrap turns their malloc, calloc and strdup
 * into this file's (tests/CMakeLists.txt).  At every N the failure must come
 * back as an error of tls.h (-ENOMEM, or -EINVAL where OpenSSL reports it
 * as the input's: a name or a PEM text it could not copy), nothing half
 * made, and the same call with memory back must work: no failure may stay
 * for the life of the process.  Valgrind and ASan runs check that nothing
 * leaks.  Certificates from tests/tls/make-certs.sh, made at run time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"

#include <treadle/tls.h>

#include <openssl/crypto.h>
#include <openssl/ssl.h>

/* ---- the countdown ---- */

/* What the countdown counts: the libraries' malloc, calloc and strdup;
 * OpenSSL's allocations; of those, only the ones made in a file of
 * OpenSSL's whose name holds `in_file` (where OpenSSL is built with file
 * names, as it is by default): a few of the thousands a handshake makes,
 * each of which a walk then reaches. */
enum { LIBC = 1, OSSL = 2, OSSL_FILE = 4, ALL = LIBC | OSSL };
static const char *in_file;

static atomic_int armed;      /* the kinds counted */
static atomic_long countdown; /* the nth allocation counted from now fails */
static atomic_bool fired;

static bool fail_now(int kind)
{
  if (!(atomic_load(&armed) & kind))
    return false;
  long c = atomic_load(&countdown);
  while (c > 0) {
    if (atomic_compare_exchange_weak(&countdown, &c, c - 1)) {
      if (c != 1)
        return false;
      atomic_store(&fired, true);
      return true;
    }
  }
  return false;
}

static void arm_kind(long n, int kinds)
{
  atomic_store(&fired, false);
  atomic_store(&countdown, n);
  atomic_store(&armed, kinds);
}

static void arm(long n)
{
  arm_kind(n, ALL);
}

static bool disarm(void)
{
  atomic_store(&armed, 0);
  atomic_store(&countdown, 0);
  return atomic_load(&fired);
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
char *__wrap_strdup(const char *s);

void *__wrap_malloc(size_t n)
{
  if (fail_now(LIBC)) {
    errno = ENOMEM;
    return NULL;
  }
  return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
  if (fail_now(LIBC)) {
    errno = ENOMEM;
    return NULL;
  }
  return __real_calloc(n, size);
}

char *__wrap_strdup(const char *s)
{
  if (fail_now(LIBC)) {
    errno = ENOMEM;
    return NULL;
  }
  return __real_strdup(s);
}

static bool ossl_files; /* OpenSSL named a file */

static int ossl_kind(const char *file)
{
  if (file && !ossl_files && strstr(file, ".c"))
    ossl_files = true;
  return OSSL | (file && in_file && strstr(file, in_file) ? OSSL_FILE : 0);
}

static void *ossl_malloc(size_t n, const char *file, int line)
{
  (void)line;
  return fail_now(ossl_kind(file)) ? NULL : __real_malloc(n);
}

static void *ossl_realloc(void *p, size_t n, const char *file, int line)
{
  (void)line;
  return fail_now(ossl_kind(file)) ? NULL : realloc(p, n);
}

static void ossl_free(void *p, const char *file, int line)
{
  (void)file, (void)line;
  free(p);
}

/* Under valgrind, every step is slow: every third N (the walks still end
 * where a scenario runs through). */
static long step(void)
{
  return RUNNING_ON_VALGRIND ? 3 : 1;
}

/* ---- certificates ---- */

static char dir[64];
static char path_buf[16][128];
static int path_n;

static const char *P(const char *name)
{
  char *p = path_buf[path_n++ % 16];
  snprintf(p, sizeof path_buf[0], "%s/%s", dir, name);
  return p;
}

static char *slurp(const char *name)
{
  FILE *f = fopen(P(name), "r");
  assert_non_null(f);
  char *text = __real_calloc(1, 16384);
  assert_non_null(text);
  assert_true(fread(text, 1, 16383, f) > 0);
  fclose(f);
  return text;
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

/* What OpenSSL sets up once per process, done before any walk: a full
 * handshake of its own, over memory.  Not libtreadle-tls's setup, which the
 * first test walks. */
static void warm_openssl(void)
{
  /* BIO types: a run-once of OpenSSL's that fails for good without memory. */
  assert_true(BIO_get_new_index() > 0);
  SSL_CTX *sc = SSL_CTX_new(TLS_server_method()), *cc = SSL_CTX_new(TLS_client_method());
  assert_true(sc && cc);
  assert_int_equal(SSL_CTX_use_certificate_chain_file(sc, P("server.pem")), 1);
  assert_int_equal(SSL_CTX_use_PrivateKey_file(sc, P("server.key"), SSL_FILETYPE_PEM), 1);
  assert_int_equal(SSL_CTX_load_verify_locations(cc, P("ca.pem"), NULL), 1);
  SSL *s = SSL_new(sc), *c = SSL_new(cc);
  BIO *sb, *cb;
  assert_int_equal(BIO_new_bio_pair(&sb, 0, &cb, 0), 1);
  SSL_set_bio(s, sb, sb);
  SSL_set_bio(c, cb, cb);
  SSL_set_accept_state(s);
  SSL_set_connect_state(c);
  int done = 0;
  for (int i = 0; i < 100 && done != 3; i++) {
    if (SSL_do_handshake(c) == 1)
      done |= 1;
    if (SSL_do_handshake(s) == 1)
      done |= 2;
  }
  assert_int_equal(done, 3);
  SSL_free(s);
  SSL_free(c);
  SSL_CTX_free(sc);
  SSL_CTX_free(cc);
}

static void spair(int sv[2])
{
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
}

/* ---- the first stream of the process ---- */

/* First: the library's own setup (its BIO methods, made by the first
 * stream) must be tried again by the next stream when it failed. */
static void first_stream(void **state)
{
  (void)state;
  warm_openssl();
  tdl_tls_config *c;
  assert_int_equal(tdl_tls_config_new(&c, &(tdl_tls_options){.ca_file = P("ca.pem")}), 0);
  int sv[2];
  spair(sv);
  long n = 1;
  for (;; n += step()) {
    tdl_tls *s = (tdl_tls *)c;
    arm(n);
    int rc = tdl_tls_new(&s, c, sv[0], "localhost");
    bool hit = disarm();
    if (rc == 0) {
      assert_int_equal(tdl_tls_free(s), 0);
      if (!hit)
        break;
      continue;
    }
    if (!hit)
      fail_msg("N=%ld: tdl_tls_new failed (%d) with memory back", n, rc);
    if (rc != -ENOMEM && rc != -EINVAL)
      fail_msg("N=%ld: %d", n, rc);
    assert_null(s);
  }
  assert_true(n > 1);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
  tdl_tls_config_free(c);
}

/* ---- configurations ---- */

static void config_walk(const char *what, const tdl_tls_options *o, int kinds, const char *file)
{
  long n = 1;
  in_file = file;
  for (;; n += step()) {
    tdl_tls_config *cfg = (tdl_tls_config *)o;
    arm_kind(n, kinds);
    int rc = tdl_tls_config_new(&cfg, o);
    bool hit = disarm();
    if (rc == 0) {
      tdl_tls_config_free(cfg);
      if (!hit)
        break;
      continue;
    }
    if (!hit)
      fail_msg("%s, N=%ld: %d with memory back", what, n, rc);
    if (rc != -ENOMEM && rc != -EINVAL)
      fail_msg("%s, N=%ld: %d", what, n, rc);
    assert_null(cfg);
  }
  assert_true(n > 1 || (kinds == OSSL_FILE && !ossl_files));
  print_message("      %s, kinds %d %s: N up to %ld\n", what, kinds, file ? file : "", n);
}

static void configs(void **state)
{
  (void)state;
  char *bundle = slurp("bundle.pem"), *key = slurp("server.key");
  /* A server of a chain in text, asking for client certificates, with ALPN
   * (the first server with ALPN of the process makes its slot); a client
   * with a certificate and ALPN.  Every allocation of the libraries', and
   * of OpenSSL's those of its SSL_CTX (ssl_lib.c) and its certificates
   * (ssl_cert.c). */
  tdl_tls_options server = {.role = TDL_TLS_SERVER, .cert_pem = bundle, .key_pem = key, .ca_file = P("ca.pem"),
                            .alpn = "h2,http/1.1"};
  tdl_tls_options client = {.cert_file = P("server.pem"), .key_file = P("server.key"), .ca_file = P("ca.pem"),
                            .alpn = "http/1.1"};
  const char *files[] = {"ssl_lib.c", "ssl_cert.c"};
  config_walk("server", &server, LIBC, NULL);
  config_walk("client", &client, LIBC, NULL);
  for (int i = 0; i < 2; i++) {
    config_walk("server", &server, OSSL_FILE, files[i]);
    config_walk("client", &client, OSSL_FILE, files[i]);
  }
  /* A chain in text, and ALPN: the chain's certificates, and the slot that
   * keeps the server's ALPN list, go on stacks of OpenSSL's (stack.c), of
   * which a server without more makes few. */
  config_walk("chain", &(tdl_tls_options){.role = TDL_TLS_SERVER, .cert_pem = bundle, .key_pem = key,
                                          .alpn = "h2"},
              OSSL_FILE, "stack.c");
  /* A client of the system's trust store: its lookups (x509_lu.c). */
  config_walk("system store", &(tdl_tls_options){0}, OSSL_FILE, "x509_lu.c");
  /* A reload without memory keeps what the configuration had. */
  tdl_tls_config *cfg;
  assert_int_equal(tdl_tls_config_new(&cfg, &(tdl_tls_options){.ca_file = P("ca.pem")}), 0);
  for (long n = 1;; n += step()) {
    arm(n);
    int rc = tdl_tls_config_reload(cfg, &(tdl_tls_options){.ca_file = P("ca.pem"), .alpn = "x"});
    bool hit = disarm();
    if (!hit) {
      assert_int_equal(rc, 0);
      break;
    }
    assert_true(rc == 0 || rc == -ENOMEM || rc == -EINVAL);
  }
  tdl_tls_config_free(cfg);
  free(bundle);
  free(key);
}

/* ---- whole connections ---- */

typedef struct side {
  tdl_tls_config *cfg;
  int fd;
  bool server;
  int hs, sd;
  ssize_t wr, rd;
  bool resumed;
  char buf[16];
} side;

static void *run_side(void *arg)
{
  side *e = arg;
  tdl_time_t dl = tdl_after(T_HANG);
  tdl_tls *s;
  e->hs = e->wr = e->rd = e->sd = 1; /* not reached */
  int rc = tdl_tls_new(&s, e->cfg, e->fd, e->server ? NULL : "localhost");
  if (rc < 0) {
    e->hs = rc;
    tdl_close(e->fd);
    return NULL;
  }
  e->hs = tdl_tls_handshake(s, dl);
  if (e->hs == 0) {
    e->resumed = tdl_tls_resumed(s);
    char end[4];
    if (e->server) {
      /* hello, echoed; then the client's end, then ours. */
      e->rd = tdl_tls_read(s, e->buf, sizeof e->buf, dl);
      e->wr = e->rd > 0 ? tdl_tls_write(s, e->buf, (size_t)e->rd, dl) : 0;
      if (e->wr > 0 && tdl_tls_read(s, end, sizeof end, dl) == 0)
        e->sd = tdl_tls_shutdown(s, dl);
    } else {
      /* hello, and its echo; then our end, then the server's. */
      e->wr = tdl_tls_write(s, "hello", 5, dl);
      e->rd = e->wr == 5 ? tdl_tls_read(s, e->buf, sizeof e->buf, dl) : 0;
      if (e->rd > 0 && (e->sd = tdl_tls_shutdown(s, dl)) == 0 && tdl_tls_read(s, end, sizeof end, dl) != 0)
        e->sd = 2; /* not the server's clean end */
    }
  }
  assert_int_equal(tdl_tls_free(s), 0);
  tdl_close(e->fd);
  return NULL;
}

typedef struct conn {
  tdl_tls_config *scfg, *ccfg;
  long n;
  int kinds;
  side server, client;
  bool hit;
  int bad; /* a line of conn_thread's that failed (cmocka asserts on the test's thread only) */
} conn;

/* One connection, and a second, which may resume the first's session, on
 * a loop of a thread of its own: a thread that has no fiber BIO yet. */
static void *conn_thread(void *arg)
{
  conn *c = arg;
  tdl_loop *loop;
  if (tdl_loop_new(&loop, NULL) != 0) {
    c->bad = __LINE__;
    return NULL;
  }
  c->hit = false;
  for (int i = 0; i < 2 && !c->bad; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
      c->bad = __LINE__;
      break;
    }
    c->server = (side){.cfg = c->scfg, .fd = sv[0], .server = true};
    c->client = (side){.cfg = c->ccfg, .fd = sv[1]};
    tdl_fiber_options o = {.detached = true};
    if (tdl_fiber_spawn(NULL, loop, run_side, &c->server, &o) != 0 ||
        tdl_fiber_spawn(NULL, loop, run_side, &c->client, &o) != 0) {
      c->bad = __LINE__;
      break;
    }
    arm_kind(c->n, c->kinds);
    int rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
    c->hit |= disarm();
    if (rc != 0)
      c->bad = __LINE__;
    side *e[2] = {&c->server, &c->client};
    for (int k = 0; k < 2; k++) {
      /* Without a failure every step works; with one, each step that ran
       * worked or gave an errno. */
      if (!c->hit && (e[k]->hs != 0 || e[k]->wr != 5 || e[k]->rd != 5 || e[k]->sd != 0))
        c->bad = __LINE__;
      if (e[k]->hs > 0)
        c->bad = __LINE__;
    }
    if (!c->hit && memcmp(c->client.buf, "hello", 5) != 0)
      c->bad = __LINE__;
  }
  if (tdl_loop_free(loop) != 0)
    c->bad = __LINE__;
  return NULL;
}

/* Walk N over the allocations of `kinds`, from `from`, stepping on as
 * next() says, until a run does not reach the Nth. */
static void conn_walk(conn *c, int kinds, long (*next)(long n))
{
  c->kinds = kinds;
  bool resumed = false;
  for (c->n = 1;; c->n = next(c->n)) {
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, conn_thread, c), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (c->bad)
      fail_msg("kinds %d, N=%ld: test_tls_alloc.c:%d (server %d %zd %zd %d, client %d %zd %zd %d)", kinds, c->n,
               c->bad, c->server.hs, c->server.rd, c->server.wr, c->server.sd, c->client.hs, c->client.wr,
               c->client.rd, c->client.sd);
    resumed |= c->client.resumed;
    if (!c->hit)
      break;
  }
  assert_true(c->n > 1 || (kinds == OSSL_FILE && !ossl_files));
  assert_true(resumed); /* the last run's second connection, at least */
  print_message("      kinds %d: N up to %ld\n", kinds, c->n);
}

static long next_one(long n)
{
  return n + step();
}

/* OpenSSL makes thousands of allocations per connection: a sample. */
static long next_sampled(long n)
{
  return n + 1 + n / (RUNNING_ON_VALGRIND ? 2 : 8);
}

static void connections(void **state)
{
  (void)state;
  tdl_tls_config *scfg, *ccfg;
  tdl_tls_options so = {.role = TDL_TLS_SERVER, .cert_file = P("server.pem"), .key_file = P("server.key"),
                        .ca_file = P("ca.pem"), .alpn = "http/1.1"};
  assert_int_equal(tdl_tls_config_new(&scfg, &so), 0);
  tdl_tls_options co = {.cert_file = P("server.pem"), .key_file = P("server.key"), .ca_file = P("ca.pem"),
                        .alpn = "http/1.1"};
  assert_int_equal(tdl_tls_config_new(&ccfg, &co), 0);
  conn c = {.scfg = scfg, .ccfg = ccfg};
  conn_walk(&c, LIBC, next_one);
  in_file = "bio_lib.c"; /* BIO objects: the fiber BIO of a thread among them */
  conn_walk(&c, OSSL_FILE, next_one);
  conn_walk(&c, OSSL, next_sampled);
  tdl_tls_config_free(scfg);
  tdl_tls_config_free(ccfg);
}

/* ---- the words of a failure, without memory for them ---- */

typedef struct words {
  tdl_tls_config *scfg, *ccfg;
  tdl_tls *s, *c;
  int sfd, cfd;
  bool garbage;
  long n;
  ssize_t rd;
  bool hit;
  char said[128];
} words;

static void *words_hs(void *arg)
{
  tdl_tls *s = arg;
  assert_int_equal(tdl_tls_handshake(s, tdl_after(T_HANG)), 0);
  return NULL;
}

/* The stream's first failure, with the Nth allocation from its call on
 * failing. */
static void *words_fail(void *arg)
{
  words *w = arg;
  char b[8];
  arm(w->n);
  w->rd = tdl_tls_read(w->s, b, sizeof b, w->garbage ? tdl_after(T_HANG) : tdl_now() - 1);
  w->hit = disarm();
  snprintf(w->said, sizeof w->said, "%s", tdl_tls_error(w->s));
  return NULL;
}

/* A read that fails, the allocation for its words among those that fail:
 * the error is returned all the same, and tdl_tls_error says that its words
 * were lost.  The deadline passed (said in words of its own), or garbage
 * came (noted with OpenSSL's reasons). */
static void words_walk(bool garbage)
{
  tdl_loop *loop = t_loop_new();
  words w = {.garbage = garbage};
  assert_int_equal(tdl_tls_config_new(&w.scfg, &(tdl_tls_options){.role = TDL_TLS_SERVER,
                                                                   .cert_file = P("server.pem"),
                                                                   .key_file = P("server.key")}),
                   0);
  assert_int_equal(tdl_tls_config_new(&w.ccfg, &(tdl_tls_options){.ca_file = P("ca.pem")}), 0);
  bool lost = false;
  for (w.n = 1; w.n < 40 && !lost; w.n++) {
    int sv[2];
    spair(sv);
    w.sfd = sv[0];
    w.cfd = sv[1];
    assert_int_equal(tdl_tls_new(&w.s, w.scfg, sv[0], NULL), 0);
    assert_int_equal(tdl_tls_new(&w.c, w.ccfg, sv[1], "localhost"), 0);
    t_spawn(loop, words_hs, w.s);
    t_spawn(loop, words_hs, w.c);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    assert_int_equal(tdl_tls_free(w.c), 0);
    if (garbage) {
      static const char junk[] = "\x01\x02\x03\x04\x05 not a record";
      assert_int_equal(write(w.cfd, junk, sizeof junk - 1), (ssize_t)(sizeof junk - 1));
    }
    t_spawn(loop, words_fail, &w);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    assert_true(w.hit);
    /* The deadline's -ETIMEDOUT, or the garbage's -EPROTO; or -EPROTO where
     * OpenSSL could not make its read buffer (it reports that as a TLS
     * error of its own). */
    if (garbage || w.rd != -ETIMEDOUT)
      assert_int_equal(w.rd, -EPROTO);
    lost = strcmp(w.said, "a TLS call failed (no memory for its words)") == 0;
    if (!lost)
      assert_true(w.said[0] != '\0');
    assert_int_equal(tdl_tls_free(w.s), 0);
    tdl_close(w.sfd);
    tdl_close(w.cfd);
  }
  assert_true(lost);
  tdl_tls_config_free(w.scfg);
  tdl_tls_config_free(w.ccfg);
  t_loop_free(loop);
}

static void words_lost(void **state)
{
  (void)state;
  words_walk(false);
  words_walk(true);
}

int main(void)
{
  /* Before OpenSSL allocates anything. */
  if (CRYPTO_set_mem_functions(ossl_malloc, ossl_realloc, ossl_free) != 1) {
    fprintf(stderr, "test_tls_alloc: OpenSSL allocated before main\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(first_stream), /* first: the library's setup is still to make */
    cmocka_unit_test(configs),
    cmocka_unit_test(connections),
    cmocka_unit_test(words_lost),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
