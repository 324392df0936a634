/* SPDX-License-Identifier: MIT */
/*
 * The Redis protocol (RESP2) as far as a server reads it: a command is an
 * array of bulk strings ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), or an inline
 * line of words ("PING\r\n", what telnet sends).  Parsing happens in place
 * on the reader's buffer: the arguments point into it.
 */
#ifndef KV_RESP_H
#define KV_RESP_H

#include <stddef.h>

enum { RESP_MAX_ARGS = 1024 };

typedef struct resp_arg {
  const char *p;
  size_t len;
} resp_arg;

typedef struct resp_cmd {
  resp_arg argv[RESP_MAX_ARGS];
  int argc;
} resp_cmd;

/* Parse one command from buf[0..len).  Returns the bytes it takes (> 0),
 * 0 when more bytes are needed (*want, if not NULL, says how many in all,
 * when the header told), or -1 for a protocol error (*err names it, in the
 * words Redis uses).  Arguments point into buf. */
long resp_parse(const char *buf, size_t len, size_t max_bulk, resp_cmd *cmd, size_t *want, const char **err);

#endif
