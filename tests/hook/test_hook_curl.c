/* SPDX-License-Identifier: MIT */
/* The acceptance test of libtreadle-hook with libcurl: the easy API,
 * unmodified and blocking, from N fibers on one loop, each fetching a file
 * from examples/httpd (started here: the one built in the tree, or argv[1]) and checking the
 * body byte for byte. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include <treadle/hook.h>

#define BODY_LEN 20000

static const char *g_httpd;
static pid_t g_pid = -1;
static int g_port;
static char g_root[64];
static char g_body[BODY_LEN];
static int g_inflight, g_most_inflight; /* transfers under way at once */

static int start_httpd(void)
{
  snprintf(g_root, sizeof g_root, "/tmp/tdl-hook-curl-XXXXXX");
  if (!mkdtemp(g_root))
    return -1;
  for (int i = 0; i < BODY_LEN; i++)
    g_body[i] = (char)('a' + (i * 7 + i / 13) % 26);
  char path[128];
  snprintf(path, sizeof path, "%s/f.txt", g_root);
  FILE *f = fopen(path, "w");
  if (!f || fwrite(g_body, 1, BODY_LEN, f) != BODY_LEN || fclose(f) != 0)
    return -1;
  int err[2];
  if (pipe(err) < 0)
    return -1;
  g_pid = fork();
  if (g_pid < 0)
    return -1;
  if (g_pid == 0) {
    dup2(err[1], 2);
    execl(g_httpd, g_httpd, "--listen", "127.0.0.1:0", "--loops", "1", "--root", g_root, (char *)NULL);
    _exit(127);
  }
  close(err[1]);
  char line[256];
  size_t got = 0;
  ssize_t n;
  while (got < sizeof line - 1 && (n = read(err[0], line + got, 1)) == 1 && line[got] != '\n')
    got++;
  line[got] = '\0';
  close(err[0]);
  const char *p = strstr(line, "(port ");
  if (!p || sscanf(p, "(port %d)", &g_port) != 1) {
    print_message("httpd said: %s\n", line);
    return -1;
  }
  return 0;
}

static void stop_httpd(void)
{
  if (g_pid > 0) {
    kill(g_pid, SIGTERM);
    waitpid(g_pid, NULL, 0);
    g_pid = -1;
  }
  char path[128];
  snprintf(path, sizeof path, "%s/f.txt", g_root);
  unlink(path);
  rmdir(g_root);
}

typedef struct fetch {
  char *buf;
  size_t len;
  long status;
  CURLcode rc;
} fetch;

static size_t take(char *data, size_t size, size_t n, void *arg)
{
  fetch *f = arg;
  size_t add = size * n;
  if (f->len + add > BODY_LEN)
    return 0; /* more than the file: curl reports a write error */
  memcpy(f->buf + f->len, data, add);
  f->len += add;
  return add;
}

static void *client(void *arg)
{
  fetch *f = arg;
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/static/f.txt", g_port);
  CURL *c = curl_easy_init();
  if (!c) {
    f->rc = CURLE_FAILED_INIT;
    return NULL;
  }
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
  if (++g_inflight > g_most_inflight)
    g_most_inflight = g_inflight;
  f->rc = curl_easy_perform(c); /* blocks this fiber only */
  g_inflight--;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &f->status);
  curl_easy_cleanup(c);
  return NULL;
}

typedef struct run {
  fetch *f;
  int n;
} run;

static void *main_fiber(void *arg)
{
  run *r = arg;
  tdl_fiber_options o = {.detached = true, .stack_size = 256 * 1024};
  for (int i = 0; i < r->n; i++)
    assert_int_equal(tdl_fiber_spawn(NULL, tdl_fiber_loop(), client, &r->f[i], &o), 0);
  return NULL;
}

