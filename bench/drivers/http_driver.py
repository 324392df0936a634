#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One run of an HTTP workload (docs/BENCHMARKS.md, "Servers"): start one
server, load it with wrk, stop it, print one RESULT line.

    http_driver.py http --server KEY --build DIR [--conns C] [--duration S]
                        [--warmup S] [--place pinned|shared|wrk1] [--close]
    http_driver.py balance --server httpd-2d|httpd-2r --build DIR [--conns C] [--duration S]
    http_driver.py idle --server KEY --tls --build DIR [--conns N]
    http_driver.py resume --server KEY --tls --build DIR [--duration S]

Every server answers GET / with "Hello, World!" on 127.0.0.1, a free port.
KEY names the server and how many cores it is given:

    httpd-1      examples/httpd --loops 1 on epoll (as started with no tuning:
                 the stacks of connections idle 250 ms are given back)
    httpd-1u     the same on io_uring (receiving ahead and sending behind, as
                 httpd does there by default)
    httpd-1us    httpd-1u with --no-readahead: a receive request per read
    httpd-1un    httpd-1u with --no-writebehind: a send(2) per answer
    httpd-1c     httpd-1 with --compact-idle 100: the stacks of connections
                 idle 100 ms are given back (tdl_fiber_compact_idle)
    httpd-1uc    httpd-1u with --compact-idle 100
    httpd-1k     httpd-1 with --compact-idle 0: idle connections keep their
                 stacks' pages
    floor-1      no library: treadle-bench uring-floor --mode http, liburing
                 directly on one thread (bench/workloads/bench_uring_floor.c),
                 one receive at a time per connection
    floor-1m     the same with a multishot receive from provided buffers
    floor-1mr    floor-1m with each answer a send request on the ring
    floor-1as    floor-1 with one accept request at a time (instead of a
                 multishot accept)
    floor-1ae    floor-1 accepting as treadle does: accept4 until EAGAIN,
                 then one accept request
    go-1         bench-go-http (Go net/http), GOMAXPROCS=1
    nginx-1      nginx, 1 worker
    st-1         bench-st http-server: State Threads, a thread per connection
    boost-fiber-1  bench-boost-fiber http-server: Boost.Fiber over Boost.Asio,
                 a fiber per connection
    may-1        bench-may http-server: may, one worker thread, a coroutine
                 per connection
    monoio-1     bench-monoio http-server: monoio on io_uring, a task per
                 connection
    httpd-2d     httpd --loops 2 --accept distribute, epoll
    httpd-2r     httpd --loops 2 --accept reuseport, epoll
    httpd-2du    httpd-2d on io_uring
    httpd-2ru    httpd-2r on io_uring
    httpd-2x1    httpd --loops 1 given two cores
    go-2         bench-go-http, GOMAXPROCS=2
    nginx-2      nginx, 2 workers

--place says where the server and wrk run (with two CPUs or more; with one,
nothing is pinned): pinned, the server on CPU 0 and wrk on CPU 1 (taskset);
shared, nothing pinned (wrk and the server share every CPU); wrk1, wrk on
CPU 1 and the server free.

The fiber runtimes' servers (st-1, boost-fiber-1, may-1, monoio-1; the
peers' `http-server`, put in the build directory by
bench/peers/build-peers.sh) use no HTTP library: a fiber, coroutine or task
per connection reads requests into a 16 KiB buffer, answers every complete
request head (up to its blank line) a read brings in one write, and sends
the bytes httpd sends; anything but GET is 400 (docs/BENCHMARKS.md,
"HTTP").  They serve until their stdin ends, as the floor does.

