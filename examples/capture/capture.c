/* SPDX-License-Identifier: MIT */
/*
 * capture: run a program without a shell and capture what it prints.
 *
 *   capture PROGRAM [ARG...]
 *
 * tdl_process_run starts the program (found in PATH; arguments go to it
 * exactly as given, nothing is parsed by a shell), drains its stdout and
 * stderr together so that neither pipe can fill up and stall it, keeps at
 * most 1 MiB of each, and waits for it to exit.  At the 10 s deadline it
 * gets SIGTERM, then SIGKILL.  Here it runs in a fiber, so the loop could
 * serve other fibers meanwhile.  Exits with the program's exit code.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <treadle.h>

typedef struct capture {
  char **argv;
  int exit_code; /* what capture exits with */
} capture;

static void *run(void *arg)
{
  capture *c = arg;
  tdl_process_run_result r;
  int e = tdl_process_run(&r, (const char *const *)c->argv, NULL, NULL, 0, 1 << 20, tdl_after(10 * TDL_SEC));
  if (e < 0 && e != -ETIMEDOUT) {
    /* Exec errors come back here, not as exit status 127: -ENOENT, -EACCES... */
    fprintf(stderr, "capture: %s: %s\n", c->argv[0], tdl_strerror(e));
    c->exit_code = 127;
  } else {
    printf("stdout (%zu bytes%s):\n%s", r.out_len, r.out_truncated ? ", cut" : "", r.out);
    printf("stderr (%zu bytes%s):\n%s", r.err_len, r.err_truncated ? ", cut" : "", r.err);
    if (r.timed_out)
      printf("timed out: killed\n");
    if (tdl_process_exited(r.status)) {
      printf("exited with %d\n", tdl_process_exit_code(r.status));
      c->exit_code = tdl_process_exit_code(r.status);
    } else {
      printf("killed by signal %d (%s)\n", tdl_process_term_signal(r.status), strsignal(tdl_process_term_signal(r.status)));
      c->exit_code = 128 + tdl_process_term_signal(r.status);
    }
  }
  tdl_process_run_result_destroy(&r); /* after every call, failed or not */
  return NULL;
}

int main(int argc, char **argv)
{
  if (argc < 2 || strcmp(argv[1], "--help") == 0) {
    fprintf(argc < 2 ? stderr : stdout, "usage: capture PROGRAM [ARG...]\n");
    return argc < 2 ? 2 : 0;
  }
  capture c = {.argv = argv + 1};
  int e = tdl_fiber_main(run, &c, NULL);
  if (e < 0) {
    fprintf(stderr, "capture: %s\n", tdl_strerror(e));
    return 1;
  }
  return c.exit_code;
}
