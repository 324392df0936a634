#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run treadle's benchmarks against its peers, interleaved, and report medians.

    python3 bench/run.py [--build DIR] [--quick] [--rounds R] [--only NAME,...]
                         [--duration S] [--conns C,...] [--write] [--baseline DIR] [--list]

Every group of docs/BENCHMARKS.md is a set of experiments (rows), each run
by every implementation of the group (columns).  Each experiment runs every
implementation once per round (A B C, then B C A, ...: rounds outermost, so
that a slow spell of a shared machine is spread over all implementations
instead of landing on one, and no implementation always runs first), reads
the RESULT line that every driver prints, and takes the median of each key
over the rounds.  Ratios are paired: the median over rounds of an
implementation's figure divided by the first column's figure of the same
round, because a machine drifts between rounds far more than within one.
"figure / treadle" above 1 means the peer spends more per unit of work (or,
for a rate such as msgs_per_s, that it is faster).

Without --quick: medians of --rounds rounds (3) at the sizes of
docs/PERFORMANCE.md, about fifty minutes on two CPUs (half of it the HTTP
groups).  With --quick: one round at smaller sizes, about three minutes,
printed as a quick look:
its figures show that everything runs and roughly where treadle stands; they
are no measurement, and --quick never writes the doc.

--only takes group names and implementation names: groups select groups,
implementations keep only those columns (of the selected groups, or of every
group that has them).  --duration and --conns are the HTTP groups' seconds
per wrk run and connection counts.  --baseline DIR adds, beside each group's
first treadle column (treadle-bench's, or a driver's treadle server), the same
workload from another build, in the same rounds: its ratio is the before/after
figure.

Before the first run it prints the runs it will make and the time they
should take (the sizes times docs/PERFORMANCE.md's figures: see cost());
progress (each run, round i of n, elapsed, estimate left) and each run's
figures go to stderr; stdout gets a table per group, the load average at the
start and the end with a warning for every figure whose rounds spread more
than 20%, the verdict against the targets (TARGETS), and the elapsed time.

--write rewrites docs/PERFORMANCE.md's section of each group that ran
(between <!-- BEGIN group --> and <!-- END group -->), and, when every group
ran, the machine table (<!-- BEGIN machine -->) and the verdict
(<!-- BEGIN verdict -->).  A missing peer is skipped with a note and a failed
run is reported; neither makes this script fail: benchmarks report numbers,
they never fail a build.

To add a workload, add its implementations to IMPLS (if new) and its rows to
EXPERIMENTS, with what a run costs; sizes go in SIZES and are written as
{name} in the arguments.
"""

import argparse
import datetime
import operator
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------
# The data table.
# ---------------------------------------------------------------------------

# Sizes substituted into experiment arguments: (full run, --quick run).
SIZES = {
    "messages": (1_000_000, 200_000),
    "timers": (1_000_000, 200_000),
    "hops": (10_000_000, 2_000_000),
    "spawns": (2_000, 300),
    "big_spawns": (100, 10),
    "fibers": (100_000, 20_000),
    "idle_readers": (9_000, 2_000),  # a pipe each: the fd limit (20,000 here and in CI) bounds them
    "xhops": (10_000_000, 2_000_000),
    "trips": (1_000_000, 20_000),
    "kv_requests": (300_000, 20_000),
    "calls": (200_000, 50_000),
    "reads": (1_000_000, 200_000),
    "file_mib": (256, 64),
    "opens": (200_000, 20_000),
    "open_files": (1_000, 1_000),
    "seconds": (3, 1),
    "hiredis_commands": (1_000_000, 50_000),
    "hiredis_fibers": (1_000, 200),
    "pg_queries": (500_000, 20_000),
    # pg idle: connections each waiting on a query, and the seconds counted
    "pg_idle_conns": (1_000, 100),
    "pg_idle_seconds": (10, 2),
    "echo_messages": (1_000_000, 100_000),
    "stream_seconds": (5, 1),
    "fiber_spawns": (1_000_000, 100_000),
    "skew_tasks": (20_000, 2_000),
    "skew_iters": (100_000, 100_000),
    # HTTP: seconds of each measured wrk run (--duration; a connection per
    # request needs longer than one second, which is a SYN's first
    # retransmission), of the warm-up before it, and of a balance probe.
    "http_seconds": (8, 1),
    "close_seconds": (8, 2),
    "http_warmup": (1, 0),
    # TLS: idle connections held open, for the RSS each costs.
    "idle_conns": (1_000, 200),
    "idle_conns_many": (10_000, 500),  # under the fd limit (20,000 here and in CI) of the driver, which holds the client ends
    "balance_seconds": (2, 1),
    # TLS: seconds of each openssl s_time run (new, then resumed), and the
    # bytes of the bulk transfer.
    "resume_seconds": (5, 1),
    "tls_bulk_bytes": (1 << 30, 64 << 20),
}
# The HTTP groups' connection counts (--conns): full run, --quick run.
CONNS = ([75, 1000], [75])

# Implementation label -> (driver binary found under the build directory, or
# a script of bench/drivers/ (SCRIPT prefix, handed --build); extra arguments
# after the experiment's; extra environment).  The label is what tables show.
IMPLS = {
    "treadle": ("treadle-bench", [], {}),
    "treadle-callback": ("treadle-bench", ["--style", "callback"], {}),
    "treadle-watch": ("treadle-bench", [], {}),  # pipes-watch passes --style watch to every column
    "treadle-fiber": ("treadle-bench", ["--style", "fiber"], {}),
    # pipes-fiber's callback column: treadle's callback style in the same rounds
    "treadle-callback-vs-fiber": ("treadle-bench", ["--style", "callback"], {}),
    "libev": ("bench-libev", [], {}),
    "libuv": ("bench-libuv", [], {}),
    "libevent": ("bench-libevent", [], {}),
    # bench/peers/build-peers.sh puts the Go and tokio peers in the build directory.
    "go": ("bench-go", [], {}),
    "go-1": ("bench-go", [], {"GOMAXPROCS": "1"}),
    "go-2": ("bench-go", [], {"GOMAXPROCS": "2"}),
    "tokio-ct": ("bench-tokio", ["--flavor", "current_thread"], {}),
    "tokio-mt": ("bench-tokio", ["--flavor", "multi_thread"], {}),
    # ... and the C and C++ fiber runtimes: State Threads, Boost.Fiber.
    "st": ("bench-st", [], {}),
    "boost-fiber": ("bench-boost-fiber", [], {}),
    "boost-fiber-buffered": ("bench-boost-fiber", ["--chan", "buffered"], {}),
    # idle: each stackful peer also at its smallest stack that runs the workload
    # (State Threads: a page; Boost.Fiber: 16 KiB, over its minimum_size of 13,504
    # bytes: 8 KiB overflows), and treadle compacting its idle fibers.
    "st-4k": ("bench-st", ["--stack", "4096"], {}),
    "boost-fiber-16k": ("bench-boost-fiber", ["--stack", "16384"], {}),
    "treadle-compact": ("treadle-bench", ["--compact-ms", "10"], {}),
    # ... and the Rust ones: may (stackful coroutines, one worker thread; at its
    # default stack of 32 KiB and at one page) and monoio (io_uring, stackless tasks).
    "may": ("bench-may", [], {}),
    "may-4k": ("bench-may", ["--stack", "4096"], {}),
    "monoio": ("bench-monoio", [], {}),
    "treadle-spin": ("treadle-bench", ["--spin", "100000"], {}),
    "floor": ("treadle-bench", ["--floor", "1"], {}),
    "floor-sleep": ("treadle-bench", ["--floor", "2"], {}),
    "treadle-2-loops": ("treadle-bench", ["--style", "callback", "--loops", "2"], {}),
    # skew: a group of one loop, and of two
    "treadle-skew-1": ("treadle-bench", ["--loops", "1"], {}),
    "treadle-skew-2": ("treadle-bench", ["--loops", "2"], {}),
    # spawn methods, all in treadle-bench
    "popen": ("treadle-bench", ["--method", "popen"], {}),
    "fork": ("treadle-bench", ["--method", "fork"], {}),
    "vfork": ("treadle-bench", ["--method", "vfork"], {}),
    "posix_spawn": ("treadle-bench", ["--method", "posix_spawn"], {}),
    # fs engines (tdl_fs_set_engine), and the plain pread loop, all in treadle-bench
    "treadle-fs-auto": ("treadle-bench", ["--engine", "auto"], {}),
    "treadle-fs-pool": ("treadle-bench", ["--engine", "pool"], {}),
    "treadle-fs-direct": ("treadle-bench", ["--engine", "direct"], {}),
    "treadle-fs-uring": ("treadle-bench", ["--engine", "uring"], {}),
    "pread": ("treadle-bench", ["--engine", "floor"], {}),
    # fsopen: the engine auto on each back end, every call on the pool, and one plain thread
    "treadle-fsopen-epoll": ("treadle-bench", ["--backend", "epoll"], {}),
    "treadle-fsopen-uring": ("treadle-bench", ["--backend", "uring"], {}),
    "treadle-fsopen-pool": ("treadle-bench", ["--engine", "pool"], {}),
    "threads": ("treadle-bench", ["--engine", "floor"], {}),
    # the pipes workload on the uring back end
    "treadle-callback-uring": ("treadle-bench", ["--style", "callback", "--backend", "uring"], {}),
    "treadle-fiber-uring": ("treadle-bench", ["--style", "fiber", "--backend", "uring"], {}),
    "treadle-ops-uring": ("treadle-bench", ["--style", "ops"], {}),
    # responsive: the blocking calls through the pool, or made in the fibers
    "treadle-pool": ("treadle-bench", ["--mode", "pool"], {}),
    "treadle-direct": ("treadle-bench", ["--mode", "direct"], {}),
    # kv: examples/kv or redis-server under redis-benchmark (drivers/kv_driver.py).
    "treadle-kv": ("script:kv_driver.py", ["--server", "kv"], {"TDL_BACKEND": "epoll"}),
    "treadle-kv-uring": ("script:kv_driver.py", ["--server", "kv"], {"TDL_BACKEND": "uring"}),
    "redis-server": ("script:kv_driver.py", ["--server", "redis-server"], {}),
    "treadle-kv-tls": ("script:kv_driver.py", ["--server", "kv", "--tls"], {"TDL_BACKEND": "epoll"}),
    "redis-server-tls": ("script:kv_driver.py", ["--server", "redis-server", "--tls"], {}),
    # hiredis: a fresh redis-server per run, then one client program (drivers/hiredis_driver.py).
    "treadle-hook": ("script:hiredis_driver.py", ["--impl", "treadle-hook"], {}),
    "pthreads": ("script:hiredis_driver.py", ["--impl", "pthreads"], {}),
    "hiredis-libev": ("script:hiredis_driver.py", ["--impl", "hiredis-libev"], {}),
    # pg: a fresh PostgreSQL cluster per run, then one client program (drivers/pg_driver.py);
    # -pg: the hiredis group's treadle-hook and pthreads are other programs.
    "treadle-hook-pg": ("script:pg_driver.py", ["--impl", "treadle-hook"], {}),
    "pthreads-pg": ("script:pg_driver.py", ["--impl", "pthreads"], {}),
    "pq-libev": ("script:pg_driver.py", ["--impl", "pq-libev"], {}),
    # echo: one echo server per run, treadle-bench's echo client against it (drivers/echo_driver.py).
    "treadle-uring": ("script:echo_driver.py", ["--server", "treadle-uring"], {}),
    "treadle-epoll": ("script:echo_driver.py", ["--server", "treadle-epoll"], {}),
    "treadle-uring-single": ("script:echo_driver.py", ["--server", "treadle-uring-single"], {}),
    "treadle-uring-sends": ("script:echo_driver.py", ["--server", "treadle-uring-sends"], {}),
    "go-1-server": ("script:echo_driver.py", ["--server", "go-1"], {}),
    "tokio-ct-server": ("script:echo_driver.py", ["--server", "tokio-ct"], {}),
    "st-server": ("script:echo_driver.py", ["--server", "st"], {}),
    "boost-fiber-server": ("script:echo_driver.py", ["--server", "boost-fiber"], {}),
    "may-server": ("script:echo_driver.py", ["--server", "may"], {}),
    "monoio-server": ("script:echo_driver.py", ["--server", "monoio"], {}),
    "floor-single": ("script:echo_driver.py", ["--server", "floor-single"], {}),
    "floor-multishot": ("script:echo_driver.py", ["--server", "floor-multishot"], {}),
}
SCRIPT = "script:"
# HTTP: one server per run, wrk against it (drivers/http_driver.py names them).
HTTP_ONE = ["httpd-1u", "httpd-1", "httpd-1us", "httpd-1un", "floor-1", "floor-1m", "floor-1mr", "go-1-http",
            "nginx-1", "st-1-http", "boost-fiber-1-http", "may-1-http", "monoio-1-http"]
HTTP_TWO = ["httpd-2du", "httpd-2ru", "httpd-2d", "httpd-2r", "httpd-2x1", "go-2-http", "nginx-2"]
HTTP_CLOSE = ["httpd-1u", "httpd-1", "floor-1", "floor-1as", "floor-1ae", "nginx-1"]
for _k in dict.fromkeys(HTTP_ONE + HTTP_TWO + HTTP_CLOSE):
    # go-1-http, go-2-http: the table's names (go-1 and go-2 are bench-go's);
    # the driver's are go-1, go-2.  Likewise st-1-http, boost-fiber-1-http,
    # may-1-http, monoio-1-http: the fiber runtimes' http-server (driver: st-1, ...).
    IMPLS[_k] = ("script:http_driver.py", ["--server", _k.replace("-http", "")], {})

# HTTPS (the tls group): the same servers and driver with --tls.
TLS_ONE = ["httpd-1-tls", "httpd-1u-tls", "go-1-https", "nginx-1-tls"]
for _k in TLS_ONE:
    IMPLS[_k] = ("script:http_driver.py", ["--server", _k.replace("-tls", "").replace("-https", ""), "--tls"], {})

# HTTPS on two cores (httpd --loops 2 against two nginx workers), and the
# bulk transfer: treadle-bench tls-bulk against openssl s_server + s_client.
TLS_TWO = ["httpd-2d-tls", "httpd-2du-tls", "nginx-2-tls"]
for _k in TLS_TWO:
    IMPLS[_k] = ("script:http_driver.py", ["--server", _k.replace("-tls", ""), "--tls"], {})
IMPLS["treadle-tls-bulk"] = ("treadle-bench", [], {})
IMPLS["openssl-pair"] = ("script:tls_bulk_driver.py", [], {})

FIBER_PEERS = ["go-1", "go", "tokio-ct", "tokio-mt"]
C_PEERS = ["libev", "libuv", "libevent"]


def cost(units, per_unit, fixed=0.05, **by_impl):
    """What one run takes, in seconds: `fixed` plus SIZES[units] times the
    seconds per unit, `per_unit` or an implementation's own (by_impl, with _
    for -).  The figures are wall times per unit from docs/PERFORMANCE.md's
    tables, rounded up; they give the expected time, nothing else."""
    by = {k.replace("_", "-"): v for k, v in by_impl.items()}
    return lambda impl, s: fixed + (s[units] if units else 1) * by.get(impl, per_unit)


def experiment(group, label, bench, args, impls, keys, est, also_vs=()):
    """One row of the tables: `impls[0]` is the baseline of the ratios;
    also_vs adds, under each key's row, the ratios to another column."""
    return {"group": group, "label": label, "bench": bench, "args": args.split(), "impls": impls, "keys": keys,
            "est": est, "also_vs": list(also_vs)}


