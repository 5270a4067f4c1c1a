// Chapter 2, autograd (docs/tutorial/02_autograd.md): the eager tape, backward(),
// a gradient checked by finite differences, and the tape drawn as a graph.
#include <cmath>
#include <cstdio>
#include <iostream>

#include <volt/autograd/node.h>
#include <volt/jit/inspect/dot.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

int main() {
  manual_seed(0);
  Tensor w = Tensor::from_vector<float>({0.5f, -1.0f, 2.0f}).requires_grad_();
  Tensor x = Tensor::from_vector<float>({1.0f, 2.0f, 3.0f});
  Tensor loss = (relu(w * x) * w).sum();  // sum_i relu(w_i x_i) w_i
  std::cout << "loss = " << loss << "\n";
  std::cout << "loss.grad_fn: " << loss.impl()->grad_fn->name() << "\n";
  loss.backward();
  std::cout << "w.grad() = " << w.grad() << "\n";

  // Finite differences in f64 say the same: d/dw_i = 2 w_i x_i where w_i x_i > 0, else 0.
  std::vector<double> wv = {0.5, -1.0, 2.0}, xv = {1.0, 2.0, 3.0};
  auto f = [&](const std::vector<double>& v) {
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i) s += std::max(v[i] * xv[i], 0.0) * v[i];
    return s;
  };
  std::printf("finite differences:");
  for (size_t i = 0; i < wv.size(); ++i) {
    std::vector<double> hi = wv, lo = wv;
    hi[i] += 1e-6;
    lo[i] -= 1e-6;
    std::printf(" %.4f", (f(hi) - f(lo)) / 2e-6);
  }
  std::printf("\n\nThe tape behind a fresh loss, as Graphviz DOT (volt::jit::to_dot):\n");
  Tensor again = (relu(w * x) * w).sum();
  std::cout << jit::to_dot(again, {{"w", w}});
  return 0;
}
