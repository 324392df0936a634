# SPDX-License-Identifier: MIT
"""gdb support for treadle: see every fiber of a live process or a core file.

  info fibers                    every fiber of every loop, one line each, in
                                 tdl_fiber_dump's words
  fiber N                        select fiber N (the number info fibers gives):
                                 bt, frame, up, info locals then show its stack
  fiber                          which fiber is selected
  fiber none                     back to the thread's own stack
  fiber apply all|N... [-limit K] CMD
                                 run CMD (e.g. bt) with each fiber selected

Selecting a fiber writes no register of the process: while one is selected,
an unwinder gives gdb the fiber's saved registers as the caller of the
selected thread's innermost frame (so frame #0 is the thread's own and the
fiber's stack starts at #1).  That works on core files, and `continue` after
`fiber N` resumes the process as it was (the selection is dropped).

The script reads the scheduler's structures by name (tdl__process_scheds,
tdl__sched, tdl__fiber) from the debug information of the build it looks at:
the library must be built with -g (RelWithDebInfo, the default build type).

Load it with `source PREFIX/share/treadle/gdb/treadle.py`; an installed
libtreadle.so has it auto-loaded.
"""
import struct
import time

import gdb
import gdb.unwinder

NO_DEBUG_INFO = ("treadle: no debug information for treadle's scheduler (tdl__fiber); "
                 "rebuild the library with -g (e.g. CMAKE_BUILD_TYPE=RelWithDebInfo) to see fibers")

# Where tdl__ctx_switch left a suspended context's registers, from its saved
# stack pointer (src/fiber/arch/switch_*.S): (register, offset) of the
# caller's registers, the return address as the caller's pc, and how far
# above the saved sp the caller's sp is.
ARCH_X86_64 = {
    "pc": "rip", "sp": "rsp", "fp": "rbp", "arg_from": "rdi", "arg_to": "rsi",
    "saved": [("r15", 8), ("r14", 16), ("r13", 24), ("r12", 32), ("rbx", 40), ("rbp", 48)],
    "ret": 56, "frame": 64,
}
ARCH_AARCH64 = {
    "pc": "pc", "sp": "sp", "fp": "x29", "arg_from": "x0", "arg_to": "x1",
    "saved": [("x%d" % (19 + i), 8 * i) for i in range(10)] + [("x29", 80), ("x30", 88)],
    "ret": 88, "frame": 176,
}

FOREVER = -1  # TDL_FOREVER (treadle.h)
MAX_NODES = 50_000_000  # a list longer than this is taken as corrupt


class NoDebugInfo(Exception):
    pass


def _arch():
    name = gdb.selected_inferior().architecture().name()
    if "x86-64" in name:
        return ARCH_X86_64
    if "aarch64" in name:
        return ARCH_AARCH64
    raise gdb.GdbError("treadle: no fiber support for architecture " + name)


def _eval_int(expr):
    return int(gdb.parse_and_eval(expr))


class Layout:
    """Offsets and sizes of the fields the script reads, from the debug
    information of the build being looked at."""

    def __init__(self):
        try:
            gdb.lookup_type("tdl__fiber")
            gdb.lookup_type("tdl__sched")
            gdb.parse_and_eval("&tdl__process_scheds")
        except gdb.error as e:
            raise NoDebugInfo() from e
        self.ptr = gdb.lookup_type("void").pointer().sizeof
        self.u64 = gdb.lookup_type("unsigned long long")
        self.fields = {}
        for name in ["ctx.sp", "sched", "waits_on", "deadline", "parked_at", "wait_fd", "state",
                     "cancelled", "all.next", "id", "name", "fn", "stack.lo", "stack.size", "stack.guard"]:
            off = _eval_int("(unsigned long)&((tdl__fiber *)0)->%s" % name)
            size = _eval_int("sizeof(((tdl__fiber *)0)->%s)" % name)
            self.fields[name] = (off, size)
        # A loop that compacts idle fibers (tdl_fiber_compact_idle) holds a
        # compacted fiber's frames in a heap copy: its stack reads as zeros.
        for name in ["compacted", "compact_copy", "compact_from", "frames_top"]:
            off = _eval_int("(unsigned long)&((tdl__fiber *)0)->%s" % name)
            size = _eval_int("sizeof(((tdl__fiber *)0)->%s)" % name)
            self.fields[name] = (off, size)
        self.all_off = self.fields["all.next"][0]
        self.ctx_off = _eval_int("(unsigned long)&((tdl__fiber *)0)->ctx")
        self.span = max(o + s for o, s in self.fields.values())
        self.sched_all_off = _eval_int("(unsigned long)&((tdl__sched *)0)->all")
        self.sched_in_process_off = _eval_int("(unsigned long)&((tdl__sched *)0)->in_process")
        self.states = {}
        for word, enum in [("runnable", "TDL__FIBER_RUNNABLE"), ("running", "TDL__FIBER_RUNNING"),
                           ("parked", "TDL__FIBER_PARKED")]:
            self.states[_eval_int(enum)] = word

    def get(self, raw, name, signed=False):
        off, size = self.fields[name]
        return int.from_bytes(raw[off:off + size], "little", signed=signed)


