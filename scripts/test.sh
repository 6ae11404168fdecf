#!/usr/bin/env bash
# The whole test suite as CI runs it: install what is missing, build with -Werror and run every
# test through ctest; then again under ASan+UBSan, and the threaded suites under TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --tests
# Every tree is a unity build (CMAKE_UNITY_BUILD): each library's files compile a few at a time
# in one translation unit, about half the libraries' compile time; the test suites stay one file
# at a time (tests/CMakeLists.txt). A file-local name that two files of one library share breaks
# it: rename one (or, as tokenizers/ does, compile that file on its own).
unity=(-DCMAKE_UNITY_BUILD=ON)
# Everything, the CUDA path included whenever nvcc is here (GPU or not, so it cannot rot): the
# switches are given explicitly since scripts/run.sh may have turned them off in this tree. One
# CUDA architecture is enough for that: every .cu file still compiles (host and device code),
# the second architecture only doubled the device compile. -g1 (line tables: a failure's
# file:line and backtraces) instead of -g: full debug info is about a quarter of the compile.
scripts/build.sh build -DSTRATA_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "${unity[@]}" \
  -DSTRATA_BUILD_TESTS=ON -DSTRATA_BUILD_BENCH=ON -DSTRATA_BUILD_PYTHON=AUTO \
  -DSTRATA_WITH_CUDA=AUTO -DCMAKE_CUDA_ARCHITECTURES=80
(cd build && ctest --output-on-failure -j 2)
# CMake's default generator (Unix Makefiles) must configure too: it passes the CUDA dialect
# differently from Ninja (a CUDA20 request once broke it). Configure only; build/ built above.
# Out of the source tree, as many users configure (ctest strata_install covers an installed strata).
make_dir="${TMPDIR:-/tmp}/strata-build-make.$$"
cmake -S . -B "$make_dir" -DCMAKE_BUILD_TYPE=Release >build-make.configure.log 2>&1 ||
  { cat build-make.configure.log; rm -rf "$make_dir"; exit 1; }
rm -rf "$make_dir"
# -O1, as ASan recommends: it compiles in 4.4 minutes here instead of 6 at -O2, tests as fast.
# -g1 (line tables: the reports' file:line) instead of -g: full debug info costs about a quarter of
# the compile time. It builds only the suites it runs (STRATA_TEST_SKIP_LABELS: not slow, mpi).
scripts/build.sh build-asan -DSTRATA_WERROR=ON -DSTRATA_SANITIZE="address;undefined" "${unity[@]}" \
  -DSTRATA_WITH_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  "-DSTRATA_TEST_SKIP_LABELS=slow;mpi"
# The mpi suites run in build/ above: under ASan, LeakSanitizer reports OpenMPI's own allocations.
(cd build-asan && ctest --output-on-failure -j 2 -LE "slow|mpi")
# TSan sees inside oneTBB only if oneTBB is built with it (Debian's is not). It is kept outside the
# checkout, so a later run (a fresh clone too) reuses it: build_tsan_tbb.sh does nothing when its
# stamp (oneTBB version and compiler version) is there.
tbb_prefix=${STRATA_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/strata}/onetbb-tsan
tbb_args=(-DSTRATA_TBB_TSAN=OFF)
if scripts/build_tsan_tbb.sh "$tbb_prefix"; then
  tbb_args=(-DTBB_DIR="$tbb_prefix/lib/cmake/TBB" -DSTRATA_TBB_TSAN=ON)
else
  echo "strata: no TSan-built oneTBB; falling back to the distro's: the oneTBB suites are not" \
    "race-checked in this run" >&2
fi
# Only the `threaded` suites are built here (STRATA_TEST_LABELS): the others never run under TSan.
scripts/build.sh build-tsan -DSTRATA_WERROR=ON -DSTRATA_SANITIZE=thread "${unity[@]}" \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DSTRATA_WITH_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF -DSTRATA_TEST_LABELS=threaded "${tbb_args[@]}"
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j 2 -L threaded)
