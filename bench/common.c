/* The benchmark harness shared by treadle-bench and the C peers (see bench.h). */
#include "bench.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double ts_diff(const struct timespec *a, const struct timespec *b)
{
  return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) * 1e-9;
}

static double tv_diff(const struct timeval *a, const struct timeval *b)
{
  return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_usec - a->tv_usec) * 1e-6;
}

void bench_begin(bench_span *s)
{
  memset(s, 0, sizeof *s);
  /* The rusage snapshots go first and the clock last (mirrored in
   * bench_end), so the wall span is the innermost one and does not include
   * the getrusage calls themselves. */
  if (getrusage(RUSAGE_SELF, &s->self0) != 0 || getrusage(RUSAGE_CHILDREN, &s->child0) != 0)
    bench_die("getrusage: %s", strerror(errno));
  clock_gettime(CLOCK_MONOTONIC, &s->t0);
}

void bench_end(bench_span *s)
{
  struct timespec t1;
  struct rusage self1, child1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (getrusage(RUSAGE_SELF, &self1) != 0 || getrusage(RUSAGE_CHILDREN, &child1) != 0)
    bench_die("getrusage: %s", strerror(errno));
  s->wall_s = ts_diff(&s->t0, &t1);
  s->user_s = tv_diff(&s->self0.ru_utime, &self1.ru_utime);
  s->sys_s = tv_diff(&s->self0.ru_stime, &self1.ru_stime);
  s->child_user_s = tv_diff(&s->child0.ru_utime, &child1.ru_utime);
  s->child_sys_s = tv_diff(&s->child0.ru_stime, &child1.ru_stime);
}

/* ru_maxrss is not used: it survives exec, so a benchmark started from a
 * script would report the launcher's peak (see shared/MEASURED.md). */
static long status_kb(const char *field)
{
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return -1;
  size_t len = strlen(field);
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, field, len) == 0 && line[len] == ':') {
      char *end;
      long v = strtol(line + len + 1, &end, 10);
      if (end != line + len + 1)
        kb = v;
      break;
    }
  }
  fclose(f);
  return kb;
}

long bench_peak_rss_kb(void) { return status_kb("VmHWM"); }

long bench_rss_kb(void) { return status_kb("VmRSS"); }

void bench_result(const char *impl, const char *bench, const bench_span *s, const char *keys_fmt, ...)
{
  char keys[1024];
  va_list ap;
  va_start(ap, keys_fmt);
  vsnprintf(keys, sizeof keys, keys_fmt, ap);
  va_end(ap);
  /* One printf so that the line is written whole even if stdout is shared. */
  printf("RESULT impl=%s bench=%s %s wall_s=%.6f user_s=%.6f sys_s=%.6f peak_rss_kb=%ld\n", impl, bench, keys,
         s->wall_s, s->user_s, s->sys_s, bench_peak_rss_kb());
  fflush(stdout);
}

/* Finds "--name value" or "--name=value"; name may be given with or without
 * its leading dashes.  Returns the value, or NULL when the option is absent. */
static const char *find_opt(int argc, char **argv, const char *name)
{
  while (*name == '-')
    name++;
  size_t len = strlen(name);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || a[1] != '-' || strncmp(a + 2, name, len) != 0)
      continue;
    if (a[2 + len] == '=')
      return a + 3 + len;
    if (a[2 + len] == '\0') {
      if (i + 1 >= argc) {
        fprintf(stderr, "%s: option --%s needs a value\n", argv[0], name);
        exit(2);
      }
      return argv[i + 1];
    }
  }
  return NULL;
}

long bench_opt_long(int argc, char **argv, const char *name, long dflt)
{
  const char *v = find_opt(argc, argv, name);
  if (!v)
    return dflt;
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0') {
    fprintf(stderr, "%s: bad value '%s' for option %s\n", argv[0], v, name);
    exit(2);
  }
  return n;
}

const char *bench_opt_str(int argc, char **argv, const char *name, const char *dflt)
{
  const char *v = find_opt(argc, argv, name);
  return v ? v : dflt;
}

void bench_die(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs("bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

void bench_raise_nofile(void)
{
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  if (rl.rlim_cur != rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    /* Failing here is not fatal: the workload reports EMFILE itself if it
     * really needs more fds than it got. */
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
      fprintf(stderr, "bench: setrlimit(RLIMIT_NOFILE): %s\n", strerror(errno));
  }
}
