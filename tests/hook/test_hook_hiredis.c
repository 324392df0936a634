/* SPDX-License-Identifier: MIT */
/* The acceptance test of libtreadle-hook: hiredis's synchronous API,
 * unmodified, from N fibers on one loop against a real redis-server; each
 * fiber does 100 SET/GET pairs and checks every reply.  Skipped where
 * redis-server is not installed. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include <treadle/hook.h>

#define REDIS "/usr/bin/redis-server"
/* Pairs per connection: what is tested is 10,000 connections in flight at
 * once; more pairs on each only repeat the same path (100 took 40 s of the
 * suite's time against redis-server on two CPUs). */
#define PAIRS 10

static int g_port;
static pid_t g_redis = -1;
static int g_missing; /* no redis-server here: skip */

static int free_port(void)
{
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(s, (struct sockaddr *)&a, &al) < 0)
    return -1;
  close(s);
  return ntohs(a.sin_port);
}

/* Outside any fiber: plain blocking hiredis. */
static int ping(void)
{
  struct timeval tv = {1, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", g_port, tv);
  int ok = 0;
  if (c && !c->err) {
    redisReply *r = redisCommand(c, "PING");
    ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    freeReplyObject(r);
  }
  redisFree(c);
  return ok;
}

static int start_redis(void)
{
  if (access(REDIS, X_OK) != 0) {
    g_missing = 1;
    return -1;
  }
  g_port = free_port();
  char port[16];
  snprintf(port, sizeof port, "%d", g_port);
  g_redis = fork();
  if (g_redis == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execl(REDIS, REDIS, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
          "--maxclients", "10100", "--tcp-backlog", "4096", (char *)NULL);
    _exit(127);
  }
  for (tdl_time_t end = t_clock() + T_HANG; t_clock() < end;) {
    if (ping())
      return 0;
    usleep(10000);
  }
  return -1;
}

static void stop_redis(void)
{
  if (g_redis > 0) {
    kill(g_redis, SIGTERM);
    waitpid(g_redis, NULL, 0);
    g_redis = -1;
  }
}

typedef struct client {
  int id;
  int ok; /* pairs whose replies checked out */
  char err[160];
} client;

static void *client_fiber(void *arg)
{
  client *cl = arg;
  redisContext *c = redisConnect("127.0.0.1", g_port);
  if (!c || c->err) {
    snprintf(cl->err, sizeof cl->err, "connect: %s", c ? c->errstr : "no memory");
    redisFree(c);
    return NULL;
  }
  char key[32], val[48];
  snprintf(key, sizeof key, "hook:%d", cl->id);
  for (int j = 0; j < PAIRS; j++) {
    snprintf(val, sizeof val, "v-%d-%d", cl->id, j);
    redisReply *r = redisCommand(c, "SET %s %s", key, val);
    int set_ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    freeReplyObject(r);
    r = redisCommand(c, "GET %s", key);
    int get_ok = r && r->type == REDIS_REPLY_STRING && r->len == strlen(val) && memcmp(r->str, val, r->len) == 0;
    freeReplyObject(r);
    if (!set_ok || !get_ok) {
      snprintf(cl->err, sizeof cl->err, "pair %d: %s", j, c->err ? c->errstr : "wrong reply");
      break;
    }
    cl->ok++;
  }
  redisFree(c);
  return NULL;
}

typedef struct run {
  client *clients;
  int n;
} run;

static void *main_fiber(void *arg)
{
  run *r = arg;
  tdl_fiber_options o = {.detached = true};
  for (int i = 0; i < r->n; i++)
    assert_int_equal(tdl_fiber_spawn(NULL, tdl_fiber_loop(), client_fiber, &r->clients[i], &o), 0);
  return NULL;
}

static void test_hiredis_fibers(void **state)
{
  (void)state;
  if (g_missing)
    T_SKIP("redis-server is not installed (Debian: redis-server)");
  assert_true(g_redis > 0); /* installed, but did not answer PING */
  assert_int_equal(tdl_hook_active(), 1);
  /* The acceptance figure, 10,000, in the plain build; fewer under
   * valgrind and the sanitizers, which check the same paths at a few times
   * the cost per call. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const int n = 1000;
#else
  const int n = RUNNING_ON_VALGRIND ? 100 : 10000;
#endif
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < (rlim_t)n + 64 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
  }
  if (rl.rlim_cur < (rlim_t)n + 64) {
    print_message("fd limit %lu too low for %d connections\n", (unsigned long)rl.rlim_cur, n);
    skip();
  }
  run r = {.clients = test_calloc((size_t)n, sizeof(client)), .n = n};
  for (int i = 0; i < n; i++)
    r.clients[i].id = i;
  tdl_hook_stats before, after;
  tdl_hook_stats_get(&before);
  tdl_time_t t0 = tdl_now();
  assert_int_equal(tdl_fiber_main(main_fiber, &r, NULL), 0);
  tdl_time_t took = tdl_now() - t0;
  tdl_hook_stats_get(&after);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    if (r.clients[i].ok != PAIRS) {
      if (bad++ < 5)
        print_message("client %d: %d pairs, %s\n", i, r.clients[i].ok, r.clients[i].err);
    }
  }
  print_message("%d fibers x %d SET/GET pairs in %.2f s (%llu parks)\n", n, PAIRS, (double)took / 1e9,
                (unsigned long long)(after.parked - before.parked));
  test_free(r.clients);
  assert_int_equal(bad, 0);
  assert_true(after.parked > before.parked);
}

/* ---- a cancel, and a timeout of hiredis's own ---- */

typedef struct cancelled {
  int connected, set_ok, incr_null, incr_err, blpop_null, blpop_err;
  char incr_errstr[128], blpop_errstr[128];
} cancelled;

/* SET, then the fiber is cancelled: its INCR must not reach Redis. */
static void *incr_after_cancel(void *arg)
{
  cancelled *k = arg;
  redisContext *c = redisConnect("127.0.0.1", g_port);
  k->connected = c && !c->err;
  if (!k->connected) {
    redisFree(c);
    return NULL;
  }
  redisReply *r = redisCommand(c, "SET hook:cancel 0");
  k->set_ok = r && r->type == REDIS_REPLY_STATUS;
  freeReplyObject(r);
  /* hook.h's recipe: hiredis's own timeout, from the fiber's deadline. */
  struct timeval tv = {0, 50 * 1000};
  redisSetTimeout(c, tv);
  r = redisCommand(c, "BLPOP hook:never 0"); /* the server holds it: the timeout ends it */
  k->blpop_null = r == NULL;
  k->blpop_err = c->err;
  snprintf(k->blpop_errstr, sizeof k->blpop_errstr, "%s", c->errstr);
  freeReplyObject(r);
  redisFree(c);

  c = redisConnect("127.0.0.1", g_port);
  k->connected = c && !c->err;
  if (!k->connected) {
    redisFree(c);
    return NULL;
  }
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), tdl_fiber_self()), 0);
  r = redisCommand(c, "INCR hook:cancel");
  k->incr_null = r == NULL;
  k->incr_err = c->err;
  snprintf(k->incr_errstr, sizeof k->incr_errstr, "%s", c->errstr);
  freeReplyObject(r);
  redisFree(c);
  return NULL;
}

