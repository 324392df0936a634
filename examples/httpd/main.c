/* SPDX-License-Identifier: MIT */
/*
 * httpd --listen ADDR:PORT [--loops N] [--accept distribute|reuseport] [--pin] [--root DIR] [--metrics]
 *       [--tls-cert FILE --tls-key FILE] ...
 *
 * A small HTTP/1.1 server on treadle loops.  See server.h.
 * SIGINT or SIGTERM: stop accepting, let requests in flight finish (within
 * --grace seconds), exit 0.
 *
 * One loop (--loops 1): one httpd_server, its own listener, no threads.
 * Several: a group of loops, an httpd_server on each, and a tdl_acceptor
 * that spreads the connections over them (--accept: distribute, the
 * default, hands each to the loop with the fewest open; reuseport gives
 * each loop a listener and lets the kernel's hash choose).
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"
#ifdef HTTPD_TLS
#include <treadle/tls.h>
#endif

static void usage(FILE *f, int code)
{
  fprintf(f, "usage: httpd --listen ADDR:PORT [options]\n"
             "  --listen ADDR:PORT      where to listen: 127.0.0.1:8080, *:8080 (all addresses),\n"
             "                          localhost:0 (any free port), [::1]:8080, unix:/run/httpd.sock\n"
             "  --loops N               loops (threads), 1 to %d; default: one per CPU this process may run on\n"
             "  --accept MODE           how several loops share connections: distribute (default: to the\n"
             "                          loop with the fewest open) or reuseport (the kernel's hash)\n"
             "  --pin                   pin each loop's thread to a CPU\n"
             "  --no-readahead          on io_uring loops, one receive request per read instead of\n"
             "                          receiving ahead, and accept4 instead of accepting ahead\n"
             "                          (tdl_fd_readahead)\n"
             "  --no-writebehind        on io_uring loops, a send(2) per answer instead of sending\n"
             "                          behind (tdl_fd_writebehind)\n"
             "  --compact-idle MS       give back the stack pages of connections idle longer than MS\n"
             "                          milliseconds (tdl_fiber_compact_idle); 0: never; default: 250\n"
             "  --metrics               answer GET /-/metrics with treadle's metrics of the process and\n"
             "                          of every loop, in the Prometheus text format\n"
             "  --root DIR              serve the files under DIR at /static/\n"
             "  --tls-cert FILE         serve HTTPS (ALPN http/1.1) with this PEM certificate chain...\n"
             "  --tls-key FILE          ...and its PEM private key (both or neither; the handshake must\n"
             "                          end within the first-byte timeout)\n"
             "  --tls-no-resumption     issue no session tickets, so that every HTTPS connection makes a\n"
             "                          full handshake (bench/run.py's tls group measures one)\n"
             "  --idle-timeout S        close a connection idle between requests this long (default 60)\n"
             "  --read-timeout S        the longest one whole request may take to arrive (default 10)\n"
             "  --write-timeout S       the longest one response may take to send (default 10)\n"
             "  --grace S               on SIGINT/SIGTERM, how long requests in flight may take (default 5)\n"
             "  --max-body BYTES        the largest request body (default 1048576; 413 beyond)\n"
             "  --max-head BYTES        the largest request line and headers (default 8192; 431 beyond)\n"
             "  --max-conns N           connections held at once, all loops together (default: as many as\n"
             "                          the fd limit leaves room for, 7/8 of it); at the cap the one idle\n"
             "                          longest is closed to make room\n"
             "  --first-byte-timeout S  close a connection that sends nothing this long after it is\n"
             "                          accepted (default: the read timeout)\n"
             "  --help                  this text\n"
             "S is a number of seconds (0.5 is allowed).\n",
          TDL_GROUP_MAX);
  exit(code);
}

/* A bad command line: say which option and value, and how to get help. */
static void bad(const char *opt, const char *value, const char *want)
{
  fprintf(stderr, "httpd: %s \"%s\": %s (httpd --help lists the options)\n", opt, value, want);
  exit(2);
}

