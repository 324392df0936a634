#!/usr/bin/env python3
"""HTTP benchmark: examples/httpd against Go net/http and nginx, and the io_uring
floor, driven by wrk.

    python3 bench/http/run.py [--build build/release] [--duration 10] [--rounds 3]
                              [--conns 75,1000] [--write] [--quick] [--only KEY,...]
                              [--close]

Servers (all answer GET / with "Hello, World!", bound to 127.0.0.1):
  one core  (server pinned to CPU 0 with taskset, wrk pinned to CPU 1):
    httpd         examples/httpd, one treadle loop (on epoll, and on io_uring:
                  receiving ahead and sending behind, as httpd does by
                  default; with --no-readahead, a receive request per read:
                  httpd-1us; with --no-writebehind, a send(2) per answer:
                  httpd-1un)
    go GOMAXPROCS=1
    nginx 1 worker
    floor         no library: treadle-bench uring-floor --mode http, liburing
                  directly on one thread (bench/bench_uring_floor.c), each
                  request head answered with httpd's bytes for GET /; one
                  receive at a time per connection (floor-1) or a multishot
                  receive from provided buffers (floor-1m; floor-1mr: the
                  same with each answer a send request on the ring instead
                  of send(2)).  What io_uring
                  itself allows here: the floor under httpd's figures, part
                  of no target.  Its accept is one multishot accept; for
                  --close it also runs with one accept request at a time
                  (floor-1as) and with treadle's way, accept4 until EAGAIN
                  and then an accept request (floor-1ae).
  two cores (nothing pinned: wrk shares the two CPUs with the server, the
  "shared" rows; and the same with wrk on CPU 1 only, the "-w1" keys):
    httpd         --loops 2, --accept distribute (httpd-2d) or reuseport
                  (httpd-2r), on epoll, and the same on io_uring (httpd-2du,
                  httpd-2ru: the rows the two-core targets read); also one
                  loop (httpd-2x1)
    go            GOMAXPROCS=2
    nginx 2 workers
Each measurement is `wrk -t1 -c<conns> -d<duration>s --latency`; the
configurations run interleaved (A B C A B C ...) for --rounds rounds and the
median of the rounds is reported: requests/s, p99 latency, and the server's
CPU seconds (utime + stime of the server and its child processes, from
/proc/<pid>/stat before and after the run) per 100,000 requests.

--close sends every request with "Connection: close" (wrk -H), so that every
request is a connection of its own: accept, one request, close.  It measures
the cost of a connection rather than of a request (CPU per 100,000 requests is
then per 100,000 connections) and is part of no target: no verdict is given.

Needs wrk and nginx (installed with apt-get when missing and run as root;
otherwise those peers are skipped) and go for the Go peer (built from
bench/peers/go-http into the build directory when `go` exists).  httpd and
treadle-bench are built (Release) into the build directory when missing; the
floor is skipped where treadle-bench has no uring-floor (no liburing).
--only runs just the configurations named by key (httpd-1, floor-1m, ...)
or by name (httpd, httpd-uring, go, nginx, floor).  --write puts the table
into docs/PERFORMANCE.md between <!-- BEGIN http --> and <!-- END http -->.

Progress (configuration, round i of n, elapsed, estimate left) goes to stderr;
stdout gets a heading and the table, the load average at the start and the
end with a warning for every configuration whose rounds spread more than 20%
in requests/s, and a closing verdict against the targets (HTTP_TARGETS).
"""
import argparse
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLK_TCK = os.sysconf("SC_CLK_TCK")