/* A command cancelled while it waits for its reply; then another fiber
 * uses the same connection (hiredis does not know it is broken): its
 * command must fail as on a broken connection, not take the cancelled
 * command's reply for its own. */
typedef struct shared_conn {
  redisContext *c;
  int first_null, second_null, second_err;
  char second_errstr[128];
} shared_conn;

static void *blpop_cancelled(void *arg)
{
  shared_conn *k = arg;
  redisReply *r = redisCommand(k->c, "BLPOP hook:cut 0"); /* waits: cancelled */
  k->first_null = r == NULL;
  freeReplyObject(r);
  return NULL;
}

static void *cut_conn_main(void *arg)
{
  shared_conn *k = arg;
  k->c = redisConnect("127.0.0.1", g_port);
  assert_true(k->c && !k->c->err);
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), blpop_cancelled, k, NULL), 0);
  assert_int_equal(tdl_fiber_yield(), 0); /* its BLPOP is sent; it waits */
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), f), 0);
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  /* The reply the BLPOP waited for comes now, on the same connection. */
  redisContext *o = redisConnect("127.0.0.1", g_port);
  assert_true(o && !o->err);
  redisReply *r = redisCommand(o, "RPUSH hook:cut stale");
  assert_non_null(r);
  freeReplyObject(r);
  redisFree(o);
  k->c->err = 0; /* as if hiredis had not seen the first failure */
  r = redisCommand(k->c, "PING");
  k->second_null = r == NULL;
  k->second_err = k->c->err;
  snprintf(k->second_errstr, sizeof k->second_errstr, "%s", k->c->errstr);
  freeReplyObject(r);
  redisFree(k->c);
  return NULL;
}

static void test_hiredis_cancel_cuts_the_connection(void **state)
{
  (void)state;
  if (g_missing)
    T_SKIP("redis-server is not installed (Debian: redis-server)");
  shared_conn k = {0};
  assert_int_equal(tdl_fiber_main(cut_conn_main, &k, NULL), 0);
  assert_true(k.first_null);
  assert_true(k.second_null);
  assert_int_equal(k.second_err, REDIS_ERR_IO);
  assert_string_equal(k.second_errstr, strerror(ECONNABORTED));
}

/* What hook.h says a cancel and a timeout look like from inside hiredis. */
static void test_hiredis_cancel_and_timeout(void **state)
{
  (void)state;
  if (g_missing)
    T_SKIP("redis-server is not installed (Debian: redis-server)");
  assert_true(g_redis > 0);
  cancelled k = {0};
  assert_int_equal(tdl_fiber_main(incr_after_cancel, &k, NULL), 0);
  assert_true(k.connected);
  assert_true(k.set_ok);
  assert_true(k.blpop_null);
  assert_int_equal(k.blpop_err, REDIS_ERR_IO);
  assert_string_equal(k.blpop_errstr, strerror(EAGAIN));
  assert_true(k.incr_null);
  assert_int_equal(k.incr_err, REDIS_ERR_IO);
  assert_string_equal(k.incr_errstr, strerror(ECANCELED));
  /* Outside a fiber, plain hiredis: the INCR never reached the server. */
  struct timeval tv = {1, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", g_port, tv);
  assert_true(c && !c->err);
  redisReply *r = redisCommand(c, "GET hook:cancel");
  assert_non_null(r);
  assert_int_equal(r->type, REDIS_REPLY_STRING);
  assert_string_equal(r->str, "0");
  freeReplyObject(r);
  redisFree(c);
}

static int setup(void **state)
{
  (void)state;
  if (start_redis() < 0)
    stop_redis(); /* missing (the test skips) or not answering (it fails) */
  return 0;
}

static int teardown(void **state)
{
  (void)state;
  stop_redis();
  return 0;
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hiredis_fibers),
      cmocka_unit_test(test_hiredis_cancel_and_timeout),
      cmocka_unit_test(test_hiredis_cancel_cuts_the_connection),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
