#!/usr/bin/env bash
# The tutorial cannot drift from the code: each chapter's program
# (examples/tutorial/chNN_*.cpp) is run, its output compared with
# docs/tutorial/output/chNN_*.txt, and the block the chapter quotes
# (after "<!-- output: chNN_name -->" in docs/tutorial/NN_*.md) compared with
# the same file; every fusion the chapter's prose names (cpuFusion12) is one
# the output prints.
#
#   docs/tutorial/outputs.sh [BUILD_DIR]            # check (what the test suite runs)
#   docs/tutorial/outputs.sh --update [BUILD_DIR]   # rewrite the outputs and the quoted blocks
#
# Trace headers say how long a pass took; that number is printed as 0 here,
# so the outputs are the same on every machine.
set -euo pipefail
update=0
if [ "${1:-}" = --update ]; then update=1; shift; fi
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
docs="$root/docs/tutorial"
status=0
shopt -s nullglob
sources=("$root"/examples/tutorial/ch*.cpp)
[ ${#sources[@]} -gt 0 ] || { echo "no chapter programs in examples/tutorial"; exit 1; }
for src in "${sources[@]}"; do
  name=$(basename "$src" .cpp)      # ch03_trace
  num=${name:2:2}                   # 03
  bin="$build/examples/tutorial/$name"
  golden="$docs/output/$name.txt"
  md=("$docs/${num}_"*.md)
  if [ ! -x "$bin" ]; then echo "$name: $bin is not built"; status=1; continue; fi
  if [ ${#md[@]} -ne 1 ]; then echo "$name: expected one chapter docs/tutorial/${num}_*.md"; status=1; continue; fi
  got=$("$bin" 2>/dev/null | sed -E 's/\(took [0-9]+ milliseconds\)/(took 0 milliseconds)/') || {
    echo "$name: the program failed"; status=1; continue; }
  # The quoted block: the lines between the marker's ```text and the closing ```.
  quoted() { awk -v m="<!-- output: $name -->" '
    $0 == m { s = 1; next }
    s == 1 && /^```/ { s = 2; next }
    s == 2 && /^```$/ { exit }
    s == 2 { print }' "${md[0]}"; }
  if [ "$update" = 1 ]; then
    printf '%s\n' "$got" > "$golden"
    if ! grep -qxF "<!-- output: $name -->" "${md[0]}"; then
      echo "$name: ${md[0]} has no line <!-- output: $name -->"; status=1; continue
    fi
    awk -v m="<!-- output: $name -->" -v g="$golden" '
      $0 == m { print; print "```text"; while ((getline l < g) > 0) print l; print "```"; skip = 1; next }
      skip == 1 && /^```/ { skip = 2; next }
      skip == 2 { if ($0 ~ /^```$/) skip = 0; next }
      { print }' "${md[0]}" > "${md[0]}.tmp" && mv "${md[0]}.tmp" "${md[0]}"
    echo "$name: updated $golden and ${md[0]#$root/}"
    continue
  fi
  if [ ! -f "$golden" ]; then echo "$name: no $golden (run with --update)"; status=1; continue; fi
  if ! diff -u "$golden" <(printf '%s\n' "$got") > /tmp/volt-tutorial-$$.diff; then
    echo "$name: the program's output differs from ${golden#$root/}:"; cat /tmp/volt-tutorial-$$.diff; status=1
  fi
  if ! diff -u "$golden" <(quoted) > /tmp/volt-tutorial-$$.diff; then
    echo "$name: ${md[0]#$root/} quotes something else than ${golden#$root/}:"; cat /tmp/volt-tutorial-$$.diff; status=1
  fi
  rm -f /tmp/volt-tutorial-$$.diff
  # Every fusion the chapter's prose names (outside its code blocks) is one the output prints.
  for fusion in $(awk '/^```/ { code = !code; next } !code' "${md[0]}" | grep -oE '\b(cpu|nvrtc)Fusion[0-9]+\b' | sort -u); do
    if ! grep -qE "\\b$fusion\\b" "$golden"; then
      echo "$name: ${md[0]#$root/} names $fusion, which its output does not print"; status=1
    fi
  done
done
[ "$status" = 0 ] && echo "tutorial: ${#sources[@]} chapters match their outputs"
exit "$status"
