#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One run of the hiredis workload (docs/BENCHMARKS.md) against a fresh
redis-server: start the server, run one client program, stop the server,
print the client's RESULT line.

    hiredis_driver.py hiredis --impl treadle-hook|pthreads|hiredis-libev --build DIR
                      [--fibers F] [--commands N] [--pin yes|no]

The clients (built by bench/CMakeLists.txt where libhiredis-dev is installed):

    treadle-hook   bench-hiredis-fibers   hiredis --fibers F  --commands N --port P
    pthreads       bench-hiredis-pthreads hiredis --threads F --commands N --port P
    hiredis-libev  bench-hiredis-libev    hiredis --conns F   --commands N --port P

The server: `redis-server --port P --bind 127.0.0.1 --save '' --appendonly no
--maxclients F+100 --tcp-backlog max(511, F+100)` on a free port, a new one
for every run.  With --pin yes (the default) and two CPUs or more, the
server is pinned to CPU 0 and the client to CPU 1 (taskset), as
bench/drivers/kv_driver.py does: every client gets one CPU of its own, whatever its
number of threads.  The RESULT line is the client's, with one key added:

    server_cpu_us_per_cmd   the server's CPU time (utime+stime, /proc/PID/stat)
                            over the client's whole run, setup included, per command

A missing redis-server or client program is an exit status of 77 with a note.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")

CLIENTS = {
    "treadle-hook": ("bench-hiredis-fibers", "--fibers"),
    "pthreads": ("bench-hiredis-pthreads", "--threads"),
    "hiredis-libev": ("bench-hiredis-libev", "--conns"),
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def find_binary(build, name):
    for cand in (os.path.join(build, "bench", name), os.path.join(build, name)):
        if os.access(cand, os.X_OK):
            return cand
    for dirpath, dirnames, filenames in os.walk(build):
        dirnames[:] = [d for d in dirnames if d != "CMakeFiles"]
        if name in filenames and os.access(os.path.join(dirpath, name), os.X_OK):
            return os.path.join(dirpath, name)
    return None


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def wait_listening(port, proc):
    for _ in range(500):
        if proc.poll() is not None:
            sys.exit(f"hiredis_driver: redis-server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.01)
    sys.exit("hiredis_driver: redis-server never listened")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["hiredis"])
    ap.add_argument("--impl", choices=sorted(CLIENTS), required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--fibers", type=int, default=1000)
    ap.add_argument("--commands", type=int, default=1000000)
    ap.add_argument("--pin", choices=["yes", "no"], default="yes")
    o = ap.parse_args()

    name, count_opt = CLIENTS[o.impl]
    client = find_binary(o.build, name)
    server = shutil.which("redis-server")
    if not client or not server:
        print(f"hiredis_driver: {name + ' (needs libhiredis-dev at configure time)' if not client else 'redis-server'} "
              f"not found (Debian: libhiredis-dev, redis-server)")
        return 77
    ncpu = os.cpu_count() or 1
    pin = o.pin == "yes" and ncpu >= 2
    pin_server, pin_client = (["taskset", "-c", "0"], ["taskset", "-c", "1"]) if pin else ([], [])

    port = free_port()
    clients = o.fibers + 100
    srv = subprocess.Popen(pin_server + [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no", "--maxclients", str(clients),
                                         "--tcp-backlog", str(max(511, clients)), "--loglevel", "warning"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, srv)
        cpu0 = cpu_seconds(srv.pid)
        p = subprocess.run(pin_client + [client, "hiredis", count_opt, str(o.fibers), "--commands",
                                         str(o.commands), "--port", str(port)],
                           capture_output=True, text=True, timeout=3600)
        cpu1 = cpu_seconds(srv.pid)
        sys.stderr.write(p.stderr)
        lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if p.returncode != 0 or len(lines) != 1:
            print(f"hiredis_driver: {name} exited with {p.returncode}: {p.stdout.strip()[-400:]}", file=sys.stderr)
            return p.returncode or 1
        line = lines[0]
        commands = next((int(t.split("=", 1)[1]) for t in line.split() if t.startswith("commands=")), 0)
        if commands > 0:
            head, sep, tail = line.partition(" wall_s=")
            line = f"{head} server_cpu_us_per_cmd={(cpu1 - cpu0) * 1e6 / commands:.3f} pinned={'yes' if pin else 'no'}" \
                   f"{sep}{tail}"
        print(line)
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
