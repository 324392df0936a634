#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gdb/treadle.py on the AArch64 build, under qemu-user: the checks of
test_gdb.py, with gdb-multiarch as the debugger.

  - live: qemu-user's gdb stub (qemu -g PORT) starts the program stopped; gdb
    breaks where every fiber is in place (gdb_target_ready) and runs
    info fibers, fiber N, bt, fiber apply all in that one session (the stub
    takes one debugger per run);
  - inside the context switch: the same, stopped a few instructions into
    tdl__ctx_switch (a live process there: the stub cannot write a core);
  - core files: qemu-user writes the guest's own core on a fatal signal
    (qemu_PROGRAM_DATE-PID.core): of the live state (SIGQUIT), and of a stack
    overflow.

qemu-user's cores leave out the program's read-only segments, and with them
the program headers gdb needs to find where a position-independent
executable was loaded; the build links gdb_target without PIE when cross
compiling (a kernel's core has the headers: native AArch64 needs nothing).

usage: test_gdb_qemu.py GDB_TARGET TREADLE_PY EMULATOR...   (exit 77: no gdb-multiarch,
or GDB_TARGET has no debug information, as in a Release build)
"""
import ast
import atexit
import glob
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gdb as t  # noqa: E402  (the shared checks)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def core_limit():
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def under_stub(emulator, mode, script, tmp):
    """Run `gdb_target mode` under qemu's stub and gdb with script; return
    gdb's output.  The program is killed at the end."""
    port = free_port()
    # stdin at its end: past gdb_target_ready, the program goes on at once
    # (a switch to stop in comes next) instead of waiting for a line.
    prog = subprocess.Popen(emulator + ["-g", str(port), t.TARGET, mode], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
    try:
        cmds = ["target remote 127.0.0.1:%d" % port] + script + ["kill"]
        for _ in range(50):  # the stub listens once qemu has loaded the program
            out = t.gdb([t.TARGET], cmds, timeout=300)
            if "Connection refused" not in out:
                return out
            time.sleep(0.2)
        return out
    finally:
        prog.kill()
        prog.wait()


LIVE_SCRIPT = r'''import re
out = gdb.execute("info fibers", to_string=True)
gdb.write(out)
nums = {m.group(2): int(m.group(1))
        for m in re.finditer(r'^[ *]\s*(\d+)\s+loop \d+\s+fiber \d+ "([^"]*)"', out, re.M)}
gdb.write("NUMS " + repr(nums) + "\n")
for cmd in %s:
    gdb.write(gdb.execute(cmd.format(**nums), to_string=True))
'''


def main():
    t.TARGET, t.SCRIPT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    emulator = sys.argv[3:]
    why = t.skip_without_debug_info(t.TARGET)
    if why:
        print(why)
        return 77
    if shutil.which("gdb-multiarch") is None:
        print("SKIP: gdb-multiarch is not installed (Debian: gdb-multiarch)")
        return 77
    sysroot = emulator[emulator.index("-L") + 1] if "-L" in emulator else "/"
    t.GDB = ["gdb-multiarch"]
    t.PRE = ["set sysroot " + sysroot, "set pagination off", "set confirm off"]
    tmp = tempfile.mkdtemp(prefix="tdl-gdb-qemu-")
    atexit.register(shutil.rmtree, tmp, True)

    # -- live, under the stub -------------------------------------------------
    # The fiber numbers come from info fibers in the same session: the
    # script fills them into test_gdb's commands.
    cmds = t.backtrace_commands({n: "{%s}" % n for n in ("reader", "runnable", "main")})
    script = os.path.join(tmp, "live.py")
    with open(script, "w") as f:
        f.write(LIVE_SCRIPT % repr(cmds))
    out = under_stub(emulator, "live", ["break gdb_target_ready", "continue", "source " + script], tmp)
    t.check_listing(out, "qemu live")
    m = re.search(r"^NUMS (\{.*\})$", out, re.M)
    nums = ast.literal_eval(m.group(1)) if m else {}
    if all(n in nums for n in ("reader", "runnable", "main")):
        t.check_backtrace_output(out, nums, "qemu live")
    else:
        t.check(False, "qemu live: fiber numbers from info fibers", out)

    # -- stopped inside the context switch ----------------------------------
    # From where every fiber is in place (a `continue` that meets a thread
    # being created returns early under the stub), to the next switch.
    out = under_stub(emulator, "live", ["break gdb_target_ready", "continue", "delete",
                                        "break tdl__ctx_switch", "continue", "delete",
                                        "stepi 14", "info fibers", "fiber apply all bt 4"], tmp)
    t.check("Traceback" not in out and "Python Exception" not in out, "qemu switch: no Python error", out)
    t.check(re.search(r"thread \d+ is inside the context switch: from .* to (fiber \d+|loop \d+'s own)", out)
            is not None, "qemu switch: names the context being switched to", out)

    # -- a core of the live state (SIGQUIT: qemu writes the guest's core) -----
    p = subprocess.Popen(emulator + [t.TARGET, "live"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, cwd=tmp, preexec_fn=core_limit)
    line = p.stdout.readline()
    t.check(line.startswith("ready"), "qemu core: the program started", line)
    p.send_signal(signal.SIGQUIT)
    p.wait(timeout=300)
    cores = glob.glob(os.path.join(tmp, "qemu_*.core"))
    if cores:
        args = [t.TARGET, cores[0]]
        out = t.gdb(args, ["info fibers"])
        t.check_listing(out, "qemu core")
        # The running fiber's stack is its thread's own, which gdb unwinds
        # by itself: here from inside libc's read(), and a qemu core names
        # no shared library (no NT_FILE note), so gdb cannot unwind libc.
        t.check_backtraces(args, "qemu core", False, thread_bt=False)
        for c in cores:
            os.unlink(c)
    else:
        t.check(False, "qemu core: qemu wrote the guest's core on SIGQUIT", str(os.listdir(tmp)))
    for f in glob.glob(os.path.join(tmp, "core*")):  # the host's core of qemu itself, if any
        os.unlink(f)

    # -- a stack overflow ---------------------------------------------------------
    r = subprocess.run(emulator + [t.TARGET, "overflow"], cwd=tmp, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, preexec_fn=core_limit, timeout=300)
    t.check(re.search(r'treadle: fiber \d+ "deep" overflowed its 65536-byte stack', r.stderr) is not None,
            "qemu overflow: the handler's message names the fiber", r.stderr)
    cores = glob.glob(os.path.join(tmp, "qemu_*.core"))
    if cores:
        out = t.gdb([t.TARGET, cores[0]], ["info fibers"])
        t.check("Traceback" not in out, "qemu overflow core: no Python error", out)
        t.check(re.search(r'"deep" running .*OVERFLOWED into its guard', out) is not None,
                "qemu overflow core: the fiber is listed as overflowed", out)
    else:
        t.check(False, "qemu overflow: qemu wrote the guest's core", str(os.listdir(tmp)))

    shutil.rmtree(tmp, ignore_errors=True)
    if t.failures:
        print("%d failures:\n  %s" % (len(t.failures), "\n  ".join(t.failures)))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
