/* SPDX-License-Identifier: MIT */
/* Error names.  treadle returns negative errno values; this only names them. */
#include <string.h>

#include "base/base.h"

/* tdl_strerror must be safe from any thread and return a string that lives
 * forever.  glibc's strerror() may format into a per-thread buffer and
 * translates through the locale; strerrordesc_np (glibc >= 2.32) returns the
 * static English text instead, or NULL for an unknown number.  musl has no
 * strerrordesc_np, and needs none: its strerror() only ever returns
 * constant strings, from a static table or a message catalog that is never
 * unloaded ("No error information" for an unknown number). */
#ifdef __GLIBC__
#define error_text(err) strerrordesc_np(err)
#else
#define error_text(err) strerror(err)
#endif

const char *tdl_strerror(int err)
{
  if (err < 0)
    err = -err;
  if (err == 0)
    return "success";
  const char *s = error_text(err);
  return s ? s : "unknown error";
}
