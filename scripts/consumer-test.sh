#!/bin/sh
# Installs the built library into a scratch prefix and builds a consumer
# against it twice: with find_package(treadle) and with pkg-config.
set -eu
build=${1:-build/test}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S tests/consumer -B "$prefix/cm" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/cm" >/dev/null
"$prefix/cm/consumer"
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1)
PKG_CONFIG_PATH="$libdir" cc -std=c11 -Wall -Wextra -Wpedantic -Werror tests/consumer/main.c \
  -o "$prefix/pc-consumer" $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs --static treadle)
LD_LIBRARY_PATH="$(dirname "$libdir")" "$prefix/pc-consumer"
echo "consumer: find_package and pkg-config both work"