`http` checks every server's answers before wrk runs, beyond the readiness
probe (GET / with "Connection: close", read to the close): on one
keep-alive connection two requests in one write must get two answers and a
request sent in two pieces one, each "Hello, World!" with its Content-Length
(from httpd, the floor and the fiber runtimes' servers, byte for byte
httpd's headers, the Date aside), and, on another connection, a request with
a malformed header line must be answered 400 (not asked of the floor, which
answers every head).  A wrong answer fails the run, as do any non-2xx
answer and any read error wrk reports (an answer it could not parse, or a
connection closed in the middle of one): a server that answers wrongly
under load fails its row instead of reporting a rate.

`http`: after --warmup seconds of wrk at C connections (0: none), one
measured `wrk -t1 -cC -dS --latency` (with --close, every request carries
"Connection: close", so that every request is a connection of its own).
The server's CPU time is utime + stime of the server and every process it
started (/proc/PID/stat, clock ticks), read just before and after the
measured run.  The RESULT line:

    rps                     requests per second (wrk)
    p99_us                  wrk's 99th percentile latency, µs
    server_cpu_us_per_req   the server's CPU time per request, µs
    requests, errors        wrk's count of requests, and of socket errors
                            and non-2xx answers

`balance`: a fresh `httpd --loops 2 --accept MODE` (httpd-2d: distribute,
httpd-2r: reuseport), one wrk run of S seconds at C connections (wrk opens
each connection once), then the connections each loop took, which httpd
prints when it stops: loop_min, loop_max and loop_spread (max / min).

--tls: the same over HTTPS (the tls group): a P-256 certificate made for
the run with the `openssl` command; httpd with --tls-cert/--tls-key, nginx
with `listen ... ssl` and TLS 1.3 only, bench-go-http with -tls-cert and
-tls-key (crypto/tls); wrk against https://.  `idle` (with --tls or
without): N connections that each made one request stay open and idle;
the server's RSS (every process of it, /proc/PID/status VmRSS) before they
came and after, over N:

    rss_kb_per_conn         KiB of RSS per idle connection

--no-resumption (with --tls): the server issues no session tickets, so that
every connection makes a full handshake: httpd --tls-no-resumption,
bench-go-http -tls-no-tickets, nginx `ssl_session_tickets off` (its session
cache stays at its default, none).  Without it wrk resumes: it keeps one SSL
object per connection slot and SSL_clear keeps its session, so with
--close every reconnection offers the last TLS 1.3 ticket back.

`resume` (--tls): `openssl s_time -tls1_3 -www /` against the server for S
seconds making new connections one after another (-new: a full handshake
each), then as long again resuming one session (-reuse: a TLS 1.3 ticket
each time), s_time placed as wrk is; each connection sends GET / over
HTTP/1.0 and reads the answer to its close.  The server's CPU time and the
wall time are read around each s_time run:

    new_conns_per_s, resumed_conns_per_s         connections per second
    server_cpu_us_per_new, server_cpu_us_per_resumed
                                                 the server's CPU time per connection, µs
    cpu_new_over_resumed    the first over the second: what resuming saves
    resumed_frac            the share of -reuse connections that resumed (s_time's
                            "r"); below 0.5 the run fails

