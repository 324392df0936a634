/* SPDX-License-Identifier: MIT */
/*
 * # Stopping a server on several loops: drain, then stop
 *
 * `tdl_group_options.stop_on_signals` stops a group at once: every fiber is
 * cancelled, a request half served included.  A server that is being
 * redeployed wants a drain instead: on SIGTERM stop accepting, give the
 * connections that are open a grace period to finish, and only then cancel
 * what is left.
 *
 * - Block SIGTERM in `main` before the group starts, so that every loop's
 *   thread inherits the mask and only loop 0's signal watcher (a signalfd)
 *   sees it.
 * - The watcher's callback runs on loop 0: it sets the grace deadline and
 *   calls `tdl_acceptor_stop`, which is THREAD-SAFE and makes every slot's
 *   `tdl_acceptor_serve` return 0 (the listener closes: new clients are
 *   refused).
 * - Each loop's main fiber then waits, up to the grace deadline, for its
 *   slot's open connections (`tdl_acceptor_stats_get`) to end; if some are
 *   left, `tdl_group_stop` cancels them: each handler's pending call returns
 *   -ECANCELED and the handler closes its fd and returns.
 * - `main` waits for the group with a deadline of its own, then frees it.
 *
 * The program checks itself: a client thread opens four connections, has
 * each echoed, closes two of them after the signal (they finish within the
 * grace period) and leaves two silent (they are cut at its end), and checks
 * that a new connection is refused once the server drains.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <treadle.h>

#define LOOPS 2
#define GRACE (300 * TDL_MSEC)

static tdl_acceptor *acceptor;
static _Atomic tdl_time_t grace_end; /* 0 until the drain starts */

static void echo(int fd, void *arg) /* a detached fiber per connection */
{
  (void)arg;
  char buf[512];
  ssize_t n;
  while ((n = tdl_read(fd, buf, sizeof buf, TDL_FOREVER)) > 0)
    if (tdl_net_send_all(fd, buf, (size_t)n, NULL, TDL_FOREVER) < 0)
      break;
  tdl_close(fd); /* n is 0 (the client closed) or -ECANCELED (the group stopped) */
}

static void on_sigterm(tdl_loop *loop, tdl_signal *s, int signum)
{
  (void)loop, (void)s, (void)signum;
  atomic_store(&grace_end, tdl_after(GRACE));
  tdl_acceptor_stop(acceptor);
}

static void *loop_main(void *arg) /* on every loop of the group */
{
  (void)arg;
  unsigned i = (unsigned)tdl_group_index();
  tdl_signal term;
  if (i == 0) {
    tdl_signal_init(&term, on_sigterm, NULL);
    tdl_signal_start(tdl_fiber_loop(), &term, SIGTERM);
  }
  int e = tdl_acceptor_serve(acceptor, i); /* 0 once the drain starts */
  if (i == 0)
    tdl_signal_stop(tdl_fiber_loop(), &term);
  tdl_acceptor_stats st;
  while (e == 0 && tdl_acceptor_stats_get(acceptor, i, &st) == 0 && st.open > 0 &&
         tdl_now() < atomic_load(&grace_end))
    tdl_sleep(tdl_after(10 * TDL_MSEC));
  if (e == 0 && st.open > 0)
    tdl_group_stop(tdl_group_self()); /* the grace period is over */
  return NULL;
}

/* ---- the rest checks the recipe: a client on a plain thread ---- */

static struct sockaddr_in server;

static int dial(void)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&server, sizeof server) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void *client(void *arg)
{
  (void)arg;
  int fds[4], ok = 1;
  for (int i = 0; i < 4; i++) {
    char got[8] = {0};
    fds[i] = dial();
    ok &= fds[i] >= 0 && write(fds[i], "hello", 5) == 5 && read(fds[i], got, sizeof got) == 5 &&
          memcmp(got, "hello", 5) == 0;
  }
  kill(getpid(), SIGTERM); /* as a supervisor would */
  for (int i = 0; i < 2; i++)
    close(fds[i]); /* these two finish within the grace period */
  char c;
  for (int i = 2; i < 4; i++) {
    ok &= read(fds[i], &c, 1) == 0; /* these two are cut at its end */
    close(fds[i]);
  }
  int late = dial();
  ok &= late < 0; /* the listener is closed: refused */
  if (late >= 0)
    close(late);
  return (void *)(intptr_t)ok;
}

int main(void)
{
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, NULL); /* before any thread starts */

  int e = tdl_acceptor_new(&acceptor, &(tdl_acceptor_options){.listen = "127.0.0.1:0", .loops = LOOPS,
                                                              .mode = TDL_ACCEPTOR_DISTRIBUTE,
                                                              .handler = echo});
  tdl_group *g = NULL;
  if (e == 0)
    e = tdl_group_new(&g, &(tdl_group_options){.loops = LOOPS, .main = loop_main});
  if (e < 0) {
    fprintf(stderr, "shutdown: %s\n", tdl_strerror(e));
    return 1;
  }
  tdl_addr addr;
  tdl_acceptor_local_addr(acceptor, &addr);
  memcpy(&server, &addr.u.in4, sizeof server);
  pthread_t t;
  void *ok = NULL;
  pthread_create(&t, NULL, client, NULL);
  pthread_join(t, &ok);

  e = tdl_group_wait(g, tdl_after(5 * TDL_SEC));
  if (e == 0)
    e = tdl_group_free(g);
  if (e == 0)
    e = tdl_acceptor_free(acceptor);
  printf("shutdown: drained and stopped: %s, client saw %s\n", tdl_strerror(e), ok ? "what it should" : "a fault");
  return e == 0 && ok ? 0 : 1;
}
