#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One run of the tls-bulk workload's peer (docs/BENCHMARKS.md, "HTTPS"):
`openssl s_server` sends B bytes to `openssl s_client` over one TLS 1.3
connection on loopback; print one RESULT line with the CPU time both
processes spent.

    tls_bulk_driver.py tls-bulk --build DIR [--bytes B]

treadle's side is `treadle-bench tls-bulk` (bench/workloads/bench_tls_bulk.c):
two loops of one process.  Here each end is a process of its own, pinned as
treadle's loops are: `s_server -quiet -naccept 1 -tls1_3` on CPU 0 with a
P-256 certificate made for the run, its stdin a pipe from `head -c B
/dev/zero` (s_server reads it in reads of up to 16 KiB and writes each as one
record), and `s_client -quiet -tls1_3` on CPU 1 with its stdout on /dev/null
(it reads records into a 16 KiB buffer and writes them there).  s_server
sends close_notify when its stdin ends; both exit.  Neither sets a cipher:
both take OpenSSL's default TLS 1.3 order.

CPU time is the rusage of the two openssl processes only (wait4): `head`
is not counted, s_server's read(2) calls on the pipe and s_client's writes
to /dev/null are (treadle's ends make neither).  The bytes are checked:
s_client's write count (/proc/PID/io wchar, read before it is reaped), less
its stderr, must be B plus at most its side of the handshake.  Wall time
runs from the feeder's start (once the handshake is over) to the exit of
both.  The RESULT line:

    cpu_s_per_gib           user+sys of both processes over B in GiB
    mb_per_s                B over the wall time, 10^6 bytes per second
    server_cpu_s, client_cpu_s   each process's user+sys

A missing `openssl` or `taskset` command is an exit status of 77 with a note.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # importing a sibling driver leaves nothing in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_driver import free_port, make_cert  # noqa: E402

HANDSHAKE = 4096  # at most what s_client writes to the socket for the handshake


def listening(port):
    """Whether a socket listens on 127.0.0.1:port: /proc/net/tcp, so that no
    probe connection takes s_server's one accept."""
    want = f"0100007F:{port:04X}"
    try:
        with open("/proc/net/tcp") as f:
            return any(l.split()[1] == want and l.split()[3] == "0A" for l in f.readlines()[1:])
    except OSError:
        return False


def settled(cli_err):
    """Wait until s_client has verified the certificate (its notes on stderr)
    and a little longer, for the handshake's last flight.  s_server runs the
    handshake lazily inside its select loop: when data is waiting on stdin
    before the client's Finished has been read, an SSL_write can consume the
    Finished that select had announced, and the SSL_read that follows blocks
    for good; -nbio avoids that, but spins on every full socket buffer."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and b"verify return" not in open(cli_err.name, "rb").read():
        time.sleep(0.01)
    time.sleep(0.2)


def reap(pid):
    """(bytes the process wrote, user+sys seconds), waiting for its exit."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    wchar = 0
    try:
        with open(f"/proc/{pid}/io") as f:
            wchar = int(next(l for l in f if l.startswith("wchar:")).split()[1])
    except (OSError, StopIteration, ValueError):
        pass
    _, status, ru = os.wait4(pid, 0)
    return wchar, ru.ru_utime + ru.ru_stime, os.waitstatus_to_exitcode(status)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload", choices=["tls-bulk"])
    ap.add_argument("--build", default="build", help="unused: the peer is the openssl command")
    ap.add_argument("--bytes", type=int, default=1 << 30, help="bytes B (default 1 GiB)")
    o = ap.parse_args()
    if o.bytes < 1:
        ap.error("--bytes must be positive")
    for tool in ("openssl", "taskset"):
        if not shutil.which(tool):
            print(f"tls_bulk_driver: the {tool} command is not installed")
            return 77
    pin = (os.cpu_count() or 1) >= 2

    def pinned(cpu, argv):
        return ["taskset", "-c", str(cpu)] + argv if pin else argv

    with tempfile.TemporaryDirectory(prefix="treadle-tls-bulk-") as tmp:
        cert, key = make_cert(tmp)
        port = free_port()
        err = open(os.path.join(tmp, "stderr"), "w+")
        cli_err = open(os.path.join(tmp, "client-stderr"), "w+")
        # s_server's stdin stays empty until the handshake is over (see
        # settled()): the feeder writes into the pipe only then.
        pipe_r, pipe_w = os.pipe()
        srv = subprocess.Popen(pinned(0, ["openssl", "s_server", "-quiet", "-naccept", "1", "-tls1_3",
                                          "-accept", f"127.0.0.1:{port}", "-cert", cert, "-key", key]),
                               stdin=pipe_r, stdout=subprocess.DEVNULL, stderr=err)
        os.close(pipe_r)
        deadline = time.monotonic() + 10
        while not listening(port) and srv.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if not listening(port):
            srv.kill()
            srv.wait()
            os.close(pipe_w)
            err.seek(0)
            print(f"tls_bulk_driver: s_server did not listen: {err.read().strip()[-300:]}", file=sys.stderr)
            return 1
        cli = subprocess.Popen(pinned(1, ["openssl", "s_client", "-quiet", "-tls1_3", "-connect",
                                          f"127.0.0.1:{port}"]),
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=cli_err)
        settled(cli_err)
        t0 = time.monotonic()
        feeder = subprocess.Popen(["head", "-c", str(o.bytes), "/dev/zero"], stdout=pipe_w)
        os.close(pipe_w)
        # A run that hangs all the same is killed, so that it fails instead.
        guard = threading.Timer(30 + o.bytes / 20e6, lambda: [p.kill() for p in (cli, srv, feeder)])
        guard.start()
        got, client_cpu, client_rc = reap(cli.pid)
        # wchar counts every write: its notes on stderr, and its side of the
        # handshake on the socket (a few hundred bytes).
        got -= os.fstat(cli_err.fileno()).st_size
        _, server_cpu, server_rc = reap(srv.pid)
        wall = time.monotonic() - t0
        cli.returncode, srv.returncode = client_rc, server_rc  # reaped here, not by Popen
        feeder.wait()
        guard.cancel()
        err.seek(0)
        cli_err.seek(0)
        stderr = err.read() + cli_err.read()
    if not o.bytes <= got <= o.bytes + HANDSHAKE or client_rc or server_rc:
        print(f"tls_bulk_driver: FAILED: s_client wrote {got} of {o.bytes} bytes (exit {client_rc}), s_server "
              f"exit {server_rc}: {stderr.strip()[-300:]}", file=sys.stderr)
        return 1
    gib = o.bytes / (1 << 30)
    print(f"RESULT impl=openssl bench=tls-bulk bytes={o.bytes} cpu_s_per_gib={(server_cpu + client_cpu) / gib:.3f} "
          f"mb_per_s={o.bytes / 1e6 / wall:.1f} server_cpu_s={server_cpu:.3f} client_cpu_s={client_cpu:.3f} "
          f"wall_s={wall:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