A program that is missing (wrk, nginx, httpd, bench-go-http, a peer of
PEERS, or treadle-bench without uring-floor) is an exit status of 77 with a
note: the orchestrator skips the run.  nginx's configuration is
bench/peers/nginx/nginx.conf.in.
"""

import argparse
import os
import ssl
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TICK = os.sysconf("SC_CLK_TCK")

# key: (program, arguments, environment, cores)
#   program: "httpd", "floor" (treadle-bench uring-floor), "go" (bench-go-http) or "nginx"
URING = {"TDL_BACKEND": "uring"}
SERVERS = {
    "httpd-1": ("httpd", ["--loops", "1"], {}, 1),
    "httpd-1u": ("httpd", ["--loops", "1"], URING, 1),
    "httpd-1us": ("httpd", ["--loops", "1", "--no-readahead"], URING, 1),
    "httpd-1un": ("httpd", ["--loops", "1", "--no-writebehind"], URING, 1),
    "httpd-1c": ("httpd", ["--loops", "1", "--compact-idle", "100"], {}, 1),
    "httpd-1uc": ("httpd", ["--loops", "1", "--compact-idle", "100"], URING, 1),
    "httpd-1k": ("httpd", ["--loops", "1", "--compact-idle", "0"], {}, 1),
    "floor-1": ("floor", ["--recv", "single", "--accept", "multishot", "--send", "plain"], {}, 1),
    "floor-1m": ("floor", ["--recv", "multishot", "--accept", "multishot", "--send", "plain"], {}, 1),
    "floor-1mr": ("floor", ["--recv", "multishot", "--accept", "multishot", "--send", "ring"], {}, 1),
    "floor-1as": ("floor", ["--recv", "single", "--accept", "single", "--send", "plain"], {}, 1),
    "floor-1ae": ("floor", ["--recv", "single", "--accept", "eager", "--send", "plain"], {}, 1),
    "go-1": ("go", [], {"GOMAXPROCS": "1"}, 1),
    "nginx-1": ("nginx", [], {}, 1),
    "httpd-2d": ("httpd", ["--loops", "2", "--accept", "distribute"], {}, 2),
    "httpd-2r": ("httpd", ["--loops", "2", "--accept", "reuseport"], {}, 2),
    "httpd-2du": ("httpd", ["--loops", "2", "--accept", "distribute"], URING, 2),
    "httpd-2ru": ("httpd", ["--loops", "2", "--accept", "reuseport"], URING, 2),
    "httpd-2x1": ("httpd", ["--loops", "1"], {}, 2),
    "go-2": ("go", [], {"GOMAXPROCS": "2"}, 2),
    "nginx-2": ("nginx", [], {}, 2),
    "st-1": ("st", [], {}, 1),
    "boost-fiber-1": ("boost-fiber", [], {}, 1),
    "may-1": ("may", [], {}, 1),
    "monoio-1": ("monoio", [], {}, 1),
}
# The fiber runtimes' servers: kind -> the peer program whose http-server they are.
PEERS = {"st": "bench-st", "boost-fiber": "bench-boost-fiber", "may": "bench-may", "monoio": "bench-monoio"}
# What httpd answers GET / with on a kept connection; the floor and PEERS send the same bytes.
HTTPD_HELLO = re.compile(rb"HTTP/1\.1 200 OK\r\nServer: treadle\r\nDate: [A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} "
                         rb"\d\d:\d\d:\d\d GMT\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!")


def note(msg):
    print(f"http_driver: {msg}", file=sys.stderr, flush=True)


def find(build, name, sub=()):
    for cand in [os.path.join(build, *sub, name), os.path.join(build, "bench", name), os.path.join(build, name)]:
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    for dirpath, dirnames, filenames in os.walk(build):
        dirnames[:] = [d for d in dirnames if d not in ("CMakeFiles", "peers-tokio-target")]
        if name in filenames and os.access(os.path.join(dirpath, name), os.X_OK):
            return os.path.join(dirpath, name)
    return None


def program(kind, build):
    """(path, None) or (None, why it is missing)."""
    if kind == "httpd":
        p = find(build, "httpd", ("examples", "httpd"))
        return (p, None) if p else (None, f"no httpd under {build}")
    if kind == "floor":
        p = find(build, "treadle-bench", ("bench",))
        if not p:
            return None, f"no treadle-bench under {build}"
        h = subprocess.run([p, "uring-floor", "--help"], capture_output=True, text=True)
        if h.returncode != 0 or "not built" in h.stdout:
            return None, "treadle-bench has no uring-floor (built without liburing)"
        return p, None
    if kind in PEERS:
        p = find(build, PEERS[kind])
        return (p, None) if p else (None, f"no {PEERS[kind]} under {build} (bench/peers/build-peers.sh builds it)")
    if kind == "go":
        p = find(build, "bench-go-http")
        return (p, None) if p else (None, f"no bench-go-http under {build} (bench/peers/build-peers.sh builds it)")
    p = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    return (p, None) if p else (None, "nginx is not installed (Debian: nginx-light)")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def client_context():
    """A client that does not verify: the benchmark's certificate is made for the run."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