US = 1e-6
EXPERIMENTS = []
for _p, _d in [(100, 0), (1000, 0), (9000, 0), (1000, 1000), (9000, 1000)]:
    _slow = 1.8 if (_p == 9000 or _d) else 1.2
    EXPERIMENTS.append(experiment(
        "pipes-callback", f"P={_p} D={_d}", "pipes",
        f"--pipes {_p} --messages {{messages}} --delay-us {_d}",
        ["treadle-callback"] + C_PEERS, ["cpu_us_per_msg"],
        cost("messages", _slow * US, 0.1 + _p / 30000,
             libev=(4.0 if _d else _slow) * US, libuv=(5.5 if _d else _slow) * US,
             libevent=(4.5 if _d else _slow) * US)))
EXPERIMENTS.append(experiment(
    "pipes-watch", "P=1000 D=0", "pipes", "--pipes 1000 --messages {messages} --delay-us 0 --style watch",
    ["treadle-watch"] + C_PEERS, ["cpu_us_per_msg"],
    cost("messages", 3.7 * US, 0.1, treadle_watch=1.3 * US, libuv=5.3 * US)))
EXPERIMENTS.append(experiment(
    "timers", "add_cancel N={timers}", "timers", "--timers {timers} --mode add_cancel",
    ["treadle"] + C_PEERS, ["ns_per_add", "ns_per_cancel"],
    cost("timers", 0.3 * US, 0.1, libuv=0.8 * US, libevent=0.6 * US)))
EXPERIMENTS.append(experiment(
    "timers", "fire N={timers}", "timers", "--timers {timers} --mode fire",
    ["treadle"] + C_PEERS, ["ns_per_timer", "cpu_ns_per_timer"],
    cost("timers", 0.6 * US, 0.3, libuv=1.7 * US, libevent=2.3 * US)))
# State Threads and monoio have no channel: they are in the wake row only.
for _via in ["wake", "chan"]:
    EXPERIMENTS.append(experiment(
        "ring", f"via {_via}, 503 fibers, T={{hops}}", "ring", f"--threads 503 --hops {{hops}} --via {_via}",
        ["treadle"] + FIBER_PEERS + (["st"] if _via == "wake" else []) + ["boost-fiber", "may"]
        + (["monoio"] if _via == "wake" else []),
        ["ns_per_hop", "cpu_ns_per_hop"],
        cost("hops", 0.19 * US, 0.05, treadle=0.03 * US, tokio_ct=0.12 * US, tokio_mt=0.23 * US, st=0.03 * US,
             boost_fiber=0.25 * US, may=0.2 * US, monoio=0.2 * US)))
EXPERIMENTS.append(experiment(
    "chan", "ping-pong T={hops}", "chan", "--hops {hops}",
    ["treadle"] + FIBER_PEERS + ["st", "boost-fiber", "boost-fiber-buffered", "may"], ["ns_per_hop", "cpu_ns_per_hop"],
    cost("hops", 0.19 * US, 0.05, treadle=0.03 * US, tokio_ct=0.1 * US, st=0.03 * US, boost_fiber=0.12 * US,
         boost_fiber_buffered=0.17 * US, may=0.35 * US)))
EXPERIMENTS.append(experiment(
    "idle", "F={fibers}", "idle", "--fibers {fibers}",
    ["treadle"] + FIBER_PEERS + ["st", "boost-fiber", "may"], ["bytes_per_fiber"],
    cost("fibers", 3 * US, 0.3, st=5 * US, boost_fiber=15 * US, may=40 * US)))
# Compacting idle fibers (tdl_fiber_compact_idle): each park with and without
# it; wake_ns is a timing (the wake-up of a compacted fiber against a resident
# one), bytes_per_fiber is not.
for _park, _n in [("park", "fibers"), ("read", "idle_readers"), ("chan", "fibers")]:
    for _ms in (0, 10):
        EXPERIMENTS.append(experiment(
            "idle", "%s F={%s}%s" % (_park, _n, " compact %d ms" % _ms if _ms else ""), "idle",
            "--fibers {%s} --park %s --compact-ms %d" % (_n, _park, _ms),
            ["treadle"], ["bytes_per_fiber", "copy_bytes", "wake_ns"], cost(_n, 15 * US, 0.1 + _ms * 0.004)))
# Parked in a read, against the stackful peers, each at its default stack and
# its smallest; treadle as it comes and compacted.
EXPERIMENTS.append(experiment(
    "idle", "read F={idle_readers}, peers", "idle", "--fibers {idle_readers} --park read",
    ["treadle", "treadle-compact", "st", "st-4k", "boost-fiber", "boost-fiber-16k", "may", "may-4k", "monoio"],
    ["bytes_per_fiber"], cost("idle_readers", 20 * US, 0.15, may=40 * US, may_4k=40 * US)))
for _p, _d in [(100, 0), (1000, 0), (9000, 0), (1000, 1000), (9000, 1000)]:
    EXPERIMENTS.append(experiment(
        "pipes-fiber", f"P={_p} D={_d}", "pipes",
        f"--pipes {_p} --messages {{messages}} --delay-us {_d}",
        ["treadle-fiber", "treadle-callback-vs-fiber"] + FIBER_PEERS, ["cpu_us_per_msg"],
        cost("messages", (2.0 if _d else 1.4) * US, 0.1 + _p / 20000)))
EXPERIMENTS.append(experiment(
    "loops", "xchan T={xhops}", "xchan", "--hops {xhops}",
    ["treadle", "go-2", "tokio-mt"], ["msgs_per_s", "cpu_ns_per_msg", "wakeups_per_msg"],
    cost("xhops", 0.08 * US, 0.05, treadle=0.06 * US, tokio_mt=0.17 * US)))
EXPERIMENTS.append(experiment(
    "loops", "pipes P=1000 D=0", "pipes", "--pipes 1000 --messages {messages} --delay-us 0",
    ["treadle-callback", "treadle-2-loops"], ["msgs_per_s", "cpu_us_per_msg"],
    cost("messages", 1.1 * US, 0.1, treadle_2_loops=0.6 * US)))
EXPERIMENTS.append(experiment(
    "loops", "xping T={trips}", "xping", "--hops {trips}",
    ["treadle", "treadle-spin", "go-2", "floor", "floor-sleep"], ["ns_per_round_trip", "cpu_ns_per_round_trip"],
    cost("trips", 0.7 * US, 0.05, treadle=65 * US, treadle_spin=2.4 * US, floor_sleep=30 * US)))
EXPERIMENTS.append(experiment(
    "spawn", "small parent, K={spawns}", "spawn", "--count {spawns}",
    ["treadle", "posix_spawn", "vfork", "fork", "popen"], ["spawns_per_s", "cpu_us_per_spawn"],
    cost("spawns", 600 * US, 0.05, popen=1200 * US)))
EXPERIMENTS.append(experiment(
    "spawn", "2 GiB parent, K={big_spawns}", "spawn", "--count {big_spawns} --parent-mib 2048",
    ["treadle", "posix_spawn", "vfork", "fork"], ["spawns_per_s", "cpu_us_per_spawn"],
    cost("big_spawns", 600 * US, 3.0, fork=0.1)))
EXPERIMENTS.append(experiment(
    "spawn", "fibers: N={fiber_spawns}, B=1000", "fiber-spawn", "--fibers {fiber_spawns} --batch 1000",
    ["treadle", "st", "boost-fiber", "may", "monoio"], ["fibers_per_s", "cpu_ns_per_fiber"],
    cost("fiber_spawns", 0.4 * US, 0.05, boost_fiber=7 * US, may=2 * US)))
EXPERIMENTS.append(experiment(
    "blocking", "F=64 N={calls}", "blocking", "--calls {calls} --fibers 64",
    ["treadle", "libuv", "tokio-mt", "tokio-ct"], ["us_per_call", "cpu_us_per_call"],
    cost("calls", 0.8 * US, 0.1, tokio_mt=8 * US, tokio_ct=8 * US)))
# {build} is the build directory: every implementation reads the same file there.
EXPERIMENTS.append(experiment(
    "fs", "C=64 S={file_mib} MiB N={reads}", "fs", "--reads {reads} --fibers 64 --file-mib {file_mib} --dir {build}",
    ["treadle-fs-auto", "treadle-fs-pool", "treadle-fs-direct", "treadle-fs-uring", "go", "libuv", "pread"],
    ["cpu_us_per_read", "reads_per_s", "us_per_read", "pool", "ring", "nowait_miss"],
    cost("reads", 1.2 * US, 0.3, treadle_fs_pool=2.0 * US)))
EXPERIMENTS.append(experiment(
    "fsopen", "C=64 F={open_files} N={opens}", "fsopen",
    "--opens {opens} --fibers 64 --files {open_files} --dir {build}",
    ["treadle-fsopen-uring", "treadle-fsopen-epoll", "treadle-fsopen-pool", "go", "threads"],
    ["opens_per_s", "cpu_us_per_open", "us_per_open", "pool", "ring"],
    cost("opens", 8 * US, 0.3, treadle_fsopen_pool=16 * US)))
EXPERIMENTS.append(experiment(
    "responsive", "F=64 call=10 ms S={seconds} s", "responsive", "--fibers 64 --call-ms 10 --seconds {seconds}",
    ["treadle-pool", "treadle-direct"],
    ["lateness_p50_us", "lateness_p99_us", "lateness_p999_us", "lateness_max_us", "ticks", "calls_done"],
    cost("seconds", 1.0, 0.7)))
for _c, _pl in [(50, 1), (50, 16), (1000, 1)]:
    EXPERIMENTS.append(experiment(
        "kv", f"-c{_c} -P{_pl}", "kv", f"--clients {_c} --pipeline {_pl} --requests {{kv_requests}}",
        ["treadle-kv", "treadle-kv-uring", "redis-server"], ["rps", "cpu_us_per_req", "reads_per_req"],
        # two tests (SET, GET) of N requests each
        cost("kv_requests", (0.2 if _pl > 1 else 2 * 18 if _c == 1000 else 2 * 14) * US, 2.0)))
EXPERIMENTS.append(experiment(
    "kv-tls", "-c50 -P1", "kv", "--clients 50 --pipeline 1 --requests {kv_requests}",
    ["treadle-kv-tls", "redis-server-tls"], ["rps", "cpu_us_per_req", "reads_per_req"],
    cost("kv_requests", 2 * 40 * US, 2.0)))
EXPERIMENTS.append(experiment(
    "hiredis", "F={hiredis_fibers} N={hiredis_commands}", "hiredis",
    "--fibers {hiredis_fibers} --commands {hiredis_commands}",
    ["treadle-hook", "pthreads", "hiredis-libev"],
    ["cmds_per_s", "cpu_us_per_cmd", "stalls", "server_cpu_us_per_cmd"],
    cost("hiredis_commands", 9 * US, 1.0, pthreads=16 * US)))
# pg: every run makes its cluster (initdb, a second or two) and connects its
# clients (a few ms each: the server forks a backend per connection).
PG_IMPLS = ["treadle-hook-pg", "pq-libev", "pthreads-pg"]
EXPERIMENTS.append(experiment(
    "pg", "C=100 N={pg_queries}", "pg", "--conns 100 --queries {pg_queries}",
    PG_IMPLS, ["queries_per_s", "cpu_us_per_query"], cost("pg_queries", 25 * US, 2.5)))
EXPERIMENTS.append(experiment(
    "pg", "idle C={pg_idle_conns} S={pg_idle_seconds} s", "pg-idle",
    "--conns {pg_idle_conns} --seconds {pg_idle_seconds}",
    PG_IMPLS, ["wakeups_per_s", "csw_per_s"],
    lambda impl, s: 2.5 + s["pg_idle_conns"] * 0.006 + s["pg_idle_seconds"] + 2.3))
