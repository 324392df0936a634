/* SPDX-License-Identifier: MIT */
/* tdl_process_spawn, tdl_process_wait/kill/release (src/spawn.c, spawn_child.c,
 * spawn_wait.c).  Every test checks afterwards that no fd leaked and that no
 * child, running or zombie, is left. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <treadle.h>

#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "helpers.h"
#include "process/process_internal.h"
#include "test_spawn_helper.h"

/* ---- helpers ---------------------------------------------------------------------- */


/* Everything from a non-blocking fd until EOF (NUL-terminated, malloc'd). */
static char *read_to_eof(int fd)
{
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap + 1);
  assert_non_null(buf);
  for (;;) {
    if (len == cap) {
      cap *= 2;
      buf = realloc(buf, cap + 1);
      assert_non_null(buf);
    }
    ssize_t n = read(fd, buf + len, cap - len);
    if (n > 0) {
      len += (size_t)n;
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN) {
      struct pollfd pfd = {fd, POLLIN, 0};
      poll(&pfd, 1, 10000);
    } else if (errno != EINTR) {
      fail_msg("read: %s", strerror(errno));
    }
  }
  buf[len] = '\0';
  return buf;
}

/* argv for the helper child: self --child mode args... (NULL-terminated list). */
static const char **helper_argv(const char *mode, ...)
{
  static const char *v[32];
  int n = 0;
  v[n++] = self_exe;
  v[n++] = "--child";
  v[n++] = mode;
  va_list ap;
  va_start(ap, mode);
  const char *a;
  while ((a = va_arg(ap, const char *)) && n < 31)
    v[n++] = a;
  va_end(ap);
  v[n] = NULL;
  return v;
}

/* Spawn with stdout captured, wait, return stdout; *status gets the status. */
static char *run_out(tdl_process_options *o, int *status)
{
  tdl_process p;
  o->stdio[1].mode = TDL_STDIO_PIPE;
  int r = tdl_process_spawn(&p, o);
  assert_int_equal(r, 0);
  char *out = read_to_eof(p.stdout_fd);
  int st = -1;
  assert_int_equal(tdl_process_wait(&p, &st, TDL_FOREVER), 0);
  tdl_process_destroy(&p);
  if (status)
    *status = st;
  return out;
}

static char *run_helper(int *status, const char *mode, const char *a1, const char *a2)
{
  tdl_process_options o = {0};
  o.argv = helper_argv(mode, a1, a2, (const char *)NULL);
  return run_out(&o, status);
}

static int spawn_err(tdl_process_options *o)
{
  tdl_process p;
  p.data = (void *)&p;
  int r = tdl_process_spawn(&p, o);
  if (r == 0) {
    tdl_process_destroy(&p);
    return 0;
  }
  /* A failed spawn leaves no child and no fd; release is harmless. */
  assert_int_equal(p.pid, 0);
  assert_int_equal(p.pidfd, -1);
  assert_int_equal(p.stdin_fd, -1);
  assert_int_equal(p.stdout_fd, -1);
  assert_int_equal(p.stderr_fd, -1);
  assert_ptr_equal(p.data, &p);
  tdl_process_destroy(&p);
  return r;
}

static int spawn_argv_err(const char *const *argv)
{
  tdl_process_options o = {0};
  o.argv = argv;
  return spawn_err(&o);
}

static char tmpdir[64];

