/* SPDX-License-Identifier: MIT */
/*
 * echo: a line echo server, one fiber per connection.
 *
 *   echo [ADDR:PORT]      (default 127.0.0.1:7000; port 0 picks a free one)
 *
 * Prints the address it listens on, then sends every line a client writes
 * back to it.  Each connection's fiber reads through a tdl_reader (bytes
 * read past a line stay buffered for the next one) and answers through a
 * tdl_writer, so a client that pipelines many lines gets its answers in one
 * system call per batch.  A client silent for 30 s is dropped.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <treadle.h>

#define IDLE (30 * TDL_SEC)
#define MAX_LINE (64 * 1024)

static void *session(void *arg)
{
  int fd = (int)(intptr_t)arg;
  tdl_reader in;
  tdl_writer out;
  int e = tdl_reader_init(&in, fd, NULL, 4096, MAX_LINE);
  if (e == 0 && (e = tdl_writer_init(&out, fd, NULL, 4096, MAX_LINE)) < 0)
    tdl_reader_destroy(&in);
  if (e < 0) {
    tdl_close(fd);
    return NULL;
  }
  for (;;) {
    /* The next line, with its "\n"; 0 when the client closed, -EPIPE when
     * it closed inside a line, -ETIMEDOUT when idle, -EMSGSIZE for a line
     * longer than MAX_LINE. */
    ssize_t n = tdl_reader_until(&in, "\n", 1, tdl_after(IDLE));
    if (n <= 0)
      break;
    if (tdl_writer_put(&out, tdl_reader_data(&in), (size_t)n) < 0)
      break;
    tdl_reader_consume(&in, (size_t)n);
    /* Flush once nothing more is buffered: a batch of lines leaves together. */
    if (tdl_reader_len(&in) == 0 && tdl_writer_flush(&out, tdl_after(IDLE)) < 0)
      break;
  }
  tdl_writer_flush(&out, tdl_after(TDL_SEC)); /* what is left, briefly */
  tdl_writer_destroy(&out);
  tdl_reader_destroy(&in);
  tdl_close(fd);
  return NULL;
}

static void *serve(void *where)
{
  int lfd = tdl_net_listen_str(where, 0, 0);
  if (lfd < 0) {
    char why[TDL_ADDR_ERRLEN];
    if (tdl_addr_parse_error(where, why, sizeof why) < 0)
      fprintf(stderr, "echo: %s\n", why); /* says what is wrong with the address */
    else
      fprintf(stderr, "echo: listen on %s: %s\n", (char *)where, tdl_strerror(lfd));
    return where;
  }
  tdl_addr self;
  char name[TDL_ADDR_STRLEN];
  if (tdl_net_local_addr(lfd, &self) == 0 && tdl_addr_format(&self, name, sizeof name) >= 0)
    printf("echo: listening on %s\n", name);
  fflush(stdout);
  for (;;) {
    int fd = tdl_net_accept(lfd, NULL, TDL_FOREVER);
    if (fd == -EMFILE || fd == -ENFILE || fd == -ENOBUFS || fd == -ENOMEM)
      continue; /* transient: tdl_net_accept has backed off already */
    if (fd < 0) {
      fprintf(stderr, "echo: accept: %s\n", tdl_strerror(fd));
      tdl_close(lfd);
      return where;
    }
    tdl_fiber_options detached = {.name = "session", .detached = true};
    if (tdl_fiber_spawn(NULL, tdl_fiber_loop(), session, (void *)(intptr_t)fd, &detached) < 0)
      tdl_close(fd);
  }
}

int main(int argc, char **argv)
{
  void *failed = NULL;
  int e = tdl_fiber_main(serve, argc > 1 ? argv[1] : "127.0.0.1:7000", &failed);
  if (e < 0)
    fprintf(stderr, "echo: %s\n", tdl_strerror(e));
  return e < 0 || failed ? 1 : 0;
}
