#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/httpd held by many silent sockets: one client opens 2,000
connections and sends nothing on any of them, far past --max-conns; new
clients are still served, the server never holds more connections than its
cap (its fds stay bounded; by default the cap stays under the fd limit), and the connections it closed to make room are
the oldest silent ones.  Then a silent connection is closed at the
first-byte deadline, not after the idle timeout.

    test_httpd_silent.py PATH/TO/httpd
"""
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time

HTTPD = sys.argv[1]
SILENT = 2000
CAP = 300           # --max-conns, both loops together
NEWCOMERS = 20
NOFILE = 1024       # the server's fd limit in the second round
BOUND = 60.0        # seconds, for what must happen: a bound, not a delay


def fail(msg, p=None):
    if p and p.poll() is None:
        p.kill()
    sys.exit(f"test_httpd_silent: {msg}")


def start(*args, nofile=None):
    def limit():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    p = subprocess.Popen([HTTPD, "--listen", "127.0.0.1:0", "--loops", "2"] + list(args),
                         stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    line = p.stderr.readline()
    m = re.search(r"\(port (\d+)\)", line)
    if not m:
        fail(f"unexpected start line {line!r}", p)
    return p, int(m.group(1))


def get(port):
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while not data.endswith(b"Hello, World!"):
            chunk = s.recv(4096)
            if not chunk:
                return data
            data += chunk
        return data


def closed_by_server(s):
    """True when the server has closed s (EOF or reset), without waiting."""
    s.settimeout(None)  # (with a timeout, Python waits even with MSG_DONTWAIT)
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def server_fds(p):
    return len(os.listdir(f"/proc/{p.pid}/fd"))


def stop(p):
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=BOUND)
    if rc != 0:
        fail(f"exit {rc}: {p.stderr.read()}")


def many_silent(cap, args, nofile=None):
    # Long first-byte and idle deadlines: what makes room here is the cap.
    p, port = start(*args, "--first-byte-timeout", "300", "--idle-timeout", "300", nofile=nofile)
    silent = []
    try:
        for _ in range(SILENT):
            silent.append(socket.create_connection(("127.0.0.1", port), timeout=BOUND))
        for i in range(NEWCOMERS):
            data = get(port)
            if not data.startswith(b"HTTP/1.1 200 OK"):
                fail(f"newcomer {i} with {SILENT} silent connections open got {data!r}", p)
        # Every silent connection beyond the cap is closed, the oldest first.
        end = time.monotonic() + BOUND
        while True:
            closed = [closed_by_server(s) for s in silent]
            if sum(closed) >= SILENT - cap:
                break
            if time.monotonic() > end:
                fail(f"only {sum(closed)} of {SILENT} silent connections closed (cap {cap})", p)
            time.sleep(0.05)
        fds = server_fds(p)
        if fds > cap + 64:
            fail(f"the server holds {fds} fds with a cap of {cap} connections", p)
        if not closed[0] or closed[-1]:
            fail(f"closed oldest {closed[0]}, newest {closed[-1]}: not the oldest first", p)
        print(f"test_httpd_silent: {SILENT} silent connections, cap {cap}: {NEWCOMERS} newcomers "
              f"served, {sum(closed)} silent ones closed (oldest first), server fds {fds}")
        stop(p)
    finally:
        for s in silent:
            s.close()
        if p.poll() is None:
            p.kill()
            p.wait()


def first_byte():
    p, port = start("--first-byte-timeout", "0.3", "--idle-timeout", "300")
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
        talker = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
        talker.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        if not talker.recv(4096).startswith(b"HTTP/1.1 200 OK"):
            fail("no answer", p)
        t0 = time.monotonic()
        if s.recv(1) != b"":  # blocks until the server closes it (bounded by the timeout)
            fail("the silent connection got bytes", p)
        took = time.monotonic() - t0
        time.sleep(0.4)  # the talker's own first-byte deadline passes too
        if closed_by_server(talker):
            fail("a kept-alive connection was closed by the first-byte deadline", p)
        print(f"test_httpd_silent: a silent connection closed after {took:.1f} s (first-byte 0.3 s, "
              f"idle 300 s); the kept-alive one stays")
        s.close()
        talker.close()
        stop(p)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = SILENT + NEWCOMERS + 200
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            print(f"test_httpd_silent: skipped: fd limit {hard} < {want}")
            return 77
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    many_silent(CAP, ["--max-conns", str(CAP)])
    # No --max-conns, but an fd limit below the silent connections: the
    # default cap leaves room under it (without one, accept ran out of fds
    # and every newcomer was shed).
    many_silent(NOFILE - max(NOFILE // 8, 64), [], nofile=NOFILE)
    first_byte()
    return 0


if __name__ == "__main__":
    sys.exit(main())
