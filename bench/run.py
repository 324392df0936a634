#!/usr/bin/env python3
"""Run treadle's benchmarks against its peers, interleaved, and report medians.

Each experiment runs every implementation once per round (A B C A B C ...,
rounds outermost, so that a slow spell of a shared machine is spread over all
implementations instead of landing on one; the order rotates from round to
round, B C A in the second, so that no implementation always runs first,
right after another workload's exit), reads the RESULT line that every
driver prints (docs/BENCHMARKS.md), and takes the median of each key that
matters.  Ratios are peer / treadle, paired: the median over rounds of the
peer's figure divided by treadle's figure of the same round, because the
machine drifts between rounds far more than within one.  Above 1 means
treadle does the unit of work for less.

    python3 bench/run.py [--build DIR] [--rounds R] [--only GROUP ...] [--quick] [--write]
                         [--baseline DIR]

Progress (each run, round i of n, elapsed, estimate left) and each run's
figures go to stderr; stdout gets a heading and a table per group, the load
average at the start and the end with a warning for every figure whose rounds
spread more than 20%, and a closing verdict against the targets (TARGETS).

--baseline DIR adds, beside each treadle column, the same treadle workload
from another build (say, the commit before a refactor), run in the same
interleaved rounds: its ratio to treadle's is the before/after figure.

--write rewrites the group's section of docs/PERFORMANCE.md, between
<!-- BEGIN <group> --> and <!-- END <group> -->.  A missing peer binary is
skipped with a note and a failed run is reported; neither makes this script
fail: benchmarks report numbers, they never fail a build.

To add a workload, add its implementations to IMPLS (if new) and its rows to
EXPERIMENTS; sizes that --quick shrinks go in SIZES and are written as
{name} in the arguments.
"""

import argparse
import datetime
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time

# ---------------------------------------------------------------------------
# The data table.
# ---------------------------------------------------------------------------

# Sizes substituted into experiment arguments: (full run, --quick run).
SIZES = {
    "messages": (1_000_000, 20_000),
    "timers": (1_000_000, 100_000),
    "hops": (10_000_000, 200_000),
    "spawns": (2_000, 100),
    "fibers": (100_000, 10_000),
    "xhops": (10_000_000, 200_000),
    "trips": (1_000_000, 20_000),
    "kv_requests": (300_000, 20_000),
    "calls": (200_000, 5_000),
    "reads": (1_000_000, 20_000),
    "file_mib": (256, 16),
    "seconds": (3, 1),
    "hiredis_commands": (1_000_000, 20_000),
    "hiredis_fibers": (1_000, 100),
    "echo_messages": (1_000_000, 20_000),
}

# Implementation label -> (driver binary found under the build directory,
# extra arguments after the experiment's, extra environment).  The label is
# what tables show; the driver prints its own impl= too.
IMPLS = {
    "treadle": ("treadle-bench", [], {}),
    "treadle-callback": ("treadle-bench", [], {}),
    "treadle-watch": ("treadle-bench", [], {}),
    "treadle-fiber": ("treadle-bench", [], {}),
    "libev": ("bench-libev", [], {}),
    "libuv": ("bench-libuv", [], {}),
    "libevent": ("bench-libevent", [], {}),
    # bench/peers/build-peers.sh puts these in the build directory.
    "go": ("bench-go", [], {}),
    "go-1": ("bench-go", [], {"GOMAXPROCS": "1"}),
    "tokio-ct": ("bench-tokio", ["--flavor", "current_thread"], {}),
    "tokio-mt": ("bench-tokio", ["--flavor", "multi_thread"], {}),
    "treadle-spin": ("treadle-bench", ["--spin", "100000"], {}),
    "floor": ("treadle-bench", ["--floor", "1"], {}),
    "treadle-2-loops": ("treadle-bench", ["--loops", "2"], {}),
    "go-2": ("bench-go", [], {"GOMAXPROCS": "2"}),
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
    # the pipes workload on the uring back end
    "treadle-callback-uring": ("treadle-bench", ["--style", "callback", "--backend", "uring"], {}),
    "treadle-fiber-uring": ("treadle-bench", ["--style", "fiber", "--backend", "uring"], {}),
    "treadle-ops-uring": ("treadle-bench", ["--style", "ops"], {}),
    "pread": ("treadle-bench", ["--engine", "floor"], {}),
    # responsive: the blocking calls through the pool, or made in the fibers
    "treadle-pool": ("treadle-bench", ["--mode", "pool"], {}),
    "treadle-direct": ("treadle-bench", ["--mode", "direct"], {}),
    # Drivers that are scripts in bench/drivers/ (SCRIPT prefix) are handed --build.
    "treadle-kv": ("script:kv_driver.py", ["--server", "kv"], {"TDL_BACKEND": "epoll"}),
    "treadle-kv-uring": ("script:kv_driver.py", ["--server", "kv"], {"TDL_BACKEND": "uring"}),
    "redis-server": ("script:kv_driver.py", ["--server", "redis-server"], {}),
    # hiredis: a fresh redis-server per run (bench/drivers/hiredis_driver.py), then one client program.
    "treadle-hook": ("script:hiredis_driver.py", ["--impl", "treadle-hook"], {}),
    "pthreads": ("script:hiredis_driver.py", ["--impl", "pthreads"], {}),
    "hiredis-libev": ("script:hiredis_driver.py", ["--impl", "hiredis-libev"], {}),
    # echo: one echo server per run, treadle-bench's echo client against it (bench/drivers/echo_driver.py).
    "treadle-uring": ("script:echo_driver.py", ["--server", "treadle-uring"], {}),
    "treadle-epoll": ("script:echo_driver.py", ["--server", "treadle-epoll"], {}),
    "treadle-uring-single": ("script:echo_driver.py", ["--server", "treadle-uring-single"], {}),
    "treadle-uring-sends": ("script:echo_driver.py", ["--server", "treadle-uring-sends"], {}),
    "go-1-server": ("script:echo_driver.py", ["--server", "go-1"], {}),
    "tokio-ct-server": ("script:echo_driver.py", ["--server", "tokio-ct"], {}),
    # ...and the floor: no library, liburing directly (treadle-bench uring-floor).
    "floor-single": ("script:echo_driver.py", ["--server", "floor-single"], {}),
    "floor-multishot": ("script:echo_driver.py", ["--server", "floor-multishot"], {}),
}
SCRIPT = "script:"