_CLIENT = []


def connect(port, tls, timeout):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if not tls:
        return s
    # One context for every connection: making one loads the CA store, which
    # made `idle` at 10,000 connections outlast the servers' idle timeouts.
    if not _CLIENT:
        _CLIENT.append(client_context())
    return _CLIENT[0].wrap_socket(s)


def make_cert(tmp):
    """A self-signed P-256 certificate for 127.0.0.1 in tmp: (cert, key)."""
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def ready(port, proc, deadline, tls=False):
    """Whether the server answers GET / with "Hello, World!" before the deadline."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with connect(port, tls, 1) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
            if data.startswith(b"HTTP/1.1 200") and data.endswith(b"Hello, World!"):
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def read_answer(s, buf):
    """One answer (with a Content-Length) from s, buf being what was read
    already: (the answer, the bytes after it)."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ValueError(f"the connection closed before an answer ended: {buf[:300]!r}")
        buf += chunk
    i = buf.index(b"\r\n\r\n") + 4
    m = re.search(rb"(?im)^content-length:[ \t]*(\d+)[ \t]*\r$", buf[:i])
    if not m:
        raise ValueError(f"an answer without Content-Length: {buf[:i]!r}")
    n = i + int(m.group(1))
    while len(buf) < n:
        chunk = s.recv(65536)
        if not chunk:
            raise ValueError(f"the connection closed in the middle of an answer: {buf[:300]!r}")
        buf += chunk
    return buf[:n], buf[n:]


