#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""That the version says the truth (make abi-check, and so CI):

- the newest release in CHANGELOG.md (its first "## X.Y.Z - YYYY-MM-DD"
  heading) is the version in include/treadle.h (TDL_VERSION_MAJOR, _MINOR,
  _PATCH, from which CMake takes the project's version and the SONAME);
- the ABI baselines in abi/ belong to that release: abi/RELEASE names it,
  and each baseline's SONAME carries its MAJOR (libtreadle.so.MAJOR);
- in a git clone that has tags, the release is tagged vX.Y.Z.

scripts/release-check.py [--quiet]   exit 0 when all holds, 1 otherwise.

Cutting a release (the README's "Versions and compatibility" says which
number): rename "## Unreleased" to "## X.Y.Z - date", set the header's
version, rewrite the baselines (scripts/abi-check.sh build/abi --update) and
abi/RELEASE, commit, and tag the commit vX.Y.Z.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def newest_release(changelog):
    for line in changelog.splitlines():
        m = re.match(r"^## (\d+)\.(\d+)\.(\d+) - \d{4}-\d{2}-\d{2}\s*$", line)
        if m:
            return tuple(int(x) for x in m.groups())
    return None


def header_version(header):
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"^#define TDL_VERSION_%s (\d+)$" % part, header, re.M)
        if not m:
            return None
        parts.append(int(m.group(1)))
    return tuple(parts)


def main():
    quiet = "--quiet" in sys.argv[1:]
    problems = []
    release = newest_release((ROOT / "CHANGELOG.md").read_text())
    if release is None:
        print("release-check: CHANGELOG.md names no release (## X.Y.Z - YYYY-MM-DD)")
        return 1
    name = "%d.%d.%d" % release
    header = header_version((ROOT / "include/treadle.h").read_text())
    if header != release:
        problems.append("include/treadle.h says %s, CHANGELOG.md's newest release is %s"
                        % ("?" if header is None else "%d.%d.%d" % header, name))
    marker = ROOT / "abi" / "RELEASE"
    made_for = marker.read_text().strip() if marker.exists() else None
    if made_for != name:
        problems.append("abi/RELEASE says %s: the ABI baselines are not %s's (scripts/abi-check.sh "
                        "build/abi --update, then write %s into abi/RELEASE)" % (made_for, name, name))
    for abi in sorted((ROOT / "abi").glob("*.abi")):
        m = re.search(r"soname='([^']*)'", abi.read_text(errors="replace")[:4096])
        want = "%s.so.%d" % (abi.stem, release[0])
        if not m or m.group(1) != want:
            problems.append("abi/%s is the ABI of %s, not %s" % (abi.name, m.group(1) if m else "?", want))
    try:
        tags = subprocess.run(["git", "-C", str(ROOT), "tag", "-l"], capture_output=True, text=True,
                              check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        tags = []  # not a git clone (a source archive): nothing to check
    if tags and "v" + name not in tags:
        problems.append("no tag v%s for the newest release (git tag v%s COMMIT)" % (name, name))
    for p in problems:
        print("release-check: " + p)
    if not problems and not quiet:
        print("release-check: %s: CHANGELOG.md, include/treadle.h and abi/ agree%s"
              % (name, ", tagged" if tags else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
