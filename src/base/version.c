/* SPDX-License-Identifier: MIT */
/* The library's version, for programs to check the one they run with. */
#include "base/base.h"

#define STR_(x) #x
#define STR(x) STR_(x)

unsigned tdl_version(void) { return TDL_VERSION_HEX; }

const char *tdl_version_string(void)
{
  return STR(TDL_VERSION_MAJOR) "." STR(TDL_VERSION_MINOR) "." STR(TDL_VERSION_PATCH);
}
