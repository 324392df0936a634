/* SPDX-License-Identifier: MIT */
/* --backend NAME as a tdl_backend, for the workloads that run treadle (the
 * common library, bench/common, is shared with peers that do not). */
#ifndef TDL_BENCH_BACKEND_H
#define TDL_BENCH_BACKEND_H

#include <string.h>
#include <treadle.h>

/* NULL: the default ($TDL_BACKEND, else epoll).  -1 for an unknown name. */
static inline int bench_parse_backend(const char *be, tdl_backend *out)
{
  if (!be)
    *out = TDL_BACKEND_DEFAULT;
  else if (strcmp(be, "epoll") == 0)
    *out = TDL_BACKEND_EPOLL;
  else if (strcmp(be, "poll") == 0)
    *out = TDL_BACKEND_POLL;
  else if (strcmp(be, "uring") == 0)
    *out = TDL_BACKEND_URING;
  else
    return -1;
  return 0;
}

#endif
