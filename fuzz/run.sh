#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Build every libFuzzer target of treadle and fuzz each one briefly.
#
#   fuzz/run.sh [SECONDS] [TARGET...]     (default 10 s each, every target)
#
# Each target is built with clang -fsanitize=fuzzer,address,undefined into
# build/fuzz/TARGET/ ($FUZZ_DIR instead of build/fuzz), with the library
# sources it needs compiled in, and run for SECONDS on a scratch corpus
# there: the seeds of fuzz/corpus/TARGET/ are copied in (the repository's
# corpus is never written) and what a run finds stays for the next local run.
# Two targets run side by side ($FUZZ_JOBS).  Exits non-zero when a target
# cannot be built or finds something; the input is left in
# build/fuzz/TARGET/crash-* (or leak-*, timeout-*, oom-*), and
#   build/fuzz/TARGET/fuzz_TARGET build/fuzz/TARGET/crash-...
# replays it.  fuzz/README.md lists the targets and what each checks.
# Debian: apt-get install clang (installed here when run as root).
set -euo pipefail
secs=${1:-10}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_DIR:-$root/build/fuzz}
jobs=${FUZZ_JOBS:-2}
cc=${CLANG:-clang}
all=(addr dns_name chunked resp spawn_env http_parser tls_server)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

# The whole library (CMakeLists.txt's TDL_SOURCES, without io_uring), for a
# target that runs fibers on a loop.
library_sources() {
  sed -n '/^set(TDL_SOURCES/,/^)/s/^ *\(src\/[^ ]*\.[cS]\)$/\1/p' "$root/CMakeLists.txt" |
    sed "s/\${TDL_ARCH}/$(uname -m)/"
}

# What each target is built from (the harness first), the longest input,
# its dictionary, and the libraries it links.
spec() {
  dict=
  libs=
  case $1 in
  addr)        srcs="fuzz/fuzz_addr.c src/net/addr.c"; maxlen=512; dict=fuzz/addr.dict ;;
  dns_name)    srcs="fuzz/fuzz_dns_name.c src/dns/name.c src/net/addr.c"; maxlen=512; dict=fuzz/addr.dict ;;
  chunked)     srcs="fuzz/fuzz_chunked.c examples/httpd/http_parser.c"; maxlen=4096 ;;
  resp)        srcs="fuzz/fuzz_resp.c examples/kv/resp.c"; maxlen=4096; dict=fuzz/resp.dict ;;
  spawn_env)   srcs="fuzz/fuzz_spawn_env.c"; maxlen=2048 ;;  # includes src/process/path.c
  http_parser) srcs="examples/httpd/fuzz_http_parser.c examples/httpd/http_parser.c"; maxlen=4096
               dict=examples/httpd/http.dict ;;
  tls_server)  srcs="fuzz/fuzz_tls_server.c src/tls/config.c src/tls/stream.c $(library_sources | tr '\n' ' ')"
               maxlen=4096; libs="-lssl -lcrypto -lpthread" ;;
  *) echo "fuzz/run.sh: no target '$1' (targets: ${all[*]})" >&2; exit 2 ;;
  esac
}

if ! command -v "$cc" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "fuzz/run.sh: installing clang" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
  else
    echo "fuzz/run.sh: clang is missing. Run:  sudo apt-get install -y clang" >&2
    exit 1
  fi
fi

# Run "$@" in the background, at most $jobs at a time.
running=0
spawn() {
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  "$@" &
  running=$((running + 1))
}
wait_all() {
  wait || true
  running=0
}

build() {
  local t=$1 dir=$out/$1
  spec "$t"
  mkdir -p "$dir"
  rm -f "$dir/status"
  # shellcheck disable=SC2086 # $srcs is a list
  if (cd "$root" && "$cc" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -Wall -Wextra -D_GNU_SOURCE -DTDL_BUILDING=1 -Iinclude -Isrc -Iexamples/httpd -Iexamples/kv \
        $srcs $libs -o "$dir/fuzz_$t") >"$dir/build.log" 2>&1; then
    echo 0 >"$dir/status"
  else
    echo build >"$dir/status"
  fi
}

fuzz() {
  local t=$1 dir=$out/$1 rc=0
  spec "$t"
  mkdir -p "$dir/corpus"
  rm -f "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* "$dir"/slow-unit-*
  if [ -d "$root/fuzz/corpus/$t" ]; then
    cp -n "$root/fuzz/corpus/$t"/* "$dir/corpus/" 2>/dev/null || true
  fi
  (cd "$dir" && UBSAN_OPTIONS=print_stacktrace=1 "./fuzz_$t" -max_total_time="$secs" -max_len="$maxlen" \
     -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$dir/" -print_final_stats=1 \
     ${dict:+-dict="$root/$dict"} corpus) >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/status"
}

for t in "${targets[@]}"; do spec "$t"; done   # unknown names fail before any work
echo "fuzz/run.sh: building ${targets[*]} into $out" >&2
for t in "${targets[@]}"; do spawn build "$t"; done
wait_all
failed=()
for t in "${targets[@]}"; do
  if [ "$(cat "$out/$t/status")" != 0 ]; then
    echo "fuzz/run.sh: $t does not build:" >&2
    cat "$out/$t/build.log" >&2
    failed+=("$t")
  fi
done
[ ${#failed[@]} -eq 0 ] || exit 1

echo "fuzz/run.sh: fuzzing each target for ${secs}s, $jobs at a time" >&2
for t in "${targets[@]}"; do spawn fuzz "$t"; done
wait_all
for t in "${targets[@]}"; do
  dir=$out/$t
  rc=$(cat "$dir/status")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -n 1)
  units=$(find "$dir/corpus" -type f | wc -l)
  if [ "$rc" = 0 ]; then
    echo "fuzz/run.sh: $t: ok, ${runs:-?} runs, corpus $units inputs" >&2
  else
    echo "fuzz/run.sh: $t: FOUND SOMETHING (exit $rc); the end of $dir/log:" >&2
    grep -v '^#[0-9]' "$dir/log" | tail -n 60 >&2
    ls "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* 2>/dev/null >&2 || true
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz/run.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz/run.sh: ${#targets[@]} targets fuzzed ${secs}s each, nothing found" >&2
