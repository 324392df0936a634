#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One run of a pg workload (docs/BENCHMARKS.md) against a fresh PostgreSQL
cluster: make it (initdb) in a temporary directory, start the server,
run one client program, stop the server, remove the directory, print the
client's RESULT line.

    pg_driver.py pg      --impl treadle-hook|pthreads|pq-libev --build DIR
                         [--conns C] [--queries N] [--pin yes|no]
    pg_driver.py pg-idle --impl ... --build DIR [--conns C] [--seconds S] [--pin yes|no]

The clients (built by bench/CMakeLists.txt where libpq-dev is installed):

    treadle-hook   bench-pg-fibers   WORKLOAD --fibers C  ... --host DIR --port P --user treadle
    pthreads       bench-pg-pthreads WORKLOAD --threads C ... --host DIR --port P --user treadle
    pq-libev       bench-pg-libev    WORKLOAD --conns C   ... --host DIR --port P --user treadle

The cluster: `initdb -U treadle -A trust --no-sync` (no password), the
server listening on a Unix socket only, in the directory of its own (-k DIR,
listen_addresses ''), with nothing that would write or work in the
background (fsync, synchronous_commit, full_page_writes and autovacuum off),
max_connections C + 20 and shared_buffers 32MB (a thousand connections need
no more).  Run as root, initdb and the server run as `nobody` (PostgreSQL
refuses root).  The server and the client die with this script
(PR_SET_PDEATHSIG); the directory of a run whose script was killed is
removed by the next run (it names its script in owner.pid).  With
--pin yes (the default) and two CPUs or more, the server (the postmaster and
every backend it forks) is pinned to CPU 0 and the client to CPU 1
(taskset), as bench/drivers/hiredis_driver.py does.  The RESULT line is the
client's, with pinned=yes|no added.

A missing PostgreSQL or client program is an exit status of 77 with a note.
"""

import argparse
import ctypes
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CLIENTS = {
    "treadle-hook": ("bench-pg-fibers", "--fibers"),
    "pthreads": ("bench-pg-pthreads", "--threads"),
    "pq-libev": ("bench-pg-libev", "--conns"),
}
USER = "treadle"
PORT = 5432  # only names the socket file: the directory is the run's own
PR_SET_PDEATHSIG = 1


def find_binary(build, name):
    for cand in (os.path.join(build, "bench", name), os.path.join(build, name)):
        if os.access(cand, os.X_OK):
            return cand
    for dirpath, dirnames, filenames in os.walk(build):
        dirnames[:] = [d for d in dirnames if d != "CMakeFiles"]
        if name in filenames and os.access(os.path.join(dirpath, name), os.X_OK):
            return os.path.join(dirpath, name)
    return None


def find_postgres():
    """(postgres, initdb): Debian keeps them in /usr/lib/postgresql/N/bin (the
    newest N), other systems in $PATH; None when not installed."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2].split(".")[0]),
                  reverse=True)
    for d in dirs:
        pg, initdb = os.path.join(d, "postgres"), os.path.join(d, "initdb")
        if os.access(pg, os.X_OK) and os.access(initdb, os.X_OK):
            return pg, initdb
    pg, initdb = shutil.which("postgres"), shutil.which("initdb")
    return (pg, initdb) if pg and initdb else None


def server_user():
    """The uid and gid the server runs as: nobody's when run as root, else None."""
    if os.geteuid() != 0:
        return None
    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid


def child_setup(ids):
    """In the child before exec: drop root (ids), then die with this script
    (after setuid, which clears the death signal)."""
    def setup():
        if ids:
            os.setgroups([])
            os.setgid(ids[1])
            os.setuid(ids[0])
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return setup


def remove_orphans():
    """The directories of earlier runs whose script was killed (a timeout)."""
    for owner in glob.glob(os.path.join(tempfile.gettempdir(), "tdl-pgbench-*", "owner.pid")):
        try:
            with open(owner) as f:
                os.kill(int(f.read()), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.dirname(owner), ignore_errors=True)
        except (OSError, ValueError):
            pass