FIBER_PEERS = ["go-1", "go", "tokio-ct", "tokio-mt"]

C_PEERS = ["libev", "libuv", "libevent"]


def experiment(group, label, bench, args, impls, keys, note=None):
    """One row of the tables: `impls[0]` is the baseline of the ratios."""
    return {
        "group": group,
        "label": label,
        "bench": bench,
        "args": args.split(),
        "impls": impls,
        "keys": keys,
        "note": note,
    }


EXPERIMENTS = []
for pipes, delay in [(100, 0), (1000, 0), (9000, 0), (1000, 1000), (9000, 1000)]:
    EXPERIMENTS.append(experiment(
        "pipes-callback", f"P={pipes} D={delay}", "pipes",
        f"--pipes {pipes} --messages {{messages}} --delay-us {delay} --style callback",
        ["treadle-callback"] + C_PEERS, ["cpu_us_per_msg"]))
EXPERIMENTS.append(experiment(
    "pipes-watch", "P=1000 D=0", "pipes",
    "--pipes 1000 --messages {messages} --delay-us 0 --style watch",
    ["treadle-watch"] + C_PEERS, ["cpu_us_per_msg"]))
EXPERIMENTS.append(experiment(
    "timers", "add_cancel N={timers}", "timers", "--timers {timers} --mode add_cancel",
    ["treadle"] + C_PEERS, ["ns_per_add", "ns_per_cancel"]))
EXPERIMENTS.append(experiment(
    "timers", "fire N={timers}", "timers", "--timers {timers} --mode fire",
    ["treadle"] + C_PEERS, ["ns_per_timer", "cpu_ns_per_timer"]))

for via in ["wake", "chan"]:
    EXPERIMENTS.append(experiment(
        "ring", f"via {via}, 503 fibers, T={{hops}}", "ring", f"--threads 503 --hops {{hops}} --via {via}",
        ["treadle"] + FIBER_PEERS, ["ns_per_hop", "cpu_ns_per_hop"]))
EXPERIMENTS.append(experiment(
    "chan", "ping-pong T={hops}", "chan", "--hops {hops}",
    ["treadle"] + FIBER_PEERS, ["ns_per_hop", "cpu_ns_per_hop"]))
EXPERIMENTS.append(experiment(
    "idle", "F={fibers}", "idle", "--fibers {fibers}",
    ["treadle"] + FIBER_PEERS, ["bytes_per_fiber"]))
for pipes, delay in [(100, 0), (1000, 0), (9000, 0), (1000, 1000), (9000, 1000)]:
    EXPERIMENTS.append(experiment(
        "pipes-fiber", f"P={pipes} D={delay}", "pipes",
        f"--pipes {pipes} --messages {{messages}} --delay-us {delay}",
        ["treadle-fiber", "treadle-callback"] + FIBER_PEERS, ["cpu_us_per_msg"]))
