/* SPDX-License-Identifier: MIT */
/*
 * Shared by the spawn tests: a child program built into each test binary (so
 * the tests need no coreutils), and the checks that nothing leaked.
 *
 * The test binary runs as the child when started as
 *   <self> --child MODE [ARGS...]
 * Call spawn_helper_main() first thing in main().
 */
#ifndef TEST_SPAWN_HELPER_H
#define TEST_SPAWN_HELPER_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char self_exe[PATH_MAX];

static void write_all(int fd, const void *buf, size_t len)
{
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      _exit(3);
    p += n;
    len -= (size_t)n;
  }
}

static void print_status_line(const char *field)
{
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t len = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, len) == 0 && line[len] == ':')
      fputs(line, stdout);
  if (f)
    fclose(f);
}

static void sleep_forever(void)
{
  for (;;)
    pause();
}

/* Modes:
 *   exit N          exit with code N
 *   args A...       each argument on its own line, as "[A]"
 *   fds             open fd numbers (but the listing's own), space-separated
 *   env NAME...     "NAME=value" or "NAME unset", one per line
 *   cwd             the working directory
 *   sig             the SigBlk: and SigIgn: lines of /proc/self/status
 *   ids             "pid pgid sid"
 *   flags           O_NONBLOCK of fds 0 1 2 as "0 0 0"
 *   cat             copy stdin to stdout
 *   tag             "out" on stdout, "err" on stderr
 *   spew OUT ERR    OUT bytes 'o' on stdout and ERR bytes 'e' on stderr,
 *                   interleaved in 4 KiB pieces
 *   yes             'y' on stdout forever
 *   closeout        close stdout, sleep 100 ms, "done" on stderr, exit 0
 *   sleep           sleep forever
 *   ignterm         ignore SIGTERM, sleep forever
 *   readnone        exit 0 at once without reading stdin
 *   grandhold       fork a grandchild that holds stdout for 3 s; write "hi",
 *                   exit 0
 *   grandsleep      fork a grandchild that sleeps forever; sleep forever
 */
static int spawn_helper_child(int argc, char **argv)
{
  const char *mode = argv[0];
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  if (strcmp(mode, "exit") == 0)
    return argc > 1 ? atoi(argv[1]) : 0;
  if (strcmp(mode, "args") == 0) {
    for (int i = 1; i < argc; i++)
      printf("[%s]\n", argv[i]);
  } else if (strcmp(mode, "fds") == 0) {
    DIR *d = opendir("/proc/self/fd");
    if (!d)
      return 2;
    struct dirent *e;
    while ((e = readdir(d)))
      if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
        printf("%s ", e->d_name);
    closedir(d);
    printf("\n");
  } else if (strcmp(mode, "env") == 0) {
    for (int i = 1; i < argc; i++) {
      const char *v = getenv(argv[i]);
      if (v)
        printf("%s=%s\n", argv[i], v);
      else
        printf("%s unset\n", argv[i]);
    }
  } else if (strcmp(mode, "cwd") == 0) {
    char buf[PATH_MAX];
    if (!getcwd(buf, sizeof buf))
      return 2;
    printf("%s\n", buf);
  } else if (strcmp(mode, "sig") == 0) {
    print_status_line("SigBlk");
    print_status_line("SigIgn");
  } else if (strcmp(mode, "ids") == 0) {
    printf("%d %d %d\n", (int)getpid(), (int)getpgid(0), (int)getsid(0));
  } else if (strcmp(mode, "flags") == 0) {
    for (int i = 0; i < 3; i++)
      printf("%d ", (fcntl(i, F_GETFL) & O_NONBLOCK) != 0);
    printf("\n");
  } else if (strcmp(mode, "cat") == 0) {
    char buf[65536];
    ssize_t n;
    while ((n = read(0, buf, sizeof buf)) > 0)
      write_all(1, buf, (size_t)n);
  } else if (strcmp(mode, "tag") == 0) {
    write_all(1, "out", 3);
    write_all(2, "err", 3);
  } else if (strcmp(mode, "spew") == 0) {
    long out = atol(argv[1]), err = atol(argv[2]);
    char o[4096], e[4096];
    memset(o, 'o', sizeof o);
    memset(e, 'e', sizeof e);
    while (out > 0 || err > 0) {
      size_t a = out > 4096 ? 4096 : (size_t)out, b = err > 4096 ? 4096 : (size_t)err;
      write_all(1, o, a);
      write_all(2, e, b);
      out -= (long)a;
      err -= (long)b;
    }
  } else if (strcmp(mode, "yes") == 0) {
    char y[4096];
    memset(y, 'y', sizeof y);
    for (;;)
      write_all(1, y, sizeof y);
  } else if (strcmp(mode, "closeout") == 0) {
    close(1);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    write_all(2, "done", 4);
    _exit(0);
  } else if (strcmp(mode, "sleep") == 0) {
    sleep_forever();
  } else if (strcmp(mode, "ignterm") == 0) {
    signal(SIGTERM, SIG_IGN);
    sleep_forever();
  } else if (strcmp(mode, "readnone") == 0) {
    _exit(0);
  } else if (strcmp(mode, "grandhold") == 0) {
    if (fork() == 0) {
      sleep(3);
      _exit(0);
    }
    write_all(1, "hi", 2);
    _exit(0);
  } else if (strcmp(mode, "grandsleep") == 0) {
    if (fork() == 0)
      sleep_forever();
    sleep_forever();
  } else {
    return 2;
  }
  fflush(stdout);
  return 0;
}

/* Returns -1 when this process is not a helper child. */
static int spawn_helper_main(int argc, char **argv)
{
  if (argc >= 3 && strcmp(argv[1], "--child") == 0)
    return spawn_helper_child(argc - 2, argv + 2);
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  if (n <= 0)
    return 2;
  self_exe[n] = '\0';
  return -1;
}

/* argv for the helper child: self --child mode [a1 [a2]], in static storage
 * (good until the next call). */
static inline const char *const *helper(const char *mode, const char *a1, const char *a2)
{
  static const char *v[6];
  v[0] = self_exe;
  v[1] = "--child";
  v[2] = mode;
  v[3] = a1;
  v[4] = a1 ? a2 : NULL;
  v[5] = NULL;
  return v;
}

/* ---- leak checks --------------------------------------------------------------- */

int t_count_fds(void); /* helpers.c */
static int count_fds(void) { return t_count_fds(); }

/* True when this process has no child at all, running or zombie. */
static int no_children(void)
{
  siginfo_t si;
  memset(&si, 0, sizeof si);
  return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

/* Every spawn test starts from a clean slate and must leave one: no fd
 * leaked, no child (zombie or running) left behind. */
static int fds_before;

static int setup(void **state)
{
  (void)state;
  tdl__spawn_debug = 0;
  fds_before = count_fds();
  return 0;
}

static int teardown(void **state)
{
  (void)state;
  tdl__spawn_debug = 0;
  assert_int_equal(count_fds(), fds_before);
  assert_true(no_children());
  return 0;
}

/* Valgrind cannot recover from some failed execve() calls and turns
 * CLONE_VM|CLONE_VFORK into a fork; a few tests adapt. */
static inline int under_valgrind(void)
{
  const char *p = getenv("LD_PRELOAD");
  return p && strstr(p, "vgpreload") != NULL;
}

static inline tdl_time_t mono_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

#endif
