#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Man pages from the public headers, which stay the one source.

  scripts/gen-man.py --out DIR [--version V]      write DIR/man3/*.3, DIR/man7/*.7
  scripts/gen-man.py --check DIR --lib LIB...     check DIR against the built libraries
  --without treadle/tls.h                         leave out a header whose library is not built

How a header becomes pages:
  - A comment directly above one or more declarations (TDL_API prototypes,
    static inline functions, with no blank line between) documents them: they
    make one page in section 3, named after the first, with a .so page for
    each of the others, so that `man tdl_write` finds tdl_read(3).  A comment
    that directly follows a declaration and ends its paragraph is added to
    that declaration's page.
  - The banners (/* ---- Timers ---- */) cut a header into families; a page's
    SEE ALSO lists the other pages of its family and the header's page.
  - Each header also gives one page in section 7 (treadle(7) for treadle.h,
    treadle-net(7) for treadle/net.h...): its opening comment, then per family
    the comments that document no function, the types and constants, and the
    family's pages.
  - Sentences of a comment that begin with "Returns" or "Errors" go to RETURN
    VALUE and ERRORS; the rest is the DESCRIPTION, in the header's order.
  - The SYNOPSIS shows the include line, the prototypes, and the public
    structs, enums and callback types that the prototypes name.

A public function without a comment is an error: the headers are the manual.

--check fails when a public function (every tdl_ symbol the shared libraries
export, every static inline tdl_ function and every function-like tdl_ macro
of the headers) has no page, when a page names a function that does not
exist, or when any page refers to tdl_x() or tdl_x(3) that does not exist.
Python 3 standard library only.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADERS = []


def find_headers(root):
    """include/treadle.h and include/treadle/*.h under root."""
    global ROOT, HEADERS
    ROOT = root
    HEADERS = ["include/treadle.h"] + sorted(
        "include/treadle/" + f for f in os.listdir(os.path.join(ROOT, "include/treadle")) if f.endswith(".h"))


ERRORS = []


class Item:
    """One thing of a header, in order: a comment, a declaration, a type, a blank line..."""

    def __init__(self, kind, text, line, names=()):
        self.kind = kind      # comment, banner, func, type, macro, blank, other
        self.text = text
        self.line = line
        self.names = list(names)


def comment_lines(raw):
    """The text of a /* */ comment, one entry per line, with the * margin removed."""
    body = raw.strip()
    assert body.startswith("/*") and body.endswith("*/")
    body = body[2:-2]
    out = []
    for i, ln in enumerate(body.split("\n")):
        if i > 0:
            s = ln.lstrip()
            if s.startswith("*"):
                s = s[1:]
            ln = s
        if ln.startswith(" "):
            ln = ln[1:]
        out.append(ln.rstrip())
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return out


BANNER_RULE = re.compile(r"^/\* -{20,} \*/$")
SPDX_LINE = re.compile(r"^/\*\s*SPDX-License-Identifier:.*\*/$")
BANNER_INLINE = re.compile(r"^/\* -{3,} (.*?) -{3,} \*/$")
FUNC_NAME = re.compile(r"\b(tdl_[a-z0-9_]+)\s*\(")