static tdl_time_t seconds(const char *opt, const char *v)
{
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (end == v || *end || errno || !(d >= 0) || d > 1e9)
    bad(opt, v, "wants a number of seconds, 0 or more");
  return (tdl_time_t)(d * 1e9);
}

static unsigned long long count(const char *opt, const char *v, unsigned long long min, unsigned long long max)
{
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (end == v || *end || errno || v[0] == '-' || n < min || n > max) {
    char want[96];
    snprintf(want, sizeof want, "wants a whole number from %llu to %llu", min, max);
    bad(opt, v, want);
  }
  return n;
}

/* The command line into cfg and the loop settings; exits on --help (0) or
 * on anything wrong (2), naming the option and the value. */
static const char *tls_cert, *tls_key;
static bool tls_no_resumption;

static void parse_options(int argc, char **argv, httpd_config *cfg, unsigned *loops, tdl_acceptor_mode *mode,
                          bool *pin)
{
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
      usage(stdout, 0);
    if (strcmp(a, "--pin") == 0) {
      *pin = true;
      continue;
    }
    if (strcmp(a, "--no-readahead") == 0) {
      cfg->no_readahead = true;
      continue;
    }
    if (strcmp(a, "--no-writebehind") == 0) {
      cfg->no_writebehind = true;
      continue;
    }
    if (strcmp(a, "--tls-no-resumption") == 0) {
      tls_no_resumption = true;
      continue;
    }
    if (strcmp(a, "--metrics") == 0) {
      cfg->metrics = true;
      continue;
    }
    static const char *const with_value[] = {"--loops", "--accept", "--listen", "--root", "--idle-timeout",
                                             "--read-timeout", "--write-timeout", "--grace", "--max-body",
                                             "--max-head", "--max-conns", "--first-byte-timeout",
                                             "--tls-cert", "--tls-key", "--compact-idle"};
    bool known = false;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
      known = known || strcmp(a, with_value[k]) == 0;
    if (!known) {
      fprintf(stderr, "httpd: unknown option \"%s\" (httpd --help lists the options)\n", a);
      exit(2);
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "httpd: %s needs a value (httpd --help lists the options)\n", a);
      exit(2);
    }
    const char *v = argv[++i];
    if (strcmp(a, "--loops") == 0)
      *loops = (unsigned)count(a, v, 1, TDL_GROUP_MAX);
    else if (strcmp(a, "--accept") == 0) {
      if (strcmp(v, "distribute") == 0)
        *mode = TDL_ACCEPTOR_DISTRIBUTE;
      else if (strcmp(v, "reuseport") == 0)
        *mode = TDL_ACCEPTOR_REUSEPORT;
      else
        bad(a, v, "wants distribute or reuseport");
    } else if (strcmp(a, "--listen") == 0) {
      char why[TDL_ADDR_ERRLEN];
      if (tdl_addr_parse_error(v, why, sizeof why) < 0) { /* says which part is wrong, and where */
        fprintf(stderr, "httpd: --listen: %s\n", why);
        exit(2);
      }
      cfg->listen = v;
    } else if (strcmp(a, "--root") == 0)
      cfg->root = v;
    else if (strcmp(a, "--idle-timeout") == 0)
      cfg->idle_timeout = seconds(a, v);
    else if (strcmp(a, "--read-timeout") == 0)
      cfg->read_timeout = seconds(a, v);
    else if (strcmp(a, "--write-timeout") == 0)
      cfg->write_timeout = seconds(a, v);
    else if (strcmp(a, "--grace") == 0)
      cfg->grace = seconds(a, v);
    else if (strcmp(a, "--max-body") == 0)
      cfg->max_body = count(a, v, 0, UINT64_MAX);
    else if (strcmp(a, "--max-conns") == 0)
      cfg->max_conns = (unsigned)count(a, v, 1, UINT_MAX);
    else if (strcmp(a, "--first-byte-timeout") == 0)
      cfg->first_byte_timeout = seconds(a, v);
    else if (strcmp(a, "--compact-idle") == 0)
      cfg->compact_idle = (tdl_time_t)count(a, v, 0, 1000000000) * TDL_MSEC;
    else if (strcmp(a, "--tls-cert") == 0)
      tls_cert = v;
    else if (strcmp(a, "--tls-key") == 0)
      tls_key = v;
    else
      cfg->max_head = (uint32_t)count(a, v, 1, UINT32_MAX);
  }
  if (!cfg->listen) {
    fprintf(stderr, "httpd: --listen ADDR:PORT is required (httpd --help lists the options)\n");
    exit(2);
  }
  if (!tls_cert != !tls_key) {
    fprintf(stderr, "httpd: --tls-cert and --tls-key go together (httpd --help lists the options)\n");
    exit(2);
  }
}

