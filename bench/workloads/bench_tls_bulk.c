/* SPDX-License-Identifier: MIT */
/*
 * tls-bulk: B bytes (1 GiB) over one TLS 1.3 connection on loopback, and the
 * CPU time both ends spend per byte.  One process, a group of two loops
 * pinned to two CPUs: a server fiber on loop 0 writes B bytes from one
 * buffer in writes of --chunk bytes (16 KiB, one record each), then sends
 * close_notify; a client fiber on loop 1 reads them into one buffer of the
 * same size and drops them, until the clean end, and checks the count.
 * bench/drivers/tls_bulk_driver.py does the same with `openssl s_server` and
 * `openssl s_client` (the peer): one process per end, pinned the same way.
 *
 *   tls-bulk [--bytes B] [--chunk N] [--ktls yes|no]
 *
 * The certificate (P-256, self-signed) is made in memory before the clock
 * starts; the client does not verify it.  Neither side sets a cipher: both
 * take OpenSSL's default TLS 1.3 order.  --ktls no (the default) keeps the
 * records in user space, as the openssl pair does; yes lets the kernel take
 * them where it can (the RESULT line's ktls says which directions it took).
 *
 * Keys: cpu_s_per_gib (user+sys of the process, both threads, over B in
 * GiB), mb_per_s (B over the wall time, 10^6 bytes per second),
 * server_cpu_s and client_cpu_s (each loop thread's own CPU time).  The
 * span covers the group's start, both handshakes and its end.
 */
#include "bench.h" /* declares the workload: no empty file where TLS is not built */

#ifdef TDL_HAVE_TLS

#include <treadle.h>
#include <treadle/tls.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

static struct {
  tdl_tls_config *server_cfg, *client_cfg;
  int fd[2]; /* server's end, client's end */
  long bytes, chunk;
  long received;
  int err[2];          /* each side's first error, 0 when it did its part */
  double cpu_s[2];     /* each loop thread's CPU time when its side ended */
  unsigned ktls[2];
  int version;
  int done;            /* sides finished: the second stops the group */
} T;

/* A self-signed P-256 certificate and its key, as PEM text (malloc'ed). */
static void make_cert(char **cert_pem, char **key_pem)
{
  EVP_PKEY *pk = EVP_EC_gen("P-256");
  X509 *x = X509_new();
  BIO *cb = BIO_new(BIO_s_mem()), *kb = BIO_new(BIO_s_mem());
  if (!pk || !x || !cb || !kb)
    bench_die("tls-bulk: OpenSSL could not make a key");
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), 0);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, pk);
  X509_NAME *name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"127.0.0.1", -1, -1, 0);
  X509_set_issuer_name(x, name);
  if (!X509_sign(x, pk, EVP_sha256()) || !PEM_write_bio_X509(cb, x) ||
      !PEM_write_bio_PrivateKey(kb, pk, NULL, NULL, 0, NULL, NULL))
    bench_die("tls-bulk: OpenSSL could not make a certificate");
  char *p;
  long n = BIO_get_mem_data(cb, &p);
  *cert_pem = strndup(p, (size_t)n);
  n = BIO_get_mem_data(kb, &p);
  *key_pem = strndup(p, (size_t)n);
  if (!*cert_pem || !*key_pem)
    bench_die("tls-bulk: out of memory");
  BIO_free(cb);
  BIO_free(kb);
  X509_free(x);
  EVP_PKEY_free(pk);
}

/* A connected loopback pair, made with plain calls before the loops start:
 * fds[0] the accepted end, fds[1] the connecting one. */
static void make_pair(int fds[2])
{
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0 ||
      getsockname(l, (struct sockaddr *)&a, &len) < 0)
    bench_die("tls-bulk: listener: %s", strerror(errno));
  fds[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fds[1] < 0 || connect(fds[1], (struct sockaddr *)&a, sizeof a) < 0)
    bench_die("tls-bulk: connect: %s", strerror(errno));
  fds[0] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
  if (fds[0] < 0)
    bench_die("tls-bulk: accept: %s", strerror(errno));
  close(l);
}

static double thread_cpu_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long serve(tdl_tls *s, char *buf)
{
  long left = T.bytes;
  while (left > 0) {
    size_t n = (size_t)(left < T.chunk ? left : T.chunk);
    int rc = tdl_tls_send_all(s, buf, n, NULL, TDL_FOREVER);
    if (rc < 0)
      return rc;
    left -= (long)n;
  }
  return tdl_tls_shutdown(s, tdl_after(10 * TDL_SEC));
}

static long take(tdl_tls *s, char *buf)
{
  ssize_t n;
  while ((n = tdl_tls_read(s, buf, (size_t)T.chunk, TDL_FOREVER)) > 0)
    T.received += n;
  return n;
}