static const char *make_file(const char *name, const char *content, mode_t mode)
{
  static char path[128];
  if (!tmpdir[0]) {
    strcpy(tmpdir, "/tmp/tdl-spawn-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
  }
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  assert_true(fd >= 0);
  write_all(fd, content, strlen(content));
  close(fd);
  assert_int_equal(chmod(path, mode), 0);
  return path;
}

/* ---- success paths --------------------------------------------------------------------- */

static void test_true_via_path(void **state)
{
  (void)state;
  const char *argv[] = {"true", NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  tdl_process p;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  assert_true(p.pid > 0);
  assert_true(p.pidfd >= 0);
  assert_true(fcntl(p.pidfd, F_GETFD) & FD_CLOEXEC);
  assert_int_equal(p.stdin_fd, -1);
  int st = -1;
  assert_int_equal(tdl_process_wait(&p, &st, TDL_FOREVER), 0);
  assert_true(tdl_process_exited(st));
  assert_int_equal(tdl_process_exit_code(st), 0);
  /* Waiting again returns the same status at once. */
  st = -1;
  assert_int_equal(tdl_process_wait(&p, &st, 0), 0);
  assert_int_equal(st, 0);
  assert_int_equal(tdl_process_kill(&p, SIGTERM), -ESRCH);
  tdl_process_destroy(&p);
  assert_int_equal(p.pid, 0);
  assert_int_equal(p.pidfd, -1);
  assert_int_equal(tdl_process_wait(&p, &st, 0), -EINVAL);
  tdl_process_destroy(&p); /* twice is harmless */
}

/* A zeroed handle holds no child: its fd fields read 0, which is stdin,
 * not an fd of the handle's. */
static void test_destroy_zeroed(void **state)
{
  (void)state;
  int opened = fcntl(0, F_GETFD) < 0 ? open("/dev/null", O_RDONLY) : -1; /* fd 0 open */
  assert_true(fcntl(0, F_GETFD) >= 0);
  tdl_process p;
  memset(&p, 0, sizeof p);
  tdl_process_destroy(&p);
  assert_true(fcntl(0, F_GETFD) >= 0);
  if (opened >= 0)
    close(opened);
}

static void test_exit_code(void **state)
{
  (void)state;
  int st;
  free(run_helper(&st, "exit", "42", NULL));
  assert_true(tdl_process_exited(st));
  assert_false(tdl_process_signaled(st));
  assert_int_equal(tdl_process_exit_code(st), 42);
  assert_int_equal(WEXITSTATUS(st), 42);
}

static void test_args_reach_program_verbatim(void **state)
{
  (void)state;
  tdl_process_options o = {0};
  o.argv = helper_argv("args", "a b", "", "$(touch /tmp/tdl-pwned)", "'\"; ls", "*", (const char *)NULL);
  int st;
  char *out = run_out(&o, &st);
  assert_string_equal(out, "[a b]\n[]\n[$(touch /tmp/tdl-pwned)]\n['\"; ls]\n[*]\n");
  assert_int_equal(st, 0);
  free(out);
  assert_int_not_equal(access("/tmp/tdl-pwned", F_OK), 0);
}

static void test_file_overrides_argv0(void **state)
{
  (void)state;
  const char *argv[] = {"not-a-program", "--child", "args", "x", NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  o.file = self_exe;
  o.argc = 4;
  char *out = run_out(&o, NULL);
  assert_string_equal(out, "[x]\n");
  free(out);
}

static void test_kill_and_signal_status(void **state)
{
  (void)state;
  tdl_process_options o = {0};
  o.argv = helper_argv("sleep", (const char *)NULL);
  tdl_process p;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  assert_int_equal(tdl_process_kill(&p, 0), 0);
  assert_int_equal(tdl_process_kill(&p, -1), -EINVAL);
  assert_int_equal(tdl_process_kill(&p, 1000), -EINVAL);
  assert_int_equal(tdl_process_kill(&p, SIGTERM), 0);
  int st;
  assert_int_equal(tdl_process_wait(&p, &st, TDL_FOREVER), 0);
  assert_true(tdl_process_signaled(st));
  assert_false(tdl_process_exited(st));
  assert_int_equal(tdl_process_term_signal(st), SIGTERM);
  assert_int_equal(tdl_process_kill(&p, SIGTERM), -ESRCH);
  tdl_process_destroy(&p);
}

static void test_kill_exited_unreaped(void **state)
{
  (void)state;
  const char *argv[] = {"/bin/true", NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  tdl_process p;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  struct pollfd pfd = {p.pidfd, POLLIN, 0};
  assert_int_equal(poll(&pfd, 1, 10000), 1); /* exited, still a zombie */
  assert_int_equal(tdl_process_kill(&p, SIGKILL), 0);
  int st;
  assert_int_equal(tdl_process_wait(&p, &st, TDL_FOREVER), 0);
  assert_int_equal(st, 0);
  tdl_process_destroy(&p);
}

static void test_wait_deadline(void **state)
{
  (void)state;
  tdl_process_options o = {0};
  o.argv = helper_argv("sleep", (const char *)NULL);
  tdl_process p;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  int st = 12345;
  /* A past deadline only looks. */
  assert_int_equal(tdl_process_wait(&p, &st, 0), -ETIMEDOUT);
  tdl_time_t t0 = mono_now();
  assert_int_equal(tdl_process_wait(&p, &st, t0 + 50 * TDL_MSEC), -ETIMEDOUT);
  tdl_time_t t1 = mono_now();
  assert_true(t1 - t0 >= 50 * TDL_MSEC);
  assert_true(t1 - t0 < 2 * TDL_SEC);
  assert_int_equal(st, 12345);
  assert_int_equal(tdl_process_kill(&p, SIGKILL), 0);
  assert_int_equal(tdl_process_wait(&p, &st, mono_now() + T_HANG), 0);
  assert_int_equal(tdl_process_term_signal(st), SIGKILL);
  tdl_process_destroy(&p);
}

static void test_release_kills_and_reaps(void **state)
{
  (void)state;
  tdl_process_options o = {0};
  o.argv = helper_argv("sleep", (const char *)NULL);
  o.stdio[0].mode = TDL_STDIO_PIPE;
  o.stdio[1].mode = TDL_STDIO_PIPE;
  o.stdio[2].mode = TDL_STDIO_PIPE;
  tdl_process p;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  tdl_process_destroy(&p); /* teardown checks: no zombie, no fd */
  assert_int_equal(p.stdout_fd, -1);
}

static void test_no_pidfd_fallback(void **state)
{
  (void)state;
  tdl__spawn_debug = TDL__DEBUG_NO_PIDFD;
  tdl_process_options o = {0};
  o.argv = helper_argv("sleep", (const char *)NULL);
  tdl_process p;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  assert_int_equal(p.pidfd, -1);
  int st;
  tdl_time_t t0 = mono_now();
  assert_int_equal(tdl_process_wait(&p, &st, t0 + 30 * TDL_MSEC), -ETIMEDOUT);
  assert_true(mono_now() - t0 >= 30 * TDL_MSEC);
  assert_int_equal(tdl_process_kill(&p, SIGUSR1), 0);
  assert_int_equal(tdl_process_wait(&p, &st, mono_now() + T_HANG), 0);
  assert_int_equal(tdl_process_term_signal(st), SIGUSR1);
  tdl_process_destroy(&p);

  o.argv = helper_argv("exit", "3", (const char *)NULL);
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  assert_int_equal(tdl_process_wait(&p, &st, TDL_FOREVER), 0);
  assert_int_equal(tdl_process_exit_code(st), 3);
  tdl_process_destroy(&p);
  o.argv = helper_argv("sleep", (const char *)NULL);
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  tdl_process_destroy(&p);
}

static void test_status_stolen(void **state)
{
  (void)state;
  const char *argv[] = {"/bin/true", NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  tdl_process p;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  int st;
  assert_int_equal(waitpid(p.pid, &st, 0), p.pid); /* someone else reaps */
  assert_int_equal(tdl_process_wait(&p, &st, TDL_FOREVER), -ECHILD);
  assert_int_equal(tdl_process_wait(&p, &st, 0), -ECHILD);
  assert_int_equal(tdl_process_kill(&p, SIGTERM), -ESRCH);
  tdl_process_destroy(&p);
}

/* ---- environment and working directory ---------------------------------------------- */

static void test_env_inherit_replace_edit(void **state)
{
  (void)state;
  setenv("TDL_T_A", "inherited", 1);
  setenv("TDL_T_B", "gone", 1);
  tdl_process_options o = {0};
  o.argv = helper_argv("env", "TDL_T_A", "TDL_T_B", "TDL_T_C", (const char *)NULL);
  char *out = run_out(&o, NULL);
  assert_string_equal(out, "TDL_T_A=inherited\nTDL_T_B=gone\nTDL_T_C unset\n");
  free(out);

  const char *env[] = {"TDL_T_C=only", NULL};
  o.env = env;
  out = run_out(&o, NULL);
  assert_string_equal(out, "TDL_T_A unset\nTDL_T_B unset\nTDL_T_C=only\n");
  free(out);

  const char *set[] = {"TDL_T_C=first", "TDL_T_A=over", "TDL_T_C=added", NULL};
  const char *unset[] = {"TDL_T_B", NULL};
  o.env = NULL;
  o.env_set = set;
  o.env_unset = unset;
  out = run_out(&o, NULL);
  assert_string_equal(out, "TDL_T_A=over\nTDL_T_B unset\nTDL_T_C=added\n");
  free(out);
  unsetenv("TDL_T_A");
  unsetenv("TDL_T_B");
}

static void test_path_of_child_env(void **state)
{
  (void)state;
  const char *argv[] = {"true", NULL};
  const char *env[] = {"PATH=/nonexistent-dir", NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  o.env = env;
  assert_int_equal(spawn_err(&o), -ENOENT);
  const char *set[] = {"PATH=/nonexistent:/bin:/usr/bin", NULL};
  o.env = NULL;
  o.env_set = set;
  assert_int_equal(spawn_err(&o), 0);
  const char *env2[] = {"X=1", NULL}; /* no PATH: /bin:/usr/bin */
  o.env = env2;
  o.env_set = NULL;
  assert_int_equal(spawn_err(&o), 0);
}

static void test_cwd(void **state)
{
  (void)state;
  tdl_process_options o = {0};
  o.argv = helper_argv("cwd", (const char *)NULL);
  o.cwd = "/";
  char *out = run_out(&o, NULL);
  assert_string_equal(out, "/\n");
  free(out);
  /* A relative program path is taken in the child's working directory. */
  make_file("prog", "#!/bin/sh\necho here\n", 0755);
  const char *argv[] = {"./prog", NULL};
  o.argv = argv;
  o.cwd = tmpdir;
  out = run_out(&o, NULL);
  assert_string_equal(out, "here\n");
  free(out);
}

/* ---- bad input -------------------------------------------------------------------------- */

static void test_invalid_arguments(void **state)
{
  (void)state;
  tdl_process p;
  tdl_process_options o = {0};
  assert_int_equal(tdl_process_spawn(NULL, &o), -EINVAL);
  assert_int_equal(tdl_process_spawn(&p, NULL), -EINVAL);
  assert_int_equal(spawn_err(&o), -EINVAL); /* argv NULL */
  const char *empty[] = {NULL};
  assert_int_equal(spawn_argv_err(empty), -EINVAL);

  /* With argc, a NULL in the wrong place is caught. */
  const char *hole[] = {"/bin/true", NULL, "x", NULL};
  o.argv = hole;
  o.argc = 3;
  assert_int_equal(spawn_err(&o), -EINVAL);
  const char *unterminated[] = {"/bin/true", "x", "y", NULL};
  o.argv = unterminated;
  o.argc = 2;
  assert_int_equal(spawn_err(&o), -EINVAL);
  o.argc = 3;
  assert_int_equal(spawn_err(&o), 0);
  o.argc = 0;

  const char *bad_set[] = {"NOEQUALS", NULL};
  o.env_set = bad_set;
  assert_int_equal(spawn_err(&o), -EINVAL);
  const char *bad_set2[] = {"=value", NULL};
  o.env_set = bad_set2;
  assert_int_equal(spawn_err(&o), -EINVAL);
  o.env_set = NULL;
  const char *bad_unset[] = {"A=B", NULL};
  o.env_unset = bad_unset;
  assert_int_equal(spawn_err(&o), -EINVAL);
  const char *bad_unset2[] = {"", NULL};
  o.env_unset = bad_unset2;
  assert_int_equal(spawn_err(&o), -EINVAL);
  o.env_unset = NULL;

  o.stdio[0].mode = (tdl_stdio_mode)99;
  assert_int_equal(spawn_err(&o), -EINVAL);
  o.stdio[0].mode = TDL_STDIO_STDOUT;
  assert_int_equal(spawn_err(&o), -EINVAL);
  o.stdio[0].mode = TDL_STDIO_DEFAULT;
  o.stdio[1].mode = TDL_STDIO_STDOUT;
  assert_int_equal(spawn_err(&o), -EINVAL);
  o.stdio[1].mode = TDL_STDIO_FD;
  o.stdio[1].fd = -1;
  assert_int_equal(spawn_err(&o), -EBADF);
  o.stdio[1].fd = 987;
  assert_int_equal(spawn_err(&o), -EBADF);
  o.stdio[1].mode = TDL_STDIO_DEFAULT;
  o.flags = 0x100;
  assert_int_equal(spawn_err(&o), -EINVAL);
}

static void test_exec_errors(void **state)
{
  (void)state;
  const char *a1[] = {"/nonexistent/program", NULL};
  assert_int_equal(spawn_argv_err(a1), -ENOENT);
  const char *a2[] = {"tdl-no-such-program-anywhere", NULL};
  assert_int_equal(spawn_argv_err(a2), -ENOENT);
  const char *a3[] = {"", NULL};
  assert_int_equal(spawn_argv_err(a3), -ENOENT);
  const char *a4[] = {"/etc/passwd/x", NULL};
  assert_int_equal(spawn_argv_err(a4), -ENOTDIR);
  const char *a5[] = {"/tmp", NULL};
  assert_int_equal(spawn_argv_err(a5), -EACCES);

  const char *noexec = make_file("noexec", "#!/bin/sh\nexit 0\n", 0644);
  const char *a6[] = {noexec, NULL};
  assert_int_equal(spawn_argv_err(a6), -EACCES);

  const char *script = make_file("noshebang", "echo hello\n", 0755);
  const char *a7[] = {script, NULL};
  assert_int_equal(spawn_argv_err(a7), -ENOEXEC);

  /* Found in PATH but not executable, and nothing executable later: EACCES. */
  make_file("tdl-nx", "#!/bin/sh\n", 0644);
  char path[256];
  snprintf(path, sizeof path, "PATH=%s:/bin", tmpdir);
  const char *set[] = {path, NULL};
  const char *a8[] = {"tdl-nx", NULL};
  tdl_process_options o = {0};
  o.argv = a8;
  o.env_set = set;
  assert_int_equal(spawn_err(&o), -EACCES);

  /* One string longer than MAX_ARG_STRLEN (128 KiB).  Valgrind kills a
   * child whose execve fails this late ("EXEC FAILED: I can't recover"). */
  if (under_valgrind())
    return;
  size_t big = 200 * 1024;
  char *huge = malloc(big + 1);
  assert_non_null(huge);
  memset(huge, 'x', big);
  huge[big] = '\0';
  const char *a9[] = {"/bin/true", huge, NULL};
  assert_int_equal(spawn_argv_err(a9), -E2BIG);
  free(huge);
}

static void test_bad_cwd(void **state)
{
  (void)state;
  const char *argv[] = {"/bin/true", NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  o.cwd = "/nonexistent-dir/sub";
  assert_int_equal(spawn_err(&o), -ENOENT);
  o.cwd = "/etc/passwd";
  assert_int_equal(spawn_err(&o), -ENOTDIR);
  o.cwd = "";
  assert_int_equal(spawn_err(&o), -ENOENT);
}

/* ---- fds ---------------------------------------------------------------------------------- */

static void check_fds_closed(int debug)
{
  /* Deliberately leaked: not close-on-exec. */
  int leak1 = open("/dev/null", O_RDONLY);
  int leak2 = dup(leak1);
  int leak3 = fcntl(leak1, F_DUPFD, 100);
  assert_true(leak1 >= 3 && leak2 >= 3 && leak3 >= 100);
  tdl__spawn_debug = debug;
  tdl_process_options o = {0};
  o.argv = helper_argv("fds", (const char *)NULL);
  o.stdio[0].mode = TDL_STDIO_PIPE;
  o.stdio[2].mode = TDL_STDIO_NULL;
  tdl_process p;
  o.stdio[1].mode = TDL_STDIO_PIPE;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  tdl__spawn_debug = 0;
  char *out = read_to_eof(p.stdout_fd);
  int st;
  assert_int_equal(tdl_process_wait(&p, &st, TDL_FOREVER), 0);
  assert_int_equal(st, 0);
  tdl_process_destroy(&p);
  /* Only 0, 1, 2 (valgrind keeps its own fds above 1000). */
  char *save, *tok;
  for (tok = strtok_r(out, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
    int fd = atoi(tok);
    assert_true(fd <= 2 || fd >= 1000);
  }
  free(out);
  close(leak1);
  close(leak2);
  close(leak3);
}

static void test_fds_closed_close_range(void **state)
{
  (void)state;
  check_fds_closed(0);
}

static void test_fds_closed_proc_walk(void **state)
{
  (void)state;
  check_fds_closed(TDL__DEBUG_NO_CLOSE_RANGE);
}

static void test_fds_closed_brute_force(void **state)
{
  (void)state;
  check_fds_closed(TDL__DEBUG_NO_CLOSE_RANGE | TDL__DEBUG_NO_PROC);
}

static void test_pipe_ends(void **state)
{
  (void)state;
  tdl_process_options o = {0};
  o.argv = helper_argv("flags", (const char *)NULL);
  o.stdio[0].mode = TDL_STDIO_PIPE;
  o.stdio[2].mode = TDL_STDIO_PIPE;
  o.stdio[1].mode = TDL_STDIO_PIPE;
  tdl_process p;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  int fds[3] = {p.stdin_fd, p.stdout_fd, p.stderr_fd};
  for (int i = 0; i < 3; i++) {
    assert_true(fds[i] >= 0);
    assert_true(fcntl(fds[i], F_GETFL) & O_NONBLOCK);
    assert_true(fcntl(fds[i], F_GETFD) & FD_CLOEXEC);
  }
  assert_int_equal(fcntl(p.stdin_fd, F_GETFL) & O_ACCMODE, O_WRONLY);
  assert_int_equal(fcntl(p.stdout_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
  char *out = read_to_eof(p.stdout_fd);
  assert_string_equal(out, "0 0 0 \n"); /* the child's ends block */
  free(out);
  /* Taking an fd: close it and set the field to -1. */
  close(p.stderr_fd);
  p.stderr_fd = -1;
  assert_int_equal(tdl_process_wait(&p, NULL, TDL_FOREVER), 0);
  tdl_process_destroy(&p);
}

static void test_stdio_null_fd_merge(void **state)
{
  (void)state;
  int pfd[2];
  assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
  tdl_process_options o = {0};
  o.argv = helper_argv("cat", (const char *)NULL);
  o.stdio[0].mode = TDL_STDIO_NULL; /* EOF at once */
  o.stdio[1].mode = TDL_STDIO_FD;
  o.stdio[1].fd = pfd[1];
  tdl_process p;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  assert_int_equal(tdl_process_wait(&p, NULL, TDL_FOREVER), 0);
  tdl_process_destroy(&p);
  /* The caller's fd is untouched: still open, still close-on-exec. */
  assert_true(fcntl(pfd[1], F_GETFD) & FD_CLOEXEC);

  o.argv = helper_argv("tag", (const char *)NULL);
  o.stdio[0].mode = TDL_STDIO_DEFAULT;
  o.stdio[2].mode = TDL_STDIO_STDOUT;
  assert_int_equal(tdl_process_spawn(&p, &o), 0);
  assert_int_equal(tdl_process_wait(&p, NULL, TDL_FOREVER), 0);
  tdl_process_destroy(&p);
  close(pfd[1]);
  fcntl(pfd[0], F_SETFL, O_NONBLOCK);
  char *out = read_to_eof(pfd[0]);
  assert_string_equal(out, "outerr");
  free(out);
  close(pfd[0]);
}

/* In a forked test process: the parent's own fds 0-2 are unusual. */
static int in_fork(void (*fn)(void))
{
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    fn();
    _exit(0);
  }
  assert_true(pid > 0);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return st;
}

#define CHECK(c)  \
  do {            \
    if (!(c))     \
      _exit(100 + __LINE__ % 100); \
  } while (0)

static void swap_stdout_stderr(void)
{
  int a[2], b[2];
  CHECK(pipe(a) == 0 && pipe(b) == 0);
  CHECK(dup2(a[1], 1) == 1 && dup2(b[1], 2) == 2);
  close(a[1]);
  close(b[1]);
  tdl_process_options o = {0};
  o.argv = helper_argv("tag", (const char *)NULL);
  o.stdio[1] = (tdl_stdio){TDL_STDIO_FD, 2};
  o.stdio[2] = (tdl_stdio){TDL_STDIO_FD, 1};
  tdl_process p;
  CHECK(tdl_process_spawn(&p, &o) == 0);
  int st;
  CHECK(tdl_process_wait(&p, &st, TDL_FOREVER) == 0 && st == 0);
  tdl_process_destroy(&p);
  close(1);
  close(2);
  char buf[16] = {0};
  CHECK(read(a[0], buf, sizeof buf) == 3 && memcmp(buf, "err", 3) == 0);
  CHECK(read(b[0], buf, sizeof buf) == 3 && memcmp(buf, "out", 3) == 0);
}

static void test_stdio_swap(void **state)
{
  (void)state;
  assert_int_equal(in_fork(swap_stdout_stderr), 0);
}

static void parent_without_stdio(void)
{
  close(0);
  close(1);
  close(2);
  /* Pipes and the error pipe now get numbers 0-2 in the parent. */
  tdl_process_options o = {0};
  o.argv = helper_argv("cat", (const char *)NULL);
  o.stdio[0].mode = TDL_STDIO_PIPE;
  o.stdio[1].mode = TDL_STDIO_PIPE;
  o.stdio[2].mode = TDL_STDIO_PIPE;
  tdl_process p;
  CHECK(tdl_process_spawn(&p, &o) == 0);
  CHECK(write(p.stdin_fd, "ping", 4) == 4);
  close(p.stdin_fd);
  p.stdin_fd = -1;
  char *out = read_to_eof(p.stdout_fd);
  CHECK(strcmp(out, "ping") == 0);
  free(out);
  int st;
  CHECK(tdl_process_wait(&p, &st, TDL_FOREVER) == 0 && st == 0);
  tdl_process_destroy(&p);
  /* And an exec error still reaches us. */
  const char *bad[] = {"/nonexistent", NULL};
  o.argv = bad;
  CHECK(tdl_process_spawn(&p, &o) == -ENOENT);
}

static void test_parent_without_stdio(void **state)
{
  (void)state;
  assert_int_equal(in_fork(parent_without_stdio), 0);
}

/* ---- signals, groups, sessions -------------------------------------------------------------- */

static void on_usr1(int sig) { (void)sig; }

/* "SigBlk:\t0000000000000002\nSigIgn:\t..." -> the two masks. */
static void sig_masks(unsigned flags, unsigned long long *blk, unsigned long long *ign)
{
  tdl_process_options o = {0};
  o.argv = helper_argv("sig", (const char *)NULL);
  o.flags = flags;
  char *out = run_out(&o, NULL);
  char *b = strstr(out, "SigBlk:"), *i = strstr(out, "SigIgn:");
  assert_non_null(b);
  assert_non_null(i);
  *blk = strtoull(b + 7, NULL, 16);
  *ign = strtoull(i + 7, NULL, 16);
  free(out);
}

#define BIT(sig) (1ull << ((sig) - 1))

static void test_signals_reset(void **state)
{
  (void)state;
  struct sigaction sa, old_usr1, old_usr2, old_pipe;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, &old_usr1);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGUSR2, &sa, &old_usr2);
  sigaction(SIGPIPE, &sa, &old_pipe);
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  pthread_sigmask(SIG_BLOCK, &block, &old_mask);

  unsigned long long blk, ign;
  sig_masks(0, &blk, &ign);
  assert_int_equal(blk, 0);               /* empty mask */
  assert_true(ign & BIT(SIGUSR2));        /* ignored stays ignored */
  assert_false(ign & BIT(SIGPIPE));       /* except SIGPIPE */
  assert_false(ign & BIT(SIGUSR1));

  sig_masks(TDL_PROCESS_KEEP_SIGMASK | TDL_PROCESS_KEEP_SIGPIPE, &blk, &ign);
  assert_true(blk & BIT(SIGINT));
  assert_true(ign & BIT(SIGPIPE));

  /* Our mask is back as it was after each spawn. */
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  assert_true(sigismember(&now, SIGINT));
  assert_false(sigismember(&now, SIGTERM));

  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  sigaction(SIGUSR1, &old_usr1, NULL);
  sigaction(SIGUSR2, &old_usr2, NULL);
  sigaction(SIGPIPE, &old_pipe, NULL);
}

static void ids(unsigned flags, int pgid, int *pid, int *pg, int *sid)
{
  tdl_process_options o = {0};
  o.argv = helper_argv("ids", (const char *)NULL);
  o.flags = flags;
  o.pgid = pgid;
  char *out = run_out(&o, NULL);
  assert_int_equal(sscanf(out, "%d %d %d", pid, pg, sid), 3);
  free(out);
}

static void test_pgid_and_session(void **state)
{
  (void)state;
  int pid, pg, sid;
  ids(0, 0, &pid, &pg, &sid);
  assert_int_equal(pg, getpgid(0));
  assert_int_equal(sid, getsid(0));
  ids(TDL_PROCESS_SETPGID, 0, &pid, &pg, &sid);
  assert_int_equal(pg, pid);
  assert_int_equal(sid, getsid(0));
  ids(TDL_PROCESS_SETSID, 0, &pid, &pg, &sid);
  assert_int_equal(sid, pid);
  assert_int_equal(pg, pid);
  /* Joining a group in another session is refused: the error comes back. */
  const char *argv[] = {"/bin/true", NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  o.flags = TDL_PROCESS_SETSID | TDL_PROCESS_SETPGID;
  o.pgid = getpgid(0);
  assert_int_equal(spawn_err(&o), -EPERM);
}

/* ---- resource exhaustion ------------------------------------------------------------------ */

static void out_of_fds(void)
{
  const char *argv[] = {"/bin/true", NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  o.stdio[0].mode = TDL_STDIO_PIPE;
  o.stdio[1].mode = TDL_STDIO_PIPE;
  o.stdio[2].mode = TDL_STDIO_NULL;
  int top = 0;
  for (int fd = 0; fd < 1024; fd++)
    if (fcntl(fd, F_GETFD) >= 0)
      top = fd;
  /* Fill the gaps below the highest fd, so that the limit leaves exactly
   * `spare` free numbers. */
  int fill;
  while ((fill = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0 && fill < top)
    ;
  if (fill > top)
    close(fill);
  int base = count_fds();
  int emfile = 0, ok = 0;
  for (int spare = 0; spare <= 10; spare++) {
    struct rlimit rl = {(rlim_t)(top + 1 + spare), (rlim_t)(top + 1 + spare)};
    if (rl.rlim_cur < 4)
      continue;
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
    rl.rlim_max = old.rlim_max;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    tdl_process p;
    int r = tdl_process_spawn(&p, &o);
    CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
    if (r == 0) {
      ok++;
      CHECK(tdl_process_wait(&p, NULL, TDL_FOREVER) == 0);
      tdl_process_destroy(&p);
    } else {
      CHECK(r == -EMFILE);
      CHECK(p.pid == 0 && p.stdin_fd == -1 && p.stdout_fd == -1);
      emfile++;
    }
    CHECK(count_fds() == base);
    CHECK(no_children());
  }
  CHECK(emfile >= 7); /* each fd tdl_process_spawn needs was, in turn, the missing one */
  CHECK(ok >= 1);
}

static void test_out_of_fds(void **state)
{
  (void)state;
  /* Valgrind 3.19 asserts (syswrap-main.c:2277) when a clone it turned into
   * a fork fails for want of an fd for the pidfd. */
  if (under_valgrind())
    T_SKIP("valgrind asserts when a clone it turned into a fork fails for want of an fd");
  assert_int_equal(in_fork(out_of_fds), 0);
}

static void out_of_processes(void)
{
  struct passwd *pw = getpwnam("nobody");
  uid_t uid = pw ? pw->pw_uid : 65534;
  gid_t gid = pw ? pw->pw_gid : 65534;
  if (getuid() == 0) {
    /* Root is exempt from RLIMIT_NPROC: become nobody first. */
    if (setgid(gid) != 0 || setuid(uid) != 0)
      _exit(77);
    prctl(PR_SET_DUMPABLE, 1); /* keep /proc/self/fd readable */
  }
  struct rlimit rl = {0, 0};
  CHECK(setrlimit(RLIMIT_NPROC, &rl) == 0);
  const char *argv[] = {"/bin/true", NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  o.stdio[1].mode = TDL_STDIO_PIPE;
  int base = count_fds();
  tdl_process p;
  int r = tdl_process_spawn(&p, &o);
  CHECK(r == -EAGAIN);
  CHECK(p.pid == 0 && p.stdout_fd == -1 && p.pidfd == -1);
  CHECK(count_fds() == base);
  CHECK(no_children());
}

static void test_out_of_processes(void **state)
{
  (void)state;
  int st = in_fork(out_of_processes);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
    T_SKIP("running as root, and setuid() to nobody was refused");
  assert_int_equal(st, 0);
}

/* ---- threads ---------------------------------------------------------------------------------- */

static void *spawn_many(void *arg)
{
  (void)arg;
  const char *argv[] = {"/bin/true", NULL};
  tdl_process_options o = {0};
  o.argv = argv;
  o.stdio[1].mode = TDL_STDIO_PIPE;
  for (int i = 0; i < 25; i++) {
    tdl_process p;
    if (tdl_process_spawn(&p, &o) != 0)
      return (void *)1;
    int st = -1;
    if (tdl_process_wait(&p, &st, TDL_FOREVER) != 0 || st != 0)
      return (void *)2;
    tdl_process_destroy(&p);
  }
  return NULL;
}

static void test_threads(void **state)
{
  (void)state;
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, spawn_many, NULL), 0);
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(t[i], &r);
    assert_null(r);
  }
}

static void cleanup_tmpdir(void)
{
  if (!tmpdir[0])
    return;
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  char path[512];
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
    unlink(path);
  }
  if (d)
    closedir(d);
  rmdir(tmpdir);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(int argc, char **argv)
{
  int r = spawn_helper_main(argc, argv);
  if (r >= 0)
    return r;
  const struct CMUnitTest tests[] = {
      T(test_true_via_path),
      T(test_destroy_zeroed),
      T(test_exit_code),
      T(test_args_reach_program_verbatim),
      T(test_file_overrides_argv0),
      T(test_kill_and_signal_status),
      T(test_kill_exited_unreaped),
      T(test_wait_deadline),
      T(test_release_kills_and_reaps),
      T(test_no_pidfd_fallback),
      T(test_status_stolen),
      T(test_env_inherit_replace_edit),
      T(test_path_of_child_env),
      T(test_cwd),
      T(test_invalid_arguments),
      T(test_exec_errors),
      T(test_bad_cwd),
      T(test_fds_closed_close_range),
      T(test_fds_closed_proc_walk),
      T(test_fds_closed_brute_force),
      T(test_pipe_ends),
      T(test_stdio_null_fd_merge),
      T(test_stdio_swap),
      T(test_parent_without_stdio),
      T(test_signals_reset),
      T(test_pgid_and_session),
      T(test_out_of_fds),
      T(test_out_of_processes),
      T(test_threads),
  };
  r = cmocka_run_group_tests_name("spawn", tests, NULL, NULL);
  cleanup_tmpdir();
  return r;
}
