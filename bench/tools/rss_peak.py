#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Does httpd's memory go back after a peak?  Drives examples/httpd through a
peak of many connections (each makes a request, then all stay open at once),
closes them all, lets the server idle, and samples its RSS all along.

    bench/tools/rss_peak.py [--httpd build/release/examples/httpd/httpd] [--conns 20000]
                      [--clients 4] [--idle 30] [--loops N] [--every 0.5]

Prints the curve (seconds, phase, VmRSS in KiB), then one summary line:

    RESULT start_kb=... peak_kb=... end_kb=... end_over_start=... target=3.0 ok=yes|no

The fd limit (20,000 per process here, hard) counts the client's sockets
too, so the clients are separate processes (--clients), each holding its
share; the script raises every soft limit to the hard one.  The server
holds at most its connection cap at once (tdl_conns_fd_room: 7/8 of its
limit): beyond it, connections idle after their answer are closed to make
room, which the clients count ("closed by the server").  A memory check,
not a timing benchmark: the figures do not depend on the machine's load.
"""
import argparse
import os
import re
import resource
import socket
import subprocess
import sys
import threading
import time


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def vmrss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def smaps_top(pid, n=12):
    maps, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            w = line.split()
            if w and not w[0].endswith(":"):
                cur = [0, line.strip()[:100]]
                maps.append(cur)
            elif w and w[0] == "Rss:":
                cur[0] = int(w[1])
    print(f"# largest resident mappings at the end (kB of {sum(m[0] for m in maps)}):")
    for kb, name in sorted(maps, reverse=True)[:n]:
        print(f"#   {kb:6d}  {name}")


def client(port, n):
    """One client process: n connections, a request on each, all held open
    until a line comes on stdin; reports on stdout."""
    raise_nofile()
    socks, served, closed = [], 0, 0
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
        except OSError as e:
            print(f"connect failed: {e}", flush=True)
            break
        socks.append(s)
    req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    for s in socks:
        try:
            s.sendall(req)
            data = b""
            while not data.endswith(b"Hello, World!"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            if data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"Hello, World!"):
                served += 1
            else:
                closed += 1
        except OSError:
            closed += 1
    print(f"ready {len(socks)} {served} {closed}", flush=True)
    sys.stdin.readline()
    for s in socks:
        s.close()
    print("done", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--httpd", default="build/release/examples/httpd/httpd")
    ap.add_argument("--conns", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--idle", type=float, default=30.0, help="seconds to sample after the peak")
    ap.add_argument("--loops", type=int, default=0, help="httpd --loops (0: its default)")
    ap.add_argument("--every", type=float, default=0.5, help="sampling period, seconds")
    ap.add_argument("--target", type=float, default=3.0, help="end RSS over start RSS, at most")
    ap.add_argument("--smaps", action="store_true", help="at the end, list the server's largest resident mappings")
    ap.add_argument("--client", type=int, nargs=2, metavar=("PORT", "N"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.client:
        return client(*a.client)

    raise_nofile()
    cmd = [a.httpd, "--listen", "127.0.0.1:0"] + (["--loops", str(a.loops)] if a.loops else [])
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    line = srv.stderr.readline()
    m = re.search(r"\(port (\d+)\)", line)
    if not m:
        srv.kill()
        sys.exit(f"rss_peak: unexpected start line {line!r}")
    port = int(m.group(1))

    t0 = time.monotonic()
    samples = []  # (seconds, phase, kb)
    phase = ["start"]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            samples.append((time.monotonic() - t0, phase[0], vmrss_kb(srv.pid)))
            stop.wait(a.every)

    sampler = threading.Thread(target=sample)
    sampler.start()
    clients = []
    try:
        time.sleep(2.0)
        start_kb = min(kb for _, _, kb in samples)

        phase[0] = "peak"
        share = [a.conns // a.clients + (1 if i < a.conns % a.clients else 0) for i in range(a.clients)]
        for n in share:
            clients.append(subprocess.Popen([sys.executable, __file__, "--client", str(port), str(n)],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        opened = served = closed = 0
        for c in clients:
            words = c.stdout.readline().split()
            if not words or words[0] != "ready":
                sys.exit(f"rss_peak: a client said {words}")
            opened += int(words[1])
            served += int(words[2])
            closed += int(words[3])
        held = len(os.listdir(f"/proc/{srv.pid}/fd"))
        time.sleep(1.0)
        phase[0] = "closing"
        for c in clients:
            c.stdin.write("\n")
            c.stdin.flush()
        for c in clients:
            c.stdout.readline()
            c.wait(timeout=60)
        phase[0] = "idle"
        idle_from = time.monotonic()
        time.sleep(a.idle)
        stop.set()
        sampler.join()
        if a.smaps:
            smaps_top(srv.pid)
    finally:
        stop.set()
        for c in clients:
            if c.poll() is None:
                c.kill()
        srv.terminate()
        try:
            srv.wait(timeout=20)
        except subprocess.TimeoutExpired:
            srv.kill()

    peak_kb = max(kb for _, _, kb in samples)
    end_kb = samples[-1][2]
    print(f"# httpd {' '.join(cmd[1:])}: {opened} connections opened, {served} answered, "
          f"{closed} closed by the server to make room; server fds at the peak {held}")
    print("# seconds  phase    VmRSS_kB")
    for t, ph, kb in samples:
        print(f"{t:8.1f}  {ph:7s}  {kb:8d}")
    ratio = end_kb / start_kb if start_kb else float("inf")
    print(f"RESULT start_kb={start_kb} peak_kb={peak_kb} end_kb={end_kb} "
          f"idle_s={time.monotonic() - idle_from:.0f} end_over_start={ratio:.2f} target={a.target} "
          f"ok={'yes' if ratio <= a.target else 'no'}")
    return 0 if ratio <= a.target else 1


if __name__ == "__main__":
    sys.exit(main())
