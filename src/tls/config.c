/* SPDX-License-Identifier: MIT */
/*
 * TLS configurations: an SSL_CTX made from tdl_tls_options, shared by the
 * streams of every loop, swapped whole by a reload, and a client's sessions.
 *
 * Why a library of its own (libtreadle-tls) rather than a part of
 * libtreadle: linking libssl and libcrypto costs every program that loads
 * them a few hundred KiB of mappings and their start-up; a program that
 * never speaks TLS should not pay it, nor need libssl installed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "tls/tls_internal.h"

static void say(const tdl_tls_options *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The failure in words, where the caller asked for them, with OpenSSL's
 * reasons appended. */
static void say(const tdl_tls_options *o, const char *fmt, ...)
{
  if (!o || !o->error || o->error_cap == 0) {
    ERR_clear_error();
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(o->error, o->error_cap, fmt, ap);
  va_end(ap);
  size_t len = n < 0 ? 0 : (size_t)n;
  if (len >= o->error_cap)
    len = o->error_cap - 1;
  if (len + 3 < o->error_cap) {
    size_t mark = len;
    memcpy(o->error + len, " (", 3);
    len += 2;
    if (tdl__tls_errors(o->error, o->error_cap, &len) && len + 2 <= o->error_cap) {
      memcpy(o->error + len, ")", 2);
    } else {
      o->error[mark] = '\0';
    }
  }
}

bool tdl__tls_errors(char *buf, size_t cap, size_t *len)
{
  bool any = false;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    const char *why = ERR_reason_error_string(e);
    char num[32];
    if (!why) {
      snprintf(num, sizeof num, "error %d", ERR_GET_REASON(e));
      why = num;
    }
    if (buf && *len + 1 < cap) {
      int n = snprintf(buf + *len, cap - *len, "%s%s", any ? "; " : "", why);
      if (n > 0)
        *len = *len + (size_t)n >= cap ? cap - 1 : *len + (size_t)n;
    }
    any = true;
  }
  return any;
}

/* Whether path can be read: 0, or -errno with the words said.  OpenSSL's own
 * errors for a missing file are "system lib"; the errno is what a user acts
 * on. */
static int readable(const tdl_tls_options *o, const char *what, const char *path)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    say(o, "%s %s: %s", what, path, strerror(err));
    return -err;
  }
  close(fd);
  return 0;
}

/* The certificate chain and key of o, from memory or files. */
static int load_identity(SSL_CTX *ctx, const tdl_tls_options *o)
{
  if (o->cert_pem) {
    BIO *bio = BIO_new_mem_buf(o->cert_pem, -1);
    X509 *leaf = bio ? PEM_read_bio_X509_AUX(bio, NULL, NULL, NULL) : NULL;
    if (!leaf || SSL_CTX_use_certificate(ctx, leaf) != 1) {
      X509_free(leaf);
      BIO_free(bio);
      say(o, "certificate text: not a PEM certificate");
      return -EINVAL;
    }
    X509_free(leaf);
    X509 *ca;
    while ((ca = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
      if (SSL_CTX_add0_chain_cert(ctx, ca) != 1) {
        X509_free(ca);
        BIO_free(bio);
        say(o, "certificate text: a chain certificate");
        return -ENOMEM;
      }
    }
    ERR_clear_error(); /* the end of the text */
    BIO_free(bio);
  } else if (o->cert_file) {
    int rc = readable(o, "certificate", o->cert_file);
    if (rc < 0)
      return rc;
    if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1) {
      say(o, "certificate %s: not a PEM certificate chain", o->cert_file);
      return -EINVAL;
    }
  }
  if (o->key_pem) {
    BIO *bio = BIO_new_mem_buf(o->key_pem, -1);
    EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (!key || SSL_CTX_use_PrivateKey(ctx, key) != 1) {
      EVP_PKEY_free(key);
      say(o, "key text: not a PEM private key%s", o->cert_pem || o->cert_file ? " matching the certificate" : "");
      return -EINVAL;
    }
    EVP_PKEY_free(key);
  } else if (o->key_file) {
    int rc = readable(o, "key", o->key_file);
    if (rc < 0)
      return rc;
    if (SSL_CTX_use_PrivateKey_file(ctx, o->key_file, SSL_FILETYPE_PEM) != 1) {
      if (o->cert_pem || o->cert_file)
        say(o, "key %s: not a PEM private key, or not the key of certificate %s", o->key_file,
            o->cert_file ? o->cert_file : "(text)");
      else
        say(o, "key %s: not a PEM private key", o->key_file);
      return -EINVAL;
    }
  }
  bool cert = o->cert_pem || o->cert_file, key = o->key_pem || o->key_file;
  if (cert != key) {
    say(o, "a certificate needs its key, and a key its certificate");
    return -EINVAL;
  }
  if (cert && SSL_CTX_check_private_key(ctx) != 1) {
    say(o, "key %s does not match certificate %s", o->key_file ? o->key_file : "(text)",
        o->cert_file ? o->cert_file : "(text)");
    return -EINVAL;
  }
  if (o->role == TDL_TLS_SERVER && !cert) {
    say(o, "a server needs a certificate and its key");
    return -EINVAL;
  }
  return 0;
}

