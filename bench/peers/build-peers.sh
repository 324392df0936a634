#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds the peers of treadle-bench that have toolchains or libraries of their
# own (see docs/BENCHMARKS.md):
#
#   bench/peers/build-peers.sh [BUILDDIR] [PEER...]    (default: build, every peer)
#
# PEER is go (bench-go, from go/), go-http (bench-go-http, the Go peer of
# examples/httpd, from go-http/), tokio (bench-tokio, from tokio/), may
# (bench-may, from may/), monoio (bench-monoio, from monoio/), st (bench-st,
# State Threads, from st/) or boost-fiber (bench-boost-fiber, Boost.Fiber
# over Boost.Asio, from boost-fiber/); each is put in BUILDDIR only where its
# toolchain (go, cargo) or its library and compiler (st: libst-dev and cc;
# boost-fiber: libboost-fiber-dev, libboost-context-dev and c++) are
# installed (scripts/deps.sh bench).  A missing toolchain or library, or a
# build that fails (too old a toolchain, no network on the very first fetch
# of a Rust peer's crates), is reported on stderr and skipped: the script
# exits 0 so that the treadle build and benchmarks never depend on a peer.
# PEERS_STRICT=1 makes a failed build (not a missing toolchain) exit 1, for
# checking the peers themselves.  Each build says how long it took.
#
# Offline-reproducible: the Go peers have no dependencies outside the standard
# library (go.mod, -mod=readonly, GOTOOLCHAIN=local: nothing is downloaded);
# the Rust peers (tokio, may, monoio) build from their committed Cargo.lock
# (--locked), first with --offline from the local crate cache and, only if
# that fails, once online.  Cargo's outputs go to <BUILDDIR>/peers-NAME-target,
# never into the source tree.  The C and C++ peers (st, boost-fiber) are
# compiled at -O2, as the C peers of bench/CMakeLists.txt are, with
# ../common/common.c (the RESULT line and the option parser of treadle-bench).
set -u

here=$(cd "$(dirname "$0")" && pwd)
builddir=${1:-build}
[ $# -gt 0 ] && shift
peers=${*:-go go-http tokio may monoio st boost-fiber}
for p in $peers; do
  case $p in
    go | go-http | tokio | may | monoio | st | boost-fiber) ;;
    *) echo "build-peers: no peer '$p' (peers: go go-http tokio may monoio st boost-fiber)" >&2; exit 2 ;;
  esac
done
wants() { case " $peers " in *" $1 "*) return 0 ;; esac; return 1; }
mkdir -p "$builddir" || { echo "build-peers: cannot create $builddir" >&2; exit 0; }
builddir=$(cd "$builddir" && pwd)
failed=0

note() { echo "build-peers: $*" >&2; }

# --- Go ---------------------------------------------------------------------
# go_build DIR BINARY: one Go peer.
go_build() {
  t0=$(date +%s)
  if (cd "$here/$1" &&
      GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -mod=readonly" \
        go build -trimpath -o "$builddir/$2" .); then
    note "built $builddir/$2 ($(go version 2>/dev/null | cut -d' ' -f3), $(($(date +%s) - t0)) s)"
  else
    rm -f "$builddir/$2" # never leave a stale peer to be measured
    note "go build failed: $2 not built (needs Go >= 1.22)"
    failed=1
  fi
}
if wants go || wants go-http; then
  if command -v go >/dev/null 2>&1; then
    if wants go; then go_build go bench-go; fi
    if wants go-http; then go_build go-http bench-go-http; fi
  else
    note "no go toolchain: skipping the Go peers"
  fi
fi

# --- tokio, may, monoio ----------------------------------------------------
# cargo_peer NAME BINARY: one Rust peer from NAME/, built from its committed
# Cargo.lock into <BUILDDIR>/peers-NAME-target.
cargo_peer() {
  t0=$(date +%s)
  target="$builddir/peers-$1-target"
  manifest="$here/$1/Cargo.toml"
  if cargo build --quiet --release --locked --offline --manifest-path "$manifest" \
       --target-dir "$target" 2>/dev/null ||
     cargo build --release --locked --manifest-path "$manifest" --target-dir "$target"; then
    if cp "$target/release/$2" "$builddir/$2.tmp" &&
       mv -f "$builddir/$2.tmp" "$builddir/$2"; then
      note "built $builddir/$2 ($(cargo --version 2>/dev/null | cut -d' ' -f2), $(($(date +%s) - t0)) s)"
    else
      note "cannot copy $2 into $builddir"
      failed=1
    fi
  else
    rm -f "$builddir/$2" # never leave a stale peer to be measured
    note "cargo build failed: $2 not built"
    failed=1
  fi
}
for p in tokio may monoio; do
  if ! wants $p; then
    :
  elif command -v cargo >/dev/null 2>&1; then
    cargo_peer $p bench-$p
  else
    note "no cargo: skipping bench-$p"
  fi
done

# --- State Threads, Boost.Fiber ------------------------------------------------
# c_peer NAME BINARY COMPILER HEADER LIBS...: one peer in C or C++ from NAME/,
# where COMPILER is installed and finds HEADER.
common="$here/../common"
c_peer() {
  name=$1 bin=$2 cc=$3 header=$4
  shift 4
  if ! command -v "$cc" >/dev/null 2>&1; then
    note "no $cc: skipping $bin"
    return
  fi
  case $cc in *++) lang=c++ ;; *) lang=c ;; esac
  if ! printf '#include <%s>\n' "$header" | "$cc" -x "$lang" -E - >/dev/null 2>&1; then
    note "no <$header> (scripts/deps.sh bench installs it): skipping $bin"
    return
  fi
  t0=$(date +%s)
  tmp=$(mktemp -d) || return
  if ${CC:-cc} -O2 -D_GNU_SOURCE -I"$common" -c "$common/common.c" -o "$tmp/common.o" &&
     "$cc" -O2 -D_GNU_SOURCE -I"$common" "$here/$name"/*.c* "$tmp/common.o" -o "$tmp/$bin" "$@" &&
     mv -f "$tmp/$bin" "$builddir/$bin"; then
    note "built $builddir/$bin ($(($(date +%s) - t0)) s)"
  else
    rm -f "$builddir/$bin" # never leave a stale peer to be measured
    note "$cc failed: $bin not built"
    failed=1
  fi
  rm -rf "$tmp"
}
if wants st; then
  # Debian's libst-dev ships a static libst.a and st.pc.
  c_peer st bench-st "${CC:-cc}" st.h -lst
fi
if wants boost-fiber; then
  c_peer boost-fiber bench-boost-fiber "${CXX:-c++}" boost/fiber/all.hpp -std=c++17 \
    -lboost_fiber -lboost_context -pthread
fi

if [ "$failed" -ne 0 ] && [ "${PEERS_STRICT:-0}" = 1 ]; then
  exit 1
fi
exit 0