def wait_ready(data, proc, log):
    """Until postmaster.pid says the server is ready for connections."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with open(os.path.join(data, "postmaster.pid")) as f:
                lines = f.read().splitlines()
            if len(lines) >= 8 and lines[7].strip() == "ready":
                return
        except OSError:
            pass
        time.sleep(0.02)
    with open(log) as f:
        sys.stderr.write(f.read()[-2000:])
    sys.exit(f"pg_driver: the server {'exited' if proc.poll() is not None else 'was not ready within 60 s'} "
             "(its log is above)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["pg", "pg-idle"])
    ap.add_argument("--impl", choices=sorted(CLIENTS), required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--conns", type=int, default=100)
    ap.add_argument("--queries", type=int, default=200000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--pin", choices=["yes", "no"], default="yes")
    o = ap.parse_args()

    name, count_opt = CLIENTS[o.impl]
    client = find_binary(o.build, name)
    progs = find_postgres()
    if not client or not progs:
        print(f"pg_driver: {name + ' (needs libpq-dev at configure time)' if not client else 'PostgreSQL'} "
              f"not found (Debian: libpq-dev, postgresql)")
        return 77
    postgres, initdb = progs
    ncpu = os.cpu_count() or 1
    pin = o.pin == "yes" and ncpu >= 2
    pin_server, pin_client = (["taskset", "-c", "0"], ["taskset", "-c", "1"]) if pin else ([], [])
    ids = server_user()

    remove_orphans()
    top = tempfile.mkdtemp(prefix="tdl-pgbench-")
    srv = None
    try:
        with open(os.path.join(top, "owner.pid"), "w") as f:
            f.write(str(os.getpid()))
        if ids:
            os.chown(top, *ids)
        data, log = os.path.join(top, "data"), os.path.join(top, "server.log")
        env = {"LC_ALL": "C", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
        with open(log, "ab") as lf:
            p = subprocess.run([initdb, "-D", data, "-U", USER, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                               stdin=subprocess.DEVNULL, stdout=lf, stderr=lf, env=env, preexec_fn=child_setup(ids),
                               timeout=300)
        if p.returncode != 0:
            with open(log) as f:
                sys.stderr.write(f.read()[-2000:])
            print(f"pg_driver: initdb exited with {p.returncode} (its output is above)", file=sys.stderr)
            return 1
        settings = {"listen_addresses": "", "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                    "autovacuum": "off", "max_connections": str(o.conns + 20), "shared_buffers": "32MB",
                    "dynamic_shared_memory_type": "mmap", "jit": "off"}
        argv = pin_server + [postgres, "-D", data, "-k", top, "-p", str(PORT)]
        for k, v in settings.items():
            argv += ["-c", f"{k}={v}"]
        with open(log, "ab") as lf:
            srv = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=lf, env=env,
                                   preexec_fn=child_setup(ids))
        wait_ready(data, srv, log)

        size = ["--seconds", str(o.seconds)] if o.workload == "pg-idle" else ["--queries", str(o.queries)]
        p = subprocess.run(pin_client + [client, o.workload, count_opt, str(o.conns)] + size
                           + ["--host", top, "--port", str(PORT), "--user", USER],
                           capture_output=True, text=True, timeout=3600, preexec_fn=child_setup(None))
        sys.stderr.write(p.stderr)
        lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if p.returncode != 0 or len(lines) != 1:
            print(f"pg_driver: {name} exited with {p.returncode}: {p.stdout.strip()[-400:]}", file=sys.stderr)
            return p.returncode or 1
        head, sep, tail = lines[0].partition(" wall_s=")
        print(f"{head} pinned={'yes' if pin else 'no'}{sep}{tail}")
        return 0
    finally:
        if srv is not None:
            srv.send_signal(signal.SIGINT)  # a fast shutdown: the backends are ended
            try:
                srv.wait(timeout=30)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
