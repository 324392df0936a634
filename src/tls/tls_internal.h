/* SPDX-License-Identifier: MIT */
/*
 * What the files of libtreadle-tls share: the configuration (config.c) that
 * streams (stream.c) take their SSL_CTX and their client sessions from.
 */
#ifndef TDL_TLS_INTERNAL_H
#define TDL_TLS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <openssl/ssl.h>

#include <treadle.h>
#include <treadle/tls.h>

/* A client keeps the last session of this many server names. */
#define TDL__TLS_SESSIONS 32

struct tdl_tls_config {
  /* The caller's reference and one per stream. */
  atomic_int refs;
  tdl_tls_role role;
  bool verify;
  bool resumption;
  /* TREADLE_TLS_BIO=socket: records through OpenSSL's socket BIO after the
   * handshake too, to compare the two record paths (stream.c). */
  bool socket_bio;
  /* Guards ctx (swapped by a reload) and the sessions. */
  pthread_mutex_t lock;
  /* The current SSL_CTX.  A stream's SSL holds its own reference to the
   * SSL_CTX it was made from, so a reload only drops the configuration's. */
  SSL_CTX *ctx;
  struct {
    char *name;
    SSL_SESSION *sess;
  } sessions[TDL__TLS_SESSIONS];
  unsigned next_session;
};

/* Take a reference, and give one up (the last frees cfg). */
void tdl__tls_config_ref(tdl_tls_config *cfg);
void tdl__tls_config_unref(tdl_tls_config *cfg);

/* A new SSL of cfg's current SSL_CTX (NULL: no memory). */
SSL *tdl__tls_config_ssl(tdl_tls_config *cfg);

/* A client's session for name: set on ssl when one is kept. */
void tdl__tls_session_resume(tdl_tls_config *cfg, SSL *ssl, const char *name);
/* Keep sess (the reference is taken over) as name's session. */
void tdl__tls_session_keep(tdl_tls_config *cfg, const char *name, SSL_SESSION *sess);

/* The stream's side of a new session (SSL_CTX_sess_set_new_cb). */
int tdl__tls_new_session(SSL *ssl, SSL_SESSION *sess);

/* Append OpenSSL's error queue to buf[*len..cap), "; "-separated, and empty
 * it.  Returns whether anything was there. */
bool tdl__tls_errors(char *buf, size_t cap, size_t *len);

#endif /* TDL_TLS_INTERNAL_H */