/* The HTTPS configuration, shared by every loop; exits when the files will
 * not do, naming the file and why. */
static void tls_setup(httpd_config *cfg)
{
  if (!tls_cert)
    return;
#ifdef HTTPD_TLS
  char why[512];
  tdl_tls_options o = {.role = TDL_TLS_SERVER, .cert_file = tls_cert, .key_file = tls_key, .alpn = "http/1.1",
                       .no_resumption = tls_no_resumption, .error = why, .error_cap = sizeof why};
  int e = tdl_tls_config_new(&cfg->tls, &o);
  if (e < 0) {
    fprintf(stderr, "httpd: TLS: %s\n", why);
    exit(1);
  }
#else
  (void)cfg;
  fprintf(stderr, "httpd: --tls-cert: this httpd was built without libtreadle-tls (OpenSSL 3)\n");
  exit(2);
#endif
}

static void *run(void *arg)
{
  httpd_server *s = arg;
  int e = httpd_run(s);
  if (e < 0)
    fprintf(stderr, "httpd: %s\n", tdl_strerror(e));
  return (void *)(intptr_t)(e < 0);
}

/* ---- several loops ---- */

static struct {
  unsigned n;
  httpd_server *servers; /* one per loop */
  tdl_post *shutdowns;   /* posted to loop i: httpd_shutdown(&servers[i]) */
  tdl_acceptor *acceptor;
  tdl_group *group;           /* main thread only: in the loops, tdl_group_self() */
  tdl_signal sigint, sigterm; /* loop 0's */
  unsigned finished;          /* loops whose server has shut down (atomic) */
  int failed;                 /* atomic */
} mt;

static void shutdown_here(tdl_loop *loop, tdl_post *p)
{
  if (loop)
    httpd_shutdown(p->data);
}

/* On loop 0: stop accepting everywhere and shut every loop's server down
 * (a second signal cuts their grace short). */
static void on_signal_mt(tdl_loop *loop, tdl_signal *sig, int signum)
{
  (void)loop;
  (void)sig;
  (void)signum;
  tdl_acceptor_stop(mt.acceptor);
  for (unsigned i = 0; i < mt.n; i++)
    tdl_port_post(tdl_group_port(tdl_group_self(), i), &mt.shutdowns[i]); /* -EBUSY: still queued */
}

static void handle_conn(int fd, void *arg)
{
  (void)arg;
  httpd_serve_conn(&mt.servers[tdl_group_index()], fd);
}

static void *serve_slot(void *arg)
{
  int e = tdl_acceptor_serve(mt.acceptor, (unsigned)(intptr_t)arg);
  return (void *)(intptr_t)e;
}

