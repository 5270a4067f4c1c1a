#!/usr/bin/env bash
# The whole test suite once more under AddressSanitizer and
# UndefinedBehaviorSanitizer, in its own build folder (build-asan), the CUDA
# tests on the simulated GPU included.  Any sanitizer report fails the run.
# test.sh calls this after the ordinary run; VOLT_SANITIZE=0 skips it.
#
#   tests/sanitize.sh                 # build and run everything
#   tests/sanitize.sh -tc='inplace*'  # doctest filters go to the ordinary run
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g1"
if [ ! -f build-asan/CMakeCache.txt ]; then
  # --as-needed: only the libraries a binary uses are recorded, so no CUDA
  # driver stub is required at start on machines without a driver.
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=None -DVOLT_NATIVE=OFF \
    -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined -Wl,--as-needed" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined -Wl,--as-needed" \
    ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} >/dev/null
fi
# Only what the tests run: the examples and the benchmark are left out.
targets=(volt_tests)
grep -q "volt_cudasim" build-asan/tests/Makefile 2>/dev/null && targets+=(volt_cudasim)
cmake --build build-asan -j "$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "volt: the test suite under ASan and UBSan (build-asan)"
./build-asan/tests/volt_tests "$@"

sim=build-asan/tests/libvolt_cudasim.so
if [ -f "$sim" ]; then
  echo "volt: the CUDA tests on the simulated GPU, under ASan and UBSan"
  # The sanitizer runtime must come first among the preloaded libraries.
  asan=$(${CXX:-c++} -print-file-name=libasan.so)
  # The kernels are built by the host compiler as in the ordinary run: its cache serves.
  export VOLT_KERNEL_CACHE="$PWD/build/cudasim-kernels"
  LD_PRELOAD="$asan $PWD/$sim" ./build-asan/tests/volt_tests \
    -tc='cuda: *,cuda child*,lazy: the CUDA backend*,eigen_linear*' -tce='cuda: every elementwise op*'
fi
echo "volt: sanitizer pass clean in $(( $(date +%s) - start )) s"
