#!/usr/bin/env bash
# volt::dist's tests under mpirun (2 ranks), then the abort checks: a rank
# that throws, or that catches and returns from main, must end the run with a
# message, not leave the others waiting.
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
  on_sim=("${mpirun[@]}" -x LD_PRELOAD="$(realpath "$sim")" -x VOLT_KERNEL_CACHE="$(realpath "$build")/cudasim-kernels")
  timeout 600 "${on_sim[@]}" "$build/tests/volt_mpi_tests" -tc='dist: CUDA*'
  # ... and through NCCL: the simulated one (tests/ncclsim) found first as
  # libnccl.so.2; again as an NCCL older than 2.10 (no ncclAvg: version code
  # 2807 is 2.8.7), and with VOLT_NCCL=0 (the host-buffer path, NCCL untouched).
  ncclsim="$build/tests/ncclsim"
  if [ -f "$ncclsim/libnccl.so.2" ]; then
    with_nccl=("${on_sim[@]}" -x LD_LIBRARY_PATH="$(realpath "$ncclsim")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    timeout 600 "${with_nccl[@]}" "$build/tests/volt_mpi_tests" -tc='nccl: *'
    timeout 600 "${with_nccl[@]}" -x VOLT_NCCLSIM_VERSION=2807 "$build/tests/volt_mpi_tests" -tc='nccl: *'
    timeout 600 "${with_nccl[@]}" -x VOLT_NCCL=0 "$build/tests/volt_mpi_tests" -tc='nccl: *'
  fi
fi

# Runs volt_mpi_tests with FLAG on 2 ranks: the run must end (within 60 s),
# fail, and print WANT.
must_end() {
  local flag=$1 want=$2 log rc
  log=$(mktemp)
  set +e
  timeout 60 "${mpirun[@]}" "$build/tests/volt_mpi_tests" "$flag" >"$log" 2>&1
  rc=$?
  set -e
  if [ "$rc" = 124 ]; then
    echo "volt_mpi_tests $flag: a rank still waited after 60 s" >&2; cat "$log" >&2; exit 1
  fi
  if [ "$rc" = 0 ] || ! grep -q "$want" "$log"; then
    echo "volt_mpi_tests $flag: expected a failing run saying '$want' (exit $rc)" >&2; cat "$log" >&2; exit 1
  fi
  rm -f "$log"
}
must_end --abort-test "rank 1 ends every rank: rank 1 fails on purpose"
echo "volt: a throwing rank ended the MPI run with its message"
# A rank that catches its error and returns from main: the rank left waiting
# in an all-reduce ends the run, naming it.
must_end --return-test "rank 0 ends every rank: rank 1 left main (returned or exited) while this rank waited in dist::all_reduce"
echo "volt: a rank that returned from main ended the MPI run instead of leaving the other waiting"
# examples/gpt --distributed: a small GPT on a small text, eagerly and as a
# compiled step; every rank must end with the same parameters.
gpt="$build/examples/gpt"
if [ -x "$gpt" ]; then
  corpus=$(mktemp -d)
  for i in $(seq 60); do echo "The Fulton County Grand Jury said Friday an investigation $i ."; done >"$corpus/brown.txt"
  for mode in --eager "--jit step"; do
    # shellcheck disable=SC2086
    out=$(timeout 300 "${mpirun[@]}" "$gpt" --distributed --device cpu $mode --data-dir "$corpus" --steps 3 \
      --eval-every 3 --batch-size 2 --sample 8 --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 2>&1) ||
      { echo "gpt --distributed $mode failed:" >&2; echo "$out" >&2; exit 1; }
    for want in "data-parallel: 2 ranks x batch 2 = global batch 4" "data-parallel: the parameters are the same on every rank" "step 3: train loss"; do
      grep -aqF "$want" <<<"$out" || { echo "gpt --distributed $mode: no '$want' in:" >&2; echo "$out" >&2; exit 1; }
    done
  done
  rm -rf "$corpus"
  echo "volt: gpt --distributed trained on 2 ranks (eager and compiled step), the same parameters on both"
fi
# The benchmark's data-parallel cells, once each (bench/distributed.cpp).
if [ -x "$build/bench/volt_bench" ]; then
  timeout 300 "${mpirun[@]}" "$build/bench/volt_bench" --distributed --smoke >/dev/null
fi