# The pipes workload on the uring back end, against libev on epoll.
for _p in (1000, 9000):
    EXPERIMENTS.append(experiment(
        "uring", f"pipes P={_p} D=0", "pipes", f"--pipes {_p} --messages {{messages}} --delay-us 0",
        ["treadle-ops-uring", "treadle-fiber-uring", "treadle-callback-uring", "treadle-callback", "libev"],
        ["cpu_us_per_msg"], cost("messages", (1.1 if _p == 1000 else 1.8) * US, 0.1 + _p / 30000)))
EXPERIMENTS.append(experiment(
    "echo", "C=1000 M={echo_messages} B=64", "echo", "--conns 1000 --messages {echo_messages} --size 64",
    ["treadle-uring", "treadle-uring-single", "treadle-uring-sends", "treadle-epoll", "floor-single",
     "floor-multishot", "go-1-server", "tokio-ct-server"],
    ["msgs_per_s", "server_cpu_us_per_msg", "client_cpu_us_per_msg"],
    cost("echo_messages", 7 * US, 1.0, go_1_server=9 * US), also_vs=["treadle-epoll"]))
# The fiber runtimes' echo: the net-perf protocol (fixed 512-byte messages),
# ping-pong over 100 connections, and one connection streamed both ways.
ECHO_FIBER_SERVERS = ["treadle-uring", "treadle-epoll", "st-server", "boost-fiber-server", "may-server",
                      "monoio-server", "go-1-server", "tokio-ct-server"]
EXPERIMENTS.append(experiment(
    "echo", "C=100 M={echo_messages} B=512", "echo", "--conns 100 --messages {echo_messages} --size 512",
    ECHO_FIBER_SERVERS, ["msgs_per_s", "server_cpu_us_per_msg", "client_cpu_us_per_msg"],
    cost("echo_messages", 10 * US, 1.0, st_server=14 * US, boost_fiber_server=20 * US)))
EXPERIMENTS.append(experiment(
    "echo", "stream C=1 S={stream_seconds} s B=512", "echo-stream", "--seconds {stream_seconds} --size 512",
    ECHO_FIBER_SERVERS, ["msgs_per_s", "server_cpu_us_per_msg", "client_cpu_us_per_msg"],
    cost("stream_seconds", 1.0, 1.0)))

EXPERIMENTS.append(experiment(
    "skew", "N={skew_tasks} I={skew_iters}", "skew", "--tasks {skew_tasks} --iters {skew_iters}",
    ["treadle-skew-2", "treadle-skew-1", "go-2", "go-1"], ["tasks_per_s", "cpu_us_per_task"],
    cost("skew_tasks", 100 * US, 0.05, treadle_skew_2=50 * US, go_2=50 * US)))

HTTP_KEYS = ["rps", "p99_us", "server_cpu_us_per_req", "errors"]
# Keys whose row is left out of a table when every run of every column is 0
# (a note says so): a row of zeros says only that nothing failed.
ZERO_ROWS_LEFT_OUT = {"errors"}
HTTP_GROUPS = ("http", "http-2", "http-close", "tls")


def http_experiments(conns):
    """The HTTP groups' rows for these connection counts."""
    run = cost("http_seconds", 1.0, 1.2)

    def with_warmup(impl, s):
        return run(impl, s) + s["http_warmup"]

    out = []
    for c in conns:
        out.append(experiment(
            "http", f"c={c}", "http",
            f"--conns {c} --duration {{http_seconds}} --warmup {{http_warmup}} --place pinned",
            HTTP_ONE, HTTP_KEYS, with_warmup, also_vs=["httpd-1"]))
    for place, text in (("shared", "shared"), ("wrk1", "wrk on CPU 1")):
        for c in conns:
            out.append(experiment(
                "http-2", f"c={c} {text}", "http",
                f"--conns {c} --duration {{http_seconds}} --warmup {{http_warmup}} --place {place}",
                HTTP_TWO, HTTP_KEYS, with_warmup))
    for c in conns:
        out.append(experiment(
            "http-2", f"balance c={c}", "balance", f"--conns {c} --duration {{balance_seconds}}",
            ["httpd-2d", "httpd-2r"], ["loop_spread", "loop_min", "loop_max"], cost("balance_seconds", 1.0, 0.5)))
    for c in conns:
        out.append(experiment(
            "tls", f"c={c}", "http",
            f"--conns {c} --duration {{http_seconds}} --warmup {{http_warmup}} --place pinned",
            TLS_ONE, HTTP_KEYS, with_warmup, also_vs=["nginx-1-tls"]))
    # Idle: also with the stacks of idle connections given back sooner
    # (httpd --compact-idle 100; the default is 250) and kept (0).
    for _k in ["httpd-1c-tls", "httpd-1uc-tls", "httpd-1k-tls"]:
        IMPLS[_k] = ("script:http_driver.py", ["--server", _k.replace("-tls", ""), "--tls"], {})
    # Go only at the smaller count: the driver opens its connections to Go's
    # server at about 25 a second (to the C servers', hundreds), so 10,000
    # would take seven minutes a round.
    for _n in ["idle_conns", "idle_conns_many"]:
        out.append(experiment(
            "tls", f"idle n={{{_n}}}", "idle", f"--conns {{{_n}}}",
            ["httpd-1-tls", "httpd-1c-tls", "httpd-1k-tls", "httpd-1u-tls", "httpd-1uc-tls"]
            + (["go-1-https"] if _n == "idle_conns" else []) + ["nginx-1-tls"],
            ["rss_kb_per_conn"], cost(_n, 0.003, 2.0), also_vs=["nginx-1-tls"]))
    out.append(experiment(
        "http-close", f"c={conns[0]}", "http",
        f"--conns {conns[0]} --duration {{close_seconds}} --warmup {{http_warmup}} --place pinned --close",
        HTTP_CLOSE, HTTP_KEYS, lambda impl, s: cost("close_seconds", 1.0, 1.2)(impl, s) + s["http_warmup"]))
    # tls beyond keep-alive: a full handshake per request (the servers issue
    # no tickets: wrk would resume), new against resumed connections, two
    # cores, and the bulk transfer.
    out.append(experiment(
        "tls", f"close c={conns[0]}", "http",
        f"--conns {conns[0]} --duration {{close_seconds}} --warmup {{http_warmup}} --place pinned --close "
        "--no-resumption",
        TLS_ONE, HTTP_KEYS, lambda impl, s: cost("close_seconds", 1.0, 1.2)(impl, s) + s["http_warmup"],
        also_vs=["nginx-1-tls"]))
    out.append(experiment(
        "tls", "resume", "resume", "--duration {resume_seconds} --place pinned", ["httpd-1-tls", "nginx-1-tls"],
        ["new_conns_per_s", "resumed_conns_per_s", "server_cpu_us_per_new", "server_cpu_us_per_resumed",
         "cpu_new_over_resumed", "resumed_frac"],
        cost("resume_seconds", 2.0, 1.5), also_vs=["nginx-1-tls"]))
    for place, text in (("shared", "shared"), ("wrk1", "wrk on CPU 1")):
        for c in conns:
            out.append(experiment(
                "tls", f"2 cores c={c} {text}", "http",
                f"--conns {c} --duration {{http_seconds}} --warmup {{http_warmup}} --place {place}",
                TLS_TWO, HTTP_KEYS, with_warmup, also_vs=["nginx-2-tls"]))
    out.append(experiment(
        "tls", "bulk B={tls_bulk_bytes}", "tls-bulk", "--bytes {tls_bulk_bytes}", ["treadle-tls-bulk", "openssl-pair"],
        ["cpu_s_per_gib", "mb_per_s", "server_cpu_s", "client_cpu_s"], cost("tls_bulk_bytes", 2.5e-9, 0.3),
        also_vs=["openssl-pair"]))
    return out


EXPERIMENTS += http_experiments(CONNS[0])