def scan(path):
    """The items of one header."""
    lines = open(os.path.join(ROOT, path)).read().split("\n")
    items = []
    i = 0
    depth_extern = 0
    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        start = i + 1
        if not s:
            items.append(Item("blank", "", start))
            i += 1
        elif SPDX_LINE.match(s):  # the licence line: not documentation
            i += 1
        elif BANNER_RULE.match(s) and i + 2 < len(lines) and BANNER_RULE.match(lines[i + 2].strip()):
            title = lines[i + 1].strip()[2:-2].strip()
            items.append(Item("banner", title, start))
            i += 3
        elif BANNER_INLINE.match(s):
            items.append(Item("banner", BANNER_INLINE.match(s).group(1), start))
            i += 1
        elif s.startswith("/*"):
            j = i
            while "*/" not in lines[j]:
                j += 1
            raw = "\n".join(lines[i:j + 1])
            rest = lines[j][lines[j].index("*/") + 2:].strip()
            items.append(Item("comment", raw, start))
            i = j + 1
            if rest:  # code after the comment on its line: rare, rescan it
                lines[j] = rest
                i = j
        elif s.startswith("TDL_API") or s.startswith("static inline"):
            j = i
            text = ln
            if s.startswith("TDL_API"):
                while not text.rstrip().endswith(";"):
                    j += 1
                    text += "\n" + lines[j]
                proto = text
            else:  # an inline function: the prototype is what precedes its body
                depth = text.count("{") - text.count("}")
                while depth > 0 or "{" not in text:
                    j += 1
                    text += "\n" + lines[j]
                    depth = text.count("{") - text.count("}")
                proto = text[:text.index("{")].rstrip() + ";"
            m = FUNC_NAME.search(proto)
            if not m:
                sys.exit(f"{path}:{start}: cannot find the function's name")
            items.append(Item("func", proto, start, [m.group(1)]))
            i = j + 1
        elif s.startswith("typedef") or s.startswith("struct") or s.startswith("enum"):
            j = i
            text = ln
            depth = text.count("{") - text.count("}")
            while depth > 0 or not text.rstrip().endswith(";"):
                j += 1
                text += "\n" + lines[j]
                depth = text.count("{") - text.count("}")
            names = re.findall(r"\b(tdl_[a-z0-9_]+)\b", text.split("{")[0] + " " + text.split("}")[-1])
            if "(*" in text.split("{")[0]:
                names = re.findall(r"\(\*\s*(tdl_[a-z0-9_]+)\)", text)
            items.append(Item("type", text, start, names))
            i = j + 1
        elif s.startswith("#define"):
            j = i
            text = ln
            while text.endswith("\\"):
                j += 1
                text += "\n" + lines[j]
            m = re.match(r"#define\s+(\w+)", s)
            items.append(Item("macro", text, start, [m.group(1)]))
            i = j + 1
        else:
            items.append(Item("other", s, start))
            i += 1
    return items


class Page:
    def __init__(self, header, family, comment, protos, names, line):
        self.header = header
        self.family = family
        self.comment = comment  # list of comment-line lists
        self.protos = protos
        self.names = names
        self.line = line


class Header:
    def __init__(self, path):
        self.path = path
        # What a program includes for it: the sub-headers stop the build
        # unless they come through <treadle.h>; hook.h, which no other
        # header includes, is included by its own name.
        self.include = "<" + path[len("include/"):] + ">" if os.path.basename(path) == "hook.h" else "<treadle.h>"
        base = os.path.basename(path)[:-2]
        self.man7 = "treadle" if base == "treadle" else "treadle-" + base
        self.intro = []       # the opening comment
        self.families = []    # (title, [prose comments], [types], [pages])
        self.pages = []


def parse(path, types):
    """Pages and families of one header; fills types (name -> (comment, text))."""
    h = Header(path)
    items = scan(path)
    fam = [os.path.basename(path), [], [], []]
    h.families.append(fam)
    prev = None          # the item before, blank lines included
    last_comment = None  # a comment not yet given to anything
    page = None          # the page the previous declaration went to
    first = True
    for it in items:
        if it.kind == "comment":
            if first:
                h.intro = comment_lines(it.text)
                first = False
            elif prev is not None and prev.kind == "func" and page is not None:
                last_comment = ("after", it)
            else:
                if last_comment is not None and last_comment[0] == "before":  # two in a row: prose
                    fam[1].append(comment_lines(last_comment[1].text))
                last_comment = ("before", it)
        elif it.kind == "blank":
            if last_comment is not None:
                where, c = last_comment
                if where == "after":
                    page.comment.append(comment_lines(c.text))
                elif where == "before":
                    fam[1].append(comment_lines(c.text))
                last_comment = None
            page = None if prev is None or prev.kind != "func" else page
        elif it.kind == "banner":
            if last_comment is not None and last_comment[0] == "before":
                fam[1].append(comment_lines(last_comment[1].text))
            last_comment = None
            fam = [it.text, [], [], []]
            h.families.append(fam)
            page = None
        elif it.kind in ("type", "macro"):
            doc = comment_lines(last_comment[1].text) if last_comment and last_comment[0] in ("before", "after") else []
            fam[2].append((doc, it.text, it.names))
            for n in it.names:
                if it.kind == "type" and ("{" in it.text or "(*" in it.text or n not in types):
                    types[n] = (doc, it.text)
            # a declaration right below a documented type shares its comment
            page = None
            last_comment = ("type", doc) if doc else None
        elif it.kind == "func":
            if last_comment is not None:  # "after" too: between two declarations, it is the second's
                doc = last_comment[1] if last_comment[0] == "type" else comment_lines(last_comment[1].text)
                page = Page(h, fam[0], [doc], [it.text], list(it.names), it.line)
                h.pages.append(page)
                fam[3].append(page)
            elif prev is not None and prev.kind == "func" and page is not None:
                page.protos.append(it.text)
                page.names += it.names
            else:
                ERRORS.append(f"{path}:{it.line}: {it.names[0]} has no comment: document it in the header "
                              "(a comment directly above it, or directly above the declaration it follows)")
            last_comment = None
        elif it.kind == "other":
            if last_comment is not None and last_comment[0] == "after":
                page.comment.append(comment_lines(last_comment[1].text))
                last_comment = None
        prev = it
    if last_comment is not None and last_comment[0] != "type":
        fam[1].append(comment_lines(last_comment[1].text))
    h.families = [f for f in h.families if f[1] or f[2] or f[3]]
    return h


