/* SPDX-License-Identifier: MIT */
/* base/list.h: the one intrusive list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/list.h"

typedef struct item {
  int v;
  tdl__list link;
} item;

static int values(tdl__list *head, int *out, int max)
{
  int n = 0;
  TDL__LIST_FOREACH(p, head) {
    if (n < max)
      out[n] = TDL__CONTAINER_OF(p, item, link)->v;
    n++;
  }
  return n;
}

static void zero_is_empty_and_empty_is_zero(void **state)
{
  (void)state;
  tdl__list h = {NULL, NULL};
  item a = {1, {NULL, NULL}};
  assert_true(tdl__list_empty(&h));
  assert_null(tdl__list_pop(&h));
  tdl__list_push(&h, &a.link);
  assert_false(tdl__list_empty(&h));
  assert_true(tdl__list_linked(&a.link));
  tdl__list_remove(&a.link);
  /* The last node out leaves a zeroed head (so an empty object may be
   * copied) and a zeroed node. */
  assert_null(h.next);
  assert_null(h.prev);
  assert_false(tdl__list_linked(&a.link));
}

static void fifo_front_and_remove_anywhere(void **state)
{
  (void)state;
  tdl__list h = {NULL, NULL};
  item it[5];
  for (int i = 0; i < 5; i++) {
    it[i] = (item){i, {NULL, NULL}};
    tdl__list_push(&h, &it[i].link);
  }
  item z = {9, {NULL, NULL}};
  tdl__list_push_front(&h, &z.link);
  int v[8];
  assert_int_equal(values(&h, v, 8), 6);
  assert_int_equal(v[0], 9);
  assert_int_equal(v[5], 4);
  tdl__list_remove(&it[2].link); /* middle */
  tdl__list_remove(&it[4].link); /* last */
  tdl__list_remove(&z.link);     /* first */
  assert_int_equal(values(&h, v, 8), 3);
  assert_int_equal(v[0], 0);
  assert_int_equal(v[1], 1);
  assert_int_equal(v[2], 3);
  item *first = TDL__LIST_ENTRY(tdl__list_pop(&h), item, link);
  assert_int_equal(first->v, 0);
  assert_null(TDL__LIST_ENTRY((tdl__list *)NULL, item, link));
}

static void splice_moves_everything(void **state)
{
  (void)state;
  tdl__list a = {NULL, NULL}, b = {NULL, NULL};
  item it[4];
  for (int i = 0; i < 4; i++) {
    it[i] = (item){i, {NULL, NULL}};
    tdl__list_push(i < 2 ? &a : &b, &it[i].link);
  }
  tdl__list_splice(&a, &b);
  assert_true(tdl__list_empty(&b));
  int v[4];
  assert_int_equal(values(&a, v, 4), 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(v[i], i);
  tdl__list c = {NULL, NULL};
  tdl__list_splice(&c, &a); /* into an empty list */
  assert_true(tdl__list_empty(&a));
  assert_int_equal(values(&c, v, 4), 4);
  tdl__list_splice(&c, &a); /* from an empty list */
  assert_int_equal(values(&c, v, 4), 4);
  /* Removal needs no head, even in a spliced list. */
  tdl__list_remove(&it[0].link);
  assert_int_equal(tdl__list_first(&c), &it[1].link);
}

typedef struct walk {
  item *it;
  int seen[16];
  int n;
} walk;

/* Visiting 1 removes 1 and 2; visiting 3 adds 5. */
static void visit(tdl__list *node, void *ctx)
{
  walk *w = ctx;
  item *x = TDL__CONTAINER_OF(node, item, link);
  w->seen[w->n++] = x->v;
  if (x->v == 1) {
    tdl__list_remove(&w->it[1].link);
    tdl__list_remove(&w->it[2].link);
  }
}

static void walk_survives_removal(void **state)
{
  (void)state;
  tdl__list h = {NULL, NULL};
  item it[5];
  for (int i = 0; i < 5; i++) {
    it[i] = (item){i, {NULL, NULL}};
    tdl__list_push(&h, &it[i].link);
  }
  walk w = {.it = it};
  tdl__list_walk(&h, visit, &w);
  assert_int_equal(w.n, 4);
  assert_int_equal(w.seen[0], 0);
  assert_int_equal(w.seen[1], 1);
  assert_int_equal(w.seen[2], 3);
  assert_int_equal(w.seen[3], 4);
  /* Removing everything, the marker included, leaves a zeroed head. */
  tdl__list_remove(&it[0].link);
  tdl__list_remove(&it[3].link);
  tdl__list_remove(&it[4].link);
  assert_null(h.next);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(zero_is_empty_and_empty_is_zero),
      cmocka_unit_test(fifo_front_and_remove_anywhere),
      cmocka_unit_test(splice_moves_everything),
      cmocka_unit_test(walk_survives_removal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
