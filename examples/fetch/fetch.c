/* SPDX-License-Identifier: MIT */
/*
 * fetch: fetch from several HTTP servers at once, all under one deadline.
 *
 *   fetch [--deadline MS] [--cacert FILE] [--insecure] [https://]HOST:PORT...
 *                                           (default deadline 2000 ms)
 *
 * One fiber per server connects (tdl_dns_dial: a literal, "localhost" or a
 * host name), sends "GET / HTTP/1.0" and reads the answer until the server
 * closes.  Every call of every fiber gets the same absolute deadline, taken
 * once at the start, so the whole fetch ends by then however many servers
 * there are and whatever they do: a server that accepts and never answers
 * costs its fiber the rest of the deadline, not the others.  Prints one line
 * per server, in the order given; exits 1 if any fetch failed.
 *
 * https://HOST:PORT (where fetch is built with libtreadle-tls) fetches over
 * TLS: the server's certificate is verified against the system's trust store
 * (--cacert FILE: against FILE's instead) and HOST, unless --insecure says
 * not to verify at all; a refused certificate prints TLS's reason.  The
 * handshake is under the same deadline.
 *
 * Try it against examples/httpd:  httpd --listen 127.0.0.1:8080 &
 *                                 fetch 127.0.0.1:8080 localhost:8080
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <treadle.h>
#ifdef FETCH_TLS
#include <treadle/tls.h>
#endif

static const char HTTPS[] = "https://";

#ifdef FETCH_TLS
/* The TLS client configuration, shared by every job (NULL: no https). */
static struct tdl_tls_config *tls_cfg;
#endif

typedef struct job {
  const char *where;   /* "HOST:PORT", after any https:// */
  int tls;             /* an https:// URL */
  char why[200];       /* TLS's words for a TLS failure */
  tdl_time_t deadline; /* the same for every job */
  tdl_fiber_t fiber;
  size_t bytes;        /* of the answer */
  char status[64];     /* its first line */
  int error;           /* 0 or a negative errno */
} job;

#ifdef FETCH_TLS
/* HOST of "HOST:PORT" or "[HOST]:PORT", the name the certificate must have. */
static void host_of(const char *where, char *host, size_t cap)
{
  const char *start = where, *end = strrchr(where, ':');
  if (where[0] == '[') {
    start = where + 1;
    end = strchr(start, ']');
  }
  size_t n = end ? (size_t)(end - start) : strlen(start);
  if (n >= cap)
    n = cap - 1;
  memcpy(host, start, n);
  host[n] = '\0';
}
#endif

/* One transfer over fd, or over the TLS stream when there is one. */
static int send_all(int fd, void *tls, const char *p, size_t n, tdl_time_t deadline)
{
#ifdef FETCH_TLS
  if (tls)
    return tdl_tls_send_all(tls, p, n, NULL, deadline);
#endif
  (void)tls;
  return tdl_net_send_all(fd, p, n, NULL, deadline);
}

static ssize_t receive(int fd, void *tls, char *buf, size_t n, tdl_time_t deadline)
{
#ifdef FETCH_TLS
  if (tls)
    return tdl_tls_read(tls, buf, n, deadline);
#endif
  (void)tls;
  return tdl_read(fd, buf, n, deadline);
}

