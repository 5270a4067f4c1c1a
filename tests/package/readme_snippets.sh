#!/usr/bin/env bash
# Compiles every ```cpp block of README.md and of the reference pages in docs/
# against the build tree, so they cannot drift from the code.  A block with `int main` is a program of its own;
# any other block is a fragment, compiled as the body of a function after
# <volt/volt.h> and the setup below (a net, a batch x/y, a loader, a loss and an
# optimizer),
# plus what an HTML comment right before the block adds:
#   <!-- snippet-global: C++ at namespace scope -->
#   <!-- snippet-setup: C++ at the top of the function body -->
# Usage: tests/package/readme_snippets.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work="$build/readme-snippets"
rm -rf "$work"; mkdir -p "$work"

awk -v dir="$work" '
  /^<!-- snippet-global:/ { g = $0; sub(/^<!-- snippet-global: */, "", g); sub(/ *-->$/, "", g); global = global g "\n"; next }
  /^<!-- snippet-setup:/  { s = $0; sub(/^<!-- snippet-setup: */, "", s); sub(/ *-->$/, "", s); setup = setup s "\n"; next }
  FNR == 1 { page = FILENAME; sub(/^.*\//, "", page); sub(/\.md$/, "", page) }
  /^```cpp/ { n++; body = ""; line = FNR; inblock = 1; next }
  /^```/ && inblock {
    file = sprintf("%s/snippet_%02d_%s_line%d.cpp", dir, n, page, line)
    if (body ~ /int main\(/) { printf "%s", body > file }
    else {
      printf "#include <volt/volt.h>\n#include <iostream>\nusing namespace volt;\n%s\n", global > file
      printf "void readme_snippet() {\n  auto net = std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 10});\n" > file
      printf "  Tensor x = randn({8, 784});\n  Tensor y = randint(0, 10, {8});\n" > file
      printf "  data::TensorDataset dataset(randn({16, 784}), randint(0, 10, {16}));\n  data::DataLoader loader(dataset, 8);\n" > file
      printf "  nn::CrossEntropyLoss loss_fn;\n  nn::Adam opt(net->parameters());\n%s  {\n%s  }\n}\n", setup, body > file
    }
    close(file); inblock = 0; global = ""; setup = ""; next
  }
  inblock { body = body $0 "\n" }
' "$root/README.md" "$root"/docs/*.md

flags=(-std=c++20 -fsyntax-only -I"$build/include" -I"$build/generated")
count=0
for f in "$work"/snippet_*.cpp; do
  if ! ${CXX:-g++} "${flags[@]}" "$f" 2>"$f.log"; then
    line=${f##*_line}; line=${line%.cpp}
    page=${f#*/snippet_[0-9][0-9]_}; page=${page%_line*}
    echo "$page.md: the C++ block at line $line does not compile:" >&2
    sed 's/^/  /' "$f" >&2
    head -30 "$f.log" >&2
    exit 1
  fi
  count=$((count + 1))
done
echo "README and docs: $count C++ snippets compile"
