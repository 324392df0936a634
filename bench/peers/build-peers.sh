#!/bin/sh
# Builds the Go and tokio peers of treadle-bench (see docs/BENCHMARKS.md):
#
#   bench/peers/build-peers.sh [BUILDDIR]      (default: build)
#
# puts <BUILDDIR>/bench-go and <BUILDDIR>/bench-tokio, each only where its
# toolchain (go, cargo) is installed.  A missing toolchain, or a build that
# fails (too old a toolchain, no network on the very first fetch of the tokio
# crates), is reported on stderr and skipped: the script exits 0 so that the
# treadle build and benchmarks never depend on a peer.  PEERS_STRICT=1 makes
# a failed build (not a missing toolchain) exit 1, for checking the peers
# themselves.
#
# Offline-reproducible: the Go peer has no dependencies outside the standard
# library (go.mod, -mod=readonly, GOTOOLCHAIN=local: nothing is downloaded);
# the tokio peer builds from its committed Cargo.lock (--locked), first with
# --offline from the local crate cache and, only if that fails, once online.
# Cargo's outputs go to <BUILDDIR>/peers-tokio-target, never into the source
# tree.
set -u

here=$(cd "$(dirname "$0")" && pwd)
builddir=${1:-build}
mkdir -p "$builddir" || { echo "build-peers: cannot create $builddir" >&2; exit 0; }
builddir=$(cd "$builddir" && pwd)
failed=0

note() { echo "build-peers: $*" >&2; }

# --- Go ---------------------------------------------------------------------
if command -v go >/dev/null 2>&1; then
  if (cd "$here/go" &&
      GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -mod=readonly" \
        go build -trimpath -o "$builddir/bench-go" .); then
    note "built $builddir/bench-go ($(go version 2>/dev/null | cut -d' ' -f3))"
  else
    rm -f "$builddir/bench-go" # never leave a stale peer to be measured
    note "go build failed: bench-go not built (needs Go >= 1.22)"
    failed=1
  fi
else
  note "no go toolchain: skipping bench-go"
fi

# --- tokio ------------------------------------------------------------------
if command -v cargo >/dev/null 2>&1; then
  target="$builddir/peers-tokio-target"
  manifest="$here/tokio/Cargo.toml"
  if cargo build --quiet --release --locked --offline --manifest-path "$manifest" \
       --target-dir "$target" 2>/dev/null ||
     cargo build --release --locked --manifest-path "$manifest" --target-dir "$target"; then
    if cp "$target/release/bench-tokio" "$builddir/bench-tokio.tmp" &&
       mv -f "$builddir/bench-tokio.tmp" "$builddir/bench-tokio"; then
      note "built $builddir/bench-tokio ($(cargo --version 2>/dev/null))"
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
