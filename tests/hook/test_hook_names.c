/* SPDX-License-Identifier: MIT */
/* libtreadle-hook's host-name calls (include/treadle/hook.h) at their
 * edges: getaddrinfo, getnameinfo and the gethostbyname family give libc's
 * answers in a fiber as outside one (literal hosts, hints that forbid a
 * look-up, an answer longer than the first buffer, a family with no answer),
 * a lookup that meets the fd limit fails as libc's does, and a cancel ends a
 * lookup waiting for the name lane with the errors the headers promise.
 * Linked with libtreadle-hook, so every call below is the hook's. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helpers.h"
#include "hook_helpers.h"
#include <treadle/hook.h>

#ifndef NETDB_INTERNAL
#define NETDB_INTERNAL (-1)
#endif

/* ---- host names: libc's answers, in a fiber as outside ---- */

typedef struct gai_answer {
  int r;
  int port; /* of the first answer */
} gai_answer;

static gai_answer gai(const char *node, const char *service)
{
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  gai_answer a = {getaddrinfo(node, service, &hints, &res), -1};
  if (a.r == 0) {
    a.port = ntohs(((struct sockaddr_in *)res->ai_addr)->sin_port);
    freeaddrinfo(res);
  }
  return a;
}

/* Each lookup of names_main's, in order, as comparable values. */
typedef struct answers {
  gai_answer gai[3];
  int gni_r;
  char host[64], serv[16];
  int ghbr_r, ghbr_found;
  in_addr_t ghbr_addr;
  int ghb2r_r;
  in_addr_t ghb_addr, ghb2_addr, long_addr;
  size_t long_len;
  int unix_null, unix_errno, unix_herrno;
  int gai_numhost, gai_numserv, gai_v6, gai_nohost, gai_nohost_port;
  int gni_serv_r, gni_long_r;
  char gni_serv[32], host2[64];
} answers;

static char long_name[3200]; /* a literal address much longer than 1024 */

