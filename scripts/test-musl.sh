#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Build treadle, its tests and the examples against musl libc, run the tests
# (each on both back ends) and the README's program, natively with Debian's
# musl-gcc.  Not run here: valgrind (make test covers that on glibc) and the
# installed-copy check (how the install tree is laid out, not libc-specific).
# The library is built without frame pointers here (TDL_FRAME_POINTERS=OFF,
# as Release builds it), so that the suite also runs the code paths of a
# library that has none: call chains of dumps and watchdog reports say they
# need them instead of walking.
#   scripts/test-musl.sh      (make test-musl runs this; so does .ci/run)
# Installs its Debian packages when run as root (scripts/deps.sh musl).  Safe
# to run again: cmocka is built once per build directory.
#
# The tests need a cmocka built against musl, and Debian ships none.  Its
# source package is fetched from the Debian archive, verified by apt against
# the archive's signed index (debian-archive-keyring), and built into
# $build/deps.  The archive is the one this machine's apt already uses for
# this release's main component, as apt itself reads its sources
# (/etc/apt/sources.list, sources.list.d/*.list and deb822 *.sources); apt
# then runs with its own lists, cache and sources under $build/apt (a deb-src
# line for that archive), so the machine's apt state is not changed.
#
# Environment: WERROR=ON|OFF (default OFF), JOBS (default 2),
#   TDL_DEBIAN_MIRROR (the archive's URI, e.g. http://mirror.example/debian:
#   overrides the one from apt's sources).
set -euo pipefail
cd "$(dirname "$0")/.."

build=$PWD/build/musl
jobs=${JOBS:-2}
prefix=$build/deps

scripts/deps.sh musl

# The URI of the Debian archive that apt's sources name first for release $1's
# main component (its -updates or -backports suite will do: the same
# archive; not -security, another one).  --no-release-info: apt lists its
# sources without having downloaded their indexes.
debian_archive() {
  apt-get --no-release-info indextargets --format '$(RELEASE) $(COMPONENT) $(REPO_URI)' |
    awk -v c="$1" '$2 != "main" { next }
      $1 == c && !exact { exact = $3 }
      index($1, c "-") == 1 && $1 != c "-security" && !near { near = $3 }
      END { if (exact) print exact; else if (near) print near }'
}

# --- cmocka for musl ----------------------------------------------------------
if [ ! -f "$prefix/lib/pkgconfig/cmocka.pc" ]; then
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  mirror=${TDL_DEBIAN_MIRROR:-}
  if [ -z "$mirror" ]; then
    mirror=$(debian_archive "$codename") || mirror=""
  fi
  if [ -z "$mirror" ]; then
    echo "musl: apt has no source for Debian $codename main (apt-get indextargets);" \
      "set TDL_DEBIAN_MIRROR to a Debian archive's URI" >&2
    exit 1
  fi
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
  echo "musl: fetching Debian's cmocka source ($codename, from $mirror)" >&2
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
  -DCMAKE_BUILD_TYPE=Debug -DTDL_DEBUG_CHECKS=ON -DTDL_TESTS=ON -DTDL_BENCH=OFF -DTDL_FRAME_POINTERS=OFF \
  -DTDL_WERROR="${WERROR:-OFF}" >/dev/null
cmake --build "$build" -j"$jobs"

# --- test ---------------------------------------------------------------------
ctest --test-dir "$build" --output-on-failure -j"$jobs"
CC=musl-gcc scripts/readme-example.sh "$build"