static void *side_main(void *arg)
{
  (void)arg;
  int i = (int)tdl_group_index();
  tdl_tls *s = NULL;
  char *buf = malloc((size_t)T.chunk);
  long rc = buf ? 0 : -ENOMEM;
  if (rc == 0)
    rc = tdl_tls_new(&s, i == 0 ? T.server_cfg : T.client_cfg, T.fd[i], NULL);
  if (rc == 0)
    rc = tdl_tls_handshake(s, tdl_after(10 * TDL_SEC));
  if (rc == 0) {
    if (i == 0) {
      T.ktls[0] = tdl_tls_ktls(s);
      T.version = tdl_tls_version(s);
      /* The data itself does not matter to TLS's cost; a pattern that is
       * not all zeros keeps it honest. */
      for (long k = 0; k < T.chunk; k++)
        buf[k] = (char)(k * 31 + 7);
      rc = serve(s, buf);
    } else {
      T.ktls[1] = tdl_tls_ktls(s);
      rc = take(s, buf);
    }
  }
  T.err[i] = (int)rc;
  T.cpu_s[i] = thread_cpu_s();
  tdl_tls_free(s);
  tdl_close(T.fd[i]);
  free(buf);
  if (__atomic_add_fetch(&T.done, 1, __ATOMIC_ACQ_REL) == 2)
    tdl_group_stop(tdl_group_self());
  return NULL;
}

static tdl_tls_config *config(tdl_tls_role role, const char *cert, const char *key, bool ktls)
{
  char why[256] = "";
  tdl_tls_options o = {.role = role, .min_version = TDL_TLS_VERSION_1_3, .no_ktls = !ktls, .error = why,
                       .error_cap = sizeof why};
  if (role == TDL_TLS_SERVER) {
    o.cert_pem = cert;
    o.key_pem = key;
  } else {
    o.insecure = true;
  }
  tdl_tls_config *cfg;
  int rc = tdl_tls_config_new(&cfg, &o);
  if (rc < 0)
    bench_die("tls-bulk: tdl_tls_config_new: %s (%s)", tdl_strerror(rc), why);
  return cfg;
}

int bench_tls_bulk_main(int argc, char **argv)
{
  T.bytes = bench_opt_long(argc, argv, "bytes", 1L << 30);
  T.chunk = bench_opt_long(argc, argv, "chunk", 16384);
  bool ktls = strcmp(bench_opt_str(argc, argv, "ktls", "no"), "yes") == 0;
  char *cert, *key;
  make_cert(&cert, &key);
  T.server_cfg = config(TDL_TLS_SERVER, cert, key, ktls);
  T.client_cfg = config(TDL_TLS_CLIENT, NULL, NULL, ktls);
  make_pair(T.fd);

  tdl_group_options o = {.loops = 2, .pin = true, .main = side_main};
  tdl_group *g;
  bench_span sp;
  bench_begin(&sp);
  int rc = tdl_group_new(&g, &o);
  if (rc == -EINVAL) { /* one CPU: unpinned */
    o.pin = false;
    rc = tdl_group_new(&g, &o);
  }
  if (rc < 0)
    bench_die("tdl_group_new: %s", tdl_strerror(rc));
  rc = tdl_group_wait(g, TDL_FOREVER);
  bench_end(&sp);
  tdl_group_free(g);
  tdl_tls_config_free(T.server_cfg);
  tdl_tls_config_free(T.client_cfg);
  free(cert);
  free(key);

  if (rc < 0 || T.err[0] < 0 || T.err[1] < 0 || T.received != T.bytes) {
    fprintf(stderr, "tls-bulk: FAILED: received %ld of %ld bytes (server %s, client %s, wait %d)\n", T.received,
            T.bytes, T.err[0] < 0 ? tdl_strerror(T.err[0]) : "ok", T.err[1] < 0 ? tdl_strerror(T.err[1]) : "ok",
            rc);
    return 1;
  }
  double gib = (double)T.bytes / (double)(1L << 30);
  bench_result("treadle", "tls-bulk", &sp,
               "bytes=%ld chunk=%ld tls_version=%#x ktls=%u/%u cpu_s_per_gib=%.3f mb_per_s=%.1f server_cpu_s=%.3f "
               "client_cpu_s=%.3f",
               T.bytes, T.chunk, (unsigned)T.version, T.ktls[0], T.ktls[1], (sp.user_s + sp.sys_s) / gib,
               (double)T.bytes / 1e6 / sp.wall_s, T.cpu_s[0], T.cpu_s[1]);
  return 0;
}

#endif /* TDL_HAVE_TLS */
