#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cross-build treadle and its tests for AArch64 and run them under qemu-user.
#   .ci/aarch64.sh            (make test-aarch64 runs this; so does .ci/run)
# Installs what it needs with apt-get when run as root (CI machines start
# fresh), otherwise names the missing packages.  Safe to run again: it only
# installs what is missing and reuses the build directory.
#
# Environment: WERROR=ON|OFF (default OFF), JOBS (default 2),
#   TDL_QEMU_EXCLUDE: a ctest -E regex of tests not run under qemu-user
#   (set it to "" to run everything).
#
# Tests see TDL_QEMU_USER=1 (cmake/toolchain-aarch64.cmake) and skip the
# cases qemu-user cannot emulate (test_fiber: exec of /proc/self/exe, which is
# qemu there, and RLIMIT_AS, which qemu keeps to itself).  The default still
# excludes the spawn tests, which fail under qemu 7.2: spawning and watching
# children there fails, and emulated children's timing is erratic (process
# spawning is not architecture-specific code; it is tested natively).
# Everything else runs (switch, stack, overflow, loop, timer, io, net, chan,
# sync, ..., and gdb/treadle.py through qemu's gdb stub with gdb-multiarch),
# built RelWithDebInfo: -O2, as programs ship, with debug information.  Emulation is 10-50x slower and uneven, so a test gets a second
# try; one that fails twice fails the job.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/aarch64
jobs=${JOBS:-2}
# The torture test of fiber I/O counts a second without progress as a stall:
# under emulation that measures qemu, not treadle (its logic is the same on
# every architecture, and it runs natively on x86-64).
exclude=${TDL_QEMU_EXCLUDE-'^test_spawn[a-z_]*\.|^test_torture'}

# --- dependencies -----------------------------------------------------------
# The cross compiler and its sysroot, and qemu.  Debian ships no cross cmocka,
# and installing libcmocka-dev:arm64 would replace the native libcmocka-dev
# (the two cannot be installed side by side) and pull in a multiarch
# libc6:arm64 of another revision than the cross sysroot's.  So cmocka's two
# arm64 packages are downloaded and unpacked into $deps, a private sysroot
# the toolchain file points pkg-config and the emulated loader at.
pkgs="cmake make pkg-config gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user gdb-multiarch python3"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
deps=build/aarch64-deps
need_arm64_lists=""
if [ ! -f "$deps/usr/lib/aarch64-linux-gnu/pkgconfig/cmocka.pc" ] &&
  ! apt-cache show libcmocka-dev:arm64 >/dev/null 2>&1; then
  need_arm64_lists=1
fi
if [ -n "$missing" ] || [ -n "$need_arm64_lists" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "aarch64: missing packages. Run:" >&2
    echo "  sudo dpkg --add-architecture arm64 && sudo apt-get update && sudo apt-get install -y$missing" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
  fi
  apt-get update -qq >/dev/null
  if [ -n "$missing" ]; then
    echo "aarch64: installing$missing" >&2
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
fi
if [ ! -f "$deps/usr/lib/aarch64-linux-gnu/pkgconfig/cmocka.pc" ]; then
  echo "aarch64: unpacking cmocka for arm64 into $deps" >&2
  rm -rf "$deps" && mkdir -p "$deps/debs"
  (cd "$deps/debs" && apt-get download -qq libcmocka0:arm64 libcmocka-dev:arm64 >/dev/null)
  for d in "$deps"/debs/*.deb; do dpkg-deb -x "$d" "$deps"; done
fi

# --- build --------------------------------------------------------------------
cmake -S . -B "$build" \
  -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDL_DEBUG_CHECKS=ON -DTDL_BENCH=OFF \
  -DTDL_WERROR="${WERROR:-OFF}" >/dev/null
cmake --build "$build" -j"$jobs"

# --- test under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR runs each binary) ----
args=(--test-dir "$build" --output-on-failure -j"$jobs" --repeat until-pass:2)
if [ -n "$exclude" ]; then
  args+=(-E "$exclude")
fi
ctest "${args[@]}"
