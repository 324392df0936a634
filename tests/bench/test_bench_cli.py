#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""treadle-bench's command line: --help on stdout with exit 0 (and for each
workload, without running it), and an unknown workload, an unknown option, a
missing value, a stray argument and a bad value each named on stderr with exit 2.

    tests/bench/test_bench_cli.py BUILD/bench/treadle-bench
"""
import re
import subprocess
import sys

BIN = sys.argv[1]
failures = []


def run(*args):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def check(what, cond, detail=""):
    if not cond:
        failures.append(f"{what}: {detail}")


# The whole usage: every workload and its options, on stdout.
rc, out, err = run("--help")
check("--help exits 0", rc == 0, f"exit {rc}, stderr {err!r}")
check("--help writes nothing on stderr", err == "", repr(err))
workloads = re.findall(r"^treadle-bench (\w+)$", out, re.M)
for w in ("pipes", "timers", "ring", "spawn", "idle", "chan"):
    check(f"--help lists {w}", w in workloads, out[:300])
check("--help lists the pipes options", all(o in out for o in ("--pipes N", "--messages N", "--delay-us N",
                                                                  "--style fiber|callback|watch")), out[:600])
rc2, out2, _ = run("-h")
check("-h is --help", rc2 == 0 and out2 == out)

# WORKLOAD --help: that workload's options, and no run (no RESULT line),
# wherever --help stands among valid options.
for w in workloads:
    rc, out, err = run(w, "--help")
    check(f"{w} --help exits 0", rc == 0, f"exit {rc}, stderr {err!r}")
    check(f"{w} --help prints its options", out.startswith(f"treadle-bench {w}") and "--" in out, out[:200])
    check(f"{w} --help runs nothing", "RESULT" not in out, out[:200])
rc, out, err = run("pipes", "--pipes", "100000", "--messages", "100000000", "--help")
check("pipes OPTIONS --help does not run the benchmark", rc == 0 and "RESULT" not in out and "--delay-us" in out,
      f"exit {rc}, {out[:200]!r}")


def refused(what, args, *named):
    rc, out, err = run(*args)
    check(f"{what} exits 2", rc == 2, f"exit {rc}, stdout {out[:200]!r}, stderr {err!r}")
    check(f"{what} prints no RESULT", "RESULT" not in out, out[:200])
    for n in named:
        check(f"{what} names {n!r}", n in err, repr(err))


refused("no workload", [], "usage")
refused("an unknown workload", ["nosuch"], "nosuch")
refused("an unknown option", ["pipes", "--bogus", "1"], "--bogus")
refused("an unknown --option=value", ["pipes", "--bogus=1"], "--bogus")
refused("an option without its value", ["pipes", "--pipes"], "--pipes")
refused("a stray argument", ["pipes", "stray"], "stray")
refused("a non-number", ["pipes", "--pipes", "12x"], "12x", "--pipes")
refused("a number out of range", ["pipes", "--pipes", "0"], "'0'", "--pipes")
refused("a negative delay", ["pipes", "--delay-us=-1"], "-1", "--delay-us")
refused("a choice not offered", ["pipes", "--style", "threads"], "threads", "--style")
refused("an option of another workload", ["timers", "--pipes", "10"], "--pipes")

# Valid options still run the workload (a tiny run: a few milliseconds).
rc, out, err = run("pipes", "--pipes", "2", "--messages=20", "--delay-us", "0", "--style", "callback")
check("a valid command line runs", rc == 0 and re.search(r"^RESULT .*bench=pipes .*pipes=2 messages=20", out, re.M),
      f"exit {rc}, stdout {out!r}, stderr {err!r}")

# tls-bulk, where libtreadle-tls is built: a tiny transfer arrives whole, in
# writes that are not a multiple of the total.
rc, out, _ = run("tls-bulk", "--help")
if "not built" not in out:
    rc, out, err = run("tls-bulk", "--bytes", "100000", "--chunk", "3000")
    check("tls-bulk moves every byte", rc == 0 and re.search(r"^RESULT .*bench=tls-bulk bytes=100000 chunk=3000 "
                                                            r"tls_version=0x304 ", out, re.M),
          f"exit {rc}, stdout {out!r}, stderr {err!r}")
    refused("tls-bulk with a bad --ktls", ["tls-bulk", "--ktls", "maybe"], "maybe", "--ktls")

for f in failures:
    print("FAIL", f)
print(f"{'FAILED' if failures else 'ok'}: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