# The targets (docs/PERFORMANCE.md's summary table; issue 12 for two cores), as
# data: the closing verdict reads only this.  Each compares, at `conns`
# connections, the paired ratio (median over rounds of the same round's
# figures) of one configuration's figure to another's: rps is requests/s,
# cpu100k the server's CPU seconds per 100,000 requests.  ("balance", mode,
# conns) rows compare the most and fewest connections on one loop of
# `httpd --loops 2 --accept mode`.
HTTP_TARGETS = [
    ("one core, uring: CPU/req <= 0.85 x nginx's", "httpd-1u", "nginx-1", 75, "cpu100k", "<=", 0.85),
    ("one core: req/s >= 1.2 x Go's", "httpd-1", "go-1", 75, "rps", ">=", 1.2),
    ("one core: req/s >= nginx's", "httpd-1", "nginx-1", 75, "rps", ">=", 1.0),
    ("one core: CPU/req <= Go's", "httpd-1", "go-1", 75, "cpu100k", "<=", 1.0),
    ("one core: CPU/req <= nginx's", "httpd-1", "nginx-1", 75, "cpu100k", "<=", 1.0),
]
# Two cores: httpd on the uring back end (the keys ending in u), its faster
# one here; the epoll rows (httpd-2d, httpd-2r) run beside them, their ratios
# printed under the table but part of no target.
for _tag, _place in (("", "shared"), ("-w1", "wrk on CPU 1")):
    for _key, _mode in (("httpd-2du", "distribute"), ("httpd-2ru", "reuseport")):
        for _c in (75, 1000):
            _what = f"two cores ({_place}), {_mode}, c={_c}"
            HTTP_TARGETS += [
                (f"{_what}: req/s >= nginx's", _key + _tag, "nginx-2" + _tag, _c, "rps", ">=", 1.0),
                (f"{_what}: req/s >= 1.5 x Go's", _key + _tag, "go-2" + _tag, _c, "rps", ">=", 1.5),
                (f"{_what}: CPU/req <= nginx's", _key + _tag, "nginx-2" + _tag, _c, "cpu100k", "<=", 1.0),
                (f"{_what}: CPU/req <= Go's", _key + _tag, "go-2" + _tag, _c, "cpu100k", "<=", 1.0),
            ]
for _mode in ("distribute", "reuseport"):
    for _c in (75, 1000):
        HTTP_TARGETS.append((f"two cores, {_mode}, c={_c}: connections per loop within 1.5 x", "balance", _mode, _c,
                             "max/min", "<=", 1.5))

# Rounds of one configuration whose requests/s spread more than this (max/min - 1)
# are reported: the machine was probably busy.
SPREAD_WARN = 0.20


def note(*a):
    print("http-bench:", *a, file=sys.stderr, flush=True)


def ensure_tools():
    missing = [p for p, tool in (("wrk", "wrk"), ("nginx-light", "nginx")) if not shutil.which(tool)]
    if missing and os.geteuid() == 0:
        note("installing", " ".join(missing))
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-qq"] + missing, env=env, stdout=subprocess.DEVNULL)
    if not shutil.which("wrk"):
        sys.exit("http-bench: wrk is missing (apt-get install wrk)")


