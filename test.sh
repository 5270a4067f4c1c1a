#!/usr/bin/env bash
# Installs what is missing, builds volt and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")"
# Each part says when it starts, in seconds since this script did.
t0=$(date +%s)
say() { echo "volt: [$(( $(date +%s) - t0 )) s] $*"; }
say "set-up and build"
VOLT_NEED_BROWSER=1 VOLT_NEED_TORCH=1 ./setup.sh
# The sanitizer build (tests/sanitize.sh) starts now, at low priority, beside
# the checks below: it takes the CPU they leave idle.
if [ "${VOLT_SANITIZE:-1}" != 0 ]; then
  asan_log=$(mktemp)
  setsid nice -n 15 tests/sanitize.sh --build-only >"$asan_log" 2>&1 &
  asan_build=$!
  # A failing check below ends this script: the build goes with it.
  trap 'kill -- -"$asan_build" 2>/dev/null || true' EXIT
fi
say "the test suite"
./build/tests/volt_tests "$@"
say "the package checks"
# volt as other projects use it: installed (find_package, pkg-config) and vendored
# (add_subdirectory); and every C++ block of README.md compiled.
# The vendored (add_subdirectory) build is the sanitizer build's (below) when it runs.
if [ "${VOLT_SANITIZE:-1}" != 0 ]; then
  VOLT_VENDORED_BUILD=build-asan tests/package/check.sh build
else
  tests/package/check.sh build
fi
tests/package/readme_snippets.sh build
# volt::dist and data-parallel training on 2 MPI ranks (an MPI build only).
if [ -x build/tests/volt_mpi_tests ]; then
  say "the MPI tests (mpirun -np 2)"
  tests/mpi/run.sh build
fi
if [ -x build/bench/volt_bench ]; then
  say "benchmark smoke run"
  ./build/bench/volt_bench --steps 2 --smoke >/dev/null
fi
# The CUDA backend once more, on the simulated GPU of tests/cudasim (a CUDA
# build only): its tests, and a benchmark step of each mode.  The exhaustive
# elementwise case is left out here (its 600 kernels take minutes to build
# with the host compiler); tests/cuda/test_kernels_on_host.cpp runs those
# kernels on the host instead.
sim=build/tests/libvolt_cudasim.so
if [ -f "$sim" ]; then
  say "the CUDA tests on the simulated GPU (tests/cudasim)"
  export VOLT_KERNEL_CACHE="$PWD/build/cudasim-kernels"
  # The simulator's kernels take seconds each to build with the host compiler:
  # a copy kept outside the clone seeds a fresh build's cache (each entry is
  # keyed by its full source and toolchain and checked before it is loaded).
  kept="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/volt/cudasim-kernels"
  if [ -d "$kept" ] && [ ! -d "$VOLT_KERNEL_CACHE" ]; then
    mkdir -p -m 700 "$VOLT_KERNEL_CACHE" && cp -p -r "$kept"/. "$VOLT_KERNEL_CACHE"/ 2>/dev/null || true
  fi
  LD_PRELOAD="$PWD/$sim" ./build/tests/volt_tests \
    -tc='cuda: *,cuda child*,lazy: the CUDA backend*,eigen_linear*' -tce='cuda: every elementwise op*'
  if [ -x build/bench/volt_bench ]; then
    LD_PRELOAD="$PWD/$sim" ./build/bench/volt_bench --device cuda --batch 8 --steps 2 --smoke >/dev/null
  fi
  # The GPU node's check (tests/gpu/), every step of it on the simulated GPU:
  # a pack with a few kernels and a small random MNIST, then check.sh's dry run.
  say "tests/gpu/pack.sh and check.sh --dry-run on the simulated GPU"
  gpu_tmp=$(mktemp -d)
  tests/gpu/pack.sh "$gpu_tmp/pack" --data-dir "$gpu_tmp/none" --synthetic-data --kernel-limit 3 >/dev/null
  tests/gpu/check.sh "$gpu_tmp/pack" "$gpu_tmp/out" --dry-run >/dev/null ||
    { cat "$gpu_tmp/out/report.md" "$gpu_tmp/out/log.txt" >&2; exit 1; }
  rm -rf "$gpu_tmp"
  mkdir -p -m 700 "$kept" && cp -p -r "$VOLT_KERNEL_CACHE"/. "$kept"/ 2>/dev/null || true
fi
# The whole suite again under AddressSanitizer and UndefinedBehaviorSanitizer
# (tests/sanitize.sh, its own build-asan folder); VOLT_SANITIZE=0 skips it.
if [ "${VOLT_SANITIZE:-1}" != 0 ]; then
  say "the sanitizer pass (waiting for its build)"
  wait "$asan_build" || { cat "$asan_log" >&2; exit 1; }
  tail -1 "$asan_log"
  rm -f "$asan_log"
  say "the package check's vendored build (add_subdirectory, the sanitizer build)"
  ./build-asan/consumer
  tests/sanitize.sh
fi
say "all passed"
