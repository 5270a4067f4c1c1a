// Chapter 6, the cache and guards (docs/tutorial/06_cache.md): when a call
// reuses a compiled trace, when it compiles again and why.
#include <iostream>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>

using namespace volt;

namespace {

void report(const char* what, const jit::JitFunction& f) {
  std::cout << what << ": " << jit::cache_misses(f) << " compiles, " << jit::cache_hits(f) << " hits; last miss: "
            << f.last_miss_reason() << "\n";
}

}  // namespace

int main() {
  auto f = jit::jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2.0}; }, {"x"});
  f(Tensor::ones({3}));
  report("f(ones(3))", f);
  f(Tensor::full({3}, 5.0));
  report("f(full(3, 5))  same metadata", f);
  f(Tensor::ones({4}));
  report("f(ones(4))     new shape", f);
  f(Tensor::ones({4}, DType::f64));
  report("f(ones(4, f64)) new dtype", f);

  // A branch on a value: the trace records a guard on what it read.
  auto g = jit::jit(
      [](const std::vector<Tensor>& in) {
        if (bool(gt(sum(in[0]), 0.0))) return std::vector<Tensor>{in[0] * 2.0};
        return std::vector<Tensor>{in[0] * -1.0};
      },
      {"x"});
  std::cout << "\ng(ones(3)) = " << g(Tensor::ones({3})) << "\n";
  std::cout << "g(full(3, 7)) = " << g(Tensor::full({3}, 7.0)) << "\n";
  report("  positive sums share one trace", g);
  std::cout << "g(full(3, -1)) = " << g(Tensor::full({3}, -1.0)) << "\n";
  report("  a negative sum fails the guard", g);
  std::cout << "\nThe first trace of the last compile, with its guard:\n" << jit::last_traces(g).front().str();
  return 0;
}