static void *loop_main(void *arg)
{
  (void)arg;
  unsigned i = (unsigned)tdl_group_index();
  tdl_loop *loop = tdl_fiber_loop();
  if (i == 0) {
    tdl_signal_init(&mt.sigint, on_signal_mt, NULL);
    tdl_signal_init(&mt.sigterm, on_signal_mt, NULL);
    if (tdl_signal_start(loop, &mt.sigint, SIGINT) < 0 || tdl_signal_start(loop, &mt.sigterm, SIGTERM) < 0)
      fprintf(stderr, "httpd: cannot watch SIGINT/SIGTERM\n");
  }
  tdl_fiber_t acc;
  int e = tdl_fiber_spawn(&acc, loop, serve_slot, (void *)(intptr_t)i, &(tdl_fiber_options){.name = "accept"});
  if (e == 0) {
    e = httpd_run(&mt.servers[i]); /* until shut down, every connection closed */
    tdl_acceptor_stop(mt.acceptor); /* (a failed loop stops the others' accepting too) */
    void *r = NULL;
    tdl_fiber_join(acc, &r, TDL_FOREVER);
    if (e == 0 && (intptr_t)r < 0 && (intptr_t)r != -ECANCELED)
      e = (int)(intptr_t)r;
  }
  if (e < 0) {
    fprintf(stderr, "httpd: loop %u: %s\n", i, tdl_strerror(e));
    __atomic_store_n(&mt.failed, 1, __ATOMIC_RELAXED);
    on_signal_mt(loop, NULL, 0); /* take the others down with it */
  }
  if (__atomic_add_fetch(&mt.finished, 1, __ATOMIC_ACQ_REL) == mt.n)
    tdl_group_stop(tdl_group_self()); /* the last one out */
  return NULL;
}

/* When the group stops: loop 0 stops watching signals, so that it can end. */
static void on_group_stop(tdl_loop *loop, void *arg)
{
  (void)arg;
  if (tdl_group_index() == 0) {
    tdl_signal_stop(loop, &mt.sigint);
    tdl_signal_stop(loop, &mt.sigterm);
  }
}


/* Say "listening" once every loop serves: until then the acceptor hands
 * connections only to the loops that do, and a client that trusts the line
 * would see the first connections crowd onto the first loops.  (A loop that
 * fails to start is reported by the group; give up waiting after 5 s.) */
static void wait_until_serving(tdl_acceptor *a, unsigned loops)
{
  for (int tries = 0; tries < 5000; tries++) {
    unsigned serving = 0;
    for (unsigned i = 0; i < loops; i++) {
      tdl_acceptor_stats st;
      if (tdl_acceptor_stats_get(a, i, &st) == 0 && st.serving)
        serving++;
    }
    if (serving == loops)
      return;
    usleep(1000);
  }
}

