#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs (as root) or names (otherwise) the Debian packages a job needs.
#   scripts/deps.sh test|bench|aarch64|musl|abi|fuzz|analyse
set -eu
case "${1:-test}" in
  test)    pkgs="cmake make gcc pkg-config libcmocka-dev valgrind python3 redis-server redis-tools libhiredis-dev man-db liburing-dev libcurl4-openssl-dev python3-prometheus-client gdb linux-perf gcovr" ;;
  bench)   pkgs="cmake make gcc pkg-config python3 python3-matplotlib libev-dev libuv1-dev libevent-dev redis-server redis-tools libhiredis-dev liburing-dev" ;;
  aarch64) pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user gdb-multiarch python3" ;;
  musl)    pkgs="cmake make gcc pkg-config musl-tools xz-utils debian-archive-keyring python3" ;;
  abi)     pkgs="cmake make gcc pkg-config liburing-dev abigail-tools" ;;
  fuzz)    pkgs="clang" ;;
  # scan-build is in clang-tools; liburing and OpenSSL so that the uring back
  # end and libtreadle-tls are analysed too.
  analyse) pkgs="cmake make gcc pkg-config liburing-dev libssl-dev clang-tools cppcheck" ;;
  *) echo "usage: $0 test|bench|aarch64|musl|abi|fuzz|analyse" >&2; exit 2 ;;
esac
# libtreadle-tls and its tests: OpenSSL 3, the openssl command, curl.
[ "${1:-test}" = test ] && pkgs="$pkgs libssl-dev openssl curl"
# The hook's database tests (tests/hook/test_hook_pg.c, test_hook_mariadb.c)
# and the cookbook's database recipe: the clients libpq and MariaDB
# Connector/C, and the servers that the tests start themselves, each in a
# temporary directory (as nobody when run as root: tests/hook/dbserver.h).
[ "${1:-test}" = test ] && pkgs="$pkgs postgresql libpq-dev mariadb-server libmariadb-dev"
# The fiber runtimes among the peers (bench/peers/build-peers.sh builds them):
# State Threads (bench-st) and Boost.Fiber over Boost.Asio (bench-boost-fiber;
# Asio is in libboost-dev's headers), and the C++ compiler for the latter.
[ "${1:-test}" = bench ] && pkgs="$pkgs g++ libst-dev libboost-fiber-dev libboost-context-dev libboost-dev"
# The pg benchmark group: libpq for its clients, and the server that
# bench/drivers/pg_driver.py starts for each run.
[ "${1:-test}" = bench ] && pkgs="$pkgs postgresql libpq-dev"
# The tls benchmark group: treadle-bench tls-bulk (libtreadle-tls), and the
# openssl command (certificates, s_time, s_server and s_client).
[ "${1:-test}" = bench ] && pkgs="$pkgs libssl-dev openssl"
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
