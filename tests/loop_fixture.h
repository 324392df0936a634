/* SPDX-License-Identifier: MIT */
/*
 * The fixture the fiber-level tests share: a fresh loop, L, for every test,
 * freed (and asserted idle: tdl_loop_free fails while anything is left) after
 * it.  Include once, after helpers.h; use setup/teardown with
 * cmocka_unit_test_setup_teardown.
 */
#ifndef TDL_TEST_LOOP_FIXTURE_H
#define TDL_TEST_LOOP_FIXTURE_H

#include "helpers.h"

static tdl_loop *L;

static int setup(void **state)
{
  (void)state;
  L = t_loop_new();
  return 0;
}

static int teardown(void **state)
{
  (void)state;
  assert_int_equal(tdl_loop_free(L), 0);
  return 0;
}

/* Start fn(arg) as a detached fiber of L.  The handle stays usable (e.g. for
 * tdl_fiber_cancel) until the fiber finishes. */
__attribute__((unused)) static tdl_fiber_t go(tdl_fiber_fn fn, void *arg)
{
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, fn, arg, NULL), 0);
  assert_int_equal(tdl_fiber_detach(L, h), 0);
  return h;
}

#endif /* TDL_TEST_LOOP_FIXTURE_H */
