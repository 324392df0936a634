/* SPDX-License-Identifier: MIT */
/*
 * # A blocking library in fibers, under a deadline
 *
 * libcurl's easy API, hiredis's synchronous API and most C client libraries
 * block the thread in `connect`, `poll`, `read` and `write`.  Linked with
 * libtreadle-hook, those calls park only the fiber that makes them: many
 * fibers of one loop can each run a blocking transfer, and they overlap.
 *
 * A deadline reaches the library the library's own way: turn the fiber's
 * absolute deadline into the library's timeout just before the call
 * (CURLOPT_TIMEOUT_MS here; `redisSetTimeout` for hiredis), so that the
 * library ends the call itself, with its own error, and cleans up its own
 * state.  `tdl_fiber_cancel` is the backstop for a library with no timeout:
 * the hooked call then fails with ECANCELED, which the library reports as
 * an I/O error of its own.
 *
 * Build it with the hook ahead of libtreadle and libc, kept even where the
 * linker drops libraries the program itself calls nothing of (--as-needed,
 * Debian's default: the hook works by being loaded):
 *
 *     cc app.c $(pkg-config --cflags --libs treadle-hook) -lcurl
 *
 * (by hand: -Wl,--push-state,--no-as-needed -ltreadle-hook -Wl,--pop-state
 * -ltreadle -lcurl), and check `tdl_hook_active()` (<treadle/hook.h>) once
 * at the start: a program that lost the hook would still work, but each
 * blocking call would stall the whole loop.
 *
 * The program serves a small HTTP answer from a fiber of its own loop, and
 * fetches it with libcurl from three fibers at once; a fourth fetches from a
 * listener that never answers, and its transfer ends at its deadline with
 * CURLE_OPERATION_TIMEDOUT while the others are unaffected.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <treadle.h>
#include <treadle/hook.h>

static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";

static void *serve(void *arg) /* the answering server: one request per connection */
{
  int lfd = (int)(intptr_t)arg, fd;
  while ((fd = tdl_net_accept(lfd, NULL, TDL_FOREVER)) >= 0) {
    char req[1024];
    if (tdl_read(fd, req, sizeof req, tdl_after(TDL_SEC)) > 0)
      tdl_net_send_all(fd, answer, sizeof answer - 1, NULL, tdl_after(TDL_SEC));
    tdl_close(fd);
  }
  return NULL; /* -ECANCELED: the program is done */
}

typedef struct fetch {
  char url[64];
  tdl_time_t deadline;
  char body[64];
  size_t len;
  CURLcode result;
} fetch;

static size_t keep(char *p, size_t size, size_t n, void *arg)
{
  fetch *f = arg;
  size_t room = sizeof f->body - 1 - f->len, take = size * n < room ? size * n : room;
  memcpy(f->body + f->len, p, take);
  f->len += take;
  return size * n;
}

static void *get(void *arg) /* a fiber: libcurl, unmodified and blocking */
{
  fetch *f = arg;
  tdl_time_t left = f->deadline - tdl_now();
  CURL *c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, f->url);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, left > 0 ? (long)(left / TDL_MSEC) + 1 : 1L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM: the hook waits in poll */
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
  f->result = curl_easy_perform(c);
  curl_easy_cleanup(c);
  return NULL;
}

static int listener(char *url, size_t cap)
{
  int lfd = tdl_net_listen_str("127.0.0.1:0", 16, 0);
  tdl_addr a;
  char where[48];
  if (lfd < 0 || tdl_net_local_addr(lfd, &a) < 0 || tdl_addr_format(&a, where, sizeof where) < 0)
    return -1;
  snprintf(url, cap, "http://%s/", where);
  return lfd;
}

static void *program(void *arg)
{
  (void)arg;
  fetch f[4] = {0};
  int answering = listener(f[0].url, sizeof f[0].url);
  int silent = listener(f[3].url, sizeof f[3].url); /* never accepts: no answer */
  if (answering < 0 || silent < 0)
    return (void *)1;
  tdl_fiber_t server, fibers[4];
  tdl_fiber_spawn(&server, tdl_fiber_loop(), serve, (void *)(intptr_t)answering, NULL);
  for (int i = 0; i < 4; i++) {
    if (i > 0 && i < 3)
      strcpy(f[i].url, f[0].url);
    f[i].deadline = tdl_after(i < 3 ? 5 * TDL_SEC : 200 * TDL_MSEC);
    tdl_fiber_spawn(&fibers[i], tdl_fiber_loop(), get, &f[i], NULL);
  }
  int ok = 1;
  for (int i = 0; i < 4; i++) {
    tdl_fiber_join(fibers[i], NULL, TDL_FOREVER);
    printf("%s: %s%s%s\n", f[i].url, curl_easy_strerror(f[i].result), f[i].len ? ", body " : "", f[i].body);
    ok &= i < 3 ? f[i].result == CURLE_OK && strcmp(f[i].body, "hello") == 0
                : f[i].result == CURLE_OPERATION_TIMEDOUT;
  }
  tdl_fiber_cancel(tdl_fiber_loop(), server);
  tdl_fiber_join(server, NULL, TDL_FOREVER);
  tdl_close(answering);
  tdl_close(silent);
  return (void *)(intptr_t)!ok;
}

int main(void)
{
  if (tdl_hook_active() != 1) {
    fprintf(stderr, "blocking-library: libtreadle-hook is not loaded: link it ahead of libtreadle and libc\n");
    return 1;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  void *failed = (void *)1;
  int e = tdl_fiber_main(program, NULL, &failed);
  curl_global_cleanup();
  if (e < 0)
    fprintf(stderr, "blocking-library: %s\n", tdl_strerror(e));
  return e == 0 && !failed ? 0 : 1;
}
