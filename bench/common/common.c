/* SPDX-License-Identifier: MIT */
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
 * script would report the launcher's peak. */
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

/* The running workload's options, set by bench_run(); NULL in a program that
 * parses its own command line. */
static const bench_opt *declared;

static const bench_opt *spec_of(const bench_opt *opts, const char *name, size_t len)
{
  for (const bench_opt *o = opts; o && o->name; o++)
    if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
      return o;
  return NULL;
}

/* Finds "--name value" or "--name=value"; name may be given with or without
 * its leading dashes.  Returns the value, or NULL when the option is absent. */
static const char *find_opt(int argc, char **argv, const char *name)
{
  while (*name == '-')
    name++;
  size_t len = strlen(name);
  /* bench_run() rejected every option not in the table, so an option read
   * but not declared there could never be given: the table is out of date. */
  if (declared && !spec_of(declared, name, len))
    bench_die("internal error: workload %s reads --%s, which its option table does not declare", argv[0], name);
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
    fprintf(stderr, "%s: bad value '%s' for option --%s\n", argv[0], v, name);
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

static void usage_workload(FILE *f, const char *prog, const bench_workload *w)
{
  fprintf(f, "%s %s%s\n    %s\n", prog, w->name, w->main ? "" : " (not built into this program)", w->summary);
  for (const bench_opt *o = w->opts; o && o->name; o++) {
    char head[96];
    snprintf(head, sizeof head, "--%s %s", o->name, o->arg);
    if (strlen(head) > 30) /* a long list of choices: the help on a line of its own */
      fprintf(f, "      %s\n      %-30s %s\n", head, "", o->help);
    else
      fprintf(f, "      %-30s %s\n", head, o->help);
  }
}

static void list_workloads(FILE *f, const bench_workload *w, size_t n)
{
  for (size_t i = 0; i < n; i++)
    fprintf(f, "%s%s", i ? ", " : "", w[i].name);
}

static bool is_help(const char *a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

/* Whether v is one of the '|'-separated words of choices. */
static bool among(const char *choices, const char *v)
{
  size_t len = strlen(v);
  for (const char *c = choices; *c;) {
    const char *bar = strchr(c, '|');
    size_t clen = bar ? (size_t)(bar - c) : strlen(c);
    if (clen == len && strncmp(c, v, len) == 0)
      return true;
    c += clen + (bar != NULL);
  }
  return false;
}

/* Checks one value against its option; prints why not and returns false. */
static bool value_ok(const char *prog, const bench_workload *w, const bench_opt *o, const char *v)
{
  if (strcmp(o->arg, "N") == 0) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < o->min || n > o->max) {
      fprintf(stderr, "%s %s: bad value '%s' for --%s: need an integer from %ld to %ld\n", prog, w->name, v,
              o->name, o->min, o->max);
      return false;
    }
  } else if (strchr(o->arg, '|') && !among(o->arg, v)) {
    fprintf(stderr, "%s %s: bad value '%s' for --%s: need one of %s\n", prog, w->name, v, o->name, o->arg);
    return false;
  }
  return true;
}

int bench_run(const char *prog, const bench_workload *w, size_t n, int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: %s WORKLOAD [--option value]...  (workloads: ", prog);
    list_workloads(stderr, w, n);
    fprintf(stderr, "; '%s --help' lists their options)\n", prog);
    return 2;
  }
  if (is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
    printf("usage: %s WORKLOAD [--option value]...\n"
           "       %s WORKLOAD --help\n"
           "Runs one workload of docs/BENCHMARKS.md and prints one RESULT line on stdout.\n"
           "Options may also be written --option=value.\n\n",
           prog, prog);
    for (size_t i = 0; i < n; i++) {
      usage_workload(stdout, prog, &w[i]);
      if (i + 1 < n)
        putchar('\n');
    }
    return fflush(stdout) == 0 ? 0 : 1;
  }
  const bench_workload *wl = NULL;
  for (size_t i = 0; i < n && !wl; i++)
    if (strcmp(argv[1], w[i].name) == 0)
      wl = &w[i];
  if (!wl) {
    fprintf(stderr, "%s: unknown workload '%s' (", prog, argv[1]);
    list_workloads(stderr, w, n);
    fprintf(stderr, ")\n");
    return 2;
  }
  /* --help anywhere prints the workload's options and runs nothing. */
  for (int i = 2; i < argc; i++) {
    if (is_help(argv[i])) {
      usage_workload(stdout, prog, wl);
      return fflush(stdout) == 0 ? 0 : 1;
    }
  }
  if (!wl->main) {
    fprintf(stderr, "%s: workload '%s' is not built into this program\n", prog, wl->name);
    return 2;
  }
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || a[1] != '-' || a[2] == '\0') {
      fprintf(stderr, "%s %s: unexpected argument '%s' (options are --name value)\n", prog, wl->name, a);
      return 2;
    }
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const bench_opt *o = spec_of(wl->opts, name, len);
    if (!o) {
      fprintf(stderr, "%s %s: unknown option '--%.*s' ('%s %s --help' lists the options)\n", prog, wl->name,
              (int)len, name, prog, wl->name);
      return 2;
    }
    const char *v;
    if (eq) {
      v = eq + 1;
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      fprintf(stderr, "%s %s: option --%s needs a value (%s)\n", prog, wl->name, o->name, o->arg);
      return 2;
    }
    if (!value_ok(prog, wl, o, v))
      return 2;
  }
  declared = wl->opts;
  return wl->main(argc - 1, argv + 1);
}
