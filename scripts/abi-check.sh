#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The ABI check: libtreadle.so, libtreadle-hook.so and, where the build
# makes it (OpenSSL 3 found), libtreadle-tls.so against the baselines in abi/
# (abixml files, libabigail's format), so that within one MAJOR the ABI only
# grows (include/treadle.h, COMPATIBILITY).
#   scripts/abi-check.sh BUILD_DIR             check (make abi-check; .ci/run)
#   scripts/abi-check.sh BUILD_DIR --update    rewrite abi/*.abi from this build
#   scripts/abi-check.sh BUILD_DIR --update LIB...
#                                              rewrite only those (libtreadle-tls)
#
# BUILD_DIR is configured RelWithDebInfo (tests and benchmarks off) if it has
# no build yet; an existing one is used as it is, and must be built with -g
# (RelWithDebInfo or Debug) from this source tree.  Only the libraries are
# built.  Installs its Debian packages when run as root (scripts/deps.sh abi:
# abigail-tools, and liburing-dev so that the build is the one users get).
#
# What counts: abidw reads the DWARF of the library and keeps the exported
# functions (only tdl_* are exported: -fvisibility=hidden; for the hook
# library, the libc calls it overrides and tdl_hook_*; for the TLS library,
# tdl_tls_*) with every type they
# reach that is defined in include/ (--headers-dir include/
# --drop-private-types): the public structs with all their fields, private
# ones included, since callers allocate them; a type defined in src/ and
# reached only by pointer does not count.  abidiff then compares the dump with
# the baseline; its exit code is a bit set (man abidiff):
#   1 error, 2 usage error, 4 the ABIs differ, 8 an incompatible difference
#   (a function or variable removed).
# This script's verdict:
#   - 0: passes.  abidiff leaves out changes it deems harmless (an enumerator
#     added at the end, a field renamed in place, a typedef for the same
#     type); they are printed as a note (abidiff --harmless);
#   - 8 (with 4): fails, printing abidiff's report;
#   - 4 alone: "may or may not be compatible" for abidiff.  It is compared
#     again with added functions and variables left out (--no-added-syms):
#     if nothing is left, the change only adds to the ABI, which a MINOR may
#     do: it passes, and the report is printed as a note (the baseline keeps
#     the old ABI until it is updated, so every addition since is listed).
#     Anything left (a parameter or return type changed, a field added,
#     removed or retyped, a struct's size, an enumerator's value) fails: the
#     promise covers type layouts, private fields included;
#   - 1 or 2: fails (exit 2): the tool could not compare.
# Not seen by any of this: macros (#define constants), and what a static
# inline function in a header does; review those by hand.
# Exit status: 0 passes, 1 ABI broken, 2 the check could not run.
#
# The baseline is reproducible: two dumps of the same commit are the same
# bytes.  The dump leaves out what depends on the machine rather than the
# code: paths (--no-corpus-path, --no-comp-dir-path, and the source tree's
# prefix of each translation unit's name, cut here), source lines
# (--no-show-locs, so a comment edit changes nothing) and DT_NEEDED
# (--no-elf-needed); types get ids hashed from their names
# (--type-id-style hash), so that a change to the baseline reads as a diff.
# The order of declarations follows their files' paths, so the build names
# them relative to the tree (-ffile-prefix-map, set when this script
# configures BUILD_DIR; --update takes no other build).  It is made on x86-64
# Linux with Debian 12's GCC and libabigail 2.2.
#
# Updating the baseline, when the ABI is meant to change:
#   - an addition (a new MINOR) passes the check without it; update to stop
#     the note, when the version is released:
#       scripts/abi-check.sh build/abi --update && git add abi/ && git commit
#   - a break needs a new MAJOR first (TDL_VERSION_MAJOR in
#     include/treadle.h, which renames the SONAME), then the same command.
# The dumps of the last run stay in BUILD_DIR/abi-dump/.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 BUILD_DIR [--update [LIB...]]" >&2; exit 2; }
[ $# -ge 1 ] || usage
build=$1
shift
update=0
only=""
if [ $# -ge 1 ]; then
  [ "$1" = --update ] || usage
  update=1
  shift
  for l in "$@"; do
    case $l in libtreadle | libtreadle-hook | libtreadle-tls) only="$only $l" ;; *) usage ;; esac
  done
fi
jobs=${JOBS:-2}
src=$(pwd -P)

scripts/deps.sh abi

# The debug information names files relative to the tree (-ffile-prefix-map):
# abidw orders declarations by their file's path, so that an absolute one
# would make the dump depend on where the tree is (before or after /usr).
prefix_map="-ffile-prefix-map=$src/="
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDL_TESTS=OFF -DTDL_BENCH=OFF \
    -DCMAKE_C_FLAGS="$prefix_map" >/dev/null
