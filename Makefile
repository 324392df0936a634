# SPDX-License-Identifier: MIT
# Entry points for a fresh machine.  The two in the README:
#   make bench   build in Release, build the peers that are installed, and take a
#                quick look at every benchmark group (one round at small sizes);
#                make bench-full runs the measurement itself (docs/BENCHMARKS.md)
#   make test    build with misuse checks, check the layering, the licence
#                lines, that docs/COOKBOOK.md is its recipes' and that
#                CHANGELOG.md's migration table names only what the headers
#                declare (and its man page the same rows), run every test
#                on each back end (epoll, poll, io_uring),
#                run them again under valgrind, check an installed copy is usable,
#                and compile and run the README's program
# CI (.ci/run) adds `make test-asan`, `make test-aarch64`, `make test-musl`,
# `make abi-check` and `make analyse`.
# make prints "Entering/Leaving directory" around every recursive make, also
# those that cmake --build starts: dozens of lines that say nothing.
MAKEFLAGS += --no-print-directory
export MAKEFLAGS

WERROR ?= OFF
JOBS ?= 2
CMAKE ?= cmake

.PHONY: all test test-build test-valgrind test-consumer test-asan coverage test-tsan test-aarch64 test-musl abi-check analyse bench bench-full bench-build clean soak

all: test-build

test-build:
	@scripts/deps.sh test
	$(CMAKE) -S . -B build/test -DCMAKE_BUILD_TYPE=Debug -DTDL_DEBUG_CHECKS=ON -DTDL_FAULTS=ON -DTDL_BENCH=ON -DTDL_WERROR=$(WERROR) >/dev/null
	$(CMAKE) --build build/test -j$(JOBS)

test: test-build
	scripts/check-layers.py --build build/test
	scripts/spdx.py --check
	scripts/gen-cookbook.py --check docs/COOKBOOK.md
	scripts/gen-migrate.py --check --page build/test/man/man7/treadle-migrate.7
	ctest --test-dir build/test --output-on-failure -j$(JOBS)
	scripts/valgrind-tests.sh build/test
	scripts/consumer-test.sh build/test
	scripts/readme-example.sh build/test

# COVERAGE=ON counts lines and branches as the suite runs (CI does, so
# that the suite runs once for both) and then checks scripts/coverage.py's
# floors.
COVERAGE ?= OFF
test-asan:
	@scripts/deps.sh test
	$(CMAKE) -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DTDL_DEBUG_CHECKS=ON -DTDL_FAULTS=ON -DTDL_SANITIZE=ON -DTDL_BENCH=OFF -DTDL_COVERAGE=$(COVERAGE) -DTDL_WERROR=$(WERROR) >/dev/null
	$(CMAKE) --build build/asan -j$(JOBS)
	find build/asan -name '*.gcda' -delete
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build/asan --output-on-failure -j$(JOBS)
	[ "$(COVERAGE)" != ON ] || scripts/coverage.py build/asan

# Coverage of src/ by the whole suite, per folder (scripts/coverage.py, with
# gcovr), in a build of its own: fails below the floors.
coverage:
	@scripts/deps.sh test
	$(CMAKE) -S . -B build/coverage -DCMAKE_BUILD_TYPE=Debug -DTDL_DEBUG_CHECKS=ON -DTDL_FAULTS=ON -DTDL_COVERAGE=ON -DTDL_BENCH=OFF -DTDL_WERROR=$(WERROR) >/dev/null
	$(CMAKE) --build build/coverage -j$(JOBS)
	find build/coverage -name '*.gcda' -delete
	ctest --test-dir build/coverage --output-on-failure -j$(JOBS)
	scripts/coverage.py build/coverage

# Every test where threads meet, under ThreadSanitizer.
test-tsan:
	@scripts/deps.sh test
	$(CMAKE) -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DTDL_DEBUG_CHECKS=ON -DTDL_TSAN=ON -DTDL_BENCH=OFF -DTDL_WERROR=$(WERROR) >/dev/null
	$(CMAKE) --build build/tsan -j$(JOBS)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --test-dir build/tsan -L threads --output-on-failure -j$(JOBS)

test-aarch64:
	.ci/aarch64.sh

