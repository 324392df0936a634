#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Give every source file tracked by git a licence line.

    scripts/spdx.py            add the line where it is missing
    scripts/spdx.py --check    list the files without it; exit 1 if any

Run from anywhere inside the work tree; it acts on the files `git ls-files`
lists (symlinks and submodules left out).  The line is the licence's SPDX
identifier (see LICENSE), in the comment syntax of the file's type, as the
file's first line, or its first after a "#!" line (and after a Python
encoding declaration, which must stay on line 1 or 2):

    C, headers, assembly (.c .h .S .s)      /* <tag>: MIT */
    Go and Rust (.go go.mod .rs)            // <tag>: MIT
    CMake (CMakeLists.txt .cmake .cmake.in) # <tag>: MIT
    Python (.py, or a python "#!")          # <tag>: MIT
    shell (.sh, or an sh/bash "#!")         # <tag>: MIT
    Makefile, Cargo.toml, the pkg-config
    and nginx templates (.pc.in .conf.in)   # <tag>: MIT

(<tag> being SPDX-License-Identifier.)  A file that already has such a line
among its first lines, whatever the licence it names, is left as it is.
Other files (Markdown, data, lock files) are not touched.  Running it twice changes
nothing the second time.
"""
import argparse
import os
import re
import subprocess
import sys

TAG = "SPDX-License-Identifier"
LICENCE = "MIT"

# How many leading lines may hold the identifier: a "#!" line, an encoding
# declaration and the identifier itself, with room to spare.
HEAD_LINES = 5
HAS_TAG = re.compile(rb"^\s*(?:#|//|/\*|\*)\s*" + TAG.encode() + rb":")
# PEP 263.
PY_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+")

C_STYLE = "c"
SLASH_STYLE = "slash"
HASH_STYLE = "hash"


def style_of(path, head):
    """The comment style for path (its first line is head), or None."""
    name = os.path.basename(path)
    if name.endswith((".c", ".h", ".S", ".s")):
        return C_STYLE
    if name.endswith((".go", ".rs")) or name == "go.mod":
        return SLASH_STYLE
    if name in ("CMakeLists.txt", "Makefile", "Cargo.toml") or name.endswith((".cmake", ".cmake.in", ".pc.in", ".conf.in")):
        return HASH_STYLE
    if name.endswith((".py", ".sh")):
        return HASH_STYLE
    if head.startswith(b"#!"):
        words = head[2:].split()
        if words and os.path.basename(words[0]) == b"env":
            words = [w for w in words[1:] if not w.startswith(b"-")]
        prog = os.path.basename(words[0]) if words else b""
        if re.fullmatch(rb"python[0-9.]*|sh|bash|dash|ksh|zsh", prog):
            return HASH_STYLE
    return None


def tracked_files():
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True,
                         capture_output=True, text=True).stdout.strip()
    out = subprocess.run(["git", "-C", top, "ls-files", "-z"], check=True,
                         capture_output=True).stdout
    for rel in out.decode().split("\0"):
        if not rel:
            continue
        path = os.path.join(top, rel)
        # Symlinks point at a file listed on its own; submodules are
        # directories; a file deleted in the work tree has nothing to tag.
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        yield rel, path


def has_tag(lines):
    return any(HAS_TAG.match(line) for line in lines[:HEAD_LINES])


def tagged(data, style, is_python):
    """data with the identifier line inserted where it belongs."""
    lines = data.splitlines(keepends=True)
    newline = b"\r\n" if lines and lines[0].endswith(b"\r\n") else b"\n"
    if style == C_STYLE:
        line = f"/* {TAG}: {LICENCE} */".encode() + newline
    elif style == SLASH_STYLE:
        # A blank line after it, so that Go does not take it for the start of
        # the package's documentation.
        line = f"// {TAG}: {LICENCE}".encode() + newline + newline
    else:
        line = f"# {TAG}: {LICENCE}".encode() + newline
    at = 0
    if lines and lines[0].startswith(b"#!"):
        at = 1
    if is_python and len(lines) > at and at < 2 and PY_CODING.match(lines[at]):
        at += 1
    if at > 0 and not lines[at - 1].endswith(b"\n"):
        lines[at - 1] += newline  # a "#!" line that ends the file
    return b"".join(lines[:at]) + line + b"".join(lines[at:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="change nothing; list the files without the line, exit 1 if any")
    args = ap.parse_args()

    missing = []
    for rel, path in tracked_files():
        with open(path, "rb") as f:
            data = f.read()
        lines = data.splitlines(keepends=True)
        style = style_of(rel, lines[0] if lines else b"")
        if style is None or has_tag(lines):
            continue
        missing.append(rel)
        if args.check:
            continue
        is_python = rel.endswith(".py") or (lines and b"python" in lines[0][:80]
                                            and lines[0].startswith(b"#!"))
        # Written in place, so that the file keeps its mode and inode.
        with open(path, "r+b") as f:
            f.write(tagged(data, style, is_python))
            f.truncate()

    if args.check:
        for rel in missing:
            print(rel)
        if missing:
            print(f"spdx: {len(missing)} file(s) without an {TAG} line "
                  "(scripts/spdx.py adds it)", file=sys.stderr)
            return 1
        return 0
    for rel in missing:
        print(f"spdx: {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