static void test_curl_fibers(void **state)
{
  (void)state;
  assert_true(g_pid > 0);
  assert_int_equal(tdl_hook_active(), 1);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const int n = 300;
#else
  const int n = RUNNING_ON_VALGRIND ? 30 : 1000;
#endif
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < (rlim_t)n * 4 + 64 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
  }
  if (rl.rlim_cur < (rlim_t)n * 4 + 64) {
    print_message("fd limit %lu too low for %d transfers\n", (unsigned long)rl.rlim_cur, n);
    skip();
  }
  run r = {.f = test_calloc((size_t)n, sizeof(fetch)), .n = n};
  for (int i = 0; i < n; i++)
    r.f[i].buf = test_malloc(BODY_LEN);
  tdl_hook_stats before, after;
  tdl_hook_stats_get(&before);
  tdl_time_t t0 = tdl_now();
  assert_int_equal(tdl_fiber_main(main_fiber, &r, NULL), 0);
  tdl_time_t took = tdl_now() - t0;
  tdl_hook_stats_get(&after);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    fetch *f = &r.f[i];
    if (f->rc != CURLE_OK || f->status != 200 || f->len != BODY_LEN || memcmp(f->buf, g_body, BODY_LEN) != 0) {
      if (bad++ < 5)
        print_message("transfer %d: %s, status %ld, %zu bytes\n", i, curl_easy_strerror(f->rc), f->status, f->len);
    }
    test_free(f->buf);
  }
  print_message("%d fibers fetched %d bytes each in %.2f s (%llu parks)\n", n, BODY_LEN, (double)took / 1e9,
                (unsigned long long)(after.parked - before.parked));
  test_free(r.f);
  assert_int_equal(bad, 0);
  print_message("at most %d transfers at once\n", g_most_inflight);
  /* Under valgrind the client is so slow that the (native) server's every
   * answer is there before curl asks: nothing need park, and transfers may
   * not overlap.  Elsewhere they must have: blocking the thread, each
   * transfer would have ended before the next began. */
  if (!RUNNING_ON_VALGRIND) {
    assert_true(after.parked > before.parked);
    assert_true(g_most_inflight > 1);
  }
}

/* Nobody listening: curl's own error, as without fibers. */
static void *refused_fiber(void *arg)
{
  CURLcode *rc = arg;
  CURL *c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, "http://127.0.0.1:1/");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  *rc = curl_easy_perform(c);
  curl_easy_cleanup(c);
  return NULL;
}

static void test_curl_refused(void **state)
{
  (void)state;
  CURLcode in = CURLE_OK, out = CURLE_OK;
  assert_int_equal(tdl_fiber_main(refused_fiber, &in, NULL), 0);
  refused_fiber(&out);
  assert_int_equal(out, CURLE_COULDNT_CONNECT);
  assert_int_equal(in, out);
}

/* ---- a transfer the server never answers: a cancel, a deadline ---- */

/* A listener that never accepts: the connection completes in its backlog,
 * the request goes, no answer comes.  Its port. */
static int g_silent = -1;
static int silent_port(void)
{
  g_silent = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  assert_int_equal(bind(g_silent, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(getsockname(g_silent, (struct sockaddr *)&a, &al), 0);
  assert_int_equal(listen(g_silent, 8), 0);
  return ntohs(a.sin_port);
}

typedef struct stuck {
  int port;
  tdl_time_t deadline; /* TDL_FOREVER: no timeout of curl's own */
  CURLcode rc;
} stuck;

static void *stuck_fiber(void *arg)
{
  stuck *st = arg;
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", st->port);
  CURL *c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (st->deadline != TDL_FOREVER) { /* hook.h's recipe: curl's timeout from the deadline */
    long ms = (long)((st->deadline - tdl_now()) / TDL_MSEC);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms > 0 ? ms : 1L);
  }
  st->rc = curl_easy_perform(c);
  curl_easy_cleanup(c);
  return NULL;
}

static void *cancel_stuck(void *arg)
{
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), stuck_fiber, arg, NULL), 0);
  tdl_fiber_yield(); /* whenever the cancel comes, the transfer cannot have ended */
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), f), 0);
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  return NULL;
}