def check_answers(port, tls, kind):
    """What wrk does not look at (see the module's doc): the answers'
    bytes, two requests in one write, a request in two pieces, and 400 to a
    malformed one.  Raises ValueError on a wrong answer."""
    req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        with connect(port, tls, 5) as s:
            s.sendall(req * 2)
            a1, rest = read_answer(s, b"")
            a2, rest = read_answer(s, rest)
            s.sendall(req[:9])
            time.sleep(0.05)
            s.sendall(req[9:])
            a3, rest = read_answer(s, rest)
        for a in (a1, a2, a3):
            if kind in ("httpd", "floor") or kind in PEERS:
                ok = HTTPD_HELLO.fullmatch(a)
            else:
                ok = a.startswith(b"HTTP/1.1 200 ") and a.endswith(b"\r\n\r\nHello, World!")
            if not ok:
                raise ValueError(f"a wrong answer to GET /: {a[:400]!r}")
        if rest:
            raise ValueError(f"bytes after the answers: {rest[:200]!r}")
        if kind == "floor":
            return
        data = b""
        with connect(port, tls, 5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n")
            try:
                while chunk := s.recv(65536):
                    data += chunk
            except ConnectionResetError:
                pass
        if not data.startswith(b"HTTP/1.1 400 "):
            raise ValueError(f"a malformed request was not answered 400: {data[:300]!r}")
    except OSError as ex:
        raise ValueError(f"checking the answers: {ex}") from ex


def descendants(pid):
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for c in f.read().split():
                    out += descendants(int(c))
    except OSError:
        pass
    return out


def cpu_seconds(pid):
    """utime + stime of pid (every thread) and its descendants, in seconds."""
    total = 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / TICK


def seconds(s):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", s)
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[m.group(2)]


class Server:
    def __init__(self, key, path, tmp, place, tls=False, resumption=True):
        kind, args, env, self.cores = SERVERS[key]
        self.kind, self.proc, self.port = kind, None, free_port()
        listen = f"127.0.0.1:{self.port}"
        cert, key_file = make_cert(tmp) if tls else (None, None)
        if kind == "httpd":
            argv = [path, "--listen", listen] + args
            if tls:
                argv += ["--tls-cert", cert, "--tls-key", key_file]
            if tls and not resumption:
                argv += ["--tls-no-resumption"]
        elif kind == "floor":
            argv = [path, "uring-floor", "--listen", listen, "--mode", "http"] + args
        elif kind in PEERS:
            argv = [path, "http-server", "--listen", listen] + args
        elif kind == "go":
            argv = [path, "-listen", listen]
            if tls:
                argv += ["-tls-cert", cert, "-tls-key", key_file]
            if tls and not resumption:
                argv += ["-tls-no-tickets"]
        else:
            with open(os.path.join(ROOT, "bench", "peers", "nginx", "nginx.conf.in")) as f:
                conf = f.read()
            if tls:
                conf = conf.replace("listen 127.0.0.1:@PORT@ backlog=4096;",
                                    "listen 127.0.0.1:@PORT@ ssl backlog=4096;\n"
                                    f"        ssl_certificate {cert};\n        ssl_certificate_key {key_file};\n"
                                    "        ssl_protocols TLSv1.3;")
            if tls and not resumption:
                conf = conf.replace("ssl_protocols TLSv1.3;", "ssl_protocols TLSv1.3;\n        ssl_session_tickets off;")
            conf = conf.replace("@PREFIX@", tmp).replace("@PORT@", str(self.port))
            conf = conf.replace("@WORKERS@", str(self.cores))
            with open(os.path.join(tmp, "nginx.conf"), "w") as f:
                f.write(conf)
            argv = [path, "-p", tmp, "-c", os.path.join(tmp, "nginx.conf"), "-e", os.path.join(tmp, "error.log")]
        if place == "pinned":
            argv = ["taskset", "-c", "0"] + argv
        # The floor and PEERS serve until their stdin ends: a pipe held open.
        # stderr goes to a file (a pipe nobody reads could fill and stop the server).
        self.err = open(os.path.join(tmp, "stderr"), "w+")
        self.proc = subprocess.Popen(argv, env=dict(os.environ, **env), stdout=subprocess.DEVNULL,
                                     stderr=self.err,
                                     stdin=subprocess.PIPE if kind == "floor" or kind in PEERS
                                     else subprocess.DEVNULL)

    def stop(self):
        """Stop the server; its stderr."""
        p = self.proc
        if p.stdin:
            p.stdin.close()
            p.stdin = None
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if p.poll() is None:
            # nginx: QUIT is its graceful stop; httpd and Go: TERM
            p.send_signal(signal.SIGQUIT if self.kind == "nginx" else signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.err.seek(0)
        return self.err.read()


def rss_kb(pid):
    """VmRSS of pid and its descendants (nginx's workers), in KiB."""
    total = 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                m = re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M)
            total += int(m.group(1)) if m else 0
        except OSError:
            pass
    return total


def idle(srv, conns, tls):
    """Open conns connections, one request each, and hold them idle: the
    server's RSS per connection."""
    time.sleep(0.5)
    before = rss_kb(srv.proc.pid)
    held = []
    for _ in range(conns):
        s = connect(srv.port, tls, 10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while not data.endswith(b"Hello, World!"):
            chunk = s.recv(4096)
            if not chunk:
                raise ConnectionError("closed before answering")
            data += chunk
        held.append(s)
    time.sleep(1.0)  # let every server settle into its idle state
    after = rss_kb(srv.proc.pid)
    # Every connection must still be open (not closed by an idle timeout),
    # or the figure would count fewer connections than it divides by.
    for s in held:
        try:
            s.setblocking(False)
            if s.recv(1) == b"":
                raise ConnectionError("a connection was closed while held idle")
        except (BlockingIOError, ssl.SSLWantReadError):
            pass
    for s in held:
        s.close()
    return (after - before) / conns


def wrk(port, conns, duration, close, cpus, timeout, tls=False):
    scheme = "https" if tls else "http"
    argv = ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency", f"{scheme}://127.0.0.1:{port}/"]
    if close:
        argv[1:1] = ["-H", "Connection: close"]
    if cpus:
        argv = ["taskset", "-c", cpus] + argv
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=timeout).stdout


def s_time(port, mode, duration, cpus, timeout):
    """One `openssl s_time -MODE` run: (connections, resumed, wall seconds)."""
    argv = ["openssl", "s_time", "-connect", f"127.0.0.1:{port}", f"-{mode}", "-time", str(duration), "-tls1_3",
            "-www", "/"]
    if cpus:
        argv = ["taskset", "-c", cpus] + argv
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=timeout).stdout
    wall = time.monotonic() - t0
    m = re.search(r"^(\d+) connections in [\d.]+s;", out, re.M)
    if not m:
        raise ValueError(f"s_time -{mode} printed no count: {' '.join(out.split())[-300:]}")
    # One character per timed connection: "r" resumed, "*" a new session.
    marks = "".join(l for l in out.splitlines() if re.fullmatch(r"[*r]+", l))
    return int(m.group(1)), marks.count("r"), wall