# What each group's section of the doc says under its table.
GROUP_NOTES = {
    "pipes-callback": "CPU time (user+sys) per message, `cpu_us_per_msg`; callback style.",
    "pipes-watch": "CPU time (user+sys) per message, `cpu_us_per_msg`; watch style "
                   "(a write watcher started and stopped around every write).",
    "timers": "`ns_per_add` / `ns_per_cancel`: CPU time (user+sys) of adding N timers with deadlines "
              "over [1 s, 10 s], then of cancelling them in random order, over N; `ns_per_timer`: wall "
              "time of adding N timers with deadlines over [0, 200 ms] and running until all "
              "have fired, over N (at least 200 ms / N, the spread of the deadlines); "
              "`cpu_ns_per_timer`: the CPU time of that run over N. treadle orders its timers "
              "lazily, in the loop; add_cancel never runs the loop between adding and "
              "cancelling, so that ordering work is paid in fire, not in add_cancel.",
    "ring": "503 fibers pass a token: `via wake` parks each fiber and has its predecessor wake it "
            "directly (treadle: tdl_fiber_park/unpark; Go: a 1-slot channel per goroutine as a permit; "
            "tokio: a Notify per task); `via chan` uses an unbuffered channel between neighbours (tokio has "
            "no rendezvous channel: capacity-1 mpsc). `ns_per_hop` is wall time, `cpu_ns_per_hop` CPU "
            "time. go-1 is GOMAXPROCS=1, go the default (every CPU); tokio-ct is current_thread, tokio-mt "
            "multi_thread. st is State Threads (a thread per member; via wake only, ST having no channel: an "
            "st_cond_t and a flag per thread, signalled by its predecessor); boost-fiber is Boost.Fiber on its "
            "round_robin scheduler (via wake: a fibers::mutex, condition_variable and flag per fiber; via chan: "
            "an unbuffered_channel per neighbour). Both run on one thread. may: stackful coroutines on one "
            "worker thread (via wake: coroutine::park and Coroutine::unpark; via chan: may has no rendezvous "
            "channel, an unbounded mpsc per neighbour, which never holds more than the token); monoio: tasks "
            "on its io_uring runtime (via wake only, monoio having no channel nor notification: a one-task "
            "permit on std's Waker, bench/peers/monoio).",
    "chan": "Two fibers pass a value back and forth over one unbuffered channel; a hop is one send and "
            "its receive (tokio: a capacity-1 mpsc per direction). Columns as in ring; st passes the value "
            "through a one-value slot and an st_cond_t per direction (State Threads has no channel), "
            "boost-fiber over one unbuffered_channel both ways, boost-fiber-buffered over a buffered_channel "
            "of capacity 2 (Boost.Fiber's smallest) per direction; may over an unbounded mpsc per direction "
            "(it has no rendezvous channel). monoio has no channel.",
    "idle": "F fibers each blocked for good on a channel receive; bytes_per_fiber = (VmRSS with all "
            "blocked - VmRSS before) * 1024 / F. treadle: one touched 4 KiB stack page per fiber holds "
            "its control block, its frames and its wait record, plus its slot in the handle table; Go: "
            "a 2 KiB minimum stack plus the goroutine struct; tokio tasks have no stack at all (a "
            "future's state only), so theirs is not a figure for stackful threads. The rows park, read and "
            "chan are treadle alone, parked in tdl_fiber_park, in tdl_read on a pipe of its own, or on a channel "
            "receive, with tdl_fiber_compact_idle (compact 10 ms: measured once every fiber is compacted) and "
            "without: copy_bytes is a compacted fiber's heap copy of its stack (a channel receive is never "
            "compacted), wake_ns the time to wake all F and run each once, per fiber. st (State Threads) and "
            "boost-fiber (Boost.Fiber) in the F row: blocked in st_cond_wait on one shared condition variable, "
            "and in a pop of one shared unbuffered_channel. The row 'read ..., peers': parked in a read of a "
            "pipe of its own, treadle as it comes and compacted (treadle-compact: --compact-ms 10), st in "
            "st_read (its st_netfd_t opened by the thread), boost-fiber in a Boost.Asio async_read_some of a "
            "posix::stream_descriptor (made by the fiber); each stackful peer at its default stack (State "
            "Threads 64 KiB, Boost.Fiber's fixedsize_stack 128 KiB) and its smallest that runs the workload "
            "(st-4k: a page, which also holds the thread's control block; boost-fiber-16k: 16 KiB, above "
            "Boost's minimum_size of 13,504 bytes; 8 KiB overflows into the heap; may: 32 KiB, and may-4k a "
            "page), may in a read of the pipe through may::io::CoIo (and in the F row in a receive of an mpsc "
            "of its own); monoio, whose tasks have no stack, in a read of one end of a socket pair of its "
            "own (monoio reads no pipes) into a 64-byte buffer it owns, as monoio's reads take one. may maps each "
            "stack with a guard page: past vm.max_map_count / 2 coroutines (about 32,000 by default) it cannot "
            "start them, and its run of F=100,000 fails, saying so.",
    "pipes-fiber": "One fiber (goroutine, task) per pipe looping { write 1 byte; read 1 byte, trying "
                   "the read first and parking only on EAGAIN; sleep D }: the same work as the "
                   "callback styles, written as blocking code. treadle-callback-vs-fiber is treadle's "
                   "callback style in the same run, for the fiber/callback ratio. CPU time per message.",
    "loops": "Two loops on two threads (treadle: a group of 2, pinned; Go: GOMAXPROCS=2; tokio: "
             "multi_thread with 2 workers). xchan: a fiber on one loop sends 1..T over a shared "
             "channel of capacity 1024 to a fiber on the other (Go: a buffered channel of 1024; tokio: "
             "a bounded mpsc of 1024); msgs_per_s is wall time, so above 1 the peer is faster; "
             "wakeups_per_msg counts eventfd writes. xping: two fibers pass one value back and forth "
             "over two unbuffered shared channels (Go: unbuffered channels); treadle-spin lets each "
             "loop spin 100 µs before it sleeps (tdl_loop_options.spin); floor is no library: two threads on "
             "the two CPUs pass a counter through two cache lines, spinning, the least a round trip between "
             "two threads costs (Go's goroutines share one thread when they can); floor-sleep is no library either, "
             "but each thread sleeps in read(2) on its own eventfd until the other writes it: a round trip "
             "is two wake-ups of a sleeping thread, the least a loop that does not spin pays. pipes: the callback-style "
             "pipes workload on one loop, and split over a group of 2 (treadle-2-loops: half the pipes and "
             "half the messages each); msgs_per_s is wall time, so the ratio is the speed-up.",
    "blocking": "64 fibers (libuv: 64 requests in flight; tokio: 64 tasks) each call a trivial function "
                "through the blocking-work pool (tdl_blocking; uv_queue_work on libuv's pool of 4; "
                "spawn_blocking) until N calls are done; the pools are warmed first. us_per_call is wall "
                "time over N; cpu_us_per_call counts every thread.",
    "fs": "64 fibers (Go: 64 goroutines, GOMAXPROCS unset, so every CPU; libuv: 64 uv_fs_read requests "
          "in flight on its pool of 4) read 4 KiB at random 4 KiB-aligned offsets of one S MiB file in the "
          "page cache (made once in the build directory and read whole before every run: "
          "bench/common/fs_file.h) until N reads are done, each checked for its length and its first word. "
          "treadle-fs-auto tries preadv2(RWF_NOWAIT) on the loop's thread and sends only misses to the "
          "pool; treadle-fs-pool sends every read to the pool (libuv's way); treadle-fs-direct reads on "
          "the loop's thread; treadle-fs-uring makes every read a ring operation (IORING_OP_READ); pread "
          "is one thread calling pread(2) in a loop, no library: the floor. cpu_us_per_read is CPU time "
          "(user+sys, every thread) over N; reads_per_s and us_per_read are wall time, so for reads_per_s "
          "a ratio above 1 means the peer is faster. pool, ring and nowait_miss (treadle only, "
          "tdl_fs_stats_get over the run): reads run on the pool, on the ring, and the ones RWF_NOWAIT "
          "refused first; 0 on the pool for auto means the page cache answered every read on the loop's "
          "thread.",
    "fsopen": "64 fibers (Go: 64 goroutines, GOMAXPROCS unset, so every CPU) each open a small file, read "
              "it (up to 4 KiB, from offset 0) and close it, taking F files of 64 B to 4 KiB in turn, until N "
              "opens are done, each read checked for its length and its first and last bytes. The files are "
              "made once in the build directory and read once before every run, so all are in the page cache "
              "(bench/common/fs_files.h). treadle: tdl_fs_open, tdl_fs_pread, tdl_close with the engine auto "
              "on a uring loop (treadle-fsopen-uring: the open is a ring operation, IORING_OP_OPENAT) and on "
              "an epoll loop (treadle-fsopen-epoll: the open runs on the pool), and every call on the pool "
              "(treadle-fsopen-pool, libuv's way); go: os.Open, ReadAt, Close; threads is one plain thread "
              "calling open, pread and close in a loop, no library. opens_per_s and us_per_open are wall "
              "time (for opens_per_s a ratio above 1 means the peer is faster); cpu_us_per_open is CPU time "
              "(user+sys, every thread) over N. pool and ring (treadle only, tdl_fs_stats_get over the run): "
              "calls run on the pool and on the ring.",
    "responsive": "64 fibers loop making a 10 ms blocking call (nanosleep) for S seconds while a repeating "
                  "1 ms tdl_timer on the same loop records how late each firing is: CLOCK_MONOTONIC read "
                  "in its callback minus the deadline it fired for (nearest-rank percentiles over every "
                  "firing of a run, in µs). treadle-pool makes the calls through tdl_blocking; "
                  "treadle-direct makes them in the fibers, each then sleeping 1 ns so that the loop gets "
                  "a turn: fibers woken together run back to back, so the timer waits for all 64 calls "
                  "(~640 ms) and fires only a few times (ticks: a repeating timer skips the periods it "
                  "missed). calls_done counts the calls made. treadle-direct's ratio is what the pool saves.",
    "kv": "examples/kv (treadle, one loop, a fiber per connection; treadle-kv on epoll, treadle-kv-uring "
          "on uring, where it receives ahead, sends behind and accepts ahead) and redis-server "
          "under redis-benchmark -t set,get -r 100000, the server pinned to CPU 0 and the client "
          "to CPU 1 (bench/drivers/kv_driver.py). rps: requests/s over both tests (above 1, the peer "
          "served more); cpu_us_per_req: the server's CPU time (user+sys) per request; "
          "reads_per_req: the server's read() calls per request (/proc/PID/io syscr; on uring the kernel "
          "receives, and none are made).",
    "kv-tls": "The kv group's -c50 -P1 row over TLS (TLS 1.3, one self-signed P-256 certificate made for the "
              "run): treadle-kv-tls is examples/kv --tls-cert/--tls-key on epoll, redis-server-tls redis-server "
              "with its TLS port only (--port 0 --tls-port, --tls-auth-clients no), both under redis-benchmark "
              "--tls --cacert, placed as in the kv group; the 50 handshakes come before the first request "
              "and count in the run. It measures what TLS adds to each request: a record each way, made by "
              "OpenSSL in user space (by the kernel for kv where its `tls` module is loaded: tls.h). Keys as "
              "in the kv group; reads_per_req counts read(2) calls (/proc/PID/io syscr): redis-server's OpenSSL "
              "reads the socket with read(2), two per request; kv's records come through recv(2) (tls.h's "
              "fiber record path), which syscr does not count, so its figure is the handshakes' reads.",
    "hiredis": "F clients loop { SET key:i v; GET key:i } against a fresh redis-server (--save '' "
               "--appendonly no --maxclients F+100) until N commands are done in all, every "
               "reply checked; the server pinned to CPU 0 and the client to CPU 1 "
               "(bench/drivers/hiredis_driver.py). treadle-hook: F fibers on one loop running hiredis's "
               "synchronous API, unmodified, through libtreadle-hook (bench-hiredis-fibers); pthreads: the "
               "same code in F threads of 64 KiB stacks; hiredis-libev: hiredis's async API on libev "
               "(adapters/libev.h), F connections, each sending its next command from the last one's reply "
               "callback. Connections are made before the clock starts. cmds_per_s is wall time, so a ratio "
               "below 1 means the peer is slower; cpu_us_per_cmd is the client's CPU time (user+sys, every "
               "thread) per command; server_cpu_us_per_cmd the server's over the client's whole run (setup "
               "included; clock ticks of 10 ms). stalls (treadle only): reports of treadle's loop watchdog, "
               "threshold 5 ms, while the commands ran.",
    "pg": "C = 100 clients, each on its own connection to a fresh PostgreSQL cluster (made by initdb for the "
          "run; the server on a Unix socket in a directory of its own, with fsync, synchronous_commit, "
          "full_page_writes and autovacuum off), run the prepared statement `SELECT $1::int` with a value of "
          "their own until N queries are done in all, every answer checked against the value sent; the server "
          "(the postmaster and every backend) pinned to CPU 0 and the client to CPU 1 "
          "(bench/drivers/pg_driver.py). treadle-hook-pg: C fibers on one loop running libpq's blocking API "
          "(PQexecPrepared), unmodified, through libtreadle-hook (bench-pg-fibers); pq-libev: libpq's "
          "asynchronous API (PQsendQueryPrepared, then PQconsumeInput, PQisBusy and PQgetResult as the socket "
          "becomes readable) on libev, one thread, each connection sending its next query once the last one's "
          "answer is in; pthreads-pg: the blocking code of the fibers in C threads of 64 KiB stacks. "
          "Connections are made and the statement prepared before the clock starts. queries_per_s is wall "
          "time, so a ratio below 1 means the peer is slower; cpu_us_per_query is the client's CPU time "
          "(user+sys, every thread) per query. idle: C connections, each waiting on `SELECT id FROM "
          "pg_sleep(S + 2)`; once all have sent, the client sleeps S seconds and counts its wake-ups "
          "meanwhile, less the one that ends its sleep, per second: wakeups_per_s is the loop's returns from "
          "its poll (treadle: an after-poll tdl_observer; libev: ev_iteration), for the threads their context "
          "switches; csw_per_s the process's context switches (getrusage, every thread). Nothing arrives "
          "during the spell, so any wake-up is the client's own (an answer within it fails the run).",
    "uring": "The pipes workload (CPU time per message) on the io_uring back end: treadle-ops-uring is "
             "the callback style on completions (tdl_op: each message's write and the read that takes it are "
             "queued together and completed in one io_uring_enter); treadle-fiber-uring the fiber style, "
             "whose calls are made directly and become ring operations only where they would block (at D=0 "
             "none does); treadle-callback-uring is the watcher style on a uring loop (watchers stay on "
             "epoll: epoll's cost); treadle-callback (callback style) and libev on epoll in the same rounds.",
    "echo": "C = 1000 TCP connections over loopback to an echo server on one thread of work (a fiber, "
            "goroutine or task per connection, 16 KiB buffer, TCP_NODELAY); each connection sends B bytes and "
            "waits for them back, M round trips in all, every byte checked (bench/drivers/echo_driver.py). "
            "The client is the same for every server: treadle-bench echo on its own epoll loop, pinned to CPU "
            "1, the server to CPU 0. treadle-uring and treadle-epoll: treadle-bench echo-server on each back "
            "end (on uring each connection receives ahead, tdl_fd_readahead, and sends behind, "
            "tdl_fd_writebehind; treadle-uring-single: with --readahead no, a receive request per read; "
            "treadle-uring-sends: with --writebehind no, a send(2) per answer); go-1-server: bench-go "
            "echo-server with GOMAXPROCS=1; tokio-ct-server: bench-tokio echo-server on the current_thread "
            "runtime. floor-single and floor-multishot are no library: liburing directly, one thread "
            "(treadle-bench uring-floor --mode echo, bench/workloads/bench_uring_floor.c): one ring with "
            "SINGLE_ISSUER and DEFER_TASKRUN, a multishot accept, and per connection either one receive at a "
            "time into its own 16 KiB buffer (single) or a multishot receive from a ring of 4096 provided "
            "buffers of 2 KiB (multishot), each message sent back with send(2): what io_uring itself allows "
            "on the machine, the floor under treadle-uring's figures. msgs_per_s is the client's wall time, so "
            "above 1 the peer served faster; server_cpu_us_per_msg is the server's CPU time (utime+stime of "
            "every thread, /proc/PID/stat, clock ticks of 10 ms) over the timed round trips only (the "
            "connections are made and warmed before), per message; client_cpu_us_per_msg the client's. The "
            "rows 'vs treadle-epoll' are the same runs' ratios to treadle-epoll. C=100 B=512 and stream: the "
            "fiber runtimes' echo (the net-perf protocol, fixed 512-byte messages), the same client: ping-pong "
            "over 100 connections, and one connection streamed both ways for S seconds (treadle-bench "
            "echo-stream: a writer fiber sends 512-byte messages as fast as the socket takes them, a reader "
            "fiber checks every byte that comes back; msgs_per_s is bytes echoed / 512 over the wall time, "
            "the server's CPU counted from before the client starts). st-server is bench-st echo-server "
            "(State Threads: a thread per connection, st_read/st_write; Debian's libst has no epoll, so "
            "poll(2)); boost-fiber-server is bench-boost-fiber echo-server (Boost.Fiber over Boost.Asio on "
            "one thread: a fiber per connection, async_read_some and async_write suspending the fiber); "
            "may-server is bench-may echo-server (a coroutine per connection on one worker thread); "
            "monoio-server is bench-monoio echo-server (a task per connection, each read and write_all a "
            "request on io_uring, owned 16 KiB buffers). All four report the bytes they echoed, which are "
            "checked.",
    "http": "One core: every server answers GET / with \"Hello, World!\" over keep-alive connections, pinned "
            "to CPU 0, under `wrk -t1 -c<conns> --latency` pinned to CPU 1 (bench/drivers/http_driver.py): "
            "httpd-1 is examples/httpd with one loop on epoll, httpd-1u the same on io_uring (receiving "
            "ahead and sending behind), httpd-1us with a receive request per read, httpd-1un with a send(2) "
            "per answer; floor-1, floor-1m and floor-1mr are no library (treadle-bench uring-floor --mode "
            "http: one receive at a time, a multishot receive, and a multishot receive with every answer a "
            "send request on the ring); go-1-http is Go's net/http with GOMAXPROCS=1; nginx-1 one nginx "
            "worker; st-1-http, boost-fiber-1-http, may-1-http and monoio-1-http are the fiber runtimes' "
            "servers (the peers' http-server: State Threads on poll(2), a thread per connection; Boost.Fiber "
            "over Boost.Asio, a fiber per connection; may with one worker thread, a coroutine per connection; "
            "monoio on io_uring, a task per connection), written without an HTTP library as the echo group's "
            "servers are: a 16 KiB buffer per connection, the complete request heads a read brings answered "
            "in one write, with the bytes httpd sends. rps is wrk's requests per second (above 1, the peer "
            "served more), p99_us wrk's 99th percentile latency, server_cpu_us_per_req the server's CPU time "
            "(utime+stime of the server and its workers, /proc/PID/stat) per request, errors wrk's socket "
            "errors and non-2xx answers. Each run starts its server afresh, checks its answers (two requests "
            "in one write, one in two pieces, the answers' bytes, and from every server but the floor 400 to a "
            "malformed request) and warms it with wrk first; a wrong answer, or a non-2xx answer or read error of "
            "wrk's, fails the run. wrk, one thread on one CPU, can be the limit on requests/s; CPU per "
            "request then tells the servers apart. run.py also prints each figure's ratio to "
            "httpd-1 in the same runs (rows 'vs httpd-1').",
    "http-2": "Two cores, the same servers and keys as the http group: httpd with two loops (--loops 2) "
              "accepting with --accept distribute (one acceptor hands each connection to the least-loaded "
              "loop: httpd-2d, on uring httpd-2du) or reuseport (a listener per loop: httpd-2r, httpd-2ru), "
              "httpd with one loop (httpd-2x1), Go's net/http with GOMAXPROCS=2 (go-2-http), nginx with two "
              "workers (nginx-2). \"shared\": nothing pinned, wrk shares both CPUs with the server; \"wrk on "
              "CPU 1\": wrk restricted to CPU 1, the server free to use both. With the load generator on the "
              "same two CPUs, what a second loop gives a server is what wrk leaves it: CPU per request is "
              "the figure to read. balance: a fresh httpd-2d or httpd-2r, one wrk run at that many "
              "connections (wrk opens each once), then the connections each loop took: loop_spread is the "
              "most over the fewest.",
    "http-close": "One core, placed as in the http group, every request sent with \"Connection: close\" "
                  "(wrk -H), so that each request is a connection of its own: accept, one request, close. "
                  "It measures what a connection costs: server_cpu_us_per_req is then per connection. "
                  "floor-1 accepts with one multishot accept, floor-1as with one accept request at a time, "
                  "floor-1ae as treadle does on a uring loop (accept4 until EAGAIN, then one accept request).",
    "tls": "One core, placed as in the http group, over HTTPS (TLS 1.3, one P-256 certificate made for the run, "
           "ALPN http/1.1): httpd-1-tls is examples/httpd --tls-cert/--tls-key with one loop on epoll, "
           "httpd-1u-tls the same on io_uring (after the handshake, records through fiber I/O, receiving "
           "ahead and sending behind), go-1-https Go's net/http with crypto/tls and GOMAXPROCS=1, nginx-1-tls one nginx "
           "worker with `listen ssl` and TLS 1.3 only; keys as in the http group (wrk keeps its connections, so "
           "handshakes are few). idle: that many connections, each after one request, held open and idle; "
           "rss_kb_per_conn is the server's RSS (every process) after, less before, per connection. The rows "
           "'vs nginx-1-tls' are the same runs' ratios to nginx."
           " httpd-1-tls compacts the fibers of connections idle 250 ms, httpd's default (tdl_fiber_compact_idle: "
           "their stack pages go back to the kernel). httpd-1c-tls and httpd-1uc-tls (idle rows only): httpd-1-tls "
           "and httpd-1u-tls with --compact-idle 100; httpd-1k-tls with --compact-idle 0, which keeps them.",
    "skew": "One fiber (goroutine) spawns N fibers and waits for them all; each runs I rounds of "
            "xorshift64 from seed i | 1 and adds its x to a shared atomic sum, checked at the end. treadle: "
            "the spawner on loop 0 of a group of 2 loops (treadle-skew-2) or 1 (treadle-skew-1), each "
            "fiber tdl_group_spawn'ed with the default placement and stealing; go-2 and go-1: GOMAXPROCS=2 "
            "and 1. tasks_per_s is wall time, so above 1 the peer is faster; cpu_us_per_task counts every "
            "thread.",
    "spawn": "Start /bin/true K times one after another, waiting for each. cpu_us_per_spawn counts "
             "parent and child CPU. Ratios of spawns_per_s above 1 mean the peer is faster; of "
             "cpu_us_per_spawn, that the peer spends more. With a 2 GiB resident parent fork+exec "
             "copies the page tables; the vfork-style methods do not. fibers: one fiber starts B = 1000 "
             "fibers, then joins each in turn, until N have run (treadle-bench fiber-spawn: tdl_fiber_spawn "
             "and tdl_fiber_join; st: st_thread_create joinable and st_thread_join; boost-fiber: a "
             "fibers::fiber and join(), on Boost's default 128 KiB fixedsize_stack); each fiber's result is "
             "summed and checked; may: go! and join from a coroutine, on one worker thread; monoio: "
             "monoio::spawn and the JoinHandle awaited (a task has no stack). fibers_per_s is wall time, "
             "cpu_ns_per_fiber CPU time per fiber.",
}


