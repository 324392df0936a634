/* SPDX-License-Identifier: MIT */
/* An unmodified program under LD_PRELOAD=libtreadle-hook.so: linked with
 * libtreadle only, it runs two fibers that call plain libc usleep(), and a
 * pair that connect(), read() and write() on blocking sockets.  With the
 * hook preloaded (ctest runs it so, with --hooked) the fibers interleave and
 * the read parks only its fiber; without it (the control, when run bare)
 * usleep blocks the thread and the first fiber's sleeps all come before the
 * second's, and the socket part, which would block forever, is left out.
 * Exit status 0 when what happened is what the mode says. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <treadle.h>

static char trace[16];
static int ntrace;

static void *sleeper(void *arg)
{
  for (int i = 0; i < 4; i++) {
    usleep(3000);
    trace[ntrace++] = *(const char *)arg;
  }
  return NULL;
}

typedef struct pair {
  int l;             /* listening */
  struct sockaddr_in a;
  int writer_ran;    /* the writer ran while the reader waited */
  char got[3];
  int ok;
} pair;

static void *reader(void *arg)
{
  pair *p = arg;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&p->a, sizeof p->a) != 0)
    return NULL;
  ssize_t n = read(s, p->got, 2); /* parks: nothing written yet */
  p->ok = n == 2 && memcmp(p->got, "hi", 2) == 0 && p->writer_ran;
  close(s);
  return NULL;
}

static void *writer(void *arg)
{
  pair *p = arg;
  int c = accept(p->l, NULL, NULL);
  if (c < 0)
    return NULL;
  p->writer_ran = 1;
  if (write(c, "hi", 2) != 2)
    p->writer_ran = 0;
  close(c);
  return NULL;
}

static void *main_fiber(void *arg)
{
  int hooked = *(int *)arg;
  tdl_fiber_t a, b;
  tdl_fiber_spawn(&a, tdl_fiber_loop(), sleeper, "A", NULL);
  tdl_fiber_spawn(&b, tdl_fiber_loop(), sleeper, "B", NULL);
  tdl_fiber_join(a, NULL, TDL_FOREVER);
  tdl_fiber_join(b, NULL, TDL_FOREVER);
  if (!hooked)
    return (void *)1;
  pair p = {.a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)}};
  socklen_t al = sizeof p.a;
  p.l = socket(AF_INET, SOCK_STREAM, 0);
  if (p.l < 0 || bind(p.l, (struct sockaddr *)&p.a, sizeof p.a) != 0 ||
      getsockname(p.l, (struct sockaddr *)&p.a, &al) != 0 || listen(p.l, 4) != 0)
    return NULL;
  tdl_fiber_t r, w;
  tdl_fiber_spawn(&r, tdl_fiber_loop(), reader, &p, NULL);
  tdl_fiber_spawn(&w, tdl_fiber_loop(), writer, &p, NULL);
  tdl_fiber_join(r, NULL, TDL_FOREVER);
  tdl_fiber_join(w, NULL, TDL_FOREVER);
  close(p.l);
  return (void *)(intptr_t)p.ok;
}

int main(int argc, char **argv)
{
  int want_hooked = argc > 1 && strcmp(argv[1], "--hooked") == 0;
  /* Not linked with the hook: it is there only if preloaded. */
  int hooked = dlsym(RTLD_DEFAULT, "tdl_hook_active") != NULL;
  if (want_hooked && !hooked) {
    fprintf(stderr, "test_hook_preload: libtreadle-hook is not preloaded\n");
    return 1;
  }
  void *ok = NULL;
  if (tdl_fiber_main(main_fiber, &hooked, &ok) != 0 || !ok) {
    fprintf(stderr, "test_hook_preload: the socket pair failed\n");
    return 1;
  }
  trace[ntrace] = '\0';
  /* Interleaved: B's first turn before A's last. */
  int interleaved = ntrace == 8 && strchr(trace, 'B') < strrchr(trace, 'A');
  printf("%s: %s\n", hooked ? "hooked" : "plain", trace);
  if (interleaved != hooked) {
    fprintf(stderr, "test_hook_preload: fibers %s\n", hooked ? "did not interleave" : "interleaved without the hook");
    return 1;
  }
  return 0;
}
