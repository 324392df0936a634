#!/bin/sh
# SPDX-License-Identifier: MIT
# Compiles the program README.md opens with, exactly as written there, against
# a built tree, runs it, and checks it as a client would: 50 connections at
# once each get their bytes echoed; a bad address is refused with a message.
#   scripts/readme-example.sh [BUILD_DIR]
# $CC compiles it (default cc; scripts/test-musl.sh passes musl-gcc).
set -eu
build=${1:-build/test}
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
awk '/^```c$/ && !done {on=1; next} /^```$/ && on {on=0; done=1} on' README.md > "$dir/echo.c"
[ -s "$dir/echo.c" ] || { echo "readme-example: no \`\`\`c block in README.md" >&2; exit 1; }
# The static library's own dependencies besides pthreads: liburing, when the
# build found it (its io_uring back end).
uring=$(sed -n 's/^LIBURING_LDFLAGS:INTERNAL=//p' "$build/CMakeCache.txt" | tr ';' ' ')
# shellcheck disable=SC2086
"${CC:-cc}" -std=c11 -Wall -Wextra -Wpedantic -Werror -Iinclude "$dir/echo.c" "$build/libtreadle.a" -lpthread $uring \
  -o "$dir/echo"

if "$dir/echo" not-an-address 2>"$dir/err"; then
  echo "readme-example: a bad address was accepted" >&2; exit 1
fi
grep -q "Invalid argument" "$dir/err" || { echo "readme-example: no message for a bad address" >&2; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$dir/echo" "127.0.0.1:$port" &
pid=$!
python3 - "$port" <<'PY'
import os, socket, sys, time
port = int(sys.argv[1])
for _ in range(100):                      # wait for the listener
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
    except OSError:
        time.sleep(0.05)
conns = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(50)]
msgs = [os.urandom(1 + 997 * i % 20000) for i in range(50)]
for c, m in zip(conns, msgs):
    c.sendall(m)
for c, m in zip(conns, msgs):
    got = b""
    while len(got) < len(m):
        chunk = c.recv(65536)
        if not chunk:
            sys.exit("readme-example: connection closed early")
        got += chunk
    if got != m:
        sys.exit("readme-example: echoed bytes differ")
    c.close()
print("readme-example: the README's program echoed 50 connections")
PY
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=

# And under a streaming client (treadle-bench echo-stream, where the build
# has the benchmarks): one connection written as fast as it takes 512-byte
# messages while its echoes are read, on each back end, every byte checked;
# a server whose reader stops with bytes waiting fails it (5 s without one).
bench=$build/bench/treadle-bench
if [ -x "$bench" ]; then
  bes="epoll poll"
  grep -q '^LIBURING_FOUND:INTERNAL=1' "$build/CMakeCache.txt" && bes="$bes uring"
  for be in $bes; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    TDL_BACKEND=$be "$dir/echo" "127.0.0.1:$port" &
    pid=$!
    python3 -c "
import socket, sys, time
for _ in range(100):
    try:
        socket.create_connection(('127.0.0.1', $port), timeout=1).close(); break
    except OSError:
        time.sleep(0.05)"
    "$bench" echo-stream --port "$port" --seconds 2 --size 512 >"$dir/stream" 2>&1 ||
      { cat "$dir/stream" >&2; echo "readme-example: the streaming client failed on $be" >&2; exit 1; }
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    echo "readme-example: the README's program echoed a stream on $be"
  done
else
  echo "readme-example: skipped the streaming client: $bench not built (TDL_BENCH=OFF)"
fi