/* "h2,http/1.1" in ALPN's wire format: a length byte before each name. */
static int alpn_wire(const char *list, unsigned char *out, size_t cap, size_t *len)
{
  size_t n = 0;
  const char *p = list;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t l = end ? (size_t)(end - p) : strlen(p);
    if (l == 0 || l > 255 || n + 1 + l > cap)
      return -EINVAL;
    out[n++] = (unsigned char)l;
    memcpy(out + n, p, l);
    n += l;
    p += l + (end ? 1 : 0);
    if (end && !*p)
      return -EINVAL; /* a trailing comma */
  }
  *len = n;
  return n ? 0 : -EINVAL;
}

/* A server's ALPN choice: the first of its own names that the client offers. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned inlen, void *arg)
{
  (void)ssl;
  const unsigned char *ours = arg;
  unsigned char *chosen;
  if (SSL_select_next_proto(&chosen, outlen, ours + 1, ours[0], in, inlen) == OPENSSL_NPN_NEGOTIATED) {
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

/* The server's wire list lives as long as its SSL_CTX: in an ex_data slot
 * whose free function goes with it. */
static void ctx_data_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
  (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
  free(ptr);
}

static int alpn_index = -1;
static pthread_mutex_t alpn_lock = PTHREAD_MUTEX_INITIALIZER;

/* The slot's index, made by the first server with ALPN; without memory for
 * it, by the next one (a failure is not kept for the life of the process). */
static int alpn_index_get(void)
{
  pthread_mutex_lock(&alpn_lock);
  if (alpn_index < 0)
    alpn_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, ctx_data_free);
  int i = alpn_index;
  pthread_mutex_unlock(&alpn_lock);
  return i;
}

/* Whether the kernel may carry TLS records: asked once, of an unconnected
 * TCP socket, which the kernel refuses with ENOENT when it cannot find its
 * `tls` module, and the module itself with ENOTCONN.  When unsure, yes
 * (OpenSSL then tries per connection, as it would without this). */
static bool kernel_has_tls = true;
static pthread_once_t kernel_tls_once = PTHREAD_ONCE_INIT;

static void kernel_tls_probe(void)
{
#ifdef TCP_ULP
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return;
  if (setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof "tls") < 0 && errno == ENOENT)
    kernel_has_tls = false;
  close(fd);
#else
  kernel_has_tls = false;
#endif
}

static bool kernel_tls(void)
{
  pthread_once(&kernel_tls_once, kernel_tls_probe);
  return kernel_has_tls;
}

