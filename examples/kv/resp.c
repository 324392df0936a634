/* SPDX-License-Identifier: MIT */
/* RESP2 requests, parsed in place (resp.h). */
#include "resp.h"

#include <stdbool.h>
#include <string.h>

/* A decimal count at p (up to the "\r\n" at or before end): -1 if malformed,
 * -2 if the line is not complete yet. */
static long long line_number(const char *p, const char *end, const char **next)
{
  const char *cr = memchr(p, '\r', (size_t)(end - p));
  if (!cr || cr + 1 >= end)
    return -2;
  if (cr[1] != '\n' || cr == p)
    return -1;
  long long v = 0;
  bool neg = *p == '-';
  if (p + neg == cr)
    return -1; /* "-" alone is no number */
  if (p[neg] == '0' && (cr - p > 1))
    return -1; /* leading zeros, or "-0": Redis's string2ll refuses them (and so
                * a count of 0 written with 126 zeros no longer reads as 0) */
  for (const char *q = p + neg; q < cr; q++) {
    if (*q < '0' || *q > '9' || v > 100000000000LL)
      return -1;
    v = v * 10 + (*q - '0');
  }
  *next = cr + 2;
  return neg ? -v : v;
}

static long inline_command(const char *buf, size_t len, resp_cmd *cmd, const char **err)
{
  const char *nl = memchr(buf, '\n', len);
  if (!nl)
    return len > 64 * 1024 ? (*err = "Protocol error: too big inline request", -1) : 0;
  const char *end = nl > buf && nl[-1] == '\r' ? nl - 1 : nl;
  cmd->argc = 0;
  for (const char *p = buf; p < end;) {
    while (p < end && (*p == ' ' || *p == '\t'))
      p++;
    const char *w = p;
    while (p < end && *p != ' ' && *p != '\t')
      p++;
    if (p > w) {
      if (cmd->argc == RESP_MAX_ARGS)
        return (*err = "Protocol error: too many arguments", -1);
      cmd->argv[cmd->argc++] = (resp_arg){w, (size_t)(p - w)};
    }
  }
  return (long)(nl + 1 - buf);
}

long resp_parse(const char *buf, size_t len, size_t max_bulk, resp_cmd *cmd, size_t *want, const char **err)
{
  if (want)
    *want = 0;
  if (len == 0)
    return 0;
  if (buf[0] != '*')
    return inline_command(buf, len, cmd, err);
  const char *end = buf + len, *p;
  long long n = line_number(buf + 1, end, &p);
  if (n == -2)
    return 0;
  if (n < 0 || n > RESP_MAX_ARGS)
    return (*err = "Protocol error: invalid multibulk length", -1);
  cmd->argc = 0;
  for (long long i = 0; i < n; i++) {
    if (p >= end)
      return 0;
    if (*p != '$')
      return (*err = "Protocol error: expected '$', got something else", -1);
    long long blen = line_number(p + 1, end, &p);
    if (blen == -2)
      return 0;
    if (blen < 0 || (size_t)blen > max_bulk)
      return (*err = "Protocol error: invalid bulk length", -1);
    if ((size_t)(end - p) < (size_t)blen + 2) {
      if (want) /* a lower bound: this argument, not the ones after it */
        *want = (size_t)(p - buf) + (size_t)blen + 2;
      return 0;
    }
    if (p[blen] != '\r' || p[blen + 1] != '\n')
      return (*err = "Protocol error: bulk string without its CRLF", -1);
    cmd->argv[cmd->argc++] = (resp_arg){p, (size_t)blen};
    p += blen + 2;
  }
  return (long)(p - buf);
}
