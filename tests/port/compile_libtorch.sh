#!/usr/bin/env bash
# Builds the LibTorch originals in tests/port/libtorch/ against an installed
# LibTorch (Debian: apt-get install libtorch-dev) and runs the MLP, the GPT, the tabular program and
# the char model, so that the programs the ports start from are real LibTorch
# programs.  The GPT, char model and tabular binaries left in WORK_DIR are what
# tests/port/test_port_gpt.cpp, test_port_charlm.cpp and test_port_tabular.cpp compare the volt ports
# with (by default they look in ${TMPDIR:-/tmp}/volt-port-libtorch).  Skipped (exit 0,
# with a line saying so) where LibTorch is not installed.
# Usage: tests/port/compile_libtorch.sh [WORK_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-${TMPDIR:-/tmp}/volt-port-libtorch}
api=""
for dir in /usr/include/torch/csrc/api/include /usr/local/include/torch/csrc/api/include; do
  [ -f "$dir/torch/torch.h" ] && api=$dir && break
done
if [ -z "$api" ]; then
  echo "compile_libtorch: LibTorch is not installed; the originals were not compiled"
  exit 0
fi
mkdir -p "$work"
for src in "$here"/libtorch/*.cpp; do
  name=$(basename "$src" .cpp)
  ${CXX:-g++} -std=c++17 -O1 -w -I"$api" "$src" -o "$work/$name" -ltorch -ltorch_cpu -lc10
  echo "compile_libtorch: built $name"
done
(cd "$work" && ./mlp 150 "$work/mlp.pt")
(cd "$work" && ./gpt 100 | tail -3)
(cd "$work" && ./charlm 60 "$work" | tail -3)
(cd "$work" && ./tabular 10 "$work" | tail -3)
echo "compile_libtorch: the LibTorch originals build, and the MLP, the GPT, the char model and the tabular model train"
