/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

tdl_loop *t_loop_new(void)
{
  tdl_loop *loop = NULL;
  int e = tdl_loop_new(&loop, NULL);
  assert_int_equal(e, 0);
  assert_non_null(loop);
  return loop;
}

void t_loop_free(tdl_loop *loop) { assert_int_equal(tdl_loop_free(loop), 0); }

void t_pipe(int fds[2]) { assert_int_equal(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0); }

void t_tcp_pair(int *connected, int *accepted)
{
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(l >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(l, 1), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
  *connected = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_int_equal(connect(*connected, (struct sockaddr *)&a, sizeof a), 0);
  *accepted = accept4(l, NULL, NULL, SOCK_CLOEXEC);
  assert_true(*accepted >= 0);
  close(l);
}

int t_hold_port(int family, int port)
{
  struct sockaddr_storage ss = {0};
  socklen_t len;
  if (family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    len = sizeof *a;
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    *a = (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    len = sizeof *a;
  }
  int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return -errno;
  if (bind(s, (struct sockaddr *)&ss, len) < 0) {
    int e = errno;
    close(s);
    return e == EADDRNOTAVAIL ? -EAFNOSUPPORT : -e; /* no ::1 on the machine */
  }
  return s;
}

static int bound_port(int s)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  assert_int_equal(getsockname(s, (struct sockaddr *)&ss, &len), 0);
  return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                       : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

int t_refusing_port(int held[2])
{
  for (int tries = 0; tries < 100; tries++) {
    held[0] = t_hold_port(AF_INET, 0);
    assert_true(held[0] >= 0);
    int port = bound_port(held[0]);
    held[1] = t_hold_port(AF_INET6, port);
    if (held[1] >= 0 || held[1] == -EAFNOSUPPORT) {
      if (held[1] < 0)
        held[1] = -1;
      return port;
    }
    assert_int_equal(held[1], -EADDRINUSE); /* ::1 has it: another port */
    close(held[0]);
  }
  fail_msg("no port free on both loopbacks in 100 tries");
  return -1;
}

void t_port_release(int held[2])
{
  for (int i = 0; i < 2; i++)
    if (held[i] >= 0)
      close(held[i]);
  held[0] = held[1] = -1;
}

tdl_loop *t_ring_loop(void)
{
  tdl_loop_options o = {.backend = TDL_BACKEND_URING};
  tdl_loop *loop = NULL;
  int e = tdl_loop_new(&loop, &o);
  if (e == -ENOSYS || e == -EPERM || e == -ENOMEM)
    return NULL;
  assert_int_equal(e, 0);
  assert_string_equal(tdl_loop_backend(loop), "uring");
  return loop;
}

void t_spawn(tdl_loop *loop, tdl_fiber_fn fn, void *arg)
{
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, loop, fn, arg, NULL), 0);
  assert_int_equal(tdl_fiber_detach(loop, h), 0);
}

int t_count_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    /* A thread keeps its last uring loop's ring for the next one (uring.c):
     * an fd on purpose, not a leak. */
    char link[64];
    ssize_t len = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
    if (len > 0 && (link[len] = 0, strcmp(link, "anon_inode:[io_uring]") == 0))
      continue;
    n++;
  }
  closedir(d);
  return n - 1; /* the DIR's own fd */
}

tdl_time_t t_clock(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

int t_run_until(tdl_loop *loop, const int *flag, int iterations)
{
  for (int i = 0; i < iterations && !*flag; i++)
    assert_true(tdl_loop_run(loop, TDL_LOOP_ONCE) >= 0);
  return *flag;
}

long t_reads_made(void)
{
  FILE *f = fopen("/proc/self/io", "r");
  long v = -1;
  char line[128];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "syscr: %ld", &v) == 1)
      break;
  if (f)
    fclose(f);
  return v;
}