def resume(srv, duration, cpus, timeout):
    """New and resumed connections per second, and the server's CPU per each."""
    out = {}
    for mode in ("new", "reuse"):
        cpu0 = cpu_seconds(srv.proc.pid)
        n, resumed, wall = s_time(srv.port, mode, duration, cpus, timeout)
        cpu1 = cpu_seconds(srv.proc.pid)
        if n < 1:
            raise ValueError(f"s_time -{mode} made no connection")
        out[mode] = (n / wall, (cpu1 - cpu0) * 1e6 / n, resumed / n)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload", choices=["http", "balance", "idle", "resume"])
    ap.add_argument("--server", choices=sorted(SERVERS), required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--conns", type=int, default=75)
    ap.add_argument("--duration", type=int, default=8, help="seconds of the measured wrk run (default 8)")
    ap.add_argument("--warmup", type=int, default=1, help="seconds of wrk before it, 0 for none (default 1)")
    ap.add_argument("--place", choices=["pinned", "shared", "wrk1"], default="pinned")
    ap.add_argument("--close", action="store_true", help='every request with "Connection: close"')
    ap.add_argument("--timeout", type=float, default=120, help="seconds for each wrk run beyond --duration")
    ap.add_argument("--tls", action="store_true", help="over HTTPS (the tls group)")
    ap.add_argument("--no-resumption", action="store_true",
                    help="with --tls: the server issues no session tickets (a full handshake per connection)")
    o = ap.parse_args()
    if o.conns < 1 or o.duration < 1 or o.warmup < 0:
        ap.error("--conns and --duration must be positive, --warmup not negative")
    if o.workload == "balance" and o.server not in ("httpd-2d", "httpd-2r"):
        ap.error("balance runs httpd-2d or httpd-2r")
    if o.tls and (SERVERS[o.server][0] == "floor" or SERVERS[o.server][0] in PEERS):
        ap.error(f"--tls: {o.server} has no TLS")
    if (o.no_resumption or o.workload == "resume") and not o.tls:
        ap.error("--no-resumption and resume need --tls")
    if o.tls and not shutil.which("openssl"):
        print("http_driver: --tls needs the openssl command (Debian: openssl)")
        return 77

    if not shutil.which("wrk"):
        print("http_driver: wrk is not installed (Debian: wrk)")
        return 77
    kind = SERVERS[o.server][0]
    path, why = program(kind, os.path.abspath(o.build))
    if not path:
        print(f"http_driver: {o.server}: {why}")
        return 77
    two = (os.cpu_count() or 1) >= 2
    place = o.place if two else "shared"
    wrk_cpus = "1" if place in ("pinned", "wrk1") else None
    # wrk -c1000 and the servers need more fds than the usual soft limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    with tempfile.TemporaryDirectory(prefix="treadle-http-") as tmp:
        srv = Server(o.server, path, tmp, "shared" if o.workload == "balance" else place, o.tls,
                     not o.no_resumption)
        err_text = ""
        try:
            if not ready(srv.port, srv.proc, time.monotonic() + 10, o.tls):
                err_text = srv.stop()
                print(f"http_driver: {o.server} did not start: {err_text.strip()[-400:]}", file=sys.stderr)
                return 1
            if o.workload == "balance":
                wrk(srv.port, o.conns, o.duration, False, None, o.duration + o.timeout)
                err_text = srv.stop()
                m = re.search(r"connections per loop: ([\d ]+)", err_text)
                counts = [int(x) for x in m.group(1).split()] if m else []
                if len(counts) < 2 or min(counts) <= 0:
                    print(f"http_driver: {o.server}: no per-loop counts ({err_text.strip()[-300:]!r})",
                          file=sys.stderr)
                    return 1
                print(f"RESULT impl={o.server} bench=balance conns={o.conns} loops={'/'.join(map(str, counts))} "
                      f"loop_min={min(counts)} loop_max={max(counts)} loop_spread={max(counts) / min(counts):.3f}")
                return 0
            if o.workload == "idle":
                per = idle(srv, o.conns, o.tls)
                print(f"RESULT impl={o.server} bench=idle tls={int(o.tls)} conns={o.conns} rss_kb_per_conn={per:.2f}")
                return 0
            if o.workload == "resume":
                r = resume(srv, o.duration, wrk_cpus, o.duration + o.timeout)
                (new_rate, new_cpu, _), (re_rate, re_cpu, re_frac) = r["new"], r["reuse"]
                if re_frac < 0.5:
                    print(f"http_driver: {o.server}: only {re_frac:.0%} of s_time -reuse's connections resumed",
                          file=sys.stderr)
                    return 1
                print(f"RESULT impl={o.server} bench=resume tls=1 duration_s={o.duration} place={place} "
                      f"new_conns_per_s={new_rate:.0f} resumed_conns_per_s={re_rate:.0f} "
                      f"server_cpu_us_per_new={new_cpu:.2f} server_cpu_us_per_resumed={re_cpu:.2f} "
                      f"cpu_new_over_resumed={new_cpu / re_cpu if re_cpu else 0:.3f} resumed_frac={re_frac:.3f}")
                return 0
            check_answers(srv.port, o.tls, srv.kind)
            if o.warmup:
                wrk(srv.port, o.conns, o.warmup, o.close, wrk_cpus, o.warmup + o.timeout, o.tls)
            cpu0 = cpu_seconds(srv.proc.pid)
            out = wrk(srv.port, o.conns, o.duration, o.close, wrk_cpus, o.duration + o.timeout, o.tls)
            cpu1 = cpu_seconds(srv.proc.pid)
        except subprocess.CalledProcessError as ex:
            print(f"http_driver: wrk failed (exit {ex.returncode}): {(ex.stderr or '').strip()[-300:]}",
                  file=sys.stderr)
            return 1
        except subprocess.TimeoutExpired:
            print("http_driver: wrk did not finish in time", file=sys.stderr)
            return 1
        except ValueError as ex:
            print(f"http_driver: {o.server}: {ex}", file=sys.stderr)
            return 1
        finally:
            if srv.proc.returncode is None:
                srv.stop()
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = seconds(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    errors = read_errors = not_2xx = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
        read_errors = int(m.group(2))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        not_2xx = int(m.group(1))
        errors += not_2xx
    if read_errors or not_2xx:
        print(f"http_driver: {o.server}: wrong answers: wrk counted {not_2xx} non-2xx answers and {read_errors} "
              "read errors (an answer it could not parse, or a connection closed in the middle of one)",
              file=sys.stderr)
        return 1
    if not requests:
        print(f"http_driver: {o.server}: wrk made no request: {' '.join(out.split())[-300:]}", file=sys.stderr)
        return 1
    print(f"RESULT impl={o.server} bench=http tls={int(o.tls)} conns={o.conns} duration_s={o.duration} place={place} "
          f"close={int(o.close)} rps={rps:.0f} p99_us={p99 * 1e6:.0f} "
          f"server_cpu_us_per_req={(cpu1 - cpu0) * 1e6 / requests:.3f} requests={requests} errors={errors}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