/* What hook.h says a cancel and a deadline look like from inside libcurl. */
static void test_curl_cancel_and_deadline(void **state)
{
  (void)state;
  stuck st = {.port = silent_port(), .deadline = TDL_FOREVER};
  assert_int_equal(tdl_fiber_main(cancel_stuck, &st, NULL), 0);
  assert_int_equal(st.rc, CURLE_BAD_FUNCTION_ARGUMENT); /* its poll failed with ECANCELED */
  st.deadline = tdl_after(50 * TDL_MSEC);
  assert_int_equal(tdl_fiber_main(stuck_fiber, &st, NULL), 0);
  assert_int_equal(st.rc, CURLE_OPERATION_TIMEDOUT);
  close(g_silent);
}

/* ---- a cancel inside curl_easy_perform cuts the connection ---- */

/* A keep-alive HTTP/1.1 server of the test's own, a fiber per connection
 * (treadle's own I/O, which the hook does not see): /slow is answered
 * "stale" only once the test releases it, anything else "fresh" at once. */
typedef struct slow {
  int lfd;
  char url[64];
  int accepted;   /* connections accepted */
  int slow_seen;  /* a /slow request was read */
  int stale_sent; /* ... and answered, on its connection */
  tdl_sem release;
} slow;

typedef struct slow_conn {
  slow *s;
  int fd;
} slow_conn;

static void *slow_conn_fiber(void *arg)
{
  slow_conn *sc = arg;
  slow *s = sc->s;
  char req[4096];
  size_t got = 0;
  for (;;) {
    ssize_t n = tdl_read(sc->fd, req + got, sizeof req - 1 - got, tdl_after(T_HANG));
    if (n <= 0)
      break;
    got += (size_t)n;
    req[got] = '\0';
    char *end = strstr(req, "\r\n\r\n");
    if (!end)
      continue;
    int is_slow = strncmp(req, "GET /slow ", 10) == 0;
    if (is_slow) {
      s->slow_seen = 1;
      if (tdl_sem_acquire(&s->release, tdl_after(T_HANG)) < 0)
        break;
    }
    const char *answer = is_slow ? "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
                                 : "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh";
    int e = tdl_net_send_all(sc->fd, answer, strlen(answer), NULL, tdl_after(T_HANG));
    if (is_slow)
      s->stale_sent = 1;
    if (e < 0)
      break;
    got -= (size_t)(end + 4 - req);
    memmove(req, end + 4, got);
  }
  tdl_close(sc->fd);
  test_free(sc);
  return NULL;
}

static void *slow_server(void *arg)
{
  slow *s = arg;
  int fd;
  while ((fd = tdl_net_accept(s->lfd, NULL, TDL_FOREVER)) >= 0) {
    s->accepted++;
    slow_conn *sc = test_malloc(sizeof *sc);
    *sc = (slow_conn){s, fd};
    tdl_fiber_options o = {.detached = true};
    assert_int_equal(tdl_fiber_spawn(NULL, tdl_fiber_loop(), slow_conn_fiber, sc, &o), 0);
  }
  return NULL; /* cancelled: the test is over */
}

typedef struct perform {
  CURL *c;
  const char *url;
  CURLcode rc;
  char body[64];
  size_t len;
} perform;

static size_t keep_body(char *data, size_t size, size_t n, void *arg)
{
  perform *p = arg;
  size_t add = size * n, room = sizeof p->body - 1 - p->len;
  memcpy(p->body + p->len, data, add < room ? add : room);
  p->len += add < room ? add : room;
  p->body[p->len] = '\0';
  return add;
}

