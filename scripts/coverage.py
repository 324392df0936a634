#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Coverage of src/ after a test run of a build made with TDL_COVERAGE=ON
(make coverage; CI measures its ASan run), per folder of src/ and in all:
lines, branches and functions, from gcov's counters through gcovr.  Fails
below the floors.

    scripts/coverage.py BUILD_DIR [--json OUT]

The floors only rise: each is what the suite reaches, a little under, so
that a change that leaves code untested fails; raise them as tests are
added.  (The aim: 95 % of lines and 85 % of branches in all, and no folder
under 90 % of lines, as `make coverage` counts them.  An ASan build, which CI
measures, counts some 10 % more branches, the sanitizers' own among them, and
reaches fewer of them: its branch floor sits under the aim.)  Code that no test can
reach (an allocation with no fault-injection site, a call that cannot fail
on what the code just made) is excluded at its lines with a comment that
says why (GCOVR_EXCL_LINE, GCOVR_EXCL_START/STOP).  Children that die of a
signal (the overflow handler's) write their counters first in a coverage
build (TDL_COVERAGE), so they are counted.  A branch counts once for each
place it is in the source: a coverage build makes fiber I/O's helpers, which
other builds inline into each call (src/fd/io.c: FD_FOLDED), once.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Percentages (lines, branches, functions), in all and per folder.
FLOOR_ALL = {"lines": 95.0, "branches": 79.0, "functions": 99.0}
FLOOR_FOLDER_LINES = 90.0


def pct(covered, total):
    return 100.0 * covered / total if total else 100.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--json", help="also write gcovr's per-file summary here")
    o = ap.parse_args()
    if not shutil.which("gcovr"):
        print("coverage: gcovr is not installed (scripts/deps.sh coverage)")
        return 2
    build = pathlib.Path(o.build).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(o.json) if o.json else pathlib.Path(tmp) / "summary.json"
        # The counters of every object under build, for the sources under src/.
        # build is also the search path: gcovr's default, the root, would add
        # the counters of every other build tree under it (build/asan beside
        # build/coverage), mixing runs.
        cmd = ["gcovr", "--root", str(ROOT), "--object-directory", str(build), "--filter", str(ROOT / "src") + "/",
               "--json-summary", str(out), "--json-summary-pretty", "--exclude-unreachable-branches",
               "--exclude-throw-branches",
               # An assert's failing side is a broken invariant: no test can
               # take it without a bug to find.
               "--exclude-branches-by-pattern", r".*\bassert\(",
               "-j", os.environ.get("JOBS", "2"), str(build)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print("coverage: gcovr failed:\n" + p.stdout + p.stderr)
            return 2
        summary = json.loads(out.read_text())
    folders = {}
    for f in summary["files"]:
        parts = pathlib.PurePosixPath(f["filename"]).parts
        folder = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
        agg = folders.setdefault(folder, {k: 0 for k in ("lc", "lt", "bc", "bt", "fc", "ft")})
        agg["lc"] += f["line_covered"]
        agg["lt"] += f["line_total"]
        agg["bc"] += f["branch_covered"]
        agg["bt"] += f["branch_total"]
        agg["fc"] += f["function_covered"]
        agg["ft"] += f["function_total"]
    print(f"{'folder':<16} {'lines':>16} {'branches':>16} {'functions':>14}")
    tot = {k: 0 for k in ("lc", "lt", "bc", "bt", "fc", "ft")}
    bad = []
    for folder in sorted(folders):
        a = folders[folder]
        for k in tot:
            tot[k] += a[k]
        lines = pct(a["lc"], a["lt"])
        print(f"{folder:<16} {lines:6.1f}% {a['lc']:>5}/{a['lt']:<5} {pct(a['bc'], a['bt']):6.1f}% "
              f"{a['bc']:>5}/{a['bt']:<5} {pct(a['fc'], a['ft']):6.1f}% {a['fc']:>4}/{a['ft']:<4}")
        if lines < FLOOR_FOLDER_LINES:
            bad.append(f"{folder}: {lines:.1f}% of lines, under the floor of {FLOOR_FOLDER_LINES}%")
    got = {"lines": pct(tot["lc"], tot["lt"]), "branches": pct(tot["bc"], tot["bt"]),
           "functions": pct(tot["fc"], tot["ft"])}
    print(f"{'src/ in all':<16} {got['lines']:6.1f}% {tot['lc']:>5}/{tot['lt']:<5} {got['branches']:6.1f}% "
          f"{tot['bc']:>5}/{tot['bt']:<5} {got['functions']:6.1f}% {tot['fc']:>4}/{tot['ft']:<4}")
    for k, floor in FLOOR_ALL.items():
        if got[k] < floor:
            bad.append(f"src/ in all: {got[k]:.1f}% of {k}, under the floor of {floor}%")
    for b in bad:
        print("coverage: " + b)
    if not bad:
        print("coverage: every floor holds (scripts/coverage.py says which)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
