/* SPDX-License-Identifier: MIT */
/*
 * Formatting into a caller's buffer without stdio, allocation or locks, for
 * text written where printf may not be called: from a signal handler's
 * context, a fork child, the watchdog thread beside a stuck loop, a dump.
 * Each appends to [p, end) and returns the new p, truncating at end.
 */
#ifndef TDL_BASE_FMT_H
#define TDL_BASE_FMT_H

#include "base/base.h"

static inline char *tdl__put_str(char *p, char *end, const char *s)
{
  while (*s && p < end)
    *p++ = *s++;
  return p;
}

static inline char *tdl__put_uint(char *p, char *end, uint64_t v, unsigned base)
{
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  while (n && p < end)
    *p++ = tmp[--n];
  return p;
}

/* ns as milliseconds with one decimal: "312.4 ms". */
static inline char *tdl__put_ms(char *p, char *end, tdl_time_t ns)
{
  p = tdl__put_uint(p, end, (uint64_t)(ns / TDL_MSEC), 10);
  p = tdl__put_str(p, end, ".");
  p = tdl__put_uint(p, end, (uint64_t)(ns % TDL_MSEC / (100 * TDL_USEC)), 10);
  return tdl__put_str(p, end, " ms");
}

#endif
