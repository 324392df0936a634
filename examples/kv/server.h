/* SPDX-License-Identifier: MIT */
/* kv: a Redis-protocol server (server.c). */
#ifndef KV_SERVER_H
#define KV_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <treadle.h>

typedef struct kv_config {
  size_t max_request;      /* the largest argument (Redis: 512 MB) */
  tdl_time_t idle_timeout; /* close a silent connection after this (0: never) */
  tdl_time_t io_timeout;   /* a client that does not read its answers */
  struct tdl_tls_config *tls;   /* TLS: a server configuration of libtreadle-tls (tls.h), in a build
                                   with it (KV_TLS); NULL: plain TCP */
  tdl_time_t handshake_timeout; /* TLS: a client that has not ended its handshake by then is closed */
} kv_config;

typedef struct kv_stats {
  uint64_t commands;
  long connections, waiting;
} kv_stats;

/* Accept on lfd and serve each connection in a fiber of its own, until the
 * fiber running this is cancelled (returns 0) or accepting fails for good
 * (a negative errno value; running out of fds, memory or socket buffers is
 * waited out, not returned). */
int kv_serve(int lfd, const kv_config *cfg);
const kv_stats *kv_stats_get(void);

#endif
