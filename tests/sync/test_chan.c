/* SPDX-License-Identifier: MIT */
/* Channels and select: delivery, order, close, destroy, deadlines,
 * cancellation, misuse, fairness, and a randomized run against a model. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "loop_fixture.h"

/* ---- basic delivery ---- */

static tdl_chan *C;

static void *count_sender(void *arg)
{
  int n = (int)(intptr_t)arg;
  for (int i = 0; i < n; i++)
    assert_int_equal(tdl_chan_send(C, &i, TDL_FOREVER), 0);
  assert_int_equal(tdl_chan_close(C), 0);
  return NULL;
}

static void *count_receiver(void *arg)
{
  int n = (int)(intptr_t)arg, v;
  for (int i = 0; i < n; i++) {
    assert_int_equal(tdl_chan_recv(C, &v, TDL_FOREVER), 0);
    assert_int_equal(v, i);
  }
  assert_int_equal(tdl_chan_recv(C, &v, TDL_FOREVER), -EPIPE);
  assert_int_equal(tdl_chan_recv(C, &v, TDL_FOREVER), -EPIPE);
  return NULL;
}

static void delivery_in_order(size_t cap)
{
  assert_int_equal(tdl_chan_new(&C, sizeof(int), cap), 0);
  go(count_receiver, (void *)1000);
  go(count_sender, (void *)1000);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_chan_free(C);
}

static void unbuffered_delivery(void **state)
{
  (void)state;
  delivery_in_order(0);
}

static void buffered_delivery(void **state)
{
  (void)state;
  delivery_in_order(7);
}

/* ---- buffered: room, try, senders waiting for room ---- */

static void *blocked_sender(void *arg)
{
  int v = (int)(intptr_t)arg;
  assert_int_equal(tdl_chan_send(C, &v, TDL_FOREVER), 0);
  return NULL;
}

static void *drain_checker(void *arg)
{
  (void)arg;
  int v;
  tdl_fiber_yield(); /* let both senders queue up behind the full buffer */
  int want[] = {1, 2, 10, 20};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(tdl_chan_recv(C, &v, TDL_FOREVER), 0);
    assert_int_equal(v, want[i]);
  }
  assert_int_equal(tdl_chan_try_recv(C, &v), -EAGAIN);
  return NULL;
}

