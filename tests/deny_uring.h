/* SPDX-License-Identifier: MIT */
/*
 * Refuse io_uring_setup (EPERM) to this process and what it execs, as a
 * container runtime's seccomp profile does.  Returns 0 or -errno.  Used by
 * tests/deny_uring.c and tests/fiber/test_ring.c.
 */
#ifndef TDL_TEST_DENY_URING_H
#define TDL_TEST_DENY_URING_H

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif

static inline int t_deny_io_uring(void)
{
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
    return -errno;
  return 0;
}

#endif
