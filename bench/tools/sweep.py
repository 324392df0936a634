#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The pipes sweep behind docs/charts: the 2010 GHC I/O manager charts, redrawn.

    python3 bench/tools/sweep.py [--build DIR] [--messages M] [--rounds R] [--delays 0,1000]
                           [--impls a,b,...] [--max-pipes N] [--pipes P1,P2,...] [--out CSV]

The `pipes` workload (docs/BENCHMARKS.md) at P = 100, 120, 144, ... pipes (a factor of
12/10 each step, as in 2010) up to the most the machine allows, at each delay D,
for treadle (callback and fiber style) and every peer whose driver is built.  The
limit: each pipe takes 2 fds, so P stops at (hard RLIMIT_NOFILE - FD_MARGIN) / 2,
and at 100,000 pipes where the limit is higher; the last step is that limit itself.
This script raises its soft limit to the hard one, so every driver inherits it.

Runs are interleaved: within a round every implementation runs each (D, P) step
once, in an order that rotates from round to round; rounds are outermost, so a
slow spell of a shared machine lands on all implementations alike.  Each run
is one row of the CSV (failed runs too, with status=failed), written as it
finishes; bench/tools/charts.py draws the charts from that file alone.  Progress goes
to stderr.  A missing driver is skipped with a note.
"""

import argparse
import csv
import datetime
import os
import platform
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import run  # noqa: E402  (bench/run.py: find_binary, parse_result, machine_line)

ROOT = run.ROOT

# Label -> (driver, extra arguments, extra environment).  The peers run on one
# core, as treadle's one loop does: Go with GOMAXPROCS=1, tokio current_thread.
IMPLS = {
    "treadle-callback": ("treadle-bench", ["--style", "callback"], {}),
    "treadle-fiber": ("treadle-bench", ["--style", "fiber"], {}),
    "libev": ("bench-libev", ["--style", "callback"], {}),
    "libuv": ("bench-libuv", ["--style", "callback"], {}),
    "libevent": ("bench-libevent", ["--style", "callback"], {}),
    "go-1": ("bench-go", [], {"GOMAXPROCS": "1"}),
    "tokio-ct": ("bench-tokio", ["--flavor", "current_thread"], {}),
}

FIRST_PIPES = 100
GROWTH = 1.2
MOST_PIPES = 100_000  # the 2010 charts' right edge
FD_MARGIN = 128       # stdio, epoll fds, eventfds and the runtimes' own (Go, tokio)

# The default message count keeps `make charts` (3 rounds, 7 implementations,
# 27 steps at each of D=0 and D=1000 under a 20,000-fd limit) near 20 minutes on
# this 2-CPU machine.  At D=1000 a run cannot be shorter than M / (P * 1000) s
# (every pipe waits 1 ms per message; P=100: 5 s for 500,000 messages), so the
# D=1000 runs alone take about M * 6e-5 s per implementation and round: with
# 2010's million messages they would take 21 minutes and the whole sweep about
# 35, too close to the 40 minutes `make charts` may take.
DEFAULT_MESSAGES = 500_000

COLUMNS = ["round", "impl", "delay_us", "pipes", "messages", "status", "msgs_per_s", "cpu_us_per_msg",
           "peak_rss_kb", "wall_s", "user_s", "sys_s"]


def pipe_limit():
    """The most pipes one process may open here, after raising the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as ex:
            print(f"sweep: cannot raise RLIMIT_NOFILE to {hard}: {ex}", file=sys.stderr)
            hard = soft
    if hard == resource.RLIM_INFINITY:
        return MOST_PIPES, hard
    return max(1, min(MOST_PIPES, (hard - FD_MARGIN) // 2)), hard


def pipe_steps(most):
    """100, 120, 144, 173, ... (rounded 100 * 1.2^k) up to `most`, then `most`."""
    steps, k = [], 0
    while True:
        p = round(FIRST_PIPES * GROWTH ** k)
        if p > most:
            break
        steps.append(p)
        k += 1
    if not steps or steps[-1] < most:
        steps.append(most)
    return steps


def model_seconds(pipes, delay_us, messages):
    """A rough guess of one run's wall time, for the first round's estimate."""
    floor = messages * delay_us * 1e-6 / pipes  # every pipe waits D per message
    return 0.05 + max(floor, messages * 1.0e-6)


def fmt_s(s):
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def git_commit():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"),
                    help="build directory with treadle-bench and the peers (default: build/release)")
    ap.add_argument("--messages", type=int, default=DEFAULT_MESSAGES,
                    help=f"messages per run (default: {DEFAULT_MESSAGES:,}; 2010 used 1,000,000)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    ap.add_argument("--delays", default="0,1000", help="read delays D in microseconds (default: 0,1000)")
    ap.add_argument("--impls", default=",".join(IMPLS), help=f"implementations (default: {','.join(IMPLS)})")
    ap.add_argument("--max-pipes", type=int, help="stop at this many pipes (default: what the fd limit allows)")
    ap.add_argument("--pipes", help="explicit pipe counts instead of the 12/10 steps, e.g. 100,1000")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "charts", "pipes-sweep.csv"),
                    help="CSV to write (default: docs/charts/pipes-sweep.csv)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run (default: 600)")
    opts = ap.parse_args()

    def bad(msg):
        ap.error(msg)  # exits 2 with the usage

    if opts.messages < 1 or opts.rounds < 1:
        bad("--messages and --rounds must be at least 1")
    try:
        delays = [int(d) for d in opts.delays.split(",") if d]
    except ValueError:
        bad(f"--delays: not a list of integers: {opts.delays!r}")
    if not delays or min(delays) < 0:
        bad("--delays: need delays >= 0")
    impls = [i for i in opts.impls.split(",") if i]
    unknown = [i for i in impls if i not in IMPLS]
    if unknown:
        bad(f"unknown implementation(s) {', '.join(unknown)}; known: {', '.join(IMPLS)}")

    most, hard = pipe_limit()
    if opts.max_pipes is not None:
        if opts.max_pipes < 1:
            bad("--max-pipes must be at least 1")
        if opts.max_pipes > most:
            print(f"sweep: --max-pipes {opts.max_pipes} is above what the fd limit allows ({most}); "
                  f"using {most}", file=sys.stderr)
        most = min(most, opts.max_pipes)
    if opts.pipes:
        try:
            steps = sorted({int(p) for p in opts.pipes.split(",") if p})
        except ValueError:
            bad(f"--pipes: not a list of integers: {opts.pipes!r}")
        if not steps or steps[0] < 1 or steps[-1] > most:
            bad(f"--pipes: each count must be in 1..{most} (the fd limit here)")
    else:
        steps = pipe_steps(most)

    binaries = {}
    for impl in list(impls):
        name = IMPLS[impl][0]
        path = run.find_binary(opts.build, name)
        if path is None:
            print(f"sweep: note: {name} not found under {opts.build}: {impl} skipped", file=sys.stderr)
            impls.remove(impl)
        else:
            binaries[impl] = path
    if not impls:
        print(f"sweep: no driver found under {opts.build} (run `make bench-build`)", file=sys.stderr)
        return 1

    cells = [(d, p) for d in delays for p in steps]
    total_runs = len(cells) * len(impls) * opts.rounds
    os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
    load0 = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    meta = {
        "commit": git_commit(),
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{run.machine_line()}, Linux {platform.release()}",
        "fd_hard_limit": str(hard),
        "messages": str(opts.messages),
        "rounds": str(opts.rounds),
        "pipes": f"{steps[0]}..{steps[-1]} ({len(steps)} steps)",
        "load_average_start": " / ".join(f"{x:.1f}" for x in load0),
        "command": " ".join(["python3", "bench/tools/sweep.py"] + sys.argv[1:]),
    }
    print(f"sweep: {len(impls)} implementations x {len(steps)} pipe counts ({steps[0]}..{steps[-1]}) x "
          f"delays {','.join(map(str, delays))} x {opts.rounds} rounds = {total_runs} runs of "
          f"{opts.messages:,} messages; load average {meta['load_average_start']}", file=sys.stderr)

    measured = {}  # (impl, d, p) -> wall seconds of an earlier round's run
    done_actual = done_model = 0.0
    t0 = time.monotonic()
    n = 0
    failed = 0
    with open(opts.out, "w", newline="") as f:
        for k, v in meta.items():
            f.write(f"# {k}: {v}\n")
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        f.flush()
        for r in range(opts.rounds):
            for i, (d, p) in enumerate(cells):
                order = impls[r % len(impls):] + impls[:r % len(impls)]
                for impl in order:
                    # The estimate: a run already timed in an earlier round
                    # takes as long again; the others follow the model,
                    # scaled by how the model has fared so far.
                    scale = done_actual / done_model if done_model > 0 else 1.0
                    left = 0.0
                    for rr in range(r, opts.rounds):
                        for j, (dd, pp) in enumerate(cells):
                            if rr == r and j < i:
                                continue
                            for im in impls:
                                if (im, dd, pp) in measured:
                                    left += measured[(im, dd, pp)]
                                else:
                                    left += model_seconds(pp, dd, opts.messages) * scale
                    elapsed = time.monotonic() - t0
                    print(f"sweep: step {i + 1}/{len(cells)} (P={p}, D={d}), round {r + 1}/{opts.rounds}, "
                          f"{impl}; run {n + 1}/{total_runs}, elapsed {fmt_s(elapsed)}, "
                          f"about {fmt_s(left)} left", file=sys.stderr, flush=True)
                    binary, extra, env = IMPLS[impl]
                    cmd = [binaries[impl], "pipes", "--pipes", str(p), "--messages", str(opts.messages),
                           "--delay-us", str(d)] + extra
                    t1 = time.monotonic()
                    row = {"round": r + 1, "impl": impl, "delay_us": d, "pipes": p, "messages": opts.messages}
                    try:
                        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout,
                                              env=dict(os.environ, **env))
                        res = run.parse_result(proc.stdout) if proc.returncode == 0 else None
                        err = None if res else f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"
                    except subprocess.TimeoutExpired:
                        res, err = None, f"timed out after {opts.timeout:.0f} s"
                    except OSError as ex:
                        res, err = None, str(ex)
                    took = time.monotonic() - t1
                    measured[(impl, d, p)] = took
                    done_actual += took
                    done_model += model_seconds(p, d, opts.messages)
                    n += 1
                    if res is None:
                        failed += 1
                        row["status"] = "failed"
                        print(f"sweep: {impl} P={p} D={d} FAILED ({err})\n    command: {' '.join(cmd)}",
                              file=sys.stderr, flush=True)
                    else:
                        row["status"] = "ok"
                        for key in COLUMNS[6:]:
                            v = res.get(key)
                            row[key] = v if isinstance(v, float) else ""
                    w.writerow(row)
                    f.flush()
        load1 = os.getloadavg()
        f.write(f"# load_average_end: {' / '.join(f'{x:.1f}' for x in load1)}\n")
        f.write(f"# elapsed: {fmt_s(time.monotonic() - t0)}\n")
    print(f"sweep: {n} runs ({failed} failed) in {fmt_s(time.monotonic() - t0)}; load average "
          f"{meta['load_average_start']} at the start, {' / '.join(f'{x:.1f}' for x in load1)} at the end; "
          f"wrote {opts.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