static void lookups(answers *a)
{
  /* A literal host with a named service, or an empty one: libc's. */
  a->gai[0] = gai("127.0.0.1", "http");
  a->gai[1] = gai("127.0.0.1", "");
  a->gai[2] = gai("127.0.0.1", "80x");
  /* Nothing to look up (numeric both ways): libc's, at once. */
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(8080), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  a->gni_r = getnameinfo((struct sockaddr *)&sa, sizeof sa, a->host, sizeof a->host, a->serv, sizeof a->serv,
                         NI_NUMERICHOST | NI_NUMERICSERV);
  struct hostent he, *out = NULL, *h;
  char buf[1024];
  int herr = 0;
  a->ghbr_r = gethostbyname_r("localhost", &he, buf, sizeof buf, &out, &herr);
  a->ghbr_found = out != NULL;
  if (out)
    memcpy(&a->ghbr_addr, out->h_addr_list[0], 4);
  a->ghb2r_r = gethostbyname2_r("localhost", AF_INET, &he, buf, sizeof buf, &out, &herr);
  if ((h = gethostbyname("localhost")))
    memcpy(&a->ghb_addr, h->h_addr_list[0], 4);
  if ((h = gethostbyname2("localhost", AF_INET)))
    memcpy(&a->ghb2_addr, h->h_addr_list[0], 4);
  /* An answer that does not fit the first buffer: it grows, as libc's. */
  if ((h = gethostbyname(long_name))) {
    memcpy(&a->long_addr, h->h_addr_list[0], 4);
    a->long_len = strlen(h->h_name);
  }
  /* Hints that say there is nothing to look up, with something that would
   * need it: libc's refusal.  An IPv6 literal; no host at all. */
  struct addrinfo numhost = {.ai_flags = AI_NUMERICHOST}, numserv = {.ai_flags = AI_NUMERICSERV}, *res = NULL;
  a->gai_numhost = getaddrinfo("localhost", "80", &numhost, &res);
  if (a->gai_numhost == 0)
    freeaddrinfo(res);
  a->gai_numserv = getaddrinfo("127.0.0.1", "http", &numserv, &res);
  if (a->gai_numserv == 0)
    freeaddrinfo(res);
  a->gai_v6 = getaddrinfo("::1", "80", NULL, &res);
  if (a->gai_v6 == 0)
    freeaddrinfo(res);
  struct addrinfo passive = {.ai_flags = AI_PASSIVE, .ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  a->gai_nohost = getaddrinfo(NULL, "http", &passive, &res);
  if (a->gai_nohost == 0) {
    a->gai_nohost_port = ntohs(((struct sockaddr_in *)res->ai_addr)->sin_port);
    freeaddrinfo(res);
  }
  /* getnameinfo for the service's name only, and with an address longer
   * than any (libc's EAI_FAMILY or whatever it says). */
  sa.sin_port = htons(80);
  a->gni_serv_r = getnameinfo((struct sockaddr *)&sa, sizeof sa, NULL, 0, a->gni_serv, sizeof a->gni_serv, 0);
  struct sockaddr_storage huge[2];
  memset(huge, 0, sizeof huge);
  memcpy(huge, &sa, sizeof sa);
  a->gni_long_r = getnameinfo((struct sockaddr *)huge, sizeof huge, a->host2, sizeof a->host2, NULL, 0, 0);
  /* A family gethostbyname2 has no answer for (glibc's; musl's takes it
   * for AF_INET): libc's answer, errno and h_errno. */
  errno = 0;
  h = gethostbyname2("localhost", AF_UNIX);
  a->unix_null = h == NULL;
  a->unix_errno = errno;
  a->unix_herrno = h_errno;
}

static void *lookups_main(void *arg)
{
  lookups(arg);
  return NULL;
}

static void test_names_as_libc(void **state)
{
  (void)state;
  memset(long_name, '0', 3000);
  strcpy(long_name + 3000, "127.0.0.1"); /* leading zeros: still an address */
  answers in, out;
  memset(&in, 0, sizeof in);
  memset(&out, 0, sizeof out);
  run_main(lookups_main, &in);
  lookups(&out);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(in.gai[i].r, out.gai[i].r);
    assert_int_equal(in.gai[i].port, out.gai[i].port);
  }
  assert_int_equal(out.gai[0].r, 0);
  assert_int_equal(in.gni_r, 0);
  assert_int_equal(out.gni_r, 0);
  assert_string_equal(in.host, "127.0.0.1");
  assert_string_equal(in.serv, "8080");
  assert_string_equal(out.host, in.host);
  assert_string_equal(out.serv, in.serv);
  assert_int_equal(in.ghbr_r, 0);
  assert_int_equal(out.ghbr_r, 0);
  assert_true(in.ghbr_found && out.ghbr_found);
  assert_int_equal(in.ghbr_addr, htonl(INADDR_LOOPBACK));
  assert_int_equal(out.ghbr_addr, in.ghbr_addr);
  assert_int_equal(in.ghb2r_r, out.ghb2r_r);
  assert_int_equal(in.ghb_addr, htonl(INADDR_LOOPBACK));
  assert_int_equal(out.ghb_addr, in.ghb_addr);
  assert_int_equal(out.ghb2_addr, in.ghb2_addr);
#ifdef __GLIBC__
  /* glibc answers the long name, an answer over 1024 bytes (the path this
   * is for); musl refuses it.  Either way the hook's is libc's. */
  assert_true(out.long_len > 1024);
#endif
  assert_int_equal(in.long_len, out.long_len);
  assert_int_equal(in.long_addr, out.long_addr);
  assert_int_equal(in.gai_numhost, out.gai_numhost);
  assert_int_not_equal(in.gai_numhost, 0);
  assert_int_equal(in.gai_numserv, out.gai_numserv);
  assert_int_not_equal(in.gai_numserv, 0);
  assert_int_equal(in.gai_v6, out.gai_v6);
  assert_int_equal(in.gai_nohost, out.gai_nohost);
  assert_int_equal(in.gai_nohost_port, out.gai_nohost_port);
  assert_int_equal(in.gni_serv_r, out.gni_serv_r);
  assert_string_equal(in.gni_serv, out.gni_serv);
  assert_int_equal(in.gni_long_r, out.gni_long_r);
  /* glibc has no answer for AF_UNIX (EAFNOSUPPORT); musl answers it as
   * AF_INET, with the errno its look-up left (EINVAL).  Either way the
   * hook's is libc's, errno included (the pool thread's call starts with
   * the caller's). */
  assert_int_equal(in.unix_null, out.unix_null);
#ifdef __GLIBC__
  assert_true(out.unix_null);
#endif
  assert_int_equal(in.unix_errno, out.unix_errno);
  assert_int_equal(in.unix_herrno, out.unix_herrno);
}

/* A lookup that fails as a system error (no file can be opened, the fd
 * limit reached): EAI_SYSTEM and libc's errno, in a fiber as outside. */
typedef struct sys_answer {
  int r, err;
} sys_answer;

static sys_answer gni_without_fds(void)
{
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(80), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  char host[NI_MAXHOST];
  int p[2];
  assert_int_equal(pipe(p), 0);
  int free_fd = (int)syscall(SYS_fcntl, p[0], F_DUPFD, 0); /* as wide_main */
  assert_int_equal(raw_close(free_fd), 0);
  struct rlimit old, rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
  rl = old;
  rl.rlim_cur = (rlim_t)free_fd;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
  errno = 0;
  sys_answer a = {getnameinfo((struct sockaddr *)&sa, sizeof sa, host, sizeof host, NULL, 0, NI_NAMEREQD), 0};
  a.err = errno;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
  close_pair(p);
  return a;
}

