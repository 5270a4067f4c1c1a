#!/usr/bin/env bash
# Installs what is missing, builds volt, then runs the main example with the given arguments.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh >/dev/null
if [ -x build/examples/mnist_mlp ]; then
  ./data/fetch_mnist.sh >/dev/null
  exec ./build/examples/mnist_mlp "$@"
fi
exec ./build/examples/tensor_tour "$@"
