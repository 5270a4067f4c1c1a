#!/usr/bin/env bash
# Builds, tests, trains and benchmarks volt on a GPU node with no network,
# from a folder made by tests/gpu/pack.sh, and leaves a report in OUT:
#
#   OUT/report.md     the GPU, driver and toolkit, each step's result and figures
#   OUT/results.json  the same as data
#   OUT/log.txt       every step's output, in order
#   OUT/bench.json, OUT/bench_gpt.jsonl, OUT/pytorch.jsonl   the benchmark cells
#
#   tests/gpu/check.sh DIR OUT [--dry-run]
#
# Steps, each bounded by `timeout`; a failing step is reported and the next
# one runs:  the device check (one real GPU, no simulator preloaded); the
# build (CUDA on, MPI and -march=native off, the pack's headers where the
# system lacks them); the kernel cache (the pack's, the rest compiled on all
# cores); the CUDA test cases; compute-sanitizer memcheck over 20 steps of
# each mode and racecheck over the reduction tests; one MNIST epoch at batch 8
# in eager, module jit and compiled step; volt_bench --device cuda; PyTorch on
# the same GPU (bench/pytorch_bench.py), when python3 has torch.
#
# The whole run keeps to VOLT_CHECK_BUDGET seconds (default 480): a step gets
# at most what is left, and steps past the budget are reported as skipped.
# --dry-run exercises every step on tests/cudasim with the build in
# ${VOLT_BUILD:-build} (no configure, tiny step counts, no sanitizer, no
# PyTorch), as ./test.sh does.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

die() { echo "check.sh: $*" >&2; exit 2; }
pack="" out="" dry=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry=1 ;;
    -h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $arg (try --help)" ;;
    *) if [ -z "$pack" ]; then pack=$arg; elif [ -z "$out" ]; then out=$arg; else die "too many arguments"; fi ;;
  esac
