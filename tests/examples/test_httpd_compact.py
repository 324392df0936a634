#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/httpd with --compact-idle, over HTTP and HTTPS, on one loop and
on two: connections left idle well beyond the threshold (so that their
fibers are compacted, their stacks given back) are then used, and must be
served as if nothing had happened:

- one request on each idle connection, answered in order;
- three requests pipelined in one send, all answered;
- a request whose head comes in two pieces with an idle gap between them,
  and a pipelined request cut after its first half;
- new connections accepted while the others are compacted (the accepting
  fiber is compacted too);
- a malformed request after the idle time: answered 400 and closed;
- the same with httpd's default threshold (250 ms) and with
  --compact-idle 0 (never);
- --compact-idle -1 and a non-number: refused, naming the option.

    test_httpd_compact.py PATH/TO/httpd [MAKE_CERTS_SH]
The HTTPS half needs the httpd built with libtreadle-tls, MAKE_CERTS_SH
(tests/tls/make-certs.sh) and `openssl`; without them only HTTP is tested.
"""
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

HTTPD = sys.argv[1]
MAKE_CERTS = sys.argv[2] if len(sys.argv) > 2 else None
BOUND = 60.0  # seconds: a bound on what must happen, not a delay
IDLE = 0.3    # seconds left idle: many times the threshold of 1 ms
IDLE_DEFAULT = 0.8  # ...and beyond two of the default 250 ms (fiber.h: compacted within two)
CONNS = 50
HELLO = b"Hello, World!"


def fail(msg, p=None):
    if p and p.poll() is None:
        p.kill()
    sys.exit(f"test_httpd_compact: {msg}")


def start(loops, tls_dir, extra=("--compact-idle", "1")):
    argv = [HTTPD, "--listen", "127.0.0.1:0", "--loops", str(loops), *extra]
    if tls_dir:
        argv += ["--tls-cert", os.path.join(tls_dir, "server.pem"), "--tls-key", os.path.join(tls_dir, "server.key")]
    p = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    m = re.search(r"\(port (\d+)\)", line)
    if not m:
        fail(f"unexpected start line {line!r}", p)
    return p, int(m.group(1))


def stop(p):
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=BOUND)
    rest = p.stderr.read()
    if rc != 0:
        fail(f"exit {rc}: {rest}")


def connect(port, tls_dir):
    s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    if not tls_dir:
        return s
    ctx = ssl.create_default_context(cafile=os.path.join(tls_dir, "ca.pem"))
    return ctx.wrap_socket(s, server_hostname="localhost")


def read_answers(s, n, p):
    """n whole answers to GET / (each ends with its body), and nothing more."""
    data = b""
    while data.count(HELLO) < n:
        chunk = s.recv(65536)
        if not chunk:
            fail(f"closed after {data.count(HELLO)} of {n} answers: {data[-200:]!r}", p)
        data += chunk
    heads = data.count(b"HTTP/1.1 200 OK\r\n")
    if heads != n or not data.endswith(HELLO):
        fail(f"{heads} answers for {n} requests: {data[-300:]!r}", p)


GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def idle_then_used(loops, tls_dir, extra=("--compact-idle", "1"), idle=IDLE):
    what = f"{'HTTPS' if tls_dir else 'HTTP'} on {loops} loop(s) {' '.join(extra) or 'by default'}"
    p, port = start(loops, tls_dir, extra)
    try:
        held = []
        for _ in range(CONNS):
            s = connect(port, tls_dir)
            s.sendall(GET)
            read_answers(s, 1, p)
            held.append(s)
        time.sleep(idle)  # every connection's fiber is compacted meanwhile
        for s in held:  # one each, in order
            s.sendall(GET)
            read_answers(s, 1, p)
        time.sleep(idle)
        for s in held[: CONNS // 2]:  # three pipelined in one send
            s.sendall(GET * 3)
            read_answers(s, 3, p)
        time.sleep(idle)
        for s in held[CONNS // 2:]:  # a head in two pieces, compacted in between
            s.sendall(GET[:9])
        time.sleep(idle)
        for s in held[CONNS // 2:]:
            s.sendall(GET[9:] + GET[:20])  # the rest, and half of a pipelined one
        time.sleep(idle)
        for s in held[CONNS // 2:]:
            s.sendall(GET[20:])
            read_answers(s, 2, p)
        # New connections while the others (and the acceptor) are compacted.
        s = connect(port, tls_dir)
        s.sendall(GET)
        read_answers(s, 1, p)
        held.append(s)
        time.sleep(idle)
        # A malformed request after the idle time: 400, then closed.
        s = held[0]
        s.sendall(b"NOT A REQUEST\r\n\r\n")
        data = b""
        while True:
            try:
                chunk = s.recv(4096)
            except (ConnectionResetError, ssl.SSLError):
                break
            if not chunk:
                break
            data += chunk
        if not data.startswith(b"HTTP/1.1 400 "):
            fail(f"{what}: a malformed request after idling: {data[:100]!r}", p)
        for s in held[1:]:  # the rest still served
            s.sendall(GET)
            read_answers(s, 1, p)
        for s in held:
            s.close()
    finally:
        stop(p)
    print(f"test_httpd_compact: {what}: ok")


def bad_options():
    for v in ("-1", "soon"):
        r = subprocess.run([HTTPD, "--listen", "127.0.0.1:0", "--compact-idle", v], capture_output=True, text=True,
                           timeout=BOUND)
        if r.returncode != 2 or "--compact-idle" not in r.stderr:
            fail(f"--compact-idle {v}: exit {r.returncode}, {r.stderr!r}")


def main():
    bad_options()
    for loops in (1, 2):
        idle_then_used(loops, None)
    idle_then_used(1, None, (), IDLE_DEFAULT)
    idle_then_used(1, None, ("--compact-idle", "0"))
    if not MAKE_CERTS or not shutil.which("openssl"):
        print("test_httpd_compact: HTTPS not tested (no make-certs.sh or openssl)")
        return
    d = tempfile.mkdtemp()
    try:
        subprocess.run(["sh", MAKE_CERTS, d], check=True, capture_output=True)
        for loops in (1, 2):
            idle_then_used(loops, d)
        idle_then_used(1, d, (), IDLE_DEFAULT)
    finally:
        shutil.rmtree(d)
    print("test_httpd_compact: ok")


if __name__ == "__main__":
    main()