static void *fetch(void *arg)
{
  job *j = arg;
  int fd = tdl_dns_dial(j->where, j->deadline);
  if (fd < 0) {
    j->error = fd;
    return NULL;
  }
  void *tls = NULL;
#ifdef FETCH_TLS
  tdl_tls *s = NULL;
  if (j->tls) {
    char host[256];
    host_of(j->where, host, sizeof host);
    j->error = tdl_tls_new(&s, tls_cfg, fd, host);
    if (j->error == 0 && (j->error = tdl_tls_handshake(s, j->deadline)) < 0)
      snprintf(j->why, sizeof j->why, "%s", tdl_tls_error(s));
    tls = s;
  }
#endif
  char req[512];
  int len = snprintf(req, sizeof req, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", j->where);
  if (j->error == 0 && (len < 0 || (size_t)len >= sizeof req))
    j->error = -ENAMETOOLONG;
  else if (j->error == 0)
    j->error = send_all(fd, tls, req, (size_t)len, j->deadline);
  char buf[4096];
  ssize_t n;
  while (j->error == 0 && (n = receive(fd, tls, buf, sizeof buf, j->deadline)) != 0) {
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
#ifdef FETCH_TLS
  if (s && j->error == 0) /* the server's clean end, then ours */
    (void)tdl_tls_shutdown(s, j->deadline);
  if (s && j->error < 0 && !j->why[0] && j->error != -ETIMEDOUT)
    snprintf(j->why, sizeof j->why, "%s", tdl_tls_error(s)); /* -EPIPE: "without close_notify" */
  tdl_tls_free(s);
#endif
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

#define USAGE "usage: fetch [--deadline MS] [--cacert FILE] [--insecure] [https://]HOST:PORT...\n"

int main(int argc, char **argv)
{
  long ms = 2000;
  int first = 1;
  const char *cacert = NULL;
  int insecure = 0, any_tls = 0;
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf(USAGE);
    return 0;
  }
  for (;;) {
    if (argc > first + 1 && strcmp(argv[first], "--deadline") == 0) {
      char *end;
      ms = strtol(argv[first + 1], &end, 10);
      if (end == argv[first + 1] || *end || ms < 0) {
        fprintf(stderr, "fetch: --deadline \"%s\": wants milliseconds, 0 or more\n", argv[first + 1]);
        return 2;
      }
      first += 2;
    } else if (argc > first + 1 && strcmp(argv[first], "--cacert") == 0) {
      cacert = argv[first + 1];
      first += 2;
    } else if (argc > first && strcmp(argv[first], "--insecure") == 0) {
      insecure = 1;
      first++;
    } else {
      break;
    }
  }
  if (first >= argc) {
    fprintf(stderr, USAGE);
    return 2;
  }
  for (int i = first; i < argc; i++)
    any_tls |= strncmp(argv[i], HTTPS, sizeof HTTPS - 1) == 0;
  if (any_tls) {
#ifdef FETCH_TLS
    char why[300];
    tdl_tls_options o = {.ca_file = cacert, .insecure = insecure != 0, .alpn = "http/1.1",
                         .error = why, .error_cap = sizeof why};
    if (tdl_tls_config_new(&tls_cfg, &o) < 0) {
      fprintf(stderr, "fetch: TLS: %s\n", why);
      return 2;
    }
#else
    fprintf(stderr, "fetch: https:// needs libtreadle-tls, which this build has not\n");
    return 2;
#endif
  } else if (cacert || insecure) {
    fprintf(stderr, "fetch: --cacert and --insecure are for https:// URLs\n");
    return 2;
  }
  run r = {.n = argc - first};
  r.jobs = calloc((size_t)r.n, sizeof *r.jobs);
  if (!r.jobs) {
    fprintf(stderr, "fetch: out of memory\n");
    return 1;
  }
  tdl_time_t deadline = tdl_after(ms * TDL_MSEC); /* one deadline for everything */
  for (int i = 0; i < r.n; i++) {
    const char *a = argv[first + i];
    int tls = strncmp(a, HTTPS, sizeof HTTPS - 1) == 0;
    r.jobs[i] = (job){.where = tls ? a + sizeof HTTPS - 1 : a, .tls = tls, .deadline = deadline};
  }
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
      printf("%s: %s after %zu bytes%s%s\n", j->where, tdl_strerror(j->error), j->bytes, j->why[0] ? ": " : "",
             j->why);
      failed = 1;
    } else {
      printf("%s: %zu bytes: %s\n", j->where, j->bytes, j->status);
    }
  }
  free(r.jobs);
#ifdef FETCH_TLS
  tdl_tls_config_free(tls_cfg);
#endif
  return failed;
}