done
[ -n "$pack" ] && [ -n "$out" ] || die "usage: tests/gpu/check.sh DIR OUT [--dry-run] (--help)"
[ -f "$pack/MANIFEST.txt" ] || die "$pack has no MANIFEST.txt: make it with tests/gpu/pack.sh $pack"
pack=$(cd "$pack" && pwd)
mkdir -p "$out" || die "cannot make $out"
out=$(cd "$out" && pwd)
rm -f "$out"/*
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$out/log.txt
: > "$log"
budget=${VOLT_CHECK_BUDGET:-480}
start=$(date +%s)
jobs=$(nproc 2>/dev/null || echo 2)

# ---------------------------------------------------------------- the steps
# record NAME STATUS SECONDS NOTE: one line of $work/steps.tsv
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$work/steps.tsv"; echo "check.sh: $1: $2 ($3 s) $4"; }
left() { echo $((budget - ($(date +%s) - start))); }
# step NAME LIMIT CMD...: runs CMD under timeout (no more than the budget has
# left), its output in $work/NAME.out and the log; returns CMD's status.
step() {
  local name=$1 limit=$2 rest
  shift 2
  rest=$(left)
  if [ "$rest" -lt 5 ]; then record "$name" skipped 0 "the ${budget} s budget is spent"; return 99; fi
  [ "$limit" -le "$rest" ] || limit=$rest
  printf '\n===== %s (limit %s s): %s\n' "$name" "$limit" "$*" >> "$log"
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" > "$work/$name.out" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  # At most 1 MiB of any one step in the log (its end, where the summaries are).
  tail -c 1048576 "$work/$name.out" >> "$log"
  local secs status note=""
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  case $rc in
    0) status=passed ;;
    124 | 137) status=timeout; note="stopped at ${limit} s" ;;
    *) status=failed; note="exit status $rc" ;;
  esac
  record "$name" "$status" "$secs" "$note"
  return $rc
}
skip() { record "$1" skipped 0 "$2"; }

sim_env=()
if ((dry)); then
  build=${VOLT_BUILD:-build}
  sim=$root/$build/tests/libvolt_cudasim.so
  [ -f "$sim" ] || die "--dry-run needs a CUDA build with tests/cudasim in $build (./setup.sh)"
  sim_env=(env "LD_PRELOAD=$sim")
else
  build=build-gpu
fi
build=$(mkdir -p "$build" && cd "$build" && pwd)
# The kernel cache the runs use: on the GPU a fresh one, seeded from the pack;
# in a dry run the simulator's own (its kernels take seconds each to build),
# the kernel step then filling a scratch folder.
kcache=$work/kernels
if ((dry)); then export VOLT_KERNEL_CACHE=$build/cudasim-kernels; else export VOLT_KERNEL_CACHE=$kcache; fi
export VOLT_DATA_DIR=$pack/data/mnist

# 0. One real GPU and no simulator, or nothing else is worth running.
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "host: $(uname -srm), $jobs cores"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm --format=csv,noheader 2>&1 |
      sed 's/^/gpu: /'
  else
    echo "gpu: nvidia-smi not found"
  fi
  echo "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
  echo "cmake: $(cmake --version 2>/dev/null | head -1)"
  echo "c++: $(c++ --version 2>/dev/null | head -1)"
  echo "compute-sanitizer: $(compute-sanitizer --version 2>/dev/null | grep -o 'Version [0-9.]*' | head -1 || echo 'not found')"
  echo "python3 torch: $(timeout 60 python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>/dev/null || echo 'not importable')"
} > "$work/env.txt" 2>&1
cat "$work/env.txt" >> "$log"
if ((dry)); then
  record device passed 0 "dry run on tests/cudasim"
  gpu_cc=90
else
  gpu_cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  if [ -z "$gpu_cc" ] || [[ "${LD_PRELOAD:-}" == *cudasim* ]]; then
    record device failed 0 "no real GPU: nvidia-smi found none, or tests/cudasim is preloaded (LD_PRELOAD=${LD_PRELOAD:-})"
    python3 "$root/tests/gpu/report.py" "$work" "$out" "$dry"
    exit 1
  fi
  record device passed 0 "sm_$gpu_cc"
fi

# 1. Build: all cores, for this machine, nothing that a node may lack.
targets=(volt_tests mnist_mlp gpt volt_bench precompile_kernels)
if ((dry)); then
  step build 600 cmake --build "$build" -j "$jobs" --target "${targets[@]}"
else
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  step configure 120 cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DVOLT_CUDA=ON \
    -DVOLT_MPI=OFF -DVOLT_NATIVE=OFF -DVOLT_DEPS_DIR="$pack" &&
    step build 600 cmake --build "$build" -j "$jobs" --target "${targets[@]}"
fi
built=$?
tests=$build/tests/volt_tests
# 2. The kernel cache: the pack's, then what is missing compiled on all cores.
mkdir -p "$kcache"
[ -d "$pack/kernels" ] && cp "$pack/kernels"/* "$kcache/" 2>/dev/null
if [ "$built" = 0 ] && [ -d "$pack/kernel-sources" ]; then
  step kernels 120 env -u LD_PRELOAD "$build/tests/precompile_kernels" "$pack/kernel-sources" "$kcache" \
    "$gpu_cc" "$jobs"
else
  skip kernels "no build or no kernel sources in the pack"
fi

if [ "$built" != 0 ]; then
  for s in device_guard cuda_tests memcheck racecheck mnist_eager mnist_jit mnist_step gpt bench bench_cnn pytorch; do
    skip $s "the build failed"
  done
  python3 "$root/tests/gpu/report.py" "$work" "$out" "$dry"
  exit 1
fi

# 3. The CUDA test cases that ./test.sh runs on tests/cudasim, here on the GPU.
cases='cuda: *,cuda child*,lazy: the CUDA backend*,eigen_linear*'
if ((dry)); then
  step device_guard 60 "${sim_env[@]}" "$tests" -tc='cuda: the devices are described*'
  # (./test.sh has just run them all on the simulator: a few here)
  step cuda_tests 600 "${sim_env[@]}" "$tests" -tc='cuda: reductions*,cuda: cross_entropy is one kernel*'
else
  step device_guard 60 env VOLT_EXPECT_REAL_GPU=1 "$tests" -tc='cuda: the devices are described*' ||
    echo "check.sh: the device guard failed: the CUDA cases below may be skips" >&2
  step cuda_tests 240 "$tests" -tc="$cases" -tce='cuda: every elementwise op*'
fi

# 4. One MNIST epoch at batch 8 in each mode (the example's own loop).
mnist=$build/examples/mnist_mlp
limit=()
((dry)) && limit=(--limit-steps 5)
step mnist_eager 120 "${sim_env[@]}" "$mnist" --device cuda --eager "${limit[@]}"
step mnist_jit 120 "${sim_env[@]}" "$mnist" --device cuda --jit module "${limit[@]}"
step mnist_step 120 "${sim_env[@]}" "$mnist" --device cuda --jit step "${limit[@]}"

# The GPT example: 500 compiled steps on the Brown corpus, its val loss and tokens/s.
# (Not in a dry run: the simulator builds a GPT's kernels with the host
# compiler for minutes; ./test.sh runs the GPT's CUDA test cases there.)
if ((dry)); then
  skip gpt "dry run: too slow on the simulated GPU"
elif [ -x "$build/examples/gpt" ] && [ -f "$pack/data/brown.txt" ]; then
  step gpt 150 "$build/examples/gpt" --device cuda --jit step --steps 500 --eval-every 100 \
    --data-dir "$pack/data" --sample 200
else
  skip gpt "no examples/gpt in this build, or no brown.txt in the pack"
fi

# 5. volt_bench on the GPU: the MLP at four batch sizes, the CNN.
bench=$build/bench/volt_bench
steps=(--steps 200) batches=8,64,256,1024
((dry)) && steps=(--steps 2 --smoke) batches=8
step bench 150 "${sim_env[@]}" "$bench" --device cuda --batch "$batches" "${steps[@]}" --no-libtorch --no-extras --json
sed -n '/^\[/,$p' "$work/bench.out" > "$out/bench.json" 2>/dev/null
if "$bench" --help 2>/dev/null | grep -q -- '--model.*cnn.*cuda'; then
  step bench_cnn 90 "${sim_env[@]}" "$bench" --model cnn --device cuda --batch 64 "${steps[@]}" --no-libtorch \
    --no-extras --json
  sed -n '/^\[/,$p' "$work/bench_cnn.out" > "$out/bench_cnn.json" 2>/dev/null
else
  skip bench_cnn "volt_bench --model cnn times CPU steps only"
fi
if ((dry)); then
  skip bench_gpt "dry run: too slow on the simulated GPU"
elif "$bench" --help 2>/dev/null | grep -q 'gpt: examples/gpt'; then
  step bench_gpt 120 "$bench" --model gpt --device cuda "${steps[@]}" --no-libtorch --no-extras --json
  grep '^{' "$work/bench_gpt.out" > "$out/bench_gpt.jsonl" 2>/dev/null
fi

# 6. PyTorch on the same GPU, same models and recipe: eager, the whole step
# captured by hand into a CUDA graph, torch.compile and its CUDA graphs
# (mode="reduce-overhead").
if ((dry)); then
  skip pytorch "dry run"
elif ! timeout 60 python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  skip pytorch "python3 has no torch that sees the GPU"
else
  step pytorch 180 python3 "$root/bench/pytorch_bench.py" --device cuda --modes eager,cuda-graph,reduce-overhead,compile \
    --batch 8,64,256,1024 --compile-batch 8 --steps 200 --json
  grep '^{' "$work/pytorch.out" > "$out/pytorch.jsonl" 2>/dev/null
fi

# 7. compute-sanitizer, last (the slowest per step): memcheck over 20 training
# steps of each mode (batch 1000, so each evaluation is 10 steps), racecheck
# over the reduction tests.
if ((dry)) || ! command -v compute-sanitizer >/dev/null; then
  skip memcheck "$( ((dry)) && echo 'dry run' || echo 'compute-sanitizer not found')"
  skip racecheck "$( ((dry)) && echo 'dry run' || echo 'compute-sanitizer not found')"
else
  step memcheck 150 bash -c "for m in --eager '--jit module' '--jit step'; do
      echo \"--- mode \$m\"
      compute-sanitizer --tool memcheck --error-exitcode 3 '$mnist' --device cuda \$m --batch-size 1000 \
        --limit-steps 20 || exit \$?
    done"
  step racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 3 "$tests" \
    -tc='cuda: reductions*,cuda: cross_entropy*'
fi

python3 "$root/tests/gpu/report.py" "$work" "$out" "$dry"
