#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
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
  assert_int_equal(tdl_fiber_spawn(loop, &h, fn, arg, NULL), 0);
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
