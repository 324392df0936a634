#!/bin/sh
# Runs every test binary under valgrind memcheck, once per back end; fails on
# any error or any definite/indirect leak.   scripts/valgrind-tests.sh BUILD_DIR
set -u
dir=${1:-build/test}
status=0
for t in "$dir"/tests/test_*; do
  [ -x "$t" ] || continue
  for be in epoll poll; do
    log=$(mktemp)
    if TDL_BACKEND=$be valgrind -q --error-exitcode=99 --leak-check=full \
         --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
         --child-silent-after-fork=yes "$t" >"$log" 2>&1; then
      echo "valgrind ok   $(basename "$t").$be"
    else
      echo "valgrind FAIL $(basename "$t").$be"; tail -40 "$log"; status=1
    fi
    rm -f "$log"
  done
done
exit $status