# The tls group's rows beyond keep-alive (http_experiments), said after the
# note above.
GROUP_NOTES["tls"] += (
    " close: every request with \"Connection: close\" (wrk -H), so a TLS 1.3 handshake per request, and a full "
    "one: wrk would resume (it keeps one SSL object per connection slot and SSL_clear keeps the session, so each "
    "reconnection offers the last ticket back), so the servers are told to issue no tickets (httpd --tls-no-resumption, "
    "bench-go-http -tls-no-tickets, nginx `ssl_session_tickets off` with its session cache left at none): httpd "
    "and Go then send none, nginx 1.22 still sends the two stateful TLS 1.3 tickets OpenSSL issues by default "
    "(it sets no count, and `ssl_session_cache off` does not stop them either), which no cache keeps and wrk "
    "decrypts and drops; server_cpu_us_per_req is then per handshake. resume: `openssl s_time -tls1_3 -www /` pinned to CPU 1 as wrk "
    "is, one connection at a time (GET / over HTTP/1.0, read to the close), S seconds with -new (a full handshake "
    "each) then S with -reuse (one session resumed with its TLS 1.3 ticket, psk_dhe_ke: no certificate, still "
    "an X25519 exchange); the servers as configured for the keep-alive rows (httpd issues tickets by default, "
    "nginx with its defaults: ssl_session_tickets on, tickets from a key made at start, ssl_session_cache none); "
    "server_cpu_us_per_new and _per_resumed are the server's CPU per connection, cpu_new_over_resumed what "
    "resuming saves, resumed_frac the share s_time saw resumed (a run below 0.5 fails). One connection at a "
    "time leaves the server idle while s_time works: the rates are latency-bound, the CPU figures are the ones "
    "to compare. 2 cores: httpd-2d-tls is httpd --loops 2 --accept distribute on epoll, httpd-2du-tls the same "
    "on io_uring, nginx-2-tls two workers, placed as the http-2 group (shared, and wrk on CPU 1). bulk: B bytes "
    "over one TLS 1.3 connection on loopback, both ends on the machine, TLS_AES_256_GCM_SHA384 with X25519 (what "
    "OpenSSL 3 picks by default; neither side sets a cipher), records in user space on both (no kernel TLS); "
    "treadle-tls-bulk is treadle-bench tls-bulk, one process, a server fiber on loop 0 writing 16 KiB at a time "
    "from one buffer and a client fiber on loop 1 reading into a 16 KiB buffer, the loops pinned to CPU 0 and 1; "
    "openssl-pair is `openssl s_server -quiet -naccept 1` on CPU 0, fed by `head -c B /dev/zero` through a pipe "
    "(head's CPU not counted, s_server's reads of the pipe counted), and `openssl s_client -quiet` on CPU 1 "
    "writing to /dev/null (bench/drivers/tls_bulk_driver.py), fed only once the handshake is over; each "
    "process's start and handshake are in its CPU time. cpu_s_per_gib is user+sys of both ends per GiB, mb_per_s "
    "the bytes over the wall time (treadle: from the group's start; the pair: from the feeder's), server_cpu_s "
    "and client_cpu_s each end's own CPU seconds.")


# The targets, as data: the verdict reads only this.  Each compares one figure
# of one experiment (group, label as written in EXPERIMENTS, key): with `den`,
# the paired ratio num / den (the median over rounds of num's figure over
# den's in the same round), else num's own median; `op` ("<=", ">=", or "=="
# for a count that must be exactly the bound) and `bound` say what meets the
# target.  num and den may each be a tuple of implementations: then, round
# by round, the best of them (the highest rate, the lowest cost: see
# higher_is_better), so that "treadle on its better back end against the best
# peer" is one target.
OPS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq}


def higher_is_better(key):
    """Rates (..._per_s, rps) are better high; costs, times and sizes low."""
    return key.endswith("_per_s") or key == "rps"


def impl_names(impls):
    """A target's num or den as a tuple of implementations (none for None)."""
    return () if impls is None else (impls if isinstance(impls, tuple) else (impls,))


def impl_text(impls):
    names = impl_names(impls)
    return names[0] if len(names) == 1 else "best of " + ", ".join(names)


def target(text, group, label, key, num, den, op, bound):
    return {"text": text, "group": group, "label": label, "key": key, "num": num, "den": den, "op": op,
            "bound": bound}


TARGETS = []
for _p in (100, 1000, 9000):
    for _peer in ("libev", "libuv"):
        TARGETS.append(target(f"pipes callback P={_p} D=0: CPU/msg <= {_peer}'s", "pipes-callback",
                              f"P={_p} D=0", "cpu_us_per_msg", "treadle-callback", _peer, "<=", 1.0))
for _p in (1000, 9000):
    TARGETS.append(target(f"pipes callback P={_p} D=1000: CPU/msg <= 0.5 x libev's", "pipes-callback",
                          f"P={_p} D=1000", "cpu_us_per_msg", "treadle-callback", "libev", "<=", 0.5))