# ---- roff ------------------------------------------------------------------

def esc(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in s)


def line_safe(s):
    """A text line roff will not take for a request."""
    return "\\&" + s if s[:1] in (".", "'") else s


def bold_funcs(s):
    return re.sub(r"\b(tdl_[a-z0-9_]+)\(\)", r"\\fB\1\\fP()", s)


def blocks(lines):
    """Paragraphs of a comment: ('fill', [lines]) at the margin, ('verb', [lines]) indented."""
    out = []
    cur = None
    for ln in lines:
        if not ln.strip():
            cur = None
            out.append(("blank", []))
            continue
        kind = "verb" if ln.startswith(" ") else "fill"
        if kind == "verb" and cur is not None and cur[0] == "fill" and not cur[1][-1].endswith(":") \
                and (len(cur[1]) == 1 or HANGING.match(cur[1][-1])):
            # "host: an IPv4 literal..." with its continuation indented below:
            # an item of a list, kept as it is laid out
            head = cur[1].pop()
            if not cur[1]:
                out.pop()
            cur = ("verb", [head])
            out.append(cur)
        elif cur is None or cur[0] != kind:
            cur = (kind, [])
            out.append(cur)
        cur[1].append(ln)
    return out


HANGING = re.compile(r"^([\w.]+:\s|Errors\b|Returns?\b|Cost\b|Thread\b)")


SENTENCE_END = re.compile(r"(?<=[.)])  (?=[A-Z(*\-])")


def split_labelled(lines):
    """Split a comment into (description blocks, returns, errors): the
    sentences that start with "Returns" or "Errors:" (or "Errors (...)",
    "Other errors:"), with the indented lines that continue them, leave the
    description."""
    desc, ret, err = [], [], []
    target = None  # where the indented lines after a labelled sentence go
    for kind, ls in blocks(lines):
        if kind == "blank":
            desc.append(("blank", []))
            target = None
            continue
        if kind == "verb":
            if not ls[0].startswith(" "):  # a hanging item: its label decides
                target = ret if RETURNS.match(ls[0]) else err if ERRORS_LABEL.match(ls[0]) else None
            if target is not None:
                target.extend(ls)
            else:
                desc.append((kind, ls))
            continue
        text = ""
        for l in ls:  # a line that ends a sentence keeps the two spaces after it
            text += ("" if not text else " " if text.endswith(("e.g.", "i.e.")) else "  " if text.endswith(".") else " ") + l.strip()
        kept = []
        target = None
        for sent in SENTENCE_END.split(text):
            if RETURNS.match(sent):
                ret.append(sent)
                target = ret
            elif ERRORS_LABEL.match(sent):
                err.append(re.sub(r"^Errors:\s*", "", sent))
                target = err
            elif target is not None and not re.match(r"(Cost|Thread|Callable|THREAD-SAFE|Works|Usable)\b", sent):
                target.append(sent)  # a sentence that goes on with the same list
            else:
                kept.append(sent)
                target = None
        if kept:
            desc.append(("fill", ["  ".join(kept)]))
    while desc and desc[-1][0] == "blank":
        desc.pop()
    return desc, ret, err


RETURNS = re.compile(r"Returns?\b")
ERRORS_LABEL = re.compile(r"(Other errors|Errors)\s*[:(,]")


