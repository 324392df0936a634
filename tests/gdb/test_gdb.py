#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gdb/treadle.py against tests/gdb/gdb_target: attached to a live process,
on core files (of the same state, of a stack overflow, of a process stopped
inside the context switch), with 100,000 fibers, and without debug
information.

usage: test_gdb.py GDB_TARGET TREADLE_PY     (exit 77: gdb cannot run here, or
GDB_TARGET has no debug information, as in a Release build)

tests/gdb/test_gdb_qemu.py runs the same checks on the AArch64 build under
qemu-user; the helpers below are shared with it.
"""
import atexit
import os
import platform
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

TARGET = SCRIPT = None  # set by main(), or by test_gdb_qemu.py
GDB = ["gdb"]            # the debugger and the commands that come before the script
PRE = []
failures = []


def has_debug_info(path):
    """Whether the ELF file at path has a .debug_info section: what
    gdb/treadle.py reads treadle's structures from (a Release build, -O3
    without -g, has none)."""
    with open(path, "rb") as f:
        elf = f.read()
    if elf[:4] != b"\x7fELF":
        return False
    bits64, order = elf[4] == 2, "<" if elf[5] == 1 else ">"
    if bits64:
        shoff, = struct.unpack_from(order + "Q", elf, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", elf, 0x3A)
    else:
        shoff, = struct.unpack_from(order + "I", elf, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", elf, 0x2E)

    def section(i):  # (name offset, file offset, size)
        at = shoff + i * shentsize
        if bits64:
            name, = struct.unpack_from(order + "I", elf, at)
            off, size = struct.unpack_from(order + "QQ", elf, at + 0x18)
        else:
            name, = struct.unpack_from(order + "I", elf, at)
            off, size = struct.unpack_from(order + "II", elf, at + 0x10)
        return name, off, size

    _, strtab, _ = section(shstrndx)
    for i in range(shnum):
        name, _, size = section(i)
        end = elf.index(b"\0", strtab + name)
        if elf[strtab + name:end] == b".debug_info" and size > 0:
            return True
    return False


def skip_without_debug_info(target):
    """The reason to skip (exit 77) when target has no debug information,
    else None."""
    if has_debug_info(target):
        return None
    return ("SKIP: %s has no debug information (.debug_info), which gdb/treadle.py needs: a Release "
            "build; Debug and RelWithDebInfo (the default) have it" % os.path.basename(target))


def check(ok, what, out=""):
    if not ok:
        failures.append(what)
        print("FAIL: %s\n----\n%s\n----" % (what, out[-6000:]))
    else:
        print("ok: %s" % what)


def gdb(args, commands, timeout=300):
    cmd = GDB + ["-nx", "-batch"]
    for c in PRE + ["set python print-stack full", "source " + SCRIPT] + commands:
        cmd += ["-ex", c]
    r = subprocess.run(cmd + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return r.stdout


def start(mode, *extra):
    p = subprocess.Popen([TARGET, mode, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("ready"):
        p.kill()
        raise SystemExit("gdb_target %s did not start: %r %s" % (mode, line, p.stderr.read()))
    return p


def fiber_numbers(out):
    """{name: number for `fiber N`} from info fibers."""
    return {m.group(2): int(m.group(1))
            for m in re.finditer(r'^[ *]\s*(\d+)\s+loop \d+\s+fiber \d+ "([^"]*)"', out, re.M)}


def check_listing(out, where):
    check("Traceback" not in out and "Python Exception" not in out, where + ": no Python error", out)
    expect = [
        r'"main" running ',
        r'"reader" parked on read fd \d+ for [\d.]+s stack \d+/65536 guarded fn reader',
        r'"sleeper" parked on sleep until \d+ \(in [\d.]+s\) for [\d.]+s stack',
        r'"chan-recv" parked on chan recv for ',
        r'"mutex-wait" parked on mutex for ',
        r'"pool-call" parked on blocking for ',
        r'"runnable" runnable stack \d+/65536 guarded fn runnable',
    ]
    for e in expect:
        check(re.search(e, out) is not None, "%s: a line matching %s" % (where, e), out)
    group = re.findall(r'^\s+\d+\s+loop (\d+)\s+fiber \d+ "group main" parked on sleep', out, re.M)
    check(len(set(group)) == 2, where + ": the group's fibers on two loops", out)
    check(len(re.findall(r"^[ *]\s*\d+\s+loop \d+\s+fiber ", out, re.M)) == 9, where + ": nine fibers", out)


def backtrace_commands(nums):
    """What check_backtraces runs, given fiber_numbers of info fibers (or
    "{name}" placeholders, for a script that fills them in itself)."""
    return ["fiber %s" % nums["reader"], "bt", "info locals",
            "fiber %s" % nums["runnable"], "bt",
            "fiber %s" % nums["main"], "bt",
            "fiber none", "fiber apply all -limit 3 bt"]


def check_backtraces(args, where, live, thread_bt=True):
    out = gdb(args, ["info fibers"])
    nums = fiber_numbers(out)
    if len(nums) < 8:
        check(False, where + ": info fibers before bt", out)
        return
    check_backtrace_output(gdb(args, backtrace_commands(nums)), nums, where, thread_bt)


def check_backtrace_output(out, nums, where, thread_bt=True):
    check("Traceback" not in out and "Python Exception" not in out, where + ": bt without Python error", out)
    reader = re.search(r'\[fiber %d: fiber \d+ "reader".*?(?=\[fiber |\Z)' % nums["reader"], out, re.S)
    rb = reader.group(0) if reader else ""
    check(re.search(r"in tdl_read |tdl_read \(fd=", rb) is not None and "reader (arg=" in rb,
          where + ": bt of the fiber parked in tdl_read shows tdl_read and reader()", out)
    check("tdl__ctx_trampoline" in rb and "corrupt stack" not in rb,
          where + ": its bt ends cleanly at the trampoline", rb)
    run = re.search(r'\[fiber %d: fiber \d+ "runnable".*?(?=\[fiber |\Z)' % nums["runnable"], out, re.S)
    check(run is not None and "tdl__ctx_trampoline" in run.group(0),
          where + ": a fiber that never ran shows the trampoline", out)
    if thread_bt:
        check("live_main (" in out, where + ": the running fiber's bt is its thread's", out)
    check(len(re.findall(r"^Fiber \d+ \(", out, re.M)) == 3 and "more fibers not shown: -limit 3" in out,
          where + ": fiber apply all -limit 3", out)


def main():
    global TARGET, SCRIPT
    TARGET, SCRIPT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    why = skip_without_debug_info(TARGET)
    if why:
        print(why)
        return 77
    if shutil.which("gdb") is None:
        print("SKIP: gdb is not installed (Debian: gdb)")
        return 77
    probe = subprocess.run(["gdb", "-nx", "-batch", "-ex", "python print('py-ok')"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if "py-ok" not in probe.stdout:
        print("SKIP: this gdb has no Python")
        return 77
    tmp = tempfile.mkdtemp(prefix="tdl-gdb-")
    atexit.register(shutil.rmtree, tmp, True)  # core files are large: never left behind

    # -- live, attached -------------------------------------------------------
    p = start("live")
    try:
        args = ["-p", str(p.pid)]
        out = gdb(args, ["info fibers"])
        if "ptrace" in out and "Operation not permitted" in out:
            print("SKIP: gdb may not attach here (ptrace refused):\n" + out)
            p.kill()
            return 77
        check_listing(out, "live")
        check_backtraces(args, "live", True)
        # Select a fiber, then let the process run: nothing was written to it.
        nums = fiber_numbers(out)
        out = gdb(args, ["fiber %d" % nums["chan-recv"], "bt 3", "continue&", "interrupt",
                         "info fibers", "detach"])
        check("Traceback" not in out, "live: continue after fiber N, then info fibers", out)
        core = os.path.join(tmp, "live.core")
        out = gdb(args, ["generate-core-file " + core])
        check(os.path.exists(core), "live: gcore wrote a core file", out)
    finally:
        p.stdin.write("go\n")
        p.stdin.flush()
        rest, err = p.communicate(timeout=120)
    check(p.returncode == 0 and "done ok" in rest,
          "live: the program ends every wait correctly after gdb", rest + err)

    # -- the same state, from the core file -----------------------------------
    if os.path.exists(core):
        args = [TARGET, core]
        out = gdb(args, ["info fibers"])
        check_listing(out, "core")
        check("each loop's cached time" in out, "core: times are the loops' cached time", out)
        check_backtraces(args, "core", False)

    # -- a core of a process stopped inside the context switch -------------
    # gdb stops the program at its fifth switch, steps into the middle of it
    # (past the store of the old stack pointer, onto the new stack) and
    # writes the core there: the state a death in the switch leaves.
    steps = 11 if platform.machine() == "x86_64" else 14
    core = os.path.join(tmp, "switch.core")
    out = subprocess.run(["gdb", "-nx", "-batch", "-ex", "break tdl__ctx_switch", "-ex", "ignore 1 4",
                          "-ex", "run live </dev/null >/dev/null", "-ex", "stepi %d" % steps,
                          "-ex", "generate-core-file " + core, "-ex", "kill", TARGET],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300).stdout
    if os.path.exists(core):
        out = gdb([TARGET, core], ["info fibers", "fiber apply all bt 4"])
        check("Traceback" not in out and "Python Exception" not in out, "switch core: no Python error", out)
        check(re.search(r"thread \d+ is inside the context switch: from .* to (fiber \d+|loop \d+'s own)", out)
              is not None, "switch core: names the context being switched to", out)
    else:
        check(False, "switch core: gdb wrote the core", out)

    # -- a stack overflow: the handler's message, a core, the fiber marked ---
    def core_limit():
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    r = subprocess.run([TARGET, "overflow"], cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, preexec_fn=core_limit, timeout=120)
    check(r.returncode == -signal.SIGSEGV, "overflow: the process dies of SIGSEGV", r.stderr)
    check(re.search(r'treadle: fiber \d+ "deep" overflowed its 65536-byte stack', r.stderr) is not None,
          "overflow: the handler's message names the fiber", r.stderr)
    kernel_cores = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("core")]
    core = kernel_cores[0] if kernel_cores else os.path.join(tmp, "overflow.core")
    if not kernel_cores:
        # The kernel's cores go elsewhere here (core_pattern): take the same
        # state with gdb, stopped at the fault.
        subprocess.run(["gdb", "-nx", "-batch", "-ex", "run overflow >/dev/null 2>&1",
                        "-ex", "generate-core-file " + core, "-ex", "kill", TARGET],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    print("overflow core: " + ("the kernel's" if kernel_cores else "gdb's, at the fault"))
    out = gdb([TARGET, core], ["info fibers"])
    check("Traceback" not in out, "overflow core: no Python error", out)
    check(re.search(r'"deep" running .*OVERFLOWED into its guard', out) is not None,
          "overflow core: the fiber is listed as overflowed", out)

    # -- 100,000 fibers ---------------------------------------------------------
    p = start("many", "100000")
    try:
        out = gdb(["-p", str(p.pid)], ["info fibers", "fiber apply all -limit 2 bt 2"], timeout=500)
        n = len(re.findall(r'^\s+\d+\s+loop 1\s+fiber \d+ "" parked on sleep', out, re.M))
        check(n == 100000, "100,000 fibers: each listed (%d)" % n, out[-3000:])
        check("more fibers not shown: -limit 2" in out, "100,000 fibers: fiber apply all -limit 2", out[-3000:])
    finally:
        p.stdin.write("go\n")
        p.stdin.flush()
        p.communicate(timeout=120)

    # -- a compacted fiber: listed as such; `fiber N` says why there is no bt --
    p = start("compact")
    try:
        out = gdb(["-p", str(p.pid)], ["info fibers"])
        check(re.search(r'"idle" parked on park .*compacted \(\d+ bytes at 0x[0-9a-f]+\)', out) is not None,
              "compacted: listed as compacted", out)
        num = fiber_numbers(out).get("idle")
        out = gdb(["-p", str(p.pid)], ["info fibers", "fiber %d" % (num or 0)])
        check("Traceback" not in out and "is compacted: its frames are in a heap copy" in out,
              "compacted: fiber N says where its frames are", out)
    finally:
        p.stdin.write("go\n")
        p.stdin.flush()
        rest = p.communicate(timeout=120)[0]
    check(p.returncode == 0 and "done ok" in rest, "compacted: the fiber wakes intact after gdb", rest)

    # -- without debug information ---------------------------------------------
    stripped = os.path.join(tmp, "gdb_target.nodebug")
    subprocess.run(["objcopy", "--strip-debug", TARGET, stripped], check=True)
    p = subprocess.Popen([stripped, "live"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.readline()
    try:
        out = gdb(["-p", str(p.pid)], ["info fibers", "fiber 1"])
        lines = [line for line in out.splitlines() if line.startswith("treadle:")]
        check("Traceback" not in out and "Python Exception" not in out and len(lines) == 2 and
              all("no debug information" in line for line in lines),
              "no debug information: one line per command", out)
    finally:
        p.stdin.write("go\n")
        p.stdin.flush()
        p.communicate(timeout=120)

    shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failures:\n  %s" % (len(failures), "\n  ".join(failures)))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