static void buffered_room_and_fifo_senders(void **state)
{
  (void)state;
  assert_int_equal(tdl_chan_new(&C, sizeof(int), 2), 0);
  int v = 1;
  assert_int_equal(tdl_chan_try_send(C, &v), 0); /* works outside fibers */
  v = 2;
  assert_int_equal(tdl_chan_try_send(C, &v), 0);
  v = 3;
  assert_int_equal(tdl_chan_try_send(C, &v), -EAGAIN);
  assert_int_equal(tdl_chan_len(C), 2);
  assert_int_equal(tdl_chan_cap(C), 2);
  go(blocked_sender, (void *)10);
  go(blocked_sender, (void *)20);
  go(drain_checker, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_chan_free(C);
}

/* ---- close ---- */

static int close_results[4];

static void *recv_and_report(void *arg)
{
  int v;
  close_results[(intptr_t)arg] = tdl_chan_recv(C, &v, TDL_FOREVER);
  return NULL;
}

static void *send_and_report(void *arg)
{
  int v = 5;
  close_results[(intptr_t)arg] = tdl_chan_send(C, &v, TDL_FOREVER);
  return NULL;
}

static void *closer(void *arg)
{
  (void)arg;
  tdl_fiber_yield();
  assert_int_equal(tdl_chan_close(C), 0);
  assert_int_equal(tdl_chan_close(C), -EPIPE); /* double close */
  int v = 1;
  assert_int_equal(tdl_chan_send(C, &v, TDL_FOREVER), -EPIPE);
  assert_int_equal(tdl_chan_try_send(C, &v), -EPIPE);
  return NULL;
}

static void close_wakes_everyone(void **state)
{
  (void)state;
  /* Receivers on one channel... */
  assert_int_equal(tdl_chan_new(&C, sizeof(int), 0), 0);
  go(recv_and_report, (void *)0);
  go(recv_and_report, (void *)1);
  go(closer, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(close_results[0], -EPIPE);
  assert_int_equal(close_results[1], -EPIPE);
  tdl_chan_free(C);
  /* ...senders on another: their values are not delivered. */
  assert_int_equal(tdl_chan_new(&C, sizeof(int), 0), 0);
  go(send_and_report, (void *)2);
  go(closer, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(close_results[2], -EPIPE);
  int v;
  assert_int_equal(tdl_chan_try_recv(C, &v), -EPIPE);
  tdl_chan_free(C);
}

static void closed_buffered_channel_drains_first(void **state)
{
  (void)state;
  assert_int_equal(tdl_chan_new(&C, sizeof(int), 4), 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_chan_try_send(C, &i), 0);
  assert_int_equal(tdl_chan_close(C), 0);
  int v;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(tdl_chan_try_recv(C, &v), 0);
    assert_int_equal(v, i);
  }
  assert_int_equal(tdl_chan_try_recv(C, &v), -EPIPE);
  tdl_chan_free(C);
}

/* ---- freeing a channel in use ---- */

/* Freeing or destroying a channel that fibers wait on fails with -EBUSY
 * and changes nothing (treadle.h, Teardown): the waiters still wait, and a
 * close lets them go; then the free succeeds. */
static void *destroyer(void *arg)
{
  (void)arg;
  tdl_fiber_yield();
  assert_int_equal(tdl_chan_free(C), -EBUSY); /* two receivers wait on it */
  int v = 5;
  assert_int_equal(tdl_chan_send(C, &v, TDL_FOREVER), 0); /* still works: one receiver takes it */
  assert_int_equal(tdl_chan_free(C), -EBUSY);
  assert_int_equal(tdl_chan_close(C), 0); /* the other wakes with -EPIPE, and leaves it alone */
  assert_int_equal(tdl_chan_free(C), 0);
  C = NULL;
  return NULL;
}

static void free_in_use_is_refused(void **state)
{
  (void)state;
  memset(close_results, 0, sizeof close_results);
  assert_int_equal(tdl_chan_new(&C, sizeof(int), 0), 0);
  go(recv_and_report, (void *)0);
  go(recv_and_report, (void *)1);
  go(destroyer, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(close_results[0], 0);
  assert_int_equal(close_results[1], -EPIPE);
  assert_null(C);
}

/* A waiter whose wait was ended by a cancel (or its deadline) stays
 * queued until its fiber runs again: until then the channel in the
 * caller's memory is still in use. */
static tdl_chan mem_ch;
static tdl_fiber_t mem_waiter;
static void *cancelled_waiter(void *arg)
{
  (void)arg;
  int v;
  assert_int_equal(tdl_chan_recv(&mem_ch, &v, TDL_FOREVER), -ECANCELED);
  return NULL;
}

static void *mem_destroyer(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_chan_destroy(&mem_ch), -EBUSY); /* parked on it */
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), mem_waiter), 0);
  assert_int_equal(tdl_chan_destroy(&mem_ch), -EBUSY); /* woken, not yet gone */
  tdl_fiber_yield();
  assert_int_equal(tdl_chan_destroy(&mem_ch), 0);
  return NULL;
}