# treadle-fiber and treadle-callback differ only in --style, added per impl.
IMPLS["treadle-fiber"] = ("treadle-bench", ["--style", "fiber"], {})
IMPLS["treadle-callback-vs-fiber"] = ("treadle-bench", ["--style", "callback"], {})
for e in EXPERIMENTS:
    if e["group"] == "pipes-fiber":
        e["impls"] = ["treadle-fiber", "treadle-callback-vs-fiber"] + FIBER_PEERS
        e["args"] = [a for a in e["args"]]
    if e["group"] in ("ring", "chan", "idle", "pipes-fiber"):
        pass
EXPERIMENTS.append(experiment(
    "loops", "xchan T={xhops}", "xchan", "--hops {xhops}",
    ["treadle", "go-2", "tokio-mt"], ["msgs_per_s", "cpu_ns_per_msg", "wakeups_per_msg"]))
EXPERIMENTS.append(experiment(
    "loops", "pipes P=1000 D=0", "pipes", "--pipes 1000 --messages {messages} --delay-us 0 --style callback",
    ["treadle-callback", "treadle-2-loops"], ["msgs_per_s", "cpu_us_per_msg"]))
EXPERIMENTS.append(experiment(
    "loops", "xping T={trips}", "xping", "--hops {trips}",
    ["treadle", "treadle-spin", "go-2", "floor"], ["ns_per_round_trip", "cpu_ns_per_round_trip"]))
EXPERIMENTS.append(experiment(
    "spawn", "small parent, K={spawns}", "spawn", "--count {spawns}",
    ["treadle", "posix_spawn", "vfork", "fork", "popen"], ["spawns_per_s", "cpu_us_per_spawn"]))
EXPERIMENTS.append(experiment(
    "spawn", "2 GiB parent, K=100", "spawn", "--count 100 --parent-mib 2048",
    ["treadle", "posix_spawn", "vfork", "fork"], ["spawns_per_s", "cpu_us_per_spawn"]))

EXPERIMENTS.append(experiment(
    "blocking", "F=64 N={calls}", "blocking", "--calls {calls} --fibers 64",
    ["treadle", "libuv", "tokio-mt", "tokio-ct"], ["us_per_call", "cpu_us_per_call"]))
# {build} is the build directory: every implementation reads the same file there.
EXPERIMENTS.append(experiment(
    "fs", "C=64 S={file_mib} MiB N={reads}", "fs", "--reads {reads} --fibers 64 --file-mib {file_mib} --dir {build}",
    ["treadle-fs-auto", "treadle-fs-pool", "treadle-fs-direct", "treadle-fs-uring", "go", "libuv", "pread"],
    ["cpu_us_per_read", "reads_per_s", "us_per_read", "pool", "ring", "nowait_miss"]))
EXPERIMENTS.append(experiment(
    "responsive", "F=64 call=10 ms S={seconds} s", "responsive", "--fibers 64 --call-ms 10 --seconds {seconds}",
    ["treadle-pool", "treadle-direct"],
    ["lateness_p50_us", "lateness_p99_us", "lateness_p999_us", "lateness_max_us", "ticks", "calls_done"]))
for clients, pipeline in [(50, 1), (50, 16), (1000, 1)]:
    EXPERIMENTS.append(experiment(
        "kv", f"-c{clients} -P{pipeline}", "kv",
        f"--clients {clients} --pipeline {pipeline} --requests {{kv_requests}}",
        ["treadle-kv", "treadle-kv-uring", "redis-server"], ["rps", "cpu_us_per_req", "reads_per_req"]))
EXPERIMENTS.append(experiment(
    "hiredis", "F={hiredis_fibers} N={hiredis_commands}", "hiredis",
    "--fibers {hiredis_fibers} --commands {hiredis_commands}",
    ["treadle-hook", "pthreads", "hiredis-libev"],
    ["cmds_per_s", "cpu_us_per_cmd", "stalls", "server_cpu_us_per_cmd"]))
# The pipes workload on the uring back end (issue 14), against libev on epoll.
for pipes in (1000, 9000):
    EXPERIMENTS.append(experiment(
        "uring", f"pipes P={pipes} D=0", "pipes", f"--pipes {pipes} --messages {{messages}} --delay-us 0",
        ["treadle-ops-uring", "treadle-fiber-uring", "treadle-callback-uring", "treadle-callback", "libev"],
        ["cpu_us_per_msg"]))