def _read(addr, n):
    return bytes(gdb.selected_inferior().read_memory(addr, n))


def _word(addr):
    return int.from_bytes(_read(addr, 8), "little")


_strings = {}


def _cstring(addr):
    """A static C string (what a fiber waits on), at most 64 bytes."""
    if addr == 0:
        return ""
    s = _strings.get(addr)
    if s is None:
        raw = b""
        for n in (64, 16, 1):
            try:
                raw = _read(addr, n)
                break
            except gdb.MemoryError:
                continue
        s = raw.split(b"\0", 1)[0].decode("utf-8", "replace") if raw else "?"
        _strings[addr] = s
    return s


_symbols = {}


def _symbol(pc):
    s = _symbols.get(pc)
    if s is None:
        s = ""
        try:
            b = gdb.current_progspace().block_for_pc(pc)
            while b is not None and b.function is None:
                b = b.superblock
            if b is not None:
                s = b.function.print_name
        except (gdb.error, RuntimeError):
            pass
        if not s:
            out = gdb.execute("info symbol 0x%x" % pc, to_string=True)
            s = out.split()[0] if out and not out.startswith("No symbol") else "0x%x" % pc
        _symbols[pc] = s
    return s


def _walk(head):
    """Addresses of the nodes of the tdl__list at head."""
    node = _word(head)
    if node == 0:
        return
    n = 0
    while node != head and node != 0:
        yield node
        n += 1
        if n > MAX_NODES:
            gdb.write("treadle: list at 0x%x looks corrupt; stopped after %d nodes\n" % (head, n))
            return
        node = _word(node)


def _target_kind():
    """"native" (a process of this machine), "core", or "remote" (a
    gdbserver or qemu-user's stub: a live process whose clock and /proc are
    not this machine's, or not its own)."""
    inf = gdb.selected_inferior()
    conn = getattr(inf, "connection", None)
    if conn is not None:
        return conn.type if conn.type in ("core", "native") else "remote"
    text = gdb.execute("info target", to_string=True)
    if "core dump" in text:
        return "core"
    return "remote" if "remote" in text.lower() else "native"


class Fiber:
    __slots__ = ("num", "loop_num", "sched", "addr", "id", "name", "state", "waits_on", "fd",
                 "deadline", "parked_at", "sp", "lo", "size", "guard", "fn", "thread", "used",
                 "compacted", "copy", "copy_len",
                 "overflowed", "cancelled")


class Loop:
    __slots__ = ("num", "sched", "loop", "now", "current", "thread", "loop_ctx")


