#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs the built library into a scratch prefix and builds a consumer
# against it: with find_package(treadle) (treadle::treadle, static, and
# treadle::treadle_shared) and with pkg-config; then reads the installed man
# pages the way a user would.
set -eu
build=${1:-build/test}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S tests/consumer -B "$prefix/cm" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/cm" >/dev/null
"$prefix/cm/consumer"
# The static treadle::treadle needs no libtreadle.so at run time; the shared
# one finds it through the rpath CMake set.
if ldd "$prefix/cm/consumer" | grep -q libtreadle; then
  echo "consumer: treadle::treadle should be the static library" >&2
  exit 1
fi
"$prefix/cm/consumer-shared"
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1)
PKG_CONFIG_PATH="$libdir" cc -std=c11 -Wall -Wextra -Wpedantic -Werror tests/consumer/main.c \
  -o "$prefix/pc-consumer" $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs --static treadle)
LD_LIBRARY_PATH="$(dirname "$libdir")" "$prefix/pc-consumer"
echo "consumer: find_package (static and shared) and pkg-config work"

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
echo "consumer: man tdl_read, man tdl_write and man 7 treadle-net work from the installed prefix"
