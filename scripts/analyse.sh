#!/bin/sh
# SPDX-License-Identifier: MIT
# The static analysers: GCC's -fanalyzer and clang's scan-build, each over a
# Debug build of the libraries (libtreadle, libtreadle-hook, libtreadle-tls;
# Debug keeps the asserts, which tell the analysers what they cannot see),
# and cppcheck over src/.  Fails on any report: a false positive is silenced
# at its line, beside a comment that says why it is false:
#   GCC       TDL__ANALYZER_IGNORE("-Wanalyzer-...") ... TDL__ANALYZER_END
#             around the statement (src/base/base.h)
#   clang     an assert of the invariant it missed, or #ifndef __clang_analyzer__
#   cppcheck  /* cppcheck-suppress <id> */ on the line above, or at the end of it
# scan-build's report (HTML) is left in DIR/scan-report; for the path as text:
#   clang --analyze -Xclang -analyzer-output=text <the file's compile flags>
#
#   scripts/analyse.sh [DIR]      (default build/analyse; JOBS=2)
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build/analyse}
jobs=${JOBS:-2}
# treadle_shared comes in as what the other two link; the tests, benchmarks
# and examples are not analysed.
config="-DCMAKE_BUILD_TYPE=Debug -DTDL_TESTS=OFF -DTDL_BENCH=OFF -DTDL_TLS=ON -DTDL_URING=ON"
targets="--target treadle_hook treadle_tls"
mkdir -p "$dir"
fail=0
# Each from scratch: an object that is up to date would not be analysed again.
rm -rf "$dir/gcc" "$dir/scan" "$dir/scan-report"
# The log without make's progress lines.
show() { grep -v '^\[ *[0-9]*%\]' "$1" || true; }

t=$(date +%s)
cmake -S . -B "$dir/gcc" -DCMAKE_C_COMPILER=gcc -DCMAKE_C_FLAGS=-fanalyzer $config >"$dir/gcc.log"
if ! cmake --build "$dir/gcc" -j"$jobs" $targets >>"$dir/gcc.log" 2>&1; then
  show "$dir/gcc.log"
  echo "analyse: gcc -fanalyzer: the build failed" >&2
  fail=1
elif grep -q '\[-Wanalyzer-' "$dir/gcc.log"; then
  show "$dir/gcc.log"
  echo "analyse: gcc -fanalyzer: $(grep -c '\[-Wanalyzer-' "$dir/gcc.log") report(s)" >&2
  fail=1
else
  echo "analyse: gcc -fanalyzer: clean ($(($(date +%s) - t)) s)"
fi

# scan-build builds with the usual compiler and runs clang's analyser beside
# it; --status-bugs makes a report its exit status.
t=$(date +%s)
scan-build cmake -S . -B "$dir/scan" $config >"$dir/scan.log"
if ! scan-build --status-bugs -o "$dir/scan-report" cmake --build "$dir/scan" -j"$jobs" $targets \
     >>"$dir/scan.log" 2>&1; then
  show "$dir/scan.log"
  echo "analyse: scan-build: report(s) or a failed build (above; HTML in $dir/scan-report)" >&2
  fail=1
else
  echo "analyse: scan-build: clean ($(($(date +%s) - t)) s)"
fi

# cppcheck reads the sources as the library's build sees them (one
# configuration: x86-64, GCC, io_uring on); the system headers are left out.
# One job: only then does it follow values across files (ctu checks).
t=$(date +%s)
if ! cppcheck -q --std=c11 --enable=warning,portability --inline-suppr --error-exitcode=1 \
     -I include -I src -D_GNU_SOURCE -DTDL_BUILDING=1 -DTDL_HAVE_URING=1 -DTDL_METRICS=1 \
     -D__GNUC__=12 -D__x86_64__=1 src >"$dir/cppcheck.log" 2>&1; then
  cat "$dir/cppcheck.log"
  echo "analyse: cppcheck: report(s)" >&2
  fail=1
else
  echo "analyse: cppcheck: clean ($(($(date +%s) - t)) s)"
fi
exit $fail
