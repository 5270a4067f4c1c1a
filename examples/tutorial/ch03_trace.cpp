// Chapter 3, a trace (docs/tutorial/03_trace.md): jit a function, read the
// trace tracing recorded and the one that runs.
#include <iostream>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

int main() {
  manual_seed(0);
  // y = tanh(x @ w + b): the function is ordinary volt code.
  auto f = jit::jit(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tanh(linear(in[0], in[1], in[2]))}; },
      {"x", "w", "b"});
  Tensor x = Tensor::randn({4, 3}), w = Tensor::randn({2, 3}), b = Tensor::randn({2});
  Tensor y = f({x, w, b})[0];
  std::cout << "y = " << y << "\n";
  Tensor diff = y - tanh(linear(x, w, b));
  std::cout << "same as eager: " << std::boolalpha << ((diff * diff).sum().item<double>() < 1e-12) << "\n\n";

  const std::vector<jit::Trace>& traces = jit::last_traces(f);
  std::cout << traces.size() << " traces, one per pass:\n";
  for (const jit::Trace& t : traces) std::cout << "  " << t.provenance << "\n";
  std::cout << "\nThe first, as tracing recorded it:\n" << traces.front().str();
  std::cout << "\nThe last, the one that runs:\n" << traces.back().str();
  return 0;
}
