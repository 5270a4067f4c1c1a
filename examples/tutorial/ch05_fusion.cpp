// Chapter 5, fusion and code generation (docs/tutorial/05_fusion.md): runs of
// elementwise prims become one generated C++ kernel that names values as the
// trace does.
#include <iostream>

#include <volt/jit/jit.h>
#include <volt/jit/inspect/report.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

int main() {
  manual_seed(0);
  // gelu-like: x * sigmoid(1.702 x), then scaled and shifted: all elementwise.
  auto f = jit::jit(
      [](const std::vector<Tensor>& in) {
        Tensor x = in[0];
        return std::vector<Tensor>{x * sigmoid(x * 1.702) * 2.0 + 1.0};
      },
      {"x"});
  Tensor x = Tensor::randn({2, 4});
  std::cout << "f(x) = " << f(x) << "\n";
  const jit::Trace& last = jit::last_traces(f).back();
  std::cout << "\nThe trace that runs:\n" << last.str();
  for (const jit::BoundSymbol& b : last.bsyms)
    if (!jit::kernel_source_of(b).empty())
      std::cout << "\nThe kernel generated for " << b.fusion_name << ":\n" << jit::kernel_source_of(b);
  return 0;
}
