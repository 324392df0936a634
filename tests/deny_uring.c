/* SPDX-License-Identifier: MIT */
/*
 * deny_uring PROGRAM [ARG...]: run PROGRAM where io_uring_setup fails with
 * EPERM, as under a container runtime's seccomp profile or with
 * kernel.io_uring_disabled=2.  ctest runs every test once this way with
 * TDL_BACKEND=auto, to show that a loop that may fall back does so quietly.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "deny_uring.h"

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: deny_uring PROGRAM [ARG...]\n");
    return 2;
  }
  int e = t_deny_io_uring();
  if (e < 0) {
    fprintf(stderr, "deny_uring: seccomp: %s\n", strerror(-e));
    return 2;
  }
  execvp(argv[1], argv + 1);
  fprintf(stderr, "deny_uring: %s: %s\n", argv[1], strerror(errno));
  return 127;
}
