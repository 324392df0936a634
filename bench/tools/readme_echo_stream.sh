#!/bin/sh
# SPDX-License-Identifier: MIT
# echo-stream against the README's echo server (docs/BENCHMARKS.md): the
# program README.md opens with, built against BUILD's libtreadle.a, serves on
# CPU 0 on each back end in turn; treadle-bench echo-stream streams 512-byte
# messages both ways over one connection from CPU 1 for SECONDS; ROUNDS
# rounds, the back ends interleaved within each.  Prints one line per run:
# bytes echoed per second and the server's CPU time per byte (from
# /proc/PID/stat around the run).  With BUF, the server reads into a buffer
# of BUF bytes instead of the README's 4096, in the same rounds (the line
# says buf=...): how much a read takes changes how TCP batches the stream.
#   bench/tools/readme_echo_stream.sh [BUILD=build/release] [ROUNDS=5] [SECONDS=5] [BUF]
set -eu
build=${1:-build/release} rounds=${2:-5} secs=${3:-5} buf=${4:-}
bench=$build/bench/treadle-bench
[ -x "$bench" ] || { echo "readme_echo_stream: $bench not built" >&2; exit 2; }
dir=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$dir"' EXIT
awk '/^```c$/ && !done {on=1; next} /^```$/ && on {on=0; done=1} on' README.md > "$dir/echo.c"
uring=$(sed -n 's/^LIBURING_LDFLAGS:INTERNAL=//p' "$build/CMakeCache.txt" | tr ';' ' ')
grep -q 'char buf\[4096\]' "$dir/echo.c" || { echo "readme_echo_stream: the README's server has no 4096-byte buffer" >&2; exit 2; }
sizes="4096 $buf"
# shellcheck disable=SC2086
for size in $sizes; do
  sed "s/char buf\[4096\]/char buf[$size]/" "$dir/echo.c" > "$dir/echo-$size.c"
  ${CC:-cc} -O2 -Iinclude "$dir/echo-$size.c" "$build/libtreadle.a" -lpthread -ldl $uring -o "$dir/echo-$size"
done
bes="epoll poll"
grep -q '^LIBURING_FOUND:INTERNAL=1' "$build/CMakeCache.txt" && bes="$bes uring"
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for r in $(seq 1 "$rounds"); do
  for be in $bes; do for size in $sizes; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    TDL_BACKEND=$be taskset -c 0 "$dir/echo-$size" "127.0.0.1:$port" &
    srv=$!
    python3 -c "
import socket, time
for _ in range(100):
    try:
        socket.create_connection(('127.0.0.1', $port), timeout=1).close(); break
    except OSError:
        time.sleep(0.05)"
    t0=$(cpu "$srv")
    out=$(taskset -c 1 "$bench" echo-stream --port "$port" --seconds "$secs" --size 512)
    t1=$(cpu "$srv")
    kill "$srv"; wait "$srv" 2>/dev/null || true; srv=
    bytes=$(echo "$out" | sed -n 's/.* bytes=\([0-9]*\).*/\1/p')
    bps=$(echo "$out" | sed -n 's/.*bytes_per_s=\([0-9]*\).*/\1/p')
    echo "round $r $be buf=$size bytes_per_s=$bps server_cpu_ns_per_byte=$(echo "scale=3; ($t1 - $t0) * 1000000000 / $tck / $bytes" | bc)"
  done; done
done
