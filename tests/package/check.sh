#!/usr/bin/env bash
# volt as other projects use it: installs the build into a temporary prefix, then
# builds and runs consumer.cpp through find_package(volt), through pkg-config, and
# through add_subdirectory of the source tree.  Usage: tests/package/check.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work="$build/package-check"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "package check: $*" >&2; exit 1; }

prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
lib=$(find "$prefix" -name 'libvolt.so.*.*' | head -1)
[ -n "$lib" ] || fail "no versioned libvolt.so.X.Y installed"
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[[ "$soname" == libvolt.so.0.* ]] || fail "libvolt's SONAME is '$soname', expected libvolt.so.0.<minor>"
[ -f "$prefix/include/volt/volt.h" ] || fail "include/volt/volt.h not installed"
# cuBLAS and NVRTC are opened on first use (tensor/cuda/libraries.h), never linked:
# linked, they add ~200 MB to every program's resident memory at start.
if objdump -p "$lib" | grep -E 'NEEDED +lib(cublas|cublasLt|nvrtc)\.' >/dev/null; then
  fail "libvolt links cuBLAS or NVRTC; they must be opened on first use"
fi
if grep -rq -- '-march' "$prefix"/lib*/cmake/volt/ "$prefix"/lib*/pkgconfig/; then
  fail "the installed usage requirements carry a -march flag"
fi

echo "package check: find_package(volt)"
cmake -S "$here" -B "$work/find" -DCMAKE_PREFIX_PATH="$prefix" -DVOLT_CONSUME=package >/dev/null
cmake --build "$work/find" -j2 >/dev/null
"$work/find/consumer"

echo "package check: pkg-config"
libdir=$(dirname "$lib")
flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs volt)
# shellcheck disable=SC2086
${CXX:-g++} -O1 -I"$here" "$here/consumer.cpp" -o "$work/pc_consumer" $flags -Wl,-rpath,"$libdir"
"$work/pc_consumer"

echo "package check: the LibTorch ports (tests/port/volt/) against the installed package"
for src in "$root"/tests/port/volt/*.cpp; do
  # shellcheck disable=SC2086
  ${CXX:-g++} -O1 "$src" -o "$work/port_$(basename "$src" .cpp)" $flags -Wl,-rpath,"$libdir"
done
(cd "$work" && ./port_mlp 40 "$work/port_mlp.safetensors" >/dev/null) || fail "the ported MLP did not train"

if [ -n "${VOLT_VENDORED_BUILD:-}" ]; then
  # test.sh: the sanitizer build (tests/sanitize.sh) is a vendored build of
  # this consumer; it runs build-asan/consumer once that build is done.
  echo "package check: add_subdirectory left to $VOLT_VENDORED_BUILD"
  echo "package check: passed"
  exit 0
fi
echo "package check: add_subdirectory"
# Unoptimised (-O0): what is checked is the vendored build itself, not its
# speed, and this is a second build of all of libvolt.
cmake -S "$here" -B "$work/sub" -DVOLT_CONSUME=subdirectory -DVOLT_SOURCE_DIR="$root" \
  -DVOLT_CUDA=OFF -DVOLT_NATIVE=OFF -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O0 >/dev/null
cmake --build "$work/sub" -j"$(nproc)" >/dev/null
"$work/sub/consumer"
echo "package check: passed"