static void *gni_without_fds_main(void *arg)
{
  /* The lane's thread started first: a lookup that needs no file. */
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(80), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  char serv[NI_MAXSERV];
  assert_int_equal(getnameinfo((struct sockaddr *)&sa, sizeof sa, NULL, 0, serv, sizeof serv, 0), 0);
  *(sys_answer *)arg = gni_without_fds();
  return NULL;
}

static void test_names_system_error(void **state)
{
  (void)state;
  sys_answer in, out = gni_without_fds();
  run_main(gni_without_fds_main, &in);
  assert_int_equal(in.r, out.r);
  if (out.r == EAI_SYSTEM)
    assert_int_equal(in.err, out.err);
}

/* Holds the name lane (capped at one thread) until a byte comes. */
typedef struct hold {
  int p[2];
} hold;

static void *hold_run(void *arg)
{
  hold *h = arg;
  char c;
  while (syscall(SYS_read, h->p[0], &c, 1) < 0 && errno == EINTR) {
  }
  return NULL;
}

static void *holder(void *arg)
{
  assert_int_equal(tdl_pool_call(TDL_LANE_NAME, hold_run, arg, NULL, NULL, TDL_FOREVER), 0);
  return NULL;
}

static void lane_cap(unsigned n)
{
  tdl_pool_options o = {.lane_max = {0, 0, n}};
  assert_int_equal(tdl_pool_configure(&o), 0);
}

typedef struct cancelled_lookup {
  int which;
  int r, err, herr;
  int result_null;
} cancelled_lookup;

static void *lookup_cancelled(void *arg)
{
  cancelled_lookup *c = arg;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(80), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  char host[NI_MAXHOST], buf[1024];
  struct hostent he, *out = &he;
  errno = 0;
  switch (c->which) {
  case 0:
    c->r = getnameinfo((struct sockaddr *)&sa, sizeof sa, host, sizeof host, NULL, 0, 0);
    c->err = errno;
    break;
  case 1:
    c->herr = 0;
    c->r = gethostbyname_r("localhost", &he, buf, sizeof buf, &out, &c->herr);
    c->result_null = out == NULL;
    break;
  case 2:
    c->result_null = gethostbyname("localhost") == NULL;
    c->err = errno;
    c->herr = h_errno;
    break;
  default:
    fail();
  }
  return NULL;
}

static void *names_cancel_main(void *arg)
{
  (void)arg;
  hold h;
  assert_int_equal(pipe(h.p), 0);
  lane_cap(1);
  tdl_fiber_t hf = spawn(holder, &h);
  cancelled_lookup c[3] = {{.which = 0}, {.which = 1}, {.which = 2}};
  tdl_fiber_t f[3];
  for (int i = 0; i < 3; i++)
    f[i] = spawn(lookup_cancelled, &c[i]);
  tdl_fiber_yield();
  tdl_sleep(tdl_after(TDL_MSEC)); /* they wait for the lane (not needed for correctness) */
  for (int i = 0; i < 3; i++) {
    cancel(f[i]);
    join(f[i]);
  }
  /* getnameinfo: a system error, ECANCELED. */
  assert_int_equal(c[0].r, EAI_SYSTEM);
  assert_int_equal(c[0].err, ECANCELED);
  /* gethostbyname_r: that errno returned, no answer, NETDB_INTERNAL. */
  assert_int_equal(c[1].r, ECANCELED);
  assert_true(c[1].result_null);
  assert_int_equal(c[1].herr, NETDB_INTERNAL);
  /* gethostbyname: NULL, h_errno NETDB_INTERNAL, errno ECANCELED. */
  assert_true(c[2].result_null);
  assert_int_equal(c[2].err, ECANCELED);
  assert_int_equal(c[2].herr, NETDB_INTERNAL);
  assert_int_equal(write(h.p[1], "x", 1), 1);
  join(hf);
  lane_cap(0);
  close_pair(h.p);
  return NULL;
}

static void test_names_cancelled(void **state)
{
  (void)state;
  run_main(names_cancel_main, NULL);
}

/* As tests/hook/test_hook_calls.c: the pool's idle threads go first, so
 * that glibc frees their resolver state (valgrind). */
static int pool_threads_exit(void **state)
{
  (void)state;
  (void)tdl_pool_shutdown(tdl_after(T_HANG));
  return 0;
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  setenv("RES_OPTIONS", "timeout:1 attempts:1", 1);
  const struct CMUnitTest tests[] = {
      /* First: before any lookup of the process has set up libc's resolver
       * (which then answers EAI_AGAIN, not EAI_SYSTEM, without fds). */
      cmocka_unit_test(test_names_system_error),
      cmocka_unit_test(test_names_as_libc),
      cmocka_unit_test(test_names_cancelled),
  };
  return cmocka_run_group_tests(tests, NULL, pool_threads_exit);
}