class Snapshot:
    """Every loop and fiber, read once per stop of the process."""

    def __init__(self):
        self.layout = Layout()
        self.arch = _arch()
        L = self.layout
        self.loops = []
        self.fibers = []
        self.switching = []  # (thread, from text, to text)
        kind = _target_kind()
        self.live = kind != "core"
        # Only a process of this machine can have its page map read.
        self.native = kind == "native"
        # "How long": a native process's clock is this machine's
        # CLOCK_MONOTONIC (tdl_now's); a core file, or a remote process
        # (whose machine's clock is not ours), has only each loop's cached time.
        self.clock = time.clock_gettime_ns(time.CLOCK_MONOTONIC) if self.native else None
        head = int(gdb.parse_and_eval("&tdl__process_scheds"))
        threads = self._threads()
        page = 4096
        for node in _walk(head):
            sched = gdb.Value(node - L.sched_in_process_off).cast(gdb.lookup_type("tdl__sched").pointer())
            lp = Loop()
            lp.num = len(self.loops) + 1
            lp.sched = int(sched)
            lp.loop = int(sched["loop"])
            lp.loop_ctx = lp.sched + _eval_int("(unsigned long)&((tdl__sched *)0)->loop_ctx")
            try:
                lp.now = int(sched["loop"]["now"])
            except gdb.error:
                lp.now = None
            if self.clock is not None:
                lp.now = self.clock
            lp.current = int(sched["current"])
            lp.thread = self._owner_thread(sched, threads)
            self.loops.append(lp)
            for fnode in _walk(lp.sched + L.sched_all_off):
                addr = fnode - L.all_off
                try:
                    raw = _read(addr, L.span)
                except gdb.MemoryError:
                    continue
                f = Fiber()
                f.num = len(self.fibers) + 1
                f.loop_num = lp.num
                f.sched = lp
                f.addr = addr
                f.id = L.get(raw, "id")
                off, size = L.fields["name"]
                f.name = raw[off:off + size].split(b"\0", 1)[0].decode("utf-8", "replace")
                f.state = L.states.get(L.get(raw, "state"), "finished")
                parked = f.state == "parked"
                f.waits_on = _cstring(L.get(raw, "waits_on")) if parked else ""
                f.fd = L.get(raw, "wait_fd", signed=True) if parked else -1
                f.deadline = L.get(raw, "deadline", signed=True) if parked else FOREVER
                f.parked_at = L.get(raw, "parked_at", signed=True) if parked else None
                f.sp = L.get(raw, "ctx.sp")
                f.lo = L.get(raw, "stack.lo")
                f.size = L.get(raw, "stack.size")
                f.guard = L.get(raw, "stack.guard")
                f.fn = L.get(raw, "fn")
                f.cancelled = L.get(raw, "cancelled")
                f.compacted = L.get(raw, "compacted") != 0
                f.copy = L.get(raw, "compact_copy")
                f.copy_len = L.get(raw, "frames_top") - L.get(raw, "compact_from") if f.compacted else 0
                f.thread = None
                f.used = None
                f.overflowed = False
                self.fibers.append(f)
        self._place_threads(threads)
        self._stack_use(page)

    # -- threads ---------------------------------------------------------
    def _threads(self):
        """(thread, sp, pc) of every thread of the inferior."""
        out = []
        inf = gdb.selected_inferior()
        keep = gdb.selected_thread()
        keep_frame = None
        try:
            keep_frame = gdb.selected_frame()
        except gdb.error:
            pass
        for th in inf.threads():
            try:
                th.switch()
                fr = gdb.newest_frame()
                sp = int(fr.read_register(self.arch["sp"]))
                pc = int(fr.read_register(self.arch["pc"]))
                out.append((th, sp, pc))
            except gdb.error:
                pass
        if keep is not None:
            keep.switch()
            if keep_frame is not None:
                try:
                    keep_frame.select()
                except gdb.error:
                    pass
        return out

    def _owner_thread(self, sched, threads):
        try:
            owner = int(sched["loop"]["owner"])
        except gdb.error:
            return None
        for th, _, _ in threads:
            try:
                h = th.handle()
            except (gdb.error, RuntimeError, AttributeError):
                continue
            if h is not None and int.from_bytes(bytes(h), "little") == owner:
                return th
        return None

    def _place_threads(self, threads):
        """Which thread is on which fiber's stack (its registers are the
        thread's own), and which thread stopped inside the switch."""
        by_range = sorted(self.fibers, key=lambda f: f.lo)
        los = [f.lo for f in by_range]
        import bisect
        for th, sp, pc in threads:
            i = bisect.bisect_right(los, sp + max((f.guard for f in by_range), default=0)) - 1
            for j in range(i, max(i - 2, -1), -1):
                if j < 0:
                    break
                f = by_range[j]
                if f.lo - f.guard <= sp < f.lo + f.size:
                    f.thread = th
                    f.sp = sp  # its registers are the thread's
                    if sp < f.lo or self._fault_in_guard(th, f):
                        f.overflowed = True
                    break
            self._check_switch(th, pc)

    def _fault_in_guard(self, th, f):
        if f.guard == 0:
            return False
        try:
            keep = gdb.selected_thread()
            th.switch()
            addr = int(gdb.parse_and_eval("$_siginfo._sifields._sigfault.si_addr"))
            keep.switch()
        except (gdb.error, RuntimeError):
            return False
        return f.lo - f.guard <= addr < f.lo

    def _check_switch(self, th, pc):
        try:
            sym = gdb.lookup_global_symbol("tdl__ctx_switch") or gdb.lookup_static_symbol("tdl__ctx_switch")
            start = int(sym.value().address) if sym is not None else None
        except gdb.error:
            start = None
        if start is None:
            try:
                start = _eval_int("(unsigned long)&tdl__ctx_switch")
            except gdb.error:
                return
        # The switch is a few dozen instructions; its end is the next symbol.
        if not (start <= pc < start + 256) or _symbol(pc) != "tdl__ctx_switch":
            return
        keep = gdb.selected_thread()
        th.switch()
        fr = gdb.newest_frame()
        frm = int(fr.read_register(self.arch["arg_from"]))
        to = int(fr.read_register(self.arch["arg_to"]))
        keep.switch()
        self.switching.append((th, self._ctx_name(frm), self._ctx_name(to)))

    def _ctx_name(self, ctx):
        for f in self.fibers:
            if f.addr + self.layout.ctx_off == ctx:
                return "fiber %d (id %d of loop %d)" % (f.num, f.id, f.loop_num)
        for lp in self.loops:
            if lp.loop_ctx == ctx:
                return "loop %d's own context" % lp.num
        return "an unknown context at 0x%x" % ctx

    # -- stacks ------------------------------------------------------------
    def _stack_use(self, page):
        """High-water mark, as tdl__stack_used counts it: from the lowest
        resident page to the top.  A native live process: its page map
        (reading the untouched pages would fault them in).  A core file or a
        remote process: the lowest page below the saved sp that is not all
        zero (on a remote process this reads, and so may fault in, the
        untouched pages)."""
        pagemap = None
        if self.native:
            try:
                pagemap = open("/proc/%d/pagemap" % gdb.selected_inferior().pid, "rb")
            except OSError:
                pagemap = None
        for f in self.fibers:
            if f.size == 0 or f.lo == 0:
                continue
            top = f.lo + f.size
            try:
                if pagemap is not None:
                    n = f.size // page
                    pagemap.seek((f.lo // page) * 8)
                    ents = struct.unpack("<%dQ" % n, pagemap.read(8 * n))
                    used = 0
                    for i, e in enumerate(ents):
                        if e & (1 << 63):
                            used = f.size - i * page
                            break
                    f.used = used
                else:
                    f.used = self._used_from_memory(f, page)
            except (OSError, struct.error, gdb.error):
                f.used = None
        if pagemap is not None:
            pagemap.close()

    def _used_from_memory(self, f, page):
        top = f.lo + f.size
        sp = f.sp if f.lo <= f.sp < top else top
        try:
            mem = _read(f.lo, sp - f.lo)
            first = len(mem) - len(mem.lstrip(b"\0"))
            low = f.lo + first
        except gdb.MemoryError:
            low = sp
            a = f.lo
            while a < sp:
                try:
                    if _read(a, page).strip(b"\0"):
                        low = a
                        break
                except gdb.MemoryError:
                    pass
                a += page
        low = min(low, sp) & ~(page - 1)
        return top - low


def _secs(ns):
    return "%.3fs" % (ns / 1e9)


def describe(f):
    """One line in tdl_fiber_dump's words, and what a debugger adds."""
    s = "fiber %d \"%s\" %s" % (f.id, f.name, f.state)
    if f.waits_on:
        s += " on " + f.waits_on
        if f.fd >= 0:
            s += " fd %d" % f.fd
        if f.deadline != FOREVER:
            s += " until %d" % f.deadline
            if f.sched.now is not None:
                s += " (in %s)" % _secs(f.deadline - f.sched.now)
        if f.parked_at is not None and f.sched.now is not None and f.parked_at > 0:
            s += " for %s" % _secs(f.sched.now - f.parked_at)
    used = "?" if f.used is None else str(f.used)
    s += " stack %s/%d %s" % (used, f.size, "guarded" if f.guard else "unguarded")
    if f.compacted:
        s += " compacted (%d bytes at 0x%x)" % (f.copy_len, f.copy)
    if f.overflowed:
        s += " OVERFLOWED into its guard"
    if f.cancelled:
        s += " cancelled"
    if f.fn:
        s += " fn " + _symbol(f.fn)
    if f.thread is not None:
        s += " [thread %d]" % f.thread.num
    return s


class State:
    snapshot = None
    selected = None  # Fiber


def snapshot(fresh=False):
    if fresh or State.snapshot is None:
        try:
            State.snapshot = Snapshot()
        except NoDebugInfo:
            raise gdb.GdbError(NO_DEBUG_INFO)
    return State.snapshot


class FrameId:
    """A frame's identity for create_unwind_info (gdb.unwinder.FrameId from
    gdb 14 on; any object with sp and pc before)."""

    def __init__(self, sp, pc):
        self.sp = sp
        self.pc = pc


class FiberUnwinder(gdb.unwinder.Unwinder):
    """While a fiber is selected: its saved registers are the caller's of the
    selected thread's innermost frame.  Nothing is written to the process."""

    def __init__(self):
        super().__init__("treadle fibers")
        self.regs = None
        self.ptid = None
        self.thread_regs = None
        self.fiber_sp = 0

    def __call__(self, pending):
        # The thread's innermost real frame (inline frames share it) is the
        # one whose registers are the thread's: its caller becomes the fiber.
        if self.regs is None:
            return None
        th = gdb.selected_thread()
        if th is None or th.ptid != self.ptid:
            return None
        arch = _arch()
        sp = pending.read_register(arch["sp"])
        pc = pending.read_register(arch["pc"])
        if (int(sp), int(pc)) != self.thread_regs:
            return None
        # Its identity is the fiber's saved sp, below every frame of the
        # fiber: gdb stops a backtrace at a caller "inner" to its callee, and
        # the fiber's stack may lie below the thread's.
        info = pending.create_unwind_info(FrameId(gdb.Value(self.fiber_sp).cast(sp.type), pc))
        ul = gdb.lookup_type("unsigned long")
        for reg, val in self.regs.items():
            info.add_saved_register(reg, gdb.Value(val).cast(ul))
        return info


UNWINDER = FiberUnwinder()
gdb.unwinder.register_unwinder(None, UNWINDER, replace=True)


def _deselect():
    if UNWINDER.regs is not None or State.selected is not None:
        UNWINDER.regs = None
        State.selected = None
        gdb.invalidate_cached_frames()


def _on_resume(_event):
    # The process runs again: nothing read before is true any more.
    State.snapshot = None
    _deselect()


def _select(f, quiet=False):
    snap = State.snapshot
    arch = snap.arch
    _deselect()
    if f.thread is not None:
        # On a thread now: its registers are the thread's own.
        gdb.execute("thread %d" % f.thread.num, to_string=True)
        State.selected = f
        if not quiet:
            gdb.write("[fiber %d (%s) runs on thread %d: its registers are the thread's]\n"
                      % (f.num, f.name or "id %d" % f.id, f.thread.num))
        return
    if f.sp == 0:
        raise gdb.GdbError("treadle: fiber %d has no saved context" % f.num)
    if f.compacted:
        # Its frames, saved context included, are in a heap copy until it
        # wakes; its stack reads as zeros.  The unwinder reads the process's
        # memory at the stack's addresses, and the script writes nothing into
        # a process (nor can it into a core file).
        raise gdb.GdbError("treadle: fiber %d is compacted: its frames are in a heap copy of %d bytes at 0x%x "
                           "(they belong at 0x%x) until it wakes; no backtrace"
                           % (f.num, f.copy_len, f.copy, f.sp))
    try:
        words = _read(f.sp, arch["frame"])
    except gdb.MemoryError:
        raise gdb.GdbError("treadle: fiber %d's saved context at 0x%x is not readable" % (f.num, f.sp))
    regs = {}
    for reg, off in arch["saved"]:
        regs[reg] = int.from_bytes(words[off:off + 8], "little")
    regs[arch["pc"]] = int.from_bytes(words[arch["ret"]:arch["ret"] + 8], "little")
    regs[arch["sp"]] = f.sp + arch["frame"]
    if f.sched.thread is not None:
        gdb.execute("thread %d" % f.sched.thread.num, to_string=True)
    gdb.invalidate_cached_frames()
    top = gdb.newest_frame()
    while top.type() == gdb.INLINE_FRAME and top.older() is not None:
        top = top.older()
    UNWINDER.thread_regs = (int(top.read_register(arch["sp"])), int(top.read_register(arch["pc"])))
    UNWINDER.regs = regs
    UNWINDER.fiber_sp = f.sp
    UNWINDER.ptid = gdb.selected_thread().ptid
    State.selected = f
    gdb.invalidate_cached_frames()
    # Select the fiber's innermost frame.
    level, fr = 0, gdb.newest_frame()
    while fr is not None and fr.pc() != regs[arch["pc"]]:
        fr, level = fr.older(), level + 1
    if fr is not None:
        fr.select()
    if not quiet:
        gdb.write("[fiber %d: %s]\n" % (f.num, describe(f)))
        if fr is not None:
            gdb.write("[frames below #%d are the thread's own; the fiber's stack starts at #%d]\n"
                      % (level, level))
        gdb.execute("frame")


def _find(num):
    snap = snapshot()
    if 1 <= num <= len(snap.fibers):
        return snap.fibers[num - 1]
    raise gdb.GdbError("treadle: no fiber %d (info fibers lists %d)" % (num, len(snap.fibers)))


class InfoFibers(gdb.Command):
    """List every fiber of every treadle loop of the process.
Usage: info fibers
One line per fiber: its number for `fiber N`, its loop, then tdl_fiber_dump's
words (id, name, state, what it waits on, fd, deadline, stack used/size),
how long it has been parked and its function.  Times are relative to each
loop's cached time (its `now`, as of its last poll), also on a core file."""

    def __init__(self):
        super().__init__("info fibers", gdb.COMMAND_STATUS)

    def invoke(self, arg, from_tty):
        snap = snapshot(fresh=True)
        if not snap.loops:
            gdb.write("treadle: no loop has a scheduler (no fiber was ever spawned, or not a treadle program)\n")
            return
        gdb.write("(times from %s)\n" % ("the system's monotonic clock" if snap.native else
                                          "each loop's cached time, its last poll: a core file"
                                          if not snap.live else
                                          "each loop's cached time, its last poll: a remote process"))
        for th, frm, to in snap.switching:
            gdb.write("thread %d is inside the context switch: from %s to %s\n" % (th.num, frm, to))
        out = []
        for lp in snap.loops:
            th = " thread %d" % lp.thread.num if lp.thread is not None else ""
            now = " now %d" % lp.now if lp.now is not None else ""
            out.append("loop %d (tdl_loop *) 0x%x%s%s\n" % (lp.num, lp.loop, th, now))
            for f in snap.fibers:
                if f.sched is lp:
                    mark = "*" if State.selected is f else " "
                    out.append("%s%6d  loop %d  %s\n" % (mark, f.num, lp.num, describe(f)))
                    if len(out) >= 4096:
                        gdb.write("".join(out))
                        out = []
        gdb.write("".join(out))


class FiberCommand(gdb.Command):
    """Select a fiber, so that bt, frame and info locals show its stack.
Usage: fiber N | fiber | fiber none | fiber apply all|N... [-limit K] COMMAND
N is the number `info fibers` gives.  Nothing is written to the process:
`continue` is safe and drops the selection."""

    def __init__(self):
        super().__init__("fiber", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        args = gdb.string_to_argv(arg)
        if not args:
            if State.selected is None:
                gdb.write("No fiber selected.\n")
            else:
                gdb.write("[fiber %d: %s]\n" % (State.selected.num, describe(State.selected)))
            return
        if args[0] == "none":
            _deselect()
            return
        if args[0] == "apply":
            return self.apply(arg.split(None, 1)[1] if len(args) > 1 else "")
        try:
            num = int(args[0])
        except ValueError:
            raise gdb.GdbError("usage: fiber N | fiber none | fiber apply all|N... [-limit K] COMMAND")
        _select(_find(num))

    def apply(self, rest):
        words = rest.split()
        if not words:
            raise gdb.GdbError("usage: fiber apply all|N... [-limit K] COMMAND")
        snap = snapshot(fresh=State.selected is None)
        targets, limit, i = [], None, 0
        if words[0] == "all":
            targets = list(snap.fibers)
            i = 1
        else:
            while i < len(words) and words[i].isdigit():
                targets.append(_find(int(words[i])))
                i += 1
        if i < len(words) and words[i] == "-limit":
            if i + 1 >= len(words) or not words[i + 1].isdigit():
                raise gdb.GdbError("fiber apply: -limit takes a number")
            limit = int(words[i + 1])
            i += 2
        cmd = " ".join(words[i:])
        if not targets or not cmd:
            raise gdb.GdbError("usage: fiber apply all|N... [-limit K] COMMAND")
        keep = State.selected
        shown = 0
        try:
            for f in targets:
                if limit is not None and shown >= limit:
                    gdb.write("[%d more fibers not shown: -limit %d]\n" % (len(targets) - shown, limit))
                    break
                gdb.write("\nFiber %d (%s):\n" % (f.num, describe(f)))
                try:
                    _select(f, quiet=True)
                    gdb.execute(cmd)
                except gdb.error as e:
                    gdb.write("treadle: %s\n" % e)
                shown += 1
        finally:
            _deselect()
            if keep is not None:
                _select(keep, quiet=True)


InfoFibers()
FiberCommand()
if not getattr(gdb, "_treadle_hooked", False):
    gdb.events.cont.connect(_on_resume)
    gdb._treadle_hooked = True