test-musl:
	WERROR=$(WERROR) JOBS=$(JOBS) scripts/test-musl.sh

# The ABI of libtreadle.so, libtreadle-hook.so and (where built)
# libtreadle-tls.so against the baselines in abi/: fails on a change that 1.x
# may not make (scripts/abi-check.sh says what counts).
# `scripts/abi-check.sh build/abi --update [LIB...]` rewrites them.  First,
# that the version tells the truth (scripts/release-check.py): the
# CHANGELOG's newest release is the headers' version, the baselines are
# that release's (abi/RELEASE), and it is tagged.
abi-check:
	scripts/release-check.py
	JOBS=$(JOBS) scripts/abi-check.sh build/abi

# The static analysers: GCC's -fanalyzer and clang's scan-build over the
# libraries, cppcheck over src/; fails on any report (scripts/analyse.sh says
# how a false positive is silenced).
analyse:
	@scripts/deps.sh analyse
	JOBS=$(JOBS) scripts/analyse.sh build/analyse

# The soak (tests/soak/soak.c): 100,000 fibers, 1,000,000 timers, 9,000 pipes,
# channels, spawns, a group and the pool at once for SOAK_SECONDS (CI: 60);
# fails on a lost message or RSS or fds growing after warm-up.  Then the
# torture test of fiber I/O (tests/fd/torture.c) for TORTURE_SECONDS on
# each back end the machine has (TDL_TORTURE_SEED=N replays a failure; 0
# seconds skips it).
SOAK_SECONDS ?= 600
TORTURE_SECONDS ?= $(SOAK_SECONDS)
soak:
	@scripts/deps.sh test
	$(CMAKE) -S . -B build/soak -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDL_BENCH=OFF -DTDL_WERROR=$(WERROR) >/dev/null
	$(CMAKE) --build build/soak -j$(JOBS) --target soak test_torture
	build/soak/tests/soak/soak $(SOAK_SECONDS)
	[ "$(TORTURE_SECONDS)" = 0 ] || for be in epoll poll uring; do \
	  TDL_BACKEND=$$be TDL_TORTURE_SECONDS=$(TORTURE_SECONDS) build/soak/tests/test_torture; rc=$$?; \
	  [ $$rc = 0 ] || [ $$rc = 77 ] || exit 1; \
	done

# The Release build and the Go and tokio peers (bench/peers/build-peers.sh),
# side by side: neither keeps two CPUs busy alone.
bench-build:
	@scripts/deps.sh bench
	@mkdir -p build/release
	@bench/peers/build-peers.sh build/release >build/release/peers.log 2>&1 & peers=$$!; \
	  $(CMAKE) -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DTDL_TESTS=OFF >/dev/null && \
	  $(CMAKE) --build build/release -j$(JOBS); rc=$$?; \
	  wait $$peers; cat build/release/peers.log; exit $$rc

# A quick look: every group once at small sizes (bench/run.py --quick), about
# seven minutes on two cores from a fresh clone, the builds included.
bench: bench-build
	python3 bench/run.py --build build/release --quick

# The measurement: every group, 3 interleaved rounds at full sizes, about
# eighty minutes on two cores, most of them the HTTP and TLS groups
# (bench/run.py --list gives each group's expected time).
# WRITE=1 rewrites docs/PERFORMANCE.md's tables; BENCH_ARGS passes options
# (BENCH_ARGS="--only http,http-2 --rounds 5").
bench-full: bench-build
	python3 bench/run.py --build build/release $(if $(WRITE),--write) $(BENCH_ARGS)

# The pipes sweep (2010's charts redrawn, docs/charts/README.md): ~20 minutes;
# progress on stderr.  SWEEP_ARGS passes options, e.g. SWEEP_ARGS="--messages 1000000";
# CHARTS_CSV=/tmp/x/pipes-sweep.csv puts the CSV and the PNGs elsewhere.
CHARTS_CSV ?= docs/charts/pipes-sweep.csv
.PHONY: charts
charts: bench-build
	python3 bench/tools/sweep.py --build build/release --out $(CHARTS_CSV) $(SWEEP_ARGS)
	python3 bench/tools/charts.py --csv $(CHARTS_CSV)

clean:
	rm -rf build