static int run_loops(const httpd_config *cfg, unsigned loops, tdl_acceptor_mode mode, bool pin)
{
  mt.n = loops;
  mt.servers = calloc(loops, sizeof *mt.servers);
  mt.shutdowns = calloc(loops, sizeof *mt.shutdowns);
  if (!mt.servers || !mt.shutdowns) {
    fprintf(stderr, "httpd: out of memory\n");
    return 1;
  }
  httpd_config per_loop = *cfg;
  per_loop.listen = NULL; /* the acceptor listens */
  per_loop.handle_signals = false;
  /* The cap is the process's (fds are): each loop takes its share, and the
   * acceptor spreads connections evenly enough for shares to do. */
  unsigned total = cfg->max_conns && cfg->max_conns < tdl_conns_fd_room() ? cfg->max_conns : tdl_conns_fd_room();
  per_loop.max_conns = total / loops ? total / loops : 1;
  unsigned made = 0;
  int e = 0;
  for (; made < loops && e == 0; made++) {
    e = httpd_init(&mt.servers[made], &per_loop);
    tdl_post_init(&mt.shutdowns[made], shutdown_here, &mt.servers[made]);
  }
  if (e == 0)
    e = tdl_acceptor_new(&mt.acceptor, &(tdl_acceptor_options){.listen = cfg->listen, .loops = loops,
                                                                .mode = mode, .backlog = 4096,
                                                                .handler = handle_conn,
                                                                .max_conns = per_loop.max_conns * loops,
                                                                .stack_size = httpd_conn_stack_size(cfg)});
  if (e < 0) {
    char why[TDL_ADDR_ERRLEN];
    if (tdl_addr_parse_error(cfg->listen, why, sizeof why) < 0)
      fprintf(stderr, "httpd: --listen: %s\n", why);
    else
      fprintf(stderr, "httpd: cannot listen on %s%s%s: %s\n", cfg->listen, cfg->root ? " / open " : "",
              cfg->root ? cfg->root : "", tdl_strerror(e));
    while (made > 0)
      httpd_destroy(&mt.servers[--made]);
    return 1;
  }
  /* Blocked here, so in every loop's thread too: loop 0 reads them. */
  sigset_t sigs, old;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, &old);
  e = tdl_group_new(&mt.group, &(tdl_group_options){.loops = loops, .pin = pin, .main = loop_main,
                                                      .on_stop = on_group_stop});
  if (e == 0) {
    wait_until_serving(mt.acceptor, loops);
    tdl_addr at;
    tdl_acceptor_local_addr(mt.acceptor, &at);
    fprintf(stderr, "httpd: listening on %s (port %d), %u loops, %s\n", cfg->listen, tdl_addr_port(&at), loops, mode == TDL_ACCEPTOR_REUSEPORT ? "reuseport" : "distribute");
    e = tdl_group_wait(mt.group, TDL_FOREVER);
    tdl_group_free(mt.group);
    fprintf(stderr, "httpd: connections per loop:");
    for (unsigned i = 0; i < loops; i++) {
      tdl_acceptor_stats st;
      tdl_acceptor_stats_get(mt.acceptor, i, &st);
      fprintf(stderr, " %llu", (unsigned long long)st.accepted);
    }
    fprintf(stderr, "\n");
  } else {
    fprintf(stderr, "httpd: cannot start %u loops: %s\n", loops, tdl_strerror(e));
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  tdl_acceptor_free(mt.acceptor);
  for (unsigned i = 0; i < loops; i++)
    httpd_destroy(&mt.servers[i]);
  free(mt.servers);
  free(mt.shutdowns);
  return e < 0 || __atomic_load_n(&mt.failed, __ATOMIC_RELAXED) ? 1 : 0;
}

int main(int argc, char **argv)
{
  httpd_config cfg = httpd_defaults();
  cfg.listen = NULL;
  unsigned loops = 0;
  tdl_acceptor_mode mode = TDL_ACCEPTOR_DISTRIBUTE;
  bool pin = false;
  parse_options(argc, argv, &cfg, &loops, &mode, &pin);
  tls_setup(&cfg);
  /* Sends use MSG_NOSIGNAL; this is for anything else that writes to a socket. */
  signal(SIGPIPE, SIG_IGN);
  if (loops == 0) {
    cpu_set_t set;
    loops = sched_getaffinity(0, sizeof set, &set) == 0 ? (unsigned)CPU_COUNT(&set) : 1;
  }
  if (loops > 1) {
    int rc = run_loops(&cfg, loops, mode, pin);
#ifdef HTTPD_TLS
    tdl_tls_config_free(cfg.tls);
#endif
    return rc;
  }

  httpd_server s;
  int e = httpd_init(&s, &cfg);
  if (e < 0) {
    char why[TDL_ADDR_ERRLEN];
    if (tdl_addr_parse_error(cfg.listen, why, sizeof why) < 0) /* which part of it is wrong */
      fprintf(stderr, "httpd: --listen: %s\n", why);
    else
      fprintf(stderr, "httpd: cannot listen on %s%s%s: %s\n", cfg.listen, cfg.root ? " / open " : "",
              cfg.root ? cfg.root : "", tdl_strerror(e));
    return 1;
  }
  fprintf(stderr, "httpd: listening on %s (port %d)\n", cfg.listen, s.port);
  void *failed = NULL;
  e = tdl_fiber_main(run, &s, &failed);
  httpd_destroy(&s);
#ifdef HTTPD_TLS
  tdl_tls_config_free(cfg.tls);
#endif
  if (e < 0) {
    fprintf(stderr, "httpd: %s\n", tdl_strerror(e));
    return 1;
  }
  return failed ? 1 : 0;
}
