#!/usr/bin/env bash
# The whole test suite once more under AddressSanitizer and
# UndefinedBehaviorSanitizer, in its own build folder (build-asan), the CUDA
# tests on the simulated GPU included.  Any sanitizer report fails the run.
# test.sh calls this after the ordinary run; VOLT_SANITIZE=0 skips it.
#
#   tests/sanitize.sh                 # build and run everything
#   tests/sanitize.sh --build-only    # only the build (test.sh starts it early, at low priority)
#   tests/sanitize.sh -tc='inplace*'  # doctest filters go to the ordinary run
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi

flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g1"
# volt is built here as a project that vendors it builds it: tests/package's
# consumer with add_subdirectory (and volt's tests on), so that this one build
# is also the package check's vendored build (test.sh runs build-asan/consumer).
if [ -f build-asan/CMakeCache.txt ] && ! grep -q '^VOLT_CONSUME:' build-asan/CMakeCache.txt; then
  rm -rf build-asan  # made by an older version of this script, as a top-level build
fi
launcher=${CMAKE_CXX_COMPILER_LAUNCHER:-}
if [ -z "$launcher" ] && [ "${VOLT_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime  # objects shared between clones (setup.sh)
  launcher=ccache
fi
if [ ! -f build-asan/CMakeCache.txt ]; then
  cmake -S tests/package -B build-asan -DVOLT_CONSUME=subdirectory -DVOLT_SOURCE_DIR="$PWD" -DVOLT_BUILD_TESTS=ON \
    -DCMAKE_BUILD_TYPE=None -DVOLT_NATIVE=OFF \
    -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
    ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher} >/dev/null
fi
# libvolt as a unity build (CMakeLists.txt: VOLT_UNITY_BUILD): the inline code
# of the headers is instrumented once per group of eight sources instead of once
# per source, 0.4x the compiler's time for the library here, where nobody
# rebuilds one file at a time.
if ! grep -q '^VOLT_UNITY_BUILD:BOOL=ON' build-asan/CMakeCache.txt; then
  cmake build-asan -DVOLT_UNITY_BUILD=ON >/dev/null
fi
# The tests' own sources at -O0 (the library stays at -O1): instrumented,
# they compile in half the time at -O0.
if ! grep -q '^VOLT_TESTS_OPTIMIZE:STRING=-O0' build-asan/CMakeCache.txt; then
  cmake build-asan -DVOLT_TESTS_OPTIMIZE=-O0 >/dev/null
fi
# So are the examples' (the tests run them; their time is in the library), and
# the test files compile in groups of eight (tests/CMakeLists.txt: a unity
# build).  Measured cold here: tests 906 s of compiler time file by file,
# examples 291 s at -O1.
if ! grep -q '^VOLT_TESTS_UNITY_BUILD:BOOL=ON' build-asan/CMakeCache.txt ||
   ! grep -q '^VOLT_EXAMPLES_OPTIMIZE:STRING=-O0' build-asan/CMakeCache.txt; then
  cmake build-asan -DVOLT_TESTS_UNITY_BUILD=ON -DVOLT_EXAMPLES_OPTIMIZE=-O0 >/dev/null
fi
# Only what the tests run: the examples and the benchmark are left out.
cmake --build build-asan -j "$(nproc 2>/dev/null || echo 2)" --target volt_tests consumer
tests=build-asan/volt/tests/volt_tests
if ((build_only)); then echo "volt: build-asan built in $(( $(date +%s) - start )) s"; exit 0; fi

# allocator_may_return_null: a huge request fails as it does without ASan (an
# "out of memory" volt::Error), which the tests check, instead of aborting.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "volt: the test suite under ASan and UBSan (build-asan), built in $(( $(date +%s) - start )) s"
# The CUDA tests on the simulated GPU (a CUDA build): the simulator is the
# ordinary build's, uninstrumented: preloaded, it is inherited by the processes
# volt starts (the host compiler that builds fused CPU kernels among them),
# which must run as in the ordinary pass.  volt's CUDA backend, which it
# serves, is the instrumented one of build-asan.  Its kernels are built by the
# host compiler as in the ordinary run: that run's cache serves.
simulated=0
if grep -q "VOLT_WITH_CUDA" build-asan/volt/CMakeFiles/volt.dir/flags.make 2>/dev/null; then
  simulated=1
  [ -f build/CMakeCache.txt ] || cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target volt_cudasim
fi
run_simulated() {
  # The preloaded library comes before the sanitizer runtime in the load order.
  VOLT_KERNEL_CACHE="$PWD/build/cudasim-kernels" ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0" \
    LD_PRELOAD="$PWD/build/tests/libvolt_cudasim.so" ./$tests \
    -tc='cuda: *,cuda child*,lazy: the CUDA backend*,eigen_linear*' -tce='cuda: every elementwise op*'
}
if [ $# -gt 0 ]; then
  ./$tests "$@"
  if ((simulated)); then
    echo "volt: the CUDA tests on the simulated GPU, under ASan and UBSan ($(( $(date +%s) - start )) s in)"
    run_simulated
  fi
else
  # A sanitized run is mostly one thread: two runs at once, each with every
  # other test file (so the slow ones spread), and the simulated GPU's beside
  # them (it fills the time one of the two leaves idle); each printed when all
  # are done.
  mapfile -t files < <(cd tests && find . -name '*.cpp' | sort)
  half=("" "")
  for k in "${!files[@]}"; do
    pattern="*/tests/${files[$k]#./}"
    half[$((k % 2))]+="${half[$((k % 2))]:+,}$pattern"
  done
  logs=$(mktemp -d)
  pids=()
  ./$tests -sf="${half[0]}" >"$logs/0" 2>&1 &
  pids+=($!)
  ./$tests -sf="${half[1]}" >"$logs/1" 2>&1 &
  pids+=($!)
  if ((simulated)); then
    { echo "volt: the CUDA tests on the simulated GPU, under ASan and UBSan"; run_simulated; } >"$logs/2" 2>&1 &
    pids+=($!)
  fi
  ok=1
  for pid in "${pids[@]}"; do wait "$pid" || ok=0; done
  cat "$logs"/*
  rm -rf "$logs"
  ((ok)) || { echo "volt: the sanitized test suite failed (above)"; exit 1; }
fi
echo "volt: sanitizer pass clean in $(( $(date +%s) - start )) s"
