#!/usr/bin/env bash
# Installs what is missing, builds volt and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
./build/tests/volt_tests "$@"
if [ -x build/bench/volt_bench ]; then
  echo "volt: benchmark smoke run"
  ./build/bench/volt_bench --steps 2 --smoke >/dev/null
fi
