#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Swapped arguments must not compile (treadle.h, PARAMETERS).

    check_swaps.py --cc gcc|clang [--cxx g++|clang++] [--root DIR] [--update]

With the compiler given (exit 77, skipped, when it is not installed):

 1. tests/api/ok.c, the right calls of tdl_fiber_spawn and tdl_fiber_join
    in every form they take (NULL, 0, a void *, a compound literal with
    commas, the function through a pointer...), compiles with -Wall -Wextra
    -Wpedantic -Werror, as C11 and as GNU C11;
 2. each tests/api/swap_*.c, a call with two arguments swapped, fails to
    compile, without -Werror, and because of the check ("were two arguments
    swapped?" in the compiler's message), not something else;
 3. every public function of include/treadle.h and include/treadle/*.h is
    called the right way, each argument a variable of its parameter's type
    (generated): that compiles with -Werror too; then the same calls with
    each two adjacent arguments swapped, one call per line: the pairs the
    checks refuse must be those tests/api/swaps.txt lists as "refused", and
    the others those it lists as "compiles" (--update writes the list anew;
    each line says why a swap that compiles cannot be told by type);
 4. with --cxx, C++ (which gets no macros): tests/api/ok.cc compiles with
    -Werror, and each swap of tests/api/swap.cc (-DSWAP=n) fails.

What the calls were before the checks (-DTDL_NO_ARG_CHECKS) is printed:
how many of the swaps were errors, warnings, or nothing at all.
Python 3 standard library only.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARK = "were two arguments swapped?"
FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print("FAIL: " + msg)


def compile_c(cc, src, flags, lang="c"):
    """(ok, output) of compiling src (a path) with cc, syntax only."""
    std = [] if any(f.startswith("-std=") for f in flags) else ["-std=c11" if lang == "c" else "-std=c++11"]
    cmd = [cc, "-fsyntax-only", "-I", os.path.join(ROOT, "include")] + std + flags + [src]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode == 0, p.stdout + p.stderr


# ---- the public functions ----------------------------------------------------

def split_params(params):
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [p for p in out if p and p != "void"]


def param_name(p):
    m = re.search(r"\(\s*\*\s*(\w+)\s*\)", p)  # a function pointer: void (*dtor)(void *)
    if m:
        return m.group(1)
    return re.findall(r"\w+", p)[-1]


def renamed(p, new):
    """The declaration p with its name replaced by new."""
    m = re.search(r"\(\s*\*\s*(\w+)\s*\)", p)
    if m:
        return p[:m.start(1)] + new + p[m.end(1):]
    m = list(re.finditer(r"\w+", p))[-1]
    return p[:m.start()] + new + p[m.end():]


def type_of(p):
    """The type of declaration p, without its name (for the list's notes)."""
    return re.sub(r"\s+", " ", renamed(p, "").replace("( *)", "(*)")).strip()


def functions(root):
    """[(header, name, return type, [param declarations])] of every public function."""
    headers = ["include/treadle.h"] + sorted(
        "include/treadle/" + f for f in os.listdir(os.path.join(root, "include/treadle")) if f.endswith(".h"))
    out = []
    for h in headers:
        text = re.sub(r"/\*.*?\*/", " ", open(os.path.join(root, h)).read(), flags=re.S)
        for m in re.finditer(r"TDL_API\s+([^;]*?)\b(tdl_\w+)\s*\((.*?)\)\s*;", text, re.S):
            ret = " ".join(m.group(1).split())
            out.append((h, m.group(2), ret, split_params(" ".join(m.group(3).split()))))
    return out


PRELUDE = """#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <treadle.h>
#include <treadle/hook.h>
#include <treadle/tls.h>
"""


def generate(funcs, swapped):
    """C source calling every function (one definition per line), and what each
    line is: {line: (function, i)} where arguments i and i+1 were swapped."""
    lines = PRELUDE.rstrip("\n").split("\n")
    where = {}
    for _, name, ret, params in funcs:
        decl = ", ".join(renamed(p, "a%d" % (i + 1)) for i, p in enumerate(params)) or "void"
        args = ["a%d" % (i + 1) for i in range(len(params))]
        cast = "" if ret == "void" else "(void)"
        pairs = range(len(params) - 1) if swapped else [None]
        for i in pairs:
            a = list(args)
            if i is not None:
                a[i], a[i + 1] = a[i + 1], a[i]
            fname = "call_%s_%s" % (name, "ok" if i is None else i + 1)
            lines.append("void %s(%s); void %s(%s) { %s%s(%s); }" % (fname, decl, fname, decl, cast, name, ", ".join(a)))
            if i is not None:
                where[len(lines)] = (name, i)
    return "\n".join(lines) + "\n", where


def diagnostics(output, path):
    """{line: [(kind, message)]} of the compiler's diagnostics in path."""
    out = {}
    base = re.escape(os.path.basename(path))
    for m in re.finditer(r"^(?:.*/)?" + base + r":(\d+):\d+: (error|warning): (.*)$", output, re.M):
        out.setdefault(int(m.group(1)), []).append((m.group(2), m.group(3)))
    return out


def why_not(ta, tb):
    """Why a swap of parameters of types ta and tb cannot be told by type."""
    ptr = lambda t: "*" in t or t.endswith("_fn") or t.endswith("_cb")
    if ta == tb:
        return "same type (%s)" % ta
    if not ptr(ta) and not ptr(tb):
        return "both numbers (%s, %s)" % (ta, tb)
    if "void *" in (ta, tb) or "const void *" in (ta, tb):
        return "data (a void *) may be any pointer, and a typed pointer may come as a void * (%s, %s)" % (ta, tb)
    if "char *" in ta and "char *" in tb:
        return "both strings (%s, %s)" % (ta, tb)
    return "(%s, %s)" % (ta, tb)


# ---- the steps ---------------------------------------------------------------

def hand_files(cc, is_clang, d):
    for std in ("-std=c11", "-std=gnu11"):
        ok, out = compile_c(cc, os.path.join(d, "ok.c"), [std, "-Wall", "-Wextra", "-Wpedantic", "-Werror"])
        if not ok:
            fail("ok.c (%s) does not compile:\n%s" % (std, out))
    print("ok.c: the right calls compile with -Wall -Wextra -Wpedantic -Werror (C11, GNU C11)")
    for f in sorted(os.listdir(d)):
        if not (f.startswith("swap_") and f.endswith(".c")):
            continue
        ok, out = compile_c(cc, os.path.join(d, f), [])
        if ok:
            fail("%s compiles: the swap is not refused" % f)
            continue
        if MARK not in out:
            fail("%s fails, but not because of the argument checks:\n%s" % (f, out))
            continue
        msgs = sorted(set(m.group(1) for m in re.finditer(r"\"(tdl_\w+: argument [^\"]*)\"", out)))
        before_ok, before = compile_c(cc, os.path.join(d, f), ["-DTDL_NO_ARG_CHECKS"])
        warned = len(re.findall(r": warning: ", before))
        was = ("an error" if not before_ok else
               "%d warning%s" % (warned, "" if warned == 1 else "s") if warned else "not even a warning")
        print("%s: refused (without the checks: %s)" % (f, was))
        for m in msgs:
            print("    " + m.replace("\\'", "'"))


def cxx_files(cxx, d):
    ok, out = compile_c(cxx, os.path.join(d, "ok.cc"), ["-Wall", "-Wextra", "-Werror"], lang="c++")
    if not ok:
        fail("ok.cc does not compile:\n" + out)
    else:
        print("ok.cc: the right calls compile in C++ with -Wall -Wextra -Werror")
    for n in range(1, 6):
        ok, out = compile_c(cxx, os.path.join(d, "swap.cc"), ["-DSWAP=%d" % n], lang="c++")
        if ok:
            fail("swap.cc -DSWAP=%d compiles in C++" % n)
    print("swap.cc: C++ refuses the five swaps on its own")


def every_function(cc, is_clang, golden, update):
    funcs = functions(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        ok_src, _ = generate(funcs, False)
        ok_path = os.path.join(tmp, "all_ok.c")
        open(ok_path, "w").write(ok_src)
        ok, out = compile_c(cc, ok_path, ["-Wall", "-Wextra", "-Wpedantic", "-Werror"])
        if not ok:
            fail("the right calls of every public function do not compile:\n" + out)
        else:
            print("all_ok.c: %d public functions called the right way compile with -Werror" % len(funcs))
        src, where = generate(funcs, True)
        path = os.path.join(tmp, "all_swaps.c")
        open(path, "w").write(src)
        limit = ["-ferror-limit=0"] if is_clang else ["-fmax-errors=0", "-ftrack-macro-expansion=0"]
        _, out = compile_c(cc, path, limit)
        after = diagnostics(out, path)
        _, out0 = compile_c(cc, path, limit + ["-DTDL_NO_ARG_CHECKS"])
        before = diagnostics(out0, path)
    rows, counts = [], {"refused": 0, "compiles": 0}
    was = {"error": 0, "warning": 0, "nothing": 0}
    other = []
    params = {name: ps for _, name, _, ps in funcs}
    for line, (name, i) in sorted(where.items(), key=lambda kv: kv[0]):
        ps = params[name]
        a, b = param_name(ps[i]), param_name(ps[i + 1])
        d = after.get(line, [])
        ours = any(k == "error" and MARK in msg for k, msg in d)
        if any(k == "error" and MARK not in msg for k, msg in d) and not ours:
            other.append("%s %s,%s: %s" % (name, a, b, "; ".join(msg for k, msg in d if k == "error")))
        verdict = "refused" if ours else "compiles"
        counts[verdict] += 1
        kinds = [k for k, _ in before.get(line, [])]
        was["error" if "error" in kinds else "warning" if "warning" in kinds else "nothing"] += 1
        note = "" if ours else "  # " + why_not(type_of(ps[i]), type_of(ps[i + 1]))
        rows.append(("%s %s,%s %s" % (name, a, b, verdict), note))
    for o in other:
        fail("a swap fails for another reason than the checks: " + o)
    print("every adjacent pair of every public function swapped: %d pairs; before the checks %d were errors, "
          "%d warnings, %d said nothing; now %d are refused, %d compile (types cannot tell them apart)"
          % (len(rows), was["error"], was["warning"], was["nothing"], counts["refused"], counts["compiles"]))
    text = ("# Generated by tests/api/check_swaps.py --update: each two adjacent parameters of every public\n"
            "# function, swapped, and whether the argument checks refuse that call (treadle.h, PARAMETERS).\n"
            "# A pair that compiles says why its types cannot tell the swap.\n"
            + "".join(r + n + "\n" for r, n in rows))
    if update:
        open(golden, "w").write(text)
        print("wrote " + golden)
        return
    want = {}
    for ln in open(golden):
        ln = ln.split("#")[0].strip()
        if ln:
            f, pair, verdict = ln.split()
            want[(f, pair)] = verdict
    got = {(r.split()[0], r.split()[1]): r.split()[2] for r, _ in rows}
    for k in sorted(set(want) | set(got)):
        if want.get(k) != got.get(k):
            fail("%s %s: %s, but %s says %s (check_swaps.py --update writes the list anew)"
                 % (k[0], k[1], got.get(k, "gone"), os.path.relpath(golden, ROOT), want.get(k, "nothing")))


def main():
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cc", required=True)
    ap.add_argument("--cxx")
    ap.add_argument("--root", default=ROOT, help="the source tree (default: this script's)")
    ap.add_argument("--update", action="store_true", help="rewrite tests/api/swaps.txt")
    a = ap.parse_args()
    ROOT = os.path.abspath(a.root)
    cc = shutil.which(a.cc)
    if not cc:
        print("SKIP: %s is not installed: the swaps are not checked with it" % a.cc)
        return 77
    ver = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    is_clang = "clang" in ver
    print("compiler: " + ver)
    d = os.path.join(ROOT, "tests", "api")
    hand_files(cc, is_clang, d)
    every_function(cc, is_clang, os.path.join(d, "swaps.txt"), a.update)
    if a.cxx:
        cxx = shutil.which(a.cxx)
        if cxx:
            cxx_files(cxx, d)
        else:
            print("(no %s: C++ not checked)" % a.cxx)
    if FAILURES:
        print("%d failure%s" % (len(FAILURES), "" if len(FAILURES) == 1 else "s"))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
