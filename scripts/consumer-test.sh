#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs the built library into a scratch prefix and builds consumers
# against it every way the README's "Using an installed copy" names:
# find_package(treadle) (treadle::treadle, static; treadle::treadle_shared;
# treadle::treadle_hook), pkg-config (treadle-static, treadle, treadle-hook)
# and -ltreadle-hook -ltreadle by hand.  Every program is run with no
# LD_LIBRARY_PATH, as a user runs it: the static ones must need no
# libtreadle.so, the shared ones find theirs through the rpath the README
# says to add (or that CMake adds).  Then reads the installed man pages the
# way a user would.
set -eu
unset LD_LIBRARY_PATH LD_PRELOAD
build=${1:-build/test}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
cc="cc -std=c11 -Wall -Wextra -Wpedantic -Werror"

# needs PROGRAM LIB: PROGRAM's NEEDED entries name LIB (a soname prefix).
needs() { readelf -d "$1" | grep 'NEEDED' | grep -q "\[$2"; }
fail() { echo "consumer: $*" >&2; exit 1; }

# ---- CMake ----
cmake -S tests/consumer -B "$prefix/cm" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/cm" >/dev/null
needs "$prefix/cm/consumer" libtreadle && fail "treadle::treadle should be the static library"
"$prefix/cm/consumer"
needs "$prefix/cm/consumer-shared" libtreadle.so || fail "treadle::treadle_shared does not need libtreadle.so"
"$prefix/cm/consumer-shared"
needs "$prefix/cm/consumer-hook" libtreadle-hook.so || fail "treadle::treadle_hook does not need libtreadle-hook.so"
"$prefix/cm/consumer-hook"
echo "consumer: find_package: treadle::treadle (static), treadle::treadle_shared, treadle::treadle_hook run"

# ---- pkg-config ----
pcdir=$(ls -d "$prefix"/lib*/pkgconfig "$prefix"/lib/*/pkgconfig 2>/dev/null | head -1)
export PKG_CONFIG_PATH="$pcdir"
libdir=$(pkg-config --variable=libdir treadle)
rpath="-Wl,-rpath,$libdir"
# Static: no libtreadle.so needed, whichever form of the command.
$cc tests/consumer/main.c -o "$prefix/pc-static" $(pkg-config --cflags --libs --static treadle-static)
needs "$prefix/pc-static" libtreadle && fail "pkg-config --static treadle-static linked libtreadle.so"
"$prefix/pc-static"
$cc tests/consumer/main.c -o "$prefix/pc-static2" $(pkg-config --cflags --libs treadle-static)
needs "$prefix/pc-static2" libtreadle && fail "pkg-config treadle-static linked libtreadle.so"
"$prefix/pc-static2"
# Shared: the README's command, with the rpath it says a prefix outside the
# loader's path needs.
$cc tests/consumer/main.c -o "$prefix/pc-shared" $(pkg-config --cflags --libs treadle) "$rpath"
needs "$prefix/pc-shared" libtreadle.so.1 || fail "pkg-config treadle did not link libtreadle.so.1"
"$prefix/pc-shared"
# The hook: through pkg-config, and by hand.
$cc tests/consumer/hooked.c -o "$prefix/pc-hook" $(pkg-config --cflags --libs treadle-hook) "$rpath"
needs "$prefix/pc-hook" libtreadle-hook.so.1 || fail "pkg-config treadle-hook did not link libtreadle-hook.so.1"
"$prefix/pc-hook"
$cc tests/consumer/hooked.c -o "$prefix/hand-hook" -I"$prefix/include" -L"$libdir" -ltreadle-hook -ltreadle "$rpath"
"$prefix/hand-hook"
echo "consumer: pkg-config treadle-static (static), treadle, treadle-hook and -ltreadle-hook -ltreadle run"

# man tdl_read finds its page; tdl_write is on the same page, through a .so
# link; every header has its section 7 page.
for name in tdl_read tdl_write tdl_net_listen_str; do
  out=$(MANPAGER=cat MANWIDTH=80 man -M "$prefix/share/man" 3 "$name" 2>&1) || {
    echo "consumer: man $name: $out" >&2
    exit 1
  }
  case "$out" in
    *SYNOPSIS*"$name("*) ;;
    *) echo "consumer: man $name shows no synopsis of $name:" >&2; echo "$out" | head -20 >&2; exit 1 ;;
  esac
done
MANPAGER=cat man -M "$prefix/share/man" 7 treadle-net >/dev/null
# The cookbook's page, with its recipes; its Markdown twin beside the licence.
MANPAGER=cat MANWIDTH=80 man -M "$prefix/share/man" 7 treadle-cookbook | grep -q "FAN-OUT ACROSS LOOPS" || {
  echo "consumer: man 7 treadle-cookbook shows no recipe" >&2; exit 1; }
[ -f "$prefix/share/doc/treadle/COOKBOOK.md" ] || { echo "consumer: COOKBOOK.md is not installed" >&2; exit 1; }
echo "consumer: man tdl_read, man tdl_write, man 7 treadle-net and man 7 treadle-cookbook work from the installed prefix"
