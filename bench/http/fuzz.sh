#!/bin/sh
# Fuzz the HTTP request parser of examples/httpd with libFuzzer.
#
#   bench/http/fuzz.sh [SECONDS]        (default 30)
#
# Builds examples/httpd/fuzz_http_parser.c with clang
# -fsanitize=fuzzer,address,undefined into build/fuzz/, seeds a corpus there
# (kept between runs), and fuzzes for SECONDS.  Exits non-zero on a finding
# (the crashing input is left in build/fuzz/crash-*) or when it cannot build.
# Debian: apt-get install clang (installed here when run as root).
set -eu
secs=${1:-30}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${FUZZ_DIR:-$root/build/fuzz}
src=$root/examples/httpd

if ! command -v clang >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "fuzz.sh: installing clang" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
  else
    echo "fuzz.sh: clang is missing. Run:  sudo apt-get install -y clang" >&2
    exit 1
  fi
fi

mkdir -p "$out/corpus"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src" "$src/fuzz_http_parser.c" "$src/http_parser.c" -o "$out/fuzz_http_parser"

# Seeds: one control byte (piece size, limit), then a request.
seed() { printf "$2" > "$out/corpus/seed-$1"; }
if [ -z "$(ls -A "$out/corpus")" ]; then
  seed get '\001GET / HTTP/1.1\r\nHost: localhost:8080\r\n\r\n'
  seed get10 '\003GET /static/a.txt?x=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n'
  seed post '\002POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello'
  seed chunked '\005POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: v\r\n\r\n'
  seed abs '\007GET http://example.com:80/a/b HTTP/1.1\r\nHost: example.com\r\nX-Empty:\r\n\r\n'
  seed options '\000OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n'
  seed connect '\011CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n'
  seed smuggle '\004POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'
  seed small '\221GET / HTTP/1.1\r\nHost: a\r\nCookie: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n'
fi

cd "$out"
echo "fuzz.sh: fuzzing the request parser for ${secs}s (corpus $out/corpus)" >&2
exec ./fuzz_http_parser -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -dict="$src/http.dict" -print_final_stats=1 "$out/corpus"
