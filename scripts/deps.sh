#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs (as root) or names (otherwise) the Debian packages a job needs.
#   scripts/deps.sh test|bench|aarch64|musl|abi|fuzz
set -eu
case "${1:-test}" in
  test)    pkgs="cmake make gcc pkg-config libcmocka-dev valgrind python3 redis-server redis-tools libhiredis-dev man-db liburing-dev libcurl4-openssl-dev python3-prometheus-client gdb linux-perf" ;;
  bench)   pkgs="cmake make gcc pkg-config python3 python3-matplotlib libev-dev libuv1-dev libevent-dev redis-server redis-tools libhiredis-dev liburing-dev" ;;
  aarch64) pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user gdb-multiarch python3" ;;
  musl)    pkgs="cmake make gcc pkg-config musl-tools xz-utils debian-archive-keyring python3" ;;
  abi)     pkgs="cmake make gcc pkg-config liburing-dev abigail-tools" ;;
  fuzz)    pkgs="clang" ;;
  *) echo "usage: $0 test|bench|aarch64|musl|abi|fuzz" >&2; exit 2 ;;
esac
# libtreadle-tls and its tests: OpenSSL 3, the openssl command, curl.
[ "${1:-test}" = test ] && pkgs="$pkgs libssl-dev openssl curl"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "treadle: installing$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq $missing >/dev/null
else
  echo "treadle: missing packages. Run:  sudo apt-get install -y$missing" >&2
  exit 1
fi
