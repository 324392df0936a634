#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The echo workload works end to end, so that it cannot rot between
benchmark runs: treadle-bench echo-server on each back end (uring where this
kernel and build have it) with treadle-bench's echo client, tiny sizes; the
client's check of every byte, the server's count of the bytes it echoed and
its clean exit when stdin ends; the client's refusals; and one run through
bench/drivers/echo_driver.py, as bench/run.py makes it.

    tests/bench/test_bench_echo.py BUILD/bench/treadle-bench BUILD

Runs take milliseconds; every wait is bounded, no figure is asserted.
"""
import os
import re
import select
import subprocess
import sys
import time

BIN, BUILD = sys.argv[1], sys.argv[2]
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "drivers", "echo_driver.py")
TIMEOUT = 60
failures = []


def check(what, cond, detail=""):
    if not cond:
        failures.append(f"{what}: {detail}")
    return cond


def read_line(f, deadline):
    """One line from a pipe of a child, or None at end of file or the deadline."""
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([f], [], [], left)[0]:
            return None
        c = os.read(f.fileno(), 1)
        if not c:
            return buf.decode() or None
        buf += c
    return buf.decode().rstrip("\n")


def start_server(backend):
    """(process, port), or (None, stderr) when the server did not start."""
    p = subprocess.Popen([BIN, "echo-server", "--listen", "127.0.0.1:0", "--backend", backend],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = read_line(p.stdout, time.monotonic() + TIMEOUT)
    if not line or not line.startswith("PORT "):
        p.kill()
        _, err = p.communicate(timeout=TIMEOUT)
        return None, err.decode()
    return p, int(line.split()[1])


def stop_server(p):
    """Close stdin: the server must stop by itself and say what it served."""
    try:
        out, err = p.communicate(timeout=TIMEOUT)  # closes stdin, reads to EOF
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return None, "did not stop when stdin ended"
    return p.returncode, out.decode() + err.decode()


def client(*args):
    p = subprocess.run([BIN, "echo", *args], capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


for backend in ("epoll", "uring"):
    srv, port = start_server(backend)
    if srv is None:
        # uring is refused where the kernel, a seccomp filter or the build lacks it: not a failure here.
        check(f"{backend}: the server starts", backend == "uring" and "tdl_loop_new" in port, port)
        print(f"note: echo-server --backend {backend} did not start here: {port.strip()}")
        continue
    sent = 0
    for conns, messages, size in ((1, 1, 1), (5, 200, 64), (3, 30, 70000)):
        rc, out, err = client("--port", str(port), "--conns", str(conns), "--messages", str(messages),
                              "--size", str(size))
        ok = check(f"{backend} C={conns} M={messages} B={size}: the client succeeds",
                   rc == 0 and re.search(rf"^RESULT impl=treadle-\w+ bench=echo conns={conns} messages={messages} "
                                         rf"size={size} msgs_per_s=[0-9.]+ ", out, re.M),
                   f"exit {rc}, stdout {out!r}, stderr {err!r}")
        if ok:
            sent += (messages + conns) * size  # one warm-up round trip per connection
    # More connections than messages: some connections make only the warm-up.
    rc, out, err = client("--port", str(port), "--conns", "20", "--messages", "3", "--size", "8", "--backend", backend)
    if check(f"{backend}: more connections than messages", rc == 0 and f"impl=treadle-{backend} " in out,
             f"exit {rc}, stdout {out!r}, stderr {err!r}"):
        sent += (3 + 20) * 8
    rc, text = stop_server(srv)
    check(f"{backend}: the server exits 0 when stdin ends", rc == 0, f"exit {rc}: {text!r}")
    m = re.search(r"^SERVED conns=(\d+) bytes=(\d+)$", text, re.M)
    check(f"{backend}: the server echoed every byte", m and int(m.group(2)) == sent and int(m.group(1)) == 1 + 5 + 3 + 20,
          f"expected 29 connections and {sent} bytes: {text!r}")

# The client's refusals: no RESULT line, a message on stderr.
rc, out, err = client("--conns", "1", "--messages", "1")
check("no --port: exit 2", rc == 2 and "RESULT" not in out and "--port" in err, f"exit {rc}, {out!r}, {err!r}")
rc, out, err = client("--port", "1", "--host", "not-an-address")
check("a bad --host: exit 2", rc == 2 and "RESULT" not in out and "not-an-address" in err, f"exit {rc}, {err!r}")
# A port nobody listens on (a listener's, closed again at once).
srv, port = start_server("epoll")
if check("a server to close", srv is not None, str(port)):
    stop_server(srv)
    rc, out, err = client("--port", str(port), "--conns", "2", "--messages", "5")
    check("nobody listening: exit 1, no RESULT", rc == 1 and "RESULT" not in out and "connect" in err,
          f"exit {rc}, {out!r}, {err!r}")
p = subprocess.run([BIN, "echo-server", "--listen", "bogus"], capture_output=True, text=True, timeout=TIMEOUT,
                   stdin=subprocess.DEVNULL)
check("echo-server on a bad address: exit 1 naming it", p.returncode == 1 and "bogus" in p.stderr and
      "PORT" not in p.stdout, f"exit {p.returncode}, {p.stdout!r}, {p.stderr!r}")

# One run as bench/run.py makes it (no pinning: the test may share its CPUs).
p = subprocess.run([sys.executable, DRIVER, "echo", "--server", "treadle-epoll", "--build", BUILD, "--conns", "4",
                    "--messages", "100", "--size", "32", "--pin", "no", "--timeout", str(TIMEOUT)],
                   capture_output=True, text=True, timeout=TIMEOUT + 10)
check("echo_driver.py runs treadle-epoll", p.returncode == 0 and re.search(
    r"^RESULT impl=treadle-epoll bench=echo server_cpu_us_per_msg=[0-9.]+ client=treadle-epoll conns=4 "
    r"messages=100 size=32 msgs_per_s=", p.stdout, re.M), f"exit {p.returncode}, {p.stdout!r}, {p.stderr!r}")

for f in failures:
    print("FAIL", f)
print(f"{'FAILED' if failures else 'ok'}: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
