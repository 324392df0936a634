#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The cookbook, from one source: the recipe programs themselves.

  scripts/gen-cookbook.py --md docs/COOKBOOK.md     write the Markdown
  scripts/gen-cookbook.py --check docs/COOKBOOK.md  fail if it is not what the recipes make
  scripts/gen-cookbook.py --man DIR [--version V]   write DIR/man7/treadle-cookbook.7

The source is examples/cookbook/: intro.txt (what the cookbook is), then
every NN-name.c in order.  Each recipe is a whole program that CI compiles
and runs (it checks its own result and exits 0), so a recipe cannot rot.  Its
first comment after the licence line is the prose; the rest of the file is
shown as the code.  The prose is plain text with four forms:

  # Title              the recipe's title (the first line)
  a paragraph          lines up to a blank line, filled
  - an item            a list item; its continuation lines indented by two
      code             lines indented by four or more spaces, kept as they are

and `code` spans.  Python 3 standard library only.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "examples", "cookbook")


class Recipe:
    def __init__(self, path):
        self.path = os.path.relpath(path, ROOT)
        self.name = os.path.basename(path)[:-2]
        text = open(path).read()
        m = re.match(r"/\* SPDX-License-Identifier: MIT \*/\n/\*\n(.*?)\n \*/\n", text, re.S)
        if not m:
            sys.exit(f"{self.path}: the licence line, then the recipe's comment, must open the file")
        lines = [re.sub(r"^ \* ?", "", l) if l.strip() != "*" else "" for l in m.group(1).split("\n")]
        if not lines[0].startswith("# "):
            sys.exit(f"{self.path}: the comment must start with '# Title'")
        self.title = lines[0][2:].strip()
        self.prose = blocks(lines[1:], self.path)
        self.code = text[m.end():].strip("\n")


def blocks(lines, where):
    """('para', text), ('item', text), ('code', [lines]) from the prose."""
    out = []
    cur = None
    for ln in lines:
        if not ln.strip():
            cur = None
            continue
        if ln.startswith("    ") and (cur is None or cur[0] == "code"):
            if cur is None:
                cur = ["code", []]
                out.append(cur)
            cur[1].append(ln[4:])
        elif ln.startswith("- "):
            cur = ["item", ln[2:].strip()]
            out.append(cur)
        elif ln.startswith("  ") and cur is not None and cur[0] == "item":
            cur[1] += " " + ln.strip()
        elif ln.startswith(" "):
            sys.exit(f"{where}: an indented line that is neither code (4 spaces) nor an item's continuation: {ln!r}")
        elif cur is not None and cur[0] == "para":
            cur[1] += " " + ln.strip()
        else:
            cur = ["para", ln.strip()]
            out.append(cur)
    return out


def load():
    intro = [l.rstrip("\n") for l in open(os.path.join(SRC, "intro.txt")) if not l.startswith("# SPDX")]
    recipes = [Recipe(os.path.join(SRC, f)) for f in sorted(os.listdir(SRC)) if re.match(r"\d\d-.*\.c$", f)]
    if not recipes:
        sys.exit("gen-cookbook: no recipe in examples/cookbook/")
    return blocks(intro, "intro.txt"), recipes


def anchor(title):
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


def markdown(intro, recipes):
    out = ["<!-- Written by scripts/gen-cookbook.py from examples/cookbook/: edit those, not this. -->", "",
           "# The treadle cookbook", ""]
    out += md_blocks(intro)
    out += ["## Recipes", ""]
    out += [f"{i}. [{r.title}](#{anchor(r.title)})" for i, r in enumerate(recipes, 1)] + [""]
    for r in recipes:
        out += [f"## {r.title}", ""]
        out += md_blocks(r.prose)
        out += [f"`{r.path}`, run by `ctest -R cookbook_{r.name[3:]}`:", "", "```c", r.code, "```", ""]
    return "\n".join(out)


def md_blocks(bs):
    out = []
    for kind, body in bs:
        if kind == "code":
            out += ["```"] + body + ["```", ""]
        elif kind == "item":
            out.append("- " + body)
        else:
            if out and out[-1].startswith("- "):
                out.append("")
            out += [body, ""]
    if out and out[-1] != "":
        out.append("")
    return out


def esc(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    s = "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in s)
    return "\\&" + s if s[:1] in (".", "'") else s


def roff_inline(s):
    return re.sub(r"`([^`]+)`", lambda m: "\\fB" + m.group(1) + "\\fP", esc(s))


def roff_blocks(bs):
    out = []
    for kind, body in bs:
        if kind == "code":
            out += [".PP", ".RS 4", ".nf"] + [esc(l) for l in body] + [".fi", ".RE"]
        elif kind == "item":
            out += [".IP \\(bu 2", roff_inline(body)]
        else:
            out += [".PP", roff_inline(body)]
    return out


def man(intro, recipes, version):
    out = [f'.TH TREADLE\\-COOKBOOK 7 "" "treadle {version}" "treadle manual"', ".SH NAME",
           "treadle\\-cookbook \\- recipes for programs built on treadle",
           ".SH SYNOPSIS", ".nf", ".B #include <treadle.h>", ".fi", ".SH DESCRIPTION"]
    out += roff_blocks(intro)
    for r in recipes:
        out += [".SH " + esc(r.title.upper())] + roff_blocks(r.prose)
        out += [".PP", "The program (" + esc(r.path) + "):", ".PP", ".RS 4", ".nf"]
        out += [esc(l) for l in r.code.split("\n")] + [".fi", ".RE"]
    out += [".SH SEE ALSO", ".BR treadle (7)"]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--md", help="write the Markdown cookbook here")
    ap.add_argument("--check", metavar="MD", help="fail unless this file is what the recipes make")
    ap.add_argument("--man", metavar="DIR", help="write DIR/man7/treadle-cookbook.7")
    ap.add_argument("--version", default="")
    a = ap.parse_args()
    if not (a.md or a.check or a.man):
        ap.error("--md, --check or --man")
    intro, recipes = load()
    md = markdown(intro, recipes)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)
    if a.check:
        try:
            have = open(a.check).read()
        except OSError:
            have = None
        if have != md:
            sys.exit(f"gen-cookbook: {a.check} is not what examples/cookbook/ makes: "
                     "run scripts/gen-cookbook.py --md docs/COOKBOOK.md")
        print(f"gen-cookbook: {a.check} matches its {len(recipes)} recipes")
    if a.man:
        os.makedirs(os.path.join(a.man, "man7"), exist_ok=True)
        path = os.path.join(a.man, "man7", "treadle-cookbook.7")
        text = man(intro, recipes, a.version)
        try:
            same = open(path).read() == text
        except OSError:
            same = False
        if not same:
            with open(path, "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
