#!/usr/bin/env bash
# volt::dist's tests under mpirun (2 ranks), then the abort check: a rank
# that throws must end the run with its message, not leave the others waiting.
# Usage: tests/mpi/run.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
mpirun=(mpirun -np 2 --oversubscribe)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
export OMP_NUM_THREADS=1
timeout 600 "${mpirun[@]}" "$build/tests/volt_mpi_tests"
# CUDA tensors through host buffers, on the simulated GPU (a CUDA build only).
sim="$build/tests/libvolt_cudasim.so"
if [ -f "$sim" ]; then
  timeout 600 "${mpirun[@]}" -x LD_PRELOAD="$(realpath "$sim")" -x VOLT_KERNEL_CACHE="$(realpath "$build")/cudasim-kernels" \
    "$build/tests/volt_mpi_tests" -tc='dist: CUDA*'
fi

log=$(mktemp)
set +e
timeout 60 "${mpirun[@]}" "$build/tests/volt_mpi_tests" --abort-test >"$log" 2>&1
rc=$?
set -e
if [ "$rc" = 124 ]; then
  echo "volt_mpi_tests --abort-test: the other rank still waited after 60 s" >&2; cat "$log" >&2; exit 1
fi
if [ "$rc" = 0 ] || ! grep -q "rank 1 ends every rank: rank 1 fails on purpose" "$log"; then
  echo "volt_mpi_tests --abort-test: expected a failing run with rank 1's message (exit $rc)" >&2; cat "$log" >&2; exit 1
fi
rm -f "$log"
echo "volt: a throwing rank ended the MPI run (exit $rc) with its message"
# The benchmark's data-parallel cells, once each (bench/distributed.cpp).
if [ -x "$build/bench/volt_bench" ]; then
  timeout 300 "${mpirun[@]}" "$build/bench/volt_bench" --distributed --smoke >/dev/null
fi