static int ctx_new(SSL_CTX **out, const tdl_tls_options *o)
{
  for (size_t i = 0; i < sizeof o->reserved / sizeof o->reserved[0]; i++)
    if (o->reserved[i]) {
      say(o, "tdl_tls_options.reserved must be zero");
      return -EINVAL;
    }
  if (o->role != TDL_TLS_CLIENT && o->role != TDL_TLS_SERVER) {
    say(o, "unknown role %d", (int)o->role);
    return -EINVAL;
  }
  int min = o->min_version ? o->min_version : TDL_TLS_VERSION_1_2;
  if (min != TDL_TLS_VERSION_1_2 && min != TDL_TLS_VERSION_1_3) {
    say(o, "min_version 0x%04x: TLS 1.2 (0x0303) or 1.3 (0x0304)", (unsigned)o->min_version);
    return -EINVAL;
  }
  unsigned char wire[256];
  size_t wire_len = 0;
  if (o->alpn && alpn_wire(o->alpn, wire, sizeof wire, &wire_len) < 0) {
    say(o, "ALPN list \"%s\": comma-separated names of 1 to 255 bytes, 255 bytes in all", o->alpn);
    return -EINVAL;
  }
  ERR_clear_error();
  SSL_CTX *ctx = SSL_CTX_new(o->role == TDL_TLS_SERVER ? TLS_server_method() : TLS_client_method());
  if (!ctx) {
    say(o, "SSL_CTX_new");
    return -ENOMEM;
  }
  SSL_CTX_set_min_proto_version(ctx, min);
  /* Renegotiation is refused: it is an old attack surface and nothing of
   * TLS 1.3.  Partial writes and moving buffers: a write returns after each
   * record and may be retried from a copy, as write(2) is.  Released
   * buffers: an idle stream holds none of OpenSSL's 34 KiB of them. */
  uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE;
  /* Kernel TLS only where the kernel can take it: elsewhere OpenSSL would
   * ask it in vain twice per connection (two failing setsockopt calls), and
   * may read ahead from the first byte of the handshake on, which kTLS's
   * receiving forbids until the keys change: the client's last flight and
   * first request then come in one read instead of two per record. */
  bool ktls = !o->no_ktls && kernel_tls();
#ifdef SSL_OP_ENABLE_KTLS
  if (ktls)
    opts |= SSL_OP_ENABLE_KTLS;
#endif
  if (!ktls)
    SSL_CTX_set_read_ahead(ctx, 1);
  if (o->no_resumption)
    opts |= SSL_OP_NO_TICKET;
  SSL_CTX_set_options(ctx, opts);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                            SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  int rc = load_identity(ctx, o);
  if (rc < 0)
    goto fail;
  if (o->ca_file) {
    rc = readable(o, "CA file", o->ca_file);
    if (rc < 0)
      goto fail;
    if (SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL) != 1) {
      say(o, "CA file %s: no PEM certificates", o->ca_file);
      rc = -EINVAL;
      goto fail;
    }
  }
  if (o->role == TDL_TLS_CLIENT) {
    if (!o->insecure) {
      if (!o->ca_file && SSL_CTX_set_default_verify_paths(ctx) != 1) {
        say(o, "the system's trust store");
        rc = -EINVAL;
        goto fail;
      }
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    if (wire_len && SSL_CTX_set_alpn_protos(ctx, wire, (unsigned)wire_len) != 0) {
      say(o, "ALPN");
      rc = -ENOMEM;
      goto fail;
    }
    if (!o->no_resumption) {
      SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
      SSL_CTX_sess_set_new_cb(ctx, tdl__tls_new_session);
    }
  } else {
    static const unsigned char sid[] = "treadle";
    SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
    if (o->no_resumption) {
      /* TLS 1.3 sends tickets even with SSL_OP_NO_TICKET (stateful ones,
       * session IDs that this cache, off, would never find): two useless
       * records per handshake for the client to decrypt and keep. */
      SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
      SSL_CTX_set_num_tickets(ctx, 0);
    }
    if (o->ca_file) {
      STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(o->ca_file);
      if (names)
        SSL_CTX_set_client_CA_list(ctx, names);
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    if (wire_len) {
      int index = alpn_index_get();
      unsigned char *copy = malloc(wire_len + 1);
      /* The slot frees the copy with the SSL_CTX: a copy it could not take
       * (no memory for the slot) would be lost. */
      if (index < 0 || !copy || !SSL_CTX_set_ex_data(ctx, index, copy)) {
        free(copy);
        say(o, "ALPN: no memory");
        rc = -ENOMEM;
        goto fail;
      }
      copy[0] = (unsigned char)wire_len; /* fits: alpn_wire allows 255 */
      memcpy(copy + 1, wire, wire_len);
      SSL_CTX_set_alpn_select_cb(ctx, alpn_select, copy);
    }
  }
  ERR_clear_error();
  *out = ctx;
  return 0;
fail:
  SSL_CTX_free(ctx);
  return rc;
}

int tdl_tls_config_new(tdl_tls_config **out, const tdl_tls_options *opts)
{
  static const tdl_tls_options none;
  if (!out)
    return -EINVAL;
  *out = NULL;
  const tdl_tls_options *o = opts ? opts : &none;
  if (o->error && o->error_cap)
    o->error[0] = '\0';
  if (o->alpn && strlen(o->alpn) > 255) {
    say(o, "ALPN list longer than 255 bytes");
    return -EINVAL;
  }
  tdl_tls_config *cfg = calloc(1, sizeof *cfg);
  if (!cfg) {
    say(o, "no memory");
    return -ENOMEM;
  }
  int rc = ctx_new(&cfg->ctx, o);
  if (rc < 0) {
    free(cfg);
    return rc;
  }
  atomic_init(&cfg->refs, 1);
  cfg->role = o->role;
  cfg->verify = !o->insecure;
  cfg->resumption = !o->no_resumption;
  /* Read once here, not per stream: a getenv per connection is a scan of
   * the environment on the accept path. */
  const char *bio = getenv("TREADLE_TLS_BIO");
  cfg->socket_bio = bio && strcmp(bio, "socket") == 0;
  pthread_mutex_init(&cfg->lock, NULL);
  *out = cfg;
  return 0;
}

int tdl_tls_config_reload(tdl_tls_config *cfg, const tdl_tls_options *opts)
{
  static const tdl_tls_options none;
  const tdl_tls_options *o = opts ? opts : &none;
  if (o->error && o->error_cap)
    o->error[0] = '\0';
  if (!cfg)
    return -EINVAL;
  if (o->role != cfg->role) {
    say(o, "a reload keeps the role");
    return -EINVAL;
  }
  SSL_CTX *ctx;
  int rc = ctx_new(&ctx, o);
  if (rc < 0)
    return rc;
  pthread_mutex_lock(&cfg->lock);
  SSL_CTX *old = cfg->ctx;
  cfg->ctx = ctx;
  cfg->verify = !o->insecure;
  cfg->resumption = !o->no_resumption;
  pthread_mutex_unlock(&cfg->lock);
  /* Streams made from old hold references of their own. */
  SSL_CTX_free(old);
  return 0;
}

void tdl__tls_config_ref(tdl_tls_config *cfg)
{
  atomic_fetch_add_explicit(&cfg->refs, 1, memory_order_relaxed);
}

void tdl__tls_config_unref(tdl_tls_config *cfg)
{
  if (atomic_fetch_sub_explicit(&cfg->refs, 1, memory_order_acq_rel) != 1)
    return;
  for (size_t i = 0; i < TDL__TLS_SESSIONS; i++) {
    free(cfg->sessions[i].name);
    SSL_SESSION_free(cfg->sessions[i].sess);
  }
  SSL_CTX_free(cfg->ctx);
  pthread_mutex_destroy(&cfg->lock);
  free(cfg);
}

void tdl_tls_config_free(tdl_tls_config *cfg)
{
  if (cfg)
    tdl__tls_config_unref(cfg);
}

SSL *tdl__tls_config_ssl(tdl_tls_config *cfg)
{
  pthread_mutex_lock(&cfg->lock);
  SSL *ssl = SSL_new(cfg->ctx);
  pthread_mutex_unlock(&cfg->lock);
  return ssl;
}

void tdl__tls_session_resume(tdl_tls_config *cfg, SSL *ssl, const char *name)
{
  if (!cfg->resumption)
    return;
  pthread_mutex_lock(&cfg->lock);
  for (size_t i = 0; i < TDL__TLS_SESSIONS; i++) {
    if (cfg->sessions[i].name && strcmp(cfg->sessions[i].name, name) == 0) {
      SSL_SESSION *sess = cfg->sessions[i].sess;
      if (SSL_SESSION_is_resumable(sess))
        SSL_set_session(ssl, sess);
      break;
    }
  }
  pthread_mutex_unlock(&cfg->lock);
}

void tdl__tls_session_keep(tdl_tls_config *cfg, const char *name, SSL_SESSION *sess)
{
  pthread_mutex_lock(&cfg->lock);
  size_t slot = TDL__TLS_SESSIONS;
  for (size_t i = 0; i < TDL__TLS_SESSIONS; i++)
    if (cfg->sessions[i].name && strcmp(cfg->sessions[i].name, name) == 0)
      slot = i;
  char *copy = NULL;
  if (slot == TDL__TLS_SESSIONS) {
    /* Round robin: a client of more servers than this keeps the latest. */
    copy = strdup(name);
    if (!copy) {
      pthread_mutex_unlock(&cfg->lock);
      SSL_SESSION_free(sess);
      return;
    }
    slot = cfg->next_session++ % TDL__TLS_SESSIONS;
    free(cfg->sessions[slot].name);
    cfg->sessions[slot].name = copy;
  }
  SSL_SESSION *old = cfg->sessions[slot].sess;
  cfg->sessions[slot].sess = sess;
  pthread_mutex_unlock(&cfg->lock);
  SSL_SESSION_free(old);
}
