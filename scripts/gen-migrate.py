#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The migration table, from one source: CHANGELOG.md's section
"Migrating from the API before 1.0".

  scripts/gen-migrate.py --check [--page PAGE]      check the table against the headers
                                                    (and that PAGE lists the same old names)
  scripts/gen-migrate.py --man DIR [--version V]    write DIR/man7/treadle-migrate.7
  scripts/gen-migrate.py --names                    print the old names, one a line

The section is prose (paragraphs, and a numbered list whose items continue on
lines indented by three spaces), then one Markdown table of four columns:
the header that documents the new name, the name before 1.0, what to write
now, and why.  A row's old name is the first `code` span of its second
column, up to its parenthesis when it writes out a call ("tdl_fiber_join" of
`tdl_fiber_join(f, deadline, &result)`); it is what a user searches for, so
each appears in one row only.

--check fails when a row has not four cells, when an old name appears twice,
when the "Now" column names a tdl_ or TDL_ identifier that no public header
declares, or when the section writes tdl_x( for a function that does not
exist (the man page's check, check_man, would refuse it); with --page, also
when that man page does not list the table's old names in its order.
Python 3 standard library only.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = "CHANGELOG.md"  # as messages name it
TITLE = "## Migrating from the API before 1.0"


class Row:
    def __init__(self, cells, line):
        self.header, self.old, self.new, self.why = cells
        self.line = line
        m = re.search(r"`([^`]+)`", self.old)
        if not m:
            sys.exit(f"{SOURCE}:{line}: the second column has no `name`")
        self.span = m.group(1)  # as the row writes it: tdl_fiber_join(f, deadline, &result)
        call = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\(", self.span)
        self.name = call.group(1) if call else self.span  # what a search finds: tdl_fiber_join


def load(path):
    """The section's prose blocks and its table's rows."""
    lines = open(path).read().split("\n")
    try:
        start = lines.index(TITLE)
    except ValueError:
        sys.exit(f"gen-migrate: {path} has no section '{TITLE}'")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    prose, rows, cur, seen_table = [], [], None, False
    for i in range(start + 1, end):
        ln = lines[i]
        if ln.startswith("|"):
            seen_table = True
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", ln.strip())[1:-1]]
            if len(cells) != 4:
                sys.exit(f"{path}:{i + 1}: a row of {len(cells)} cells, not 4")
            if cells[0] == "Header" or set(cells[0]) <= set("-: "):
                continue
            rows.append(Row([c.replace("\\|", "|") for c in cells], i + 1))
            continue
        if seen_table and ln.strip():
            sys.exit(f"{path}:{i + 1}: text after the table; the table ends the section")
        if not ln.strip():
            cur = None
        elif re.match(r"\d+\. ", ln):
            cur = ["item", ln.split(" ", 1)[1].strip()]
            prose.append(cur)
        elif ln.startswith("   ") and cur is not None and cur[0] == "item":
            cur[1] += " " + ln.strip()
        elif cur is not None and cur[0] == "para":
            cur[1] += " " + ln.strip()
        else:
            cur = ["para", ln.strip()]
            prose.append(cur)
    if not rows:
        sys.exit(f"gen-migrate: {path}: the section has no table")
    return prose, rows


def header_names():
    """Every tdl_/TDL_ identifier of the public headers, and their functions."""
    paths = [os.path.join(ROOT, "include", "treadle.h")] + sorted(
        os.path.join(ROOT, "include", "treadle", f) for f in os.listdir(os.path.join(ROOT, "include", "treadle"))
        if f.endswith(".h"))
    names, funcs = set(), set()
    for p in paths:
        text = open(p).read()
        names |= set(re.findall(r"\b((?:tdl|TDL)_[A-Za-z0-9_]*[A-Za-z0-9])\b", text))
        funcs |= set(re.findall(r"TDL_API\b[^;(]*?\b(tdl_[a-z0-9_]+)\s*\(", text))
        funcs |= set(re.findall(r"static\s+inline\b[^;{(]*?\b(tdl_[a-z0-9_]+)\s*\(", text))
        funcs |= set(re.findall(r"#define\s+(tdl_[a-z0-9_]+)\(", text))
    return names, funcs


def check(prose, rows, page):
    problems = []
    names, funcs = header_names()
    first = {}
    for r in rows:
        if r.name in first:
            problems.append(f"{SOURCE}:{r.line}: {r.name} has a row already (line {first[r.name]})")
        first.setdefault(r.name, r.line)
        for n in re.findall(r"\b((?:tdl|TDL)_[A-Za-z0-9_]*[A-Za-z0-9])\b", " ".join(re.findall(r"`([^`]+)`", r.new))):
            if n not in names:
                problems.append(f"{SOURCE}:{r.line}: {r.name}: the new name {n} is in no public header")
    texts = [b for _, b in prose] + [c for r in rows for c in (r.old, r.new, r.why)]
    for n in sorted(set(re.findall(r"\b(tdl_[a-z0-9_]*[a-z0-9])\(", " ".join(texts))) - funcs):
        problems.append(f"{SOURCE}: {n}(...) is written as a call, and is no function of the headers "
                        "(write a removed name without parentheses)")
    if page:
        try:
            text = open(page).read()
        except OSError as e:
            sys.exit(f"gen-migrate: {page}: {e.strerror}")
        listed = [m.replace("\\-", "-").replace("\\e", "\\")
                  for m in re.findall(r"^\.TP\n\\fB(.*?)\\fP", text, re.M)]
        if listed != [r.span for r in rows]:
            missing = [r.span for r in rows if r.span not in listed]
            extra = [n for n in listed if n not in [r.span for r in rows]]
            problems.append(f"{page} does not list the table's old names in its order"
                            + (f"; missing: {', '.join(missing)}" if missing else "")
                            + (f"; not in the table: {', '.join(extra)}" if extra else ""))
    for p in problems:
        print("gen-migrate: " + p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"gen-migrate: {SOURCE}'s migration table has {len(rows)} rows, each new name in the headers"
          + (f"; {os.path.basename(page)} lists the same old names" if page else ""))


def esc(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    s = "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in s)
    return "\\&" + s if s[:1] in (".", "'") else s


def inline(s):
    """Markdown spans to roff: `code` bold, [text](url) as its text."""
    s = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", s)
    parts = re.split(r"(`[^`]+`)", s)
    return "".join("\\fB" + esc(p[1:-1]) + "\\fP" if p.startswith("`") else esc(p) for p in parts)


def man(prose, rows, version):
    out = [f'.TH TREADLE\\-MIGRATE 7 "" "treadle {version}" "treadle manual"', ".SH NAME",
           "treadle\\-migrate \\- porting a program written for treadle before 1.0",
           ".SH SYNOPSIS", ".nf", ".B #include <treadle.h>", ".fi", ".SH DESCRIPTION",
           # names stay whole on a line, so that a search of the page finds them
           ".nh", ".ad l"]
    n = 0
    for kind, body in prose:
        if kind == "item":
            n += 1
            out += [f".IP {n}. 4", inline(body)]
        else:
            n = 0
            out += [".PP", inline(body)]
    out.append(".SH CHANGES")
    group = None
    for r in rows:
        if r.header != group:
            group = r.header
            out.append(".SS " + esc(group))
        rest = r.old.split("`" + r.span + "`", 1)[1].strip()
        out += [".TP", "\\fB" + esc(r.span) + "\\fP" + ((" " if rest[0] not in ",;." else "") + inline(rest) if rest else ""),
                "Now: " + inline(r.new) + ("" if r.new.endswith(".") else "."), ".br", "Why: " + inline(r.why)]
    out += [".SH SEE ALSO", ".BR treadle (7),", ".BR treadle\\-cookbook (7)"]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="check the table against the public headers")
    ap.add_argument("--page", help="with --check: the built treadle-migrate.7, which must list the same old names")
    ap.add_argument("--man", metavar="DIR", help="write DIR/man7/treadle-migrate.7")
    ap.add_argument("--names", action="store_true", help="print the table's old names")
    ap.add_argument("--version", default="")
    ap.add_argument("--changelog", default=os.path.join(ROOT, "CHANGELOG.md"))
    a = ap.parse_args()
    if not (a.check or a.man or a.names):
        ap.error("--check, --man or --names")
    global SOURCE
    SOURCE = os.path.relpath(a.changelog)
    prose, rows = load(a.changelog)
    if a.names:
        print("\n".join(r.name for r in rows))
    if a.check:
        check(prose, rows, a.page)
    if a.man:
        os.makedirs(os.path.join(a.man, "man7"), exist_ok=True)
        path = os.path.join(a.man, "man7", "treadle-migrate.7")
        text = man(prose, rows, a.version)
        try:
            same = open(path).read() == text
        except OSError:
            same = False
        if not same:
            with open(path, "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