TARGETS += [
    target("pipes watch P=1000 D=0: CPU/msg <= 0.45 x libev's", "pipes-watch", "P=1000 D=0", "cpu_us_per_msg",
           "treadle-watch", "libev", "<=", 0.45),
    target("timers add <= 1/2 libev's", "timers", "add_cancel N={timers}", "ns_per_add", "treadle", "libev",
           "<=", 0.5),
    target("timers cancel <= 1/2 libev's", "timers", "add_cancel N={timers}", "ns_per_cancel", "treadle", "libev",
           "<=", 0.5),
    target("timers fire <= libev's", "timers", "fire N={timers}", "ns_per_timer", "treadle", "libev", "<=", 1.0),
    target("ring via wake <= 20 ns per hop", "ring", "via wake, 503 fibers, T={hops}", "ns_per_hop", "treadle", None,
           "<=", 20.0),
    target("ring via wake <= 1/8 of Go's (GOMAXPROCS=1)", "ring", "via wake, 503 fibers, T={hops}", "ns_per_hop",
           "treadle", "go-1", "<=", 0.125),
    target("ring via chan <= 1/5 of Go's", "ring", "via chan, 503 fibers, T={hops}", "ns_per_hop", "treadle", "go-1",
           "<=", 0.2),
    target("chan ping-pong <= 1/5 of Go's", "chan", "ping-pong T={hops}", "ns_per_hop", "treadle", "go-1", "<=", 0.2),
    target("pipes fiber P=1000 D=0: CPU/msg <= tokio-ct's", "pipes-fiber", "P=1000 D=0", "cpu_us_per_msg",
           "treadle-fiber", "tokio-ct", "<=", 1.0),
    target("pipes fiber P=1000 D=1000: CPU/msg <= 0.75 x tokio-ct's", "pipes-fiber", "P=1000 D=1000",
           "cpu_us_per_msg", "treadle-fiber", "tokio-ct", "<=", 0.75),
    target("pipes fiber P=1000 D=0: CPU/msg within 10% of callback's", "pipes-fiber", "P=1000 D=0", "cpu_us_per_msg",
           "treadle-fiber", "treadle-callback-vs-fiber", "<=", 1.1),
    target("pipes fiber P=1000 D=1000: CPU/msg within 10% of callback's", "pipes-fiber", "P=1000 D=1000",
           "cpu_us_per_msg", "treadle-fiber", "treadle-callback-vs-fiber", "<=", 1.1),
    target("idle: bytes per fiber <= 1.6 x Go's", "idle", "F={fibers}", "bytes_per_fiber", "treadle", "go-1", "<=",
           1.6),
    target("spawn: spawns/s >= 0.97 x posix_spawn's", "spawn", "small parent, K={spawns}", "spawns_per_s", "treadle",
           "posix_spawn", ">=", 0.97),
    target("spawn: spawns/s >= 2 x popen's", "spawn", "small parent, K={spawns}", "spawns_per_s", "treadle", "popen",
           ">=", 2.0),
    target("spawn, 2 GiB parent: spawns/s >= 50 x fork's", "spawn", "2 GiB parent, K={big_spawns}", "spawns_per_s",
           "treadle", "fork", ">=", 50.0),
    target("xchan: msgs/s >= 1.5 x Go's (GOMAXPROCS=2)", "loops", "xchan T={xhops}", "msgs_per_s",
           "treadle", "go-2", ">=", 1.5),
    target("xchan: msgs/s >= tokio-mt's", "loops", "xchan T={xhops}", "msgs_per_s", "treadle", "tokio-mt",
           ">=", 1.0),
    target("xchan: <= 0.05 wake-ups per message", "loops", "xchan T={xhops}", "wakeups_per_msg", "treadle",
           None, "<=", 0.05),
    target("xping, sleeping: round trip <= Go's", "loops", "xping T={trips}", "ns_per_round_trip",
           "treadle", "go-2", "<=", 1.0),
    target("xping, spinning: round trip <= Go's", "loops", "xping T={trips}", "ns_per_round_trip",
           "treadle-spin", "go-2", "<=", 1.0),
    target("xping, spinning: round trip <= 2 x the spinning floor", "loops", "xping T={trips}",
           "ns_per_round_trip", "treadle-spin", "floor", "<=", 2.0),
    target("xping, sleeping: round trip <= 2 x two eventfd wake-ups (floor-sleep)", "loops", "xping T={trips}",
           "ns_per_round_trip", "treadle", "floor-sleep", "<=", 2.0),
    target("pipes on 2 loops: msgs/s >= 1.8 x one loop's", "loops", "pipes P=1000 D=0", "msgs_per_s",
           "treadle-2-loops", "treadle-callback", ">=", 1.8),
    target("skew: tasks/s on 2 loops >= Go's on 2 Ps", "skew", "N={skew_tasks} I={skew_iters}", "tasks_per_s",
           "treadle-skew-2", "go-2", ">=", 1.0),
    target("skew: tasks/s on 2 loops >= 1.8 x one loop's", "skew", "N={skew_tasks} I={skew_iters}",
           "tasks_per_s", "treadle-skew-2", "treadle-skew-1", ">=", 1.8),
    target("blocking: us/call <= libuv's", "blocking", "F=64 N={calls}", "us_per_call", "treadle", "libuv",
           "<=", 1.0),
    target("blocking: us/call <= tokio-mt's", "blocking", "F=64 N={calls}", "us_per_call", "treadle",
           "tokio-mt", "<=", 1.0),
    target("fs: CPU/read <= 1.3 x Go's", "fs", "C=64 S={file_mib} MiB N={reads}", "cpu_us_per_read",
           "treadle-fs-auto", "go", "<=", 1.3),
    target("fs: reads/s >= 3 x libuv's", "fs", "C=64 S={file_mib} MiB N={reads}", "reads_per_s",
           "treadle-fs-auto", "libuv", ">=", 3.0),
    target("fs on the ring: CPU/read <= Go's", "fs", "C=64 S={file_mib} MiB N={reads}", "cpu_us_per_read",
           "treadle-fs-uring", "go", "<=", 1.0),
    target("fsopen on uring: opens/s >= Go's", "fsopen", "C=64 F={open_files} N={opens}", "opens_per_s",
           "treadle-fsopen-uring", "go", ">=", 1.0),
    target("fsopen on epoll: opens/s >= Go's", "fsopen", "C=64 F={open_files} N={opens}", "opens_per_s",
           "treadle-fsopen-epoll", "go", ">=", 1.0),
    target("responsive: p99 lateness <= 1000 us", "responsive", "F=64 call=10 ms S={seconds} s",
           "lateness_p99_us", "treadle-pool", None, "<=", 1000.0),
    target("hiredis: cmds/s >= 2 x pthreads'", "hiredis", "F={hiredis_fibers} N={hiredis_commands}",
           "cmds_per_s", "treadle-hook", "pthreads", ">=", 2.0),
    target("hiredis: cmds/s >= 0.8 x hiredis-libev's", "hiredis", "F={hiredis_fibers} N={hiredis_commands}",
           "cmds_per_s", "treadle-hook", "hiredis-libev", ">=", 0.8),
    target("hiredis: no watchdog stall over 5 ms", "hiredis", "F={hiredis_fibers} N={hiredis_commands}",
           "stalls", "treadle-hook", None, "<=", 0.0),
    target("pg: queries/s >= 0.95 x pq-libev's", "pg", "C=100 N={pg_queries}", "queries_per_s",
           "treadle-hook-pg", "pq-libev", ">=", 0.95),
    target("pg: CPU per query <= 1.0 x pq-libev's", "pg", "C=100 N={pg_queries}", "cpu_us_per_query",
           "treadle-hook-pg", "pq-libev", "<=", 1.0),
    target("pg: CPU per query <= 0.7 x pthreads'", "pg", "C=100 N={pg_queries}", "cpu_us_per_query",
           "treadle-hook-pg", "pthreads-pg", "<=", 0.7),
    target("pg idle: no wake-up while every connection waits", "pg", "idle C={pg_idle_conns} S={pg_idle_seconds} s",
           "wakeups_per_s", "treadle-hook-pg", None, "==", 0.0),
]
for _c, _pl in ((50, 1), (50, 16), (1000, 1)):
    TARGETS.append(target(f"kv -c{_c} -P{_pl}: req/s >= 0.95 x redis-server's", "kv", f"-c{_c} -P{_pl}", "rps",
                          "treadle-kv", "redis-server", ">=", 0.95))
    TARGETS.append(target(f"kv -c{_c} -P{_pl}: CPU/req <= redis-server's", "kv", f"-c{_c} -P{_pl}", "cpu_us_per_req",
                          "treadle-kv", "redis-server", "<=", 1.0))
    if _pl == 1:
        TARGETS.append(target(f"kv -c{_c} -P1: <= 1.05 reads per request", "kv", f"-c{_c} -P{_pl}", "reads_per_req",
                              "treadle-kv", None, "<=", 1.05))
for _p in (1000, 9000):
    for _impl in ("treadle-ops-uring", "treadle-fiber-uring"):
        TARGETS.append(target(f"uring {_impl} P={_p} D=0: CPU/msg <= 0.88 x libev's", "uring",
                              f"pipes P={_p} D=0", "cpu_us_per_msg", _impl, "libev", "<=", 0.88))
TARGETS.append(target("echo on uring: msgs/s >= 1.2 x Go's (GOMAXPROCS=1)", "echo", "C=1000 M={echo_messages} B=64",
                      "msgs_per_s", "treadle-uring", "go-1-server", ">=", 1.2))
# Against the fiber runtimes (ring, chan, spawn, idle, echo): treadle at
# least as fast as the best of them, at no more than 0.9 x the lowest CPU per
# unit of work; the echo rows on the better of treadle's two back ends.
FIBER_RUNTIMES = ("st", "boost-fiber", "may", "monoio")
TREADLE_BACKENDS = ("treadle-uring", "treadle-epoll")
ECHO_PEER_SERVERS = tuple(i for i in ECHO_FIBER_SERVERS if i not in TREADLE_BACKENDS)
for _label, _peers in (("via wake, 503 fibers, T={hops}", FIBER_RUNTIMES),
                       ("via chan, 503 fibers, T={hops}", ("boost-fiber", "may"))):
    TARGETS += [
        target(f"ring {_label.split(',')[0]}: ns/hop <= the best fiber runtime's", "ring", _label, "ns_per_hop",
               "treadle", _peers, "<=", 1.0),
        target(f"ring {_label.split(',')[0]}: CPU/hop <= 0.9 x the best fiber runtime's", "ring", _label,
               "cpu_ns_per_hop", "treadle", _peers, "<=", 0.9)]
_chan_peers = ("st", "boost-fiber", "boost-fiber-buffered", "may")
TARGETS += [
    target("chan ping-pong: ns/hop <= the best fiber runtime's", "chan", "ping-pong T={hops}", "ns_per_hop",
           "treadle", _chan_peers, "<=", 1.0),
    target("chan ping-pong: CPU/hop <= 0.9 x the best fiber runtime's", "chan", "ping-pong T={hops}",
           "cpu_ns_per_hop", "treadle", _chan_peers, "<=", 0.9),
    target("spawn fibers: fibers/s >= the best fiber runtime's", "spawn", "fibers: N={fiber_spawns}, B=1000",
           "fibers_per_s", "treadle", FIBER_RUNTIMES, ">=", 1.0),
    target("spawn fibers: CPU/fiber <= 0.9 x the best fiber runtime's", "spawn", "fibers: N={fiber_spawns}, B=1000",
           "cpu_ns_per_fiber", "treadle", FIBER_RUNTIMES, "<=", 0.9),
    # Each stackful peer at its default stack and at the smallest that runs
    # the workload (st-4k, boost-fiber-16k, may-4k).
    target("idle read: bytes/fiber <= the smallest stackful peer's", "idle", "read F={idle_readers}, peers",
           "bytes_per_fiber", "treadle", ("st", "st-4k", "boost-fiber", "boost-fiber-16k", "may", "may-4k"),
           "<=", 1.0),
    target("idle read, compacted: bytes/fiber <= the smallest stackful peer's", "idle",
           "read F={idle_readers}, peers", "bytes_per_fiber", "treadle-compact",
           ("st", "st-4k", "boost-fiber", "boost-fiber-16k", "may", "may-4k"), "<=", 1.0),
]
for _label in ("C=100 M={echo_messages} B=512", "stream C=1 S={stream_seconds} s B=512"):
    _what = "echo stream" if _label.startswith("stream") else "echo ping-pong"
    TARGETS += [
        target(f"{_what}: msgs/s >= every peer's", "echo", _label, "msgs_per_s", TREADLE_BACKENDS,
               ECHO_PEER_SERVERS, ">=", 1.0),
        target(f"{_what}: server CPU/msg <= 0.9 x the best peer's", "echo", _label, "server_cpu_us_per_msg",
               TREADLE_BACKENDS, ECHO_PEER_SERVERS, "<=", 0.9)]
    # PhotonLibOS's own figures (net-perf, its client, outside this suite) are
    # not targets here: this suite's echo client is another program, whose
    # own CPU bounds the rates it can measure, so an absolute figure of
    # net-perf's compares nothing.  Photon is not packaged for Debian.
# HTTP against the fiber runtimes' servers, one core each: httpd on its better
# back end at least as fast as the best, at no more than 0.9 x its CPU.
for _c in (75, 1000):
    _peers = ("st-1-http", "boost-fiber-1-http", "may-1-http", "monoio-1-http")
    TARGETS += [
        target(f"httpd one core, c={_c}: req/s >= every fiber runtime's", "http", f"c={_c}", "rps",
               ("httpd-1u", "httpd-1"), _peers, ">=", 1.0),
        target(f"httpd one core, c={_c}: CPU/req <= 0.9 x the best fiber runtime's", "http", f"c={_c}",
               "server_cpu_us_per_req", ("httpd-1u", "httpd-1"), _peers, "<=", 0.9)]
# HTTP, one core at 75 connections, and two cores (httpd on uring, its faster
# back end there; the epoll rows run beside them, part of no target).
TARGETS += [
    target("httpd one core, uring: CPU/req <= 0.85 x nginx's", "http", "c=75", "server_cpu_us_per_req",
           "httpd-1u", "nginx-1", "<=", 0.85),
    target("httpd one core: req/s >= 1.2 x Go's", "http", "c=75", "rps", "httpd-1", "go-1-http", ">=", 1.2),
    target("httpd one core: req/s >= nginx's", "http", "c=75", "rps", "httpd-1", "nginx-1", ">=", 1.0),
    target("httpd one core: CPU/req <= Go's", "http", "c=75", "server_cpu_us_per_req", "httpd-1", "go-1-http",
           "<=", 1.0),
    target("httpd one core: CPU/req <= nginx's", "http", "c=75", "server_cpu_us_per_req", "httpd-1", "nginx-1",
           "<=", 1.0),
]
for _place in ("shared", "wrk on CPU 1"):
    for _impl, _mode in (("httpd-2du", "distribute"), ("httpd-2ru", "reuseport")):
        for _c in (75, 1000):
            _what = f"httpd two cores ({_place}), {_mode}, c={_c}"
            _label = f"c={_c} {_place}"
            TARGETS += [
                target(f"{_what}: req/s >= nginx's", "http-2", _label, "rps", _impl, "nginx-2", ">=", 1.0),
                target(f"{_what}: req/s >= 1.5 x Go's", "http-2", _label, "rps", _impl, "go-2-http", ">=", 1.5),
                target(f"{_what}: CPU/req <= nginx's", "http-2", _label, "server_cpu_us_per_req", _impl, "nginx-2",
                       "<=", 1.0),
                target(f"{_what}: CPU/req <= Go's", "http-2", _label, "server_cpu_us_per_req", _impl, "go-2-http",
                       "<=", 1.0),
            ]
for _impl, _mode in (("httpd-2d", "distribute"), ("httpd-2r", "reuseport")):
    for _c in (75, 1000):
        TARGETS.append(target(f"httpd two loops, {_mode}, c={_c}: connections per loop within 1.5 x", "http-2",
                              f"balance c={_c}", "loop_spread", _impl, None, "<=", 1.5))

# Rounds whose figures for one implementation spread more than this (max/min - 1)
# are reported: the machine was probably busy.
SPREAD_WARN = 0.20

# ---------------------------------------------------------------------------

QUICK_BANNER = ("QUICK LOOK: one round at small sizes. It shows that everything runs and roughly where treadle "
                "stands; it is not a measurement (`make bench-full`: medians of 3 interleaved rounds at full sizes).")


def find_binary(build, name):
    """Return the path of an executable called `name` under `build`, or None."""
    for cand in (os.path.join(build, "bench", name), os.path.join(build, name)):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    for dirpath, dirnames, filenames in os.walk(build):
        # (cargo's target directories hold the Rust peers' own copies: never those)
        dirnames[:] = [d for d in dirnames if d != "CMakeFiles" and not (d.startswith("peers-") and d.endswith("-target"))]
        if name in filenames:
            cand = os.path.join(dirpath, name)
            if os.access(cand, os.X_OK):
                return cand
    return None


def parse_result(stdout):
    """The key=value pairs of the one RESULT line in stdout, or None."""
    lines = [l for l in stdout.splitlines() if l.startswith("RESULT ")]
    if len(lines) != 1:
        return None
    out = {}
    for tok in lines[0].split()[1:]:
        k, sep, v = tok.partition("=")
        if not sep:
            continue
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
    return out


def fmt(v):
    if v is None:
        return "—"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}" if v < 1 else f"{v:.2f}"