# also_vs: more baselines, each a row of ratios under the figures' row.
EXPERIMENTS.append(dict(experiment(
    "echo", "C=1000 M={echo_messages} B=64", "echo", "--conns 1000 --messages {echo_messages} --size 64",
    ["treadle-uring", "treadle-uring-single", "treadle-uring-sends", "treadle-epoll", "floor-single", "floor-multishot", "go-1-server", "tokio-ct-server"],
    ["msgs_per_s", "server_cpu_us_per_msg", "client_cpu_us_per_msg"]), also_vs=["treadle-epoll"]))

# What each group's section of the doc says about its figures.
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
            "time. go-1 is GOMAXPROCS=1, go the default (2 here); tokio-ct is current_thread, tokio-mt "
            "multi_thread.",
    "chan": "Two fibers pass a value back and forth over one unbuffered channel; a hop is one send and "
            "its receive (tokio: a capacity-1 mpsc per direction). Columns as in ring.",
    "idle": "F fibers each blocked for good on a channel receive; bytes_per_fiber = (VmRSS with all "
            "blocked - VmRSS before) * 1024 / F. treadle: one touched 4 KiB stack page per fiber holds "
            "its control block, its frames and its wait record, plus its slot in the handle table; Go: "
            "a 2 KiB minimum stack plus the goroutine struct; tokio tasks have no stack at all (a "
            "future's state only), so theirs is not a figure for stackful threads.",
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
             "loop spin 100 us before it sleeps (tdl_loop_options.spin); floor is no library: two threads on the two "
             "CPUs pass a counter through two cache lines, spinning, the least a round trip between two "
             "threads costs (Go's goroutines share one thread when they can). pipes: the callback-style pipes "
             "workload on one loop, and split over a group of 2 (treadle-2-loops: 500 pipes and half the "
             "messages each); msgs_per_s is wall time, so the ratio is the speed-up.",
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
          "the loop's thread; pread is one thread calling pread(2) in a loop, no library: the floor. "
          "cpu_us_per_read is CPU time (user+sys, every thread) over N; reads_per_s and us_per_read are "
          "wall time, so for reads_per_s a ratio above 1 means the peer is faster. pool and nowait_miss "
          "(treadle only, tdl_fs_stats_get over the run): reads run on the pool, and of those the ones "
          "RWF_NOWAIT refused first; 0 for auto means the page cache answered every read on the loop's "
          "thread. Targets: treadle-fs-auto's CPU per read at most 1.3 × Go's (go's cpu_us_per_read "
          "ratio ≥ 0.77) and its reads/s at least 3 × libuv's (libuv's reads_per_s ratio ≤ 0.33).",
    "responsive": "64 fibers loop making a 10 ms blocking call (nanosleep) for S seconds while a repeating "
                  "1 ms tdl_timer on the same loop records how late each firing is: CLOCK_MONOTONIC read "
                  "in its callback minus the deadline it fired for (nearest-rank percentiles over every "
                  "firing of a run, in µs). treadle-pool makes the calls through tdl_blocking; "
                  "treadle-direct makes them in the fibers, each then sleeping 1 ns so that the loop gets "
                  "a turn: fibers woken together run back to back, so the timer waits for all 64 calls "
                  "(~640 ms) and fires only a few times (ticks: a repeating timer skips the periods it "
                  "missed). calls_done counts the calls made. Target: treadle-pool's lateness_p99_us "
                  "≤ 1000; treadle-direct's ratio is what the pool saves.",
    "kv": "examples/kv (treadle, one loop, a fiber per connection; treadle-kv on epoll, treadle-kv-uring "
          "on uring, where it receives ahead and sends behind) and redis-server (Debian's 7.0) "
          "under redis-benchmark -t set,get -r 100000, the server pinned to CPU 0 and the client "
          "to CPU 1 (bench/drivers/kv_driver.py). rps: requests/s over both tests (above 1, the peer "
          "served more); cpu_us_per_req: the server's CPU time (user+sys) per request; "
          "reads_per_req: the server's read() calls per request (/proc/PID/io syscr; on uring the kernel "
          "receives, and none are made).",
    "hiredis": "F clients loop { SET key:i v; GET key:i } against a fresh redis-server (Debian's 7.0; "
               "--save '' --appendonly no --maxclients F+100) until N commands are done in all, every "
               "reply checked; the server pinned to CPU 0 and the client to CPU 1 (bench/drivers/hiredis_driver.py). "
               "treadle-hook: F fibers on one loop running hiredis's synchronous API, unmodified, through "
               "libtreadle-hook (bench-hiredis-fibers); pthreads: the same code in F threads of 64 KiB "
               "stacks; hiredis-libev: hiredis's async API on libev (adapters/libev.h), F connections, each "
               "sending its next command from the last one's reply callback. Connections are made before "
               "the clock starts. cmds_per_s is wall time, so a ratio below 1 means the peer is slower; "
               "cpu_us_per_cmd is the client's CPU time (user+sys, every thread) per command; "
               "server_cpu_us_per_cmd the server's over the client's whole run (setup included; clock "
               "ticks of 10 ms). stalls (treadle only): reports of treadle's loop watchdog, threshold 5 ms, "
               "while the commands ran. Targets: pthreads/treadle-hook ≤ 0.5 and hiredis-libev/treadle-hook "
               "≤ 1.25 on cmds_per_s, and 0 stalls.",
    "echo": "C = 1000 TCP connections over loopback to an echo server on one thread of work (a fiber, "
            "goroutine or task per connection, 16 KiB buffer, TCP_NODELAY); each connection sends B bytes and "
            "waits for them back, M round trips in all, every byte checked (bench/drivers/echo_driver.py). The client is "
            "the same for every server: treadle-bench echo on its own epoll loop, pinned to CPU 1, the server to "
            "CPU 0. treadle-uring and treadle-epoll: treadle-bench echo-server on each back end (on uring each "
            "connection receives ahead, tdl_fd_readahead, and sends behind, tdl_fd_writebehind; "
            "treadle-uring-single: with --readahead no, a receive request per read; treadle-uring-sends: with "
            "--writebehind no, a send(2) per answer); go-1-server: "
            "bench-go echo-server with GOMAXPROCS=1; tokio-ct-server: bench-tokio echo-server on the "
            "current_thread runtime. floor-single and floor-multishot are no library: liburing directly, one "
            "thread (treadle-bench uring-floor --mode echo, bench/workloads/bench_uring_floor.c): one ring with "
            "SINGLE_ISSUER and DEFER_TASKRUN, a multishot accept, and per connection either one receive at a time "
            "into its own 16 KiB buffer (single) or a multishot receive from a ring of 4096 provided buffers of "
            "2 KiB (multishot), each message sent back with send(2): what io_uring itself allows on this machine, "
            "the floor under treadle-uring's figures. msgs_per_s is the client's wall time, so above 1 the peer "
            "served faster; "
            "server_cpu_us_per_msg is the server's CPU time (utime+stime of every thread, /proc/PID/stat, clock "
            "ticks of 10 ms) over the timed round trips only (the connections are made and warmed before), per "
            "message; client_cpu_us_per_msg the client's. The rows 'vs treadle-epoll' are the same runs' ratios "
            "to treadle-epoll. Target (issue 14): treadle-uring's msgs/s at least 1.2 x go-1-server's.",
    "uring": "The pipes workload (CPU time per message) on the io_uring back end: treadle-ops-uring is "
             "the callback style on completions (tdl_op: each message's write and the read that takes it are "
             "queued together and completed in one io_uring_enter); treadle-fiber-uring the fiber style, "
             "whose calls are made directly and become ring operations only where they would block (at D=0 "
             "none does); treadle-callback-uring is the watcher style on a uring loop (watchers stay on "
             "epoll: epoll's cost); treadle-callback and libev on epoll in the same rounds. Target (issue "
             "14): CPU/msg at most 0.88 x libev's for the callback (ops) and fiber styles.",
    "spawn": "Start /bin/true K times one after another, waiting for each. cpu_us_per_spawn counts "
             "parent and child CPU. Ratios of spawns_per_s above 1 mean the peer is faster; of "
             "cpu_us_per_spawn, that the peer spends more. With a 2 GiB resident parent fork+exec "
             "copies the page tables; the vfork-style methods do not.",
}

