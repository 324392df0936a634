#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One run of the echo workload (docs/BENCHMARKS.md, "Servers"):
start one echo server, run treadle-bench's echo client against it, stop the
server, print one RESULT line.

    echo_driver.py echo|echo-stream
                   --server treadle-epoll|treadle-uring|treadle-uring-single|treadle-uring-sends|go-1|tokio-ct|
                            st|boost-fiber|may|monoio|floor-single|floor-multishot|floor-ring-send
                   --build DIR [--conns C] [--messages M] [--size B] [--seconds S] [--pin yes|no]

echo is ping-pong: C connections, M round trips of B bytes
(`treadle-bench echo`).  echo-stream is one connection streamed both ways
for S seconds, B-byte messages (`treadle-bench echo-stream`: a writer fiber
sends as fast as the socket takes them while a reader fiber checks every
byte that comes back).

The servers, each on one thread of work (a fiber, goroutine or task per
connection, 16 KiB buffer, TCP_NODELAY), listening on 127.0.0.1, a free port:

    treadle-epoll    treadle-bench echo-server --backend epoll
    treadle-uring    treadle-bench echo-server --backend uring (receiving ahead,
                     sending behind)
    treadle-uring-single  the same with --readahead no: a receive request per read
    treadle-uring-sends   the same with --writebehind no: a send(2) per answer
    go-1             bench-go echo-server, GOMAXPROCS=1
    tokio-ct         bench-tokio echo-server --flavor current_thread
    st               bench-st echo-server: State Threads, a thread per
                     connection, st_read/st_write
    boost-fiber      bench-boost-fiber echo-server: Boost.Fiber over
                     Boost.Asio, a fiber per connection
    may              bench-may echo-server: may's stackful coroutines, one
                     worker thread, a coroutine per connection
    monoio           bench-monoio echo-server: monoio on io_uring, a task per
                     connection
    floor-single     treadle-bench uring-floor --mode echo --recv single: no
                     library, liburing directly, one receive per connection
                     into its 16 KiB buffer (bench/workloads/bench_uring_floor.c)
    floor-multishot  the same with --recv multishot: a multishot receive per
                     connection from a ring of provided buffers
    floor-ring-send  the same with --send ring: each answer a send request on
                     the ring instead of send(2) (not in run.py's echo group:
                     it measured no different from floor-multishot)

(bench-go, bench-tokio, bench-st, bench-boost-fiber, bench-may and
bench-monoio are put in the build directory by bench/peers/build-peers.sh.)
Each prints "PORT n" and serves until its stdin ends.  The client is
`treadle-bench echo --backend epoll --sync 1` (with --client-backend uring:
the same on a uring loop, receiving ahead; measured no help to the ratios, as
it makes Go's server cheaper per message too): it connects all C connections
and makes one uncounted round trip on each, says READY, and starts its clock
when it reads a line here.  The server's CPU time (utime+stime of every
thread, /proc/PID/stat, in clock ticks of 10 ms) is read just before that line
is written and as soon as the RESULT line arrives, so it covers the timed
round trips only, not the connects.  echo-stream has no such handshake: the
server's CPU time is read before the client starts and when its RESULT line
arrives (one connect, then S seconds of streaming).  With --pin yes (the
default) and two CPUs or more, the server is pinned to CPU 0 and the client to
CPU 1 (taskset), as bench/drivers/kv_driver.py does.

The RESULT line is the client's with impl= set to the server's name and two
keys added:

    server_cpu_us_per_msg   the server's CPU time over the timed part, per message
    client                  the client's own impl (treadle-epoll)

(echo-stream adds client_cpu_us_per_msg too; a message is B bytes echoed.)