def roff_text(lines):
    """roff for comment lines: filled paragraphs and verbatim indented blocks."""
    return roff_blocks(blocks(lines))


def roff_blocks(bs):
    out = []
    for kind, ls in bs:
        if kind == "blank":
            if out and out[-1] != ".PP":
                out.append(".PP")
        elif kind == "fill":
            for l in ls:
                out.append(line_safe(bold_funcs(esc(l.strip()))))
        elif ls[0].startswith(" "):
            out += [".RS 2", ".nf"] + [line_safe(esc(l)) for l in ls] + [".fi", ".RE"]
        else:  # a hanging item: at the margin, as in the header
            out += [".nf"] + [line_safe(esc(l)) for l in ls] + [".fi"]
    while out and out[-1] == ".PP":
        out.pop()
    return out


def roff_sentences(sents):
    """Labelled sentences: plain ones filled, indented continuation kept as is."""
    out = []
    for s in sents:
        if s.startswith(" "):
            out += [".RS 2", ".nf", line_safe(esc(s)), ".fi", ".RE"]
        else:
            out.append(line_safe(bold_funcs(esc(s))))
    # merge consecutive verbatim blocks
    text = "\n".join(out).replace(".fi\n.RE\n.RS 2\n.nf\n", "")
    return text.split("\n")


def whatis(page):
    """The NAME line's description: the comment's first sentence, shortened
    when it is long; the family's title when nothing short enough is left."""
    text = ""
    for l in page.comment[0] if page.comment else []:
        if not l.strip():
            break  # the first paragraph only
        text += ("" if not text else " " if text.endswith(("e.g.", "i.e.")) else "  " if text.endswith(".") else " ") + l.strip()
    text = re.sub(r"^(THREAD-SAFE( \([^)]*\))?\.|From a fiber:)\s*", "", text)
    first = re.split(r"(?<=\.)  ", text)[0].rstrip(".:") if text else ""
    candidates = [first, re.sub(r"\s*\([^()]*\)", "", first)]
    candidates.append(re.split(r"[;:]", candidates[-1])[0])
    cut = candidates[1][:101]
    candidates.append(cut[:cut.rfind(", ")] if ", " in cut else "")
    for i, c in enumerate(candidates):  # a cut one must still say something
        if (i == 0 or len(c) >= 12) and 0 < len(c) <= 100 and not c.startswith(("Returns", "Errors", "(")):
            first = c
            break
    else:
        first = page.family
    word = re.match(r"[A-Za-z]*", first).group(0)
    if word and word[1:] == word[1:].lower() and first[len(word):len(word) + 1] not in ("/", "_"):
        first = first[0].lower() + first[1:]
    return first


def clean_proto(p):
    p = re.sub(r"^\s*TDL_API\s+", "", p)
    p = re.sub(r"^\s*static inline\s+", "", p)
    lines = [l.rstrip() for l in p.split("\n")]
    # re-indent continuation lines under the opening parenthesis
    if len(lines) > 1:
        col = lines[0].index("(") + 1
        lines = [lines[0]] + [" " * col + l.strip() for l in lines[1:]]
    return lines


def type_text(doc, text, header):
    """A type for a SYNOPSIS, or None when its fields are private."""
    private = any("fields of the structs below are private" in l.lower() for l in header.intro) or any("private" in l.lower() for l in doc) or re.search(r"/\* private[;:,)]", text)
    if "/* private */" in text:
        head = text[:text.index("/* private */")].rstrip()
        return head + "\n  /* ... private fields ... */\n}" + text.split("}")[-1]
    if private and "{" in text:
        return None
    return text


def synopsis(page, types):
    out = [".nf", ".B #include " + esc(page.header.include), ".PP"]
    shown = set()
    for p in page.protos:
        for l in clean_proto(p):
            out.append(line_safe(re.sub(r"\b(" + "|".join(page.names) + r")\b", r"\\fB\1\\fP", esc(l))))
    extra = []
    for p in page.protos:
        for n in re.findall(r"\b(tdl_[a-z0-9_]+)\b", p):
            if n in types and n not in shown and n not in page.names:
                shown.add(n)
                doc, text = types[n]
                t = type_text(doc, text, page.header)
                if t and ("{" in t or "(*" in t):
                    extra.append(t)
    for t in extra:
        out.append(".PP")
        out += [line_safe(esc(l)) for l in t.split("\n")]
    out.append(".fi")
    lib = "\\-ltreadle\\-hook \\-ltreadle" if "hook.h" in page.header.path else "\\-ltreadle"
    out += [".PP", "Link with \\fI" + lib + "\\fP."]
    return out