def fmt_secs(s):
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def load_average():
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


BASELINE = "baseline:"


def add_baseline(e):
    """e with its treadle implementation also taken from the baseline build,
    right after it (so that the ratio column reads baseline / now)."""
    impl = e["impls"][0]
    binary, extra, env = IMPLS[impl]
    if binary != "treadle-bench" and not binary.startswith(SCRIPT):
        return e
    twin = impl + "@baseline"
    # A driver script is the same script, handed the baseline's build.
    IMPLS[twin] = (binary if binary.startswith(SCRIPT) else BASELINE + binary, extra, env)
    e = dict(e)
    e["impls"] = [impl, twin] + [i for i in e["impls"][1:] if i != twin]
    return e


def expected(e, impl, sizes):
    """Seconds one run should take (the baseline twin: as its original)."""
    return e["est"](impl.split("@")[0], sizes)


def ensure_http_tools():
    """wrk and nginx for the HTTP groups: installed with apt-get when missing
    and run as root; otherwise their runs are skipped with a note."""
    missing = [pkg for pkg, tool in (("wrk", "wrk"), ("nginx-light", "nginx"))
               if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}")]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"run.py: installing {' '.join(missing)} for the HTTP groups", file=sys.stderr, flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq"] + missing, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if any(not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}") for t in ("wrk", "nginx")):
            subprocess.run(["apt-get", "update", "-qq"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            subprocess.run(["apt-get", "install", "-y", "-qq"] + missing, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    elif missing:
        print(f"run.py: {' '.join(missing)} not installed: the HTTP runs that need them are skipped "
              f"(apt-get install {' '.join(missing)})", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="build directory (default: build)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of interleaved runs (default: 3; --quick: 1)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run only these groups and/or implementations (repeatable, or comma-separated)")
    ap.add_argument("--quick", action="store_true",
                    help="one round at small sizes: a quick look, not a measurement; never writes the doc")
    ap.add_argument("--duration", type=int, metavar="S", help="HTTP groups: seconds per wrk run (default: 8; "
                    "--quick: 1, and 2 for http-close)")
    ap.add_argument("--conns", metavar="C,...", help="HTTP groups: connection counts (default: 75,1000; "
                    "--quick: 75)")
    ap.add_argument("--write", action="store_true", help="rewrite the doc's sections of the groups that ran")
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "PERFORMANCE.md"))
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run (default: 600)")
    ap.add_argument("--list", action="store_true",
                    help="list the groups, their experiments and expected times, and exit")
    ap.add_argument("--baseline", metavar="DIR",
                    help="also run each treadle-bench workload from the build in DIR (before/after ratios)")
    opts = ap.parse_args()

    check_targets()
    size_idx = 1 if opts.quick else 0
    sizes = {k: v[size_idx] for k, v in SIZES.items()}
    if opts.duration:
        sizes["http_seconds"] = sizes["close_seconds"] = max(1, opts.duration)
    experiments = EXPERIMENTS
    if opts.conns or opts.quick:
        try:
            conns = [int(c) for c in opts.conns.split(",")] if opts.conns else CONNS[1]
        except ValueError:
            ap.error(f"--conns: not a list of numbers: {opts.conns}")
        experiments = [e for e in EXPERIMENTS if e["group"] not in HTTP_GROUPS] + http_experiments(conns)
    groups = list(dict.fromkeys(e["group"] for e in experiments))
    rounds = 1 if opts.quick else max(1, opts.rounds)

    names = [n for arg in opts.only for n in arg.split(",") if n]
    want_groups = [n for n in names if n in groups]
    want_impls = [n for n in names if n in IMPLS]
    unknown = [n for n in names if n not in groups and n not in IMPLS]
    if unknown:
        print(f"run.py: unknown name(s) {', '.join(unknown)}; groups: {', '.join(groups)}; implementations: "
              f"{', '.join(IMPLS)}", file=sys.stderr)
        return 2
    selected = []
    for e in experiments:
        if want_groups and e["group"] not in want_groups:
            continue
        if want_impls:
            keep = [i for i in e["impls"] if i in want_impls]
            if not keep:
                continue
            e = dict(e, impls=keep, also_vs=[x for x in e["also_vs"] if x in keep])
        selected.append(e)
    if opts.baseline:
        selected = [add_baseline(e) for e in selected]
    everything = not names and not opts.baseline

    per_group = {}
    for e in selected:
        per_group[e["group"]] = per_group.get(e["group"], 0) + sum(expected(e, i, sizes) for i in e["impls"])
    if opts.list:
        for e in selected:
            print(f"{e['group']:15} {e['label'].format(**sizes):30} {' '.join(e['impls'])}")
        print()
        for g, s in per_group.items():
            print(f"{g:15} about {fmt_secs(s * rounds)} ({rounds} round{'s' if rounds > 1 else ''})")
        print(f"{'in all':15} about {fmt_secs(sum(per_group.values()) * rounds)}")
        return 0
    if opts.quick and opts.write:
        print("run.py: --quick never writes the doc; ignoring --write", file=sys.stderr)
    if any(e["bench"] in ("http", "balance", "idle", "resume") for e in selected):
        ensure_http_tools()

    # Locate binaries once; a missing one is a note, not an error.
    binaries, missing = {}, set()
    for e in selected:
        for impl in e["impls"]:
            name = IMPLS[impl][0]
            if name not in binaries:
                if name.startswith(SCRIPT):
                    cand = os.path.join(ROOT, "bench", "drivers", name[len(SCRIPT):])
                    binaries[name] = cand if os.access(cand, os.X_OK) else None
                elif name.startswith(BASELINE):
                    binaries[name] = find_binary(opts.baseline, name[len(BASELINE):])
                else:
                    binaries[name] = find_binary(opts.build, name)
            if binaries[name] is None:
                missing.add(impl)
    for impl in sorted(missing):
        print(f"note: {IMPLS[impl][0]} not found under {opts.build}: {impl} skipped")

    todo = [(i, impl) for i, e in enumerate(selected) for impl in e["impls"] if impl not in missing]
    est = {(i, impl): expected(selected[i], impl, sizes) for i, impl in todo}
    total_est = sum(est.values()) * rounds
    if opts.quick:
        print(QUICK_BANNER + "\n")
    print(f"run.py: {len(todo) * rounds} runs ({len(todo)} per round, {rounds} round{'s' if rounds > 1 else ''}) "
          f"in {len(per_group)} group{'s' if len(per_group) > 1 else ''}; expected about {fmt_secs(total_est)} "
          "(the sizes times docs/PERFORMANCE.md's figures; a slower or busier machine takes longer)", flush=True)

    # Other work on a shared machine moves the figures: say how busy it was.
    load = load_average()
    started = datetime.datetime.now(datetime.timezone.utc)
    revision = source_revision()
    print(f"run.py: load average {load} at the start", file=sys.stderr, flush=True)
    samples = {}   # (experiment index, impl) -> list of result dicts
    failures = []  # (experiment, impl, message)
    # Progress: a run takes about as long as the same run in an earlier round;
    # a run not timed yet, what COST expects, scaled by how the runs so far
    # compared with what it expected of them.
    took = {}  # (experiment index, impl) -> seconds of its last run
    n_done, t0 = 0, time.monotonic()
    spent = expected_done = 0.0
    for r in range(rounds):
        done_round = set()
        for i, e in enumerate(selected):
            label = e["label"].format(**sizes)
            args = [a.format(build=os.path.abspath(opts.build), **sizes) for a in e["args"]]
            k = r % len(e["impls"])
            for impl in e["impls"][k:] + e["impls"][:k]:
                if impl in missing:
                    continue
                binary, extra, env = IMPLS[impl]
                cmd = [binaries[binary], e["bench"]] + args + extra
                if binary.startswith(SCRIPT):
                    build = opts.baseline if impl.endswith("@baseline") else opts.build
                    cmd = [sys.executable] + cmd + ["--build", build]
                tag = f"[{r + 1}/{rounds}] {e['group']} {label} {impl}"
                scale = spent / expected_done if expected_done else 1.0
                this_round = sum(took.get(x, est[x] * scale) for x in todo if x not in done_round)
                later = (rounds - r - 1) * sum(took.get(x, est[x] * scale) for x in todo)
                print(f"run.py: {e['group']} {label} {impl}: round {r + 1} of {rounds}, run {n_done + 1} of "
                      f"{len(todo) * rounds}, elapsed {fmt_secs(time.monotonic() - t0)}, about "
                      f"{fmt_secs(this_round + later)} left", file=sys.stderr, flush=True)
                t1 = time.monotonic()
                n_done += 1
                done_round.add((i, impl))
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout,
                                       env=dict(os.environ, **env) if env else None)
                    if p.returncode == 77:  # a driver's "cannot run here": a note, like a missing binary
                        print(f"{tag}: skipped ({p.stdout.strip()[-200:]})", file=sys.stderr, flush=True)
                        continue
                    res = parse_result(p.stdout) if p.returncode == 0 else None
                    err = None if res else (f"exit {p.returncode}: " + (p.stderr.strip() or p.stdout.strip())[-400:])
                except subprocess.TimeoutExpired:
                    res, err = None, f"timed out after {opts.timeout:.0f} s"
                except OSError as ex:
                    res, err = None, str(ex)
                finally:
                    took[(i, impl)] = time.monotonic() - t1
                    if r == 0:
                        spent += took[(i, impl)]
                        expected_done += est[(i, impl)]
                if res is None:
                    failures.append((e, impl, err))
                    print(f"{tag}: FAILED ({err})\n    command: {shlex.join(cmd)}", file=sys.stderr, flush=True)
                    continue
                res["_round"] = r
                samples.setdefault((i, impl), []).append(res)
                vals = " ".join(f"{k}={fmt(res.get(k))}" for k in e["keys"] if isinstance(res.get(k), float))
                print(f"{tag}: {vals}", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - t0
    load_end = load_average()
    print(f"run.py: {n_done} runs in {fmt_secs(elapsed)}; load average {load} at the start, "
          f"{load_end} at the end", file=sys.stderr, flush=True)

    sections = {}
    for g in [g for g in groups if any(e["group"] == g for e in selected)]:
        sections[g] = render_group(g, selected, samples, missing, failures, sizes, rounds)
        base = ", ".join(dict.fromkeys(e["impls"][0] for e in selected if e["group"] == g))
        runs = "quick look, 1 run" if opts.quick else (
            "1 run" if rounds == 1 else f"medians of {rounds} interleaved rounds")
        print(f"\n## {g}: {runs}, ratio = figure / {base}'s in the same round\n")
        print(sections[g])

    print(f"\nLoad average (1 / 5 / 15 min): {load} at the start, {load_end} at the end.")
    for w in spread_warnings(selected, samples, sizes):
        print(f"warning: {w}")
    print()
    verdict_text = verdict(selected, samples, sizes)
    if opts.quick:
        print("## Verdict against the targets: quick look (one round at small sizes, not a measurement)\n")
    else:
        print(f"## Verdict against the targets ({'1 run' if rounds == 1 else f'medians of {rounds} rounds'})\n")
    print(verdict_text)
    print(f"\nElapsed {fmt_secs(elapsed)} (expected about {fmt_secs(total_est)}).")
    if opts.quick:
        print("\n" + QUICK_BANNER)

    if opts.write and not opts.quick:
        machine = machine_table(opts.build, started, revision, load, load_end) if everything else None
        write_doc(opts.doc, sections, rounds, load, started, machine, verdict_text if everything else None)
    return 0


def spread_warnings(selected, samples, sizes):
    """One line per figure whose rounds spread more than SPREAD_WARN."""
    out = []
    for i, e in enumerate(selected):
        for impl in e["impls"]:
            for key in e["keys"]:
                vals = [s[key] for s in samples.get((i, impl), []) if isinstance(s.get(key), float)]
                if len(vals) < 2 or min(vals) <= 0:
                    continue
                spread = max(vals) / min(vals) - 1
                if spread > SPREAD_WARN:
                    out.append(f"{e['group']} {e['label'].format(**sizes)} {impl} {key}: the rounds spread "
                               f"{spread:.0%} (min {fmt(min(vals))}, max {fmt(max(vals))}); the machine was "
                               "probably busy, compare with care")
    return out


def best_by_round(samples, i, key, impls):
    """Round -> the best figure of impls in that round (impl_names); a round
    counts only where every one of them has its figure, so that a failed run
    cannot make a best of the others."""
    names = impl_names(impls)
    pick = max if higher_is_better(key) else min
    per = [{s["_round"]: s[key] for s in samples.get((i, n), []) if isinstance(s.get(key), float)} for n in names]
    rounds = set.intersection(*(set(p) for p in per)) if per else set()
    return {r: pick(p[r] for p in per) for r in rounds}


def paired(samples, i, key, num, den):
    """num's median figure, or with den the median over rounds of num / den."""
    a = best_by_round(samples, i, key, num)
    if den is None:
        return statistics.median(a.values()) if a else None
    b = best_by_round(samples, i, key, den)
    ratios = [a[r] / b[r] for r in a if r in b and b[r]]
    return statistics.median(ratios) if ratios else None


def verdict(selected, samples, sizes):
    """The verdict: each target of TARGETS whose experiment ran."""
    lines = ["| target | figure | measured | met |", "|---|---|---:|---|"]
    met = missed = unmeasured = 0
    for t in TARGETS:
        idx = [i for i, e in enumerate(selected) if e["group"] == t["group"] and e["label"] == t["label"]]
        if not idx or not set(impl_names(t["num"]) + impl_names(t["den"])) <= set(selected[idx[0]]["impls"]):
            continue
        v = paired(samples, idx[0], t["key"], t["num"], t["den"])
        what = (f"{t['key']} {impl_text(t['num'])}" + (f" / {impl_text(t['den'])}" if t["den"] else "")
                + f" {t['op']} {t['bound']:g}")
        if v is None:
            unmeasured += 1
            lines.append(f"| {t['text']} | {what} | — | not measured |")
            continue
        ok = OPS[t["op"]](v, t["bound"])
        met += ok
        missed += not ok
        lines.append(f"| {t['text']} | {what} | {fmt(v) if t['den'] is None else f'{v:.3f}'} | "
                     f"{'yes' if ok else '**no**'} |")
    if met + missed + unmeasured == 0:
        return "No target covers the groups that ran."
    lines.append("")
    lines.append(f"{met} of {met + missed + unmeasured} targets met, {missed} missed, {unmeasured} not measured "
                 "(an implementation not built, or its runs failed).")
    return "\n".join(lines)


def check_targets():
    """Every target names an experiment, key and implementations that exist."""
    for t in TARGETS:
        es = [e for e in EXPERIMENTS if e["group"] == t["group"] and e["label"] == t["label"]]
        assert es, f"target {t['text']!r}: no experiment {t['group']} {t['label']}"
        e = es[0]
        assert t["key"] in e["keys"], f"target {t['text']!r}: {t['key']} is not a key of {t['label']}"
        for impl in impl_names(t["num"]) + impl_names(t["den"]):
            assert impl in e["impls"], f"target {t['text']!r}: {impl} does not run {t['label']}"
        assert t["op"] in OPS, t["op"]
    groups = {e["group"] for e in EXPERIMENTS}
    assert not groups & set(IMPLS), f"names both a group and an implementation: {groups & set(IMPLS)}"


def render_group(group, selected, samples, missing, failures, sizes, rounds):
    """A markdown table: rows are experiment x key, columns implementations."""
    exps = [(i, e) for i, e in enumerate(selected) if e["group"] == group]
    impls = list(dict.fromkeys(impl for _, e in exps for impl in e["impls"]))
    lines = ["| experiment | key | " + " | ".join(impls) + " |",
             "|---|---|" + "---:|" * len(impls)]
    zero_keys = []  # keys such as errors, 0 in every run of the row: the row is left out
    for i, e in exps:
        base_impl = e["impls"][0]
        for key in e["keys"]:
            if key in ZERO_ROWS_LEFT_OUT:
                runs = [s.get(key) for impl in e["impls"] for s in samples.get((i, impl), [])]
                if (runs and all(v == 0.0 for v in runs) and not missing & set(e["impls"]) and
                        all(samples.get((i, impl)) for impl in e["impls"])):
                    zero_keys.append(key)
                    continue
            medians = {}
            for impl in e["impls"]:
                vals = [s[key] for s in samples.get((i, impl), []) if isinstance(s.get(key), float)]
                if vals:
                    medians[impl] = (statistics.median(vals), len(vals))
            base_by_round = {s["_round"]: s[key] for s in samples.get((i, base_impl), [])
                             if isinstance(s.get(key), float)}
            cells = []
            for impl in impls:
                if impl not in e["impls"]:
                    cells.append("")
                elif impl in missing:
                    cells.append("not built")
                elif impl not in medians:
                    cells.append("—" if samples.get((i, impl)) else "failed")
                else:
                    med, n = medians[impl]
                    cell = fmt(med)
                    ratios = [s[key] / base_by_round[s["_round"]] for s in samples[(i, impl)]
                              if isinstance(s.get(key), float) and base_by_round.get(s["_round"])]
                    if impl != base_impl and ratios:
                        cell += f" ({statistics.median(ratios):.2f}×)"
                    if n < rounds:
                        cell += f" [{n} of {rounds} runs]"
                    cells.append(cell)
            lines.append(f"| {e['label'].format(**sizes)} | {key} | " + " | ".join(cells) + " |")
            for other in e.get("also_vs", []):
                other_by_round = {s["_round"]: s[key] for s in samples.get((i, other), [])
                                  if isinstance(s.get(key), float)}
                cells = []
                for impl in impls:
                    ratios = [s[key] / other_by_round[s["_round"]] for s in samples.get((i, impl), [])
                              if isinstance(s.get(key), float) and other_by_round.get(s["_round"])]
                    ok = impl in e["impls"] and impl != other and ratios
                    cells.append(f"{statistics.median(ratios):.2f}×" if ok else "")
                # A row with the first column's ratio alone says again what
                # the other's (×) says: left out.
                if sum(1 for c in cells if c) > 1:
                    lines.append(f"| {e['label'].format(**sizes)} | {key} vs {other} | " + " | ".join(cells) + " |")
    notes = []
    if group in GROUP_NOTES:
        notes.append(GROUP_NOTES[group])
    bases = list(dict.fromkeys(e["impls"][0] for _, e in exps))
    runs = "1 run" if rounds == 1 else f"the median of {rounds} interleaved runs"
    paired_note = "" if rounds == 1 else (" (paired: the median over rounds of the figure over "
                                          f"{', '.join(bases)}'s in the same round)")
    for key in dict.fromkeys(zero_keys):
        notes.append(f"{key}: the rows where it was 0 in every run of every column are left out.")
    notes.append(f"Each cell is {runs}; (×) is the ratio to "
                 f"{', '.join(bases)} in the same row{paired_note}: above 1 means the column spends more, or "
                 "for a rate (…_per_s, rps) does more.")
    for impl in sorted(missing & set(impls)):
        notes.append(f"{impl}: not built on this machine, skipped.")
    for e, impl, err in failures:
        if e["group"] == group:
            notes.append(f"{impl} failed a run of {e['label'].format(**sizes)}: {err.splitlines()[-1] if err else ''}")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in dict.fromkeys(notes))


