#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One run of the kv workload (docs/BENCHMARKS.md style): a Redis-protocol
server on one CPU, redis-benchmark on the other, one RESULT line.

    kv_driver.py kv --server kv|redis-server --build DIR
                    [--clients C] [--pipeline P] [--requests N] [--tests set,get] [--tls]

The server is started here, pinned to CPU 0 (taskset), redis-benchmark pinned
to CPU 1.  Over the benchmark's run only, the server's own counters are read
from /proc: CPU time (utime+stime of every thread) and read-family system
calls (`syscr` of /proc/PID/io; both servers read sockets with read(2), which
is what syscr counts).  The RESULT line has

    rps               requests per second, all tests together (total / sum of times)
    cpu_us_per_req    server CPU microseconds per request
    reads_per_req     server read() calls per request
    requests          requests sent

--tls: the same over TLS, with a self-signed P-256 certificate made for the
run (the openssl command): kv with --tls-cert/--tls-key, redis-server with
its TLS port only (--port 0 --tls-port, clients not asked for certificates),
and redis-benchmark --tls --cacert, which makes each client's handshake
(TLS 1.3) before its first request and keeps its connection.

A missing redis-server, redis-benchmark or openssl, or a redis-benchmark
without --tls, is an exit status of 77 with a note.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # importing a sibling driver leaves nothing in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_driver import free_port, make_cert  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def find_kv(build):
    for dirpath, dirnames, filenames in os.walk(build):
        dirnames[:] = [d for d in dirnames if d != "CMakeFiles"]
        if "kv" in filenames and os.access(os.path.join(dirpath, "kv"), os.X_OK):
            return os.path.join(dirpath, "kv")
    return None


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def reads(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("syscr:"):
                return int(line.split()[1])
    return 0


def wait_listening(port, proc):
    for _ in range(500):
        if proc.poll() is not None:
            sys.exit(f"kv_driver: the server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.01)
    sys.exit("kv_driver: the server never listened")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["kv"])
    ap.add_argument("--server", choices=["kv", "redis-server"], required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--pipeline", type=int, default=1)
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--tests", default="set,get")
    ap.add_argument("--tls", action="store_true", help="over TLS: a certificate made for the run")
    o = ap.parse_args()

    bench = shutil.which("redis-benchmark")
    if o.server == "kv":
        server = find_kv(o.build)
    else:
        server = shutil.which("redis-server")
    if not bench or not server:
        print(f"kv_driver: {'redis-benchmark' if not bench else o.server} not found "
              "(Debian: redis-tools, redis-server)")
        return 77
    if o.tls:
        if not shutil.which("openssl"):
            print("kv_driver: --tls needs the openssl command (Debian: openssl)")
            return 77
        h = subprocess.run([bench, "--help"], capture_output=True, text=True)
        if "--tls" not in h.stdout + h.stderr:
            print("kv_driver: this redis-benchmark was built without TLS")
            return 77
    with tempfile.TemporaryDirectory() as tmp:
        return run(o, bench, server, make_cert(tmp) if o.tls else None)


def run(o, bench, server, cert):
    ncpu = os.cpu_count() or 1
    pin_server, pin_client = (["taskset", "-c", "0"], ["taskset", "-c", "1"]) if ncpu >= 2 else ([], [])

    port = free_port()
    if o.server == "kv":
        cmd = [server, "--listen", f"127.0.0.1:{port}"]
        if cert:
            cmd += ["--tls-cert", cert[0], "--tls-key", cert[1]]
    else:
        cmd = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--maxclients", "10000", "--loglevel", "warning"]
        if cert:
            cmd[1:3] = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", cert[0], "--tls-key-file", cert[1],
                        "--tls-ca-cert-file", cert[0], "--tls-auth-clients", "no"]
    tls_args = ["--tls", "--cacert", cert[0]] if cert else []
    srv = subprocess.Popen(pin_server + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, srv)
        cpu0, rd0 = cpu_seconds(srv.pid), reads(srv.pid)
        p = subprocess.run(pin_client + [bench, "-h", "127.0.0.1", "-p", str(port), "-c", str(o.clients),
                                         "-P", str(o.pipeline), "-n", str(o.requests), "-t", o.tests,
                                         "-r", "100000", "--csv", *tls_args],
                           capture_output=True, text=True, timeout=600)
        cpu1, rd1 = cpu_seconds(srv.pid), reads(srv.pid)
        if p.returncode != 0:
            print(p.stderr.strip()[-400:], file=sys.stderr)
            return 1
        times, total = 0.0, 0
        for line in p.stdout.splitlines():
            cols = [c.strip('"') for c in line.split(",")]
            if len(cols) < 2 or cols[0] == "test":
                continue
            times += o.requests / float(cols[1])
            total += o.requests
        if total == 0:
            print("kv_driver: no results from redis-benchmark:", p.stdout[-400:], file=sys.stderr)
            return 1
        print(f"RESULT workload=kv server={o.server} tls={int(bool(cert))} clients={o.clients} pipeline={o.pipeline} "
              f"requests={total} rps={total / times:.0f} "
              f"cpu_us_per_req={(cpu1 - cpu0) * 1e6 / total:.3f} reads_per_req={(rd1 - rd0) / total:.4f}")
        return 0
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()


if __name__ == "__main__":
    sys.exit(main())