def th(name, section, version):
    return f'.TH {name.upper()} {section} "" "treadle {version}" "treadle manual"'


def write_pages(headers, types, outdir, version):
    os.makedirs(os.path.join(outdir, "man3"), exist_ok=True)
    os.makedirs(os.path.join(outdir, "man7"), exist_ok=True)
    wanted = set()
    for h in headers:
        for page in h.pages:
            name = page.names[0]
            desc, ret, err = [], [], []
            for c in page.comment:
                d, r, e = split_labelled(c)
                if desc and d:
                    desc.append(("blank", []))
                desc += d
                ret += r
                err += e
            out = [th(name, 3, version), ".SH NAME",
                   esc(", ".join(page.names)) + " \\- " + esc(whatis(page)), ".SH SYNOPSIS"]
            out += synopsis(page, types)
            out += [".SH DESCRIPTION"] + (roff_blocks(desc) or ["See " + esc(page.family) + " in " + h.man7 + "(7)."])
            if ret:
                out += [".SH RETURN VALUE"] + roff_sentences(ret)
            if err:
                out += [".SH ERRORS"] + roff_sentences(err)
            fam = next(f for f in h.families if page in f[3])
            if fam[1]:
                out += [".PP", "More on " + esc(fam[0]) + ": " + "\\fB" + esc(h.man7) + "\\fP(7)."]
            see = [p.names[0] for p in fam[3] if p is not page]
            refs = ",\n".join(f".BR {n} (3)" for n in see + [])
            out += [".SH SEE ALSO"] + ([refs + ","] if see else []) + [f".BR {esc(h.man7)} (7)" +
                                                                         ("," if h.man7 != "treadle" else "")]
            if h.man7 != "treadle":
                out.append(".BR treadle (7)")
            path = os.path.join(outdir, "man3", name + ".3")
            write(path, "\n".join(out) + "\n")
            wanted.add(path)
            for other in page.names[1:]:
                path = os.path.join(outdir, "man3", other + ".3")
                write(path, f".so man3/{name}.3\n")
                wanted.add(path)
        path = os.path.join(outdir, "man7", h.man7 + ".7")
        write(path, "\n".join(man7(h, headers, version)) + "\n")
        wanted.add(path)
    # pages of functions that no longer exist must not linger in the build tree
    for sect in ("man3", "man7"):
        for f in os.listdir(os.path.join(outdir, sect)):
            p = os.path.join(outdir, sect, f)
            if p not in wanted:
                os.remove(p)


def write(path, text):
    try:
        if open(path).read() == text:
            return  # leave it alone: make need not redo what depends on it
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(text)


def man7(h, headers, version):
    title = h.intro[0].rstrip(".") if h.intro else h.path
    out = [th(esc(h.man7), 7, version), ".SH NAME", esc(h.man7) + " \\- " + esc(title.split(":")[0] if h.man7 != "treadle" else
                                                                          "fibers over an I/O and timer manager, for C"),
           ".SH SYNOPSIS", ".nf", ".B #include " + esc(h.include), ".fi", ".SH DESCRIPTION"]
    out += roff_text(h.intro)
    for title, prose, tps, pages in h.families:
        out.append(".SH " + esc(title.upper()))
        for c in prose:
            out += roff_text(c) + [".PP"]
        shown = [(doc, text) for doc, text, names in tps
                 if names and not names[0].startswith(("tdl__", "TREADLE_", "TDL_API"))]
        if shown:
            out.append(".nf")
            for doc, text in shown:
                if doc:
                    out += [line_safe(esc(l)) for l in ["/* " + doc[0]] + [" * " + l if l else " *" for l in doc[1:]]]
                    out[-1] += esc(" */")
                out += [line_safe(esc(l)) for l in text.split("\n")]
            out += [".fi", ".PP"]
        if pages:
            out.append("Functions:")
            out.append(",\n".join(f".BR {p.names[0]} (3)" for p in pages))
    if h.man7 == "treadle":
        out += [".SH SEE ALSO", ",\n".join(f".BR {esc(o.man7)} (7)" for o in headers if o is not h) + ",",
                ".BR treadle\\-cookbook (7),", ".BR treadle\\-migrate (7)"]
    else:
        out += [".SH SEE ALSO", ".BR treadle (7)"]
    return out


