#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""perf record -g of a fiber program: the call chains perf takes by walking
frame pointers (the default build keeps them) end at the fiber's entry,
not in garbage.

`gdb_target spin MS` spins in spin_in_fiber() inside a fiber; perf samples it
on the cpu-clock software event (a virtual machine may have no hardware
counters).  Every sample taken in spin_in_fiber must read, innermost first,
spin_in_fiber <- spinner <- fiber_entry <- tdl__ctx_trampoline_start (or
tdl__ctx_trampoline, the symbol that holds that label) and stop there: the switch gives each new stack a zero frame pointer, and its
trampoline is where a fiber's stack begins.

usage: test_perf.py GDB_TARGET [--frame-pointers | --no-frame-pointers]
    (exit 77: perf is missing or may not sample, or the library was built
    without frame pointers: TDL_FRAME_POINTERS=OFF, the default of a
    Release build; tests/CMakeLists.txt passes the build's setting)
"""
import os
import shutil
import subprocess
import sys
import tempfile

TARGET = os.path.abspath(sys.argv[1])
FRAME_POINTERS = "--no-frame-pointers" not in sys.argv[2:]


def main():
    if not FRAME_POINTERS:
        print("SKIP: the library was built without frame pointers (TDL_FRAME_POINTERS=OFF, the default "
              "of a Release build): perf's frame-pointer call chains cannot reach a fiber's entry")
        return 77
    if shutil.which("perf") is None:
        print("SKIP: perf is not installed (Debian: linux-perf)")
        return 77
    tmp = tempfile.mkdtemp(prefix="tdl-perf-")
    try:
        data = os.path.join(tmp, "perf.data")
        r = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-g", "-o", data,
                            TARGET, "spin", "300"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=300)
        if r.returncode != 0 and ("perf_event_paranoid" in r.stdout or "Permission" in r.stdout or
                                  "not supported" in r.stdout or "No such file" in r.stdout):
            print("SKIP: perf may not sample here:\n" + r.stdout)
            return 77
        if r.returncode != 0 or "spun " not in r.stdout:
            print("FAIL: perf record of gdb_target spin:\n" + r.stdout)
            return 1
        out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, timeout=300).stdout
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # perf script prints a sample's head line, then one frame per line
    # (address, symbol), then a blank line.
    chains, cur = [], None
    for line in out.splitlines():
        if not line.strip():
            if cur:
                chains.append(cur)
            cur = None
        elif line[0].isspace():
            if cur is not None:
                parts = line.split(None, 1)
                cur.append(parts[1].split("+")[0].strip() if len(parts) > 1 else "?")
        else:
            cur = []
    if cur:
        chains.append(cur)
    ours = [c for c in chains if c and c[0] == "spin_in_fiber"]
    if not ours:
        print("FAIL: no sample in spin_in_fiber among %d:\n%s" % (len(chains), out[:4000]))
        return 1
    want = ["spin_in_fiber", "spinner", "fiber_entry", "tdl__ctx_trampoline_start"]
    # The return address lies inside both the trampoline's function symbol and
    # its label tdl__ctx_trampoline_start: which of the two perf prints
    # depends on the layout of the binary's symbol table.  Either is the
    # trampoline.
    bad = [c for c in ours if c[:3] != want[:3] or len(c) != 4 or
           c[3] not in ("tdl__ctx_trampoline_start", "tdl__ctx_trampoline")]
    if bad:
        print("FAIL: %d of %d samples in spin_in_fiber do not read %s; e.g.:\n  %s"
              % (len(bad), len(ours), " <- ".join(want), "\n  ".join(" <- ".join(c) for c in bad[:5])))
        return 1
    print("ok: %d samples in spin_in_fiber, each %s" % (len(ours), " <- ".join(want)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
