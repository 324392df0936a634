/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: a server-side TLS stream (src/tls/) fed arbitrary bytes
 * by its peer.  The input is written to the other end of a socketpair in
 * pieces (the first byte sets the piece size, 1..64), then that end shuts
 * its writing down; a server fiber makes a stream over its end, runs the
 * handshake and reads until the stream ends.  Checked:
 *  - every call returns 0, a count, or one of the errors tls.h names for it
 *    (no other errno, never a hang: the deadline is one second and the
 *    peer's end has come);
 *  - a stream whose handshake failed stays failed: a read returns the same
 *    error;
 *  - tdl_tls_error is a NUL-terminated string, non-empty after a failure;
 *  - nothing leaks (ASan) and every fd is closed.
 * The identity is a P-256 key and self-signed certificate made in memory at
 * start.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <treadle.h>
#include <treadle/tls.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CHECK(x) ((x) ? (void)0 : (fprintf(stderr, "fuzz_tls_server: failed: %s (line %d)\n", #x, __LINE__), abort()))

static tdl_tls_config *cfg;

/* A PEM string of what write_fn writes to a memory BIO. */
static char *pem(int (*write_fn)(BIO *, void *), void *what)
{
  BIO *b = BIO_new(BIO_s_mem());
  CHECK(b && write_fn(b, what) == 1);
  char *p;
  long n = BIO_get_mem_data(b, &p);
  char *out = malloc((size_t)n + 1);
  CHECK(out);
  memcpy(out, p, (size_t)n);
  out[n] = '\0';
  BIO_free(b);
  return out;
}

static int write_cert(BIO *b, void *x) { return PEM_write_bio_X509(b, x); }
static int write_key(BIO *b, void *k) { return PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *x = X509_new();
  CHECK(key && x);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), 0);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, key);
  X509_NAME *name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
  X509_set_issuer_name(x, name);
  CHECK(X509_sign(x, key, EVP_sha256()) > 0);
  char *cert_pem = pem(write_cert, x), *key_pem = pem(write_key, key);
  char why[256];
  tdl_tls_options o = {.role = TDL_TLS_SERVER, .cert_pem = cert_pem, .key_pem = key_pem, .alpn = "http/1.1",
                       .error = why, .error_cap = sizeof why};
  if (tdl_tls_config_new(&cfg, &o) != 0) {
    fprintf(stderr, "fuzz_tls_server: %s\n", why);
    abort();
  }
  free(cert_pem);
  free(key_pem);
  X509_free(x);
  EVP_PKEY_free(key);
  return 0;
}

typedef struct run {
  const uint8_t *data;
  size_t size;
  int fds[2];
} run;

static bool handshake_error(int rc)
{
  return rc == -ETIMEDOUT || rc == -EPROTO || rc == -EKEYREJECTED || rc == -ECONNRESET || rc == -EPIPE;
}

/* The peer: the input in pieces, then the end of its writing. */
static void *peer(void *arg)
{
  run *r = arg;
  size_t piece = r->size ? (size_t)(r->data[0] % 64) + 1 : 1;
  for (size_t i = 1; i < r->size;) {
    size_t n = r->size - i < piece ? r->size - i : piece;
    ssize_t w = tdl_send(r->fds[1], r->data + i, n, MSG_NOSIGNAL, tdl_after(TDL_SEC));
    if (w <= 0)
      break; /* the server has closed: the rest would go nowhere */
    i += (size_t)w;
    tdl_fiber_yield();
  }
  shutdown(r->fds[1], SHUT_WR);
  return NULL;
}

static void *server(void *arg)
{
  run *r = arg;
  tdl_fiber_t p;
  CHECK(tdl_fiber_spawn(&p, tdl_fiber_loop(), peer, r, NULL) == 0);
  tdl_tls *s;
  CHECK(tdl_tls_new(&s, cfg, r->fds[0], NULL) == 0);
  tdl_time_t deadline = tdl_after(TDL_SEC);
  int rc = tdl_tls_handshake(s, deadline);
  CHECK(rc == 0 || handshake_error(rc));
  const char *e = tdl_tls_error(s);
  CHECK(e && strlen(e) < 4096);
  char buf[512];
  if (rc < 0) {
    CHECK(e[0] != '\0');
    CHECK(tdl_tls_read(s, buf, sizeof buf, deadline) == rc);
  } else {
    ssize_t n;
    while ((n = tdl_tls_read(s, buf, sizeof buf, deadline)) > 0)
      CHECK((size_t)n <= sizeof buf);
    CHECK(n == 0 || handshake_error((int)n));
    (void)tdl_tls_shutdown(s, deadline);
  }
  CHECK(tdl_tls_free(s) == 0);
  tdl_close(r->fds[0]); /* the peer's sends now fail: it ends */
  CHECK(tdl_fiber_join(p, NULL, TDL_FOREVER) == 0);
  tdl_close(r->fds[1]);
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  run r = {.data = data, .size = size};
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, r.fds) == 0);
  CHECK(tdl_fiber_main(server, &r, NULL) == 0);
  return 0;
}
