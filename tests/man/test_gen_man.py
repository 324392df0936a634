#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""scripts/gen-man.py on headers made up for the test: a documented function
gets its page and .so pages; an undocumented one stops the generator; and the
check fails on a public function without a page, a page naming a function
that is gone, and a reference to a function that does not exist.

  test_gen_man.py NM LIBTREADLE_SO LIBTREADLE_HOOK_SO
"""
import os
import shutil
import subprocess
import sys
import tempfile

GEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "gen-man.py")

TREADLE_H = """/*
 * treadle: a made-up header.
 */
#ifndef TREADLE_H
#define TREADLE_H
#include "treadle/one.h"
#endif
"""

ONE_H = """/*
 * One: the functions of this test.
 */
/* ------------------------------------------------------------------------ */
/* Pairs                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct tdl_pair_options {
  int n; /* how many */
} tdl_pair_options;

/* Make a pair.  Returns 0.  Errors: -EINVAL (opts NULL), -ENOMEM. */
TDL_API int tdl_pair_make(const tdl_pair_options *opts);
TDL_API int tdl_pair_make2(const tdl_pair_options *opts);

/* Whether p is whole; see tdl_pair_make(). */
static inline int tdl_pair_whole(int p) { return p != 0; }
"""

HOOK_H = """/*
 * Hook: a header no other includes.
 */
#include <treadle.h>

/* Whether it is on.  Returns 1. */
TDL_API int tdl_hook_on(void);
"""


def gen(root, out, extra=()):
    return subprocess.run([sys.executable, GEN, "--root", root, "--out", out, *extra], capture_output=True, text=True)


def check(mandir, nm, libs):
    argv = [sys.executable, GEN, "--check", mandir, "--nm", nm]
    for lib in libs:
        argv += ["--lib", lib]
    return subprocess.run(argv, capture_output=True, text=True)


def fail(what, p=None):
    sys.exit(f"FAIL: {what}" + (f"\n{p.stdout}{p.stderr}" if p else ""))


def main():
    nm, lib = sys.argv[1], [x for x in sys.argv[2:] if x]  # (an empty one: a library not built)
    # The real headers' pages, as the build makes them: without tls.h's where
    # libtreadle-tls is not built (and so not given).
    without = [] if any("treadle-tls" in x for x in lib) else ["--without", "treadle/tls.h"]
    tmp = tempfile.mkdtemp()
    try:
        root = os.path.join(tmp, "src")
        os.makedirs(os.path.join(root, "include", "treadle"))
        open(os.path.join(root, "include", "treadle.h"), "w").write(TREADLE_H)
        one = os.path.join(root, "include", "treadle", "one.h")
        open(one, "w").write(ONE_H)
        open(os.path.join(root, "include", "treadle", "hook.h"), "w").write(HOOK_H)
        out = os.path.join(tmp, "man")
        p = gen(root, out)
        if p.returncode != 0:
            fail("the made-up headers give pages", p)
        page = open(os.path.join(out, "man3", "tdl_pair_make.3")).read()
        for want in ["tdl_pair_make, tdl_pair_make2 \\- make a pair", ".SH RETURN VALUE", ".SH ERRORS",
                     "\\-EINVAL (opts NULL)", "typedef struct tdl_pair_options", ".BR tdl_pair_whole (3)",
                     ".BR treadle\\-one (7)"]:
            if want not in page:
                fail(f"tdl_pair_make.3 lacks {want!r}:\n{page}")
        if open(os.path.join(out, "man3", "tdl_pair_make2.3")).read() != ".so man3/tdl_pair_make.3\n":
            fail("tdl_pair_make2.3 is not a .so page")
        one7 = open(os.path.join(out, "man7", "treadle-one.7")).read()
        if "PAIRS" not in one7:
            fail("treadle-one.7 lacks the family's heading")
        # The SYNOPSIS names what a program includes: <treadle.h>, since a
        # sub-header stops the build without it; hook.h by its own name.
        for name, text, want in [("man7/treadle-one.7", one7, "<treadle.h>"),
                                 ("man3/tdl_pair_make.3", page, "<treadle.h>"),
                                 ("man7/treadle-hook.7", None, "<treadle/hook.h>"),
                                 ("man3/tdl_hook_on.3", None, "<treadle/hook.h>")]:
            text = text or open(os.path.join(out, name)).read()
            if f".B #include {want}" not in text or "<treadle/one.h>" in text:
                fail(f"{name}'s SYNOPSIS does not include {want}:\n{text}")

        # A function without a comment stops the generator, naming it.
        open(one, "w").write(ONE_H + "\nTDL_API int tdl_pair_bare(void);\n")
        p = gen(root, os.path.join(tmp, "man-bare"))
        if p.returncode == 0 or "tdl_pair_bare has no comment" not in p.stderr:
            fail("an undocumented function is refused", p)

        # The check, on the real pages of the build: passes as they are...
        real = os.path.join(tmp, "real")
        p = gen(os.path.join(os.path.dirname(GEN), ".."), real, without)
        if p.returncode != 0 or check(real, nm, lib).returncode != 0:
            fail("the real headers' pages pass the check", check(real, nm, lib))
        # ...fails when a function's page is missing (tdl_write is on tdl_read's page)...
        os.remove(os.path.join(real, "man3", "tdl_write.3"))
        p = check(real, nm, lib)
        if p.returncode == 0 or "tdl_write" not in p.stderr:
            fail("a missing .so page is caught", p)
        shutil.rmtree(real)
        gen(os.path.join(os.path.dirname(GEN), ".."), real, without)
        os.remove(os.path.join(real, "man3", "tdl_loop_new.3"))
        p = check(real, nm, lib)
        if p.returncode == 0 or "tdl_loop_new: a public function with no man page" not in p.stderr:
            fail("a function without a page is caught", p)
        # ...when a page names a function that is gone...
        shutil.copy(os.path.join(out, "man3", "tdl_pair_make.3"), os.path.join(real, "man3"))
        shutil.copy(os.path.join(out, "man3", "tdl_pair_make2.3"), os.path.join(real, "man3"))
        p = check(real, nm, lib)
        if p.returncode == 0 or "names tdl_pair_make, which no longer exists" not in p.stderr:
            fail("a page of a function that is gone is caught", p)
        # ...and when a page refers to a function that does not exist.
        shutil.rmtree(real)
        gen(os.path.join(os.path.dirname(GEN), ".."), real, without)
        with open(os.path.join(real, "man7", "treadle.7"), "a") as f:
            f.write("Call \\fBtdl_loop_spin\\fP() first.\n")
        p = check(real, nm, lib)
        if p.returncode == 0 or "tdl_loop_spin" not in p.stderr:
            fail("a reference to a missing function is caught", p)
    finally:
        shutil.rmtree(tmp)
    print("gen-man: ok")


if __name__ == "__main__":
    main()
