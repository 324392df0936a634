#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/httpd on several loops (--loops 2), both accept modes: every
connection is answered, the connections are spread over both loops, SIGTERM
shuts down gracefully (a request in flight is answered, exit 0), and bad
arguments are refused.

    test_httpd_loops.py PATH/TO/httpd
"""
import re
import signal
import socket
import subprocess
import sys
import time

HTTPD = sys.argv[1]
CONNS = 40
BOUND = 60.0  # seconds, for what must happen: a bound, not a delay


def start(mode):
    p = subprocess.Popen([HTTPD, "--listen", "127.0.0.1:0", "--loops", "2", "--accept", mode],
                         stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    m = re.search(r"\(port (\d+)\), 2 loops, " + mode, line)
    if not m:
        sys.exit(f"test_httpd_loops: unexpected start line {line!r}")
    return p, int(m.group(1))


def unread_by_server(port, client_port):
    """Bytes the server has not read yet on its end of the connection from
    client_port (its receive queue in /proc/net/tcp), or None before it
    has that end."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1].endswith(":%04X" % port) and fields[2].endswith(":%04X" % client_port):
                return int(fields[4].split(":")[1], 16)
    return None


def wait_for(what, cond):
    end = time.monotonic() + BOUND
    while not cond():
        if time.monotonic() > end:
            sys.exit(f"test_httpd_loops: {what}: not within {BOUND:.0f} s")
        time.sleep(0.01)


def get(sock):
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while not data.endswith(b"Hello, World!"):
        chunk = sock.recv(4096)
        if not chunk:
            sys.exit(f"test_httpd_loops: connection closed after {data!r}")
        data += chunk
    if not data.startswith(b"HTTP/1.1 200 OK"):
        sys.exit(f"test_httpd_loops: bad answer {data!r}")


def run(mode):
    p, port = start(mode)
    try:
        socks = [socket.create_connection(("127.0.0.1", port), timeout=BOUND) for _ in range(CONNS)]
        for _ in range(3):
            for s in socks:
                get(s)  # keep-alive: three requests on each
        # One request in flight when the signal comes: half of it sent (and
        # read by the server), the rest once every loop has heard of the
        # shutdown (each has closed its idle connections).
        busy = socks[0]
        busy.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        wait_for("the server reads half a request", lambda: unread_by_server(port, busy.getsockname()[1]) == 0)
        p.send_signal(signal.SIGTERM)
        for s in socks[1:]:  # the idle ones are closed by the server
            try:
                left_open = s.recv(1) != b""
            except socket.timeout:
                left_open = True
            if left_open:
                sys.exit(f"test_httpd_loops: {mode}: an idle connection was left open")
        busy.sendall(b"\r\n")
        data = b""
        while True:
            chunk = busy.recv(4096)
            if not chunk:
                break
            data += chunk
        if b"200 OK" not in data or b"Connection: close" not in data:
            p.kill()
            sys.exit(f"test_httpd_loops: {mode}: the request in flight got {data!r}; "
                     f"server said {p.stderr.read()!r}")
        rc = p.wait(timeout=BOUND)
        err = p.stderr.read()
        if rc != 0:
            sys.exit(f"test_httpd_loops: {mode}: exit {rc}: {err}")
        m = re.search(r"connections per loop: (\d+) (\d+)", err)
        if not m:
            sys.exit(f"test_httpd_loops: {mode}: no counts in {err!r}")
        a, b = int(m.group(1)), int(m.group(2))
        if a + b < CONNS or a == 0 or b == 0:
            sys.exit(f"test_httpd_loops: {mode}: connections per loop {a} {b}")
        if mode == "distribute" and abs(a - b) > 1:  # the fewest open first, ties in turn
            sys.exit(f"test_httpd_loops: distribute: connections per loop {a} {b}")
        for s in socks[1:]:
            s.close()
        print(f"test_httpd_loops: {mode}: {CONNS} connections answered, per loop {a} / {b}, graceful exit")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def refused(args, want_rc, want_text):
    p = subprocess.run([HTTPD] + args, capture_output=True, text=True, timeout=BOUND)
    if p.returncode != want_rc or want_text not in p.stderr:
        sys.exit(f"test_httpd_loops: {args}: exit {p.returncode}, {p.stderr!r}")


def main():
    run("distribute")
    run("reuseport")
    refused(["--listen", "127.0.0.1:0", "--loops", "0"], 2, '--loops "0"')
    refused(["--listen", "127.0.0.1:0", "--loops", "x"], 2, '--loops "x"')
    refused(["--listen", "127.0.0.1:0", "--loops", "2", "--accept", "roundrobin"], 2, '--accept "roundrobin"')
    refused(["--listen", "127.0.0.1:99999", "--loops", "2"], 2, "--listen")
    print("test_httpd_loops: bad --loops, --accept and --listen refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