fi
home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
if [ "$(cd "$home" && pwd -P)" != "$src" ]; then
  echo "abi-check: $build is a build of $home, not of $src" >&2
  exit 2
fi
if [ $update = 1 ] && ! grep -qxF -- "CMAKE_C_FLAGS:STRING=$prefix_map" "$build/CMakeCache.txt"; then
  echo "abi-check: --update needs a build configured by this script (a new BUILD_DIR, e.g. build/abi)" >&2
  exit 2
fi
libs="libtreadle libtreadle-hook"
targets="treadle_shared treadle_hook"
# libtreadle-tls where the build makes it (TDL_TLS, OpenSSL 3 found).
# (The list is read whole first: grep -q would end the pipe early, which
# pipefail takes for a failure.)
known=$(cmake --build "$build" --target help 2>/dev/null || true)
if grep -qw treadle_tls <<<"$known"; then
  libs="$libs libtreadle-tls"
  targets="$targets treadle_tls"
elif [ -f abi/libtreadle-tls.abi ]; then
  echo "abi-check: libtreadle-tls.so is not built in $build (no OpenSSL 3): not checked"
fi
cmake --build "$build" -j"$jobs" --target $targets >/dev/null
for l in $only; do
  case " $libs " in *" $l "*) ;; *) echo "abi-check: $l.so is not built in $build: nothing to update" >&2; exit 2 ;; esac
done

# What abidiff filters out as harmless (an enumerator added at the end, a
# field renamed in place, a typedef for the same type...) is shown, not
# judged.  Returns 1 when there is none.
note_harmless() {
  local out h=0
  out=$(abidiff --no-default-suppression --harmless --no-added-syms "$old" "$new") || h=$?
  [ $((h & 4)) != 0 ] || return 1
  printf '%s\n' "$out"
  echo "abi-check: $lib.so: compatible with $old, changes abidiff calls harmless; listed above"
}

dump=$build/abi-dump
mkdir -p "$dump" abi
status=0
for lib in $libs; do
  case " $only " in "  ") ;; *" $lib "*) ;; *) continue ;; esac
  so=$(readlink -f "$build/$lib.so")
  if ! readelf -S --wide "$so" | grep -q ' \.debug_info '; then
    echo "abi-check: $so has no debug information: build $build with -g (RelWithDebInfo)" >&2
    exit 2
  fi
  new=$dump/$lib.abi
  old=abi/$lib.abi
  abidw --no-corpus-path --no-comp-dir-path --no-show-locs --no-elf-needed \
    --headers-dir include/ --drop-private-types --exported-interfaces-only \
    --type-id-style hash --out-file "$new.tmp" "$so"
  # A translation unit is named by its source's absolute path: keep it
  # relative to the tree, as the baseline does.
  sed "s|path='$src/|path='|" "$new.tmp" >"$new"
  rm -f "$new.tmp"

  if [ $update = 1 ]; then
    if [ -f "$old" ] && cmp -s "$old" "$new"; then
      echo "abi-check: $old is up to date"
    else
      cp "$new" "$old"
      echo "abi-check: wrote $old"
    fi
    continue
  fi
  if [ ! -f "$old" ]; then
    echo "abi-check: no baseline $old: make one with $0 $build --update" >&2
    exit 2
  fi

  rc=0
  report=$(abidiff --no-default-suppression "$old" "$new") || rc=$?
  if [ $rc = 0 ]; then
    note_harmless || echo "abi-check: $lib.so: the ABI of $old"
  elif [ $((rc & 3)) != 0 ]; then
    printf '%s\n' "$report"
    echo "abi-check: $lib.so: abidiff failed (exit $rc)" >&2
    exit 2
  elif [ $((rc & 8)) != 0 ]; then
    printf '%s\n' "$report"
    echo "abi-check: $lib.so: INCOMPATIBLE with $old (abidiff exit $rc: a function or variable removed)" >&2
    status=1
  else
    # The ABIs differ: is it only additions?
    rest=0
    abidiff --no-default-suppression --no-added-syms "$old" "$new" >/dev/null || rest=$?
    if [ $rest = 0 ]; then
      printf '%s\n' "$report"
      echo "abi-check: $lib.so: compatible with $old, only additions (abidiff exit $rc); listed above"
      note_harmless || true
    else
      printf '%s\n' "$report"
      echo "abi-check: $lib.so: CHANGED from $old (abidiff exit $rc; $rest with additions left out): within a MAJOR, no existing function or public type may change" >&2
      status=1
    fi
  fi
done
exit $status
