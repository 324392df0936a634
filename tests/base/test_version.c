/* SPDX-License-Identifier: MIT */
/* The run-time version agrees with the headers' (src/base/version.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "treadle.h"

static void version_matches_headers(void **state)
{
  (void)state;
  assert_int_equal(tdl_version(), TDL_VERSION_HEX);
  assert_int_equal(TDL_VERSION_HEX >> 16, TDL_VERSION_MAJOR);
  assert_int_equal((TDL_VERSION_HEX >> 8) & 0xff, TDL_VERSION_MINOR);
  assert_int_equal(TDL_VERSION_HEX & 0xff, TDL_VERSION_PATCH);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", TDL_VERSION_MAJOR, TDL_VERSION_MINOR, TDL_VERSION_PATCH);
  assert_string_equal(tdl_version_string(), want);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(version_matches_headers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
