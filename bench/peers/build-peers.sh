#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds the peers of treadle-bench that have toolchains of their own (see
# docs/BENCHMARKS.md):
#
#   bench/peers/build-peers.sh [BUILDDIR] [PEER...]    (default: build, every peer)
#
# PEER is go (bench-go, from go/), go-http (bench-go-http, the Go peer of
# examples/httpd, from go-http/) or tokio (bench-tokio, from tokio/); each
# is put in BUILDDIR only where its toolchain (go, cargo) is installed.  A
# missing toolchain, or a build that fails (too old a toolchain, no network
# on the very first fetch of the tokio crates), is reported on stderr and
# skipped: the script exits 0 so that the treadle build and benchmarks never
# depend on a peer.  PEERS_STRICT=1 makes a failed build (not a missing
# toolchain) exit 1, for checking the peers themselves.  Each build says how
# long it took.
#
# Offline-reproducible: the Go peers have no dependencies outside the standard
# library (go.mod, -mod=readonly, GOTOOLCHAIN=local: nothing is downloaded);
# the tokio peer builds from its committed Cargo.lock (--locked), first with
# --offline from the local crate cache and, only if that fails, once online.
# Cargo's outputs go to <BUILDDIR>/peers-tokio-target, never into the source
# tree.
set -u

here=$(cd "$(dirname "$0")" && pwd)
builddir=${1:-build}
[ $# -gt 0 ] && shift
peers=${*:-go go-http tokio}
for p in $peers; do
  case $p in go | go-http | tokio) ;; *) echo "build-peers: no peer '$p' (peers: go go-http tokio)" >&2; exit 2 ;; esac
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

# --- tokio ------------------------------------------------------------------
if ! wants tokio; then
  :
elif command -v cargo >/dev/null 2>&1; then
  t0=$(date +%s)
  target="$builddir/peers-tokio-target"
  manifest="$here/tokio/Cargo.toml"
  if cargo build --quiet --release --locked --offline --manifest-path "$manifest" \
       --target-dir "$target" 2>/dev/null ||
     cargo build --release --locked --manifest-path "$manifest" --target-dir "$target"; then
    if cp "$target/release/bench-tokio" "$builddir/bench-tokio.tmp" &&
       mv -f "$builddir/bench-tokio.tmp" "$builddir/bench-tokio"; then
      note "built $builddir/bench-tokio ($(cargo --version 2>/dev/null | cut -d' ' -f2), $(($(date +%s) - t0)) s)"
    else
      note "cannot copy bench-tokio into $builddir"
      failed=1
    fi
  else
    rm -f "$builddir/bench-tokio" # never leave a stale peer to be measured
    note "cargo build failed: bench-tokio not built"
    failed=1
  fi
else
  note "no cargo: skipping bench-tokio"
fi

if [ "$failed" -ne 0 ] && [ "${PEERS_STRICT:-0}" = 1 ]; then
  exit 1
fi
exit 0
