#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz and runs one.
#
#   tests/fuzz/run_fuzz.sh idx_raw 600      # target, seconds
#
# Targets: idx_raw, idx_gzip, safetensors, kernel_key (tests/fuzz/targets.h).  The run
# starts from the seeds in tests/fuzz/corpus/<target> and grows a scratch
# corpus in build-fuzz/corpus/<target>; a crashing input is written to
# tests/fuzz/crashes/<target>/, from where every ./test.sh replays it.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:?usage: run_fuzz.sh TARGET SECONDS}
seconds=${2:-600}
command -v clang++ >/dev/null || { echo "run_fuzz.sh: needs clang (apt-get install clang)"; exit 1; }

flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DVOLT_CUDA=OFF -DVOLT_NATIVE=OFF -DCMAKE_CXX_FLAGS="$flags -fsanitize=fuzzer-no-link" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
fi
cmake --build build-fuzz -j "$(nproc)" --target volt
bin=build-fuzz/fuzz_$target
clang++ -std=c++20 $flags -fsanitize=fuzzer -DVOLT_FUZZ_TARGET="$target" -I. -Itests -Ibuild-fuzz/include -Ibuild-fuzz/generated \
  tests/fuzz/fuzz_main.cc -o "$bin" -Lbuild-fuzz -lvolt -lz -Wl,-rpath,"$PWD/build-fuzz"

mkdir -p "build-fuzz/corpus/$target" "tests/fuzz/crashes/$target"
cp -n tests/fuzz/corpus/"$target"/* "build-fuzz/corpus/$target/" 2>/dev/null || true
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
"$bin" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="tests/fuzz/crashes/$target/" "build-fuzz/corpus/$target"
