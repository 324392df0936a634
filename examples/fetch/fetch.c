/* SPDX-License-Identifier: MIT */
/*
 * fetch: fetch from several HTTP servers at once, all under one deadline.
 *
 *   fetch [--deadline MS] HOST:PORT...      (default deadline 2000 ms)
 *
 * One fiber per server connects (tdl_dns_dial: a literal, "localhost" or a
 * host name), sends "GET / HTTP/1.0" and reads the answer until the server
 * closes.  Every call of every fiber gets the same absolute deadline, taken
 * once at the start, so the whole fetch ends by then however many servers
 * there are and whatever they do: a server that accepts and never answers
 * costs its fiber the rest of the deadline, not the others.  Prints one line
 * per server, in the order given; exits 1 if any fetch failed.
 *
 * Try it against examples/httpd:  httpd --listen 127.0.0.1:8080 &
 *                                 fetch 127.0.0.1:8080 localhost:8080
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <treadle.h>

typedef struct job {
  const char *where;   /* "HOST:PORT" */
  tdl_time_t deadline; /* the same for every job */
  tdl_fiber_t fiber;
  size_t bytes;        /* of the answer */
  char status[64];     /* its first line */
  int error;           /* 0 or a negative errno */
} job;

static void *fetch(void *arg)
{
  job *j = arg;
  int fd = tdl_dns_dial(j->where, j->deadline);
  if (fd < 0) {
    j->error = fd;
    return NULL;
  }
  char req[512];
  int len = snprintf(req, sizeof req, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", j->where);
  if (len < 0 || (size_t)len >= sizeof req)
    j->error = -ENAMETOOLONG;
  else
    j->error = tdl_net_send_all(fd, req, (size_t)len, NULL, j->deadline);
  char buf[4096];
  ssize_t n;
  while (j->error == 0 && (n = tdl_read(fd, buf, sizeof buf, j->deadline)) != 0) {
    if (n < 0) {
      j->error = (int)n; /* -ETIMEDOUT when the deadline passed first */
      break;
    }
    if (j->bytes == 0) { /* keep the status line */
      size_t line = strcspn(buf, "\r\n");
      if (line >= sizeof j->status)
        line = sizeof j->status - 1;
      if (line > (size_t)n)
        line = (size_t)n;
      memcpy(j->status, buf, line);
      j->status[line] = '\0';
    }
    j->bytes += (size_t)n;
  }
  tdl_close(fd);
  return NULL;
}

typedef struct run {
  job *jobs;
  int n;
} run;

static void *fetch_all(void *arg)
{
  run *r = arg;
  for (int i = 0; i < r->n; i++) {
    int e = tdl_fiber_spawn(&r->jobs[i].fiber, tdl_fiber_loop(), fetch, &r->jobs[i], NULL);
    if (e < 0)
      r->jobs[i].error = e; /* fiber stays 0: not joined below */
  }
  /* The jobs run side by side; joining them in order waits for the slowest,
   * which the deadline bounds. */
  for (int i = 0; i < r->n; i++)
    if (r->jobs[i].fiber)
      tdl_fiber_join(r->jobs[i].fiber, NULL, TDL_FOREVER);
  return NULL;
}

int main(int argc, char **argv)
{
  long ms = 2000;
  int first = 1;
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: fetch [--deadline MS] HOST:PORT...\n");
    return 0;
  }
  if (argc > 2 && strcmp(argv[1], "--deadline") == 0) {
    char *end;
    ms = strtol(argv[2], &end, 10);
    if (end == argv[2] || *end || ms < 0) {
      fprintf(stderr, "fetch: --deadline \"%s\": wants milliseconds, 0 or more\n", argv[2]);
      return 2;
    }
    first = 3;
  }
  if (first >= argc) {
    fprintf(stderr, "usage: fetch [--deadline MS] HOST:PORT...\n");
    return 2;
  }
  run r = {.n = argc - first};
  r.jobs = calloc((size_t)r.n, sizeof *r.jobs);
  if (!r.jobs) {
    fprintf(stderr, "fetch: out of memory\n");
    return 1;
  }
  tdl_time_t deadline = tdl_after(ms * TDL_MSEC); /* one deadline for everything */
  for (int i = 0; i < r.n; i++)
    r.jobs[i] = (job){.where = argv[first + i], .deadline = deadline};
  int e = tdl_fiber_main(fetch_all, &r, NULL);
  if (e < 0) {
    fprintf(stderr, "fetch: %s\n", tdl_strerror(e));
    free(r.jobs);
    return 1;
  }
  int failed = 0;
  for (int i = 0; i < r.n; i++) {
    job *j = &r.jobs[i];
    if (j->error < 0) {
      printf("%s: %s after %zu bytes\n", j->where, tdl_strerror(j->error), j->bytes);
      failed = 1;
    } else {
      printf("%s: %zu bytes: %s\n", j->where, j->bytes, j->status);
    }
  }
  free(r.jobs);
  return failed;
}
