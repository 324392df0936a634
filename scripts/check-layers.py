#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check the layering rule of docs/ARCHITECTURE.md.

    scripts/check-layers.py [--build DIR]

1. Includes: a file in src/<layer>/ may include the public headers, its own
   layer's headers and those of the layers below it (LOWER below), never a
   higher or a sibling layer's.
2. Lists: every source in src/ is listed in CMakeLists.txt and every test in
   tests/ in tests/CMakeLists.txt (the lists are explicit), and tests/ has
   the folders of src/.
3. The map: docs/ARCHITECTURE.md names every file under src/, by its path
   below src/ ("fd/io.c"), so that the map stays whole.
4. Calls (with --build, a configured and built tree): from the library's
   object files, which file uses a symbol which other file defines.  A use
   that goes to a higher or sibling layer fails, and so does any cycle between
   files: the graph of the library's files must be acyclic.  --graph prints
   that graph.

Exits 0 when everything holds, 1 with one line per violation otherwise.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")

# Each layer and the layers it may use (directly or not).
LOWER = {
    "base": set(),
    "loop": {"base"},
    "fiber": {"base", "loop"},
    "fd": {"base", "loop", "fiber"},
    "sync": {"base", "loop", "fiber", "fd"},
    "net": {"base", "loop", "fiber", "fd"},
    "process": {"base", "loop", "fiber", "fd"},
    "pool": {"base", "loop", "fiber"},
    "group": {"base", "loop", "fiber", "fd", "sync", "net"},
    "fs": {"base", "loop", "fiber", "fd", "pool"},
    "dns": {"base", "loop", "fiber", "fd", "net", "pool"},
    "metrics": {"base", "loop", "fiber", "fd", "sync", "net", "process", "group", "pool", "fs", "dns"},
    "hook": {"base", "loop", "fiber", "fd", "sync", "net", "process", "group", "pool", "fs", "dns", "metrics"},
    # libtreadle-tls, a library of its own like hook: above net, beside hook.
    "tls": {"base", "loop", "fiber", "fd", "sync", "net", "process", "group", "pool", "fs", "dns", "metrics"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    rel = os.path.relpath(path, SRC)
    return rel.split(os.sep)[0]


def sources():
    for d, _, files in os.walk(SRC):
        for f in files:
            if f.endswith((".c", ".h", ".S")):
                yield os.path.join(d, f)


def check_includes(problems):
    for path in sources():
        me = layer_of(path)
        if me not in LOWER:
            problems.append(f"{os.path.relpath(path, ROOT)}: folder '{me}' is not a known layer")
            continue
        text = open(path, encoding="utf-8").read()
        for inc in INCLUDE.findall(text):
            if inc == "treadle.h" or inc.startswith("treadle/"):
                continue
            if "/" not in inc:
                if not os.path.exists(os.path.join(os.path.dirname(path), inc)):
                    problems.append(f"{os.path.relpath(path, ROOT)}: includes \"{inc}\", not beside it")
                continue
            other = inc.split("/")[0]
            if other != me and other not in LOWER[me]:
                problems.append(f"{os.path.relpath(path, ROOT)}: layer '{me}' includes \"{inc}\" of layer '{other}'")


def listed(cmake_file, base):
    text = open(cmake_file, encoding="utf-8").read()
    return {os.path.normpath(os.path.join(base, m)) for m in re.findall(r"([\w/\-\${}]+\.(?:c|S))", text)}


def check_lists(problems):
    lib = listed(os.path.join(ROOT, "CMakeLists.txt"), ROOT)
    lib_arch = {p for p in lib if "${" in p}
    for path in sources():
        if path.endswith(".h"):
            continue
        n = os.path.normpath(path)
        if n in lib:
            continue
        if any(re.fullmatch(re.escape(p).replace(r"\$\{TDL_ARCH\}", r"\w+"), n) for p in lib_arch):
            continue
        problems.append(f"{os.path.relpath(path, ROOT)}: not listed in CMakeLists.txt")
    tdir = os.path.join(ROOT, "tests")
    tests = listed(os.path.join(tdir, "CMakeLists.txt"), tdir)
    for d, _, files in os.walk(tdir):
        for f in files:
            if f.startswith("test_") and f.endswith(".c"):
                p = os.path.normpath(os.path.join(d, f))
                if p not in tests:
                    problems.append(f"{os.path.relpath(p, ROOT)}: not listed in tests/CMakeLists.txt")
    for layer in LOWER:
        has_sources = any(f.endswith(".c") for f in os.listdir(os.path.join(SRC, layer)))
        if has_sources and not os.path.isdir(os.path.join(tdir, layer)):
            problems.append(f"tests/{layer}/: missing (tests mirror src/)")


def check_map(problems):
    doc = os.path.join(ROOT, "docs", "ARCHITECTURE.md")
    text = open(doc, encoding="utf-8").read()
    for path in sorted(sources()):
        rel = os.path.relpath(path, SRC)
        if not re.search(r"(?<![\w/.])" + re.escape(rel) + r"(?![\w.])", text):
            problems.append(f"src/{rel}: not named in docs/ARCHITECTURE.md (the map names every file)")


def symbols(obj):
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind.isupper():
            defined.add(name)
    return defined, used


def object_graph(build):
    objdir = os.path.join(build, "CMakeFiles", "treadle_static.dir", "src")
    if not os.path.isdir(objdir):
        sys.exit(f"check-layers: no objects under {objdir}: build the tree first")
    objs = {}
    for d, _, files in os.walk(objdir):
        for f in files:
            if f.endswith(".o"):
                full = os.path.join(d, f)
                src = os.path.relpath(full, objdir)[: -len(".o")]
                if os.path.exists(os.path.join(SRC, src)):  # not a stale object
                    objs[src] = symbols(full)
    owner = {}
    for src, (defined, _) in objs.items():
        for s in defined:
            owner[s] = src
    edges = {src: set() for src in objs}
    why = {}
    for src, (_, used) in objs.items():
        for s in used:
            o = owner.get(s)
            if o and o != src:
                edges[src].add(o)
                why.setdefault((src, o), s)
    return edges, why


def cycles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check_calls(build, problems, show):
    edges, why = object_graph(build)
    for a in sorted(edges):
        for b in sorted(edges[a]):
            la, lb = a.split("/")[0], b.split("/")[0]
            if la != lb and lb not in LOWER.get(la, set()):
                problems.append(f"src/{a}: layer '{la}' calls {why[(a, b)]} in src/{b} (layer '{lb}')")
    for comp in cycles(edges):
        problems.append("a cycle between files: " + " <-> ".join("src/" + c for c in comp))
    if show:
        for a in sorted(edges):
            if edges[a]:
                print(f"src/{a} -> " + ", ".join("src/" + b for b in sorted(edges[a])))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", help="a built tree: also check calls between object files")
    ap.add_argument("--graph", action="store_true", help="print the file graph (needs --build)")
    args = ap.parse_args()
    problems = []
    check_includes(problems)
    check_lists(problems)
    check_map(problems)
    if args.build:
        check_calls(args.build, problems, args.graph)
    for p in problems:
        print("check-layers: " + p, file=sys.stderr)
    if not problems:
        print("check-layers: ok" + (" (includes, lists, map, calls)" if args.build else " (includes, lists, map)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
