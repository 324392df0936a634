#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs the built library into a scratch prefix and builds consumers
# against it every way the README's "Using an installed copy" names:
# find_package(treadle) (treadle::treadle, static; treadle::treadle_shared;
# treadle::treadle_hook, and treadle::treadle_tls where built), pkg-config
# (treadle-static, treadle, treadle-hook, treadle-tls)
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
# The SONAMEs carry the MAJOR of the headers' version.
major=$(sed -n 's/^#define TDL_VERSION_MAJOR \([0-9]*\)$/\1/p' include/treadle.h)

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
needs "$prefix/cm/consumer-unaware" libtreadle-hook.so || fail "treadle::treadle_hook was dropped by --as-needed"
"$prefix/cm/consumer-unaware"
echo "consumer: find_package: treadle::treadle (static), treadle::treadle_shared, treadle::treadle_hook run"
# libtreadle-tls, where the build has it: find_package and pkg-config, a
# handshake with certificates made for the run.
tls=no
if [ -n "$(ls "$prefix"/lib*/libtreadle-tls.so* "$prefix"/lib/*/libtreadle-tls.so* 2>/dev/null)" ]; then
  tls=yes
  mkdir "$prefix/certs"
  sh tests/tls/make-certs.sh "$prefix/certs"
  [ -x "$prefix/cm/consumer-tls" ] || fail "treadle::treadle_tls is not in the installed CMake package"
  needs "$prefix/cm/consumer-tls" libtreadle-tls.so || fail "treadle::treadle_tls does not need libtreadle-tls.so"
  "$prefix/cm/consumer-tls" "$prefix/certs/server.pem" "$prefix/certs/server.key"
  echo "consumer: find_package: treadle::treadle_tls runs"
fi

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
needs "$prefix/pc-shared" libtreadle.so.$major || fail "pkg-config treadle did not link libtreadle.so.$major"
"$prefix/pc-shared"
# The hook: through pkg-config, and by hand.
$cc tests/consumer/hooked.c -o "$prefix/pc-hook" $(pkg-config --cflags --libs treadle-hook) "$rpath"
needs "$prefix/pc-hook" libtreadle-hook.so.$major || fail "pkg-config treadle-hook did not link libtreadle-hook.so.$major"
"$prefix/pc-hook"
$cc tests/consumer/hooked.c -o "$prefix/hand-hook" -I"$prefix/include" -L"$libdir" -ltreadle-hook -ltreadle "$rpath"
"$prefix/hand-hook"
# A program that calls nothing of the hook, linked --as-needed (Debian's
# default): pkg-config's line and the README's by-hand line keep it.
$cc -Wl,--as-needed tests/consumer/unaware.c -o "$prefix/pc-unaware" $(pkg-config --cflags --libs treadle-hook) "$rpath"
needs "$prefix/pc-unaware" libtreadle-hook.so.$major || fail "pkg-config treadle-hook was dropped by --as-needed"
"$prefix/pc-unaware"
$cc -Wl,--as-needed tests/consumer/unaware.c -o "$prefix/hand-unaware" -I"$prefix/include" -L"$libdir" \
  -Wl,--push-state,--no-as-needed -ltreadle-hook -Wl,--pop-state -ltreadle "$rpath"
needs "$prefix/hand-unaware" libtreadle-hook.so.$major || fail "the README's by-hand line was dropped by --as-needed"
"$prefix/hand-unaware"
echo "consumer: pkg-config treadle-static (static), treadle, treadle-hook and -ltreadle-hook -ltreadle run"
if [ $tls = yes ]; then
  $cc tests/consumer/tls.c -o "$prefix/pc-tls" $(pkg-config --cflags --libs treadle-tls) "$rpath"
  needs "$prefix/pc-tls" libtreadle-tls.so.$major || fail "pkg-config treadle-tls did not link libtreadle-tls.so.$major"
  needs "$prefix/pc-tls" libssl && fail "a program of libtreadle-tls links libssl itself: it should come with the library"
  "$prefix/pc-tls" "$prefix/certs/server.pem" "$prefix/certs/server.key"
  # A program that does not use TLS does not load libssl.
  needs "$prefix/pc-shared" libssl && fail "libtreadle.so brings libssl"
  echo "consumer: pkg-config treadle-tls runs; libtreadle alone loads no libssl"
fi

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
# The migration table's page: an old name leads to its new one.
MANPAGER=cat MANWIDTH=80 man -M "$prefix/share/man" 7 treadle-migrate | grep -A1 "tdl_blocking_call" | grep -q "tdl_pool_call" || {
  echo "consumer: man 7 treadle-migrate does not lead from tdl_blocking_call to tdl_pool_call" >&2; exit 1; }
echo "consumer: man tdl_read, man tdl_write, man 7 treadle-net, treadle-cookbook and treadle-migrate work from the installed prefix"