static void *perform_fiber(void *arg)
{
  perform *p = arg;
  curl_easy_setopt(p->c, CURLOPT_URL, p->url); /* curl keeps a copy */
  curl_easy_setopt(p->c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(p->c, CURLOPT_WRITEFUNCTION, keep_body);
  curl_easy_setopt(p->c, CURLOPT_WRITEDATA, p);
  p->rc = curl_easy_perform(p->c);
  return NULL;
}

typedef struct cut_run {
  slow s;
  perform p[4]; /* /fresh, /slow (cancelled), then /fresh twice, one easy handle */
  int accepted_before;
} cut_run;

static void *cut_main(void *arg)
{
  cut_run *k = arg;
  slow *s = &k->s;
  assert_int_equal(tdl_sem_init(&s->release, 0, 1), 0);
  s->lfd = tdl_net_listen_str("127.0.0.1:0", 16, 0);
  assert_true(s->lfd >= 0);
  tdl_addr a;
  char where[48];
  assert_int_equal(tdl_net_local_addr(s->lfd, &a), 0);
  assert_true(tdl_addr_format(&a, where, sizeof where) >= 0);
  tdl_fiber_t server, victim;
  assert_int_equal(tdl_fiber_spawn(&server, tdl_fiber_loop(), slow_server, s, NULL), 0);
  CURL *c = curl_easy_init();
  assert_non_null(c);
  char urls[2][80];
  snprintf(urls[0], sizeof urls[0], "http://%s/fresh", where);
  snprintf(urls[1], sizeof urls[1], "http://%s/slow", where);
  for (int i = 0; i < 4; i++)
    k->p[i] = (perform){.c = c, .url = urls[i == 1]};
  perform_fiber(&k->p[0]); /* the connection the next transfer reuses */
  assert_int_equal(tdl_fiber_spawn(&victim, tdl_fiber_loop(), perform_fiber, &k->p[1], NULL), 0);
  for (tdl_time_t end = t_clock() + T_HANG; !s->slow_seen && t_clock() < end;)
    tdl_sleep(tdl_after(TDL_MSEC));
  assert_true(s->slow_seen);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), victim), 0);
  assert_int_equal(tdl_fiber_join(victim, NULL, TDL_FOREVER), 0);
  /* The server answers the cancelled request now, on its connection. */
  k->accepted_before = s->accepted;
  assert_int_equal(tdl_sem_release(&s->release), 0);
  for (tdl_time_t end = t_clock() + T_HANG; !s->stale_sent && t_clock() < end;)
    tdl_sleep(tdl_after(TDL_MSEC));
  assert_true(s->stale_sent);
  perform_fiber(&k->p[2]);
  perform_fiber(&k->p[3]);
  curl_easy_cleanup(c);
  tdl_fiber_cancel(tdl_fiber_loop(), server);
  tdl_fiber_join(server, NULL, TDL_FOREVER);
  tdl_close(s->lfd);
  tdl_sem_destroy(&s->release);
  return NULL;
}

/* The next transfer on the easy handle must not read the cancelled one's
 * answer: curl makes a new connection (or fails), and answers "fresh". */
static void test_curl_cancel_cuts_the_connection(void **state)
{
  (void)state;
  cut_run k = {0};
  assert_int_equal(tdl_fiber_main(cut_main, &k, NULL), 0);
  for (int i = 0; i < 4; i++)
    print_message("transfer %d: %s, body \"%s\"\n", i, curl_easy_strerror(k.p[i].rc), k.p[i].body);
  print_message("connections: %d before the cancelled answer went, %d in all\n", k.accepted_before, k.s.accepted);
  assert_int_equal(k.p[0].rc, CURLE_OK);
  assert_string_equal(k.p[0].body, "fresh");
  assert_int_equal(k.accepted_before, 1); /* /slow went on the first transfer's connection */
  assert_int_not_equal(k.p[1].rc, CURLE_OK);
  assert_string_equal(k.p[1].body, "");
  for (int i = 2; i < 4; i++) {
    assert_null(strstr(k.p[i].body, "stale"));
    assert_int_equal(k.p[i].rc, CURLE_OK);
    assert_string_equal(k.p[i].body, "fresh");
  }
  assert_int_equal(k.s.accepted, 2); /* a new connection for the transfers after the cut */
}

static int setup(void **state)
{
  (void)state;
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    return -1;
  if (start_httpd() < 0)
    stop_httpd(); /* the test then fails on g_pid */
  return 0;
}

static int teardown(void **state)
{
  (void)state;
  stop_httpd();
  curl_global_cleanup();
  return 0;
}

int main(int argc, char **argv)
{
  g_httpd = argc > 1 ? argv[1] : TDL_HTTPD;
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_curl_fibers),
      cmocka_unit_test(test_curl_refused),
      cmocka_unit_test(test_curl_cancel_and_deadline),
      cmocka_unit_test(test_curl_cancel_cuts_the_connection),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