# ---- the check ----------------------------------------------------------------

def public_functions(libs, nm):
    """What a program can call: the libraries' exported tdl_ functions, the
    headers' inline tdl_ functions and function-like tdl_ macros."""
    names = set()
    for lib in libs:
        out = subprocess.run([nm, "-D", "--defined-only", lib], check=True, capture_output=True,
                             text=True).stdout
        for ln in out.splitlines():
            parts = ln.split()
            if len(parts) == 3 and parts[1] in "TtWi" and re.match(r"tdl_[a-z0-9]", parts[2]):
                names.add(parts[2])
    for path in HEADERS:
        text = open(os.path.join(ROOT, path)).read()
        names |= set(re.findall(r"static\s+inline\b[^;{(]*?\b(tdl_[a-z0-9_]+)\s*\(", text))
        names |= set(re.findall(r"#define\s+(tdl_[a-z0-9_]+)\(", text))
    return names


def check(mandir, libs, nm):
    public = public_functions(libs, nm)
    if not public:
        sys.exit("check-man: no tdl_ function found in " + " ".join(libs))
    problems = []
    named = {}
    man3 = os.path.join(mandir, "man3")
    for f in sorted(os.listdir(man3)):
        text = open(os.path.join(man3, f)).read()
        if text.startswith(".so "):
            continue
        m = re.search(r"^\.SH NAME\n(.*?) \\- ", text, re.M)
        if not m:
            problems.append(f"{f}: no NAME line")
            continue
        for n in m.group(1).replace("\\-", "-").split(", "):
            named[n] = f
            if not os.path.exists(os.path.join(man3, n + ".3")):
                problems.append(f"{f}: names {n}, which has no page file (man {n} finds nothing)")
    for n in sorted(public - set(named)):
        problems.append(f"{n}: a public function with no man page (document it in its header)")
    for n in sorted(set(named) - public):
        problems.append(f"{named[n]}: names {n}, which no longer exists")
    for sect in ("man3", "man7"):
        for f in sorted(os.listdir(os.path.join(mandir, sect))):
            text = open(os.path.join(mandir, sect, f)).read()
            plain = text.replace("\\fB", "").replace("\\fP", "").replace("\\-", "-")
            refs = set(re.findall(r"\b(tdl_[a-z0-9_]*[a-z0-9])\(", plain))
            refs |= set(re.findall(r"^\.BR (tdl_[a-z0-9_]+) \(3\)", plain, re.M))
            for n in sorted(refs - public):
                problems.append(f"{sect}/{f}: refers to {n}(), which does not exist")
    for p in problems:
        print("check-man: " + p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"check-man: {len(public)} public functions, each with a page; no page names a missing one")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the pages under this directory (man3/, man7/)")
    ap.add_argument("--version", default="")
    ap.add_argument("--check", metavar="MANDIR", help="check the pages under MANDIR")
    ap.add_argument("--nm", default="nm", help="the nm to read the libraries with")
    ap.add_argument("--lib", action="append", default=[], help="a shared library to take the exported names from")
    ap.add_argument("--root", default=ROOT, help="the source tree (default: this script's)")
    ap.add_argument("--without", action="append", default=[],
                    help="a header (treadle/tls.h) of a library this build leaves out: no pages from it")
    a = ap.parse_args()
    find_headers(os.path.abspath(a.root))
    HEADERS[:] = [h for h in HEADERS if h[len("include/"):] not in a.without]
    if not a.out and not a.check:
        ap.error("--out or --check")
    if a.out:
        types = {}
        headers = [parse(p, types) for p in HEADERS]
        if ERRORS:
            sys.exit("\n".join(ERRORS))
        seen = {}
        for h in headers:
            for p in h.pages:
                for n in p.names:
                    if n in seen:
                        sys.exit(f"{h.path}:{p.line}: {n} declared twice (also {seen[n]})")
                    seen[n] = h.path
        write_pages(headers, types, a.out, a.version)
    if a.check:
        if not a.lib:
            ap.error("--check needs --lib")
        check(a.check, a.lib, a.nm)


if __name__ == "__main__":
    main()