# The targets, from docs/PERFORMANCE.md's summary table and the issues, as
# data: the closing verdict reads only this.  Each compares one figure of one
# experiment (group, label as written in EXPERIMENTS, key): with `den`, the
# paired ratio num / den (the median over rounds of num's figure over den's
# in the same round), else num's own median; `op` and `bound` say what meets
# the target.  Of issue 14's io_uring goals only the echo one is here so far.
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
    target("spawn, 2 GiB parent: spawns/s >= 50 x fork's", "spawn", "2 GiB parent, K=100", "spawns_per_s", "treadle",
           "fork", ">=", 50.0),
    target("xchan (issue 12): msgs/s >= 1.5 x Go's (GOMAXPROCS=2)", "loops", "xchan T={xhops}", "msgs_per_s",
           "treadle", "go-2", ">=", 1.5),
    target("xchan (issue 12): msgs/s >= tokio-mt's", "loops", "xchan T={xhops}", "msgs_per_s", "treadle", "tokio-mt",
           ">=", 1.0),
    target("xchan (issue 12): <= 0.05 wake-ups per message", "loops", "xchan T={xhops}", "wakeups_per_msg", "treadle",
           None, "<=", 0.05),
    target("xping (issue 12), sleeping: round trip <= Go's", "loops", "xping T={trips}", "ns_per_round_trip",
           "treadle", "go-2", "<=", 1.0),
    target("xping (issue 12), spinning: round trip <= Go's", "loops", "xping T={trips}", "ns_per_round_trip",
           "treadle-spin", "go-2", "<=", 1.0),
    target("pipes --loops 2 (issue 12): msgs/s >= 1.8 x one loop's", "loops", "pipes P=1000 D=0", "msgs_per_s",
           "treadle-2-loops", "treadle-callback", ">=", 1.8),
    target("blocking (issue 13): us/call <= libuv's", "blocking", "F=64 N={calls}", "us_per_call", "treadle", "libuv",
           "<=", 1.0),
    target("blocking (issue 13): us/call <= tokio-mt's", "blocking", "F=64 N={calls}", "us_per_call", "treadle",
           "tokio-mt", "<=", 1.0),
    target("fs (issue 13): CPU/read <= 1.3 x Go's", "fs", "C=64 S={file_mib} MiB N={reads}", "cpu_us_per_read",
           "treadle-fs-auto", "go", "<=", 1.3),
    target("fs (issue 13): reads/s >= 3 x libuv's", "fs", "C=64 S={file_mib} MiB N={reads}", "reads_per_s",
           "treadle-fs-auto", "libuv", ">=", 3.0),
    target("responsive (issue 13): p99 lateness <= 1000 us", "responsive", "F=64 call=10 ms S={seconds} s",
           "lateness_p99_us", "treadle-pool", None, "<=", 1000.0),
    target("hiredis (issue 15): cmds/s >= 2 x pthreads'", "hiredis", "F={hiredis_fibers} N={hiredis_commands}",
           "cmds_per_s", "treadle-hook", "pthreads", ">=", 2.0),
    target("hiredis (issue 15): cmds/s >= 0.8 x hiredis-libev's", "hiredis", "F={hiredis_fibers} N={hiredis_commands}",
           "cmds_per_s", "treadle-hook", "hiredis-libev", ">=", 0.8),
    target("hiredis (issue 15): no watchdog stall over 5 ms", "hiredis", "F={hiredis_fibers} N={hiredis_commands}",
           "stalls", "treadle-hook", None, "<=", 0.0),
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
        TARGETS.append(target(f"uring (issue 14) {_impl} P={_p} D=0: CPU/msg <= 0.88 x libev's", "uring",
                              f"pipes P={_p} D=0", "cpu_us_per_msg", _impl, "libev", "<=", 0.88))