static void destroy_waits_for_woken_waiters(void **state)
{
  (void)state;
  assert_int_equal(tdl_chan_init(&mem_ch, sizeof(int), 0, NULL, 0), 0);
  mem_waiter = go(cancelled_waiter, NULL);
  go(mem_destroyer, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

/* ---- deadlines and cancellation ---- */

static void *timing_out(void *arg)
{
  (void)arg;
  int v = 9;
  assert_int_equal(tdl_chan_recv(C, &v, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  assert_int_equal(tdl_chan_send(C, &v, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  assert_int_equal(tdl_chan_send(C, &v, 0), -ETIMEDOUT); /* deadline past: no wait */
  /* The channel is still usable: nothing stale is left in its queues. */
  assert_int_equal(tdl_chan_try_recv(C, &v), -EAGAIN);
  assert_int_equal(tdl_chan_try_send(C, &v), -EAGAIN);
  return NULL;
}

static void deadlines(void **state)
{
  (void)state;
  assert_int_equal(tdl_chan_new(&C, sizeof(int), 0), 0);
  go(timing_out, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_chan_free(C);
}

static tdl_fiber_t victim;
static void *cancelled_sender(void *arg)
{
  int v = 77;
  *(int *)arg = tdl_chan_send(C, &v, TDL_FOREVER);
  return NULL;
}

static void *cancel_then_receive(void *arg)
{
  (void)arg;
  tdl_fiber_yield(); /* the sender is parked now */
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), victim), 0);
  int v = 0;
  /* The cancelled sender is still queued until it runs, but its value must
   * not be taken. */
  assert_int_equal(tdl_chan_try_recv(C, &v), -EAGAIN);
  assert_int_equal(v, 0);
  return NULL;
}

static void cancelled_sender_delivers_nothing(void **state)
{
  (void)state;
  int rc = 0;
  assert_int_equal(tdl_chan_new(&C, sizeof(int), 0), 0);
  assert_int_equal(tdl_fiber_spawn(&victim, L, cancelled_sender, &rc, NULL), 0);
  tdl_fiber_detach(L, victim);
  go(cancel_then_receive, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(rc, -ECANCELED);
  tdl_chan_free(C);
}

/* ---- misuse ---- */

static void bad_arguments(void **state)
{
  (void)state;
  tdl_chan *ch = (tdl_chan *)1;
  assert_int_equal(tdl_chan_new(&ch, 0, 4), -EINVAL);
  assert_null(ch);
  assert_int_equal(tdl_chan_new(&ch, 8, SIZE_MAX / 4), -EINVAL); /* overflow */
  assert_int_equal(tdl_chan_new(&ch, SIZE_MAX, 2), -EINVAL);
  assert_int_equal(tdl_chan_new(&ch, 1, TDL_CHAN_MAX_BYTES + 1), -EINVAL);
  tdl_chan m;
  char buf[16];
  assert_int_equal(tdl_chan_init(&m, 4, 8, buf, sizeof buf), -EINVAL); /* too small */
  assert_int_equal(tdl_chan_init(&m, 4, 4, NULL, 16), -EINVAL);
  assert_int_equal(tdl_chan_init(&m, 4, 4, buf, sizeof buf), 0);
  assert_int_equal(tdl_chan_init(&m, 4, 0, NULL, 0), 0);
  int v = 1;
  /* Outside a fiber the blocking forms refuse; the try_ forms work. */
  assert_int_equal(tdl_chan_send(&m, &v, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_chan_recv(&m, &v, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_chan_try_recv(&m, &v), -EAGAIN);
  tdl_select_op op = {.kind = TDL_SELECT_RECV, .ch = &m, .val = &v};
  assert_int_equal(tdl_select(&op, 1, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_select(&op, 1, 0), -EPERM); /* a past deadline is still a blocking call */
  assert_int_equal(tdl_try_select(&op, 1), -EAGAIN);
  /* The teardown verb must match how the channel was made. */
  assert_int_equal(tdl_chan_free(&m), -EINVAL);
  assert_int_equal(tdl_chan_destroy(&m), 0);
  assert_int_equal(tdl_chan_free(NULL), 0);
  assert_int_equal(tdl_chan_destroy(NULL), -EINVAL);
  tdl_chan *owned;
  assert_int_equal(tdl_chan_new(&owned, 4, 1), 0);
  assert_int_equal(tdl_chan_destroy(owned), -EINVAL);
  assert_int_equal(tdl_chan_free(owned), 0);
}

static void select_misuse(void **state)
{
  (void)state;
  tdl_chan *a, *b;
  assert_int_equal(tdl_chan_new(&a, sizeof(int), 1), 0);
  assert_int_equal(tdl_chan_new(&b, sizeof(int), 1), 0);
  int v = 0;
  /* No clause at all: nothing is ready; with no deadline either, nothing could
   * ever end the wait. */
  assert_int_equal(tdl_try_select(NULL, 0), -EAGAIN);
  assert_int_equal(tdl_select(NULL, 0, TDL_FOREVER), -EINVAL);
  assert_int_equal(tdl_select(NULL, 1, 0), -EINVAL);
  tdl_select_op one = {.kind = TDL_SELECT_RECV, .ch = a, .val = &v, .result = 0};
  assert_int_equal(tdl_try_select(&one, 0), -EAGAIN);
  tdl_select_op dup[2] = {{.kind = TDL_SELECT_RECV, .ch = a, .val = &v, .result = 0}, {.kind = TDL_SELECT_RECV, .ch = a, .val = &v, .result = 0}};
  assert_int_equal(tdl_try_select(dup, 2), -EINVAL);
  assert_int_equal(tdl_select(dup, 2, 0), -EINVAL);
  tdl_select_op bad[1] = {{.kind = 9, .ch = a, .val = &v, .result = 0}};
  assert_int_equal(tdl_try_select(bad, 1), -EINVAL);
  /* Same channel, both directions: allowed. */
  tdl_select_op both[2] = {{.kind = TDL_SELECT_RECV, .ch = a, .val = &v, .result = 0}, {.kind = TDL_SELECT_SEND, .ch = a, .val = &v, .result = 0}};
  assert_int_equal(tdl_try_select(both, 2), 1); /* only the send is ready */
  /* A NULL channel is never ready. */
  tdl_select_op off[2] = {{.kind = TDL_SELECT_RECV, .ch = NULL, .val = &v, .result = 0}, {.kind = TDL_SELECT_RECV, .ch = b, .val = &v, .result = 0}};
  assert_int_equal(tdl_try_select(off, 2), -EAGAIN);
  tdl_chan_free(a);
  tdl_chan_free(b);
}

/* ---- select ---- */

static tdl_chan *S[20];

static void *select_waiter(void *arg)
{
  (void)arg;
  int v = -1;
  tdl_select_op ops[20];
  for (int i = 0; i < 20; i++)
    ops[i] = (tdl_select_op){.kind = TDL_SELECT_RECV, .ch = S[i], .val = &v, .result = 1};
  int r = tdl_select(ops, 20, TDL_FOREVER); /* > 16 clauses: heap records */
  assert_int_equal(r, 13);
  assert_int_equal(ops[13].result, 0);
  assert_int_equal(v, 1313);
  /* With a deadline and nothing coming. */
  assert_int_equal(tdl_select(ops, 3, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  /* A closed channel completes its clause with -EPIPE. */
  tdl_chan_close(S[2]);
  assert_int_equal(tdl_select(ops, 3, TDL_FOREVER), 2);
  assert_int_equal(ops[2].result, -EPIPE);
  return NULL;
}

static void *select_feeder(void *arg)
{
  (void)arg;
  tdl_fiber_yield();
  int v = 1313;
  assert_int_equal(tdl_chan_send(S[13], &v, TDL_FOREVER), 0);
  /* Exactly one operation happened: nothing else was consumed or queued. */
  for (int i = 0; i < 20; i++) {
    int w;
    assert_int_equal(tdl_chan_try_recv(S[i], &w), -EAGAIN);
  }
  return NULL;
}

static void select_waits_for_one(void **state)
{
  (void)state;
  for (int i = 0; i < 20; i++)
    assert_int_equal(tdl_chan_new(&S[i], sizeof(int), 0), 0);
  go(select_waiter, NULL);
  go(select_feeder, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  for (int i = 0; i < 20; i++)
    tdl_chan_free(S[i]);
}

static void select_is_fair(void **state)
{
  (void)state;
  enum { ROUNDS = 30000 };
  tdl_chan *ch[3];
  int counts[3] = {0};
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_chan_new(&ch[i], sizeof(int), 1), 0);
  for (int r = 0; r < ROUNDS; r++) {
    int v = r;
    for (int i = 0; i < 3; i++)
      if (tdl_chan_len(ch[i]) == 0)
        assert_int_equal(tdl_chan_try_send(ch[i], &v), 0);
    tdl_select_op ops[3];
    for (int i = 0; i < 3; i++)
      ops[i] = (tdl_select_op){.kind = TDL_SELECT_RECV, .ch = ch[i], .val = &v, .result = 1};
    int k = tdl_try_select(ops, 3); /* all ready, every time */
    assert_true(k >= 0 && k < 3);
    counts[k]++;
    /* exactly one value was taken */
    assert_int_equal(tdl_chan_len(ch[0]) + tdl_chan_len(ch[1]) + tdl_chan_len(ch[2]), 2);
  }
  for (int i = 0; i < 3; i++)
    assert_true(counts[i] > ROUNDS / 4); /* ~1/3 each; none starved */
  for (int i = 0; i < 3; i++)
    tdl_chan_free(ch[i]);
}

/* ---- randomized against a model ---- */

enum { NCH = 4, NPROD = 12, NCONS = 12, PER = 300 };
static tdl_chan *R[NCH];
static uint64_t rng = 12345;
static unsigned char sent_ok[NPROD][PER];   /* the sender was told 0 */
static unsigned char received[NPROD][PER];  /* times received */
static int last_seq[NCONS][NCH][NPROD];     /* per consumer, channel, producer: increasing */
static tdl_fiber_t prod_h[NPROD];
static int producers_left;

static uint32_t rnd(uint32_t n)
{
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)((rng >> 33) % n);
}

/* One consumer sees each producer's values on one channel in the order they
 * were sent (across consumers, who records first is up to the scheduler). */
static void take(int me, int chn, int val)
{
  int p = val / PER, s = val % PER;
  assert_true(p >= 0 && p < NPROD);
  received[p][s]++;
  assert_int_equal(received[p][s], 1);      /* never duplicated */
  assert_true(s > last_seq[me][chn][p]);    /* never reordered per channel */
  last_seq[me][chn][p] = s;
}

static void *producer(void *arg)
{
  int p = (int)(intptr_t)arg;
  for (int s = 0; s < PER; s++) {
    int v = p * PER + s;
    int chn = (int)rnd(NCH);
    tdl_time_t dl = rnd(4) == 0 ? tdl_after((tdl_time_t)rnd(200) * TDL_USEC) : TDL_FOREVER;
    int r;
    if (rnd(3) == 0) {
      int other = (chn + 1) % NCH;
      tdl_select_op ops[2] = {{.kind = TDL_SELECT_SEND, .ch = R[chn], .val = &v, .result = 1}, {.kind = TDL_SELECT_SEND, .ch = R[other], .val = &v, .result = 1}};
      r = tdl_select(ops, 2, dl);
      if (r >= 0)
        r = ops[r].result;
    } else {
      r = tdl_chan_send(R[chn], &v, dl);
    }
    if (r == 0)
      sent_ok[p][s] = 1;
    else if (r == -ECANCELED)
      break;
    else
      assert_int_equal(r, -ETIMEDOUT);
  }
  if (--producers_left == 0)
    for (int i = 0; i < NCH; i++)
      tdl_chan_close(R[i]);
  return NULL;
}

static void *consumer(void *arg)
{
  int me = (int)(intptr_t)arg;
  int open = NCH;
  while (open) {
    int v, chn = (int)rnd(NCH);
    if (rnd(2)) {
      tdl_select_op ops[NCH];
      for (int i = 0; i < NCH; i++)
        ops[i] = (tdl_select_op){.kind = TDL_SELECT_RECV, .ch = R[i], .val = &v, .result = 1};
      int k = tdl_select(ops, NCH, tdl_after((tdl_time_t)rnd(300) * TDL_USEC));
      if (k >= 0 && ops[k].result == 0)
        take(me, k, v);
      else if (k >= 0)
        open = 0; /* a closed channel: the producers are done; drain below */
    } else {
      int r = tdl_chan_recv(R[chn], &v, tdl_after((tdl_time_t)rnd(300) * TDL_USEC));
      if (r == 0)
        take(me, chn, v);
      else if (r == -EPIPE)
        open = 0;
    }
    if (rnd(50) == 0)
      tdl_fiber_yield();
  }
  for (int i = 0; i < NCH; i++) {
    int v;
    while (tdl_chan_recv(R[i], &v, TDL_FOREVER) == 0)
      take(me, i, v);
  }
  return NULL;
}

static void *canceller(void *arg)
{
  (void)arg;
  for (int k = 0; k < 3; k++) {
    tdl_sleep(tdl_after((tdl_time_t)(1 + rnd(3)) * TDL_MSEC));
    tdl_fiber_cancel(tdl_fiber_loop(), prod_h[rnd(NPROD)]);
  }
  return NULL;
}

static void randomized_model(void **state)
{
  (void)state;
  memset(sent_ok, 0, sizeof sent_ok);
  memset(received, 0, sizeof received);
  for (int k = 0; k < NCONS; k++)
    for (int c = 0; c < NCH; c++)
      for (int p = 0; p < NPROD; p++)
        last_seq[k][c][p] = -1;
  for (int i = 0; i < NCH; i++)
    assert_int_equal(tdl_chan_new(&R[i], sizeof(int), i % 2 ? 3 : 0), 0);
  producers_left = NPROD;
  for (int p = 0; p < NPROD; p++) {
    assert_int_equal(tdl_fiber_spawn(&prod_h[p], L, producer, (void *)(intptr_t)p, NULL), 0);
    tdl_fiber_detach(L, prod_h[p]);
  }
  for (int c = 0; c < NCONS; c++)
    go(consumer, (void *)(intptr_t)c);
  go(canceller, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  /* Nothing lost, nothing invented: received exactly what senders were told
   * went through. */
  int total = 0;
  for (int p = 0; p < NPROD; p++)
    for (int s = 0; s < PER; s++) {
      assert_int_equal(received[p][s], sent_ok[p][s]);
      total += received[p][s];
    }
  assert_true(total > NPROD * PER / 4);
  for (int i = 0; i < NCH; i++)
    tdl_chan_free(R[i]);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(unbuffered_delivery, setup, teardown),
      cmocka_unit_test_setup_teardown(buffered_delivery, setup, teardown),
      cmocka_unit_test_setup_teardown(buffered_room_and_fifo_senders, setup, teardown),
      cmocka_unit_test_setup_teardown(close_wakes_everyone, setup, teardown),
      cmocka_unit_test_setup_teardown(closed_buffered_channel_drains_first, setup, teardown),
      cmocka_unit_test_setup_teardown(free_in_use_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(destroy_waits_for_woken_waiters, setup, teardown),
      cmocka_unit_test_setup_teardown(deadlines, setup, teardown),
      cmocka_unit_test_setup_teardown(cancelled_sender_delivers_nothing, setup, teardown),
      cmocka_unit_test(bad_arguments),
      cmocka_unit_test(select_misuse),
      cmocka_unit_test_setup_teardown(select_waits_for_one, setup, teardown),
      cmocka_unit_test(select_is_fair),
      cmocka_unit_test_setup_teardown(randomized_model, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