def _cpuinfo():
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, sep, v = line.partition(":")
                if sep and k.strip() not in info:
                    info[k.strip()] = v.strip()
    except OSError:
        pass
    return info


def machine_line():
    """One line: CPU model and count (also bench/tools/sweep.py's)."""
    return f"{_cpuinfo().get('model name', 'unknown CPU')}, {os.cpu_count()} CPUs"


def _first_line(argv, stream="stdout"):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (p.stdout if stream == "stdout" else p.stderr).strip()
    return text.splitlines()[0] if text else None


def _deb_version(pkg):
    v = _first_line(["dpkg-query", "-W", "-f=${Version}", pkg])
    if not v:
        return None
    return re.sub(r"^\d+:", "", v).split("-")[0].split("+")[0]


def source_revision():
    """The tree's commit, and whether it has uncommitted changes: read when the
    run starts, as the build it measures was made (the tree may change during
    a run of an hour)."""
    rev = _first_line(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    if not rev:
        return None
    dirty = _first_line(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
    return rev + (" with uncommitted changes" if dirty else "")


def machine_table(build, started, revision, load, load_end):
    """The machine, read from it: a markdown table."""
    cpu = _cpuinfo()
    rows = [("date", started.strftime("%Y-%m-%d %H:%M UTC"))]
    if revision:
        rows.append(("treadle", revision))
    model = cpu.get("model name", "unknown")
    detail = ", ".join(f"{k} {cpu[k]}" for k in ("cpu family", "model", "stepping") if k in cpu)
    virt = " (a virtual machine: hypervisor flag set)" if " hypervisor" in " " + cpu.get("flags", "") else ""
    rows.append(("CPU", f"{model}{' (' + detail + ')' if detail else ''}{virt}"))
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    rows.append(("CPUs", f"{os.cpu_count()} online, {usable} usable by the run"))
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(l for l in f if l.startswith("MemTotal:")).split()[1])
        rows.append(("memory", f"{kb / 1024 / 1024:.1f} GiB"))
    except (OSError, StopIteration, ValueError):
        pass
    rows.append(("kernel", f"Linux {platform.release()} {platform.machine()}"))
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        libc = None
    rows.append(("C library", libc or " ".join(platform.libc_ver()).strip() or "unknown"))
    cc, btype = None, None
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_C_COMPILER:"):
                    cc = line.split("=", 1)[1].strip()
                elif line.startswith("CMAKE_BUILD_TYPE:"):
                    btype = line.split("=", 1)[1].strip()
    except OSError:
        pass
    ccv = _first_line([cc, "--version"]) if cc else None
    rows.append(("compiler", f"{ccv or cc or 'unknown'}" + (f", CMAKE_BUILD_TYPE={btype}" if btype else "")
                 + "; benchmarks at -O2"))
    peers = []
    for name, pkg in (("libev", "libev-dev"), ("libuv", "libuv1-dev"), ("libevent", "libevent-dev"),
                      ("hiredis", "libhiredis-dev"), ("libpq", "libpq-dev"), ("PostgreSQL", "postgresql"),
                      ("liburing", "liburing-dev"), ("State Threads", "libst-dev"),
                      ("Boost.Fiber", "libboost-fiber-dev")):
        v = _deb_version(pkg)
        if v:
            peers.append(f"{name} {v}")
    redis = _first_line(["redis-server", "--version"])
    m = re.search(r"v=(\S+)", redis or "")
    if m:
        peers.append(f"redis-server {m.group(1)}")
    nginx = _first_line(["nginx", "-v"], "stderr") or _first_line(["/usr/sbin/nginx", "-v"], "stderr")
    m = re.search(r"nginx/(\S+)", nginx or "")
    if m:
        peers.append(f"nginx {m.group(1)}")
    v = _deb_version("wrk")
    if v:
        peers.append(f"wrk {v}")
    go = _first_line(["go", "version"])
    m = re.search(r"go(\d\S*)", go or "")
    if m:
        peers.append(f"Go {m.group(1)}")
    rustc = _first_line(["rustc", "--version"])
    if rustc:
        crates = []
        for crate in ("tokio", "may", "monoio"):
            try:
                with open(os.path.join(ROOT, "bench", "peers", crate, "Cargo.lock")) as f:
                    m = re.search(rf'name = "{crate}"\nversion = "([^"]+)"', f.read())
                    if m:
                        crates.append(f"{crate} {m.group(1)}")
            except OSError:
                pass
        peers.append(f"rustc {rustc.split()[1]}" + (f" ({', '.join(crates)})" if crates else ""))
    rows.append(("peers", ", ".join(peers) or "none found"))
    rows.append(("load average", f"{load} at the start, {load_end} at the end (1 / 5 / 15 min)"))
    return "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def replace_section(doc, name, body, heading):
    block = f"<!-- BEGIN {name} -->\n{body}\n<!-- END {name} -->"
    pat = re.compile(rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->", re.S)
    if pat.search(doc):
        return pat.sub(lambda _m: block, doc, count=1)
    return doc.rstrip("\n") + f"\n\n## {heading}\n\n{block}\n"


def doc_body(body):
    """A group's table for the doc: without the note on medians and ratios,
    which the doc's "How the figures are taken" says once."""
    # The rows 'key vs X' (ratios to a second column) are printed by run.py
    # only: the doc keeps one table row per figure, within its 500 lines.
    return "\n".join(l for l in body.split("\n")
                     if not l.startswith("- Each cell is ") and not re.match(r"\| [^|]* \| [a-z_0-9]+ vs ", l))


def doc_verdict(verdict_text):
    """The verdict for the doc: per group, how many targets were met, then
    the rows of the targets missed or not measured (the full table is what
    run.py prints)."""
    rows = [l for l in verdict_text.split("\n") if l.startswith("| ") and not l.startswith("| target ")]
    if not rows:
        return verdict_text
    by_text = {t["text"]: t["group"] for t in TARGETS}
    count = {}
    other = []
    for l in rows:
        cells = [c.strip() for c in l.strip("|").split("|")]
        group = by_text.get(cells[0], "?")
        met, total = count.get(group, (0, 0))
        count[group] = (met + (cells[3] == "yes"), total + 1)
        if cells[3] != "yes":
            other.append(l)
    tail = [l for l in verdict_text.split("\n") if l and not l.startswith("|")]
    out = tail + ["", "Met, per group: " + ", ".join(f"{g} {m} of {n}" for g, (m, n) in count.items()) + "."]
    if other:
        out += ["", "Missed or not measured:", "", "| target | figure | measured | met |", "|---|---|---:|---|"] + other
    return "\n".join(out)


def write_doc(path, sections, rounds, load, started, machine, verdict_text):
    try:
        with open(path) as f:
            doc = f.read()
    except FileNotFoundError:
        doc = "# treadle performance\n"
    cmd = shlex.join(["python3"] + [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    stamp = started.strftime("%Y-%m-%d %H:%M UTC")
    n = f"{rounds} round{'s' if rounds != 1 else ''}"
    if machine is not None:  # one run wrote every table: the machine table says when and where
        head = f"`{cmd}`, {n} (the machine, the date and the load of the run: [The machine](#the-machine))."
    else:
        head = (f"`{cmd}`, {n}, {stamp}, on {machine_line()}, Linux {platform.release()}, load average {load} "
                "when the run began.")
    if machine is not None:
        doc = replace_section(doc, "machine", machine, "The machine")
    if verdict_text is not None:
        doc = replace_section(doc, "verdict", f"{head}\n\n{doc_verdict(verdict_text)}", "Verdict")
    for group, body in sections.items():
        doc = replace_section(doc, group, f"{head}\n\n{doc_body(body)}", group)
    with open(path, "w") as f:
        f.write(doc)
    written = ", ".join((["machine", "verdict"] if machine is not None else []) + list(sections))
    print(f"run.py: wrote {written} to {path}")
    if machine is None:
        print("run.py: the machine table and the verdict are written only by a run of every group")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