TARGETS.append(target("fs (issue 14): uring CPU/read <= Go's", "fs", "C=64 S={file_mib} MiB N={reads}",
                      "cpu_us_per_read", "treadle-fs-uring", "go", "<=", 1.0))
TARGETS.append(target("echo (issue 14): msgs/s >= 1.2 x Go's (GOMAXPROCS=1)", "echo", "C=1000 M={echo_messages} B=64",
                      "msgs_per_s", "treadle-uring", "go-1-server", ">=", 1.2))

# Rounds whose figures for one implementation spread more than this (max/min - 1)
# are reported: the machine was probably busy.
SPREAD_WARN = 0.20

# ---------------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_binary(build, name):
    """Return the path of an executable called `name` under `build`, or None."""
    for cand in (os.path.join(build, "bench", name), os.path.join(build, name)):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    for dirpath, dirnames, filenames in os.walk(build):
        dirnames[:] = [d for d in dirnames if d != "CMakeFiles"]
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


BASELINE = "baseline:"


def add_baseline(e):
    """e with its treadle implementation also taken from the baseline build,
    right after it (so that the ratio column reads baseline / now)."""
    impl = e["impls"][0]
    binary, extra, env = IMPLS[impl]
    if binary != "treadle-bench":
        return e
    twin = impl + "@baseline"
    IMPLS[twin] = (BASELINE + binary, extra, env)
    e = dict(e)
    e["impls"] = [impl, twin] + [i for i in e["impls"][1:] if i != twin]
    return e


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="build directory (default: build)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of interleaved runs (default: 3)")
    ap.add_argument("--only", action="append", default=[], metavar="GROUP",
                    help="run only this group (repeatable, or comma-separated)")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and 1 round, for a smoke test; never writes the doc")
    ap.add_argument("--write", action="store_true", help="rewrite the groups' sections of the doc")
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "PERFORMANCE.md"))
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run (default: 600)")
    ap.add_argument("--list", action="store_true", help="list the groups and experiments and exit")
    ap.add_argument("--baseline", metavar="DIR",
                    help="also run each treadle workload from the build in DIR (before/after ratios)")
    opts = ap.parse_args()

    check_targets()
    groups = list(dict.fromkeys(e["group"] for e in EXPERIMENTS))
    size_idx = 1 if opts.quick else 0
    sizes = {k: v[size_idx] for k, v in SIZES.items()}
    if opts.list:
        for e in EXPERIMENTS:
            print(f"{e['group']:16} {e['label'].format(**sizes):24} {' '.join(e['impls'])}")
        return 0
    only = [g for arg in opts.only for g in arg.split(",") if g]
    unknown = [g for g in only if g not in groups]
    if unknown:
        print(f"run.py: unknown group(s) {', '.join(unknown)}; groups: {', '.join(groups)}", file=sys.stderr)
        return 2
    selected = [e for e in EXPERIMENTS if not only or e["group"] in only]
    if opts.baseline:
        selected = [add_baseline(e) for e in selected]
    rounds = 1 if opts.quick else max(1, opts.rounds)
    if opts.quick and opts.write:
        print("run.py: --quick never writes the doc; ignoring --write")

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

    # Other work on a shared machine moves the figures: say how busy it was.
    load = load_average()
    print(f"run.py: load average {load} at the start", file=sys.stderr, flush=True)
    samples = {}   # (experiment index, impl) -> list of result dicts
    failures = []  # (experiment, impl, message)
    # Progress: a run takes about as long as the same run in an earlier round;
    # a run not timed yet, as long as the runs so far did on average.
    took = {}  # (experiment index, impl) -> seconds of its last run
    todo = [(i, impl) for i, e in enumerate(selected) for impl in e["impls"] if impl not in missing]
    total_runs = len(todo) * rounds
    n_done, t0 = 0, time.monotonic()
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
                    cmd += ["--build", opts.build]
                tag = f"[{r + 1}/{rounds}] {e['group']} {label} {impl}"
                elapsed = time.monotonic() - t0
                mean = sum(took.values()) / len(took) if took else None
                left = None
                if mean is not None:
                    this_round = sum(took.get(x, mean) for x in todo if x not in done_round)
                    left = this_round + (rounds - r - 1) * sum(took.get(x, mean) for x in todo)
                print(f"run.py: {e['group']} {label} {impl}: round {r + 1} of {rounds}, run {n_done + 1} of "
                      f"{total_runs}, elapsed {fmt_secs(elapsed)}, "
                      f"{'about ' + fmt_secs(left) + ' left' if left is not None else 'estimate after the first run'}",
                      file=sys.stderr, flush=True)
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
                if res is None:
                    failures.append((e, impl, err))
                    print(f"{tag}: FAILED ({err})\n    command: {shlex.join(cmd)}", file=sys.stderr, flush=True)
                    continue
                res["_round"] = r
                samples.setdefault((i, impl), []).append(res)
                vals = " ".join(f"{k}={fmt(res.get(k))}" for k in e["keys"] if isinstance(res.get(k), float))
                print(f"{tag}: {vals}", file=sys.stderr, flush=True)
    load_end = load_average()
    print(f"run.py: {n_done} runs in {fmt_secs(time.monotonic() - t0)}; load average {load} at the start, "
          f"{load_end} at the end", file=sys.stderr, flush=True)

    sections = {}
    for g in [g for g in groups if any(e["group"] == g for e in selected)]:
        sections[g] = render_group(g, selected, samples, missing, failures, sizes, rounds)
        base = ", ".join(sorted({e["impls"][0] for e in selected if e["group"] == g}))
        runs = "1 run" if rounds == 1 else f"medians of {rounds} interleaved rounds"
        print(f"\n## {g}: {runs}, ratio = figure / {base}'s in the same round\n")
        print(sections[g])

    print(f"\nLoad average (1 / 5 / 15 min): {load} at the start, {load_end} at the end.")
    for w in spread_warnings(selected, samples, sizes):
        print(f"warning: {w}")
    print()
    print(verdict(selected, samples, sizes))
    if opts.quick:
        print("(--quick: small sizes and 1 round, a smoke test; these figures are no verdict)")

    if opts.write and not opts.quick:
        write_doc(opts.doc, sections, rounds, load)
    return 0