treadle's server, st, boost-fiber, may, monoio and the floor servers also
report the bytes they echoed when they stop; they must be (M + C) * B (the
warm-up round trips included; echo-stream: the bytes the client got back) or
the run fails.  A missing program is an exit status of 77 with a note (run.py
skips the run).
"""

import argparse
import os
import select
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")

SERVERS = {
    # name: (binary, arguments, extra environment)
    "treadle-epoll": ("treadle-bench", ["echo-server", "--backend", "epoll"], {}),
    "treadle-uring": ("treadle-bench", ["echo-server", "--backend", "uring"], {}),
    "treadle-uring-single": ("treadle-bench", ["echo-server", "--backend", "uring", "--readahead", "no"], {}),
    "treadle-uring-sends": ("treadle-bench", ["echo-server", "--backend", "uring", "--writebehind", "no"], {}),
    "go-1": ("bench-go", ["echo-server"], {"GOMAXPROCS": "1"}),
    "tokio-ct": ("bench-tokio", ["echo-server", "--flavor", "current_thread"], {}),
    "st": ("bench-st", ["echo-server"], {}),
    "boost-fiber": ("bench-boost-fiber", ["echo-server"], {}),
    "may": ("bench-may", ["echo-server"], {}),
    "monoio": ("bench-monoio", ["echo-server"], {}),
    "floor-single": ("treadle-bench", ["uring-floor", "--mode", "echo", "--recv", "single"], {}),
    "floor-multishot": ("treadle-bench", ["uring-floor", "--mode", "echo", "--recv", "multishot"], {}),
    "floor-inc": ("treadle-bench", ["uring-floor", "--mode", "echo", "--recv", "inc"], {}),
    "floor-ring-send": ("treadle-bench", ["uring-floor", "--mode", "echo", "--recv", "multishot", "--send", "ring"],
                        {}),
}
# The servers that print "SERVED conns=N bytes=B" when they stop: their bytes are checked.
COUNTED = {"treadle-epoll", "treadle-uring", "treadle-uring-single", "treadle-uring-sends", "floor-single", "floor-multishot", "floor-inc", "floor-ring-send", "st", "boost-fiber", "may", "monoio"}


def find_binary(build, name):
    for cand in (os.path.join(build, "bench", name), os.path.join(build, name)):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    for dirpath, dirnames, filenames in os.walk(build):
        dirnames[:] = [d for d in dirnames if d != "CMakeFiles" and not (d.startswith("peers-") and d.endswith("-target"))]
        if name in filenames and os.access(os.path.join(dirpath, name), os.X_OK):
            return os.path.join(dirpath, name)
    return None


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


class Lines:
    """Lines from a pipe, each wait bounded by an absolute deadline."""

    def __init__(self, f):
        self.fd = f.fileno()
        self.buf = b""

    def next(self, deadline):
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(self.fd, 65536)
            if not chunk:
                if not self.buf:
                    return None  # end of file
                self.buf += b"\n"
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace")


def stop(p, timeout):
    """Close p's stdin (its signal to end), then wait; kill it if it lingers."""
    try:
        p.stdin.close()
    except OSError:
        pass
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["echo", "echo-stream"])
    ap.add_argument("--server", choices=sorted(SERVERS), required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=1000000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=5, help="echo-stream: seconds of streaming (default 5)")
    ap.add_argument("--pin", choices=["yes", "no"], default="yes")
    ap.add_argument("--client-backend", choices=["epoll", "uring"], default="epoll",
                    help="the client loop's back end (default epoll)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds for the whole run (default 300)")
    o = ap.parse_args()
    if o.conns < 1 or o.messages < 1 or o.size < 1 or o.seconds < 1:
        ap.error("--conns, --messages, --size and --seconds must be positive")
    stream = o.workload == "echo-stream"

    client = find_binary(o.build, "treadle-bench")
    sname, sargs, senv = SERVERS[o.server]
    server = find_binary(o.build, sname)
    if not client or not server:
        missing = "treadle-bench" if not client else sname
        hint = " (bench/peers/build-peers.sh builds it)" if missing != "treadle-bench" else ""
        print(f"echo_driver: {missing} not found under {o.build}{hint}")
        return 77
    pin_server, pin_client = [], []
    if o.pin == "yes" and (os.cpu_count() or 1) >= 2:
        pin_server, pin_client = ["taskset", "-c", "0"], ["taskset", "-c", "1"]
    deadline = time.monotonic() + o.timeout

    with tempfile.TemporaryFile() as serr, tempfile.TemporaryFile() as cerr:
        srv = subprocess.Popen(pin_server + [server] + sargs + ["--listen", "127.0.0.1:0"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=serr,
                               env=dict(os.environ, **senv))
        cli = None

        def failed(why):
            for name, f in (("server", serr), ("client", cerr)):
                f.seek(0)
                text = f.read().decode(errors="replace").strip()
                if text:
                    why += f"\n{name} stderr: {text[-400:]}"
            print(f"echo_driver: {o.server}: {why}", file=sys.stderr)
            return 1

        try:
            sout = Lines(srv.stdout)
            line = sout.next(min(deadline, time.monotonic() + 30))
            if not line or not line.startswith("PORT "):
                return failed(f"the server did not say PORT n (got {line!r}, exit {srv.poll()})")
            port = int(line.split()[1])
            if stream:
                cargs = ["echo-stream", "--port", str(port), "--seconds", str(o.seconds), "--size", str(o.size),
                         "--backend", o.client_backend]
            else:
                cargs = ["echo", "--port", str(port), "--conns", str(o.conns), "--messages", str(o.messages),
                         "--size", str(o.size), "--backend", o.client_backend, "--sync", "1"]
            cpu0 = cpu_seconds(srv.pid)
            cli = subprocess.Popen(pin_client + [client] + cargs,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=cerr)
            cout = Lines(cli.stdout)
            if not stream:
                line = cout.next(deadline)
                if line != "READY":
                    return failed(f"the client did not get ready (got {line!r}, exit {cli.wait()})")
                cpu0 = cpu_seconds(srv.pid)
                cli.stdin.write(b"go\n")
                cli.stdin.flush()
            result = None
            while (line := cout.next(deadline)) is not None:
                if line.startswith("RESULT "):
                    cpu1 = cpu_seconds(srv.pid)
                    result = line
            rc = cli.wait(timeout=max(1, deadline - time.monotonic()))
            if rc != 0 or result is None:
                return failed(f"the client failed (exit {rc})")
            if srv.poll() is not None:
                return failed(f"the server exited with {srv.returncode} during the run")
            stop(srv, 10)
            keys = dict(t.split("=", 1) for t in result.split()[1:] if "=" in t)
            if stream:
                messages = int(keys.get("bytes", 0)) / o.size
                if messages <= 0:
                    return failed("the client streamed nothing")
                want = int(keys["bytes"])
            else:
                messages = o.messages
                want = (o.messages + o.conns) * o.size
            if o.server in COUNTED:
                served = []
                while (line := sout.next(deadline)) is not None:
                    if line.startswith("SERVED "):
                        served.append(line)
                got = dict(kv.split("=", 1) for kv in served[0].split()[1:]) if served else {}
                if int(got.get("bytes", -1)) != want:
                    return failed(f"the server echoed {got.get('bytes')} bytes, expected {want}")
            toks = result.split()
            client_impl = next((t[5:] for t in toks if t.startswith("impl=")), "?")
            toks = [f"impl={o.server}" if t.startswith("impl=") else t for t in toks]
            toks.insert(3, f"server_cpu_us_per_msg={(cpu1 - cpu0) * 1e6 / messages:.3f}")
            toks.insert(4, f"client={client_impl}")
            if stream:
                cpu = float(keys.get("user_s", 0)) + float(keys.get("sys_s", 0))
                toks.insert(5, f"client_cpu_us_per_msg={cpu * 1e6 / messages:.3f}")
            print(" ".join(toks))
            return 0
        except TimeoutError:
            return failed(f"no answer within {o.timeout:.0f} s")
        finally:
            for p in (cli, srv):
                if p is not None and p.poll() is None:
                    stop(p, 5)


if __name__ == "__main__":
    sys.exit(main())