def build(builddir):
    httpd = os.path.join(builddir, "examples", "httpd", "httpd")
    if not os.path.exists(httpd):
        note("building httpd (Release) in", builddir)
        subprocess.run(["cmake", "-S", ROOT, "-B", builddir, "-DCMAKE_BUILD_TYPE=Release", "-DTDL_TESTS=OFF"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", builddir, "-j2", "--target", "httpd"], check=True,
                       stdout=subprocess.DEVNULL)
    floor = os.path.join(builddir, "bench", "treadle-bench")
    if not os.path.exists(floor):
        note("building treadle-bench (Release) in", builddir)
        subprocess.run(["cmake", "--build", builddir, "-j2", "--target", "treadle-bench"],
                       stdout=subprocess.DEVNULL)
    # A build without liburing has no uring-floor: its --help says "not built".
    if os.path.exists(floor):
        h = subprocess.run([floor, "uring-floor", "--help"], capture_output=True, text=True)
        if h.returncode != 0 or "not built" in h.stdout:
            note("treadle-bench has no uring-floor (built without liburing): no floor")
            floor = None
    else:
        note("no treadle-bench: no floor")
        floor = None
    gobin = os.path.join(builddir, "http-go")
    if shutil.which("go"):
        env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=readonly")
        r = subprocess.run(["go", "build", "-trimpath", "-o", gobin, "."],
                           cwd=os.path.join(ROOT, "bench", "peers", "go-http"), env=env)
        if r.returncode != 0:
            note("go build failed: no Go peer")
            gobin = None
    else:
        note("no go toolchain: no Go peer")
        gobin = None
    return httpd, gobin, floor


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_ready(port, proc, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                if data.startswith(b"HTTP/1.1 200") and data.endswith(b"Hello, World!"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


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
    """utime + stime of pid (all its threads) and its descendants, in seconds."""
    total = 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        except OSError:
            pass
    return total / CLK_TCK


class Server:
    """One configuration: `key` names its row; `cpus` restricts the server
    (taskset), `wrk_cpus` the wrk that measures it."""

    def __init__(self, name, cores, argv, env=None, cpus=None, workdir=None, key=None, wrk_cpus=None, label="",
                 stdin_pipe=False):
        self.name, self.cores, self.argv, self.env, self.cpus = name, cores, argv, env, cpus
        self.stdin_pipe = stdin_pipe  # the floor serves until its stdin ends: a pipe held open
        self.workdir = workdir
        self.key = key or name
        self.wrk_cpus = wrk_cpus
        self.label = label
        self.proc = None
        self.port = None

    def start(self, port):
        self.port = port
        argv = [a.replace("@PORT@", str(port)) for a in self.argv]
        if self.workdir:  # nginx: write its config for this port
            with open(os.path.join(ROOT, "bench", "peers", "nginx", "nginx.conf.in")) as f:
                conf = f.read()
            conf = conf.replace("@PREFIX@", self.workdir).replace("@PORT@", str(port))
            conf = conf.replace("@WORKERS@", str(self.cores))
            with open(os.path.join(self.workdir, "nginx.conf"), "w") as f:
                f.write(conf)
        if self.cpus is not None:
            argv = ["taskset", "-c", self.cpus] + argv
        env = dict(os.environ, **(self.env or {}))
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.PIPE if self.stdin_pipe else None)
        if not wait_ready(port, self.proc):
            self.stop()
            raise RuntimeError(f"{self.name} did not start")

    def stop(self):
        if self.proc and self.proc.stdin:
            self.proc.stdin.close()  # the floor's signal to stop; TERM below if it lingers
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc and self.proc.poll() is None:
            # nginx: QUIT is its graceful stop; httpd and Go: TERM
            self.proc.send_signal(signal.SIGQUIT if self.workdir else signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def parse_duration(s):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", s)
    v = float(m.group(1))
    return v * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[m.group(2)]


def run_wrk(server, conns, duration, close=False):
    argv = ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency", f"http://127.0.0.1:{server.port}/"]
    if close:
        argv[1:1] = ["-H", "Connection: close"]
    if server.wrk_cpus:
        argv = ["taskset", "-c", server.wrk_cpus] + argv
    before = cpu_seconds(server.proc.pid)
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    after = cpu_seconds(server.proc.pid)
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = parse_duration(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    errors = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        errors += int(m.group(1))
    cpu100k = (after - before) / requests * 1e5 if requests else float("nan")
    return {"rps": rps, "p99": p99, "cpu100k": cpu100k, "errors": errors, "requests": requests}


def balance_probe(httpd, mode, conns):
    """Per-loop connection counts of a fresh `httpd --loops 2 --accept mode`
    after one short wrk run at `conns` connections."""
    port = free_port()
    proc = subprocess.Popen([httpd, "--listen", f"127.0.0.1:{port}", "--loops", "2", "--accept", mode],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        if not wait_ready(port, proc):
            return []
        subprocess.run(["wrk", "-t1", f"-c{conns}", "-d2s", f"http://127.0.0.1:{port}/"],
                       capture_output=True, check=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1]
    m = re.search(r"connections per loop: ([\d ]+)", err)
    return [int(x) for x in m.group(1).split()] if m else []


def fmt_p99(s):
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} µs"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", default="75,1000")
    ap.add_argument("--write", action="store_true", help="write the table into docs/PERFORMANCE.md")
    ap.add_argument("--quick", action="store_true", help="one 2 s round at 75 connections (smoke test)")
    ap.add_argument("--close", action="store_true",
                    help='every request on a connection of its own ("Connection: close"); no verdict')
    ap.add_argument("--only", default="",
                    help="comma-separated configuration keys (httpd-1, floor-1, ...) or names (httpd, httpd-uring, go, "
                         "nginx, floor) to run (default: all)")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.rounds, args.conns = 2, 1, "75"
    conns = [int(c) for c in args.conns.split(",")]

    ensure_tools()
    builddir = os.path.abspath(args.build)
    httpd, gobin, floor = build(builddir)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # wrk -c1000, and the servers
    two_cpus = (os.cpu_count() or 1) >= 2

    tmp = tempfile.mkdtemp(prefix="treadle-http-bench-")
    nginx = shutil.which("nginx") or (os.path.exists("/usr/sbin/nginx") and "/usr/sbin/nginx")

    def nginx_server(workers, key, label, cpus=None, wrk_cpus=None):
        d = os.path.join(tmp, key)
        os.makedirs(d)
        return Server("nginx", workers, [nginx, "-p", d, "-c", d + "/nginx.conf", "-e", d + "/error.log"],
                      cpus=cpus, workdir=d, key=key, wrk_cpus=wrk_cpus, label=label)

    one = "0" if two_cpus else None
    wrk_one = "1" if two_cpus else None
    servers = [Server("httpd", 1, [httpd, "--listen", "127.0.0.1:@PORT@", "--loops", "1"], cpus=one,
                      wrk_cpus=wrk_one, key="httpd-1", label="httpd (treadle, 1 loop)"),
               Server("httpd-uring", 1, [httpd, "--listen", "127.0.0.1:@PORT@", "--loops", "1"],
                      env={"TDL_BACKEND": "uring"}, cpus=one, wrk_cpus=wrk_one, key="httpd-1u",
                      label="httpd (treadle, 1 loop, uring)"),
               Server("httpd-uring", 1, [httpd, "--listen", "127.0.0.1:@PORT@", "--loops", "1", "--no-readahead"],
                      env={"TDL_BACKEND": "uring"}, cpus=one, wrk_cpus=wrk_one, key="httpd-1us",
                      label="httpd (treadle, 1 loop, uring, a receive per read)"),
               Server("httpd-uring", 1, [httpd, "--listen", "127.0.0.1:@PORT@", "--loops", "1", "--no-writebehind"],
                      env={"TDL_BACKEND": "uring"}, cpus=one, wrk_cpus=wrk_one, key="httpd-1un",
                      label="httpd (treadle, 1 loop, uring, a send(2) per answer)")]
    if floor:
        floors = [("floor-1", "single", "multishot", "plain"), ("floor-1m", "multishot", "multishot", "plain"),
                  ("floor-1mr", "multishot", "multishot", "ring")]
        if args.close:
            floors += [("floor-1as", "single", "single", "plain"), ("floor-1ae", "single", "eager", "plain")]
        for key, recv, accept, send in floors:
            servers.append(Server("floor", 1, [floor, "uring-floor", "--listen", "127.0.0.1:@PORT@", "--mode", "http",
                                               "--recv", recv, "--accept", accept, "--send", send], cpus=one,
                                  wrk_cpus=wrk_one, key=key, label=f"io_uring floor, no library ({recv} recv"
                                  + ("" if accept == "multishot" else f", {accept} accept")
                                  + ("" if send == "plain" else ", sends on the ring") + ")",
                                  stdin_pipe=True))
    if gobin:
        servers.append(Server("go", 1, [gobin, "-listen", "127.0.0.1:@PORT@"], env={"GOMAXPROCS": "1"}, cpus=one,
                              wrk_cpus=wrk_one, key="go-1", label="Go net/http, GOMAXPROCS=1"))
    if nginx:
        servers.append(nginx_server(1, "nginx-1", "nginx, 1 worker", cpus=one, wrk_cpus=wrk_one))
    if two_cpus:
        # Two cores, shared with wrk: nothing pinned ("shared" rows), and the
        # same servers with wrk restricted to CPU 1 ("wrk on CPU 1" rows:
        # the server may use both CPUs, wrk only the second).
        for place, wrk_cpus in (("shared", None), ("wrk on CPU 1", "1")):
            tag = "" if wrk_cpus is None else "-w1"
            servers.append(Server("httpd", 2, [httpd, "--listen", "127.0.0.1:@PORT@", "--loops", "2",
                                               "--accept", "distribute"],
                                  key="httpd-2d" + tag, wrk_cpus=wrk_cpus,
                                  label=f"httpd, 2 loops, distribute ({place})"))
            servers.append(Server("httpd", 2, [httpd, "--listen", "127.0.0.1:@PORT@", "--loops", "2",
                                               "--accept", "reuseport"],
                                  key="httpd-2r" + tag, wrk_cpus=wrk_cpus,
                                  label=f"httpd, 2 loops, reuseport ({place})"))
            for mode, k in (("distribute", "d"), ("reuseport", "r")):
                servers.append(Server("httpd-uring", 2, [httpd, "--listen", "127.0.0.1:@PORT@", "--loops", "2",
                                                         "--accept", mode],
                                      env={"TDL_BACKEND": "uring"}, key=f"httpd-2{k}u" + tag, wrk_cpus=wrk_cpus,
                                      label=f"httpd, 2 loops, {mode}, uring ({place})"))
            servers.append(Server("httpd", 2, [httpd, "--listen", "127.0.0.1:@PORT@", "--loops", "1"],
                                  key="httpd-2x1" + tag, wrk_cpus=wrk_cpus,
                                  label=f"httpd, 1 loop ({place})"))
            if gobin:
                servers.append(Server("go", 2, [gobin, "-listen", "127.0.0.1:@PORT@"], env={"GOMAXPROCS": "2"},
                                      key="go-2" + tag, wrk_cpus=wrk_cpus,
                                      label=f"Go net/http, GOMAXPROCS=2 ({place})"))
            if nginx:
                servers.append(nginx_server(2, "nginx-2" + tag, f"nginx, 2 workers ({place})", wrk_cpus=wrk_cpus))
    if args.only:
        keep = set(args.only.split(","))
        servers = [s for s in servers if s.name in keep or s.key in keep]

    results = {}  # (name, cores, conns) -> list of runs
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_start = os.getloadavg()
    note("load average " + " / ".join(f"{x:.1f}" for x in load_start) + " at the start")
    total = args.rounds * len(conns) * len(servers)
    n, t0, spent = 0, time.monotonic(), 0.0
    try:
        for s in servers:
            s.start(free_port())
            run_wrk(s, 75, 1)  # warm up
        for r in range(args.rounds):
            for c in conns:
                for s in servers:
                    # Every run lasts --duration plus wrk's start and the CPU
                    # readings: the runs so far say how much.
                    per_run = spent / n if n else args.duration + 0.5
                    note(f"{s.label} c={c}: round {r + 1} of {args.rounds}, run {n + 1} of {total}, elapsed "
                         f"{fmt_secs(time.monotonic() - t0)}, about {fmt_secs(per_run * (total - n))} left")
                    t1 = time.monotonic()
                    res = run_wrk(s, c, args.duration, args.close)
                    spent += time.monotonic() - t1
                    n += 1
                    results.setdefault((s.key, c), []).append(res)
                    note(f"round {r + 1}: {s.label} c={c}: {res['rps']:.0f} req/s, "
                         f"p99 {fmt_p99(res['p99'])}, {res['cpu100k']:.3f} CPU s/100k req"
                         + (f", {res['errors']} errors" if res["errors"] else ""))
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    load_end = os.getloadavg()
    med = {}
    for key, runs in results.items():
        med[key] = {k: statistics.median(r[k] for r in runs) for k in ("rps", "p99", "cpu100k")}
        med[key]["errors"] = sum(r["errors"] for r in runs)

    lines = []
    cmd = (f"python3 bench/http/run.py --duration {args.duration} --rounds {args.rounds} --conns {args.conns}"
           + (" --close" if args.close else "") + (" --write" if args.write else ""))
    wrk_h = ' -H "Connection: close"' if args.close else ""
    lines.append(f"`{cmd}` — `wrk{wrk_h} -t1 -c<conns> -d{args.duration}s --latency http://127.0.0.1:<port>/`, "
                 f"servers interleaved, median of {args.rounds} round(s). One-core rows: server pinned to CPU 0 "
                 "and wrk to CPU 1 with `taskset`. Two-core rows: \"shared\", nothing pinned (wrk shares both "
                 "CPUs with the server); \"wrk on CPU 1\", wrk restricted to CPU 1 with `taskset`, the server "
                 "free to use both. CPU = the server's utime + stime (/proc/<pid>/stat, its workers included) "
                 f"per 100,000 requests. Measured {started}; 1-minute load average {load_start[0]:.1f} at the "
                 f"start, {load_end[0]:.1f} at the end (other work on the machine shares the CPUs: compare ratios "
                 "within this table only).")
    lines.append("")
    lines.append("| server | cores | conns | requests/s | p99 latency | server CPU s / 100k req |")
    lines.append("|---|---|---|---|---|---|")
    for cores in (1, 2):
        for c in conns:
            for sv in servers:
                m = med.get((sv.key, c))
                if sv.cores != cores or not m:
                    continue
                err = f" ({m['errors']} errors)" if m["errors"] else ""
                lines.append(f"| {sv.label} | {cores} | {c} | {m['rps']:,.0f}{err} | "
                             f"{fmt_p99(m['p99'])} | {m['cpu100k']:.3f} |")

    def ratios(h, g, n, what, targets):
        parts = []
        if h and g:
            parts.append(f"httpd / Go = {h['rps'] / g['rps']:.2f}x requests/s (target >= {targets[0]}), "
                         f"CPU per request {h['cpu100k'] / g['cpu100k']:.2f}x Go's")
        if h and n:
            parts.append(f"httpd / nginx = {h['rps'] / n['rps']:.2f}x requests/s (target >= {targets[1]}), "
                         f"CPU per request {h['cpu100k'] / n['cpu100k']:.2f}x nginx's")
        if parts:
            lines.append("")
            lines.append(what + ": " + "; ".join(parts) + ".")

    ratios(med.get(("httpd-1", 75)), med.get(("go-1", 75)), med.get(("nginx-1", 75)),
           "One core, 75 connections", ("1.2", "1.0"))
    for tag, place in (("", "shared"), ("-w1", "wrk on CPU 1")):
        for c in conns:
            for mode, key in (("distribute", "httpd-2d"), ("reuseport", "httpd-2r"),
                              ("distribute, uring", "httpd-2du"), ("reuseport, uring", "httpd-2ru")):
                ratios(med.get((key + tag, c)), med.get(("go-2" + tag, c)), med.get(("nginx-2" + tag, c)),
                       f"Two cores ({place}), {c} connections, 2 loops {mode}", ("1.5", "1.0"))

    # How evenly the two accept modes spread connections: a fresh httpd per
    # mode and connection count, one short wrk run, the per-loop counts it
    # prints when it stops.
    balance = {}  # (mode, conns) -> max/min connections per loop
    if two_cpus and (not args.only or "balance" in args.only.split(",")):
        lines.append("")
        lines.append("Connections per loop (httpd --loops 2, a fresh server per cell, one 2 s wrk run; "
                     "wrk opens each connection once):")
        lines.append("")
        lines.append("| accept | " + " | ".join(f"{c} conns" for c in conns) + " |")
        lines.append("|---|" + "---|" * len(conns))
        note(f"connection balance: {2 * len(conns)} fresh servers, one 2 s wrk run each")
        for mode in ("distribute", "reuseport"):
            cells = []
            for c in conns:
                counts = balance_probe(httpd, mode, c)
                spread = (max(counts) / min(counts)) if counts and min(counts) > 0 else float("inf")
                if counts:
                    balance[(mode, c)] = spread
                cells.append(" / ".join(str(x) for x in counts) + f" (max/min {spread:.2f})")
                note(f"balance {mode} c={c}: {counts}")
            lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(f"## HTTP: httpd against Go net/http and nginx, wrk -c{args.conns}, {args.duration} s runs, "
          f"median of {args.rounds} round(s)\n")
    print(table)
    print("\nLoad average (1 / 5 / 15 min): " + " / ".join(f"{x:.1f}" for x in load_start) + " at the start, "
          + " / ".join(f"{x:.1f}" for x in load_end) + " at the end.")
    for (key, c), runs in results.items():
        vals = [x["rps"] for x in runs]
        if len(vals) >= 2 and min(vals) > 0 and max(vals) / min(vals) - 1 > SPREAD_WARN:
            label = next((sv.label for sv in servers if sv.key == key), key)
            print(f"warning: {label} c={c}: requests/s spread {max(vals) / min(vals) - 1:.0%} over the rounds "
                  f"({min(vals):,.0f} to {max(vals):,.0f}); the machine was probably busy, compare with care")
    print()
    if args.close:
        print("(--close: a connection per request, part of no target: no verdict)")
    else:
        print(verdict(results, balance))
    if args.quick:
        print("(--quick: one 2 s round, a smoke test; these figures are no verdict)")

    if args.write:
        path = os.path.join(ROOT, "docs", "PERFORMANCE.md")
        with open(path) as f:
            doc = f.read()
        block = f"<!-- BEGIN http -->\n{table}\n<!-- END http -->"
        if "<!-- BEGIN http -->" in doc and "<!-- END http -->" in doc:
            doc = re.sub(r"<!-- BEGIN http -->.*?<!-- END http -->", lambda _: block, doc, flags=re.S)
        else:
            doc = doc.rstrip("\n") + "\n\n## http\n\n" + HTTP_INTRO + "\n\n" + block + "\n"
        with open(path, "w") as f:
            f.write(doc)
        note("wrote", path)


def fmt_secs(s):
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s"


def verdict(results, balance):
    """The closing verdict: each target of HTTP_TARGETS that was measured."""
    lines = ["## Verdict against the targets (docs/PERFORMANCE.md's summary table, issue 12)", "",
             "| target | figure | measured | met |", "|---|---|---:|---|"]
    met = missed = 0
    for text, num, den, c, key, op, bound in HTTP_TARGETS:
        if num == "balance":
            v = balance.get((den, c))
            what = f"connections per loop, max/min {op} {bound:g}"
        else:
            a, b = results.get((num, c)), results.get((den, c))
            if not a or not b:
                continue
            ratios = [x[key] / y[key] for x, y in zip(a, b) if y[key]]
            v = statistics.median(ratios) if ratios else None
            what = f"{key} {num} / {den} {op} {bound:g}"
        if v is None:
            continue
        ok = v <= bound if op == "<=" else v >= bound
        met += ok
        missed += not ok
        lines.append(f"| {text} | {what} | {v:.2f} | {'yes' if ok else '**no**'} |")
    if met + missed == 0:
        return "No target covers the configurations that ran."
    lines.append("")
    lines.append(f"{met} of {met + missed} targets met, {missed} missed (targets of configurations that did not "
                 "run, such as a peer not installed, are left out).")
    return "\n".join(lines)


HTTP_INTRO = """\
examples/httpd (one treadle loop, one fiber per connection) against Go's net/http and nginx, all answering
`GET /` with "Hello, World!" over keep-alive connections, measured with wrk on the same 2-vCPU machine
(`bench/http/run.py`; peers in `bench/peers/go-http` and `bench/peers/nginx`). wrk competes with the server
for the two CPUs, so the server's CPU time per request is the steadier figure; where a server reaches what
one wrk thread can generate, requests/s ties and only CPU per request tells the servers apart."""

if __name__ == "__main__":
    main()
