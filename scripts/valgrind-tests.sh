#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs every test binary under valgrind memcheck, on the epoll and uring back
# ends; fails on any error or any definite/indirect leak.   scripts/valgrind-tests.sh BUILD_DIR
set -u
# One run (the list below hands these out): --one TEST BACKEND LABEL
if [ "${1:-}" = --one ]; then
  t=$2 be=$3 label=$4
  log=$(mktemp)
  # --fair-sched=yes: valgrind runs one thread at a time, and by default
  # hands the lock over unfairly: a loop kept busy on purpose (test_remote's
  # posts under load) could starve the threads it waits for, for minutes.
  # timeout: a hang fails the run instead of stalling CI.
  if TDL_BACKEND=$be timeout 600 valgrind -q --fair-sched=yes --error-exitcode=99 --leak-check=full \
       --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
       --child-silent-after-fork=yes "$t" >"$log" 2>&1; then
    echo "valgrind ok   $label"
    rm -f "$log"
    exit 0
  fi
  # One block, so that two runs failing at once do not interleave.
  { echo "valgrind FAIL $label"; tail -40 "$log"; } >"$log.out"
  cat "$log.out"
  rm -f "$log" "$log.out"
  exit 1
fi
dir=${1:-build/test}
status=0
# epoll and, below, uring: the poll back end differs from epoll in one file
# (loop/backend/poll.c), which the native runs and ASan check; under
# valgrind it would only run every test a third time.
bes="epoll"
# The uring back end where the build has it (fd/ring.c tells memcheck what
# the kernel wrote through the ring).
grep -q '^LIBURING_FOUND:INTERNAL=1' "$dir/CMakeCache.txt" 2>/dev/null && bes="$bes uring"
# ...but not for the tests where threads meet (ctest label `threads`): under
# valgrind, which runs one thread at a time, a loop sleeping in the ring's
# io_uring_enter was seen never to hear the posts of other threads
# (test_acceptor, test_faults' acceptor walk hung until the timeout);
# natively, under ASan and under ThreadSanitizer they pass on uring.
threads=$(ctest --test-dir "$dir" -N -L threads 2>/dev/null | sed -n 's/.*Test *#[0-9]*: \(test_[a-z_]*\)\.uring$/\1/p')
# Nor test_net_emfile: under valgrind's slowness an accept the ring already
# holds takes the slot the reserve fd frees before the fiber can shed with it
# (the test then counts a connection accepted while full; natively it passes).
threads="$threads
test_net_emfile"
# Walks that fail each allocation in turn rerun the same code thousands of
# times, two minutes a run under valgrind, and ASan's leak checker runs them
# on every back end: test_faults (treadle's fault-injection sites) runs here
# on epoll only, test_tls_alloc (every one of OpenSSL's allocations) not at all.
walks="test_faults"
skip="test_tls_alloc"
echo "valgrind skips $skip: an allocation-failure walk, run natively and under ASan"
# Tests that pick their back end themselves (ctest names them without a
# back end's suffix: test_ring, test_readahead, ...) run once, not once per
# back end: $TDL_BACKEND changes nothing for them.
own=$(ctest --test-dir "$dir" -N 2>/dev/null | sed -n 's/.*Test *#[0-9]*: \(test_[a-z_]*\)$/\1/p')
jobs=$(mktemp)
for t in "$dir"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  echo "$skip" | grep -qx "$name" && continue
  picks=no
  echo "$own" | grep -qx "$name" && picks=yes
  for be in $bes; do
    if [ "$be" = uring ] && echo "$threads
$walks" | grep -qx "$name"; then
      continue
    fi
    label="$name.$be"
    if [ $picks = yes ]; then
      [ "$be" = epoll ] || continue
      label=$name
    fi
    echo "$t $be $label" >>"$jobs"
  done
done
# Two (JOBS) at a time: each run is one process on one core at a time
# (valgrind serialises a program's threads), so the runs share the machine.
xargs -P "${JOBS:-2}" -L 1 "$0" --one <"$jobs" || status=1
rm -f "$jobs"
kv="$dir/examples/kv/kv"
if [ -x "$kv" ] && command -v redis-server >/dev/null; then
  log=$(mktemp)
  if TDL_TEST_WRAP="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect --log-file=$log.vg" \
       python3 "$(dirname "$0")/../tests/examples/test_kv.py" "$kv" >"$log" 2>&1 && ! grep -q '==[0-9]*== [A-Z]' "$log.vg"; then
    echo "valgrind ok   kv (tests/examples/test_kv.py)"
  else
    echo "valgrind FAIL kv (tests/examples/test_kv.py)"; tail -20 "$log"; tail -40 "$log.vg"; status=1
  fi
  rm -f "$log" "$log.vg"
fi
exit $status
