#!/usr/bin/env bash
# Each LibTorch program in tests/port/libtorch/ becomes its volt port in
# tests/port/volt/ by the renames of tests/port/renames.sed alone: applies them
# and requires the result to equal the volt file byte for byte.
# Usage: tests/port/check_renames.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
status=0
count=0
for original in "$here"/libtorch/*.cpp; do
  name=$(basename "$original")
  port="$here/volt/$name"
  if [ ! -f "$port" ]; then
    echo "check_renames: $name has no volt port (tests/port/volt/$name)" >&2
    status=1
    continue
  fi
  if ! diff -u "$port" <(sed -f "$here/renames.sed" "$original") >"${TMPDIR:-/tmp}/check_renames.$$.diff"; then
    echo "check_renames: tests/port/volt/$name is not the renamed tests/port/libtorch/$name:" >&2
    cat "${TMPDIR:-/tmp}/check_renames.$$.diff" >&2
    status=1
  fi
  rm -f "${TMPDIR:-/tmp}/check_renames.$$.diff"
  count=$((count + 1))
done
[ "$status" -eq 0 ] && echo "check_renames: $count LibTorch programs port to volt by renaming alone"
exit "$status"
