#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/kv keeps serving when accepting fails for want of memory or
socket buffers (ENOMEM, ENOBUFS): such a shortage passes, and net.h's
tdl_net_accept has already backed off; it is no reason to stop serving.

    tests/examples/test_kv_accept.py KV_BINARY C_COMPILER

The failures are injected: a small LD_PRELOAD library (compiled here with
C_COMPILER) makes kv's first accept4 calls (the libc function, or
syscall(SYS_accept4)) fail, alternately with ENOMEM and ENOBUFS, and says
so on stderr.  Then a client must get its PONG.
Exits 0 on success; 77 (skipped) when the library cannot be built.
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

KV = sys.argv[1]
CC = sys.argv[2] if len(sys.argv) > 2 else "cc"
# TDL_TEST_WRAP runs kv under a tool, e.g. "valgrind -q --error-exitcode=99".
WRAP = os.environ.get("TDL_TEST_WRAP", "").split()
FAILS = 4
BOUND = 60.0  # seconds, for what must happen: a bound, not a delay

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static int left = -1;

/* Whether this accept4 fails, and with which errno (0: it does not). */
static int fail_now(void)
{
  if (left < 0) {
    const char *n = getenv("KV_TEST_ACCEPT_FAILS");
    left = n ? atoi(n) : 0;
  }
  if (left == 0)
    return 0;
  left--;
  const char *msg = left % 2 ? "kv-test-shim: accept4 -> ENOMEM\n" : "kv-test-shim: accept4 -> ENOBUFS\n";
  (void)!write(2, msg, strlen(msg));
  return left % 2 ? ENOMEM : ENOBUFS;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
  static int (*real)(int, struct sockaddr *, socklen_t *, int);
  int e = fail_now();
  if (e) {
    errno = e;
    return -1;
  }
  if (!real)
    real = (int (*)(int, struct sockaddr *, socklen_t *, int))dlsym(RTLD_NEXT, "accept4");
  return real(fd, addr, len, flags);
}

/* treadle may enter the kernel through syscall(2) (src/base/sys.h), past
 * any accept4 of ours: take that door too.  The arguments are passed on as
 * glibc's syscall() reads them, six longs. */
long syscall(long n, ...)
{
  static long (*real)(long, ...);
  va_list ap;
  va_start(ap, n);
  long a[6];
  for (int i = 0; i < 6; i++)
    a[i] = va_arg(ap, long);
  va_end(ap);
  if (n == SYS_accept4) {
    int e = fail_now();
    if (e) {
      errno = e;
      return -1;
    }
  }
  if (!real)
    real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def build_shim(tmp):
    src = os.path.join(tmp, "accept_fails.c")
    lib = os.path.join(tmp, "accept_fails.so")
    with open(src, "w") as f:
        f.write(SHIM)
    r = subprocess.run([CC, "-shared", "-fPIC", "-O1", "-o", lib, src, "-ldl"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"test_kv_accept: cannot build the LD_PRELOAD library with {CC}: {r.stderr}")
        sys.exit(77)
    return lib


def ping(port, proc):
    """PING on a fresh connection: the connection is queued even while kv
    backs off, and answered once it accepts again."""
    data = b""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
        s.sendall(b"PING\r\n")
        while not data.endswith(b"\r\n"):
            chunk = s.recv(64)
            if not chunk:
                break
            data += chunk
        s.close()
    except OSError as e:
        data += f" ({e})".encode()
    if data != b"+PONG\r\n":
        proc.kill()
        sys.exit(f"test_kv_accept: PING got {data!r}; kv said {proc.communicate()[1]!r}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_shim(tmp)
        port = free_port()
        env = dict(os.environ)
        env["LD_PRELOAD"] = lib
        env["KV_TEST_ACCEPT_FAILS"] = str(FAILS)
        # The library comes before ASan's runtime in the list: allowed here.
        env["ASAN_OPTIONS"] = ":".join(x for x in [env.get("ASAN_OPTIONS", ""), "verify_asan_link_order=0"] if x)
        proc = subprocess.Popen(WRAP + [KV, "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, env=env)
        try:
            end = time.monotonic() + BOUND
            while time.monotonic() < end:  # listening (kv says so), or gone
                if proc.poll() is not None:
                    sys.exit(f"test_kv_accept: kv exited with {proc.returncode}: {proc.stderr.read()!r}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=BOUND).close()
                    break
                except OSError:
                    time.sleep(0.02)
            ping(port, proc)
            ping(port, proc)
            if proc.poll() is not None:
                sys.exit(f"test_kv_accept: kv exited with {proc.returncode}")
            proc.terminate()
            rc = proc.wait(timeout=BOUND)
            err = proc.stderr.read().decode(errors="replace")
            if rc != 0:
                sys.exit(f"test_kv_accept: kv exit {rc}: {err}")
            failed = err.count("kv-test-shim: accept4 -> ")
            if failed != FAILS:
                sys.exit(f"test_kv_accept: {failed} accept4 calls failed, not {FAILS} (LD_PRELOAD not in effect?): {err}")
            if "accept:" in err:
                sys.exit(f"test_kv_accept: kv reported an accept error: {err}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(f"test_kv_accept: kv served on after {FAILS} accept4 failures (ENOMEM, ENOBUFS)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