def load_average():
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def fmt_secs(s):
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


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


def paired(samples, i, key, num, den):
    """num's median figure, or with den the median over rounds of num / den."""
    a = {s["_round"]: s[key] for s in samples.get((i, num), []) if isinstance(s.get(key), float)}
    if den is None:
        return statistics.median(a.values()) if a else None
    b = {s["_round"]: s[key] for s in samples.get((i, den), []) if isinstance(s.get(key), float)}
    ratios = [a[r] / b[r] for r in a if r in b and b[r]]
    return statistics.median(ratios) if ratios else None


def verdict(selected, samples, sizes):
    """The closing verdict: each target of TARGETS whose group ran."""
    lines = ["## Verdict against the targets (docs/PERFORMANCE.md's summary table, issues 12-15)", "",
             "| target | figure | measured | met |", "|---|---|---:|---|"]
    met = missed = unmeasured = 0
    for t in TARGETS:
        idx = [i for i, e in enumerate(selected) if e["group"] == t["group"] and e["label"] == t["label"]]
        if not idx:
            continue
        v = paired(samples, idx[0], t["key"], t["num"], t["den"])
        what = f"{t['key']} {t['num']}" + (f" / {t['den']}" if t["den"] else "") + f" {t['op']} {t['bound']:g}"
        if v is None:
            unmeasured += 1
            lines.append(f"| {t['text']} | {what} | — | not measured |")
            continue
        ok = v <= t["bound"] if t["op"] == "<=" else v >= t["bound"]
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
        for impl in (t["num"], t["den"]):
            assert impl is None or impl in e["impls"], f"target {t['text']!r}: {impl} does not run {t['label']}"
        assert t["op"] in ("<=", ">="), t["op"]


