#!/usr/bin/env bash
# Build treadle, its tests and the examples against musl libc, run the tests
# (each on both back ends) and the README's program, natively with Debian's
# musl-gcc.  Not run here: valgrind (make test covers that on glibc) and the
# installed-copy check (how the install tree is laid out, not libc-specific).
#   scripts/test-musl.sh      (make test-musl runs this; so does .ci/run)
# Installs its Debian packages when run as root (scripts/deps.sh musl).  Safe
# to run again: cmocka is built once per build directory.
#
# The tests need a cmocka built against musl, and Debian ships none.  Its
# source package is fetched from the Debian archive, verified by apt against
# the archive's signed index, and built into $build/deps.  apt runs with its
# own lists, cache and sources under $build/apt (a deb-src line for this
# release), so the machine's apt sources are neither needed nor changed.
#
# Environment: WERROR=ON|OFF (default OFF), JOBS (default 2),
#   TDL_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "$0")/.."

build=$PWD/build/musl
jobs=${JOBS:-2}
mirror=${TDL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
prefix=$build/deps

scripts/deps.sh musl

# --- cmocka for musl ----------------------------------------------------------
if [ ! -f "$prefix/lib/pkgconfig/cmocka.pc" ]; then
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  apt=$build/apt
  rm -rf "$apt" "$build/cmocka-src" "$build/cmocka-build"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/parts" "$apt/src"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $codename main" \
    >"$apt/sources.list"
  aptopts=(-q -o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/parts"
           -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache")
  # As root, apt downloads as the unprivileged _apt user: let it write here.
  if [ "$(id -u)" = 0 ] && id _apt >/dev/null 2>&1; then
    chown _apt "$apt/src"
  fi
  echo "musl: fetching Debian's cmocka source ($codename)" >&2
  apt-get "${aptopts[@]}" update >/dev/null
  (cd "$apt/src" && apt-get "${aptopts[@]}" source --download-only cmocka >/dev/null)
  # The upstream tarball alone: Debian's only patch concerns the docs.
  orig=$(ls "$apt"/src/cmocka_*.orig.tar.* | grep -v '\.asc$')
  mkdir -p "$build/cmocka-src"
  tar -xf "$orig" -C "$build/cmocka-src" --strip-components=1
  cmake -S "$build/cmocka-src" -B "$build/cmocka-build" -DCMAKE_C_COMPILER=musl-gcc \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DUNIT_TESTING=OFF -DWITH_EXAMPLES=OFF >/dev/null
  cmake --build "$build/cmocka-build" -j"$jobs" >/dev/null
  cmake --install "$build/cmocka-build" >/dev/null
fi

# --- build --------------------------------------------------------------------
cmake -S . -B "$build" --no-warn-unused-cli \
  -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-musl.cmake -DTDL_MUSL_PREFIX="$prefix" \
  -DCMAKE_BUILD_TYPE=Debug -DTDL_DEBUG_CHECKS=ON -DTDL_TESTS=ON -DTDL_BENCH=OFF \
  -DTDL_WERROR="${WERROR:-OFF}" >/dev/null
cmake --build "$build" -j"$jobs"

# --- test ---------------------------------------------------------------------
ctest --test-dir "$build" --output-on-failure -j"$jobs"
CC=musl-gcc scripts/readme-example.sh "$build"
