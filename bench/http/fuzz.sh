#!/bin/sh
# Fuzz the HTTP request parser of examples/httpd with libFuzzer.
#
#   bench/http/fuzz.sh [SECONDS]        (default 30)
#
# The http_parser target of fuzz/run.sh (which builds and fuzzes every
# target: see fuzz/README.md): builds examples/httpd/fuzz_http_parser.c with
# clang -fsanitize=fuzzer,address,undefined into build/fuzz/http_parser/,
# seeds a scratch corpus there from fuzz/corpus/http_parser/, and fuzzes for
# SECONDS.  Exits non-zero on a finding (the crashing input is left in
# build/fuzz/http_parser/crash-*) or when it cannot build.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../../fuzz/run.sh" "${1:-30}" http_parser
