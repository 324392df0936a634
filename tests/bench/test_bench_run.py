#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/run.py's tables hold together, so that they cannot rot between runs:
every target names a row, a key and columns that exist (run.py checks that
before anything else), --list prints every group with an expected time, full
and --quick, --only takes groups and implementations and refuses other names,
every driver of bench/drivers/ answers --help, and a table leaves out a row of
errors that are all 0.  Runs nothing measured.

    tests/bench/test_bench_run.py
"""
import importlib.util
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
RUN = os.path.join(ROOT, "bench", "run.py")
GROUPS = ["pipes-callback", "pipes-watch", "timers", "ring", "chan", "idle", "pipes-fiber", "loops", "spawn",
          "blocking", "fs", "fsopen", "responsive", "kv", "hiredis", "uring", "echo", "http", "http-2", "http-close"]
GROUPS += ["kv-tls"]
failures = []


def check(what, cond, detail=""):
    if not cond:
        failures.append(f"{what}: {detail}")
    return cond


def run(*args):
    p = subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


for mode in ([], ["--quick"]):
    rc, out, err = run("--list", *mode)
    if check(f"--list {' '.join(mode)} exits 0", rc == 0, f"exit {rc}: {err[-600:]}"):
        times = dict(re.findall(r"^(\S+)\s+about (\d+m\d+s|\d+h\d+m)", out, re.M))
        for g in GROUPS:
            check(f"--list {' '.join(mode)} has {g} and its expected time", g in times, out[-600:])
        check(f"--list {' '.join(mode)} has a total", "in all" in out, out[-300:])
rc, out, _ = run("--list", "--quick")
m = re.search(r"^in all\s+about (\d+)m(\d+)s", out, re.M)
check("--quick is expected to take a few minutes", m and int(m.group(1)) < 7, out[-200:])

rc, out, err = run("--list", "--only", "httpd-1u,nginx-1")
rows = [l.split() for l in out.splitlines() if l.startswith("http") and " about " not in l]
check("--only IMPL,IMPL keeps those columns", rc == 0 and rows and all(r[-2:] == ["httpd-1u", "nginx-1"] for r in rows),
      out[:400])
rc, out, err = run("--list", "--only", "timers", "--conns", "100")
check("--only GROUP keeps that group", rc == 0 and {l.split()[0] for l in out.splitlines() if l and
                                                    not l.startswith(("in all", "timers "))} <= {"timers"},
      out[:400])
rc, out, err = run("--list", "--only", "no-such-thing")
check("--only of an unknown name exits 2 naming it", rc == 2 and "no-such-thing" in err, f"exit {rc}: {err[:200]}")

# A table leaves out an errors row that is 0 in every run of every column,
# and says so; one nonzero run keeps the row.
spec = importlib.util.spec_from_file_location("bench_run", RUN)
bench_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_run)
exp = {"group": "g", "label": "c={n}", "impls": ["a", "b"], "keys": ["rps", "errors"]}
samples = {(0, impl): [{"_round": r, "rps": 10.0 + r, "errors": 0.0} for r in (1, 2)] for impl in ("a", "b")}
table = bench_run.render_group("g", [exp], samples, set(), [], {"n": 1}, 2)
check("a row of errors that is 0 in every run is left out", "| errors |" not in table and "| rps |" in table, table)
check("...and a note says so", "- errors: the rows where it was 0 in every run" in table, table)
samples[(0, "b")][1]["errors"] = 3.0
table = bench_run.render_group("g", [exp], samples, set(), [], {"n": 1}, 2)
check("a row of errors with one nonzero run stays", "| c=1 | errors | 0 | 1.50 |" in table, table)
check("...and no note says it was left out", "- errors:" not in table, table)

drivers = os.path.join(ROOT, "bench", "drivers")
for name in sorted(os.listdir(drivers)):
    if name.endswith(".py"):
        p = subprocess.run([sys.executable, os.path.join(drivers, name), "--help"], capture_output=True, text=True,
                           timeout=60)
        check(f"drivers/{name} --help", p.returncode == 0 and "usage" in p.stdout, f"exit {p.returncode}: "
              f"{p.stderr[-300:]}")

for f in failures:
    print("FAIL", f)
print(f"{'FAILED' if failures else 'ok'}: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