def render_group(group, selected, samples, missing, failures, sizes, rounds):
    """A markdown table: rows are experiment x key, columns implementations."""
    exps = [(i, e) for i, e in enumerate(selected) if e["group"] == group]
    impls = list(dict.fromkeys(impl for _, e in exps for impl in e["impls"]))
    lines = ["| experiment | key | " + " | ".join(impls) + " |",
             "|---|---|" + "---:|" * len(impls)]
    for i, e in exps:
        base_impl = e["impls"][0]
        for key in e["keys"]:
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
                lines.append(f"| {e['label'].format(**sizes)} | {key} vs {other} | " + " | ".join(cells) + " |")
    notes = []
    if group in GROUP_NOTES:
        notes.append(GROUP_NOTES[group])
    bases = sorted({e["impls"][0] for _, e in exps})
    runs = "1 run" if rounds == 1 else f"the median of {rounds} interleaved runs"
    paired = "" if rounds == 1 else (" (paired: the median over rounds of the peer's figure over "
                                     f"{', '.join(bases)}'s in the same round)")
    notes.append(f"Each cell is {runs}; (×) is the ratio to "
                 f"{', '.join(bases)} in the same row{paired}: above 1 means the peer spends more.")
    for impl in sorted(missing & set(impls)):
        notes.append(f"{impl}: not built on this machine (its library is not installed), skipped.")
    for e, impl, err in failures:
        if e["group"] == group:
            notes.append(f"{impl} failed a run of {e['label'].format(**sizes)}: {err.splitlines()[-1] if err else ''}")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in dict.fromkeys(notes))


def machine_line():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs"


def write_doc(path, sections, rounds, load):
    try:
        with open(path) as f:
            doc = f.read()
    except FileNotFoundError:
        doc = "# treadle performance\n"
    cmd = shlex.join(["python3"] + sys.argv)
    stamp = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    for group, body in sections.items():
        block = (f"<!-- BEGIN {group} -->\n"
                 f"Measured {stamp} with `{cmd}`, {rounds} round{'s' if rounds != 1 else ''}, on {machine_line()}, "
                 f"`uname -r` {platform.release()}, load average {load} when the run began."
                 f"\n\n{body}\n<!-- END {group} -->")
        pat = re.compile(rf"<!-- BEGIN {re.escape(group)} -->.*?<!-- END {re.escape(group)} -->", re.S)
        if pat.search(doc):
            doc = pat.sub(lambda _m: block, doc, count=1)
        else:
            doc = doc.rstrip("\n") + f"\n\n## {group}\n\n{block}\n"
    with open(path, "w") as f:
        f.write(doc)
    print(f"run.py: wrote {', '.join(sections)} to {path}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
